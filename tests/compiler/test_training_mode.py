"""`Model` and layers that train differently: `fit`'s training step computes in
training mode (dropout drops, a `training` argument is True), `evaluate`, `predict`,
`Compiler.run` and exports in inference mode; a training step's draws are those of
the reference evaluator with the step's seed; layers that cannot run per node are
refused naming the block path."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import refold as td
from refold.blocks.noise import Dropout
from refold.compiler import Compiler, Model
from tests.compiler.test_model import SCCE

RNG = np.random.default_rng(0)
XS = [RNG.normal(size=(int(n), 3)).astype("float32").tolist() for n in RNG.integers(1, 5, 12)]
YS = np.array([int(np.sum(x) > 0) for x in XS])


def bag_model(noise, wrap, seed: int = 0, lr: float = 0.0, **model_kwargs) -> Model:
    """A bag of vectors: each through `noise` (a Keras layer, wrapped by `wrap`), an FC,
    summed, then logits; compiled with SGD at `lr`."""
    keras.utils.set_random_seed(seed)
    fc, out = td.FC(8, activation="tanh"), td.FC(2, activation=None)
    block = td.Map(td.Vector(3) >> wrap(noise) >> fc) >> td.Sum() >> out
    model = Model(block, **model_kwargs)
    model.compile(optimizer=keras.optimizers.SGD(lr), loss=SCCE)
    return model


WRAPS = {"Function": td.Function, "ScopedLayer": td.ScopedLayer}


@pytest.mark.parametrize("wrap", sorted(WRAPS))
@pytest.mark.parametrize("layer", ["Dropout", "GaussianNoise"])
def test_fit_at_learning_rate_zero_reports_a_loss_evaluate_does_not(layer, wrap):
    noisy = bag_model(getattr(keras.layers, layer)(0.5), WRAPS[wrap])
    fit_loss = noisy.fit(XS, YS, batch_size=4, epochs=1, shuffle=False, verbose=0
                         ).history["loss"][0]
    assert abs(fit_loss - noisy.evaluate(XS, YS, batch_size=4, verbose=0)) > 1e-3
    quiet = bag_model(getattr(keras.layers, layer)(0.0), WRAPS[wrap])
    fit_loss = quiet.fit(XS, YS, batch_size=4, epochs=1, shuffle=False, verbose=0
                         ).history["loss"][0]
    assert fit_loss == pytest.approx(quiet.evaluate(XS, YS, batch_size=4, verbose=0),
                                     rel=1e-6)


def test_predict_is_deterministic_and_equals_block_eval_and_compiler_run():
    model = bag_model(keras.layers.Dropout(0.5), td.Function)
    model.fit(XS, YS, batch_size=4, epochs=1, verbose=0)
    first = model.predict(XS, batch_size=5, verbose=0)
    # no dropout in predict: other batches give the same values, up to float rounding
    # (a product's sums may group differently in batches of another size or executor)
    np.testing.assert_allclose(first, model.predict(XS, batch_size=3, verbose=0), atol=1e-6)
    want = np.stack([model.block.eval(x) for x in XS])
    np.testing.assert_allclose(first, want, atol=1e-5)
    np.testing.assert_allclose(np.stack(Compiler(model.block).run(XS)), want, atol=1e-5)
    np.testing.assert_allclose(model(XS).numpy(), want, atol=1e-5)  # Keras' call: inference


def reference_loss(model, xs, ys, step: int) -> float:
    """The mean cross-entropy of `xs` computed by the reference evaluator in training
    mode with the seed of the model's training step `step`, input i at index i."""
    seed = (model.seed, step, 0)
    logits = np.stack([model.block.eval(x, training=True, seed=seed, example=i)
                       for i, x in enumerate(xs)])
    return float(SCCE(ys, logits))


@pytest.mark.parametrize("cache", [True, False])
def test_each_training_step_draws_what_the_reference_evaluator_draws(cache):
    # cache=False: the batch expands as one graph (its keys written at once); True:
    # cached example graphs, whose keys name their index in each batch anew
    model = bag_model(keras.layers.Dropout(0.4), td.Function, cache=cache, seed=3)
    model.seed = 12345
    for step in range(3):
        batch = slice(4 * step, 4 * step + 4)
        loss = model.train_on_batch(XS[batch], YS[batch])
        assert loss == pytest.approx(reference_loss(model, XS[batch], YS[batch], step),
                                     rel=1e-5)
    assert int(model.optimizer.iterations) == 3


