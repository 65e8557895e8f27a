"""The reference evaluator on large inputs: op calls deferred, then run level by level,
the rows of one op in one call.

`block.eval` calls ops one node at a time, and each call into TensorFlow costs tens of
microseconds whatever its size, so an input of 100,000 nodes would take minutes. Once
an evaluation has made `EAGER_OPS` calls, `ReferenceContext` stops computing and
records: each further op call returns `Deferred` handles, and its level is one more
than the deepest pending call it reads. When a value is needed (the end of the
evaluation, `ctx.read`, or a block that converts a handle to a tensor itself) the
pending calls run level by level; within a level, the nodes of one op whose function
is pure (`Op.pure`: a layer or a TensorFlow function, nothing in Python per call) run
as one call on their stacked rows, the others one node at a time, as before.

Small inputs, the ones the engine is tested against, never get here: the oracle stays
op by op. If anything fails while deferred calls run, the evaluation starts again op
by op (`RerunEagerly`), so that the error names the block path and the place in the
input as it always did.

>>> import refold as td
>>> block = td.Map(td.Scalar() >> td.Function(lambda x: 2.0 * x))
>>> with deferring_after(0):
...     [float(v) for v in block.eval([1, 2, 3])]
[2.0, 4.0, 6.0]
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np

from refold.blocks.op import Op

EAGER_OPS = 256  # op calls an evaluation makes one by one before it defers


class RerunEagerly(BaseException):  # noqa: N818  (a signal, not an error)
    """Deferred calls failed: the reference evaluator evaluates again, op by op. A
    `BaseException`, so that no block's `except Exception` turns it into an error of
    its own on the way out."""


class Deferred:
    """An op output that is not computed yet. Blocks pass it along as they pass a
    tensor; `value()` computes it (with everything pending), and so does converting it
    to a tensor or an array."""

    __slots__ = ("node", "index")

    def __init__(self, node: _Node, index: int):
        self.node = node
        self.index = index

    def value(self):
        node = self.node
        if node.outs is None:
            node.calls.run()
        return node.outs[self.index]

    def __tf_tensor__(self, dtype=None, name=None):
        import tensorflow as tf
        return tf.convert_to_tensor(self.value(), dtype=dtype, name=name)

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self.value(), dtype=dtype)

    def __repr__(self) -> str:
        return f"Deferred({self.node.op.name!r}, output {self.index})"


class _Node:
    __slots__ = ("op", "args", "level", "outs", "calls")

    def __init__(self, op: Op, args: list, level: int, calls: DeferredCalls):
        self.op, self.args, self.level, self.calls = op, args, level, calls
        self.outs: list | None = None


def resolve(value: Any) -> Any:
    """A handle's value (a `Deferred` computed if need be: a tensor, or a NumPy array
    where it was computed with other rows); anything else as it is."""
    return value.value() if type(value) is Deferred else value


def _tensor(value: Any):
    import tensorflow as tf
    return tf.constant(value) if isinstance(value, np.ndarray) else value


class DeferredCalls:
    """The pending op calls of one evaluation.

    Args:
        one_call: `one_call(op, args)` computes one node's outputs as the reference
            evaluator does (its eager or traced path); nodes that cannot be batched, and
            levels where an op has one node, run through it.
    """

    def __init__(self, one_call):
        self._one_call = one_call
        self._pending: list[_Node] = []

    def add(self, op: Op, args: list) -> list[Deferred]:
        level = 0
        for a in args:
            if type(a) is Deferred and a.node.outs is None and a.node.level >= level:
                level = a.node.level + 1
        node = _Node(op, args, level, self)
        self._pending.append(node)
        return [Deferred(node, i) for i in range(len(op.output_types))]

    def run(self) -> None:
        """Computes every pending call, level by level."""
        pending, self._pending = self._pending, []
        levels: dict[int, dict[Op, list[_Node]]] = {}
        for node in pending:
            levels.setdefault(node.level, {}).setdefault(node.op, []).append(node)
        try:
            for level in sorted(levels):
                for op, nodes in levels[level].items():
                    self._run(op, nodes)
        except Exception as e:  # said again, op by op, with the block path
            raise RerunEagerly() from e

    def _run(self, op: Op, nodes: list[_Node]) -> None:
        import tensorflow as tf
        if len(nodes) == 1 or not _batchable(op):
            for node in nodes:
                args = [_tensor(resolve(a)) for a in node.args]
                node.outs = self._one_call(op, args)
            return
        # The rows go through NumPy: stacking and splitting tensors in TensorFlow costs
        # a new kernel for each new number of rows (its ops' `N` attribute).
        columns = [np.stack([np.asarray(resolve(a)) for a in column])
                   for column in zip(*[node.args for node in nodes])]
        if op.check is not None:
            op.check(*columns)
        # Padded with copies of the first row to a power of two, so that few shapes
        # reach the op (each new one costs TensorFlow and oneDNN set-up work).
        size = 1 << (len(nodes) - 1).bit_length()
        stacked = [tf.constant(np.concatenate([c, np.repeat(c[:1], size - len(c), 0)]))
                   if size > len(c) else tf.constant(c) for c in columns]
        outs = self._batched(op, stacked)
        arrays = []
        for i, t in enumerate(op.output_types):
            o = outs[i]
            if tuple(o.shape) != (size, *t.shape) or o.dtype.name != t.dtype:
                raise ValueError(f"op {op.name!r} output {i}: expected {t} per row")
            arrays.append(o.numpy())
        for k, node in enumerate(nodes):
            node.outs = [a[k] for a in arrays]

    @staticmethod
    def _batched(op: Op, stacked: list) -> list:
        import tensorflow as tf

        from refold.blocks.evaluation import traced_ops
        outs = traced_ops.batch(op, stacked)  # a layer called often: traced
        if outs is None:
            outs = op.fn(*stacked)
            outs = outs if isinstance(outs, (list, tuple)) else [outs]
        return [tf.convert_to_tensor(o) for o in outs]


def _batchable(op: Op) -> bool:
    return op.pure and not op.random and len(op.input_types) > 0


@contextlib.contextmanager
def deferring_after(calls: int):
    """Within it, evaluations defer after `calls` op calls instead of `EAGER_OPS`
    (tests and benchmarks: 0 defers every call)."""
    global EAGER_OPS
    before, EAGER_OPS = EAGER_OPS, calls
    try:
        yield
    finally:
        EAGER_OPS = before
