"""Streams under a `tf.distribute` strategy: each worker reads only its shard.

`Model.fit`, `evaluate` and `predict` take a stream (`compiler.Lines` files,
generators, `keras.utils.PyDataset`s, `tf.data` datasets) under `MirroredStrategy`
and `MultiWorkerMirroredStrategy` as on one device. Which items a worker reads, and
in what steps, is `compiler.feeding.shards`' rule: by file when a `Lines` has at least as
many files as there are workers, else by position (every worker's part of every
global batch, as a list's batch is cut); with one worker (`MirroredStrategy`) the
global batches are exactly one device's, so the weights follow one device's.

Each step, every replica expands, plans and packs its own part, in the stream
machinery of one device (`compiler.feeding.streams`): a background thread (or the
processes of `Model(workers=n)`) reads and plans a few steps ahead over a bounded
queue, and is stopped and joined when the call ends, early stop or error.

Equal steps on every worker. With several workers, before each step the workers
agree (`Census`, one small all-reduce) on whether any of them still has a step, on
how many inputs the step has in all, on the labels' dtype and shape, and on whether
one of them failed. So shards of unequal length never hang the gradients'
all-reduce: a worker whose shard has ended feeds its replicas empty parts (they add
nothing to the step) until every shard has ended, and the epoch ends on every
worker at the same step. Nothing is dropped: the remainder of a longer shard is
trained on, in steps with fewer inputs. With `steps_per_epoch` every epoch has
that many steps, a worker reading its shard on (started over when it ends, as one
device does). A step in which every input was skipped as bad is passed over on
every worker; a bad input or line raises on the worker that read it (a
`blocks.InputError` naming its position and, for `Lines`, its file and line), and
the other workers raise `WorkerFailedError` at the same step instead of waiting.

>>> import numpy as np, tensorflow as tf
>>> census = Census(tf.distribute.MirroredStrategy(["CPU:0"]), workers=1)
>>> agreed = census.agree(0, has_step=True, inputs=3, failed=False, layout=None)
>>> agreed.any_step, agreed.inputs, agreed.failed, agreed.layout
(True, 3, [], None)
"""

from __future__ import annotations

import itertools
import weakref
from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from refold.compiler.distribute.strategy import build_state, local_replicas, state_unbuilt
from refold.compiler.feeding.lists import Labels
from refold.compiler.feeding.shards import Part, Shard
from refold.compiler.feeding.streams import RawBatch, StreamFeeder, source_name

# Labels of rank at most 1 + MAX_RANK (the batch dimension and MAX_RANK more).
MAX_RANK = 4
_LAYOUT = 3 + MAX_RANK  # dtype, rank, sample weights?, the dimensions


class WorkerFailedError(RuntimeError):
    """Another worker failed reading its shard of a stream (its own error is in its
    log); every worker stops at the same step rather than wait for it.

    Attributes:
        workers: the indices of the workers that failed.
    """

    def __init__(self, workers: list[int], what: str):
        self.workers = workers
        super().__init__(f"worker{'s' if len(workers) > 1 else ''} "
                         f"{', '.join(map(str, workers))} failed reading its shard of "
                         f"{what} (its error is in its own output); every worker stops here")


@dataclass
class Agreed:
    """What the workers agreed on before a step (`Census.agree`).

    Attributes:
        any_step: some worker still has a step.
        inputs: the step's inputs on all workers together.
        failed: the workers that failed.
        layout: the labels' `(dtype, trailing shape, with sample weights)`, or None.
    """

    any_step: bool
    inputs: int
    failed: list[int]
    layout: tuple | None


