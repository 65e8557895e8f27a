"""Depth and agenda schedules: validity, statistics, launch groups and batching quality."""

from __future__ import annotations

from collections import Counter
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refold.scheduler import (
    SCHEDULERS,
    OpGraph,
    Schedule,
    agenda_schedule,
    depth_schedule,
    register_scheduler,
)
from refold.scheduler.schedules import agenda_reference
from tests.scheduler.graphs import random_batches

NAMES = sorted(SCHEDULERS)


def check_valid(schedule: Schedule, raw) -> None:
    """Every node runs after the nodes producing its inputs; step 0 iff no node inputs."""
    schedule.validate()
    step = schedule.node_step.tolist()
    assert len(step) == raw.num_nodes
    for j in range(raw.num_nodes):
        inputs = raw.node_inputs(j)
        for p in inputs:
            assert step[j] > step[p], f"node {j} at step {step[j]}, its input {p} at {step[p]}"
        assert (step[j] == 0) == (not inputs), f"node {j} at step {step[j]}, inputs {inputs}"


def check_stats_and_groups(schedule: Schedule, raw) -> None:
    step = schedule.node_step.tolist()
    pairs = {(step[j], raw.node_op[j]) for j in range(raw.num_nodes)}
    stats = schedule.stats
    assert stats.steps == len(set(step))
    assert stats.launches == len(pairs)
    nodes_of_op = Counter(raw.node_op)
    launches_of_op = Counter(o for _, o in pairs)
    assert stats.mean_batch_size == pytest.approx(
        {o: nodes_of_op[o] / launches_of_op[o] for o in nodes_of_op})

    g_step, g_op, n_group = (schedule.group_step.tolist(), schedule.group_op.tolist(),
                             schedule.node_group.tolist())
    assert len(g_step) == len(g_op) == stats.launches
    assert len(n_group) == raw.num_nodes
    # one group per launch, no repeats, in execution order (by step, then op)
    assert list(zip(g_step, g_op)) == sorted(pairs)
    for j in range(raw.num_nodes):
        assert g_step[n_group[j]] == step[j]
        assert g_op[n_group[j]] == raw.node_op[j]


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=60)
@given(pair=random_batches())
def test_schedules_of_random_graphs_are_valid(name, pair):
    graph, raw = pair
    check_valid(SCHEDULERS[name](graph), raw)


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=60)
@given(pair=random_batches())
def test_each_schedulers_kernel_equals_its_reference(name, pair):
    graph, _ = pair
    got, want = SCHEDULERS[name](graph), SCHEDULERS[name].reference(graph)
    for field in ("node_step", "group_step", "group_op", "node_group"):
        np.testing.assert_array_equal(getattr(got, field), getattr(want, field), field)


@settings(max_examples=40)
@given(pair=random_batches(), costs=st.lists(st.sampled_from([0.0, 1.0, 2.5]), max_size=6))
def test_the_agenda_with_op_costs_equals_its_reference(pair, costs):
    graph, _ = pair
    got, want = agenda_schedule(graph, costs), agenda_reference(graph, costs)
    np.testing.assert_array_equal(got.node_step, want.node_step)
    np.testing.assert_array_equal(got.node_group, want.node_group)


def test_a_scheduler_name_is_registered_once():
    with pytest.raises(ValueError, match="'depth' is already registered"):
        register_scheduler("depth", SCHEDULERS["agenda"].kernel, agenda_reference)
    with pytest.raises(ValueError, match="non-empty str"):
        register_scheduler("", SCHEDULERS["agenda"].kernel, agenda_reference)


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=60)
@given(pair=random_batches())
def test_schedule_stats_and_groups_describe_the_steps(name, pair):
    graph, raw = pair
    check_stats_and_groups(SCHEDULERS[name](graph), raw)


@settings(max_examples=60)
@given(pair=random_batches())
def test_depth_schedule_runs_every_node_at_its_dependency_depth(pair):
    graph, raw = pair
    s = depth_schedule(graph)
    depths = raw.depths()
    assert s.node_step.tolist() == depths
    assert s.stats.steps == (max(depths) + 1 if depths else 0)


