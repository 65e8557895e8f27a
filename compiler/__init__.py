"""Compiling block expressions for dynamic batching.

`Compiler` lowers a block expression to ops (`lowering`), expands each input into
an op graph (`expansion`), and runs batches through the scheduler's executor.
"""

from blocks.evaluation import register_engine
from compiler.compiler import BatchPlan, Compiler, engine_eval
from compiler.expansion import ExampleGraph, expand
from compiler.lowering import Program, lower

register_engine(engine_eval)

__all__ = ["Compiler", "BatchPlan", "Program", "lower", "expand", "ExampleGraph"]
