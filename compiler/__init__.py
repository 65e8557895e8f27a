"""Compiling block expressions for dynamic batching.

`Compiler` lowers a block expression to ops (`lowering`), expands each input into
an op graph (`expansion`), and runs batches through the scheduler's executor.
`Model` is a compiled block as a `keras.Model`: fit, evaluate, predict, save
(`load_model` reads it back, as `keras.models.load_model` does), export.
"""

from compiler.compiler import BatchPlan, Compiler
from compiler.expansion import ExampleGraph, expand
from compiler.lowering import Program, lower
from compiler.model import Model
from compiler.saving import ModelFileError, load_model
from compiler.steps import NonFiniteLossError
from compiler.streaming import Lines

__all__ = ["Compiler", "Model", "BatchPlan", "Program", "lower", "expand",
           "ExampleGraph", "NonFiniteLossError", "load_model", "ModelFileError", "Lines"]
