"""Lowering a block expression to a `Program`: its ops, value types and metrics.

Every `Function` block (a TF or Keras callable, a layer) and every `FromTensor`
is one op with a fixed signature of `TensorType`s. Ops with equal keys compute
the same function with the same weights, so they become one op and are batched
together: two `Function` blocks that share a layer and a signature run as one
launch, where TensorFlow Fold batched per block instance only.

>>> import blocks as td
>>> fc = td.FC(4)
>>> block = td.Record((td.Vector(3) >> fc, td.Vector(3) >> fc))
>>> program = lower(block)
>>> len(program.ops)   # one op for both uses of the layer
1
>>> program.value_types
[TensorType((3,), 'float32'), TensorType((4,), 'float32')]
"""

from __future__ import annotations

from dataclasses import dataclass, field

from blocks.block import Block
from blocks.composition import convert_to_block
from blocks.metrics import Metric
from blocks.op import Op
from blocks.tensors import FromTensor, Function
from blocks.types import TensorType
from blocks.validation import validate


@dataclass
class Program:
    """A validated block expression, lowered.

    Attributes:
        root: the root block.
        ops: the distinct ops, in a fixed order (their ids).
        op_id: every `Op` object of the expression -> its op id.
        value_types: every `TensorType` a value can have (their ids).
        type_id: `TensorType` -> its id.
        metric_names: metric names, sorted (their ids).
        metric_id: name -> id; `metric_types`: id -> value `TensorType`.
        metric_labels: id -> whether that metric carries labels.
    """

    root: Block
    ops: list
    op_id: dict
    value_types: list
    type_id: dict
    metric_names: list = field(default_factory=list)
    metric_id: dict = field(default_factory=dict)
    metric_types: list = field(default_factory=list)
    metric_labels: list = field(default_factory=list)


def lower(block_like, share_layers: bool = True) -> Program:
    """Validates and lowers a block expression (block-like values allowed).

    With `share_layers=False` every `Function`/`FromTensor` block instance gets its
    own op, even where instances share a layer: TensorFlow Fold's batching, kept
    to measure what sharing gains (BENCHMARKS.md).
    """
    root = convert_to_block(block_like)
    blocks = validate(root)
    ops: list[Op] = []
    op_id: dict = {}
    by_key: dict = {}
    types: set = set()
    metrics: dict[str, Metric] = {}
    for b in blocks:
        op = b.op() if isinstance(b, Function) else b._op if isinstance(b, FromTensor) else None
        if op is not None:
            key = _hashable_key(op.key) if share_layers else ("block", id(b))
            if key not in by_key:
                by_key[key] = len(ops)
                ops.append(op)
            op_id[op] = by_key[key]
            types.update(op.input_types)
            types.update(op.output_types)
        for t in (b.input_type, b.output_type):
            types.update(x for x in t.terminal_types() if isinstance(x, TensorType))
        if isinstance(b, Metric):
            metrics.setdefault(b.metric_name, b)
    value_types = sorted(types)
    names = sorted(metrics)
    return Program(
        root=root, ops=ops, op_id=op_id, value_types=value_types,
        type_id={t: k for k, t in enumerate(value_types)},
        metric_names=names, metric_id={n: i for i, n in enumerate(names)},
        metric_types=[metrics[n].value_type for n in names],
        metric_labels=[metrics[n].has_labels for n in names])


def _hashable_key(key):
    try:
        hash(key)
        return key
    except TypeError:
        return id(key)
