"""The reference evaluator's calls of a layer's op, traced once it has been called often.

An eager call of a Keras layer costs a millisecond or more of Python (its `__call__`
and its sublayers'), and a deep input calls the same op thousands of times; so once an
op whose function is a layer (`Op.traceable`) has been called `CALLS_BEFORE_TRACING`
times, `block.eval` calls a concrete function traced for its arguments' shapes, about
ten times cheaper. Only layers: Keras traces them in its own `fit`, so they are written
to be traced, whereas a plain function may print or count its calls, which `eval` keeps
doing once per node. Only in inference mode and eagerly: a training mode's seed is a
value of the call, which a trace would freeze. A function that cannot be traced stays
eager.

>>> import keras
>>> import tensorflow as tf
>>> from refold.blocks.op import Op
>>> from refold.blocks.types import TensorType
>>> t = TensorType((2,))
>>> op = Op("double", keras.layers.Lambda(lambda x: 2 * x), [t], [t], traceable=True)
>>> x = tf.ones((2,))
>>> [rows(op, [x]) for _ in range(CALLS_BEFORE_TRACING)][-1] is None   # eager so far
True
>>> [r.numpy().tolist() for r in rows(op, [x])]
[[2.0, 2.0]]
>>> traced(op)
1
"""

from __future__ import annotations

import threading
import weakref

from refold import compat
from refold.blocks.evaluation.training_mode import INFERENCE, current
from refold.blocks.op import Op

CALLS_BEFORE_TRACING = 16

_lock = threading.Lock()
_calls: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # op -> eager calls
_batch_calls: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # op -> eager batches
_traces: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # op -> {signature: fn}


def rows(op: Op, args: list) -> list | None:
    """The op's outputs for one node, `args` being its inputs without the batch
    dimension, through the op's traced function where one is due (module docstring);
    None where the op runs eagerly (the caller calls it). The traced function adds
    the batch dimension and takes it off itself, its outputs' types checked once, when
    it is traced: a node costs one call into TensorFlow."""
    if not op.traceable:
        return None
    signature = tuple((tuple(a.shape), a.dtype) for a in args)
    fn = _function(op, ("row", signature), _calls, _one_row(op), [
        (shape, dtype) for shape, dtype in signature])
    return None if fn is None else compat.call_flat(fn, args)


def batch(op: Op, stacked: list) -> list | None:
    """The op's outputs on many nodes' rows (`stacked`, with the batch dimension),
    through one function traced for any number of rows (`blocks.evaluation.deferred`
    calls it) once the op has been called `CALLS_BEFORE_TRACING` times so; None where
    the op runs eagerly (the caller calls it). Inference mode only, as `rows`."""
    if not op.traceable:
        return None
    signature = tuple((tuple(a.shape[1:]), a.dtype) for a in stacked)
    fn = _function(op, ("rows", signature), _batch_calls, _many_rows(op), [
        ((None, *shape), dtype) for shape, dtype in signature])
    return None if fn is None else compat.call_flat(fn, stacked)


def forget() -> None:
    """Drops every trace and call count (for comparisons: `benchmarks.deep_eval`)."""
    with _lock:
        _traces.clear()
        _calls.clear()
        _batch_calls.clear()


def traced(op: Op) -> int:
    """How many argument signatures of `op` run traced."""
    return sum(f is not None for f in _traces.get(op, {}).values())


def _function(op: Op, key: tuple, counts, body, specs: list):
    """The concrete function of `body` traced for `specs` ((shape, dtype) each), kept
    under `key`; None while `counts[op]` eager calls are still due, in training mode,
    in a graph, or where `body` cannot be traced."""
    import tensorflow as tf
    if current() != INFERENCE or not tf.executing_eagerly():
        return None
    with _lock:
        functions = _traces.setdefault(op, {})
        if key in functions:
            return functions[key]
        counts[op] = counts.get(op, 0) + 1
        if counts[op] <= CALLS_BEFORE_TRACING:
            return None
    try:
        fn = tf.function(body).get_concrete_function(
            *[tf.TensorSpec(shape, dtype) for shape, dtype in specs])
    except Exception:  # noqa: BLE001  (not traceable: it stays eager)
        fn = None
    with _lock:
        functions[key] = fn
    return fn


def _many_rows(op: Op):
    """`op.fn` on a batch of rows, its outputs of the op's types and as many rows
    (else tracing fails and the op stays eager, where the reference evaluator names
    what is wrong)."""
    import tensorflow as tf

    def many_rows(*xs):
        outs = op.fn(*xs)
        outs = [tf.convert_to_tensor(o) for o in
                (outs if isinstance(outs, (list, tuple)) else [outs])]
        n = xs[0].shape[0] if xs else None
        if len(outs) != len(op.output_types) or any(
                tuple(o.shape[1:]) != t.shape or o.shape[0] != n or o.dtype.name != t.dtype
                for o, t in zip(outs, op.output_types)):
            raise ValueError(f"op {op.name!r}: outputs not of its types")
        return outs
    return many_rows


def _one_row(op: Op):
    """`op.fn` on one node's inputs: `_many_rows` of one row, the batch dimension
    added to the inputs and taken off the outputs."""
    import tensorflow as tf
    many_rows = _many_rows(op)

    def one_row(*xs):
        return [tf.squeeze(o, 0) for o in many_rows(*[tf.expand_dims(x, 0) for x in xs])]
    return one_row
