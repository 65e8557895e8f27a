"""Planning a batch in one compiled call: merge, schedule and pack.

Every batch is merged (`OpGraph.concatenate`), scheduled (`scheduler.schedules`)
and packed (`Executor.feed`) before its step. Done as separate NumPy and Numba
calls, that took 0.4 ms for 64 sst-synth trees when batches were planned back to
back but 1.0-1.15 ms between training steps: the step leaves the caches cold, and
each Python-level call, temporary array and dispatch pays for it again.
`BatchPlanner.plan` does all of it in one Numba call, `_plan`, from one int32
array holding the batch's example records (each example's `plan_record`: its
graph's `OpGraph.merge_record`, then its *read record*, the value ids whose
values the step returns). It gives exactly what the separate calls give (tested).

>>> import numpy as np
>>> from collections import namedtuple
>>> from types import SimpleNamespace as Op
>>> from scheduler.executor import Executor
>>> from scheduler.graph import OpGraph
>>> t = namedtuple("ValueType", "shape dtype")((), "float32")
>>> double = Op(fn=lambda x: 2 * x, input_types=[t], output_types=[t])
>>> g = OpGraph.build([0, 0], [1, 1], [0, 1], [0, 0, 0], [-1, 0, 1], [0, 0, 0],
...                   [np.ones(1, np.float32)])   # double(double(1.0))
>>> planner = BatchPlanner(Executor([double], [t]), "agenda")
>>> record = plan_record(g, results=[2], metric_ids=[], metric_values=[])
>>> p = planner.plan(np.concatenate([record, record]), 2)
>>> p.group_step.tolist(), p.group_op.tolist(), p.reads.tolist()  # one launch per step
([0, 1], [0, 0], [2, 5])
"""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np

from scheduler.graph import OpGraph, _merge_records
from scheduler.packing import _pack, _segments
from scheduler.schedules import _agenda_steps


def plan_record(graph: OpGraph, results, metric_ids, metric_values) -> np.ndarray:
    """int32: `graph.merge_record`, then the read record `[R, M, results (R value
    ids), metric ids (M), metric value ids (M)]`."""
    head = np.array([len(results), len(metric_ids)], np.int32)
    return np.concatenate([graph.merge_record, head] + [
        np.asarray(a, np.int32).reshape(-1) for a in (results, metric_ids, metric_values)])


