"""The expanded graphs of inputs seen before, kept so that later batches skip expansion.

An entry is found by the input object's identity and kept only while the input's
content is what it was when it was expanded: each entry holds a fingerprint of the
whole input (`fingerprint`), checked at every look-up, so an input changed in place
(a sequence grown by one item, a leaf of a tree changed) is expanded again rather than
answered from its old graph. The fingerprint is the input written out by the C
pickler (a few microseconds for a tree of dicts), with every object that is not a
plain container or number written as its content (`_Writer`); the walk in Python
(`walk_fingerprint`) is the fallback for inputs too deep for the pickler's recursion.
An input that cannot change (nested tuples of numbers, `frozen`) needs no check: it
is found by identity alone.

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

import hashlib
import io
import pickle
import sys
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
# The pickled form's limit in bytes, for the same reason.
MAX_BYTES = 64 * 2 ** 20
# Longer pickled forms are kept as a 128-bit digest rather than whole.
_KEPT_WHOLE = 1024
# The C pickler recurses on the C stack; past this recursion limit (raised while a
# deep input is evaluated on a big-stack thread) an input that deep could overflow
# the stack of the thread looking it up, so the walk in Python is used instead.
_PICKLER_RECURSION = 20_000


def fingerprint(x: Any) -> bytes | int | None:
    """Everything `x` holds, as bytes (or a digest of them) that are equal for two
    looks at `x` only if its content is the same; None if it holds something whose
    content cannot be seen (a tensor, an iterator, an object without `__dict__` or
    slots) or is too large (`MAX_BYTES`). Functions, classes and modules count by
    identity.

    Shared objects (and cycles) are written once and referred to after, so a DAG
    costs its size and a cycle ends.

    >>> fingerprint([1, {"a": (2.0, None)}]) == fingerprint([1, {"a": (2.0, None)}])
    True
    >>> fingerprint([1, 2]) == fingerprint([1, 2.0])
    False
    >>> fingerprint([iter([1, 2])]) is None
    True
    """
    if sys.getrecursionlimit() <= _PICKLER_RECURSION:
        try:
            data = _writer().write(x)
        except _UnseeableError:
            return None
        except Exception:  # deeper than the pickler goes, or an object's own code
            data = None    # raised (its `__getattr__`, say): walked in Python below
        if data is not None:
            if len(data) > MAX_BYTES:
                return None
            return data if len(data) <= _KEPT_WHOLE else \
                hashlib.blake2b(data, digest_size=16).digest()
    return walk_fingerprint(x)


class _UnseeableError(Exception):
    """An object whose content the fingerprint cannot see."""


def _content(*parts):
    """The callable a `_Writer` names for what it writes as content (never called:
    the pickled form is compared, not loaded)."""
    raise TypeError("a fingerprint is not loaded")


def _slot_names(t: type) -> tuple:
    return tuple(s for c in t.__mro__ for s in getattr(c, "__slots__", ())
                 if s not in ("__dict__", "__weakref__"))


def _slot_values(t: type, v: Any) -> list:
    return [getattr(v, s, None) for s in _slot_names(t)]


class _Writer(pickle.Pickler):
    """The C pickler writing an input's content. Lists, tuples, dicts, sets, strings,
    bytes and numbers of exactly those types it writes itself; everything else comes
    to `reducer_override` and is written as its content tagged with its type's
    identity (classes, functions and modules by identity), never through a class's
    own pickling hooks, which may leave state out. One per thread, reused: making a
    pickler costs about what writing a small tree does."""

    def __init__(self):
        self._buffer = io.BytesIO()
        super().__init__(self._buffer, protocol=5)

    def write(self, x: Any) -> bytes:
        buffer = self._buffer
        buffer.seek(0)
        buffer.truncate()
        try:
            self.dump(x)
        finally:
            self.clear_memo()  # drops the references the memo holds
        data = buffer.getvalue()
        _local.writer = self  # back for the thread's next write
        return data

    def reducer_override(self, v: Any):
        if v is _content:
            return NotImplemented  # the tag itself: pickled by name
        t = type(v)
        if isinstance(v, _BY_IDENTITY):
            return _content, ("id", id(v))
        if isinstance(v, np.ndarray):
            if v.dtype.hasobject:
                return _content, ("objects", v.shape, v.ravel().tolist())
            return _content, ("array", str(v.dtype), v.shape, v.tobytes())
        if isinstance(v, np.generic):
            return _content, ("scalar", str(v.dtype), v.tobytes())
        if t is complex:
            return _content, ("complex", v.real, v.imag)
        state = (vars(v) if hasattr(v, "__dict__") else None,
                 _slot_values(t, v) if _slot_names(t) else None)
        # Subclasses of containers and numbers: their items (after the object is
        # remembered, so that a cycle through them ends) and their own attributes.
        if isinstance(v, dict):
            return _content, ("dict", id(t)), state, None, iter(v.items())
        if isinstance(v, (list, set, frozenset)):
            return _content, ("items", id(t)), state, iter(v)
        if isinstance(v, tuple):
            return _content, ("tuple", id(t), tuple(v)), state
        for base in (int, float, complex, str, bytes, bytearray):
            if isinstance(v, base):
                return _content, ("value", id(t), base(v)), state
        if state == (None, None):
            raise _UnseeableError(t)
        return _content, ("object", id(t)), state


_local = threading.local()


def _writer() -> _Writer:
    """This thread's pickler, or a new one. A pickler left by a write that raised
    may hold half a frame, and a write may start inside another (an object's
    `__getattr__` looking up a cache), so a write takes the thread's pickler away
    and gives it back only when it succeeds (`_Writer.write`)."""
    writer = getattr(_local, "writer", None)
    if writer is None:
        return _Writer()
    _local.writer = None
    return writer


def walk_fingerprint(x: Any) -> int | None:
    """`fingerprint` as a walk in Python (no recursion, any depth): a hash of
    everything `x` holds, or None as `fingerprint` says (a set too).

    >>> walk_fingerprint([1, {"a": (2.0, None)}]) == walk_fingerprint([1, {"a": (2.0, None)}])
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


