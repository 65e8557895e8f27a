"""Small inference batches run as straight-line functions, without the loop.

The executor runs any batch through one `tf.while_loop`; at batch 1 its machinery
(loop variables, a gather per loop type, a floor of tens of µs per iteration) is
about half of a call (BENCHMARKS.md, "Small batches"). A batch of few launches of
few rows each runs instead as one function traced per *launch sequence*, the op of
each launch in order (`scheduler.straight`: per launch the gathers and the op, no
loop), on TensorFlow's single-threaded executor as the loop would be
(`compiler.training.tf_executor`). `Compiler.run` and `Model.predict` take this
path for a batch the planner has planned (its launches and reads are the plan's)
with at most `max_launches` launches and `max_nodes` nodes in the loop's: a
sentence or a tree at batch 1 (BENCHMARKS.md "Straight-line inference"; at batch 4
of the BiLSTM tagger or 16 of the TreeLSTM, about 100 loop nodes, the loop
measured as fast or faster).
Other batches run on the executor, as do those of a sequence not traced yet: a
trace costs about half a second, a batch's call a millisecond, so a sequence is
traced once its batches have spent on the executor what a trace took (the mean
of those timed; at most `MAX_SEQUENCES`): a short `predict` traces nothing, a
long stream of requests traces its common sequences. A batch whose sequence is not
traced runs on a traced one that holds its launches in order and at most `SLACK`
more, run empty (a sentence on the function of one a few words longer): this cut
the BiLSTM tagger's traces from 16 to 5 at the same speed. Results are the same
either way; `enabled = False` turns the path off.

>>> import tensorflow as tf
>>> import refold as td
>>> from refold.compiler import Compiler
>>> c = Compiler.create(td.Map(td.Scalar() >> td.Function(tf.square)) >> td.Sum())
>>> c.straight_inference.trace_seconds = 0.0  # (trace at once, for the example)
>>> [float(r) for r in c.run([[1, 2]])], [float(r) for r in c.run([[3, 4]])]
([5.0], [25.0])
>>> c.straight_inference.batches, c.straight_inference.line.traced  # one sequence
(2, 1)
>>> c.straight_inference.enabled = False   # every batch on the executor
>>> [float(r) for r in c.run([[3, 4]])], c.straight_inference.batches
([25.0], 2)
"""

from __future__ import annotations

import collections
import time

import numpy as np

from refold.scheduler import straight
from refold.scheduler.planner import Plan
from refold.scheduler.straight import StraightLine


class StraightInference:
    """Runs a compiler's small inference batches straight-line (module docstring).

    Args:
        compiler: the `Compiler` (its executor, and its `inference_executor`, which
            says whether TensorFlow's single-threaded executor may run them).
        max_launches: batches of more launches run on the executor.
        max_nodes: batches of more nodes in the loop's launches run on the executor.
    """

    MAX_SEQUENCES = 16  # launch sequences traced, at most
    SLACK = 4  # empty launches a batch may run with on a longer sequence's function
    TRACE_SECONDS = 0.5  # what a trace is taken to cost until one is timed

    def __init__(self, compiler, max_launches: int = 64, max_nodes: int = 64):
        from refold.compiler.training.tf_executor import _gpu_visible
        self.choice = compiler.inference_executor
        self.layout = compiler.executor.layout
        self.max_nodes = max_nodes
        self.enabled = True
        self.batches = 0  # batches run straight-line
        self.trace_seconds = self.TRACE_SECONDS  # the mean of the traces timed
        self._traces: list[float] = []
        self._looped: collections.Counter = collections.Counter()  # sequence -> seconds
        self._waiting: tuple | None = None  # the sequence of the batch left to the loop
        self.line = StraightLine(compiler.executor, max_launches=max_launches,
                                 max_sequences=self.MAX_SEQUENCES, slack=self.SLACK,
                                 scope=lambda: self.choice.calling(self.single),
                                 ready=lambda key: self._looped[key] >= self.trace_seconds)
        self.single = not _gpu_visible()

    @property
    def max_launches(self) -> int:
        """Batches of more launches run on the executor."""
        return self.line.max_launches

    @max_launches.setter
    def max_launches(self, value: int) -> None:
        self.line.max_launches = value

    @property
    def fallbacks(self):
        """Why batches within the limits ran on the executor: reason -> batches."""
        return self.line.fallbacks

    def fits(self, plan: Plan) -> bool:
        """Whether a planned batch is small enough to run straight-line: few launches,
        and few nodes in those of the loop (the prelude's, such as an embedding
        lookup of every leaf in one launch, do not count)."""
        if not (self.enabled and 0 < len(plan.group_op) <= self.max_launches):
            return False
        i = self.layout.segment_id.get("group_size")
        return i is None or int(plan.index[plan.layout[i]:plan.layout[i + 1]].sum()) \
            <= self.max_nodes

    def run(self, plan: Plan) -> tuple | None:
        """`(outputs per value type (numpy), read_type, read_pos)` of a planned batch
        (read i is row `read_pos[i]` of `outputs[read_type[i]]`), or None where it
        runs on the executor; then `looped` is to be told what that cost."""
        self._waiting = None
        if not self.fits(plan):
            return None
        line = self.line
        got = line.plan(plan.graph, plan.reads, plan)
        if got is None:
            self._waiting = tuple(plan.group_op.tolist())
            return None
        traced = line.traced
        start = time.perf_counter()
        fn = line.function(got.key)
        if line.traced > traced:
            self._traces.append(time.perf_counter() - start)
            self.trace_seconds = sum(self._traces) / len(self._traces)
            if self.single and not self.choice.admits(True, fn):
                self.single = False  # an Assert: the default executor from now on
                line.clear()
        outputs = line.call(got)
        self.batches += 1
        return outputs, got.read_type, got.read_pos

    def looped(self, seconds: float) -> None:
        """The batch `run` left to the executor took `seconds` there: a sequence is
        traced once its batches have spent there what a trace costs."""
        if self._waiting is not None:
            self._looped[self._waiting] += seconds
            self._waiting = None
            keep = straight.MEMORY
            if len(self._looped) > keep:  # a long stream of sequences: the costliest
                self._looped = collections.Counter(dict(self._looped.most_common(keep // 2)))

    def outputs_of(self, plan: Plan, type_id: int, n: int) -> np.ndarray | None:
        """The first `n` values of type `type_id` a grouped batch reads (its results,
        as a step's `y_pred`), or None where the batch runs on the executor."""
        got = self.run(plan)
        return None if got is None else got[0][type_id][:n]


__all__ = ["StraightInference"]
