"""Streams under a strategy: one worker's input pipeline against its shard, the bytes a
step sends between workers, and a model of throughput against the number of workers.

Two workers on two loopback processes of a 2-core machine cannot show scaling, so this
measures the inputs of a model instead, each through the code a worker runs
(`compiler.feeding.shards`, `compiler.feeding.streams`), for the standard workloads at 64 inputs per
replica (one replica per worker):

- the sst-synth TreeLSTM (loss at the root), JSON lines `[tree, label]`;
- the bilstm tagger (loss at every word), JSON lines `{"words": [...], "tags": [...]}`.

For W = 1, 2, 4, 8 workers, worker 0 reads its shard of one file of `--items` lines by
position (the global batch is 64 W): the time per step to scan the lines (every worker
goes through every line), to parse its own (`json.loads`), and to expand, schedule and
pack its part (the stream's thread on one device: no graph cache hit, a stream's
items are new objects each pass). By file (one file per worker), a worker scans only
its own lines: that time is the W = 1 scan. Rounds interleave the worker counts.

Then, on one device: the training step on 64 inputs (`Model.fit` on a list of 64 W
inputs, cached: per step, minus the planning of a cached batch, measured beside it),
and the gradients of one step: bytes of the dense ones (all-reduced) and of the
`IndexedSlices` ones (the embedding's rows; `tf.distribute`'s collective ops
all-gather them). `scaling_model` turns these into steps/s for W workers under an
assumed link (bandwidth and latency: not measurable here).

    python -m benchmarks.distributed_streams                 # 2048 items, 3 rounds
    python -m benchmarks.distributed_streams --quick         # 256 items, 1 round
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import numpy as np

WORKERS = (1, 2, 4, 8)
PER_REPLICA = 64
# Links the model is evaluated for (bytes/s, seconds per message): assumptions.
LINKS = {"10 Gb/s, 50 us": (10e9 / 8, 50e-6), "100 Gb/s, 10 us": (100e9 / 8, 10e-6)}


def tuplify(t):
    return tuple(tuplify(s) for s in t) if isinstance(t, list) else t


def workloads(items: int, folder: str) -> dict:
    """`{name: (block, parse, path, list of parsed items)}` for the two workloads."""
    from benchmarks.bilstm import TaggerModel, sentence
    from benchmarks.common import sst_synth_data
    from benchmarks.workloads import TreeLSTMModel
    trees, labels = sst_synth_data(items)
    tree_path = os.path.join(folder, "trees.jsonl")
    with open(tree_path, "w") as f:
        f.writelines(json.dumps([t, int(y)]) + "\n" for t, y in zip(trees, labels))
    rng = np.random.default_rng(0)
    sentences = [sentence(rng) for _ in range(items)]
    tagger_path = os.path.join(folder, "sentences.jsonl")
    with open(tagger_path, "w") as f:
        f.writelines(json.dumps(s) + "\n" for s in sentences)

    def parse_tree(line: str):
        tree, label = json.loads(line)
        return tuplify(tree), label
    return {
        "TreeLSTM": (TreeLSTMModel(seed=0).block, parse_tree, tree_path,
                     [(tuplify(t), int(y)) for t, y in zip(trees, labels)], True),
        "tagger": (TaggerModel(seed=0).block, json.loads, tagger_path, sentences, False),
    }


def compiled(block, labelled: bool):
    import keras

    from refold.compiler import Model
    model = Model(block)
    if labelled:
        model.compile(optimizer=keras.optimizers.SGD(0.01),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    else:
        model.compile(optimizer=keras.optimizers.SGD(0.01))
    return model


def input_times(model, lines, workers: int, labelled: bool) -> dict:
    """Worker 0's seconds for one pass over its shard (by position): scanning every
    line, parsing its own, expanding, scheduling and packing its parts; and its steps."""
    from refold.compiler.feeding.shards import Shard, read_steps
    from refold.compiler.feeding.streams import StreamFeeder
    shard = Shard.of(PER_REPLICA * workers, workers, range(1))
    start = time.perf_counter()
    steps = list(read_steps(lines, shard))
    scan = time.perf_counter() - start
    feeder = StreamFeeder(model.pipeline, lines, PER_REPLICA * workers, labelled, shard=shard)
    start = time.perf_counter()
    raws = [feeder._raw(step[0]) for step in steps]
    parse = time.perf_counter() - start
    start = time.perf_counter()
    packed = list(feeder._packed(iter(raws)))
    plan = time.perf_counter() - start
    assert sum(len(r.inputs) for _, _, r in packed) == sum(len(r.inputs) for r in raws)
    return {"steps": len(steps), "scan": scan, "parse": parse, "plan": plan,
            "inputs": sum(len(r.inputs) for r in raws)}


def step_times(model, items: list, labelled: bool) -> tuple[float, float]:
    """Seconds per training step of 64 inputs through `Model.fit` on a list (cached
    graphs), and of planning one such cached batch (merge, schedule, pack)."""
    from benchmarks.common import epoch_timer
    xs = [x for x, _ in items] if labelled else items
    ys = np.array([y for _, y in items]) if labelled else None
    steps = len(xs) // PER_REPLICA
    xs = xs[:steps * PER_REPLICA]
    ys = None if ys is None else ys[:len(xs)]
    timer = epoch_timer()
    model.fit(xs, ys, batch_size=PER_REPLICA, epochs=2, shuffle=False, verbose=0,
              callbacks=[timer])
    fit_step = timer.seconds[-1] / steps
    start = time.perf_counter()
    for b in range(steps):
        model.pipeline.pack(xs[b * PER_REPLICA:(b + 1) * PER_REPLICA])
    return fit_step, (time.perf_counter() - start) / steps


def gradient_bytes(model, items: list, labelled: bool) -> dict:
    """The gradients of one training step on 64 inputs: bytes of the dense ones (what
    an all-reduce sums), of the `IndexedSlices` ones (values and indices: what an
    all-gather collects from each replica), and what the dense form of those would be."""
    import keras
    import tensorflow as tf
    xs = [x for x, _ in items[:PER_REPLICA]] if labelled else items[:PER_REPLICA]
    arrays = {k: tf.constant(v) for k, v in model.pipeline.pack(xs).items()}
    weights = model.trainable_weights
    with tf.GradientTape() as tape:
        y_pred, values = model.tracer.forward(arrays)
        if labelled:
            y = tf.constant([y for _, y in items[:PER_REPLICA]])
            loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(
                y, y_pred, from_logits=True))
        else:
            loss = tf.add_n([tf.reduce_mean(values[m]) for m in model.loss_and_metrics.loss_ids])
    out = {"dense": 0, "sparse": 0, "sparse as dense": 0, "weights": 0}
    for g, w in zip(tape.gradient(loss, weights), weights):
        size = int(np.prod(w.shape)) * 4
        out["weights"] += size
        if isinstance(g, tf.IndexedSlices):
            out["sparse"] += int(tf.size(g.values)) * 4 + int(tf.size(g.indices)) * 8
            out["sparse as dense"] += size
        elif g is not None:
            out["dense"] += size
    return out


def scaling_model(workers: int, compute: float, read: float, plan: float, dense: float,
                  sparse: float, link: tuple[float, float]) -> dict:
    """The step of `workers` workers (one replica each, 64 inputs a replica):

        step = max(compute + comm(W), read, plan / P)

    where the input pipeline (reading and parsing in the stream's thread; expanding
    and planning in `P` processes, `Model(workers=P)`) runs beside the step, and
    `comm(W)` is a ring all-reduce of the dense gradients (`2 (W-1)/W` of their
    bytes sent per worker, `2 (W-1)` messages), an all-gather of the `IndexedSlices`
    ones (`W-1` replicas' rows received, `W-1` messages) and the census
    (`compiler.distribute.sharded_streams`: `2 (W-1)` messages of a few bytes). `P` is the
    fewest processes that keep planning off the critical path.

    Args:
        compute: seconds of a training step on 64 inputs on one worker's device.
        read: seconds per step to read and parse the worker's lines (its thread).
        plan: seconds per step to expand, schedule and pack its 64 inputs (1 process).
        dense: bytes of dense gradients; `sparse`: of one replica's `IndexedSlices`.
        link: `(bytes/s, seconds per message)` of the network.

    Returns: `{"comm", "step", "processes", "inputs/s", "bound"}` (seconds).
    """
    bandwidth, latency = link
    w = workers
    comm = 0.0
    if w > 1:
        comm = 2 * (w - 1) / w * dense / bandwidth + (w - 1) * sparse / bandwidth \
            + (2 * (w - 1) + (w - 1) + 2 * (w - 1)) * latency
    busy = compute + comm
    processes = max(1, int(np.ceil(plan / busy)))
    step = max(busy, read, plan / processes)
    bound = "reading" if read > busy else "network" if comm > compute else "compute"
    return {"comm": comm, "step": step, "processes": processes,
            "inputs/s": w * PER_REPLICA / step, "bound": bound}


def measure(name: str, block, parse, path: str, items: list, labelled: bool,
            rounds: int) -> dict:
    """The model's inputs for one workload, printed as tables: worker 0's input
    pipeline for each worker count, the step on one device, the gradients."""
    import refold as td
    model = compiled(block, labelled)
    lines = td.Lines(path, parse)
    times: dict[int, list] = {w: [] for w in WORKERS}
    for _ in range(rounds):
        for w in WORKERS:
            times[w].append(input_times(model, lines, w, labelled))
    fit_steps, plans = [], []
    for _ in range(rounds):
        fit_step, plan = step_times(model, items, labelled)
        fit_steps.append(fit_step)
        plans.append(plan)
    grads = gradient_bytes(model, items, labelled)
    med = {w: {k: float(np.median([t[k] for t in v])) for k in v[0]}
           for w, v in times.items()}
    every = [t for v in times.values() for t in v]
    out = {"input": med, "fit step": float(np.median(fit_steps)),
           "cached plan": float(np.median(plans)), "gradients": grads,
           # each worker scans every line of the file: per line, over every W
           "scan per line": float(np.median([t["scan"] / len(items) for t in every])),
           # its own 64 inputs of a step, over every W
           "parse per step": float(np.median([t["parse"] / t["steps"] for t in every])),
           "plan per step": float(np.median([t["plan"] / t["steps"] for t in every]))}
    out["compute"] = out["fit step"] - out["cached plan"]
    print(f"\n{name}: {len(items)} lines, {PER_REPLICA} per replica, {rounds} rounds "
          "(median)")
    print("| workers | steps | scan ms/step | parse ms/step | expand+plan ms/step "
          "| input ms/step |")
    print("|---:|---:|---:|---:|---:|---:|")
    for w in WORKERS:
        m = med[w]
        per = {k: 1e3 * m[k] / m["steps"] for k in ("scan", "parse", "plan")}
        print(f"| {w} | {m['steps']:.0f} | {per['scan']:.2f} | {per['parse']:.2f} | "
              f"{per['plan']:.2f} | {sum(per.values()):.2f} |")
    print(f"fit step on one device (64, cached): {1e3 * out['fit step']:.1f} ms; planning a "
          f"cached batch: {1e3 * out['cached plan']:.1f} ms; compute: "
          f"{1e3 * out['compute']:.1f} ms")
    print(f"gradients per step: dense {grads['dense'] / 1e6:.2f} MB, sparse (rows) "
          f"{grads['sparse'] / 1e6:.2f} MB (dense form {grads['sparse as dense'] / 1e6:.2f} "
          f"MB); all weights {grads['weights'] / 1e6:.2f} MB")
    print(f"model inputs: scan {1e6 * out['scan per line']:.2f} us/line, parse "
          f"{1e3 * out['parse per step']:.2f} ms/step, expand+plan "
          f"{1e3 * out['plan per step']:.1f} ms/step (1 process), compute "
          f"{1e3 * out['compute']:.1f} ms/step")
    return out


def model_report(m: dict) -> dict:
    """The scaling model on a workload's measured inputs `m` (`measure`'s), printed:
    a table over worker counts and links, and where each bound takes over. One file
    is read by position (every worker scans every line: the scan grows with W);
    files, one per worker, are read by file (each scans its own)."""
    compute, plan, grads = m["compute"], m["plan per step"], m["gradients"]
    scan, parse = m["scan per line"] * PER_REPLICA, m["parse per step"]

    def model(w: int, read: float, link: tuple) -> dict:
        return scaling_model(w, compute, read, plan, grads["dense"], grads["sparse"], link)
    print("| link | workers | comm ms | compute + comm ms | read ms, one file / files "
          "| processes | inputs/s, one file | inputs/s, files | bound (files) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    out: dict = {"rows": []}
    for link_name, link in LINKS.items():
        for w in (1, 2, 8, 32, 128):
            reads = {"one file": scan * w + parse, "files": scan + parse}
            rows = {k: model(w, r, link) for k, r in reads.items()}
            out["rows"].append({"link": link_name, "workers": w, **rows})
            a, b = rows["one file"], rows["files"]
            print(f"| {link_name} | {w} | {1e3 * b['comm']:.1f} | "
                  f"{1e3 * (compute + b['comm']):.1f} | {1e3 * reads['one file']:.1f} / "
                  f"{1e3 * reads['files']:.1f} | {b['processes']} | "
                  f"{a['inputs/s']:.0f} | {b['inputs/s']:.0f} | {b['bound']} |")
    for link_name, link in LINKS.items():
        network = next(w for w in range(1, 100_000)
                       if model(w, scan + parse, link)["bound"] == "network")
        rows_over_dense = 1 + int(2 * grads["sparse as dense"] / grads["sparse"])
        out[link_name] = {"network-bound from": network, "rows cost more from": rows_over_dense}
        print(f"{link_name}: network-bound from {network} workers; all-gathering the "
              f"embedding's rows sends more than all-reducing its dense gradient would from "
              f"{rows_over_dense} workers")
    reading = next((w for w in range(1, 1_000_000)
                    if model(w, scan * w + parse, (float("inf"), 0.0))["bound"] == "reading"),
                   None)
    out["reading-bound from"] = reading
    print(f"one file read by position: reading-bound from {reading} workers (network "
          "left out)")
    return out


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.items, args.rounds = 256, 1
    folder = tempfile.mkdtemp()
    result: dict = {}
    for name, workload in workloads(args.items, folder).items():
        result[name] = measure(name, *workload, args.rounds)
        result[name]["model"] = model_report(result[name])
    return result


if __name__ == "__main__":
    main()
