"""Expanding a batch whose structure depends on computed values, in rounds.

A block like `blocks.Unfold` asks, in the middle of its expansion, for the values of
tensors it has just built (`ctx.read`): which token the decoder chose decides what
the next step looks like. Expansion is a recursive Python evaluation per example,
so each example expands on its own thread (`RoundContext`), and a thread that reads
values waits. When every example is waiting or finished, the waiting examples'
nodes added since their last round are run as one batch by the engine (one engine
call per round, batched across examples and nodes as always), their values are
handed back, and the threads go on. Every node is computed once: the values of
earlier rounds enter a round as constants (the *pending graph* of an example is
its new nodes, with the values they read from before as constant rows), so a
decoder of T steps costs T calls of one step's worth of work each, not T^2.

The rounds run forward only and make the decisions. What they leave is, for every
example, the ordinary `ExampleGraph` of the steps it took, which the compiler
plans and runs as any other batch, with gradients: the decisions are Python values
by then, so the gradient flows through every step taken, exactly as the reference
evaluator's (eager `GradientTape`) does. The price is a second forward pass in
training. Inference (`Compiler.run`) needs none: a last round computes what no
read asked for, and the results are read from the rounds' values.

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

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from refold.blocks.errors import InputError
from refold.blocks.evaluation import call_with_deep_stack, root_input
from refold.blocks.types import TensorType
from refold.compiler.expansion import ExampleGraph, ExpansionContext
from refold.scheduler.graph import OpGraph

_THREAD_STACK_BYTES = 64 * 1024 * 1024

# run_graphs(graphs, reads) -> per graph, the values of its `reads` (value ids).
RunGraphs = Callable[[list[OpGraph], list[np.ndarray]], list[list[np.ndarray]]]


class _Aborted(BaseException):
    """Ends an example's thread when its batch failed elsewhere (a `BaseException`,
    so that blocks do not turn it into an `InputError`)."""


class RoundContext(ExpansionContext):
    """An `ExpansionContext` whose `read` waits for the round that computes the values."""

    def __init__(self, program, gate: _Gate, index: int):
        super().__init__(program)
        self._program = program
        self._gate = gate
        self.index = index
        self.known: dict[int, np.ndarray] = {}  # value id of a computed node output -> value
        self.nodes_done = 0  # nodes computed in earlier rounds
        self._args_done = 0  # their arguments' length in node_args
        self._values_done = 0  # the values there were at the last round
        self._types: list[int] = []  # the type ids of those values

    def read(self, value_type, value) -> Any:
        """`value` with numpy arrays for its tensors, computing them if need be."""
        handles = []
        value_type.for_each_terminal(
            lambda t, v: handles.append(v) if isinstance(t, TensorType) else None, value)
        vd, done = self.value_depth, self._values_done
        if any(h >= done and vd[h] >= 0 for h in handles):  # a node output not computed
            self._gate.wait(self)
        return value_type.for_each_terminal(
            lambda t, v: self.value_of(v) if isinstance(t, TensorType) else v, value)

    def value_of(self, v: int) -> np.ndarray:
        """The value of value id `v`: a constant, or a node output computed already."""
        if self.value_depth[v] < 0:
            k, row = self.constant_at(v)
            return np.asarray(self.constants[k][row], self._program.value_types[k].numpy_dtype)
        return self.known[v]

    def rewind(self, mark: tuple) -> None:
        super().rewind(mark)
        self.nodes_done = min(self.nodes_done, len(self.node_op))
        self._args_done = min(self._args_done, len(self.node_args))
        values = len(self.value_depth)
        self._values_done = min(self._values_done, values)
        del self._types[self._values_done:]
        for v in [v for v in self.known if v >= values]:
            del self.known[v]

    def has_pending(self) -> bool:
        return len(self.node_op) > self.nodes_done

    def pending_graph(self) -> tuple[OpGraph, np.ndarray, np.ndarray]:
        """The nodes not computed yet as an `OpGraph` of their own: the values they
        read from earlier rounds (and constants) become its constant rows. Returns
        the graph, the value ids of its node outputs there (what to read) and here.
        Its cost is linear in what was added since the last round."""
        n0, v0 = self.nodes_done, self._values_done
        args = np.asarray(self.node_args[self._args_done:], np.int64)
        tail_type, tail_node, tail_index = (
            f.astype(np.int64) for f in self.value_fields(self._program, v0, n0))
        del self._types[v0:]
        self._types.extend(tail_type.tolist())
        produced = v0 + np.flatnonzero(tail_node >= 0)  # the new nodes' outputs
        fresh = args >= v0
        fresh[fresh] = tail_node[args[fresh] - v0] >= 0
        outside = np.unique(args[~fresh])  # constants and earlier rounds' values
        local = np.empty_like(args)
        local[~fresh] = np.searchsorted(outside, args[~fresh])
        local[fresh] = len(outside) + np.searchsorted(produced, args[fresh])
        types = self._program.value_types
        rows: list[list] = [[] for _ in types]
        out_type = np.empty(len(outside), np.int64)
        out_row = np.empty(len(outside), np.int64)
        for j, v in enumerate(outside.tolist()):
            k = out_type[j] = self._types[v]
            out_row[j] = len(rows[k])
            rows[k].append(self.value_of(v))
        constants = [np.asarray(r, t.numpy_dtype).reshape((len(r), *t.shape))
                     for r, t in zip(rows, types)]
        own = produced - v0
        graph = OpGraph.build(
            self.node_op[n0:], self.node_arity[n0:], local,
            np.concatenate([out_type, tail_type[own]]),
            np.concatenate([np.full(len(outside), -1), tail_node[own] - n0]),
            np.concatenate([out_row, tail_index[own]]), constants)
        return graph, len(outside) + np.arange(len(produced)), produced

    def computed(self, produced: np.ndarray, values: list[np.ndarray]) -> None:
        """Stores the values of the pending nodes' outputs; they are done."""
        self.known.update(zip(produced.tolist(), values))
        self.nodes_done = len(self.node_op)
        self._args_done = len(self.node_args)
        self._values_done = len(self.value_depth)


