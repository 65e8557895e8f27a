"""The model zoo: recurrent and recursive cells, encoders and heads, built from `blocks` only.

| module | what it holds |
|---|---|
| `rnn_cells` | `SimpleRNNCell`, `LSTMCell`, `GRUCell`, for `td.RNN` and `td.Fold` |
| `tree_lstm` | N-ary TreeLSTM (`leaf_cell`, `binary_cell`), child-sum TreeLSTM |
| `tree_rnn` | `TreeRNNCell`, the plain recursive neural network cell |
| `encoders` | `bidirectional`, `sequence_encoder`, `tree_encoder`, `binary_tree_encoder` |
| `heads` | `classifier`, `tagger`, `node_classifier`: logits, with loss/accuracy metrics |
"""
