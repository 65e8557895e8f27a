"""`Model`: a compiled block expression that is a `keras.Model`.

`fit`, `evaluate` and `predict` take lists of Python inputs (trees, sequences,
dicts), or streams of them (generators, `keras.utils.PyDataset`s, files read line by
line: `compiler.feeding.streams`). Each input of a list is expanded once (example graphs
are cached across epochs);
each batch is merged, scheduled and packed into index tensors when Keras' loop
steps to it (`compiler.feeding.lists`, `compiler.training.steps`); one traced function runs
every batch. `save` writes the block expression (`blocks.serialization`), the
weights and the optimizer's state to a `.keras` file that `keras.models.load_model`
reads back; it is atomic (`compiler.saving`). A TensorFlow error in a step
names the input that caused it (`compiler.training.blame`); a step whose loss or gradients
are not finite is not applied and stops `fit` with `NonFiniteLossError`.

`Model` holds the Keras hooks (`compile`, `fit`, `train_step`, `get_config`,
`save`, ...) and hands each concern to an object with a small public interface, so
that a reader finds each in one place: `model.feed` (`compiler.feeding.model_feed.
ModelFeed`: the feeders of each call, the epoch, the skipped inputs),
`model.loss_and_metrics` (`compiler.training.metrics.LossAndMetrics`), `model.tracer`
(`compiler.training.tracing.StepTracer`: the forward pass, the training update, the
step functions) and `model.files` (`compiler.saving.ModelFiles`: atomic writes,
none after a NaN loss, `export`).

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

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import keras
import tensorflow as tf

from refold import compat
from refold.blocks.block import Block
from refold.blocks.evaluation.precision import global_policy
from refold.blocks.evaluation.training_mode import training_mode
from refold.blocks.layers import is_keras_layer
from refold.blocks.serialization.config import deserialize, serialize
from refold.blocks.types import TensorType
from refold.blocks.validation import validate
from refold.compiler.compiler import Compiler
from refold.compiler.feeding.lists import InputPipeline, Labels, as_inputs, class_weights
from refold.compiler.feeding.model_feed import (
    ModelFeed,
    check_stream,
    end_of_stream_is_end_of_epoch,
    streamed,
)
from refold.compiler.saving import ModelFiles
from refold.compiler.training.blame import blaming
from refold.compiler.training.metrics import LossAndMetrics
from refold.compiler.training.predict_loop import predict
from refold.compiler.training.steps import WeightGradsChoice
from refold.compiler.training.tracing import StepTracer
from refold.compiler.training.weights import build_functions, check_functions
from refold.scheduler.gradient_mode import GradientMode


@keras.saving.register_keras_serializable(package="refold")
class Model(compat.AutoJitOff, keras.Model):
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

    Weights are those of the layers the block uses (`td.FC`, `td.Embedding`,
    `td.ScopedLayer`, Keras layers in `td.Function`) and of `td.FromTensor`
    variables; they are shared with the blocks, so `block.eval` sees training.

    `model.weight_grads` (a `compiler.training.steps.WeightGradsChoice`) decides per training
    batch how the loop is differentiated: for batches of small loop launches (batch
    1, say) the engine replays the loop backward itself and takes the weight
    gradients once per step (`scheduler.reverse`), for the others TensorFlow
    differentiates the loop with a weight gradient in every backward iteration; its
    `max_rows` (rows per launch on average, 10 per loop op by default, `0`: never)
    changes the threshold. Each choice is its own trace; a batch near the threshold
    (within a factor of 2) runs on the other choice's trace if only that one exists.

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
        self._factory = _factory
        build_functions(self.block)
        layers, variables = _weights_of(self.block)
        warned = check_functions(self.block, layers, variables)
        self.block_layers = layers          # tracked by Keras: weights, checkpoints
        self.block_variables = variables
        out = self.block.output_type
        # the engine's type id of the block's output; None unless one tensor per input
        self.output_type_id = self.program.type_id[out] if isinstance(out, TensorType) \
            else None
        # the collaborators: feeding, loss and metrics, the traced steps, the files
        self.feed = ModelFeed(self, self.pipeline)
        self.loss_and_metrics = LossAndMetrics(self, loss_metrics)
        self.loss_metrics = self.loss_and_metrics.loss_metrics
        # every block metric is reported, except one named "loss" (that is Keras' total)
        self.block_metric_trackers = self.loss_and_metrics.trackers
        self.tracer = StepTracer(self, warned)
        self.files = ModelFiles(self)
        self.built = True

    @classmethod
    def from_factory(cls, factory: str, factory_kwargs: dict | None = None, **kwargs) -> Model:
        """A model whose block is built by `factory` ("package.module:function"),
        called with `factory_kwargs`, and which saves that call instead of the block
        expression.

        `Model(block)` saves the expression itself (`blocks.serialization`), which
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
        """The block expression (`blocks.serialization.serialize`), or the factory
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

    # --- the traced computation (compiler.training.tracing) ------------------------

    def __call__(self, inputs, *args, **kwargs):
        """`model(inputs)` on a list of Python inputs: their outputs as one tensor
        `[N, ...]`, differentiable under `tf.GradientTape`, as a Keras model called on
        a batch (`predict` gives the same values as numpy). On a batch's packed arrays
        (what the step functions pass), Keras' own call."""
        if isinstance(inputs, dict) and "batch_size" in inputs:
            return super().__call__(inputs, *args, **kwargs)
        if self.output_type_id is None:
            raise TypeError(
                f"model(inputs) returns one tensor per input, but this block's output is "
                f"{self.block.output_type}"
                + (" with metrics" if self.program.metric_types else "")
                + ": use model.predict(inputs) (results in block.eval's form)")
        arrays = self.packed_inputs(as_inputs(inputs, "inputs"))
        return super().__call__({k: tf.convert_to_tensor(v) for k, v in arrays.items()},
                                *args, **kwargs)

    def call(self, inputs: dict, training: bool = False):
        """Keras' forward pass on a batch's packed arrays: the block's output per input
        (in training mode with `training=True`, its random draws seeded per step)."""
        with training_mode(training is True,
                           self.tracer.seed() if training is True else None):
            y_pred, _ = self.tracer.forward(inputs)
        return y_pred

    def train_step(self, data):
        """Keras' training step on a packed batch, the executor's loop differentiated
        as the executor's own `gradient_mode` says (`training_step` for another)."""
        return self.tracer.train_step(data, None)

    def training_step(self, gradient_mode: GradientMode | None) -> Callable:
        """`train_step` with the executor's loop differentiated as `gradient_mode` says
        (`scheduler.gradient_mode`; None: as the executor says): the step traced for
        each weight-gradient choice (`compiler.training.steps.WeightGradsChoice.mode`).

        A step of its own rather than an argument of `train_step`, whose signature
        stays Keras' (`tf.function(model.train_step, input_signature=...)` binds no
        other argument). A subclass overriding `train_step` is traced as it is, with
        the executor's own mode."""
        tracer = self.tracer
        return lambda data: tracer.train_step(data, gradient_mode)

    def test_step(self, data):
        """Keras' evaluation step on a packed batch: the logs of its loss and metrics."""
        return self.tracer.test_step(data)

    def predict_step(self, data):
        """Keras' prediction step on a packed batch: the block's output per input."""
        x, _, _ = keras.utils.unpack_x_y_sample_weight(data)
        y_pred, _ = self.tracer.forward(x)
        return y_pred

    # the block's output and nothing else: a small batch may compute it straight-line
    # (`compiler.straight_inference`); a subclass's own predict_step is traced as it is
    predict_step.block_output_only = True

    # --- the functions Keras' loop calls (compiler.training.steps) -------------------

    @property
    def jit_compile(self) -> bool:
        """Whether the steps run under XLA (`compile(jit_compile=...)`, or per call
        `fit(..., jit_compile=True)`): each batch padded to buckets and each bucket
        compiled once (`compiler.feeding.xla_buckets`, `scheduler.xla`). False by default.

        Keras' "auto" (its default) turns XLA on when a GPU is visible; here it stays
        off (`compat.AutoJitOff`), since XLA repays its compilations (seconds per
        bucket) only over many epochs at small batches, and "auto" cannot know the
        number of epochs (BENCHMARKS.md, "XLA for the loop"). Pass `jit_compile=True`
        for long runs at batch 1."""
        return getattr(self, "_xla_on", False)

    @jit_compile.setter
    def jit_compile(self, value) -> None:
        if value == "auto":
            value = False  # compat.AutoJitOff says why
        if value not in (True, False):
            raise ValueError(f"jit_compile must be True, False or 'auto', got {value!r}")
        self._xla_on = bool(value)

    def make_train_function(self, force=False):
        if self.train_function is None or force:
            run = self.tracer.function("train", self.training_step if type(self).train_step
                                       is Model.train_step else None)
            self.train_function = lambda it: run.on_iterator(it, self.steps_per_execution)
        return self.train_function

    def make_test_function(self, force=False):
        if self.test_function is None or force:
            run = self.tracer.function("test")
            self.test_function = lambda it: run.on_iterator(it, self.steps_per_execution)
        return self.test_function

    def make_predict_function(self, force=False):
        if self.predict_function is None or force:
            self.predict_function = self.tracer.function("predict").on_data
        return self.predict_function

    # --- the input pipeline (compiler.feeding.model_feed) ---------------------------

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
        _, _, graphs = self.feed.expand(inputs, Labels(None, None), raise_errors=True)
        return self.pipeline.pack(inputs, graphs)

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
        return self.feed.skipped.x

    @property
    def skipped_validation_examples(self) -> list[int]:
        """The indices of the validation inputs the last `fit` skipped."""
        return self.feed.skipped.validation

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
        feed = self.feed
        batch_size = 32 if batch_size is None else batch_size
        stream = streamed(x, y, sample_weight)
        if stream:
            check_stream(x, epochs - initial_epoch, steps_per_epoch, validation_split)
        else:
            x = as_inputs(x)
        self.loss_and_metrics.check_labels(y, labels_in_x=stream)
        if not self.trainable_weights:
            warnings.warn("the block has no trainable weights: fit only reports metrics",
                          stacklevel=2)
        given_x, split_at = x, None
        if validation_split:
            split_at, (x, y, sample_weight), validation_data = feed.split_off_validation(
                x, y, sample_weight, validation_split, validation_data)
        if class_weight is not None and sample_weight is not None:
            raise ValueError("give class_weight or sample_weight, not both")
        if stream:
            # a run resumed at epoch e (BackupAndRestore) reads on from there
            data = feed.stream(x, batch_size, "train", class_weight=class_weight,
                               endless=steps_per_epoch is not None,
                               resume=lambda: feed.epoch * steps_per_epoch).dataset()
        else:
            if class_weight is not None:
                sample_weight = class_weights(y, class_weight)
            data = feed.lists(x, y, sample_weight, batch_size, shuffle, "train",
                              verbose=verbose).dataset()
        val, val_stream = None, False
        if validation_data is not None:
            val, val_stream = feed.validation(
                validation_data, split_at, validation_batch_size or batch_size,
                validation_steps, validation_freq, range(initial_epoch, epochs), verbose)
        callbacks = [_Bookkeeping(feed, self.files), *(callbacks or [])]
        self.files.diverged = False  # a new run: its own losses decide
        self.tracer.build_optimizer()
        blame = feed.stream_blame if stream or val_stream else \
            feed.fit_blame(x, given_x, split_at, validation_data)
        try:
            with blaming(self.block, blame), self.tracer.jit_for_call(jit_compile), \
                    end_of_stream_is_end_of_epoch((stream and steps_per_epoch is None)
                                                  or (val_stream and validation_steps is None)):
                return super().fit(data, epochs=epochs, verbose=verbose, callbacks=callbacks,
                                   shuffle=False, validation_data=val,
                                   initial_epoch=initial_epoch, validation_freq=validation_freq,
                                   steps_per_epoch=steps_per_epoch,
                                   validation_steps=validation_steps)
        finally:
            feed.close_streams()

    def evaluate(self, x=None, y=None, batch_size: int | None = None, verbose="auto",
                 sample_weight=None, callbacks=None, return_dict: bool = False,
                 steps: int | None = None, jit_compile=None, **kwargs):
        """As `keras.Model.evaluate`, on a list of inputs (and optional labels) or a
        stream (see `fit`); `steps` batches of it if given. `jit_compile`: as in `fit`."""
        feed = self.feed
        if kwargs.get("_use_cached_eval_dataset"):  # Keras' fit validating
            role, feed.test_role = feed.test_role, "validation"
            try:
                return super().evaluate(x, y, batch_size=batch_size, verbose=verbose,
                                        sample_weight=sample_weight, callbacks=callbacks,
                                        return_dict=return_dict, **kwargs)
            finally:
                feed.test_role = role
        _refuse(kwargs, "evaluate")
        batch_size = 32 if batch_size is None else batch_size
        stream = streamed(x, y, sample_weight)
        if stream:
            data, blame = feed.stream(x, batch_size, "test").dataset(), feed.stream_blame
        else:
            x = as_inputs(x)
            data = feed.lists(x, y, sample_weight, batch_size, False, "test",
                              verbose=verbose).dataset()
            blame = [(x, "x", self.skipped_examples)]
        self.loss_and_metrics.check_labels(y, labels_in_x=stream)
        try:
            with blaming(self.block, blame), self.tracer.jit_for_call(jit_compile), \
                    end_of_stream_is_end_of_epoch(stream):
                return super().evaluate(data, verbose=verbose, callbacks=callbacks,
                                        return_dict=return_dict, steps=steps)
        finally:
            feed.close_streams()

    def predict(self, x, batch_size: int | None = None, verbose="auto", callbacks=None,
                steps: int | None = None, jit_compile=None, **kwargs):
        """One output per input, in input order.

        An array `[N, ...]` when the block's output is one tensor; otherwise a list
        of per-input results in `block.eval`'s form (for a block with `td.Metric`s,
        `(output, {metric name: its values})` per input). `x` is a list of inputs or a
        stream of inputs (see `fit`; `steps` batches of it if given, as an endless
        stream needs). `jit_compile`: as in `fit` (for a block whose output is one
        tensor per input; other outputs come from `Compiler.run`, never under XLA).
        """
        _refuse(kwargs, "predict")

        def keras_predict(dataset):  # under a strategy: Keras' loop over its steps
            return super(Model, self).predict(dataset, verbose=verbose, callbacks=callbacks)
        with self.tracer.jit_for_call(jit_compile):
            return predict(self, x, batch_size, verbose, callbacks, steps, keras_predict)

    def train_on_batch(self, x, y=None, sample_weight=None, class_weight=None,
                       return_dict: bool = False):
        """One training step on the inputs `x` (a list, one batch) and labels `y`;
        the logs, as `keras.Model.train_on_batch` gives them."""
        if class_weight is not None:
            if sample_weight is not None:
                raise ValueError("give class_weight or sample_weight, not both")
            sample_weight = class_weights(y, class_weight)
        x = as_inputs(x)
        self.loss_and_metrics.check_labels(y)
        self.feed.lists(x, y, sample_weight, max(len(x), 1), False, "train")
        self.tracer.build_optimizer()
        self.make_train_function()
        self.reset_metrics()
        with blaming(self.block, [(x, "x", self.skipped_examples)]):
            return self.loss_and_metrics.logs(self.train_function(iter([0])), return_dict)

    def test_on_batch(self, x, y=None, sample_weight=None, return_dict: bool = False):
        """The loss and metrics of one batch of inputs `x` (a list), as Keras'."""
        x = as_inputs(x)
        self.loss_and_metrics.check_labels(y)
        self.feed.lists(x, y, sample_weight, max(len(x), 1), False, "test")
        self.make_test_function()
        self.reset_metrics()
        with blaming(self.block, [(x, "x", self.skipped_examples)]):
            return self.loss_and_metrics.logs(self.test_function(iter([0])), return_dict)

    def predict_on_batch(self, x):
        """The outputs of one batch of inputs `x` (a list): `predict` in one step."""
        return self.predict(x, batch_size=max(len(as_inputs(x)), 1), verbose=0)

    # --- saving (compiler.saving) ---------------------------------------------------

    def save_weights(self, filepath, overwrite: bool = True, **kwargs):
        """As Keras', but atomic: written to a temporary file, then renamed; nothing
        is written once a training loss was NaN (`compiler.saving.ModelFiles`)."""
        self.files.write(filepath, overwrite, lambda tmp: super(Model, self).save_weights(
            tmp, overwrite=True, **kwargs))

    def load_weights(self, filepath, **kwargs):
        """As Keras'; the optimizer's state is loaded too when the file has it (the
        optimizer is built first, as `BackupAndRestore` does). Loaded weights count
        as good again (see `save_weights`)."""
        self.tracer.build_optimizer()
        super().load_weights(filepath, **kwargs)
        self.files.loaded()

    def save(self, filepath, overwrite: bool = True, **kwargs):
        """As Keras': the block expression, the weights and the optimizer's state to
        a `.keras` file that `keras.models.load_model` reads back. Atomic: written
        to a temporary file, then renamed, so a failed save leaves the previous
        file whole. A block that cannot be saved fails before anything is written."""
        if not self.files.diverged:
            self.get_config()  # the clear error, before anything is written
        self.files.write(filepath, overwrite, lambda tmp: super(Model, self).save(
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
        if format != "tf_saved_model" and not self.files.diverged:
            raise ValueError("only format='tf_saved_model' is supported")
        self.files.export(filepath, verbose)


class _Bookkeeping(keras.callbacks.Callback):
    """Tells the feed the epoch (for its shuffling) and the files of NaN losses."""

    def __init__(self, feed: ModelFeed, files: ModelFiles):
        super().__init__()
        self.feed, self.files = feed, files

    def on_epoch_begin(self, epoch, logs=None):
        self.feed.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        self.files.noticed_loss((logs or {}).get("loss"))


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


def _refuse(kwargs: dict, what: str) -> None:
    if kwargs:
        raise TypeError(f"Model.{what} does not support {sorted(kwargs)} (inputs are lists "
                        "of Python objects that Model batches itself)")