class _Gate:
    """Where example threads wait for their round and the driver waits for them.

    Each waiting example has its own event, and the driver's event is set only when
    the last running example stops, so a round wakes each thread once (one shared
    condition would wake every thread at every change: n^2 wake-ups a round).
    """

    def __init__(self, n: int):
        self._lock = threading.Lock()
        self._running = n
        self._idle = threading.Event()  # no example is running
        if n == 0:
            self._idle.set()
        self._waiting: dict[int, RoundContext] = {}
        self._resume: dict[int, threading.Event] = {}
        self._aborted = False

    def wait(self, ctx: RoundContext) -> None:
        """In an example's thread: wait until a round has computed ctx's pending nodes."""
        with self._lock:
            if self._aborted:
                raise _Aborted
            event = self._resume.setdefault(ctx.index, threading.Event())
            self._waiting[ctx.index] = ctx
            self._stopped()
        event.wait()
        event.clear()
        if self._aborted:
            raise _Aborted

    def finished(self) -> None:
        with self._lock:
            self._stopped()

    def _stopped(self) -> None:  # with the lock held
        self._running -= 1
        if self._running == 0:
            self._idle.set()

    def next_round(self) -> list[RoundContext]:
        """In the driver: once no example is running, the waiting ones (by index)."""
        self._idle.wait()
        with self._lock:
            return [self._waiting[i] for i in sorted(self._waiting)]

    def resume(self, contexts: list[RoundContext]) -> None:
        with self._lock:
            for ctx in contexts:
                del self._waiting[ctx.index]
            self._running += len(contexts)
            if contexts:
                self._idle.clear()
        for ctx in contexts:
            self._resume[ctx.index].set()

    def abort(self) -> None:
        with self._lock:
            self._aborted = True
            for i in self._waiting:
                self._resume[i].set()


def expand_in_rounds(program, inputs: list, run_graphs: RunGraphs,
                     finish: bool = False) -> tuple[list, list, int]:
    """Expands `inputs` (see the module docstring): `(example graphs, their contexts,
    rounds run)`. With `finish`, a last round computes the nodes no read asked
    for, so that every value of every example is known (`RoundContext.value_of`).

    An input that fails raises its `InputError` naming its index in `inputs` (the
    lowest such index); the others are expanded to the end first.
    """
    return call_with_deep_stack(_expand_in_rounds, program, inputs, run_graphs, finish)


def _expand_in_rounds(program, inputs: list, run_graphs: RunGraphs,
                      finish: bool) -> tuple[list, list, int]:
    gate = _Gate(len(inputs))
    graphs: list[ExampleGraph | None] = [None] * len(inputs)
    contexts: list[RoundContext | None] = [None] * len(inputs)
    errors: dict[int, BaseException] = {}
    root = program.root
    # Every thread waits for `go` before it expands: `Thread.start` waits until the
    # new thread runs, and once earlier threads expand, the new one waits for the GIL
    # up to a switch interval (5 ms) each, ~0.3 s for 64 examples.
    go = threading.Event()

    def expand_one(i: int, x: Any) -> None:
        go.wait()
        ctx = contexts[i] = RoundContext(program, gate, i)
        try:
            result = root._eval(ctx, root_input(root, ctx, x))
            graphs[i] = ExampleGraph(ctx.graph(program), result, ctx.metrics, ctx.key_array())
        except _Aborted:
            pass
        except BaseException as e:  # raised in the driver's thread
            errors[i] = e
        finally:
            gate.finished()

    try:
        threads = _start_threads(expand_one, inputs)
    finally:
        go.set()
    rounds = 0
    try:
        while waiting := gate.next_round():
            _run_round(waiting, run_graphs)
            rounds += 1
            gate.resume(waiting)
    except BaseException:
        gate.abort()
        raise
    finally:
        for t in threads:
            t.join()
    if errors:
        i = min(errors)
        e = errors[i]
        if isinstance(e, InputError):
            raise e.locate_in(inputs[i]).with_example_index(i) from e.__cause__
        raise e
    if finish and any(ctx.has_pending() for ctx in contexts):
        _run_round(contexts, run_graphs)
        rounds += 1
    return graphs, contexts, rounds


def _start_threads(target: Callable, inputs: list) -> list[threading.Thread]:
    old = threading.stack_size(_THREAD_STACK_BYTES)
    try:
        threads = [threading.Thread(target=target, args=(i, x), name=f"refold-round-{i}",
                                    daemon=True) for i, x in enumerate(inputs)]
        for t in threads:
            t.start()
    finally:
        threading.stack_size(old)
    return threads


def _run_round(contexts: list[RoundContext], run_graphs: RunGraphs) -> None:
    """Computes the pending nodes of the waiting examples in one engine call."""
    busy = [ctx for ctx in contexts if ctx.has_pending()]
    if not busy:
        return
    pending = [ctx.pending_graph() for ctx in busy]
    values = run_graphs([g for g, _, _ in pending], [r for _, r, _ in pending])
    for ctx, (_, _, produced), vals in zip(busy, pending, values):
        ctx.computed(produced, vals)


__all__ = ["RoundContext", "expand_in_rounds"]
