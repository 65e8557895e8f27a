"""Training through `compiler.Model.fit` against the bare engine, same process.

The sst-synth TreeLSTM workload (loss at the root, batch 64 by default): the bare
engine plans each batch in Python and runs one traced train step (forward,
backward, SGD); `Model.fit` does the same work through Keras (its `tf.data`
producer, callbacks, progress bookkeeping, metric trackers). Epochs of the two
alternate, after a warm-up epoch each (tracing, expansion of every tree), and the
median epoch throughput of each is reported with their ratio.

A third variant, `Model.fit` from a stream (`zip(trees, labels)`, read afresh each
epoch, into a model without the graph cache), expands and plans every batch in the
stream's background thread while the step runs; its ratio to the cached list is
what streaming costs. A fourth does the same with `Model(workers=2)`: two worker
processes expand and plan the stream's batches (`compiler.parallel.StreamWorkers`),
so expansion runs beside the step instead of in turn with it (`--workers N`, 0 to
leave that variant out).

    python -m benchmarks.fit            # 1,280 trees, 3 rounds
    python -m benchmarks.fit --quick    # 320 trees, 2 rounds
"""

from __future__ import annotations

import time

import numpy as np

from benchmarks.common import compiled_model, fit_arguments, sst_synth_data
from benchmarks.workloads import TreeLSTMModel


def main(argv=None) -> dict:
    args = fit_arguments(argv, __doc__.splitlines()[0], trees=1280, rounds=3, quick=(320, 2),
                         extra=lambda p: p.add_argument("--workers", type=int, default=2))

    import keras

    from benchmarks.treelstm import EngineVariant

    trees, labels = sst_synth_data(args.trees)
    workload = TreeLSTMModel(seed=0)
    engine = EngineVariant(workload, "agenda", lr=0.01)
    model = compiled_model(workload.block)
    streamed = compiled_model(workload.block, cache=False)
    parallel = compiled_model(workload.block, cache=False, workers=args.workers) \
        if args.workers else None
    b = args.batch
    batches = [(trees[i:i + b], labels[i:i + b]) for i in range(0, len(trees), b)]

    def engine_epoch() -> float:
        start = time.perf_counter()
        for x, y in batches:
            engine.train(x, y).numpy()
        return len(trees) / (time.perf_counter() - start)

    epoch_times: list[float] = []

    class Timer(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            epoch_times.append(time.perf_counter() - self.start)

    def fit_epoch() -> float:
        model.fit(trees, labels, batch_size=b, epochs=1, verbose=0, shuffle=False,
                  callbacks=[Timer()])
        return len(trees) / epoch_times[-1]

    def stream_epoch() -> float:
        streamed.fit(zip(trees, labels), batch_size=b, epochs=1, verbose=0,
                     callbacks=[Timer()])
        return len(trees) / epoch_times[-1]

    def workers_epoch() -> float:
        parallel.fit(zip(trees, labels), batch_size=b, epochs=1, verbose=0,
                     callbacks=[Timer()])
        return len(trees) / epoch_times[-1]

    variants = {"engine": engine_epoch, "fit": fit_epoch, "stream": stream_epoch}
    if parallel is not None:
        variants["workers"] = workers_epoch
    for run in variants.values():
        run()  # warm-up: tracing, expansion, caches, forking the workers
    rates: dict = {k: [] for k in variants}
    for _ in range(args.rounds):
        for name, run in variants.items():
            rates[name].append(run())
    if parallel is not None:
        parallel.compiler.close()
    result = {k: float(np.median(v)) for k, v in rates.items()}
    result["ratio"] = result["fit"] / result["engine"]
    result["stream_ratio"] = result["stream"] / result["fit"]
    print(f"batch {b}, {len(trees)} trees, {args.rounds} rounds (median trees/s)")
    print(f"  bare engine           : {result['engine']:8.0f}")
    print(f"  Model.fit (list)      : {result['fit']:8.0f}")
    print(f"  Model.fit (stream)    : {result['stream']:8.0f}")
    if parallel is not None:
        result["workers_ratio"] = result["workers"] / result["fit"]
        print(f"  ... {args.workers} workers         : {result['workers']:8.0f}")
    print(f"  fit / engine          : {result['ratio']:8.2f}")
    print(f"  stream / list         : {result['stream_ratio']:8.2f}")
    if parallel is not None:
        print(f"  stream, workers / list: {result['workers_ratio']:8.2f}")
        # per round, interleaved: the ratio least disturbed by the machine's load
        per_round = [w / f for w, f in zip(rates["workers"], rates["fit"])]
        print("  per round (workers / list): " + " ".join(f"{r:.2f}" for r in per_round))
    return result


if __name__ == "__main__":
    main()
