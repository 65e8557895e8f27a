"""`Model`: a compiled block expression that is a `keras.Model`.

`fit`, `evaluate` and `predict` take lists of Python inputs (trees, sequences,
dicts). Each batch is expanded (once: example graphs are cached across epochs),
merged, scheduled and packed into index tensors in a `tf.data` producer that runs
ahead of the training step; one traced function runs every batch.

Two ways to give the loss:

- Keras style: `y` labels and `compile(loss=...)`; the block's output (one tensor
  per input, e.g. logits) is `y_pred`.
- Fold style: losses live inside the input and are emitted by `td.Metric` blocks.
  Every metric whose name ends with `"loss"` is a loss term: the training loss is
  the sum over such metrics of the mean of their values in the batch (the logged
  epoch loss averages those batch losses weighted by inputs per batch, as Keras
  does). All other metrics are reported as their mean over all values of the epoch.

>>> import numpy as np, tensorflow as tf, keras
>>> import blocks as td
>>> from compiler import Model
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
import math
import os
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from blocks.errors import InputError
from blocks.layers import Layer as BlockLayer
from blocks.layers import is_keras_layer
from blocks.tensors import FromTensor, Function
from blocks.types import TensorType
from blocks.validation import validate
from compiler.compiler import Compiler, find_bad_input

_EXTRA_KEYS = ("metric_bounds", "batch_size")


@keras.saving.register_keras_serializable(package="refold")
class Model(keras.Model):
    """A block expression compiled for batched training and inference with Keras.

    Args:
        block: the root block; its input is one Python object per example.
        scheduler: `"agenda"` (default) or `"depth"` (see `scheduler.schedules`).
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
        cache: keep every input's expanded graph (keyed by the input object) so
            later epochs skip expansion. Cached inputs are held in memory and must
            not be mutated; turn it off to stream many inputs through `predict`.
        workers: expand inputs never seen before in that many forked worker
            processes (see `Compiler`), for large datasets on machines with spare
            cores; 0 (default) expands in this process.

    Weights are those of the layers the block uses (`td.FC`, `td.Embedding`,
    `td.ScopedLayer`, Keras layers in `td.Function`) and of `td.FromTensor`
    variables; they are shared with the blocks, so `block.eval` sees training.
    """

    def __init__(self, block=None, scheduler: str = "agenda", loss_metrics=None,
                 on_bad_example: str = "raise", seed: int = 0, name: str | None = None,
                 cache: bool = True, workers: int = 0, _factory: tuple | None = None,
                 **kwargs):
        super().__init__(name=name, **kwargs)
        if block is None:
            raise TypeError("Model needs a block expression: Model(block)")
        if on_bad_example not in ("raise", "skip"):
            raise ValueError(f"on_bad_example must be 'raise' or 'skip', got {on_bad_example!r}")
        self.compiler = Compiler.create(block, scheduler=scheduler, cache=cache,
                                        workers=workers)
        self.program = self.compiler.program
        self.block = self.program.root
        self.scheduler = scheduler
        self.on_bad_example = on_bad_example
        self.seed = int(seed)
        self.skipped_examples: list[int] = []
        self.skipped_validation_examples: list[int] = []
        self._factory = _factory
        self._epoch = 0
        self._nan_seen = False
        layers, variables = _weights_of(self.block)
        self.block_layers = layers          # tracked by Keras: weights, checkpoints
        self.block_variables = variables
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
        called with `factory_kwargs`. Such a model can be saved whole
        (`model.save("m.keras")`) and loaded back with `keras.models.load_model`
        in a fresh process, which calls the factory again.
        """
        import importlib
        module, _, fn = factory.partition(":")
        if not fn:
            raise ValueError(f"factory must look like 'package.module:function', got {factory!r}")
        build = getattr(importlib.import_module(module), fn)
        factory_kwargs = dict(factory_kwargs or {})
        return cls(build(**factory_kwargs), _factory=(factory, factory_kwargs), **kwargs)

    def get_config(self) -> dict:
        if self._factory is None:
            raise NotImplementedError(
                "This Model was built from a block object, which cannot be written to a "
                "file. To save the whole model, build it with Model.from_factory("
                "'module:function', {...}); or save the weights with save_weights().")
        return {"factory": self._factory[0], "factory_kwargs": self._factory[1],
                "scheduler": self.scheduler, "seed": self.seed, "name": self.name,
                "on_bad_example": self.on_bad_example, "loss_metrics": self.loss_metrics,
                "cache": self.compiler._cache is not None, "workers": self.compiler.workers}

    @classmethod
    def from_config(cls, config: dict) -> Model:
        config = dict(config)
        return cls.from_factory(config.pop("factory"), config.pop("factory_kwargs"), **config)

    # --- the traced computation ---------------------------------------------------

    def _forward(self, x: dict):
        """`(y_pred or None, {metric id: values})` for one packed batch."""
        outs = self.compiler.executor.compute(x)
        n = x["batch_size"][0]
        y_pred = outs[self._out_type][:n] if self._out_type is not None else None
        bounds = tf.reshape(x["metric_bounds"], [-1, 2])
        values = {}
        for m, t in enumerate(self.program.metric_types):
            values[m] = outs[self.program.type_id[t]][bounds[m, 0]:bounds[m, 1]]
        return y_pred, values

    def call(self, inputs: dict, training: bool = False):
        y_pred, _ = self._forward(inputs)
        return y_pred

    def _total_loss(self, x, y, y_pred, sample_weight, values):
        terms = []
        if y is not None and self._compile_loss is not None:
            terms.append(self.compute_loss(x=x, y=y, y_pred=y_pred,
                                           sample_weight=sample_weight))
        elif self.losses:
            terms.append(tf.add_n([tf.cast(v, tf.float32) for v in self.losses]))
        for m in self._loss_ids:
            v = tf.cast(values[m], tf.float32)
            terms.append(tf.reduce_sum(v) / tf.maximum(tf.cast(tf.size(v), tf.float32), 1.0))
        if not terms:
            return tf.constant(0.0)
        return tf.add_n(terms) if len(terms) > 1 else terms[0]

    def _update_metrics(self, x, y, y_pred, sample_weight, values, loss):
        self._loss_tracker.update_state(loss, sample_weight=tf.cast(x["batch_size"][0],
                                                                     tf.float32))
        if y is not None and self._compile_metrics is not None:
            self._compile_metrics.update_state(y, y_pred, sample_weight)
        for tracker, m in zip(self.block_metric_trackers, self._tracked_ids):
            tracker.update_state(tf.cast(tf.reshape(values[m], [-1]), tf.float32))
        return self.get_metrics_result()

    def train_step(self, data):
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        weights = self.trainable_weights
        with tf.GradientTape() as tape:
            y_pred, values = self._forward(x)
            loss = self._total_loss(x, y, y_pred, sample_weight, values)
            scaled = self.optimizer.scale_loss(loss)
        if weights:
            grads = tape.gradient(scaled, weights)
            grads = [tf.zeros_like(w) if g is None else g for g, w in zip(grads, weights)]
            self.optimizer.apply_gradients(zip(grads, weights))
        return self._update_metrics(x, y, y_pred, sample_weight, values, loss)

    def test_step(self, data):
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        y_pred, values = self._forward(x)
        loss = self._total_loss(x, y, y_pred, sample_weight, values)
        return self._update_metrics(x, y, y_pred, sample_weight, values, loss)

    def predict_step(self, data):
        x, _, _ = keras.utils.unpack_x_y_sample_weight(data)
        y_pred, _ = self._forward(x)
        return y_pred

    # --- the input pipeline ---------------------------------------------------------

    def packed_inputs(self, inputs: Sequence[Any]) -> dict:
        """The tensors one batch of raw inputs becomes: the serving signature's inputs.

        Where the block's code can run, `feed = model.packed_inputs(trees)` gives a
        dict of numpy arrays; a process with TensorFlow only then predicts with
        `tf.saved_model.load(path).signatures["serving_default"](**feed)["output"]`
        (one row per input, in order) for a model written by `model.export(path)`.
        """
        inputs = list(inputs)
        self._expand(inputs, _Labels(None, None), raise_errors=True)
        return self._pack(inputs)

    def _pack(self, batch: list) -> dict:
        plan = self.compiler.plan(batch, grouped=True)
        arrays = dict(plan.feed.arrays)
        arrays["metric_bounds"] = plan.metric_bounds(self.program).reshape(-1)
        arrays["batch_size"] = np.array([len(batch)], np.int32)
        return arrays

    def _signature(self) -> dict:
        spec = dict(self.compiler.executor.input_signature())
        spec["metric_bounds"] = tf.TensorSpec([None], tf.int32)
        spec["batch_size"] = tf.TensorSpec([1], tf.int32)
        return spec

    def _expand(self, inputs: list, labels: _Labels, raise_errors: bool = False,
                what: str = "x"):
        """Expands every input once (filling the cache); drops or raises on bad ones."""
        skip = self.on_bad_example == "skip" and not raise_errors
        bad: list[int] = []
        first_error = None
        start, chunk = 0, 256
        while start < len(inputs):
            part = inputs[start:start + chunk]
            try:
                self.compiler.expand(part, start)
                start += len(part)
            except InputError as e:
                if what != "x" and e.example_index is not None:
                    e = type(e)(e.block_path, f"{e.reason} (in {what})", e.example_index)
                if not skip or e.example_index is None:
                    raise e from e.__cause__
                bad.append(e.example_index)
                first_error = first_error or e
                start = e.example_index + 1
        if what == "validation_data":
            self.skipped_validation_examples = bad
        else:
            self.skipped_examples = bad
        if bad:
            warnings.warn(f"skipped {len(bad)} of {len(inputs)} examples of {what} that do "
                          f"not fit the block (on_bad_example='skip'); the first: "
                          f"{first_error}", stacklevel=3)
            keep = np.setdiff1d(np.arange(len(inputs)), bad)
            return [inputs[i] for i in keep], labels.take(keep)
        return inputs, labels

    def _dataset(self, x, y, sample_weight, batch_size: int, shuffle: bool,
                 with_labels: bool = True, what: str = "x", raise_errors: bool = False):
        _check_batch_size(batch_size)
        inputs = _as_inputs(x, what)
        labels = _Labels(y, sample_weight, len(inputs))
        if labels.y is not None and self._out_type is None:
            raise ValueError(f"labels y need a block whose output is one tensor per input "
                             f"(y_pred), but its output type is {self.block.output_type}")
        if labels.y is None and labels.w is not None:
            raise ValueError("sample_weight needs labels y; with losses from td.Metric blocks "
                             "weigh them inside the block")
        inputs, labels = self._expand(inputs, labels, raise_errors=raise_errors, what=what)
        if not inputs:
            raise ValueError(f"no inputs in {what}" + (" (all were skipped)" if
                                                       len(x) else ""))
        n = len(inputs)
        n_batches = math.ceil(n / batch_size)
        signature = self._signature()

        def batches():
            order = np.random.default_rng(self.seed + self._epoch).permutation(n) \
                if shuffle else np.arange(n)
            for b in range(n_batches):
                idx = order[b * batch_size:(b + 1) * batch_size]
                arrays = self._pack([inputs[i] for i in idx])
                yield (arrays, *labels.batch(idx)) if with_labels else (arrays,)

        out_sig = (signature, *labels.signature()) if with_labels else (signature,)
        ds = tf.data.Dataset.from_generator(batches, output_signature=out_sig)
        ds = ds.apply(tf.data.experimental.assert_cardinality(n_batches))
        return ds.prefetch(2), n

    def fit(self, x=None, y=None, batch_size: int | None = None, epochs: int = 1,
            verbose="auto", callbacks=None, validation_data=None, shuffle: bool = True,
            sample_weight=None, initial_epoch: int = 0, validation_freq: int = 1,
            validation_batch_size: int | None = None, **kwargs):
        """Trains on `x` (a list or iterable of inputs) and optional labels `y`.

        As `keras.Model.fit`; `validation_data` is `(x_val, y_val)` or `x_val` (Fold
        style). A `keras.callbacks.TerminateOnNaN` is added unless given, and no
        checkpoint is written once a loss was NaN.
        """
        _refuse(kwargs, "fit")
        if self.distribute_strategy.num_replicas_in_sync > 1:
            raise ValueError("Model.fit runs on one device; under a multi-device strategy "
                             "train with compiler.MirroredTrainer(model, strategy)")
        batch_size = 32 if batch_size is None else batch_size
        x = _as_inputs(x)
        self._check_loss(y)
        if not self.trainable_weights:
            warnings.warn("the block has no trainable weights: fit only reports metrics",
                          stacklevel=2)
        data, _ = self._dataset(x, y, sample_weight, batch_size, shuffle)
        val = None
        if validation_data is not None:
            vx, vy, vw = _split_validation(validation_data)
            val, _ = self._dataset(vx, vy, vw, validation_batch_size or batch_size, False,
                                   what="validation_data")
        callbacks = list(callbacks or [])
        if not any(isinstance(c, keras.callbacks.TerminateOnNaN) for c in callbacks):
            callbacks.append(keras.callbacks.TerminateOnNaN())
        callbacks.insert(0, _Bookkeeping(self))
        self._nan_seen = False
        if self.optimizer is not None and not self.optimizer.built:
            # creating its slots inside the traced step would make Keras trace it twice
            self.optimizer.build(self.trainable_variables)
        blame = [(x, "x", self.skipped_examples)]
        if validation_data is not None:
            blame.append((_split_validation(validation_data)[0], "validation_data",
                          self.skipped_validation_examples))
        with self._blaming(blame):
            return super().fit(data, epochs=epochs, verbose=verbose, callbacks=callbacks,
                               shuffle=False, validation_data=val, initial_epoch=initial_epoch,
                               validation_freq=validation_freq)

    def evaluate(self, x=None, y=None, batch_size: int | None = None, verbose="auto",
                 sample_weight=None, callbacks=None, return_dict: bool = False, **kwargs):
        """As `keras.Model.evaluate`, on a list of inputs (and optional labels)."""
        if kwargs.get("_use_cached_eval_dataset"):  # Keras' fit validating
            return super().evaluate(x, y, batch_size=batch_size, verbose=verbose,
                                    sample_weight=sample_weight, callbacks=callbacks,
                                    return_dict=return_dict, **kwargs)
        _refuse(kwargs, "evaluate")
        x = _as_inputs(x)
        self._check_loss(y)
        data, _ = self._dataset(x, y, sample_weight, 32 if batch_size is None else batch_size,
                                False)
        with self._blaming([(x, "x", self.skipped_examples)]):
            return super().evaluate(data, verbose=verbose, callbacks=callbacks,
                                    return_dict=return_dict)

    def predict(self, x, batch_size: int | None = None, verbose="auto", callbacks=None,
                **kwargs):
        """One output per input, in input order.

        An array `[N, ...]` when the block's output is one tensor; otherwise a list
        of per-input results in `block.eval`'s form.
        """
        _refuse(kwargs, "predict")
        batch_size = 32 if batch_size is None else batch_size
        if self._out_type is not None:
            x = _as_inputs(x)
            data, _ = self._dataset(x, None, None, batch_size, False, with_labels=False,
                                    raise_errors=True)
            with self._blaming([(x, "x", [])]):
                return super().predict(data, verbose=verbose, callbacks=callbacks)
        _check_batch_size(batch_size)
        inputs, _ = self._expand(_as_inputs(x), _Labels(None, None), raise_errors=True)
        results = []
        for b in range(0, len(inputs), batch_size):
            results.extend(self.compiler.run(inputs[b:b + batch_size]))
        return results

    @contextlib.contextmanager
    def _blaming(self, datasets: list):
        """Turns a TensorFlow error in a step into an `InputError` naming the input
        (its index in its dataset) and the block path, found by evaluating the inputs
        one by one on the reference evaluator."""
        try:
            yield
        except tf.errors.OpError as e:
            for inputs, what, skipped in datasets:
                bad = find_bad_input(self.block, _as_inputs(inputs, what), skipped)
                if bad is not None:
                    reason = bad.reason if what == "x" else f"{bad.reason} (in {what})"
                    raise InputError(bad.block_path, reason, bad.example_index) from e
            raise

    def _check_loss(self, y):
        if y is not None and self._compile_loss is None and self._loss_ids:
            warnings.warn("labels y are given but the model was compiled without a loss; "
                          "only the td.Metric losses train it", stacklevel=3)
        if not self._loss_ids and (y is None or self._compile_loss is None):
            raise ValueError(
                "nothing to train on: give labels y and compile(loss=...), or emit losses "
                "from the block with td.Metric blocks whose names end with 'loss' (its "
                f"metrics are {self.program.metric_names})")

    # --- saving ---------------------------------------------------------------------

    def save_weights(self, filepath, overwrite: bool = True, **kwargs):
        """As Keras', but atomic: written to a temporary file, then renamed."""
        if self._refuse_save(filepath):
            return
        _atomic(filepath, overwrite, lambda tmp: super(Model, self).save_weights(
            tmp, overwrite=True, **kwargs))

    def load_weights(self, filepath, **kwargs):
        """As Keras'; loaded weights count as good again (see `save_weights`)."""
        super().load_weights(filepath, **kwargs)
        self._nan_seen = False

    def save(self, filepath, overwrite: bool = True, **kwargs):
        """As Keras' (needs `Model.from_factory`), but atomic."""
        if self._refuse_save(filepath):
            return
        self.get_config()  # the clear error, before anything is written
        _atomic(filepath, overwrite, lambda tmp: super(Model, self).save(
            tmp, overwrite=True, **kwargs))

    def _refuse_save(self, filepath) -> bool:
        if self._nan_seen:
            warnings.warn(f"not writing {filepath}: a training loss was NaN, so the weights "
                          "are not trustworthy; the last checkpoint is left as it was",
                          stacklevel=3)
            return True
        return False

    def export(self, filepath, format: str = "tf_saved_model", verbose: bool = True, **kw):
        """Writes a SavedModel for serving; its `serving_default` signature takes the
        tensors of `packed_inputs(batch)` and returns `{"output": [B, ...]}` (the
        block's output per input, in order). Loading it needs TensorFlow only."""
        if self._refuse_save(filepath):
            return
        if format != "tf_saved_model":
            raise ValueError("only format='tf_saved_model' is supported")
        if self._out_type is None:
            raise ValueError("export needs a block whose output is one tensor per input, "
                             f"got {self.block.output_type}")
        module = tf.Module()
        module.weights = [w.value if isinstance(w, keras.Variable) else w
                          for w in self.weights]

        signature = {k: tf.TensorSpec(v.shape, v.dtype, name=k)
                     for k, v in self._signature().items()}

        @tf.function(input_signature=[signature], autograph=False)
        def serve(arrays):
            y_pred, _ = self._forward(arrays)
            return {"output": y_pred}

        module.serve = serve
        tf.saved_model.save(module, str(filepath),
                            signatures={"serving_default": serve.get_concrete_function()})
        if verbose:
            print(f"Saved a SavedModel for serving at {filepath}")


