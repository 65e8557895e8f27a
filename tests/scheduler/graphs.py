"""Random op graphs for the scheduler tests, with a plain-Python record of what was built.

`draw_graph` builds an `OpGraph` node by node from hypothesis draws and returns it with a
`RawGraph`: the same graph as Python lists (per node: op, argument values, output values
in slot order; per constant value: its row), from which the tests compute their expectations
without going through the arrays under test.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st

from refold.scheduler.graph import OpGraph


@dataclass(frozen=True)
class OpSpec:
    """An op's signature: the value type of each argument and of each output."""

    inputs: tuple
    outputs: tuple


@dataclass
class RawGraph:
    """What `draw_graph` built, as Python lists (the expectations are computed from these)."""

    specs: list
    node_op: list = field(default_factory=list)
    node_args: list = field(default_factory=list)  # per node, a tuple of value ids
    node_outs: list = field(default_factory=list)  # per node, its output value ids by slot
    value_type: list = field(default_factory=list)
    value_node: list = field(default_factory=list)  # -1 for constants
    const_row: dict = field(default_factory=dict)  # constant value id -> row in its table
    tables: list = field(default_factory=list)  # per value type, a list of rows

    @property
    def num_nodes(self) -> int:
        return len(self.node_op)

    def node_inputs(self, j: int) -> list[int]:
        """The nodes producing node j's arguments (with repeats)."""
        return [self.value_node[v] for v in self.node_args[j] if self.value_node[v] >= 0]

    def depths(self) -> list[int]:
        """Longest chain of node dependencies per node (0 when no input is a node output)."""
        depth: list[int] = []
        for j in range(self.num_nodes):
            depth.append(max([depth[p] + 1 for p in self.node_inputs(j)], default=0))
        return depth


class Choices:
    """Random choices from hypothesis draws (shrinkable) or from a numpy `Generator`."""

    def __init__(self, source):
        self.rng = source if isinstance(source, np.random.Generator) else None
        self.draw = None if self.rng is not None else source

    def int(self, lo: int, hi: int) -> int:
        if self.rng is not None:
            return int(self.rng.integers(lo, hi + 1))
        return self.draw(st.integers(lo, hi))

    def pick(self, seq: Sequence):
        return seq[self.int(0, len(seq) - 1)] if self.rng is not None else \
            self.draw(st.sampled_from(seq))

    def perm(self, n: int) -> list[int]:
        if self.rng is not None:
            return self.rng.permutation(n).tolist()
        return self.draw(st.permutations(range(n)))


def draw_specs(draw, n_types: int, max_ops: int = 5) -> list[OpSpec]:
    """Random op signatures: 1..max_ops ops of arity 0..3 and 1..2 outputs."""
    c = Choices(draw)
    specs = []
    for _ in range(c.int(1, max_ops)):
        arity = c.pick([1, 2, 0, 1, 2, 3])
        ins = tuple(c.int(0, n_types - 1) for _ in range(arity))
        outs = tuple(c.int(0, n_types - 1) for _ in range(c.int(1, 2)))
        specs.append(OpSpec(ins, outs))
    return specs


