"""`block.eval` calls a layer's op traced once it has been called often
(`blocks.evaluation.traced_ops`): the eager calls' values and gradients, for layers
only, in inference only."""

import numpy as np
import tensorflow as tf

import refold as td
from refold.blocks.evaluation import traced_ops
from refold.blocks.evaluation.contexts import ReferenceContext, call_with_deep_stack
from refold.blocks.validation import validate
from refold.models import encoders, tree_lstm


def chain(n: int, seed: int, width: int = 4) -> dict:
    rng = np.random.default_rng(seed)
    node = {"x": rng.normal(size=width).tolist(), "children": []}
    for _ in range(n - 1):
        node = {"x": rng.normal(size=width).tolist(), "children": [node]}
    return node


def encoder():
    return encoders.tree_encoder(tree_lstm.child_sum_cell(6, 4), td.GetItem("x") >> td.Vector(4))


def layer_ops(block) -> list:
    from refold.compiler import Compiler
    return [op for op in Compiler(block).program.ops if op.traceable]


def state_and_grads(block, tree):
    validate(block)
    weights = [w for layer in block.weights() for w in layer.trainable_weights]

    def run():
        with tf.GradientTape() as tape:
            h, c = block.eval_in(ReferenceContext(), tree)
            loss = tf.reduce_sum(h * h) + tf.reduce_sum(c)
        return [h, c], tape.gradient(loss, weights)
    return call_with_deep_stack(run)


def test_a_deep_input_runs_the_layers_traced_with_the_eager_values_and_gradients(monkeypatch):
    block = encoder()
    trees = [chain(3 * traced_ops.CALLS_BEFORE_TRACING, seed) for seed in range(3)]
    monkeypatch.setattr(traced_ops, "CALLS_BEFORE_TRACING", 10 ** 9)
    eager = [state_and_grads(block, t) for t in trees]
    ops = layer_ops(block)
    assert len(ops) >= 2 and all(traced_ops.traced(op) == 0 for op in ops)
    monkeypatch.setattr(traced_ops, "CALLS_BEFORE_TRACING", 16)
    traced = [state_and_grads(block, t) for t in trees]
    assert all(traced_ops.traced(op) == 1 for op in ops)  # one signature each
    for (e_out, e_grads), (t_out, t_grads) in zip(eager, traced):
        for e, t in zip([*e_out, *e_grads], [*t_out, *t_grads]):
            np.testing.assert_allclose(t, e, atol=1e-5)


def test_a_plain_function_is_called_once_a_node_as_written():
    calls = []

    def double(x):
        calls.append(1)  # what a traced function would run only while tracing
        return 2 * x

    block = td.Map(td.Scalar() >> td.Function(double))
    calls.clear()  # (the block called it on zeros to find its output type)
    n = 3 * traced_ops.CALLS_BEFORE_TRACING
    assert block.eval(list(range(n)))[-1] == 2 * (n - 1)
    assert len(calls) == n


def test_training_mode_stays_eager():
    block, tree = encoder(), chain(3 * traced_ops.CALLS_BEFORE_TRACING, 0)
    block.eval(tree, training=True, seed=1)
    assert all(traced_ops.traced(op) == 0 for op in layer_ops(block))
    block.eval(tree)
    assert all(traced_ops.traced(op) == 1 for op in layer_ops(block))


def test_a_layer_that_cannot_be_traced_stays_eager():
    import keras

    class ReadsAValue(keras.layers.Layer):
        def call(self, x):
            return x * 2.0 if float(x[0]) > 0 else -x  # needs the value: eager only

    layer = td.Function(ReadsAValue(), infer_output_type=False).set_output_type(
        td.TensorType(()))
    block = td.Map(td.Scalar() >> layer)
    n = 2 * traced_ops.CALLS_BEFORE_TRACING
    got = block.eval([1.0 if i % 2 else -1.0 for i in range(n)])
    assert [float(v) for v in got[:2]] == [1.0, 2.0]
    assert traced_ops.traced(layer.op()) == 0
