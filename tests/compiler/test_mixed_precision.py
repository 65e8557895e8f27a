"""Mixed precision (`blocks.evaluation.precision`): the `mixed_float16` and `mixed_bfloat16`
policies train, hold values in the low dtype, keep variables and losses float32,
scale the loss under float16, agree with the reference evaluator under the same
policy and with the float32 run within the low dtype's precision, and save."""

from __future__ import annotations

import functools

import keras
import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import refold as td
from refold.blocks.evaluation.precision import compute_dtype, global_policy
from refold.compiler import Compiler, Model
from refold.scheduler.executor import Executor
from tests.compiler import factories, models
from tests.compiler.test_batched_equals_reference import check_case_batch, engine_for
from tests.compiler.test_model import compiled, sign_data

POLICIES = ["mixed_float16", "mixed_bfloat16"]
# batched against the reference, both in the low dtype: the same roundings but for
# the order of sums (a few units in the last place of float16 / bfloat16)
BATCHED_TOL = {"mixed_float16": 1e-2, "mixed_bfloat16": 6e-2}
# the low dtype against float32: 11 and 8 significant bits, through a few layers
FLOAT32_TOL = {"mixed_float16": 2e-2, "mixed_bfloat16": 1.5e-1}
# a TreeLSTM (models/tree_lstm), the tagger's BiLSTM (models/rnn_cells), a Fold RNN,
# Reduce + OneOf over Map, and a TreeLSTM with a float32 loss metric at every node
CASES = ["tree_lstm", "bidirectional_tagger", "fold_rnn", "reduce_and_oneof",
         "tree_lstm_loss_everywhere"]


@pytest.fixture
def policy(request):
    """Sets the global policy for the test; the previous one is restored after it."""
    before = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(request.param)
    yield request.param
    keras.mixed_precision.set_global_policy(before)


@pytest.fixture
def restore_policy():
    before = keras.mixed_precision.global_policy()
    yield
    keras.mixed_precision.set_global_policy(before)


def make(name: str) -> models.Case:
    return next(f() for f in models.ALL if f.__name__ == f"make_{name}")


@functools.cache
def _engine(name: str, scheduler: str, policy: str):
    """The case and its engine, built once per policy (under it)."""
    c = make(name)
    return c, engine_for(c, scheduler)


