"""Helpers the examples share: keep the best epoch's weights, plot training curves.

>>> import os, tempfile
>>> h = {"loss": [1.0, 0.5], "val_loss": [1.2, 0.9]}
>>> path = os.path.join(tempfile.mkdtemp(), "curves.png")
>>> figure = plot_curves({"model": h}, [("loss", "loss")], path, kept={"model": 1})
>>> os.path.getsize(path) > 0
True
"""

from __future__ import annotations

import numpy as np

__all__ = ["keep_best", "plot_curves", "describe_kept"]


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


def plot_curves(histories: dict[str, dict], panels: list[tuple[str, str]], path: str,
                kept: dict[str, int | None] | None = None):
    """One panel per `(history key, title)`: training (dashed) and validation (solid,
    the `val_` key) per epoch, one colour per model; written to `path` (PNG).

    `kept` gives, per model, the epoch whose weights were kept (0-based, as
    `keep_best(...).best_epoch`; None for the last): it is marked on every panel by a
    dotted vertical line and a ring on the validation curve (the training curve if
    there is none), labelled "<model> kept (epoch k)" in the legend. Returns the
    figure (closed: its panels can still be read)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    kept = kept or {}
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 4), squeeze=False)
    for ax, (key, title) in zip(axes[0], panels):
        for k, (name, h) in enumerate(histories.items()):
            if key in h:
                ax.plot(np.arange(1, len(h[key]) + 1), h[key], color=f"C{k}",
                        linestyle="--", label=f"{name} train")
            if f"val_{key}" in h:
                ax.plot(np.arange(1, len(h[f"val_{key}"]) + 1), h[f"val_{key}"],
                        color=f"C{k}", label=f"{name} validation")
            curve = h.get(f"val_{key}", h.get(key))
            epoch = kept.get(name)
            if name in kept and curve:
                epoch = len(curve) - 1 if epoch is None else epoch
                ax.axvline(epoch + 1, color=f"C{k}", linestyle=":", linewidth=1)
                ax.plot([epoch + 1], [curve[epoch]], color=f"C{k}", marker="o", markersize=9,
                        markerfacecolor="none", linestyle="none",
                        label=f"{name} kept (epoch {epoch + 1})")
        ax.set_title(title)
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
    axes[0][0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return fig


def describe_kept(kept: dict[str, int | None], epochs: int, monitor: str) -> str:
    """One line of a summary: the epoch each model's weights come from.

    >>> describe_kept({"tree_lstm": 2, "bag_of_words": None}, 5, "best dev root accuracy")
    'kept epochs (best dev root accuracy): tree_lstm 3 of 5, bag_of_words 5 of 5 (the last)'
    """
    parts = [f"{name} {epochs} of {epochs} (the last)" if epoch is None
             else f"{name} {epoch + 1} of {epochs}" for name, epoch in kept.items()]
    return f"kept epochs ({monitor}): " + ", ".join(parts)
