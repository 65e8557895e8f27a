"""Planning a batch: merge its examples' graphs, schedule them, pack the feed.

The compiler hands the planner one thing per batch, its examples' *records*
(each example's `plan_record`: its graph's `OpGraph.merge_record`, then its
*read record*, the value ids whose values the step returns) with their constant
rows, and gets one thing back, a `Plan`: the `Feed` the executor runs, where
each value asked for lands, and the schedule's statistics.

`Planner.plan` runs three compiled passes: merge the records (and list the
values to read), the scheduler's kernel (`scheduler.schedules.SCHEDULERS`), and
pack the index segments (`scheduler.packing`). `Planner.feed` is the same
packing from an `OpGraph` and a `Schedule` in NumPy-level steps, the reference
the compiled path is tested against. Both read the ops' `Layout` only.

>>> import numpy as np
>>> from collections import namedtuple
>>> from types import SimpleNamespace as Op
>>> from refold.scheduler.graph import OpGraph
>>> from refold.scheduler.layout import Layout
>>> t = namedtuple("ValueType", "shape dtype")((), "float32")
>>> double = Op(name="double", input_types=[t], output_types=[t])
>>> g = OpGraph.build([0, 0], [1, 1], [0, 1], [0, 0, 0], [-1, 0, 1], [0, 0, 0],
...                   [np.ones(1, np.float32)])   # double(double(1.0))
>>> planner = Planner(Layout.build([double], [t]), "agenda")
>>> planner.check(g)
>>> record = plan_record(g, results=[2], metric_ids=[], metric_values=[])
>>> p = planner.plan([record, record], [g.constants, g.constants])
>>> p.group_step.tolist(), p.group_op.tolist(), p.reads.tolist()  # one launch per step
([0, 1], [0, 0], [2, 5])
>>> p.stats.launches, p.feed.arrays["consts_float32"].tolist()
(2, [1.0, 1.0])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numba
import numpy as np

from refold.kernel_calls import KERNEL
from refold.scheduler.executor import Feed
from refold.scheduler.graph import OpGraph, _merge_records
from refold.scheduler.layout import (
    LOOKUP_IN_LOOP,
    NOT_CONSTANT,
    OK,
    OUT_OF_ORDER,
    TOO_LARGE,
    Layout,
)
from refold.scheduler.packing import _pack, _segments, pack_rows, pack_segments
from refold.scheduler.schedules import (
    SCHEDULERS,
    Schedule,
    Scheduler,
    ScheduleStats,
    schedule_stats,
)


def plan_record(graph: OpGraph, results, metric_ids, metric_values) -> np.ndarray:
    """int32: `graph.merge_record`, then the read record `[R, M, results (R value
    ids), metric ids (M), metric value ids (M)]`."""
    head = np.array([len(results), len(metric_ids)], np.int32)
    return np.concatenate([graph.merge_record, head] + [
        np.asarray(a, np.int32).reshape(-1) for a in (results, metric_ids, metric_values)])


class Plan(NamedTuple):
    """A planned batch, what `Planner.plan` returns (int32 unless said; K types).

    The merged graph: `node_op, node_arity, sdepth, node_args, value_type,
    value_node, value_index`; `constants`: per type, its constant rows;
    `const_counts` int64 [K]. `value_offsets` int64 [n+1]: where each example's
    value ids start. `reads` int64: the value ids read, per example its results
    then its metric values (grouped: every result, then each metric's values);
    `metric_counts` int64: values emitted per metric. The schedule: `node_step,
    group_step, group_op, node_group` (as `Schedule`). The feed: `index`, `layout`,
    `consts` (`{"consts_<dtype>": flat rows}`), `read_type`, `read_pos` (int64).
    """

    node_op: np.ndarray
    node_arity: np.ndarray
    sdepth: np.ndarray
    node_args: np.ndarray
    value_type: np.ndarray
    value_node: np.ndarray
    value_index: np.ndarray
    const_counts: np.ndarray
    value_offsets: np.ndarray
    reads: np.ndarray
    metric_counts: np.ndarray
    node_step: np.ndarray
    group_step: np.ndarray
    group_op: np.ndarray
    node_group: np.ndarray
    index: np.ndarray
    layout: np.ndarray
    read_type: np.ndarray
    read_pos: np.ndarray
    constants: list
    consts: dict

    @property
    def feed(self) -> Feed:
        """The arrays `Executor.compute` takes, and where each read lands."""
        return Feed({"index": self.index, "layout": self.layout, **self.consts},
                    self.read_type, self.read_pos)

    @property
    def stats(self) -> ScheduleStats:
        """Steps, launches and mean batch size per op of the schedule."""
        return schedule_stats(self.node_op, self.group_step, self.group_op, self.node_group)

    @property
    def num_nodes(self) -> int:
        return len(self.node_op)

    @property
    def graph(self) -> OpGraph:
        """The merged `OpGraph` (built when asked: running a batch does not need it)."""
        return OpGraph(self.node_op, self.node_arity, self.node_args, self.value_type,
                       self.value_node, self.value_index, self.constants, self.sdepth)

    @property
    def schedule(self) -> Schedule:
        return Schedule(self.graph, self.node_step, self.group_step, self.group_op,
                        self.node_group)


class Planner:
    """Plans batches for the ops of `layout` with one scheduler (module docstring).

    Args:
        layout: the ops' `Layout` (`Executor.layout`).
        scheduler: a name in `scheduler.schedules.SCHEDULERS` ("agenda", "depth",
            or one registered with `register_scheduler`).
        n_metrics: how many metrics the examples' read records may name.
    """

    def __init__(self, layout: Layout, scheduler: str = "agenda", n_metrics: int = 0):
        if scheduler not in SCHEDULERS:
            raise ValueError(f"scheduler must be one of {sorted(SCHEDULERS)}, got "
                             f"{scheduler!r}")
        self.layout = layout
        self.scheduler: Scheduler = SCHEDULERS[scheduler]
        self.n_metrics = n_metrics
        lay = layout
        self._pack_tables = (
            lay.stage, lay.outer_pos, lay.tail_pos, np.asarray(lay.outer_ops, np.int64),
            np.asarray(lay.tail_ops, np.int64), lay.out_count, lay.in_count,
            lay.slot_typepos, lay.arg_typepos, lay.n_middle, lay.branch_of,
            np.asarray(lay.loop_types, np.int64), lay.outer_arity, lay.tail_arity,
            lay.tail_in_type, lay.tail_type_mask, lay.type_size, lay.type_dtype_id,
            len(lay.dtypes))

    def plan(self, records: Sequence[np.ndarray], constants: Sequence[list],
             grouped: bool = False, scheduler: str | None = None) -> Plan:
        """Plans the batch of examples whose `plan_record`s are `records` and whose
        constant rows are `constants` (per example, per type). Raises `ValueError`
        for a batch the executor cannot run. `scheduler` names a registered
        scheduler to use for this batch instead of the planner's own (schedules
        are interchangeable: the feed's arrays differ, never their kinds).

        The records must come from graphs that passed `check`: the compiled code
        does not check indices.
        """
        lay = self.layout
        n = len(constants)
        if len(records) != n:
            raise ValueError(f"plan needs a record per example: {len(records)} records, "
                             f"{n} constant lists")
        flat = (records[0] if n == 1 else np.concatenate(records) if n
                else np.zeros(0, np.int32)).astype(np.int32, copy=False)
        merged = KERNEL[_merge](flat, n, lay.n_types, grouped, self.n_metrics)
        node_op, node_arity, sdepth, node_args, _, value_node = merged[:6]
        chosen = self.scheduler if scheduler is None else SCHEDULERS[scheduler]
        schedule = KERNEL[chosen.kernel](node_op, node_arity, node_args, value_node, sdepth)
        *feed, error, bad_op = KERNEL[_pack_plan](*merged[:8], merged[9], *schedule,
                                                  *self._pack_tables)
        if error != OK:
            raise lay.planning_error(int(error), int(bad_op))
        per_type = _merged_constants(lay, constants, merged[7])
        return Plan(*merged, *schedule, *feed, per_type, self.flat_constants(per_type))

    def check(self, graph: OpGraph) -> None:
        """Raises `ValueError` unless every node of `graph` matches its op: as many
        arguments as the op's inputs, of its input types, and exactly one value per
        output, of its output type. These are properties of each node, so a graph
        merged from checked graphs needs no new check."""
        lay = self.layout
        node_op = graph.node_op.astype(np.int64)
        vtype = graph.value_type.astype(np.int64)
        vnode = graph.value_node.astype(np.int64)
        vindex = graph.value_index.astype(np.int64)
        if len(node_op) and (node_op.min() < 0 or node_op.max() >= lay.n_ops):
            raise ValueError(f"a node's op id is not among the executor's {lay.n_ops} ops")
        arity = graph.node_arity.astype(np.int64)
        if np.any(arity != lay.arity[node_op]):
            raise ValueError("a node's number of arguments differs from its op's")
        out_vals = np.flatnonzero(vnode >= 0)
        on, slot = vnode[out_vals], vindex[out_vals]
        o_of = node_op[on]
        n_out = lay.n_outputs[o_of]
        if np.any((slot < 0) | (slot >= n_out)) or np.any(
                lay.out_type_table[o_of, np.minimum(slot, n_out - 1)] != vtype[out_vals]) \
                or len(out_vals) != int(lay.n_outputs[node_op].sum()) or (len(on) and np.bincount(
                    on * lay.max_outputs + slot).max() > 1):
            raise ValueError("the graph's node outputs do not match its ops: every output "
                             "of every node must be exactly one value of the graph")
        consumer = np.repeat(np.arange(graph.num_nodes), arity)
        arg_idx = np.arange(len(graph.node_args)) - np.repeat(np.cumsum(arity) - arity, arity)
        if np.any(lay.in_type_table[node_op[consumer], arg_idx]
                  != vtype[graph.node_args.astype(np.int64)]):
            raise ValueError("an argument's value type differs from its op's input type")

    def feed(self, graph: OpGraph, schedule: Schedule, read_values: np.ndarray,
             checked: bool = False) -> Feed:
        """Packs a scheduled graph, reading the values `read_values`: the reference
        for `plan`, in NumPy-level steps (`checked=True` skips `check(graph)`)."""
        if not checked:
            self.check(graph)
        lay = self.layout
        g_op, node_group, n_outer, n_loop = self.launches(schedule)
        lo, hi = n_outer, n_outer + n_loop  # the loop's launches
        const_counts = np.array([len(c) for c in graph.constants[:lay.n_types]]
                                + [0] * (lay.n_types - len(graph.constants)), np.int64)
        packed = pack_rows(graph.node_op, graph.node_arity, graph.node_args, graph.value_type,
                           graph.value_node, graph.value_index, node_group, g_op,
                           const_counts, lay.out_count, lay.in_count, lay.slot_typepos,
                           lay.arg_typepos, const_only=lay.n_middle)
        if not packed.const_only_ok:
            raise lay.planning_error(NOT_CONSTANT)
        if packed.out_of_order >= 0:
            raise lay.planning_error(OUT_OF_ORDER, int(graph.node_op[packed.out_of_order]))
        branch = lay.branch_of[g_op[lo:hi]]
        if np.any(branch < 0):
            raise lay.planning_error(LOOKUP_IN_LOOP, int(g_op[lo:hi][np.argmax(branch < 0)]))
        index, lengths, read_type, read_pos = pack_segments(
            packed, lo, hi, branch, lay.loop_types, const_counts, graph.node_args,
            graph.value_type, np.asarray(read_values, np.int64), lay.outer_arity,
            lay.tail_arity, lay.tail_in_type, lay.tail_type_mask)
        sizes = const_counts * lay.type_size  # flat elements per type
        const_sizes = [sizes[[k for k in range(lay.n_types) if lay.type_dtype[k] == d]]
                       for d in lay.dtypes]
        lengths = np.concatenate([lengths, [len(s) for s in const_sizes]])
        bounds = np.zeros(len(lengths) + 1, np.int64)
        np.cumsum(lengths, out=bounds[1:])
        if bounds[-1] >= 2 ** 31 or (const_counts + packed.out_cum[-1]).max(initial=0) >= 2 ** 31:
            raise lay.planning_error(TOO_LARGE)
        arrays = {"index": np.concatenate([index] + const_sizes).astype(np.int32),
                  "layout": bounds.astype(np.int32), **self.flat_constants(graph.constants)}
        return Feed(arrays, read_type, read_pos)

    def launches(self, schedule: Schedule):
        """The launches in execution order, from a schedule's (step, op) groups.

        Returns `(launch_op, node_launch, n_outer, n_loop)`: first the outer launches
        (one per entry of `outer_ops`, possibly empty: a middle op's step-0 nodes, a
        head op's nodes whatever their step), then the schedule's launches of middle
        ops after step 0 in its order (one loop iteration each), then one launch per
        tail op.
        """
        lay = self.layout
        s_op = schedule.group_op.astype(np.int64)
        stage = lay.stage[s_op]
        in_loop = (stage == 1) & (schedule.group_step > 0)
        n_outer, n_loop = len(lay.outer_ops), int(np.count_nonzero(in_loop))
        launch_of_group = np.where(
            in_loop, n_outer + np.cumsum(in_loop) - 1,
            np.where(stage == 2, n_outer + n_loop + lay.tail_pos[s_op], lay.outer_pos[s_op]))
        launch_op = np.concatenate([np.asarray(lay.outer_ops, np.int64), s_op[in_loop],
                                    np.asarray(lay.tail_ops, np.int64)])
        return launch_op, launch_of_group[schedule.node_group], n_outer, n_loop

    def flat_constants(self, constants: list) -> dict:
        """`{"consts_<dtype>": the constant rows of every type of that dtype, flat, type
        after type}`, as `Executor.compute` takes them; `constants[k]`: type k's rows."""
        lay = self.layout
        flat: dict[str, list] = {d: [] for d in lay.dtypes}
        for k, d in enumerate(lay.type_dtype):
            c = constants[k] if k < len(constants) else np.zeros(0, d)
            if len(c):
                flat[d].append(np.asarray(c, dtype=d).reshape(-1))
        return {f"consts_{d}": (pieces[0] if len(pieces) == 1 else np.concatenate(pieces))
                if pieces else np.zeros(0, d) for d, pieces in flat.items()}


def _merged_constants(layout: Layout, constants: Sequence[list], counts: np.ndarray) -> list:
    """Per value type, the examples' constant rows, example after example."""
    if len(constants) == 1:
        return list(constants[0])
    out = []
    for k, t in enumerate(layout.value_types):
        if counts[k]:
            out.append(np.concatenate([c[k] for c in constants]))
        else:
            out.append(constants[0][k] if constants else
                       np.zeros((0, *t.shape), layout.type_dtype[k]))
    return out


@numba.njit(cache=True, nogil=True)
def _record_starts(records, n_examples, n_types):
    """Where each example's graph record starts, where its read record starts."""
    starts = np.empty(n_examples, np.int64)
    read_starts = np.empty(n_examples, np.int64)
    p = 0
    for i in range(n_examples):
        starts[i] = p
        n, a, v = records[p], records[p + 1], records[p + 2]
        p += 3 + n_types + 3 * n + a + 3 * v
        read_starts[i] = p
        p += 2 + records[p] + 2 * records[p + 1]
    return starts, read_starts


@numba.njit(cache=True, nogil=True)
def _reads(records, starts, read_starts, grouped, n_metrics):
    """The value ids to read (merged numbering), per-metric counts, value offsets."""
    n = len(starts)
    value_offsets = np.zeros(n + 1, np.int64)
    n_reads = 0
    counts = np.zeros(n_metrics, np.int64)
    for i in range(n):
        value_offsets[i + 1] = value_offsets[i] + records[starts[i] + 2]
        r = read_starts[i]
        n_res, n_met = records[r], records[r + 1]
        n_reads += n_res + n_met
        for m in range(n_met):
            counts[records[r + 2 + n_res + m]] += 1
    reads = np.empty(n_reads, np.int64)
    # per example: its results, then its metric values; grouped: every result, then
    # the values of metric 0, of metric 1, ... (metric m's next one goes to metric_at[m])
    metric_at = np.empty(n_metrics, np.int64)
    if grouped:
        at = 0
        for i in range(n):
            at += records[read_starts[i]]
        for m in range(n_metrics):
            metric_at[m] = at
            at += counts[m]
    at = 0
    for i in range(n):
        r, off = read_starts[i], value_offsets[i]
        n_res, n_met = records[r], records[r + 1]
        for j in range(n_res):
            reads[at] = records[r + 2 + j] + off
            at += 1
        for m in range(n_met):
            value = records[r + 2 + n_res + n_met + m] + off
            if grouped:
                metric = records[r + 2 + n_res + m]
                reads[metric_at[metric]] = value
                metric_at[metric] += 1
            else:
                reads[at] = value
                at += 1
    return reads, counts, value_offsets


@numba.njit(cache=True, nogil=True)
def _launch_order(group_step, group_op, node_group, stage, outer_pos, tail_pos, outer_ops,
                  tail_ops):
    """`Planner.launches`: the outer launches, the loop's, the tail's; returns
    `(launch_op, node_launch, n_outer, n_loop)`."""
    n_outer, n_tail = len(outer_ops), len(tail_ops)
    n_loop = 0
    for g in range(len(group_op)):
        if stage[group_op[g]] == 1 and group_step[g] > 0:
            n_loop += 1
    launch_op = np.empty(n_outer + n_loop + n_tail, np.int64)
    # element by element: an array assigned to a slice makes Numba compile its
    # shape-mismatch error message (string formatting), a large part of a new
    # install's compilation (`refold.kernel_cache`)
    for i in range(n_outer):
        launch_op[i] = outer_ops[i]
    for i in range(n_tail):
        launch_op[n_outer + n_loop + i] = tail_ops[i]
    launch_of_group = np.empty(len(group_op), np.int64)
    i = n_outer
    for g in range(len(group_op)):
        o = group_op[g]
        if stage[o] == 1 and group_step[g] > 0:
            launch_of_group[g] = i
            launch_op[i] = o
            i += 1
        elif stage[o] == 2:
            launch_of_group[g] = n_outer + n_loop + tail_pos[o]
        else:
            launch_of_group[g] = outer_pos[o]
    node_launch = np.empty(len(node_group), np.int64)
    for j in range(len(node_group)):
        node_launch[j] = launch_of_group[node_group[j]]
    return launch_op, node_launch, n_outer, n_loop


@numba.njit(cache=True, nogil=True)
def _merge(records, n_examples, n_types, grouped, n_metrics):
    """The merged graph of the records, its constant counts, each example's value
    offset, the values to read and the count of each metric's values."""
    starts, read_starts = _record_starts(records, n_examples, n_types)
    node_op, node_arity, sdepth, node_args, value_type, value_node, value_index = \
        _merge_records(records, starts, n_types)
    const_counts = np.zeros(n_types, np.int64)
    for p in starts:
        for k in range(n_types):
            const_counts[k] += records[p + 3 + k]
    reads, metric_counts, value_offsets = _reads(records, starts, read_starts, grouped,
                                                 n_metrics)
    return (node_op, node_arity, sdepth, node_args, value_type, value_node, value_index,
            const_counts, value_offsets, reads, metric_counts)


@numba.njit(cache=True, nogil=True)
def _pack_plan(node_op, node_arity, sdepth, node_args, value_type, value_node, value_index,
               const_counts, reads, node_step, group_step, group_op, node_group, stage,
               outer_pos, tail_pos, outer_ops, tail_ops, out_count, in_count, slot_typepos,
               arg_typepos, n_middle, branch_of, loop_types, outer_arity, tail_arity,
               tail_in_type, tail_type_mask, type_size, type_dtype, n_dtypes):
    """The feed of a scheduled batch: `(index, layout, read_type, read_pos, error,
    bad_op)`, as `Planner.feed` packs it (error: a code of `scheduler.layout`)."""
    n_types = len(const_counts)
    launch_op, node_launch, n_outer, n_loop = _launch_order(
        group_step, group_op, node_group, stage, outer_pos, tail_pos, outer_ops, tail_ops)
    lo, hi = n_outer, n_outer + n_loop
    (group_size, group_start, order, pos, out_cum, in_cum, type_base, value_row, gathered,
     arg_start, const_only_ok, out_of_order) = _pack(
        node_op, node_arity, node_args, value_type, value_node, value_index, node_launch,
        launch_op, const_counts, out_count, in_count, slot_typepos, arg_typepos, n_middle)
    empty = np.zeros(0, np.int32)
    z = np.zeros(0, np.int64)
    if not const_only_ok:
        return empty, empty, z, z, NOT_CONSTANT, -1
    if out_of_order >= 0:
        return empty, empty, z, z, OUT_OF_ORDER, node_op[out_of_order]
    branch = np.empty(n_loop, np.int64)
    for i in range(n_loop):
        branch[i] = branch_of[launch_op[lo + i]]
        if branch[i] < 0:
            return empty, empty, z, z, LOOKUP_IN_LOOP, launch_op[lo + i]
    index, lengths, read_type, read_pos = _segments(
        lo, hi, branch, loop_types, const_counts, group_size, group_start, order, in_cum,
        out_cum, type_base, gathered, value_row, arg_start, node_args, value_type, reads,
        outer_arity, tail_arity, tail_in_type, tail_type_mask)
    # the constant sizes close the index: one segment per dtype, holding the flat
    # size of each type of that dtype
    n_segments = len(lengths) + n_dtypes
    layout = np.zeros(n_segments + 1, np.int64)
    for i in range(len(lengths)):
        layout[i + 1] = layout[i] + lengths[i]
    sizes = np.empty(n_types, np.int64)
    i = 0
    for d in range(n_dtypes):
        for k in range(n_types):
            if type_dtype[k] == d:
                sizes[i] = const_counts[k] * type_size[k]
                i += 1
        layout[len(lengths) + d + 1] = layout[len(lengths)] + i
    largest = 0
    for k in range(n_types):
        largest = max(largest, const_counts[k] + out_cum[len(out_cum) - 1, k])
    if layout[n_segments] >= 2 ** 31 or largest >= 2 ** 31:
        return empty, empty, read_type, read_pos, TOO_LARGE, -1
    full = np.empty(len(index) + n_types, np.int32)
    for i in range(len(index)):  # not slices: see `_launch_order`
        full[i] = index[i]
    for k in range(n_types):
        full[len(index) + k] = sizes[k]
    return full, layout.astype(np.int32), read_type, read_pos, OK, -1
