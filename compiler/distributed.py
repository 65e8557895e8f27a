"""Training a `Model` on several devices with `tf.distribute.MirroredStrategy`.

Each replica runs its own whole schedule: a global batch of inputs is split into
one contiguous part per replica, each part is expanded, scheduled and packed on
its own, and every replica runs `Model`'s training step on its part. Each part's
loss is its share, so that the gradients the strategy sums across replicas are
those of the loss of the whole batch on one device: a labelled loss counts
`n_part / n_global` of its replica's mean, and a `td.Metric` loss sums its values
and divides by the number of values in the whole batch.

Keras' `fit` does not work under a strategy here (its first step tries to average
one input batch across replicas, and schedules of different sizes cannot be
averaged); `MirroredTrainer` is a small custom loop on public APIs only
(`strategy.run`, `experimental_distribute_values_from_function`, the Keras
optimizer). Build the block and the `Model` inside `strategy.scope()` so that the
layers' weights are mirrored:

>>> import keras, tensorflow as tf
>>> import blocks as td
>>> from compiler import Model, MirroredTrainer
>>> strategy = tf.distribute.MirroredStrategy(["CPU:0"])   # or several devices
>>> with strategy.scope():
...     block = td.Map(td.Scalar() >> td.Function(lambda x: x[:, None]) >> td.FC(1)) \\
...         >> td.Sum() >> td.Function(lambda s: tf.reduce_sum(s, 1)) >> td.Metric("loss")
...     model = Model(block)
...     model.compile(optimizer=keras.optimizers.SGD(0.1))
>>> trainer = MirroredTrainer(model, strategy)
>>> history = trainer.fit([[1.0, 2.0], [3.0], [0.5]], batch_size=2, epochs=2, verbose=0)
>>> len(history["loss"])
2
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import tensorflow as tf

from compiler.model import Model
from compiler.pipeline import Labels, as_inputs, check_batch_size
from compiler.steps import NonFiniteLossError


class MirroredTrainer:
    """A custom training loop for `Model` under a `tf.distribute` strategy.

    Args:
        model: a compiled `Model` (with an optimizer) built in `strategy.scope()`.
        strategy: the strategy (default: the current one).
    """

    def __init__(self, model: Model, strategy: tf.distribute.Strategy | None = None):
        if model.optimizer is None:
            raise ValueError("compile the model (with an optimizer) before training it")
        self.model = model
        self.strategy = strategy or tf.distribute.get_strategy()
        self.replicas = self.strategy.num_replicas_in_sync
        self._step = tf.function(self._distributed_step, reduce_retracing=True,
                                 autograph=False)

    # --- one step ---------------------------------------------------------------

    def _replica_step(self, arrays: dict, y=None):
        # the step of `Model.fit`; the arrays' global counts make its loss this part's share
        loss, _, _, _ = self.model._train_on(arrays, y, guard=False)
        return loss

    def _distributed_step(self, per_replica_arrays, per_replica_y=None):
        args = (per_replica_arrays,) if per_replica_y is None else \
            (per_replica_arrays, per_replica_y)
        losses = self.strategy.run(self._replica_step, args=args)
        return self.strategy.reduce("SUM", losses, axis=None)

    def train_step(self, inputs: list, y=None) -> float:
        """One optimizer step on a global batch; returns its loss (as on one device).

        The batch needs at least one input per replica."""
        if len(inputs) < self.replicas:
            raise ValueError(f"a batch of {len(inputs)} inputs cannot feed "
                             f"{self.replicas} replicas; use batches of at least "
                             f"{self.replicas}")
        parts = np.array_split(np.arange(len(inputs)), self.replicas)
        feeds = [self.model.pipeline.pack([inputs[i] for i in p]) for p in parts]
        n_metrics = len(self.model.program.metric_names)
        counts = np.zeros(n_metrics, np.int64)
        for f in feeds:
            b = f["metric_bounds"].reshape(-1, 2)
            counts += b[:, 1] - b[:, 0]
        for f in feeds:
            f["global_batch_size"] = np.array([len(inputs)], np.int32)
            f["global_metric_counts"] = counts.astype(np.int32)
        arrays = self.strategy.experimental_distribute_values_from_function(
            lambda ctx: {k: tf.constant(v) for k, v in
                         feeds[ctx.replica_id_in_sync_group].items()})
        if y is None:
            return float(self._step(arrays))
        y = np.asarray(y)
        ys = self.strategy.experimental_distribute_values_from_function(
            lambda ctx: tf.constant(y[parts[ctx.replica_id_in_sync_group]]))
        return float(self._step(arrays, ys))

    # --- epochs -------------------------------------------------------------------

    def fit(self, x: Any, y=None, batch_size: int = 32, epochs: int = 1,
            shuffle: bool = True, verbose: int = 1) -> dict:
        """Trains for `epochs` on `x` (and labels `y`); returns `{"loss": [per epoch]}`.

        A last batch with fewer inputs than replicas joins the batch before it.
        Inputs are expanded once up front (bad inputs raise or are skipped as the
        model's `on_bad_example` says); epoch `e` shuffles with `model.seed + e`.
        """
        m = self.model
        check_batch_size(batch_size)
        inputs = as_inputs(x)
        kept = np.arange(len(inputs))  # the inputs' indices in x, once bad ones are skipped
        inputs, labels = m._expand(inputs, Labels(y, None, len(inputs)))
        kept = np.setdiff1d(kept, m.skipped_examples)
        n = len(inputs)
        if n < self.replicas:
            raise ValueError(f"{n} inputs cannot feed {self.replicas} replicas")
        # a last batch too small to give every replica an input joins the one before
        starts = list(range(0, n, batch_size))
        if len(starts) > 1 and n - starts[-1] < self.replicas:
            starts.pop()
        bounds = list(zip(starts, starts[1:] + [n]))
        n_batches = len(bounds)
        history: dict[str, list] = {"loss": []}
        for epoch in range(epochs):
            order = np.random.default_rng(m.seed + epoch).permutation(n) if shuffle \
                else np.arange(n)
            bar = keras.utils.Progbar(n_batches, verbose=verbose)
            total = 0.0
            for b, (lo, hi) in enumerate(bounds):
                idx = order[lo:hi]
                loss = self.train_step([inputs[i] for i in idx],
                                       None if labels.y is None else labels.y[idx])
                if not np.isfinite(loss):
                    raise NonFiniteLossError(kept[idx], loss, epoch, b, applied=True)
                total += loss * len(idx)
                bar.update(b + 1, [("loss", loss)])
            history["loss"].append(total / n)  # per-example weighting, as Keras logs
        return history
