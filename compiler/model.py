"""`Model`: a compiled block expression that is a `keras.Model`.

`fit`, `evaluate` and `predict` take lists of Python inputs (trees, sequences,
dicts), or streams of them (generators, `keras.utils.PyDataset`s, files read line by
line: `compiler.feeding.streams`). Each input of a list is expanded once (example graphs
are cached across epochs);
each batch is merged, scheduled and packed into index tensors when Keras' loop
steps to it (`compiler.feeding.lists`, `compiler.training.steps`); one traced function runs
every batch. `save` writes the block expression (`blocks.serialization.config`), the
weights and the optimizer's state to a `.keras` file that `keras.models.load_model`
reads back; it is atomic (`compiler.saving`). A TensorFlow error in a step
names the input that caused it (`compiler.training.blame`); a step whose loss or gradients
are not finite is not applied and stops `fit` with `NonFiniteLossError`.

Two ways to give the loss:

- Keras style: `y` labels and `compile(loss=...)`; the block's output (one tensor
  per input, e.g. logits) is `y_pred`.
- Fold style: losses live inside the input and are emitted by `td.Metric` blocks.
  Every metric whose name ends with `"loss"` is a loss term: the training loss is
  the sum over such metrics of the mean of their values in the batch (the logged
  epoch loss averages those batch losses weighted by inputs per batch, as Keras
  does). All other metrics are reported as their mean over all values of the epoch.

>>> import numpy as np, tensorflow as tf, keras
>>> import refold as td
>>> from refold.compiler import Model
>>> keras.utils.set_random_seed(0)
>>> block = td.Map(td.Scalar() >> td.Function(lambda x: x[:, None])) >> td.Sum() \\
...     >> td.FC(2, activation=None)
>>> model = Model(block)
>>> model.compile(optimizer=keras.optimizers.Adam(0.1),
...               loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
...               metrics=["accuracy"])
>>> xs = [[1.0, 2.0], [-3.0], [0.5], [-1.0, -0.5], [2.0], [-2.0, 1.0]]
>>> ys = np.array([1, 0, 1, 0, 1, 0])
>>> history = model.fit(xs, ys, batch_size=3, epochs=30, verbose=0)
>>> history.history["accuracy"][-1]
1.0
>>> model.predict([[4.0], [-4.0]], verbose=0).argmax(1).tolist()
[1, 0]
"""

from __future__ import annotations

import contextlib
import itertools
import json
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from refold import compat
from refold.blocks.block import Block
from refold.blocks.errors import InputError
from refold.blocks.evaluation.precision import global_policy
from refold.blocks.evaluation.training_mode import training_mode
from refold.blocks.layers import is_keras_layer
from refold.blocks.serialization.config import deserialize, serialize
from refold.blocks.types import TensorType
from refold.blocks.validation import validate
from refold.callsite import user_line, warn
from refold.compiler.compiler import Compiler
from refold.compiler.distribute.sharded_streams import ShardedStreamFeeder
from refold.compiler.distribute.strategy import ReplicaSteps, is_distributed, sharded_feeder
from refold.compiler.feeding import packed
from refold.compiler.feeding.lists import (
    InputPipeline,
    Labels,
    as_inputs,
    check_batch_size,
    class_weights,
    hold_out,
    split_validation,
)
from refold.compiler.feeding.streams import StreamFeeder, is_stream, reads_once
from refold.compiler.feeding.xla_buckets import XlaBatches, metric_weights
from refold.compiler.saving import atomic_write, refuse_after_nan, write_saved_model
from refold.compiler.training.blame import blaming
from refold.compiler.training.predict_loop import predict_loop
from refold.compiler.training.steps import (
    STEP_FINITE,
    STEP_LOSS,
    StepFunction,
    WeightGradsChoice,
    all_finite,
    apply_if_finite_on_every_replica,
)
from refold.compiler.training.weights import (
    TracedWeights,
    build_functions,
    check_functions,
    declared_ids,
)
from refold.scheduler.gradient_mode import GradientMode