@pytest.mark.parametrize("policy", POLICIES, indirect=True)
@pytest.mark.parametrize("scheduler", ["agenda", "depth"])
@pytest.mark.parametrize("name", CASES)
@settings(max_examples=2, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # one policy
@given(data=st.data())
def test_batched_equals_the_reference_under_the_same_policy(name, scheduler, policy, data):
    c, built = _engine(name, scheduler, policy)
    inputs = data.draw(st.lists(c.inputs, min_size=1, max_size=10))
    assert built[0].compute_dtype == policy[len("mixed_"):]
    tol = BATCHED_TOL[policy]
    check_case_batch(c, scheduler, inputs, built, atol=tol, rtol=tol)


def _values_and_grads(built, inputs: list):
    comp, run, weights = built
    plan = comp.plan(inputs)
    outs, _, grads = run(plan.feed.arrays)
    return comp, comp.results(plan, [o.numpy() for o in outs]), [g.numpy() for g in grads]


@functools.cache
def _float32_run(name: str):
    """The float32 values and gradients of `name` on its fixed inputs, computed once
    for both low dtypes (built and run under the float32 policy)."""
    with global_policy("float32"):
        c = make(name)
        return _values_and_grads(engine_for(c, "agenda"), _inputs(name, np.random.default_rng(0)))


def _flat(result) -> list:
    if isinstance(result, np.ndarray):
        return [result]
    if isinstance(result, dict):
        return [a for k in sorted(result) for a in _flat(result[k])]
    return [a for r in result for a in _flat(r)]


@pytest.mark.parametrize("policy", POLICIES, indirect=True)
@pytest.mark.parametrize("name", CASES)
def test_values_and_gradients_match_the_float32_run_within_the_dtype(name, policy):
    inputs = _inputs(name, np.random.default_rng(0))
    # the low run on the batched test's engine of this case (the same seeded weights)
    comp, low, low_grads = _values_and_grads(_engine(name, "agenda", policy)[1], inputs)
    assert comp.compute_dtype == policy[len("mixed_"):]
    comp32, full, full_grads = _float32_run(name)
    assert comp32.compute_dtype is None
    tol = FLOAT32_TOL[policy]
    for a, b in zip(_flat(low), _flat(full)):
        assert a.dtype == b.dtype == np.float32 or a.dtype == b.dtype
        np.testing.assert_allclose(a, b, atol=tol, rtol=tol)
    for g, h in zip(low_grads, full_grads):
        assert g.dtype == np.float32  # the variables' gradients, in their dtype
        np.testing.assert_allclose(g, h, atol=tol * max(1.0, np.abs(h).max()), rtol=tol)
    assert any(np.abs(g).max() > 0 for g in low_grads)


def _inputs(name: str, rng) -> list:
    """Fixed inputs for `name` (the same for both runs)."""
    def tree(depth):
        if depth == 0 or rng.random() < 0.3:
            return int(rng.integers(0, 7))
        return (tree(depth - 1), tree(depth - 1))

    def labelled(depth):
        if depth == 0 or rng.random() < 0.3:
            return {"word": int(rng.integers(0, 7)), "label": int(rng.integers(0, 3))}
        return {"left": labelled(depth - 1), "right": labelled(depth - 1),
                "label": int(rng.integers(0, 3))}

    def vectors(size, n):
        return rng.uniform(-1, 1, (n, size)).round(3).tolist()

    if name == "tree_lstm":
        return [tree(4) for _ in range(8)]
    if name == "tree_lstm_loss_everywhere":
        return [labelled(4) for _ in range(8)]
    if name == "bidirectional_tagger":
        return [vectors(3, int(n)) for n in rng.integers(1, 7, 6)]
    if name == "fold_rnn":
        return [vectors(2, int(n)) for n in rng.integers(0, 7, 6)]
    if name == "reduce_and_oneof":
        return [{"xs": vectors(2, 3)}, {"ys": [0.25, -0.5, 1.0]}, {"xs": vectors(2, 1)},
                {"ys": [2.0]}]
    raise KeyError(name)


# --- training with Model ------------------------------------------------------------

@functools.cache
def _trained(policy: str):
    """`(model, trees, labels, loss before, history)`: a factory-made sign model
    trained under `policy`, once for the fit test and the saving test."""
    with global_policy(policy):
        model = compiled(Model.from_factory("tests.compiler.factories:tree_sign"))
        trees, y = sign_data(48)
        before = model.evaluate(trees, y, verbose=0)[0]
        history = model.fit(trees, y, batch_size=16, epochs=8, verbose=0)
    return model, trees, y, before, history.history


@pytest.mark.parametrize("policy", POLICIES, indirect=True)
def test_fit_trains_under_the_policy_with_float32_variables(policy):
    model, trees, y, before, history = _trained(policy)
    assert model.compiler.compute_dtype == policy[len("mixed_"):]
    assert all(np.isfinite(history["loss"]))
    assert model.evaluate(trees, y, verbose=0)[0] < before
    assert model.weights and all(w.dtype == "float32" for w in model.weights)
    assert model.predict(trees[:3], verbose=0).dtype == np.float32
    scales = isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    assert scales == (policy == "mixed_float16")


@pytest.mark.parametrize("policy", POLICIES, indirect=True)
def test_fold_style_losses_train_and_stay_float32(policy):
    model = Model(factories.labelled_tree_sign())
    model.compile(optimizer=keras.optimizers.Adam(0.05))
    assert model.program.metric_types[0].dtype == "float32"
    trees = [_labelled_sign(t) for t in sign_data(32)[0]]
    history = model.fit(trees, batch_size=8, epochs=6, verbose=0)
    losses = history.history["loss"]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]


def _labelled_sign(t):
    if isinstance(t, tuple):
        left, right = _labelled_sign(t[0]), _labelled_sign(t[1])
        return {"l": left, "r": right, "y": int(left["s"] + right["s"] > 0),
                "s": left["s"] + right["s"]}
    return {"x": t, "y": int(t > 0), "s": t}


def _tiny_loss_model(auto_scale_loss: bool, factor: float = 1e-8,
                     lr: float = 1e6) -> Model:
    """A loss `factor * sum(FC(x))`: at 1e-8 its gradient underflows float16
    (1e-8 / 4 per output)."""
    keras.utils.set_random_seed(0)
    fc = td.FC(4, activation=None)
    tiny = td.Function(lambda h: factor * tf.reduce_sum(tf.cast(h, tf.float32), 1))
    block = td.Vector(3) >> fc >> tiny >> td.Metric("loss") >> td.Void()
    model = Model(block)
    model.compile(optimizer=keras.optimizers.SGD(lr), auto_scale_loss=auto_scale_loss)
    return model


