"""Running an op graph of a few launches as one straight-line traced function.

The executor (`scheduler.executor`) runs any batch through one `tf.while_loop`: per
iteration a buffer update and a gather per loop value type, and a `tf.cond` per op
that may run outside the loop. For a batch of thousands of nodes that machinery is
amortized; for a round of value-dependent expansion (`compiler.rounds.context`), a handful
of launches of a few dozen rows, it is most of the call. Such rounds repeat: a
decoder's every step is the same ops in the same order, only the row counts and
which rows each launch reads differ. `StraightLine` traces one function per
*launch sequence* (the op of each launch, in order) whose body is, per launch: a
gather of each argument's rows from the values made so far, the op (through
`Launches.call`), its outputs kept; no loop, no buffers, no conds. Row counts and
gather indices enter as one int32 vector, so one trace serves every round of the
same sequence.

The launches are the compiler's scheduler's (`scheduler.schedules`) on the graph;
every launch has nodes, so ops need not handle zero rows, unless `slack` lets a
graph run on a traced sequence that holds its launches and a few more: those run
empty (a sentence on the trace of a slightly longer one's), so their ops must
handle empty batches (`handles_empty`). A graph whose schedule has
more than `max_launches` launches, or whose sequence is new once `max_sequences` are
traced, is not run (`plan` gives None and counts the reason in `fallbacks`): its
caller runs it through the executor. A sequence is traced when two graphs in a
row ask for it (a walk's steps), or once `patience` graphs have: a trace costs far
more than a call, and a sequence that comes now and then (a recursion over an
input's length, in a batch's first round, say) is better run by the executor, whose
one loop serves every length.

>>> import numpy as np
>>> from collections import namedtuple
>>> from types import SimpleNamespace as Op
>>> from refold.scheduler.executor import Executor
>>> from refold.scheduler.graph import OpGraph
>>> t = namedtuple("ValueType", "shape dtype")((), "float32")
>>> double = Op(name="double", input_types=[t], output_types=[t], fn=lambda x: [2 * x])
>>> line = StraightLine(Executor([double], [t]), patience=1)
>>> g = OpGraph.build([0, 0], [1, 1], [0, 1], [0, 0, 0], [-1, 0, 1], [0, 0, 0],
...                   [np.ones(1, np.float32)])   # double(double(1.0))
>>> outputs, read_type, read_pos = line.run(g, np.array([2, 1]))
>>> outputs[0][read_pos].tolist(), line.traced
([4.0, 2.0], 1)
>>> g3 = OpGraph.build([0, 0, 0], [1, 1, 1], [0, 1, 2], [0] * 4, [-1, 0, 1, 2],
...                    [0] * 4, [np.ones(1, np.float32)])   # three launches: a new sequence
>>> outputs, _, read_pos = line.run(g3, np.array([3]))
>>> outputs[0][read_pos].tolist(), line.traced
([8.0], 2)
>>> line.run(OpGraph.build([0, 0], [1, 1], [0, 1], [0, 0, 0], [-1, 0, 1], [0, 0, 0],
...                        [np.full(1, 5.0, np.float32)]), np.array([2]))[0][0].tolist()
[20.0]
>>> line.traced   # the same sequence as g's: no new trace
2
>>> double.handles_empty = True
>>> padded = StraightLine(Executor([double], [t]), patience=1, slack=1)
>>> padded.run(g3, np.array([3]))[0][0].tolist(), padded.run(g, np.array([2]))[0][0].tolist()
([8.0], [4.0])
>>> padded.traced   # g ran on g3's function, its third launch empty
1
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Callable
from typing import Any, NamedTuple

import numba
import numpy as np

from refold import compat
from refold.kernel_calls import KERNEL
from refold.scheduler.graph import OpGraph
from refold.scheduler.schedules import SCHEDULERS

# sequences not traced that a line remembers (asks, where they run), at most
MEMORY = 4096


@numba.njit(cache=True, nogil=True)
def _index(node_group, group_op, n_outputs, out_type, arity, const_rows, value_node,
           value_index, node_args, node_arity, reads, read_type, made):
    """The int32 segments of a graph's straight-line run, one after the other: per
    launch (`group_op`), each argument's rows (or, without arguments, its size); per
    type of `made`, the rows of the reads of that type. Rows number each type's
    values as the function holds them: its constant rows, then each launch's
    outputs of the type (slot after slot, node after node). Returns the segments,
    their lengths and each read's position among its type's."""
    n_launches, n_nodes = len(group_op), len(node_group)
    sizes = np.zeros(n_launches, np.int64)
    pos = np.empty(n_nodes, np.int64)  # a node's rank in its launch
    for j in range(n_nodes):
        pos[j] = sizes[node_group[j]]
        sizes[node_group[j]] += 1
    next_row = const_rows.copy()
    base = np.zeros((n_launches, out_type.shape[1]), np.int64)
    starts = np.zeros(n_launches + 1, np.int64)  # where each launch's segments start
    n_segments = len(made)
    for i in range(n_launches):
        o = group_op[i]
        for s in range(n_outputs[o]):
            k = out_type[o, s]
            base[i, s] = next_row[k]
            next_row[k] += sizes[i]
        a = arity[o]
        starts[i + 1] = starts[i] + (a * sizes[i] if a else 1)
        n_segments += a if a else 1
    index = np.empty(starts[n_launches] + len(reads), np.int32)
    lengths = np.empty(n_segments, np.int32)
    at = 0
    for i in range(n_launches):
        a = arity[group_op[i]]
        if a == 0:
            index[starts[i]] = sizes[i]
            lengths[at] = 1
            at += 1
        for _ in range(a):
            lengths[at] = sizes[i]
            at += 1
    off = 0
    for j in range(n_nodes):
        i = node_group[j]
        for a in range(node_arity[j]):
            v = node_args[off + a]
            src = value_node[v]
            row = value_index[v] if src < 0 else base[node_group[src], value_index[v]] + pos[src]
            index[starts[i] + a * sizes[i] + pos[j]] = row
        off += node_arity[j]
    read_pos = np.empty(len(reads), np.int32)
    p = starts[n_launches]
    for m in range(len(made)):
        count = 0
        for r in range(len(reads)):
            if read_type[r] == made[m]:
                v = reads[r]
                src = value_node[v]
                row = (value_index[v] if src < 0
                       else base[node_group[src], value_index[v]] + pos[src])
                index[p] = row
                read_pos[r] = count
                count += 1
                p += 1
        lengths[at] = count
        at += 1
    return index, lengths, read_pos


class StraightPlan(NamedTuple):
    """A graph ready for its sequence's function: `key` (the launches' ops), the
    function's `tensors`, and where read i lands (`read_type[i]`, `read_pos[i]`)."""

    key: tuple
    tensors: list
    read_type: np.ndarray
    read_pos: np.ndarray


