"""Small inference batches run straight-line (`compiler.straight_inference`): the same
results as the reference evaluator and as the loop executor, traces bounded, errors
and Keras callbacks as on the executor's path."""

from __future__ import annotations

import functools
import time

import keras
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import refold as td
from refold.blocks.errors import InputError
from refold.blocks.evaluation.contexts import reference_eval
from refold.compiler import Compiler, Model
from tests.compiler import models
from tests.compiler.test_batched_equals_reference import assert_same_result, case

NAMES = ["tree_lstm", "tree_lstm_loss_everywhere", "fold_rnn", "rnn_with_metric_per_step",
         "bidirectional_tagger", "char_tagger", "reduce_and_oneof", "nested_records"]


@functools.cache
def eager_compiler(name: str, scheduler: str) -> Compiler:
    """A compiler whose every small batch runs straight-line: each launch sequence
    is traced the first time it comes (the default waits for a few batches)."""
    c = Compiler.create(case(name).block, scheduler=scheduler)
    line = c.straight_inference.line
    line.ready, line.patience, line.max_sequences = None, 1, 1000
    c.straight_inference.max_launches = 200
    return c


@pytest.mark.parametrize("scheduler", ["agenda", "depth"])
@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=6, deadline=None)
@given(data=st.data())
def test_straight_line_batches_equal_the_reference_and_the_loop(name, scheduler, data):
    inputs = data.draw(st.lists(case(name).inputs, min_size=1, max_size=3))
    c = eager_compiler(name, scheduler)
    straight = c.straight_inference
    fits = straight.fits(c.plan(inputs).plan)
    before = straight.batches
    got = c.run(inputs)
    assert straight.batches == before + 1 or not fits or straight.fallbacks["reads"]
    for i, x in enumerate(inputs):
        assert_same_result(got[i], reference_eval(case(name).block, x),
                           f"{name}/{scheduler} input {i}")
    straight.enabled = False
    try:
        looped = c.run(inputs)
    finally:
        straight.enabled = True
    assert straight.batches == before + (straight.batches > before)
    assert_same_result(got, looped, f"{name}/{scheduler} against the loop", atol=1e-5)


def test_every_workload_batch_of_one_takes_the_straight_path():
    # the limits' defaults let batch 1 of each case's inputs through (the assertion
    # above would pass if none did)
    for name in ["tree_lstm", "bidirectional_tagger", "char_tagger"]:
        c = eager_compiler(name, "agenda")
        before = c.straight_inference.batches
        x = {"tree_lstm": ((1, 2), (3, (4, 5))), "bidirectional_tagger": [[0.1, 0.2, 0.3]] * 4,
             "char_tagger": {"words": [{"word": 1}, {"word": 0, "chars": [1, 2]}],
                             "tags": [0, 1]}}[name]
        c.run([x])
        assert c.straight_inference.batches == before + 1, name


def test_big_batches_and_long_schedules_run_on_the_loop():
    c = Compiler.create(case("tree_lstm").block)
    straight = c.straight_inference
    straight.trace_seconds = 0.0
    trees = [((1, 2), (3, (4, 5)))] * 40  # 40 nodes a loop launch
    c.run(trees)
    assert straight.batches == 0 and not straight.fits(c.plan(trees).plan)
    deep = 1
    for w in range(30):  # a chain of 30 binary cells: 30 launches, one row each
        deep = (deep, w % 7)
    straight.max_launches = 24
    assert not straight.fits(c.plan([deep]).plan)
    straight.max_launches = 64
    assert straight.fits(c.plan([deep]).plan)
    c.run([deep])
    assert straight.batches == 1


def test_a_sequence_is_traced_once_its_batches_spent_a_trace_on_the_loop():
    tree = ((1, 2), (3, (4, 5)))
    c = Compiler.create(case("tree_lstm").block)
    straight = c.straight_inference
    straight.trace_seconds, spent, calls = 0.05, 0.0, 0
    while straight.line.traced == 0 and calls < 5000:
        start = time.perf_counter()
        c.run([tree])
        calls += 1
        if straight.line.traced == 0:
            spent += time.perf_counter() - start
    assert straight.line.traced == 1 and straight.batches == 1
    assert spent >= 0.05 and calls > 1  # the calls before took longer than the loop
    assert straight.trace_seconds == straight._traces[0]  # a timed trace from now on
    other = Compiler.create(case("tree_lstm").block)
    other.straight_inference.trace_seconds = 1e9
    for _ in range(20):
        other.run([tree])
    assert other.straight_inference.line.traced == 0 and other.straight_inference.batches == 0


def test_first_predict_of_a_fresh_model_traces_no_straight_line():
    # each batch's time in the loop taken as 5 ms (about a one-tree batch's on the
    # developers' machine; a slower host measures more, and may trace sooner, as meant):
    # 22 batches of each of three sequences spend 0.11 s, under a trace's assumed cost
    c = models.make_tree_lstm()
    model = Model(c.block)
    straight = model.compiler.straight_inference
    looped, measured = straight.looped, []
    straight.looped = lambda seconds: (measured.append(seconds), looped(0.005))
    trees = [((1, 2), (3, 4)), ((0, 1), (2, 3)), (5, (6, 0))] * 22
    model.predict(trees, batch_size=1, verbose=0)
    assert len(measured) == 66 and straight.line.traced == 0


