"""`Model.fit`, `evaluate` and `predict` under `tf.distribute` strategies.

Build the block, the `Model` and compile it inside `strategy.scope()` (so that the
weights are mirrored); then train as on one device, with Keras' callbacks,
validation data, metrics, sample weights and `History`:

>>> import keras, tensorflow as tf
>>> import refold as td
>>> from refold.compiler import Model
>>> strategy = tf.distribute.MirroredStrategy(["CPU:0"])   # or several devices
>>> with strategy.scope():
...     block = td.Map(td.Scalar() >> td.Function(lambda x: x[:, None]) >> td.FC(1)) \\
...         >> td.Sum() >> td.Function(lambda s: tf.reduce_sum(s, 1)) >> td.Metric("loss")
...     model = Model(block)
...     model.compile(optimizer=keras.optimizers.SGD(0.1))
>>> history = model.fit([[1.0, 2.0], [3.0], [0.5]], batch_size=2, epochs=2, verbose=0)
>>> len(history.history["loss"])
2

How it works. Keras' own loop runs (epochs, callbacks, validation, metric
resets, `History`); only the step differs. Batch `b` of a call holds the same
inputs as on one device (`x[b*B:(b+1)*B]`, `B` the global batch size); it is cut
into one contiguous part per replica (`replica_parts`), and each replica expands,
schedules and packs its own part and runs `Model.train_step` on it
(`strategy.run`). Each replica's loss is its share of the whole batch's loss (see
`compiler.training.metrics.LossAndMetrics.total`; the global counts it needs are
summed across replicas in the step), so the gradients the optimizer sums across
replicas are those of the whole batch on one device, and the weights follow
single-device training. The loss metric is weighed so that Keras' summed
(sync-on-read) metric variables give the single-device figure. The non-finite
guard holds on every replica: replicas agree (an all-reduce) on whether the step is
finite and all apply the update or none does.

Why Keras' loop rather than a loop of our own: parity with Keras (every callback,
`validation_freq`, `initial_epoch`, `BackupAndRestore`, `stop_training`) comes for
free and stays right as Keras changes, and it is one training loop for one device
and many. A loop of our own would have to re-implement all of it; the per-replica
schedules only need the step function (`make_train_function`, Keras' public hook)
to hand each replica its own packed part instead of letting `tf.distribute` split
one tensor batch (schedules of different sizes cannot be split or averaged).

Sharding. Every worker is given the same `x` (a list; Python objects, cheap to
hold) and the same labels; each worker expands, plans and packs only the inputs
of its own replicas' parts: its shard, the `x[i]` that fall in its replicas'
parts of the batches, chosen by worker index (`local_replicas`), not by
`tf.data`'s auto-sharding (the dataset Keras iterates holds batch indices only,
which every worker reads whole). With `shuffle=True` each replica shuffles its
own shard every epoch (seeded by `model.seed`, the epoch and the replica), so a
replica keeps its inputs across epochs, as with `tf.data` sharding; without
shuffling the batches are exactly those of one device. An input skipped as bad
(`on_bad_example="skip"`) leaves its part one shorter; `skipped_examples` lists
the skipped inputs of this worker's shard. A part may be empty (a last batch with
fewer inputs than replicas): that replica contributes nothing to the step.

Streams (generators, `PyDataset`s, `tf.data` datasets, `compiler.Lines` files)
are read by each worker in its own shard: `compiler.distribute.sharded_streams`.
`predict` of a block whose output is not one tensor per input runs on one device
(it has no step function to distribute).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import tensorflow as tf

from refold import compat
from refold.compiler.feeding.feeder import Feeder
from refold.compiler.feeding.lists import Labels, as_inputs, check_batch_size
from refold.compiler.training.steps import STEP_FINITE, STEP_LOSS, NonFiniteLossError, next_indices

STRATEGIES = (tf.distribute.MirroredStrategy, tf.distribute.MultiWorkerMirroredStrategy)


def is_distributed(strategy: tf.distribute.Strategy) -> bool:
    """Whether `Model` runs its steps through `strategy` (with per-replica parts).

    A strategy other than the mirrored ones is refused here, with its name."""
    if isinstance(strategy, STRATEGIES):
        return True
    if strategy.num_replicas_in_sync > 1 or tf.distribute.has_strategy():
        raise ValueError(f"Model supports MirroredStrategy and MultiWorkerMirroredStrategy, "
                         f"not {type(strategy).__name__}")
    return False


def local_replicas(strategy: tf.distribute.Strategy) -> range:
    """The ids (`replica_id_in_sync_group`) of the replicas of this worker: worker
    `w` of a multi-worker strategy with `L` devices each holds `w*L .. w*L+L-1`."""
    per_worker = len(strategy.extended.worker_devices)
    resolver = getattr(strategy, "cluster_resolver", None)
    worker = resolver.task_id if resolver is not None and resolver.task_type else 0
    return range(worker * per_worker, (worker + 1) * per_worker)


def replica_parts(n: int, batch_size: int, replicas: int) -> list[list[np.ndarray]]:
    """For each batch `x[b*B:(b+1)*B]` of `n` inputs, its `replicas` contiguous
    parts (index arrays; sizes differ by one at most, a part may be empty).

    >>> [[p.tolist() for p in parts] for parts in replica_parts(5, 3, 2)]
    [[[0, 1], [2]], [[3], [4]]]
    """
    return [np.array_split(np.arange(lo, min(lo + batch_size, n)), replicas)
            for lo in range(0, n, batch_size)]


class ReplicaShard:
    """One replica's inputs for one call: its part of every batch, expanded.

    Args:
        parts: the indices (in the call's `x`) of its part of each batch.
    """

    def __init__(self, replica: int, parts: list[np.ndarray]):
        self.replica = replica
        self.sizes = [len(p) for p in parts]
        self.positions = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        self.inputs: list = []
        self.labels: Labels | None = None
        self._order = np.arange(len(self.positions))
        self._ends = np.cumsum([0, *self.sizes])

    def expand(self, model, inputs: list, labels: Labels, skip: bool, what: str,
               offset: int, verbose) -> list[int]:
        """Expands the shard's inputs, part by part (so that errors name their index
        in `x`); drops bad ones with `skip`. Returns the indices skipped."""
        kept_inputs, kept_rows, bad, sizes = [], [], [], []
        for b, size in enumerate(self.sizes):
            rows = self.positions[self._ends[b]:self._ends[b + 1]]
            if not size:
                sizes.append(0)
                continue
            lo = int(rows[0])
            part, _, skipped = model.pipeline.expand(
                inputs[lo:lo + size], labels.take(rows), skip, what, offset + lo,
                verbose)
            keep = np.setdiff1d(np.arange(size), skipped)
            bad.extend(lo + s for s in skipped)
            kept_inputs.extend(part)
            kept_rows.extend(rows[keep])
            sizes.append(len(keep))
        self.inputs, self.sizes = kept_inputs, sizes
        self.positions = np.asarray(kept_rows, np.int64)
        self.labels = labels.take(self.positions)
        self._order = np.arange(len(self.positions))
        self._ends = np.cumsum([0, *sizes])
        return bad

    def shuffle(self, seed: int, epoch: int) -> None:
        """A new order of the shard's inputs for the epoch (the part sizes stay)."""
        self._order = np.random.default_rng([seed, epoch, self.replica]).permutation(
            len(self.positions))

    def part(self, b: int) -> np.ndarray:
        """The shard-local indices of the inputs of its part of batch `b`."""
        return self._order[self._ends[b]:self._ends[b + 1]]


