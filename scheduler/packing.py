"""The compiled core of packing a batch (`scheduler.planner`), two Numba passes.

- `pack_rows`: every value's buffer row and every argument's place in its launch's
  gather list, in one pass over nodes, values and arguments.
- `pack_segments`: the executor's index segments from those (the loop's launches,
  the rows to read after the loop, the outer and tail launches' arguments).

Planning runs on every batch, beside the device, so both passes are compiled:
a vectorised NumPy version made ~40 array passes over the batch and measured
several times slower (BENCHMARKS.md, "Why the executor looks as it does").

>>> import numpy as np
>>> # op 0: () -> one value of type 0; op 1: (type 0, type 0) -> type 0
>>> # graph: n0 = op0(), n1 = op0(), n2 = op1(n0 output, n1 output); launches: [n0 n1], [n2]
>>> i64 = lambda *x: np.array(x, np.int64)
>>> packed = pack_rows(node_op=i64(0, 0, 1), node_arity=i64(0, 0, 2), node_args=i64(0, 1),
...                    value_type=i64(0, 0, 0), value_node=i64(0, 1, 2),
...                    value_index=i64(0, 0, 0), node_launch=i64(0, 0, 1),
...                    launch_op=i64(0, 1), const_counts=i64(0),
...                    out_count=np.ones((2, 1), np.int64), in_count=i64([0], [2]),
...                    slot_typepos=np.zeros((2, 1), np.int64), arg_typepos=i64([0, 0], [0, 1]))
>>> packed.value_row.tolist(), packed.gathered.tolist()
([0, 1, 2], [0, 1])
"""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np

from refold.kernel_calls import KERNEL, vectorised


class Packed(NamedTuple):
    """What `pack_rows` computes (int64 arrays; G launches, K value types).

    group_size [G], group_start [G+1]: nodes per launch and their cumulative sums.
    order [N]: the nodes launch after launch (node order within a launch).
    pos [N]: each node's position within its launch.
    out_cum, in_cum [G+1, K]: per type, outputs and arguments of the launches before.
    type_base [K]: where type k's gather list starts in `gathered`.
    value_row [V]: each value's row in its type's buffer (constants first).
    gathered [A]: per type, the buffer rows each launch gathers: launch after launch;
        within a launch, argument (among the op's arguments of that type), then node.
    arg_start [N]: where node j's arguments start in the graph's `node_args`.
    const_only_ok: whether every node of launches `< const_only` reads constants only.
    out_of_order: -1, or the first node that reads a value of a launch not before its own.
    """

    group_size: np.ndarray
    group_start: np.ndarray
    order: np.ndarray
    pos: np.ndarray
    out_cum: np.ndarray
    in_cum: np.ndarray
    type_base: np.ndarray
    value_row: np.ndarray
    gathered: np.ndarray
    arg_start: np.ndarray
    const_only_ok: bool
    out_of_order: int


def pack_rows(node_op, node_arity, node_args, value_type, value_node, value_index,
              node_launch, launch_op, const_counts, out_count, in_count, slot_typepos,
              arg_typepos, const_only: int = 0) -> Packed:
    """Rows and gather lists of a graph whose node j runs in launch `node_launch[j]`.

    Args: the graph's arrays; `launch_op[g]`, the op of launch g; `const_counts[k]`,
    the constant rows of type k; and per op, `out_count[o, k]` / `in_count[o, k]`
    (outputs / arguments of type k), `slot_typepos[o, s]` (output s's position among
    the op's outputs of its type), `arg_typepos[o, a]` (the same for argument a).
    The nodes of launches `< const_only` are checked to read constants only, and
    every node to read values of earlier launches only (`Packed.out_of_order`).
    """
    return Packed(*KERNEL[_pack](*(_ints(a) for a in (
        node_op, node_arity, node_args, value_type, value_node, value_index, node_launch,
        launch_op, const_counts, out_count, in_count, slot_typepos, arg_typepos)),
        const_only))


def _ints(a) -> np.ndarray:
    # int32 and int64 arrays go in as they are (a graph's arrays are int32: no copy);
    # Numba compiles one version per combination of dtypes met.
    a = np.asarray(a)
    return a if a.dtype in (np.int32, np.int64) else a.astype(np.int64)