def test_traces_are_bounded_and_a_repeated_sequence_is_traced():
    c = Compiler.create(case("bidirectional_tagger").block)
    straight = c.straight_inference
    straight.line.ready = None  # the line's own policy: two in a row, or `patience` asks
    straight.max_launches = 200  # (a sentence of n words is about 2n launches)
    rng = np.random.default_rng(0)
    word = [0.5, -0.25, 1.0]
    for _ in range(3):
        c.run([[word] * 2])  # two in a row: traced from the second
    assert straight.line.traced == 1 and straight.batches == 2
    straight.line.patience, straight.line.slack = 2, 0
    for n in rng.integers(1, 30, 120):  # sentences of many lengths: many sequences
        c.run([[word] * int(n)])
    assert straight.line.traced == straight.MAX_SEQUENCES
    assert straight.fallbacks["sequences"] > 0 and straight.fallbacks["new"] > 0
    assert 2 < straight.batches < 123


def test_a_bad_id_is_named_on_the_straight_path():
    words = td.Map(td.Scalar("int32") >> td.Embedding(10, 2, name="words"))
    block = td.Record({"words": words}) >> td.GetItem(0) >> td.Sum() >> td.FC(2, name="out")
    c = Compiler.create(block)
    c.straight_inference.trace_seconds = 0.0
    c.run([{"words": [1, 2]}])
    assert c.straight_inference.batches == 1
    with pytest.raises(InputError, match=r"^example 0 at \['words'\]\[1\]: .*id 10 is not"):
        c.run([{"words": [1, 10]}])
    assert c.run([{"words": [3, 4]}])[0].shape == (2,)
    assert c.straight_inference.batches == 2


class _Outputs(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.batches = []

    def on_predict_batch_end(self, batch, logs=None):
        self.batches.append(np.asarray(logs["outputs"]))


@pytest.mark.parametrize("scheduler", ["agenda", "depth"])
def test_predict_at_batch_one_runs_straight_line_with_its_callbacks(scheduler):
    c = models.make_tree_lstm()
    model = Model(c.block, scheduler=scheduler)
    straight = model.compiler.straight_inference
    straight.trace_seconds = 0.0
    trees = [((1, 2), (3, 4)), ((0, 1), (2, 3)), (5, (6, 0))] * 4
    seen = _Outputs()
    got = model.predict(trees, batch_size=1, verbose=0, callbacks=[seen])
    assert straight.batches > 0
    assert len(seen.batches) == len(trees)
    np.testing.assert_allclose(np.concatenate(seen.batches), got)
    for i, x in enumerate(trees):
        np.testing.assert_allclose(got[i], reference_eval(c.block, x), atol=1e-5)
    straight.enabled = False
    ran = straight.batches
    np.testing.assert_allclose(model.predict(trees, batch_size=1, verbose=0), got, atol=1e-6)
    assert straight.batches == ran


def test_predict_with_a_subclass_predict_step_keeps_the_traced_step():
    class Doubled(Model):
        def predict_step(self, data):
            return 2.0 * super().predict_step(data)

    c = models.make_tree_lstm()
    model = Doubled(c.block)
    trees = [((1, 2), (3, 4))] * 12
    got = model.predict(trees, batch_size=1, verbose=0)
    assert model.compiler.straight_inference.batches == 0
    np.testing.assert_allclose(got[0], 2.0 * reference_eval(c.block, trees[0]), atol=1e-5)


def test_a_sentence_runs_on_the_function_of_a_slightly_longer_one():
    c = Compiler.create(case("bidirectional_tagger").block)
    straight = c.straight_inference
    straight.trace_seconds = 0.0
    rng = np.random.default_rng(3)
    sentence = rng.uniform(-1, 1, (10, 3)).astype("float32").tolist()
    c.run([sentence])
    assert straight.line.traced == 1
    for n in range(10 - straight.SLACK, 10):  # its launches and up to SLACK more, empty
        got = c.run([sentence[:n]])[0]
        assert_same_result(got, reference_eval(case("bidirectional_tagger").block,
                                               sentence[:n]), f"{n} words")
    assert straight.line.traced == 1 and straight.batches == 1 + straight.SLACK
    straight.trace_seconds = 1e9
    c.run([sentence[:9 - straight.SLACK]])  # one more empty launch than SLACK: not run
    assert straight.batches == 1 + straight.SLACK and straight.fallbacks["new"] == 1


def test_a_long_stream_of_new_sequences_is_remembered_within_bounds(monkeypatch):
    from refold.scheduler import straight as straight_module
    monkeypatch.setattr(straight_module, "MEMORY", 8)
    c = Compiler.create(case("bidirectional_tagger").block)
    straight = c.straight_inference
    straight.max_launches, straight.max_nodes = 200, 200
    straight.trace_seconds = 1e9
    for n in range(1, 40):  # 39 sequences, none traced
        c.run([[[0.5, -0.25, 1.0]] * n])
    line = straight.line
    assert line.traced == 0 and straight.batches == 0
    assert len(line._asked) <= 8 and len(line._served) <= 9 and len(straight._looped) <= 8


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_straight_line_under_a_mixed_policy_equals_the_loop(policy):
    before = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(policy)
    try:
        c = models.make_tree_lstm()
        comp = Compiler.create(c.block)
    finally:
        keras.mixed_precision.set_global_policy(before)
    assert comp.compute_dtype == policy[len("mixed_"):]
    straight = comp.straight_inference
    straight.trace_seconds = 0.0
    trees = [((1, 2), (3, (4, 5))), (6, 0)]
    got = comp.run(trees)
    assert straight.batches == 1
    straight.enabled = False
    looped = comp.run(trees)
    for g, w in zip(got, looped):
        assert g.dtype == w.dtype == np.float32
        np.testing.assert_allclose(g, w, atol=1e-2, rtol=1e-2)
