"""`block.eval` on large inputs: op calls deferred and run level by level, the rows of
one op in one call (`blocks.evaluation.deferred`). The values must be the op-by-op
evaluator's on every model of the engine's family; errors must name what they named;
the number of calls into an op must follow the input's depth, not its size."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import refold as td
from refold.blocks.errors import InputError
from refold.blocks.evaluation import deferred
from refold.blocks.evaluation.contexts import ReferenceContext
from refold.blocks.validation import validate
from refold.models import encoders, tree_lstm
from tests.compiler import models

ONE_BY_ONE = 10 ** 9


def eval_both(block, x, **kwargs):
    with deferred.deferring_after(ONE_BY_ONE):
        eager = block.eval(x, **kwargs)
    with deferred.deferring_after(0):
        batched = block.eval(x, **kwargs)
    return eager, batched


def assert_same(a, b):
    """Equal results: arrays within float32 rounding, everything else exactly."""
    if isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape
        if a.dtype.kind == "f":
            np.testing.assert_allclose(b, a, atol=1e-5, rtol=1e-6)
        else:
            np.testing.assert_array_equal(b, a)
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            assert_same(a[k], b[k])
    else:
        assert a == b


@pytest.mark.parametrize("make", models.ALL, ids=lambda f: f.__name__[5:])
def test_deferred_calls_compute_what_op_by_op_calls_compute(make):
    case = make()

    @settings(max_examples=12, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.lists(case.inputs, min_size=1, max_size=3))
    def check(inputs):
        for x in inputs:
            eager, batched = eval_both(case.block, x)
            assert_same(eager, batched)
    check()


def wide_tree(depth: int, fanout: int, rng) -> dict:
    node = {"x": rng.normal(size=4).tolist(), "children": []}
    if depth > 1:
        node["children"] = [wide_tree(depth - 1, fanout, rng) for _ in range(fanout)]
    return node


def counted(layer, calls: list):
    """`layer` wrapped so that each call is counted by its number of rows."""
    def call(*args):
        calls.append(int(args[0].shape[0]))
        return layer(*args)
    call.pure = True
    return call


def test_the_calls_into_an_op_follow_the_depth_of_a_wide_tree():
    # 4^4 leaves: 341 nodes, 5 levels; op by op the input part runs once a node
    rng = np.random.default_rng(0)
    tree = wide_tree(5, 4, rng)
    calls: list = []
    dense = tf.keras.layers.Dense(3)
    node = td.GetItem("x") >> td.Vector(4) >> td.Function(counted(dense, calls))
    block = encoders.tree_encoder(tree_lstm.child_sum_cell(3, 3), node)
    eager, batched = eval_both(block, tree)
    assert_same(eager, batched)
    with deferred.deferring_after(ONE_BY_ONE):
        calls.clear()
        block.eval(tree)
        assert len(calls) == 341  # once a node
    with deferred.deferring_after(0):
        calls.clear()
        block.eval(tree)
        assert len(calls) == 1 and calls[0] >= 341  # every node's row at once


def test_a_chain_runs_one_call_a_node_and_its_inputs_in_one():
    calls: list = []
    dense = tf.keras.layers.Dense(3)
    node = td.GetItem("x") >> td.Vector(4) >> td.Function(counted(dense, calls))
    block = encoders.tree_encoder(tree_lstm.child_sum_cell(3, 3), node)
    tree = {"x": [0.5] * 4, "children": []}
    for i in range(300):
        tree = {"x": [i / 300] * 4, "children": [tree]}
    eager, batched = eval_both(block, tree)
    assert_same(eager, batched)
    assert calls[-1] >= 301  # the node inputs of the whole chain: one call


def test_an_error_in_a_deferred_call_names_the_block_and_the_place_in_the_input():
    # an id beyond the table: the embedding's check refuses it in a deferred call,
    # and the evaluation starts again op by op to say where
    block = td.Map(td.Scalar("int32") >> td.Embedding(5, 2, name="words"))
    messages = []
    for after in (ONE_BY_ONE, 0):
        with deferred.deferring_after(after), pytest.raises(InputError) as e:
            block.eval([1, 2, 7, 3])
        messages.append(str(e.value))
    assert messages[0] == messages[1]
    assert "[2]" in messages[1] and "7" in messages[1]


def test_a_failing_function_in_a_deferred_call_is_named_as_op_by_op():
    def fails_on_negatives(x):
        tf.debugging.assert_non_negative(x)
        return x
    fails_on_negatives.pure = True
    block = td.Map(td.Scalar() >> td.Function(fails_on_negatives, name="checked"))
    messages = []
    for after in (ONE_BY_ONE, 0):
        with deferred.deferring_after(after), pytest.raises(InputError) as e:
            block.eval([1.0, 2.0, -3.0])
        messages.append(str(e.value))
    assert messages[0] == messages[1] and "checked" in messages[1]


def test_a_block_that_reads_a_handle_itself_gets_its_value():
    class Doubles(td.Block):
        """Breaks the rule that blocks never look inside a handle: it calls TF on it."""

        def __init__(self):
            super().__init__(input_type=td.TensorType((2,)), output_type=td.PyObjectType())

        def evaluate(self, ctx, x):
            return float(tf.reduce_sum(tf.convert_to_tensor(x)) * 2)

    block = td.Vector(2) >> td.Function(lambda x: x + 1.0) >> Doubles()
    eager, batched = eval_both(block, [1.0, 2.0])
    assert eager == batched == 10.0


def test_a_context_made_by_hand_never_defers():
    # tests and users differentiate through `eval_in(ReferenceContext(), x)`: tensors only
    block = td.Map(td.Scalar() >> td.Function(tf.square)) >> td.Sum()
    validate(block)
    with deferred.deferring_after(0):
        out = block.eval_in(ReferenceContext(), [2.0, 3.0])
    assert isinstance(out, tf.Tensor) and float(out) == 13.0


def test_under_a_gradient_tape_eval_stays_op_by_op():
    calls: list = []
    block = td.Map(td.Scalar() >> td.Function(counted(tf.square, calls))) >> td.Sum()
    validate(block)
    calls.clear()  # the call on a batch of zeros that found the output type
    with deferred.deferring_after(0):
        with tf.GradientTape():
            assert float(block.eval([1.0, 2.0, 3.0])) == 14.0
        assert calls == [1, 1, 1]  # a row at a time
        calls.clear()
        assert float(block.eval([1.0, 2.0, 3.0])) == 14.0
        assert calls == [4]  # the three rows, padded to a power of two


def _python_calls(fn) -> int:
    """The Python and builtin function calls `fn()` makes, on every thread it starts
    (`block.eval` runs on a thread of its own): work counted without a clock."""
    import sys
    import threading
    count = [0]

    def profile(frame, event, arg):
        if event in ("call", "c_call"):
            count[0] += 1
    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    return count[0]


def test_eval_of_a_large_input_does_work_linear_in_its_size():
    # Deferred from the first call: a quadratic step anywhere in recording, levelling or
    # running the calls would make 4x the nodes cost far more than 4x the calls.
    block = encoders.tree_encoder(tree_lstm.child_sum_cell(3, 3),
                                  td.GetItem("x") >> td.Vector(4) >> td.FC(3))
    rng = np.random.default_rng(1)

    def tree(n):  # deep and bushy: each node's parent among the 8 made before it
        nodes = [{"x": [0.1] * 4, "children": []}]
        for i in range(1, n):
            node = {"x": rng.normal(size=4).tolist(), "children": []}
            nodes[max(0, i - 1 - int(rng.integers(8)))]["children"].append(node)
            nodes.append(node)
        return nodes[0]

    small, large = tree(500), tree(2000)
    with deferred.deferring_after(0):
        block.eval(small)  # traces made
        calls = [_python_calls(lambda t=t: block.eval(t)) for t in (small, large)]
    assert calls[1] < 4.6 * calls[0], calls


def test_a_layer_called_on_many_batches_runs_traced_with_the_same_values(monkeypatch):
    from refold.blocks.evaluation import traced_ops
    from refold.compiler import Compiler
    traced_ops.forget()
    monkeypatch.setattr(traced_ops, "CALLS_BEFORE_TRACING", 2)
    block = encoders.tree_encoder(tree_lstm.child_sum_cell(3, 3),
                                  td.GetItem("x") >> td.Vector(4) >> td.FC(3))
    layers = [op for op in Compiler(block).program.ops if op.traceable]
    trees = [wide_tree(4, 3, np.random.default_rng(seed)) for seed in range(4)]
    for tree in trees:
        eager, batched = eval_both(block, tree)
        assert_same(eager, batched)
    # each layer: one trace for a row, one for any number of rows
    assert layers and all(traced_ops.traced(op) == 2 for op in layers)