@numba.njit(cache=True, nogil=True)
def _pack(node_op, node_arity, node_args, value_type, value_node, value_index, node_launch,
          launch_op, const_counts, out_count, in_count, slot_typepos, arg_typepos,
          const_only):
    n, n_groups, n_types = len(node_op), len(launch_op), len(const_counts)
    group_size = np.zeros(n_groups, np.int64)
    for j in range(n):
        group_size[node_launch[j]] += 1
    group_start = np.zeros(n_groups + 1, np.int64)
    for g in range(n_groups):
        group_start[g + 1] = group_start[g] + group_size[g]
    fill = group_start[:-1].copy()
    order = np.empty(n, np.int64)
    pos = np.empty(n, np.int64)
    for j in range(n):  # a counting sort: stable, so node order within a launch
        g = node_launch[j]
        order[fill[g]] = j
        pos[j] = fill[g] - group_start[g]
        fill[g] += 1
    out_cum = np.zeros((n_groups + 1, n_types), np.int64)
    in_cum = np.zeros((n_groups + 1, n_types), np.int64)
    for g in range(n_groups):
        o = launch_op[g]
        for k in range(n_types):
            out_cum[g + 1, k] = out_cum[g, k] + group_size[g] * out_count[o, k]
            in_cum[g + 1, k] = in_cum[g, k] + group_size[g] * in_count[o, k]
    # rows of type k: constants, then launch after launch; within a launch, output slot
    # (among the op's outputs of type k), then node
    value_row = np.empty(len(value_type), np.int64)
    for v in range(len(value_type)):
        j = value_node[v]
        if j < 0:
            value_row[v] = value_index[v]
        else:
            g, t = node_launch[j], value_type[v]
            value_row[v] = (const_counts[t] + out_cum[g, t]
                            + slot_typepos[node_op[j], value_index[v]] * group_size[g] + pos[j])
    type_base = np.zeros(n_types, np.int64)
    for k in range(1, n_types):
        type_base[k] = type_base[k - 1] + in_cum[n_groups, k - 1]
    gathered = np.empty(len(node_args), np.int64)
    arg_start = np.empty(n, np.int64)
    p = 0
    const_only_ok = True
    out_of_order = -1
    for j in range(n):
        arg_start[j] = p
        g, o = node_launch[j], node_op[j]
        for a in range(node_arity[j]):
            v = node_args[p]
            if value_node[v] >= 0:
                if g < const_only:
                    const_only_ok = False
                if node_launch[value_node[v]] >= g and out_of_order < 0:
                    out_of_order = j
            t = value_type[v]
            gathered[type_base[t] + in_cum[g, t] + arg_typepos[o, a] * group_size[g]
                     + pos[j]] = value_row[v]
            p += 1
    return (group_size, group_start, order, pos, out_cum, in_cum, type_base, value_row,
            gathered, arg_start, const_only_ok, out_of_order)


@vectorised(_pack)
def _pack_numpy(node_op, node_arity, node_args, value_type, value_node, value_index,
                node_launch, launch_op, const_counts, out_count, in_count, slot_typepos,
                arg_typepos, const_only):
    """`_pack` in NumPy: the same rows and gather lists, each a whole-array step."""
    i64 = np.int64
    node_op, node_arity, node_args, value_type, value_node, value_index, node_launch, \
        launch_op, const_counts, out_count, in_count, slot_typepos, arg_typepos = (
            np.asarray(x).astype(i64) for x in (
                node_op, node_arity, node_args, value_type, value_node, value_index,
                node_launch, launch_op, const_counts, out_count, in_count, slot_typepos,
                arg_typepos))
    n, n_groups, n_types = len(node_op), len(launch_op), len(const_counts)
    group_size = np.bincount(node_launch, minlength=n_groups).astype(i64)[:n_groups]
    group_start = np.concatenate([np.zeros(1, i64), np.cumsum(group_size)])
    order = np.argsort(node_launch, kind="stable").astype(i64)
    pos = np.empty(n, i64)
    pos[order] = np.arange(n) - group_start[node_launch[order]]
    out_cum, in_cum = (np.concatenate([np.zeros((1, n_types), i64),
                                       np.cumsum(group_size[:, None] * c[launch_op], axis=0)])
                       for c in (out_count.reshape(-1, n_types), in_count.reshape(-1, n_types)))
    value_row = value_index.copy()  # a constant's row is its index
    c = np.flatnonzero(value_node >= 0)
    j, t = value_node[c], value_type[c]
    g = node_launch[j]
    value_row[c] = (const_counts[t] + out_cum[g, t]
                    + slot_typepos[node_op[j], value_index[c]] * group_size[g] + pos[j])
    type_base = np.concatenate([np.zeros(1, i64), np.cumsum(in_cum[n_groups, :-1])])
    arg_start = np.cumsum(node_arity) - node_arity
    reader = np.repeat(np.arange(n), node_arity)  # the node of each argument, in order
    a = np.arange(len(reader)) - arg_start[reader]
    v = node_args[:len(reader)]
    g, o, t = node_launch[reader], node_op[reader], value_type[v]
    read = np.flatnonzero(value_node[v] >= 0)  # the arguments that read a computed value
    const_only_ok = not bool(np.any(g[read] < const_only))
    late = read[node_launch[value_node[v[read]]] >= g[read]]
    out_of_order = int(reader[late[0]]) if len(late) else -1
    gathered = np.empty(len(node_args), i64)
    gathered[type_base[t] + in_cum[g, t] + arg_typepos[o, a] * group_size[g]
             + pos[reader]] = value_row[v]
    return (group_size, group_start, order, pos, out_cum, in_cum, type_base, value_row,
            gathered, arg_start, const_only_ok, out_of_order)


