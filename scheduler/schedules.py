"""Schedules: which nodes of an `OpGraph` run together, and in which order.

A schedule assigns every node a *step* such that each node's inputs are computed
in earlier steps; the nodes of one op in one step run as one batched call (a
*launch*). Step 0 is the *prelude*: the nodes whose arguments are all constants
(embedding lookups, leaf inputs). The executor runs the prelude before its loop,
so that no variable is read sparsely inside the loop.

Schedulers live in one registry, `SCHEDULERS` (name -> `Scheduler`): each entry
brings a compiled kernel, which the planner runs on every batch, and a plain
reference the kernel is tested against. Two are registered; `register_scheduler`
adds another (a kernel and a reference are all it takes):

- `depth` (TensorFlow Fold): a node's step is its dependency depth.
- `agenda` (DyNet's autobatching): repeatedly launch, among the ops with ready
  nodes, the op whose nodes have the lowest average depth in the whole batch
  (cheap ops first on ties), taking all of its ready nodes at once. Nodes that
  wait on inputs of different depths (e.g. a loss after sequences of different
  lengths) can then run together. Its kernel is linear in nodes and edges.

The executor may regroup launches further: ops outside the recursion (head and
tail ops, `scheduler.executor`) run once before or after its loop, whatever
their steps here. The stats describe the schedule, not those merged launches.

>>> import numpy as np
>>> from refold.scheduler.graph import OpGraph
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numba
import numpy as np

from refold.kernel_calls import KERNEL, vectorised
from refold.scheduler.graph import OpGraph, segments


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
        return schedule_stats(self.graph.node_op, self.group_step, self.group_op,
                              self.node_group)

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


def schedule_stats(node_op, group_step, group_op, node_group) -> ScheduleStats:
    """The `ScheduleStats` of launches `group_step, group_op` (in execution order,
    steps non-decreasing) where node j runs in launch `node_group[j]`."""
    n_ops = int(node_op.max()) + 1 if len(node_op) else 1
    sizes = np.bincount(node_group, minlength=len(group_op))
    per_op_nodes = np.bincount(group_op, weights=sizes, minlength=n_ops)
    per_op_launches = np.bincount(group_op, minlength=n_ops)
    mean = {int(o): float(per_op_nodes[o] / per_op_launches[o])
            for o in range(n_ops) if per_op_launches[o]}
    # group_step is sorted: count its distinct values without np.unique's sort
    n_steps = int(np.count_nonzero(np.diff(group_step))) + 1 if len(group_step) else 0
    return ScheduleStats(steps=n_steps, launches=len(group_op), mean_batch_size=mean)


def depth_schedule(graph: OpGraph) -> Schedule:
    """Fold's schedule: each node runs at its dependency depth (prelude = depth 0)."""
    return SCHEDULERS["depth"](graph)


def agenda_schedule(graph: OpGraph, op_cost: Sequence[float] | None = None) -> Schedule:
    """DyNet's agenda-based schedule (see the module docstring).

    Args:
        graph: the batch to schedule.
        op_cost: optional per-op cost; on equal average depth, cheaper ops go first.
    """
    if op_cost is None:
        return SCHEDULERS["agenda"](graph)
    return Schedule(graph, *KERNEL[_agenda](graph.node_op, graph.node_arity, graph.node_args,
                                            graph.value_node, graph.sdepth,
                                            np.asarray(op_cost, np.float64).reshape(-1)))


def depth_reference(graph: OpGraph) -> Schedule:
    """`depth_schedule` in NumPy: group the nodes by (depth, op)."""
    return Schedule.from_steps(graph, graph.sdepth)


def agenda_reference(graph: OpGraph, op_cost: Sequence[float] | None = None) -> Schedule:
    """`agenda_schedule` written plainly, node by node, for tests (quadratic)."""
    n = graph.num_nodes
    producer = graph.node_dependencies()
    starts = graph.arg_offsets()
    waits_on = [set(producer[starts[j]:starts[j + 1]].tolist()) - {-1} for j in range(n)]
    node_op = graph.node_op.tolist()
    n_ops = max(node_op, default=0) + 1
    cost = list(op_cost or []) + [0.0] * n_ops

    def mean_depth(o):
        depths = [int(graph.sdepth[j]) for j in range(n) if node_op[j] == o]
        return sum(depths) / len(depths) if depths else 0.0

    rank = sorted(range(n_ops), key=lambda o: (mean_depth(o), cost[o], o))
    step = np.zeros(n, np.int64)
    done = {j for j in range(n) if not waits_on[j]}  # the prelude, step 0
    current = 0
    while len(done) < n:
        ready = [j for j in range(n) if j not in done and waits_on[j] <= done]
        o = min({node_op[j] for j in ready}, key=rank.index)
        current += 1
        for j in ready:
            if node_op[j] == o:
                step[j] = current
                done.add(j)
    return Schedule.from_steps(graph, step)


