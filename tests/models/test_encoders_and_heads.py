"""Encoders and heads: values against direct computations, metrics at every item."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import refold as td
from refold.blocks.evaluation.contexts import ReferenceContext
from refold.compiler import Compiler
from refold.models import encoders, heads, rnn_cells, tree_lstm, tree_rnn

U, D = 3, 2
SEQS = [[[1.0, 0.0]], [[0.5, -1.0], [2.0, 1.0], [0.0, 0.3]], [[0.2, 0.2]] * 4]


def stages(block) -> tuple[list, list]:
    """The names of the ops the engine runs before its loop and in it."""
    lay = Compiler.create(block).executor.layout
    return [lay.op_names[o] for o in lay.head_ops], [lay.op_names[o] for o in lay.loop_ops]


def whole(cell) -> td.Block:
    """`cell` as a block that `td.RNN` runs whole (it splits the library's cells)."""
    from refold.blocks.composition import convert_to_block
    return convert_to_block(cell)


def outputs(cell, seq):
    return (td.Map(td.Vector(D)) >> td.RNN(cell) >> td.GetItem(0)).eval(seq)


def test_bidirectional_concatenates_forward_and_reversed_backward_outputs():
    fw, bw = rnn_cells.LSTMCell(U), rnn_cells.GRUCell(U)
    block = td.Map(td.Vector(D)) >> encoders.bidirectional(fw, bw)
    batched = Compiler.create(block).run(SEQS)
    for seq, got_batched in zip(SEQS, batched):
        f = outputs(fw, seq)
        b = outputs(bw, seq[::-1])[::-1]
        want = [np.concatenate([x, y]) for x, y in zip(f, b)]
        for got in (block.eval(seq), got_batched):
            assert len(got) == len(seq)
            for g, w in zip(got, want):
                np.testing.assert_allclose(g, w, atol=1e-5)
    # the backward half at position 0 has seen the whole sentence: not a forward run
    seq = SEQS[1]
    assert not np.allclose(block.eval(seq)[0][U:], outputs(bw, seq)[0])


def test_bidirectional_runs_its_cells_as_one_pair_with_the_gradients_of_two_rnns():
    fw, bw = rnn_cells.LSTMCell(U), rnn_cells.GRUCell(U)
    stacked = td.Map(td.Vector(D)) >> encoders.bidirectional(fw, bw)
    # the same encoder written as two RNNs of whole cells (as for non-layer cells)
    two_rnns = td.Map(td.Vector(D)) >> td.AllOf(
        td.RNN(whole(fw)) >> td.GetItem(0),
        td.Slice(step=-1) >> td.RNN(whole(bw)) >> td.GetItem(0) >> td.Slice(step=-1),
    ) >> td.Zip() >> td.Map(td.Concat())
    # one op runs both cells in the loop, one projects both inputs before it
    assert stages(stacked) == (["InputProjection"], ["CellPair"])
    assert stages(two_rnns) == ([], ["LSTMCell", "GRUCell"])
    rng = np.random.default_rng(0)
    weights = [tf.constant(rng.normal(size=(2 * U,)), tf.float32) for _ in range(4)]
    grads = []
    for block in (stacked, two_rnns):
        with tf.GradientTape() as tape:
            loss = tf.add_n([tf.reduce_sum(v * weights[i]) for seq in SEQS
                             for i, v in enumerate(block.eval_in(ReferenceContext(), seq))])
        grads.append(tape.gradient(loss, fw.weights + bw.weights))
    for got, want in zip(*grads):
        np.testing.assert_allclose(got, want, atol=1e-5)


def test_the_loop_of_a_bidirectional_lstm_reads_only_the_recurrent_kernels():
    import collections
    fw, bw = rnn_cells.LSTMCell(U), rnn_cells.LSTMCell(U)
    compiler = Compiler.create(td.Map(td.Vector(D)) >> encoders.bidirectional(fw, bw))
    arrays = {k: tf.constant(v) for k, v in compiler.plan(SEQS).feed.arrays.items()}
    graph = tf.function(compiler.executor.compute, autograph=False).get_concrete_function(
        arrays).graph
    body = collections.Counter(op.type for name, f in graph._functions.items()
                               if "body" in name for op in f.graph.get_operations())
    # per iteration one matmul per direction, on the recurrent kernel, the one it reads
    assert body["MatMul"] == 2 and body["ReadVariableOp"] == 2


def test_sequence_encoder_gives_final_h_of_both_directions():
    fw, bw = rnn_cells.LSTMCell(U), rnn_cells.SimpleRNNCell(U)
    block = td.Map(td.Vector(D)) >> encoders.sequence_encoder(fw, bw)
    assert block.output_type == td.TensorType((2 * U,))
    batched = Compiler.create(block).run(SEQS + [[]])
    for seq, got in zip(SEQS, batched):
        want = np.concatenate([outputs(fw, seq)[-1], outputs(bw, seq[::-1])[-1]])
        np.testing.assert_allclose(block.eval(seq), want, atol=1e-5)
        np.testing.assert_allclose(got, want, atol=1e-5)
    np.testing.assert_array_equal(batched[-1], np.zeros(2 * U))


def test_sequence_encoder_runs_two_layer_cells_as_one_pair_with_the_gradients_of_two():
    fw, bw = rnn_cells.LSTMCell(U), rnn_cells.GRUCell(U)
    paired = td.Map(td.Vector(D)) >> encoders.sequence_encoder(fw, bw)
    # the same encoder written as two RNNs of whole cells (as for block cells)
    two_rnns = td.Map(td.Vector(D)) >> td.AllOf(
        td.RNN(whole(fw)) >> td.GetItem(1) >> td.GetItem(0),
        td.Slice(step=-1) >> td.RNN(whole(bw)) >> td.GetItem(1)) >> td.Concat()
    assert stages(paired) == (["InputProjection"], ["CellPair"])  # one op runs both cells
    assert stages(two_rnns) == ([], ["LSTMCell", "GRUCell"])
    weights = tf.constant(np.random.default_rng(1).normal(size=(2 * U,)), tf.float32)
    grads = []
    for block in (paired, two_rnns):
        with tf.GradientTape() as tape:
            loss = tf.add_n([tf.reduce_sum(block.eval_in(ReferenceContext(), seq) * weights)
                             for seq in SEQS])
        grads.append(tape.gradient(loss, fw.weights + bw.weights))
    for got, want in zip(*grads):
        np.testing.assert_allclose(got, want, atol=1e-5)


def np_xent(logits, label):
    z = logits - logits.max()
    return np.log(np.exp(z).sum()) - z[label]


def test_tagger_emits_loss_and_accuracy_at_every_token():
    emb = td.Embedding(10, D)
    fc = td.FC(4, activation=None)
    words = td.GetItem("words") >> td.Map(td.Scalar("int32") >> emb)
    encoder = words >> encoders.bidirectional(rnn_cells.GRUCell(U), rnn_cells.GRUCell(U))
    model = heads.tagger(encoder, 4, tags="tags", logits_layer=fc)
    sentences = [{"words": [1, 2, 3], "tags": [0, 3, 1]}, {"words": [4], "tags": [2]},
                 {"words": [5, 6], "tags": [1, 1]}]
    batched = Compiler.create(model).run(sentences)
    for s, got_batched in zip(sentences, batched):
        for logits, metrics in (model.eval(s), got_batched):
            assert len(logits) == len(s["words"])
            want_loss = [np_xent(lg, t) for lg, t in zip(logits, s["tags"])]
            want_hit = [float(np.argmax(lg) == t) for lg, t in zip(logits, s["tags"])]
            np.testing.assert_allclose(metrics["loss"], want_loss, atol=1e-5)
            np.testing.assert_array_equal(metrics["accuracy"], want_hit)


def test_tagger_without_tags_has_no_metrics():
    words = td.Map(td.Vector(D))
    model = heads.tagger(words >> encoders.bidirectional(rnn_cells.GRUCell(U),
                                                         rnn_cells.GRUCell(U)), 5)
    logits = model.eval(SEQS[1])
    assert len(logits) == 3 and logits[0].shape == (5,)


def test_classifier_loss_on_the_label():
    fc = td.FC(3, activation=None)
    encoder = td.GetItem("seq") >> td.Map(td.Vector(D)) >> encoders.sequence_encoder(
        rnn_cells.LSTMCell(U))
    model = heads.classifier(encoder, 3, label="label", logits_layer=fc)
    assert stages(model) == (["InputProjection"], ["ProjectedCell"])  # td.RNN splits it
    inputs = [{"seq": s, "label": i % 3} for i, s in enumerate(SEQS)]
    for x, (logits, metrics) in zip(inputs, Compiler.create(model).run(inputs)):
        assert logits.shape == (3,)
        np.testing.assert_allclose(metrics["loss"], [np_xent(logits, x["label"])], atol=1e-5)
        assert metrics["accuracy"].tolist() == [float(np.argmax(logits) == x["label"])]
    assert heads.classifier(encoders.sequence_encoder(rnn_cells.GRUCell(U)), 3).output_type \
        == td.TensorType((3,))


def test_metric_names_can_be_chosen():
    block = (td.Vector(2), td.Scalar("int32")) >> heads.classification_metrics(
        "tag_loss", accuracy=None)
    _, metrics = block.eval(([1.0, 0.0], 0))
    assert list(metrics) == ["tag_loss"]


def test_node_classifier_puts_a_loss_at_every_tree_node():
    cell = tree_lstm.child_sum_cell(U, D)
    fc = td.FC(2, activation=None)
    block = encoders.tree_encoder(cell, td.GetItem("x") >> td.Vector(D),
                                  per_node=heads.node_classifier(2, logits_layer=fc))
    leaf = {"x": [1.0, 0.0], "children": [], "label": 1}
    tree = {"x": [0.0, 1.0], "label": 0,
            "children": [leaf, {"x": [1.0, 1.0], "label": 1, "children": [leaf, leaf]}]}
    state, metrics = block.eval(tree)
    assert metrics["loss"].shape == (5,)
    (_, batched), = Compiler.create(block).run([tree])
    np.testing.assert_allclose(batched["loss"], metrics["loss"], atol=1e-5)
    # the root's loss: from the root's h and label 0
    root_logits = fc(tf.constant(state[0][None]))[0].numpy()
    assert np.isclose(metrics["loss"], np_xent(root_logits, 0), atol=1e-5).any()


def test_binary_tree_encoder_per_node_hook_sees_leaves_and_pairs():
    leaf = tree_lstm.leaf_cell(U, D)
    seen = td.GetItem(0) >> td.GetItem(0) >> td.Function(
        lambda h: tf.reduce_sum(h, 1)) >> td.Metric("h_sum")
    block = encoders.binary_tree_encoder(td.Vector(D) >> leaf, tree_lstm.binary_cell(U),
                                         per_node=seen)
    state, metrics = block.eval(([1.0, 0.0], ([0.0, 1.0], [1.0, 1.0])))
    assert metrics["h_sum"].shape == (5,)
    assert np.isclose(metrics["h_sum"], state[0].sum(), atol=1e-6).any()


def test_variables_lists_each_layer_weight_once():
    fc = td.FC(2)
    cell = rnn_cells.GRUCell(U)
    block = td.AllOf(td.Map(td.Vector(D)) >> td.RNN(cell) >> td.GetItem(1) >> fc,
                     td.Map(td.Vector(D)) >> td.RNN(cell) >> td.GetItem(1) >> fc)
    found = heads.variables(block)
    assert len(found) == 5 and all(isinstance(v, tf.Variable) for v in found)


def test_tree_encoder_needs_a_cell_with_known_state_type():
    with pytest.raises(ValueError, match="state"):
        encoders.tree_encoder(td.Function(tf.identity), td.Vector(D))


def test_cell_pair_names_a_bad_cell_and_a_bad_input_type():
    with pytest.raises(TypeError, match="CellPair: second must be a cell layer"):
        rnn_cells.CellPair(rnn_cells.GRUCell(U), td.FC(U))
    pair = rnn_cells.CellPair(rnn_cells.GRUCell(U), rnn_cells.GRUCell(U))
    with pytest.raises(TypeError, match=r"expected \(\(input_1, input_2\), \(state_1, state_2\)\)"):
        pair.set_input_type(td.TupleType(td.TensorType((D,)), td.TensorType((U,))))


def test_errors_inside_a_tree_encoder_name_it_and_the_users_keys():
    cell = tree_lstm.ChildSumTreeLSTMCell(2, 1)
    encoder = encoders.tree_encoder(cell, td.GetItem("x") >> td.Vector(1))
    with pytest.raises(td.InputError) as info:
        encoder.eval({"x": [1.0], "children": [{"children": []}]})
    assert info.value.block_path == ("ForwardDeclaration 'tree_encoder' > Pipe[0] > AllOf[0] > "
                                     "GetItem('x')")
    pair = encoders.binary_tree_encoder(td.Scalar() >> td.Function(lambda x: x[:, None]),
                                        tree_rnn.TreeRNNCell(1, 2))
    with pytest.raises(td.InputError, match=r"^at \[1\]: ForwardDeclaration "
                                            r"'binary_tree_encoder' > "):
        pair.eval((1.0, "a"))
