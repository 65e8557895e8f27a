"""Recurrent cells as weight-sharing layers: `SimpleRNNCell`, `LSTMCell`, `GRUCell`.

A cell takes `(input, state)` and returns `(output, state)`, so it plugs into
`td.RNN` as it is, and into `td.Fold` through `fold_step(cell)` (a fold's combine
takes `(state, element)` and returns the state). Inputs and outputs are float32
vectors; the state is `h` (simple RNN, GRU) or the pair `(h, c)` (LSTM).

The weights are laid out as Keras lays out its own cells (`kernel` for the input,
`recurrent_kernel` for the state, `bias`; LSTM gates in the order i, f, g, o; GRU
gates z, r, h with separate input and recurrent biases, Keras's `reset_after=True`),
so weights move between these cells and `keras.layers.*Cell` with `set_weights`.
The input size is taken from the first input type the cell meets, or given as
`input_size`. `td.RNN` runs a cell in two halves (`split_recurrence`): the input
projection `x W + b` (`InputProjection`) on every element before the engine's loop,
the rest (`ProjectedCell`) in it.

Dropout, in training only, as Keras' cells name it: `dropout` drops a fraction of the
input `x` before `x W`, `recurrent_dropout` a fraction of the state `h` before `h U`.
Each node (each step of each sequence) draws its own masks (`blocks.noise`), where
Keras draws one pair of masks per sequence; the split cell drops the input in its
projection, before the loop, and the state in the loop.

>>> import refold as td
>>> cell = LSTMCell(4)
>>> encoder = td.Map(td.Vector(3)) >> td.RNN(cell)        # (outputs, final (h, c))
>>> outputs, (h, c) = encoder.eval([[1, 0, 0], [0, 1, 0]])
>>> len(outputs), h.shape, bool((outputs[-1] == h).all())
(2, (4,), True)
>>> [tuple(w.shape) for w in cell.weights]   # kernel, recurrent kernel, bias
[(3, 16), (4, 16), (16,)]
>>> gru = GRUCell(4)
>>> (td.Map(td.Vector(3)) >> td.Fold(fold_step(gru), td.Zeros(gru.state_type))).eval(
...     [[1, 0, 0]]).shape
(4,)
"""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

import refold.blocks as td
from refold.blocks import noise
from refold.blocks.block import block_factory
from refold.blocks.layers import Layer
from refold.blocks.types import ResultType, TensorType, TupleType
from refold.models import gates


class _CellWeights(keras.layers.Layer):
    """Holds a cell's kernel, recurrent kernel and bias (Keras names and layout)."""

    def __init__(self, units: int, gates: int, bias_shape: tuple, unit_forget_bias: bool,
                 name: str | None):
        super().__init__(name=name)
        self.units, self.gates = units, gates
        self.bias_shape, self.unit_forget_bias = bias_shape, unit_forget_bias

    def build(self, input_size: int):
        u, g = self.units, self.gates
        self.kernel = self.add_weight(shape=(input_size, g * u), name="kernel",
                                      initializer="glorot_uniform")
        self.recurrent_kernel = self.add_weight(shape=(u, g * u), name="recurrent_kernel",
                                                initializer="orthogonal")
        bias = "zeros"
        if self.unit_forget_bias:  # LSTM: the forget gate starts open (Jozefowicz et al.)
            def bias(shape, dtype=None):
                return tf.concat([tf.zeros([u]), tf.ones([u]), tf.zeros([2 * u])], 0)
        self.bias = self.add_weight(shape=self.bias_shape, name="bias", initializer=bias)
        self.built = True


