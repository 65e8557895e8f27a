"""Inference batches of small loop launches run on TensorFlow's single-threaded executor
(`compiler.training.tf_executor`), the others on its default one, with the same results."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

import refold as td
from refold.blocks.errors import InputError
from refold.blocks.evaluation.contexts import reference_eval
from refold.compiler import Compiler, Model
from refold.compiler.training import tf_executor
from refold.compiler.training.tf_executor import InferenceExecutorChoice
from refold.scheduler.weight_grads import mean_loop_rows
from tests.compiler import factories
from tests.compiler.test_batched_equals_reference import NAMES, assert_same_result, case
from tests.compiler.test_model import sign_data


@functools.cache
def single_threaded(name: str, scheduler: str) -> Compiler:
    """A compiler of model family `name` that runs every batch single-threaded."""
    comp = Compiler.create(case(name).block, scheduler=scheduler)
    comp.inference_executor.max_rows = float("inf")
    return comp


@pytest.mark.parametrize("scheduler", ["agenda", "depth"])
@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=1)
@given(data=st.data())
def test_run_on_the_single_threaded_executor_equals_the_reference(name, scheduler, data):
    inputs = data.draw(st.lists(case(name).inputs, min_size=1, max_size=6))
    comp = single_threaded(name, scheduler)
    got = comp.run(inputs)
    for i, x in enumerate(inputs):
        assert_same_result(got[i], reference_eval(case(name).block, x),
                           f"{name}/{scheduler} input {i}")
    if mean_loop_rows(comp.executor.layout, comp.plan(inputs).feed.arrays) is not None:
        assert True in comp._run_flat  # (a batch with no loop runs on the default)


def _lowered(traced) -> set:
    """Whether the `While` ops of a traced function are lowered to `Switch`/`Merge`
    when it runs (the default executor) or stay functional (the single-threaded one)."""
    whiles = [op for op in traced.graph.get_operations()
              if op.type in ("While", "StatelessWhile")]
    return {op.node_def.attr["_lower_using_switch_merge"].b
            if "_lower_using_switch_merge" in op.node_def.attr else False for op in whiles}


def test_small_batches_run_single_threaded_and_large_ones_on_the_default_executor():
    comp = Compiler.create(factories.tree_sign())
    trees, _ = sign_data(40, seed=1)
    small = comp.run(trees[:1])
    for _ in range(InferenceExecutorChoice.PATIENCE - 1):  # on the one trace there is
        large = comp.run(trees)
    assert list(comp._run_flat) == [True]
    large = comp.run(trees)  # asked for often enough: its own trace
    assert sorted(comp._run_flat) == [False, True]
    assert _lowered(comp._run_flat[True][1]) == {False}
    assert _lowered(comp._run_flat[False][1]) == {True}
    for a, b in zip(small, large[:1]):
        np.testing.assert_allclose(a, b, atol=1e-6)
    comp.inference_executor.max_rows = 0  # never: the default's trace serves batch 1 too
    # (equal up to rounding: the two executors' kernels may sum in another order)
    np.testing.assert_allclose(comp.run(trees[:1])[0], small[0], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("pays", [True, False])
def test_the_default_executor_s_trace_runs_launches_outside_the_loop_in_halves_if_they_pay(
        monkeypatch, pays):
    # where TensorFlow has one intra-op thread and several inter-op ones (`halves_pay`),
    # the leaf launch before the loop is two calls of its op; the results are the same
    monkeypatch.setattr(tf_executor, "halves_pay", lambda: pays)
    trees, _ = sign_data(40, seed=2)
    plain = Compiler.create(factories.tree_sign())
    plain.inference_executor.max_rows = 0  # the default executor, no halves: the baseline
    monkeypatch.setattr(tf_executor, "halves_pay", lambda: False)
    want = plain.run(trees)
    monkeypatch.setattr(tf_executor, "halves_pay", lambda: pays)
    comp = Compiler.create(factories.tree_sign())
    comp.inference_executor.max_rows = 0
    got = comp.run(trees)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    calls = {k: sum(op.type in ("StatefulPartitionedCall", "PartitionedCall", "MatMul")
                    for op in fn[1].graph.get_operations())
             for k, fn in [("plain", plain._run_flat[False]), ("comp", comp._run_flat[False])]}
    assert (calls["comp"] > calls["plain"]) == pays, calls


@pytest.mark.parametrize("single", [True, False])
def test_only_the_single_threaded_executor_s_trace_is_a_step_of_small_launches(
        monkeypatch, single):
    # its batches average at most `max_rows` rows a launch: the loop moves each value
    # type's rows stacked (`scheduler.executor.small_launches`); the results are the same
    import contextlib

    from refold.scheduler import executor
    entered = []
    small = executor.small_launches

    @contextlib.contextmanager
    def recorded():
        entered.append(1)
        with small():
            yield
    monkeypatch.setattr(executor, "small_launches", recorded)
    trees, _ = sign_data(40, seed=2)
    want = Compiler.create(factories.tree_sign()).run(trees)
    entered.clear()
    comp = Compiler.create(factories.tree_sign())
    comp.inference_executor.max_rows = float("inf") if single else 0
    got = comp.run(trees)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    assert bool(entered) == single


def test_a_choice_not_traced_waits_for_patience_batches_far_from_the_threshold():
    from types import SimpleNamespace
    layout = SimpleNamespace(loop_ops=[1], segment_id={"group_size": 1})
    choice = InferenceExecutorChoice(SimpleNamespace(layout=layout), max_rows=4)

    def key(rows: list, traced=()):  # a batch whose loop launches have these rows
        return choice.key({"index": np.array([0, *rows]),
                           "layout": np.array([0, 1, 1 + len(rows)])}, set(traced))
    assert (key([1, 1]), key([64, 64])) == (True, False)  # nothing traced: its own
    asked = [key([1, 1], {False}) for _ in range(choice.PATIENCE)]
    assert asked == [False] * (choice.PATIENCE - 1) + [True]
    assert key([64], {False, True}) is False and key([1], {False, True}) is True


def test_predict_and_evaluate_at_batch_1_give_what_the_default_executor_gives():
    trees, y = sign_data(16, seed=3)
    trees, y = zip(*[(t, label) for t, label in zip(trees, y) if isinstance(t, tuple)])
    trees, y = list(trees), np.array(y)  # no lone leaf: every batch has a loop
    got = {}
    for max_rows in (float("inf"), 0):
        model = Model(factories.tree_sign(seed=2))
        model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy",
                      metrics=["accuracy"])
        model.inference_executor.max_rows = max_rows
        got[max_rows] = (model.predict(trees, batch_size=1, verbose=0),
                         model.evaluate(trees, y, batch_size=1, verbose=0))
        step = model.make_predict_function().__self__
        variants = {variant for _, variant in step._traced}
        # (a lone leaf has no loop: it runs on the default executor)
        assert (True in variants) if max_rows else (variants == {False})
    # equal up to rounding (oneDNN's kernels may sum in another order on the other executor)
    np.testing.assert_allclose(got[float("inf")][0], got[0][0], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got[float("inf")][1], got[0][1], rtol=1e-6)


def test_a_step_holding_an_assert_runs_on_the_default_executor():
    """TensorFlow's single-threaded executor hangs on an `Assert` in a `tf.cond`
    branch: such a step is refused before it runs, and a bad input is still named."""
    def checked_sqrt(x):
        tf.debugging.assert_non_negative(x, message="sqrt of a negative number")
        return tf.sqrt(x)

    comp = Compiler.create(td.Map(td.Scalar() >> td.Function(checked_sqrt)) >> td.Sum())
    _, single = comp._trace_run(True)  # traced as a batch of one would be, not run
    assert not comp.inference_executor.admits(True, single)
    assert comp.inference_executor.refused
    assert [float(r) for r in comp.run([[1.0, 4.0]])] == [3.0]
    assert list(comp._run_flat) == [False]
    with pytest.raises(InputError, match="sqrt of a negative number") as err:
        comp.run([[-1.0]])
    assert err.value.example_index == 0
    model = Model(td.Map(td.Scalar() >> td.Function(checked_sqrt)) >> td.Sum())
    assert model.predict([[1.0, 4.0], [9.0]], batch_size=1, verbose=0).tolist() == [3.0, 3.0]
    assert model.inference_executor.refused


def test_a_step_holding_a_branch_is_refused_where_the_inter_op_pool_has_one_thread(
        monkeypatch):
    """TensorFlow's single-threaded executor runs a `tf.cond` or `tf.switch_case` branch
    on the inter-op pool: with one thread there (its own) it waits forever."""
    import refold.compiler.training.tf_executor as tf_executor
    from refold.examples.tagger.char_tagger import char_tagger_model
    block = char_tagger_model(6, "char", char_embed=3, char_hidden=2, hidden=3, tags=None)
    for one, admitted in ((False, True), (True, False)):
        comp = Compiler.create(block)
        assert len(comp.executor.layout.loop_ops) > 1  # a loop of several ops: a switch_case
        _, single = comp._trace_run(True)
        assert "Case" in tf_executor.op_types(single) or \
            "StatelessCase" in tf_executor.op_types(single)
        monkeypatch.setattr(tf_executor, "one_inter_op_thread", lambda one=one: one)
        assert comp.inference_executor.admits(True, single) is admitted
        assert comp.inference_executor.refused is not admitted
        assert comp.inference_executor.admits(False, single)  # the default one runs it


def test_one_threaded_tensorflow_predicts_the_char_tagger_at_batch_1():
    # in a process of its own: TensorFlow sets its pools once, before the first op
    import subprocess
    import sys
    code = """
import tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
import refold as td
from refold.examples.tagger.char_tagger import char_tagger_model
model = td.Model(char_tagger_model(6, "char", char_embed=3, char_hidden=2, hidden=3, tags=None))
out = model.predict([{"words": [{"word": 1}, {"word": 0, "chars": [1, 2]}]}], batch_size=1,
                    verbose=0)
print(len(out), model.inference_executor.refused)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-2:] == ["1", "True"]


@pytest.mark.parametrize("bad", [-1, "4", None, True])
def test_max_rows_must_be_a_number_of_rows(bad):
    comp = Compiler.create(td.Scalar())
    with pytest.raises(ValueError, match="inference_executor.max_rows must be a number"):
        comp.inference_executor.max_rows = bad