class PlannedBatch(NamedTuple):
    """What `BatchPlanner.plan` returns (int32 unless said; G launches, K types).

    The merged graph: `node_op, node_arity, sdepth, node_args, value_type,
    value_node, value_index`; `const_counts` int64 [K], its constant rows per type.
    `value_offsets` int64 [n+1]: where each example's value ids start.
    The schedule: `node_step, group_step, group_op, node_group` (as `Schedule`).
    `reads` int64: the value ids read, as `Compiler.plan` orders them;
    `metric_counts` int64 [n_metrics]: values emitted per metric.
    The feed: `index`, `layout` (int32, as `Executor.feed` makes them), `read_type`,
    `read_pos` (int64).
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
    node_step: np.ndarray
    group_step: np.ndarray
    group_op: np.ndarray
    node_group: np.ndarray
    reads: np.ndarray
    metric_counts: np.ndarray
    index: np.ndarray
    layout: np.ndarray
    read_type: np.ndarray
    read_pos: np.ndarray


# error codes of _plan
_OK, _NOT_CONSTANT, _LOOKUP_IN_LOOP, _TOO_LARGE = 0, 1, 2, 3


class BatchPlanner:
    """Plans batches for `executor` with the schedule `scheduler` ("agenda" or
    "depth"), in one compiled call per batch (see the module docstring).

    Args:
        executor: the `Executor` that will run the batches.
        scheduler: "agenda" or "depth".
        n_metrics: how many metrics the examples' read records may name.
    """

    def __init__(self, executor, scheduler: str, n_metrics: int = 0):
        if scheduler not in ("agenda", "depth"):
            raise ValueError(f"scheduler must be 'agenda' or 'depth', got {scheduler!r}")
        ex = self.executor = executor
        self.agenda = scheduler == "agenda"
        self.n_metrics = n_metrics
        n_types = len(ex.value_types)
        dtype_id = {d: i for i, d in enumerate(ex.dtypes)}
        self._type_dtype = np.array([dtype_id[d] for d in ex._type_dtypes], np.int64)
        self._tables = (
            ex._stage, ex._outer_pos, ex._tail_pos, np.asarray(ex.outer_ops, np.int64),
            np.asarray(ex.tail_ops, np.int64), ex.out_count, ex.in_count, ex._slot_typepos,
            ex.arg_typepos, ex._n_middle, ex.branch_of, np.asarray(ex.loop_types, np.int64),
            ex._outer_arity, ex._tail_arity, ex._tail_in_type, ex._tail_type_mask,
            ex.type_size.reshape(n_types), self._type_dtype, len(ex.dtypes))

    def plan(self, records: np.ndarray, n_examples: int, grouped: bool = False) -> PlannedBatch:
        """Plans the batch whose examples' `plan_record`s are laid end to end in
        `records` (int32). Reads are, per example, its results then its metric
        values; with `grouped`, every result first, then each metric's values in
        turn. Raises `ValueError` for a batch the executor cannot run.

        The records must come from graphs checked against the executor's ops
        (`Executor.check`): the compiled code does not check indices.
        """
        if n_examples < 1:
            raise ValueError("plan needs at least one example")
        *fields, error, bad_op = _plan(
            np.asarray(records, np.int32), n_examples, len(self.executor.value_types),
            self.agenda, grouped, self.n_metrics, *self._tables)
        if error == _NOT_CONSTANT:
            raise ValueError("a prelude node reads a value that is not a constant")
        if error == _LOOKUP_IN_LOOP:
            bad = self.executor.ops[bad_op]
            raise ValueError(
                f"op {getattr(bad, 'name', bad)!r} looks up a variable, so it never runs "
                "inside the loop, but a node of it reads a value the loop computes: its "
                "inputs must be constants or come from ops outside the recursion")
        if error == _TOO_LARGE:
            raise ValueError("the batch is too large for int32 indices")
        return PlannedBatch(*fields)


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
def _depth_steps(node_op, sdepth):
    """Fold's schedule (`Schedule.from_steps(graph, graph.sdepth)`): one launch per
    non-empty (depth, op) pair, in that order."""
    n = len(node_op)
    n_ops = 1
    max_depth = 0
    for j in range(n):
        n_ops = max(n_ops, node_op[j] + 1)
        max_depth = max(max_depth, sdepth[j])
    group_of_key = np.full((max_depth + 1) * n_ops, -1, np.int64)
    for j in range(n):
        group_of_key[sdepth[j] * n_ops + node_op[j]] = 0
    n_groups = 0
    for key in range(len(group_of_key)):
        if group_of_key[key] == 0:
            group_of_key[key] = n_groups
            n_groups += 1
    group_step = np.empty(n_groups, np.int32)
    group_op = np.empty(n_groups, np.int32)
    for key in range(len(group_of_key)):
        g = group_of_key[key]
        if g >= 0:
            group_step[g] = key // n_ops
            group_op[g] = key % n_ops
    node_group = np.empty(n, np.int32)
    for j in range(n):
        node_group[j] = group_of_key[sdepth[j] * n_ops + node_op[j]]
    return sdepth.copy(), group_step, group_op, node_group


@numba.njit(cache=True, nogil=True)
def _agenda_priority(node_op, sdepth):
    """`agenda_schedule`'s op ranking (lower mean depth first, then lower op id;
    no op costs) and where each op's nodes start in its ready queue."""
    n_ops = 1
    for o in node_op:
        n_ops = max(n_ops, o + 1)
    counts = np.zeros(n_ops, np.int64)
    depth_sum = np.zeros(n_ops, np.float64)
    for j in range(len(node_op)):
        counts[node_op[j]] += 1
        depth_sum[node_op[j]] += sdepth[j]
    mean = depth_sum / np.maximum(counts, 1)
    by_rank = np.arange(n_ops)
    for i in range(1, n_ops):  # insertion sort, stable: ties keep op order
        o = by_rank[i]
        r = i
        while r > 0 and mean[by_rank[r - 1]] > mean[o]:
            by_rank[r] = by_rank[r - 1]
            r -= 1
        by_rank[r] = o
    op_base = np.zeros(n_ops + 1, np.int64)
    for o in range(n_ops):
        op_base[o + 1] = op_base[o] + counts[o]
    return by_rank, op_base