class _RecurrentCell(Layer):
    """Shared machinery: argument checks, the types, building weights on first input."""

    _gates = 1
    _stateful_c = False
    handles_empty = True

    def __init__(self, units: int, input_size: int | None = None,
                 activation: Any = "tanh", name: str | None = None, dropout: float = 0.0,
                 recurrent_dropout: float = 0.0):
        kind = type(self).__name__
        if isinstance(units, bool) or not isinstance(units, int) or units <= 0:
            raise ValueError(f"{kind}: units must be a positive int, got {units!r}")
        for arg, rate in (("dropout", dropout), ("recurrent_dropout", recurrent_dropout)):
            if isinstance(rate, bool) or not isinstance(rate, (int, float)) \
                    or not 0 <= rate < 1:
                raise ValueError(f"{kind}: {arg} must be a number in [0, 1), got {rate!r}")
        self.dropout, self.recurrent_dropout = float(dropout), float(recurrent_dropout)
        if input_size is not None and (isinstance(input_size, bool)
                                       or not isinstance(input_size, int) or input_size <= 0):
            raise ValueError(f"{kind}: input_size must be a positive int or None, "
                             f"got {input_size!r}")
        self.units = units
        self.activation = keras.activations.get(activation)
        self._weights = _CellWeights(units, self._gates, self._bias_shape(),
                                     self._stateful_c, name or kind)
        vec = TensorType((units,))
        in_type = None if input_size is None else TupleType(TensorType((input_size,)),
                                                            self.state_type)
        super().__init__(input_type=in_type, output_type=TupleType(vec, self.state_type),
                         name=name)

    def _bias_shape(self) -> tuple:
        return (self._gates * self.units,)

    @property
    def random(self) -> bool:
        """Whether it drops out (`dropout` or `recurrent_dropout` above 0)."""
        return self.dropout > 0 or self.recurrent_dropout > 0

    def _dropped_input(self, x):
        """`x` with `dropout` applied (in training, per node: `blocks.noise`)."""
        return noise.dropout(x, self.dropout) if self.dropout else x

    @property
    def state_type(self) -> ResultType:
        """The type of the state: `h`, or `(h, c)` for an LSTM."""
        vec = TensorType((self.units,))
        return TupleType(vec, vec) if self._stateful_c else vec

    @property
    def kernel(self):
        return self._weights.kernel

    @property
    def recurrent_kernel(self):
        return self._weights.recurrent_kernel

    @property
    def bias(self):
        return self._weights.bias

    def _keras_layer(self):
        return self._weights

    @property
    def projected_type(self) -> TensorType:
        """The type of `x W + b_x`, the input's part of the gates (`InputProjection`)."""
        return TensorType((self._gates * self.units,))

    def _project(self, x):
        """`x W + b_x`: all of the cell that does not depend on the state."""
        x, kernel, bias = self._computed(x, self.kernel, self.bias)
        return self._dropped_input(x) @ kernel + self._input_bias(bias)

    def _input_bias(self, bias):
        """The part of `bias` added to `x W` (all of it, but for the GRU's)."""
        return bias

    def split_recurrence(self) -> tuple | None:
        """`(InputProjection(self), ProjectedCell(self))`, which `td.RNN` runs in
        place of the cell (the projection on every element before the loop); None
        for a subclass that changes `_call` (`projects_input`)."""
        return (InputProjection(self), ProjectedCell(self)) if projects_input(self) else None

    def _recur(self, z_x, state):
        """`(output, state')` from the projected input `z_x` (see `_project`)."""
        raise NotImplementedError

    def _state_product(self, h):
        """`h U`, U the recurrent kernel in the compute dtype (in the engine's loop,
        its gradient reads U transposed once per step: `scheduler.loop_products`),
        `h` with `recurrent_dropout` applied."""
        import tensorflow as tf
        if self.recurrent_dropout:
            h = noise.dropout(h, self.recurrent_dropout)
        return h @ tf.cast(self.recurrent_kernel, self._weights.compute_dtype)

    def _computed(self, *ts) -> list:
        """Tensors and variables `ts` in the cell's compute dtype: float32, or the
        low dtype of a mixed policy it was built under (its variables stay float32;
        reading them cast is how Keras layers compute). Only the variables a call
        uses are read: inside the engine's loop each read is an op per iteration."""
        dtype = self._weights.compute_dtype
        return [tf.cast(t, dtype) for t in ts]

    def infer_types(self):
        t = self.input_type
        if t is not None:
            label = self._label()
            if not isinstance(t, TupleType) or len(t) != 2:
                raise TypeError(f"{label}: expected an (input, state) pair, got {t}")
            self._check_input(t[0], label)
            if t[1] != self.state_type:
                raise TypeError(f"{label}: the state must be {self.state_type}, got {t[1]}")
        super().infer_types()

    def _check_input(self, x, label: str) -> None:
        """Checks an input type `x` and builds the weights for its size."""
        if not isinstance(x, TensorType) or x.ndim != 1 or x.dtype != "float32":
            raise TypeError(f"{label}: the input must be a float32 vector, got {x}")
        if not self._weights.built:
            self._weights.build(x.shape[0])
        elif self.kernel.shape[0] != x.shape[0]:
            raise TypeError(f"{label}: the input must have {self.kernel.shape[0]} items (the "
                            f"kernel's rows), got {x}")


