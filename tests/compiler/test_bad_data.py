"""Bad data cannot silently spoil training: refused before the first step, or the
step that meets it stops `fit` with the weights of the last good step."""

from __future__ import annotations

import keras
import numpy as np
import pytest

import blocks as td
from blocks.errors import InputError
from compiler import Compiler, Model
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
