"""Layers: weights shared by every block that uses them (`FC`, `Embedding`, `ScopedLayer`).

A layer is a callable over *batches* with a typed input and output, like a
`Function`'s `tf_fn`; unlike a block it may be used in many places, and every use
shares its weights. `layer >> block` and `block >> layer` wrap it in a `Function`.
Keras 3 layers do the work underneath; `layer.weights` lists the variables.

>>> from refold.blocks import Vector, FC
>>> fc = FC(3, activation=None)
>>> a, b = Vector(2) >> fc, Vector(2) >> fc   # one set of weights, used twice
>>> bool((a.eval([1, 2]) == b.eval([1, 2])).all())
True
>>> fc.output_type
TensorType((3,), 'float32')
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from refold.blocks.block import IOBase
from refold.blocks.types import TensorType, TupleType


def _keras():
    import keras
    return keras


def is_keras_layer(x: Any) -> bool:
    """Whether `x` is a Keras layer (without importing Keras if it is not loaded)."""
    import sys
    keras = sys.modules.get("keras")
    return keras is not None and isinstance(x, keras.layers.Layer)


class Layer(IOBase):
    """Base class: a typed callable over batch tensors that owns weights.

    Subclasses implement `_call(*batch_tensors)` and may fix types in `__init__`.
    Every `Function` block wrapping the layer has the layer's input and output types.
    """

    # As for blocks: `array >> layer` must reach `Layer.__rrshift__`, not numpy's shift.
    __array_ufunc__ = None

    reads_sparsely = False
    """Whether calls read rows of a variable (lookups), which must run on input data only."""

    handles_empty = False
    """Whether calls work on a batch of zero rows (see `Op`): True for the library's
    own layers, which are tested on zero rows; a subclass sets it when its `_call` does."""

    random = False
    """Whether calls draw random numbers per node (`blocks.noise`; see `Op`): a layer
    with dropout says so, and its `_call` reads the training flag itself
    (`blocks.evaluation.training_mode.current()`)."""

    def __init__(self, input_type: Any = None, output_type: Any = None,
                 name: str | None = None):
        self._functions: list = []
        super().__init__(input_type, output_type, name)

    def __call__(self, *args):
        return self._call(*args)

    def _call(self, *args):
        raise NotImplementedError

    @property
    def __name__(self) -> str:
        return self.name or type(self).__name__

    @property
    def weights(self) -> list:
        """The layer's variables (empty until the layer has been called or built)."""
        return [w for layer in self._keras_layers() for w in layer.weights]

    @property
    def keras_layer(self):
        """The Keras layer holding this layer's weights, if it has one (`td.FC`'s
        `Dense`), else None."""
        return self._keras_layer()

    @property
    def keras_layers(self) -> list:
        """The Keras layers holding this layer's weights (what a model tracks)."""
        return self._keras_layers()

    def _keras_layer(self):
        return None

    def _keras_layers(self) -> list:
        """The Keras layers holding this layer's weights (a model tracks them)."""
        layer = self._keras_layer()
        return [] if layer is None else [layer]

    def attach(self, function_block) -> None:
        """Ties `function_block` (a `Function` wrapping this layer) to it: the block
        has this layer's input and output types, and each learns the other's."""
        self._functions.append(function_block)
        self.infer_types()

    def infer_types(self) -> None:
        for f in self._functions:
            f.set_input_type(self.input_type)
            f.set_output_type(self.output_type)
            self.set_input_type(f.input_type)
            self.set_output_type(f.output_type)

    def _label(self) -> str:
        return type(self).__name__ if self._name is None else \
            f"{type(self).__name__} {self._name!r}"

    def __repr__(self) -> str:
        return f"<td.{self._label()}>"

    def __rshift__(self, rhs: Any):
        from refold.blocks.tensors import Function
        return Function(self) >> rhs

    def __rrshift__(self, lhs: Any):
        from refold.blocks.composition import Pipe
        from refold.blocks.tensors import Function
        return Pipe(lhs, Function(self), _from_rshift=True)