@keras.saving.register_keras_serializable(package="refold")
class Model(keras.Model):
    """A block expression compiled for batched training and inference with Keras.

    Args:
        block: the root block; its input is one Python object per example.
        scheduler: `"agenda"` (default), `"depth"` (see `scheduler.schedules`) or
            `"auto"`: the first batches run under each in turn and the faster is kept
            (`model.compiler.scheduler_chosen`; `compiler.scheduler_choice`).
        loss_metrics: names of the `td.Metric`s that are loss terms. Default: those
            whose name ends with `"loss"`.
        on_bad_example: `"raise"` (default): an input that does not fit the block
            raises `blocks.InputError` naming its index in the dataset and the block
            path; `"skip"`: such inputs are left out, counted and reported
            (`model.skipped_examples` holds the indices skipped by the last call,
            `model.skipped_validation_examples` those of its validation data).
            `predict` never skips: it gives one output per input.
        seed: seeds the per-epoch shuffling (epoch `e` uses `seed + e`), so a run
            resumed from a checkpoint sees the same batches as an uninterrupted one.
        name: the Keras model name.
        cache: keep inputs' expanded graphs (found by the input object, checked
            against a fingerprint of its content) so later epochs skip expansion:
            `True` up to `compiler.compiler.DEFAULT_CACHE_SIZE` inputs, an int up to
            that many (the least recently used dropped), `False` none. An input
            changed in place is expanded again; cached inputs are held in memory.
        workers: expand the inputs of in-memory lists never seen before, and the
            batches of streams (`compiler.feeding.streams`), in that many forked worker
            processes (see `Compiler`), for machines with spare cores; 0 (default)
            expands in this process (streams in a background thread).

    `model.block` is the block expression (after loading a saved model too).

    Weights are those of the layers the block uses (`td.FC`, `td.Embedding`,
    `td.ScopedLayer`, Keras layers in `td.Function`) and of `td.FromTensor`
    variables; they are shared with the blocks, so `block.eval` sees training.

    `model.weight_grads` (a `compiler.training.steps.WeightGradsChoice`) decides per training
    batch how the loop is differentiated: for batches of small loop launches (batch
    1, say) the engine replays the loop backward itself and takes the weight
    gradients once per step (`scheduler.reverse`), for the others TensorFlow
    differentiates the loop with a weight gradient in every backward iteration; its
    `max_rows` (rows per launch on average, `0`: never) changes the threshold. Each
    choice is its own trace; a batch near the threshold (within a factor of 2) runs
    on the other choice's trace if only that one exists.

    `model.inference_executor` (the compiler's, a `compiler.training.tf_executor.
    InferenceExecutorChoice`) runs `predict` and `evaluate` batches of small loop
    launches (batch 1 of a sequence model, say: at most `max_rows` rows a launch on
    average, `0`: never) on TensorFlow's single-threaded executor, which measured
    faster there; each choice is its own trace, as above.

    Mixed precision: under a `"mixed_float16"` or `"mixed_bfloat16"` policy (the
    global one, or that of the block's layers) layers compute in the low dtype, the
    engine holds float32-typed values in it, and variables, losses and metrics stay
    float32 (`blocks.evaluation.precision`); under float16, `compile` wraps the optimizer in
    Keras' `LossScaleOptimizer`, as for any Keras model of that policy.
    """

    def __init__(self, block=None, scheduler: str = "agenda", loss_metrics=None,
                 on_bad_example: str = "raise", seed: int = 0, name: str | None = None,
                 cache: bool | int = True, workers: int = 0, _factory: tuple | None = None,
                 **kwargs):
        super().__init__(name=name, **kwargs)
        if block is None:
            raise TypeError("Model needs a block expression: Model(block)")
        if on_bad_example not in ("raise", "skip"):
            raise ValueError(f"on_bad_example must be 'raise' or 'skip', got {on_bad_example!r}")
        self.compiler = Compiler.create(block, scheduler=scheduler, cache=cache,
                                        workers=workers)
        self.program = self.compiler.program
        _mixed_policy(self, self.compiler.compute_dtype)
        self.pipeline = InputPipeline(self.compiler)
        # where a training batch takes the loop's weight gradients (compiler.training.steps)
        self.weight_grads = WeightGradsChoice(self.compiler.executor)
        # which TensorFlow executor runs an inference batch (compiler.training.tf_executor)
        self.inference_executor = self.compiler.inference_executor
        self.scheduler = scheduler
        self.on_bad_example = on_bad_example
        self.seed = int(seed)
        self._skipped = _Skipped()
        self._factory = _factory
        self._epoch = 0
        self._nan_seen = False
        self._feeders: dict = {}   # role -> the BatchFeeder of the call under way
        self._test_role = "test"
        build_functions(self.block)
        layers, variables = _weights_of(self.block)
        warned = check_functions(self.block, layers, variables)
        self.block_layers = layers          # tracked by Keras: weights, checkpoints
        self.block_variables = variables
        self._traced_weights = TracedWeights(
            self.block, lambda: declared_ids(self.block_layers, self.block_variables),
            warned)
        names = self.program.metric_names
        if loss_metrics is None:
            loss_metrics = [n for n in names if n.endswith("loss")]
        unknown = sorted(set(loss_metrics) - set(names))
        if unknown:
            raise ValueError(f"loss_metrics {unknown} are not metrics of the block; its "
                             f"metrics are {names}")
        self._loss_ids = [names.index(n) for n in loss_metrics]
        self.loss_metrics = list(loss_metrics)
        # every block metric is reported, except one named "loss" (that is Keras' total)
        self.block_metric_trackers = [keras.metrics.Mean(name=n) for n in names if n != "loss"]
        self._tracked_ids = [m for m, n in enumerate(names) if n != "loss"]
        out = self.block.output_type
        self._out_type = self.program.type_id[out] if isinstance(out, TensorType) else None
        self.built = True

    @classmethod
    def from_factory(cls, factory: str, factory_kwargs: dict | None = None, **kwargs) -> Model:
        """A model whose block is built by `factory` ("package.module:function"),
        called with `factory_kwargs`, and which saves that call instead of the block
        expression.

        `Model(block)` saves the expression itself (`blocks.serialization.config`), which
        is what most users want. This stays for the cases where saving the call is
        better: the file then holds no code, so it loads with `safe_mode=True` even
        when the block has lambdas or closures (which `Model(block)` saves as
        bytecode, loadable only with `safe_mode=False`); a load picks up fixes to
        the factory's code; and arguments such as a pretrained embedding table are
        not copied into the config. Loading calls the factory again in the loading
        process, so it must be importable there.
        """
        import importlib
        module, _, fn = factory.partition(":")
        if not fn:
            raise ValueError(f"factory must look like 'package.module:function', got {factory!r}")
        build = getattr(importlib.import_module(module), fn)
        factory_kwargs = dict(factory_kwargs or {})
        return cls(build(**factory_kwargs), _factory=(factory, factory_kwargs), **kwargs)

    def get_config(self) -> dict:
        """The block expression (`blocks.serialization.config.serialize`), or the factory
        call of `Model.from_factory`, the model's arguments, and the mixed policy it
        computes under (its block is rebuilt under it when loaded)."""
        low = self.compiler.compute_dtype
        config = {"scheduler": self.scheduler, "seed": self.seed, "name": self.name,
                  "mixed_precision": f"mixed_{low}" if low else None,
                  "on_bad_example": self.on_bad_example, "loss_metrics": self.loss_metrics,
                  "cache": self.compiler.cache_size, "workers": self.compiler.workers}
        if self._factory is not None:
            return {"factory": self._factory[0], "factory_kwargs": self._factory[1],
                    **config}
        return {"block": serialize(self.block), **config}

    @classmethod
    def from_config(cls, config: dict) -> Model:
        config = dict(config)
        # a mixed model's layers are rebuilt under its policy (blocks.evaluation.precision)
        with global_policy(config.pop("mixed_precision", None)):
            if "factory" in config:
                return cls.from_factory(config.pop("factory"), config.pop("factory_kwargs"),
                                        **config)
            return cls(deserialize(config.pop("block")), **config)

    # --- the traced computation ---------------------------------------------------

    def _forward(self, x: dict, gradient_mode: GradientMode | None = None):
        """`(y_pred or None, {metric id: values})` for one packed batch (`gradient_mode`:
        how the executor's loop is differentiated in a training step; None: as the
        executor says)."""
        if "metric_counts" in x:  # a batch in its XLA form (compiler.feeding.xla_buckets)
            return self._xla_batches().forward(x)
        outs = self.compiler.executor.compute(x, gradient_mode)
        n = x["batch_size"][0]
        y_pred = outs[self._out_type][:n] if self._out_type is not None else None
        bounds = tf.reshape(x["metric_bounds"], [-1, 2])
        values = {}
        for m, t in enumerate(self.program.metric_types):
            values[m] = outs[self.program.type_id[t]][bounds[m, 0]:bounds[m, 1]]
        return y_pred, values

    def __call__(self, inputs, *args, **kwargs):
        """`model(inputs)` on a list of Python inputs: their outputs as one tensor
        `[N, ...]`, differentiable under `tf.GradientTape`, as a Keras model called on
        a batch (`predict` gives the same values as numpy). On a batch's packed arrays
        (what the step functions pass), Keras' own call."""
        if isinstance(inputs, dict) and "batch_size" in inputs:
            return super().__call__(inputs, *args, **kwargs)
        if self._out_type is None:
            raise TypeError(
                f"model(inputs) returns one tensor per input, but this block's output is "
                f"{self.block.output_type}"
                + (" with metrics" if self.program.metric_types else "")
                + ": use model.predict(inputs) (results in block.eval's form)")
        arrays = self.packed_inputs(as_inputs(inputs, "inputs"))
        return super().__call__({k: tf.convert_to_tensor(v) for k, v in arrays.items()},
                                *args, **kwargs)

    def call(self, inputs: dict, training: bool = False):
        with training_mode(training is True, self._step_seed() if training is True else None):
            y_pred, _ = self._forward(inputs)
        return y_pred

    def _step_seed(self):
        """The seed of a training step's random draws (`blocks.noise`): `(seed,
        optimizer step, replica)`, so a run resumed from a checkpoint draws what an
        uninterrupted one does; None when no block draws (nothing to compute)."""
        if self.program.key_type is None:
            return None
        optimizer = getattr(self, "optimizer", None)
        step = tf.cast(optimizer.iterations, tf.int32) if optimizer is not None \
            else tf.constant(0, tf.int32)
        replica = tf.distribute.get_replica_context()
        replica = tf.constant(0, tf.int32) if replica is None else \
            tf.cast(replica.replica_id_in_sync_group, tf.int32)
        return tf.stack([tf.cast(tf.constant(self.seed, tf.int64), tf.int32), step, replica])

    def _total_loss(self, x, y, y_pred, sample_weight, values):
        """The loss of one packed batch: Keras' loss of the labels (with the weight
        penalties) plus, for each loss metric, the mean of its values.

        Arrays packed as one replica's part of a global batch (`compiler.distribute.strategy`
        adds "global_batch_size" and "global_metric_counts") give that part's share
        instead, so that the sum of the shares over the replicas is the loss of the
        whole batch on one device: the labelled mean counts `n_part / n_global`, a
        metric loss divides its sum by its number of values in the global batch,
        and the weight penalties count once over all replicas.
        """
        part = "global_batch_size" in x
        labelled = y is not None and compat.compiled_loss(self) is not None
        terms = []
        if labelled and not part:
            terms.append(self.compute_loss(x=x, y=y, y_pred=y_pred,
                                           sample_weight=sample_weight))
        else:
            replicas = float(tf.distribute.get_strategy().num_replicas_in_sync) if part \
                else 1.0
            if labelled:
                # Keras divides a loss by the number of replicas under a strategy; undo
                # that to get the mean over this part's inputs, then weigh it
                n_part = tf.cast(x["batch_size"][0], tf.float32)
                n_global = tf.cast(x["global_batch_size"][0], tf.float32)
                share = compat.compiled_loss(self)(y, y_pred, sample_weight) * replicas \
                    * n_part / n_global
                terms.append(tf.where(n_part > 0, share, 0.0))  # an empty part: none
            if self.losses:
                terms.append(tf.add_n([tf.cast(v, tf.float32) for v in self.losses])
                             / replicas)
        counts = tf.cast(x["global_metric_counts"], tf.float32) if part else None
        for m in self._loss_ids:
            v = tf.cast(values[m], tf.float32)
            count = counts[m] if part else tf.reduce_sum(metric_weights(x, m, tf.reshape(
                v, [-1]))) if "metric_counts" in x else tf.cast(tf.size(v), tf.float32)
            terms.append(tf.reduce_sum(v) / tf.maximum(count, 1.0))
        if not terms:
            return tf.constant(0.0)
        return tf.add_n(terms) if len(terms) > 1 else terms[0]

    def _train_on(self, x, y=None, sample_weight=None,
                  gradient_mode: GradientMode | None = None):
        """One optimizer step on a packed batch: `(loss, y_pred, metric values, finite)`.

        The update is applied only if the loss and every gradient are
        finite (`finite`, a scalar bool; the weights and the optimizer's state stay
        those of the last good step otherwise). On a replica's part of a batch
        (`compiler.distribute.strategy`) the replicas agree whether to apply it.

        Its ops compute in training mode (`blocks.evaluation.training_mode`), the gradient too:
        the engine's replayed backward pass runs ops again and must draw what the
        forward pass drew. `gradient_mode`: how the executor's loop is differentiated
        (`scheduler.gradient_mode`; None: as the executor says)."""
        with training_mode(True, self._step_seed()):
            return self._step_on(x, y, sample_weight, gradient_mode)

    def _step_on(self, x, y, sample_weight, gradient_mode):
        """`_train_on` in training mode."""
        weights = self.trainable_weights
        with tf.GradientTape() as tape:
            y_pred, values = self._forward(x, gradient_mode)
            loss = self._total_loss(x, y, y_pred, sample_weight, values)
            scaled = self.optimizer.scale_loss(loss)
        if not weights:
            return loss, y_pred, values, tf.math.is_finite(tf.cast(loss, tf.float32))
        grads = tape.gradient(scaled, weights)
        grads = [tf.zeros_like(w) if g is None else g for g, w in zip(grads, weights)]
        if _scales_loss(self.optimizer):
            # a loss-scaling optimizer skips a step whose scaled gradients overflow
            # (and lowers the scale) itself, on every replica alike: only a
            # non-finite loss is bad there
            self.optimizer.apply_gradients(zip(grads, weights))
            return loss, y_pred, values, tf.math.is_finite(tf.cast(loss, tf.float32))
        finite = all_finite(loss, grads)
        if "global_batch_size" in x:
            finite = apply_if_finite_on_every_replica(self.optimizer, finite, grads, weights)
            return loss, y_pred, values, finite

        def apply():
            self.optimizer.apply_gradients(zip(grads, weights))
            return tf.constant(True)
        tf.cond(finite, apply, lambda: tf.constant(False))
        return loss, y_pred, values, finite

    def _build_optimizer(self) -> None:
        # its slots cannot be made inside the traced step's guarded update (a
        # tf.cond branch), and making them there would make Keras trace it twice
        optimizer = getattr(self, "optimizer", None)  # none before compile
        if optimizer is not None and not optimizer.built:
            with self.distribute_strategy.scope():  # its slots mirrored, as the weights
                optimizer.build(self.trainable_variables)

    def _build_compiled_metrics(self, signature) -> None:
        """Builds the metrics given to `compile` for steps of `signature` (packed
        arrays, labels, sample weights), as Keras' `fit` does before its first step:
        built inside a traced step, their variables would make TensorFlow trace the
        step twice."""
        metrics = compat.compiled_metrics(self)
        if metrics is None or metrics.built or len(signature) < 2 or self._out_type is None:
            return
        out = self.block.output_type
        metrics.build(keras.KerasTensor(signature[1].shape, signature[1].dtype.name),
                      keras.KerasTensor((None, *out.shape), out.dtype))

    def _update_metrics(self, x, y, y_pred, sample_weight, values, loss):
        n = tf.cast(x["batch_size"][0], tf.float32)
        if "global_batch_size" in x:
            # a replica's share of the batch's loss: summed over the replicas these
            # updates give the batch's loss weighted by its inputs, as on one device
            replicas = float(tf.distribute.get_strategy().num_replicas_in_sync)
            loss = loss * replicas
            n = tf.cast(x["global_batch_size"][0], tf.float32) / replicas
        self._loss_tracker.update_state(loss, sample_weight=n)
        if y is not None and compat.compiled_metrics(self) is not None:
            compat.compiled_metrics(self).update_state(y, y_pred, sample_weight)
        for tracker, m in zip(self.block_metric_trackers, self._tracked_ids):
            v = tf.cast(tf.reshape(values[m], [-1]), tf.float32)
            tracker.update_state(v, sample_weight=metric_weights(x, m, v)
                                 if "metric_counts" in x else None)
        return self.get_metrics_result()

    def train_step(self, data):
        """Keras' training step on a packed batch, the executor's loop differentiated
        as the executor's own `gradient_mode` says (`training_step` for another)."""
        return self._train_step(data, None)

    def training_step(self, gradient_mode: GradientMode | None) -> Callable:
        """`train_step` with the executor's loop differentiated as `gradient_mode` says
        (`scheduler.gradient_mode`; None: as the executor says): the step traced for
        each weight-gradient choice (`compiler.training.steps.WeightGradsChoice.mode`).

        A step of its own rather than an argument of `train_step`, whose signature
        stays Keras' (`tf.function(model.train_step, input_signature=...)` binds no
        other argument). A subclass overriding `train_step` is traced as it is, with
        the executor's own mode."""
        return lambda data: self._train_step(data, gradient_mode)

    def _train_step(self, data, gradient_mode: GradientMode | None):
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        loss, y_pred, values, finite = self._train_on(x, y, sample_weight, gradient_mode)
        logs = self._update_metrics(x, y, y_pred, sample_weight, values, loss)
        # taken out of the logs by the step function, which raises on a bad step
        return {**logs, STEP_FINITE: finite, STEP_LOSS: loss}

    def test_step(self, data):
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        y_pred, values = self._forward(x)
        loss = self._total_loss(x, y, y_pred, sample_weight, values)
        return self._update_metrics(x, y, y_pred, sample_weight, values, loss)

    def predict_step(self, data):
        x, _, _ = keras.utils.unpack_x_y_sample_weight(data)
        y_pred, _ = self._forward(x)
        return y_pred

    # --- the functions Keras' loop calls (compiler.training.steps) -------------------------

    @property
    def jit_compile(self) -> bool:
        """Whether the steps run under XLA (`compile(jit_compile=...)`, or per call
        `fit(..., jit_compile=True)`): each batch padded to buckets and each bucket
        compiled once (`compiler.feeding.xla_buckets`, `scheduler.xla`). False by default."""
        return getattr(self, "_xla_on", False)

    @jit_compile.setter
    def jit_compile(self, value) -> None:
        if value == "auto":
            value = self._resolve_auto_jit_compile()
        if value not in (True, False):
            raise ValueError(f"jit_compile must be True, False or 'auto', got {value!r}")
        self._xla_on = bool(value)

    def _resolve_auto_jit_compile(self) -> bool:
        """Keras' "auto" (its default) turns XLA on when a GPU is visible; Model keeps
        it off. On this CPU the XLA step now trains about as fast as the graph step
        or faster at batch 1 (1-2x the TreeLSTM, 1.8x the BiLSTM tagger, whole `fit`
        calls on a loaded machine) but slower at 16, inference is not clearly
        faster at any batch size, and each bucket costs seconds of
        compilation (5-10 buckets for a few dozen trees at batch 1), which a user
        pays on the first epoch: at batch 1 the TreeLSTM saves 0-6 ms a tree, so a
        64-tree epoch repays its ~30 s of compilations after tens to hundreds of
        epochs, or never. "auto"
        cannot know the number of epochs, so it does not choose it (BENCHMARKS.md,
        "XLA for the loop"); pass `jit_compile=True` for long runs at batch 1. On
        a GPU the XLA step would run wholly on the device (`scheduler.xla`), but it
        has not been measured there."""
        return False

    @contextlib.contextmanager
    def _jit_for_call(self, jit_compile):
        """`jit_compile` for one `fit`/`evaluate`/`predict` call (None: the model's)."""
        if jit_compile is None:
            yield
            return
        before = self.jit_compile
        self.jit_compile = jit_compile
        try:
            yield
        finally:
            self._xla_on = before

    def _xla_batches(self):
        if getattr(self, "_xla_state", None) is None:
            self._xla_state = XlaBatches(self)
        return self._xla_state

    def _step_function(self, step, role, kind: str) -> StepFunction | ReplicaSteps:
        if is_distributed(self.distribute_strategy):  # compiler.distribute.strategy
            if self.jit_compile:
                raise ValueError("jit_compile=True is not supported under a tf.distribute "
                                 "strategy yet: leave it False or 'auto' there")
            return ReplicaSteps(self, kind, lambda: self._feeders[role()])
        return StepFunction(step, lambda: self._feeders[role()],
                            lambda: bool(self.run_eagerly), lambda: self._epoch,
                            xla=lambda: self._xla_batches() if self.jit_compile else None,
                            choice=(self.weight_grads if kind == "train"
                                    else self.inference_executor),
                            step_for_mode=(self.training_step if kind == "train" and
                                           type(self).train_step is Model.train_step
                                           else None),
                            before_trace=self._build_compiled_metrics,
                            after_trace=self._traced_weights)

    def make_train_function(self, force=False):
        if self.train_function is None or force:
            run = self._step_function(self.train_step, lambda: "train", "train")
            self.train_function = lambda it: run.on_iterator(it, self.steps_per_execution)
        return self.train_function

    def make_test_function(self, force=False):
        if self.test_function is None or force:
            run = self._step_function(self.test_step, lambda: self._test_role, "test")
            self.test_function = lambda it: run.on_iterator(it, self.steps_per_execution)
        return self.test_function

    def make_predict_function(self, force=False):
        if self.predict_function is None or force:
            self.predict_function = self._step_function(
                self.predict_step, lambda: "predict", "predict").on_data
        return self.predict_function

    # --- the input pipeline ---------------------------------------------------------

    def packed_inputs(self, inputs: Sequence[Any]) -> dict:
        """The tensors one batch of raw inputs becomes: the serving signature's inputs.

        Where the block's code can run, `feed = model.packed_inputs(trees)` gives a
        dict of numpy arrays; a process with TensorFlow only then predicts with
        `tf.saved_model.load(path).signatures["serving_default"](**feed)["output"]`
        (one row per input, in order) for a model written by `model.export(path)`.
        A serving process without the training code makes them with
        `serving.Predictor(path).request(trees)`.
        """
        inputs = list(inputs)
        _, _, graphs = self._expand(inputs, Labels(None, None), raise_errors=True)
        return self.pipeline.pack(inputs, graphs)

    def _expand(self, inputs: list, labels: Labels, raise_errors: bool = False,
                what: str = "x", offset: int = 0, verbose=0):
        """Expands every input once; drops (and records) or raises on bad ones.
        With `verbose`, many inputs show a progress bar (`pipeline.PROGRESS_AFTER`).
        Returns `(inputs, labels, graphs)`: `graphs` are the kept inputs' graphs
        (None where one is not known) if a batch of them can be planned from its
        graphs as it would from the inputs (a cache on: graphs of single inputs),
        else None."""
        skip = self.on_bad_example == "skip" and not raise_errors
        inputs, labels, bad, graphs = self.pipeline.expand_graphs(inputs, labels, skip,
                                                                  what, offset, verbose)
        if what != "x":  # validation_data, or the validation split of x
            self._skipped.validation = bad
        else:
            self._skipped.x = bad
        if self.compiler.cache_size == 0:  # batches are planned whole, or in rounds
            graphs = None
        return inputs, labels, graphs

    @property
    def block(self) -> Block:
        """The block expression the model runs: the one given to `Model(block)`, or,
        for a model read by `td.load_model` or `keras.models.load_model`, the one
        rebuilt from the file, sharing the model's weights. Read-only.

        Its `input_type` and `output_type` say what the model takes and gives, and
        `block.eval(x)` runs one input unbatched, as `predict` does batched:

        ```python
        model = td.load_model("tree.keras")
        print(model.block.input_type, "->", model.block.output_type)
        model.block.eval(tree)     # == model.predict([tree])[0]
        ```
        """
        return self.program.root

    @property
    def skipped_examples(self) -> list[int]:
        """The indices in `x` of the inputs the last call skipped."""
        return self._skipped.x

    @property
    def skipped_validation_examples(self) -> list[int]:
        """The indices of the validation inputs the last `fit` skipped."""
        return self._skipped.validation

    def _dataset(self, x, y, sample_weight, batch_size: int, shuffle: bool, role: str,
                 with_labels: bool = True, what: str = "x", raise_errors: bool = False,
                 offset: int = 0, verbose=0):
        """What Keras iterates for one call (batch indices); the batches themselves
        come from the `BatchFeeder` kept for `role` ("train", "validation", "test"
        or "predict"), which the step functions read."""
        return self._feeder(x, y, sample_weight, batch_size, shuffle, role, with_labels,
                            what, raise_errors, offset, verbose).dataset()

    def _feeder(self, x, y, sample_weight, batch_size: int, shuffle: bool, role: str,
                with_labels: bool = True, what: str = "x", raise_errors: bool = False,
                offset: int = 0, verbose=0):
        """The feeder of one call's batches, kept for `role` (see `_dataset`)."""
        if is_distributed(self.distribute_strategy):
            feeder = sharded_feeder(self, x, y, sample_weight, batch_size, shuffle,
                                    with_labels, what, raise_errors, offset, verbose)
            self._feeders[role] = feeder
            return feeder
        check_batch_size(batch_size)
        inputs = as_inputs(x, what)
        loss = self.loss if with_labels and compat.compiled_loss(self) is not None else None
        labels = self.pipeline.labels(y, sample_weight, len(inputs), loss,
                                      "y" if what == "x" else f"{what} y")
        n_given = len(inputs)
        if self.compiler.cache_size == 0 and (raise_errors or self.on_bad_example == "raise"):
            # nothing to cache: each batch is expanded (and checked) as it is packed,
            # and a bad input raises there, named by its index (not expanded twice)
            self._skipped.x, self._skipped.validation = \
                ([], self._skipped.validation) if what == "x" else (self._skipped.x, [])
            graphs = None
        else:
            inputs, labels, graphs = self._expand(inputs, labels, raise_errors=raise_errors,
                                                  what=what, offset=offset, verbose=verbose)
        skipped = self.skipped_validation_examples if what != "x" else self.skipped_examples
        if not inputs:
            raise ValueError(f"no inputs in {what}" + (" (all were skipped)" if
                                                       len(x) else ""))
        n = len(inputs)

        def order() -> np.ndarray:  # called as each epoch starts reading
            return np.random.default_rng(self.seed + self._epoch).permutation(n) \
                if shuffle else np.arange(n)

        feeder = self.pipeline.feeder(inputs, labels, batch_size, order, with_labels, what,
                                      graphs)
        feeder.offset = offset  # errors name an input by offset + its index
        if skipped:
            feeder.positions = np.setdiff1d(np.arange(n_given), skipped)
        self._feeders[role] = feeder
        return feeder

    def fit(self, x=None, y=None, batch_size: int | None = None, epochs: int = 1,
            verbose="auto", callbacks=None, validation_data=None, shuffle: bool = True,
            sample_weight=None, initial_epoch: int = 0, validation_freq: int = 1,
            validation_batch_size: int | None = None, validation_split: float = 0.0,
            class_weight: dict | None = None, steps_per_epoch: int | None = None,
            validation_steps: int | None = None, jit_compile=None, **kwargs):
        """Trains on `x` (a list of inputs, or a stream) and optional labels `y`.

        As `keras.Model.fit`; `validation_data` is `(x_val, y_val)` or `x_val` (Fold
        style, or a stream). `x` may be a stream (`compiler.feeding.streams`): a generator or
        other iterable of inputs, or of `(input, label[, sample_weight])` tuples for a
        model compiled with a loss; a `keras.utils.PyDataset` of batches; a file read
        line by line (`compiler.Lines`). It is read a few batches ahead of the step and
        never held whole; each epoch reads it again, or with `steps_per_epoch` reads on
        (a generator can be read only once, so it needs `steps_per_epoch` for several
        epochs). A stream is not shuffled.

        `validation_split=f` holds out the last fraction f of `x` (and `y`,
        `sample_weight`) before shuffling, as Keras does (not with `validation_data`).
        `class_weight={class: weight}` weighs each training input by its label's class
        (a class id, or the argmax of a one-hot row; classes not listed weigh 1), as
        Keras does (not with `sample_weight`).

        Under `tf.distribute.MirroredStrategy` or `MultiWorkerMirroredStrategy` (the
        model built and compiled in its scope) each replica runs its own part of
        every batch and each worker expands only its shard of `x`; the weights
        follow single-device training (`compiler.distribute.strategy`).

        Bad data cannot spoil the weights: inputs (`blocks.InputError`) and labels
        (`ValueError`) are checked before the first step, and a step whose loss or
        gradients are not finite is not applied: it raises `compiler.NonFiniteLossError`
        naming the batch's examples, the weights left those of the last good step.

        `jit_compile` (True, False or "auto"; default: the model's, see the
        `jit_compile` property) runs this call's steps under XLA or not.
        """
        _refuse(kwargs, "fit")
        batch_size = 32 if batch_size is None else batch_size
        stream = _streamed(x, y, sample_weight)
        if stream:
            self._check_stream(x, epochs - initial_epoch, steps_per_epoch, validation_split)
        else:
            x = as_inputs(x)
        self._check_loss(y, labels_in_x=stream)
        if not self.trainable_weights:
            warnings.warn("the block has no trainable weights: fit only reports metrics",
                          stacklevel=2)
        given_x, split_at = x, None
        if validation_split:
            split_at, (x, y, sample_weight), validation_data = self._split_off_validation(
                x, y, sample_weight, validation_split, validation_data)
        if class_weight is not None and sample_weight is not None:
            raise ValueError("give class_weight or sample_weight, not both")
        if stream:
            # a run resumed at epoch e (BackupAndRestore) reads on from there
            data = self._stream(x, batch_size, "train", class_weight=class_weight,
                                endless=steps_per_epoch is not None,
                                resume=lambda: self._epoch * steps_per_epoch)
        else:
            if class_weight is not None:
                sample_weight = class_weights(y, class_weight)
            data = self._dataset(x, y, sample_weight, batch_size, shuffle, "train",
                                 verbose=verbose)
        val, val_stream = None, False
        if validation_data is not None:
            val, val_stream = self._validation_for_fit(
                validation_data, split_at, validation_batch_size or batch_size,
                validation_steps, validation_freq, range(initial_epoch, epochs), verbose)
        callbacks = [_Bookkeeping(self), *(callbacks or [])]
        self._nan_seen = False
        self._build_optimizer()
        blame = self._stream_blame if stream or val_stream else \
            self._fit_blame(x, given_x, split_at, validation_data)
        try:
            with blaming(self.block, blame), self._jit_for_call(jit_compile), \
                    _end_of_stream_is_end_of_epoch((stream and steps_per_epoch is None)
                                                   or (val_stream and validation_steps is None)):
                return super().fit(data, epochs=epochs, verbose=verbose, callbacks=callbacks,
                                   shuffle=False, validation_data=val,
                                   initial_epoch=initial_epoch, validation_freq=validation_freq,
                                   steps_per_epoch=steps_per_epoch,
                                   validation_steps=validation_steps)
        finally:
            self._close_streams()

    def _split_off_validation(self, x, y, sample_weight, fraction, validation_data):
        """`fit(validation_split=fraction)`: `(split_at, (x, y, sample_weight) of the
        training part, validation_data of the held-out last part)`, as Keras splits."""
        if validation_data is not None:
            raise ValueError("give validation_data or validation_split, not both")
        # labels checked whole first, so that an error names the row of y
        self.pipeline.labels(y, sample_weight, len(x),
                             self.loss if compat.compiled_loss(self) is not None else None)
        split_at = hold_out(len(x), fraction)
        head, tail = slice(None, split_at), slice(split_at, None)
        return split_at, (x[head], _rows(y, head), _rows(sample_weight, head)), \
            (x[tail], _rows(y, tail), _rows(sample_weight, tail))

    def _validation_for_fit(self, validation_data, split_at, batch_size: int,
                            validation_steps, validation_freq, epochs: range, verbose):
        """What `fit` validates on (a dataset of batch indices, or a stream's), and
        whether it is a stream."""
        vx, vy, vw = split_validation(validation_data)
        what = "validation_data" if split_at is None else \
            f"x[{split_at}:], the validation split"
        if not _streamed(vx, vy, vw):
            return self._dataset(vx, vy, vw, batch_size, False, "validation", what=what,
                                 offset=split_at or 0, verbose=verbose), False
        if validation_steps is None and reads_once(vx) \
                and sum(self._should_eval(e, validation_freq) for e in epochs) > 1:
            raise ValueError(
                f"validation_data is a {type(vx).__name__}, which can be read only once, "
                "and fit validates more than once: give validation_steps, or a stream "
                "that can be read again")
        return self._stream(vx, batch_size, "validation", what="validation_data",
                            endless=validation_steps is not None), True

    def _fit_blame(self, x, given_x, split_at, validation_data) -> list:
        """Where a non-finite step of a `fit` on lists looks for the examples to name:
        `(inputs, what, skipped indices)` for x and the validation inputs."""
        if split_at is not None:  # the two parts of x, blamed by their index in x
            return [(given_x, "x", [*self.skipped_examples,
                                    *(split_at + i for i in self.skipped_validation_examples)])]
        blame = [(x, "x", self.skipped_examples)]
        if validation_data is not None:
            blame.append((split_validation(validation_data)[0], "validation_data",
                          self.skipped_validation_examples))
        return blame

    def evaluate(self, x=None, y=None, batch_size: int | None = None, verbose="auto",
                 sample_weight=None, callbacks=None, return_dict: bool = False,
                 steps: int | None = None, jit_compile=None, **kwargs):
        """As `keras.Model.evaluate`, on a list of inputs (and optional labels) or a
        stream (see `fit`); `steps` batches of it if given. `jit_compile`: as in `fit`."""
        if kwargs.get("_use_cached_eval_dataset"):  # Keras' fit validating
            role, self._test_role = self._test_role, "validation"
            try:
                return super().evaluate(x, y, batch_size=batch_size, verbose=verbose,
                                        sample_weight=sample_weight, callbacks=callbacks,
                                        return_dict=return_dict, **kwargs)
            finally:
                self._test_role = role
        _refuse(kwargs, "evaluate")
        batch_size = 32 if batch_size is None else batch_size
        stream = _streamed(x, y, sample_weight)
        if stream:
            data, blame = self._stream(x, batch_size, "test"), self._stream_blame
        else:
            x = as_inputs(x)
            data = self._dataset(x, y, sample_weight, batch_size, False, "test",
                                 verbose=verbose)
            blame = [(x, "x", self.skipped_examples)]
        self._check_loss(y, labels_in_x=stream)
        try:
            with blaming(self.block, blame), self._jit_for_call(jit_compile), \
                    _end_of_stream_is_end_of_epoch(stream):
                return super().evaluate(data, verbose=verbose, callbacks=callbacks,
                                        return_dict=return_dict, steps=steps)
        finally:
            self._close_streams()

    def predict(self, x, batch_size: int | None = None, verbose="auto", callbacks=None,
                steps: int | None = None, jit_compile=None, **kwargs):
        """One output per input, in input order.

        An array `[N, ...]` when the block's output is one tensor; otherwise a list
        of per-input results in `block.eval`'s form. `x` is a list of inputs or a
        stream of inputs (see `fit`; `steps` batches of it if given, as an endless
        stream needs). `jit_compile`: as in `fit` (for a block whose output is one
        tensor per input; other outputs come from `Compiler.run`, never under XLA).
        """
        _refuse(kwargs, "predict")
        with self._jit_for_call(jit_compile):
            return self._predict(x, batch_size, verbose, callbacks, steps)

    def _predict(self, x, batch_size, verbose, callbacks, steps):
        batch_size = 32 if batch_size is None else batch_size
        if _streamed(x, None, None):
            return self._predict_stream(x, batch_size, verbose, callbacks, steps)
        if self._out_type is not None:
            x = as_inputs(x)
            feeder = self._feeder(x, None, None, batch_size, False, "predict",
                                  with_labels=False, raise_errors=True, verbose=verbose)
            with blaming(self.block, [(x, "x", [])]):
                if is_distributed(self.distribute_strategy):
                    return super().predict(feeder.dataset(), verbose=verbose,
                                           callbacks=callbacks)
                return predict_loop(self, feeder.n_batches, verbose, callbacks)
        check_batch_size(batch_size)
        inputs, _, _ = self._expand(as_inputs(x), Labels(None, None), raise_errors=True,
                                    verbose=verbose)
        results = []
        for b in range(0, len(inputs), batch_size):
            results.extend(self.compiler.run(inputs[b:b + batch_size]))
        return results

    def _predict_stream(self, x, batch_size: int, verbose, callbacks, steps):
        check_batch_size(batch_size)
        if self._out_type is not None:
            feeder = self._stream_feeder(x, batch_size, "predict", labelled=False)
            try:
                with blaming(self.block, self._stream_blame):
                    return predict_loop(self, steps or feeder.n_batches, verbose, callbacks)
            finally:
                self._close_streams()
        # results in block.eval's form: one batch at a time, no step function
        reader = StreamFeeder(self.pipeline, x, batch_size, labelled=False)
        results: list = []
        for raw in itertools.islice(reader.batches(), steps):
            try:
                results.extend(self.compiler.run(raw.inputs))
            except InputError as e:
                raise reader.named_in(e, raw) from e.__cause__
        if not results:
            raise ValueError(f"no inputs in x: the stream {x!r:.60} gave none")
        return results

    # --- streams (compiler.feeding.streams) ---------------------------------------------

    def _check_stream(self, x, epochs: int, steps_per_epoch, validation_split) -> None:
        if validation_split:
            raise ValueError("validation_split needs x in memory (a list); with a stream, "
                             "give validation_data")
        if steps_per_epoch is None and epochs > 1 and reads_once(x):
            raise ValueError(
                f"x is a {type(x).__name__}, which can be read only once, and fit runs "
                f"{epochs} epochs: give steps_per_epoch (each epoch then reads on), or a "
                "stream that can be read again (a PyDataset, compiler.Lines, or an object "
                "whose __iter__ returns a fresh generator)")

    def _stream(self, x, batch_size: int, role: str, what: str = "x",
                labelled: bool | None = None, class_weight=None, endless: bool = False,
                resume=None):
        """The batch indices Keras iterates over stream `x`; the batches come from the
        `StreamFeeder` kept for `role`."""
        return self._stream_feeder(x, batch_size, role, what, labelled, class_weight,
                                   endless, resume).dataset()

    def _stream_feeder(self, x, batch_size: int, role: str, what: str = "x",
                       labelled: bool | None = None, class_weight=None,
                       endless: bool = False, resume=None) -> StreamFeeder:
        """The `StreamFeeder` of one call over stream `x`, kept for `role` (under a
        strategy, this worker's shard of it: `compiler.distribute.sharded_streams`)."""
        check_batch_size(batch_size)
        if labelled is None:
            labelled = compat.compiled_loss(self) is not None
        skipped = self._skipped.validation if what != "x" else self._skipped.x
        skipped.clear()
        seen: set = set()  # a stream read again (each epoch) skips its bad inputs again
        caller = user_line()  # on_skip runs on the thread that reads the stream

        def on_skip(position: int, error: InputError) -> None:
            if not skipped:
                warn(f"skipping the inputs of {what} that do not fit the block "
                     f"(on_bad_example='skip'); the first: {error}", at=caller)
            if position not in seen:
                seen.add(position)
                skipped.append(position)

        sharded = is_distributed(self.distribute_strategy)
        feeder = (ShardedStreamFeeder if sharded else StreamFeeder)(
            self if sharded else self.pipeline, x, batch_size, labelled,
            loss=self.loss if labelled and compat.compiled_loss(self) is not None else None,
            skip=self.on_bad_example == "skip" and role != "predict", what=what,
            class_weight=class_weight, endless=endless, on_skip=on_skip, resume=resume)
        self._feeders[role] = feeder
        return feeder

    def _stream_blame(self) -> list:
        """What a failed step is blamed on: the streams' batches being run."""
        return [(f.current.inputs, f.what, [], f.current.positions)
                for f in self._feeders.values() if isinstance(f, StreamFeeder)]

    def _close_streams(self) -> None:
        for feeder in self._feeders.values():
            if isinstance(feeder, StreamFeeder):
                feeder.close()

    def train_on_batch(self, x, y=None, sample_weight=None, class_weight=None,
                       return_dict: bool = False):
        """One training step on the inputs `x` (a list, one batch) and labels `y`;
        the logs, as `keras.Model.train_on_batch` gives them."""
        if class_weight is not None:
            if sample_weight is not None:
                raise ValueError("give class_weight or sample_weight, not both")
            sample_weight = class_weights(y, class_weight)
        x = as_inputs(x)
        self._check_loss(y)
        self._feeder(x, y, sample_weight, max(len(x), 1), False, "train")
        self._build_optimizer()
        self.make_train_function()
        self.reset_metrics()
        with blaming(self.block, [(x, "x", self.skipped_examples)]):
            return self._logs(self.train_function(iter([0])), return_dict)

    def test_on_batch(self, x, y=None, sample_weight=None, return_dict: bool = False):
        """The loss and metrics of one batch of inputs `x` (a list), as Keras'."""
        x = as_inputs(x)
        self._check_loss(y)
        self._feeder(x, y, sample_weight, max(len(x), 1), False, "test")
        self.make_test_function()
        self.reset_metrics()
        with blaming(self.block, [(x, "x", self.skipped_examples)]):
            return self._logs(self.test_function(iter([0])), return_dict)

    def predict_on_batch(self, x):
        """The outputs of one batch of inputs `x` (a list): `predict` in one step."""
        return self.predict(x, batch_size=max(len(as_inputs(x)), 1), verbose=0)

    def _logs(self, logs: dict, return_dict: bool):
        logs = {k: float(v) for k, v in logs.items()}
        return logs if return_dict else self._flatten_metrics_in_order(logs)

    def _check_loss(self, y, labels_in_x: bool = False):
        if labels_in_x and compat.compiled_loss(self) is not None:
            return  # a stream of (input, label) tuples
        if y is not None and compat.compiled_loss(self) is None and self._loss_ids:
            warnings.warn("labels y are given but the model was compiled without a loss; "
                          "only the td.Metric losses train it", stacklevel=3)
        if not self._loss_ids and (y is None or compat.compiled_loss(self) is None):
            raise ValueError(
                "nothing to train on: give labels y and compile(loss=...), or emit losses "
                "from the block with td.Metric blocks whose names end with 'loss' (its "
                f"metrics are {self.program.metric_names})")

    # --- saving ---------------------------------------------------------------------

    def save_weights(self, filepath, overwrite: bool = True, **kwargs):
        """As Keras', but atomic: written to a temporary file, then renamed."""
        if refuse_after_nan(self._nan_seen, filepath):
            return
        atomic_write(filepath, overwrite, lambda tmp: super(Model, self).save_weights(
            tmp, overwrite=True, **kwargs))

    def load_weights(self, filepath, **kwargs):
        """As Keras'; the optimizer's state is loaded too when the file has it (the
        optimizer is built first, as `BackupAndRestore` does). Loaded weights count
        as good again (see `save_weights`)."""
        self._build_optimizer()
        super().load_weights(filepath, **kwargs)
        self._nan_seen = False

    def save(self, filepath, overwrite: bool = True, **kwargs):
        """As Keras': the block expression, the weights and the optimizer's state to
        a `.keras` file that `keras.models.load_model` reads back. Atomic: written
        to a temporary file, then renamed, so a failed save leaves the previous
        file whole. A block that cannot be saved fails before anything is written."""
        if refuse_after_nan(self._nan_seen, filepath):
            return
        self.get_config()  # the clear error, before anything is written
        atomic_write(filepath, overwrite, lambda tmp: super(Model, self).save(
            tmp, overwrite=True, **kwargs))

    def export(self, filepath, format: str = "tf_saved_model", verbose: bool = True, **kw):
        """Writes a SavedModel for serving: its `serving_default` signature takes the
        packed tensors of a batch (`index`, `layout`, `consts_<dtype>`,
        `metric_bounds`, `batch_size`; names, shapes and meaning in
        `compiler.feeding.packed`) and returns `{"output": [N, ...]}`, the block's output
        per input, in order. Loading it needs TensorFlow only; it checks a request's
        tensors first and names the one at fault. Beside it, `assets.extra/refold.json`
        holds the block expression (or factory call) with which `serving.Predictor`
        turns Python inputs into requests (`model.packed_inputs(batch)` does too)."""
        if refuse_after_nan(self._nan_seen, filepath):
            return
        if format != "tf_saved_model":
            raise ValueError("only format='tf_saved_model' is supported")
        if self._out_type is None:
            raise ValueError("export needs a block whose output is one tensor per input, "
                             f"got {self.block.output_type}")
        executor, n_metrics = self.compiler.executor, len(self.program.metric_names)

        def serve(arrays):
            arrays = packed.checked(arrays, executor, n_metrics)
            return packed.check_output_rows(self._forward(arrays)[0], arrays["batch_size"])
        config = packed.export_config(self.get_config(), executor, self.program)
        write_saved_model(filepath, self.weights, self.pipeline.signature(), serve,
                          {packed.EXPORT_CONFIG: json.dumps(config)})
        if verbose:
            print(f"Saved a SavedModel for serving at {filepath}")