@settings(max_examples=60)
@given(pair=random_batches())
def test_agenda_launches_the_ready_op_of_lowest_average_depth_with_all_its_ready_nodes(pair):
    graph, raw = pair
    s = agenda_schedule(graph)
    step = s.node_step.tolist()
    depths = raw.depths()
    ops = sorted(set(raw.node_op))
    avg = {o: Fraction(sum(d for d, oo in zip(depths, raw.node_op) if oo == o),
                       raw.node_op.count(o)) for o in ops}
    last = max(step, default=0)
    assert sorted(set(step) - {0}) == list(range(1, last + 1))  # no gaps
    for t in range(1, last + 1):
        launched = {raw.node_op[j] for j in range(raw.num_nodes) if step[j] == t}
        assert len(launched) == 1, f"step {t} runs ops {launched}"
        (o,) = launched
        ready = [j for j in range(raw.num_nodes) if step[j] >= t
                 and all(step[p] < t for p in raw.node_inputs(j))]
        best = min({raw.node_op[j] for j in ready}, key=lambda q: (avg[q], q))
        assert o == best, f"step {t} runs op {o}, but op {best} ranks first"
        left = [j for j in ready if raw.node_op[j] == o and step[j] != t]
        assert not left, f"step {t} leaves ready nodes {left} of op {o} for later"


@pytest.mark.parametrize("name", NAMES)
def test_schedules_of_an_empty_graph_have_no_steps(name):
    for graph in [OpGraph.build([], [], [], [], [], [], [np.zeros(0)]),
                  OpGraph.build([], [], [], [0, 0], [-1, -1], [1, 0], [np.zeros(2)])]:
        s = SCHEDULERS[name](graph)
        s.validate()
        assert (s.stats.steps, s.stats.launches, s.stats.mean_batch_size) == (0, 0, {})
        assert len(s.node_step) == len(s.group_step) == len(s.group_op) == 0
        assert len(s.node_group) == 0


def test_agenda_breaks_equal_average_depth_by_op_cost():
    # v1 = op2(c0); v2 = op0(v1); v3 = op1(v1): ops 0 and 1 both have average depth 1
    g = OpGraph.build([2, 0, 1], [1, 1, 1], [0, 1, 1], [0] * 4, [-1, 0, 1, 2], [0] * 4,
                      [np.zeros(1)])
    assert agenda_schedule(g).node_step.tolist() == [0, 1, 2]  # by op id
    assert agenda_schedule(g, op_cost=[5.0, 1.0, 0.0]).node_step.tolist() == [0, 2, 1]
    assert agenda_schedule(g, op_cost=[1.0, 5.0, 0.0]).node_step.tolist() == [0, 1, 2]


@pytest.mark.parametrize("steps", [[0, 0], [1, 0]])
def test_schedule_validate_rejects_a_node_not_after_its_input(steps):
    # node 1 reads node 0's output
    g = OpGraph.build([0, 0], [1, 1], [0, 1], [0, 0, 0], [-1, 0, 1], [0, 0, 0], [np.zeros(1)])
    with pytest.raises(ValueError, match="no later than"):
        Schedule.from_steps(g, np.array(steps)).validate()


def test_schedule_validate_rejects_a_prelude_node_reading_a_node_output():
    g = OpGraph.build([0, 0], [1, 1], [0, 1], [0, 0, 0], [-1, 0, 1], [0, 0, 0], [np.zeros(1)])
    with pytest.raises(ValueError, match="prelude"):
        Schedule.from_steps(g, np.array([-1, 0])).validate()


# --- batching quality ------------------------------------------------------------------------

A, LOSS = 0, 1


def chain(n: int) -> OpGraph:
    """c -> a -> a ... (n nodes of op A) -> loss."""
    return OpGraph.build([A] * n + [LOSS], [1] * (n + 1), list(range(n + 1)), [0] * (n + 2),
                         [-1] + list(range(n + 1)), [0] * (n + 2), [np.zeros(1)])


