"""Resident memory over many small calls of `Model.predict` (and friends), after warm-up.

Each case runs in a fresh subprocess: it builds the README's quick-start model (or the
sst-synth TreeLSTM with `--workload treelstm`), trains it for one step, makes `--warm-up`
calls, then `--calls` more, reading VmRSS from /proc/self/status (and counting the
Python objects the garbage collector tracks, after a `gc.collect()`) every 1/20 of
them. A process that stays flat has a slope near zero over the second half.

The cases (`--cases`, all by default):

- `predict`: `Model.predict` on batches of 1-4 inputs taken in turn from a fixed pool
  of 16. A fixed pool, because with the model's default `cache=True` every new input
  object is kept (with its expanded graph) for as long as the model lives, by design:
  fresh inputs would measure the cache, not a leak.
- `predict-fresh`: `Model(block, cache=False).predict` on freshly built inputs every
  call: what a server streaming new requests runs.
- `run`: `Compiler.run` on the same pool (the engine without Keras' loop).
- `evaluate`, `fit`: one-step `Model.evaluate` and `Model.fit` calls (1 epoch,
  `verbose=0`) on the same pool, with labels.

    python -m benchmarks.memory                  # 10,000 calls per case
    python -m benchmarks.memory --quick          # 2,000 calls per case
    python -m benchmarks.memory --calls 400 --cases predict,run
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time

import numpy as np

CASES = ("predict", "predict-fresh", "run", "evaluate", "fit")
POOL = 16          # fixed inputs the cached cases rotate over
SAMPLES = 20       # RSS readings after warm-up (plus one at its end)


def rss_mb() -> float:
    """This process's resident set size (VmRSS), in MB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def _quickstart(rng: np.random.Generator):
    """The README's quick-start block and an input maker (random trees of numbers)."""
    import refold as td
    tree = td.ForwardDeclaration(td.PyObjectType(), td.TensorType((8,)))
    leaf = td.Scalar() >> td.Function(lambda x: x[:, None]) >> td.FC(8)
    pair = td.Record((tree(), tree())) >> td.Concat() >> td.FC(8)
    tree.resolve_to(td.OneOf(lambda t: isinstance(t, tuple), {False: leaf, True: pair}))
    block = tree() >> td.FC(2, activation=None)

    def make(depth: int = 3):
        if depth == 0 or rng.random() < 0.3:
            return float(rng.normal())
        return (make(depth - 1), make(depth - 1))
    return block, make


def _treelstm(rng: np.random.Generator):
    from benchmarks.workloads import TreeLSTMModel, sst_synth_tree
    return TreeLSTMModel(seed=0).block, lambda: sst_synth_tree(rng)


