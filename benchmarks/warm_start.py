"""The first `Model.fit` of a fresh process: with the planning kernels' on-disk cache
empty (a fresh install) against filled (every later run on the machine).

The scheduler's Numba kernels are compiled with `cache=True`: the first process on a
machine compiles them and writes them to the cache (next to the sources, or under
`NUMBA_CACHE_DIR`); every later process loads them. Each round runs, in fresh
subprocesses, one fit of the sst-synth TreeLSTM (64 trees, batch 64) with
`NUMBA_CACHE_DIR` set to a new empty directory (cold), then again with the same
directory (warm), and once more with a new directory that `python -m refold.compiler.warmup`
filled first (after warm-up: a different block than the one fitted), and reports the
seconds from the start of the process to the end of the first fit, and of the fit alone.

    python -m benchmarks.warm_start             # 2 rounds
    python -m refold.compiler.warmup                   # what an install step runs to fill the cache

With `--against DIR` it times instead the first fit of this checkout against the one
in DIR (e.g. a `git worktree` of an earlier commit), both with their kernel caches
filled, in fresh processes taking turns; `--metrics accuracy` compiles the model
with Keras metrics, `--batch-size` sets the fit's batch size.

    git worktree add --detach /tmp/main-old main
    python -m benchmarks.warm_start --against /tmp/main-old --metrics accuracy --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

SCRIPT = """
import time
start = time.perf_counter()
import json, sys
import keras, numpy as np
from benchmarks.workloads import CLASSES, TreeLSTMModel, sst_synth_tree
from refold.compiler import Model
rng = np.random.default_rng(0)
n = int(sys.argv[1])
trees = [sst_synth_tree(rng) for _ in range(n)]
labels = rng.integers(0, CLASSES, n).astype(np.int32)
model = Model(TreeLSTMModel(seed=0).block)
metrics = [m for m in sys.argv[3].split(",") if m] if len(sys.argv) > 3 else []
model.compile(optimizer=keras.optimizers.SGD(0.01), metrics=metrics,
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
fit_start = time.perf_counter()
model.fit(trees, labels, batch_size=int(sys.argv[2]) if len(sys.argv) > 2 else 64,
          epochs=1, verbose=0)
end = time.perf_counter()
print(json.dumps({"total": end - start, "fit": end - fit_start}))
"""


HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(cache_dir: str | None, *args, root: str = HERE) -> str:
    """The output of `python args` in the checkout at `root`, with `cache_dir` as
    Numba's cache (None: the checkout's own, next to its sources)."""
    env = {**os.environ, "PYTHONPATH": root, "TF_CPP_MIN_LOG_LEVEL": "3"}
    if cache_dir is not None:
        env["NUMBA_CACHE_DIR"] = cache_dir
    return subprocess.run([sys.executable, *args], cwd=root, env=env, capture_output=True,
                          text=True, check=True).stdout


def first_fit(cache_dir: str | None, trees: int, batch_size: int = 64, metrics: str = "",
              root: str = HERE) -> dict:
    """`{"total": s, "fit": s}` of one fresh process of the checkout at `root` using
    `cache_dir`."""
    out = _run(cache_dir, "-c", SCRIPT, str(trees), str(batch_size), metrics, root=root)
    return json.loads(out.strip().splitlines()[-1])


def against(other: str, rounds: int, trees: int, batch_size: int, metrics: str) -> dict:
    """The first fit of this checkout and of the one at `other`, warm caches, in
    fresh processes taking turns (the order alternating); medians and the median
    of per-round ratios other ÷ this."""
    roots = {"this": HERE, "other": os.path.abspath(other)}
    runs: dict[str, list] = {k: [] for k in roots}
    for root in set(roots.values()):  # fills each checkout's own cache (untimed)
        first_fit(None, trees, batch_size, metrics, root)
    for r in range(rounds):
        for k in (["this", "other"] if r % 2 == 0 else ["other", "this"]):
            runs[k].append(first_fit(None, trees, batch_size, metrics, roots[k]))
    print(f"first fit of a fresh process, warm kernel caches, {trees} trees, batch "
          f"{batch_size}, metrics {metrics.split(',') if metrics else []}, median of "
          f"{rounds} rounds; other: {roots['other']}")
    print("| checkout | import to end of fit (s) | fit alone (s) |")
    print("|---|---|---|")
    result = {}
    for k, rows in runs.items():
        result[k] = {part: float(np.median([r[part] for r in rows]))
                     for part in ("total", "fit")}
        print(f"| {k} | {result[k]['total']:.2f} | {result[k]['fit']:.2f} |")
    result["fit other / this"] = float(np.median(
        [o["fit"] / t["fit"] for o, t in zip(runs["other"], runs["this"])]))
    print(f"fit alone, other ÷ this: {result['fit other / this']:.3f}")
    return result


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--trees", type=int, default=64)
    parser.add_argument("--against", help="another checkout's directory: time both, warm")
    parser.add_argument("--metrics", default="", help="Keras metrics to compile, comma-separated")
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args(argv)
    if args.against:
        return against(args.against, args.rounds, args.trees, args.batch_size, args.metrics)
    runs: dict[str, list] = {"cold": [], "warm": [], "after warm-up": []}
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="refold-numba-") as cache_dir:
            runs["cold"].append(first_fit(cache_dir, args.trees, args.batch_size,
                                          args.metrics))
            runs["warm"].append(first_fit(cache_dir, args.trees, args.batch_size,
                                          args.metrics))
        with tempfile.TemporaryDirectory(prefix="refold-numba-") as cache_dir:
            _run(cache_dir, "-m", "refold.compiler.warmup")
            runs["after warm-up"].append(first_fit(cache_dir, args.trees, args.batch_size,
                                                   args.metrics))
    result = {}
    print(f"first fit of a fresh process, {args.trees} trees, median of {args.rounds} rounds")
    print("| kernel cache | import to end of fit (s) | fit alone (s) |")
    print("|---|---|---|")
    for kind, rows in runs.items():
        total = float(np.median([r["total"] for r in rows]))
        fit = float(np.median([r["fit"] for r in rows]))
        result[kind] = {"total": total, "fit": fit}
        print(f"| {kind} | {total:.1f} | {fit:.1f} |")
    return result


if __name__ == "__main__":
    main()