class FC(Layer):
    """A fully connected layer: `activation(x @ W + b)` on float32 vectors.

    Args:
        num_units_out: the output size.
        activation: a callable or Keras activation name; `None` for linear.
            Defaults to ReLU, as in Fold.
        initializer: a Keras initializer for the weights (Glorot uniform by default).
        name: a name for the layer and its variables.
        input_keep_prob: Fold's dropout on the input: in training each input
            element is kept with this probability (and scaled by its inverse), per
            node (`blocks.noise`); None or 1 for no dropout.
        output_keep_prob: the same on the output, after the activation.

    The keep probabilities are Fold's spelling of `FC`'s dropout, kept so that a
    Fold model reads the same; elsewhere (`td.Dropout`, the zoo's cells) dropout
    is a Keras-style rate, `1 - keep_prob`.

    >>> import refold as td
    >>> fc = td.FC(4, activation=None, input_keep_prob=0.5)
    >>> block = td.Vector(2) >> fc
    >>> bool((block.eval([1.0, 2.0]) == block.eval([1.0, 2.0])).all())   # inference
    True
    >>> fc.random
    True
    """

    handles_empty = True

    def __init__(self, num_units_out: int, activation: Any = "relu",
                 initializer: Any = None, name: str | None = None,
                 input_keep_prob: float | None = None, output_keep_prob: float | None = None):
        if isinstance(num_units_out, bool) or not isinstance(num_units_out, int) \
                or num_units_out <= 0:
            raise ValueError(f"FC: num_units_out must be a positive int, got {num_units_out!r}")
        for arg, p in (("input_keep_prob", input_keep_prob),
                       ("output_keep_prob", output_keep_prob)):
            if p is not None and (isinstance(p, bool) or not isinstance(p, (int, float))
                                  or not 0 < p <= 1):
                raise ValueError(f"FC: {arg} must be None or a number in (0, 1], got {p!r}")
        keras = _keras()
        self._drop_in = 0.0 if input_keep_prob is None else 1.0 - float(input_keep_prob)
        self._drop_out = 0.0 if output_keep_prob is None else 1.0 - float(output_keep_prob)
        self._num_units_out = num_units_out
        self._dense = keras.layers.Dense(
            num_units_out, activation=activation,
            kernel_initializer=initializer or "glorot_uniform",
            name=name or f"FC_{num_units_out}")
        super().__init__(output_type=TensorType((num_units_out,)), name=name)

    @property
    def output_size(self) -> int:
        return self._num_units_out

    @property
    def random(self) -> bool:
        """Whether it drops out (a keep probability below 1)."""
        return self._drop_in > 0 or self._drop_out > 0

    def _keras_layer(self):
        return self._dense

    def infer_types(self):
        t = self.input_type
        if t is not None:
            if not isinstance(t, TensorType) or t.ndim != 1:
                raise TypeError(f"{self._label()}: FC input shape must be 1D: {t}")
            if t.dtype != "float32":
                raise TypeError(f"{self._label()}: FC input dtype must be float32: {t}")
            if not self._dense.built:  # weights exist as soon as their shape is known
                self._dense.build((None, t.shape[0]))
        super().infer_types()

    def _call(self, x):
        if not self.random:
            return self._dense(x)
        from refold.blocks.noise import dropout
        return dropout(self._dense(dropout(x, self._drop_in)), self._drop_out)


