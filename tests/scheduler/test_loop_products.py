"""A user's cell (`td.Function` of a Keras `Dense`) in the loop takes the gradient of its
weight product with the weight transposed once per step (`scheduler.loop_products`)."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import refold as td
from refold.compiler import Compiler
from refold.scheduler import loop_products

DIM, UNITS = 3, 4
SEQS = [[list(np.linspace(-1, 1, DIM) * (t + 1) / n) for t in range(n)] for n in (0, 1, 2, 5)]


def user_fold(seed: int = 0):
    """A fold whose step is the user's own: a Dense layer on `[state, element]`."""
    keras.utils.set_random_seed(seed)
    dense = keras.layers.Dense(UNITS, activation="tanh")
    step = td.Concat() >> td.Function(dense)
    fold = td.Map(td.Vector(DIM)) >> td.Fold(step, td.Zeros(td.TensorType((UNITS,))))
    return fold, dense


def _loss(compiler, arrays):
    """A loss of every output of the batch, nonlinear so that gradients differ."""
    out = compiler.executor.compute(arrays)
    return tf.add_n([tf.reduce_sum(tf.sin(3.0 * v)) for v in tf.nest.flatten(out)])


def _grads_fn(compiler, weights):
    def grads(arrays):
        with tf.GradientTape() as tape:
            total = _loss(compiler, arrays)
        return [total, *tape.gradient(total, weights)]
    return tf.function(grads, autograph=False, reduce_retracing=True)


def _both_ways(monkeypatch, run, seed: int, **create):
    """`run(compiler, dense)` with the weight products transposed once and without;
    asserts both give the same arrays (up to rounding: the products sum in another
    order, and a loop that trains carries the difference from step to step)."""
    got = {}
    for transpose_once in (True, False):
        monkeypatch.setattr(loop_products, "TRANSPOSE_ONCE", transpose_once)
        fold, dense = user_fold(seed)
        got[transpose_once] = tf.nest.map_structure(
            np.asarray, run(Compiler.create(fold, **create), dense))
    for once, plain in zip(tf.nest.flatten(got[True]), tf.nest.flatten(got[False])):
        np.testing.assert_allclose(once, plain, rtol=1e-5, atol=1e-5)


def _arrays(compiler, seqs):
    return {k: tf.constant(v) for k, v in compiler.plan(seqs).feed.arrays.items()}


@pytest.mark.parametrize("transpose_once", [True, False])
def test_the_backward_loop_multiplies_a_dense_by_its_kernel_transposed_before_it(
        transpose_once, monkeypatch):
    monkeypatch.setattr(loop_products, "TRANSPOSE_ONCE", transpose_once)
    fold, dense = user_fold()
    compiler = Compiler.create(fold)
    arrays = _arrays(compiler, SEQS)
    graph = _grads_fn(compiler, dense.weights).get_concrete_function(arrays).graph
    products = [(op.get_attr("transpose_a"), op.get_attr("transpose_b"))
                for name, f in graph._functions.items() if "while" in name and "grad" in name
                for op in f.graph.get_operations() if op.type == "MatMul"]
    outside = [op for op in graph.get_operations() if op.type == "Transpose"]
    # in the loop, dz W^T from W^T laid out before it; h^T dz for the weight (a
    # launch outside the loop, under its tf.cond, keeps TensorFlow's gradient)
    assert sorted(products) == ([(False, False), (True, False)] if transpose_once
                                else [(False, True), (True, False)])
    assert len(outside) == (1 if transpose_once else 0)


@pytest.mark.parametrize("scheduler", ["agenda", "depth"])
def test_values_and_gradients_are_those_of_tensorflows_own_gradient(scheduler, monkeypatch):
    rng = np.random.default_rng(3)
    batches = [SEQS] + [[rng.normal(size=(n, DIM)).tolist() for n in rng.integers(0, 7, 5)]
                        for _ in range(3)]

    def run(compiler, dense):
        fn = _grads_fn(compiler, dense.weights)  # traced with the switch as set now
        return [fn(_arrays(compiler, b)) for b in batches]
    _both_ways(monkeypatch, run, seed=1, scheduler=scheduler)


def test_a_product_of_two_loop_values_keeps_tensorflows_gradient():
    """Neither side read from outside the loop: nothing to transpose beforehand."""
    @tf.function(autograph=False)
    def grads(x):
        def body(i, h):
            with loop_products.transposed_once():
                return i + 1, tf.tanh(h @ tf.transpose(h))[:, :1] * h
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.reduce_sum(tf.while_loop(lambda i, h: i < 3, body, (0, x))[1])
        return tape.gradient(y, x)

    x = tf.constant([[0.3, -0.2]])
    graph = grads.get_concrete_function(x).graph
    assert not [op for op in graph.get_operations() if op.type == "Transpose"]
    with tf.GradientTape() as tape:
        tape.watch(x)
        h = x
        for _ in range(3):
            h = tf.tanh(h @ tf.transpose(h))[:, :1] * h
        want = tape.gradient(tf.reduce_sum(h), x)
    np.testing.assert_allclose(grads(x), want, rtol=1e-6)


def test_the_gradient_reads_the_weight_the_forward_pass_read(monkeypatch):
    """A weight changed between the forward pass and the gradient: the gradient is
    the forward pass's, as with TensorFlow's own (which saves what the loop read)."""
    def moved_step(compiler, dense):
        @tf.function(autograph=False)
        def step(arrays):
            with tf.GradientTape() as tape:
                total = _loss(compiler, arrays)
            with tf.control_dependencies([total]):
                moved = dense.kernel.assign_add(tf.ones_like(dense.kernel))
            with tf.control_dependencies([moved]):
                return tape.gradient(total, dense.weights)
        return step(_arrays(compiler, SEQS))

    _both_ways(monkeypatch, moved_step, seed=2)


def test_an_outer_loop_that_moves_the_weight_gives_each_iteration_its_own(monkeypatch):
    """The executor's loop inside a loop of the user's that trains between its
    iterations: each gradient reads the weight of its own iteration."""
    def two_steps(compiler, dense):
        @tf.function(autograph=False)
        def steps(arrays):
            def body(i, grads):
                with tf.GradientTape() as tape:
                    total = _loss(compiler, arrays)
                g = tape.gradient(total, dense.kernel)
                with tf.control_dependencies([g]):
                    moved = dense.kernel.assign_sub(0.5 * g)
                with tf.control_dependencies([moved]):
                    return i + 1, grads + g
            return tf.while_loop(lambda i, _: i < 3, body,
                                 (0, tf.zeros_like(dense.kernel)))[1]
        return steps(_arrays(compiler, SEQS))

    _both_ways(monkeypatch, two_steps, seed=4)
