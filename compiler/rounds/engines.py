"""Running a round of value-dependent expansion on an engine of the ops it uses.

A round (`compiler.rounds.context`) computes what a batch's examples added since the last
one: for a walk in its stride, one step each, a handful of launches of the step's
ops. The compiler's executor runs every op of the program: its program has a buffer
and a gather per loop value type in every iteration of its loop, and a launch (a
`tf.cond` skipped when empty) for every op that can run before the loop, whether the
round has nodes of them or not. For a parser walking with an encoder of a dozen ops,
that bookkeeping is most of a round's call. So a round whose ops are a part of the
program's runs on an executor built for that part (`RoundEngines`), traced once per
part; values computed by other ops enter a round as constants anyway. It runs on
TensorFlow's single-threaded executor (`compiler.training.tf_executor`), on the calling
thread: between rounds Python decides, TensorFlow's thread pool falls asleep, and on
a loaded machine waking it for a round's few small ops cost more than the ops.

The parts are few: a part is kept, and a round whose ops are a part already kept
runs there; a round that needs another op makes the union of the ops seen in such
rounds the next part (so a walk's steps, whose ops vary a little from round to round,
settle on one part after a trace or two), up to `MAX_PARTS` parts, after which the
compiler's own executor runs the round. A round of every op (the first round, which
also runs the encoders) runs on the compiler's own executor.

Most rounds need no executor at all, though: a round is a handful of launches, the
same ops in the same order round after round, so it runs as one straight-line
function traced per launch sequence (`scheduler.straight`: per launch a gather and
the op, no loop, no buffers, no conds), on the single-threaded executor too. A
round of more launches than `MAX_LAUNCHES`, of a sequence not traced yet (one is
traced when it comes in two rounds in a row, a walk's steps, or in `PATIENCE`
rounds: a batch's first round, an encoder over its sentences whose sequence
changes with their lengths, would cost a trace per length), or of a new one once
`MAX_SEQUENCES` are traced, takes the parts' path above (`fallbacks` counts why).

>>> import tensorflow as tf
>>> import refold as td
>>> from refold.compiler import Compiler
>>> step = td.GetItem(0) >> td.Function(lambda s: s + 1.0) >> td.AllOf(
...     td.Identity(), td.Identity())
>>> count = td.AllOf(td.Scalar() >> td.Function(tf.square), td.Identity()) >> td.Unfold(
...     step, decide=lambda c, out: float(out), done=lambda c: c >= 4.0, max_steps=10)
>>> c = Compiler.create(count)
>>> [float(state) for _, state, _ in c.run([1.0, 2.5])]
[4.0, 7.25]
>>> engines = c.round_engines
>>> engines.straight_rounds, c.last_rounds, dict(engines.fallbacks)
(1, 3, {'new': 2})
>>> engines.straight.traced   # the step's sequence, from its second round in a row
1
>>> engines.use_straight = False    # the executors' path
>>> [float(state) for _, state, _ in c.run([1.0, 2.5])]
[4.0, 7.25]
>>> [len(ops) for ops in engines.parts]   # the step's op, without the square
[1]
"""

from __future__ import annotations

import dataclasses

import numpy as np

from refold.compiler.training.tf_executor import InferenceExecutorChoice, _gpu_visible
from refold.scheduler.executor import Executor
from refold.scheduler.graph import OpGraph
from refold.scheduler.planner import Planner, plan_record
from refold.scheduler.straight import StraightLine


