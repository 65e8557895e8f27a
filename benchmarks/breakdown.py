"""Where a step's time goes at small batches, through each layer of the public API.

The sst-synth TreeLSTM (loss at the root, plain SGD), one batch size at a time. Each
round times, interleaved on the same trees (graphs cached, everything traced):

- `fit`: one whole `Model.fit(..., epochs=1)` call over the trees, per step;
- `keras step`: `Model.train_step` in a `tf.function` on a packed batch (Keras' loss,
  optimizer and metric bookkeeping around the engine, no input pipeline);
- `bare step`: the engine's traced forward, backward and SGD update on a packed batch;
- `plan`: `Compiler.plan` of a batch (merge, schedule, pack);
- `predict`: one whole `Model.predict` call, per batch; `run`: `Compiler.run` per batch;
- `bare infer`: the engine's traced forward pass on a packed batch.

The three traced rows take their batch as `fit`, `predict` and `run` hand it to their
steps (`compiler.feeding.handoff`: the int32 arrays folded into one tensor, a concrete
function called on flat tensors), so that the differences between rows leave out
no cost of the call itself.

The differences between rows are the layers' costs: `fit - keras step - plan` is the
input pipeline, the Keras loop and its callbacks. Medians over the rounds.

`--chains` times the bare steps on one left-deep chain of d cells (d loop iterations):
the loop's fixed cost and its cost per iteration. `--profile` runs the bare steps under
TensorFlow's profiler and sums the time of each op type (from the profile's XSpace).
`--profile-calls` does so for whole `Model.fit` and `Model.predict` calls of the
TreeLSTM and the bilstm tagger (the peer benchmark's models): how much of a call is
the traced step, how many tasks TensorFlow's executor runs per step, and how much of
the step is matmuls.
`--switches` counts, per step of whole `fit` and `predict` calls, this process's
context switches (voluntary and not), CPU time and page faults (`getrusage`): what
TensorFlow's thread pools cost at small batches, counted rather than timed. With
`--intra`/`--inter` TensorFlow's thread pools are set first (before any op runs).

    python -m benchmarks.breakdown                  # B = 1 and 16
    python -m benchmarks.breakdown --batch-sizes 1 --trees 32 --rounds 3
    python -m benchmarks.breakdown --chains 1,8,16,32
    python -m benchmarks.breakdown --profile --batch-sizes 1
    python -m benchmarks.breakdown --profile-calls --batch-sizes 1,16 --trees 64
    python -m benchmarks.breakdown --switches --batch-sizes 1 --intra 1 --inter 1
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from benchmarks.workloads import CLASSES, TreeLSTMModel, sst_synth_tree

ROWS = ("fit", "keras step", "bare step", "plan", "predict", "run", "bare infer")


def _ms(fn, repeat: int) -> float:
    """Milliseconds per call of `fn`, over `repeat` calls."""
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - start) / repeat * 1e3


class Subjects:
    """The timed callables of one batch size, built and warmed once."""

    def __init__(self, b: int, trees: list, labels: np.ndarray, lr: float = 0.01):
        import keras

        from benchmarks.treelstm import EngineVariant
        from refold.compiler import Model
        workload = TreeLSTMModel(seed=0)
        self.engine = EngineVariant(workload, "agenda", lr=lr)
        self.model = Model(workload.block)
        self.model.compile(optimizer=keras.optimizers.SGD(lr),
                           loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        self.b, self.trees, self.labels = b, trees, labels
        self.batch, self.y = trees[:b], labels[:b]
        self.steps = len(trees) // b
        self.arrays = self.engine.compiler.plan(self.batch).feed.arrays
        self.packed = self.model.pipeline.pack(self.batch)
        model = self.model
        self.keras_step = _flat_call(lambda data: model.train_step(data), (self.packed, self.y))
        self.bare_step = _flat_call(lambda data: self.engine.train_fn(*data), (self.arrays, self.y))
        self.bare_infer = _flat_call(lambda data: self.engine.infer_fn(data[0]), (self.arrays,))
        for fn in self.calls().values():  # trace and expand everything
            fn()

    def calls(self) -> dict:
        m, e, b = self.model, self.engine, self.b
        trees, labels = self.trees[:self.steps * b], self.labels[:self.steps * b]
        return {
            "fit": lambda: m.fit(trees, labels, batch_size=b, epochs=1, verbose=0,
                                 shuffle=False),
            "keras step": lambda: _numpy(self.keras_step()),
            "bare step": lambda: self.bare_step().numpy(),
            "plan": lambda: e.compiler.plan(self.batch),
            "predict": lambda: m.predict(trees, batch_size=b, verbose=0),
            "run": lambda: e.compiler.run(self.batch),
            "bare infer": lambda: self.bare_infer().numpy(),
        }

    def per_step(self, name: str) -> int:
        """How many steps (or batches) one call of `name` makes."""
        return self.steps if name in ("fit", "predict") else 1


def _flat_call(step, data):
    """A call of `step(data)` traced once, made as a `Model`'s steps make theirs: the
    batch's NumPy arrays turned into the `Handoff`'s few tensors on every call, a
    concrete function called on them without binding them again (`Handoff.call`)."""
    import tensorflow as tf

    from refold.compiler.feeding.handoff import Handoff
    spec = tf.nest.map_structure(
        lambda a: tf.TensorSpec([None] * np.ndim(a), tf.as_dtype(np.asarray(a).dtype)), data)
    handoff = Handoff(spec)
    fn = tf.function(lambda *tensors: step(handoff.unfold(tensors)),
                     input_signature=handoff.signature, autograph=False).get_concrete_function()
    return lambda: handoff.call(fn, handoff.tensors(data))


def _numpy(logs: dict):
    return {k: v.numpy() for k, v in logs.items()}


def measure(b: int, n_trees: int, rounds: int, repeat: int) -> dict:
    """Median ms per step (or batch) of each row at batch size `b`."""
    rng = np.random.default_rng(0)
    trees = [sst_synth_tree(rng) for _ in range(n_trees)]
    labels = rng.integers(0, CLASSES, n_trees).astype(np.int32)
    s = Subjects(b, trees, labels)
    times: dict = {name: [] for name in ROWS}
    for _ in range(rounds):
        for name, fn in s.calls().items():
            n = 1 if s.per_step(name) > 1 else repeat
            times[name].append(_ms(fn, n) / s.per_step(name))
    return {name: float(np.median(t)) for name, t in times.items()}


def table(results: dict) -> str:
    sizes = sorted(results)
    lines = ["| ms per step or batch | " + " | ".join(f"B={b}" for b in sizes) + " |",
             "|---" * (len(sizes) + 1) + "|"]
    for name in ROWS:
        lines.append(f"| {name} | " + " | ".join(f"{results[b][name]:.2f}" for b in sizes)
                     + " |")
    for label, a, parts in (("fit - keras step - plan", "fit", ("keras step", "plan")),
                            ("keras step - bare step", "keras step", ("bare step",)),
                            ("predict - bare infer - plan", "predict", ("bare infer", "plan")),
                            ("run - bare infer - plan", "run", ("bare infer", "plan"))):
        lines.append(f"| {label} | " + " | ".join(
            f"{results[b][a] - sum(results[b][p] for p in parts):.2f}" for b in sizes) + " |")
    return "\n".join(lines)


def chains(depths, rounds: int, repeat: int) -> str:
    """Bare train and inference steps on one chain of d cells, per depth."""
    from benchmarks.treelstm import EngineVariant
    engine = EngineVariant(TreeLSTMModel(seed=0), "agenda")
    y = np.zeros(1, np.int32)
    lines = ["| cells in the chain | launches | train ms | infer ms |", "|---|---|---|---|"]
    for d in depths:
        tree = 1
        for _ in range(d):
            tree = (tree, 2)
        plan = engine.compiler.plan([tree])
        arrays = plan.feed.arrays
        train = lambda a=arrays: engine.train_fn(a, y).numpy()  # noqa: E731
        infer = lambda a=arrays: engine.infer_fn(a).numpy()  # noqa: E731
        for fn in (train, infer):
            fn()
        t = [np.median([_ms(fn, repeat) for _ in range(rounds)]) for fn in (train, infer)]
        lines.append(f"| {d} | {plan.stats.launches} | {t[0]:.2f} | {t[1]:.2f} |")
    return "\n".join(lines)


def _matmul(op_type: str) -> bool:
    """Whether a profiled op type is a matmul: TensorFlow's own, its fused ones, and the
    oneDNN rewrites some CPUs get (`_MklNativeFusedMatMul` on AVX-512 machines)."""
    return "MatMul" in op_type


def _profiled(fn) -> dict:
    """`fn()` under `tf.profiler`: `{"ops": {type: ms}, "calls": {type: n}, "traced":
    ms, "ms": ms, "tasks": n}` summed over the profile's events (op events are named
    "name:Type"; `traced` is the time inside calls of traced functions, `ms` the
    call's own, `tasks` the executor's `Process` events)."""
    import glob
    import tempfile
    from collections import defaultdict

    import tensorflow as tf
    from tensorflow.tsl.profiler.protobuf import xplane_pb2
    with tempfile.TemporaryDirectory() as d:
        # level 3: the most the host tracer records (still not every inexpensive op)
        tf.profiler.experimental.start(
            d, options=tf.profiler.experimental.ProfilerOptions(host_tracer_level=3))
        start = time.perf_counter()
        fn()
        wall = (time.perf_counter() - start) * 1e3
        tf.profiler.experimental.stop()
        space = xplane_pb2.XSpace()
        with open(glob.glob(f"{d}/**/*.xplane.pb", recursive=True)[0], "rb") as f:
            space.ParseFromString(f.read())
    ops, calls, traced, tasks = defaultdict(float), defaultdict(int), 0.0, 0
    for plane in space.planes:
        for line in plane.lines:
            for ev in line.events:
                name = plane.event_metadata[ev.metadata_id].name
                if name.startswith("EagerLocalExecute: __inference"):
                    traced += ev.duration_ps / 1e9
                elif name == "ExecutorState::Process":
                    tasks += 1
                elif ":" in name and "::" not in name and ": " not in name:
                    kind = name.rsplit(":", 1)[1]
                    ops[kind] += ev.duration_ps / 1e9
                    calls[kind] += 1
    return {"ops": dict(ops), "calls": dict(calls), "traced": traced, "ms": wall,
            "tasks": tasks}


def op_profile(b: int, steps: int = 30, top: int = 12) -> str:
    """The bare train and inference steps at batch `b` under `tf.profiler`: time per
    step of each op type, summed over the profile's events (nested events overlap)."""
    from benchmarks.treelstm import EngineVariant
    engine = EngineVariant(TreeLSTMModel(seed=0), "agenda")
    rng = np.random.default_rng(0)
    arrays = engine.compiler.plan([sst_synth_tree(rng) for _ in range(b)]).feed.arrays
    y = np.zeros(b, np.int32)
    out = []
    for mode, fn in (("train", lambda: engine.train_fn(arrays, y).numpy()),
                     ("infer", lambda: engine.infer_fn(arrays).numpy())):
        for _ in range(5):
            fn()
        p = _profiled(lambda f=fn: [f() for _ in range(steps)])
        out += [f"B={b} {mode}: | op type | ms per step | calls per step |", "|---|---|---|"]
        out += [f"| {k} | {v / steps:.3f} | {p['calls'][k] / steps:.1f} |"
                for k, v in sorted(p["ops"].items(), key=lambda kv: -kv[1])[:top]]
    return "\n".join(out)