class SimpleRNNCell(_RecurrentCell):
    """The Elman cell: `h' = activation(x W + h U + b)`; `(x, h) -> (h', h')`.

    Args:
        units: the size of the state and output.
        input_size: the size of `x` (inferred from the first input type if None).
        activation: a callable or Keras activation name (tanh by default).
        name: the layer's name.
        dropout: the fraction of the input `x` dropped (per node, in training).
        recurrent_dropout: the fraction of the state `h` dropped where it enters
            the recurrent product `h U` (per node, in training).
    """

    def _call(self, x, h):
        x, h, kernel, bias = self._computed(x, h, self.kernel, self.bias)
        h = self.activation(self._dropped_input(x) @ kernel + self._state_product(h) + bias)
        return h, h

    def _recur(self, z_x, h):
        z_x, h = self._computed(z_x, h)
        h = self.activation(tf.add_n([z_x, self._state_product(h)]))
        return h, h


class LSTMCell(_RecurrentCell):
    """The LSTM cell (Hochreiter and Schmidhuber, with forget gates):
    `(x, (h, c)) -> (h', (h', c'))`.

        i, f, g, o = sigmoid(.), sigmoid(.), activation(.), sigmoid(.)  of  x W + h U + b
        c' = f * c + i * g,    h' = o * activation(c')

    The forget gate's bias starts at 1.

    Args:
        units: the size of `h` and `c`.
        input_size: the size of `x` (inferred from the first input type if None).
        activation: for `g` and the output (tanh by default).
        name: the layer's name.
        dropout: the fraction of the input `x` dropped (per node, in training).
        recurrent_dropout: the fraction of the state `h` dropped where it enters
            the recurrent product `h U` (per node, in training).
    """

    _gates = 4
    _stateful_c = True

    def _call(self, x, state):
        x, h, c, kernel, bias = self._computed(x, *state, self.kernel, self.bias)
        x = self._dropped_input(x)
        if self.activation is keras.activations.tanh:
            # AddN and bias_add: gradients with no broadcasting machinery; the
            # memory update with its own gradient (`gates.lstm_memory`)
            return self._memory(tf.nn.bias_add(tf.add_n([x @ kernel, self._state_product(h)]),
                                               bias), c)
        return self._op_by_op(x @ kernel + self._state_product(h) + bias, c)

    def _recur(self, z_x, state):
        z_x, h, c = self._computed(z_x, *state)
        # AddN: in a differentiated loop body, `+` of two [None, n] tensors also
        # takes the gradient's broadcasting machinery (7 ops an iteration)
        return self._memory(tf.add_n([z_x, self._state_product(h)]), c)

    def _memory(self, z, c):
        """`(h', (h', c'))` from the gates' inputs `z`."""
        if self.activation is keras.activations.tanh:
            h, c = gates.lstm_memory(z, [c], "ifuo")
            return h, (h, c)
        return self._op_by_op(z, c)

    def _op_by_op(self, z, c):
        """The cell op by op from its gates' inputs `z`, differentiated by autodiff
        (any activation)."""
        i, f, g, o = gates.cut_gates(z, 4)
        i, f, g, o = tf.sigmoid(i), tf.sigmoid(f), self.activation(g), tf.sigmoid(o)
        c = f * c + i * g
        h = o * self.activation(c)
        return h, (h, c)


