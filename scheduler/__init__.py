"""Dynamic batching over op graphs: layouts, schedules, planning and the executor.

This package knows nothing of blocks: it batches any `OpGraph` (flat arrays of
node calls over typed values) whose ops are batch functions. `compiler/` lowers
block expressions to op graphs and uses it through two calls: `Planner.plan`
(example records in, a `Plan` out) and `Executor.compute` (the plan's feed in,
the values read out; a `GradientMode` says how a training step differentiates the
loop). The loops over a batch's launches (the executor's, the replayed backward one,
the XLA program's) share one public surface, `scheduler.launches`.
"""

from refold.scheduler.errors import EngineError
from refold.scheduler.executor import Executor, Feed
from refold.scheduler.gradient_mode import GradientMode
from refold.scheduler.graph import OpGraph
from refold.scheduler.layout import Layout
from refold.scheduler.planner import Plan, Planner, plan_record
from refold.scheduler.schedules import (
    SCHEDULERS,
    Schedule,
    Scheduler,
    ScheduleStats,
    agenda_schedule,
    depth_schedule,
    register_scheduler,
)

__all__ = ["OpGraph", "Layout", "Schedule", "ScheduleStats", "Scheduler", "SCHEDULERS",
           "register_scheduler", "depth_schedule", "agenda_schedule", "Planner", "Plan",
           "plan_record", "Executor", "Feed", "GradientMode", "EngineError"]
