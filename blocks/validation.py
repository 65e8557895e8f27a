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
        nexts = list(reversed(block._children))
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

    The root's input becomes a Python object unless its type is already known.
    Returns every block of the expression. Raises `TypeError` (types) or
    `ValueError` (wiring) naming the block path.
    """
    from refold.blocks.composition import Composition
    from refold.blocks.metrics import Metric
    if root.input_type is None and issubclass(PyObjectType, root._input_classes):
        root.set_input_type(PY)
    blocks = list(iter_blocks(root))
    for block in blocks:
        if block.is_forward_declaration_ref() and block.declaration.target is None:
            raise TypeError(f"{block.path}: Forward declaration {block.declaration!r} was "
                            "never resolved.")
    for block in blocks:
        if isinstance(block, Composition):
            block._validate_wiring()
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
    return blocks


def metric_types(blocks: list[Block]) -> dict:
    """`{name: value TensorType}` of every metric among `blocks`, sorted by name."""
    from refold.blocks.metrics import Metric
    found = {b.metric_name: b.value_type for b in blocks if isinstance(b, Metric)}
    return dict(sorted(found.items()))


__all__ = ["validate", "iter_blocks", "metric_types"]
