"""The first `Model.fit` of a fresh process: with the planning kernels' on-disk cache
empty (a fresh install) against filled (every later run on the machine).

The scheduler's Numba kernels are compiled with `cache=True`: the first process on a
machine compiles them and writes them to the cache (next to the sources, or under
`NUMBA_CACHE_DIR`); every later process loads them. Each round runs, in fresh
subprocesses, one fit of the sst-synth TreeLSTM (64 trees, batch 64) with
`NUMBA_CACHE_DIR` set to a new empty directory (cold), then again with the same
directory (warm), and once more with a new directory that `python -m compiler.warmup`
filled first (after warm-up: a different block than the one fitted), and reports the
seconds from the start of the process to the end of the first fit, and of the fit alone.

    python -m benchmarks.warm_start             # 2 rounds
    python -m compiler.warmup                   # what an install step runs to fill the cache
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
from compiler import Model
rng = np.random.default_rng(0)
n = int(sys.argv[1])
trees = [sst_synth_tree(rng) for _ in range(n)]
labels = rng.integers(0, CLASSES, n).astype(np.int32)
model = Model(TreeLSTMModel(seed=0).block)
model.compile(optimizer=keras.optimizers.SGD(0.01),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
fit_start = time.perf_counter()
model.fit(trees, labels, batch_size=64, epochs=1, verbose=0)
end = time.perf_counter()
print(json.dumps({"total": end - start, "fit": end - fit_start}))
"""


def _run(cache_dir: str, *args) -> str:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "NUMBA_CACHE_DIR": cache_dir, "PYTHONPATH": root,
           "TF_CPP_MIN_LOG_LEVEL": "3"}
    return subprocess.run([sys.executable, *args], cwd=root, env=env, capture_output=True,
                          text=True, check=True).stdout


def first_fit(cache_dir: str, trees: int) -> dict:
    """`{"total": s, "fit": s}` of one fresh process using `cache_dir`."""
    return json.loads(_run(cache_dir, "-c", SCRIPT, str(trees)).strip().splitlines()[-1])


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--trees", type=int, default=64)
    args = parser.parse_args(argv)
    runs: dict[str, list] = {"cold": [], "warm": [], "after warm-up": []}
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="refold-numba-") as cache_dir:
            runs["cold"].append(first_fit(cache_dir, args.trees))
            runs["warm"].append(first_fit(cache_dir, args.trees))
        with tempfile.TemporaryDirectory(prefix="refold-numba-") as cache_dir:
            _run(cache_dir, "-m", "compiler.warmup")
            runs["after warm-up"].append(first_fit(cache_dir, args.trees))
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
