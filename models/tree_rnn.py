"""The recursive neural network cell over trees (Socher et al. 2011) as a layer.

A node's state is one float32 vector `h` of `hidden` units, computed from its
input vector (if any) and its N children's states by one layer:

    h = activation(W [x, h_1, ..., h_N] + b)

A leaf is the `N = 0` case on an input vector.

>>> import refold as td
>>> leaf = TreeRNNCell(4, num_children=0, input_size=2)
>>> node = TreeRNNCell(4, num_children=2)
>>> tree = td.ForwardDeclaration(td.PyObjectType(), td.TensorType((4,)))
>>> tree.resolve_to(td.OneOf(lambda t: isinstance(t, tuple), {
...     False: td.Vector(2) >> leaf, True: td.Record((tree(), tree())) >> node}))
>>> tree().eval(([1, 0], ([0, 1], [1, 1]))).shape
(4,)
"""

from __future__ import annotations

from typing import Any

from refold.blocks.layers import Layer
from refold.blocks.types import TensorType
from refold.models.nodes import node_input_type, split_node_args


class TreeRNNCell(Layer):
    """A Tree-RNN cell: `(h_1, ..., h_N) -> h`, `(x, (h_1, ..., h_N)) -> h` with
    `input_size`, or `x -> h` with `num_children=0`.

    Args:
        hidden: the size of `h`.
        num_children: N, the number of (ordered) children; 0 for a leaf cell.
        input_size: the size of an input vector read at the node, or None for none
            (required for leaf cells).
        activation: a callable or Keras activation name (tanh by default).
        name: the layer's name.
    """

    handles_empty = True

    def __init__(self, hidden: int, num_children: int = 2, input_size: int | None = None,
                 activation: Any = "tanh", name: str | None = None):
        import keras
        for arg, v, low in (("hidden", hidden, 1), ("num_children", num_children, 0)):
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise ValueError(f"TreeRNNCell: {arg} must be an int >= {low}, got {v!r}")
        if input_size is not None and (isinstance(input_size, bool)
                                       or not isinstance(input_size, int) or input_size <= 0):
            raise ValueError(f"TreeRNNCell: input_size must be a positive int or None, "
                             f"got {input_size!r}")
        if num_children == 0 and input_size is None:
            raise ValueError("TreeRNNCell: a leaf cell (num_children=0) needs input_size")
        self.hidden, self.num_children, self.input_size = hidden, num_children, input_size
        self._dense = keras.layers.Dense(hidden, activation=activation,
                                         name=name or "tree_rnn")
        self._dense.build((None, (input_size or 0) + num_children * hidden))
        vec = TensorType((hidden,))
        super().__init__(input_type=node_input_type(vec, num_children, input_size),
                         output_type=vec, name=name)

    def _keras_layer(self):
        return self._dense

    def _call(self, *args):
        import tensorflow as tf
        x, children = split_node_args(args, self.num_children, self.input_size)
        parts = ([] if x is None else [x]) + list(children)
        return self._dense(parts[0] if len(parts) == 1 else tf.concat(parts, axis=1))


__all__ = ["TreeRNNCell"]