class _Labels:
    """Labels and sample weights aligned with the inputs (either may be None)."""

    def __init__(self, y, sample_weight, n: int | None = None):
        self.y = None if y is None else np.asarray(y)
        self.w = None if sample_weight is None else np.asarray(sample_weight, np.float32)
        if self.y is not None:
            if self.y.ndim == 0:
                raise ValueError(f"y must have one row per input, got a scalar {y!r}")
            if not (np.issubdtype(self.y.dtype, np.number) or self.y.dtype == bool):
                raise TypeError(f"y must hold numbers (labels or targets), got dtype "
                                f"{self.y.dtype}")
        if self.w is not None and self.w.ndim != 1:
            raise ValueError(f"sample_weight must be one number per input, got shape "
                             f"{self.w.shape}")
        for what, a in (("y", self.y), ("sample_weight", self.w)):
            if a is not None and n is not None and len(a) != n:
                raise ValueError(f"{what} has {len(a)} rows but there are {n} inputs")
        if self.y is not None and self.y.dtype == np.float64:
            self.y = self.y.astype(np.float32)

    def take(self, keep: np.ndarray) -> _Labels:
        return _Labels(None if self.y is None else self.y[keep],
                       None if self.w is None else self.w[keep])

    def batch(self, idx) -> tuple:
        if self.y is None:
            return ()
        return (self.y[idx],) if self.w is None else (self.y[idx], self.w[idx])

    def signature(self) -> tuple:
        if self.y is None:
            return ()
        ys = tf.TensorSpec((None, *self.y.shape[1:]), tf.as_dtype(self.y.dtype))
        return (ys,) if self.w is None else (ys, tf.TensorSpec((None,), tf.float32))


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


