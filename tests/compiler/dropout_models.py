"""The engine-test family of `tests.compiler.models` with dropout and noise everywhere
a user would put them: the zoo's cells (`dropout`, `recurrent_dropout`), `td.FC`'s keep
probabilities, `td.Dropout`, Keras noise layers in `td.Function` and `td.ScopedLayer`,
and a function of one's own drawing with `blocks.noise` (`random=True`).
"""

from __future__ import annotations

import keras
from hypothesis import strategies as st

import refold as td
from refold.blocks import noise
from refold.blocks.evaluation.training_mode import current
from refold.models import encoders, heads, rnn_cells, tree_lstm
from tests.compiler.models import Case, H, labelled_trees, tf_variable, trees, weights_of


def vectors(n: int, max_size: int = 6):
    return st.lists(st.lists(st.floats(-1, 1, width=32), min_size=n, max_size=n),
                    max_size=max_size)


def make_tree_lstm_dropout() -> Case:
    """Binary TreeLSTM: input dropout at the leaves, dropout on every cell's candidate
    update, an `FC` with both keep probabilities on the root."""
    keras.utils.set_random_seed(11)
    emb = td.Embedding(7, 3)
    leaf_cell = tree_lstm.leaf_cell(H, 3, dropout=0.3, recurrent_dropout=0.25)
    cell = tree_lstm.binary_cell(H, recurrent_dropout=0.5)
    out = td.FC(3, activation=None, input_keep_prob=0.6, output_keep_prob=0.8)
    tree = td.ForwardDeclaration(td.PyObjectType(), tree_lstm.state_type(H))
    leaf = td.Scalar("int32") >> emb >> leaf_cell
    node = td.Record((tree(), tree())) >> cell
    tree.resolve_to(td.OneOf(lambda t: isinstance(t, tuple), {False: leaf, True: node}))
    block = tree() >> td.GetItem(0) >> out
    return Case("tree_lstm_dropout", block, trees(), weights_of(emb, leaf_cell, cell, out))


def make_tree_lstm_loss_everywhere_dropout() -> Case:
    """TreeLSTM with a loss at every node and `td.Dropout` on each node's `h` before
    its logits (one `td.Dropout` block: a node of it per tree node)."""
    keras.utils.set_random_seed(12)
    emb = td.Embedding(7, 3)
    leaf_cell = tree_lstm.leaf_cell(H, 3)
    cell = tree_lstm.binary_cell(H, recurrent_dropout=0.4)
    out = td.FC(3, activation=None)
    tree = td.ForwardDeclaration(td.PyObjectType(), tree_lstm.state_type(H))
    leaf = td.GetItem("word") >> td.Scalar("int32") >> emb >> leaf_cell
    node = td.AllOf(td.GetItem("left") >> tree(), td.GetItem("right") >> tree()) >> cell
    with_loss = td.Composition()
    with with_loss.scope():
        state = td.OneOf(lambda t: "word" in t, {True: leaf, False: node}).reads(with_loss.input)
        logits = (td.GetItem(0) >> td.Dropout(0.5) >> out).reads(state)
        label = (td.GetItem("label") >> td.Scalar("int32")).reads(with_loss.input)
        heads.classification_metrics().reads(logits, label)
        with_loss.output.reads(state)
    tree.resolve_to(with_loss)
    block = tree() >> td.GetItem(0)
    return Case("tree_lstm_loss_everywhere_dropout", block, labelled_trees(),
                weights_of(emb, leaf_cell, cell, out))


def make_child_sum_dropout() -> Case:
    """Child-sum TreeLSTM with input dropout (one mask for the gates and the forget
    gates) and dropout on the candidate update."""
    keras.utils.set_random_seed(13)
    cell = tree_lstm.child_sum_cell(H, 2, dropout=0.3, recurrent_dropout=0.4)
    tree = td.ForwardDeclaration(td.PyObjectType(), tree_lstm.state_type(H))
    tree.resolve_to(td.Record((td.Vector(2), td.Map(tree()))) >> cell)
    block = tree() >> td.GetItem(0)
    vec = st.lists(st.floats(-1, 1, width=32), min_size=2, max_size=2)
    nodes = st.recursive(st.tuples(vec, st.just([])),
                         lambda sub: st.tuples(vec, st.lists(sub, max_size=3)), max_leaves=6)
    return Case("child_sum_dropout", block, nodes, [tf_variable(v) for v in cell.variables])