@numba.njit(cache=True, nogil=True)
def depth_kernel(node_op, node_arity, node_args, value_node, sdepth):
    """Fold's schedule, compiled: one launch per non-empty (depth, op) pair, in that
    order. Returns int32 `node_step, group_step, group_op, node_group`."""
    return group_by_step(node_op, sdepth)


@numba.njit(cache=True, nogil=True)
def group_by_step(node_op, node_step):
    """The launches of steps `node_step` (non-negative): one per non-empty (step, op)
    pair, by step then op; returns int32 `node_step, group_step, group_op,
    node_group`, as a `Scheduler`'s kernel does. A kernel that computes steps ends
    with it."""
    n = len(node_op)
    n_ops = 1
    max_step = 0
    for j in range(n):
        n_ops = max(n_ops, node_op[j] + 1)
        max_step = max(max_step, node_step[j])
    group_of_key = np.full((max_step + 1) * n_ops, -1, np.int64)
    for j in range(n):
        group_of_key[node_step[j] * n_ops + node_op[j]] = 0
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
        node_group[j] = group_of_key[node_step[j] * n_ops + node_op[j]]
    return node_step.astype(np.int32), group_step, group_op, node_group


@numba.njit(cache=True, nogil=True)
def agenda_kernel(node_op, node_arity, node_args, value_node, sdepth):
    """DyNet's agenda schedule, compiled (no op costs): as `depth_kernel` returns."""
    return _agenda(node_op, node_arity, node_args, value_node, sdepth,
                   np.zeros(0, np.float64))


@numba.njit(cache=True, nogil=True)
def _agenda(node_op, node_arity, node_args, value_node, sdepth, op_cost):
    by_rank, op_base = _agenda_priority(node_op, sdepth, op_cost)
    return _agenda_steps(node_op, node_arity, node_args, value_node, by_rank, op_base)


@numba.njit(cache=True, nogil=True)
def _agenda_priority(node_op, sdepth, op_cost):
    """The agenda's op ranking (lower mean depth first, then lower cost, then lower
    op id; ops past the end of `op_cost` cost 0) and where each op's nodes start
    in its ready queue."""
    n_ops = 1
    for o in node_op:
        n_ops = max(n_ops, o + 1)
    counts = np.zeros(n_ops, np.int64)
    depth_sum = np.zeros(n_ops, np.float64)
    for j in range(len(node_op)):
        counts[node_op[j]] += 1
        depth_sum[node_op[j]] += sdepth[j]
    mean = depth_sum / np.maximum(counts, 1)
    cost = np.zeros(n_ops, np.float64)
    for o in range(min(n_ops, len(op_cost))):
        cost[o] = op_cost[o]
    by_rank = np.arange(n_ops)
    for i in range(1, n_ops):  # insertion sort, stable: ties keep op order
        o = by_rank[i]
        r = i
        while r > 0 and (mean[by_rank[r - 1]] > mean[o] or (
                mean[by_rank[r - 1]] == mean[o] and cost[by_rank[r - 1]] > cost[o])):
            by_rank[r] = by_rank[r - 1]
            r -= 1
        by_rank[r] = o
    op_base = np.zeros(n_ops + 1, np.int64)
    for o in range(n_ops):
        op_base[o + 1] = op_base[o] + counts[o]
    return by_rank, op_base


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


@vectorised(_agenda_priority)
def _agenda_priority_numpy(node_op, sdepth, op_cost):
    """`_agenda_priority` in NumPy (the same sums, in the same order)."""
    node_op = np.asarray(node_op, np.int64)
    n_ops = max(1, int(node_op.max()) + 1) if len(node_op) else 1
    counts = np.bincount(node_op, minlength=n_ops).astype(np.int64)
    depth_sum = np.bincount(node_op, weights=np.asarray(sdepth, np.float64), minlength=n_ops)
    mean = depth_sum / np.maximum(counts, 1)
    cost = np.zeros(n_ops, np.float64)
    k = min(n_ops, len(op_cost))
    cost[:k] = op_cost[:k]
    by_rank = np.lexsort((np.arange(n_ops), cost, mean)).astype(np.int64)
    return by_rank, np.concatenate([np.zeros(1, np.int64), np.cumsum(counts)])


