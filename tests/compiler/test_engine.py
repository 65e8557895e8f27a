"""The engine's promises beyond equal values: one trace, deep inputs, bad inputs,
batching quality, the expansion cache."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import refold as td
from refold.blocks.errors import InputError
from refold.blocks.evaluation.contexts import reference_eval
from refold.compiler import Compiler
from refold.compiler.graphs import expansion
from refold.models import tree_lstm


def add_tree_block():
    """A tree is a number or a pair of trees; its value is the sum of its leaves."""
    tree = td.ForwardDeclaration(td.PyObjectType(), td.TensorType(()))
    pair = td.Record((tree(), tree())) >> td.Function(tf.add)
    tree.resolve_to(td.OneOf(lambda t: isinstance(t, tuple), {False: td.Scalar(), True: pair}))
    return tree()


def word_tree_lstm(hidden: int = 4, loss_everywhere: bool = False):
    """A small binary TreeLSTM over int-leaf trees; optionally a loss at every node."""
    keras.utils.set_random_seed(3)
    emb = td.Embedding(20, 3)
    leaf_cell, cell = tree_lstm.leaf_cell(hidden, 3), tree_lstm.binary_cell(hidden)
    out = td.FC(2, activation=None)
    tree = td.ForwardDeclaration(td.PyObjectType(), tree_lstm.state_type(hidden))
    leaf = td.Scalar("int32") >> emb >> leaf_cell
    node = td.Record((tree(), tree())) >> cell
    if loss_everywhere:
        def with_loss(b):
            loss = td.GetItem(0) >> out >> td.Function(lambda x: tf.reduce_sum(x, 1)) \
                >> td.Metric("loss")
            return b >> td.AllOf(td.Identity(), loss) >> td.GetItem(0)
        leaf, node = with_loss(leaf), with_loss(node)
    tree.resolve_to(td.OneOf(lambda t: isinstance(t, tuple), {False: leaf, True: node}))
    return tree() >> td.GetItem(0) >> out


def random_tree(rng, n_leaves: int):
    if n_leaves == 1:
        return int(rng.integers(0, 20))
    k = int(rng.integers(1, n_leaves))
    return (random_tree(rng, k), random_tree(rng, n_leaves - k))


def test_one_trace_per_executor_serves_batches_of_every_shape():
    """Small batches run on TensorFlow's single-threaded executor, the others on its
    default one (`compiler.training.tf_executor`): one trace each (the second once
    `PATIENCE` batches asked for it)."""
    c = Compiler.create(word_tree_lstm())
    traces, compute = [], c.executor.compute
    c.executor.compute = lambda arrays: traces.append(1) or compute(arrays)
    rng = np.random.default_rng(0)
    for size in [1, 2, 3, 5, 8, 13, 7, 21, 4, 16, 1, 30, 9, 12, 1, 17, 25, 2, 40]:
        batch = [random_tree(rng, int(rng.integers(1, 12))) for _ in range(size)]
        assert len(c.run(batch)) == size
    assert sorted(c._run_flat) == [False, True] and len(traces) == 2


def test_a_chain_tree_10000_deep_expands_and_runs():
    deep = 0.5
    for _ in range(10_000):
        deep = (deep, 1.0)
    c = Compiler.create(add_tree_block())
    shallow = (2.0, 3.0)
    got = c.run([shallow, deep])
    assert float(got[0]) == 5.0
    assert float(got[1]) == 10_000.5
    assert c.schedule([deep]).stats.steps == 10_000  # one add per step


def test_a_10000_step_sequence_through_fold_runs():
    block = td.Map(td.Scalar()) >> td.Fold(td.Function(lambda acc, x: acc * 0.5 + x),
                                           td.FromTensor(np.float32(0.0)))
    xs = [1.0] * 10_000
    got = Compiler.create(block).run([xs, [4.0, 2.0]])
    assert float(got[0]) == pytest.approx(2.0, abs=1e-5)
    assert float(got[1]) == pytest.approx(4.0)


def test_a_bad_input_in_a_batch_names_its_index_and_block_path():
    c = Compiler.create(word_tree_lstm())
    batch = [(1, 2), 3, ((4, 5), 6), (7, "eight"), 9]
    with pytest.raises(InputError) as err:
        c.run(batch)
    assert err.value.example_index == 3
    assert "Scalar" in err.value.block_path
    assert str(err.value).startswith("example 3 at [1]: ")
    # the compiler is not poisoned: good batches still run
    assert len(c.run([(1, 2), 3])) == 2


def test_an_input_that_fails_only_inside_tensorflow_is_blamed_on_its_example():
    def checked_sqrt(x):
        tf.debugging.assert_non_negative(x, message="sqrt of a negative number")
        return tf.sqrt(x)

    block = td.Map(td.Scalar() >> td.Function(checked_sqrt)) >> td.Sum()
    c = Compiler.create(block)
    with pytest.raises(InputError) as err:
        c.run([[1.0, 4.0], [9.0], [4.0, -1.0, 0.0]])
    assert err.value.example_index == 2
    assert err.value.block_path == "Pipe[0] > Map > Pipe[1] > Function"
    assert "sqrt of a negative number" in str(err.value)
    assert [float(r) for r in c.run([[1.0, 4.0], [9.0]])] == [3.0, 3.0]


def test_an_embedding_id_out_of_range_is_refused_before_running():
    # the embedding has 20 rows and does not wrap ids: word 25 is caught at expansion
    block = td.Map(td.Scalar("int32") >> td.Embedding(20, 2, mod_inputs=False)) >> td.Sum()
    c = Compiler.create(block)
    with pytest.raises(InputError) as err:
        c.run([[1, 2], [3], [4, 25, 5]])
    assert err.value.example_index == 2
    assert err.value.block_path == "Pipe[0] > Map > Pipe[1] > Embedding"
    assert "id 25 is not in [0, 20)" in str(err.value)
    with pytest.raises(InputError, match="id -1 is not in") as err:
        c.run([[-1]])
    assert err.value.example_index == 0


def test_wrong_shapes_are_refused_before_running():
    c = Compiler.create(td.Map(td.Vector(3)) >> td.Sum())
    with pytest.raises(InputError) as err:
        c.run([[[1, 2, 3]], [[1, 2, 3], [4, 5]]])
    assert err.value.example_index == 1
    assert "Vector" in err.value.block_path


def test_later_epochs_reuse_expanded_graphs(monkeypatch):
    c = Compiler.create(add_tree_block())
    batch = [(1.0, (2.0, 3.0)), ((4.0, 5.0), 6.0)]
    first = c.run(batch)
    calls = []
    real = expansion.expand_all
    monkeypatch.setattr("refold.compiler.compiler.expand_all",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    again = c.run(list(reversed(batch)))
    assert calls == []
    assert [float(x) for x in again] == [float(x) for x in reversed(first)]
    c.run([(7.0, 8.0)])
    assert calls == [1]


def test_an_empty_batch_gives_no_results():
    assert Compiler.create(add_tree_block()).run([]) == []


def test_a_keras_rnn_cell_with_a_fed_initial_state_runs():
    # a ScopedLayer wraps any callable, so its launches outside the loop keep their guard
    # against zero rows (Op.handles_empty is False): an empty launch must not call it
    cell = td.ScopedLayer(keras.layers.LSTMCell(3), "lstm")
    init = td.AllOf(td.FromTensor(np.zeros(3, np.float32)),
                    td.FromTensor(np.zeros(3, np.float32)))
    block = td.Map(td.Vector(2)) >> td.RNN(cell, initial_state=init) >> td.GetItem(1) \
        >> td.GetItem(0)
    batch = [[[1.0, 2.0]], [[0.0, 1.0], [2.0, 3.0]]]
    got = Compiler.create(block).run(batch)
    for g, x in zip(got, batch):
        np.testing.assert_allclose(g, reference_eval(block, x), atol=1e-6)


def test_the_compiler_refuses_a_single_input_where_a_batch_is_expected():
    with pytest.raises(TypeError, match="batch of inputs"):
        Compiler.create(add_tree_block()).run({"not": "a batch"})


def test_unknown_scheduler_is_refused():
    with pytest.raises(ValueError,
                       match=r"scheduler must be .auto. or one of \[.agenda., .depth.\]"):
        Compiler.create(add_tree_block(), scheduler="greedy")


# --- batching quality: agenda vs depth (DyNet's comparison) ---------------------------


def test_agenda_launches_no_more_than_depth_on_trees_with_a_loss_at_every_node():
    block = word_tree_lstm(loss_everywhere=True)
    rng = np.random.default_rng(1)
    batch = [random_tree(rng, int(np.clip(round(rng.normal(19, 9)), 2, 56))) for _ in range(64)]
    depth = Compiler.create(block, scheduler="depth").schedule(batch).stats
    agenda = Compiler.create(block, scheduler="agenda").schedule(batch).stats
    assert agenda.launches <= depth.launches


def test_agenda_launches_fewer_than_depth_on_sequences_with_a_loss_at_the_end():
    # DyNet's Figure 1: sequences of different lengths, one loss after each
    keras.utils.set_random_seed(0)
    cell = td.ScopedLayer(keras.layers.SimpleRNNCell(4), "rnn")
    block = td.Map(td.Scalar("int32") >> td.Embedding(10, 3)) >> td.RNN(cell) >> td.GetItem(1) \
        >> td.FC(1, activation=None) >> td.Metric("loss")
    rng = np.random.default_rng(2)
    batch = [rng.integers(0, 10, int(n)).tolist() for n in rng.integers(2, 30, 32)]
    depth = Compiler.create(block, scheduler="depth").schedule(batch).stats
    agenda = Compiler.create(block, scheduler="agenda").schedule(batch).stats
    assert agenda.launches < depth.launches
    assert agenda.mean_batch_size[max(agenda.mean_batch_size)] > 1


def test_grouped_reads_put_results_first_then_each_metric():
    square = td.Function(tf.square) >> td.Metric("sq")
    ident = td.Identity() >> td.Metric("x")
    block = td.Map(td.Scalar() >> td.AllOf(square, ident) >> td.Void()) >> td.Void()
    block = td.AllOf(td.Map(td.Scalar()) >> td.Sum(), block) >> td.GetItem(0)
    c = Compiler.create(block)
    batch = [[1.0, 2.0], [3.0], []]
    plan = c.plan(batch, grouped=True)
    outs = [o.numpy() for o in c._function()(plan.feed.arrays)]
    k = c.program.type_id[td.TensorType(())]
    assert outs[k][:3].tolist() == [3.0, 3.0, 0.0]
    bounds = plan.metric_bounds(c.program)
    names = c.program.metric_names
    assert outs[k][slice(*bounds[names.index("sq")])].tolist() == [1.0, 4.0, 9.0]
    assert outs[k][slice(*bounds[names.index("x")])].tolist() == [1.0, 2.0, 3.0]


def test_an_expanded_graph_shares_one_record_that_equals_its_arrays():
    # expansion makes the merge record in one conversion; the arrays are its views
    import pickle

    from refold.compiler.graphs.lowering import lower
    from refold.scheduler.graph import OpGraph
    block = td.Map(td.Record((td.Scalar(), td.Scalar())) >> td.Function(tf.add)) >> td.Sum()
    program = lower(block)
    g = expansion.expand(program, [(1.0, 2.0), (3.0, 4.0)]).graph
    fresh = OpGraph(*(np.array(a) for a in (g.node_op, g.node_arity, g.node_args,
                                            g.value_type, g.value_node, g.value_index)),
                    g.constants, np.array(g.sdepth))
    assert np.array_equal(g.merge_record, fresh.merge_record)
    assert g.node_op.base is g.merge_record
    back = pickle.loads(pickle.dumps(g))
    assert "merge_record" not in back.__dict__  # made again where it is needed
    assert np.array_equal(back.merge_record, fresh.merge_record)


def test_results_read_each_type_s_rows_in_one_copy_in_read_order():
    from refold.compiler.compiler import _read_rows
    outputs = [np.arange(12, dtype=np.float32).reshape(4, 3), np.arange(5, dtype=np.int32)]
    read_type, read_pos = np.array([0, 1, 0, 1, 0]), np.array([2, 4, 0, 1, 2])
    got = _read_rows(outputs, read_type, read_pos, tolist=False)
    for g, k, p in zip(got, read_type, read_pos):
        assert isinstance(g, np.ndarray) and g.dtype == outputs[k].dtype
        np.testing.assert_array_equal(g, outputs[k][p])
    assert got[1].shape == ()  # a scalar's row is a 0-d array, as `block.eval` gives
    got[0][0] = -1.0  # a result is a copy: the outputs and the other results keep theirs
    assert outputs[0][2, 0] == 6.0 and got[4][0] == 6.0
    assert _read_rows(outputs, read_type, read_pos, tolist=True) == [
        [6.0, 7.0, 8.0], 4, [0.0, 1.0, 2.0], 1, [6.0, 7.0, 8.0]]
    assert _read_rows(outputs, np.zeros(0, int), np.zeros(0, int), tolist=False) == []
    for k in (0, 1):  # reads of one type only
        one = _read_rows(outputs, np.full(3, k), np.array([2, 0, 2]), tolist=False)
        assert [g.shape for g in one] == [outputs[k].shape[1:]] * 3
        np.testing.assert_array_equal(np.stack(one), outputs[k][[2, 0, 2]])
        one[0][...] = -1
        assert outputs[k][2].min() >= 0 and one[2].min() >= 0
