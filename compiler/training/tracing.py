"""`StepTracer`: what a `Model`'s traced steps compute, and the step functions that
run them.

A step takes one packed batch (`compiler.feeding.packed`): the forward pass runs
the engine's executor (or its XLA form, `compiler.feeding.xla_buckets`) and reads
the block's output and metric values out of its buffers; a training step adds the
loss (`compiler.training.metrics`), its gradients and an update applied only if
they are finite. Keras' loop calls the step functions `function(kind)` makes
(`compiler.training.steps.StepFunction`, or `ReplicaSteps` under a strategy).

Apart from `Model` so that the Keras class holds the Keras hooks (`train_step`
and its kin delegate here) and this one the traced computation; the strategy's
steps use the same public methods.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import keras
import tensorflow as tf

from refold.blocks.evaluation.training_mode import training_mode
from refold.compiler.distribute.strategy import ReplicaSteps, is_distributed
from refold.compiler.feeding.xla_buckets import XlaBatches
from refold.compiler.training.steps import (
    STEP_FINITE,
    STEP_LOSS,
    StepFunction,
    all_finite,
    apply_if_finite_on_every_replica,
)
from refold.compiler.training.weights import TracedWeights, declared_ids
from refold.scheduler.gradient_mode import GradientMode


class StepTracer:
    """The traced computation of a `Model`.

    Args:
        model: the `Model`; its compiler, program, block, feed, loss and metrics.
        warned: ids of the variables already warned of as undeclared
            (`compiler.training.weights.check_functions`).
    """

    def __init__(self, model, warned: set[int]):
        self.model = model
        self.out_type = model.output_type_id
        self._traced_weights = TracedWeights(
            model.block, lambda: declared_ids(model.block_layers, model.block_variables),
            warned)
        self._xla: XlaBatches | None = None

    # --- inside the traced steps ---------------------------------------------------

    def forward(self, x: dict, gradient_mode: GradientMode | None = None):
        """`(y_pred or None, {metric id: values})` for one packed batch (`gradient_mode`:
        how the executor's loop is differentiated in a training step; None: as the
        executor says)."""
        if "metric_counts" in x:  # a batch in its XLA form (compiler.feeding.xla_buckets)
            return self.xla().forward(x)
        program = self.model.program
        outs = self.model.compiler.executor.compute(x, gradient_mode)
        n = x["batch_size"][0]
        y_pred = outs[self.out_type][:n] if self.out_type is not None else None
        bounds = tf.reshape(x["metric_bounds"], [-1, 2])
        values = {}
        for m, t in enumerate(program.metric_types):
            values[m] = outs[program.type_id[t]][bounds[m, 0]:bounds[m, 1]]
        return y_pred, values

    def seed(self):
        """The seed of a training step's random draws (`blocks.noise`): `(seed,
        optimizer step, replica)`, so a run resumed from a checkpoint draws what an
        uninterrupted one does; None when no block draws (nothing to compute)."""
        model = self.model
        if model.program.key_type is None:
            return None
        optimizer = getattr(model, "optimizer", None)
        step = tf.cast(optimizer.iterations, tf.int32) if optimizer is not None \
            else tf.constant(0, tf.int32)
        replica = tf.distribute.get_replica_context()
        replica = tf.constant(0, tf.int32) if replica is None else \
            tf.cast(replica.replica_id_in_sync_group, tf.int32)
        return tf.stack([tf.cast(tf.constant(model.seed, tf.int64), tf.int32), step, replica])

    def train(self, x, y=None, sample_weight=None, gradient_mode: GradientMode | None = None):
        """One optimizer step on a packed batch: `(loss, y_pred, metric values, finite)`.

        The update is applied only if the loss and every gradient are
        finite (`finite`, a scalar bool; the weights and the optimizer's state stay
        those of the last good step otherwise). On a replica's part of a batch
        (`compiler.distribute.strategy`) the replicas agree whether to apply it.

        Its ops compute in training mode (`blocks.evaluation.training_mode`), the gradient too:
        the engine's replayed backward pass runs ops again and must draw what the
        forward pass drew. `gradient_mode`: how the executor's loop is differentiated
        (`scheduler.gradient_mode`; None: as the executor says)."""
        with training_mode(True, self.seed()):
            return self._step_on(x, y, sample_weight, gradient_mode)

    def _step_on(self, x, y, sample_weight, gradient_mode):
        """`train` in training mode."""
        model = self.model
        optimizer = model.optimizer
        weights = model.trainable_weights
        with tf.GradientTape() as tape:
            y_pred, values = self.forward(x, gradient_mode)
            loss = model.loss_and_metrics.total(x, y, y_pred, sample_weight, values)
            scaled = optimizer.scale_loss(loss)
        if not weights:
            return loss, y_pred, values, tf.math.is_finite(tf.cast(loss, tf.float32))
        grads = tape.gradient(scaled, weights)
        grads = [tf.zeros_like(w) if g is None else g for g, w in zip(grads, weights)]
        if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
            # a loss-scaling optimizer skips a step whose scaled gradients overflow
            # (and lowers the scale) itself, on every replica alike: only a
            # non-finite loss is bad there
            optimizer.apply_gradients(zip(grads, weights))
            return loss, y_pred, values, tf.math.is_finite(tf.cast(loss, tf.float32))
        finite = all_finite(loss, grads)
        if "global_batch_size" in x:
            finite = apply_if_finite_on_every_replica(optimizer, finite, grads, weights)
            return loss, y_pred, values, finite

        def apply():
            optimizer.apply_gradients(zip(grads, weights))
            return tf.constant(True)
        tf.cond(finite, apply, lambda: tf.constant(False))
        return loss, y_pred, values, finite

    def train_step(self, data, gradient_mode: GradientMode | None = None) -> dict:
        """`Model.train_step` with the executor's loop differentiated as
        `gradient_mode` says: the logs, plus the step's finiteness and loss, which
        the step function takes out (and raises on a bad step)."""
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        loss, y_pred, values, finite = self.train(x, y, sample_weight, gradient_mode)
        logs = self.model.loss_and_metrics.update(x, y, y_pred, sample_weight, values, loss)
        return {**logs, STEP_FINITE: finite, STEP_LOSS: loss}

    def test_step(self, data) -> dict:
        """`Model.test_step`: the loss and metrics of a packed batch."""
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        y_pred, values = self.forward(x)
        scores = self.model.loss_and_metrics
        loss = scores.total(x, y, y_pred, sample_weight, values)
        return scores.update(x, y, y_pred, sample_weight, values, loss)

    # --- around the traced steps ---------------------------------------------------

    def after_trace(self, concrete_fn) -> None:
        """Called with each traced step: warns of undeclared weights it reads
        (`compiler.training.weights.TracedWeights`)."""
        self._traced_weights(concrete_fn)

    def xla(self) -> XlaBatches:
        """The XLA form of the model's batches (`compiler.feeding.xla_buckets`), made
        on first use."""
        if self._xla is None:
            self._xla = XlaBatches(self.model)
        return self._xla

    def build_optimizer(self) -> None:
        """Builds the optimizer's slots before the first step: they cannot be made
        inside the traced step's guarded update (a `tf.cond` branch), and making them
        there would make Keras trace it twice."""
        model = self.model
        optimizer = getattr(model, "optimizer", None)  # none before compile
        if optimizer is not None and not optimizer.built:
            with model.distribute_strategy.scope():  # its slots mirrored, as the weights
                optimizer.build(model.trainable_variables)

    def function(self, kind: str, step_for_mode: Callable | None = None
                 ) -> StepFunction | ReplicaSteps:
        """The step function Keras' loop calls for `kind` ("train", "test",
        "predict"): the model's own `train_step` (and kin) on the batches of the
        feeder `model.feed.current(kind)`. `step_for_mode`: the training step to
        trace per `GradientMode` (`Model.training_step`), None: `train_step` as it is
        (a subclass's own)."""
        model = self.model
        feed = model.feed

        def feeder():
            return feed.current(kind)
        if is_distributed(model.distribute_strategy):  # compiler.distribute.strategy
            if model.jit_compile:
                raise ValueError("jit_compile=True is not supported under a tf.distribute "
                                 "strategy yet: leave it False or 'auto' there")
            return ReplicaSteps(model, kind, feeder)
        step = {"train": model.train_step, "test": model.test_step,
                "predict": model.predict_step}[kind]
        return StepFunction(step, feeder, lambda: bool(model.run_eagerly),
                            lambda: feed.epoch,
                            xla=lambda: self.xla() if model.jit_compile else None,
                            choice=(model.weight_grads if kind == "train"
                                    else model.inference_executor),
                            step_for_mode=step_for_mode,
                            before_trace=model.loss_and_metrics.build_compiled,
                            after_trace=self.after_trace,
                            straight=self._straight_predict if kind == "predict" else None,
                            looped=(model.compiler.straight_inference.looped
                                    if kind == "predict" else None))

    def _straight_predict(self, feeder):
        """`predict_step`'s output on the batch `feeder` packed last, run straight-line
        (`compiler.straight_inference`) if it is small; None otherwise, or where the
        model's `predict_step` is its own (a subclass's)."""
        model = self.model
        plan = getattr(feeder, "last_plan", None)
        if plan is None or self.out_type is None or not getattr(
                type(model).predict_step, "block_output_only", False):
            return None
        return model.compiler.straight_inference.outputs_of(plan.plan, self.out_type, plan.size)

    @contextlib.contextmanager
    def jit_for_call(self, jit_compile):
        """`jit_compile` for one `fit`/`evaluate`/`predict` call (None: the model's)."""
        model = self.model
        if jit_compile is None:
            yield
            return
        before = model.jit_compile
        model.jit_compile = jit_compile
        try:
            yield
        finally:
            model.jit_compile = before

