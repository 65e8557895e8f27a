"""Lowering a block expression to a `Program`: its ops, value types and metrics.

Each block declares the ops it calls through `Block.ops()` (a `Function` block, a
layer or a `FromTensor` has one, most blocks none; a block written from scratch
declares its own), each with a fixed signature of `TensorType`s. Lowering asks
every block rather than knowing block classes, so a new block batches like the
library's own, and an op called without being declared is an `UnloweredOpError`
during expansion, not a wrong answer. Ops with equal keys compute
the same function with the same weights, so they become one op and are batched
together: two `Function` blocks that share a layer and a signature run as one
launch, where TensorFlow Fold batched per block instance only.

>>> import refold as td
>>> fc = td.FC(4)
>>> block = td.Record((td.Vector(3) >> fc, td.Vector(3) >> fc))
>>> program = lower(block)
>>> len(program.ops)   # one op for both uses of the layer
1
>>> program.value_types
[TensorType((3,), 'float32'), TensorType((4,), 'float32')]
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from refold.blocks.block import Block
from refold.blocks.composition import convert_to_block
from refold.blocks.errors import InternalError
from refold.blocks.metrics import Metric
from refold.blocks.op import NODE_KEY, Op
from refold.blocks.types import TensorType
from refold.blocks.validation import validate


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
        reads_values: some block's structure depends on computed values (it has
            `reads_values` set, e.g. `blocks.Unfold`): inputs expand in rounds
            (`compiler.rounds.context`).
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
    reads_values: bool = False

    @functools.cached_property
    def op_signatures(self) -> dict:
        """Every `Op` object -> `(op id, its outputs' type ids, prelude_only, check,
        random)`: what expansion looks up for each node it records."""
        return {op: (o, tuple(self.type_id[t] for t in op.output_types), op.prelude_only,
                     op.check, getattr(op, "random", False))
                for op, o in self.op_id.items()}

    @functools.cached_property
    def input_checks(self) -> list:
        """`(op id, check)` of the ops with an input check (`Op.check`), which
        expansion runs on all of a graph's nodes of the op at once
        (the expansion's `checks_pass`)."""
        return [(o, op.check) for o, op in enumerate(self.ops) if op.check is not None]

    @functools.cached_property
    def key_type(self) -> int | None:
        """The type id of the random ops' node keys (`blocks.op.NODE_KEY`), or None
        when no op is random: then nothing is keyed and nothing costs."""
        if not any(getattr(op, "random", False) for op in self.ops):
            return None
        return self.type_id[NODE_KEY]

    @functools.cached_property
    def op_outputs(self) -> tuple[np.ndarray, np.ndarray]:
        """`(n_outputs [O], output type ids [O, most outputs])` by op id: what numbers
        the values of a recorded graph's nodes (`compiler.graphs.expansion`)."""
        n_out = np.array([len(op.output_types) for op in self.ops], np.int64)
        table = np.zeros((len(self.ops), max(1, int(n_out.max(initial=0)))), np.int64)
        for o, op in enumerate(self.ops):
            table[o, :len(op.output_types)] = [self.type_id[t] for t in op.output_types]
        return n_out, table


def lower(block_like, share_layers: bool = True) -> Program:
    """Validates and lowers a block expression (block-like values allowed).

    With `share_layers=False` every op a block instance declares is an op of its
    own, even where instances share a layer: TensorFlow Fold's batching, kept to
    measure what sharing gains (BENCHMARKS.md).
    """
    root = convert_to_block(block_like)
    blocks = validate(root)
    ops: list[Op] = []
    op_id: dict = {}
    by_key: dict = {}
    types: set = set()
    metrics: dict[str, Metric] = {}
    for b in blocks:
        for i, op in enumerate(_declared_ops(b)):
            if op in op_id:  # the same Op object declared twice: one id is all it can have
                continue
            key = _hashable_key(op.key) if share_layers else ("block", id(b), i)
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
        metric_labels=[metrics[n].has_labels for n in names],
        reads_values=any(getattr(b, "reads_values", False) for b in blocks))


class UnloweredOpError(InternalError):
    """A block called an op it did not declare in `ops()`, so lowering never saw it.

    A fault of the block's implementation, not of the input: it is never reported as
    an `InputError` or blamed on an example.
    """

    @classmethod
    def of(cls, op: Op) -> UnloweredOpError:
        return cls(f"op {op.name!r} was not lowered: a block may only call the ops it "
                   f"declares, so the block calling it must return it from ops() "
                   f"(see blocks.Block.ops); {op!r}")


def _declared_ops(block: Block) -> list[Op]:
    ops = block.ops()
    if not isinstance(ops, (list, tuple)) or not all(isinstance(op, Op) for op in ops):
        raise TypeError(f"{block.path}: ops() must return a list of blocks.Op, got {ops!r:.80}")
    return list(ops)


def _hashable_key(key):
    try:
        hash(key)
        return key
    except TypeError:
        return id(key)