class GRUCell(_RecurrentCell):
    """The GRU cell (Cho et al. 2014), reset gate applied after the recurrent
    matmul: `(x, h) -> (h', h')`.

        z = sigmoid(x W_z + b_z + h U_z + b'_z),  r = sigmoid(x W_r + b_r + h U_r + b'_r)
        n = activation(x W_n + b_n + r * (h U_n + b'_n))
        h' = z * h + (1 - z) * n

    Args:
        units: the size of the state and output.
        input_size: the size of `x` (inferred from the first input type if None).
        activation: for the candidate state (tanh by default).
        name: the layer's name.
        dropout: the fraction of the input `x` dropped (per node, in training).
        recurrent_dropout: the fraction of the state `h` dropped where it enters
            the recurrent product `h U` (per node, in training).
    """

    _gates = 3

    def _bias_shape(self) -> tuple:
        return (2, 3 * self.units)  # input bias, recurrent bias

    def _input_bias(self, bias):
        return bias[0]  # the input bias; bias[1] is added to h U (`_update`)

    def _call(self, x, h):
        x, h, kernel, bias = self._computed(x, h, self.kernel, self.bias)
        return self._update(self._dropped_input(x) @ kernel + self._input_bias(bias), h, bias)

    def _recur(self, from_x, h):
        from_x, h, bias = self._computed(from_x, h, self.bias)
        return self._update(from_x, h, bias)

    def _update(self, from_x, h, bias):
        """The new state from the input's part of the gates, `x W + b_x`."""
        from_h = tf.nn.bias_add(self._state_product(h), bias[1])
        x_z, x_r, x_n = gates.cut_gates(from_x, 3)
        h_z, h_r, h_n = gates.cut_gates(from_h, 3)
        z = tf.sigmoid(tf.add_n([x_z, h_z]))
        r = tf.sigmoid(tf.add_n([x_r, h_r]))
        candidate = self.activation(tf.add_n([x_n, gates.product(r, h_n)]))
        h = gates.interpolate(z, h, candidate)
        return h, h