def test_agenda_batches_the_losses_of_chains_of_different_lengths():
    # DyNet's Figure 1: sequences of different lengths, each ending in a loss
    g = OpGraph.concatenate([chain(3), chain(2), chain(4), chain(2)])
    d, a = depth_schedule(g), agenda_schedule(g)
    a.validate()
    assert d.stats.launches == 4 + 3  # op A at depths 0-3, the losses at depths 2, 3, 4
    assert a.stats.launches == 4 + 1  # all losses in one launch
    assert a.stats.mean_batch_size[LOSS] == 4.0
    assert d.stats.mean_batch_size[LOSS] == pytest.approx(4 / 3)


@settings(max_examples=60)
@given(st.lists(st.integers(1, 8), min_size=2, max_size=8).filter(lambda ls: len(set(ls)) > 1))
def test_agenda_needs_no_more_launches_than_depth_on_chains_ending_in_a_loss(lengths):
    g = OpGraph.concatenate([chain(n) for n in lengths])
    d, a = depth_schedule(g), agenda_schedule(g)
    a.validate()
    assert d.stats.launches == max(lengths) + len(set(lengths))
    assert a.stats.launches <= d.stats.launches
    # when the chain op's average depth is below the losses', A runs to the end first and
    # all losses share one launch
    avg_a = Fraction(sum(n * (n - 1) // 2 for n in lengths), sum(lengths))
    if avg_a < Fraction(sum(lengths), len(lengths)):
        assert a.stats.launches == max(lengths) + 1 < d.stats.launches


LEAF, PAIR, TREE_LOSS = 0, 1, 2


def tree_graph(tree) -> OpGraph:
    """A leaf reads a constant; a pair reads its two subtrees; a loss reads every tree node."""
    ops, args, vnode = [], [], []

    def value(node):
        vnode.append(node)
        return len(vnode) - 1

    def call(op, xs):
        ops.append(op)
        args.append(xs)
        return value(len(ops) - 1)

    def walk(t):
        if t is None:
            v = call(LEAF, [value(-1)])
        else:
            v = call(PAIR, [walk(t[0]), walk(t[1])])
        call(TREE_LOSS, [v])
        return v

    walk(tree)
    n_consts = vnode.count(-1)
    index, row = [], 0
    for n in vnode:
        if n < 0:
            index.append(row)
            row += 1
        else:
            index.append(0)
    return OpGraph.build(ops, [len(a) for a in args], [v for a in args for v in a],
                         [0] * len(vnode), vnode, index, [np.zeros(n_consts)])


trees = st.recursive(st.none(), lambda sub: st.tuples(sub, sub), max_leaves=12)


@settings(max_examples=60)
@given(st.lists(trees, min_size=1, max_size=4))
def test_agenda_needs_no_more_launches_than_depth_on_trees_with_a_loss_at_every_node(forest):
    g = OpGraph.concatenate([tree_graph(t) for t in forest])
    d, a = depth_schedule(g), agenda_schedule(g)
    a.validate()
    d.validate()
    assert a.stats.launches <= d.stats.launches


@pytest.mark.parametrize("steps", [[3, 1, 3, 0], [1000, 7, 1000, 0], [-2, -5, -2, -9]])
def test_from_steps_groups_by_step_then_op_whatever_the_step_numbers(steps):
    # ops 1, 0, 0, 1: nodes 0 and 2 share a step but not an op
    g = OpGraph.build([1, 0, 0, 1], [0] * 4, [], [0] * 4, [0, 1, 2, 3], [0] * 4,
                      [np.zeros(0)])
    s = Schedule.from_steps(g, np.array(steps))
    order = sorted(range(4), key=lambda j: (steps[j], g.node_op[j]))
    pairs = sorted({(steps[j], int(g.node_op[j])) for j in range(4)})
    assert s.group_step.tolist() == [p[0] for p in pairs]
    assert s.group_op.tolist() == [p[1] for p in pairs]
    assert [pairs[s.node_group[j]] for j in order] == [(steps[j], int(g.node_op[j]))
                                                      for j in order]
    assert s.stats.launches == len(pairs)
