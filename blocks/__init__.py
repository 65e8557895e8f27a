"""Refold's block language: typed combinators in TensorFlow Fold's vocabulary.

Import it as Fold users did (`import blocks as td`). A block maps one input to
one output; blocks compose into a model for structured data, type-checked as
they are put together, and `block.eval(x)` runs one input without batching, on
the reference evaluator (`blocks.evaluation`); the batching engine is `compiler`,
which this package does not import.

>>> import blocks as td
>>> import tensorflow as tf
>>> double = td.Scalar() >> td.Function(lambda x: 2.0 * x)
>>> double.output_type
TensorType((), 'float32')
>>> float(double.eval(21))
42.0
"""

from blocks.block import Block, IOBase
from blocks.composition import AllOf, Composition, Pipe, Record, Wire, convert_to_block
from blocks.control import ForwardDeclaration, OneOf, Optional
from blocks.errors import InputError, InputKeyError, InternalError
from blocks.inputs import (
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
from blocks.layers import FC, Embedding, Layer, ScopedLayer
from blocks.metrics import Metric
from blocks.op import Op
from blocks.sequences import (
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
    Sum,
    Zip,
    ZipWith,
)
from blocks.tensors import Concat, FromTensor, Function, Identity, Zeros
from blocks.types import (
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
from blocks.unfold import Unfold
from blocks.validation import validate

__all__ = [
    # types
    "ResultType", "TensorType", "TupleType", "SequenceType", "BroadcastSequenceType",
    "PyObjectType", "VoidType", "convert_to_type", "canonicalize_type",
    # blocks for input
    "Tensor", "Scalar", "Vector", "InputTransform", "OneHot", "OneHotFromList", "Optional",
    # composition
    "Block", "IOBase", "Composition", "Pipe", "Record", "AllOf", "Wire", "convert_to_block",
    # tensors
    "FromTensor", "Function", "Concat", "Zeros", "Identity",
    # sequences
    "Map", "Fold", "RNN", "Reduce", "Sum", "Min", "Max", "Mean", "Broadcast", "Zip",
    "ZipWith", "NGrams", "Nth", "GetItem", "Length", "Slice",
    # other blocks
    "ForwardDeclaration", "OneOf", "Metric", "Void", "Unfold",
    # layers
    "Layer", "FC", "Embedding", "ScopedLayer",
    # evaluation support
    "Op", "validate", "InputError", "InputKeyError", "InternalError",
]
