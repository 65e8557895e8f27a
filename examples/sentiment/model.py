"""Sentiment models over SST-format trees, with a loss at every node.

Two encoders share one recipe: a recursive block computes a state at every node of a
tree, a head turns each node's state into 5 logits, and every node emits its loss
and its hit as `td.Metric`s (labels come from the input tree, so `Model.fit` needs
no `y`):

* `tree_lstm`: the binary TreeLSTM of Tai et al. (2015), `models.tree_lstm`;
* `bag_of_words`: a node's state is the sum of its words' embeddings and their
  count, so a node is classified from the *mean* of its words (then an MLP): the
  same data, loss and training, but blind to order and structure.

Trees are the dicts of `examples.sentiment.treebank` with word ids in place of words
(`prepare`).

>>> import numpy as np
>>> from refold.examples.sentiment.treebank import parse_tree, Vocabulary
>>> tree = parse_tree("(3 (2 It) (4 (2 's) (4 great)))")
>>> vocab = Vocabulary.from_trees([tree])
>>> data = prepare([tree], vocab)
>>> data[0]["children"][0]
{'label': 2, 'word': 2}
>>> m = SentimentModel("tree_lstm", vocab_size=len(vocab), embed=4, hidden=5)
>>> result, metrics = m.eval_block.eval(data[0])
>>> metrics["node"].shape, metrics["root"].shape   # (label, polarity, true label)
((5, 3), (1, 3))
>>> sorted(m.train_block.eval(data[0])[1])
['accuracy', 'loss', 'root_accuracy']
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

import refold as td
from refold.examples.sentiment.treebank import NUM_LABELS, Vocabulary
from refold.models import tree_lstm

__all__ = ["ENCODERS", "SentimentModel", "prepare", "binarize", "accuracies"]

ENCODERS = ("tree_lstm", "bag_of_words")


def binarize(tree: dict) -> dict:
    """A copy of `tree` with every node binary: a one-child node is replaced by its
    child, and a node with k > 2 children becomes a right-branching chain of binary
    nodes that all carry the node's label."""
    def visit(node):
        children = node.get("children")
        if children is None:
            return dict(node)
        kids = [visit(c) for c in children]
        if len(kids) == 1:
            return kids[0]
        right = kids[-1]
        for left in reversed(kids[1:-1]):
            right = {"label": node["label"], "children": [left, right]}
        return {"label": node["label"], "children": [kids[0], right]}
    return visit(tree)


def prepare(trees: Iterable[dict], vocab: Vocabulary) -> list[dict]:
    """Binary trees with word ids (from `vocab`, 0 for unknown words) at the leaves."""
    out = []
    for tree in trees:
        tree = binarize(tree)
        stack = [tree]
        while stack:
            node = stack.pop()
            if "word" in node:
                node["word"] = vocab.id(node["word"])
            else:
                stack.extend(node["children"])
        out.append(tree)
    return out


def _node_loss(logits, labels):
    import tensorflow as tf
    # in float32 under a mixed policy too (blocks.evaluation.precision)
    return tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=labels, logits=tf.cast(logits, tf.float32))


def _hit(logits, labels):
    import tensorflow as tf
    return tf.cast(tf.equal(tf.argmax(logits, axis=1, output_type=tf.int32), labels),
                   tf.float32)


def _prediction_and_label(logits, labels):
    """`[predicted label, predicted polarity, true label]` per node; the polarity
    (1 positive, 0 negative) compares the probability of labels 3-4 with that of 0-1."""
    import tensorflow as tf
    pred = tf.cast(tf.argmax(logits, axis=1, output_type=tf.int32), tf.float32)
    p = tf.nn.softmax(tf.cast(logits, tf.float32))
    positive = tf.cast(p[:, 3] + p[:, 4] > p[:, 0] + p[:, 1], tf.float32)
    return tf.stack([pred, positive, tf.cast(labels, tf.float32)], axis=1)