class Embedding(Layer):
    """A lookup table: an integer id gives a row of a trainable `[num_buckets, units]` matrix.

    An id outside `[0, num_buckets)` is an input error (`InputError`) that names
    the block path, the example and the id, in `block.eval` as in a batched run.
    TensorFlow Fold wrapped ids instead (`abs`, then modulo `num_buckets`): that is
    `mod_inputs=True`, for hashed ids that may fall anywhere.

    Args:
        num_buckets: the number of rows.
        num_units_out: the size of each row.
        initializer: a Keras initializer, or an array of shape `[num_buckets, units]`
            (e.g. pretrained word vectors).
        trainable: whether the table is trained.
        mod_inputs: wrap ids into range (`abs(id) % num_buckets`, Fold's default)
            instead of refusing those outside it.

    >>> import refold as td
    >>> e = td.Scalar("int32") >> td.Embedding(10, 3)
    >>> e.eval(13)
    Traceback (most recent call last):
    ...
    refold.blocks.errors.InputError: Pipe[1] > Embedding: id 13 is not in [0, 10)
    (Embedding(..., mod_inputs=True) wraps ids into range)
    >>> wrapped = td.Scalar("int32") >> td.Embedding(10, 3, mod_inputs=True)
    >>> bool((wrapped.eval(13) == wrapped.eval(3)).all())
    True
    """

    reads_sparsely = True
    handles_empty = True

    def __init__(self, num_buckets: int, num_units_out: int, initializer: Any = None,
                 name: str | None = None, trainable: bool = True, mod_inputs: bool = False):
        import numpy as np
        keras = _keras()
        for arg, v in (("num_buckets", num_buckets), ("num_units_out", num_units_out)):
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ValueError(f"Embedding: {arg} must be a positive int, got {v!r}")
        if initializer is not None and not isinstance(initializer, (str, Callable)) \
                and hasattr(initializer, "shape"):
            array = np.asarray(initializer, dtype="float32")
            if array.shape != (num_buckets, num_units_out):
                raise ValueError(f"Embedding: initializer has shape {array.shape}, expected "
                                 f"{(num_buckets, num_units_out)}")
            initializer = keras.initializers.Constant(array)
        if not isinstance(mod_inputs, bool):
            raise ValueError(f"Embedding: mod_inputs must be True or False, got {mod_inputs!r}")
        self._num_buckets, self._num_units_out = num_buckets, num_units_out
        self._mod_inputs = mod_inputs
        self._table = keras.layers.Embedding(
            num_buckets, num_units_out,
            embeddings_initializer=initializer or "uniform", trainable=trainable,
            name=name or f"Embedding_{num_buckets}_{num_units_out}")
        self._table.build((None,))
        super().__init__(output_type=TensorType((num_units_out,)), name=name)

    def get_config(self) -> dict:
        """The constructor's arguments, without an array initializer: the table's
        values are weights, saved beside the config (a word-vector table would
        otherwise be copied into it)."""
        config = super().get_config()
        if hasattr(config["initializer"], "shape"):
            config["initializer"] = None
        return config

    @property
    def num_buckets(self) -> int:
        return self._num_buckets

    @property
    def num_units_out(self) -> int:
        return self._num_units_out

    @property
    def embeddings(self):
        """The table variable, `[num_buckets, num_units_out]`."""
        return self._table.embeddings

    def _keras_layer(self):
        return self._table

    def infer_types(self):
        t = self.input_type
        if t is not None:
            if not isinstance(t, TensorType) or t.ndim != 0:
                raise TypeError(f"{self._label()}: Embeddings take scalar inputs, got {t}")
            if not t.dtype.startswith(("int", "uint")):
                raise TypeError(f"{self._label()}: Embeddings take integer inputs, got {t}")
        super().infer_types()

    @property
    def check_inputs(self):
        """The lookup op's input check (`Op.check`): an `IdRange` that refuses ids
        outside the table when they are not wrapped (the default); None when they
        are (`mod_inputs=True`), so that expansion does not read the ids to check
        nothing."""
        if self._mod_inputs:
            return None
        from refold.blocks.op import IdRange
        return IdRange(self._num_buckets,
                       "Embedding(..., mod_inputs=True) wraps ids into range")

    def _call(self, ids):
        import tensorflow as tf
        if ids.dtype not in (tf.int32, tf.int64):
            ids = tf.cast(ids, tf.int32)
        if self._mod_inputs:
            ids = tf.math.floormod(tf.abs(ids), self._num_buckets)
        # Gathering from the tf.Variable itself reads only the rows asked for
        # (ResourceGather). Gathering from the Keras variable converts it to a tensor
        # first: a read of the whole table, which TensorFlow copies once a sparse
        # update has touched the variable (BENCHMARKS.md, "Where a step's time goes").
        table = self._table.embeddings
        return tf.gather(getattr(table, "value", table), ids)


