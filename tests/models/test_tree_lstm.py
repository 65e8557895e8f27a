"""TreeLSTM and Tree-RNN cells equal numpy implementations of their equations, one
input at a time and batched; the child-sum TreeLSTM trains on random trees."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import refold as td
from refold.compiler import Compiler
from refold.models import encoders, heads, tree_lstm, tree_rnn

H, D = 3, 2


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def randomize(weights, seed):
    rng = np.random.default_rng(seed)
    for w in weights:
        w.assign(rng.normal(0, 0.6, tuple(w.shape)).astype(np.float32))
    return [np.asarray(w) for w in weights]


def random_nested(rng, depth=0):
    """A binary tree of nested pairs with D-vectors at the leaves."""
    if depth > 2 or rng.random() < 0.3:
        return rng.normal(size=D).round(2).tolist()
    return (random_nested(rng, depth + 1), random_nested(rng, depth + 1))


def random_kids_tree(rng, max_kids=6, depth=0):
    """A node `{"x": D-vector, "children": [...], "label": int}`, 0 to max_kids children."""
    n = 0 if depth >= 2 else int(rng.integers(1 if depth == 0 else 0, max_kids + 1))
    return {"x": rng.normal(size=D).round(2).tolist(), "label": int(rng.integers(0, 2)),
            "children": [random_kids_tree(rng, max_kids, depth + 1) for _ in range(n)]}


def state_block():
    return td.Record((td.Vector(H), td.Vector(H)))


# --- N-ary ------------------------------------------------------------------------------

def np_nary(kernel, bias, x, states):
    """Tai et al.'s N-ary TreeLSTM, gate columns i, o, u, f_1..f_N."""
    parts = ([x] if x is not None else []) + [h for h, _ in states]
    z = np.concatenate(parts) @ kernel + bias
    i, o, u = sigmoid(z[:H]), sigmoid(z[H:2 * H]), np.tanh(z[2 * H:3 * H])
    c = i * u + sum(sigmoid(z[(3 + k) * H:(4 + k) * H]) * c_k
                    for k, (_, c_k) in enumerate(states))
    return o * np.tanh(c), c


def test_binary_tree_lstm_equals_numpy_in_eval_and_batched():
    leaf = tree_lstm.leaf_cell(H, D)
    cell = tree_lstm.binary_cell(H)
    (lk, lb), (ck, cb) = randomize(leaf.weights, 1), randomize(cell.weights, 2)
    block = encoders.binary_tree_encoder(td.Vector(D) >> leaf, cell)

    def want(t):
        if isinstance(t, tuple):
            return np_nary(ck, cb, None, [want(t[0]), want(t[1])])
        return np_nary(lk, lb, np.asarray(t, np.float32), [])

    rng = np.random.default_rng(0)
    trees = [random_nested(rng) for _ in range(8)] + [([1.0, 2.0], [3.0, -1.0])]
    for t, got_batched in zip(trees, Compiler.create(block).run(trees)):
        w = want(t)
        for got in (block.eval(t), got_batched):
            np.testing.assert_allclose(got[0], w[0], atol=1e-5)
            np.testing.assert_allclose(got[1], w[1], atol=1e-5)


def test_nary_cell_with_input_and_three_children_equals_numpy():
    cell = tree_lstm.nary_cell(H, 3, input_size=D)
    k, b = randomize(cell.weights, 3)
    block = td.Record((td.Vector(D), tuple(state_block() for _ in range(3)))) >> cell
    rng = np.random.default_rng(1)
    inputs = [(rng.normal(size=D).tolist(),
               tuple((rng.normal(size=H).tolist(), rng.normal(size=H).tolist())
                     for _ in range(3))) for _ in range(4)]
    for inp, got_batched in zip(inputs, Compiler.create(block).run(inputs)):
        x = np.asarray(inp[0], np.float32)
        w = np_nary(k, b, x, [(np.asarray(h), np.asarray(c)) for h, c in inp[1]])
        for got in (block.eval(inp), got_batched):
            np.testing.assert_allclose(got[0], w[0], atol=1e-5)
            np.testing.assert_allclose(got[1], w[1], atol=1e-5)


