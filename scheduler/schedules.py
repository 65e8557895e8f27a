"""Schedules: which nodes of an `OpGraph` run together, and in which order.

A schedule assigns every node a *step* such that each node's inputs are computed
in earlier steps; the nodes of one op in one step run as one batched call (a
*launch*). Step 0 is the *prelude*: the nodes whose arguments are all constants
(embedding lookups, leaf inputs). The executor runs the prelude before its loop,
so that no variable is read sparsely inside the loop.

Two strategies share this interface:

- `depth_schedule` (TensorFlow Fold): a node's step is its dependency depth.
- `agenda_schedule` (DyNet's autobatching): repeatedly launch, among the ops with
  ready nodes, the op whose nodes have the lowest average depth in the whole
  batch (cheap ops first on ties), taking all of its ready nodes at once. Nodes
  that wait on inputs of different depths (e.g. a loss after sequences of
  different lengths) can then run together. Its loop is compiled with Numba
  (`_agenda_steps`): linear in nodes and edges. It schedules 64 sst-synth trees
  in 0.3 ms and a 10,000-node chain in 2 ms; the earlier NumPy loop paid ~15 us
  per launch (0.4 ms and 145 ms).

The executor may regroup launches further: ops outside the recursion (head and
tail ops, `scheduler.executor`) run once before or after its loop, whatever
their steps here. The stats describe the schedule, not those merged launches.

>>> import numpy as np
>>> from scheduler.graph import OpGraph
>>> # two chains of different length, each ending in op 1 ("loss"): a-a-loss, a-a-a-a-loss
>>> def chain(n):
...     ops = [0] * n + [1]
...     return OpGraph.build(ops, [1] * (n + 1), list(range(n + 1)), [0] * (n + 2),
...                          [-1] + list(range(n + 1)), [0] + [0] * (n + 1), [np.zeros(1)])
>>> g = OpGraph.concatenate([chain(2), chain(4)])
>>> depth_schedule(g).stats.launches, agenda_schedule(g).stats.launches
(6, 5)
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field

import numba
import numpy as np

from scheduler.graph import OpGraph


@dataclass
class ScheduleStats:
    """How well a schedule batches.

    Attributes:
        steps: the number of steps, the prelude included (if it has nodes).
        launches: the number of non-empty (step, op) pairs: batched op calls.
        mean_batch_size: per op id, nodes per launch.
    """

    steps: int
    launches: int
    mean_batch_size: dict = field(default_factory=dict)


@dataclass
class Schedule:
    """A schedule of an `OpGraph`: `node_step[j]` is node j's step (0 = prelude).

    Derived, for the executor: `groups` are the launches in execution order, as
    arrays `group_step`, `group_op`, and `node_group[j]` the launch of node j.
    """

    graph: OpGraph
    node_step: np.ndarray
    group_step: np.ndarray
    group_op: np.ndarray
    node_group: np.ndarray

    @functools.cached_property
    def stats(self) -> ScheduleStats:
        """Steps, launches and mean batch size per op (computed when first asked:
        running a batch does not need them)."""
        n_ops = int(self.graph.node_op.max()) + 1 if self.graph.num_nodes else 1
        group_op = self.group_op
        sizes = np.bincount(self.node_group, minlength=len(group_op))
        per_op_nodes = np.bincount(group_op, weights=sizes, minlength=n_ops)
        per_op_launches = np.bincount(group_op, minlength=n_ops)
        mean = {int(o): float(per_op_nodes[o] / per_op_launches[o])
                for o in range(n_ops) if per_op_launches[o]}
        # group_step is sorted: count its distinct values without np.unique's sort
        steps = self.group_step
        n_steps = int(np.count_nonzero(np.diff(steps))) + 1 if len(steps) else 0
        return ScheduleStats(steps=n_steps, launches=len(group_op), mean_batch_size=mean)

    @classmethod
    def from_steps(cls, graph: OpGraph, node_step: np.ndarray) -> Schedule:
        """Groups the nodes by (step, op): one launch per non-empty pair."""
        node_step = np.asarray(node_step, np.int64)
        n_ops = int(graph.node_op.max()) + 1 if graph.num_nodes else 1
        lo = int(node_step.min()) if len(node_step) else 0
        key = (node_step - lo) * n_ops + graph.node_op
        if len(key) and int(key.max()) <= 4 * len(key) + 1024:
            # the non-empty (step, op) pairs in order, without sorting: keys are dense
            present = np.bincount(key) > 0
            uniq = np.flatnonzero(present)
            node_group = (np.cumsum(present) - 1)[key]
        else:  # sparse keys (arbitrary step numbers): sort
            uniq, node_group = np.unique(key, return_inverse=True)
        group_step = (uniq // n_ops + lo).astype(np.int32)
        group_op = (uniq % n_ops).astype(np.int32)
        return cls(graph, node_step.astype(np.int32), group_step, group_op,
                   node_group.astype(np.int32).reshape(-1))

    def validate(self) -> None:
        """Checks every node runs after its inputs; raises `ValueError` if not."""
        g = self.graph
        producer = g.node_dependencies()
        consumer = np.repeat(np.arange(g.num_nodes), g.node_arity)
        from_node = producer >= 0
        if np.any(self.node_step[producer[from_node]] >= self.node_step[consumer[from_node]]):
            raise ValueError("a node is scheduled no later than one of its inputs")
        prelude = self.node_step == 0
        if np.any(prelude[consumer[from_node]]):
            raise ValueError("a prelude node reads the output of another node")


def depth_schedule(graph: OpGraph) -> Schedule:
    """Fold's schedule: each node runs at its dependency depth (prelude = depth 0)."""
    return Schedule.from_steps(graph, graph.sdepth)


