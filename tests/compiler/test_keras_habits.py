"""What a Keras user tries first works, or says what to do instead: `model(inputs)` on
a list of Python inputs, and empty data; and `fit`, `evaluate`, `predict` log no warnings."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

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


QUIET_SCRIPT = textwrap.dedent("""
    import logging, sys, warnings
    import keras, numpy as np, tensorflow as tf
    import refold as td

    logged = []
    class Record(logging.Handler):
        def emit(self, record):
            logged.append(f"{record.name}: {record.getMessage()}")
    for name in ("tensorflow", "absl"):
        logging.getLogger(name).addHandler(Record(logging.WARNING))
    warnings.simplefilter("always")

    # a tree whose inner nodes read an int32 (an operator id) inside the loop: the
    # loop's replayed backward pass (small batches) sees an integer argument
    tree = td.ForwardDeclaration(td.PyObjectType(), td.TensorType((8,)), name="tree")
    leaf = td.Scalar() >> td.Function(lambda x: x[:, None]) >> td.FC(8)
    pair = td.Record((td.Scalar("int32"), tree(), tree())) >> td.Function(
        lambda op, a, b: tf.cast(op, a.dtype)[:, None] * a + b) >> td.FC(8)
    tree.resolve_to(td.OneOf(lambda t: isinstance(t, tuple), {False: leaf, True: pair}))
    rng = np.random.default_rng(0)
    def random_tree(depth=3):
        if depth == 0 or rng.random() < 0.3:
            return float(rng.normal())
        return (int(rng.integers(0, 3)), random_tree(depth - 1), random_tree(depth - 1))
    xs = [random_tree() for _ in range(32)]
    ys = np.arange(32) % 2
    model = td.Model(tree() >> td.FC(2, activation=None))
    model.compile(optimizer="adam", metrics=["accuracy"],
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for batch_size in (1, 2, 16):
            model.fit(xs, ys, batch_size=batch_size, epochs=1, verbose=0)
            model.evaluate(xs, ys, batch_size=batch_size, verbose=0)
            model.predict(xs, batch_size=batch_size, verbose=0)
    logged += [f"{w.category.__name__}: {w.message}" for w in caught]
    print("LOGGED", logged)
""")


def test_fit_evaluate_and_predict_log_no_warnings_at_any_batch_size():
    """Python's warnings, TensorFlow's and absl's loggers, and TensorFlow's C++ log (on
    stderr, shown from warnings up): nothing at batch sizes 1, 2 and 16."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="1", PYTHONPATH=root)
    out = subprocess.run([sys.executable, "-c", QUIET_SCRIPT], cwd=root, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "LOGGED []" in out.stdout, out.stdout[-3000:]
    # C++ warnings (W...), and Python's logging and warnings lines; not the notice absl
    # prints before its log is set up, nor TensorFlow's start-up infos and errors
    # (no GPU on this machine)
    warned = [line for line in out.stderr.splitlines()
              if re.match(r"W\d{4} ", line) or re.search(r"WARNING:(?!.*absl::InitializeLog)|"
                                                          r"Warning: ", line)]
    assert not warned, "\n".join(warned)