class CellPair(Layer):
    """Two cells run side by side as one layer:
    `((x_1, x_2), (s_1, s_2)) -> ((o_1, o_2), (s_1', s_2'))`, each cell on its own
    input and state, with its own weights.

    `encoders.bidirectional` runs its forward and backward cells as a pair over
    the sequence zipped with its reverse: the engine then batches both
    directions into one launch per step, instead of one launch per direction
    per step (half the loop iterations, and one op in the loop, not two).

    >>> import refold as td
    >>> pair = CellPair(LSTMCell(2, input_size=3), GRUCell(4, input_size=3))
    >>> pair.output_type[1]    # the two states
    TupleType(TupleType(TensorType((2,), 'float32'), TensorType((2,), 'float32')),
              TensorType((4,), 'float32'))
    >>> len(pair.weights)      # the LSTM's three weights, the GRU's three
    6

    Args:
        first, second: cells (layers taking `(input, state)` and returning
            `(output, state)`).
        name: the layer's name.
    """

    def __init__(self, first: Layer, second: Layer, name: str | None = None):
        for arg, cell in (("first", first), ("second", second)):
            out = cell.output_type if isinstance(cell, Layer) else None
            if not isinstance(out, TupleType) or len(out) != 2:
                raise TypeError(f"CellPair: {arg} must be a cell layer returning "
                                f"(output, state), got {cell!r}")
        self.first, self.second = first, second
        in_type = None
        if first.input_type is not None and second.input_type is not None:
            in_type = self._pair(first.input_type, second.input_type)
        super().__init__(input_type=in_type,
                         output_type=self._pair(first.output_type, second.output_type),
                         name=name)

    @property
    def handles_empty(self) -> bool:
        return self.first.handles_empty is True and self.second.handles_empty is True

    @property
    def random(self) -> bool:
        return getattr(self.first, "random", False) is True or \
            getattr(self.second, "random", False) is True

    @staticmethod
    def _pair(a: TupleType, b: TupleType) -> TupleType:
        return TupleType(TupleType(a[0], b[0]), TupleType(a[1], b[1]))

    def _keras_layers(self) -> list:
        return self.first._keras_layers() + self.second._keras_layers()

    def infer_types(self):
        t = self.input_type
        if t is not None:
            if not (isinstance(t, TupleType) and len(t) == 2 and all(
                    isinstance(p, TupleType) and len(p) == 2 for p in t)):
                raise TypeError(f"{self._label()}: expected ((input_1, input_2), (state_1, "
                                f"state_2)), got {t}")
            self.first.set_input_type(TupleType(t[0][0], t[1][0]))
            self.second.set_input_type(TupleType(t[0][1], t[1][1]))
        super().infer_types()

    def _call(self, inputs, states):
        out_1, state_1 = self.first(inputs[0], states[0])
        out_2, state_2 = self.second(inputs[1], states[1])
        return (out_1, out_2), (state_1, state_2)

    def weight_grads_from_inputs(self, args: list, arg_grads: list) -> dict | None:
        """Both cells' `weight_grads_from_inputs` on their own arguments (flat:
        `[x_1, x_2, state_1..., state_2...]`), or None unless both give theirs."""
        n_1 = len(list(self.first.input_type[1].terminal_types()))  # (input, state)
        parts = (([0], range(2, 2 + n_1)), ([1], range(2 + n_1, len(args))))
        got: dict = {}
        for cell, (x, state) in zip((self.first, self.second), parts):
            fn = getattr(cell, "weight_grads_from_inputs", None)
            pick = [*x, *state]
            mine = fn([args[i] for i in pick], [arg_grads[i] for i in pick]) if fn else None
            if mine is None:
                return None
            for ref, g in mine.items():  # one cell twice: its gradients add
                got[ref] = got[ref] + g if ref in got else g
        return got


class InputProjection(Layer):
    """The input's part of one or more cells' gates, `x -> (x W_1 + b_1, ...)`.

    It does not depend on the state, so an encoder runs it on every element
    before the recurrence (`encoders.bidirectional`, `encoders.sequence_encoder`):
    one launch over all the batch's elements instead of one product per step in
    the loop, where the cells then read it (`ProjectedCell`). It uses the cells'
    own weights.

    >>> import numpy as np
    >>> import refold as td
    >>> cell = LSTMCell(2, input_size=3)
    >>> project = td.Vector(3) >> InputProjection(cell)
    >>> step = td.Record((td.Vector(8), (td.Vector(2), td.Vector(2)))) >> ProjectedCell(cell)
    >>> x, h, c = [1.0, 2.0, 3.0], [0.5, 0.5], [0.0, 1.0]
    >>> whole = td.Record((td.Vector(3), (td.Vector(2), td.Vector(2)))) >> cell
    >>> out, _ = step.eval((project.eval(x), (h, c)))
    >>> bool(np.allclose(out, whole.eval((x, (h, c)))[0], atol=1e-6))
    True
    """

    handles_empty = True

    def __init__(self, *cells: Layer, name: str | None = None):
        if not cells or not all(projects_input(c) for c in cells):
            raise TypeError(f"InputProjection: cells must be SimpleRNNCell, LSTMCell or "
                            f"GRUCell layers, got {cells!r}")
        self.cells = cells
        outs = [c.projected_type for c in cells]
        super().__init__(output_type=outs[0] if len(cells) == 1 else TupleType(*outs),
                         name=name)

    def _keras_layers(self) -> list:
        return [w for c in self.cells for w in c._keras_layers()]

    @property
    def random(self) -> bool:
        """Whether a cell drops its input out (`dropout`)."""
        return any(c.dropout > 0 for c in self.cells)

    def infer_types(self):
        t = self.input_type
        if t is not None:
            for c in self.cells:
                c._check_input(t, self._label())
        super().infer_types()

    def _call(self, x):
        outs = tuple(c._project(x) for c in self.cells)
        return outs[0] if len(outs) == 1 else outs


