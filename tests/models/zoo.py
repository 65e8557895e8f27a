"""The zoo's blocks, small, with inputs: for the saving tests (in this process,
`tests/blocks/test_serialization.py`, and in a fresh one,
`tests/compiler/test_saving.py`)."""

from __future__ import annotations

import refold as td
from refold.models import encoders, heads, rnn_cells, tree_lstm, tree_rnn

ZOO = {
    "binary TreeLSTM with a per-node hook": lambda: encoders.binary_tree_encoder(
        td.Vector(2) >> tree_lstm.leaf_cell(3, 2), tree_lstm.binary_cell(3),
        per_node=td.Record((td.Identity(), td.Void())) >> td.GetItem(0) >> td.Void())
    >> td.GetItem(0),
    "child-sum TreeLSTM": lambda: encoders.tree_encoder(
        tree_lstm.child_sum_cell(3, 2), td.GetItem("x") >> td.Vector(2)) >> td.GetItem(0),
    "N-ary TreeLSTM and Tree-RNN": lambda: encoders.binary_tree_encoder(
        td.Vector(2) >> tree_rnn.TreeRNNCell(3, 0, input_size=2), tree_rnn.TreeRNNCell(3, 2),
        is_leaf=lambda t: not isinstance(t, tuple)),
    "bidirectional LSTM tagger": lambda: heads.tagger(
        td.GetItem("w") >> td.Map(td.Vector(2)) >> encoders.bidirectional(
            rnn_cells.LSTMCell(3), rnn_cells.GRUCell(3)), 4, tags="t"),
    "sequence encoders and a classifier": lambda: heads.classifier(
        td.GetItem("w") >> td.Map(td.Vector(2)) >> td.AllOf(
            encoders.sequence_encoder(rnn_cells.SimpleRNNCell(3), rnn_cells.LSTMCell(2)),
            rnn_cells.rnn_outputs(rnn_cells.GRUCell(2)) >> td.Sum(),
            td.Fold(rnn_cells.fold_step(rnn_cells.GRUCell(2)),
                    td.Zeros(td.TensorType((2,))))) >> td.Concat(),
        3, label="y"),
    "node classifier": lambda: td.Record(((td.Vector(2), td.Vector(2)), td.Identity()))
    >> heads.node_classifier(2) >> td.Void(),
}
ZOO_INPUTS = {
    "binary TreeLSTM with a per-node hook": [([1, 2], ([0, 1], [2, 2]))],
    "child-sum TreeLSTM": [{"x": [1, 2], "children": [{"x": [0, 1], "children": []}] * 2}],
    "N-ary TreeLSTM and Tree-RNN": [([1, 2], ([0, 1], [2, 2]))],
    "bidirectional LSTM tagger": [{"w": [[1, 2], [3, 4], [0, 1]], "t": [0, 3, 1]}],
    "sequence encoders and a classifier": [{"w": [[1, 2], [3, 4]], "y": 2}],
    "node classifier": [(([0.5, -0.5], [0.1, 0.2]), {"label": 1})],
}
