"""`Model.fit` under float32, mixed_bfloat16 and mixed_float16, same process.

The sst-synth TreeLSTM workload (embedding 300, hidden 150, loss at the root,
batch 64 by default), one model per policy, each built under its policy from the
same seed (`blocks.evaluation.precision`: values held in the low dtype, variables float32,
loss scaling under float16). Epochs of the three alternate, after a warm-up
epoch each (tracing, expansion of every tree); the median epoch throughput of
each is reported with its ratio to float32, and the bytes of the loop's value
buffers per batch (what the low dtype halves).

    python -m benchmarks.mixed_precision            # 1,280 trees, 3 rounds
    python -m benchmarks.mixed_precision --quick    # 256 trees, 1 round
"""

from __future__ import annotations

import numpy as np

from benchmarks.common import compiled_model, epoch_timer, fit_arguments, sst_synth_data
from benchmarks.workloads import TreeLSTMModel

POLICIES = ("float32", "mixed_bfloat16", "mixed_float16")


def _model(policy: str):
    from refold.blocks.evaluation.precision import global_policy
    with global_policy(policy):
        return compiled_model(TreeLSTMModel(seed=0).block)


def loop_buffer_bytes(model, trees: list) -> int:
    """Bytes of the loop's value buffers for one batch of `trees`."""
    compiler = model.compiler
    lay = compiler.executor.layout
    arrays = compiler.plan(trees).feed.arrays
    i = lay.segment_id["n_rows"]  # the index segment of each type's row count
    start, end = arrays["layout"][i], arrays["layout"][i + 1]
    rows = arrays["index"][start:end]
    total = 0
    for k in lay.loop_types:
        t = lay.value_types[k]
        size = int(np.prod(t.shape, dtype=np.int64))
        total += int(rows[k]) * size * np.dtype(_numpy_dtype(t.dtype)).itemsize
    return total


def _numpy_dtype(name: str):
    if name == "bfloat16":
        import ml_dtypes
        return ml_dtypes.bfloat16
    return name


def main(argv=None) -> dict:
    args = fit_arguments(argv, __doc__.splitlines()[0], trees=1280, rounds=3, quick=(256, 1))
    trees, labels = sst_synth_data(args.trees)
    models = {p: _model(p) for p in POLICIES}
    timer = epoch_timer()

    def epoch(policy: str) -> tuple[float, float]:
        history = models[policy].fit(trees, labels, batch_size=args.batch, epochs=1,
                                     verbose=0, shuffle=False, callbacks=[timer])
        return len(trees) / timer.seconds[-1], history.history["loss"][-1]

    for p in POLICIES:  # warm-up: tracing, expansion
        epoch(p)
    rates: dict[str, list[float]] = {p: [] for p in POLICIES}
    losses: dict[str, float] = {}
    for _ in range(args.rounds):
        for p in POLICIES:
            rate, losses[p] = epoch(p)
            rates[p].append(rate)
    first = trees[:args.batch]
    result = {p: {"trees_per_s": float(np.median(rates[p])),
                  "ratio_to_float32": float(np.median(rates[p]) / np.median(rates["float32"])),
                  "loop_buffer_bytes": loop_buffer_bytes(models[p], first),
                  "last_loss": float(losses[p])} for p in POLICIES}
    print(f"Model.fit, sst-synth TreeLSTM, batch {args.batch}, {args.trees} trees, "
          f"median of {args.rounds} interleaved epochs")
    print(f"{'policy':<16}{'trees/s':>10}{'vs float32':>12}{'loop buffers':>15}{'loss':>9}")
    for p, r in result.items():
        print(f"{p:<16}{r['trees_per_s']:>10.1f}{r['ratio_to_float32']:>11.2f}x"
              f"{r['loop_buffer_bytes'] / 2**20:>12.2f} MiB{r['last_loss']:>9.4f}")
    return result


if __name__ == "__main__":
    main()
