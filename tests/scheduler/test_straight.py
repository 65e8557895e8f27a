"""Straight-line runs of few-launch graphs (`scheduler.straight`): the oracle's values,
the executor's, one trace per launch sequence, and the fallbacks.

The graphs are `test_executor`'s random ones over its ops: several value types (float
and int32, scalars and matrices), ops of two and three outputs, a zero-argument op
reading a variable (`bias`), prelude-only lookups.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from refold.scheduler import SCHEDULERS, OpGraph
from refold.scheduler.executor import Executor
from refold.scheduler.straight import StraightLine
from tests.scheduler.test_executor import (
    ALL,
    ATOL,
    ONE_LOOP_OP,
    TYPES,
    Op,
    draw_reads,
    oracle,
    random_batch,
    schedule_and_feed,
)

NAMES = sorted(SCHEDULERS)


def _line(opset, name, **kw):
    return StraightLine(opset.executor, name, **{"max_launches": 1000, "patience": 1, **kw})


def _assert_reads(got, reads, want, where):
    outputs, read_type, read_pos = got
    for i in range(len(reads)):
        value = outputs[read_type[i]][read_pos[i]]
        msg = f"{where} read {i}: value {reads[i]} of type {TYPES[read_type[i]].name}"
        if TYPES[read_type[i]].dtype == "int32":
            np.testing.assert_array_equal(value, want[i], err_msg=msg)
        else:
            np.testing.assert_allclose(value, want[i], atol=ATOL, rtol=0, err_msg=msg)


def _made_types(line, graph):
    key = tuple(SCHEDULERS[line.schedule.name](graph).group_op.tolist())
    return {k for o in key for k in line.layout.op_out[o]}


@pytest.mark.parametrize("opset", [ALL, ONE_LOOP_OP], ids=["several_loop_ops", "one_loop_op"])
@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_values_of_random_graphs_equal_the_oracle_and_the_executor(name, opset, data):
    graph, raw = random_batch(data.draw, opset=opset)
    reads = draw_reads(data.draw, graph.num_values)
    line = _line(opset, name)
    got = line.run(graph, reads)
    if got is None:  # it reads a constant of a type no launch makes: left to the executor
        assert line.fallbacks["reads"] == 1
        assert not set(graph.value_type[reads].tolist()) <= _made_types(line, graph)
        return
    want, _, _ = oracle(raw, reads, opset=opset)
    _assert_reads(got, reads, want, f"{name} oracle")
    feed = schedule_and_feed(graph, name, reads, opset)
    old = [o.numpy() for o in opset.forward(feed.arrays)]
    _assert_reads(got, reads, [old[k][p] for k, p in zip(feed.read_type, feed.read_pos)],
                  f"{name} executor")


F = TYPES[0]
DOUBLE = Op("double", (F,), (F,), lambda x: [2.0 * x], None)
SINE = Op("sine", (F,), (F,), lambda x: [tf.sin(x)], None)


def _chain(xs, ops):
    """A graph of the launch sequence `ops` (op ids of `[DOUBLE, SINE]`, applied in turn
    to every row of `xs`, one chain per row) and its last values: graphs of one
    sequence differ in row counts and constants only."""
    n = len(xs)
    node_op, node_args, value_node = [], [], [-1] * n
    last = list(range(n))
    for o in ops:
        for r in range(n):
            node_op.append(o)
            node_args.append(last[r])
            last[r] = len(value_node)
            value_node.append(len(node_op) - 1)
    value_index = list(range(n)) + [0] * (len(value_node) - n)
    return OpGraph.build(node_op, [1] * len(node_op), node_args, [0] * len(value_node),
                         value_node, value_index, [np.asarray(xs, np.float32)]), \
        np.asarray(last)


def test_one_trace_per_launch_sequence_and_fallbacks_where_it_must():
    line = StraightLine(Executor([DOUBLE, SINE], [F]), max_launches=3, max_sequences=2,
                        patience=2)
    rng = np.random.default_rng(5)
    graph, reads = _chain(rng.normal(size=(2, 3)), [0, 1, 0])
    assert line.run(graph, reads) is None and line.fallbacks == {"new": 1}  # seen once
    line.fallbacks.clear()
    for rows in (1, 4, 9):  # one sequence: double, sine, double
        graph, reads = _chain(rng.normal(size=(rows, 3)), [0, 1, 0])
        outputs, _, read_pos = line.run(graph, reads)
        np.testing.assert_allclose(outputs[0][read_pos], 2 * np.sin(2 * graph.constants[0]),
                                   atol=ATOL)
    assert line.traced == 1 and not line.fallbacks
    line.patience = 1
    graph, reads = _chain(rng.normal(size=(2, 3)), [1])  # a second sequence
    assert line.run(graph, reads) is not None and line.traced == 2
    graph, reads = _chain(rng.normal(size=(2, 3)), [1, 1])  # a third: none left
    assert line.run(graph, reads) is None and line.fallbacks == {"sequences": 1}
    graph, reads = _chain(rng.normal(size=(2, 3)), [0, 0, 0, 0])  # 4 launches > 3
    assert line.run(graph, reads) is None and line.fallbacks["launches"] == 1
    assert line.traced == 2
    line.clear()  # traced again on demand
    graph, reads = _chain(rng.normal(size=(3, 3)), [1])
    outputs, _, read_pos = line.run(graph, reads)
    np.testing.assert_allclose(outputs[0][read_pos], np.sin(graph.constants[0]), atol=ATOL)
    assert line.traced == 1


def test_a_sequence_is_traced_when_it_comes_twice_in_a_row_or_patience_times():
    line = StraightLine(Executor([DOUBLE, SINE], [F]), patience=3)
    rng = np.random.default_rng(6)

    def run(ops):
        graph, reads = _chain(rng.normal(size=(2, 3)), ops)
        return line.run(graph, reads) is not None
    # alternating sequences (a batch's first rounds, say): traced at the third ask
    assert [run(ops) for ops in ([0], [1], [0], [1], [0], [1])] == [False] * 4 + [True] * 2
    assert line.traced == 2 and line.fallbacks == {"new": 4}
    assert [run([0, 1]), run([0, 1]), run([0, 1])] == [False, True, True]  # in a row
    assert line.traced == 3


def test_slack_runs_a_graph_on_a_longer_traced_sequence_with_empty_launches():
    double, sine = (dataclasses.replace(op, handles_empty=True) for op in (DOUBLE, SINE))
    line = StraightLine(Executor([double, sine], [F]), patience=1, slack=2)
    rng = np.random.default_rng(7)
    graph, reads = _chain(rng.normal(size=(2, 3)), [0, 1, 0, 1])
    assert line.run(graph, reads) is not None and line.traced == 1
    for ops, want in (([0, 1], lambda x: np.sin(2 * x)), ([1, 0], lambda x: 2 * np.sin(x)),
                      ([0, 0], lambda x: 4 * x), ([1, 0, 1], lambda x: np.sin(2 * np.sin(x)))):
        graph, reads = _chain(rng.normal(size=(3, 3)), ops)
        outputs, _, read_pos = line.run(graph, reads)
        np.testing.assert_allclose(outputs[0][read_pos], want(graph.constants[0]), atol=ATOL,
                                   err_msg=str(ops))
    assert line.traced == 1  # each ran on [0, 1, 0, 1], the launches it lacks empty
    graph, reads = _chain(rng.normal(size=(2, 3)), [1])  # 3 launches more than it has
    assert line.run(graph, reads) is not None and line.traced == 2
    # ops that may not run empty: every sequence its own trace
    strict = StraightLine(Executor([DOUBLE, SINE], [F]), patience=1, slack=2)
    for ops in ([0, 1, 0], [0, 1]):
        graph, reads = _chain(rng.normal(size=(2, 3)), ops)
        assert strict.run(graph, reads) is not None
    assert strict.traced == 2


def test_a_ready_policy_replaces_patience():
    asked = []
    line = StraightLine(Executor([DOUBLE, SINE], [F]), patience=1,
                        ready=lambda key: asked.append(key) or len(asked) >= 3)
    rng = np.random.default_rng(8)
    runs = [line.run(*_chain(rng.normal(size=(2, 3)), [0])) is not None for _ in range(4)]
    assert runs == [False, False, True, True] and asked == [(0,)] * 3
