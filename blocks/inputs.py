"""Blocks that read Python inputs: constants, transforms, items, lengths, one-hots.

These blocks run on the Python side of evaluation (they add no op to the graph),
except that `Tensor`, `Length` and the one-hot blocks emit constants.

>>> from refold.blocks import Scalar, Vector, GetItem, Length, OneHot
>>> Scalar('int32').eval(7)
array(7, dtype=int32)
>>> (GetItem('xs') >> Length()).eval({'xs': [1, 2, 3]})
array(3., dtype=float32)
>>> OneHot(3).eval(1)
array([0., 1., 0.], dtype=float32)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from refold.blocks.block import PY, Block, bad_input, block_factory
from refold.blocks.errors import BadValueError, InputKeyError
from refold.blocks.evaluation.values import describe as _describe
from refold.blocks.evaluation.values import scalar_ranges, to_array
from refold.blocks.types import (
    BroadcastSequenceType,
    PyObjectType,
    SequenceType,
    TensorType,
    TupleType,
    VoidType,
)


class Tensor(Block):
    """Converts a Python value (a number, a nested list, an array) to a tensor.

    Conversion is strict (see `blocks.evaluation.values`): numbers only (no `"3.5"`), integral
    values for integer dtypes (no `2.7`, no `True`), values within the dtype's range
    (no `1e39` for float32), and by default no NaN or inf. A bad value raises
    `InputError` naming the block path (and, in a batch, the example).

    Args:
        shape: the tensor's shape, e.g. `[3]` (the batch dimension excluded).
        dtype: its dtype, e.g. `'float32'` or `'int32'`.
        allow_nonfinite: accept NaN and inf (float and complex dtypes), for inputs
            where they mean something the model handles itself, e.g. masked by a
            `td.Function` before any layer. Default False: a NaN feature is refused,
            since it would make every weight it reaches NaN at the next step.

    >>> Scalar().eval(float('nan'))
    Traceback (most recent call last):
    ...
    refold.blocks.errors.InputError: Scalar: expected a TensorType((), 'float32'), got nan: \
