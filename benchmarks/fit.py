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
processes expand and plan the stream's batches (`compiler.feeding.process_pool.StreamWorkers`),
so expansion runs beside the step instead of in turn with it (`--workers N`, 0 to
leave that variant out).

Each epoch's CPU time is accounted per process (`os.times` for this one, all its
threads; `/proc/<pid>/stat` for the workers): CPU is less disturbed than wall time by
other jobs on the machine, so it says what a stream costs where wall ratios are noise.
From it, `cpu_model` bounds the ratio a stream can reach (see its docstring).

`--expansion` measures instead what a worker does with each batch, alone in this
process: the CPU time of expanding the batch's trees as one graph and of planning and
packing it, against the same example by example (`expansion_cpu`), and the tree nodes
expanded per CPU second.

    python -m benchmarks.fit            # 1,280 trees, 3 rounds
    python -m benchmarks.fit --quick    # 320 trees, 2 rounds
    python -m benchmarks.fit --expansion --trees 640 --rounds 5
"""

from __future__ import annotations

import os
import time

import numpy as np

from benchmarks.common import compiled_model, fit_arguments, sst_synth_data
from benchmarks.workloads import TreeLSTMModel


def main(argv=None) -> dict:
    def options(parser):
        parser.add_argument("--workers", type=int, default=2)
        parser.add_argument("--nice-ab", type=int, default=0, metavar="N",
                            help="add a variant whose workers run N nice levels lower")
        parser.add_argument("--expansion", action="store_true",
                            help="only time expanding and planning the batches (CPU)")
    args = fit_arguments(argv, __doc__.splitlines()[0], trees=1280, rounds=3, quick=(320, 2),
                         extra=options)
    if args.expansion:
        return expansion_cpu(args.trees, args.batch, args.rounds)

    import keras

    from benchmarks.treelstm import EngineVariant
    from refold.compiler import Model
    from refold.compiler.feeding.process_pool import StreamWorkers

    trees, labels = sst_synth_data(args.trees)
    workload = TreeLSTMModel(seed=0)
    engine = EngineVariant(workload, "agenda", lr=0.01)
    model = compiled_model(workload.block)
    streamed = compiled_model(workload.block, cache=False)
    parallel = compiled_model(workload.block, cache=False, workers=args.workers) \
        if args.workers else None
    niced = Model(workload.block, cache=False, workers=args.workers) \
        if args.workers and args.nice_ab else None
    for m in (parallel, niced):  # fork the workers now, each at its priority
        if m is not None:
            StreamWorkers.nice, default = (args.nice_ab if m is niced else StreamWorkers.nice,
                                           StreamWorkers.nice)
            m.compiler.stream_workers()
            StreamWorkers.nice = default
    if niced is not None:
        niced.compile(optimizer=keras.optimizers.SGD(0.01),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    b = args.batch
    batches = [(trees[i:i + b], labels[i:i + b]) for i in range(0, len(trees), b)]

    def engine_epoch() -> float:
        start = time.perf_counter()
        for x, y in batches:
            engine.train(x, y).numpy()
        return len(trees) / (time.perf_counter() - start)

    epoch_times: list[float] = []
    epoch_cpu: list[tuple[float, float]] = []  # (this process, the workers), seconds

    class Timer(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            workers = self.model.compiler.stream_workers()
            self.pids = workers.pids() if workers is not None else []
            self.cpu = (process_cpu(), workers_cpu(self.pids))
            self.start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            epoch_times.append(time.perf_counter() - self.start)
            epoch_cpu.append((process_cpu() - self.cpu[0],
                              workers_cpu(self.pids) - self.cpu[1]))

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

    def niced_epoch() -> float:
        niced.fit(zip(trees, labels), batch_size=b, epochs=1, verbose=0,
                          callbacks=[Timer()])
        return len(trees) / epoch_times[-1]

    variants = {"engine": engine_epoch, "fit": fit_epoch, "stream": stream_epoch}
    if parallel is not None:
        variants["workers"] = workers_epoch
    if niced is not None:
        variants["workers_niced"] = niced_epoch
    for run in variants.values():
        run()  # warm-up: tracing, expansion, caches, forking the workers
    rates: dict = {k: [] for k in variants}
    cpu: dict = {k: [] for k in variants if k != "engine"}  # (wall, main, workers) a batch
    for _ in range(args.rounds):
        for name, run in variants.items():
            rates[name].append(run())
            if name != "engine":
                cpu[name].append((epoch_times[-1] / len(batches),
                                  *(c / len(batches) for c in epoch_cpu[-1])))
    for m in (parallel, niced):
        if m is not None:
            m.compiler.close()
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
    if niced is not None:
        result["workers_niced_ratio"] = result["workers_niced"] / result["fit"]
        per_round = [w / f for w, f in zip(rates["workers_niced"], rates["fit"])]
        print(f"  ... workers at nice +{args.nice_ab} / list: "
              f"{result['workers_niced_ratio']:.2f} (per round "
              + " ".join(f"{r:.2f}" for r in per_round) + ")")
    print("per batch, medians (ms): wall, CPU of this process, CPU of the workers")
    for name in cpu:
        wall, main_cpu, worker_cpu = (1e3 * float(np.median(c)) for c in zip(*cpu[name]))
        result[f"{name}_cpu"] = (wall, main_cpu, worker_cpu)
        print(f"  {name:8s}: wall {wall:6.1f}  CPU {main_cpu:6.1f} + workers "
              f"{worker_cpu:6.1f}  ({(main_cpu + worker_cpu) / wall:.2f} cores)")
    for name in ("stream", "workers", "workers_niced"):
        if name in cpu:
            idle, busy = cpu_model(result["fit_cpu"], result[f"{name}_cpu"])
            result[f"{name}_bound"] = (idle, busy)
            print(f"  {name} / list bound from CPU: {idle:.2f} with idle cores, "
                  f"{busy:.2f} with a fixed CPU share")
    return result


def expansion_cpu(n_trees: int, batch: int, rounds: int) -> dict:
    """Median CPU ms per batch of sst-synth trees of expanding and of planning and
    packing them, both ways: a batch as one graph (`expand_batch`, `plan_batch`), as
    a stream's worker does (`expand_ms`, `plan_ms`), and example by example
    (`expand_all`, `plan_expanded`), as a cached list's first epoch does
    (`example_expand_ms`, `example_plan_ms`); the two alternate batch by batch, after
    one warm-up pass. Also the tree nodes expanded per CPU second as one graph."""
    from benchmarks.workloads import count_nodes
    from refold.compiler import Model
    from refold.compiler.feeding.lists import InputPipeline
    from refold.compiler.graphs.expansion import expand_all, expand_batch

    trees, _ = sst_synth_data(n_trees)
    compiler = Model(TreeLSTMModel(seed=0).block, cache=False).compiler
    pipeline = InputPipeline(compiler)
    batches = [trees[i:i + batch] for i in range(0, len(trees), batch)]
    nodes = sum(map(count_nodes, trees))
    ways = {"": (lambda b: expand_batch(compiler.program, b), compiler.plan_batch),
            "example_": (lambda b: expand_all(compiler.program, b, 0),
                         lambda e: compiler.plan_expanded(e, grouped=True))}

    def one_pass() -> dict:
        times = {k: [0.0, 0.0] for k in ways}
        for i, b in enumerate(batches):
            for k in (list(ways) if i % 2 == 0 else list(ways)[::-1]):
                expand, plan = ways[k]
                start = time.process_time()
                expanded = expand(b)
                middle = time.process_time()
                pipeline.arrays(plan(expanded))
                times[k][0] += middle - start
                times[k][1] += time.process_time() - middle
        return times

    one_pass()
    passes = [one_pass() for _ in range(rounds)]
    result = {}
    for k in ways:
        for j, what in enumerate(("expand_ms", "plan_ms")):
            result[k + what] = 1e3 * float(np.median([p[k][j] for p in passes])) / len(batches)
    result["nodes_per_s"] = nodes / (result["expand_ms"] * len(batches) / 1e3)
    print(f"batch {batch}, {len(trees)} trees, {rounds} passes (median CPU a batch): as one "
          f"graph: expand {result['expand_ms']:.2f} ms, plan and pack {result['plan_ms']:.2f} "
          f"ms, {result['nodes_per_s']:,.0f} tree nodes/s expanded; example by example: "
          f"expand {result['example_expand_ms']:.2f} ms, plan and pack "
          f"{result['example_plan_ms']:.2f} ms")
    return result


def cpu_model(cached: tuple, streamed: tuple, cores: int | None = None) -> tuple:
    """`(idle, saturated)`: the stream ÷ list ratios its CPU times allow.

    `cached` and `streamed` are `(wall, CPU here, CPU in workers)` per batch. The stream
    does the list's work plus expansion and planning, `S = CPU here + workers` against
    the list's `C`. On `cores` otherwise idle cores, a batch needs at least `S / cores`
    of wall time, and at least the list's own wall time `W` (its step does not go faster):
    the ratio is at most `W / max(W, S / cores)`. With a fixed share of a machine
    saturated by other jobs, it is `C / S`; with the kernel's per-session groups
    (autogroup), worker processes that are runnable on the other core raise the
    session's share, so a stream with workers measured above that bound.
    """
    cores = cores or os.cpu_count() or 1
    wall, c_main, c_workers = cached
    s = streamed[1] + streamed[2]
    c = c_main + c_workers
    return wall / max(wall, s / cores), min(1.0, c / s)


def process_cpu() -> float:
    """User + system CPU seconds of this process, all its threads (`time.process_time`:
    nanoseconds, where `os.times` counts 10 ms ticks and a short epoch may show none)."""
    return time.process_time()


def workers_cpu(pids: list[int]) -> float:
    """User + system CPU seconds of the given (live) processes, from /proc."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return total


if __name__ == "__main__":
    main()
