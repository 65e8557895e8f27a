"""A scheduler added through the registry alone runs the engine's equivalence tests.

`latest` is a toy strategy, added with `register_scheduler` only (a kernel and a
reference, nothing else edited): the prelude at step 0, every other node as late
as its consumers allow (step = 1 + the longest chain of nodes above the deepest
non-prelude node minus the one above it), so all the losses of a batch of chains
of different lengths run in one launch. Under it, random op graphs must equal the
node-by-node oracle (values and gradients), and the model family must equal the
reference evaluator through `Compiler`.
"""

from __future__ import annotations

import numba
import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

import refold as td
from refold.compiler import Compiler
from refold.scheduler import SCHEDULERS, OpGraph, Schedule, register_scheduler
from refold.scheduler.schedules import group_by_step
from tests.compiler import test_batched_equals_reference as models_vs_reference
from tests.scheduler.graphs import random_batches
from tests.scheduler.test_executor import (
    check_gradients,
    check_values,
    draw_reads,
    random_batch,
)
from tests.scheduler.test_schedules import check_stats_and_groups, check_valid

NAME = "latest"


@numba.njit(cache=False)
def latest_kernel(node_op, node_arity, node_args, value_node, sdepth):
    n = len(node_op)
    starts = np.zeros(n + 1, np.int64)
    for j in range(n):
        starts[j + 1] = starts[j] + node_arity[j]
    prelude = np.ones(n, np.bool_)
    for j in range(n):
        for p in range(starts[j], starts[j + 1]):
            if value_node[node_args[p]] >= 0:
                prelude[j] = False
    # above[j]: the longest chain of nodes consuming j's outputs (nodes come after
    # their inputs in an op graph, so one pass from the end settles it)
    above = np.zeros(n, np.int64)
    for j in range(n - 1, -1, -1):
        for p in range(starts[j], starts[j + 1]):
            producer = value_node[node_args[p]]
            if producer >= 0:
                above[producer] = max(above[producer], above[j] + 1)
    top = 0
    for j in range(n):
        if not prelude[j]:
            top = max(top, above[j])
    step = np.zeros(n, np.int64)
    for j in range(n):
        if not prelude[j]:
            step[j] = 1 + top - above[j]
    return group_by_step(node_op, step)


def latest_reference(graph: OpGraph) -> Schedule:
    """`latest` written plainly: relax the chain lengths until nothing changes."""
    producer = graph.node_dependencies().tolist()
    off = graph.arg_offsets().tolist()
    n = graph.num_nodes
    inputs = [{p for p in producer[off[j]:off[j + 1]] if p >= 0} for j in range(n)]
    above = [0] * n
    changed = True
    while changed:
        changed = False
        for j in range(n):
            for p in inputs[j]:
                if above[p] < above[j] + 1:
                    above[p], changed = above[j] + 1, True
    top = max([above[j] for j in range(n) if inputs[j]], default=0)
    return Schedule.from_steps(graph, [1 + top - above[j] if inputs[j] else 0
                                       for j in range(n)])


@pytest.fixture(autouse=True, scope="module")
def latest():
    entry = register_scheduler(NAME, latest_kernel, latest_reference)
    yield entry
    SCHEDULERS.pop(NAME)


@settings(max_examples=40)
@given(pair=random_batches())
def test_the_registered_kernel_equals_its_reference_and_is_a_valid_schedule(pair):
    graph, raw = pair
    got, want = SCHEDULERS[NAME](graph), SCHEDULERS[NAME].reference(graph)
    for field in ("node_step", "group_step", "group_op", "node_group"):
        np.testing.assert_array_equal(getattr(got, field), getattr(want, field), field)
    check_valid(got, raw)
    check_stats_and_groups(got, raw)


def plan_of(scheduler: str, inputs: list):
    chain = td.Fold(td.Function(tf.add), td.FromTensor(tf.zeros([]))) >> td.Function(tf.square)
    return Compiler(td.Map(td.Scalar()) >> chain, scheduler=scheduler).schedule(inputs).plan


def sink_steps(plan) -> set:
    """The steps of the nodes whose outputs no node reads (here: the squares)."""
    read = set(plan.value_node[plan.node_args].tolist())
    return {int(plan.node_step[j]) for j in range(plan.num_nodes) if j not in read}


def test_the_registered_scheduler_is_used_and_differs_from_depth_and_agenda():
    # chains of 2 and 4 adds, each then squared: depth squares them apart; the agenda
    # squares them together but runs the short chain's adds early, `latest` late
    inputs = [[1.0] * 2, [1.0] * 4]
    latest, depth, agenda = (plan_of(s, inputs) for s in (NAME, "depth", "agenda"))
    assert len(sink_steps(latest)) == 1 and len(sink_steps(depth)) == 2
    assert latest.stats.launches < depth.stats.launches
    assert latest.node_step.tolist() != agenda.node_step.tolist()


@settings(max_examples=25)
@given(data=st.data())
def test_values_of_random_graphs_equal_the_oracle(data):
    graph, raw = random_batch(data.draw)
    check_values(graph, raw, NAME, draw_reads(data.draw, graph.num_values))


@settings(max_examples=25)
@given(data=st.data())
def test_gradients_of_random_graphs_equal_the_oracle(data):
    graph, raw = random_batch(data.draw)
    reads = draw_reads(data.draw, graph.num_values)
    check_gradients(graph, raw, NAME, reads, data.draw(st.integers(0, 2**31 - 1)))


@pytest.mark.parametrize("name", models_vs_reference.NAMES)
@settings(max_examples=3)
@given(data=st.data())
def test_models_batched_under_it_equal_the_reference(name, data):
    inputs = data.draw(st.lists(models_vs_reference.case(name).inputs, min_size=1,
                                max_size=12))
    models_vs_reference.check_batch(name, NAME, inputs)