class Census:
    """The workers' agreement before a step: one all-reduce of a few numbers per
    worker, traced once per strategy (every worker traces it at the same point).

    Args:
        strategy: the strategy.
        workers: how many workers it has.
    """

    _cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def __init__(self, strategy: tf.distribute.Strategy, workers: int):
        self.workers = workers
        self._size = workers * (3 + _LAYOUT)
        first = local_replicas(strategy)[0]

        def reduce(mine):
            zeros = tf.zeros_like(mine)
            values = strategy.experimental_distribute_values_from_function(
                lambda ctx: mine if ctx.replica_id_in_sync_group == first else zeros)
            out = strategy.run(  # (the identity puts the value on the replica's device)
                lambda v: tf.distribute.get_replica_context().all_reduce(
                    "SUM", tf.identity(v)), args=(values,))
            return strategy.experimental_local_results(out)[0]
        self._reduce = tf.function(reduce, autograph=False, input_signature=[
            tf.TensorSpec([self._size], tf.float32)])

    @classmethod
    def of(cls, strategy: tf.distribute.Strategy, workers: int) -> Census:
        """The strategy's census (one per strategy, so traced once)."""
        census = cls._cache.get(strategy)
        if census is None or census.workers != workers:
            census = cls._cache[strategy] = cls(strategy, workers)
        return census

    def agree(self, worker: int, has_step: bool, inputs: int, failed: bool,
              layout: tuple | None) -> Agreed:
        """Every worker's view, summed: each writes only its own row."""
        rows = np.zeros((self.workers, 3 + _LAYOUT), np.float32)
        rows[worker, :3] = has_step, inputs, failed
        rows[worker, 3:] = encode_layout(layout)
        rows = self._reduce(tf.constant(rows.reshape(-1))).numpy().reshape(rows.shape)
        layouts = {decode_layout(r[3:]) for r in rows if r[3] >= 0}
        if len(layouts) > 1:
            shown = sorted(map(str, layouts))
            raise ValueError(f"the workers' labels differ in dtype or shape ({shown}): "
                             "every worker must read labels of one kind")
        return Agreed(bool(rows[:, 0].any()), int(round(float(rows[:, 1].sum()))),
                      [w for w in range(self.workers) if rows[w, 2] > 0],
                      layouts.pop() if layouts else None)


def encode_layout(layout: tuple | None) -> np.ndarray:
    """A labels' layout as numbers (all -1 for none)."""
    out = np.full(_LAYOUT, -1.0, np.float32)
    if layout is not None:
        dtype, shape, weighted = layout
        out[:3] = tf.as_dtype(dtype).as_datatype_enum, len(shape), float(weighted)
        out[3:3 + len(shape)] = shape
    return out


def decode_layout(row: np.ndarray) -> tuple:
    rank = int(row[1])
    return (np.dtype(tf.as_dtype(int(row[0])).as_numpy_dtype).name,
            tuple(int(d) for d in row[3:3 + rank]), bool(row[2]))


def layout_of(labels: Labels, what: str) -> tuple | None:
    """`(dtype, trailing shape, with sample weights)` of a part's labels, or None."""
    if labels is None or labels.y is None:
        return None
    shape = labels.y.shape[1:]
    if len(shape) > MAX_RANK:
        raise ValueError(f"{what} labels of rank {labels.y.ndim}: under a tf.distribute "
                         f"strategy a stream's labels have rank at most {MAX_RANK + 1}")
    return labels.y.dtype.name, tuple(int(d) for d in shape), labels.w is not None


def empty_labels(layout: tuple | None) -> Labels:
    """The labels of a part with no inputs, in `layout`."""
    if layout is None:
        return Labels(None, None)
    dtype, shape, weighted = layout
    return Labels(np.zeros((0, *shape), dtype), np.zeros(0, np.float32) if weighted
                  else None)


