"""Heads: logits from encodings, with Fold-style losses that live inside the model.

Labels are part of the input; a head reads them and emits, through `td.Metric`,
a softmax cross-entropy under `"loss"` and a 0/1 hit under `"accuracy"` for every
labelled item (a sentence, a token, a tree node). A training loop sums (or
averages) the values of every metric whose name ends with "loss" and reports the
others as means.

- `classifier(encoder, num_classes, label=...)`: one input to logits (a root, a
  sentence), with a loss on its label;
- `tagger(encoder, num_tags, tags=...)`: one input to logits at every position of a
  sequence, with a loss at every token;
- `node_classifier(num_classes, label=...)`: a `per_node` block for the tree
  encoders (`models.encoders`), with a loss at every node;
- `classification_metrics()`: `(logits, label) -> nothing`, the metrics alone.

>>> import refold as td
>>> from refold.models import encoders, rnn_cells
>>> words = td.GetItem("words") >> td.Map(td.Scalar("int32") >> td.Embedding(10, 4))
>>> model = tagger(words >> encoders.bidirectional(rnn_cells.LSTMCell(3),
...                                                rnn_cells.LSTMCell(3)), 5, tags="tags")
>>> logits, metrics = model.eval({"words": [1, 2, 3], "tags": [0, 4, 4]})
>>> len(logits), logits[0].shape
(3, (5,))
>>> sorted(metrics), metrics["loss"].shape, set(metrics["accuracy"]) <= {0.0, 1.0}
(['accuracy', 'loss'], (3,), True)
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

import refold.blocks as td
from refold.blocks.block import Block, block_factory


def _cross_entropy(logits, labels):
    # softmax and loss in float32 under a mixed policy too (blocks.evaluation.precision)
    return tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=labels, logits=tf.cast(logits, tf.float32))


def _hit(logits, labels):
    return tf.cast(tf.equal(tf.argmax(logits, axis=1, output_type=tf.int32), labels),
                   tf.float32)


@block_factory
def classification_metrics(loss: str = "loss", accuracy: str | None = "accuracy") -> Block:
    """`(logits, label) -> nothing`: emits the softmax cross-entropy under `loss`
    and, unless `accuracy` is None, 1.0 or 0.0 (is argmax the label) under `accuracy`.

    The label is an int32 scalar tensor (e.g. `td.Scalar("int32")` of a Python int).

    >>> import refold as td
    >>> block = (td.Vector(2), td.Scalar("int32")) >> classification_metrics()
    >>> _, m = block.eval(([0.0, 0.0], 1))
    >>> round(float(m["loss"][0]), 4), float(m["accuracy"][0])   # log(2); ties go to 0
    (0.6931, 0.0)
    """
    metrics = [td.Function(_cross_entropy, handles_empty=True) >> td.Metric(loss)]
    if accuracy is not None:
        metrics.append(td.Function(_hit, handles_empty=True) >> td.Metric(accuracy))
    return td.AllOf(*metrics) >> td.Void()


def _reader(key_or_block: Any) -> Block:
    return key_or_block if isinstance(key_or_block, Block) else td.GetItem(key_or_block)


@block_factory
def classifier(encoder: Any, num_classes: int, label: Any = None,
               logits_layer: td.FC | None = None, loss: str = "loss",
               accuracy: str | None = "accuracy") -> Block:
    """`input -> logits[num_classes]`: `encoder` then a linear layer.

    Args:
        encoder: a block from the input to a float32 vector (e.g. a root's `h`).
        num_classes: the number of classes.
        label: if given, the key of the input's label (or a block reading it from
            the input), and the loss and accuracy metrics are emitted.
        logits_layer: the output layer (a new linear `td.FC` by default).
        loss, accuracy: the metrics' names (see `classification_metrics`).
    """
    head = logits_layer or td.FC(num_classes, activation=None, name="logits")
    scores = td.convert_to_block(encoder) >> head
    if label is None:
        return scores
    comp = td.Composition(name="classifier")
    with comp.scope():
        logits = scores.reads(comp.input)
        target = (_reader(label) >> td.Scalar("int32")).reads(comp.input)
        classification_metrics(loss, accuracy).reads(logits, target)
        comp.output.reads(logits)
    return comp


@block_factory
def tagger(encoder: Any, num_tags: int, tags: Any = None, logits_layer: td.FC | None = None,
           loss: str = "loss", accuracy: str | None = "accuracy") -> Block:
    """`input -> [logits_1..logits_n]`: a linear layer on every vector `encoder` gives.

    Args:
        encoder: a block from the input to a sequence of float32 vectors (e.g.
            words, embedded, then `encoders.bidirectional`).
        num_tags: the number of tags.
        tags: if given, the key of the input's list of tags (or a block reading it),
            one per position, and the loss and accuracy metrics are emitted at
            every position (a shorter list of tags labels only the first positions).
        logits_layer: the output layer (a new linear `td.FC` by default).
        loss, accuracy: the metrics' names (see `classification_metrics`).
    """
    head = logits_layer or td.FC(num_tags, activation=None, name="tag_logits")
    scores = td.convert_to_block(encoder) >> td.Map(head)
    if tags is None:
        return scores
    comp = td.Composition(name="tagger")
    with comp.scope():
        logits = scores.reads(comp.input)
        targets = (_reader(tags) >> td.Map(td.Scalar("int32"))).reads(comp.input)
        per_token = td.Zip() >> td.Map(classification_metrics(loss, accuracy)) >> td.Void()
        per_token.reads(logits, targets)
        comp.output.reads(logits)
    return comp


@block_factory
def node_classifier(num_classes: int, label: Any = "label", logits_layer: td.FC | None = None,
                    loss: str = "loss", accuracy: str | None = "accuracy") -> Block:
    """`(state, node) -> nothing`: a loss on every tree node, for a tree encoder's
    `per_node`. The logits come from the state's `h` (its first item if it is a
    tuple), the label from `node[label]` (or a block reading the node).
    """
    from refold.models.encoders import _StateH
    head = logits_layer or td.FC(num_classes, activation=None, name="node_logits")
    scores = td.GetItem(0) >> _StateH() >> head
    target = td.GetItem(1) >> _reader(label) >> td.Scalar("int32")
    return td.AllOf(scores, target) >> classification_metrics(loss, accuracy)


def variables(block: Any) -> list:
    """The trainable variables of the layers a block expression uses (each once), as
    `tf.Variable`s, for a `tf.GradientTape`."""
    import keras

    from refold.blocks.layers import Layer
    from refold.blocks.tensors import FromTensor, Function
    from refold.blocks.validation import validate
    seen: dict[int, Any] = {}
    for b in validate(td.convert_to_block(block)):
        found = []
        if isinstance(b, Function) and isinstance(b.tf_fn, Layer):
            found = b.tf_fn.weights
        elif isinstance(b, FromTensor) and isinstance(b.tensor, (tf.Variable, keras.Variable)):
            found = [b.tensor]
        for w in found:
            v = w.value if isinstance(w, keras.Variable) else w
            if getattr(w, "trainable", True):
                seen.setdefault(id(v), v)
    return list(seen.values())


__all__ = ["classification_metrics", "classifier", "tagger", "node_classifier", "variables"]
