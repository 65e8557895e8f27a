"""Blocks that compute on tensors: `Function`, `FromTensor`, `Identity`, `Concat`, `Zeros`.

`Function` wraps any TensorFlow or Keras callable that works on a *batch*: its
inputs and outputs carry a leading batch dimension, which block types leave out.

>>> import tensorflow as tf
>>> from refold.blocks import Scalar, Function
>>> square = Function(tf.square)
>>> (Scalar() >> square).eval(3.0)
array(9., dtype=float32)
>>> ((Scalar(), Scalar()) >> Function(tf.add)).eval((1, 2))
array(3., dtype=float32)
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import Any

import numpy as np

from refold.blocks.block import Block
from refold.blocks.errors import BadValueError
from refold.blocks.evaluation.dataflow import DataFlow
from refold.blocks.op import Op
from refold.blocks.types import (
    BroadcastSequenceType,
    PyObjectType,
    ResultType,
    SequenceType,
    TensorType,
    TupleType,
    VoidType,
    convert_to_type,
)


def _tf():
    import tensorflow as tf
    return tf


def flat_tensor_types(t: ResultType) -> list[TensorType]:
    """The tensor types in a (nested) tuple of tensors, in order."""
    return list(t.terminal_types())


def check_tensor_nest(block: Block, t: ResultType, what: str) -> None:
    """Raises a `TypeError` unless `t` is a tensor or a nested tuple of tensors."""
    for leaf in t.terminal_types():
        if not isinstance(leaf, TensorType):
            raise TypeError(f"{block.path}: {what} must be tensors or tuples of tensors, "
                            f"got {t}")


def batch_call_structure(t: ResultType, flat: list) -> list:
    """Positional arguments for a batch function: a tuple input is unpacked one level."""
    it = iter(flat)
    value = t.unflatten(it, _shape_of(t))
    return list(value) if isinstance(t, TupleType) else [value]


def nest_flattener(t: ResultType) -> Callable[[Any], list]:
    """`t.flatten` for a tensor or nested tuple of tensors, made once per type: a
    function evaluates its block's input on every node, and the generic `flatten`
    walks the type each time. Same result: a tuple's items are read in order, as many
    as the type has (as `zip` reads them)."""
    if not isinstance(t, TupleType):
        return _one
    subs = [nest_flattener(item) for item in t]
    if all(f is _one for f in subs):
        return lambda x: [v for _, v in zip(subs, x)]

    if all(f is _one or isinstance(item, TupleType) and all(
            isinstance(i, TensorType) for i in item) for f, item in zip(subs, t)):
        # a tuple of tensors and tuples of tensors (a cell's states): read in place
        ranges = [None if f is _one else range(len(item)) for f, item in zip(subs, t)]

        def flatten_two(x):
            out: list = []
            for r, item in zip(ranges, x):
                if r is None:
                    out.append(item)
                else:
                    out.extend([v for _, v in zip(r, item)])
            return out
        return flatten_two

    def flatten(x):
        out: list = []
        for f, item in zip(subs, x):
            out.extend(f(item))
        return out
    return flatten


def nest_unflattener(t: ResultType) -> Callable[[list], Any]:
    """`t.unflatten(iter(flat), ...)` for a tensor or nested tuple of tensors, made
    once per type: the structure of `t` with the items of `flat` in order. A list of
    another length than `t`'s tensors goes through the generic `unflatten`."""
    n = len(flat_tensor_types(t))
    build = _builder(t, 0)

    def unflatten(flat: list):
        if len(flat) != n:
            return t.unflatten(iter(flat), _shape_of(t))
        return build(flat)
    return unflatten


def _builder(t: ResultType, at: int) -> Callable[[list], Any]:
    if not isinstance(t, TupleType):
        return lambda flat: flat[at]
    items = list(t)
    if all(not isinstance(item, TupleType) for item in items):
        end = at + len(items)
        return lambda flat: tuple(flat[at:end])
    subs = []
    for item in items:
        subs.append(_builder(item, at))
        at += len(flat_tensor_types(item))
    return lambda flat: tuple([f(flat) for f in subs])