class ShardFeeder(Feeder):
    """The per-replica batches of one call on this worker (a `BatchFeeder` for
    `strategy`): `batch(i)` is one `(arrays, y?, sample_weight?)` per local replica.
    """

    def __init__(self, model, shards: list[ReplicaShard], n_batches: int,
                 shuffle: bool, with_labels: bool, signature: tuple):
        self.model, self.shards, self.n_batches = model, shards, n_batches
        self.shuffle, self.with_labels, self.signature = shuffle, with_labels, signature
        self.replicas = model.distribute_strategy.num_replicas_in_sync

    def dataset(self) -> tf.data.Dataset:
        """What Keras iterates: `n_batches` steps of one item per replica (Keras
        hands it to `tf.distribute`, which splits it among the replicas). Only
        its length counts (see `ReplicaSteps`); auto-sharding is off, since
        each worker shards the inputs by itself."""
        r = self.replicas
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = \
            tf.data.experimental.AutoShardPolicy.OFF
        options.experimental_optimization.apply_default_optimizations = False
        options.autotune.enabled = False
        return tf.data.Dataset.range(self.n_batches * r).map(lambda j: j // r) \
            .batch(r).with_options(options)

    def batch(self, i: int) -> list[tuple]:
        if i == 0 and self.shuffle:
            for s in self.shards:
                s.shuffle(self.model.seed, self.model.feed.epoch)
        out = []
        for s in self.shards:
            idx = s.part(i)
            arrays = self.model.pipeline.pack([s.inputs[j] for j in idx])
            out.append((arrays, *s.labels.batch(idx)) if self.with_labels else (arrays,))
        return out

    def examples(self, i: int) -> np.ndarray:
        """The indices in `x` of this worker's inputs of batch `i`."""
        return np.concatenate([s.positions[s.part(i)] for s in self.shards])


def sharded_feeder(model, x, y, sample_weight, batch_size: int, shuffle: bool,
                   with_labels: bool, what: str, raise_errors: bool, offset: int,
                   verbose) -> ShardFeeder:
    """This worker's `ShardFeeder` for one call (what
    `compiler.feeding.model_feed.ModelFeed.lists` makes on one device): labels checked
    whole, then only this worker's shard expanded."""
    strategy = model.distribute_strategy
    check_batch_size(batch_size)
    inputs = as_inputs(x, what)
    if not inputs:
        raise ValueError(f"no inputs in {what}")
    loss = model.loss if with_labels and compat.compiled_loss(model) is not None else None
    labels = model.pipeline.labels(y, sample_weight, len(inputs), loss,
                                   "y" if what == "x" else f"{what} y")
    plan = replica_parts(len(inputs), batch_size, strategy.num_replicas_in_sync)
    skip = model.on_bad_example == "skip" and not raise_errors
    shards, bad = [], []
    for r in local_replicas(strategy):
        shard = ReplicaShard(r, [parts[r] for parts in plan])
        bad.extend(shard.expand(model, inputs, labels, skip, what, offset, verbose))
        shards.append(shard)
    model.feed.skipped.record(what, sorted(bad))
    signature = (model.pipeline.signature(), *labels.signature())
    feeder = ShardFeeder(model, shards, len(plan), shuffle, with_labels,
                         signature if with_labels else signature[:1])
    _build_state(model, feeder, labels)
    return feeder


def _build_state(model, feeder: ShardFeeder, labels: Labels) -> None:
    shard = next((s for s in feeder.shards if s.inputs), None)
    if shard is not None:
        build_state(model, lambda: model.pipeline.pack(shard.inputs[:1]),
                    None if labels.y is None else shard.labels.y[:1])


def build_state(model, arrays: Callable[[], dict], y: np.ndarray | None) -> None:
    """Creates, in the strategy's scope, the state a step would otherwise create on
    its first run: the layers' weights, the compiled metrics and loss, from a batch's
    packed `arrays()` (made only if needed) and its labels `y` (or None). Variables
    cannot be created inside `strategy.run`, and Keras would try to build them from
    the batch indices it iterates."""
    if not state_unbuilt(model):
        return
    compiled_metrics, compiled_loss = compat.compiled_metrics(model), compat.compiled_loss(model)
    metrics = compiled_metrics is not None and not compiled_metrics.built
    loss = compiled_loss is not None and not compiled_loss.built
    with model.distribute_strategy.scope():
        y_pred, _ = model.tracer.forward({k: tf.constant(v) for k, v in arrays().items()})
        if y is not None and (metrics or loss):
            y = tf.constant(y)
            if metrics:
                compiled_metrics.build(y, y_pred)
            if loss:
                compiled_loss.build(y, y_pred)


def state_unbuilt(model) -> bool:
    """Whether some of the state `build_state` creates is missing."""
    metrics, loss = compat.compiled_metrics(model), compat.compiled_loss(model)
    return not all(layer.built for layer in compat.inner_layers(model)) \
        or (metrics is not None and not metrics.built) \
        or (loss is not None and not loss.built)


def with_global_counts(x: dict) -> dict:
    """A replica's packed arrays plus the whole batch's input and metric-value
    counts (summed across the replicas), which make its loss its share."""
    ctx = tf.distribute.get_replica_context()
    bounds = tf.reshape(x["metric_bounds"], [-1, 2])
    local = tf.concat([tf.cast(x["batch_size"], tf.float32),
                       tf.cast(bounds[:, 1] - bounds[:, 0], tf.float32)], 0)
    total = tf.cast(tf.round(ctx.all_reduce("SUM", local)), tf.int32)
    return {**x, "global_batch_size": total[:1], "global_metric_counts": total[1:]}


class ReplicaSteps:
    """Runs a `Model` step on every replica's part of a batch; the interface of
    `compiler.training.steps.StepFunction` (what `make_*_function` wrap).

    Args:
        model: the `Model`.
        kind: "train", "test" or "predict".
        feeder: returns the `ShardFeeder` of the call under way.
    """

    def __init__(self, model, kind: str, feeder: Callable[[], ShardFeeder]):
        self.model, self.kind, self._feeder = model, kind, feeder
        self.strategy = model.distribute_strategy
        self._first = local_replicas(self.strategy)[0]
        step = {"train": model.train_step, "test": model.test_step,
                "predict": model.predict_step}[kind]
        self._replica_step = lambda data: step((with_global_counts(data[0]), *data[1:]))
        self._traced: dict = {}
        self._pass: tuple = (None, None)   # the (feeder, iterator) being read
        self._next = 0

    def _step(self, parts: list):
        """The step on this worker's replicas' parts (one `(arrays, y?, w?)` each)."""
        data = self.strategy.experimental_distribute_values_from_function(
            lambda ctx: parts[ctx.replica_id_in_sync_group - self._first])
        out = self.strategy.run(self._replica_step, args=(data,))
        if self.kind == "predict":
            return self._gather(out)
        logs = self.model.get_metrics_result()   # the replicas' metrics, summed
        if self.kind == "train":
            logs[STEP_FINITE] = self.strategy.experimental_local_results(out[STEP_FINITE])[0]
            logs[STEP_LOSS] = self.strategy.reduce("SUM", out[STEP_LOSS], axis=None)
        return logs

    def _gather(self, y_pred):
        """The outputs of every replica, in replica order (all workers')."""
        if isinstance(self.strategy, tf.distribute.MultiWorkerMirroredStrategy) \
                and compat.in_multi_worker_mode(self.strategy):
            return self.strategy.gather(y_pred, axis=0)
        return tf.concat(self.strategy.experimental_local_results(y_pred), 0)

    def run(self, i: int):
        """The step's outputs (cross-replica) on batch `i` of the current feeder."""
        feeder = self._feeder()
        parts = feeder.batch(i)
        if self.model.run_eagerly:
            outputs = self._step(tf.nest.map_structure(tf.convert_to_tensor, parts))
        else:
            key = tuple(tf.nest.flatten(feeder.signature))
            fn = self._traced.get(key)
            if fn is None:  # traced once per label layout, as on one device
                fn = self._traced[key] = tf.function(
                    self._step, input_signature=[[feeder.signature] * len(parts)],
                    autograph=False).get_concrete_function()
                self.model.tracer.after_trace(fn)  # compiler.training.weights
            outputs = fn(parts)
        if self.kind == "train":
            outputs = dict(outputs)
            finite, loss = outputs.pop(STEP_FINITE), outputs.pop(STEP_LOSS)
            if not bool(finite):
                raise NonFiniteLossError(feeder.examples(i), float(loss),
                                         self.model.feed.epoch, i)
        return outputs

    def _next_batch(self, source) -> int:
        """The index of the batch to run next, counted here from 0 for each new
        `source` (Keras' iterator: one pass) or feeder (one call). Keras' iterator
        only paces the steps: what its elements hold depends on how
        `tf.distribute` rebatches them for the cluster's shape."""
        feeder = self._feeder()
        if self._pass[0] is not feeder or self._pass[1] is not source:
            self._pass, self._next = (feeder, source), 0
        i, self._next = self._next, self._next + 1
        return i

    def on_iterator(self, iterator, steps: int):
        """For `train_function` / `test_function`: up to `steps` batches (until a
        stream ends, on every worker at the same step: `compiler.distribute.sharded_streams`)."""
        outputs = None
        n = self._feeder().n_batches  # None: a stream, until it ends
        for _ in next_indices(_Steps(iterator), steps):
            i = self._next_batch(iterator)
            if n is not None and i >= n:
                break
            try:
                outputs = self.run(i)
            except StopIteration:
                break
        if outputs is None:
            raise StopIteration
        return outputs

    def on_data(self, data: list):
        """For `predict_function`: the outputs of the batches Keras fetched."""
        outs = []
        for _ in data:
            try:
                outs.append(self.run(self._next_batch(None)))
            except StopIteration:  # a stream ended
                if not outs:
                    raise
                break
        return outs[0] if len(outs) == 1 else tf.concat(outs, 0)


class _Steps:
    """Keras' distributed iterator as a count of steps (0 for each)."""

    def __init__(self, iterator):
        self._it = iterator

    def __next__(self) -> int:
        next(self._it)
        return 0

