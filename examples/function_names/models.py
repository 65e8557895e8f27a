"""Three encoders of a function's syntax tree, for the same classifier.

All read the input of `data.Task.encode`, embed the same tokens (node types and
identifiers) with an `embed`-sized table and end in a linear layer to the classes:

* `tree_lstm`: a child-sum TreeLSTM (`models.tree_lstm`, Tai et al. 2015) over the
  syntax tree, bottom-up; the root's `h` (`hidden` units) is classified;
* `tree_lstm_mean`: the same TreeLSTM, but the mean of every node's `h` is classified,
  not the root's alone, so a token deep in a long body reaches the classifier by one
  step rather than through every gate on its way up to the root;
* `tree_lstm_pos`: the same TreeLSTM with a node's position among its siblings added
  to its input (a second embedding): a child-sum cell sums its children, so without it
  `x = self.a` and `self.a = x` (an `Assign` with the same two children) look the same;
* `bag`: the mean of the tokens' embeddings, then a `hidden`-unit ReLU layer: a bag of
  node types and identifiers, blind to structure and order;
* `bilstm`: an LSTM of `hidden` units each way over the tokens in pre-order; the final
  `h` of both directions is classified: order, but structure only as far as pre-order
  and the node types show it.

>>> m = encoder_block("tree_lstm", vocab_size=5, num_classes=3, embed=4, hidden=6)
>>> leaf = {"t": 2, "i": 0, "c": []}
>>> x = {"tree": {"t": 1, "i": 0, "c": [leaf, {**leaf, "t": 3, "i": 1}]}, "tokens": [1, 2, 3]}
>>> [encoder_block(k, 5, 3, 4, 6).eval(x).shape for k in ENCODERS]
[(3,), (3,), (3,), (3,), (3,)]
"""

from __future__ import annotations

import refold as td
from refold.examples.function_names.data import MAX_POSITION
from refold.models import encoders, rnn_cells, tree_lstm

__all__ = ["ENCODERS", "DEFAULT_ENCODERS", "encoder_block"]

ENCODERS = ("tree_lstm", "tree_lstm_mean", "tree_lstm_pos", "bag", "bilstm")
DEFAULT_ENCODERS = ("tree_lstm", "tree_lstm_pos", "bag", "bilstm")


def encoder_block(kind: str, vocab_size: int, num_classes: int, embed: int = 32,
                  hidden: int = 64, dropout: float = 0.0,
                  recurrent_dropout: float = 0.0) -> td.Block:
    """`example -> logits[num_classes]` for encoder `kind` (one of `ENCODERS`).

    In training, `dropout` drops that fraction of each token's vector where an
    encoder reads it (the cells' `dropout`; the bag's hidden layer's input) and of
    the vector the logits read; `recurrent_dropout`, that of the TreeLSTM's candidate
    update (Semeniuta et al. 2016) or the BiLSTM's state `h`.
    """
    embedding = td.Embedding(vocab_size, embed, name="tokens")
    token = td.Scalar("int32") >> embedding
    keep = 1.0 - dropout
    logits = td.FC(num_classes, activation=None, name="logits", input_keep_prob=keep)
    drops = {"dropout": dropout, "recurrent_dropout": recurrent_dropout}
    if kind == "tree_lstm":
        cell = tree_lstm.ChildSumTreeLSTMCell(hidden, embed, name="child_sum", **drops)
        tree = encoders.tree_encoder(cell, td.GetItem("t") >> token, children="c")
        return td.GetItem("tree") >> tree >> td.GetItem(0) >> logits
    if kind == "tree_lstm_pos":
        import tensorflow as tf
        position = td.Embedding(MAX_POSITION + 1, embed, name="positions")
        node_input = (td.AllOf(td.GetItem("t") >> token,
                               td.GetItem("i") >> td.Scalar("int32") >> position)
                      >> td.Function(tf.add, name="token_and_position"))
        cell = tree_lstm.ChildSumTreeLSTMCell(hidden, embed, name="child_sum", **drops)
        tree = encoders.tree_encoder(cell, node_input, children="c")
        return td.GetItem("tree") >> tree >> td.GetItem(0) >> logits
    if kind == "tree_lstm_mean":
        cell = tree_lstm.ChildSumTreeLSTMCell(hidden, embed, name="child_sum", **drops)
        return (td.GetItem("tree") >> _tree_with_totals(cell, td.GetItem("t") >> token)
                >> td.Slice(start=1) >> td.Function(_mean, name="mean_h") >> logits)
    tokens = td.GetItem("tokens") >> td.Map(token)
    if kind == "bag":
        return tokens >> td.Mean() >> td.FC(hidden, name="hidden", input_keep_prob=keep) \
            >> logits
    if kind == "bilstm":
        both = encoders.sequence_encoder(
            rnn_cells.LSTMCell(hidden, embed, name="forward", **drops),
            rnn_cells.LSTMCell(hidden, embed, name="backward", **drops))
        return tokens >> both >> logits
    raise ValueError(f"encoder must be one of {ENCODERS}, got {kind!r}")


def _mean(total, count):
    return total / count


def _plus_one(count):
    return count + 1.0


def _tree_with_totals(cell, node_input) -> td.Block:
    """`tree -> ((h, c), sum of h, number of nodes)` over the tree's nodes, bottom-up:
    a node's totals are its children's plus its own."""
    import tensorflow as tf
    hidden = cell.hidden
    out_type = td.TupleType(tree_lstm.state_type(hidden), td.TensorType((hidden,)),
                            td.TensorType((1,)))
    tree = td.ForwardDeclaration(td.PyObjectType(), out_type)
    node = td.Composition(name="node")
    with node.scope():
        kids = (td.GetItem("c") >> td.Map(tree())).reads(node.input)
        state = cell.reads(node_input.reads(node.input), td.Map(td.GetItem(0)).reads(kids))
        h_total = td.Function(tf.add, name="add_h").reads(
            td.GetItem(0).reads(state),
            (td.Map(td.GetItem(1)) >> td.Sum()).reads(kids))
        count = (td.Map(td.GetItem(2)) >> td.Sum() >> td.Function(_plus_one, name="count")
                 ).reads(kids)
        node.output.reads(state, h_total, count)
    tree.resolve_to(node)
    return tree()
