"""The serving side of the example: a fresh process with only the serving client.

    python -m refold.examples.serving.client EXPORT_DIR REQUESTS_JSON [--clients 8] [--rounds 3]

Loads the export with `serving.Predictor`, then alternates, `--rounds` times, two
ways of answering the requests (a JSON list of calculator expressions):

- one at a time: each request alone, one SavedModel call per request;
- batched: `--clients` threads send the requests at once through a
  `serving.BatchingPredictor`, which runs those that arrive together as one batch.

It checks that both give each request the same answer, prints the latency of a
lone request and the throughput of each way, and writes them as JSON to `--report`.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from collections.abc import Sequence

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from refold.serving import BatchingPredictor, Predictor  # noqa: E402


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m refold.examples.serving.client",
                                description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("export", help="the directory Model.export wrote")
    p.add_argument("requests", help="a JSON file: a list of inputs")
    p.add_argument("--clients", type=int, default=8, help="concurrent client threads")
    p.add_argument("--max-batch", type=int, default=64)
    p.add_argument("--max-wait", type=float, default=0.0,
                   help="seconds a batch waits for more requests after its first")
    p.add_argument("--rounds", type=int, default=3,
                   help="alternations of the two ways (medians are reported)")
    p.add_argument("--report", help="write the figures here as JSON")
    return p.parse_args(argv)


def one_at_a_time(predictor: Predictor, xs: list) -> tuple[np.ndarray, list[float]]:
    """Each input alone: its output and its latency (seconds)."""
    rows, latencies = [], []
    for x in xs:
        t0 = time.perf_counter()
        rows.append(predictor.predict([x])[0])
        latencies.append(time.perf_counter() - t0)
    return np.stack(rows), latencies


def concurrently(server: BatchingPredictor, xs: list, clients: int):
    """`clients` threads sending the inputs at once: outputs, latencies, wall time."""
    rows: list = [None] * len(xs)
    latencies: list = [0.0] * len(xs)
    start = threading.Barrier(clients + 1)

    def client(c: int) -> None:
        start.wait()
        for i in range(c, len(xs), clients):
            t0 = time.perf_counter()
            rows[i] = server.predict(xs[i])
            latencies[i] = time.perf_counter() - t0

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    return np.stack(rows), latencies, time.perf_counter() - t0


def main(argv: Sequence[str] | None = None) -> dict:
    args = parse_args(argv)
    t0 = time.perf_counter()
    predictor = Predictor(args.export)
    with open(args.requests) as f:
        xs = json.load(f)
    predictor.predict(xs[:2])  # traces the signature once, before timing
    load_s = time.perf_counter() - t0
    alone_runs, batched_runs = [], []
    for _ in range(args.rounds):
        alone, lat = one_at_a_time(predictor, xs)
        alone_runs.append({"wall": float(sum(lat)), "latency": lat})
        with BatchingPredictor(predictor, args.max_batch, args.max_wait) as server:
            batched, blat, wall = concurrently(server, xs, args.clients)
        batched_runs.append({"wall": wall, "latency": blat,
                             "batch": float(np.mean(server.batch_sizes))})
        np.testing.assert_allclose(batched, alone, atol=1e-5)  # each caller's own answer

    def median(runs: list, key: str) -> float:
        return float(np.median([r[key] for r in runs]))
    n = len(xs)
    lat_alone = np.concatenate([r["latency"] for r in alone_runs]) * 1e3
    lat_batched = np.concatenate([r["latency"] for r in batched_runs]) * 1e3
    report = {
        "requests": n, "clients": args.clients, "rounds": args.rounds, "load_s": load_s,
        "alone_latency_ms": {"p50": float(np.median(lat_alone)),
                             "p95": float(np.percentile(lat_alone, 95))},
        "alone_throughput": n / median(alone_runs, "wall"),
        "batched_latency_ms": {"p50": float(np.median(lat_batched)),
                               "p95": float(np.percentile(lat_batched, 95))},
        "batched_throughput": n / median(batched_runs, "wall"),
        "mean_batch": median(batched_runs, "batch"),
        "answers": alone.tolist(),
    }
    print(f"loaded the export and traced it in {load_s:.1f} s; {n} requests, "
          f"{args.rounds} rounds")
    print(f"one at a time: latency p50 {report['alone_latency_ms']['p50']:.1f} ms, "
          f"p95 {report['alone_latency_ms']['p95']:.1f} ms; "
          f"{report['alone_throughput']:.0f} requests/s")
    print(f"{args.clients} concurrent clients, batched: latency p50 "
          f"{report['batched_latency_ms']['p50']:.1f} ms, p95 "
          f"{report['batched_latency_ms']['p95']:.1f} ms; "
          f"{report['batched_throughput']:.0f} requests/s "
          f"(mean batch {report['mean_batch']:.1f} requests)")
    if args.report:
        with open(args.report, "w") as f:
            json.dump(report, f)
    return report


if __name__ == "__main__":
    main()
