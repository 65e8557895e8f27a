"""A stream worker's CPU per batch: this checkout against another, taking turns.

What a stream's worker process does with a batch of sst-synth trees
(`compiler.feeding.streams.plan_in_worker`: expand, plan and pack; the inputs unpickled and
the reply pickled, as its pipe does), timed in process CPU in two processes: one runs
this checkout's code, the other another checkout's (`--against`, e.g. a `git
worktree` of main at its last commit; by default this checkout again). They take
turns batch by batch, the order alternating, so both codes see the same machine:
on two cores shared with other jobs a lone timing moves with whatever runs beside it,
and only such a ratio means something (BENCHMARKS.md, "Streams and the first fit").

    git worktree add --detach /tmp/main-old main
    python -m benchmarks.worker_cpu --against /tmp/main-old --rounds 20
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import numpy as np

# Runs in each process, from the checkout it times (whose code may predate this file).
_SERVE = """
import pickle, sys, time
from benchmarks.common import sst_synth_data
from benchmarks.workloads import TreeLSTMModel
from refold.blocks.evaluation.contexts import start_deep_thread
from refold.compiler import Model
from refold.compiler.feeding.streams import plan_in_worker

def serve():
    trees, _ = sst_synth_data(int(sys.argv[1]))
    size = int(sys.argv[2])
    compiler = Model(TreeLSTMModel(seed=0).block, cache=False).compiler
    batches = [trees[i:i + size] for i in range(0, len(trees), size)]

    def task(batch):
        payload = pickle.loads(pickle.dumps((batch, False)))
        pickle.loads(pickle.dumps(("ok", plan_in_worker(compiler, payload)), -1))

    for batch in batches:  # warm-up
        task(batch)
    print("ready", len(batches), flush=True)
    for line in sys.stdin:
        start = time.process_time()
        task(batches[int(line)])
        print(time.process_time() - start, flush=True)

start_deep_thread(serve).join()
"""


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser.add_argument("--against", default=here, help="the other checkout's directory")
    parser.add_argument("--trees", type=int, default=640)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=10, help="passes over the batches")
    args = parser.parse_args(argv)
    procs = {"this": _start(here, args), "other": _start(os.path.abspath(args.against), args)}
    try:
        n = [_ready(p) for p in procs.values()][0]
        per_pass = {k: [] for k in procs}
        for r in range(args.rounds):
            spent = dict.fromkeys(procs, 0.0)
            for i in range(n):
                for k in (["other", "this"] if (i + r) % 2 == 0 else ["this", "other"]):
                    procs[k].stdin.write(f"{i}\n")
                    procs[k].stdin.flush()
                    spent[k] += float(procs[k].stdout.readline())
            for k in procs:
                per_pass[k].append(1e3 * spent[k] / n)
    finally:
        for p in procs.values():
            p.stdin.close()
            p.wait()
    ratios = [t / o for t, o in zip(per_pass["this"], per_pass["other"])]
    result = {"this_ms": float(np.median(per_pass["this"])),
              "other_ms": float(np.median(per_pass["other"])),
              "ratio": float(np.median(ratios))}
    print(f"batch {args.batch}, {args.trees} trees, {args.rounds} passes, CPU ms a batch "
          f"(medians of the passes): this {result['this_ms']:.2f}, other ({args.against}) "
          f"{result['other_ms']:.2f}; this / other {result['ratio']:.3f} (per pass "
          f"{min(ratios):.2f}-{max(ratios):.2f})")
    return result


def _ready(proc: subprocess.Popen) -> int:
    """Waits for the process to be ready; the number of batches it has."""
    for line in proc.stdout:
        if line.startswith("ready"):
            return int(line.split()[1])
    raise RuntimeError(f"the timing process ended early (exit code {proc.wait()})")


def _start(root: str, args) -> subprocess.Popen:
    """A process timing `root`'s code (`_SERVE`)."""
    env = dict(os.environ, PYTHONPATH=root, TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.Popen([sys.executable, "-c", _SERVE, str(args.trees), str(args.batch)],
                            cwd=root, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)


if __name__ == "__main__":
    main()
