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
(`compiler.distribute.strategy.replica_parts`; one replica per worker). Rounds alternate.

    python -m benchmarks.distributed            # 512 trees, batch 64, 3 rounds
    python -m benchmarks.distributed --quick    # 128 trees, 2 rounds
"""

from __future__ import annotations

import time

import numpy as np

from benchmarks.common import compiled_model, epoch_timer, fit_arguments, sst_synth_data


def main(argv=None) -> dict:
    args = fit_arguments(argv, __doc__.splitlines()[0], trees=512, rounds=3, quick=(128, 2))

    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from benchmarks.workloads import TreeLSTMModel
    from refold.compiler import Model
    from refold.compiler.distribute.strategy import replica_parts

    trees, labels = sst_synth_data(args.trees)

    def build(devices) -> Model:
        scope = tf.distribute.MirroredStrategy(devices).scope() if devices else \
            tf.init_scope()
        with scope:
            return compiled_model(TreeLSTMModel(seed=0).block)

    models = {"one device": build(None), "1 replica": build(["CPU:0"]),
              "2 replicas": build(["CPU:0", "CPU:1"])}

    timer = epoch_timer()

    def epoch(model: Model) -> float:
        """Trees/s of the second epoch of a `fit` (the call's setup left out)."""
        model.fit(trees, labels, batch_size=args.batch, epochs=2, verbose=0, shuffle=False,
                  callbacks=[timer])
        return len(trees) / timer.seconds[-1]

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