nan is not finite (give the block allow_nonfinite=True to accept NaN and inf)
    >>> Scalar(allow_nonfinite=True).eval(float('inf'))
    array(inf, dtype=float32)
    """

    _expected_input_types = (PyObjectType,)
    _expected_output_types = (TensorType,)

    def __init__(self, shape: Sequence[int], dtype: Any = "float32", name: str | None = None,
                 allow_nonfinite: bool = False):
        if not isinstance(allow_nonfinite, bool):
            raise TypeError(f"allow_nonfinite must be True or False, got {allow_nonfinite!r}")
        ttype = TensorType(shape, dtype)
        super().__init__(input_type=PY, output_type=ttype, name=name)
        self._ttype = ttype
        self._allow_nonfinite = allow_nonfinite

    @property
    def shape(self):
        return self._ttype.shape

    @property
    def dtype(self):
        return self._ttype.dtype

    @property
    def allow_nonfinite(self) -> bool:
        return self._allow_nonfinite

    def _repr_args(self):
        return {"dtype": self.dtype, "shape": self.shape, **self._nonfinite_arg()}

    def _nonfinite_arg(self) -> dict:
        return {"allow_nonfinite": True} if self._allow_nonfinite else {}

    def evaluate(self, ctx, x):
        t = self._ttype
        fast = self.__dict__.get("_scalar_ranges")
        if fast is None:
            fast = self._scalar_ranges = scalar_ranges(t)
        fast = fast.get(type(x))  # a number for a scalar: to_array's common case, inlined
        if fast is not None and fast[0] <= x <= fast[1]:
            if fast[3]:  # converted with the other constants of its type, if at all
                return ctx.number(x, t)
            return ctx.constant(np.asarray(x, fast[2]), t)
        if x is None:
            raise bad_input(self, f"expected a value for a {t}, got None")
        try:
            arr = to_array(x, t, self._allow_nonfinite)
        except BadValueError as e:
            raise bad_input(self, str(e)) from None
        return ctx.constant(arr, t)


@block_factory
def Scalar(dtype: Any = "float32", name: str | None = None,  # noqa: N802
           allow_nonfinite: bool = False) -> Tensor:
    """A scalar tensor from a Python number. `Scalar('int32').eval(3)` is `array(3)`.

    `allow_nonfinite=True` accepts NaN and inf (see `Tensor`)."""
    block = Tensor((), dtype, name=name, allow_nonfinite=allow_nonfinite)
    block._constructor_name = "Scalar"
    block._repr_args = lambda: {"dtype": block.dtype, **block._nonfinite_arg()}
    return block


@block_factory
def Vector(size: int, dtype: Any = "float32", name: str | None = None,  # noqa: N802
           allow_nonfinite: bool = False) -> Tensor:
    """A vector tensor of `size` items from a Python list.

    `allow_nonfinite=True` accepts NaN and inf (see `Tensor`)."""
    block = Tensor((size,), dtype, name=name, allow_nonfinite=allow_nonfinite)
    block._constructor_name = "Vector"
    block._repr_args = lambda: {"dtype": block.dtype, "size": size, **block._nonfinite_arg()}
    return block


class InputTransform(Block):
    """Applies a Python function to a Python input: `InputTransform(str.split)`."""

    _expected_input_types = (PyObjectType,)
    _expected_output_types = (PyObjectType,)

    def __init__(self, py_fn: Callable[[Any], Any], name: str | None = None):
        if not callable(py_fn):
            raise TypeError(f"py_fn is not callable: {py_fn!r}")
        self._py_fn = py_fn
        super().__init__(input_type=PY, output_type=PY, name=name)

    @property
    def py_fn(self):
        return self._py_fn

    def _repr_args(self):
        return {"py_fn": getattr(self._py_fn, "__name__", self._py_fn)}

    def evaluate(self, ctx, x):
        return self._py_fn(x)


class GetItem(Block):
    """`x[key]`: an item of a Python object, tuple or sequence (a slice keeps the kind).

    The key is written in the block expression, so it has Python's meaning:
    `GetItem(-1)` is the last item, `Slice(start=-2)` the last two. An index that
    falls outside the input is an `InputKeyError` naming the block path. An index
    that comes from the data is `Nth`'s, which refuses negative ones.
    """

    _expected_input_types = (PyObjectType, TupleType, SequenceType)

    def __init__(self, key: Any, name: str | None = None):
        self._key = key
        super().__init__(name=name)

    @property
    def key(self):
        return self._key

    def _repr_args(self):
        return {"key": self._key}

    def _label(self) -> str:
        """`GetItem('upos')`, `Slice(start=1)`: the key is what tells it apart."""
        key = self._key
        if isinstance(key, slice):
            args = ", ".join(f"{k}={v!r}" for k, v in zip(("start", "stop", "step"), (
                key.start, key.stop, key.step)) if v is not None)
            label = f"Slice({args})"
        else:
            label = f"GetItem({key!r})"
        return label if self._name is None else f"{label} {self._name!r}"

    def _named(self) -> bool:
        return True

    def infer_types(self):
        t = self.input_type
        if t is None:
            return
        if isinstance(t, BroadcastSequenceType):
            raise TypeError(f"{self.path}: cannot get an item from an infinite sequence: {t}")
        if isinstance(t, PyObjectType):
            self.set_output_type(PY)
        elif isinstance(t, TupleType):
            try:
                item = t[self._key]
            except (IndexError, TypeError):
                raise TypeError(
                    f"{self.path}: cannot take item {self._key!r} of {t}") from None
            self.set_output_type(item)  # errors further along keep their own path
        elif isinstance(t, SequenceType):
            self.set_output_type(t if isinstance(self._key, slice) else t.element_type)

    def evaluate(self, ctx, x):
        try:
            return x[self._key]
        except (KeyError, IndexError):
            keys = ""
            if isinstance(x, dict):
                keys = "; the input has keys " + ", ".join(sorted(map(repr, x)))
            elif hasattr(x, "__len__"):
                keys = f"; the input has length {len(x)}"
            raise InputKeyError(self.path, f"missing key {self._key!r}{keys}") from None
        except TypeError:
            raise bad_input(self, f"cannot take item {self._key!r} of {_describe(x)}") from None


@block_factory
def Slice(*args, start=None, stop=None, step=None, name: str | None = None) -> GetItem:  # noqa: N802
    """`x[start:stop:step]` of a tuple, sequence or Python object (keywords only)."""
    if args:
        raise TypeError("Slice does not accept positional arguments; allowed keyword "
                        "arguments are start, stop, and step")
    block = GetItem(slice(start, stop, step), name=name)
    block._constructor_name = "Slice"
    return block


class Length(Block):
    """The length of a sequence, tuple or Python object, as a scalar tensor."""

    _expected_input_types = (PyObjectType, SequenceType, TupleType)
    _expected_output_types = (TensorType,)

    def __init__(self, dtype: Any = "float32", name: str | None = None):
        self._ttype = TensorType((), dtype)
        super().__init__(output_type=self._ttype, name=name)

    def _repr_args(self):
        return {"dtype": self._ttype.dtype}

    def infer_types(self):
        if isinstance(self.input_type, BroadcastSequenceType):
            raise TypeError(f"{self.path}: cannot get the length of an infinite sequence: "
                            f"{self.input_type}")

    def evaluate(self, ctx, x):
        try:
            n = len(x)
        except TypeError:
            raise bad_input(self, f"expected something with a length, got {_describe(x)}") \
                from None
        return ctx.constant(np.asarray(n, self._ttype.dtype), self._ttype)


class OneHot(Block):
    """A one-hot vector for an integer in `[start, stop)` (or `[0, start)`)."""

    _expected_input_types = (PyObjectType,)
    _expected_output_types = (TensorType,)

    def __init__(self, start: int, stop: int | None = None, dtype: Any = "float32",
                 name: str | None = None):
        for bound in (start, stop):
            if bound is not None and (isinstance(bound, bool) or
                                      not isinstance(bound, (int, np.integer))):
                hint = " (for one of a list of values: td.OneHotFromList(values))" \
                    if isinstance(bound, (list, tuple, set, dict, str)) else ""
                raise TypeError(f"OneHot(start, stop) takes integers, got {bound!r}{hint}")
        if stop is None:
            start, stop = 0, start
        if stop <= start:
            raise IndexError(f"range [{start}, {stop}) is empty.")
        self._start, self._stop = int(start), int(stop)
        self._ttype = TensorType((stop - start,), dtype)
        super().__init__(input_type=PY, output_type=self._ttype, name=name)

    def _repr_args(self):
        return {"dtype": self._ttype.dtype, "start": self._start, "stop": self._stop}

    def evaluate(self, ctx, x):
        if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
            raise bad_input(self, f"expected an integer in [{self._start}, {self._stop}), "
                                  f"got {_describe(x)}")
        if not self._start <= x < self._stop:
            raise InputKeyError(self.path, f"{x} is outside [{self._start}, {self._stop})")
        vec = np.zeros(self._ttype.shape, self._ttype.dtype)
        vec[x - self._start] = 1
        return ctx.constant(vec, self._ttype)


class OneHotFromList(Block):
    """A one-hot vector for one of a list of hashable `elements`.

    With `strict=False`, an element not in the list gives the zero vector.
    """

    _expected_input_types = (PyObjectType,)
    _expected_output_types = (TensorType,)

    def __init__(self, elements: Sequence[Any], dtype: Any = "float32", strict: bool = True,
                 name: str | None = None):
        elements = list(elements)
        self._index = {e: i for i, e in enumerate(elements)}
        if len(self._index) != len(elements):
            raise ValueError("OneHotFromList was passed duplicate elements.")
        if not elements:
            raise ValueError("OneHotFromList needs at least one element.")
        self._strict = strict
        self._ttype = TensorType((len(elements),), dtype)
        super().__init__(input_type=PY, output_type=self._ttype, name=name)

    def _repr_args(self):
        return {"dtype": self._ttype.dtype, "strict": self._strict}

    def evaluate(self, ctx, x):
        vec = np.zeros(self._ttype.shape, self._ttype.dtype)
        try:
            vec[self._index[x]] = 1
        except KeyError:
            if self._strict:
                raise InputKeyError(self.path, f"{_describe(x)} is not one of the elements") \
                    from None
        except TypeError:
            raise bad_input(self, f"unhashable input {_describe(x)}") from None
        return ctx.constant(vec, self._ttype)


class Void(Block):
    """Discards its input; outputs nothing (`VoidType`)."""

    _expected_output_types = (VoidType,)

    def __init__(self, name: str | None = None):
        super().__init__(output_type=VoidType(), name=name)

    def evaluate(self, ctx, x):
        return None