@pytest.mark.parametrize("policy", ["mixed_float16"], indirect=True)
def test_a_step_whose_scaled_gradients_overflow_is_skipped_and_the_scale_lowered(policy):
    # 1e3 / 4 per output, times the initial scale 2**15: beyond float16's 65504
    model = _tiny_loss_model(True, factor=1e3, lr=1e-6)
    xs = [[1.0, 2.0, -1.0], [0.5, -0.5, 1.5], [1.0, 1.0, 1.0], [-2.0, 0.0, 1.0]]
    kernel = model.block_layers[0].kernel
    before = kernel.numpy().copy()
    model.train_on_batch(xs)  # no NonFiniteLossError: the loss itself is finite
    assert float(model.optimizer.dynamic_scale) == 2.0 ** 14
    np.testing.assert_array_equal(kernel.numpy(), before)  # that step was skipped
    for _ in range(12):  # the scale comes down until the gradients fit
        model.train_on_batch(xs)
    assert float(model.optimizer.dynamic_scale) <= 2.0 ** 6
    assert np.abs(kernel.numpy() - before).max() > 0


@pytest.mark.parametrize("policy", ["mixed_float16"], indirect=True)
def test_loss_scaling_keeps_a_gradient_that_float16_would_flush_to_zero(policy):
    xs = [[1.0, 2.0, -1.0], [0.5, -0.5, 1.5], [1.0, 1.0, 1.0], [-2.0, 0.0, 1.0]]
    changed = {}
    for scaled in (True, False):
        model = _tiny_loss_model(scaled)
        kernel = model.block_layers[0].kernel
        before = kernel.numpy().copy()
        model.train_on_batch(xs)
        changed[scaled] = float(np.abs(kernel.numpy() - before).max())
    assert changed[False] == 0.0   # without scaling the float16 gradient is zero
    # with it: the true step, lr * 1e-8 * mean(x) per kernel entry (about 1e-2)
    assert changed[True] > 1e-3


