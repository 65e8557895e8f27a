"""The core invariant with dropout: a batched training step equals the reference.

For the dropout family (`tests.compiler.dropout_models`: the zoo's cells with
`dropout` and `recurrent_dropout`, `td.FC`'s keep probabilities, `td.Dropout`, Keras'
noise layers, a function of one's own drawing noise), random batches run through the
engine in training mode with a step seed, under both schedulers, and every result,
metric value and gradient must equal the reference evaluator's in training mode with
the same seed, each input at its index in the batch (`block.eval(x, training=True,
seed=..., example=i)`). The engine's replayed backward pass and its weight gradients
once per step run ops again: they must draw the same masks (checked with both on).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from refold.blocks.evaluation.contexts import ReferenceContext, call_with_deep_stack, reference_eval
from refold.blocks.evaluation.training_mode import training_mode
from refold.blocks.types import TensorType
from refold.compiler import Compiler
from tests.compiler import dropout_models
from tests.compiler.test_batched_equals_reference import (
    ATOL,
    GRAD_RTOL,
    _type_weights,
    assert_same_result,
)

NAMES = [f.__name__[len("make_"):] for f in dropout_models.ALL]


@functools.cache
def case(name: str):
    return next(f() for f in dropout_models.ALL if f.__name__ == f"make_{name}")


@functools.cache
def engine(name: str, scheduler: str, replay: bool = False):
    """`traced_training_run` of the family's case `name`."""
    return traced_training_run(case(name), scheduler, replay)


def traced_training_run(c, scheduler: str, replay: bool = False):
    """A compiler and a traced `run(arrays, seed) -> (outputs, loss, gradients)` in
    training mode; with `replay`, the loop's backward pass replayed by the engine and
    its weight gradients taken once per step (both run the ops again)."""
    comp = Compiler.create(c.block, scheduler=scheduler)
    ex = comp.executor
    ex.batched_weight_grads = ex.replay_backward = replay
    weights = _type_weights(comp.program.value_types)

    @tf.function(input_signature=[ex.input_signature(), tf.TensorSpec([3], tf.int32)],
                 autograph=False)
    def run(arrays, seed):
        with training_mode(True, seed):
            with tf.GradientTape() as tape:
                outs = ex.compute(arrays)
                loss = tf.add_n([tf.reduce_sum(o * w) for o, w in zip(outs, weights)
                                 if o.dtype == tf.float32] + [tf.constant(0.0)])
            grads = tape.gradient(loss, c.variables,
                                  unconnected_gradients=tf.UnconnectedGradients.ZERO)
        return outs, loss, [tf.convert_to_tensor(g) for g in grads]

    return comp, run, weights


def reference_loss_and_grads(c, comp, weights, inputs, seed):
    type_id = comp.program.type_id
    out_type = comp.root.output_type

    def run():
        with tf.GradientTape() as tape:
            terms = [tf.constant(0.0)]
            for i, x in enumerate(inputs):
                ctx = ReferenceContext(comp.compute_dtype, comp.program.metric_types,
                                       training=True, seed=seed, example=i)
                result = c.block.eval_in(ctx, x)

                def add(t, v):
                    if isinstance(t, TensorType) and t.dtype == "float32":
                        terms.append(tf.reduce_sum(tf.cast(v, tf.float32)
                                                   * weights[type_id[t]]))
                    return v
                out_type.for_each_terminal(add, result)
                for m, values in ctx.metrics.items():
                    t = comp.program.metric_types[comp.program.metric_id[m]]
                    for v in values:
                        add(t, v)
            loss = tf.add_n(terms)
        grads = tape.gradient(loss, c.variables,
                              unconnected_gradients=tf.UnconnectedGradients.ZERO)
        return loss, grads
    return call_with_deep_stack(run)


