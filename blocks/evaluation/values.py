"""Python values into the arrays of a tensor type, strictly.

`to_array(x, ttype)` is how an input block (`Tensor`, `Scalar`, `Vector`) and an
expression whose root takes tensors read a Python value. It converts only what
keeps its meaning:

- numbers only: a string (`"3.5"`), `None` or another object is refused, not parsed;
- an integer dtype takes integers, and floats only when they are integral
  (`2.0`, not `2.7`); a bool is refused there (an id that is `True` is a bug);
- a float dtype takes floats, ints and bools (a flag feature is 0 or 1);
- a bool dtype takes bools, and numbers that are 0 or 1;
- a value outside its dtype's range (`1e39` for float32, `2**40` for int32) is
  refused rather than wrapped or turned into inf;
- NaN and inf are refused unless `allow_nonfinite=True` (one NaN feature makes
  every weight it reaches NaN at the next step).

The checks are numpy reductions over the converted array; a Python `float` or
`int` (most inputs: leaves of trees) takes a shortcut of a few comparisons.

>>> import numpy as np
>>> from refold.blocks.types import TensorType
>>> to_array(2, TensorType((), 'float32'))
array(2., dtype=float32)
>>> to_array('3.5', TensorType((), 'float32'))
Traceback (most recent call last):
...
refold.blocks.errors.BadValueError: expected a TensorType((), 'float32'), got '3.5': a string \
is not a number
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from refold.blocks.errors import BadValueError
from refold.blocks.types import TensorType

_FLOATS = frozenset({"float16", "bfloat16", "float32", "float64"})
_COMPLEX = frozenset({"complex64", "complex128"})
_NONFINITE_HINT = "(give the block allow_nonfinite=True to accept NaN and inf)"


@functools.cache
def _range(dtype: np.dtype) -> tuple:
    """`(lowest, highest)` finite value of a numeric dtype, as Python numbers."""
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return int(info.min), int(info.max)
    if dtype.kind == "c":
        top = float(np.finfo(dtype).max)
    else:
        import ml_dtypes  # knows bfloat16 as well as numpy's floats
        top = float(ml_dtypes.finfo(dtype).max)
    return -top, top


def to_array(x: Any, ttype: TensorType, allow_nonfinite: bool = False) -> np.ndarray:
    """`x` as an array of `ttype`'s shape and dtype; `BadValueError` saying why not
    (`"expected a <type>, got <x>: <why>"`, or `"expected shape ..."`).

    Args:
        x: a number, a nested list or tuple of numbers, or an array.
        ttype: the tensor type to convert to.
        allow_nonfinite: accept NaN and inf in float and complex dtypes.
    """
    name, dtype = ttype.dtype, ttype.numpy_dtype
    # The common case, a Python number for a scalar, without building an array twice.
    if not ttype.shape:
        kind = type(x)
        if kind is float and name in _FLOATS:
            lo, hi = _range(dtype)
            if lo <= x <= hi:
                return np.asarray(x, dtype)
        elif kind is int and name not in _COMPLEX and name != "bool" and name != "string":
            lo, hi = _range(dtype)
            if lo <= x <= hi:
                return np.asarray(x, dtype)
    try:
        if x is None:
            raise BadValueError("None is not a value")
        if name == "string":
            arr = np.asarray(x, dtype=object)
        else:
            arr = _numeric(x, name, dtype, allow_nonfinite)
    except BadValueError as e:
        raise BadValueError(f"expected a {ttype}, got {describe(x)}: {e}") from None
    if arr.shape != ttype.shape:
        raise BadValueError(f"expected shape {ttype.shape}, got shape {arr.shape}: "
                            f"{describe(x)}")
    return arr


def scalar_ranges(ttype: TensorType) -> dict:
    """`{int: (lo, hi, dtype, as_is), float: ...}`: the Python number types a scalar
    of `ttype` takes as they are (when within `lo..hi`), for `to_array`'s common case
    (empty for other shapes), where the result is `np.asarray(x, dtype)`. A block
    that converts an input per node keeps the answer (`blocks.inputs.Tensor`).
    `as_is`: the number may be handed to a context unconverted (`ctx.number`),
    because converting it later among others gives the same bits (an int to an
    integer dtype, a float to float32 or float64)."""
    name, dtype = ttype.dtype, ttype.numpy_dtype
    if ttype.shape or name == "string" or name == "bool" or name in _COMPLEX:
        return {}
    lo, hi = _range(dtype)
    out = {int: (lo, hi, dtype, dtype.kind in "iu")}
    if name in _FLOATS:
        out[float] = (lo, hi, dtype, name in ("float32", "float64"))
    return out


def describe(x: Any) -> str:
    """A short repr of an input value, for error messages."""
    text = repr(x)
    return text if len(text) <= 60 else text[:57] + "..."


def _numeric(x: Any, name: str, dtype: np.dtype, allow_nonfinite: bool) -> np.ndarray:
    try:
        raw = np.asarray(x)
    except (ValueError, TypeError) as e:  # ragged nesting, objects numpy cannot read
        raise BadValueError(str(e)) from None
    kind = raw.dtype.kind
    if kind in "USa":
        raise BadValueError("a string is not a number")
    if kind == "O":
        raw = _from_objects(raw, name, dtype)
        kind = raw.dtype.kind
    if kind not in "biufc":
        raise BadValueError(f"expected numbers, got dtype {raw.dtype}")
    if kind == "c" and name not in _COMPLEX:
        raise BadValueError(f"a complex number is not a {name}")
    if name == "bool":
        if kind != "b" and not np.isin(raw, (0, 1)).all():
            raise BadValueError(f"{_first(raw, ~np.isin(raw, (0, 1)))} is not a bool "
                                "(True, False, 0 or 1)")
        return raw.astype(dtype)
    if dtype.kind in "iu":
        return _integers(raw, kind, name, dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        arr = raw.astype(dtype)
    finite = np.isfinite(arr)
    if finite.all():
        return arr
    given_finite = np.isfinite(raw)
    overflow = given_finite & ~finite
    if overflow.any():
        lo, hi = _range(dtype)
        raise BadValueError(f"{_first(raw, overflow)} overflows {name} (its finite values "
                            f"are within ±{hi:.8g})")
    if not allow_nonfinite:
        raise BadValueError(f"{_first(raw, ~given_finite)} is not finite {_NONFINITE_HINT}")
    return arr


def _integers(raw: np.ndarray, kind: str, name: str, dtype: np.dtype) -> np.ndarray:
    if kind == "b":
        raise BadValueError(f"a bool is not an integer ({name})")
    if kind in "fc":
        if kind == "c":
            raise BadValueError(f"a complex number is not an integer ({name})")
        whole = np.isfinite(raw) & (raw == np.trunc(raw))
        if not whole.all():
            raise BadValueError(f"{_first(raw, ~whole)} is not an integer ({name})")
    if raw.size:
        lo, hi = _range(dtype)
        # hi + 1 is a power of two, exact as a float (hi itself may round up to it)
        out = (raw < lo) | (raw >= hi + 1 if kind == "f" else raw > hi)
        if out.any():
            raise BadValueError(f"{_first(raw, out)} is out of {name}'s range [{lo}, {hi}]")
    return raw.astype(dtype)


def _from_objects(raw: np.ndarray, name: str, dtype: np.dtype) -> np.ndarray:
    """An object array that holds numbers (ints beyond int64, or a mix with them) as
    float64; anything else (None, strings, dicts) is refused. Rare: no fast path."""
    items = raw.reshape(-1).tolist()
    for v in items:
        if isinstance(v, (str, bytes)):
            raise BadValueError("a string is not a number")
        if isinstance(v, bool) or not isinstance(v, (int, float, np.number)):
            raise BadValueError(f"expected numbers, got {type(v).__name__} {v!r:.40}")
    if dtype.kind in "iu":
        lo, hi = _range(dtype)
        big = next((v for v in items if isinstance(v, int) and not lo <= v <= hi), None)
        if big is not None:  # the value itself, not a float rounding of it
            raise BadValueError(f"{_show(big)} is out of {name}'s range [{lo}, {hi}]")
    try:
        return raw.astype(np.float64)
    except OverflowError:
        big = next(v for v in items if isinstance(v, int) and abs(v) > 2**1023)
        raise BadValueError(f"{_show(big)} overflows {name}") from None


def _show(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} digits)"


def _first(raw: np.ndarray, mask: np.ndarray) -> Any:
    """The first value of `raw` where `mask` holds, as a Python number."""
    return raw[mask].reshape(-1)[0].item()
