"""Every source of a call's batches implements `compiler.feeding.feeder.Feeder`, and the
feeders `fit` makes keep its contract."""

from __future__ import annotations

import contextlib
import inspect
import threading
import time

import numpy as np
import pytest

from refold.blocks.errors import InputError
from refold.compiler import Model
from refold.compiler.distribute.sharded_streams import ShardedStreamFeeder
from refold.compiler.distribute.strategy import ShardFeeder
from refold.compiler.feeding import lists
from refold.compiler.feeding.feeder import Feeder
from refold.compiler.feeding.lists import BatchFeeder
from refold.compiler.feeding.streams import StreamFeeder
from refold.compiler.training.steps import StepFunction
from tests.compiler import factories
from tests.compiler.test_model import compiled, sign_data

FEEDERS = [BatchFeeder, StreamFeeder, ShardFeeder, ShardedStreamFeeder]


@pytest.mark.parametrize("cls", FEEDERS, ids=lambda c: c.__name__)
def test_each_feeder_implements_the_protocol(cls):
    assert issubclass(cls, Feeder) and not inspect.isabstract(cls)
    for name in ("dataset", "batch", "examples"):
        assert getattr(cls, name) is not getattr(Feeder, name), name


def test_a_feeder_that_leaves_a_method_out_cannot_be_made():
    class NoExamples(Feeder):
        def dataset(self):
            return None

        def batch(self, i):
            return ()

    with pytest.raises(TypeError, match="examples"):
        NoExamples()


