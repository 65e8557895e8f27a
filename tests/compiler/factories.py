"""Module-level block factories, so that models built from them can be saved whole."""

from __future__ import annotations

import keras
import tensorflow as tf

import refold as td


def tree_sign(hidden: int = 8, seed: int = 0, l2: float = 0.0):
    """A recursive net over trees of numbers: logits for whether the leaves' sum is > 0.

    A tree is a float or a pair of trees. With `l2`, the output layer's kernel has an
    L2 penalty (a Keras regularizer loss).
    """
    keras.utils.set_random_seed(seed)
    if l2:
        out = td.ScopedLayer(keras.layers.Dense(2, kernel_regularizer=keras.regularizers.L2(l2),
                                                name="logits"))
    else:
        out = td.FC(2, activation=None, name="logits")
    tree = td.ForwardDeclaration(td.PyObjectType(), td.TensorType((hidden,)))
    leaf = td.Scalar() >> td.Function(lambda x: x[:, None]) >> td.FC(hidden, name="leaf")
    pair = td.Record((tree(), tree())) >> td.Concat() >> td.FC(hidden, name="pair")
    tree.resolve_to(td.OneOf(lambda t: isinstance(t, tuple), {False: leaf, True: pair}))
    return tree() >> out


def labelled_tree_sign(hidden: int = 8, seed: int = 0):
    """Fold style: trees of {'x': float, 'y': 0/1} leaves and {'l', 'r', 'y'} nodes;
    a cross-entropy "loss" and an "accuracy" at every node (labels in the input)."""
    keras.utils.set_random_seed(seed)
    logits = td.FC(2, activation=None, name="logits")
    tree = td.ForwardDeclaration(td.PyObjectType(), td.TensorType((hidden,)))
    leaf_state = td.GetItem("x") >> td.Scalar() >> td.Function(lambda x: x[:, None]) \
        >> td.FC(hidden, name="leaf")
    pair_state = td.AllOf(td.GetItem("l") >> tree(), td.GetItem("r") >> tree()) \
        >> td.Concat() >> td.FC(hidden, name="pair")
    leaf = td.AllOf(leaf_state, td.GetItem("y")) >> scored(logits)
    node = td.AllOf(pair_state, td.GetItem("y")) >> scored(logits)
    tree.resolve_to(td.OneOf(lambda t: "x" in t, {True: leaf, False: node}))
    return tree() >> td.Void()


def scored(logits):
    """`(state, label) -> state`, emitting a "loss" and an "accuracy" metric."""
    def loss(z, y):
        return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=z)

    def hit(z, y):
        return tf.cast(tf.equal(tf.argmax(z, 1, output_type=tf.int32), y), tf.float32)

    emit = td.Record((logits, td.Scalar("int32"))) >> td.AllOf(
        td.Function(loss) >> td.Metric("loss"),
        td.Function(hit) >> td.Metric("accuracy")) >> td.Void()
    return td.AllOf(td.GetItem(0), emit) >> td.GetItem(0)
