"""Expanding a batch whose structure depends on computed values, in rounds.

A block like `blocks.Unfold` asks, in the middle of its expansion, for the values of
tensors it has just built: which token the decoder chose decides what the next step
looks like. The examples of a batch then advance in *rounds*: each round computes,
in one engine call for the whole batch, every node added since the last one, and
hands the values back.

How an example advances. Expansion is a recursive Python evaluation per example,
which a plain function cannot leave in the middle and resume, so each example
expands in a greenlet of its own (the `greenlet` library: a coroutine with its own
Python stack, switched to and from in the same thread, where OS threads handing over
to each other cost far more, most of all on a loaded machine: BENCHMARKS.md, "Greedy
decoding"). One example runs at a time. An `Unfold` does not pause
its example at every step, though: it hands its loop, written as a generator
(`Unfold._walk`), to the round driver (`RoundContext.walk`), and its example waits
until the walk ends. Every round the driver advances every walk by one step, in one
pass: it sends the walk the values it asked for (its `decide` runs), and the walk
expands its next step. An example is resumed once per walk, not once per step. (An
`Unfold` whose step holds another value-reading `Unfold` runs its own loop in its
example's greenlet and waits for each round, `RoundContext.read`.)

One graph for the whole batch. All examples record into one shared op graph
(`RoundContext`s are views of it, one per example, with their own metrics), so the
nodes a round computes are just the graph's tail since the last round: one merged
pending graph per round, built by a few array operations, whatever the number of
examples. The values of earlier rounds are kept in one table per value type (`_Store`)
and enter a round as constant rows, gathered in one step per type: every node is
computed once, so a decoder of T steps costs T calls of one step's worth of work each,
not T^2. Steps an `Unfold` with `lookahead` dropped (`Unfold._walk` rewinds them)
stay in the shared graph as dead ranges once other examples recorded after them.
When the batch is done, the graph is cut into each example's `ExampleGraph`
(owners come from the ranges each example recorded; dead ranges are left out).

The rounds run forward only and make the decisions. What they leave is, for every
example, the ordinary `ExampleGraph` of the steps it took, which the compiler
plans and runs as any other batch, with gradients: the decisions are Python values
by then, so the gradient flows through every step taken, exactly as the reference
evaluator's (eager `GradientTape`) does. Inference (`Compiler.run`) needs no
second pass: a last round computes what no read asked for, and the results are
read from the rounds' values.

>>> import tensorflow as tf
>>> import refold as td
>>> from refold.compiler import Compiler
>>> step = td.GetItem(0) >> td.Function(lambda s: s + 1.0) >> td.AllOf(
...     td.Identity(), td.Identity())
>>> count = td.AllOf(td.Scalar(), td.Identity()) >> td.Unfold(
...     step, decide=lambda c, out: float(out), done=lambda c: c >= 4.0, max_steps=10)
>>> c = Compiler.create(count)
>>> [float(state) for _, state, _ in c.run([0.0, 2.5, 7.0])]   # 4, 3 and 0 steps
[4.0, 4.5, 7.0]
>>> c.last_rounds           # engine calls; nothing is left to compute after the last
4
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import greenlet
import numba
import numpy as np

from refold.blocks.errors import InputError
from refold.blocks.evaluation.contexts import call_on_kept_deep_thread, root_input
from refold.blocks.op import NODE_KEY
from refold.blocks.types import TensorType
from refold.compiler.graphs.expansion import BatchGraph, ExampleGraph, ExpansionContext
from refold.kernel_calls import KERNEL
from refold.scheduler.graph import OpGraph
from refold.scheduler.planner import plan_record

# run_round(graph, reads) -> (outputs per value type, read_type, read_pos): runs an op
# graph forward; value `reads[i]` is row `read_pos[i]` of `outputs[read_type[i]]`.
RunRound = Callable[[OpGraph, np.ndarray], tuple[list, np.ndarray, np.ndarray]]


class _Aborted(BaseException):
    """Ends an example's expansion when its batch failed elsewhere (a `BaseException`,
    so that blocks do not turn it into an `InputError`)."""


class _Store:
    """The values computed so far, one growing table of rows per value type."""

    def __init__(self, value_types):
        self.rows = [np.empty((16, *t.shape), t.numpy_dtype) for t in value_types]
        self.size = [0] * len(value_types)

    def append(self, k: int, rows: np.ndarray) -> int:
        """Appends `rows` to type k's table; returns the row of the first."""
        start, n = self.size[k], len(rows)
        table = self.rows[k]
        if start + n > len(table):  # grow by doubling: earlier views stay valid
            grown = np.empty((max(2 * len(table), start + n), *table.shape[1:]), table.dtype)
            grown[:start] = table[:start]
            self.rows[k] = table = grown
        table[start:start + n] = rows
        self.size[k] = start + n
        return start