def test_nary_forget_gate_biases_start_at_forget_bias():
    cell = tree_lstm.NaryTreeLSTMCell(H, num_children=2, forget_bias=1.0)
    bias = np.asarray(cell.weights[1])
    np.testing.assert_array_equal(bias[:3 * H], 0)
    np.testing.assert_array_equal(bias[3 * H:], 1)


@pytest.mark.parametrize("kwargs, match", [
    ({"hidden": 0}, "hidden"), ({"hidden": 3, "num_children": -1}, "num_children"),
    ({"hidden": 3, "num_children": 0}, "input_size"),
    ({"hidden": 3, "input_size": 0}, "input_size")])
def test_nary_bad_arguments_name_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        tree_lstm.NaryTreeLSTMCell(**kwargs)


# --- child-sum ----------------------------------------------------------------------------

def np_child_sum(gates, forget, x, kids):
    """Tai et al.'s child-sum TreeLSTM (gates: kernel over [x, h~], columns i, o, u)."""
    gk, gb = gates
    fk, fb = forget
    h_sum = sum((h for h, _ in kids), np.zeros(H, np.float32))
    z = np.concatenate([x, h_sum]) @ gk + gb
    i, o, u = sigmoid(z[:H]), sigmoid(z[H:2 * H]), np.tanh(z[2 * H:])
    c = i * u + sum((sigmoid(np.concatenate([x, h]) @ fk + fb) * c_k for h, c_k in kids),
                    np.zeros(H, np.float32))
    return o * np.tanh(c), c


def child_sum_model(cell):
    return encoders.tree_encoder(cell, td.GetItem("x") >> td.Vector(D))


def test_child_sum_equals_numpy_for_0_to_6_children():
    cell = tree_lstm.child_sum_cell(H, D)
    g = randomize(cell.gates.weights, 4)
    f = randomize(cell.forget.weights, 5)
    block = child_sum_model(cell)

    def want(t):
        return np_child_sum(g, f, np.asarray(t["x"], np.float32),
                            [want(k) for k in t["children"]])

    rng = np.random.default_rng(2)
    trees = [random_kids_tree(rng) for _ in range(6)] + [{"x": [1.0, -1.0], "children": []}]
    counts = {len(n["children"]) for n in _nodes(trees)}
    assert {0, 1, 2} <= counts and max(counts) >= 5
    for t, got_batched in zip(trees, Compiler.create(block).run(trees)):
        w = want(t)
        for got in (block.eval(t), got_batched):
            np.testing.assert_allclose(got[0], w[0], atol=1e-5)
            np.testing.assert_allclose(got[1], w[1], atol=1e-5)


def test_child_sum_forget_gates_are_per_child():
    # Two children with equal c but different h must be forgotten differently:
    # swapping which child holds which c changes the result.
    cell = tree_lstm.child_sum_cell(H, D)
    randomize(cell.variables, 6)
    block = td.Record((td.Vector(D), td.Map(state_block()))) >> cell
    ha, hb, ca, cb = [1.0, 0, 0], [0, 0, 2.0], [1.0, 1.0, 1.0], [-1.0, 2.0, 0.5]
    a = block.eval(([0.5, 0.5], [(ha, ca), (hb, cb)]))[1]
    b = block.eval(([0.5, 0.5], [(ha, cb), (hb, ca)]))[1]
    assert not np.allclose(a, b)


def test_child_sum_shared_uses_the_same_weights():
    cell = tree_lstm.child_sum_cell(H, D)
    other = cell.shared()
    assert [id(w) for w in other.variables] == [id(w) for w in cell.variables]
    a = td.Record((td.Vector(D), td.Map(state_block()))) >> cell
    b = td.Record((td.Vector(D), td.Map(state_block()))) >> other
    inp = ([1.0, 2.0], [([0.1] * H, [0.2] * H)])
    np.testing.assert_array_equal(a.eval(inp)[0], b.eval(inp)[0])