class _Bookkeeping(keras.callbacks.Callback):
    """Tells the model the epoch (for its shuffling) and notices NaN losses."""

    def __init__(self, model: Model):
        super().__init__()
        self._m = model

    def on_epoch_begin(self, epoch, logs=None):
        self._m._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and not np.isfinite(float(loss)):
            self._m._nan_seen = True


class _Skipped:
    """The inputs the last call skipped, kept out of Keras' attribute tracking: a list
    assigned to a Keras model's attribute is wrapped, and its name appended to the
    model's `_tracked` list, on every assignment, so assigning one per `predict`
    call grew the model without bound (BENCHMARKS.md, memory over repeated calls)."""

    def __init__(self):
        self.x: list[int] = []
        self.validation: list[int] = []


def _weights_of(root) -> tuple[list, list]:
    """The Keras layers and variables a block expression computes with: what each
    block returns from `Block.weights`, each once."""
    layers, variables, seen = [], [], set()
    for b in validate(root):
        for w in b.weights():
            if id(w) in seen:
                continue
            seen.add(id(w))
            if is_keras_layer(w):
                layers.append(w)
            elif isinstance(w, keras.Variable):
                variables.append(w)
            elif isinstance(w, tf.Variable):
                raise TypeError(f"{b.path}: holds a tf.Variable, which a Keras model cannot "
                                "track (train, checkpoint, save); create it as keras.Variable")
            else:
                raise TypeError(f"{b.path}: weights() must return Keras layers and "
                                f"keras.Variables, got {type(w).__name__}")
    return layers, variables


