"""The expanded graphs of inputs seen before, kept so that later batches skip expansion.

An entry is found by the input object's identity and kept only while the input's
content is what it was when it was expanded: each entry holds a fingerprint of the
whole input (`fingerprint`), checked at every look-up, so an input changed in place
(a sequence grown by one item, a leaf of a tree changed) is expanded again rather than
answered from its old graph. The check walks the input once, a small part of what
expanding it costs (BENCHMARKS.md, "What the expansion cache costs").

>>> cache = ExpansionCache(capacity=10)
>>> seq = [1.0, 2.0]
>>> cache.put(seq, "graph of [1, 2]")
>>> cache.get(seq)
'graph of [1, 2]'
>>> seq.append(100.0)
>>> cache.get(seq) is None   # changed in place: expanded again
True
"""

from __future__ import annotations

import threading
import types
from collections import OrderedDict
from typing import Any

import numpy as np

# Values compared by value (their type too: 1, 1.0 and True hash alike).
_ATOMS = frozenset({int, float, str, bytes, bool, type(None), complex,
                    np.float32, np.float64, np.int32, np.int64, np.bool_})
_SEQUENCES = (list, tuple)
# Kept by identity: code and namespaces, which an input may refer to but not hold.
_BY_IDENTITY = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType,
                types.MethodType, type)
# Past this many parts an input is not kept (an object that refers to a whole corpus).
MAX_PARTS = 2_000_000


def fingerprint(x: Any) -> int | None:
    """A hash of everything `x` holds, or None if it holds something whose content
    cannot be seen (a set, a tensor, an object without `__dict__` or slots) or is too
    large to walk (`MAX_PARTS`). Functions, classes and modules count by identity.

    Containers are walked once each: an object met again (shared, or a cycle) adds a
    reference to its first visit, so a DAG costs its size and a cycle ends.

    >>> fingerprint([1, {"a": (2.0, None)}]) == fingerprint([1, {"a": (2.0, None)}])
    True
    >>> fingerprint([1, 2]) == fingerprint([1, 2.0])
    False
    >>> fingerprint([{1, 2}]) is None
    True
    """
    parts: list = []
    seen: dict[int, int] = {}
    stack = [x]
    while stack:
        v = stack.pop()
        t = type(v)
        if t in _ATOMS:
            parts.append(t)
            parts.append(v)
            continue
        i = seen.get(id(v))
        if i is not None:
            parts.append(("seen", i))
            continue
        seen[id(v)] = len(seen)
        parts.append(t)
        if isinstance(v, _BY_IDENTITY):
            parts.append(id(v))
            continue
        if len(parts) > MAX_PARTS:
            return None
        if isinstance(v, _SEQUENCES):
            parts.append(len(v))
            stack.extend(v)
        elif isinstance(v, dict):
            parts.append(len(v))
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, np.ndarray):
            if v.dtype.hasobject:
                parts.append(v.shape)
                stack.extend(v.ravel().tolist())
            else:
                parts += [v.dtype.str, v.shape, v.tobytes()]
        elif isinstance(v, np.generic):
            parts.append(v.item())
        elif hasattr(v, "__dict__") and not isinstance(v, type):
            stack.append(vars(v))
            stack.extend(_slot_values(t, v))
        elif _slot_names(t):
            stack.extend(_slot_values(t, v))
        else:
            return None
    return hash(tuple(parts))


def _slot_names(t: type) -> tuple:
    return tuple(s for c in t.__mro__ for s in getattr(c, "__slots__", ())
                 if s not in ("__dict__", "__weakref__"))


def _slot_values(t: type, v: Any) -> list:
    return [getattr(v, s, None) for s in _slot_names(t)]


class ExpansionCache:
    """Up to `capacity` inputs' expanded graphs, least recently used dropped first.

    Thread-safe (a stream's planning thread shares it with the caller). Numbers and
    strings are never kept: small ones share identities.
    """

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._entries: OrderedDict[int, tuple[Any, int, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, x: Any) -> Any | None:
        """The graph kept for `x`, if `x` is the object it was made from and its
        content has not changed since."""
        with self._lock:
            hit = self._entries.get(id(x))
        if hit is None or hit[0] is not x:
            return None
        if fingerprint(x) != hit[1]:
            with self._lock:
                self._entries.pop(id(x), None)
            return None
        with self._lock:
            if id(x) in self._entries:
                self._entries.move_to_end(id(x))
        return hit[2]

    def put(self, x: Any, graph: Any) -> None:
        """Keeps `graph` as `x`'s (unless `x` is a number, a string or unseeable)."""
        if type(x) in _ATOMS:
            return
        key = fingerprint(x)
        if key is None:
            return
        with self._lock:
            self._entries[id(x)] = (x, key, graph)
            self._entries.move_to_end(id(x))
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