def pack_segments(packed: Packed, lo: int, hi: int, branch, loop_types, const_counts,
                  node_args, value_type, read_values, outer_arity, tail_arity, tail_in_type,
                  tail_types) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The executor's index segments of a batch, in `Layout.segments` order
    (all but the constant sizes, which come last): `(index int32, segment lengths,
    read_type, read_pos)`. See `Planner.feed` for what each segment holds."""
    return KERNEL[_segments](
        lo, hi, _ints(branch), _ints(loop_types), _ints(const_counts), packed.group_size,
        packed.group_start, packed.order, packed.in_cum, packed.out_cum, packed.type_base,
        packed.gathered, packed.value_row, packed.arg_start, _ints(node_args),
        _ints(value_type), _ints(read_values), _ints(outer_arity), _ints(tail_arity),
        _ints(tail_in_type), np.asarray(tail_types, np.bool_))


@numba.njit(cache=True, nogil=True)
def _launch_arg_rows(launch, a, group_start, order, arg_start, node_args, value_row):
    # the buffer rows of argument a of every node of a launch, in node order
    out = np.empty(group_start[launch + 1] - group_start[launch], np.int64)
    for i in range(len(out)):
        out[i] = value_row[node_args[arg_start[order[group_start[launch] + i]] + a]]
    return out


@numba.njit(cache=True, nogil=True)
def _remap(rows, end, post, at):
    # in place: a row below `end` becomes its position in `post` (appended there, from
    # `at` on); a later row (a tail output) becomes len(post) + its offset from `end`
    for i in range(len(rows)):
        r = rows[i]
        if r < end:
            post[at] = r
            rows[i] = at
            at += 1
        else:
            rows[i] = len(post) + r - end
    return at


@vectorised(_launch_arg_rows)
def _launch_arg_rows_numpy(launch, a, group_start, order, arg_start, node_args, value_row):
    """`_launch_arg_rows` in NumPy."""
    nodes = order[group_start[launch]:group_start[launch + 1]]
    return np.asarray(value_row[node_args[arg_start[nodes] + a]], np.int64)


@vectorised(_remap)
def _remap_numpy(rows, end, post, at):
    """`_remap` in NumPy (in place, in the same order)."""
    low = rows < end
    k = int(np.count_nonzero(low))
    post[at:at + k] = rows[low]
    high = ~low
    rows[high] = len(post) + rows[high] - end
    rows[low] = np.arange(at, at + k)
    return at + k


@numba.njit(cache=True, nogil=True)
def _segments(lo, hi, branch, loop_types, const_counts, group_size, group_start, order,
              in_cum, out_cum, type_base, gathered, value_row, arg_start, node_args,
              value_type, read_values, outer_arity, tail_arity, tail_in_type, tail_types):
    n_types = len(const_counts)
    n_loop = hi - lo
    n_tail = len(tail_arity)
    loop_end = const_counts + out_cum[hi]
    pieces = [branch.astype(np.int64), group_size[lo:hi].copy(), loop_end.copy()]
    for k in loop_types:  # in_splits_k, in_rows_k, out_bounds_k
        pieces.append(in_cum[lo:hi + 1, k] - in_cum[lo, k])
        pieces.append(gathered[type_base[k] + in_cum[lo, k]:type_base[k] + in_cum[hi, k]].copy())
        bounds = np.empty(n_loop + 2, np.int64)
        bounds[0] = const_counts[k] + out_cum[lo, k]
        for j in range(n_loop + 1):  # not a slice: see `planner._launch_order`
            bounds[1 + j] = const_counts[k] + out_cum[lo + j, k]
        pieces.append(bounds)
    # results: per type, the rows asked for (in read order) and each read's position
    read_type = np.empty(len(read_values), np.int64)
    read_pos = np.empty(len(read_values), np.int64)
    count = np.zeros(n_types, np.int64)
    for i in range(len(read_values)):
        t = value_type[read_values[i]]
        read_type[i] = t
        read_pos[i] = count[t]
        count[t] += 1
    fill = np.zeros(n_types, np.int64)
    start = np.zeros(n_types + 1, np.int64)
    for k in range(n_types):
        start[k + 1] = start[k] + count[k]
    reads = np.empty(len(read_values), np.int64)
    for i in range(len(read_values)):
        t = read_type[i]
        reads[start[t] + fill[t]] = value_row[read_values[i]]
        fill[t] += 1
    # the tail's arguments, raw rows; after the loop each type k's rows below
    # loop_end[k] that the tail or the results need are gathered once (post_rows_k),
    # and both then index [those rows; the tail's outputs of type k]
    max_arity = tail_in_type.shape[1] if n_tail else 0
    tail_args = [np.empty(0, np.int64) for _ in range(n_tail * max_arity)]
    for j in range(n_tail):
        for a in range(tail_arity[j]):
            tail_args[j * max_arity + a] = _launch_arg_rows(
                hi + j, a, group_start, order, arg_start, node_args, value_row)
    for k in range(n_types):
        rows = reads[start[k]:start[k + 1]]
        if n_tail == 0:
            pieces.append(rows[:0].copy())  # read_rows_k: unused
            pieces.append(rows.copy())  # post_rows_k: the results themselves
            continue
        wanted = 0
        for j in range(n_tail):
            for a in range(tail_arity[j]):
                if tail_in_type[j, a] == k:
                    wanted += 1
        if wanted == 0 and not tail_types[k]:  # every row is before the tail
            pieces.append(np.arange(len(rows)))
            pieces.append(rows.copy())
            continue
        n_post = 0
        for j in range(n_tail):
            for a in range(tail_arity[j]):
                if tail_in_type[j, a] == k:
                    for r in tail_args[j * max_arity + a]:
                        if r < loop_end[k]:
                            n_post += 1
        for r in rows:
            if r < loop_end[k]:
                n_post += 1
        post = np.empty(n_post, np.int64)
        at = 0
        for j in range(n_tail):
            for a in range(tail_arity[j]):
                if tail_in_type[j, a] == k:
                    at = _remap(tail_args[j * max_arity + a], loop_end[k], post, at)
        read_rows = rows.copy()
        _remap(read_rows, loop_end[k], post, at)
        pieces.append(read_rows)
        pieces.append(post)
    for i in range(len(outer_arity)):
        pieces.append(group_size[i:i + 1].copy())
        for a in range(outer_arity[i]):
            pieces.append(_launch_arg_rows(i, a, group_start, order, arg_start, node_args,
                                           value_row))
    for j in range(n_tail):
        pieces.append(group_size[hi + j:hi + j + 1].copy())
        for a in range(tail_arity[j]):
            pieces.append(tail_args[j * max_arity + a])
    lengths = np.empty(len(pieces), np.int64)
    total = 0
    for i in range(len(pieces)):
        lengths[i] = len(pieces[i])
        total += len(pieces[i])
    index = np.empty(total, np.int32)
    at = 0
    for p in pieces:
        for j in range(len(p)):  # not a slice: see `planner._launch_order`
            index[at + j] = p[j]
        at += len(p)
    return index, lengths, read_type, read_pos