def _ends(shared) -> tuple:
    """Where the shared graph ends now: nodes, arguments, values, constants, and the
    rows of each type's constant table."""
    return (len(shared.node_op), len(shared.node_args), len(shared.value_depth),
            len(shared.constant_value), tuple(len(t) for t in shared.constants))


def _at(shared) -> tuple:
    """`_ends` without the rows of each table (what an example's ranges keep)."""
    return (len(shared.node_op), len(shared.node_args), len(shared.value_depth),
            len(shared.constant_value))


class _Shared(ExpansionContext):
    """The batch's one op graph (every `RoundContext` records into its lists), the
    values computed so far and which part of the graph they cover."""

    def __init__(self, program):
        super().__init__(program)
        self.program = program
        self.store = _Store(program.value_types)
        self.done = _ends(self)  # what the rounds have computed (a prefix)
        self.value_type = np.zeros(0, np.int32)  # of the values computed so far
        self.value_row = np.zeros(0, np.int64)  # their rows in the store
        self.dead: list[tuple] = []  # (start, end) ranges rewound after others recorded

    def has_pending(self) -> bool:
        return len(self.node_op) > self.done[0]

    def pending_graph(self) -> tuple[OpGraph, np.ndarray, np.ndarray]:
        """The nodes not computed yet, as one `OpGraph`: the values they read from
        earlier rounds (and constants recorded before) are its first constant rows, its
        own constants follow. Returns the graph, the value ids of its node outputs there
        (what to read) and here. Its cost is linear in what was added since the last
        round, whatever the number of examples."""
        n0, a0, v0, c0, rows0 = self.done
        types = self.program.value_types
        tail_type, tail_node, tail_index = (
            f.astype(np.int64) for f in self.value_fields(self.program, v0, n0))
        args = np.asarray(self.node_args[a0:], np.int64)
        outside = np.unique(args[args < v0])  # earlier rounds' values and constants
        out_type = self.value_type[outside].astype(np.int64)
        out_row = self.value_row[outside]
        constants, out_index = [], np.empty(len(outside), np.int64)
        tail_const = tail_node < 0
        tail_row = tail_index.copy()
        for k, t in enumerate(types):
            mine = np.flatnonzero(out_type == k)
            out_index[mine] = np.arange(len(mine))
            fresh = self.constants[k][rows0[k]:]
            rows = self.store.rows[k][out_row[mine]]
            if fresh:
                rows = np.concatenate([rows, np.asarray(fresh, t.numpy_dtype).reshape(
                    (len(fresh), *t.shape))])
                own = tail_const & (tail_type == k)
                tail_row[own] = tail_index[own] - rows0[k] + len(mine)
            constants.append(rows)
        m = len(outside)
        local = np.where(args < v0, np.searchsorted(outside, args), args - v0 + m)
        produced = np.flatnonzero(~tail_const)
        value_node = np.concatenate([np.full(m, -1), np.where(tail_const, -1, tail_node - n0)])
        node_arity = np.asarray(self.node_arity[n0:], np.int32)
        graph = OpGraph(np.asarray(self.node_op[n0:], np.int32), node_arity,
                        local.astype(np.int32), np.concatenate([out_type, tail_type]).astype(
                            np.int32), value_node.astype(np.int32),
                        np.concatenate([out_index, tail_row]).astype(np.int32), constants,
                        KERNEL[_depths](node_arity, local, value_node))
        return graph, m + produced, v0 + produced

    def computed(self, run_round: RunRound) -> None:
        """Runs the pending nodes (`run_round`) and keeps their values and the
        constants recorded with them; the graph is computed up to its end."""
        graph, reads, produced = self.pending_graph()
        outputs, read_type, read_pos = run_round(graph, reads)
        v0 = self.done[2]
        end = _ends(self)
        tail_type = graph.value_type[len(graph.value_type) - (end[2] - v0):]
        row = np.full(end[2] - v0, -1, np.int64)
        for k, t in enumerate(self.program.value_types):
            fresh = self.constants[k][self.done[4][k]:]
            if fresh:  # later rounds read them from the store too
                start = self.store.append(k, np.asarray(fresh, t.numpy_dtype).reshape(
                    (len(fresh), *t.shape)))
                own = np.flatnonzero((tail_type == k) & (graph.value_node[
                    len(graph.value_node) - (end[2] - v0):] < 0))
                row[own] = start + np.arange(len(own))
            mine = np.flatnonzero(read_type == k)
            if len(mine):
                start = self.store.append(k, outputs[k][read_pos[mine]])
                row[produced[mine] - v0] = start + np.arange(len(mine))
        self.value_type = np.concatenate([self.value_type, tail_type])
        self.value_row = np.concatenate([self.value_row, row])
        self.done = end

    def value_of(self, v: int) -> np.ndarray:
        """The value of value id `v`: a constant, or a node output computed already."""
        if v < len(self.value_row):
            return self.store.rows[self.value_type[v]][self.value_row[v]]
        k, row = self.constant_at(v)
        return np.asarray(self.constants[k][row], self.program.value_types[k].numpy_dtype)

    def is_computed(self, v: int) -> bool:
        return v < self.done[2] or self.value_depth[v] < 0


