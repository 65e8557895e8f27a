"""`cut_gates` cuts like strided slices and differentiates like them."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from models.gates import cut_gates


@pytest.mark.parametrize("n_gates, width, used", [(1, 3, (0,)), (4, 2, (0, 1, 2, 3)),
                                                  (5, 3, (0, 2, 4)), (3, 1, (1,))])
def test_cut_gates_equal_strided_slices_in_values_and_gradients(n_gates, width, used):
    rng = np.random.default_rng(n_gates * 10 + width)
    z = tf.constant(rng.normal(size=(6, n_gates * width)), tf.float32)
    weights = [rng.normal(size=(6, width)) for _ in range(n_gates)]
    results = []
    for cut in (lambda z: cut_gates(z, n_gates),
                lambda z: [z[:, g * width:(g + 1) * width] for g in range(n_gates)]):
        with tf.GradientTape() as tape:
            tape.watch(z)
            gates = cut(z)
            # a nonlinear loss of some gates only: unused gates get no gradient
            loss = tf.add_n([tf.reduce_sum(tf.tanh(gates[g]) * weights[g]) for g in used])
        results.append([g.numpy() for g in gates] + [tape.gradient(loss, z).numpy()])
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, atol=1e-6)
