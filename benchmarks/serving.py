"""Serving an export: the latency of a lone request against the throughput of batched
concurrent requests, by the number of concurrent clients.

Loads an export of the calculator's classifier (`--export`, as `python -m
examples.serving --out DIR` writes; without it, trains and exports one first, as
the example does) with only the serving client, then, `--rounds` times, measures in
turn: the requests answered one at a time (`Predictor.predict([x])`, one SavedModel
call each), and for each client count the same requests sent by that many threads
at once through a `BatchingPredictor` (for each `--max-wait`). Medians over the
rounds, each of which measures every setting in turn, so all see the same load;
the answers of every setting are checked against one at a time.

    python -m benchmarks.serving --export /tmp/calc      # clients 1,2,4,8,16,32
    python -m benchmarks.serving --clients 1,8 --max-wait 0 --requests 100 --rounds 1
    python -m benchmarks.serving --check-cost       # the SavedModel's request checks

`--check-cost` measures what the request checks inside the SavedModel
(`compiler.feeding.packed.checked`) cost: it exports the calculator's classifier twice,
with the checks (`Model.export`) and without, and alternates calls of the two on the
same request (batches of 1 and 64), reporting the median per-pair time ratio.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Sequence

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from refold.examples.calculator.calculator import dataset  # noqa: E402
from refold.examples.serving.client import concurrently, one_at_a_time  # noqa: E402
from refold.serving import BatchingPredictor, Predictor  # noqa: E402


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.serving", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--export", help="an export of the calculator (default: train one)")
    p.add_argument("--clients", default="1,2,4,8,16,32")
    p.add_argument("--requests", type=int, default=400)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--max-batch", type=int, default=64)
    p.add_argument("--check-cost", action="store_true",
                   help="measure the SavedModel's request checks instead")
    p.add_argument("--pairs", type=int, default=300, help="calls of each, for --check-cost")
    p.add_argument("--max-wait", default="0,0.005",
                   help="BatchingPredictor max_wait values (seconds), each measured")
    return p.parse_args(argv)


def measure(predictor: Predictor, xs: list, clients: list[int], rounds: int,
            max_batch: int, waits: list[float]) -> dict:
    """Per setting ("alone", or `(clients, max_wait)`): per-round walls, latencies and
    mean batch sizes; every round measures every setting in turn."""
    runs: dict = {"alone": []}
    runs.update({(c, w): [] for c in clients for w in waits})
    for _ in range(rounds):
        reference, lat = one_at_a_time(predictor, xs)
        runs["alone"].append((sum(lat), lat, 1.0))
        for c, w in list(runs)[1:]:
            with BatchingPredictor(predictor, max_batch, w) as server:
                rows, lat, wall = concurrently(server, xs, c)
            np.testing.assert_allclose(rows, reference, atol=1e-5)
            runs[c, w].append((wall, lat, float(np.mean(server.batch_sizes))))
    return runs


def table(runs: dict, n: int) -> str:
    lines = ["| setting | requests/s | x alone | latency p50 (ms) | p95 (ms) | mean batch |",
             "|---|---|---|---|---|---|"]
    alone = n / np.median([w for w, _, _ in runs["alone"]])
    for key, rs in runs.items():
        lat = np.concatenate([r[1] for r in rs]) * 1e3
        rate = n / np.median([w for w, _, _ in rs])
        name = "one at a time" if key == "alone" else \
            f"{key[0]} clients, batched, max_wait {key[1] * 1e3:g} ms"
        lines.append(f"| {name} | {rate:.0f} | {rate / alone:.2f} | {np.median(lat):.1f} | "
                     f"{np.percentile(lat, 95):.1f} | {np.median([b for *_, b in rs]):.1f} |")
    return "\n".join(lines)


def check_cost(pairs: int = 300) -> dict:
    """`{batch size: median time ratio checked / unchecked}` of SavedModel calls."""
    import time

    import tensorflow as tf

    from refold.compiler import Model
    from refold.compiler.saving import write_saved_model
    from refold.examples.serving.__main__ import FACTORY
    model = Model.from_factory(FACTORY, {"state": 32})
    ratios = {}
    with tempfile.TemporaryDirectory() as work:
        model.export(os.path.join(work, "checked"), verbose=False)
        write_saved_model(os.path.join(work, "bare"), model.weights, model.pipeline.signature(),
                          lambda arrays: model.tracer.forward(arrays)[0])
        fns = [tf.saved_model.load(os.path.join(work, k)).signatures["serving_default"]
               for k in ("checked", "bare")]
        for n in (1, 64):
            xs = dataset(n, np.random.default_rng(2), 5)[0]
            feed = {k: tf.constant(v) for k, v in model.packed_inputs(xs).items()}
            for fn in fns:
                fn(**feed)  # warm
            times = np.zeros((pairs, 2))
            for i in range(pairs):
                for j, fn in enumerate(fns):
                    t0 = time.perf_counter()
                    fn(**feed)
                    times[i, j] = time.perf_counter() - t0
            ratios[n] = float(np.median(times[:, 0] / times[:, 1]))
            print(f"batch {n}: checked {np.median(times[:, 0]) * 1e3:.2f} ms, unchecked "
                  f"{np.median(times[:, 1]) * 1e3:.2f} ms a call (medians); median ratio "
                  f"{ratios[n]:.3f} over {pairs} pairs")
    return ratios


def main(argv: Sequence[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.check_cost:
        return check_cost(args.pairs)
    clients = [int(c) for c in args.clients.split(",")]
    with tempfile.TemporaryDirectory() as work:
        path = args.export
        if path is None:
            from refold.examples.serving.__main__ import parse_args as example_args
            from refold.examples.serving.__main__ import train_and_export
            path = os.path.join(work, "calculator")
            train_and_export(example_args([]), path)
        predictor = Predictor(path)
        xs = dataset(args.requests, np.random.default_rng(1), 5)[0]
        predictor.predict(xs[:2])  # traced before timing
        waits = [float(w) for w in args.max_wait.split(",")]
        runs = measure(predictor, xs, clients, args.rounds, args.max_batch, waits)
    print(f"{args.requests} requests, {args.rounds} rounds (medians), max_batch "
          f"{args.max_batch}")
    print(table(runs, args.requests))
    return runs


if __name__ == "__main__":
    main()