@numba.njit(cache=True, nogil=True)
def _depths(node_arity, args, value_node):
    """Each node's longest chain of node dependencies within the pending graph."""
    depth = np.empty(len(node_arity), np.int32)
    p = 0
    for j in range(len(node_arity)):
        d = -1
        for i in range(p, p + node_arity[j]):
            src = value_node[args[i]]
            if src >= 0 and depth[src] > d:
                d = depth[src]
        depth[j] = d + 1
        p += node_arity[j]
    return depth


class RoundContext(ExpansionContext):
    """One example's view of the batch's shared graph (`_Shared`): it records into the
    shared lists, with metrics, argument-less ops and cycle checks of its own; `walk`
    and `read` wait for rounds."""

    def __init__(self, program, shared: _Shared, driver: _Driver, index: int):
        super().__init__(program)
        for name in ("node_op", "node_arity", "node_args", "sdepth", "value_depth",
                     "constant_value", "constant_code", "constants"):
            setattr(self, name, getattr(shared, name))
        self.shared, self._driver, self.index = shared, driver, index
        self.example = index  # its random nodes' keys name it (blocks.noise)
        self.segments: list[list] = []  # the [start, end] ranges this example recorded
        self.request = None  # what its walk or its read waits for
        self.walking = None  # the walk (a generator) the driver advances
        self.result = self.error = None  # how the walk ended

    def walk(self, walk) -> Any:
        """Runs an `Unfold`'s loop (`Unfold._walk`) across the rounds: its first step
        here, the others from the driver, one per round; this example waits meanwhile."""
        try:
            self.request = next(walk)
        except StopIteration as finished:  # done before any step
            return finished.value
        self.walking = walk
        self._driver.pause(self)
        self.walking = self.request = None
        if self.error is not None:
            error, self.error = self.error, None
            raise error
        result, self.result = self.result, None
        return result

    def read(self, value_type, value) -> Any:
        """`value` with numpy arrays for its tensors, computing them if need be."""
        handles = []
        value_type.for_each_terminal(
            lambda t, v: handles.append(v) if isinstance(t, TensorType) else None, value)
        if not all(map(self.shared.is_computed, handles)):
            self.request = (value_type, value)
            self._driver.pause(self)
            self.request = None
        return self.values(value_type, value)

    def values(self, value_type, value) -> Any:
        return value_type.for_each_terminal(
            lambda t, v: self.shared.value_of(v) if isinstance(t, TensorType) else v, value)

    def value_of(self, v: int) -> np.ndarray:
        return self.shared.value_of(v)

    def opened(self) -> None:
        """This example records from here on (it runs, or its walk steps)."""
        self.segments.append([_at(self.shared), None])

    def closed(self) -> None:
        self.segments[-1][1] = _at(self.shared)

    def rewind(self, mark: tuple) -> None:
        """Drops what this example recorded since `mark`: the tail it records now is cut
        off, the ranges it recorded before others recorded after it become dead."""
        nodes, args, values, n_constants, rows, metrics, sources, randoms, keys = mark
        at = (nodes, args, values, n_constants)
        for seg in self.segments[:-1]:  # closed ranges: others may follow them
            start, end = seg
            if end > at:
                seg[1] = max(start, at)
                self.shared.dead.append((seg[1], end))
        cut = max(self.segments[-1][0], at)
        if cut != at:  # the tables' rows where the open range starts
            n_types = len(self.constants)
            rows = [len(t) for t in self.constants]
            for code in self.constant_code[cut[3]:]:
                rows[code % n_types] -= 1
        super().rewind((*cut, rows, metrics, sources, randoms, keys))


