"""Tree-structured LSTMs (Tai, Socher and Manning, 2015) as blocks.

The state of a node is the pair `(h, c)`, each a float32 vector of `hidden` units
(`state_type(hidden)`).

**N-ary** (`NaryTreeLSTMCell`, `leaf_cell`, `binary_cell`): a node has exactly N
ordered children, each with its own weights, and one forget gate per child; every
gate sees the input and all the children's `h`:

    i, o, u = sigmoid(W_i [x, h_1..h_N] + b_i), sigmoid(W_o [..] + b_o), tanh(W_u [..] + b_u)
    f_k = sigmoid(W_fk [x, h_1..h_N] + b_fk)            (one per child k)
    c = i * u + sum_k f_k * c_k,   h = o * tanh(c)

A leaf is the `N = 0` case on an input vector.

**Child-sum** (`ChildSumTreeLSTMCell`): any number of unordered children (none for
a leaf); the gates see the sum of the children's `h`, and each child's forget gate
sees that child's `h`:

    h~ = sum_k h_k
    i, o, u = sigmoid(W_i x + U_i h~ + b_i), sigmoid(..o..), tanh(..u..)
    f_k = sigmoid(W_f x + U_f h_k + b_f)
    c = i * u + sum_k f_k * c_k,   h = o * tanh(c)

Its input is `(x, children)`: a vector and a *sequence* of child states.

Dropout, in training only, per node (`blocks.noise`): `dropout` drops a fraction of
the input `x`; `recurrent_dropout` a fraction of the candidate update `u` before it
enters the memory, `c = i * drop(u) + sum_k f_k * c_k` (Semeniuta et al. 2016,
"Recurrent dropout without memory loss"; the recurrent dropout of Fold's sentiment
model), so the children's memories pass on untouched.

>>> import refold as td
>>> cell = NaryTreeLSTMCell(4, num_children=2)
>>> node = td.Record((td.Zeros(state_type(4)), td.Zeros(state_type(4)))) >> cell
>>> node.output_type == state_type(4)
True
>>> child_sum = ChildSumTreeLSTMCell(4, input_size=3)
>>> child_sum.input_type
TupleType(TensorType((3,), 'float32'), SequenceType(TupleType(TensorType((4,), 'float32'),
          TensorType((4,), 'float32'))))
>>> tree = td.ForwardDeclaration(td.PyObjectType(), state_type(4))
>>> tree.resolve_to(td.Record((td.Vector(3), td.Map(tree()))) >> child_sum)  # node: (x, kids)
>>> h, c = tree().eval(([1, 2, 3], [([0, 1, 0], []), ([1, 1, 1], []), ([0, 0, 1], [])]))
>>> h.shape, c.shape
((4,), (4,))
"""

from __future__ import annotations

from typing import Any

