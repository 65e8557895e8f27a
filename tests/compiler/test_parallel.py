"""Parallel expansion and planning in forked workers give exactly the serial result."""

from __future__ import annotations

import numpy as np
import pytest

from refold.blocks.errors import InputError
from refold.compiler import Compiler
from refold.compiler.feeding.process_pool import ExpansionPool
from tests.compiler.test_engine import random_tree, word_tree_lstm

GRAPH_FIELDS = ("node_op", "node_arity", "node_args", "value_type", "value_node",
                "value_index", "sdepth")


def assert_same_graph(a, b):
    for f in GRAPH_FIELDS:
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f), err_msg=f)
    assert len(a.constants) == len(b.constants)
    for x, y in zip(a.constants, b.constants):
        np.testing.assert_array_equal(x, y)
        assert x.dtype == y.dtype


def assert_same_plan(got, want):
    assert_same_graph(got.graph, want.graph)
    assert got.feed.arrays.keys() == want.feed.arrays.keys()
    for k in want.feed.arrays:
        np.testing.assert_array_equal(got.feed.arrays[k], want.feed.arrays[k])


@pytest.fixture(scope="module")
def parallel_compiler():
    # one fork for the whole module; the block holds lambdas, so only fork can share it
    c = Compiler.create(word_tree_lstm(loss_everywhere=True), workers=2, cache=False)
    c.min_parallel_batch = 1
    yield c
    c.close()


def batch(seed: int, n: int) -> list:
    rng = np.random.default_rng(seed)
    return [random_tree(rng, int(rng.integers(1, 9))) for _ in range(n)]


def test_parallel_expansion_gives_the_serial_graphs(parallel_compiler):
    serial = Compiler.create(word_tree_lstm(loss_everywhere=True), cache=False)
    inputs = batch(0, 37)
    got = parallel_compiler.expand(inputs)
    want = serial.expand(inputs)
    assert len(got) == len(want) == 37
    for g, w in zip(got, want):
        assert_same_graph(g.graph, w.graph)
        assert g.result == w.result
        assert g.metrics == w.metrics


def test_parallel_plans_equal_serial_plans_and_run_the_same(parallel_compiler):
    inputs = [batch(1, 9), batch(2, 1), batch(3, 20)]
    serial = Compiler.create(word_tree_lstm(loss_everywhere=True), cache=False)
    plans = list(parallel_compiler.plan_batches(inputs, grouped=True))
    assert len(plans) == 3
    for b, p in zip(inputs, plans):
        assert_same_plan(p, serial.plan(b, grouped=True))
    # a plan made in a worker runs in the parent and gives the serial results
    b = inputs[0]
    p = list(parallel_compiler.plan_batches([b]))[0]
    outs = [o.numpy() for o in parallel_compiler._function()(p.feed.arrays)]
    got = parallel_compiler.results(p, outs)
    want = parallel_compiler.run(b)
    for (gv, gm), (wv, wm) in zip(got, want):
        np.testing.assert_allclose(gv, wv, rtol=1e-6)
        np.testing.assert_allclose(gm["loss"], wm["loss"], rtol=1e-6)


def test_a_bad_input_is_blamed_on_its_index_in_the_batch(parallel_compiler):
    inputs = batch(4, 30)
    inputs[23] = (inputs[23], "eight")  # the 24th input, in a later worker chunk
    with pytest.raises(InputError) as err:
        parallel_compiler.expand(inputs)
    assert err.value.example_index == 23
    assert "Scalar" in err.value.block_path
    assert str(err.value).startswith("example 23 at [1]: ")
    with pytest.raises(InputError) as err:
        list(parallel_compiler.plan_batches([batch(5, 4), inputs]))
    assert err.value.example_index == 23
    with pytest.raises(InputError) as err:
        parallel_compiler.run(inputs)
    assert err.value.example_index == 23
    assert len(parallel_compiler.run(batch(6, 5))) == 5  # the pool survives


def test_the_cache_maps_worker_errors_to_positions_in_the_whole_batch():
    c = Compiler.create(word_tree_lstm(), workers=1)
    c.min_parallel_batch = 2
    try:
        good = batch(7, 6)
        c.expand(good[:3])  # cached: only the rest go to the worker
        bad = good + [(1, "x")]
        with pytest.raises(InputError) as err:
            c.expand(bad)
        assert err.value.example_index == 6
    finally:
        c.close()


def test_workers_must_be_a_non_negative_int():
    with pytest.raises(ValueError, match="workers"):
        Compiler.create(word_tree_lstm(), workers=-1)
    with pytest.raises(ValueError, match="workers"):
        ExpansionPool(None, 0)


# --- planning ahead in a background thread (no workers) ----------------------------------

def test_plans_made_ahead_in_a_thread_equal_serial_plans():
    ahead = Compiler.create(word_tree_lstm(loss_everywhere=True))
    serial = Compiler.create(word_tree_lstm(loss_everywhere=True))
    inputs = [batch(8, 9), batch(9, 1), batch(10, 20), batch(11, 5)]
    for n in (1, 3):
        plans = list(ahead.plan_batches(inputs, grouped=True, ahead=n))
        assert len(plans) == 4
        for b, p in zip(inputs, plans):
            assert_same_plan(p, serial.plan(b, grouped=True))


def test_a_bad_input_planned_ahead_is_raised_at_its_batch():
    c = Compiler.create(word_tree_lstm())
    bad = batch(12, 6)
    bad[4] = (bad[4], "eight")
    plans = c.plan_batches([batch(13, 3), bad, batch(14, 2)], ahead=2)
    assert len(next(plans).examples) == 3
    with pytest.raises(InputError) as err:
        next(plans)
    assert err.value.example_index == 4


def test_a_consumer_may_stop_early_and_the_planner_thread_ends():
    import threading
    c = Compiler.create(word_tree_lstm())
    plans = c.plan_batches((batch(s, 4) for s in range(100)), ahead=2)
    next(plans)
    plans.close()  # as a `break` out of a for loop does
    assert not [t for t in threading.enumerate() if t.name == "refold-planner"]
