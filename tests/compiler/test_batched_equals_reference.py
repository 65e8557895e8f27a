"""The core invariant: batched results and gradients equal the unbatched reference's.

For a family of models (TreeLSTM, TreeLSTM with a loss at every node, Fold RNN,
RNN with a metric per step, a BiLSTM tagger with a char BiLSTM for rare words
(OneOf per word), Reduce + OneOf, nested Record/Map with a shared layer), random
batches of 1 to 64 inputs run through the engine with both schedulers;
every result, every metric value and the gradient of a weighted sum of all of
them with respect to every weight must match the reference evaluator (float32,
absolute tolerance 1e-5).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from refold.blocks.evaluation.contexts import ReferenceContext, call_with_deep_stack, reference_eval
from refold.blocks.types import TensorType
from refold.compiler import Compiler
from tests.compiler import models

ATOL = 1e-5
# Gradients sum many float32 terms in a different order than the reference does; a
# gradient entry of magnitude 50 may differ by ~1e-5 from rounding alone.
GRAD_RTOL = 1e-6


@functools.cache
def case(name: str):
    return next(f() for f in models.ALL if f.__name__ == f"make_{name}")


@functools.cache
def engine(name: str, scheduler: str):
    """`engine_for(case(name), scheduler)`, built once per name and scheduler."""
    return engine_for(case(name), scheduler)


def engine_for(c: models.Case, scheduler: str, mode=None):
    """A compiler and a traced function returning (outputs, loss, gradients) (`mode`:
    the loop's `GradientMode`, the executor's by default)."""
    comp = Compiler.create(c.block, scheduler=scheduler)
    weights = _type_weights(comp.program.value_types)
    ex = comp.executor

    @tf.function(input_signature=[ex.input_signature()], autograph=False)
    def run(arrays):
        with tf.GradientTape() as tape:
            outs = ex.compute(arrays, mode)
            loss = tf.add_n([tf.reduce_sum(o * w) for o, w in zip(outs, weights)
                             if o.dtype == tf.float32] + [tf.constant(0.0)])
        grads = tape.gradient(loss, c.variables,
                              unconnected_gradients=tf.UnconnectedGradients.ZERO)
        return outs, loss, [tf.convert_to_tensor(g) for g in grads]

    return comp, run, weights


def _type_weights(types):
    rng = np.random.default_rng(42)
    return [tf.constant(rng.normal(size=t.shape).astype("float32")) if t.dtype == "float32"
            else None for t in types]


def reference_loss_and_grads(c: models.Case, comp: Compiler, weights, inputs):
    type_id = comp.program.type_id
    out_type = comp.root.output_type

    def run():
        with tf.GradientTape() as tape:
            terms = [tf.constant(0.0)]
            for x in inputs:  # values held as the engine holds them (blocks.evaluation.precision)
                ctx = ReferenceContext(comp.compute_dtype, comp.program.metric_types)
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


def assert_same_result(got, want, where: str, atol: float = ATOL, rtol: float = 0.0):
    if isinstance(want, np.ndarray):
        np.testing.assert_allclose(got, want, atol=atol, rtol=rtol, err_msg=where)
    elif isinstance(want, (tuple, list)):
        assert type(got) is type(want) and len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same_result(g, w, f"{where}[{i}]", atol, rtol)
    elif isinstance(want, dict):
        assert sorted(got) == sorted(want), where
        for k in want:
            assert_same_result(got[k], want[k], f"{where}[{k!r}]", atol, rtol)
    else:
        assert got == want, where


def check_batch(name: str, scheduler: str, inputs: list):
    check_case_batch(case(name), scheduler, inputs, engine(name, scheduler))


def check_case_batch(c: models.Case, scheduler: str, inputs: list, built=None,
                     atol: float = ATOL, rtol: float = 0.0):
    """Batched values, metrics and gradients of `c` on `inputs` equal the reference's
    (`built`: `engine_for(c, scheduler)`, if already built), within `atol` (and
    `rtol`, for values held in a low dtype under a mixed policy)."""
    name = c.name
    comp, run, weights = built or engine_for(c, scheduler)
    plan = comp.plan(inputs)
    plan.schedule.validate()
    outs, loss, grads = run(plan.feed.arrays)
    got = comp.results(plan, [o.numpy() for o in outs])
    for i, x in enumerate(inputs):
        want = reference_eval(c.block, x)
        assert_same_result(got[i], want, f"{name}/{scheduler} input {i}", atol, rtol)
    ref_loss, ref_grads = reference_loss_and_grads(c, comp, weights, inputs)
    np.testing.assert_allclose(loss.numpy(), ref_loss.numpy(), atol=max(atol, 1e-4),
                               rtol=max(rtol, 1e-5))
    for v, g, r in zip(c.variables, grads, ref_grads):
        np.testing.assert_allclose(g.numpy(), tf.convert_to_tensor(r).numpy(), atol=atol,
                                   rtol=max(rtol, GRAD_RTOL),
                                   err_msg=f"{name}/{scheduler} gradient of {v.name}")
    if comp.program.reads_values:  # training plans the rounds' shared graph whole
        _, loss, grads = run(comp.plan(inputs, grouped=True).feed.arrays)
        np.testing.assert_allclose(loss.numpy(), ref_loss.numpy(), atol=max(atol, 1e-4),
                                   rtol=max(rtol, 1e-5), err_msg=f"{name}/{scheduler} grouped")
        for v, g, r in zip(c.variables, grads, ref_grads):
            np.testing.assert_allclose(g.numpy(), tf.convert_to_tensor(r).numpy(), atol=atol,
                                       rtol=max(rtol, GRAD_RTOL),
                                       err_msg=f"{name}/{scheduler} grouped gradient of {v.name}")


NAMES = [f.__name__[len("make_"):] for f in models.ALL]


# `scheduler="auto"` plans with agenda until a Model's batches have chosen (so a Compiler's
# plan here would be agenda's again); its results are test_scheduler_choice's.
@pytest.mark.parametrize("scheduler", ["agenda", "depth"])
@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=4)
@given(data=st.data())
def test_batched_results_and_gradients_equal_the_reference(name, scheduler, data):
    inputs = data.draw(st.lists(case(name).inputs, min_size=1, max_size=12))
    check_batch(name, scheduler, inputs)


@pytest.mark.parametrize("scheduler", ["agenda", "depth"])
@pytest.mark.parametrize("name", ["tree_lstm_loss_everywhere", "nested_records"])
@settings(max_examples=1)
@given(data=st.data())
def test_batches_of_64_equal_the_reference(name, scheduler, data):
    inputs = data.draw(st.lists(case(name).inputs, min_size=64, max_size=64))
    check_batch(name, scheduler, inputs)


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=2)
@given(data=st.data())
def test_batch_of_one_equals_the_reference(name, data):
    check_batch(name, "agenda", [data.draw(case(name).inputs)])


# --- launches of no nodes (`Op.handles_empty`) --------------------------------------------

def _conds(run) -> int:
    """The `tf.cond`s in a traced function's graph (forward and backward)."""
    graph = run.get_concrete_function().graph
    return sum(op.type in ("If", "StatelessIf") for op in graph.get_operations())


@pytest.mark.parametrize("scheduler", ["agenda", "depth"])
def test_library_layers_with_no_nodes_run_without_a_cond_and_equal_the_reference(scheduler):
    # every op of the TreeLSTM is the library's (Embedding, cells, FC): no tf.cond at all;
    # a batch of leaves gives the binary cell no node, an empty step-0 launch included
    assert _conds(engine("tree_lstm", scheduler)[1]) == 0
    check_batch("tree_lstm", scheduler, [3, 5, 0])
    check_batch("tree_lstm", scheduler, [(1, 2)])


@pytest.mark.parametrize("scheduler", ["agenda", "depth"])
def test_a_oneof_branch_no_input_takes_equals_the_reference(scheduler):
    # reduce_oneof's branches: FC, Concat and Sum handle zero rows; its user lambda
    # (`tf.stack`) is not known to, so it keeps its cond (one: it reads input data only,
    # so no gradient flows back through it)
    assert _conds(engine("reduce_and_oneof", scheduler)[1]) == 1
    check_batch("reduce_and_oneof", scheduler, [{"xs": [[0.5, -1.0]]}, {"xs": []}])
    check_batch("reduce_and_oneof", scheduler, [{"ys": [0.25, -0.5, 1.0]}, {"ys": []}])