def make_rnn_of_a_library_cell_dropout() -> Case:
    """`td.RNN` of a zoo GRU (run split: the input projection, with its input dropout,
    before the loop; the recurrent half, with recurrent dropout, in it)."""
    keras.utils.set_random_seed(14)
    cell = rnn_cells.GRUCell(H, dropout=0.3, recurrent_dropout=0.4, name="gru")
    block = td.Map(td.Vector(3)) >> td.RNN(cell) >> td.GetItem(1)
    return Case("rnn_of_a_library_cell_dropout", block, vectors(3), weights_of(cell))


def make_bidirectional_tagger_dropout() -> Case:
    """A bidirectional LSTM/GRU pair (one `CellPair`) with both dropouts, a metric at
    every position."""
    keras.utils.set_random_seed(15)
    fw = rnn_cells.LSTMCell(H, dropout=0.25, recurrent_dropout=0.3)
    bw = rnn_cells.GRUCell(H, dropout=0.2, recurrent_dropout=0.35)
    head = td.FC(2, activation=None)
    block = td.Composition()
    with block.scope():
        encoded = (td.Map(td.Vector(3)) >> encoders.bidirectional(fw, bw)).reads(block.input)
        td.Void().reads(td.Map(td.Function(head) >> td.Metric("per_word")).reads(encoded))
        block.output.reads(encoded)
    return Case("bidirectional_tagger_dropout", block, vectors(3), weights_of(fw, bw, head))


def make_fold_of_cells_dropout() -> Case:
    """`td.Fold` over zoo cells run whole (their `_call`): a SimpleRNN cell and an LSTM
    cell one after the other, both with both dropouts."""
    keras.utils.set_random_seed(16)
    simple = rnn_cells.SimpleRNNCell(H, dropout=0.3, recurrent_dropout=0.3)
    lstm = rnn_cells.LSTMCell(H, dropout=0.2, recurrent_dropout=0.4)
    first = td.Map(td.Vector(3)) >> td.Fold(rnn_cells.fold_step(simple), td.Zeros(H))
    block = td.Map(td.Vector(3)) >> td.AllOf(
        td.Identity(), td.Fold(rnn_cells.fold_step(lstm), td.Zeros(lstm.state_type))) \
        >> td.GetItem(1) >> td.GetItem(0)
    combined = td.AllOf(first, block) >> td.Concat()
    return Case("fold_of_cells_dropout", combined, vectors(3), weights_of(simple, lstm))


def make_keras_noise_layers() -> Case:
    """Keras' noise layers as users wrap them: `Dropout` in `td.Function`,
    `GaussianNoise` in `td.ScopedLayer`, `GaussianDropout` and `AlphaDropout` in a
    `td.Fold`'s combine, and a function of one's own drawing normal noise."""
    keras.utils.set_random_seed(17)
    fc = td.FC(H, activation="tanh")

    def jitter(x):
        return x + 0.1 * noise.normal(x.shape[1:]) if current().training else x

    step = (td.Concat() >> td.Function(keras.layers.GaussianDropout(0.3)) >> fc
            >> td.Function(keras.layers.AlphaDropout(0.2)))
    block = (td.Map(td.Vector(2) >> td.Function(keras.layers.Dropout(0.4))
                    >> td.ScopedLayer(keras.layers.GaussianNoise(0.5))
                    >> td.Function(jitter, random=True))
             >> td.Fold(step, td.Zeros(H)))
    return Case("keras_noise_layers", block, vectors(2), weights_of(fc))


ALL = [make_tree_lstm_dropout, make_tree_lstm_loss_everywhere_dropout, make_child_sum_dropout,
       make_rnn_of_a_library_cell_dropout, make_bidirectional_tagger_dropout,
       make_fold_of_cells_dropout, make_keras_noise_layers]