@vectorised(_agenda_steps)
def _agenda_steps_numpy(node_op, node_arity, node_args, value_node, by_rank, op_base):
    """`_agenda_steps` in NumPy: a launch's nodes released together (which order a
    launch's nodes are queued in changes none of the results)."""
    node_op = np.asarray(node_op, np.int64)
    n, n_ops = len(node_op), len(op_base) - 1
    reader = np.repeat(np.arange(n), node_arity)
    producer = np.asarray(value_node, np.int64)[node_args]
    edge = producer >= 0
    waiting = np.bincount(reader[edge], minlength=n).astype(np.int64)
    by_producer = np.argsort(producer[edge], kind="stable")
    succ = reader[edge][by_producer]
    succ_start = np.concatenate([np.zeros(1, np.int64),
                                 np.cumsum(np.bincount(producer[edge], minlength=n))])
    step = np.zeros(n, np.int32)
    node_group = np.zeros(n, np.int32)
    prelude = np.flatnonzero(waiting == 0)
    prelude_ops = np.unique(node_op[prelude])  # the prelude's launches: one per op
    group_step, group_op = [0] * len(prelude_ops), [int(o) for o in prelude_ops]
    node_group[prelude] = np.searchsorted(prelude_ops, node_op[prelude])
    ready: list[list] = [[] for _ in range(n_ops)]
    _release_all(prelude, succ_start, succ, waiting, node_op, ready)
    remaining, current = n - len(prelude), 0
    while remaining > 0:
        o = next((int(o) for o in by_rank if ready[o]), -1)
        if o < 0:  # unreachable for a valid graph: every node is ready eventually
            raise ValueError("the graph has a cycle or a node waits on a missing input")
        current += 1
        nodes = np.concatenate(ready[o])
        ready[o] = []
        remaining -= len(nodes)
        step[nodes] = current
        node_group[nodes] = len(group_op)
        group_step.append(current)
        group_op.append(o)
        _release_all(nodes, succ_start, succ, waiting, node_op, ready)
    return (step, np.array(group_step, np.int32), np.array(group_op, np.int32), node_group)


def _release_all(nodes, succ_start, succ, waiting, node_op, ready) -> None:
    # `nodes` have run: their successors wait on fewer inputs; queue those now ready
    s = succ[segments(succ_start[nodes], succ_start[nodes + 1] - succ_start[nodes])]
    if not len(s):
        return
    u, times = np.unique(s, return_counts=True)
    waiting[u] -= times
    now = u[waiting[u] == 0]
    ops = node_op[now]
    for o in np.unique(ops):
        ready[o].append(now[ops == o])


@dataclass(frozen=True)
class Scheduler:
    """A scheduling strategy, as the registry holds it.

    Attributes:
        name: its name (`Compiler(..., scheduler=name)`).
        kernel: the compiled schedule, a Numba function `kernel(node_op,
            node_arity, node_args, value_node, sdepth)` of a graph's int32 arrays
            returning int32 `(node_step, group_step, group_op, node_group)`: each
            node's step (0 for exactly the nodes whose arguments are all
            constants, the prelude) and the launches in execution order, steps
            non-decreasing, as `Schedule` holds them. The planner calls it.
        reference: a plain version, `reference(graph) -> Schedule`, that the
            kernel must equal (tests run both on random graphs).
    """

    name: str
    kernel: Callable
    reference: Callable[[OpGraph], Schedule]

    def __call__(self, graph: OpGraph) -> Schedule:
        """The kernel's schedule of `graph`."""
        return Schedule(graph, *KERNEL[self.kernel](graph.node_op, graph.node_arity,
                                                    graph.node_args, graph.value_node,
                                                    graph.sdepth))


SCHEDULERS: dict[str, Scheduler] = {}


def register_scheduler(name: str, kernel: Callable,
                       reference: Callable[[OpGraph], Schedule]) -> Scheduler:
    """Adds a scheduler under `name` (see `Scheduler` for what each part must do);
    returns its entry. Every compiler made afterwards can use it.

    >>> toy = register_scheduler("depth-again", depth_kernel, depth_reference)
    >>> SCHEDULERS.pop("depth-again") is toy
    True
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"a scheduler's name must be a non-empty str, got {name!r}")
    if name in SCHEDULERS:
        raise ValueError(f"a scheduler named {name!r} is already registered")
    if name == "auto":  # the compiler's: measure the built-in schedulers, keep the faster
        raise ValueError("the scheduler name 'auto' is reserved (Compiler(scheduler='auto') "
                         "chooses between depth and agenda)")
    entry = SCHEDULERS[name] = Scheduler(name, kernel, reference)
    return entry


register_scheduler("depth", depth_kernel, depth_reference)
register_scheduler("agenda", agenda_kernel, agenda_reference)
