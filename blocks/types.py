"""Result types: what flows between blocks.

Every block has an input type and an output type. Types are immutable values
with readable reprs; they compare, hash and sort by their repr.

>>> TensorType([3, 4], 'int32')
TensorType((3, 4), 'int32')
>>> convert_to_type(([], [3, 3, 'int64']))
TupleType(TensorType((), 'float32'), TensorType((3, 3), 'int64'))
>>> canonicalize_type(SequenceType(PyObjectType()))
PyObjectType()
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

__all__ = [
    "ResultType", "TensorType", "TupleType", "SequenceType", "BroadcastSequenceType",
    "PyObjectType", "VoidType", "convert_to_type", "canonicalize_type",
    "first_difference",
]


# The dtypes a tensor type may have, by their TensorFlow names.
_TF_DTYPES = frozenset({
    "float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64",
    "uint8", "uint16", "uint32", "uint64", "bool", "complex64", "complex128", "string"})
# Words that TensorFlow reads as a different dtype than numpy does (numpy: float64).
_TF_ALIASES = {"float": "float32"}


def _dtype_name(dtype: Any) -> str:
    """The TensorFlow name of a dtype given as a string, numpy or TensorFlow dtype."""
    name = getattr(dtype, "name", None)
    if isinstance(dtype, str):
        name = _TF_ALIASES.get(dtype, dtype)
    try:
        if name is None and isinstance(dtype, type):
            name = np.dtype(dtype).name
        if isinstance(name, str) and name not in _TF_DTYPES:
            name = np.dtype(name).name
    except TypeError:
        raise TypeError(f"not a dtype: {dtype!r}") from None
    if name not in _TF_DTYPES:
        raise TypeError(f"not a dtype: {dtype!r}")
    return name


@functools.total_ordering
class ResultType:
    """Base class of all types. Equality, hashing and ordering go through `repr`.

    Types are immutable, so each keeps its `repr` once computed: expansion looks
    types up in dicts for every node it records.
    """

    def _key(self) -> str:
        key = self.__dict__.get("_repr")
        if key is None:
            key = self.__dict__["_repr"] = repr(self)
        return key

    def __eq__(self, other: object) -> bool:
        return self is other or (isinstance(other, ResultType) and self._key() == other._key())

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __lt__(self, other: ResultType) -> bool:
        return self._key() < other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def terminal_types(self) -> Iterator[ResultType]:
        """The tensor and PyObject types inside this type, in pre-order."""
        yield self

    def flatten(self, instance: Any) -> list:
        """The terminal values of `instance`, in the order of `terminal_types`."""
        return [instance]

    def unflatten(self, flat: Iterator, shaped_like: Any) -> Any:
        """Inverse of `flatten`; `shaped_like` gives sequence lengths."""
        return next(flat)

    def for_each_terminal(self, fn: Callable[[ResultType, Any], Any], instance: Any) -> Any:
        """Applies `fn(terminal_type, value)` to each terminal, keeping the structure."""
        return fn(self, instance)


@functools.cache
def _numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype of a dtype name (kept: expansion asks for it per constant)."""
    if name == "string":
        return np.dtype(object)
    if name == "bfloat16":  # numpy knows it only through ml_dtypes (a TF dependency)
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


class TensorType(ResultType):
    """A tensor of a fixed shape and dtype (the batch dimension is not part of it).

    >>> TensorType((2,)).size
    2
    """

    __slots__ = ("_shape", "_dtype")

    def __init__(self, shape: Iterable[int], dtype: Any = "float32"):
        if not isinstance(shape, (tuple, list)):
            shape = getattr(shape, "as_list", lambda: shape)()
        if not isinstance(shape, (tuple, list)):
            raise TypeError(f"shape must be a tuple or list: {shape!r}")
        dims = []
        for d in shape:
            if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 0:
                raise TypeError(f"shape must hold non-negative ints: {tuple(shape)!r}")
            dims.append(int(d))
        self._shape = tuple(dims)
        self._dtype = _dtype_name(dtype)

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def dtype(self) -> str:
        return self._dtype

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def numpy_dtype(self) -> np.dtype:
        """The numpy dtype that holds this tensor's values (`object` for strings)."""
        return _numpy_dtype(self._dtype)

    @property
    def size(self) -> int:
        return int(np.prod(self._shape, dtype=np.int64))

    def __array__(self, dtype=None, copy=None):
        return np.zeros(self._shape, dtype=dtype or self.numpy_dtype)

    def __repr__(self) -> str:
        return f"TensorType({self._shape!r}, {self._dtype!r})"


