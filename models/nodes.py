"""The input conventions shared by fixed-arity tree cells (`NaryTreeLSTMCell`, `TreeRNNCell`).

A cell over N ordered children reads, at one node:

- `x` alone when N = 0 (a leaf cell),
- `(child_1, ..., child_N)` when it has no input vector,
- `(x, (child_1, ..., child_N))` otherwise.

>>> from refold.blocks.types import TensorType
>>> node_input_type(TensorType((4,)), 2, None)
TupleType(TensorType((4,), 'float32'), TensorType((4,), 'float32'))
>>> len(node_input_type(TensorType((4,)), 2, 3))   # (x, children)
2
>>> split_node_args(("x",), 0, 3), split_node_args(("a", "b"), 2, None)
(('x', ()), (None, ('a', 'b')))
"""

from __future__ import annotations

from typing import Any

from refold.blocks.types import TensorType, TupleType


def node_input_type(child_type: Any, num_children: int, input_size: int | None):
    """The input type of a cell with `num_children` children of `child_type`."""
    if num_children == 0:
        return TensorType((input_size,))
    children = TupleType(*([child_type] * num_children))
    return children if input_size is None else TupleType(TensorType((input_size,)), children)


def split_node_args(args: tuple, num_children: int, input_size: int | None) -> tuple:
    """`(x or None, children)` from the arguments a cell's `_call` receives."""
    if num_children == 0:
        return args[0], ()
    if input_size is None:
        return None, tuple(args)
    x, children = args
    return x, tuple(children)
