"""Tree-structured LSTMs (Tai, Socher and Manning, 2015) as blocks.

The state of a node is the pair `(h, c)`, each a float32 vector of `hidden` units
(`state_type(hidden)`). A leaf runs an LSTM step on its input vector with zero
child states; an internal node combines its children's states, with one forget
gate per child:

    i, o, u = sigmoid(W_i [x, h_1..h_N]), sigmoid(...), tanh(...)
    f_k = sigmoid(W_f [x, h_1..h_N] + b_f)            (one per child k)
    c = i * u + sum_k f_k * c_k,   h = o * tanh(c)

`NaryTreeLSTMCell(hidden, n)` takes a tuple of `n` child states (plus an optional
input vector); `leaf_cell` is the `n = 0` case on an input vector.

>>> import blocks as td
>>> cell = NaryTreeLSTMCell(4, num_children=2)
>>> node = td.Record((td.Zeros(state_type(4)), td.Zeros(state_type(4)))) >> cell
>>> node.output_type == state_type(4)
True
"""

from __future__ import annotations

from blocks.layers import Layer
from blocks.types import TensorType, TupleType


def state_type(hidden: int) -> TupleType:
    """The type of a TreeLSTM state `(h, c)`."""
    return TupleType(TensorType((hidden,)), TensorType((hidden,)))


class NaryTreeLSTMCell(Layer):
    """The N-ary TreeLSTM cell: `(state_1, ..., state_N) -> state` or, with
    `input_size`, `(x, (state_1, ..., state_N)) -> state`.

    With `num_children=0` it is a leaf cell, `x -> state`.

    Args:
        hidden: the number of units of `h` and `c`.
        num_children: N, the number of children (0 for a leaf cell).
        input_size: the size of an input vector read at the node (required for
            leaf cells), or None for none.
        forget_bias: added to the forget gates' bias at initialisation.
        name: the layer's name.
    """

    def __init__(self, hidden: int, num_children: int = 2, input_size: int | None = None,
                 forget_bias: float = 1.0, name: str | None = None):
        import keras
        if num_children == 0 and input_size is None:
            raise ValueError("a leaf cell (num_children=0) needs input_size")
        self.hidden = hidden
        self.num_children = num_children
        self.input_size = input_size
        n_in = (input_size or 0) + num_children * hidden
        n_gates = 3 + num_children  # i, o, u and one forget gate per child
        self._dense = keras.layers.Dense(n_gates * hidden, name=name or "tree_lstm")
        self._dense.build((None, n_in))
        if num_children and forget_bias:
            b = self._dense.bias.numpy()
            b[3 * hidden:] += forget_bias
            self._dense.bias.assign(b)
        state = state_type(hidden)
        children = TupleType(*([state] * num_children))
        if num_children == 0:
            in_type = TensorType((input_size,))
        elif input_size is None:
            in_type = children
        else:
            in_type = TupleType(TensorType((input_size,)), children)
        super().__init__(input_type=in_type, output_type=state, name=name)

    def _keras_layer(self):
        return self._dense

    def _call(self, *args):
        import tensorflow as tf
        H = self.hidden  # noqa: N806
        if self.num_children == 0:
            x, states = args[0], ()
        elif self.input_size is None:
            x, states = None, args
        else:
            x, states = args
        hs = [s[0] for s in states]
        cs = [s[1] for s in states]
        inputs = ([x] if x is not None else []) + hs
        z = self._dense(inputs[0] if len(inputs) == 1 else tf.concat(inputs, axis=1))
        i = tf.sigmoid(z[:, :H])
        o = tf.sigmoid(z[:, H:2 * H])
        u = tf.tanh(z[:, 2 * H:3 * H])
        c = i * u
        for k, c_k in enumerate(cs):
            c = c + tf.sigmoid(z[:, (3 + k) * H:(4 + k) * H]) * c_k
        h = o * tf.tanh(c)
        return h, c


def leaf_cell(hidden: int, input_size: int, name: str | None = None) -> NaryTreeLSTMCell:
    """A leaf TreeLSTM cell: `x -> (h, c)`."""
    return NaryTreeLSTMCell(hidden, num_children=0, input_size=input_size, name=name)


def binary_cell(hidden: int, name: str | None = None) -> NaryTreeLSTMCell:
    """A binary TreeLSTM cell: `((h_l, c_l), (h_r, c_r)) -> (h, c)`."""
    return NaryTreeLSTMCell(hidden, num_children=2, name=name)