@pytest.mark.parametrize("policy", POLICIES, indirect=True)
def test_a_mixed_model_saves_and_loads(policy, tmp_path):
    model, trees, y, _, _ = _trained(policy)  # trained: the optimizer has its state
    path = str(tmp_path / "mixed.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert loaded.compiler.compute_dtype == policy[len("mixed_"):]
    assert all(w.dtype == "float32" for w in loaded.weights)
    for a, b in zip(loaded.weights, model.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.path)
    # the same function up to the compute dtype's rounding: a trace of another batch
    # size or executor may sum in another order
    tol = BATCHED_TOL[policy]
    np.testing.assert_allclose(loaded.predict(trees, verbose=0),
                               model.predict(trees, verbose=0), atol=tol, rtol=tol)
    assert type(loaded.optimizer) is type(model.optimizer)
    loaded.fit(trees, y, batch_size=8, epochs=1, verbose=0)


@pytest.mark.parametrize("policy", POLICIES, indirect=True)
def test_a_saved_block_expression_keeps_its_layers_policy(policy, tmp_path):
    model = compiled(Model(factories.tree_sign()))
    trees, y = sign_data(16)
    model.fit(trees, y, batch_size=8, epochs=1, verbose=0)
    path = str(tmp_path / "mixed_block.keras")
    model.save(path)
    keras.mixed_precision.set_global_policy("float32")  # the layers carry the policy
    loaded = keras.models.load_model(path, safe_mode=False)
    assert loaded.compiler.compute_dtype == policy[len("mixed_"):]
    assert keras.mixed_precision.global_policy().name == "float32"
    assert type(loaded.optimizer) is type(model.optimizer)
    np.testing.assert_array_equal(loaded.predict(trees, verbose=0),
                                  model.predict(trees, verbose=0))


# --- layers built with a mixed dtype= ------------------------------------------------

@pytest.mark.parametrize("low", ["float16", "bfloat16"])
def test_layers_built_with_a_mixed_dtype_make_the_block_mixed(low, restore_policy):
    keras.utils.set_random_seed(0)
    dense = keras.layers.Dense(2, dtype=f"mixed_{low}")
    block = td.Map(td.Vector(3) >> td.Function(dense)) >> td.Sum()
    assert keras.mixed_precision.global_policy().name == "float32"
    assert compute_dtype(block) == low
    model = Model(block)
    model.compile(optimizer=keras.optimizers.Adam(0.05),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    assert model.dtype_policy.name == f"mixed_{low}"
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer) == \
        (low == "float16")
    xs = [[[1.0, 0.0, 2.0]], [[-1.0, 0.5, 0.0], [0.0, -2.0, 1.0]]] * 4
    model.fit(xs, np.array([1, 0] * 4), batch_size=4, epochs=2, verbose=0)
    np.testing.assert_allclose(model.predict(xs[:2], verbose=0),
                               np.stack([block.eval(x) for x in xs[:2]]),
                               atol=1e-2, rtol=1e-2)


def test_two_low_dtypes_in_one_block_are_refused_naming_both(restore_policy):
    a = keras.layers.Dense(2, dtype="mixed_float16", name="half")
    b = keras.layers.Dense(2, dtype="mixed_bfloat16", name="brain")
    block = td.Vector(2) >> td.Function(a) >> td.Function(b)
    with pytest.raises(ValueError, match="two low precisions.*'half'.*'brain'"):
        Model(block)
    with pytest.raises(ValueError, match="two low precisions"):
        block.eval([1.0, 2.0])


def test_the_float32_policy_changes_nothing(restore_policy):
    keras.mixed_precision.set_global_policy("float32")
    block = factories.tree_sign()
    model = Model(block)
    assert model.compiler.compute_dtype is None
    assert model.compiler.executor.output_dtypes is None
    assert all(t.dtype == "float32" for t in model.compiler.executor.value_types
               if t.dtype.startswith("float"))


@pytest.mark.parametrize("policy", POLICIES, indirect=True)
def test_the_loop_buffers_are_held_in_the_low_dtype_and_metrics_in_float32(policy):
    model = Model(factories.labelled_tree_sign())
    low = policy[len("mixed_"):]
    held = model.compiler.executor.value_types
    declared = model.program.value_types
    metric = set(model.program.metric_types)
    for t, h in zip(declared, held):
        if t.dtype != "float32":
            assert h == t
        elif t in metric:
            assert h.dtype == "float32"
        else:
            assert h.dtype == low and h.shape == t.shape
    assert any(h.dtype == low for h in held)
    lay = model.compiler.executor.layout
    assert any(held[k].dtype == low for k in lay.loop_types)  # the states in the loop


@pytest.mark.parametrize("policy", POLICIES, indirect=True)
def test_weight_gradients_once_per_step_match_the_loop_s_own(policy):
    # scheduler.weight_grads under a mixed policy: the loop ops run again on the held
    # (low-dtype) buffers, their weight gradients come back float32
    c = make("tree_lstm")
    comp = Compiler.create(c.block)
    ex = comp.executor
    batched = Executor(ex.ops, ex.value_types, batched_weight_grads=True,
                       output_dtypes=ex.output_dtypes, feeds=ex.feeds)
    inputs = _inputs("tree_lstm", np.random.default_rng(1))
    arrays = {k: tf.constant(v) for k, v in comp.plan(inputs).feed.arrays.items()}

    def grads(executor):  # traced: the loop's gradient is built in graph mode
        @tf.function(autograph=False)
        def run():
            with tf.GradientTape() as tape:
                outs = executor.compute(arrays)
                loss = tf.add_n([tf.reduce_sum(o) for o in outs if o.dtype == tf.float32])
            return [tf.convert_to_tensor(g) for g in tape.gradient(loss, c.variables)]
        return [g.numpy() for g in run()]

    tol = BATCHED_TOL[policy]
    once, per_iteration = grads(batched), grads(ex)
    with tf.GradientTape():  # the loop's cell defers its weight gradients
        assert batched.launches.deferred_weights(True)
    for g, h in zip(once, per_iteration):
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, h, atol=tol * max(1.0, np.abs(h).max()), rtol=tol)


@pytest.mark.parametrize("policy", POLICIES, indirect=True)
def test_the_sentiment_tree_lstm_trains_and_evaluates_as_its_eval_block(policy):
    from refold.examples.sentiment import __main__ as sentiment
    from refold.examples.sentiment.model import SentimentModel, accuracies, prepare
    from refold.examples.sentiment.treebank import Vocabulary
    from tests.examples.test_sentiment import DULL_BUT_GOOD, GOOD_BUT_DULL, _tree
    trees = [_tree(GOOD_BUT_DULL), _tree(DULL_BUT_GOOD), _tree("(2 (2 very) (2 good))")]
    vocab = Vocabulary.from_trees(trees)
    data = prepare(trees, vocab)
    keras.utils.set_random_seed(0)
    sm = SentimentModel("tree_lstm", len(vocab), embed=5, hidden=6)
    model = Model(sm.train_block)
    model.compile(optimizer=keras.optimizers.Adam(0.05))
    history = model.fit(data * 4, batch_size=4, epochs=5, verbose=0)
    losses = history.history["loss"]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]
    rows = [sm.eval_block.eval(t)[1] for t in data]
    expected = accuracies(np.concatenate([r["node"] for r in rows]),
                          np.concatenate([r["root"] for r in rows]))
    assert sentiment.evaluate(sm, data, batch_size=2) == expected