class VoidType(ResultType):
    """No value at all (the output of `Void`, `Metric`; the input of constants)."""

    def terminal_types(self) -> Iterator[ResultType]:
        return iter(())

    def flatten(self, instance: Any) -> list:
        return []

    def unflatten(self, flat: Iterator, shaped_like: Any) -> None:
        return None

    def for_each_terminal(self, fn, instance):
        return None

    def __repr__(self) -> str:
        return "VoidType()"


class PyObjectType(ResultType):
    """Any Python object: the input of a model, and what `InputTransform` returns."""

    def __repr__(self) -> str:
        return "PyObjectType()"


class TupleType(ResultType):
    """A fixed-length tuple of types. Supports `len`, indexing and slicing.

    >>> TupleType(TensorType(()), PyObjectType())[1:]
    TupleType(PyObjectType())
    """

    __slots__ = ("_items",)

    def __init__(self, *item_types: Any):
        if len(item_types) == 1 and not isinstance(item_types[0], ResultType):
            item_types = tuple(item_types[0])
        for i, t in enumerate(item_types):
            if not isinstance(t, ResultType):
                raise TypeError(f"item_types[{i}] is not a type: {t!r}")
        self._items = tuple(item_types)

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[ResultType]:
        return iter(self._items)

    def __getitem__(self, key):
        if isinstance(key, slice):
            return TupleType(*self._items[key])
        return self._items[key]

    @property
    def size(self) -> int | None:
        sizes = [getattr(t, "size", None) for t in self._items]
        return None if any(s is None for s in sizes) else sum(sizes)

    def terminal_types(self) -> Iterator[ResultType]:
        for t in self._items:
            yield from t.terminal_types()

    def flatten(self, instance: Any) -> list:
        return [v for t, x in zip(self._items, instance) for v in t.flatten(x)]

    def unflatten(self, flat: Iterator, shaped_like: Any) -> tuple:
        return tuple(t.unflatten(flat, s) for t, s in zip(self._items, shaped_like))

    def for_each_terminal(self, fn, instance):
        if len(instance) != len(self._items):
            raise ValueError(f"expected a tuple of {len(self._items)} items, got "
                             f"{len(instance)}")
        return tuple(t.for_each_terminal(fn, x) for t, x in zip(self._items, instance))

    def __repr__(self) -> str:
        return f"TupleType({', '.join(repr(t) for t in self._items)})"


class SequenceType(ResultType):
    """A variable-length sequence whose items all have `element_type`."""

    __slots__ = ("_elem",)

    def __init__(self, elem_type: ResultType):
        if not isinstance(elem_type, ResultType):
            raise TypeError(f"elem_type is not a type: {elem_type!r}")
        self._elem = elem_type

    @property
    def element_type(self) -> ResultType:
        return self._elem

    size = None

    def terminal_types(self) -> Iterator[ResultType]:
        return self._elem.terminal_types()

    def flatten(self, instance: Any) -> list:
        return [v for x in instance for v in self._elem.flatten(x)]

    def unflatten(self, flat: Iterator, shaped_like: Any) -> list:
        return [self._elem.unflatten(flat, s) for s in shaped_like]

    def for_each_terminal(self, fn, instance):
        return [self._elem.for_each_terminal(fn, x) for x in instance]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._elem!r})"


class BroadcastSequenceType(SequenceType):
    """An infinite repetition of one value (the output of `Broadcast`)."""

    def flatten(self, instance: Any) -> list:
        return self._elem.flatten(next(iter(instance)))

    def unflatten(self, flat: Iterator, shaped_like: Any) -> Iterator:
        return itertools.repeat(self._elem.unflatten(flat, next(iter(shaped_like))))

    def for_each_terminal(self, fn, instance):
        return itertools.repeat(self._elem.for_each_terminal(fn, next(iter(instance))))


_ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth",
             "ninth", "tenth")