def _one(x) -> list:
    return [x]


@functools.lru_cache(maxsize=1024)
def _shape_of(t: ResultType):
    """A `shaped_like` value for `unflatten` of a tuple-of-tensors type (types are
    immutable and hash by their repr, so the answer is kept per type)."""
    if isinstance(t, TupleType):
        return tuple(_shape_of(x) for x in t)
    return None


def type_of_batch_result(block: Block, value: Any, batch: int) -> ResultType:
    """The block type of a batch function's result (a tensor or nested tuple of them)."""
    tf = _tf()
    if isinstance(value, (tuple, list)):
        if not value:
            raise TypeError(f"{block.path}: the function returned an empty {type(value).__name__}")
        return TupleType(*(type_of_batch_result(block, v, batch) for v in value))
    try:
        tensor = tf.convert_to_tensor(value)
    except (TypeError, ValueError):
        raise TypeError(f"{block.path}: the function returned {value!r}, not a tensor") from None
    shape = tuple(tensor.shape)
    if len(shape) == 0:
        raise TypeError(f"{block.path}: expected a batch tensor from the function, saw a scalar")
    if shape[0] != batch:
        raise TypeError(f"{block.path}: the function changed the batch dimension: "
                        f"a batch of {batch} gave shape {shape}")
    return TensorType(shape[1:], tensor.dtype.name)


def flatten_outputs(value: Any) -> list:
    if isinstance(value, (tuple, list)):
        return [x for v in value for x in flatten_outputs(v)]
    return [value]


class FromTensor(Block):
    """A constant or trainable tensor (`tf.Variable`, Keras variable, numpy array).

    It takes no input (`VoidType`); gradients flow into variables.
    """

    _expected_input_types = (VoidType,)
    _expected_output_types = (TensorType,)

    def __init__(self, tensor: Any, name: str | None = None):
        tf = _tf()
        if isinstance(tensor, (np.ndarray, np.generic)):
            tensor = tf.constant(tensor)
        if not (tf.is_tensor(tensor) or hasattr(tensor, "value") and hasattr(tensor, "shape")):
            raise TypeError(f"{tensor!r} is not a tensor or np.ndarray")
        shape = tuple(tensor.shape)
        if any(d is None for d in shape):
            raise TypeError(f"shape {shape} is not fully defined")
        self._tensor = tensor
        ttype = TensorType(shape, _tf().as_dtype(tensor.dtype).name)
        if name is None:  # the tensor's or variable's name (eager tensors have none)
            name = getattr(tensor, "name", None)
            name = name if isinstance(name, str) else None
        super().__init__(input_type=VoidType(), output_type=ttype, name=name)

        def read(batch_size):
            t = tf.convert_to_tensor(self._tensor)
            return [tf.broadcast_to(t[None], tf.concat([[batch_size], tf.shape(t)], 0))]

        self._op = Op(self.name or "FromTensor", read, [], [ttype], key=("tensor", id(tensor)),
                      handles_empty=True)

    @property
    def tensor(self):
        return self._tensor

    def ops(self) -> list[Op]:
        return [self._op]

    def weights(self) -> list:
        """The tensor, if it is a variable (a constant has no weights)."""
        return [self._tensor] if hasattr(self._tensor, "assign") else []

    def evaluate(self, ctx, x):
        return ctx.op(self._op, [])[0]

    def dataflow(self) -> DataFlow:
        """The output is the op's (which reads nothing)."""
        return DataFlow({self._op: [], DataFlow.OUTPUT: [self._op]})