def check_training_batch(name: str, scheduler: str, inputs: list, seed: tuple,
                         replay: bool = False):
    c = case(name)
    comp, run, weights = engine(name, scheduler, replay)
    plan = comp.plan(inputs)
    outs, loss, grads = run(plan.feed.arrays, tf.constant(seed, tf.int32))
    got = comp.results(plan, [o.numpy() for o in outs])
    for i, x in enumerate(inputs):
        want = reference_eval(c.block, x, training=True, seed=seed, example=i)
        assert_same_result(got[i], want, f"{name}/{scheduler} input {i}")
    ref_loss, ref_grads = reference_loss_and_grads(c, comp, weights, inputs, seed)
    np.testing.assert_allclose(loss.numpy(), ref_loss.numpy(), atol=1e-4, rtol=1e-5)
    for v, g, r in zip(c.variables, grads, ref_grads):
        np.testing.assert_allclose(g.numpy(), tf.convert_to_tensor(r).numpy(), atol=ATOL,
                                   rtol=GRAD_RTOL,
                                   err_msg=f"{name}/{scheduler} gradient of {v.name}")
    return got


seeds = st.tuples(st.integers(0, 2 ** 31 - 1), st.integers(0, 10 ** 6), st.integers(0, 3))


@pytest.mark.parametrize("scheduler", ["agenda", "depth"])
@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=3, deadline=None)
@given(data=st.data())
def test_batched_training_with_dropout_equals_the_reference(name, scheduler, data):
    inputs = data.draw(st.lists(case(name).inputs, min_size=1, max_size=10))
    check_training_batch(name, scheduler, inputs, data.draw(seeds))


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=2, deadline=None)
@given(data=st.data())
def test_replayed_backward_pass_draws_what_the_forward_pass_drew(name, data):
    inputs = data.draw(st.lists(case(name).inputs, min_size=1, max_size=6))
    check_training_batch(name, "agenda", inputs, data.draw(seeds), replay=True)


def test_dropout_acts_in_training_and_each_node_has_its_own_mask():
    # the same input four times in one batch: four examples, each of its nodes with a
    # mask of its own (the root's update and every node's h before its loss: 16 bits
    # an example); a second seed gives other masks; in inference nothing is dropped
    name = "tree_lstm_loss_everywhere_dropout"
    tree = {"left": {"word": 1, "label": 0}, "right": {"word": 2, "label": 1}, "label": 2}

    def drawn(results):
        return [tuple(np.round(np.concatenate([r[0], r[1]["loss"]]), 5)) for r in results]
    got = drawn(check_training_batch(name, "agenda", [tree] * 4, (1, 2, 0)))
    assert len(set(got)) == 4
    other = drawn(check_training_batch(name, "agenda", [tree] * 4, (1, 3, 0)))
    assert not set(got) & set(other)
    assert drawn([reference_eval(case(name).block, tree)])[0] not in got


def test_masks_are_fair_and_independent_across_nodes_and_elements():
    # 400 nodes of 250 elements at rate 0.3: the dropped fraction, and no correlation
    # between neighbouring nodes or neighbouring elements beyond chance
    import refold as td
    block = td.Map(td.Vector(250) >> td.Dropout(0.3))
    comp = Compiler.create(block)
    plan = comp.plan([[np.ones(250, np.float32)] * 200] * 2)
    with training_mode(True, (5, 0, 0)):
        outs = comp.executor.compute({k: tf.constant(v) for k, v in plan.feed.arrays.items()})
    masks = np.concatenate([np.stack(r) for r in comp.results(plan, [o.numpy() for o in outs])])
    kept = masks > 0
    assert masks.shape == (400, 250)
    assert abs(kept.mean() - 0.7) < 0.01        # 100,000 draws: sd 0.0014
    np.testing.assert_allclose(masks[kept], 1 / 0.7, rtol=1e-6)
    centred = kept - kept.mean()
    nodes = (centred[1:] * centred[:-1]).mean() / centred.var()
    elements = (centred[:, 1:] * centred[:, :-1]).mean() / centred.var()
    assert abs(nodes) < 0.02 and abs(elements) < 0.02