class _Driver:
    """Runs a batch's examples one at a time and its walks in rounds (module docstring)."""

    def __init__(self, program, inputs: list, run_round: RunRound):
        self.program, self.inputs, self.run_round = program, inputs, run_round
        self.shared = _Shared(program)
        self.contexts = [RoundContext(program, self.shared, self, i)
                         for i in range(len(inputs))]
        self.results: list = [None] * len(inputs)
        self.errors: dict[int, BaseException] = {}
        self._examples: dict[int, greenlet.greenlet] = {}
        self._paused: set[int] = set()
        self._aborted = False
        self.rounds = 0

    # --- in an example's greenlet -----------------------------------------------------

    def _expand(self, i: int) -> None:
        ctx = self.contexts[i]
        ctx.opened()
        try:
            root = self.program.root
            self.results[i] = root.eval_in(ctx, root_input(root, ctx, self.inputs[i]))
        except _Aborted:
            pass
        except BaseException as e:  # raised by the driver
            self.errors[i] = e
        finally:
            ctx.closed()
            del self._examples[i]

    def pause(self, ctx: RoundContext) -> None:
        """In an example's greenlet: hand over to the driver until it resumes this one."""
        ctx.closed()
        self._paused.add(ctx.index)
        self._driver.switch()
        if self._aborted:
            raise _Aborted
        ctx.opened()

    # --- in the driver ----------------------------------------------------------------

    def _run(self, i: int) -> None:
        """Starts or resumes example i; returns when it pauses or ends."""
        if i in self._paused:
            self._paused.discard(i)
        else:
            self._examples[i] = greenlet.greenlet(lambda: self._expand(i), self._driver)
        self._examples[i].switch()

    def run(self, finish: bool) -> None:
        self._driver = greenlet.getcurrent()
        runnable = list(range(len(self.inputs)))
        try:
            while True:
                for i in runnable:
                    self._run(i)
                waiting = sorted(self._paused)
                if not waiting:
                    break
                if self.shared.has_pending():
                    self.shared.computed(self.run_round)
                    self.rounds += 1
                runnable = []
                for i in waiting:
                    ctx = self.contexts[i]
                    if ctx.walking is not None and self._advance(ctx):
                        continue  # it walks on: its next step waits for the next round
                    runnable.append(i)
            if finish and self.shared.has_pending():
                self.shared.computed(self.run_round)
                self.rounds += 1
        except BaseException:
            self._abort()
            raise

    def _advance(self, ctx: RoundContext) -> bool:
        """Sends a walk the values it asked for; whether it asked for more."""
        ctx.opened()
        try:
            ctx.request = ctx.walking.send(ctx.values(*ctx.request))
            return True
        except StopIteration as finished:
            ctx.result = finished.value
        except BaseException as e:  # raised in the example, where it walks
            ctx.error = e
        finally:
            ctx.closed()
        return False

    def _abort(self) -> None:
        self._aborted = True
        for i in sorted(self._paused):
            self._run(i)  # it raises `_Aborted`, and ends

    def example_graphs(self) -> list[ExampleGraph]:
        """Each example's `ExampleGraph`, cut from the shared graph."""
        return _cut(self.shared, self.contexts, self.results, self.program)

    def batch_graph(self) -> BatchGraph:
        """The batch as one `BatchGraph` (what a training step plans): the shared
        graph itself, less its dead ranges, read as `expand_batch` reads a batch."""
        return _batch(self.shared, self.contexts, self.results, self.program)


