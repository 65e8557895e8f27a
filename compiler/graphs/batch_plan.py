"""`BatchPlan`: a batch of expanded inputs with the scheduler's plan of it, ready to run.

`Compiler.plan` makes one; the input pipeline packs it (`compiler.feeding.packed`) and the
step functions run it. It sits in a module of its own so that what reads plans does
not import what makes them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from refold.compiler.graphs.expansion import BatchGraph
from refold.compiler.graphs.lowering import Program
from refold.scheduler.executor import Feed
from refold.scheduler.graph import OpGraph
from refold.scheduler.planner import Plan
from refold.scheduler.schedules import Schedule, ScheduleStats


@dataclass
class BatchPlan:
    """A batch ready to run: its examples, and the scheduler's `Plan` of them.

    Attributes:
        examples: the expanded examples, in input order: their `ExampleGraph`s, or
            a `BatchGraph` when the batch was expanded as one graph
            (`Compiler.plan_batch`; its plan then sees it as one example).
        plan: the `scheduler.Plan` (merged graph, schedule, feed).
        grouped: whether the reads are grouped by metric (`Compiler.plan`).
    """

    examples: list | BatchGraph
    plan: Plan
    grouped: bool = False

    @property
    def size(self) -> int:
        """The number of inputs in the batch."""
        return len(self.examples)

    @property
    def feed(self) -> Feed:
        """The packed arrays for the executor."""
        return self.plan.feed

    @property
    def stats(self) -> ScheduleStats:
        """How well the batch batches: steps, launches, mean batch sizes."""
        return self.plan.stats

    @property
    def graph(self) -> OpGraph:
        """The examples' merged `OpGraph`."""
        return self.plan.graph

    @property
    def schedule(self) -> Schedule:
        """The merged graph's `Schedule`."""
        return self.plan.schedule

    @property
    def value_offsets(self) -> np.ndarray:
        """Where each example's value ids start in `graph`."""
        return self.plan.value_offsets

    def metric_bounds(self, program: Program) -> np.ndarray:
        """int32 [M, 2]: with grouped reads, metric m's values are rows
        `[start, end)` of the executor's output for the metric's value type."""
        counts = self.plan.metric_counts
        bounds = np.zeros((len(counts), 2), np.int64)
        cursor = len(self.plan.reads) - int(counts.sum())  # the results come first
        for m in range(len(counts)):
            if counts[m]:
                start = int(self.plan.read_pos[cursor])
                bounds[m] = (start, start + counts[m])
            cursor += counts[m]
        return bounds.astype(np.int32)
