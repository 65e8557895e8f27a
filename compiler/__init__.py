"""Compiling block expressions for dynamic batching.

`Compiler` lowers a block expression to ops (`lowering`), expands each input into
an op graph (`expansion`), and runs batches through the scheduler's executor.
`Model` is a compiled block as a `keras.Model`: fit, evaluate, predict, save
(`load_model` reads it back, as `keras.models.load_model` does), export.

The names below are imported on first use (`import refold` imports `Model`, which
registers it with Keras, and with it the rest).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from refold.lazy import lazy_exports

_WHERE = {
    "BatchPlan": "refold.compiler.graphs.batch_plan", "Compiler": "refold.compiler.compiler",
    "ExampleGraph": "refold.compiler.graphs.expansion",
    "expand": "refold.compiler.graphs.expansion",
    "Program": "refold.compiler.graphs.lowering", "lower": "refold.compiler.graphs.lowering",
    "Model": "refold.compiler.model",
    "ModelFileError": "refold.compiler.saving", "load_model": "refold.compiler.saving",
    "NonFiniteLossError": "refold.compiler.training.steps",
    "Lines": "refold.compiler.feeding.streams", "LineError": "refold.compiler.feeding.streams",
    "WorkerFailedError": "refold.compiler.distribute.sharded_streams",
    "draw_schedule": "refold.compiler.schedule_picture",
    "describe_schedule": "refold.compiler.schedule_picture",
}


__all__ = ["Compiler", "Model", "BatchPlan", "Program", "lower", "expand",
           "ExampleGraph", "NonFiniteLossError", "load_model", "ModelFileError", "Lines",
           "LineError", "WorkerFailedError", "draw_schedule", "describe_schedule"]

if TYPE_CHECKING:  # `_WHERE`'s names, seen by type checkers and the API pages (mkdocstrings)
    from refold.compiler.compiler import Compiler
    from refold.compiler.distribute.sharded_streams import WorkerFailedError
    from refold.compiler.feeding.streams import LineError, Lines
    from refold.compiler.graphs.batch_plan import BatchPlan
    from refold.compiler.graphs.expansion import ExampleGraph, expand
    from refold.compiler.graphs.lowering import Program, lower
    from refold.compiler.model import Model
    from refold.compiler.saving import ModelFileError, load_model
    from refold.compiler.schedule_picture import describe_schedule, draw_schedule
    from refold.compiler.training.steps import NonFiniteLossError


__getattr__, __dir__ = lazy_exports(globals(), _WHERE, __all__)
