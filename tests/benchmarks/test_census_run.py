"""`benchmarks.census` sorts a loop body's nodes by kind and counts them in the
training step `Model.fit` traces (no timing is asserted)."""

from __future__ import annotations

import math

from benchmarks import census


def test_each_kind_of_node_in_a_loop_body_is_counted_as_its_kind():
    import tensorflow as tf
    w = tf.Variable(tf.ones([4, 4]))

    @tf.function(autograph=False)
    def f(buf, rows):
        def body(i, buf):
            r = rows[i:i + 1] * 1  # int32: indices
            x = tf.gather(buf, r)  # rows
            y = tf.tanh(tf.matmul(x, w))  # a weight read, then compute
            return i + 1, tf.identity(tf.tensor_scatter_nd_update(buf, r[:, None], y))
        return tf.while_loop(lambda i, buf: i < 2, body, (tf.constant(0), buf))[1]
    graph = f.get_concrete_function(tf.zeros([3, 4]), tf.constant([0, 1])).graph
    (name, counts), = census.loop_census(graph).items()
    assert "body" in name
    assert counts["compute"] == 2  # MatMul, Tanh
    assert counts["weights"] == 1 and counts["rows"] == 2  # ReadVariableOp; gather, scatter
    assert counts["pass-through"] >= 1 and counts["constants"] >= 1
    assert counts["indices"] >= 2  # the slice, the product, i + 1
    # i, buf, the captured rows and variable, and while_v2's counter and bound
    assert counts["loop variables"] == 6
    assert set(counts) <= set(census.KINDS)


def test_the_branches_a_loop_body_runs_are_counted_in_its_census():
    import tensorflow as tf
    w = tf.Variable(tf.ones([4, 4]))

    @tf.function(autograph=False)
    def f(x, which):
        def body(i, x):
            y = tf.switch_case(which[i], [lambda: tf.tanh(tf.matmul(x, w)),
                                          lambda: tf.sigmoid(x), lambda: tf.exp(x)])
            return i + 1, y
        return tf.while_loop(lambda i, x: i < 2, body, (tf.constant(0), x))[1]
    graph = f.get_concrete_function(tf.zeros([3, 4]), tf.constant([0, 1])).graph
    (name, counts), = census.loop_census(graph).items()
    assert "body" in name
    # the Case node itself, then MatMul, Tanh; Sigmoid; Exp in the branches
    assert counts["compute"] == 5
    assert counts["weights"] == 1  # read in the first branch
    # i, x, the captured table and variable, while_v2's counter and bound; the
    # branches' arguments are pass-through
    assert counts["loop variables"] == 6 and counts["pass-through"] >= 4


def test_the_census_of_a_batch_1_tree_lstm_step_has_a_forward_and_a_replayed_loop(capsys):
    out = census.main(["--workloads", "treelstm"])
    r = out[("treelstm", 1)]
    assert r["replayed"] and r["launches"] > 0
    forward, backward = r["loops"]["forward"], r["loops"]["backward"]
    assert backward["compute"] > forward["compute"] > 0  # the backward recomputes too
    assert all(loop["loop variables"] > 2 and loop["rows"] > 0 for loop in (forward, backward))
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("| treelstm | 1 | backward (replayed) |") for line in lines)


def test_the_char_taggers_loop_of_four_ops_is_counted_too(capsys):
    # batch 2: a few rows a launch, under 40 (10 per loop op): the replayed loop
    out = census.main(["--workloads", "chartagger", "--batch-size", "2"])
    r = out[("chartagger", 2)]
    assert r["replayed"] and r["launches"] > 0
    assert set(r["loops"]) == {"forward", "backward"}
    # its four ops' nodes sit in `switch_case` branches, counted as the body's
    assert all(loop["compute"] > 4 for loop in r["loops"].values())
    assert "| chartagger | 2 | backward (replayed) |" in capsys.readouterr().out


def test_the_loop_variable_cost_is_timed_for_each_count():
    out = census.main(["--loop-vars", "0,2", "--rounds", "1"])
    assert sorted(out) == [0, 2]
    assert all(math.isfinite(us) and us > 0 for us in out.values())
