"""Evaluating a block expression on one input: the contexts blocks evaluate in.

A block's `evaluate(ctx, x)` never computes tensors itself: it asks its context
for constants (`ctx.constant`, or `ctx.number` for a Python int or float that
fits its scalar type: a context that stores numbers converts them itself), op
calls (`ctx.op`) and metrics (`ctx.metric`),
and passes the handles it gets back along; a block whose next step depends on
computed values (`blocks.Unfold`) asks for their numpy values (`ctx.read`).
Python values (PyObjects), tuples, lists (sequences) and `itertools.repeat`
(broadcast sequences) hold the handles.
Three contexts give the handles a meaning:

- `ReferenceContext`: handles are eager tensors, computed op by op with batch
  size 1 (a layer's op called often runs traced: `blocks.evaluation.traced_ops`).
  It is the unbatched reference evaluator behind `block.eval`: simple, and the
  oracle the batching engine is tested against.
- `DepthContext`: handles are depths (a constant is at depth 0, an op call at
  1 + the deepest of its inputs), for `max_depth`.
- the compiler's expansion context (in `compiler/`), where handles are node ids
  of an op graph.

Evaluation recurses through the block expression, and recursive models recurse
as deep as their inputs; it runs on a thread with a large stack so that inputs
nested 10,000 deep do not hit Python's recursion limit. Its cost is linear in the
input's size: no block evaluates its children from inside a generator expression,
which would make every exception raised deeper (TensorFlow raises and catches some in
each eager op) walk past one generator per level (see `AllOf._evaluate`).

Cyclic inputs: every context has a `recursion_path` set, where a
`ForwardDeclaration` reference keeps `(declaration id, input id)` for each input
object it is evaluating. Meeting the same object again under the same declaration
means the input contains itself, which is reported as an `InputError` naming the
block path instead of recursing until the recursion limit.

>>> from refold.blocks import Scalar, Map
>>> Map(Scalar('int32')).eval([1, 2])
[array(1, dtype=int32), array(2, dtype=int32)]
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from refold.blocks.errors import BadValueError, InputError, InternalError
from refold.blocks.evaluation import deferred, traced_ops
from refold.blocks.evaluation.precision import compute_dtype, held_dtype, to_held
from refold.blocks.evaluation.values import describe, to_array
from refold.blocks.op import Op
from refold.blocks.types import (
    ResultType,
    TensorType,
    VoidType,
)

_STACK_BYTES = 512 * 1024 * 1024
_RECURSION_LIMIT = 1_000_000


def call_with_deep_stack(fn: Callable, *args: Any) -> Any:
    """Calls `fn(*args)` on a thread with a large stack and a high recursion limit.

    The interpreter-wide recursion limit is raised only while such calls run. On a
    thread that already has the deep stack (one started by `start_deep_thread`, such
    as a stream's planning thread or a worker process's) `fn` runs right there: a
    thread hand-off per call costs two wake-ups, which on a loaded machine can take
    longer than expanding a small batch.
    """
    if getattr(_deep, "active", False):
        return fn(*args)
    result: dict[str, Any] = {}

    def run():
        try:
            result["value"] = fn(*args)
        except BaseException as e:  # re-raised in the calling thread
            result["error"] = e

    start_deep_thread(run).join()
    if "error" in result:
        raise result["error"]
    return result["value"]


def start_deep_thread(target: Callable, *args: Any, name: str = "refold-eval",
                      daemon: bool = False) -> threading.Thread:
    """Starts `target(*args)` on a new thread with a large stack, where the recursion
    limit is raised while it runs and `call_with_deep_stack` calls need no thread of
    their own. For threads that expand many inputs (a stream's planning thread).

    >>> def depth(n): return 0 if n == 0 else 1 + depth(n - 1)
    >>> out = []
    >>> start_deep_thread(lambda: out.append(depth(20_000))).join()
    >>> out
    [20000]
    """
    def run():
        _deep.active = True
        try:
            target(*args)
        finally:
            _leave_deep()

    _enter_deep()
    try:
        with _deep_lock:
            old_size = threading.stack_size(_STACK_BYTES)
            try:
                thread = threading.Thread(target=run, name=name, daemon=daemon)
                thread.start()
            finally:
                threading.stack_size(old_size)
    except BaseException:
        _leave_deep()
        raise
    return thread


def call_on_kept_deep_thread(fn: Callable, *args: Any) -> Any:
    """`call_with_deep_stack`, on a deep thread kept for later calls (one per
    concurrent caller): for calls made many times a second, such as a batch's
    expansion in rounds: starting and ending a thread is slow next to a round, and
    slower still for a thread that has run TensorFlow ops and greenlets. The
    recursion limit is raised only while a call runs.

    >>> def depth(n): return 0 if n == 0 else 1 + depth(n - 1)
    >>> call_on_kept_deep_thread(depth, 20_000)
    20000
    """
    if getattr(_deep, "active", False):
        return fn(*args)
    with _kept_lock:
        worker = _kept.pop() if _kept else None
    if worker is None:
        worker = _KeptThread()
    try:
        return worker.call(fn, args)
    finally:
        with _kept_lock:
            _kept.append(worker)


class _KeptThread:
    """A daemon thread with the deep stack that runs one call at a time."""

    def __init__(self):
        self._go = threading.Event()
        self._done = threading.Event()
        self._job: tuple = ()
        self._result: dict = {}
        with _deep_lock:
            old_size = threading.stack_size(_STACK_BYTES)
            try:
                threading.Thread(target=self._serve, name="refold-eval-kept", daemon=True).start()
            finally:
                threading.stack_size(old_size)

    def call(self, fn: Callable, args: tuple) -> Any:
        self._job, self._result = (fn, args), {}
        self._done.clear()
        self._go.set()
        self._done.wait()
        if "error" in self._result:
            raise self._result.pop("error")
        return self._result.pop("value")

    def _serve(self) -> None:
        _deep.active = True
        while True:
            self._go.wait()
            self._go.clear()
            fn, args = self._job
            self._job = ()
            _enter_deep()
            try:
                self._result["value"] = fn(*args)
            except BaseException as e:  # re-raised in the caller's thread
                self._result["error"] = e
            finally:
                _leave_deep()
                self._done.set()


def _enter_deep() -> None:
    with _deep_lock:
        if _running[0] == 0:
            _running[1] = sys.getrecursionlimit()
            sys.setrecursionlimit(max(_running[1], _RECURSION_LIMIT))
        _running[0] += 1


def _leave_deep() -> None:
    with _deep_lock:
        _running[0] -= 1
        if _running[0] == 0:
            sys.setrecursionlimit(_running[1])


def _after_fork_in_child() -> None:
    # Only the forking thread lives on in a child: deep threads of the parent are
    # gone (the kept ones too), and the locks may have been held by one of them.
    global _deep_lock, _kept_lock
    _deep_lock = threading.Lock()
    _kept_lock = threading.Lock()
    _kept.clear()
    if _running[0] and not getattr(_deep, "active", False):
        sys.setrecursionlimit(_running[1])
        _running[0] = 0
    elif _running[0]:
        _running[0] = 1  # the forking thread's own


_deep = threading.local()
_deep_lock = threading.Lock()
_kept: list = []  # idle kept deep threads (`call_on_kept_deep_thread`)
_kept_lock = threading.Lock()
_running = [0, 0]  # deep threads alive, the recursion limit to restore
os.register_at_fork(after_in_child=_after_fork_in_child)


class ReferenceContext:
    """Computes every op at once, eagerly, with batch size 1 (the oracle).

    Args:
        low, keep: under a mixed policy, the low dtype and the types that stay
            float32 (`blocks.evaluation.precision`).
        training: the training flag the ops see (`blocks.evaluation.training_mode`).
        seed: in training, the step's seed random ops draw with (`blocks.noise`).
        example: the input's index in a batch, the first item of its random
            nodes' keys (0 for one input on its own).
        defer: after `deferred.EAGER_OPS` op calls, defer the rest and run them in
            batches (`blocks.evaluation.deferred`): handles may then be `Deferred`.
            Only in inference and at full precision; `block.eval` sets it.
    """

    def __init__(self, low: str | None = None, keep=(), training: bool = False,
                 seed: Any = None, example: int = 0, defer: bool = False):
        import tensorflow as tf
        self._tf = tf
        self._deferred = deferred.DeferredCalls(self._call_now) if (
            defer and not training and low is None) else None
        self._eager_calls = 0
        if training:
            from refold.blocks.evaluation.training_mode import Mode
            self._mode = Mode.of(True, seed)
        else:
            self._mode = None
        self._example = int(example)
        self._random_nodes = 0  # the random nodes so far: the next one's number
        # under a mixed policy: the low dtype and the types that stay float32
        # (`blocks.evaluation.precision`)
        self._low, self._keep = low, frozenset(keep)
        self.metrics: dict[str, list] = {}
        self.metric_labels: dict[str, list] = {}
        # id -> constant, kept alive so that ids stay unique: a prelude-only op
        # must be called on constants only, as the engine requires.
        self._constants: dict[int, Any] = {}
        self.recursion_path: set = set()  # see "Cyclic inputs" above

    def constant(self, value: np.ndarray, ttype: TensorType):
        if self._deferred is not None and self._eager_calls >= deferred.EAGER_OPS and \
                ttype.dtype != "string":
            # a NumPy array: deferred calls stack it with other rows in NumPy
            arr = np.asarray(value, ttype.numpy_dtype)
            self._constants[id(arr)] = arr
            return arr
        t = self._tf.constant(value, dtype=ttype.dtype)
        if self._low is not None:
            t = to_held(t, ttype, held_dtype(ttype, self._low, self._keep))
        self._constants[id(t)] = t
        return t

    def number(self, x: int | float, ttype: TensorType):
        return self.constant(np.asarray(x, ttype.numpy_dtype), ttype)

    def op(self, op: Op, args: list) -> list:
        tf = self._tf
        if op.prelude_only and any(id(a) not in self._constants for a in args):
            raise op.prelude_error()
        if getattr(op, "random", False):  # its key: (example, node), as the engine's
            args = [*args, tf.constant([self._example, self._random_nodes], tf.int32)]
            self._random_nodes += 1
        if self._deferred is not None:
            if self._eager_calls >= deferred.EAGER_OPS:
                return self._deferred.add(op, args)
            self._eager_calls += 1
        return self._call_now(op, args)

    def _call_now(self, op: Op, args: list) -> list:
        """One node's outputs, computed now (`args` with the node's key last if the op
        is random)."""
        tf = self._tf
        if op.check is not None:
            declared = args[:-1] if getattr(op, "random", False) else args
            op.check(*[np.asarray(a)[None] for a in declared])
        if self._mode is None and self._low is None:
            traced = traced_ops.rows(op, args)
            if traced is not None:
                return traced
        if self._mode is not None:
            from refold.blocks.evaluation.training_mode import using
            with using(self._mode):
                outs = self._call(op, args)
        else:
            outs = self._call(op, args)
        if not isinstance(outs, (list, tuple)):
            outs = [outs]
        if len(outs) != len(op.output_types):
            raise ValueError(
                f"op {op.name!r} returned {len(outs)} outputs, expected {len(op.output_types)}")
        results = []
        for i, (o, t) in enumerate(zip(outs, op.output_types)):
            o = tf.convert_to_tensor(o)
            if self._low is not None:
                o = to_held(o, t, held_dtype(t, self._low, self._keep))
            if tuple(o.shape) != (1, *t.shape) or o.dtype.name != held_dtype(
                    t, self._low, self._keep):
                raise ValueError(
                    f"op {op.name!r} output {i}: expected {t} per example, got shape "
                    f"{tuple(o.shape)[1:]} and dtype {o.dtype.name}")
            results.append(tf.squeeze(o, 0))  # 5x faster than o[0] in eager mode
        return results

    def _call(self, op: Op, args: list):
        tf = self._tf
        if args:
            return op.fn(*[tf.expand_dims(a, 0) for a in args])
        return op.fn(tf.constant(1, tf.int32))

    def metric(self, name: str, value, label: Any = None) -> None:
        self.metrics.setdefault(name, []).append(value)
        self.metric_labels.setdefault(name, []).append(label)

    def read(self, value_type: ResultType, value: Any) -> Any:
        """`value` with numpy arrays for its tensors: what a block that decides from
        computed values (`blocks.Unfold`) sees."""
        return to_numpy(value_type, value)


class DepthContext:
    """Tracks only depths: constants at 0, an op call at 1 + its deepest input."""

    def __init__(self):
        self.deepest = 0
        self.metrics: dict[str, list] = {}
        self.recursion_path: set = set()

    def constant(self, value, ttype):
        return 0

    def number(self, x, ttype):
        return 0

    def op(self, op: Op, args: list) -> list:
        depth = 1 + max(args) if args else 0
        self.deepest = max(self.deepest, depth)
        return [depth] * len(op.output_types)

    def metric(self, name: str, value, label: Any = None) -> None:
        self.metrics.setdefault(name, []).append(value)

    def read(self, value_type: ResultType, value: Any) -> Any:
        raise InternalError(
            "max_depth cannot follow a block whose structure depends on computed values "
            "(Unfold); Compiler(block).schedule(inputs).stats counts its steps")


def to_numpy(value_type: ResultType, value: Any, tolist: bool = False) -> Any:
    """Turns a result holding eager tensors into numpy arrays (or Python values)."""
    def convert(t, v):
        if isinstance(t, TensorType):
            v = deferred.resolve(v)
            # `.numpy()` first: numpy cannot read a bfloat16 scalar tensor directly.
            arr = np.asarray(v.numpy() if hasattr(v, "numpy") else v, dtype=t.numpy_dtype)
            return arr.tolist() if tolist else arr
        return v
    return value_type.for_each_terminal(convert, value)


def root_input(block, ctx, inp: Any) -> Any:
    """The root's input as the blocks see it: tensors where the input type has them."""
    t = block.input_type
    if isinstance(t, VoidType):
        return None
    if not any(isinstance(x, TensorType) for x in t.terminal_types()):
        return inp

    def convert(tt, v):
        if not isinstance(tt, TensorType):
            return v
        try:
            return ctx.constant(to_array(v, tt), tt)
        except BadValueError as e:
            raise InputError(block.path, f"the input: {e}") from None
    try:
        return t.for_each_terminal(convert, inp)
    except (TypeError, ValueError, StopIteration) as e:
        if isinstance(e, InputError):
            raise
        raise InputError(block.path, f"the input does not have type {t}: {e}: "
                                     f"{describe(inp)}") from None