def _mixed_policy(model: Model, low: str | None) -> None:
    """Gives the model the mixed policy its block computes under (`low`, from the
    global policy or the block's layers), so that Keras' `compile` wraps the
    optimizer for loss scaling under float16 even when only the layers are mixed."""
    if low is not None and model.dtype_policy.compute_dtype != low:
        model.dtype_policy = f"mixed_{low}"


def _scales_loss(optimizer) -> bool:
    return isinstance(optimizer, keras.optimizers.LossScaleOptimizer)


def _streamed(x, y, sample_weight) -> bool:
    """Whether `x` is read as a stream: labels given apart (`y`) need x in memory."""
    return y is None and sample_weight is None and is_stream(x)


@contextlib.contextmanager
def _end_of_stream_is_end_of_epoch(on: bool):
    """Keras warns that the input "ran out of data" whenever data of unknown size
    ends; for a stream read without `steps_per_epoch` that is the epoch's end."""
    if not on:
        yield
        return
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Your input ran out of data")
        yield


def _rows(a, rows: slice):
    return None if a is None else np.asarray(a)[rows]


def _refuse(kwargs: dict, what: str) -> None:
    if kwargs:
        raise TypeError(f"Model.{what} does not support {sorted(kwargs)} (inputs are lists "
                        "of Python objects that Model batches itself)")