import refold.blocks as td
from refold.blocks import noise
from refold.blocks.block import Block
from refold.blocks.evaluation.training_mode import current
from refold.blocks.layers import Layer
from refold.blocks.types import SequenceType, TensorType, TupleType
from refold.models import gates
from refold.models.nodes import node_input_type, split_node_args


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
        dropout: the fraction of the input vector `x` dropped (per node, in
            training); a cell without input has none to drop.
        recurrent_dropout: the fraction of the candidate update `u` dropped before
            it enters the memory, `c = i * drop(u) + sum_k f_k * c_k` (Semeniuta et
            al. 2016, "Recurrent dropout without memory loss"; Fold's sentiment
            model's recurrent dropout): the children's memories pass untouched.
    """

    handles_empty = True

    def __init__(self, hidden: int, num_children: int = 2, input_size: int | None = None,
                 forget_bias: float = 1.0, name: str | None = None, dropout: float = 0.0,
                 recurrent_dropout: float = 0.0):
        import keras
        _check_positive("hidden", hidden)
        self.dropout = _check_rate("dropout", dropout)
        self.recurrent_dropout = _check_rate("recurrent_dropout", recurrent_dropout)
        if isinstance(num_children, bool) or not isinstance(num_children, int) \
                or num_children < 0:
            raise ValueError(f"num_children must be an int >= 0, got {num_children!r}")
        if input_size is not None:
            _check_positive("input_size", input_size)
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
        super().__init__(input_type=node_input_type(state, num_children, input_size),
                         output_type=state, name=name)

    def _keras_layer(self):
        return self._dense

    @property
    def random(self) -> bool:
        """Whether it drops out (`dropout` on an input, or `recurrent_dropout`)."""
        return (self.dropout > 0 and self.input_size is not None) or self.recurrent_dropout > 0

    def _call(self, *args):
        import tensorflow as tf
        x, states = split_node_args(args, self.num_children, self.input_size)
        hs = [s[0] for s in states]
        cs = [s[1] for s in states]
        dense = self._dense
        dtype = dense.compute_dtype  # the low dtype under a mixed policy
        if x is not None and self.dropout:
            x = noise.dropout(tf.cast(x, dtype), self.dropout)
        inputs = [tf.cast(t, dtype) for t in ([x] if x is not None else []) + hs]
        bias = tf.cast(dense.bias, dtype)
        # bias_add, not the Dense layer's broadcasting +: its gradient is one
        # BiasAddGrad, not shapes, BroadcastGradientArgs, Sum and Reshape per launch;
        # in the engine's loop, the product's gradient reads the kernel transposed
        # once per step (scheduler.loop_products)
        x = inputs[0] if len(inputs) == 1 else tf.concat(inputs, axis=1)
        z = tf.nn.bias_add(x @ tf.cast(dense.kernel, dtype), bias)
        cs = [tf.cast(c_k, dtype) for c_k in cs]
        return gates.lstm_memory(z, cs, "iou" + "f" * len(cs),
                                 _update_mask(self.recurrent_dropout, self.hidden, dtype))


def _update_mask(rate: float, hidden: int, dtype):
    """The candidate update's dropout mask `[n, hidden]`, or None (no dropout, or
    inference)."""
    if not rate or not current().training:
        return None
    return noise.keep_mask([hidden], rate, dtype)


def leaf_cell(hidden: int, input_size: int, name: str | None = None, dropout: float = 0.0,
              recurrent_dropout: float = 0.0) -> NaryTreeLSTMCell:
    """A leaf TreeLSTM cell: `x -> (h, c)` (dropouts: `NaryTreeLSTMCell`)."""
    return NaryTreeLSTMCell(hidden, num_children=0, input_size=input_size, name=name,
                            dropout=dropout, recurrent_dropout=recurrent_dropout)


def binary_cell(hidden: int, name: str | None = None,
                recurrent_dropout: float = 0.0) -> NaryTreeLSTMCell:
    """A binary TreeLSTM cell: `((h_l, c_l), (h_r, c_r)) -> (h, c)` (its
    `recurrent_dropout`: `NaryTreeLSTMCell`)."""
    return NaryTreeLSTMCell(hidden, num_children=2, name=name,
                            recurrent_dropout=recurrent_dropout)


def nary_cell(hidden: int, num_children: int, input_size: int | None = None,
              name: str | None = None, dropout: float = 0.0,
              recurrent_dropout: float = 0.0) -> NaryTreeLSTMCell:
    """An N-ary TreeLSTM cell: `(state_1, ..., state_N) -> (h, c)`, or
    `(x, (state_1, ..., state_N)) -> (h, c)` with `input_size` (dropouts:
    `NaryTreeLSTMCell`)."""
    return NaryTreeLSTMCell(hidden, num_children=num_children, input_size=input_size,
                            name=name, dropout=dropout, recurrent_dropout=recurrent_dropout)


class _ChildSumGates(Layer):
    """`(x, h~, sum_k f_k * c_k) -> (h, c)`: the input, output and update gates (the
    update dropped out at `recurrent_dropout`)."""

    handles_empty = True

    def __init__(self, hidden: int, input_size: int, name: str | None,
                 recurrent_dropout: float = 0.0):
        import keras
        self.hidden = hidden
        self.recurrent_dropout = recurrent_dropout
        self.dense = keras.layers.Dense(3 * hidden, name=f"{name or 'child_sum'}_iou")
        self.dense.build((None, input_size + hidden))
        vec = TensorType((hidden,))
        super().__init__(input_type=TupleType(TensorType((input_size,)), vec, vec),
                         output_type=state_type(hidden), name=name)

    def _keras_layer(self):
        return self.dense

    @property
    def random(self) -> bool:
        return self.recurrent_dropout > 0

    def _call(self, x, h_sum, fc_sum):
        import tensorflow as tf
        z = self.dense(tf.concat([x, h_sum], axis=1))
        i, o, u = gates.cut_gates(z, 3)
        i, o, u = tf.sigmoid(i), tf.sigmoid(o), tf.tanh(u)
        if self.recurrent_dropout:
            u = noise.dropout(u, self.recurrent_dropout)
        c = i * u + fc_sum
        return o * tf.tanh(c), c


class _ChildSumForget(Layer):
    """`(W_f x + b_f, (h_k, c_k)) -> f_k * c_k`: one child's gated memory.

    The forget gate `f_k = sigmoid(W_f x + U_f h_k + b_f)` has one kernel
    `[W_f; U_f]` (`[input_size + hidden, hidden]`); its input part is computed once
    per node by `input_part` (a second layer on the same weights), not per child.
    """

    handles_empty = True

    def __init__(self, hidden: int, input_size: int, forget_bias: float, name: str | None):
        import keras
        self.input_size = input_size
        self.dense = keras.layers.Dense(hidden, name=f"{name or 'child_sum'}_forget")
        self.dense.build((None, input_size + hidden))
        if forget_bias:
            self.dense.bias.assign(self.dense.bias.numpy() + forget_bias)
        vec = TensorType((hidden,))
        super().__init__(input_type=TupleType(vec, state_type(hidden)), output_type=vec,
                         name=name)
        self.input_part = _ChildSumForgetInput(self)

    def _keras_layer(self):
        return self.dense

    def _call(self, wx, state):
        import tensorflow as tf
        dtype = self.dense.compute_dtype  # the low dtype under a mixed policy
        wx, h, c = (tf.cast(t, dtype) for t in (wx, *state))
        u = tf.cast(self.dense.kernel[self.input_size:], dtype)
        return tf.sigmoid(wx + tf.matmul(h, u)) * c


class _ChildSumForgetInput(Layer):
    """`x -> W_f x + b_f`: the forget gate's input part, shared by all children."""

    handles_empty = True

    def __init__(self, forget: _ChildSumForget):
        self.forget = forget
        super().__init__(input_type=TensorType((forget.input_size,)),
                         output_type=forget.output_type, name=forget.name)

    def _keras_layer(self):
        return self.forget.dense

    def _call(self, x):
        import tensorflow as tf
        dense = self.forget.dense
        kernel, bias = (tf.cast(w, dense.compute_dtype)
                        for w in (dense.kernel[:self.forget.input_size], dense.bias))
        return tf.matmul(tf.cast(x, dense.compute_dtype), kernel) + bias