def agenda_schedule(graph: OpGraph, op_cost: Sequence[float] | None = None) -> Schedule:
    """DyNet's agenda-based schedule (see the module docstring).

    Args:
        graph: the batch to schedule.
        op_cost: optional per-op cost; on equal average depth, cheaper ops go first.
    """
    n = graph.num_nodes
    if n == 0:
        return Schedule.from_steps(graph, np.zeros(0, np.int64))
    node_op = graph.node_op
    n_ops = int(node_op.max()) + 1
    sdepth = graph.sdepth
    counts = np.bincount(node_op, minlength=n_ops)
    avg_depth = np.bincount(node_op, weights=sdepth, minlength=n_ops) / np.maximum(counts, 1)
    cost = np.zeros(n_ops) if op_cost is None else np.asarray(op_cost, float)[:n_ops]
    # Priority rank of each op: lower average depth first, then cheaper, then lower id.
    priority = np.lexsort((np.arange(n_ops), cost, avg_depth))

    op_base = np.zeros(n_ops + 1, np.int64)
    np.cumsum(counts, out=op_base[1:])
    step, group_step, group_op, node_group = _agenda_steps(
        node_op, graph.node_arity, graph.node_args, graph.value_node,
        priority.astype(np.int64), op_base)
    return Schedule(graph, step, group_step, group_op, node_group)


@numba.njit(cache=True, nogil=True)
def _agenda_steps(node_op, node_arity, node_args, value_node, by_rank, op_base):
    """The agenda loop, compiled: each node's step (0 for the prelude) and the
    launches, as `Schedule` holds them (int32 `node_step, group_step, group_op,
    node_group`; the prelude's launches first, by op).

    Successors are lists (CSR) over node -> node edges, a repeated argument counting
    twice. Ready nodes of op o are queued in `queue[op_base[o]:op_base[o + 1]]`
    (each node is queued once); a launch takes all of them, `queue[head[o]:tail[o]]`.
    Linear in nodes and edges, plus ops per launch for picking the op.
    """
    n = len(node_op)
    n_ops = len(op_base) - 1
    waiting = np.zeros(n, np.int64)
    succ_start = np.zeros(n + 1, np.int64)
    p = 0
    for j in range(n):
        for _ in range(node_arity[j]):
            producer = value_node[node_args[p]]
            if producer >= 0:
                waiting[j] += 1
                succ_start[producer + 1] += 1
            p += 1
    for j in range(n):
        succ_start[j + 1] += succ_start[j]
    fill = succ_start[:-1].copy()
    succ = np.empty(succ_start[n], np.int64)
    p = 0
    for j in range(n):
        for _ in range(node_arity[j]):
            producer = value_node[node_args[p]]
            if producer >= 0:
                succ[fill[producer]] = j
                fill[producer] += 1
            p += 1
    prelude = waiting == 0
    step = np.zeros(n, np.int32)
    group_step = np.zeros(n, np.int32)
    group_op = np.zeros(n, np.int32)
    node_group = np.zeros(n, np.int32)
    group_of_op = np.full(n_ops, -1, np.int64)
    n_groups = 0
    for j in range(n):  # the prelude's launches: one per op, in op order
        if prelude[j]:
            group_of_op[node_op[j]] = 0
    for o in range(n_ops):
        if group_of_op[o] == 0:
            group_of_op[o] = n_groups
            group_op[n_groups] = o
            n_groups += 1
    for j in range(n):
        if prelude[j]:
            node_group[j] = group_of_op[node_op[j]]
    queue = np.empty(n, np.int64)
    head = op_base[:-1].copy()
    tail = op_base[:-1].copy()
    remaining = n
    for j in range(n):
        if prelude[j]:
            remaining -= 1
    for j in range(n):
        if prelude[j]:
            _release(j, succ_start, succ, waiting, node_op, queue, tail)
    current = 0
    while remaining > 0:
        o = -1
        for r in range(n_ops):
            if tail[by_rank[r]] > head[by_rank[r]]:
                o = by_rank[r]
                break
        if o < 0:  # unreachable for a valid graph: every node is ready eventually
            raise ValueError("the graph has a cycle or a node waits on a missing input")
        current += 1
        lo, hi = head[o], tail[o]
        head[o] = hi
        remaining -= hi - lo
        group_step[n_groups] = current
        group_op[n_groups] = o
        for i in range(lo, hi):
            step[queue[i]] = current
            node_group[queue[i]] = n_groups
        n_groups += 1
        for i in range(lo, hi):
            _release(queue[i], succ_start, succ, waiting, node_op, queue, tail)
    return step, group_step[:n_groups], group_op[:n_groups], node_group


@numba.njit(cache=True, nogil=True)
def _release(j, succ_start, succ, waiting, node_op, queue, tail):
    # node j has run: each successor waits on one input less; queue those now ready
    for e in range(succ_start[j], succ_start[j + 1]):
        s = succ[e]
        waiting[s] -= 1
        if waiting[s] == 0:
            queue[tail[node_op[s]]] = s
            tail[node_op[s]] += 1


SCHEDULERS = {"depth": depth_schedule, "agenda": agenda_schedule}