# An entry's key for an input that cannot change (`frozen`): found by identity alone.
FROZEN = object()
# Immutable values, and the containers that are immutable when all they hold is.
_IMMUTABLE = _ATOMS | {np.float16, np.int8, np.int16, np.uint8, np.uint16, np.uint32,
                       np.uint64}
_IMMUTABLE_CONTAINERS = (tuple, frozenset)


def frozen(x: Any) -> bool:
    """Whether `x` cannot change: tuples and frozensets (of exactly those types) of
    numbers, strings, bytes and None, nested to any depth. Its cache entry needs no
    content check: the cache holds `x`, so its identity is never reused.

    >>> frozen((1, ("a", 2.0))), frozen((1, [2])), frozen([1])
    (True, False, False)
    """
    stack, parts = [x], 0
    while stack:
        v = stack.pop()
        t = type(v)
        if t in _IMMUTABLE:
            continue
        if t not in _IMMUTABLE_CONTAINERS:
            return False
        parts += len(v)
        if parts > MAX_PARTS:
            return False
        stack.extend(v)
    return True


class ExpansionCache:
    """Up to `capacity` inputs' expanded graphs, least recently used dropped first.

    Thread-safe (a stream's planning thread shares it with the caller). Numbers and
    strings are never kept: small ones share identities.
    """

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._entries: OrderedDict[int, tuple[Any, bytes | int, Any]] = OrderedDict()
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
        if hit[1] is not FROZEN and fingerprint(x) != hit[1]:
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
        key = FROZEN if frozen(x) else fingerprint(x)
        if key is None:
            return
        with self._lock:
            self._entries[id(x)] = (x, key, graph)
            self._entries.move_to_end(id(x))
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
