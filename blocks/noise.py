"""Randomness per node: dropout and noise that batched training reproduces exactly.

A random op (`Op(random=True)`: `td.Dropout`, `td.FC` with keep probabilities,
the zoo's cells with dropout, a Keras noise layer in `td.Function`, or
`td.Function(fn, random=True)`) gets, for each node, a key `(example, node)`: the
example's index in its batch and the node's number among that example's random
nodes, counted in evaluation order. The reference evaluator and the batching
engine count alike, so a node has the same key in `block.eval(x, example=i)` as
in a batch where `x` is the i-th input. Every draw is a function of the step's
seed (`blocks.evaluation.training_mode`), the node's key, the draw's number within the op's call
and the element's index: a counter-based hash (TensorFlow's stateless random
ops take one seed per call, and a launch holds many nodes), integer arithmetic
only, so the engine's loop, its replayed backward pass and XLA draw the same bits
the reference evaluator does, with no state and nothing to carry between
iterations. Two nodes of one launch never share a mask; an op run again (the
engine's replayed backward pass) draws the same one.

In inference (`evaluate`, `predict`, `Compiler.run`, `block.eval` by default)
every draw is skipped: `dropout` returns its input.

Functions of one's own draw with `dropout`, `uniform` and `normal` inside a
`td.Function(fn, random=True)`:

>>> import tensorflow as tf
>>> import refold as td
>>> from refold.blocks.evaluation.training_mode import current
>>> def noisy(x):
...     return x + 0.1 * normal(x.shape[1:]) if current().training else x
>>> block = td.Vector(3) >> td.Function(noisy, random=True)
>>> block.eval([1.0, 2.0, 3.0]).tolist()          # inference: no noise
[1.0, 2.0, 3.0]
>>> a = block.eval([1.0, 2.0, 3.0], training=True, seed=7)
>>> b = block.eval([1.0, 2.0, 3.0], training=True, seed=7)
>>> bool((a == b).all()), bool((a != [1.0, 2.0, 3.0]).all())
(True, True)
>>> drop = td.Map(td.Vector(4) >> td.Dropout(0.5))
>>> [m.tolist() for m in drop.eval([[1.0] * 4] * 2, training=True, seed=4)]   # two nodes
[[0.0, 0.0, 2.0, 2.0], [2.0, 2.0, 0.0, 0.0]]
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from refold import compat
from refold.blocks.evaluation.training_mode import current
from refold.blocks.tensors import Function
from refold.blocks.types import TensorType

_call = threading.local()  # .state: the current random op call's (keys, draws, hashed keys)

_M1, _M2 = 0x7FEB352D, 0x846CA68B  # the "lowbias32" integer hash (C. Wellons)
_SALT = 0x9E3779B9
PRE_DRAWN = 4
"""Draws per op call whose seed part is made once per step, outside the engine's loop
(`seed_state`); later draws of a call make theirs where they are drawn."""


@contextlib.contextmanager
def node_keys(keys):
    """Draws made inside are keyed by `keys` (`[n, 2]` int32, one row per node of the
    call; the evaluators pass each random op's keys here). Draws are numbered from 0
    in every call, so an op called again draws the same numbers."""
    before = getattr(_call, "state", None)
    _call.state = [keys, 0, None]  # the keys, the draws so far, their hash (made once)
    try:
        yield
    finally:
        _call.state = before


def _next_draw(what: str):
    """`(the call's keys hashed, [n, 1] uint32; this draw's number)`."""
    state = getattr(_call, "state", None)
    if state is None:
        raise RuntimeError(
            f"{what} was called in training outside a random op: a function that draws "
            "random numbers must say so, td.Function(fn, random=True) (or a layer's "
            "`random` attribute), so that each of its nodes gets a key")
    tf = _tf()
    graph = compat.default_graph()
    if state[2] is None or state[2][0] is not graph:  # once per call (and graph)
        example, node = tf.unstack(_u32(state[0]), 2, axis=1)
        rows = _mix(example * _const(_M2) + node)  # distinct for distinct keys
        state[2] = (graph, tf.expand_dims(rows, 1))
    state[1] += 1
    return state[2][1], state[1] - 1


def _tf():
    import tensorflow as tf
    return tf


def _u32(x):
    tf = _tf()
    x = tf.convert_to_tensor(x)
    if x.dtype == tf.uint32:
        return x
    return tf.bitcast(tf.cast(x, tf.int32), tf.uint32)


_eager_consts: dict = {}  # value -> an eager uint32 constant


def _const(value: int):
    """A uint32 constant, made once per graph (a loop body runs each of its nodes on
    every iteration); kept on the graph, so it goes with it."""
    tf = _tf()
    if tf.executing_eagerly():
        consts = _eager_consts
    else:
        consts = compat.graph_store(compat.default_graph(), "noise_consts")
    got = consts.get(value)
    if got is None:
        got = consts[value] = tf.constant(value, tf.uint32)
    return got


def _mix(h):
    """A bijective avalanche hash of uint32 tensors, elementwise."""
    tf = _tf()
    xor, shift = tf.bitwise.bitwise_xor, tf.bitwise.right_shift
    h = xor(h, shift(h, _const(16))) * _const(_M1)
    h = xor(h, shift(h, _const(15))) * _const(_M2)
    return xor(h, shift(h, _const(16)))


def _np_mix(h: np.ndarray) -> np.ndarray:
    """`_mix` in NumPy (for constants made once)."""
    h = h.astype(np.uint32)
    h ^= h >> np.uint32(16)
    h *= np.uint32(_M1)
    h ^= h >> np.uint32(15)
    h *= np.uint32(_M2)
    return h ^ (h >> np.uint32(16))


@functools.lru_cache(maxsize=256)
def _element_hashes(size: int) -> np.ndarray:
    """uint32 `[1, size]`: each element index hashed (a constant of the traced program)."""
    return _np_mix(np.arange(size, dtype=np.uint32) ^ np.uint32(_SALT))[None]


def _draw_salt(state, draw: int):
    """The seed part of draw number `draw` of a call: a uint32 scalar."""
    tf = _tf()
    return _mix(tf.bitwise.bitwise_xor(state, _const((draw * _SALT + 1) & 0xFFFFFFFF)))


def seed_state(seed) -> tuple:
    """The step's seed (ints, or a 1-D int tensor of static length) hashed: uint32
    scalars, the seed part of a call's first `PRE_DRAWN` draws. Made once per training
    scope (`blocks.evaluation.training_mode.Mode.of`), where it is entered: outside the
    engine's loop."""
    tf = _tf()
    s = tf.reshape(_u32(seed), [-1])
    if s.shape[0] is None:
        raise ValueError("the step's seed must have a static length")
    h = _const(_SALT)
    for i in range(s.shape[0]):
        h = _mix(tf.bitwise.bitwise_xor(h, s[i]))
    return (h,) + tuple(_draw_salt(h, d) for d in range(PRE_DRAWN))


def random_bits(shape: Sequence[int], what: str = "random_bits"):
    """uint32 `[n, *shape]`: per node of the current random op's call (n nodes), its
    own bits, a function of (seed, node key, draw number, element index) only: one
    hash of the node's hashed key plus the element's hashed index mixed with the
    draw's part of the seed (a dozen integer ops a draw: the keys are hashed once per
    call, the seed once per step, the element indices when the step is traced)."""
    tf = _tf()
    mode = current()
    if mode.state is None:
        raise RuntimeError("a random draw in training needs the step's seed: "
                           "training_mode(True, seed=...) (Model.fit gives one)")
    rows, draw = _next_draw(what)
    shape = [int(d) for d in shape]
    salt = mode.state[1 + draw] if draw < PRE_DRAWN else _draw_salt(mode.state[0], draw)
    elements = tf.bitwise.bitwise_xor(tf.constant(_element_hashes(math.prod(shape))), salt)
    return tf.reshape(_mix(rows + elements), [-1, *shape])


def _unit(bits, open_low: bool = False):
    """float32 in [0, 1) (or (0, 1] with `open_low`) from the top 24 bits."""
    tf = _tf()
    top = tf.cast(tf.bitwise.right_shift(bits, tf.constant(8, tf.uint32)), tf.float32)
    return (top + (1.0 if open_low else 0.0)) * (2.0 ** -24)


def uniform(shape: Sequence[int] = ()):
    """float32 `[n, *shape]`, uniform in [0, 1), per node of the current random op
    (in training only: call it where `blocks.evaluation.training_mode.current().training` holds)."""
    return _unit(random_bits(shape, "uniform"))


def normal(shape: Sequence[int] = ()):
    """float32 `[n, *shape]`, standard normal (Box-Muller), per node of the current
    random op (in training only, as `uniform`)."""
    tf = _tf()
    shape = [int(d) for d in shape]
    bits = random_bits([2, *shape], "normal")
    radius = tf.sqrt(-2.0 * tf.math.log(_unit(bits[:, 0], open_low=True)))
    return radius * tf.cos((2.0 * math.pi) * _unit(bits[:, 1]))


def keep_mask(shape: Sequence[int], rate: float, dtype="float32"):
    """`[n, *shape]` of 0 (dropped, with probability `rate`) and `1 / (1 - rate)`."""
    tf = _tf()
    threshold = min(int(round(rate * 2 ** 24)), 2 ** 24 - 1) << 8  # on the top 24 bits
    keep = random_bits(shape, "dropout") >= tf.constant(threshold, tf.uint32)
    return tf.cast(keep, dtype) * tf.cast(1.0 / (1.0 - rate), dtype)


def dropout(x, rate: float, noise_shape: Sequence[int | None] | None = None):
    """`x` (`[n, ...]`, one row per node) with each element zeroed with probability
    `rate` and the others scaled by `1 / (1 - rate)`, in training; `x` in inference.

    Args:
        x: a float tensor whose rows are the current random op's nodes.
        rate: the fraction dropped, in [0, 1).
        noise_shape: per row, the mask's shape (1 where one draw covers a whole
            axis, None for the row's own size); the row's shape by default.
    """
    _check_rate(rate, "dropout")
    if rate == 0 or not current().training:
        return x
    tf = _tf()
    x = tf.convert_to_tensor(x)
    row = list(x.shape[1:])
    shape = row if noise_shape is None else [r if d is None else d
                                             for d, r in zip(noise_shape, row)]
    return x * keep_mask(shape, rate, x.dtype)


def _check_rate(rate: Any, what: str) -> None:
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 <= rate < 1:
        raise ValueError(f"{what}: rate must be a number in [0, 1), got {rate!r}")


# --- Keras' noise layers, drawn per node --------------------------------------------------

def _keras_noise_classes() -> tuple:
    import keras
    layers = keras.layers
    return (layers.Dropout, layers.GaussianNoise, layers.GaussianDropout, layers.AlphaDropout)


def is_keras_noise(layer: Any) -> bool:
    """Whether `layer` is one of Keras' noise layers (`Dropout` and its spatial
    forms, `GaussianNoise`, `GaussianDropout`, `AlphaDropout`), which a `Function`
    or `ScopedLayer` wrapping it draws per node (`keras_noise`) instead of letting
    the layer draw for the whole launch."""
    from refold.blocks.layers import is_keras_layer
    return is_keras_layer(layer) and isinstance(layer, _keras_noise_classes())


def draws_noise(layer: Any) -> bool:
    """Whether a Keras noise layer draws anything (a rate or deviation above 0)."""
    return getattr(layer, "rate", getattr(layer, "stddev", 0)) > 0


def keras_noise(layer: Any, x):
    """What Keras noise layer `layer` computes on `x`, with the draws per node (in
    training; `x` in inference). The layer's own seed is not used: the step's is."""
    import keras
    tf = _tf()
    if not current().training or not draws_noise(layer):
        return x
    x = tf.convert_to_tensor(x)
    row = list(x.shape[1:])
    if isinstance(layer, keras.layers.GaussianNoise):
        return x + tf.cast(layer.stddev * normal(row), x.dtype)
    rate = float(layer.rate)
    if isinstance(layer, keras.layers.GaussianDropout):
        return x * tf.cast(1.0 + math.sqrt(rate / (1.0 - rate)) * normal(row), x.dtype)
    shape = _row_noise_shape(layer, row)
    if isinstance(layer, keras.layers.AlphaDropout):
        alpha_p = -1.6732632423543772 * 1.0507009873554805
        keep = tf.cast(keep_mask(shape, rate) > 0, x.dtype)
        a = ((1 - rate) * (1 + rate * alpha_p ** 2)) ** -0.5
        b = -a * alpha_p * rate
        return a * (x * keep + alpha_p * (1 - keep)) + b
    return x * keep_mask(shape, rate, x.dtype)


def _row_noise_shape(layer, row: list) -> list:
    """Per row, the shape of a Keras dropout layer's mask (spatial forms: one draw
    per feature map)."""
    import keras
    spatial = {keras.layers.SpatialDropout1D: 1, keras.layers.SpatialDropout2D: 2,
               keras.layers.SpatialDropout3D: 3}
    for cls, n in spatial.items():
        if isinstance(layer, cls):
            if getattr(layer, "data_format", "channels_last") == "channels_first":
                return [row[0]] + [1] * n
            return [1] * n + [row[-1]]
    noise_shape = getattr(layer, "noise_shape", None)
    if noise_shape is None:
        return row
    return [r if d is None else int(d) for d, r in zip(list(noise_shape)[1:], row)]


# --- the block ------------------------------------------------------------------------------

class Dropout(Function):
    """Dropout, per node: in training each element of the input is zeroed with
    probability `rate` and the others are scaled by `1 / (1 - rate)`; in
    inference the input passes unchanged.

    Every node draws its own mask (see the module docstring), so `block.eval` with
    the same seed and example index computes what batched training does.
    `td.Function(keras.layers.Dropout(rate))` computes the same.

    Args:
        rate: the fraction of the input's elements dropped, in [0, 1) (Keras'
            convention: `1 - keep_prob`).
        noise_shape: per input row, the mask's shape (1 where one draw covers a
            whole axis, None for the row's own size); the row's shape by default.
        name: a name for the block.

    >>> import refold as td
    >>> block = td.Vector(4) >> td.Dropout(0.5)
    >>> block.eval([1.0, 2.0, 3.0, 4.0]).tolist()      # inference
    [1.0, 2.0, 3.0, 4.0]
    >>> block.eval([1.0, 2.0, 3.0, 4.0], training=True, seed=7).tolist()
    [2.0, 0.0, 6.0, 0.0]
    """

    def __init__(self, rate: float, noise_shape: Sequence[int | None] | None = None,
                 name: str | None = None):
        _check_rate(rate, "Dropout")
        self._rate = float(rate)
        self._noise_shape = None if noise_shape is None else tuple(noise_shape)

        def drop(x):
            return dropout(x, self._rate, self._noise_shape)

        drop.__name__ = "dropout"
        super().__init__(drop, name=name, infer_output_type=False, handles_empty=True,
                         random=self._rate > 0)

    @property
    def rate(self) -> float:
        return self._rate

    def _repr_args(self):
        return {"rate": self._rate}

    def infer_types(self):
        t = self.input_type if self.input_type is not None else self.output_type
        if t is not None:
            if not isinstance(t, TensorType) or not t.dtype.startswith(("float", "bfloat")):
                raise TypeError(f"{self.path}: Dropout takes a float tensor, got {t}")
            if self._noise_shape is not None and len(self._noise_shape) != t.ndim:
                raise TypeError(f"{self.path}: noise_shape {self._noise_shape} has "
                                f"{len(self._noise_shape)} axes, the input {t} has {t.ndim}")
            self.set_input_type(t)
            self.set_output_type(t)


__all__ = ["Dropout", "dropout", "uniform", "normal", "keep_mask", "random_bits",
           "node_keys", "is_keras_noise", "keras_noise"]
