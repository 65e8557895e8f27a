"""From a trained model to answering requests: train, export, serve in a fresh process.

    python -m refold.examples.serving [--train-size 2000] [--epochs 3] [--requests 400]
                               [--clients 8] [--out DIR] [--load DIR]

1. Trains the calculator's expression classifier (`examples.calculator`) for a few
   seconds, built with `Model.from_factory` so the export holds no code (it loads
   in safe mode); or, with `--load DIR`, reuses an export made before.
2. Exports it (`Model.export`): a SavedModel and, beside it, the factory call
   from which the client rebuilds the block to expand and plan requests.
3. Starts a fresh Python process with only the serving client imported
   (`examples.serving.client`: `serving.Predictor`, `serving.BatchingPredictor`),
   which answers the test expressions one at a time and then from `--clients`
   concurrent threads in shared batches, and prints latency and throughput.
4. Prints the accuracy of the answers the served model gave.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from refold.examples.calculator.calculator import CLASSES, dataset  # noqa: E402

FACTORY = "refold.examples.calculator.calculator:expression_classifier"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m refold.examples.serving", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--train-size", type=int, default=2000)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--state", type=int, default=32, help="size of an expression's code")
    p.add_argument("--max-depth", type=int, default=5)
    p.add_argument("--requests", type=int, default=400, help="test expressions to serve")
    p.add_argument("--clients", type=int, default=8, help="concurrent client threads")
    p.add_argument("--max-batch", type=int, default=64)
    p.add_argument("--max-wait", type=float, default=0.0,
                   help="seconds a batch waits for more requests after its first")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", help="export here (default: a temporary directory)")
    p.add_argument("--load", help="serve this export instead of training one")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def train_and_export(args: argparse.Namespace, path: str) -> None:
    import keras

    from refold.compiler import Model
    rng = np.random.default_rng(args.seed)
    xs, ys = dataset(args.train_size, rng, args.max_depth)
    keras.utils.set_random_seed(args.seed)
    model = Model.from_factory(FACTORY, {"state": args.state}, seed=args.seed)
    model.compile(optimizer=keras.optimizers.Adam(0.005),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    t0 = time.perf_counter()
    history = model.fit(xs, ys, batch_size=64, epochs=args.epochs, verbose=0)
    print(f"trained on {len(xs)} expressions for {args.epochs} epochs in "
          f"{time.perf_counter() - t0:.1f} s (training accuracy "
          f"{100 * history.history['accuracy'][-1]:.1f}%)")
    model.export(path, verbose=False)
    print(f"exported to {path}")


def serve(args: argparse.Namespace, path: str, xs: list, work: str) -> dict:
    """Runs the client in a fresh process; its report."""
    requests, report = os.path.join(work, "requests.json"), os.path.join(work, "report.json")
    with open(requests, "w") as f:
        json.dump(xs, f)
    command = [sys.executable, "-m", "refold.examples.serving.client", path, requests,
               "--clients", str(args.clients), "--max-batch", str(args.max_batch),
               "--max-wait", str(args.max_wait), "--rounds", str(args.rounds),
               "--report", report]
    print("serving in a fresh process: python -m refold.examples.serving.client ...", flush=True)
    subprocess.run(command, check=True, cwd=ROOT, timeout=1800)
    with open(report) as f:
        return json.load(f)


def main(argv: Sequence[str] | None = None) -> dict:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory() as work:
        path = args.load or args.out or os.path.join(work, "calculator")
        if not args.load:
            train_and_export(args, path)
        rng = np.random.default_rng(args.seed + 1)  # test expressions: unseen
        xs, ys = dataset(args.requests, rng, args.max_depth)
        report = serve(args, path, xs, work)
    answers = np.asarray(report["answers"]).argmax(1)
    accuracy = float(np.mean(answers == ys))
    majority = CLASSES[np.bincount(ys, minlength=3).argmax()]
    print(f"served accuracy {100 * accuracy:.1f}% on {len(xs)} test expressions (always "
          f"'{majority}': {100 * float(np.mean(ys == np.bincount(ys).argmax())):.1f}%); "
          f"batched throughput {report['batched_throughput'] / report['alone_throughput']:.1f}x"
          " one at a time")
    return {**report, "accuracy": accuracy}


if __name__ == "__main__":
    main()
