"""Checking a packed request against the export's signature, before TensorFlow sees it.

A request is a dict of the packed tensors (`compiler.feeding.packed`). What a client can
get wrong about it without knowing the block (a missing or unknown name, a dtype
that does not convert, a wrong rank) is checked here against the export's own
description and reported by name; what needs the model's layout (segment bounds,
constant sizes) is checked inside the SavedModel (`compiler.feeding.packed.checked`),
and its message comes back as a `RequestError` too.

>>> spec = {"batch_size": {"dtype": "int32", "shape": [1]},
...         "index": {"dtype": "int32", "shape": [None]}}
>>> conform({"batch_size": [2], "index": [0, 1]}, spec)["batch_size"].dtype
dtype('int32')
>>> conform({"batch_size": 2, "index": [0, 1]}, spec)
Traceback (most recent call last):
...
refold.serving.requests.RequestError: bad request: 'batch_size' must have shape [1], got shape ()
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np


class RequestError(ValueError):
    """A request the served model cannot take; the message names the tensor at fault."""


def conform(arrays: Any, spec: dict) -> dict:
    """`arrays` as numpy arrays of the dtypes and ranks of `spec` (name -> `{"dtype",
    "shape"}`, `None` for a free length); raises `RequestError` naming the first
    tensor that is missing, unknown, of a dtype that does not convert exactly, or of
    the wrong shape."""
    if not isinstance(arrays, dict):
        raise RequestError(f"bad request: a request is a dict of the tensors "
                           f"{sorted(spec)}, got {type(arrays).__name__}")
    missing, unknown = sorted(set(spec) - set(arrays)), sorted(set(arrays) - set(spec))
    if missing or unknown:
        raise RequestError(
            f"bad request: the model takes the tensors {sorted(spec)}"
            + (f"; missing {missing}" if missing else "")
            + (f"; unknown {unknown}" if unknown else ""))
    return {name: _conform_one(name, arrays[name], spec[name]) for name in spec}


def _conform_one(name: str, value: Any, spec: dict) -> np.ndarray:
    dtype = np.dtype(spec["dtype"])
    try:
        given = np.asarray(value)
    except (ValueError, TypeError) as e:
        raise RequestError(f"bad request: '{name}' is not an array ({e})") from None
    if given.dtype == object or given.dtype.kind in "USV":
        raise RequestError(f"bad request: '{name}' must hold {dtype.name} numbers, got "
                           f"{given.dtype} values")
    shape = spec["shape"]
    if given.ndim != len(shape) or any(want is not None and want != got
                                       for want, got in zip(shape, given.shape)):
        want = "[" + ", ".join("None" if d is None else str(d) for d in shape) + "]"
        raise RequestError(f"bad request: '{name}' must have shape {want}, got shape "
                           f"{given.shape}")
    if given.size == 0 or given.dtype == dtype:
        return given.astype(dtype, copy=False)
    if dtype.kind in "iu" and given.dtype.kind not in "iub":
        raise RequestError(f"bad request: '{name}' must hold integers ({dtype.name}), got "
                           f"{given.dtype}")
    converted = given.astype(dtype)
    if dtype.kind in "iu" and not np.array_equal(converted, given):
        raise RequestError(f"bad request: '{name}' holds values outside {dtype.name}")
    return converted


def tensorflow_reason(error: Exception) -> str | None:
    """The message of a SavedModel's request check (`compiler.feeding.packed.checked`)
    inside a TensorFlow error, with the value found, or None if the error is not one
    of those checks.

    >>> tensorflow_reason(ValueError("... [bad request: \\\\'layout\\\\' must start at 0] "
    ...                              "[Condition x == y did not hold] [x (s:0) = ] [1] "
    ...                              "[y (c:0) = ] [0]"))
    "bad request: 'layout' must start at 0 (found 1)"
    """
    text = str(error).replace("\\'", "'")
    at = text.find("bad request:")
    if at < 0:
        return None
    reason = text[at:].split("]", 1)[0].splitlines()[0].strip()
    found = re.search(r"\[x \(.*?\) = \] \[(.*?)\]", text[at:])
    return reason + (f" (found {found.group(1)})" if found else "")