def _workload_calls(workload: str, b: int, n: int) -> dict:
    """`{"fit": f, "predict": g}`: whole `Model.fit(epochs=1)` and `Model.predict`
    calls at batch `b` over `n` items of a workload (the peer benchmark's models;
    `predict` on TensorFlow's default executor and the loop at every batch size)."""
    import functools

    import keras

    from benchmarks.peers.refold_side import tagger_models
    from refold.compiler import Model
    rng = np.random.default_rng(0)
    if workload == "treelstm":
        train = infer = Model(TreeLSTMModel(seed=0).block)
        train.compile(optimizer=keras.optimizers.SGD(0.01),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        x = [sst_synth_tree(rng) for _ in range(n)]
        y, words = rng.integers(0, CLASSES, n).astype(np.int32), x
    elif workload == "chartagger":
        from benchmarks.peers.refold_side import char_tagger_models
        from benchmarks.peers.run import make_data
        data = make_data(["chartagger"], n)["chartagger"]
        train, infer = char_tagger_models(data["vocabulary"])
        train.compile(optimizer=keras.optimizers.SGD(0.01))
        x, y = data["sentences"], None
        words = [{"words": s["words"]} for s in x]
    else:
        from benchmarks.bilstm import sentence
        train, infer = tagger_models()
        train.compile(optimizer=keras.optimizers.SGD(0.01))
        x, y = [sentence(rng) for _ in range(n)], None
        words = [{"words": s["words"]} for s in x]
    # the profiler records no op the single-threaded executor runs: predict on the
    # default one (compiler.training.tf_executor), as before that choice existed, and
    # through the loop, not straight-line (compiler.straight_inference runs on that
    # executor once a sequence has repeated long enough, sooner on a loaded machine)
    infer.inference_executor.max_rows = 0
    infer.compiler.straight_inference.enabled = False
    return {"fit": functools.partial(train.fit, x, y, batch_size=b, epochs=1, verbose=0,
                                     shuffle=False),
            "predict": functools.partial(infer.predict, words, batch_size=b, verbose=0)}


def call_profile(workloads, b: int, n: int, rounds: int = 3) -> dict:
    """Whole `Model.fit` and `Model.predict` calls as a user makes them, per step:
    their time (median of `rounds`, unprofiled), then one call under `tf.profiler`:
    the share of it inside the traced step, the executor's tasks (its `Process`
    events: one per node it runs, or per run of cheap nodes it runs inline), and
    the time in matmuls (the profiler records every matmul; many cheap ops it does
    not record as ops, so no "other ops" figure is given)."""
    print(f"\n## Whole calls at B={b}, {n} items each: ms per step, and where one "
          f"profiled call's time went")
    print("| workload | call | ms per step | in the traced step | executor tasks per step "
          "| matmuls per step | matmul ms per step (profiled) | matmul share of the step |")
    print("|---|---|---|---|---|---|---|---|")
    out = {}
    for workload in workloads:
        for call, fn in _workload_calls(workload, b, n).items():
            fn()
            fn()  # traced, planned, warm
            ms = float(np.median([_ms(fn, 1) for _ in range(rounds)])) * b / n
            p = _profiled(fn)
            steps = n / b
            mm = sum(t for k, t in p["ops"].items() if _matmul(k))
            row = out[(workload, call)] = {
                "ms": ms, "traced share": p["traced"] / p["ms"],
                "tasks": p["tasks"] / steps, "matmuls": sum(
                    c for k, c in p["calls"].items() if _matmul(k)) / steps,
                "matmul ms": mm / steps, "matmul share": mm / p["traced"]}
            print(f"| {workload} | {call} | {ms:.2f} | {row['traced share']:.0%} | "
                  f"{row['tasks']:.0f} | {row['matmuls']:.0f} | {row['matmul ms']:.2f} | "
                  f"{row['matmul share']:.0%} |", flush=True)
    return out


def switches(b: int, n_trees: int, calls: int = 3) -> dict:
    """Per step of whole `fit` and `predict` calls at batch `b` (after two warm-up calls
    each): wall and CPU ms, context switches and minor page faults of this process."""
    import resource

    import keras

    from refold.compiler import Model
    rng = np.random.default_rng(0)
    trees = [sst_synth_tree(rng) for _ in range(n_trees)]
    labels = rng.integers(0, CLASSES, n_trees).astype(np.int32)
    model = Model(TreeLSTMModel(seed=0).block)
    model.compile(optimizer=keras.optimizers.SGD(0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    runs = {"fit": lambda: model.fit(trees, labels, batch_size=b, epochs=1, verbose=0,
                                     shuffle=False),
            "predict": lambda: model.predict(trees, batch_size=b, verbose=0)}
    out = {}
    for name, run in runs.items():
        run(), run()
        before, wall, cpu = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter(), \
            time.process_time()
        for _ in range(calls):
            run()
        after = resource.getrusage(resource.RUSAGE_SELF)
        steps = calls * -(-n_trees // b)
        out[name] = {
            "ms": (time.perf_counter() - wall) / steps * 1e3,
            "cpu ms": (time.process_time() - cpu) / steps * 1e3,
            "switches": (after.ru_nvcsw + after.ru_nivcsw - before.ru_nvcsw
                         - before.ru_nivcsw) / steps,
            "page faults": (after.ru_minflt - before.ru_minflt) / steps}
    return out


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-sizes", default="1,16")
    parser.add_argument("--trees", type=int, default=64, help="trees per fit/predict call")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=20, help="calls per round (steps)")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--chains", help="cells per chain, e.g. 1,8,16,32 (only that)")
    parser.add_argument("--profile", action="store_true", help="op profile (only that)")
    parser.add_argument("--profile-calls", action="store_true",
                        help="whole fit/predict calls of --workloads profiled (only that)")
    parser.add_argument("--workloads", default="treelstm,bilstm",
                        help="for --profile-calls: treelstm, bilstm, chartagger")
    parser.add_argument("--switches", action="store_true",
                        help="context switches, CPU and page faults per step (only that)")
    parser.add_argument("--intra", type=int, help="TensorFlow's intra-op threads")
    parser.add_argument("--inter", type=int, help="TensorFlow's inter-op threads")
    args = parser.parse_args(argv)
    if args.intra or args.inter:
        import tensorflow as tf
        if args.intra:
            tf.config.threading.set_intra_op_parallelism_threads(args.intra)
        if args.inter:
            tf.config.threading.set_inter_op_parallelism_threads(args.inter)
    if args.switches:
        results = {b: switches(b, max(args.trees, b)) for b in
                   (int(x) for x in args.batch_sizes.split(","))}
        for b, r in results.items():
            for name, row in r.items():
                print(f"B={b} {name}: " + ", ".join(f"{k} {v:.2f}" for k, v in row.items()))
        return results
    if args.chains:
        print(chains([int(d) for d in args.chains.split(",")], args.rounds, args.repeat))
        return {}
    if args.profile_calls:
        return {b: call_profile(args.workloads.split(","), b, max(args.trees, b), args.rounds)
                for b in (int(x) for x in args.batch_sizes.split(","))}
    if args.profile:
        for b in (int(x) for x in args.batch_sizes.split(",")):
            print(op_profile(b))
        return {}
    results = {}
    for b in (int(x) for x in args.batch_sizes.split(",")):
        results[b] = measure(b, max(args.trees, b), args.rounds, args.repeat)
    print(table(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({str(b): r for b, r in results.items()}, f, indent=1)
    return results


if __name__ == "__main__":
    main()