class Function(Block):
    """Wraps a batch TensorFlow/Keras callable as a block.

    A tuple input is passed as positional arguments (nested tuples stay tuples);
    the output may be a tensor or a nested tuple of tensors. The output type is
    inferred by calling the function once on a batch of zeros, unless
    `infer_output_type=False` (then set it with `set_output_type`).

    Two `Function` blocks wrapping the same callable (e.g. one layer used in two
    places) with the same signature compute the same op and are batched together.

    Args:
        tf_fn: a callable on batch tensors, or a `Layer`.
        infer_output_type: whether to call `tf_fn` to find the output type.
        handles_empty: whether `tf_fn` works on a batch of zero rows (see
            `Op`); None (the default) takes `tf_fn.handles_empty` if it has one
            (the library's layers say), else False.
        random: whether `tf_fn` draws random numbers (`blocks.noise`: `dropout`,
            `uniform`, `normal`), which then differ per node and are reproducible;
            None (the default) takes `tf_fn.random` if it has one (the library's
            layers say), True for a Keras noise layer (`keras.layers.Dropout`,
            `GaussianNoise`, ...), which then draws per node, else False.

    A callable that takes a `training` argument (a Keras layer whose `call` does,
    or a function with a `training` parameter) gets the training flag in effect
    (`blocks.evaluation.training_mode`): True in `Model.fit`'s training step, False elsewhere.
    """

    _expected_input_types = (TensorType, TupleType)
    _expected_output_types = (TensorType, TupleType)

    def __init__(self, tf_fn: Callable, name: str | None = None, infer_output_type: bool = True,
                 handles_empty: bool | None = None, random: bool | None = None):
        if not callable(tf_fn):
            raise TypeError(f"tf_fn is not callable: {tf_fn!r}")
        for arg, value in (("handles_empty", handles_empty), ("random", random)):
            if value is not None and not isinstance(value, bool):
                raise TypeError(f"{arg} must be True, False or None, got {value!r}")
        self._tf_fn = tf_fn
        self._handles_empty = handles_empty
        self._random = random
        self._infer_output = infer_output_type
        self._output_checked = False
        self._op: Op | None = None
        self._io: tuple | None = None  # (flatten, op, unflatten), made at the first call
        from refold.blocks.layers import Layer
        self._layer = tf_fn if isinstance(tf_fn, Layer) else None
        super().__init__(name=name)
        if self._layer is not None:
            self._layer.attach(self)

    @property
    def tf_fn(self):
        return self._tf_fn

    @property
    def infers_output_type(self) -> bool:
        """Whether the block calls its function on a batch of zeros to find (and
        check) its output type, and so sees which variables it reads."""
        return self._infer_output

    @property
    def fn_name(self) -> str:
        """The wrapped function's name, as repr and error messages show it.

        >>> Function(abs).fn_name
        'abs'
        """
        return self._fn_name()

    def _label(self) -> str:
        """`Function 'name'`; a layer of the library's without one shows as itself
        (`Embedding 'words'`, `FC`): the block the user wrote."""
        if self._name is None and self._layer is not None:
            return self._layer.label
        return super()._label()

    def _named(self) -> bool:
        return self._name is not None or (self._layer is not None
                                          and self._layer.name is not None)

    def _fn_name(self) -> str:
        return _callable_name(self._tf_fn)

    def _repr_args(self):
        return {"tf_fn": self._fn_name()}

    def infer_types(self):
        if self._layer is not None:
            try:
                self._layer.set_input_type(self.input_type)
                self._layer.set_output_type(self.output_type)
            except TypeError as e:  # the layer names itself; say where it is used
                message, own = str(e), f"{self._layer._label()}: "
                if self._label() == self._layer._label() and message.startswith(own):
                    message = message[len(own):]  # the path ends with that label already
                raise TypeError(f"{self.path}: {message}") from None
            self.set_input_type(self._layer.input_type)
            self.set_output_type(self._layer.output_type)
        if self.input_type is not None:
            check_tensor_nest(self, self.input_type, "function inputs")
            if not flat_tensor_types(self.input_type):
                raise TypeError(f"{self.path}: functions must take at least one tensor input")
            # Call the function once, also when the context set the output type first
            # (e.g. a Fold's state), so that a function that disagrees fails here.
            if self._infer_output and not self._output_checked and (
                    self._layer is None or self.output_type is None):
                self._output_checked = True
                self.set_output_type(self._call_on_zeros())
        if self.output_type is not None:
            check_tensor_nest(self, self.output_type, "function outputs")

    @property
    def random(self) -> bool:
        """Whether the function draws random numbers per node (see `Op`'s `random`)."""
        if self._random is not None:
            return self._random
        from refold.blocks.noise import draws_noise, is_keras_noise
        fn = self._tf_fn
        return getattr(fn, "random", False) is True or (is_keras_noise(fn) and draws_noise(fn))

    def _call_on_zeros(self) -> ResultType:
        tf = _tf()
        batch = 2
        flat = [tf.zeros((batch, *t.shape), t.dtype) for t in flat_tensor_types(self.input_type)]
        args = batch_call_structure(self.input_type, flat)
        from refold.blocks.noise import is_keras_noise, keras_noise
        fn = self._tf_fn
        if is_keras_noise(fn):  # as the op computes it (Keras' would cast to its dtype)
            fn = lambda *xs: keras_noise(self._tf_fn, *xs)  # noqa: E731
        try:
            with tf.GradientTape() as tape:  # which trainable variables it reads
                result = fn(*args)  # in inference mode: it draws nothing
        except Exception as e:
            raise TypeError(f"{self.path}: calling {self._fn_name()} on a batch of "
                            f"{self.input_type} failed: {type(e).__name__}: {e}") from e
        self._variables_read = list(tape.watched_variables())
        return type_of_batch_result(self, result, batch)

    def variables_read(self) -> list:
        """The `tf.Variable`s the function read when this block called it on a batch
        of zeros to find its output type (`compiler.Model` warns of any that no
        block declares in `weights`: it would neither train nor save them)."""
        return list(getattr(self, "_variables_read", ()))

    def op(self) -> Op:
        """The op this block calls (its types must be known)."""
        if self._op is None:
            in_types = flat_tensor_types(self.input_type)
            out_types = flat_tensor_types(self.output_type)
            name = self.name or self._fn_name()
            empty = self._handles_empty
            if empty is None:
                empty = getattr(self._tf_fn, "handles_empty", False) is True
            random = self.random
            key = (self._tf_fn, self.input_type, self.output_type, empty, random)
            from refold.blocks.layers import Layer, is_keras_layer
            layer = isinstance(self._tf_fn, Layer) or is_keras_layer(self._tf_fn)
            self._op = Op(name, batch_function(self._tf_fn, self.input_type, random),
                          in_types, out_types, key=key,
                          prelude_only=getattr(self._tf_fn, "reads_sparsely", False),
                          check=getattr(self._tf_fn, "check_inputs", None), handles_empty=empty,
                          random=random, traceable=layer, pure=layer or _pure(self._tf_fn),
                          weight_grads=getattr(self._tf_fn, "weight_grads_from_inputs", None),
                          side_by_side=getattr(self._tf_fn, "side_by_side", False) is True)
        return self._op

    def ops(self) -> list[Op]:
        return [self.op()]

    def weights(self) -> list:
        """The function's Keras layers: a `blocks.Layer`'s, or the function itself
        if it is a Keras layer; none for a plain function."""
        from refold.blocks.layers import Layer, is_keras_layer
        fn = self._tf_fn
        if isinstance(fn, Layer):
            return fn.keras_layers
        return [fn] if is_keras_layer(fn) else []

    def build_layers(self) -> None:
        """Builds the function's Keras layers that are not built yet by calling it once
        on symbolic inputs (`keras.KerasTensor`s): a function made with
        `infer_output_type=False` is not called before a model's first step, and a
        model must know its weights before its optimizer is built."""
        if self.input_type is None or all(
                getattr(layer, "built", True) for layer in self.weights()):
            return
        import keras
        flat = [keras.KerasTensor((None, *t.shape), t.dtype)
                for t in flat_tensor_types(self.input_type)]
        try:  # symbolic: nothing is computed, so a check of values cannot fail
            self._tf_fn(*batch_call_structure(self.input_type, flat))
        except Exception as e:
            raise TypeError(f"{self.path}: building the Keras layers of {self._fn_name()} "
                            f"(a call on symbolic inputs of {self.input_type}) failed: "
                            f"{type(e).__name__}: {e}. Build them before making the "
                            f"model") from e

    def evaluate(self, ctx, x):
        io = self._io
        if io is None:  # the types are final once the block is evaluated
            out = self.output_type
            io = self._io = (nest_flattener(self.input_type), self.op(),
                             None if isinstance(out, TensorType) else nest_unflattener(out))
        flatten, op, unflatten = io
        try:  # a single tensor in (flatten is `_one`) needs no call to flatten it
            flat_out = ctx.op(op, [x] if flatten is _one else flatten(x))
        except BadValueError as e:
            from refold.blocks.errors import InputError
            # (the path names the layer already when it shows as itself)
            said = "" if self._label() == getattr(self._layer, "_label", str)() else \
                f"{self._fn_name()}: "
            raise InputError(self.path, f"{said}{e}") from None
        except _tf().errors.OpError as e:  # only the eager reference evaluator gets here
            import re

            from refold.blocks.errors import InputError
            reason = re.sub(r"\{\{.*?\}\}\s*", "", str(e.message)).strip().splitlines()[0]
            raise InputError(self.path, f"{self._fn_name()} failed on this input: "
                             f"{type(e).__name__}: {reason}") from e
        if unflatten is None:  # a single tensor out
            return flat_out[0] if len(flat_out) == 1 else self.output_type.unflatten(
                iter(flat_out), None)
        return unflatten(flat_out)

    def dataflow(self) -> DataFlow:
        """The op reads the input; the output is the op's."""
        ops = self.ops()
        reads: dict = {op: [DataFlow.INPUT] for op in ops}
        reads[DataFlow.OUTPUT] = ops
        return DataFlow(reads)


