"""Expanding inputs (`compiler.graphs.expansion`): a batch expanded as one graph is the
batch of its examples' graphs, bad inputs included."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import refold as td
from refold.blocks.errors import InputError
from refold.compiler import Compiler
from refold.compiler.feeding.lists import InputPipeline
from refold.compiler.graphs.expansion import expand_all, expand_batch
from refold.scheduler.graph import OpGraph
from tests.compiler.test_engine import word_tree_lstm

TREES = [((1, 2), 3), 4, (5, (6, (7, 8))), (0, 9)]


def assert_same_graph(got: OpGraph, want: OpGraph) -> None:
    for name in ("node_op", "node_arity", "node_args", "value_type", "value_node",
                 "value_index", "sdepth"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)
    assert len(got.constants) == len(want.constants)
    for a, b in zip(got.constants, want.constants):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


def with_a_source(block):
    """`block` plus an argument-less op (a variable read, `td.FromTensor`) per input."""
    bias = td.FromTensor(tf.Variable([0.5, -0.5]))
    return td.AllOf(block, td.Void() >> bias) >> td.Function(tf.add)


def test_a_batch_expanded_as_one_graph_is_its_examples_graphs_side_by_side():
    c = Compiler.create(with_a_source(word_tree_lstm(loss_everywhere=True) >> td.FC(2)))
    batch = expand_batch(c.program, TREES)
    examples = expand_all(c.program, TREES)
    # one argument-less node per example, as each example's own graph has
    assert batch.graph.num_nodes == sum(e.graph.num_nodes for e in examples)
    assert_same_graph(batch.graph, OpGraph.concatenate([e.graph for e in examples]))
    assert len(batch) == 4 and batch.kept == [0, 1, 2, 3] and batch.skipped == []


def test_a_batch_plan_packs_the_arrays_of_the_plan_of_its_examples():
    c = Compiler.create(word_tree_lstm(loss_everywhere=True), cache=False)
    pipeline = InputPipeline(c)
    got = pipeline.arrays(c.plan_batch(expand_batch(c.program, TREES)))
    want = pipeline.arrays(c.plan_expanded(expand_all(c.program, TREES), grouped=True))
    assert sorted(got) == sorted(want)
    for k in want:  # metric_bounds too: every result first, then each metric's values
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    assert got["batch_size"].tolist() == [4]


def test_without_cache_a_grouped_plan_is_one_graph_and_runs_as_the_reference():
    block = word_tree_lstm() >> td.FC(2)
    c = Compiler.create(block, cache=False)
    plan = c.plan(TREES, grouped=True)
    assert len(plan.plan.value_offsets) == 2  # the planner saw one record
    outputs = [o.numpy() for o in c._compute(plan.feed.arrays)]
    got = [outputs[k][p] for k, p in zip(plan.plan.read_type, plan.plan.read_pos)]
    for tree, row in zip(TREES, got):
        np.testing.assert_allclose(row, block.eval(tree), rtol=1e-5, atol=1e-6)


def test_a_bad_input_of_a_batch_is_named_by_its_index_and_block_path():
    c = Compiler.create(word_tree_lstm(), cache=False)
    with pytest.raises(InputError) as err:
        expand_batch(c.program, [*TREES[:2], (1, "two"), TREES[2]])
    assert err.value.example_index == 2 and "Scalar" in err.value.block_path
    with pytest.raises(InputError, match="example 2"):
        c.plan([*TREES[:2], (1, "two")], grouped=True)


def test_a_skipped_input_leaves_nothing_of_itself_in_the_batch_graph():
    c = Compiler.create(with_a_source(word_tree_lstm(loss_everywhere=True)), cache=False)
    bad = [(3, (4, "five")), [1]]  # fail after some nodes of theirs are recorded
    inputs = [TREES[0], bad[0], TREES[1], TREES[2], bad[1], TREES[3]]
    batch = expand_batch(c.program, inputs, skip=True)
    assert batch.kept == [0, 2, 3, 5]
    assert [i for i, _ in batch.skipped] == [1, 4]
    assert all(isinstance(e, InputError) and e.example_index == i for i, e in batch.skipped)
    assert_same_graph(batch.graph, expand_batch(c.program, TREES).graph)
    np.testing.assert_array_equal(batch.record, expand_batch(c.program, TREES).record)


class _Calls:
    """A function with an input check (`Op.check`, read from `check_inputs`) that
    counts the rows it is given in each call."""

    def __init__(self):
        self.calls: list[int] = []

    def __call__(self, x):
        return x * 2.0

    def check_inputs(self, x):
        from refold.blocks.errors import BadValueError
        self.calls.append(len(x))
        if np.any(x > 100):
            raise BadValueError(f"{x.max()} is over 100")


def test_an_input_check_runs_once_per_graph_and_again_per_node_to_name_a_bad_input():
    fn = _Calls()
    block = td.Map(td.Scalar() >> td.Function(fn, name="scaled")) >> td.Sum()
    c = Compiler.create(block)
    expand_all(c.program, [[1.0, 2.0, 3.0], [4.0]])
    assert fn.calls == [3, 1]  # one call per example's graph, on all its rows
    fn.calls.clear()
    expand_batch(c.program, [[1.0, 2.0, 3.0], [4.0]])
    assert fn.calls == [4]
    fn.calls.clear()
    with pytest.raises(InputError) as err:
        expand_batch(c.program, [[1.0], [2.0, 300.0]])
    assert fn.calls == [3, 1, 1, 1]  # the batch fails; again node by node, to say where
    assert (err.value.example_index, err.value.data_path) == (1, "[1]")
    assert err.value.block_path == "Pipe[0] > Map > Function 'scaled'"
    assert err.value.reason.endswith(": 300.0 is over 100")
    skipped = expand_batch(c.program, [[1.0], [2.0, 300.0], [5.0]], skip=True)
    assert skipped.kept == [0, 2] and [i for i, _ in skipped.skipped] == [1]