class _Sequence:
    """What a launch sequence's function reads and returns (fixed by its ops)."""

    def __init__(self, layout, key: tuple):
        self.ops = key
        # the value types some launch makes (the reads come from them) and those
        # some launch reads or makes (their constants enter)
        self.made = sorted({k for o in key for k in layout.op_out[o]})
        self.read = sorted({k for o in key for k in layout.op_in[o]} | set(self.made))
        self.dtypes = sorted({layout.type_dtype[k] for k in self.read})
        # the int32 segments: each launch's argument rows (or its size, without
        # arguments), the reads per made type, the constants' sizes per dtype
        n_segments = sum(max(len(layout.op_in[o]), 1) for o in key)
        n_segments += len(self.made) + len(self.dtypes)
        self.n_segments = n_segments


class StraightLine:
    """Runs op graphs of few launches without loop machinery (module docstring).

    Args:
        executor: the `Executor` of the ops (its `launches`, `layout` and
            `output_dtypes` are read; values are held as its value types are).
        scheduler: the name of the schedule that groups a graph's nodes into launches.
        max_launches: graphs of more launches are left to the executor.
        max_sequences: how many launch sequences get a function; a graph of a new
            sequence beyond them is left to the executor.
        patience: how many graphs must ask for a sequence before it is traced,
            unless two in a row do (the ones before are left to the executor).
        scope: a function giving the context each function is traced and called in
            (e.g. TensorFlow's single-threaded executor); none by default.
        slack: a graph of a sequence not traced runs on a traced one that holds its
            launches in order with at most this many more, empty (each of an op that
            `handles_empty`); a sequence about to be traced is traced as the longest
            such one asked for. 0: each sequence runs on its own function.
        ready: if given, whether a sequence not traced is to be traced now (called
            each time a graph asks for it), instead of `patience`.
    """

    def __init__(self, executor, scheduler: str = "agenda", max_launches: int = 16,
                 max_sequences: int = 16, patience: int = 8,
                 scope: Callable[[], Any] | None = None, slack: int = 0,
                 ready: Callable[[tuple], bool] | None = None):
        self.launches = executor.launches
        self.layout = executor.layout
        self.output_dtypes = executor.output_dtypes
        self.schedule = SCHEDULERS[scheduler]
        self.max_launches = max_launches
        self.max_sequences = max_sequences
        self.patience = patience
        self.slack = slack
        self.ready = ready
        self._served: dict = {}  # sequence -> the traced one that runs it (or None)
        self._served_by = 0  # the traced sequences `_served` was found among
        self._asked: collections.Counter = collections.Counter()  # untraced sequences
        self._last: tuple | None = None  # the sequence of the last graph planned
        self.scope = scope or contextlib.nullcontext
        self.fallbacks: collections.Counter = collections.Counter()  # reason -> graphs
        self._functions: dict[tuple, Any] = {}
        self._sequences: dict[tuple, _Sequence] = {}

    @property
    def traced(self) -> int:
        """The launch sequences traced so far (one function each)."""
        return len(self._functions)

    def clear(self) -> None:
        """Forgets the traced functions (the next calls trace them again)."""
        self._functions.clear()
        self._served = {}

    def run(self, graph: OpGraph, reads: np.ndarray) -> tuple | None:
        """`(outputs per value type, read_type, read_pos)` for `graph` (value `reads[i]`
        being row `read_pos[i]` of `outputs[read_type[i]]`), or None where the graph
        is left to the executor (`fallbacks` says why)."""
        plan = self.plan(graph, reads)
        if plan is None:
            return None
        return self.call(plan), plan.read_type, plan.read_pos

    def plan(self, graph: OpGraph, reads: np.ndarray, schedule=None) -> StraightPlan | None:
        """The graph's launches and index vectors, or None (see `run`). The graph must
        have passed `Planner.check`. `schedule`: the graph's launches (`group_op`,
        `node_group`) if a planner made them already; this line's scheduler's otherwise."""
        lay = self.layout
        if schedule is None:
            schedule = self.schedule(graph)
        group_op = schedule.group_op
        if len(group_op) > self.max_launches:
            self.fallbacks["launches"] += 1
            return None
        key = tuple(group_op.tolist())
        last, self._last = self._last, key
        node_group = schedule.node_group
        if key not in self._functions:
            if self._served_by != len(self._functions) or len(self._served) > MEMORY:
                self._served, self._served_by = {}, len(self._functions)  # traced since
            if key in self._served:
                bucket = self._served[key]
            else:
                bucket = self._served[key] = self._bucket(key, self._functions)
            if bucket is None:
                if len(self._functions) >= self.max_sequences:
                    self.fallbacks["sequences"] += 1
                    return None
                self._asked[key] += 1
                if len(self._asked) > MEMORY:  # a long stream of sequences: the most asked
                    self._asked = collections.Counter(dict(self._asked.most_common(MEMORY // 2)))
                if not (self.ready(key) if self.ready is not None
                        else self._asked[key] >= self.patience or key == last):
                    self.fallbacks["new"] += 1
                    return None
                # traced as the longest sequence asked for that can run this one
                bucket = self._bucket(key, self._asked, longest=True) or key
                for k in [k for k in self._asked if k == bucket or k == key]:
                    del self._asked[k]
            if bucket != key:  # this graph's launches among the bucket's, the rest empty
                at = _embedding(key, bucket)
                group_op, node_group = np.asarray(bucket, np.int64), at[node_group]
                key = bucket
        seq = self._sequences.get(key)
        if seq is None:
            seq = self._sequences[key] = _Sequence(lay, key)
        reads = np.asarray(reads, np.int64)
        read_type = graph.value_type[reads].astype(np.int32)
        made = np.zeros(lay.n_types, np.bool_)
        made[seq.made] = True
        if not made[read_type].all():  # a constant of a type no launch makes
            self.fallbacks["reads"] += 1
            return None
        const_rows = np.array([len(graph.constants[k]) if k < len(graph.constants) else 0
                               for k in range(lay.n_types)], np.int64)
        index, lengths, read_pos = KERNEL[_index](
            node_group, group_op, lay.n_outputs, lay.out_type_table, lay.arity,
            const_rows, graph.value_node, graph.value_index, graph.node_args,
            graph.node_arity, reads, read_type, np.asarray(seq.made, np.int64))
        flat = {d: [] for d in seq.dtypes}
        for k in seq.read:
            c = graph.constants[k] if k < len(graph.constants) else np.zeros(0)
            flat[lay.type_dtype[k]].append(np.asarray(c, dtype=lay.type_dtype[k]).reshape(-1))
        # the segments' lengths, then the segments: the kernel's, each dtype's sizes
        header = np.concatenate([lengths, np.array([len(flat[d]) for d in seq.dtypes])])
        sizes = np.array([len(c) for d in seq.dtypes for c in flat[d]], np.int64)
        index = np.concatenate([header, index, sizes]).astype(np.int32, copy=False)
        import tensorflow as tf
        tensors = [tf.constant(index)]
        for d in seq.dtypes:
            pieces = flat[d]
            tensors.append(tf.constant(pieces[0] if len(pieces) == 1 else np.concatenate(pieces),
                                       dtype=tf.as_dtype(d)))
        return StraightPlan(key, tensors, read_type, read_pos)

    def _bucket(self, key: tuple, among, longest: bool = False) -> tuple | None:
        """The shortest (`longest`: longest) sequence of `among`, other than `key`,
        that can run `key`'s graphs: it holds `key`'s launches in order, with at most
        `slack` more, each of an op that handles empty batches."""
        best = None
        for other in among:
            if len(key) < len(other) <= len(key) + self.slack and (
                    best is None or (len(other) > len(best)) == longest) \
                    and self._runs(key, other):
                best = other
        return best

    def _runs(self, key: tuple, bucket: tuple) -> bool:
        """Whether sequence `bucket` can run `key`'s graphs (`_bucket`)."""
        at = _embedding(key, bucket)
        if at is None:
            return False
        extra = np.ones(len(bucket), bool)
        extra[at] = False
        ops = self.launches.ops
        return all(getattr(ops[bucket[i]], "handles_empty", False) is True
                   for i in np.flatnonzero(extra))

    def call(self, plan: StraightPlan) -> list:
        """Runs a plan; returns per value type its rows read (numpy), in read order."""
        fn = self.function(plan.key)
        with self.scope():
            outs = compat.call_flat(fn, plan.tensors)
        lay = self.layout
        result = [None] * lay.n_types
        for k, y in zip(self._sequences[plan.key].made, outs):
            result[k] = y.numpy()
        for k in range(lay.n_types):
            if result[k] is None:
                t = lay.value_types[k]
                result[k] = np.zeros((0, *t.shape), lay.type_dtype[k])
        return result

    def function(self, key: tuple):
        """The traced function of launch sequence `key` (traced on first use)."""
        fn = self._functions.get(key)
        if fn is None:
            import tensorflow as tf
            seq = self._sequences.get(key) or _Sequence(self.layout, key)
            self._sequences[key] = seq
            signature = [tf.TensorSpec([None], tf.int32)] + [
                tf.TensorSpec([None], tf.as_dtype(d)) for d in seq.dtypes]
            with self.scope():
                fn = tf.function(lambda *t: self._body(seq, *t), autograph=False,
                                 input_signature=signature).get_concrete_function()
            self._functions[key] = fn
        return fn

    def _body(self, seq: _Sequence, index, *flats) -> list:
        """The straight-line program of `seq` (traced)."""
        import tensorflow as tf
        lay = self.layout
        parts = tf.split(index[seq.n_segments:], index[:seq.n_segments], num=seq.n_segments)
        segment = iter(parts)
        launch_parts = []
        for o in seq.ops:
            launch_parts.append([next(segment) for _ in range(max(len(lay.op_in[o]), 1))])
        read_rows = {k: next(segment) for k in seq.made}
        made: dict[int, list] = {}
        for d, flat in zip(seq.dtypes, flats):
            ks = [k for k in seq.read if lay.type_dtype[k] == d]
            for k, piece in zip(ks, tf.split(flat, next(segment), num=len(ks))):
                made[k] = [tf.reshape(piece, (-1, *lay.value_types[k].shape))]
        for o, rows in zip(seq.ops, launch_parts):
            ins = lay.op_in[o]
            if ins:  # (an op with arguments is not given its size)
                args = [tf.gather(_joined(made[k]), r) for k, r in zip(ins, rows)]
                outs = self.launches.call(o, args, None)
            else:
                outs = self.launches.call(o, [], tf.reshape(rows[0], []))
            for k, y in zip(lay.op_out[o], outs):
                made.setdefault(k, []).append(y)
        result = []
        for k in seq.made:
            y = tf.gather(_joined(made[k]), read_rows[k])
            if self.output_dtypes is not None and y.dtype.name != self.output_dtypes[k]:
                y = tf.cast(y, self.output_dtypes[k])
            result.append(y)
        return result


def _embedding(key: tuple, bucket: tuple) -> np.ndarray | None:
    """Where each launch of `key` falls in `bucket` (each at the first place after
    the one before with its op), or None if `bucket` does not hold them in order."""
    at = np.empty(len(key), np.int64)
    i = 0
    for j, o in enumerate(bucket):
        if i < len(key) and key[i] == o:
            at[i] = j
            i += 1
    return at if i == len(key) else None


def _joined(pieces: list):
    """The row blocks concatenated; joined once, the result kept in their place."""
    if len(pieces) > 1:
        import tensorflow as tf
        pieces[:] = [tf.concat(pieces, 0)]
    return pieces[0]


__all__ = ["MEMORY", "StraightLine", "StraightPlan"]