class ChildSumTreeLSTMCell(Block):
    """The child-sum TreeLSTM cell: `(x, children) -> (h, c)`, where `children` is a
    sequence (any length, empty for a leaf) of child states `(h_k, c_k)`.

    It is a block (it contains a `Map` and `Sum`s over the children), so it is used
    in one place; `shared()` gives another block with the same weights.

    Args:
        hidden: the number of units of `h` and `c`.
        input_size: the size of the input vector `x` read at every node.
        forget_bias: added to the forget gate's bias at initialisation.
        name: a name for the block and its weights.
        dropout: the fraction of the input vector `x` dropped (per node, in
            training; one mask for the gates and the forget gates).
        recurrent_dropout: the fraction of the candidate update `u` dropped before
            it enters the memory, `c = i * drop(u) + sum_k f_k * c_k` (Semeniuta et
            al. 2016): the children's memories pass untouched.

    Attributes:
        variables: the gates' kernel and bias, then the forget gate's. (Its layers
            are declared to a `Model` by the `Function` blocks inside it, so its
            `weights()` is `Block`'s.)
        gates: the layer computing i, o, u from `[x, h~]` (kernel `[input_size +
            hidden, 3 * hidden]`, columns i, o, u).
        forget: the layer computing a child's forget gate from `[x, h_k]` (kernel
            `[input_size + hidden, hidden]`).
    """

    def __init__(self, hidden: int, input_size: int, forget_bias: float = 1.0,
                 name: str | None = None, _layers: tuple | None = None, dropout: float = 0.0,
                 recurrent_dropout: float = 0.0):
        _check_positive("hidden", hidden)
        _check_positive("input_size", input_size)
        self.hidden, self.input_size, self.forget_bias = hidden, input_size, forget_bias
        self.dropout = _check_rate("dropout", dropout)
        recurrent_dropout = _check_rate("recurrent_dropout", recurrent_dropout)
        if _layers is None:
            _layers = (_ChildSumGates(hidden, input_size, name, recurrent_dropout),
                       _ChildSumForget(hidden, input_size, forget_bias, name))
        self.gates, self.forget = _layers
        self.recurrent_dropout = self.gates.recurrent_dropout
        x, kids = td.GetItem(0), td.GetItem(1)
        h_sum = td.GetItem(1) >> td.Map(td.GetItem(0)) >> td.Sum()
        fc_sum = (td.AllOf(x >> td.Function(self.forget.input_part) >> td.Broadcast(), kids)
                  >> td.Zip() >> td.Map(td.Function(self.forget)) >> td.Sum())
        body = td.AllOf(td.GetItem(0), h_sum, fc_sum) >> self.gates
        if self.dropout:  # x dropped once, for the gates and every child's forget gate
            body = td.AllOf(td.GetItem(0) >> td.Dropout(self.dropout), td.GetItem(1)) >> body
        in_type = TupleType(TensorType((input_size,)), SequenceType(state_type(hidden)))
        super().__init__([body], input_type=in_type, output_type=state_type(hidden),
                         name=name)

    def shared(self) -> ChildSumTreeLSTMCell:
        """Another cell block with the same weights (for a second place in a model)."""
        return ChildSumTreeLSTMCell(self.hidden, self.input_size, self.forget_bias,
                                    name=self._name, _layers=(self.gates, self.forget),
                                    dropout=self.dropout)

    @property
    def variables(self) -> list:
        """The variables: the gates' kernel and bias, then the forget gate's.

        (Not `weights`: that is `Block.weights()`, the method through which
        `compiler.Model` collects what to train; this block's sub-blocks declare
        its layers there.)
        """
        return self.gates.weights + self.forget.weights

    def _repr_args(self):
        return {"hidden": self.hidden, "input_size": self.input_size}

    def infer_types(self):
        body = self._children[0]
        body.set_input_type(self.input_type)
        body.set_output_type(self.output_type)

    def evaluate(self, ctx, x):
        return self._children[0].eval_in(ctx, x)

    def dataflow(self) -> td.DataFlow:
        """What it wraps reads the input; the output is its."""
        body = self._children[0]
        return td.DataFlow({body: [td.DataFlow.INPUT], td.DataFlow.OUTPUT: [body]})


def child_sum_cell(hidden: int, input_size: int, name: str | None = None,
                   dropout: float = 0.0, recurrent_dropout: float = 0.0
                   ) -> ChildSumTreeLSTMCell:
    """A child-sum TreeLSTM cell: `(x, [(h_1, c_1), ..., (h_K, c_K)]) -> (h, c)`, K >= 0
    (dropouts: `ChildSumTreeLSTMCell`)."""
    return ChildSumTreeLSTMCell(hidden, input_size, name=name, dropout=dropout,
                                recurrent_dropout=recurrent_dropout)


def _check_positive(arg: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{arg} must be a positive int, got {value!r}")


def _check_rate(arg: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise ValueError(f"{arg} must be a number in [0, 1), got {value!r}")
    return float(value)
