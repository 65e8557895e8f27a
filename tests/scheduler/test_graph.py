"""OpGraph: building, concatenating batches, validation and dependency depths."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refold.scheduler.graph import OpGraph, compute_sdepth
from tests.scheduler.graphs import build, concat_raw, draw_graph, draw_specs, random_graphs

ARRAYS = ["node_op", "node_arity", "node_args", "value_type", "value_node", "value_index",
          "sdepth"]


def first():
    """Two scalar value types. v0 = c0[0], v1 = c1[0], v2 = op0(v0, v1), v3 = c0[1],
    v4 = op1(v2, v3, v2)."""
    return OpGraph.build(node_op=[0, 1], node_arity=[2, 3], node_args=[0, 1, 2, 3, 2],
                         value_type=[0, 1, 0, 0, 1], value_node=[-1, -1, 0, -1, 1],
                         value_index=[0, 0, 0, 1, 0],
                         constants=[np.array([10.0, 11.0]), np.array([20.0])])


def second():
    """v0 = c1[0], (v1, v2) = op1(v0) (slots 0, 1), v3 = c0[0], v4 = op0(v1, v3, v2)."""
    return OpGraph.build(node_op=[1, 0], node_arity=[1, 3], node_args=[0, 1, 3, 2],
                         value_type=[1, 0, 1, 0, 0], value_node=[-1, 0, 0, -1, 1],
                         value_index=[0, 0, 1, 0, 0],
                         constants=[np.array([12.0]), np.array([21.0])])


def empty(shapes=((), ())):
    return OpGraph.build([], [], [], [], [], [], [np.zeros((0, *s)) for s in shapes])


def assert_same_graph(got: OpGraph, want: OpGraph):
    for name in ARRAYS:
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)
        assert getattr(got, name).dtype == np.int32, name
    assert len(got.constants) == len(want.constants)
    for k, (a, b) in enumerate(zip(got.constants, want.constants)):
        assert a.shape == b.shape, f"constants[{k}]"
        np.testing.assert_array_equal(a, b, err_msg=f"constants[{k}]")


# --- build ---------------------------------------------------------------------------------

def test_build_stores_int32_arrays_and_computes_sdepth():
    g = first()
    for name in ARRAYS:
        assert getattr(g, name).dtype == np.int32, name
    assert (g.num_nodes, g.num_values) == (2, 5)
    assert g.sdepth.tolist() == [0, 1]
    assert g.arg_offsets().tolist() == [0, 2, 5]
    assert g.node_dependencies().tolist() == [-1, -1, 0, -1, 0]


def test_build_keeps_a_given_sdepth():
    g = OpGraph.build([0, 0], [0, 0], [], [0, 0], [0, 1], [0, 0], [np.zeros(0)], sdepth=[3, 7])
    assert g.sdepth.tolist() == [3, 7]
    assert g.sdepth.dtype == np.int32


# --- concatenate ---------------------------------------------------------------------------

def test_concatenate_offsets_values_nodes_and_constant_rows():
    both = OpGraph.concatenate([first(), second()])
    want = OpGraph(node_op=np.array([0, 1, 1, 0]), node_arity=np.array([2, 3, 1, 3]),
                   node_args=np.array([0, 1, 2, 3, 2, 5, 6, 8, 7]),
                   value_type=np.array([0, 1, 0, 0, 1, 1, 0, 1, 0, 0]),
                   value_node=np.array([-1, -1, 0, -1, 1, -1, 2, 2, -1, 3]),
                   value_index=np.array([0, 0, 0, 1, 0, 1, 0, 1, 2, 0]),
                   constants=[np.array([10.0, 11.0, 12.0]), np.array([20.0, 21.0])],
                   sdepth=np.array([0, 1, 0, 1]))
    assert_same_graph(both, want)
    both.validate()


def test_concatenate_offsets_the_constants_of_every_later_graph():
    three = OpGraph.concatenate([first(), second(), first()])
    # the third copy's constants c0[0], c1[0], c0[1] land after 3 rows of c0 and 2 of c1
    assert three.value_index[10:].tolist() == [3, 2, 0, 4, 0]
    assert three.value_node[10:].tolist() == [-1, -1, 4, -1, 5]
    assert three.node_args[9:].tolist() == [10, 11, 12, 13, 12]
    assert three.constants[0].tolist() == [10.0, 11.0, 12.0, 10.0, 11.0]
    assert three.constants[1].tolist() == [20.0, 21.0, 20.0]
    assert three.sdepth.tolist() == [0, 1, 0, 1, 0, 1]


def test_concatenating_one_graph_gives_that_graph():
    g = first()
    assert_same_graph(OpGraph.concatenate([g]), first())


def test_empty_graphs_add_nothing_to_a_concatenation():
    want = OpGraph.concatenate([first(), second()])
    got = OpGraph.concatenate([empty(), first(), empty(), empty(), second(), empty()])
    assert_same_graph(got, want)


def test_concatenating_only_empty_graphs_gives_an_empty_graph():
    g = OpGraph.concatenate([empty(((), (3,))), empty(((), (3,)))])
    assert (g.num_nodes, g.num_values, len(g.node_args)) == (0, 0, 0)
    assert [c.shape for c in g.constants] == [(0,), (0, 3)]
    g.validate()
    assert compute_sdepth(g).tolist() == []


def test_concatenate_handles_graphs_of_constants_only_and_of_nodes_only():
    consts = OpGraph.build([], [], [], [0, 1, 0], [-1, -1, -1], [1, 0, 0],
                           [np.array([1.0, 2.0]), np.array([3.0])])
    sources = OpGraph.build([2, 2], [0, 1], [0], [1, 0], [0, 1], [0, 0],
                            [np.zeros(0), np.zeros(0)])
    g = OpGraph.concatenate([consts, sources, first()])
    g.validate()
    assert g.value_node.tolist() == [-1, -1, -1, 0, 1, -1, -1, 2, -1, 3]
    assert g.value_index.tolist() == [1, 0, 0, 0, 0, 2, 1, 0, 3, 0]
    assert g.node_args.tolist() == [3, 5, 6, 7, 8, 7]
    assert g.sdepth.tolist() == [0, 1, 0, 1]
    assert g.constants[0].tolist() == [1.0, 2.0, 10.0, 11.0]
    assert g.constants[1].tolist() == [3.0, 20.0]


@settings(max_examples=60)
@given(st.data())
def test_concatenation_equals_the_graphs_renumbered_one_by_one(data):
    n_types = data.draw(st.integers(1, 3))
    shapes = [data.draw(st.sampled_from([(), (2,), (1, 3)])) for _ in range(n_types)]
    dtypes = ["float32"] * n_types
    specs = draw_specs(data.draw, n_types)
    pairs = [draw_graph(data.draw, specs, n_types, max_nodes=12, shapes=shapes, dtypes=dtypes)
             for _ in range(data.draw(st.integers(1, 4)))]
    got = OpGraph.concatenate([g for g, _ in pairs])
    raw = concat_raw([r for _, r in pairs])
    assert_same_graph(got, build(raw, shapes, dtypes))
    got.validate()
    assert got.sdepth.tolist() == raw.depths()


# --- validate ------------------------------------------------------------------------------

@settings(max_examples=40)
@given(random_graphs())
def test_validate_accepts_well_formed_graphs(pair):
    graph, _ = pair
    graph.validate()


def broken(**changes):
    g = first()
    return dataclasses.replace(g, **{k: np.asarray(v, np.int32) for k, v in changes.items()})


@pytest.mark.parametrize("changes, message", [
    ({"node_arity": [2, 2]}, "sum"),
    ({"node_arity": [2, 4]}, "sum"),
    ({"node_args": [0, 1, 2, 3, 5]}, "does not exist"),
    ({"node_args": [0, -1, 2, 3, 2]}, "does not exist"),
    ({"value_node": [-1, -1, 0, -1, 2]}, "node that does not exist"),
    ({"node_args": [0, 2, 2, 3, 2]}, "itself or a later node"),   # node 0 reads its output
    ({"node_args": [4, 1, 2, 3, 2]}, "itself or a later node"),   # node 0 reads node 1's
    ({"node_args": [0, 1, 2, 3, 4]}, "itself or a later node"),   # node 1 reads its output
], ids=["arity-short", "arity-long", "arg-past-end", "arg-negative", "value-of-no-node",
        "reads-itself", "reads-later-node", "reads-own-output"])
def test_validate_rejects_inconsistent_graphs(changes, message):
    with pytest.raises(ValueError, match=message):
        broken(**changes).validate()


def test_validate_rejects_a_constant_row_outside_its_table():
    # v3 says it is row 2 of constants[0], which has rows 0 and 1 only
    with pytest.raises(ValueError):
        broken(value_index=[0, 0, 0, 2, 0]).validate()


# --- compute_sdepth ------------------------------------------------------------------------

def test_sdepth_is_zero_for_zero_argument_and_constant_only_nodes():
    # node 0: zero-argument; node 1: reads two constants; node 2: reads node 0 and 1
    g = OpGraph.build([0, 1, 2], [0, 2, 2], [0, 0, 1, 2], [0, 0, 0, 0],
                      [-1, 0, 1, 2], [0, 0, 0, 0], [np.zeros(1)])
    assert compute_sdepth(g).tolist() == [0, 0, 1]


def test_sdepth_is_the_longest_chain_not_the_shortest():
    # a chain n0 -> n1 -> n2 and a node n3 reading n0 (short path) and n2 (long path),
    # with a repeated argument
    g = OpGraph.build(node_op=[0, 0, 0, 1], node_arity=[1, 1, 1, 3],
                      node_args=[0, 1, 2, 1, 3, 1],
                      value_type=[0] * 5, value_node=[-1, 0, 1, 2, 3],
                      value_index=[0] * 5, constants=[np.zeros(1)])
    assert compute_sdepth(g).tolist() == [0, 1, 2, 3]


def test_sdepth_follows_multi_output_nodes():
    # n0 has outputs v1 (slot 1) and v2 (slot 0); n1 reads v2; n2 reads n1's v3 and n0's v1
    g = OpGraph.build([0, 1, 1], [1, 1, 2], [0, 2, 3, 1], [0, 0, 0, 0, 0],
                      [-1, 0, 0, 1, 2], [0, 1, 0, 0, 0], [np.zeros(1)])
    assert compute_sdepth(g).tolist() == [0, 1, 2]


@settings(max_examples=60)
@given(random_graphs(max_nodes=40))
def test_sdepth_equals_the_longest_dependency_chain(pair):
    graph, raw = pair
    assert compute_sdepth(graph).tolist() == raw.depths()
    assert graph.sdepth.tolist() == raw.depths()
