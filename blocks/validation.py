"""Checking a whole block expression before it runs.

Composition-time inference catches most type errors as soon as blocks are put
together. Some checks need the whole expression: that every type is known, that
every forward declaration is resolved, that compositions are acyclic and use
every output, and that metrics of one name agree on their type. `validate` runs
them (and orders each composition's children for evaluation).

>>> from refold.blocks import Function, Scalar
>>> import tensorflow as tf
>>> validate(Function(tf.negative))
Traceback (most recent call last):
...
TypeError: Function: cannot determine the input type; connect the block to something that
produces its input, or call set_input_type()
"""

from __future__ import annotations

from collections.abc import Iterator

from refold.blocks.block import PY, Block
from refold.blocks.types import PyObjectType


def iter_blocks(root: Block) -> Iterator[Block]:
    """Every block reachable from `root`, including forward-declaration targets, once."""
    seen = {id(root)}
    stack = [root]
    while stack:
        block = stack.pop()
        yield block
        nexts = list(reversed(block.children))
        if block.is_forward_declaration_ref():
            target = block.declaration.target
            if target is not None:
                nexts.append(target)
        for b in nexts:
            if id(b) not in seen:
                seen.add(id(b))
                stack.append(b)


def validate(root: Block) -> list[Block]:
    """Checks the expression rooted at `root` and prepares it for evaluation.

    The root's input becomes a Python object unless its type is already known; each
    block's `ops()` are made (a block may make them there, and its `evaluate` use them).
    Returns every block of the expression. Raises `TypeError` (types) or
    `ValueError` (wiring) naming the block path.
    """
    from refold.blocks.composition import Composition
    from refold.blocks.metrics import Metric
    if root.input_type is None and issubclass(PyObjectType, root.input_type_classes):
        root.set_input_type(PY)
    blocks = list(iter_blocks(root))
    for block in blocks:
        if block.is_forward_declaration_ref() and block.declaration.target is None:
            raise TypeError(f"{block.path}: Forward declaration {block.declaration!r} was "
                            "never resolved.")
    for block in blocks:
        if isinstance(block, Composition):
            block.validate_wiring()
    undetermined = [b for b in blocks if b.input_type is None or b.output_type is None]
    if undetermined:
        # Blame the innermost: a container's type is often unknown only because a
        # child's is (a pipe ending in a function whose output is not inferred).
        ids = {id(b) for b in undetermined}
        block = next((b for b in undetermined
                      if not any(id(d) in ids for d in list(iter_blocks(b))[1:])),
                     undetermined[0])
        which = "input" if block.input_type is None else "output"
        hint = ("connect the block to something that produces its input, or call "
                "set_input_type()") if which == "input" else "call set_output_type()"
        raise TypeError(f"{block.path}: cannot determine the {which} type; {hint}")
    metric_types: dict[str, tuple] = {}
    for block in blocks:
        if isinstance(block, Metric):
            seen = metric_types.setdefault(block.metric_name, (block.input_type, block))
            if seen[0] != block.input_type:
                raise TypeError(f"{block.path}: Metric {block.metric_name!r} has incompatible "
                                f"types: {seen[0]} (at {seen[1].path}) vs {block.input_type}")
    for block in blocks:
        check_per_node(block)
        block.ops()  # made now, as a compiler makes them: `evaluate` may expect them
    return blocks


def check_per_node(block: Block) -> None:
    """Refuses Keras layers whose result would depend on how nodes are batched.

    A block's op computes each node on its own, whatever else a launch holds. Three
    kinds of Keras layer break that, and are refused with the block's path:
    `BatchNormalization` normalises over a launch's rows (nodes of many examples
    and depths: no per-example meaning; `LayerNormalization` normalises each row);
    a noise layer (`Dropout`, `GaussianNoise`, ...) *inside* another layer, and a
    Keras RNN cell with `dropout` or `recurrent_dropout`, draw one mask per launch
    from Keras' own random state, which neither `block.eval` nor the engine's
    replayed backward pass could draw again. A noise layer wrapped on its own
    (`td.Function(keras.layers.Dropout(rate))`), `td.Dropout`, and the zoo's cells'
    `dropout` draw per node instead (`blocks.noise`).
    """
    import sys
    keras = sys.modules.get("keras")
    if keras is None:
        return
    from refold import compat
    from refold.blocks.layers import is_keras_layer
    from refold.blocks.noise import is_keras_noise
    for w in block.weights():
        if not is_keras_layer(w):
            continue
        for layer in compat.inner_layers(w):
            kind = type(layer).__name__
            if isinstance(layer, keras.layers.BatchNormalization):
                raise ValueError(
                    f"{block.path}: keras.layers.{kind} (layer {layer.name!r}) cannot run in "
                    "a block: it would normalise over the rows of one launch of the engine "
                    "(nodes of many examples and depths), which have no per-example "
                    "meaning, and block.eval would compute something else. Normalise each "
                    "node on its own with keras.layers.LayerNormalization instead")
            if layer is not w and is_keras_noise(layer):
                raise ValueError(
                    f"{block.path}: layer {w.name!r} holds keras.layers.{kind} "
                    f"({layer.name!r}), which would draw one mask per launch with Keras' "
                    "own random state. Wrap the noise layer on its own, "
                    f"td.Function(keras.layers.{kind}(...)), or use td.Dropout: those "
                    "draw per node (refold.blocks.noise)")
            if hasattr(layer, "state_size") and (getattr(layer, "dropout", 0) or 0) + (
                    getattr(layer, "recurrent_dropout", 0) or 0) > 0:
                raise ValueError(
                    f"{block.path}: keras.layers.{kind} {layer.name!r} has dropout, which "
                    "Keras draws once per launch with its own random state. Use the zoo's "
                    "cells, refold.models.rnn_cells (dropout=, recurrent_dropout=), which "
                    "draw per node")


def metric_types(blocks: list[Block]) -> dict:
    """`{name: value TensorType}` of every metric among `blocks`, sorted by name."""
    from refold.blocks.metrics import Metric
    found = {b.metric_name: b.value_type for b in blocks if isinstance(b, Metric)}
    return dict(sorted(found.items()))


__all__ = ["validate", "iter_blocks", "metric_types", "check_per_node"]
