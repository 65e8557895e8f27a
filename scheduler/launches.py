"""The launch interface: what every loop over a planned batch's launches reads.

A *launch* is one op run on all its nodes of one step of a schedule. The executor's
forward loop (`scheduler.executor`), the replayed backward loop (`scheduler.reverse`)
and the XLA program (`scheduler.xla`) all run launches of the same ops over the same
`Layout`; `Launches` (an executor's `launches`) is what they share:

- `call(o, args, n)`: op o on `n` rows, its outputs checked against its types;
- `table(seg, buffers)`: a packed batch's loop launches as a `LaunchTable`, whose
  `launch(g)` gives launch g's op, size and rows (a `Launch`);
- `tapped_types`: the loop's float value types, the ones gradients flow through;
- `deferred_weights(enabled)`: per loop op, the weights whose gradients are taken
  once per step rather than in the backward loop (`scheduler.weight_grads`).

These were the executor's private methods, which the other loops called; a surface of
its own lets the executor change inside without breaking them (the executor's
internals are not used outside `scheduler/executor.py`: `tests/test_executor_surface.py`).

>>> import numpy as np, tensorflow as tf
>>> from collections import namedtuple
>>> from types import SimpleNamespace as Op
>>> from refold.scheduler.executor import Executor
>>> from refold.scheduler.graph import OpGraph
>>> from refold.scheduler.planner import Planner
>>> from refold.scheduler.schedules import SCHEDULERS
>>> t = namedtuple("ValueType", "shape dtype")((), "float32")
>>> double = Op(name="double", input_types=[t], output_types=[t], fn=lambda x: [2 * x])
>>> launches = Executor([double], [t]).launches
>>> [y.numpy().tolist() for y in launches.call(0, [tf.constant([1.0, 3.0])], 2)]
[[2.0, 6.0]]
>>> launches.tapped_types
[0]
>>> g = OpGraph.build([0, 0], [1, 1], [0, 1], [0, 0, 0], [-1, 0, 1], [0, 0, 0],
...                   [np.ones(1, np.float32)])   # double(double(1.0))
>>> arrays = Planner(launches.layout).feed(g, SCHEDULERS["agenda"](g), [2]).arrays
>>> seg = launches.segments(arrays)
>>> table = launches.table(seg, {0: tf.zeros(3)}, own_outputs=True)
>>> int(table.count)   # the inner double reads a constant: it runs before the loop
1
>>> last = table.launch(0)   # the outer double: reads row 1 (the inner's), writes row 2
>>> int(last.op), int(last.size), last.rows[0].numpy(), last.written[0].numpy()
(0, 1, array([1], dtype=int32), array([2], dtype=int32))
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from refold import compat
from refold.scheduler.layout import Layout, dtype_name


def row_parts(rows, m: int) -> list:
    """`rows` (a launch's row list for m same-typed values, n rows each, one after the
    other) cut into the m lists."""
    if m == 1:
        return [rows]
    import tensorflow as tf
    return tf.split(rows, m) if m else []


def rows_shaped(y, shape):
    """`y` with the static shape `[None, *shape]`: as it is when its static shape says
    so already (a runtime check would cost an op per launch), through
    `tf.ensure_shape` otherwise."""
    import tensorflow as tf
    if y.shape.rank == len(shape) + 1 and y.shape[1:].is_fully_defined() \
            and tuple(y.shape[1:]) == tuple(shape):
        return y
    return tf.ensure_shape(y, (None, *shape))


class Launch(NamedTuple):
    """One loop launch of a packed batch (tensors): `op`, the loop op's branch (its
    position in `layout.loop_ops`); `size`, its nodes; per loop type k, `rows[k]` the
    buffer rows it gathers (argument after argument, `size` rows each) and
    `written[k]` the rows its outputs go to (output after output)."""

    op: Any
    size: Any
    rows: dict
    written: dict


class LaunchTable:
    """A packed batch's loop launches, one row of int32 scalars per launch.

    Every scalar an iteration reads (op branch, size, then per loop type the start and
    length of its gather rows and of the rows it writes) sits in one row of a table
    built before the loop: an iteration reads it with one gather and cuts it with one
    split, where indexing a dozen vectors, or slicing the row item by item, would cost
    an op each.

    Args:
        layout: the executor's `Layout`.
        seg: the batch's index segments by name (`Launches.segments`).
        buffers: per loop type, its buffer (only its row count is read).
        own_outputs: `written` is each launch's own output rows (the replayed
            backward loop, a forward loop no gradient goes through); without it,
            the previous launch's (the differentiated forward loop writes a
            launch's outputs one iteration late: `scheduler.inplace`).
    """

    def __init__(self, layout: Layout, seg: Callable, buffers: dict, own_outputs: bool = False):
        import tensorflow as tf
        self.loop_types = list(layout.loop_types)
        cols = [seg("group_op"), seg("group_size")]
        for k in self.loop_types:
            s, bounds = seg(f"in_splits_{k}"), seg(f"out_bounds_{k}")
            start = bounds[1:-1] if own_outputs else bounds[:-2]
            end = bounds[2:] if own_outputs else bounds[1:-1]
            cols += [s[:-1], s[1:] - s[:-1], start, end - start]
        self.table = tf.stack(cols, axis=1)
        self.in_rows = {k: seg(f"in_rows_{k}") for k in self.loop_types}
        self.row_ids = {k: tf.range(tf.shape(buffers[k])[0]) for k in self.loop_types}

    @property
    def count(self):
        """The number of launches (a scalar tensor)."""
        import tensorflow as tf
        return tf.shape(self.table)[0]

    def launch(self, g) -> Launch:
        """Launch g (a scalar tensor: call it in the loop's body)."""
        import tensorflow as tf
        parts = tf.split(tf.gather(self.table, g), 2 + 4 * len(self.loop_types))
        rows, written = {}, {}
        for i, k in enumerate(self.loop_types):
            f = 2 + 4 * i
            rows[k] = tf.slice(self.in_rows[k], parts[f], parts[f + 1])
            written[k] = tf.slice(self.row_ids[k], parts[f + 2], parts[f + 3])
        return Launch(tf.reshape(parts[0], []), tf.reshape(parts[1], []), rows, written)


class Launches:
    """The launches of a fixed set of ops over their `Layout` (module docstring).

    Args:
        ops: op-like objects with `fn`, `input_types`, `output_types` (as for
            `Executor`), in the layout's op order.
        layout: their `Layout`.
    """

    def __init__(self, ops: Sequence[Any], layout: Layout):
        self.ops = list(ops)
        self.layout = layout
        self._weights: dict | None = None  # loop op -> its deferrable weights, found once
        self._all_deferrable = True

    def segments(self, arrays: dict) -> Callable:
        """The batch's index segments (`Feed.arrays`' `index` cut by its `layout`), as
        a function of the segment's name."""
        import tensorflow as tf
        parts = tf.split(arrays["index"], arrays["layout"][1:] - arrays["layout"][:-1],
                         num=len(self.layout.segments))
        segment_id = self.layout.segment_id
        return lambda name: parts[segment_id[name]]

    def table(self, seg: Callable, buffers: dict, own_outputs: bool = False) -> LaunchTable:
        """The batch's loop launches (`LaunchTable`)."""
        return LaunchTable(self.layout, seg, buffers, own_outputs)

    def call(self, o: int, args: list, n) -> list:
        """Op o's outputs on `args` (`n` rows; a zero-argument op gets `n` itself),
        checked against its output types: a clear error names the op otherwise."""
        import tensorflow as tf
        op, lay = self.ops[o], self.layout
        outs = op.fn(*args) if args else op.fn(n)
        if not isinstance(outs, (list, tuple)):
            outs = [outs]
        if len(outs) != len(lay.op_out[o]):
            raise ValueError(f"op {lay.op_names[o]!r} returned {len(outs)} outputs, "
                             f"expected {len(lay.op_out[o])}")
        result = []
        for s, y in enumerate(outs):
            t = lay.value_types[lay.op_out[o][s]]
            y = tf.convert_to_tensor(y)
            if y.dtype != tf.as_dtype(dtype_name(t)) or (
                    y.shape.rank is not None and tuple(y.shape[1:]) != tuple(t.shape)):
                raise ValueError(f"op {lay.op_names[o]!r} output {s}: expected "
                                 f"{t} per row, got shape {y.shape[1:]} dtype {y.dtype.name}")
            result.append(rows_shaped(y, t.shape))
        return result

    @property
    def tapped_types(self) -> list:
        """The loop's float value types: the ones gradients flow through, whose
        gradients the weight tap reads (`scheduler.weight_grads`)."""
        import tensorflow as tf
        lay = self.layout
        return [k for k in lay.loop_types
                if tf.as_dtype(dtype_name(lay.value_types[k])).is_floating]

    def deferred_weights(self, enabled: bool) -> dict:
        """Loop op -> the weights whose gradients its launches leave to the tap, if
        `enabled` and under a gradient tape (else none): every loop op that reads
        trainable weights, has a float output, and runs on zero rows (its weights
        are found by running it so: `weight_grads.variables_of`)."""
        if not (enabled and self.layout.loop_ops and compat.tape_may_record()):
            return {}
        return self._found()[0]

    def all_deferrable(self) -> bool:
        """Whether the loop has ops and every one's weights can be left to the tap
        (found by running it on zero rows), as the replayed backward loop needs."""
        return bool(self.layout.loop_ops) and self._found()[1]

    def _found(self) -> tuple[dict, bool]:
        """`(loop op -> its deferrable weights, whether every loop op's were found)`,
        found once."""
        if self._weights is None:
            from refold.scheduler.weight_grads import variables_of
            lay, tapped = self.layout, set(self.tapped_types)
            weights, every = {}, True
            for o in lay.loop_ops:
                found = variables_of(self.ops[o].fn, [lay.value_types[k] for k in lay.op_in[o]])
                every &= found is not None
                if found and tapped & set(lay.op_out[o]):
                    weights[o] = found
            self._weights, self._all_deferrable = weights, every
        return self._weights, self._all_deferrable
