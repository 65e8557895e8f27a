"""`OpGraph`: a batch of computations as flat integer arrays.

An op graph is what dynamic batching works on. Its *values* are tensors, each of
one value type (a shape and dtype, numbered `0..K-1` by whoever builds the graph):
a value is either a constant (a row of the constant table of its type) or one
output of a *node*. A node is one call of an op (numbered `0..O-1`) on argument
values. Everything is numpy arrays, never per-node Python objects, so that a
batch is the concatenation of its examples' graphs with offsets.

Values are numbered so that each node's arguments come before it (nodes are
appended in evaluation order); `sdepth` numbers each node's longest chain of node
dependencies (0 for nodes whose arguments are all constants).

>>> import numpy as np
>>> # one example: constants c0, c1 (type 0); node 0 = op 0 (c0, c1) -> v2; node 1 = op 1 (v2) -> v3
>>> g = OpGraph.build(node_op=[0, 1], node_arity=[2, 1], node_args=[0, 1, 2],
...                   value_type=[0, 0, 0, 0], value_node=[-1, -1, 0, 1], value_index=[0, 1, 0, 0],
...                   constants=[np.array([1.0, 2.0])])
>>> g.num_nodes, g.num_values, g.sdepth.tolist()
(2, 4, [0, 1])
>>> both = OpGraph.concatenate([g, g])
>>> both.node_args.tolist()
[0, 1, 2, 4, 5, 6]
>>> both.value_index.tolist()  # constants of the second copy follow the first's
[0, 1, 0, 0, 2, 3, 0, 0]
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence
from dataclasses import dataclass

import numba
import numpy as np

from refold.kernel_calls import KERNEL, vectorised


@dataclass
class OpGraph:
    """A batch of node calls over typed values (see the module docstring).

    Attributes:
        node_op: int32 [N], the op of each node.
        node_arity: int32 [N], how many arguments each node takes.
        node_args: int32 [A], the argument value ids of all nodes, node after node.
        value_type: int32 [V], the value type of each value.
        value_node: int32 [V], the node producing each value, or -1 for a constant.
        value_index: int32 [V], the output slot of a node output, or the row of a
            constant in `constants[value_type]`.
        constants: per value type, an array `[C_k, *shape]` of constant rows.
        sdepth: int32 [N], the node's longest chain of node dependencies.
    """

    node_op: np.ndarray
    node_arity: np.ndarray
    node_args: np.ndarray
    value_type: np.ndarray
    value_node: np.ndarray
    value_index: np.ndarray
    constants: list
    sdepth: np.ndarray

    @classmethod
    def build(cls, node_op, node_arity, node_args, value_type, value_node, value_index,
              constants, sdepth=None) -> OpGraph:
        """An `OpGraph` from sequences; `sdepth` is computed when not given."""
        g = cls(np.asarray(node_op, np.int32), np.asarray(node_arity, np.int32),
                np.asarray(node_args, np.int32), np.asarray(value_type, np.int32),
                np.asarray(value_node, np.int32), np.asarray(value_index, np.int32),
                [np.asarray(c) for c in constants], None)
        g.sdepth = compute_sdepth(g) if sdepth is None else np.asarray(sdepth, np.int32)
        return g

    @property
    def num_nodes(self) -> int:
        return len(self.node_op)

    @property
    def num_values(self) -> int:
        return len(self.value_type)

    def arg_offsets(self) -> np.ndarray:
        """int64 [N+1]: node j's arguments are `node_args[off[j]:off[j+1]]`."""
        off = np.zeros(self.num_nodes + 1, np.int64)
        np.cumsum(self.node_arity, out=off[1:])
        return off

    def node_dependencies(self) -> np.ndarray:
        """int32 [A]: for every argument, the node producing it (-1 for constants)."""
        return self.value_node[self.node_args]

    @classmethod
    def concatenate(cls, graphs: Sequence[OpGraph]) -> OpGraph:
        """One graph holding `graphs` side by side (value and node ids offset).

        This runs on every batch, so each graph keeps its integer arrays as one
        record (`merge_record`, made on first use: do not change a graph's arrays
        after merging it) and one compiled pass lays the records side by side.
        """
        if not graphs:
            raise ValueError("concatenate needs at least one graph")
        if len(graphs) == 1:
            return graphs[0]
        n_types = len(graphs[0].constants)
        pieces = list(map(_MERGE_RECORD, graphs))
        starts = np.zeros(len(pieces), np.int64)
        np.cumsum(np.fromiter(map(len, pieces[:-1]), np.int64, len(pieces) - 1), out=starts[1:])
        fields = KERNEL[_merge_records](np.concatenate(pieces), starts, n_types)
        tables = list(map(_CONSTANTS, graphs))
        constants = [_concat_rows([t[k] for t in tables]) for k in range(n_types)]
        node_op, node_arity, sdepth, node_args, value_type, value_node, value_index = fields
        return cls(node_op, node_arity, node_args, value_type, value_node, value_index,
                   constants, sdepth)

    def __getstate__(self) -> dict:
        # the merge record is made again where it is needed (not sent to a process)
        state = dict(self.__dict__)
        state.pop("merge_record", None)
        return state

    @functools.cached_property
    def merge_record(self) -> np.ndarray:
        """int32 `[N, A, V, C_0..C_K-1, node_op, node_arity, sdepth, node_args,
        value_type, value_node, value_index]`: the graph, for `concatenate`."""
        header = [len(self.node_op), len(self.node_args), len(self.value_type)]
        header += [len(c) for c in self.constants]
        return np.concatenate([np.asarray(header, np.int32)] + [
            np.asarray(a, np.int32) for a in (
                self.node_op, self.node_arity, self.sdepth, self.node_args,
                self.value_type, self.value_node, self.value_index)])

    def validate(self) -> None:
        """Checks the arrays are consistent; raises `ValueError` otherwise."""
        n, v = self.num_nodes, self.num_values
        if int(self.node_arity.sum()) != len(self.node_args):
            raise ValueError("node_arity does not sum to the number of arguments")
        if len(self.node_args) and (self.node_args.min() < 0 or self.node_args.max() >= v):
            raise ValueError("an argument refers to a value that does not exist")
        if len(self.value_node) and self.value_node.max() >= n:
            raise ValueError("a value refers to a node that does not exist")
        const = np.flatnonzero(self.value_node < 0)
        if len(const):
            if self.value_type.max(initial=0) >= len(self.constants) and len(self.constants):
                raise ValueError("a value has a type with no constant table")
            rows = np.array([len(c) for c in self.constants] or [0])
            ctype = self.value_type[const]
            if np.any(self.value_index[const] < 0) or np.any(
                    self.value_index[const] >= rows[np.minimum(ctype, len(rows) - 1)]):
                raise ValueError("a constant value refers to a row beyond its constant table")
        producer = self.value_node[self.node_args]
        consumer = np.repeat(np.arange(n), self.node_arity)
        if np.any(producer >= consumer):
            raise ValueError("a node reads a value produced by itself or a later node")


