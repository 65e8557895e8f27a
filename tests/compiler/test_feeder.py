"""Every source of a call's batches implements `compiler.feeding.feeder.Feeder`, and the
feeders `fit` makes keep its contract."""

from __future__ import annotations

import inspect
import threading

import numpy as np
import pytest

from refold.compiler import Model
from refold.compiler.distribute.sharded_streams import ShardedStreamFeeder
from refold.compiler.distribute.strategy import ShardFeeder
from refold.compiler.feeding.feeder import Feeder
from refold.compiler.feeding.lists import BatchFeeder
from refold.compiler.feeding.streams import StreamFeeder
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
