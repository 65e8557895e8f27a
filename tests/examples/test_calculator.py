"""The calculator example: expression data and the recursive sign classifier."""

import math

import numpy as np
import pytest

from refold.examples.calculator import __main__ as calculator_main
from refold.examples.calculator.calculator import (
    dataset,
    depth,
    evaluate,
    expression_classifier,
    majority_accuracy,
    random_expression,
    sign_label,
    to_infix,
)


def test_evaluate_agrees_with_python_on_random_expressions():
    rng = np.random.default_rng(1)
    for _ in range(300):
        expr = random_expression(rng, max_depth=5)
        assert evaluate(expr) == eval(to_infix(expr))  # noqa: S307 - digits and + - * only
        assert sign_label(expr) == int(np.sign(eval(to_infix(expr)))) + 1  # noqa: S307


def test_evaluate_handles_very_deep_expressions():
    expr = 1
    for _ in range(5000):
        expr = {"op": "+", "left": expr, "right": 1}
    assert evaluate(expr) == 5001 and depth(expr) == 5000


@pytest.mark.parametrize("max_depth", [1, 3, 5])
def test_random_expressions_respect_max_depth_and_reach_it(max_depth):
    rng = np.random.default_rng(0)
    depths = [depth(random_expression(rng, max_depth)) for _ in range(200)]
    assert max(depths) == max_depth and min(depths) >= 1


def test_dataset_is_reproducible_and_has_every_sign():
    a, ya = dataset(300, np.random.default_rng(5))
    b, yb = dataset(300, np.random.default_rng(5))
    assert a == b and ya.tolist() == yb.tolist()
    assert set(ya.tolist()) == {0, 1, 2} and ya.dtype == np.int32


def test_majority_accuracy():
    assert majority_accuracy([2, 2, 0], [2, 0, 2, 1]) == 0.5


def test_classifier_shares_one_layer_per_operator():
    import keras
    keras.utils.set_random_seed(7)  # unseeded, its random weights once made them equal
    block = expression_classifier(state=4)
    plus = {"op": "+", "left": 1, "right": 2}
    swapped = {"op": "+", "left": 2, "right": 1}
    times = {"op": "*", "left": 1, "right": 2}
    out = [np.asarray(block.eval(e)) for e in (plus, swapped, times)]
    assert all(o.shape == (3,) for o in out)
    assert not np.allclose(out[0], out[1]) and not np.allclose(out[0], out[2])


def test_main_learns_on_a_small_set(capsys):
    result = calculator_main.main(["--train-size", "96", "--dev-size", "16", "--test-size",
                                   "16", "--epochs", "4",
                                   "--batch-size", "16", "--max-depth", "2", "--state", "16",
                                   "--lr", "0.02", "--verbose", "0"])
    losses = result["history"]["loss"]
    assert all(math.isfinite(v) for v in losses) and losses[-1] < 0.5 * losses[0]
    assert result["logits"].shape == (16, 3)
    assert 0 <= result["accuracy"] <= 1 and set(result["by_depth"]) <= {1, 2}
    printed = capsys.readouterr().out
    assert "test accuracy" in printed
    # the epoch whose weights early stopping restored: the first best dev accuracy
    dev = result["history"]["val_accuracy"]
    assert result["kept_epoch"] == int(np.argmax(dev)) + 1
    assert f"kept epoch {result['kept_epoch']} of {len(losses)} (best dev accuracy)" in printed