def batch_function(fn: Callable, in_type: ResultType, random: bool = False) -> Callable:
    """The op function of `Function(fn)` on inputs of `in_type`: flat tensors in
    (and with `random`, the nodes' keys last, `blocks.noise`), flat tensors out. A
    Keras noise layer draws per node (`blocks.noise.keras_noise`); a callable that
    takes `training` gets the flag in effect (`blocks.evaluation.training_mode`)."""
    from refold.blocks.evaluation.training_mode import current, takes_training
    from refold.blocks.noise import is_keras_noise, keras_noise, node_keys
    if is_keras_noise(fn):
        def compute(args):
            return keras_noise(fn, *args)
    elif takes_training(fn):
        def compute(args):
            return fn(*args, training=current().training)
    else:
        def compute(args):
            return fn(*args)

    if not random:
        def call(*flat):
            return flatten_outputs(compute(batch_call_structure(in_type, list(flat))))
        return call

    def keyed_call(*flat):
        with node_keys(flat[-1]):
            return flatten_outputs(compute(batch_call_structure(in_type, list(flat[:-1]))))
    return keyed_call


def _pure(fn) -> bool:
    """Whether `fn` computes with TensorFlow ops only, nothing in Python per call: a
    TensorFlow function (`tf.add`), or a function of the library's that says so
    (`fn.pure = True`). See `Op`'s `pure`."""
    if getattr(fn, "pure", False) is True:
        return True
    return isinstance(fn, types.FunctionType | types.BuiltinFunctionType) and \
        (getattr(fn, "__module__", None) or "").startswith("tensorflow.")