def reference_eval(block, inp: Any, tolist: bool = False, training: bool = False,
                   seed: Any = None, example: int = 0) -> Any:
    """`block.eval(inp)`: evaluates `block` on `inp` op by op, eagerly, with batch
    size 1 (the oracle the batching engine is tested against).

    `eval` runs here rather than through the engine so that the block language
    stands alone (`blocks` imports nothing of `compiler` or `scheduler`), and
    because for one input it is several times faster than building a `Compiler`.
    Return conventions and `training`, `seed`, `example`: see `Block.eval`.
    """
    from refold.blocks.validation import metric_types, validate
    if not isinstance(training, bool):
        raise TypeError(f"training must be True or False, got {training!r}")
    if isinstance(example, bool) or not isinstance(example, (int, np.integer)) or example < 0:
        raise ValueError(f"example must be an int >= 0, got {example!r}")
    if training and seed is None:
        import random
        seed = random.getrandbits(31)
    from refold import compat
    metrics_of = metric_types(validate(block))
    args = (compute_dtype(block), metrics_of.values(), training, seed, int(example))
    try:
        return _evaluate(block, inp, ReferenceContext(*args, defer=not compat.tape_may_record()),
                         metrics_of, tolist)
    except deferred.RerunEagerly:  # deferred calls failed: op by op, for the error's path
        return _evaluate(block, inp, ReferenceContext(*args), metrics_of, tolist)