def child(case: str, workload: str, calls: int, warm_up: int) -> dict:
    """Runs one case in this process; returns its RSS samples."""
    import keras

    from refold.compiler import Model
    rng = np.random.default_rng(0)
    block, make = (_quickstart if workload == "quickstart" else _treelstm)(rng)
    model = Model(block, cache=case != "predict-fresh")
    model.compile(optimizer=keras.optimizers.SGD(0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    pool = [make() for _ in range(POOL)]
    labels = rng.integers(0, 2, POOL).astype(np.int32)
    model.fit(pool, labels, batch_size=4, epochs=1, verbose=0)

    def batch(i: int) -> tuple[list, np.ndarray]:
        size = 1 + i % 4
        at = [(i + k) % POOL for k in range(size)]
        if case == "predict-fresh":
            return [make() for _ in range(size)], labels[at]
        return [pool[j] for j in at], labels[at]

    def call(i: int) -> None:
        x, y = batch(i)
        if case in ("predict", "predict-fresh"):
            model.predict(x, verbose=0)
        elif case == "run":
            model.compiler.run(x)
        elif case == "evaluate":
            model.evaluate(x, y, verbose=0)
        elif case == "fit":
            model.fit(x, y, batch_size=4, epochs=1, verbose=0)
        else:
            raise ValueError(f"unknown case {case!r}")

    for i in range(warm_up):
        call(i)
    every = max(calls // SAMPLES, 1)
    samples, seconds = [], 0.0
    for i in range(calls + 1):
        if i % every == 0 or i == calls:
            gc.collect()   # ~0.1 s with TensorFlow loaded: not timed
            samples.append({"calls": i, "rss_mb": rss_mb(), "objects": len(gc.get_objects())})
        if i < calls:
            start = time.perf_counter()
            call(warm_up + i)
            seconds += time.perf_counter() - start
    return {"case": case, "workload": workload, "warm_up": warm_up, "calls": calls,
            "ms_per_call": 1e3 * seconds / max(calls, 1),
            "samples": samples}


def floor_per_1000(samples: list[dict]) -> float:
    """Growth of the RSS floor per 1,000 calls over the second half of `samples`: the
    lowest reading of its second quarter of the calls against that of the last quarter.

    RSS saws up and down by a few MB as malloc hands memory back to the system and
    takes it again, which makes a straight-line fit swing with the phase of the saw;
    its floor moves only when memory is really kept."""
    last = samples[-1]["calls"]
    third = [s["rss_mb"] for s in samples if last / 2 <= s["calls"] < 3 * last / 4]
    fourth = [s["rss_mb"] for s in samples if s["calls"] >= 3 * last / 4]
    if not third or not fourth or last == 0:
        return 0.0
    return (min(fourth) - min(third)) / (last / 4) * 1000


def slope_per_1000(samples: list[dict], key: str = "rss_mb") -> float:
    """Least-squares growth of `key` per 1,000 calls over the second half of `samples`."""
    last = samples[-1]["calls"]
    half = [s for s in samples if s["calls"] >= last / 2]
    if len(half) < 2:
        return 0.0
    x = np.array([s["calls"] for s in half], float)
    y = np.array([s[key] for s in half], float)
    return float(np.polyfit(x, y, 1)[0] * 1000)


def run_case(case: str, workload: str, calls: int, warm_up: int) -> dict:
    """`child(...)` in a fresh Python process (its own TensorFlow runtime and heap)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    res = subprocess.run([sys.executable, "-m", "benchmarks.memory", "--child", case,
                          "--workload", workload, "--calls", str(calls),
                          "--warm-up", str(warm_up)],
                         env=env, cwd=root, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"case {case} failed:\n{res.stderr[-4000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def format_table(results: list[dict]) -> str:
    """RSS (MB) after each sample's number of calls, one column per case; then the
    growth per 1,000 calls over the second half, of RSS and of Python objects."""
    cases = [r["case"] for r in results]
    lines = ["| calls after warm-up | " + " | ".join(f"{c} RSS MB" for c in cases) + " |",
             "|---|" + "---|" * len(cases)]
    for k, s in enumerate(results[0]["samples"]):
        lines.append(f"| {s['calls']} | " + " | ".join(
            f"{r['samples'][k]['rss_mb']:.1f}" for r in results) + " |")
    lines.append("| MB per 1,000 calls, 2nd half: RSS floor | " + " | ".join(
        f"{floor_per_1000(r['samples']):+.3f}" for r in results) + " |")
    lines.append("| MB per 1,000 calls, 2nd half: least squares | " + " | ".join(
        f"{slope_per_1000(r['samples']):+.3f}" for r in results) + " |")
    lines.append("| Python objects per 1,000 calls (2nd half) | " + " | ".join(
        f"{slope_per_1000(r['samples'], 'objects'):+.0f}" for r in results) + " |")
    lines.append("| ms per call | " + " | ".join(
        f"{r['ms_per_call']:.2f}" for r in results) + " |")
    return "\n".join(lines)


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--warm-up", type=int, default=200)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--workload", choices=("quickstart", "treelstm"),
                        default="quickstart")
    parser.add_argument("--quick", action="store_true", help="2,000 calls per case")
    parser.add_argument("--json", help="write the samples there")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.workload, args.calls, args.warm_up)))
        return []
    if args.quick:
        args.calls = 2_000
    cases = [c for c in args.cases.split(",") if c]
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        parser.error(f"unknown cases {unknown}; known: {', '.join(CASES)}")
    results = []
    for case in cases:
        results.append(run_case(case, args.workload, args.calls, args.warm_up))
        print(f"{case}: done, {results[-1]['ms_per_call']:.2f} ms per call", flush=True)
    print(f"\n{args.workload}, {args.warm_up} warm-up calls, then {args.calls} calls; "
          "batches of 1-4 inputs")
    print(format_table(results), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return results


if __name__ == "__main__":
    main()