def _callable_name(fn) -> str:
    """A callable's name as the user would write it: a function's or layer's own
    name, `partial(f)` for a partial, the class name for another callable object.

    >>> import functools
    >>> _callable_name(abs), _callable_name(functools.partial(max, 0))
    ('abs', 'partial(max)')
    """
    if isinstance(fn, functools.partial):
        return f"partial({_callable_name(fn.func)})"
    name = getattr(fn, "__name__", None) or getattr(fn, "name", None)
    return name if isinstance(name, str) else type(fn).__name__


class Identity(Block):
    """Passes its input through; its input and output types are the same."""

    def __init__(self, name: str | None = None):
        super().__init__(name=name)

    def infer_types(self):
        self.set_output_type(self.input_type)
        self.set_input_type(self.output_type)

    def evaluate(self, ctx, x):
        return x


class Concat(Function):
    """Concatenates a tuple of tensors along `concat_dim` (scalars become vectors).

    >>> from refold.blocks import Scalar, Vector
    >>> ((Scalar(), Vector(2)) >> Concat()).eval((1, [2, 3]))
    array([1., 2., 3.], dtype=float32)
    """

    def __init__(self, concat_dim: int = 0, flatten: bool = False, name: str | None = None):
        self._concat_dim = concat_dim
        self._flatten = flatten
        tf = _tf()

        def concat(*args):
            flat = flatten_outputs(args)
            flat = [tf.reshape(a, [-1, 1]) if a.shape.rank == 1 else a for a in flat]
            return tf.concat(flat, axis=concat_dim + 1)

        concat.__name__ = "concat"
        concat.pure = True  # TensorFlow ops only (`Op`'s `pure`)
        concat.side_by_side = concat_dim == 0  # its arguments one after another (`Op`'s)
        super().__init__(concat, name=name, infer_output_type=False, handles_empty=True)

    def _repr_args(self):
        return {"concat_dim": self._concat_dim, "flatten": self._flatten}

    def infer_types(self):
        t = self.input_type
        if t is None:
            return
        if not isinstance(t, TupleType):
            raise TypeError(f"{self.path}: Concat inputs must be a tuple of tensors: {t}")
        if not self._flatten and any(isinstance(x, TupleType) for x in t):
            raise TypeError(f"{self.path}: input type {t} contains nested tuples, expected a "
                            "flat tuple of tensors; set flatten=True in the constructor")
        check_tensor_nest(self, t, "Concat inputs")
        items = flat_tensor_types(t)
        if not items:
            raise TypeError(f"{self.path}: Concat requires at least one tensor as input")
        shapes = [x.shape if x.shape else (1,) for x in items]
        d = self._concat_dim
        for i, (x, s) in enumerate(zip(items, shapes)):
            if len(s) <= d:
                raise TypeError(f"{self.path}: Concat argument {i} of type {x} has rank less "
                                f"than {d + 1}")
            if x.dtype != items[0].dtype:
                raise TypeError(f"{self.path}: Cannot concat tensors of different dtypes: "
                                f"{items[0].dtype} vs. {x.dtype}")
            if s[:d] + s[d + 1:] != shapes[0][:d] + shapes[0][d + 1:]:
                raise TypeError(f"{self.path}: Shapes for concat don't match: "
                                f"{shapes[0]} vs. {s}")
        out = list(shapes[0])
        out[d] = sum(s[d] for s in shapes)
        self.set_output_type(TensorType(out, items[0].dtype))