def test_keras_call_with_training_true_drops_and_differentiates_as_the_reference():
    model = bag_model(keras.layers.Dropout(0.4), td.Function, seed=4)
    with tf.GradientTape() as tape:
        logits = model(XS[:4], training=True)
        loss = SCCE(YS[:4], logits)
    assert float(loss) == pytest.approx(reference_loss(model, XS[:4], YS[:4], 0), rel=1e-5)
    assert all(g is not None for g in tape.gradient(loss, model.trainable_weights))
    assert not np.allclose(logits.numpy(), model(XS[:4]).numpy())


def test_set_random_seed_makes_a_whole_fit_repeatable():
    def run():
        model = bag_model(keras.layers.Dropout(0.3), td.Function, seed=5, lr=0.1)
        history = model.fit(XS, YS, batch_size=3, epochs=3, verbose=0).history["loss"]
        return history, [w.numpy() for w in model.weights]
    (h1, w1), (h2, w2) = run(), run()
    assert h1 == h2
    for a, b in zip(w1, w2):
        np.testing.assert_array_equal(a, b)


def test_the_model_seed_changes_the_masks():
    losses = []
    for seed in (0, 1):
        model = bag_model(keras.layers.Dropout(0.5), td.Function, seed=6)
        model.seed = seed
        losses.append(model.train_on_batch(XS[:6], YS[:6]))
    assert losses[0] != losses[1]


def test_a_function_taking_training_gets_the_flag():
    seen = []

    def doubled_in_training(x, training=False):
        seen.append(training)
        return x * 2.0 if training else x

    model = bag_model(doubled_in_training, td.Function)
    fit_loss = model.fit(XS, YS, batch_size=4, epochs=1, shuffle=False, verbose=0
                         ).history["loss"][0]
    assert fit_loss != pytest.approx(model.evaluate(XS, YS, batch_size=4, verbose=0))
    assert True in seen and False in seen
    x = XS[0]
    np.testing.assert_allclose(Compiler(model.block).run([x])[0], model.block.eval(x),
                               atol=1e-6)  # equal up to float rounding; doubled is 2x
    assert not np.allclose(model.block.eval(x, training=True), model.block.eval(x))


def test_no_randomness_costs_nothing():
    # without a random op the program has no key type, constants or seed
    model = bag_model(keras.layers.Dropout(0.0), td.Function)
    assert model.program.key_type is None and model.tracer.seed() is None
    assert td.TensorType((2,), "int32") not in model.program.value_types
    noisy = bag_model(keras.layers.Dropout(0.1), td.Function)
    assert noisy.program.key_type is not None


def test_fit_under_xla_draws_what_the_graph_step_draws():
    losses = {}
    for jit in (False, True):
        model = bag_model(keras.layers.Dropout(0.5), td.Function, seed=7)
        losses[jit] = model.fit(XS, YS, batch_size=6, epochs=2, shuffle=False, verbose=0,
                                jit_compile=jit).history["loss"]
        assert losses[jit][0] != pytest.approx(model.evaluate(XS, YS, batch_size=6,
                                                              verbose=0))
    np.testing.assert_allclose(losses[True], losses[False], rtol=1e-5)


@pytest.mark.parametrize("policy", ["mixed_bfloat16"])
def test_fit_under_a_mixed_policy_draws_what_the_reference_draws(policy):
    before = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(policy)
    try:
        model = bag_model(keras.layers.Dropout(0.4), td.Function, seed=8)
        loss = model.train_on_batch(XS[:5], YS[:5])
        assert loss == pytest.approx(reference_loss(model, XS[:5], YS[:5], 0), rel=2e-2)
        assert loss != pytest.approx(model.evaluate(XS[:5], YS[:5], verbose=0), rel=1e-3)
    finally:
        keras.mixed_precision.set_global_policy(before)


def test_exports_serve_in_inference_mode(tmp_path):
    model = bag_model(keras.layers.Dropout(0.5), td.Function)
    model.fit(XS, YS, batch_size=4, epochs=1, verbose=0)
    path = str(tmp_path / "exported")
    model.export(path, verbose=False)
    serve = tf.saved_model.load(path).signatures["serving_default"]
    arrays = model.packed_inputs(XS)
    out = serve(**{k: tf.constant(v) for k, v in arrays.items()})["output"].numpy()
    np.testing.assert_allclose(out, model.predict(XS, verbose=0), atol=1e-5)


