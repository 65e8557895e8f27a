"""`Model.fit` on 1 and 2 replicas, and each worker's planning cost with sharding.

The sst-synth TreeLSTM workload (loss at the root). The process splits its CPU into
two logical devices before TensorFlow starts, then trains three models of the same
weights through `Model.fit`: on one device (no strategy), under `MirroredStrategy`
with one replica, and with two (one per logical device; each replica expands,
plans and runs its half of every batch). Each round runs a 2-epoch `fit` of each
model in turn and times the second epoch (a callback), after a warm-up `fit`
each; the median epoch throughput of each is reported.

Planning: the time to expand, schedule and pack one epoch's batches (no graph
cache, so every input is expanded) for the whole data, as one worker without
sharding did, against one worker's shard when 2 and 4 workers share the batches
(`compiler.distributed.replica_parts`; one replica per worker). Rounds alternate.

    python -m benchmarks.distributed            # 512 trees, batch 64, 3 rounds
    python -m benchmarks.distributed --quick    # 128 trees, 2 rounds
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", type=int, default=512)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.trees, args.rounds = 128, 2

    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import keras

    from benchmarks.workloads import CLASSES, TreeLSTMModel, sst_synth_tree
    from compiler import Model
    from compiler.distributed import replica_parts

    rng = np.random.default_rng(0)
    trees = [sst_synth_tree(rng) for _ in range(args.trees)]
    labels = rng.integers(0, CLASSES, args.trees).astype(np.int32)

    def build(devices) -> Model:
        scope = tf.distribute.MirroredStrategy(devices).scope() if devices else \
            tf.init_scope()
        with scope:
            model = Model(TreeLSTMModel(seed=0).block)
            model.compile(optimizer=keras.optimizers.SGD(0.01),
                          loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return model

    models = {"one device": build(None), "1 replica": build(["CPU:0"]),
              "2 replicas": build(["CPU:0", "CPU:1"])}

    class Timer(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            self.seconds = time.perf_counter() - self.start

    def epoch(model: Model) -> float:
        """Trees/s of the second epoch of a `fit` (the call's setup left out)."""
        timer = Timer()
        model.fit(trees, labels, batch_size=args.batch, epochs=2, verbose=0, shuffle=False,
                  callbacks=[timer])
        return len(trees) / timer.seconds

    for m in models.values():
        epoch(m)  # warm-up: tracing, expansion
    rates: dict[str, list] = {k: [] for k in models}
    planner = Model(TreeLSTMModel(seed=0).block, cache=False)

    def plan(workers: int) -> float:
        """Seconds for worker 0 to expand, plan and pack its parts of one epoch."""
        start = time.perf_counter()
        for parts in replica_parts(len(trees), args.batch, workers):
            planner.pipeline.pack([trees[i] for i in parts[0]])
        return time.perf_counter() - start

    planning: dict[int, list] = {1: [], 2: [], 4: []}
    for _ in range(args.rounds):
        for k, m in models.items():
            rates[k].append(epoch(m))
        for w in planning:
            planning[w].append(plan(w))
    result = {k: float(np.median(v)) for k, v in rates.items()}
    result["2 / 1 replicas"] = result["2 replicas"] / result["1 replica"]
    for w, v in planning.items():
        result[f"planning, {w} workers (s)"] = float(np.median(v))
    print(f"batch {args.batch}, {len(trees)} trees, {args.rounds} rounds (median)")
    for k, v in result.items():
        unit = "" if "(s)" in k or "/" in k else " trees/s"
        print(f"  {k:28s}: {v:10.3f}{unit}")
    print("every round (trees/s):")   # the spread, which the load makes wide
    for k, v in rates.items():
        print(f"  {k:28s}: {' '.join(f'{r:7.0f}' for r in v)}")
    result["rounds"] = rates
    # every model trained on the same batches: the same weights (what the test checks)
    one, two = models["one device"].get_weights(), models["2 replicas"].get_weights()
    result["weight difference"] = max(float(np.abs(a - b).max()) for a, b in zip(one, two))
    print(f"  max |weights(one device) - weights(2 replicas)|: "
          f"{result['weight difference']:.2e}")
    return result


if __name__ == "__main__":
    main()