class Zeros(Block):
    """Zeros of `output_type`: zero tensors, tuples of them, or an empty sequence."""

    _expected_input_types = (VoidType,)

    def __init__(self, output_type: Any = None, name: str | None = None):
        super().__init__(input_type=VoidType(), name=name)
        if output_type is not None:
            self.set_output_type(convert_to_type(output_type))

    def _repr_args(self):
        return {"output_type": self.output_type}

    def infer_types(self):
        t = self.output_type
        if isinstance(t, BroadcastSequenceType):
            raise TypeError(f"{self.path}: cannot create Zeros for an infinite sequence type: "
                            f"{t}")
        if isinstance(t, PyObjectType) or (
                isinstance(t, TupleType) and not isinstance(t, SequenceType)
                and any(isinstance(x, PyObjectType) for x in t.terminal_types())):
            raise TypeError(f"{self.path}: all terminal types must be tensors: {t}")

    def evaluate(self, ctx, x):
        return _zeros(ctx, self.output_type)


def _zeros(ctx, t: ResultType):
    if isinstance(t, TensorType):
        return ctx.constant(np.zeros(t.shape, t.dtype), t)
    if isinstance(t, TupleType):
        return tuple(_zeros(ctx, x) for x in t)
    if isinstance(t, SequenceType):
        return []
    return None