class SentimentModel:
    """The layers of one sentiment model and the blocks that use them.

    Args:
        encoder: `"tree_lstm"` or `"bag_of_words"`.
        vocab_size: the number of word ids (the embedding's rows).
        embed: the embedding size (ignored when `embeddings` is given).
        hidden: the TreeLSTM's state size, or the bag-of-words MLP's hidden size.
        embeddings: optional `[vocab_size, embed]` initial word vectors (e.g. GloVe).
        train_embeddings: whether the word vectors are trained.

    Attributes:
        train_block: `tree -> ()`, emitting `loss` and `accuracy` at every node and
            `root_accuracy` at the root: what `Model.fit` trains.
        eval_block: `tree -> ()`, emitting `node` (every node) and `root`, each a
            float32 triple (predicted label, predicted polarity, true label), for
            the accuracy tables (see `accuracies`).
        logits_block: `tree -> float32[5]`, the root's logits (for `Model.predict`).
        layers: the layers (whose weights both blocks share).
    """

    def __init__(self, encoder: str, vocab_size: int, embed: int = 32, hidden: int = 64,
                 embeddings: np.ndarray | None = None, train_embeddings: bool = True):
        if encoder not in ENCODERS:
            raise ValueError(f"encoder must be one of {ENCODERS}, got {encoder!r}")
        if embeddings is not None:
            embed = int(np.shape(embeddings)[1])
        self.encoder = encoder
        self.embedding = td.Embedding(vocab_size, embed, initializer=embeddings,
                                      trainable=train_embeddings, name="embedding")
        if encoder == "tree_lstm":
            self._leaf_cell = tree_lstm.leaf_cell(hidden, embed, name="leaf_cell")
            self._cell = tree_lstm.binary_cell(hidden, name="binary_cell")
            self._head = [td.FC(NUM_LABELS, activation=None, name="logits")]
            self.layers = [self.embedding, self._leaf_cell, self._cell, *self._head]
        else:
            self._head = [td.FC(hidden, activation="relu", name="mlp"),
                          td.FC(NUM_LABELS, activation=None, name="logits")]
            self.layers = [self.embedding, *self._head]
        self.train_block = self._build("train")
        self.eval_block = self._build("eval")
        self.logits_block = self._build("logits")

    # --- the per-node pieces --------------------------------------------------------

    def _state_type(self):
        if self.encoder == "tree_lstm":
            return tree_lstm.state_type(self._leaf_cell.hidden)
        return td.TensorType((self.embedding.num_units_out + 1,))

    def _leaf(self):
        words = td.GetItem("word") >> td.Scalar("int32") >> self.embedding
        if self.encoder == "tree_lstm":
            return words >> self._leaf_cell
        import tensorflow as tf
        return words >> td.Function(
            lambda e: tf.concat([e, tf.ones_like(e[:, :1])], axis=1), name="with_count")

    def _combine(self):
        if self.encoder == "tree_lstm":
            return self._cell
        import tensorflow as tf
        return td.Function(tf.add, name="add_bags")

    def _logits(self):
        if self.encoder == "tree_lstm":
            features = td.GetItem(0)  # h
        else:
            features = td.Function(lambda s: s[:, :-1] / s[:, -1:], name="mean_of_words")
        return td.Pipe(features, *self._head)

    # --- the blocks -------------------------------------------------------------------

    def _emit(self, logits, label, mode: str, root: bool) -> None:
        """Inside a composition's scope: the metrics of one node."""
        if mode == "train":
            if root:
                td.Metric("root_accuracy").reads(td.Function(_hit).reads(logits, label))
            else:
                td.Metric("loss").reads(td.Function(_node_loss).reads(logits, label))
                td.Metric("accuracy").reads(td.Function(_hit).reads(logits, label))
        else:
            td.Metric("root" if root else "node").reads(
                td.Function(_prediction_and_label).reads(logits, label))

    def _build(self, mode: str) -> td.Block:
        tree = td.ForwardDeclaration(td.PyObjectType(), self._state_type())
        leaf = self._leaf()
        node = td.GetItem("children") >> td.Record((tree(), tree())) >> self._combine()
        at_node = td.Composition(name="node")
        with at_node.scope():
            state = td.OneOf(lambda t: "word" in t, {True: leaf, False: node}) \
                .reads(at_node.input)
            if mode != "logits":
                label = (td.GetItem("label") >> td.Scalar("int32")).reads(at_node.input)
                self._emit(self._logits().reads(state), label, mode, root=False)
            at_node.output.reads(state)
        tree.resolve_to(at_node)

        if mode == "logits":
            return tree() >> self._logits()
        # The root again, for root-only metrics; its head shares the same layers.
        root_logits = self._logits()
        top = td.Composition(name="sentence")
        with top.scope():
            state = tree().reads(top.input)
            label = (td.GetItem("label") >> td.Scalar("int32")).reads(top.input)
            self._emit(root_logits.reads(state), label, mode, root=True)
            top.output.reads(td.Void().reads(state))
        return top


def accuracies(node_rows: np.ndarray, root_rows: np.ndarray) -> dict[str, float]:
    """The four SST accuracies from `eval_block`'s rows (predicted label, predicted
    polarity, true label), over all nodes or roots:

    * `root`, `all`: fine-grained (5-class) accuracy;
    * `root_binary`, `all_binary`: polarity accuracy over the non-neutral nodes
      (labels 0-1 negative, 3-4 positive), as usual for SST.

    >>> rows = np.array([[4, 1, 3], [2, 0, 2], [1, 1, 0]], np.float32)
    >>> accuracies(rows, rows[:1])
    {'root': 0.0, 'root_binary': 1.0, 'all': 0.3333333333333333, 'all_binary': 0.5}
    """
    out = {}
    for name, rows in (("root", root_rows), ("all", node_rows)):
        rows = np.asarray(rows).reshape(-1, 3)
        out[name] = float(np.mean(rows[:, 0] == rows[:, 2])) if len(rows) else float("nan")
        polar = rows[rows[:, 2] != 2]
        out[f"{name}_binary"] = float(np.mean(polar[:, 1] == (polar[:, 2] > 2))) \
            if len(polar) else float("nan")
    return out