def _cut(shared: _Shared, contexts: list, results: list, program) -> list[ExampleGraph]:
    """The shared graph cut into the examples' graphs: each gets the nodes, values and
    constant rows of the ranges it recorded (its segments), renumbered; dead ranges
    go to none."""
    n_nodes, _, n_values, n_constants, n_rows = _ends(shared)
    types = program.value_types
    owners = [np.full(n, -1, np.int64) for n in (n_nodes, n_values, n_constants)]
    ranges = [(ctx.index, start, end) for ctx in contexts for start, end in ctx.segments]
    for owner, start, end in ranges + [(-1, start, end) for start, end in shared.dead]:
        for a, field in zip(owners, (0, 2, 3)):
            a[start[field]:end[field]] = owner
    node_owner, value_owner, const_owner = owners
    code = np.asarray(shared.constant_code, np.int64)
    row_owner = [np.full(n, -1, np.int64) for n in n_rows]
    for k in range(len(types)):
        mine = code % len(types) == k
        row_owner[k][code[mine] // len(types)] = const_owner[mine]
    n = len(contexts)
    node_op = np.asarray(shared.node_op, np.int32)
    node_arity = np.asarray(shared.node_arity, np.int32)
    node_args = np.asarray(shared.node_args, np.int64)
    sdepth = np.asarray(shared.sdepth, np.int32)
    vtype, vnode, vindex = (f.astype(np.int64) for f in shared.value_fields(program, 0, 0))
    arg_owner = np.repeat(node_owner, node_arity)
    nodes, node_local = _groups(node_owner, n)
    values, value_local = _groups(value_owner, n)
    args, _ = _groups(arg_owner, n)
    rows = [_groups(o, n) for o in row_owner]
    tables = [np.asarray(shared.constants[k], t.numpy_dtype).reshape((len(shared.constants[k]),
                                                                        *t.shape))
              for k, t in enumerate(types)]
    const = vnode < 0
    # a constant's index becomes its row among its example's rows of its type
    local_index = vindex.copy()
    for k in range(len(types)):
        mine = np.flatnonzero(const & (vtype == k))
        local_index[mine] = rows[k][1][vindex[mine]]
    local_node = np.full(len(vnode), -1, np.int64)
    local_node[~const] = node_local[vnode[~const]]
    out = []
    for e, ctx in enumerate(contexts):
        ns, vs, as_ = nodes[e], values[e], args[e]
        graph = OpGraph(node_op[ns], node_arity[ns], value_local[node_args[as_]].astype(np.int32),
                        vtype[vs].astype(np.int32), local_node[vs].astype(np.int32),
                        local_index[vs].astype(np.int32),
                        [tables[k][rows[k][0][e]] for k in range(len(types))], sdepth[ns])

        def local(t, v):
            return int(value_local[v]) if isinstance(t, TensorType) else v
        result = program.root.output_type.for_each_terminal(local, results[e])
        metrics = [(m, int(value_local[v]), label) for m, v, label in ctx.metrics]
        keys = None
        if ctx.key_rows:  # its random nodes' keys, as an example graph's: example 0
            k = program.type_id[NODE_KEY]
            keys = rows[k][1][np.asarray(ctx.key_rows, np.int64)]
            graph.constants[k] = graph.constants[k].copy()
            graph.constants[k][keys, 0] = 0
        out.append(ExampleGraph(graph, result, metrics, keys))
    return out


def _batch(shared: _Shared, contexts: list, results: list, program) -> BatchGraph:
    n_nodes, _, n_values, n_constants, n_rows = _ends(shared)
    types = program.value_types
    node_op = np.asarray(shared.node_op, np.int32)
    node_arity = np.asarray(shared.node_arity, np.int32)
    node_args = np.asarray(shared.node_args, np.int64)
    sdepth = np.asarray(shared.sdepth, np.int32)
    vtype, vnode, vindex = (f.astype(np.int64) for f in shared.value_fields(program, 0, 0))
    tables = [np.asarray(shared.constants[k], t.numpy_dtype).reshape(
        (len(shared.constants[k]), *t.shape)) for k, t in enumerate(types)]
    new_value = np.arange(n_values)
    if shared.dead:  # drop the dead ranges, renumber the rest
        live = [np.ones(n, bool) for n in (n_nodes, n_values, n_constants)]
        for start, end in shared.dead:
            for a, field in zip(live, (0, 2, 3)):
                a[start[field]:end[field]] = False
        live_node, live_value, live_const = live
        code = np.asarray(shared.constant_code, np.int64)
        new_node = np.cumsum(live_node) - 1
        new_value = np.cumsum(live_value) - 1
        const = vnode < 0
        for k in range(len(types)):
            mine = code % len(types) == k
            live_row = np.zeros(n_rows[k], bool)
            live_row[code[mine] // len(types)] = live_const[mine]
            new_row = np.cumsum(live_row) - 1
            rows = const & (vtype == k)
            vindex[rows] = new_row[vindex[rows]]
            tables[k] = tables[k][live_row]
        vnode = np.where(const, -1, new_node[np.maximum(vnode, 0)])
        node_args = new_value[node_args[np.repeat(live_node, node_arity)]]
        node_op, node_arity, sdepth = node_op[live_node], node_arity[live_node], sdepth[live_node]
        vtype, vnode, vindex = vtype[live_value], vnode[live_value], vindex[live_value]
    graph = OpGraph(node_op, node_arity, node_args.astype(np.int32), vtype.astype(np.int32),
                    vnode.astype(np.int32), vindex.astype(np.int32), tables, sdepth)
    out_type = program.root.output_type
    reads: list[int] = []
    for result in results:
        out_type.for_each_terminal(
            lambda t, v: reads.append(v) if isinstance(t, TensorType) else None, result)
    metrics = [m for ctx in contexts for m in ctx.metrics]
    record = plan_record(graph, new_value[np.asarray(reads, np.int64)],
                         [m for m, _, _ in metrics],
                         new_value[np.asarray([v for _, v, _ in metrics], np.int64)])
    return BatchGraph(graph, record, list(range(len(contexts))), [])


def _groups(owner: np.ndarray, n: int) -> tuple[list, np.ndarray]:
    """`(positions of each owner 0..n-1 in order, each position's rank in its owner's)`."""
    order = np.argsort(owner, kind="stable")
    counts = np.bincount(owner[owner >= 0], minlength=n)
    skip = int(np.count_nonzero(owner < 0))
    starts = skip + np.concatenate([[0], np.cumsum(counts)])
    local = np.empty(len(owner), np.int64)
    local[order] = np.arange(len(owner)) - np.repeat(
        np.concatenate([[0], starts[:-1]]), np.concatenate([[skip], counts]))
    return [order[starts[e]:starts[e + 1]] for e in range(n)], local


def expand_in_rounds(program, inputs: list, run_round: RunRound,
                     finish: bool = False) -> _Driver:
    """Expands `inputs` (see the module docstring); the driver that did it holds each
    example's result (`results`, value ids of the shared graph), the rounds it ran
    (`rounds`) and the examples' graphs (`example_graphs()`). With `finish`, a last
    round computes the nodes no read asked for, so that every value of every example
    is known (`shared.value_of`).

    An input that fails raises its `InputError` naming its index in `inputs` (the
    lowest such index); the others are expanded to the end first.
    """
    return call_on_kept_deep_thread(_expand_in_rounds, program, inputs, run_round, finish)


def _expand_in_rounds(program, inputs: list, run_round: RunRound,
                      finish: bool) -> _Driver:
    driver = _Driver(program, inputs, run_round)
    driver.run(finish)
    if driver.errors:
        i = min(driver.errors)
        e = driver.errors[i]
        if isinstance(e, InputError):
            raise e.locate_in(inputs[i]).with_example_index(i) from e.__cause__
        raise e
    return driver


__all__ = ["RoundContext", "expand_in_rounds"]
