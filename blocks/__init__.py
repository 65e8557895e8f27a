"""Refold's block language: typed combinators in TensorFlow Fold's vocabulary.

Import it as Fold users did (`import refold as td`). A block maps one input to
one output; blocks compose into a model for structured data, type-checked as
they are put together, and `block.eval(x)` runs one input without batching, on
the reference evaluator (`blocks.evaluation.contexts`); the batching engine is `compiler`,
which this package does not import.

>>> import refold as td
>>> import tensorflow as tf
>>> double = td.Scalar() >> td.Function(lambda x: 2.0 * x)
>>> double.output_type
TensorType((), 'float32')
>>> float(double.eval(21))
42.0
"""

from refold.blocks.block import Block, bad_input
from refold.blocks.composition import AllOf, Composition, Pipe, Record, Wire, convert_to_block
from refold.blocks.control import ForwardDeclaration, OneOf, Optional
from refold.blocks.diagram import plot_block
from refold.blocks.errors import InputError, InputKeyError, InternalError
from refold.blocks.evaluation.dataflow import DataFlow
from refold.blocks.evaluation.training_mode import training_mode
from refold.blocks.inputs import (
    GetItem,
    InputTransform,
    Length,
    OneHot,
    OneHotFromList,
    Scalar,
    Slice,
    Tensor,
    Vector,
    Void,
)
from refold.blocks.layers import FC, Embedding, Layer, ScopedLayer
from refold.blocks.metrics import Metric
from refold.blocks.noise import Dropout
from refold.blocks.op import Op
from refold.blocks.sequences import (
    RNN,
    Broadcast,
    Fold,
    Map,
    Max,
    Mean,
    Min,
    NGrams,
    Nth,
    Reduce,
    Stack,
    Sum,
    Zip,
    ZipWith,
)
from refold.blocks.tensors import Concat, FromTensor, Function, Identity, Zeros
from refold.blocks.types import (
    BroadcastSequenceType,
    PyObjectType,
    ResultType,
    SequenceType,
    TensorType,
    TupleType,
    VoidType,
    canonicalize_type,
    convert_to_type,
)
from refold.blocks.unfold import Unfold
from refold.blocks.validation import validate

__all__ = [
    # types
    "ResultType", "TensorType", "TupleType", "SequenceType", "BroadcastSequenceType",
    "PyObjectType", "VoidType", "convert_to_type", "canonicalize_type",
    # blocks for input
    "Tensor", "Scalar", "Vector", "InputTransform", "OneHot", "OneHotFromList", "Optional",
    # composition
    "Block", "Composition", "Pipe", "Record", "AllOf", "Wire", "convert_to_block",
    # tensors
    "FromTensor", "Function", "Concat", "Zeros", "Identity",
    # sequences
    "Map", "Fold", "RNN", "Reduce", "Sum", "Min", "Max", "Mean", "Broadcast", "Zip",
    "ZipWith", "NGrams", "Nth", "Stack", "GetItem", "Length", "Slice",
    # other blocks
    "ForwardDeclaration", "OneOf", "Metric", "Void", "Unfold",
    # layers
    "Layer", "FC", "Embedding", "ScopedLayer",
    # training behaviour: dropout per node, the training flag
    "Dropout", "training_mode",
    # evaluation support
    "Op", "DataFlow", "bad_input", "validate", "InputError", "InputKeyError", "InternalError",
    # drawing
    "plot_block",
]
