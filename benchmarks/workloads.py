"""The standard benchmark workloads (see BENCHMARKS.md), as data generators and block models.

sst-synth: binary trees with round(Normal(19, 9)) leaves clipped to [2, 56], split
uniformly at random; leaves carry word ids from a 16,000-word vocabulary. A tree
is a nested tuple `(left, right)` with int word ids at the leaves.
"""

from __future__ import annotations

import functools

import numpy as np

import refold as td
from refold.models import tree_lstm

VOCAB, EMBED, HIDDEN, CLASSES = 16_000, 300, 150, 5


def sst_synth_tree(rng: np.random.Generator, n_leaves: int | None = None):
    """One random binary tree of the sst-synth workload."""
    if n_leaves is None:
        n_leaves = int(np.clip(round(rng.normal(19, 9)), 2, 56))
    words = rng.integers(0, VOCAB, n_leaves).tolist()

    def build(lo: int, hi: int):
        # iterative would be overkill: depth <= 56
        if hi - lo == 1:
            return words[lo]
        split = int(rng.integers(lo + 1, hi))
        return (build(lo, split), build(split, hi))

    return build(0, n_leaves)


def same_shape_trees(rng: np.random.Generator, n: int, n_leaves: int = 19) -> list:
    """`n` trees of one random shape (for the hand-batched ceiling), random words."""
    shape = sst_synth_tree(rng, n_leaves)

    def relabel(t):
        if isinstance(t, tuple):
            return (relabel(t[0]), relabel(t[1]))
        return int(rng.integers(0, VOCAB))

    return [relabel(shape) for _ in range(n)]


def count_nodes(tree) -> int:
    stack, n = [tree], 0
    while stack:
        t = stack.pop()
        n += 1
        if isinstance(t, tuple):
            stack.extend(t)
    return n


class TreeLSTMModel:
    """The sst-synth TreeLSTM: embedding 300, hidden 150, 5 classes, loss at the root.

    Attributes:
        embedding, leaf, cell, output: the layers (shared by the block model and the
            baselines, so every variant computes the same function).
        block: `tree -> logits[5]`, the block expression.
    """

    def __init__(self, seed: int = 0):
        import keras
        keras.utils.set_random_seed(seed)
        self.embedding = td.Embedding(VOCAB, EMBED, name="embedding")
        self.leaf = tree_lstm.leaf_cell(HIDDEN, EMBED, name="leaf_cell")
        self.cell = tree_lstm.binary_cell(HIDDEN, name="binary_cell")
        self.output = td.FC(CLASSES, activation=None, name="logits")
        tree = td.ForwardDeclaration(td.PyObjectType(), tree_lstm.state_type(HIDDEN))
        leaf = td.Scalar("int32") >> self.embedding >> self.leaf
        node = td.Record((tree(), tree())) >> self.cell
        tree.resolve_to(td.OneOf(lambda t: isinstance(t, tuple), {False: leaf, True: node}))
        self.block = tree() >> td.GetItem(0) >> self.output

    @property
    def variables(self) -> list:
        return [w for layer in (self.embedding, self.leaf, self.cell, self.output)
                for w in layer.weights]


class UserTreeLSTMModel:
    """The sst-synth TreeLSTM as a user writes it without the zoo: Keras layers of
    their own (`leaf`, `node`: a `Dense` each, gate arithmetic in `call`) wrapped in
    `td.Function`s, the engine issue's first workload; same sizes as `TreeLSTMModel`.

    Attributes:
        embedding, leaf, node, output: the layers.
        block: `tree -> logits[5]`, the block expression.
    """

    def __init__(self, seed: int = 0):
        import keras
        keras.utils.set_random_seed(seed)
        self.embedding = td.Embedding(VOCAB, EMBED, name="embedding")
        leaf, node = _user_layer_classes()
        self.leaf, self.node = leaf(HIDDEN), node(HIDDEN)
        self.output = keras.layers.Dense(CLASSES, name="logits")
        state = td.TupleType(td.TensorType((HIDDEN,)), td.TensorType((HIDDEN,)))
        tree = td.ForwardDeclaration(td.PyObjectType(), state)
        leaf_block = td.Scalar("int32") >> self.embedding >> td.Function(self.leaf)
        node_block = td.Record((tree(), tree())) >> td.Function(self.node)
        tree.resolve_to(td.OneOf(lambda t: isinstance(t, tuple),
                                 {False: leaf_block, True: node_block}))
        self.block = tree() >> td.GetItem(0) >> td.Function(self.output)


@functools.cache
def _user_layer_classes() -> tuple:
    """The Keras layer classes of `UserTreeLSTMModel` (defined on first use, so that
    importing this module does not load Keras)."""
    import keras
    import tensorflow as tf

    class Leaf(keras.layers.Layer):
        def __init__(self, hidden: int):
            super().__init__(name="user_leaf")
            self.gates = keras.layers.Dense(3 * hidden, name="leaf_gates")  # i, o, u

        def call(self, x):
            i, o, u = tf.split(self.gates(x), 3, axis=1)
            c = tf.sigmoid(i) * tf.tanh(u)
            return tf.sigmoid(o) * tf.tanh(c), c

    class Node(keras.layers.Layer):
        def __init__(self, hidden: int):
            super().__init__(name="user_node")
            self.gates = keras.layers.Dense(5 * hidden, name="node_gates")  # i,o,u,f_l,f_r

        def call(self, left, right):
            (h_l, c_l), (h_r, c_r) = left, right
            i, o, u, f_l, f_r = tf.split(self.gates(tf.concat([h_l, h_r], 1)), 5, axis=1)
            c = tf.sigmoid(i) * tf.tanh(u) + tf.sigmoid(f_l) * c_l + tf.sigmoid(f_r) * c_r
            return tf.sigmoid(o) * tf.tanh(c), c

    return Leaf, Node