def test_child_sum_trains_on_random_trees():
    """A loss at every node (predict whether a node has an even number of children)
    falls under plain gradient descent through the compiled executor."""
    keras.utils.set_random_seed(0)
    cell = tree_lstm.child_sum_cell(8, D)
    block = encoders.tree_encoder(cell, td.GetItem("x") >> td.Vector(D),
                                  per_node=heads.node_classifier(2, label="label"))
    rng = np.random.default_rng(3)
    trees = [random_kids_tree(rng) for _ in range(24)]

    def relabel(t):  # a learnable label: the parity of the number of children
        t["label"] = len(t["children"]) % 2
        for k in t["children"]:
            relabel(k)
    for t in trees:
        relabel(t)
    comp = Compiler.create(block)
    loss_id = comp.program.metric_id["loss"]
    variables = heads.variables(block)
    assert len(variables) == 6  # gates, forget gate and node logits: kernels and biases
    ex = comp.executor
    opt = keras.optimizers.Adam(0.05)

    loss_type = comp.program.type_id[comp.program.metric_types[loss_id]]

    @tf.function(input_signature=[ex.input_signature(), tf.TensorSpec([2], tf.int32)],
                 autograph=False)
    def step(arrays, bounds):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(ex.compute(arrays)[loss_type][bounds[0]:bounds[1]])
        opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    plan = comp.plan(trees, grouped=True)
    bounds = plan.metric_bounds(comp.program)[loss_id]
    n_nodes = sum(1 for _ in _nodes(trees))
    assert bounds[1] - bounds[0] == n_nodes  # one loss per node
    losses = [float(step(plan.feed.arrays, bounds)) for _ in range(40)]
    assert losses[-1] < 0.5 * losses[0], losses


def _nodes(trees):
    stack = list(trees)
    while stack:
        t = stack.pop()
        yield t
        stack.extend(t["children"])


# --- Tree-RNN -------------------------------------------------------------------------

def test_tree_rnn_equals_numpy_in_eval_and_batched():
    leaf = tree_rnn.TreeRNNCell(H, num_children=0, input_size=D)
    node = tree_rnn.TreeRNNCell(H, num_children=2)
    lk, lb = randomize(leaf.weights, 7)
    nk, nb = randomize(node.weights, 8)
    block = encoders.binary_tree_encoder(td.Vector(D) >> leaf, node)

    def want(t):
        if isinstance(t, tuple):
            return np.tanh(np.concatenate([want(t[0]), want(t[1])]) @ nk + nb)
        return np.tanh(np.asarray(t, np.float32) @ lk + lb)

    rng = np.random.default_rng(4)
    trees = [random_nested(rng) for _ in range(8)]
    for t, got_batched in zip(trees, Compiler.create(block).run(trees)):
        for got in (block.eval(t), got_batched):
            np.testing.assert_allclose(got, want(t), atol=1e-5)


def test_tree_rnn_with_input_at_nodes_reads_x_then_children():
    cell = tree_rnn.TreeRNNCell(H, num_children=1, input_size=D, activation=None)
    k, b = randomize(cell.weights, 9)
    block = td.Record((td.Vector(D), (td.Vector(H),))) >> cell
    got = block.eval(([1.0, 2.0], ([0.5, -1.0, 2.0],)))
    np.testing.assert_allclose(got, np.array([1.0, 2.0, 0.5, -1.0, 2.0]) @ k + b, atol=1e-5)


def test_tree_rnn_leaf_needs_input_size():
    with pytest.raises(ValueError, match="input_size"):
        tree_rnn.TreeRNNCell(H, num_children=0)


def test_a_model_over_a_child_sum_cell_trains_its_weights():
    # The cell once hid Block.weights() behind a property of that name, so Model()
    # failed with "'list' object is not callable" on any block holding one.
    from refold.compiler import Model
    cell = tree_lstm.child_sum_cell(H, D)
    block = child_sum_model(cell) >> td.GetItem(0) >> td.FC(1, activation=None)
    model = Model(block)
    assert {id(v) for v in cell.variables} <= {id(v) for v in model.trainable_weights}
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    before = [np.array(v) for v in cell.variables]
    trees = [random_kids_tree(np.random.default_rng(3)) for _ in range(4)]
    model.fit(trees, np.ones((4, 1), np.float32), batch_size=4, epochs=1, verbose=0)
    assert all(not np.allclose(b, np.array(v)) for b, v in zip(before, cell.variables))
