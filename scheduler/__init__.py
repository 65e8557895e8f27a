"""Dynamic batching over op graphs: schedules and the while-loop executor.

This package knows nothing of blocks: it batches any `OpGraph` (flat arrays of
node calls over typed values) whose ops are batch functions. `compiler/` lowers
block expressions to op graphs and uses it.
"""

from scheduler.graph import OpGraph
from scheduler.schedules import (
    SCHEDULERS,
    Schedule,
    ScheduleStats,
    agenda_schedule,
    depth_schedule,
)

__all__ = ["OpGraph", "Schedule", "ScheduleStats", "depth_schedule", "agenda_schedule",
           "SCHEDULERS"]