def _weights_of(root) -> tuple[list, list]:
    """The Keras layers and the variables (of `FromTensor`) a block expression uses."""
    layers, variables, seen = [], [], set()
    for b in validate(root):
        if isinstance(b, Function):
            fn = b._tf_fn
            found = fn._keras_layers() if isinstance(fn, BlockLayer) else \
                [fn] if is_keras_layer(fn) else []
            for layer in found:
                if id(layer) not in seen:
                    seen.add(id(layer))
                    layers.append(layer)
        elif isinstance(b, FromTensor) and isinstance(b.tensor, tf.Variable):
            raise TypeError(f"{b.path}: holds a tf.Variable, which a Keras model cannot "
                            "track (train, checkpoint, save); create it as keras.Variable")
        elif isinstance(b, FromTensor) and isinstance(b.tensor, keras.Variable):
            if id(b.tensor) not in seen:
                seen.add(id(b.tensor))
                variables.append(b.tensor)
    return layers, variables


def _as_inputs(x, what: str = "x") -> list:
    if x is None:
        raise ValueError(f"no inputs: {what} is None")
    if isinstance(x, (str, bytes, dict)) or not isinstance(x, Iterable):
        raise TypeError(f"{what} must be a list (or iterable) of inputs, got "
                        f"{type(x).__name__}")
    if isinstance(x, (tf.data.Dataset, keras.utils.PyDataset)):
        raise TypeError(f"{what} must be a list of Python inputs; Model packs its own "
                        "batches")
    return x if isinstance(x, list) else list(x)


def _split_validation(data):
    """`(x, y)` or `(x, y, sample_weight)` tuples; a list is Fold-style inputs only."""
    if isinstance(data, tuple):
        if len(data) not in (2, 3):
            raise ValueError("validation_data must be (x, y), (x, y, sample_weight) or a list "
                             f"of inputs, got a tuple of {len(data)}")
        return data[0], data[1], data[2] if len(data) == 3 else None
    return data, None, None


def _check_batch_size(batch_size) -> None:
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) \
            or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")


def _refuse(kwargs: dict, what: str) -> None:
    if kwargs:
        raise TypeError(f"Model.{what} does not support {sorted(kwargs)} (inputs are lists "
                        "of Python objects that Model batches itself)")


def _atomic(filepath, overwrite: bool, write) -> None:
    path = os.fspath(filepath)
    if os.path.exists(path) and not overwrite:
        raise FileExistsError(f"{path} exists and overwrite=False")
    head, tail = os.path.split(path)
    tmp = os.path.join(head, f".tmp-{os.getpid()}-{tail}")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