class ScopedLayer(Layer):
    """Wraps any Keras layer or RNN cell (or a callable) as a weight-sharing layer.

    For an RNN cell (anything with `state_size`, such as `keras.layers.LSTMCell`)
    the layer takes `(input, state)` and returns `(output, state)`, ready for `RNN`
    and `Fold`; the types of output and state are known from the cell.

    >>> import keras
    >>> from refold.blocks import ScopedLayer
    >>> ScopedLayer(keras.layers.LSTMCell(4)).output_type  # (output, (h, c))
    TupleType(TensorType((4,), 'float32'),
              TupleType(TensorType((4,), 'float32'), TensorType((4,), 'float32')))
    """

    def __init__(self, layer_fn: Callable, name_or_scope: str | None = None):
        if not callable(layer_fn):
            raise TypeError(f"ScopedLayer: layer_fn is not callable: {layer_fn!r}")
        self._layer = layer_fn
        self._is_cell = hasattr(layer_fn, "state_size")
        output_type = None
        if self._is_cell:
            output_type = TupleType(_size_type(getattr(layer_fn, "output_size", None)
                                               or _first(layer_fn.state_size)),
                                    _size_type(layer_fn.state_size))
        super().__init__(output_type=output_type, name=name_or_scope)

    @property
    def random(self) -> bool:
        """Whether it wraps a Keras noise layer (`Dropout`, `GaussianNoise`, ...) that
        draws anything: then it draws per node (`blocks.noise.keras_noise`)."""
        from refold.blocks.noise import draws_noise, is_keras_noise
        return is_keras_noise(self._layer) and draws_noise(self._layer)

    @property
    def state_size(self):
        return getattr(self._layer, "state_size", None)

    @property
    def output_size(self):
        return getattr(self._layer, "output_size", None)

    def _keras_layer(self):
        return self._layer if is_keras_layer(self._layer) else None

    def infer_types(self):
        super().infer_types()
        layer = self._keras_layer()
        if layer is not None and not layer.built and self.input_type is not None:
            # Build the weights now (by one call on zeros), not inside a traced function.
            import tensorflow as tf

            from refold.blocks.tensors import batch_call_structure, flat_tensor_types
            flat = [tf.zeros((1, *t.shape), t.dtype) for t in flat_tensor_types(self.input_type)]
            self(*batch_call_structure(self.input_type, flat))

    def _call(self, *args):
        from refold.blocks.evaluation.training_mode import current
        from refold.blocks.noise import keras_noise
        layer = self._layer
        calls = self.__dict__.get("_calls")
        if calls is None:  # (a Keras noise layer, takes `training`), found once
            from refold.blocks.evaluation.training_mode import takes_training
            from refold.blocks.noise import is_keras_noise
            calls = self._calls = (is_keras_noise(layer), takes_training(layer))
        if calls[0]:
            return keras_noise(layer, *args)
        kwargs = {"training": current().training} if calls[1] else {}
        if self._is_cell:
            x, state = args
            state_arg = list(state) if isinstance(state, tuple) else state
            out, new_state = layer(x, state_arg, **kwargs)
            if isinstance(new_state, list):
                new_state = tuple(new_state)
            return out, new_state
        return layer(*args, **kwargs)


def _first(size):
    return size[0] if isinstance(size, (list, tuple)) else size


def _size_type(size):
    if isinstance(size, (list, tuple)):
        items = [_size_type(s) for s in size]
        return TupleType(*items) if len(items) > 1 else items[0]
    return TensorType((int(size),))