def _evaluate(block, inp: Any, ctx: ReferenceContext, metrics_of: dict, tolist: bool) -> Any:
    try:
        result = call_with_deep_stack(lambda: block.eval_in(ctx, root_input(block, ctx, inp)))
    except InputError as e:
        raise e.locate_in(inp) from e.__cause__
    result = to_numpy(block.output_type, result, tolist)
    if not metrics_of:
        return result
    metrics = {}
    for name, vtype in metrics_of.items():
        values = [deferred.resolve(v) for v in ctx.metrics.get(name, [])]
        arr = np.stack([np.asarray(v) for v in values]) if values else np.zeros(
            (0, *vtype.shape), vtype.dtype)
        metrics[name] = arr.tolist() if tolist else arr
    return result, metrics


def max_depth(block, inp: Any) -> int:
    """`block.max_depth(inp)`: the deepest op call the input needs."""
    from refold.blocks.validation import validate
    validate(block)
    ctx = DepthContext()
    call_with_deep_stack(lambda: block.eval_in(ctx, root_input(block, ctx, inp)))
    return ctx.deepest


__all__ = ["ReferenceContext", "DepthContext", "reference_eval", "max_depth",
           "call_with_deep_stack", "call_on_kept_deep_thread", "start_deep_thread",
           "InputError"]