class ProjectedCell(Layer):
    """A cell reading its input projected (`InputProjection`):
    `(x W + b_x, state) -> (output, state)`, with the cell's weights.

    Args:
        cell: a `SimpleRNNCell`, `LSTMCell` or `GRUCell`.
    """

    handles_empty = True

    def __init__(self, cell: Layer, name: str | None = None):
        if not projects_input(cell):
            raise TypeError(f"ProjectedCell: cell must be a SimpleRNNCell, LSTMCell or "
                            f"GRUCell layer, got {cell!r}")
        self.cell = cell
        super().__init__(input_type=TupleType(cell.projected_type, cell.state_type),
                         output_type=cell.output_type, name=name)

    def _keras_layers(self) -> list:
        return self.cell._keras_layers()

    @property
    def random(self) -> bool:
        """Whether the cell drops its state out (`recurrent_dropout`)."""
        return self.cell.recurrent_dropout > 0

    def _call(self, z_x, state):
        return self.cell._recur(z_x, state)

    def weight_grads_from_inputs(self, args: list, arg_grads: list) -> dict | None:
        """The recurrent kernel's gradient over a batch of calls, `h^T dz`, from the
        arguments (`[z_x, h, ...]`, flat) and their gradients, or None where the cell
        is not of the form `f(z_x + h U)`: there `z_x`'s gradient is the gradient of
        `z`, as nothing but this call reads `z_x` (`InputProjection` makes it for this
        cell alone). The engine then takes the weight gradient once per step with one
        product instead of running the cell again (`blocks.Op.weight_grads`)."""
        cell = self.cell
        if self.random or type(cell)._recur not in _ADDITIVE_RECURRENCES or \
                type(cell)._state_product is not _RecurrentCell._state_product:
            return None
        if arg_grads[0] is None:
            return None
        kernel = cell.recurrent_kernel.value
        h, dz = (tf.cast(t, kernel.dtype) for t in (args[1], arg_grads[0]))
        return {kernel.ref(): tf.matmul(h, dz, transpose_a=True)}


def projects_input(cell: Any) -> bool:
    """Whether `cell` can run as `InputProjection` and `ProjectedCell`: one of the
    library's cells, computing as its class does (a subclass or a patch that
    changes `_call` keeps the whole cell)."""
    return isinstance(cell, _RecurrentCell) and type(cell)._call in _OWN_CALLS


@block_factory
def fold_step(cell: Any) -> td.Block:
    """A `td.Fold` combine block from a cell: `(state, x) -> cell((x, state))[1]`.

    Args:
        cell: a layer or block taking `(input, state)` and returning `(output, state)`.
    """
    return td.AllOf(td.GetItem(1), td.GetItem(0)) >> cell >> td.GetItem(1)


@block_factory
def rnn_outputs(cell: Any) -> td.Block:
    """`td.RNN(cell)`'s outputs only: a sequence of inputs to a sequence of outputs."""
    return td.RNN(cell) >> td.GetItem(0)


_OWN_CALLS = frozenset((SimpleRNNCell._call, LSTMCell._call, GRUCell._call))
# the cells whose recurrence is f(z_x + h U) (the GRU's reset gate multiplies h U)
_ADDITIVE_RECURRENCES = frozenset((SimpleRNNCell._recur, LSTMCell._recur))

__all__ = ["SimpleRNNCell", "LSTMCell", "GRUCell", "CellPair", "InputProjection",
           "ProjectedCell", "projects_input", "fold_step", "rnn_outputs"]
