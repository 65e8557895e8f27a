"""The compiled core of `Executor.feed`: every value's buffer row and every argument's
place in its launch's gather list, in one pass over nodes, values and arguments.

Planning runs in Python on every batch, beside the device: a vectorised NumPy version
of this function made ~40 array passes and took 0.6 ms for a batch of 64 sst-synth
trees (2.5k nodes); compiled with Numba it is one pass over each array.

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


def pack_rows(node_op, node_arity, node_args, value_type, value_node, value_index,
              node_launch, launch_op, const_counts, out_count, in_count, slot_typepos,
              arg_typepos, const_only: int = 0) -> Packed:
    """Rows and gather lists of a graph whose node j runs in launch `node_launch[j]`.

    Args: the graph's arrays; `launch_op[g]`, the op of launch g; `const_counts[k]`,
    the constant rows of type k; and per op, `out_count[o, k]` / `in_count[o, k]`
    (outputs / arguments of type k), `slot_typepos[o, s]` (output s's position among
    the op's outputs of its type), `arg_typepos[o, a]` (the same for argument a).
    The nodes of launches `< const_only` are checked to read constants only.
    """
    return Packed(*_pack(*(_ints(a) for a in (
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
    for j in range(n):
        arg_start[j] = p
        g, o = node_launch[j], node_op[j]
        for a in range(node_arity[j]):
            v = node_args[p]
            if g < const_only and value_node[v] >= 0:
                const_only_ok = False
            t = value_type[v]
            gathered[type_base[t] + in_cum[g, t] + arg_typepos[o, a] * group_size[g]
                     + pos[j]] = value_row[v]
            p += 1
    return (group_size, group_start, order, pos, out_cum, in_cum, type_base, value_row,
            gathered, arg_start, const_only_ok)