class _Part:
    """An executor, a planner and a traced run for some of a program's ops."""

    def __init__(self, compiler, ops: np.ndarray):
        import tensorflow as tf

        from refold.compiler.feeding.handoff import Handoff
        full = compiler.executor
        self.ops = ops
        self.op_of = np.full(len(full.ops), -1, np.int32)  # program op id -> its id here
        self.op_of[ops] = np.arange(len(ops), dtype=np.int32)
        feeds = None if full.feeds is None else full.feeds[np.ix_(ops, ops)]
        self.executor = Executor([full.ops[o] for o in ops], full.value_types,
                                 output_dtypes=full.output_dtypes, feeds=feeds)
        self.planner = Planner(self.executor.layout, compiler.planner.scheduler.name)
        self.handoff = handoff = Handoff(self.executor.input_signature())
        compute = self.executor.compute
        self.choice = choice = InferenceExecutorChoice(self.executor)
        self.single = not _gpu_visible()
        with choice.calling(self.single):
            self.fn = tf.function(lambda *t: compute(handoff.unfold(t)), autograph=False,
                                  input_signature=handoff.signature).get_concrete_function()
        if self.single and not choice.admits(True, self.fn):  # an Assert: the default
            self.single = False
            self.fn = tf.function(lambda *t: compute(handoff.unfold(t)), autograph=False,
                                  input_signature=handoff.signature).get_concrete_function()

    def run(self, graph: OpGraph, reads: np.ndarray) -> tuple:
        graph = dataclasses.replace(graph, node_op=self.op_of[graph.node_op])
        self.planner.check(graph)
        plan = self.planner.plan([plan_record(graph, reads, [], [])], [graph.constants])
        with self.choice.calling(self.single):
            outputs = self.handoff.call(self.fn, self.handoff.tensors(plan.feed.arrays))
        return [o.numpy() for o in outputs], plan.read_type, plan.read_pos


class RoundEngines:
    """The parts of a compiler's program that rounds run on (module docstring)."""

    MAX_PARTS = 3
    MAX_LAUNCHES = 16  # a round of more launches runs on an executor
    MAX_SEQUENCES = 16  # launch sequences traced straight-line, at most
    PATIENCE = 8  # rounds of a sequence, not in a row, that make it traced

    def __init__(self, compiler):
        self.compiler = compiler
        self._parts: list[_Part] = []
        self._seen = np.zeros(len(compiler.program.ops), bool)  # ops of partial rounds
        self.use_straight = True  # False: every round on an executor (for comparison)
        self.straight_rounds = 0  # rounds run straight-line
        self.choice = InferenceExecutorChoice(compiler.executor)
        self.single = not _gpu_visible()
        self.straight = StraightLine(compiler.executor, compiler.planner.scheduler.name,
                                     self.MAX_LAUNCHES, self.MAX_SEQUENCES, self.PATIENCE,
                                     scope=lambda: self.choice.calling(self.single))

    @property
    def fallbacks(self):
        """Why rounds did not run straight-line: reason -> rounds (`StraightLine`)."""
        return self.straight.fallbacks

    def run_straight(self, graph: OpGraph, reads: np.ndarray) -> tuple | None:
        """Runs a round straight-line (module docstring): `(outputs per value type,
        read_type, read_pos)` as `compiler.rounds.context` takes them, or None where it
        takes an executor."""
        if not self.use_straight:
            return None
        self.compiler.planner.check(graph)
        line = self.straight
        plan = line.plan(graph, reads)
        if plan is None:
            return None
        traced = line.traced
        fn = line.function(plan.key)
        if line.traced > traced and self.single and not self.choice.admits(True, fn):
            self.single = False  # an Assert: the default executor from now on
            line.clear()
        outputs = line.call(plan)
        self.straight_rounds += 1
        return outputs, plan.read_type, plan.read_pos

    @property
    def parts(self) -> list[np.ndarray]:
        """The op ids of each part made so far."""
        return [p.ops for p in self._parts]

    def part_for(self, graph: OpGraph) -> _Part | None:
        """The part that runs `graph`, made if need be; None for the whole program's."""
        used = np.zeros(len(self._seen), bool)
        used[graph.node_op] = True
        if used.all():
            return None
        fitting = [p for p in self._parts if used[p.ops].sum() == used.sum()]
        if fitting:
            return min(fitting, key=lambda p: len(p.ops))
        if len(self._parts) >= self.MAX_PARTS:
            return None
        self._seen |= used
        part = _Part(self.compiler, np.flatnonzero(self._seen))
        self._parts.append(part)
        return part


__all__ = ["RoundEngines"]