@numba.njit(cache=True, nogil=True)
def _launch_order(group_step, group_op, node_group, stage, outer_pos, tail_pos, outer_ops,
                  tail_ops):
    """`Executor._launches`: the outer launches, the loop's, the tail's; returns
    `(launch_op, node_launch, n_outer, n_loop)`."""
    n_outer, n_tail = len(outer_ops), len(tail_ops)
    n_loop = 0
    for g in range(len(group_op)):
        if stage[group_op[g]] == 1 and group_step[g] > 0:
            n_loop += 1
    launch_op = np.empty(n_outer + n_loop + n_tail, np.int64)
    launch_op[:n_outer] = outer_ops
    launch_op[n_outer + n_loop:] = tail_ops
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
def _plan(records, n_examples, n_types, agenda, grouped, n_metrics, stage, outer_pos,
          tail_pos, outer_ops, tail_ops, out_count, in_count, slot_typepos, arg_typepos,
          n_middle, branch_of, loop_types, outer_arity, tail_arity, tail_in_type,
          tail_type_mask, type_size, type_dtype, n_dtypes):
    starts, read_starts = _record_starts(records, n_examples, n_types)
    node_op, node_arity, sdepth, node_args, value_type, value_node, value_index = \
        _merge_records(records, starts, n_types)
    const_counts = np.zeros(n_types, np.int64)
    for p in starts:
        for k in range(n_types):
            const_counts[k] += records[p + 3 + k]
    reads, metric_counts, value_offsets = _reads(records, starts, read_starts, grouped,
                                                 n_metrics)
    if agenda:
        by_rank, op_base = _agenda_priority(node_op, sdepth)
        node_step, group_step, group_op, node_group = _agenda_steps(
            node_op, node_arity, node_args, value_node, by_rank, op_base)
    else:
        node_step, group_step, group_op, node_group = _depth_steps(node_op, sdepth)
    launch_op, node_launch, n_outer, n_loop = _launch_order(
        group_step, group_op, node_group, stage, outer_pos, tail_pos, outer_ops, tail_ops)
    lo, hi = n_outer, n_outer + n_loop
    (group_size, group_start, order, pos, out_cum, in_cum, type_base, value_row, gathered,
     arg_start, const_only_ok) = _pack(
        node_op, node_arity, node_args, value_type, value_node, value_index, node_launch,
        launch_op, const_counts, out_count, in_count, slot_typepos, arg_typepos, n_middle)
    # the merged graph, the schedule and the reads: the first fields of every return
    planned = (node_op, node_arity, sdepth, node_args, value_type, value_node, value_index,
               const_counts, value_offsets, node_step, group_step, group_op, node_group,
               reads, metric_counts)
    error, bad_op = _OK, -1
    if not const_only_ok:
        error = _NOT_CONSTANT
    branch = np.empty(n_loop, np.int64)
    for i in range(n_loop):
        branch[i] = branch_of[launch_op[lo + i]]
        if branch[i] < 0 and error == _OK:
            error, bad_op = _LOOKUP_IN_LOOP, launch_op[lo + i]
    empty = np.zeros(0, np.int32)
    if error != _OK:  # what follows assumes a valid batch
        z = np.zeros(0, np.int64)
        return planned + (empty, empty, z, z, error, bad_op)
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
        return planned + (empty, empty, read_type, read_pos, _TOO_LARGE, -1)
    full = np.empty(len(index) + n_types, np.int32)
    full[:len(index)] = index
    full[len(index):] = sizes
    return planned + (full, layout.astype(np.int32), read_type, read_pos, _OK, -1)
