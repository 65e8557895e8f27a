"""What the benchmarks share: a plain SGD step, the throughput loop and the results
table (`benchmarks.treelstm`, `benchmarks.bilstm`); the arguments, data, model and
epoch timer of the `Model.fit` benchmarks (`benchmarks.fit`, `mixed_precision`,
`distributed`, `checks`)."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence

import numpy as np


def sgd_apply(variables, grads, lr) -> None:
    """`v -= lr * g` for every variable; sparse (embedding) gradients stay sparse."""
    import tensorflow as tf
    for v, g in zip(variables, grads):
        if g is None:
            continue
        if isinstance(g, tf.IndexedSlices):
            v = v if hasattr(v, "scatter_sub") else v.value  # a Keras variable's tf.Variable
            v.scatter_sub(tf.IndexedSlices(lr * g.values, g.indices, g.dense_shape))
        else:
            v.assign_sub(lr * g)


def throughput(fn: Callable, batches: Sequence, seconds: float, size: Callable = len,
               min_calls: int = 3, warm_up: str | None = "all", rounds: int = 3) -> float:
    """Examples per second of `fn(batch)` cycling over `batches` for about `seconds`.

    `size(batch)` counts a batch's examples. `warm_up` runs every batch ("all": the
    graphs get expanded and cached), the first one ("first") or none first. The time
    is split into `rounds` and the best round counts, because on a shared machine
    the other rounds measure the neighbours' load as well.
    """
    for b in {"all": batches, "first": batches[:1], None: []}[warm_up]:
        fn(b)
    best, calls = 0.0, 0
    for _ in range(rounds):
        done, n, start = 0, 0, time.perf_counter()
        while n < min_calls or time.perf_counter() - start < seconds / rounds:
            b = batches[calls % len(batches)]
            fn(b)
            done += size(b)
            n += 1
            calls += 1
        best = max(best, done / (time.perf_counter() - start))
    return best


def format_table(results: dict, sizes: list, ratios: Sequence[tuple] = ()) -> str:
    """A markdown table of `results["train"|"infer"][variant][batch size]`, then one row
    per `(numerator, denominator, label)` of `ratios` with both speed ratios."""
    tr, inf = results["train"], results["infer"]
    lines = ["| variant | " + " | ".join(f"B={b} train / infer" for b in sizes) + " |",
             "|---|" + "---|" * len(sizes)]
    for name in tr:
        cells = [f"{tr[name][b]:.0f} / {inf[name][b]:.0f}" if b in tr[name] else "-"
                 for b in sizes]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    for num, den, label in ratios:
        if num in tr and den in tr:
            cells = [f"{tr[num][b] / tr[den][b]:.2f} / {inf[num][b] / inf[den][b]:.2f}"
                     if b in tr[num] and b in tr[den] else "-" for b in sizes]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def report(results: dict, sizes: list, ratios: Sequence[tuple], json_path: str | None) -> dict:
    """Prints the table and writes `results` as JSON to `json_path` if given."""
    print()
    print(format_table(results, sizes, ratios))
    if json_path:
        with open(json_path, "w") as f:
            json.dump(results, f, indent=1)
    return results


# --- what the `Model.fit` benchmarks share (fit, mixed_precision, distributed, checks) ---

def fit_arguments(argv, description: str, trees: int, rounds: int,
                  quick: tuple[int, int], extra: Callable | None = None) -> argparse.Namespace:
    """`--trees`, `--batch` (64), `--rounds` and `--quick` (`quick`: its `(trees, rounds)`),
    plus what `extra(parser)` adds, parsed from `argv`."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--trees", type=int, default=trees)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--quick", action="store_true")
    if extra is not None:
        extra(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.trees, args.rounds = quick
    return args


def sst_synth_data(n: int) -> tuple[list, np.ndarray]:
    """`n` sst-synth trees and a random class for each (seed 0)."""
    from benchmarks.workloads import CLASSES, sst_synth_tree
    rng = np.random.default_rng(0)
    trees = [sst_synth_tree(rng) for _ in range(n)]
    return trees, rng.integers(0, CLASSES, n).astype(np.int32)


def compiled_model(block, **options):
    """A `compiler.Model(block, **options)` compiled for the benchmarks' training: SGD
    at 0.01 on softmax cross-entropy from logits."""
    import keras

    from refold.compiler import Model
    model = Model(block, **options)
    model.compile(optimizer=keras.optimizers.SGD(0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def epoch_timer():
    """A Keras callback that appends each epoch's wall-clock seconds to its `seconds`
    (made on call, so that importing this module does not start TensorFlow)."""
    import keras

    class EpochTimer(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.seconds: list[float] = []

        def on_epoch_begin(self, epoch, logs=None):
            self.start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            self.seconds.append(time.perf_counter() - self.start)

    return EpochTimer()