def check_contract(feeder: Feeder, n_inputs: int, batch_size: int) -> None:
    assert isinstance(feeder, Feeder) and feeder.with_labels
    arrays, y = feeder.batch(0)  # no sample weights given
    positions = feeder.examples(0)
    assert len(positions) == len(y) == int(arrays["batch_size"][0]) <= batch_size
    assert set(feeder.signature[0]) == set(arrays)
    seen, n = list(positions), -(-n_inputs // batch_size)
    for i in range(1, n):
        feeder.batch(i)
        seen += list(feeder.examples(i))
    assert sorted(seen) == list(range(n_inputs))  # a pass gives every input once
    if feeder.n_batches is None:  # a source of unknown length ends with StopIteration
        with pytest.raises(StopIteration):
            feeder.batch(n)
    feeder.close()
    feeder.close()


def test_a_list_s_feeder_keeps_the_contract():
    trees, y = sign_data(10, seed=3)
    model = compiled(Model(factories.tree_sign()))
    model.fit(trees, y, batch_size=4, epochs=1, shuffle=True, verbose=0)
    feeder = model.feed.of_role("train")
    assert type(feeder) is BatchFeeder and feeder.n_batches == 3
    assert len(list(feeder.dataset())) == 3
    check_contract(feeder, 10, 4)


class Again:
    """A stream that can be read again: an iterable, not a sequence."""

    def __init__(self, items):
        self.items = items

    def __iter__(self):
        return iter(self.items)


def test_a_stream_s_feeder_keeps_the_contract_and_closes_its_thread():
    trees, y = sign_data(10, seed=4)
    model = compiled(Model(factories.tree_sign()))
    try:
        model.fit(Again(list(zip(trees, y))), batch_size=4, epochs=2, verbose=0)
        feeder = model.feed.of_role("train")
        assert type(feeder) is StreamFeeder and feeder.n_batches is None
        check_contract(feeder, 10, 4)
        assert not [t for t in threading.enumerate() if t.name == "refold-stream"]
    finally:
        model.compiler.close()
    assert np.isfinite(model.get_weights()[0]).all()


@contextlib.contextmanager
def planning_ahead_before_the_call(monkeypatch):
    """`BatchFeeder.planning_ahead` that waits, inside its scope, until its thread has
    ended (planned every batch it would, or met one that fails), so that the steps
    take batches planned ahead whatever the machine's speed; yields a list of
    `(i, batches planned ahead)` per scope, and one of `(thread name, batch index)`
    per batch planned."""
    scopes, made = [], []
    plan_of, ahead_of = BatchFeeder._plan, BatchFeeder.planning_ahead

    def plan(self, j):
        out = plan_of(self, j)
        made.append((threading.current_thread().name, j))
        return out

    @contextlib.contextmanager
    def ahead(self, i):
        with ahead_of(self, i):
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and any(
                    t.name == "refold-plan-ahead" for t in threading.enumerate()):
                time.sleep(0.01)
            scopes.append((i, len(self._planned)))
            yield

    monkeypatch.setattr(BatchFeeder, "_plan", plan)
    monkeypatch.setattr(BatchFeeder, "planning_ahead", ahead)
    yield scopes, made


def fitted_weights(trees, y, **fit):
    model = compiled(Model(factories.tree_sign(seed=4)))
    history = model.fit(trees, y, verbose=0, **fit)
    return model, [w.numpy() for w in model.weights], history.history


def test_batches_planned_while_a_step_is_first_called_train_as_planned_when_asked(
        monkeypatch):
    """The first call of a traced step (TensorFlow readies its graph then) plans the
    pass's next batches on a thread; training on them is training on the batches
    `batch` plans when asked: the same weights, losses and validation."""
    trees, y = sign_data(60, seed=6)
    fit = dict(batch_size=8, epochs=2, shuffle=True, validation_data=(trees[:20], y[:20]))
    monkeypatch.setattr(lists, "AHEAD", 0)
    _, asked, asked_history = fitted_weights(trees, y, **fit)
    monkeypatch.setattr(lists, "AHEAD", 128)
    steps, init = [], StepFunction.__init__

    def keep(self, *args, **kwargs):
        init(self, *args, **kwargs)
        steps.append(self)
    monkeypatch.setattr(StepFunction, "__init__", keep)
    with planning_ahead_before_the_call(monkeypatch) as (scopes, made):
        model, ahead, ahead_history = fitted_weights(trees, y, **fit)
        # the train step's first call planned batches 1..7, validation's 1..2, and
        # each batch of the 2 epochs was planned once (8 + 3 a pass)
        assert scopes[:2] == [(1, 7), (1, 2)], scopes
        assert len(made) == 2 * (8 + 3) and made.count(("refold-plan-ahead", 1)) == 2
        first_calls = sum(len(s._called) for s in steps)
        assert len(scopes) == first_calls  # a scope per traced step's first call only
        model.fit(trees, y, verbose=0, **fit)  # traced already: no scope
        assert len(scopes) == sum(len(s._called) for s in steps) == first_calls
    for a, b in zip(asked, ahead):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    for key in asked_history:
        np.testing.assert_allclose(asked_history[key], ahead_history[key], rtol=1e-6)


def test_a_bad_input_in_a_batch_planned_ahead_is_reported_at_its_batch(monkeypatch):
    """Without a cache, inputs are expanded as their batch is planned: a bad one
    found by the thread that plans ahead is reported by the step of its batch, with
    its index in x, as when it is planned there."""
    trees, y = sign_data(40, seed=7)
    trees[29] = "not a tree"
    errors = []
    for ahead in (0, 128):
        monkeypatch.setattr(lists, "AHEAD", ahead)
        with planning_ahead_before_the_call(monkeypatch) as (scopes, _):
            model = compiled(Model(factories.tree_sign(seed=4), cache=False))
            with pytest.raises(InputError) as e:
                model.fit(trees, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
        errors.append(str(e.value))
        assert e.value.example_index == 29
        if ahead:
            assert scopes == [(1, 2)]  # batches 1 and 2 made; 3 holds the bad input
    assert errors[0] == errors[1]


def test_no_batch_is_planned_ahead_while_auto_measures_the_schedulers(monkeypatch):
    """`scheduler="auto"` times each batch from its planning to the next's: batches
    planned ahead would be timed without their steps, so none are until it has chosen."""
    trees, y = sign_data(200, seed=8)
    with planning_ahead_before_the_call(monkeypatch) as (scopes, made):
        model = compiled(Model(factories.tree_sign(seed=4), scheduler="auto"))
        model.fit(trees, y, batch_size=8, epochs=1, verbose=0)
    assert model.compiler.scheduler_choice.chosen is not None  # 25 batches: it chose
    assert scopes and all(planned == 0 for _, planned in scopes), scopes
    assert all(name != "refold-plan-ahead" for name, _ in made)
