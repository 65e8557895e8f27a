"""What a Keras user tries first works, or says what to do instead: `model(inputs)` on
a list of Python inputs, and empty data."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import refold as td
from tests.compiler import saving_jobs


@pytest.fixture(scope="module")
def quickstart():
    xs, ys = saving_jobs.trees(12, seed=7)
    return saving_jobs.quickstart_model(seed=3), xs, ys


def test_calling_the_model_on_inputs_gives_predicts_values_as_a_tensor(quickstart):
    model, xs, _ = quickstart
    out = model(xs)
    assert tf.is_tensor(out) and out.shape == (len(xs), 2)
    np.testing.assert_allclose(out.numpy(), model.predict(xs, verbose=0), rtol=1e-6)
    np.testing.assert_allclose(model(xs, training=False).numpy(), out.numpy(), rtol=1e-6)


def test_calling_the_model_is_differentiable(quickstart):
    model, xs, ys = quickstart
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    with tf.GradientTape() as tape:
        loss = loss_fn(ys, model(xs))
    grads = tape.gradient(loss, model.trainable_weights)
    assert all(g is not None and np.isfinite(g).all() for g in grads)
    assert any(np.abs(g).sum() > 0 for g in grads)
    # one SGD step by hand lowers the loss, as the gradient says it should
    for w, g in zip(model.trainable_weights, grads):
        w.assign(w - 0.01 * g)
    assert float(loss_fn(ys, model(xs))) < float(loss)


def test_calling_a_model_whose_output_is_not_one_tensor_says_to_predict():
    block = td.Map(td.Scalar() >> td.Metric("seen")) >> td.Void()
    model = td.Model(td.AllOf(td.Map(td.Scalar()) >> td.Sum(), block))
    with pytest.raises(TypeError, match=r"use model\.predict\(inputs\)"):
        model([[1.0, 2.0]])


def test_calling_the_model_on_one_input_asks_for_a_list(quickstart):
    model, _, _ = quickstart
    with pytest.raises(TypeError, match="inputs must be a list .* got dict"):
        model({"value": 1.0})


@pytest.mark.parametrize("call", ["fit", "evaluate", "predict", "call"])
def test_empty_data_is_a_clear_error(quickstart, call):
    model, _, _ = quickstart
    run = {"fit": lambda: model.fit([], np.zeros(0, int), verbose=0),
           "evaluate": lambda: model.evaluate([], np.zeros(0, int), verbose=0),
           "predict": lambda: model.predict([], verbose=0),
           "call": lambda: model([])}[call]
    with pytest.raises(ValueError, match="is empty: give at least one input"):
        run()