_MERGE_RECORD = operator.attrgetter("merge_record")
_CONSTANTS = operator.attrgetter("constants")


@numba.njit(cache=True, nogil=True)
def _merge_records(records, starts, n_types):
    """The merged integer arrays of graphs given as `merge_record`s, side by side;
    graph i's record starts at `records[starts[i]]` (records may hold more after
    each graph's, as `scheduler.planner`'s do)."""
    n_nodes = n_args = n_values = 0
    for p in starts:  # totals first
        n_nodes += records[p]
        n_args += records[p + 1]
        n_values += records[p + 2]
    node_op = np.empty(n_nodes, np.int32)
    node_arity = np.empty(n_nodes, np.int32)
    sdepth = np.empty(n_nodes, np.int32)
    node_args = np.empty(n_args, np.int32)
    value_type = np.empty(n_values, np.int32)
    value_node = np.empty(n_values, np.int32)
    value_index = np.empty(n_values, np.int32)
    const_off = np.zeros(n_types, np.int64)  # constant rows of each type so far
    no = ao = vo = 0
    for p in starts:
        n, a, v = records[p], records[p + 1], records[p + 2]
        counts = records[p + 3:p + 3 + n_types]
        q = p + 3 + n_types
        for i in range(n):  # not slices: see `planner._launch_order`
            node_op[no + i] = records[q + i]
            node_arity[no + i] = records[q + n + i]
            sdepth[no + i] = records[q + 2 * n + i]
        q += 3 * n
        for i in range(a):
            node_args[ao + i] = records[q + i] + vo
        q += a
        for i in range(v):
            t, node, index = records[q + i], records[q + v + i], records[q + 2 * v + i]
            value_type[vo + i] = t
            if node >= 0:
                value_node[vo + i] = node + no
                value_index[vo + i] = index
            else:
                value_node[vo + i] = -1
                value_index[vo + i] = index + const_off[t]
        for k in range(n_types):
            const_off[k] += counts[k]
        no += n
        ao += a
        vo += v
    return node_op, node_arity, sdepth, node_args, value_type, value_node, value_index


