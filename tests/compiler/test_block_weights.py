"""`Block.weights`: a user-written block's weights are trained, tracked and saved by `Model`."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import refold as td
from refold.compiler import Model


class Shift(td.Block):
    """`x + b` on scalars, with a learned `b` it declares through `weights()`."""

    def __init__(self, declare: bool = True, variable=None):
        self.b = keras.Variable(0.0, name="shift") if variable is None else variable
        self._declare = declare
        scalar = td.TensorType(())
        super().__init__(input_type=scalar, output_type=scalar)
        self._op = td.Op("shift", lambda x: [x + self.b], [scalar], [scalar])

    def ops(self):
        return [self._op]

    def weights(self):
        return [self.b] if self._declare else []

    def evaluate(self, ctx, x):
        return ctx.op(self._op, [x])[0]


def fitted(shift: Shift) -> Model:
    model = Model(td.Scalar() >> shift)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    model.fit([1.0, 2.0, 3.0], np.array([4.0, 5.0, 6.0]), batch_size=3, epochs=1, verbose=0)
    return model


def test_a_declared_weight_is_trained_and_saved(tmp_path):
    shift = Shift()
    model = fitted(shift)
    # one SGD step on mean((x + b - y)^2) from b = 0: the gradient is -6, b becomes 0.6
    np.testing.assert_allclose(float(shift.b.numpy()), 0.6, rtol=1e-6)
    assert any(w is shift.b for w in model.trainable_weights)
    model.save_weights(tmp_path / "w.weights.h5")
    shift.b.assign(-1.0)
    model.load_weights(tmp_path / "w.weights.h5")
    np.testing.assert_allclose(float(shift.b.numpy()), 0.6, rtol=1e-6)


def test_an_undeclared_weight_is_not_trained():
    shift = Shift(declare=False)
    with pytest.warns(UserWarning) as seen:
        model = fitted(shift)
    messages = [str(w.message) for w in seen]
    assert any("no trainable weights" in m for m in messages)
    # the traced step read it: named, since no block declares it
    assert any("reads weights that no block declares" in m and "shift" in m for m in messages)
    assert float(shift.b.numpy()) == 0.0
    assert not model.trainable_weights


def test_weights_that_keras_cannot_track_are_refused_with_the_block_path():
    with pytest.raises(TypeError, match=r"Pipe\[1\] > Shift: holds a tf.Variable"):
        Model(td.Scalar() >> Shift(variable=tf.Variable(0.0)))
    junk = Shift()
    junk.weights = lambda: ["not a weight"]
    with pytest.raises(TypeError, match=r"Shift: weights\(\) must return .* got str"):
        Model(td.Scalar() >> junk)