def first_difference(expected: ResultType, got: ResultType) -> str | None:
    """Where two types first differ and how, shortest first; None if they are equal.

    >>> a = TupleType(TensorType((80,)), TupleType(TensorType((8,)), TensorType((8,))))
    >>> b = TupleType(TensorType((64,)), TupleType(TensorType((8,)), TensorType((8,))))
    >>> first_difference(a, b)
    'expected (80,), got (64,) at the first item of the tuple'
    >>> first_difference(SequenceType(a), SequenceType(a[:1]))
    'expected a tuple of 2 items, got 1 in the elements of the sequence'
    """
    found = _difference(expected, got)
    if found is None:
        return None
    what, where = found
    if not where:
        return what
    # innermost first: "at the second item of the first item of the tuple"
    preposition = "in" if where[0] == "the elements" else "at"
    whole = "the tuple" if isinstance(expected, TupleType) else "the sequence"
    return f"{what} {preposition} {' of '.join(where)} of {whole}"


def _difference(expected: ResultType, got: ResultType) -> tuple[str, list[str]] | None:
    """`(how they differ, [where, innermost first])`, or None if equal."""
    if expected == got:
        return None
    if type(expected) is not type(got):
        return f"expected {_kind(expected)}, got {_kind(got)}", []
    if isinstance(expected, TensorType):
        parts_e, parts_g = [], []
        if expected.shape != got.shape:
            parts_e.append(repr(expected.shape))
            parts_g.append(repr(got.shape))
        if expected.dtype != got.dtype:
            parts_e.append(expected.dtype)
            parts_g.append(got.dtype)
        return f"expected {' '.join(parts_e)}, got {' '.join(parts_g)}", []
    if isinstance(expected, TupleType):
        if len(expected) != len(got):
            return f"expected a tuple of {len(expected)} items, got {len(got)}", []
        for i, (e, g) in enumerate(zip(expected, got)):
            found = _difference(e, g)
            if found is not None:
                what, where = found
                item = f"the {_ORDINALS[i]} item" if i < len(_ORDINALS) else f"item {i}"
                return what, [*where, item]
    if isinstance(expected, SequenceType):
        found = _difference(expected.element_type, got.element_type)
        if found is not None:
            what, where = found
            return what, [*where, "the elements"]
    return f"expected {expected!r}, got {got!r}", []


def _kind(t: ResultType) -> str:
    if isinstance(t, TensorType):
        return f"a tensor {t.shape!r} {t.dtype}"
    if isinstance(t, TupleType):
        return f"a tuple of {len(t)} items"
    if isinstance(t, BroadcastSequenceType):
        return "a broadcast sequence"
    if isinstance(t, SequenceType):
        return "a sequence"
    if isinstance(t, VoidType):
        return "no value (void)"
    return "a Python object"


def canonicalize_type(t: ResultType | None) -> ResultType | None:
    """Collapses tuples and sequences made only of PyObjects into `PyObjectType`."""
    if isinstance(t, TupleType):
        items = [canonicalize_type(x) for x in t]
        if items and all(isinstance(x, PyObjectType) for x in items):
            return PyObjectType()
        return TupleType(*items)
    if isinstance(t, SequenceType):
        elem = canonicalize_type(t.element_type)
        if isinstance(elem, PyObjectType):
            return PyObjectType()
        return type(t)(elem)
    return t


def convert_to_type(type_like: Any) -> ResultType:
    """Turns shorthand into a type.

    A type stays as it is; a tuple becomes a `TupleType`; a list is a tensor shape
    whose optional last item is the dtype (`[3, 4, 'int32']`); a dtype is a scalar
    tensor; an int `n` is a vector of `n` floats; a `tf.TensorShape` a float tensor.

    >>> convert_to_type(42)
    TensorType((42,), 'float32')
    >>> convert_to_type(['bool'])
    TensorType((), 'bool')
    """
    if isinstance(type_like, ResultType):
        return type_like
    if isinstance(type_like, tuple):
        return TupleType(*(convert_to_type(x) for x in type_like))
    if isinstance(type_like, list):
        if type_like and isinstance(type_like[-1], str) or (
                type_like and hasattr(type_like[-1], "as_numpy_dtype")):
            return TensorType(type_like[:-1], type_like[-1])
        return TensorType(type_like)
    if isinstance(type_like, (int, np.integer)) and not isinstance(type_like, bool):
        return TensorType((int(type_like),))
    if type(type_like).__name__ == "TensorShape":
        dims = type_like.as_list() if type_like.rank is not None else None
        if dims is None or any(d is None for d in dims):
            raise TypeError(f"Cannot convert {type_like} to a type: shape is not fully defined.")
        return TensorType(dims)
    try:
        return TensorType((), _dtype_name(type_like))
    except TypeError:
        pass
    raise TypeError(f"Cannot convert {type_like!r} to a type.")