class ShardedStreamFeeder(StreamFeeder):
    """The steps of one call over a stream under the model's strategy: `batch(i)` is
    one `(arrays, y?, sample_weight?)` per local replica (the `ShardFeeder`
    interface `compiler.distribute.strategy.ReplicaSteps` runs).

    Args:
        model: the `Model` (built in the strategy's scope).
        source, batch_size, labelled, **kwargs: as `StreamFeeder`'s; `batch_size` is
            the global batch size.
    """

    def __init__(self, model, source, batch_size: int, labelled: bool, **kwargs):
        strategy = model.distribute_strategy
        self.replicas = strategy.num_replicas_in_sync
        shard = Shard.of(batch_size, self.replicas, local_replicas(strategy))
        super().__init__(model.pipeline, source, batch_size, labelled, shard=shard,
                         **kwargs)
        self.model = model
        self.census = Census.of(strategy, shard.workers) if shard.workers > 1 else None
        if self.n_batches is not None:  # a PyDataset: worker w reads w, w+W, ...
            self.n_batches = -(-self.n_batches // shard.workers)
        self._layout: tuple | None = None
        self._empty: dict | None = None
        self._pending: list | None = None  # the first step, read by `prime`
        self._steps_left = None  # and the steps after it (of a generator)
        self._priming = False
        self.step_inputs = 0  # this worker's inputs in the last step
        self.prime()

    def dataset(self) -> tf.data.Dataset:
        """What Keras iterates: one item per replica per step (only the count of
        steps matters; see `compiler.distribute.strategy.ShardFeeder.dataset`)."""
        r = self.replicas
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = \
            tf.data.experimental.AutoShardPolicy.OFF
        options.experimental_optimization.apply_default_optimizations = False
        options.autotune.enabled = False
        steps = tf.data.Dataset.range(self.n_batches * r) if self.n_batches is not None \
            else tf.data.Dataset.counter()
        return steps.map(lambda j: j // r).batch(r).with_options(options)

    def batch(self, i: int) -> list[tuple]:
        """The local replicas' parts of the next step on which the workers agree."""
        if i == 0 and self._pending is not None:  # the step read by `prime`
            group, self._pending = self._pending, None
        else:
            group = self._agreed_step(restart=i == 0 or self._ahead is None, first=i == 0)
        return self._parts(group)

    def prime(self) -> None:
        """Before Keras' loop starts (which would build the model's state from the
        batch indices it iterates): reads and plans the first step with inputs, here
        and now, and builds the layers, compiled metrics and loss from it, in the
        strategy's scope. A stream that can be read again is started over when the
        loop begins (so that a resumed run reads past the right steps); the step
        read from a generator is kept for the loop, which reads on after it."""
        if not state_unbuilt(self.model):
            return
        keep = self._once is not None
        on_skip, self._on_skip = self._on_skip, (self._on_skip if keep else None)
        self._priming = True
        steps = self.batches()
        self._ahead = _Now(self._packed(steps))
        try:
            group = self._agreed_step(restart=False, first=True)
        finally:
            self._on_skip, self._priming = on_skip, False
            self._ahead.close()
            self._ahead = None
        parts = self._parts(group)
        first = next((p for p in parts if p[0]["batch_size"][0] > 0), parts[0])
        build_state(self.model, lambda: first[0],
                    first[1][:1] if self.with_labels and len(first) > 1 else None)
        if keep:
            self._pending, self._steps_left = group, steps
        else:
            steps.close()

    def start(self) -> None:
        """Starts a pass, or goes on with the steps of a generator after `prime`'s."""
        steps, self._steps_left = self._steps_left, None
        self._start(steps if steps is not None else self.batches())

    def batches(self):
        if self._priming:  # the first step, whatever the epoch
            resume, self._resume = self._resume, None
            try:
                yield from super().batches()
            finally:
                self._resume = resume
            return
        yield from super().batches()

    def _agreed_step(self, restart: bool, first: bool) -> list:
        """This worker's planned parts of the next step some worker has inputs for;
        sets the labels' layout the workers agreed on. A step in which no worker
        has an input (all skipped as bad) is passed over."""
        while True:
            group, error = self._next_group(restart)
            restart = False
            inputs = sum(len(raw.inputs) for _, _, raw in group or ())
            try:
                layout = self._local_layout(group)
            except ValueError as e:  # this worker's error: the others hear of it
                group, error, layout = None, e, None
            if self.census is None:
                if error is not None:
                    raise error
                any_step, total = group is not None, inputs
            else:
                agreed = self.census.agree(self.shard.worker, group is not None, inputs,
                                           error is not None, layout)
                if error is not None:
                    raise error
                if agreed.failed:
                    raise WorkerFailedError(agreed.failed, self.what)
                any_step, total, layout = agreed.any_step, agreed.inputs, agreed.layout
            if not any_step:
                if first:
                    raise ValueError(f"no inputs in {self.what}: the stream "
                                     f"{source_name(self.source)} gave none")
                raise StopIteration
            if total:
                self._layout = layout
                return group or []

    def _next_group(self, restart: bool) -> tuple:
        """`(group or None at the end, error or None)`: the next step planned."""
        if restart:
            self.start()
        try:
            return self._ahead.next(), None
        except Exception as e:  # raised once every worker has heard of it
            return None, e

    def _local_layout(self, group) -> tuple | None:
        """The labels' layout of this worker's parts (which must agree), or the last
        one agreed if they have no input."""
        layouts = {layout_of(labels, self.what) for arrays, labels, _ in group or ()
                   if arrays is not None}
        layouts.discard(None)
        if len(layouts) > 1:
            raise ValueError(f"{self.what}: labels of different dtypes or shapes in one "
                             f"step ({sorted(map(str, layouts))})")
        return layouts.pop() if layouts else self._layout

    def _parts(self, group: list) -> list[tuple]:
        """One `(arrays, y?, w?)` per local replica; empty parts in the agreed layout."""
        layout = self._layout
        out, raws = [], []
        for k in range(self.shard.parts):
            arrays, labels, raw = group[k] if group else (None, None, None)
            if arrays is None:
                arrays, labels = self._empty_arrays(), empty_labels(layout)
            if raw is not None:
                raws.append(raw)
            out.append((arrays, *labels.batch(slice(None))) if self.with_labels
                       else (arrays,))
        spec = (self.pipeline.signature(), *empty_labels(layout).signature())
        self.signature = spec if self.with_labels else spec[:1]
        self.current = _merged(raws)
        self.step_inputs = len(self.current.inputs)
        return out

    def _empty_arrays(self) -> dict:
        if self._empty is None:
            self._empty = self.pipeline.pack([])
        return self._empty

    # --- in the planning thread ------------------------------------------------------

    def _step(self, parts: list[Part]) -> list[RawBatch]:
        return [self._raw(p) for p in parts]

    def _packed(self, steps, workers=None, stop=lambda: False, keep_empty=True):
        """One `(arrays or None, labels or None, raw)` per local replica, per step."""
        flat = (raw for step in steps for raw in step)
        packed = super()._packed(flat, workers, stop, keep_empty=True)
        try:
            while True:
                group = list(itertools.islice(packed, self.shard.parts))
                if not group:
                    return
                yield group
        finally:
            packed.close()


def _merged(raws: list[RawBatch]) -> RawBatch:
    """This worker's inputs of a step, its parts one after the other."""
    if not raws:
        return RawBatch([], None, None, np.zeros(0, np.int64))
    where = None if any(r.where is None for r in raws) else \
        [w for r in raws for w in r.where]
    return RawBatch([x for r in raws for x in r.inputs], None, None,
                    np.concatenate([r.positions for r in raws]), where)


class _Now:
    """Items read in the caller's thread when asked, with `Prefetch`'s interface
    (`compiler.feeding.prefetch`)."""

    def __init__(self, items):
        self._items, self._done = items, False

    def next(self):
        if self._done:
            return None
        try:
            return next(self._items)
        except StopIteration:
            self._done = True
            return None
        except BaseException:
            self._done = True
            raise

    def ended(self) -> bool:
        return True

    def close(self) -> None:
        self._items.close()