@vectorised(_merge_records)
def _merge_records_numpy(records, starts, n_types):
    """`_merge_records` in NumPy: each graph's fields gathered at once."""
    starts = np.asarray(starts, np.int64)
    n, a, v = (records[starts + i].astype(np.int64) for i in range(3))
    q = starts + 3 + n_types
    node_op, node_arity, sdepth = (records[segments(q + i * n, n)].astype(np.int32)
                                   for i in range(3))
    vo = np.cumsum(v) - v  # values before each graph
    node_args = (records[segments(q + 3 * n, a)] + np.repeat(vo, a)).astype(np.int32)
    q = q + 3 * n + a
    value_type, node, index = (records[segments(q + i * v, v)].astype(np.int64)
                               for i in range(3))
    counts = records[starts[:, None] + 3 + np.arange(n_types)].astype(np.int64)
    const_off = np.cumsum(counts, axis=0) - counts  # constant rows before each graph
    graph = np.repeat(np.arange(len(starts)), v)
    computed = node >= 0
    value_node = np.where(computed, node + np.repeat(np.cumsum(n) - n, v), -1)
    value_index = np.where(computed, index, index + const_off[graph, value_type])
    return (node_op, node_arity, sdepth, node_args, value_type.astype(np.int32),
            value_node.astype(np.int32), value_index.astype(np.int32))


def segments(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The positions `starts[i] .. starts[i] + lengths[i] - 1`, for every i in turn.

    >>> segments(np.array([10, 20]), np.array([2, 3])).tolist()
    [10, 11, 20, 21, 22]
    """
    lengths = np.asarray(lengths, np.int64)
    total = int(lengths.sum())
    return np.repeat(np.asarray(starts, np.int64) - (np.cumsum(lengths) - lengths),
                     lengths) + np.arange(total)


def _concat_rows(arrays: list) -> np.ndarray:
    non_empty = [a for a in arrays if len(a)]
    if not non_empty:
        return arrays[0]
    return non_empty[0] if len(non_empty) == 1 else np.concatenate(non_empty)


def compute_sdepth(graph: OpGraph) -> np.ndarray:
    """Each node's longest chain of node dependencies (nodes in evaluation order)."""
    deps = graph.node_dependencies().tolist()
    arity = graph.node_arity.tolist()
    depth = [0] * graph.num_nodes
    pos = 0
    for j, a in enumerate(arity):
        d = -1
        for p in deps[pos:pos + a]:
            if p >= 0 and depth[p] > d:
                d = depth[p]
        depth[j] = d + 1
        pos += a
    return np.asarray(depth, np.int32)