# --- refused: layers that cannot run per node ------------------------------------------------

def test_batch_normalization_is_refused_naming_the_block_path():
    block = td.Map(td.Vector(3) >> td.Function(keras.layers.BatchNormalization(),
                                               name="norm")) >> td.Sum()
    with pytest.raises(ValueError, match=r"Map > Function 'norm'.*"
                                         r"BatchNormalization.*LayerNormalization"):
        Model(block)
    with pytest.raises(ValueError, match="BatchNormalization"):
        block.eval([[1.0, 2.0, 3.0]])
    inside = keras.Sequential([keras.layers.Dense(3), keras.layers.BatchNormalization()])
    with pytest.raises(ValueError, match="BatchNormalization"):
        Compiler(td.Vector(3) >> td.ScopedLayer(inside))
    fine = td.Vector(3) >> td.ScopedLayer(keras.layers.LayerNormalization())
    assert Compiler(fine).run([[1.0, 2.0, 3.0]])[0].shape == (3,)


def test_noise_inside_another_keras_layer_is_refused():
    inside = keras.Sequential([keras.layers.Dense(3), keras.layers.Dropout(0.5)])
    with pytest.raises(ValueError, match=r"Pipe\[1\] > ScopedLayer: layer .sequential.*Dropout"
                                         r".*per launch.*td.Dropout"):
        Model(td.Vector(3) >> td.ScopedLayer(inside))


def test_a_keras_rnn_cell_with_dropout_is_refused_for_the_zoo_s_cells():
    cell = td.ScopedLayer(keras.layers.LSTMCell(4, dropout=0.2))
    with pytest.raises(ValueError, match=r"LSTMCell.*dropout.*refold.models.rnn_cells"):
        Model(td.Map(td.Vector(3)) >> td.RNN(cell) >> td.GetItem(1) >> td.GetItem(0))


def test_a_random_draw_outside_a_random_function_is_refused_in_training():
    from refold.blocks import noise

    block = td.Vector(3) >> td.Function(lambda x: noise.dropout(x, 0.5))
    assert block.eval([1.0, 2.0, 3.0]).tolist() == [1.0, 2.0, 3.0]   # inference: no draw
    with pytest.raises(td.InputError, match="random=True"):
        block.eval([1.0, 2.0, 3.0], training=True, seed=1)


def test_dropout_arguments_are_checked():
    for bad in (-0.1, 1.0, "0.5", True):
        with pytest.raises(ValueError, match="rate"):
            Dropout(bad)
    with pytest.raises(ValueError, match="input_keep_prob"):
        td.FC(3, input_keep_prob=0.0)
    with pytest.raises(TypeError, match="float tensor"):
        td.Scalar("int32") >> Dropout(0.5)
    assert repr(Dropout(0.25)) == "<td.Dropout rate=0.25>"


def test_a_model_with_dropout_saves_and_loads_with_its_rates(tmp_path):
    from refold.models import rnn_cells, tree_lstm
    keras.utils.set_random_seed(9)
    cell = rnn_cells.LSTMCell(4, dropout=0.2, recurrent_dropout=0.3)
    leaf = tree_lstm.leaf_cell(4, 3, dropout=0.1, recurrent_dropout=0.4)
    block = td.Record((td.Map(td.Vector(3)) >> td.RNN(cell) >> td.GetItem(1) >> td.GetItem(0),
                       td.Vector(3) >> leaf >> td.GetItem(0) >> Dropout(0.25))) \
        >> td.Concat() >> td.FC(2, activation=None, input_keep_prob=0.7)
    model = Model(block)
    model.compile(optimizer="sgd", loss=SCCE)
    xs = [([[0.5, 1.0, -1.0]], [1.0, 0.0, 2.0]), ([], [0.0, 1.0, 0.0])]
    model.fit(xs, np.array([0, 1]), epochs=1, verbose=0)
    model.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras")
    np.testing.assert_array_equal(model.predict(xs, verbose=0), loaded.predict(xs, verbose=0))
    assert loaded.program.key_type is not None
    loaded.compile(optimizer=keras.optimizers.SGD(0.0), loss=SCCE)  # weights stay
    assert loaded.train_on_batch(xs, np.array([0, 1])) == pytest.approx(
        reference_loss(loaded, xs, np.array([0, 1]), 0), rel=1e-5)
