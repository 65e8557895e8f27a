"""The one-call planner gives exactly what merging, scheduling and packing give apart.

Random batches of the executor tests' graphs (every stage, int and float types, ops
with several outputs), random reads and metrics per example, both schedulers,
reads per example or grouped by metric: `Planner.plan` must equal
`OpGraph.concatenate`, the scheduler's reference and `Planner.feed` field by field.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refold.scheduler import SCHEDULERS, OpGraph
from refold.scheduler.planner import Planner, plan_record
from tests.scheduler.graphs import Choices, draw_graph
from tests.scheduler.test_executor import (
    ALL,
    CONST_ONLY,
    DTYPES,
    INT,
    NAMES,
    SHAPES,
    SPECS,
    TYPES,
    Builder,
    make_const,
)

N_METRICS = 3


def draw_example(draw):
    """(graph, results, metric ids, metric value ids) of one random example."""
    c = Choices(draw)
    graph, _ = draw_graph(draw, SPECS, len(TYPES), max_nodes=20, const_only=CONST_ONLY,
                          hub=bool(c.int(0, 1)), make_const=make_const, shapes=SHAPES,
                          dtypes=DTYPES)
    v = graph.num_values
    pick = (lambda n: [c.int(0, v - 1) for _ in range(n)]) if v else (lambda n: [])
    n_metrics = c.int(0, 4) if v else 0
    return (graph, pick(c.int(0, 3)), [c.int(0, N_METRICS - 1) for _ in range(n_metrics)],
            pick(n_metrics))


def reference_reads(examples, offsets, grouped):
    """The reads as `Compiler.plan` orders them, written out plainly."""
    if not grouped:
        return [v + offsets[i] for i, (_, res, _, mv) in enumerate(examples)
                for v in list(res) + list(mv)]
    reads = [v + offsets[i] for i, (_, res, _, _) in enumerate(examples) for v in res]
    for m in range(N_METRICS):
        reads += [v + offsets[i] for i, (_, _, mids, mv) in enumerate(examples)
                  for mid, v in zip(mids, mv) if mid == m]
    return reads


def plan_both(examples, name, grouped):
    records = [plan_record(*e) for e in examples]
    got = Planner(ALL.executor.layout, name, N_METRICS).plan(
        records, [e[0].constants for e in examples], grouped)
    graph = OpGraph.concatenate([e[0] for e in examples])
    schedule = SCHEDULERS[name].reference(graph)
    offsets = np.cumsum([0] + [e[0].num_values for e in examples])
    reads = np.asarray(reference_reads(examples, offsets, grouped), np.int64)
    return got, graph, schedule, offsets, reads


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=60, deadline=None)
@given(data=st.data(), grouped=st.booleans())
def test_the_planner_equals_merge_schedule_and_feed(name, data, grouped):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    examples = [draw_example(rng) for _ in range(data.draw(st.integers(1, 4)))]
    got, graph, schedule, offsets, reads = plan_both(examples, name, grouped)
    for field in ("node_op", "node_arity", "sdepth", "node_args", "value_type", "value_node",
                  "value_index"):
        np.testing.assert_array_equal(getattr(got, field), getattr(graph, field), field)
    assert got.const_counts.tolist() == [len(c) for c in graph.constants]
    np.testing.assert_array_equal(got.value_offsets, offsets)
    np.testing.assert_array_equal(got.reads, reads)
    counts = np.bincount([m for e in examples for m in e[2]], minlength=N_METRICS)
    np.testing.assert_array_equal(got.metric_counts, counts)
    for field in ("node_step", "group_step", "group_op", "node_group"):
        np.testing.assert_array_equal(getattr(got, field), getattr(schedule, field), field)
    feed = ALL.planner.feed(graph, schedule, reads)
    assert sorted(got.feed.arrays) == sorted(feed.arrays)
    for key, want in feed.arrays.items():
        np.testing.assert_array_equal(got.feed.arrays[key], want, key)
    np.testing.assert_array_equal(got.read_type, feed.read_type)
    np.testing.assert_array_equal(got.read_pos, feed.read_pos)
    assert got.stats == schedule.stats


@pytest.mark.parametrize("name", NAMES)
def test_the_planner_rejects_a_lookup_of_a_value_the_loop_computes(name):
    # as in test_executor: `look` runs in the loop, so it may only read constants
    b = Builder()
    b.node("look", b.node("inc", b.const(INT, 2))[0])
    graph, _ = b.graph()
    record = plan_record(graph, [graph.num_values - 1], [], [])
    with pytest.raises(ValueError, match="'look' looks up a variable"):
        Planner(ALL.executor.layout, name).plan([record], [graph.constants])


def test_the_planner_plans_an_empty_batch_and_needs_a_known_scheduler():
    plan = Planner(ALL.executor.layout, "agenda").plan([], [])
    assert plan.num_nodes == 0 and plan.stats.launches == 0
    assert ALL.forward(plan.feed.arrays)[0].shape == (0, *TYPES[0].shape)
    with pytest.raises(ValueError, match="a record per example"):
        Planner(ALL.executor.layout, "agenda").plan([], [[]])
    with pytest.raises(ValueError, match="scheduler must be one of"):
        Planner(ALL.executor.layout, "fifo")