def draw_graph(draw, specs: Sequence[OpSpec], n_types: int, *, max_nodes: int = 30,
               min_nodes: int = 0, const_only: Sequence[int] = (), hub: bool = False,
               make_const: Callable | None = None, shapes: Sequence[tuple] | None = None,
               dtypes: Sequence[str] | None = None) -> tuple[OpGraph, RawGraph]:
    """A random DAG op graph over `specs`; `draw` is hypothesis' or a numpy `Generator`.

    Every argument is one of the last values of its type, the deepest one, any value of its
    type that exists so far (constants and earlier node outputs, so repeated arguments
    happen) or a new constant. Ops in `const_only` read constants only. With `hub`,
    arguments come from the first two values of each type, so a few values are read by many
    nodes. A node's output values are numbered in a random slot order, constant rows are
    shuffled and tables get unused rows.
    """
    shapes = list(shapes) if shapes is not None else [()] * n_types
    dtypes = list(dtypes) if dtypes is not None else ["float32"] * n_types
    c = Choices(draw)
    rng = np.random.default_rng(c.int(0, 2**31 - 1))
    if make_const is None:
        def make_const(k, rng):
            return rng.normal(size=shapes[k])
    raw = RawGraph(list(specs), tables=[[] for _ in range(n_types)])
    pools: list[list[int]] = [[] for _ in range(n_types)]  # every value, per type
    const_pools: list[list[int]] = [[] for _ in range(n_types)]
    node_depth: list[int] = []

    def depth_of(v: int) -> int:
        return node_depth[raw.value_node[v]] if raw.value_node[v] >= 0 else -1

    def add_const(k: int) -> int:
        v = len(raw.value_type)
        raw.value_type.append(k)
        raw.value_node.append(-1)
        raw.const_row[v] = len(raw.tables[k])
        raw.tables[k].append(make_const(k, rng))
        pools[k].append(v)
        const_pools[k].append(v)
        return v

    for k in range(n_types):  # a few constants up front
        for _ in range(c.int(0, 2)):
            add_const(k)
    n_nodes = c.int(max(min_nodes, max_nodes // 2) if c.int(0, 1) else min_nodes, max_nodes)
    for j in range(n_nodes):
        o = c.int(0, len(specs) - 1)
        args = []
        for k in specs[o].inputs:
            pool = const_pools[k] if o in const_only else pools[k]
            if hub:
                pool = pool[:2]
            how = c.pick(["recent", "deep", "any", "new"]) if pool else "new"
            if how == "recent":  # one of the last three values
                args.append(pool[-1 - c.int(0, min(2, len(pool) - 1))])
            elif how == "deep":  # the latest of the deepest values: long chains
                args.append(max(pool, key=lambda v: (depth_of(v), v)))
            elif how == "any":
                args.append(pool[c.int(0, len(pool) - 1)])
            else:
                args.append(add_const(k))
        if c.int(0, 3) == 0:  # sometimes a constant between nodes
            add_const(c.int(0, n_types - 1))
        outs = [0] * len(specs[o].outputs)
        for slot in c.perm(len(outs)):
            v = len(raw.value_type)
            k = specs[o].outputs[slot]
            raw.value_type.append(k)
            raw.value_node.append(j)
            pools[k].append(v)
            outs[slot] = v
        raw.node_op.append(o)
        node_depth.append(max([depth_of(a) for a in args], default=-1) + 1)
        raw.node_args.append(tuple(args))
        raw.node_outs.append(outs)

    # shuffle constant rows and add unused rows
    for k in range(n_types):
        rows = raw.tables[k]
        extra = [make_const(k, rng) for _ in range(int(rng.integers(0, 2)))]
        perm = rng.permutation(len(rows) + len(extra))
        new_rows: list = [None] * len(perm)
        for old, new in enumerate(perm):
            new_rows[new] = (rows + extra)[old]
        for v, r in raw.const_row.items():
            if raw.value_type[v] == k:
                raw.const_row[v] = int(perm[r])
        raw.tables[k] = new_rows
    return build(raw, shapes, dtypes), raw


def build(raw: RawGraph, shapes: Sequence[tuple], dtypes: Sequence[str]) -> OpGraph:
    """The `OpGraph` of `raw` (sdepth computed by `OpGraph.build`)."""
    value_index = []
    for v, n in enumerate(raw.value_node):
        if n < 0:
            value_index.append(raw.const_row[v])
        else:
            value_index.append(raw.node_outs[n].index(v))
    constants = [np.asarray(raw.tables[k], dtype=dtypes[k]).reshape((-1, *shapes[k]))
                 for k in range(len(shapes))]
    return OpGraph.build(raw.node_op, [len(a) for a in raw.node_args],
                         [v for a in raw.node_args for v in a], raw.value_type, raw.value_node,
                         value_index, constants)


@st.composite
def random_graphs(draw, n_types: int = 2, max_nodes: int = 30, max_ops: int = 5):
    """(graph, raw) with random op signatures."""
    specs = draw_specs(draw, n_types, max_ops)
    return draw_graph(draw, specs, n_types, max_nodes=max_nodes, hub=draw(st.booleans()))


def concat_raw(raws: Sequence[RawGraph]) -> RawGraph:
    """The raw graphs side by side, renumbered one Python value at a time."""
    out = RawGraph(raws[0].specs, tables=[[] for _ in raws[0].tables])
    for r in raws:
        v0, n0 = len(out.value_type), len(out.node_op)
        row0 = [len(t) for t in out.tables]
        for v, (k, n) in enumerate(zip(r.value_type, r.value_node)):
            out.value_type.append(k)
            out.value_node.append(n + n0 if n >= 0 else -1)
            if n < 0:
                out.const_row[v + v0] = r.const_row[v] + row0[k]
        for j in range(r.num_nodes):
            out.node_op.append(r.node_op[j])
            out.node_args.append(tuple(a + v0 for a in r.node_args[j]))
            out.node_outs.append([v + v0 for v in r.node_outs[j]])
        for k, t in enumerate(r.tables):
            out.tables[k].extend(t)
    return out


@st.composite
def random_batches(draw, n_types: int = 2, max_nodes: int = 20, max_ops: int = 5,
                   max_graphs: int = 3):
    """(batch graph, raw batch): 1..max_graphs random graphs over the same ops, concatenated."""
    specs = draw_specs(draw, n_types, max_ops)
    pairs = [draw_graph(draw, specs, n_types, max_nodes=max_nodes, min_nodes=int(i == 0),
                        hub=draw(st.booleans()))
             for i in range(draw(st.integers(1, max_graphs)))]
    return OpGraph.concatenate([g for g, _ in pairs]), concat_raw([r for _, r in pairs])
