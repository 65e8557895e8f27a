"""Bad data cannot silently spoil training: refused before the first step, or the
step that meets it stops `fit` with the weights of the last good step."""

from __future__ import annotations

import re

import keras
import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

import refold as td
from refold.blocks.errors import InputError
from refold.compiler import Compiler, Model, NonFiniteLossError
from tests.compiler import factories


def trees_and_signs(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    trees = []
    for _ in range(n):
        leaves = [float(np.round(v, 2)) for v in rng.normal(size=int(rng.integers(1, 4)))]
        tree = leaves[0]
        for leaf in leaves[1:]:
            tree = (tree, leaf)
        trees.append(tree)
    signs = np.array([int(sum(_leaves(t)) > 0) for t in trees])
    return trees, signs


def _leaves(t):
    return _leaves(t[0]) + _leaves(t[1]) if isinstance(t, tuple) else [t]


def sign_model(**compile_kwargs) -> Model:
    model = Model(factories.tree_sign())
    compile_kwargs.setdefault("loss", keras.losses.SparseCategoricalCrossentropy(
        from_logits=True))
    model.compile(optimizer=keras.optimizers.Adam(0.05), **compile_kwargs)
    return model


def weights_of(model: Model) -> list[np.ndarray]:
    return [w.numpy().copy() for w in model.weights]


def assert_weights_unchanged(model: Model, before: list[np.ndarray]) -> None:
    after = weights_of(model)
    assert len(after) == len(before)
    for a, b in zip(after, before):
        np.testing.assert_array_equal(a, b)


# --- A. strict inputs, through the engine -----------------------------------------------


@pytest.mark.parametrize("bad_leaf, reason", [
    ("3.5", "a string is not a number"),
    (float("nan"), "nan is not finite"),
    (float("inf"), "inf is not finite"),
    (1e39, "1e+39 overflows float32"),
])
def test_the_engine_refuses_a_bad_leaf_naming_the_example_and_block(bad_leaf, reason):
    c = Compiler.create(factories.tree_sign())
    with pytest.raises(InputError) as err:
        c.run([(1.0, 2.0), -0.5, ((0.5, bad_leaf), 1.0)])
    assert err.value.example_index == 2
    assert err.value.block_path.endswith("Scalar")
    assert reason in err.value.reason


def test_the_engine_refuses_a_tuple_of_three_for_a_pair():
    c = Compiler.create(factories.tree_sign())
    with pytest.raises(InputError) as err:
        c.run([(1.0, 2.0), (1.0, 2.0, 3.0)])
    assert err.value.example_index == 1
    assert err.value.block_path.endswith("Record")
    assert "expected a tuple of 2 items (one per field), got 3" in err.value.reason


def test_the_engine_refuses_a_fractional_id():
    block = td.Map(td.Scalar("int32") >> td.Embedding(10, 2)) >> td.Sum()
    c = Compiler.create(block)
    with pytest.raises(InputError) as err:
        c.run([[1, 2], [3, 2.7]])
    assert err.value.example_index == 1
    assert "2.7 is not an integer (int32)" in err.value.reason


def _bag_of_words(num_words: int = 10):
    words = td.Map(td.Scalar("int32") >> td.Embedding(num_words, 2, name="words"))
    return td.Record({"words": words}) >> td.GetItem(0) >> td.Sum() >> td.FC(2, name="out")


@pytest.mark.parametrize("cache", [True, False])
@pytest.mark.parametrize("grouped", [False, True])
def test_the_engine_refuses_an_embedding_id_outside_its_table(cache, grouped):
    # each example's graph (cache) or the batch's one graph (no cache, grouped)
    c = Compiler.create(_bag_of_words(), cache=cache)
    batch = [{"words": [1, 2]}, {"words": [9, 0]}, {"words": [3, 13, 4]}, {"words": [-3]}]
    with pytest.raises(InputError) as err:
        c.plan(batch, grouped=grouped)
    assert err.value.example_index == 2
    assert err.value.data_path == "['words'][1]"
    assert err.value.block_path == "Pipe[0] > Record['words'] > Map > Embedding 'words'"
    assert err.value.reason.startswith("id 13 is not in [0, 10) (")
    with pytest.raises(InputError, match=r"^example 0 at \['words'\]\[0\]: .*id -3 is not in"):
        c.run(batch[3:])
    assert len(c.run(batch[:2])) == 2


@settings(max_examples=10, deadline=None)
@given(st.lists(st.lists(st.integers(0, 9), max_size=4), min_size=1, max_size=8),
       st.data())
def test_any_bad_id_in_a_batch_is_named_by_eval_and_the_engine_alike(batch, data):
    block = _bag_of_words()
    c = Compiler.create(block)
    assert len(c.run([{"words": w} for w in batch])) == len(batch)
    at = data.draw(st.integers(0, len(batch) - 1))
    bad = data.draw(st.one_of(st.integers(-50, -1), st.integers(10, 2**31 - 1)))
    words = batch[at] + [bad]
    with pytest.raises(InputError) as one:
        block.eval({"words": words})
    batch = [{"words": w} for w in batch[:at] + [words] + batch[at + 1:]]
    for grouped in (False, True):
        with pytest.raises(InputError) as batched:
            c.plan(batch, grouped=grouped)
        assert batched.value.example_index == at
        assert (batched.value.block_path, batched.value.reason, batched.value.data_path) == (
            one.value.block_path, one.value.reason, one.value.data_path)
        assert f"id {bad} is not in [0, 10)" in batched.value.reason


@settings(max_examples=6, deadline=None)
@given(st.integers(0, 599), st.one_of(st.integers(-50, -1), st.integers(10, 2**31 - 1)))
def test_a_bad_id_in_a_large_input_is_named_by_eval_and_the_engine_alike(at, bad):
    # 600 lookups: past the first 256, eval defers its calls (blocks.evaluation.deferred);
    # a bad id there is named as op by op
    block = _bag_of_words()
    words = [i % 10 for i in range(600)]
    words[at] = bad
    with pytest.raises(InputError) as one:
        block.eval({"words": words})
    with pytest.raises(InputError) as batched:
        Compiler.create(block).plan([{"words": [1]}, {"words": words}])
    assert batched.value.example_index == 1
    assert (batched.value.block_path, batched.value.reason, batched.value.data_path) == (
        one.value.block_path, one.value.reason, one.value.data_path)
    assert one.value.data_path == f"['words'][{at}]"


def _deep_chain(depth: int, bad_at: int | None = None, bad=None):
    """A chain of pairs `depth` deep, `((leaf, 1.0), 1.0)...`; with `bad_at`, the right
    leaf of the pair at that depth (from the root, 0) is `bad`."""
    tree = 0.5
    for d in reversed(range(depth)):
        tree = (tree, bad if d == bad_at else 1.0)
    return tree


@settings(max_examples=3, deadline=None)
@given(st.integers(200, 800), st.data())
def test_a_bad_leaf_deep_in_a_deep_input_is_named_by_eval_and_the_engine_alike(depth, data):
    # deep inputs evaluate (no recursion limit) and a bad leaf anywhere in them is named
    block = factories.tree_sign()
    at = data.draw(st.integers(0, depth - 1))
    bad = data.draw(st.sampled_from([float("nan"), "x", 1e39]))
    tree = _deep_chain(depth, at, bad)
    with pytest.raises(InputError) as one:
        block.eval(tree)
    assert one.value.data_path == "[0]" * at + "[1]"
    c = Compiler.create(block)
    with pytest.raises(InputError) as batched:
        c.run([_deep_chain(3), tree])
    assert batched.value.example_index == 1
    assert (batched.value.block_path, batched.value.reason, batched.value.data_path) == (
        one.value.block_path, one.value.reason, one.value.data_path)
    assert c.run([_deep_chain(depth)])[0].shape == (2,)


def test_fit_and_predict_refuse_a_bad_embedding_id_before_any_step():
    x = [{"words": [i % 10, (3 * i) % 10]} for i in range(40)]
    y = np.array([i % 2 for i in range(40)])
    x[29] = {"words": [1, 10]}
    model = Model(_bag_of_words())
    model.compile(optimizer="adam",
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    before = weights_of(model)
    with pytest.raises(InputError) as err:
        model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    assert err.value.example_index == 29
    assert "id 10 is not in [0, 10)" in str(err.value)
    assert_weights_unchanged(model, before)
    assert int(model.optimizer.iterations) == 0
    with pytest.raises(InputError, match=r"^example 29 at \['words'\]\[1\]: .*id 10 is not"):
        model.predict(x, verbose=0)


def test_fit_refuses_a_nan_feature_before_any_step():
    trees, y = trees_and_signs(64)
    trees[37] = (trees[37], float("nan"))
    model = sign_model()
    before = weights_of(model)
    with pytest.raises(InputError) as err:
        model.fit(trees, y, batch_size=8, epochs=1, verbose=0)
    assert err.value.example_index == 37
    assert "nan is not finite" in str(err.value)
    assert_weights_unchanged(model, before)
    assert int(model.optimizer.iterations) == 0


def test_predict_refuses_an_overflowing_feature_naming_the_example():
    trees, _ = trees_and_signs(10)
    trees[4] = 1e39
    with pytest.raises(InputError) as err:
        sign_model().predict(trees, verbose=0)
    assert err.value.example_index == 4
    assert "overflows float32" in str(err.value)


# --- B. labels checked against the loss before the first step -----------------------------


@pytest.mark.parametrize("bad, index, reason", [
    (5, 13, "y[13] is 5: sparse_categorical_crossentropy needs class ids in [0, 2)"),
    (-1, 40, "y[40] is -1: sparse_categorical_crossentropy needs class ids in [0, 2)"),
    (0.5, 7, "y[7] is 0.5: sparse_categorical_crossentropy needs integer class ids"),
    (np.nan, 21, "y[21] is nan (as float32): labels must be finite"),
])
def test_fit_refuses_a_bad_class_id_naming_it_before_any_step(bad, index, reason):
    trees, y = trees_and_signs(48)
    y = y.astype(np.float64 if isinstance(bad, float) else np.int64)
    y[index] = bad
    model = sign_model()
    before = weights_of(model)
    with pytest.raises(ValueError) as err:
        model.fit(trees, y, batch_size=8, epochs=1, verbose=0)
    assert reason in str(err.value)
    assert_weights_unchanged(model, before)
    assert int(model.optimizer.iterations) == 0


@pytest.mark.parametrize("loss", ["sparse_categorical_crossentropy",
                                  keras.losses.SparseCategoricalCrossentropy(from_logits=True)])
def test_sparse_labels_must_be_one_id_per_input(loss):
    trees, y = trees_and_signs(16)
    model = sign_model(loss=loss)
    with pytest.raises(ValueError, match=r"y has shape \(16, 3\), but sparse_categorical_"
                                         r"crossentropy .* needs one class id per input: "
                                         r"shape \(16,\) or \(16, 1\)"):
        model.fit(trees, np.zeros((16, 3), np.int32), verbose=0)
    model.fit(trees, y[:, None], batch_size=8, verbose=0)  # (N, 1) is fine


def test_evaluate_and_validation_labels_are_checked_too():
    trees, y = trees_and_signs(16)
    model = sign_model()
    bad = y.copy()
    bad[3] = 2
    with pytest.raises(ValueError, match=r"^y\[3\] is 2"):
        model.evaluate(trees, bad, verbose=0)
    with pytest.raises(ValueError, match=r"^validation_data y\[3\] is 2"):
        model.fit(trees, y, validation_data=(trees, bad), verbose=0)
    assert int(model.optimizer.iterations) == 0


def regression_model(out_shape: tuple, loss="mse") -> Model:
    keras.utils.set_random_seed(0)
    head = td.FC(out_shape[0] if out_shape else 1, activation=None)
    block = td.Map(td.Scalar() >> td.Function(lambda x: x[:, None])) >> td.Sum() >> head
    if not out_shape:
        block = block >> td.Function(lambda z: z[:, 0])
    model = Model(block)
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss=loss)
    return model


def test_regression_targets_must_have_the_output_shape():
    xs = [[1.0, 2.0], [0.5], [-1.0, 0.0, 1.0], [2.0]]
    model = regression_model((1,))
    before = weights_of(model)
    with pytest.raises(ValueError, match=r"y has shape \(4, 3\): rows of shape \(3,\), but "
                                         r"mean_squared_error needs rows of the block's "
                                         r"output shape \(1,\)"):
        model.fit(xs, np.zeros((4, 3)), verbose=0)
    assert_weights_unchanged(model, before)
    model.fit(xs, np.zeros(4), verbose=0)           # (N,) for (1,): Keras broadcasts
    model.fit(xs, np.zeros((4, 1)), verbose=0)
    regression_model(()).fit(xs, np.zeros(4), verbose=0)   # a scalar per input
    with pytest.raises(ValueError, match="for class ids give sparse_categorical"):
        regression_model((3,), "categorical_crossentropy").fit(xs, np.zeros(4), verbose=0)


def test_an_inf_target_is_refused_naming_it():
    xs = [[1.0, 2.0], [0.5], [-1.0, 0.0, 1.0], [2.0]]
    with pytest.raises(ValueError, match=r"^y\[2\] is \[inf\] \(as float32\): labels must be "
                                         r"finite"):
        regression_model((1,)).fit(xs, np.array([[0.0], [1.0], [1e39], [0.0]]), verbose=0)


def test_a_loss_of_ones_own_is_not_shape_checked():
    xs = [[1.0, 2.0], [0.5]]

    def first_column(y_true, y_pred):
        return keras.ops.square(y_true[:, 0] - y_pred[:, 0])

    regression_model((1,), first_column).fit(xs, np.zeros((2, 3)), verbose=0)


@pytest.mark.parametrize("bad, reason", [(-1.0, "is -1.0"), (np.inf, "is inf"),
                                         (np.nan, "is nan")])
def test_sample_weights_must_be_finite_and_not_negative(bad, reason):
    trees, y = trees_and_signs(16)
    w = np.ones(16)
    w[9] = bad
    with pytest.raises(ValueError, match=rf"^sample_weight\[9\] {reason}: sample weights must "
                                         r"be finite and >= 0"):
        sign_model().fit(trees, y, sample_weight=w, verbose=0)


# --- C. a step whose loss or gradients are not finite is not applied, and stops fit ----------


def log_loss_model(learning_rate: float = 0.01) -> Model:
    """A Fold-style loss `log(x + b + 10)` per input (an FC of kernel 1 and bias b):
    NaN for a finite but extreme input (-1000), which spoils its batch's loss."""
    keras.utils.set_random_seed(0)
    block = td.Scalar() >> td.Function(lambda x: x[:, None]) \
        >> td.FC(1, activation=None, initializer="ones") \
        >> td.Function(lambda z: tf.math.log(z[:, 0] + 10.0)) >> td.Metric("loss")
    model = Model(block)
    model.compile(optimizer=keras.optimizers.Adam(learning_rate))
    return model


class WeightsAfterEachStep(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.steps: list[list[np.ndarray]] = []

    def on_train_batch_end(self, batch, logs=None):
        self.steps.append(weights_of(self.model))


def test_a_nan_loss_stops_fit_naming_the_batch_with_the_last_good_weights():
    xs = list(np.random.default_rng(0).normal(size=64))
    xs[45] = -1000.0
    model = log_loss_model()
    seen = WeightsAfterEachStep()
    with pytest.raises(NonFiniteLossError) as err:
        model.fit(xs, batch_size=8, epochs=2, verbose=0, callbacks=[seen])
    e = err.value
    assert 45 in e.examples and len(e.examples) == 8   # shuffled: the batch holding 45
    assert e.epoch == 0 and np.isnan(e.loss)
    assert "the loss is nan, on the examples at indices" in str(e)
    assert "weights and the optimizer are those of the last good step" in str(e)
    good_steps = len(seen.steps)
    assert good_steps == e.batch < 8
    assert_weights_unchanged(model, seen.steps[-1] if seen.steps else weights_of(model))
    assert int(model.optimizer.iterations) == good_steps
    assert all(np.isfinite(w).all() for w in weights_of(model))


def test_a_nan_loss_names_the_examples_of_x_when_inputs_were_skipped():
    xs = [0.5, "bad", 0.25, -1000.0, 1.0]
    model = log_loss_model()
    model.on_bad_example = "skip"
    with pytest.warns(UserWarning, match="skipped 1"):
        with pytest.raises(NonFiniteLossError) as err:
            model.fit(xs, batch_size=2, epochs=1, verbose=0, shuffle=False)
    assert err.value.examples == [3, 4]   # x's indices, not those after skipping
    assert err.value.batch == 1


def test_a_non_finite_gradient_with_a_finite_loss_is_not_applied():
    # loss sqrt(|x w + b|): b starts at 0, so an input 0 gives a loss of 0 whose
    # gradient is 0.5 / sqrt(0) * sign(0) * 0, NaN
    keras.utils.set_random_seed(0)
    block = td.Scalar() >> td.Function(lambda x: x[:, None]) >> td.FC(1, activation=None) \
        >> td.Function(lambda z: tf.sqrt(tf.abs(z[:, 0]))) >> td.Metric("loss")
    model = Model(block)
    model.compile(optimizer=keras.optimizers.SGD(0.01))
    before = weights_of(model)
    with pytest.raises(NonFiniteLossError, match="but a gradient is not finite") as err:
        model.train_on_batch([1.0, 0.0])
    assert np.isfinite(err.value.loss) and err.value.examples == [0, 1]
    assert_weights_unchanged(model, before)
    assert int(model.optimizer.iterations) == 0
    model.train_on_batch([1.0, 2.0])   # a good batch is applied
    assert int(model.optimizer.iterations) == 1


# --- D. validation_split and class_weight, as in Keras --------------------------------------


def test_validation_split_holds_out_the_last_fraction_of_x_before_shuffling():
    trees, y = trees_and_signs(40)
    split = sign_model()
    history = split.fit(trees, y, validation_split=0.25, batch_size=8, epochs=2, verbose=0)
    alone = sign_model()   # same seed: trained on the first 30 only
    alone.fit(trees[:30], y[:30], batch_size=8, epochs=2, verbose=0)
    for a, b in zip(weights_of(split), weights_of(alone)):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    held_out = split.evaluate(trees[30:], y[30:], batch_size=8, verbose=0)
    assert np.isclose(history.history["val_loss"][-1], held_out, rtol=1e-5)


def test_validation_split_is_refused_when_it_cannot_apply():
    trees, y = trees_and_signs(8)
    model = sign_model()
    with pytest.raises(ValueError, match="validation_data or validation_split, not both"):
        model.fit(trees, y, validation_split=0.5, validation_data=(trees, y), verbose=0)
    with pytest.raises(ValueError, match=r"validation_split must be a fraction in \(0, 1\), "
                                         r"got 1.5"):
        model.fit(trees, y, validation_split=1.5, verbose=0)
    with pytest.raises(ValueError, match="=0.95 of 8 inputs leaves nothing to train on"):
        model.fit(trees, y, validation_split=0.95, verbose=0)


def test_a_bad_input_or_label_in_the_validation_split_is_named_by_its_index_in_x():
    trees, y = trees_and_signs(20)
    bad_trees = list(trees)
    bad_trees[17] = (1.0, "x")
    model = sign_model()
    with pytest.raises(InputError) as err:
        model.fit(bad_trees, y, validation_split=0.25, verbose=0)
    assert err.value.example_index == 17
    assert "the validation split" in str(err.value)
    bad_y = y.copy()
    bad_y[18] = 7
    with pytest.raises(ValueError, match=r"^y\[18\] is 7"):
        model.fit(trees, bad_y, validation_split=0.25, verbose=0)
    assert int(model.optimizer.iterations) == 0


def test_class_weight_is_sample_weight_by_class():
    trees, y = trees_and_signs(24)
    by_class = sign_model()
    by_class.fit(trees, y, class_weight={0: 0.25, 1: 2.0}, batch_size=8, shuffle=False,
                 verbose=0)
    by_sample = sign_model()
    by_sample.fit(trees, y, sample_weight=np.where(y == 1, 2.0, 0.25), batch_size=8,
                  shuffle=False, verbose=0)
    unweighted = sign_model()
    unweighted.fit(trees, y, batch_size=8, shuffle=False, verbose=0)
    for a, b in zip(weights_of(by_class), weights_of(by_sample)):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    assert not all(np.allclose(a, b) for a, b in zip(weights_of(by_class),
                                                     weights_of(unweighted)))


def test_class_weights_read_ids_or_one_hot_rows_and_weigh_unlisted_classes_1():
    from refold.compiler.feeding.lists import class_weights
    np.testing.assert_array_equal(class_weights(np.array([0, 2, 1, 2]), {2: 3.0, 0: 0.5}),
                                  [0.5, 3.0, 1.0, 3.0])
    np.testing.assert_array_equal(class_weights(np.array([[0], [1]]), {1: 4.0}), [1.0, 4.0])
    one_hot = np.array([[0, 0, 1], [1, 0, 0]], np.float32)
    np.testing.assert_array_equal(class_weights(one_hot, {2: 5.0}), [5.0, 1.0])


def test_class_weight_is_refused_with_sample_weight_or_bad_weights():
    trees, y = trees_and_signs(8)
    model = sign_model()
    with pytest.raises(ValueError, match="class_weight or sample_weight, not both"):
        model.fit(trees, y, class_weight={0: 1.0}, sample_weight=np.ones(8), verbose=0)
    with pytest.raises(ValueError, match=r"class_weight\[1\] must be a finite number >= 0"):
        model.fit(trees, y, class_weight={0: 1.0, 1: -2.0}, verbose=0)
    with pytest.raises(ValueError, match="class_weight keys must be class ids"):
        model.fit(trees, y, class_weight={"cat": 1.0}, verbose=0)


# --- cyclic inputs ---------------------------------------------------------------------------


@pytest.fixture
def low_recursion_limit(monkeypatch):
    """Without cycle detection a cyclic input ends in a RecursionError here within a
    second or so, rather than after recursing a million frames deep."""
    import refold.blocks.evaluation.contexts
    monkeypatch.setattr(refold.blocks.evaluation.contexts, "_RECURSION_LIMIT", 20_000)


CYCLE_AT = re.escape("['children'][0]['children'][0]")  # where the node meets itself


def dict_tree_model() -> Model:
    """Regression over trees of `{"value": float, "children": [trees]}`."""
    keras.utils.set_random_seed(0)
    tree = td.ForwardDeclaration(td.PyObjectType(), td.TensorType((4,)))
    children = td.Map(tree()) >> td.Sum()
    value = td.Scalar() >> td.Function(lambda x: x[:, None]) >> td.FC(4)
    tree.resolve_to(td.Record({"value": value, "children": children})
                    >> td.Function(tf.add) >> td.FC(4))
    model = Model(tree() >> td.FC(1, activation=None))
    model.compile(optimizer="adam", loss="mse")
    return model


def dict_trees(n: int) -> list:
    leaf = {"value": 0.5, "children": []}  # shared by every tree: not a cycle
    return [{"value": float(i), "children": [leaf, {"value": -1.0, "children": [leaf]}]}
            for i in range(n)]


def cyclic_tree() -> dict:
    node = {"value": 1.0, "children": [{"value": 2.0, "children": []}]}
    node["children"][0]["children"].append(node)
    return node


def test_the_engine_refuses_a_cyclic_input_naming_the_example(low_recursion_limit):
    c = Compiler.create(dict_tree_model().block)
    inputs = dict_trees(3)
    assert len(c.run(inputs)) == 3
    with pytest.raises(InputError) as err:
        c.run(inputs[:2] + [cyclic_tree()])
    assert err.value.example_index == 2
    assert err.value.block_path.endswith("Map > ForwardDeclaration()")
    assert "the input contains a cycle" in err.value.reason


def test_fit_and_predict_refuse_a_cyclic_input_naming_it(low_recursion_limit):
    model = dict_tree_model()
    x, y = dict_trees(16), np.arange(16, dtype=np.float32)[:, None]
    x[11] = cyclic_tree()
    before = weights_of(model)
    with pytest.raises(InputError,
                       match=rf"example 11 at {CYCLE_AT}: .*the input contains a cycle"):
        model.fit(x, y, batch_size=4, epochs=1, verbose=0)
    assert_weights_unchanged(model, before)
    with pytest.raises(InputError,
                       match=rf"example 1 at {CYCLE_AT}: .*the input contains a cycle"):
        model.predict([x[0], cyclic_tree()], verbose=0)
    x[11] = dict_trees(1)[0]
    model.fit(x, y, batch_size=4, epochs=1, verbose=0)  # shared subtrees are fine
