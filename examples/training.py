"""Helpers the examples share: keep the best epoch's weights, plot training curves.

>>> import os, tempfile
>>> h = {"loss": [1.0, 0.5], "val_loss": [1.2, 0.9]}
>>> path = os.path.join(tempfile.mkdtemp(), "curves.png")
>>> plot_curves({"model": h}, [("loss", "loss")], path)
>>> os.path.getsize(path) > 0
True
"""

from __future__ import annotations

import numpy as np

__all__ = ["keep_best", "plot_curves"]


def keep_best(monitor: str, mode: str = "max"):
    """A Keras callback that restores, when training ends, the weights of the epoch
    with the best `monitor` (highest with `mode="max"`, lowest with `"min"`);
    `.best_epoch` is 0-based (None if `monitor` was never logged)."""
    import keras
    if mode not in ("max", "min"):
        raise ValueError(f"mode must be 'max' or 'min', got {mode!r}")
    sign = 1.0 if mode == "max" else -1.0

    class KeepBest(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.best, self.best_epoch, self.weights = -np.inf, None, None

        def on_epoch_end(self, epoch, logs=None):
            value = (logs or {}).get(monitor)
            if value is not None and sign * value > self.best:
                self.best, self.best_epoch = sign * value, epoch
                self.weights = self.model.get_weights()

        def on_train_end(self, logs=None):
            if self.weights is not None:
                self.model.set_weights(self.weights)

    return KeepBest()


def plot_curves(histories: dict[str, dict], panels: list[tuple[str, str]], path: str) -> None:
    """One panel per `(history key, title)`: training (dashed) and validation (solid,
    the `val_` key) per epoch, one colour per model; written to `path` (PNG)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 4), squeeze=False)
    for ax, (key, title) in zip(axes[0], panels):
        for k, (name, h) in enumerate(histories.items()):
            if key in h:
                ax.plot(np.arange(1, len(h[key]) + 1), h[key], color=f"C{k}",
                        linestyle="--", label=f"{name} train")
            if f"val_{key}" in h:
                ax.plot(np.arange(1, len(h[f"val_{key}"]) + 1), h[f"val_{key}"],
                        color=f"C{k}", label=f"{name} validation")
        ax.set_title(title)
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
    axes[0][0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
