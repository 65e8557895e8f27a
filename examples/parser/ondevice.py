"""The parser acting on its own predictions on the device: exploration training and
greedy parsing with the whole walk of every sentence of a batch in one engine call.

`exploration.Exploration` writes the walk as a `td.Unfold` whose Python `decide`
reads each step's logits: a batch then advances in rounds, one engine call per
transition. Arc-hybrid (`transitions`) is simple enough to write as tensor ops
instead, for all sentences at once:

* a configuration is a stack per sentence (`[B, L]` positions and its height), the
  buffer's first item `b0` (0 once only the root is left: the buffer is always
  `b0..n` then the root), the words on the stack (`[B, L]` bools) and the heads
  given so far;
* the dynamic oracle's costs (`oracle_costs`, as `dynamic_oracle.costs`) are a few
  gathers and sums over those;
* the MLP's first layer is linear in each slot's encoding, so each position's
  contribution from each slot (`P_slot = encodings @ W_slot`) is computed once per
  sentence; a step gathers four rows, adds them and scores;
* `tf.while_loop` runs `2 * max(n)` steps (a parse of n words takes exactly 2n), a
  finished sentence standing still. It records each step's positions and
  transition and computes nothing differentiable: after it, the logits of every
  step taken are computed again from the recorded positions in one batched,
  differentiable pass, and the losses from them. The gradient so never enters a
  loop. The loop is compiled with XLA (`jit_compile`), once per batch size and
  length bucket (`BUCKET`): in graph mode its small ops a step cost more to launch
  than to compute.

The encoder stays a Refold block batched by the engine: its encodings reach the
walk as one `[max_words + 1, 2 * hidden]` matrix per sentence (`td.Stack`), and the
walk is a `td.Function` of a Keras layer (`Walk`) that holds the parser's scoring
layers, so `Model` trains and saves them and `block.eval` computes what the engine
does. The engine runs it after its loop, once per batch (it feeds nothing the
loop needs), so the engine's replayed backward pass never meets the walk's loop.
The walk handles an empty batch, so the engine calls it without a `tf.cond` around
it: inside a cond, the compiled loop's call waited forever with one inter-op thread
(`tf.config.threading.set_inter_op_parallelism_threads(1)`).

What writing the transition system as tensor ops gives up: `decide` is no longer
any Python (a new transition system, feature or oracle has to be written again in
TensorFlow, batched and masked), a sentence's length is bounded by `max_words`
(each sentence is padded to it), and the exploration coins come from the training
step's seed (`blocks.noise`), so outside training (`evaluate`, `block.eval` without
`training=True`) no coin is drawn and a wrong prediction is followed only with
`explore = 1`. Two metrics differ in how they count: the transition `"loss"` and
`"accuracy"` are per transition taken, as `Exploration`'s; the label classifiers
learn at the same configurations (where an arc to the stack's top is gold,
`Walk.gold_arc`), but their number is known only on the device, so the metrics come
once per word: `"label_loss"` is the sentence's total label cross-entropy over its
words (the batch's mean is its total over its words, where `Exploration`'s is over
those configurations, about as many), `"label_accuracy"` the sentence's share of
those configurations labelled right.

>>> from refold.examples.parser.model import ParserModel, Vocabulary
>>> from refold.examples.parser.treebank import Sentence
>>> from refold.examples.parser.exploration import exploration_input
>>> s = Sentence(["the", "dog", "sleeps"], ["DET", "NOUN", "VERB"], [2, 3, 0])
>>> parser = ParserModel(Vocabulary.from_sentences([s]), embed=4, tag_embed=2,
...                      hidden=3, mlp=5)
>>> exploring = DeviceExploration(parser, explore=1.0, max_words=8)
>>> logits, metrics = exploring.block.eval(exploration_input(s, parser.vocab))
>>> logits.shape, metrics["loss"].shape          # padded to 2 * max_words; 2n losses
((16, 3), (6,))
>>> heads, labels = DeviceParser(parser, max_words=8).parse([parser.vocab.tokens(s)])[0]
>>> len(heads), len(labels)
(3, 3)
"""

from __future__ import annotations

from collections.abc import Sequence

import keras
import numpy as np
import tensorflow as tf

import refold as td
from refold.blocks import noise
from refold.blocks.block import bad_input
from refold.blocks.evaluation.training_mode import current
from refold.examples.parser.model import ParserModel
from refold.examples.parser.transitions import LEFT, RIGHT, SHIFT, STACK_FEATURES
from refold.examples.parser.treebank import check_tree

__all__ = ["oracle_costs", "Walk", "DeviceExploration", "DeviceParser", "ILLEGAL"]

ILLEGAL = 1 << 20
"""The cost `oracle_costs` gives an illegal transition."""

SLOTS = STACK_FEATURES + 1


def _take(x, i):
    """`x[b, i[b]]` for each row b of `x` (`[B, L, ...]`); an index below 0 reads 0."""
    return tf.gather(x, tf.maximum(i, 0)[:, None], batch_dims=1)[:, 0]


def legal(height, b0):
    """`[B, 3]` bools: whether SHIFT, LEFT and RIGHT are legal (`Configuration.legal`)."""
    return tf.stack([b0 != 0, (height > 0) & ((b0 != 0) | (height == 1)), height >= 2], 1)


def _costs(on_stack, height, b0, s0, s1, n, gold):
    """`oracle_costs` from the configuration's parts: `on_stack` `[B, L]` bools by
    position, the stack's top two items `s0`, `s1` (anything where absent)."""
    positions = tf.range(tf.shape(gold)[1])[None, :]
    has_b0 = b0 != 0

    def in_buffer(w):  # a word still to read
        return has_b0 & (w >= b0) & (w >= 1)

    def count(mask):
        return tf.reduce_sum(tf.cast(mask, tf.int32), 1)

    buffer = has_b0[:, None] & (positions >= b0[:, None]) & (positions <= n[:, None])
    hb = _take(gold, b0)  # b0's gold head
    lost_head = ((hb >= 1) & _take(on_stack, hb) & (hb != s0)) | ((hb == 0) & (height > 0))
    shift = tf.cast(lost_head, tf.int32) + count(on_stack & (gold == b0[:, None]))
    h = _take(gold, s0)  # s0's gold head
    dependents = count(buffer & (gold == s0[:, None]))
    has_s1 = height >= 2
    reachable = in_buffer(h) | ((h == 0) & ~has_s1) | (has_s1 & (h == s1))
    left = tf.cast((h != b0) & reachable, tf.int32) + dependents
    right = tf.cast((h != s1) & in_buffer(h), tf.int32) + dependents
    return tf.where(legal(height, b0), tf.stack([shift, left, right], 1), ILLEGAL)


def oracle_costs(stack, height, b0, n, gold):
    """`[B, 3]` int32: the dynamic oracle's cost of SHIFT, LEFT and RIGHT in a batch of
    configurations (`dynamic_oracle.costs`), `ILLEGAL` where illegal.

    Args:
        stack: `[B, L]` int32 positions, the bottom first; items past `height` are
            ignored.
        height: `[B]` the stacks' heights.
        b0: `[B]` the buffer's first word, 0 when only the root is left.
        n: `[B]` the sentences' lengths (`L > n`).
        gold: `[B, L]` int32, `gold[b, w]` the gold head of word w (from 1); entry 0
            and entries past n are ignored.
    """
    stack, height, b0, n, gold = (tf.convert_to_tensor(a, tf.int32)
                                  for a in (stack, height, b0, n, gold))
    width = tf.shape(gold)[1]
    there = tf.range(tf.shape(stack)[1])[None, :] < height[:, None]
    on_stack = tf.reduce_any(tf.one_hot(tf.where(there, stack, -1), width, on_value=True,
                                        off_value=False, dtype=tf.bool), 1)
    s0 = _take(stack, height - 1)
    s1 = _take(stack, height - 2)
    return _costs(on_stack, height, b0, tf.where(height >= 1, s0, -1),
                  tf.where(height >= 2, s1, -1), n, gold)


class Walk(keras.layers.Layer):
    """The walk of a batch of sentences as one Keras layer on the parser's scoring
    layers (which it holds, so that a `td.Function` of it declares them).

    Called on `(encodings [B, max_words + 1, width], n [B])` it parses greedily
    (legal transitions only) and returns `(heads, labels)`, `[B, max_words]` int32
    (label -1 without labels, 0 past the sentence). With `oracle`, it is called on
    `(encodings, n, gold heads [B, max_words + 1], gold labels [B, max_words + 1])`
    (by position, entry 0 unused) and follows `exploration.Exploration`'s rule:
    returns the logits `[B, 2 max_words, 3]` of each step taken, the transitions,
    each step's loss and accuracy (`[B, 2 max_words]`), the heads reached, and each
    sentence's label loss and label accuracy (scalars).

    Args:
        parser: the layers (MLP, pads, label classifiers).
        max_words: the padded sentence length.
        oracle: exploration (with gold trees) rather than greedy parsing; its
            probability of following a wrong prediction is the variable `explore`,
            read at each call.
    """

    def __init__(self, parser: ParserModel, max_words: int, oracle: bool, **kwargs):
        super().__init__(**kwargs)
        self.max_words, self.oracle = max_words, oracle
        width, mlp = parser.width, parser.hidden_layer.output_size
        self.hidden = _built(parser.hidden_layer, SLOTS * width)
        self.scores = _built(parser.logits_layer, mlp)
        self.label_layers = [_built(parser.label_layers[d], mlp) for d in (LEFT, RIGHT)] \
            if parser.label_layers else []
        self.pads = list(parser.pads)
        self.labelled = bool(self.label_layers)
        self.explore = keras.Variable(0.0, trainable=False, name="explore") if oracle else None
        self.built = True

    def call(self, encodings, n, gold=None, labels=None):
        n = tf.cast(n, tf.int32)
        longest = tf.reduce_max(tf.concat([n, [0]], 0))
        # the positions the batch uses, rounded up (the loop is compiled per size)
        size = tf.minimum((longest + BUCKET) // BUCKET * BUCKET, self.max_words + 1)
        projected, pads = self._project(encodings[:, :size])
        weights = [tf.stop_gradient(tf.convert_to_tensor(v)) for v in
                   (self.hidden.bias, self.scores.kernel, self.scores.bias)]
        fixed = (tf.stop_gradient(projected), tf.stop_gradient(pads), *weights, n)
        names = ["features", "transitions", "heads"]
        if self.oracle:
            coins, explore = self._coins(tf.shape(n)[0]), tf.convert_to_tensor(self.explore)
            records = _exploring_loop(*fixed, gold[:, :size], labels[:, :size], coins,
                                      explore)
            names += ["correct", "arc", "arc_label"]
        else:
            records = _greedy_loop(*fixed)
        path = {name: r if name == "heads" else r[:, :2 * longest]  # the steps taken
                for name, r in zip(names, records)}
        steps = tf.range(2 * longest)[None, :] < 2 * n[:, None]
        heads = self._pad(path["heads"][:, 1:], self.max_words)
        if not (self.oracle or self.labelled):  # the heads are all a parse needs
            return heads, tf.fill(tf.shape(heads), -1)
        hidden, logits = self._score(projected, pads, path["features"])
        if self.oracle:
            return self._exploration_outputs(path, hidden, logits, steps, heads, n)
        return heads, self._arc_labels(path, hidden, steps, size)

    def _project(self, encodings):
        """`[B, L, slot, mlp]`: each position's part of the MLP's hidden layer from
        each slot (one product), and `[3, mlp]` the pads'."""
        shape = tf.shape(encodings)
        w = tf.reshape(tf.convert_to_tensor(self.hidden.kernel), [SLOTS, shape[2], -1])
        mlp = tf.shape(w)[2]
        projected = tf.reshape(
            tf.matmul(tf.reshape(encodings, [-1, shape[2]]),
                      tf.reshape(tf.transpose(w, [1, 0, 2]), [shape[2], SLOTS * mlp])),
            [shape[0], shape[1], SLOTS, mlp])
        # the pads against every slot's kernel (a zero row for the last slot, which has
        # no pad) and the rows kept after: slicing the kernel instead made its gradient
        # a `StridedSliceGrad` over the whole kernel, which cost more than the product
        stacked = tf.stack([tf.convert_to_tensor(p) for p in self.pads])
        stacked = tf.concat(
            [stacked, tf.zeros([SLOTS - STACK_FEATURES, shape[2]], stacked.dtype)], 0)
        pads = tf.einsum("kd,kdm->km", stacked, w)[:STACK_FEATURES]
        return projected, pads

    def _arc_labels(self, path, hidden, steps, size):
        """`[B, max_words]`: each word's label, its arc direction's best."""
        direction = path["transitions"]
        ids = tf.argmax(self._direction_labels(direction, hidden), -1, output_type=tf.int32)
        arc = steps & (direction != SHIFT)
        s0 = path["features"][:, :, STACK_FEATURES - 1]  # an arc's dependent
        by_word = tf.reduce_max(tf.where(
            arc[..., None] & (s0[..., None] == tf.range(size)[None, None, :]),
            ids[..., None], -1), 1)
        return self._pad(by_word[:, 1:], self.max_words)

    def _direction_labels(self, direction, hidden):
        """The label logits of the label layer of each step's `direction`."""
        return tf.where((direction == LEFT)[..., None], self._labels(LEFT, hidden),
                        self._labels(RIGHT, hidden))

    def _exploration_outputs(self, path, hidden, logits, steps, heads, n):
        """The losses and metrics of the steps taken (`Exploration`'s), padded."""
        correct = path["correct"]
        mask = tf.cast(steps, tf.float32)
        best = tf.reduce_max(tf.where(correct, logits, -1e9), -1)
        loss = (tf.reduce_logsumexp(logits, -1) - best) * mask
        hit = tf.cast(tf.gather(correct, tf.argmax(logits, -1, output_type=tf.int32),
                                batch_dims=2), tf.float32) * mask
        label_loss = label_accuracy = tf.zeros(tf.shape(n), tf.float32)
        if self.labelled:
            chosen = self._direction_labels(path["arc"], hidden)
            gold_label = path["arc_label"]
            learn = tf.cast(steps & (path["arc"] != SHIFT), tf.float32)
            ce = tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=tf.maximum(gold_label, 0), logits=chosen)
            right = tf.cast(tf.argmax(chosen, -1, output_type=tf.int32) == gold_label,
                            tf.float32)
            # emitted once per word: the batch's label loss is its total over its words
            label_loss = tf.reduce_sum(ce * learn, 1) / tf.maximum(tf.cast(n, tf.float32), 1.0)
            label_accuracy = tf.reduce_sum(right * learn, 1) / tf.maximum(
                tf.reduce_sum(learn, 1), 1.0)
        t = 2 * self.max_words
        return (self._pad(logits * mask[..., None], t), self._pad(path["transitions"], t),
                self._pad(loss, t), self._pad(hit, t), heads, label_loss, label_accuracy)

    @staticmethod
    def _pad(x, length):
        """`x` `[B, T, ...]` padded with zeros to `[B, length, ...]`."""
        pad = [[0, 0], [0, length - tf.shape(x)[1]]] + [[0, 0]] * (len(x.shape) - 2)
        return tf.ensure_shape(tf.pad(x, pad), [None, length, *x.shape[2:]])

    def _labels(self, direction, hidden):
        layer = self.label_layers[0 if direction == LEFT else 1]
        return tf.matmul(hidden, layer.kernel) + layer.bias

    def _hidden(self, projected, pads, positions):
        """The MLP's hidden layer at `positions` (`[B, T, 4]`, -1 for an empty slot):
        one gather from a table of every position's rows and the pads' (a gather per
        slot took twice as long, forward and backward)."""
        shape = tf.shape(projected)
        batch, size, mlp = shape[0], shape[1], shape[3]
        table = tf.concat([tf.reshape(projected, [-1, mlp]), pads], 0)
        slot = tf.range(SLOTS)[None, None, :]
        row = (tf.range(batch)[:, None, None] * size + positions) * SLOTS + slot
        pad = batch * size * SLOTS + tf.minimum(slot, STACK_FEATURES - 1)
        rows = tf.gather(table, tf.where(positions >= 0, row, pad))  # [B, T, 4, mlp]
        return tf.tanh(tf.reduce_sum(rows, 2) + self.hidden.bias)

    def _score(self, projected, pads, positions):
        hidden = self._hidden(projected, pads, positions)
        return hidden, tf.matmul(hidden, self.scores.kernel) + self.scores.bias

    def _coins(self, batch):
        """`[B, 2 max_words]` uniform coins in training; ones (never below `explore`
        < 1) outside it."""
        if current().training:
            return noise.uniform([2 * self.max_words])
        return tf.fill([batch, 2 * self.max_words], 1.0 - 2.0 ** -24)


def _walk(projected, pads, hidden_b, scores_w, scores_b, n, gold=None, labels=None,
          coins=None, explore=None):
    """The loop over a batch (no gradient): each step's positions `[B, T, 4]` and
    transition `[B, T]` (T = 2 (L - 1) for `projected`'s L positions, steps past a
    sentence's end left zero), the heads reached `[B, L]` and, with the oracle
    (`gold` given), each step's correct transitions `[B, T, 3]` and the gold arc to s0
    and its label (`exploration.Walk.gold_arc`, `[B, T]` each)."""
    oracle = gold is not None
    batch, size = tf.shape(n)[0], tf.shape(projected)[1]
    steps = 2 * tf.reduce_max(tf.concat([n, [0]], 0))
    zeros = tf.zeros([batch, size], tf.int32)
    slots = [projected[:, :, k] for k in range(SLOTS)]
    kinds = [(tf.int32, [None, SLOTS]), (tf.int32, [None])] + (
        [(tf.bool, [None, 3]), (tf.int32, [None]), (tf.int32, [None])] if oracle else [])

    def body(t, stack, height, b0, on_stack, heads, records):
        active = t < 2 * n
        s = [tf.where(height >= depth, _take(stack, height - depth), -1)
             for depth in range(STACK_FEATURES, 0, -1)]
        features = tf.stack([*s, b0], 1)
        hidden = hidden_b
        for k in range(SLOTS):
            rows = _take(slots[k], features[:, k])
            hidden = hidden + (tf.where((features[:, k] >= 0)[:, None], rows, pads[k])
                               if k < STACK_FEATURES else rows)
        logits = tf.matmul(tf.tanh(hidden), scores_w) + scores_b
        allowed = legal(height, b0)
        taken = tf.argmax(tf.where(allowed, logits, -np.inf), 1, output_type=tf.int32)
        s0, s1 = s[-1], s[-2]
        out = [features, taken]
        if oracle:
            cost = _costs(on_stack, height, b0, s0, s1, n, gold)
            correct = cost == tf.reduce_min(cost, 1, keepdims=True)
            follow = tf.gather(correct, taken, batch_dims=1) | (coins[:, t] < explore)
            best = tf.argmax(tf.where(correct, logits, -np.inf), 1, output_type=tf.int32)
            taken = tf.where(follow, taken, best)
            head = _take(gold, s0)
            arc = tf.where((height > 0) & correct[:, LEFT] & (head == b0), LEFT,
                           tf.where(correct[:, RIGHT] & (height >= 2) & (head == s1),
                                    RIGHT, SHIFT))
            out = [features, taken, correct, arc,
                   tf.where(arc != SHIFT, _take(labels, s0), -1)]
        shift = active & (taken == SHIFT)
        arc_made = active & (taken != SHIFT)
        at_top = tf.one_hot(height, size, on_value=True, off_value=False, dtype=tf.bool)
        stack = tf.where(at_top & shift[:, None], b0[:, None], stack)
        on_b0 = tf.one_hot(b0, size, on_value=True, off_value=False, dtype=tf.bool)
        on_s0 = tf.one_hot(tf.maximum(s0, 0), size, on_value=True, off_value=False,
                           dtype=tf.bool)
        on_stack = (on_stack | (on_b0 & shift[:, None])) & ~(on_s0 & arc_made[:, None])
        head = tf.where(taken == LEFT, b0, s1)
        heads = tf.where(on_s0 & arc_made[:, None], head[:, None], heads)
        b0 = tf.where(shift, tf.where(b0 < n, b0 + 1, 0), b0)
        height = height + tf.where(shift, 1, 0) - tf.where(arc_made, 1, 0)
        records = [r.write(t, v) for r, v in zip(records, out)]
        return t + 1, stack, height, b0, on_stack, heads, records

    records = [tf.TensorArray(dtype, size=2 * (size - 1), element_shape=tf.TensorShape(shape))
               for dtype, shape in kinds]
    start = (tf.constant(0), zeros, tf.zeros([batch], tf.int32),
             tf.where(n > 0, 1, 0), tf.zeros([batch, size], tf.bool), zeros, records)
    _, _, _, _, _, heads, records = tf.while_loop(lambda t, *_: t < steps, body, start)
    out = [tf.transpose(r.stack(), [1, 0] + list(range(2, len(shape) + 1)))
           for r, (_, shape) in zip(records, kinds)]
    return [out[0], out[1], heads, *out[2:]]


# compiled (XLA) once per batch and bucket size: a graph-mode loop's small ops a step
# cost more to launch than to compute
_exploring_loop = tf.function(_walk, jit_compile=True, autograph=False)
_greedy_loop = tf.function(_walk, jit_compile=True, autograph=False)

BUCKET = 8
"""Sentence lengths round up to a multiple of this inside the walk (a compiled loop per
size)."""


def _built(layer, inputs: int):
    """The Keras layer of a `td.FC`, built for `inputs` features if no block has yet."""
    dense = layer.keras_layer
    if not dense.built:
        dense.build((None, inputs))
    return dense


def _pick(values, t):
    """Step `t` of each row of `values` (`[B, T]` each): the per-step metrics."""
    return tuple(tf.gather(v, t[:, None], batch_dims=1)[:, 0] for v in values)


def _step_metrics() -> td.Block:
    """`((losses, hits), t) -> nothing`: step t's loss and accuracy as metrics."""
    pick = td.Function(_pick, handles_empty=True)
    return pick >> td.AllOf(td.GetItem(0) >> td.Metric("loss"),
                            td.GetItem(1) >> td.Metric("accuracy")) >> td.Void()


def _word_metrics() -> td.Block:
    """`((label loss, label accuracy), word) -> nothing`: the sentence's label metrics,
    once per word."""
    return td.GetItem(0) >> td.AllOf(td.GetItem(0) >> td.Metric("label_loss"),
                                     td.GetItem(1) >> td.Metric("label_accuracy")) >> td.Void()


class DeviceExploration:
    """Exploration training (`exploration.Exploration`'s rule and losses) with the walk
    on the device: one engine call per batch.

    Attributes:
        block: `{"tokens", "heads", "seed"[, "labels"]} -> logits [2 max_words, 3]`
            (the steps taken, zeros past 2n), with a `"loss"` and an `"accuracy"` at
            each of the 2n transitions, and with labels `"label_loss"` and
            `"label_accuracy"` (see the module's docstring).
        heads_block: `-> (logits, heads [max_words])`, the heads the walk reached.
        explore: the probability of following a wrong prediction (a variable the
            walk reads: setting it needs no new trace); `schedule` sets it per epoch.

    Args:
        parser: the layers to train.
        explore: the starting `explore`.
        max_words: the longest sentence accepted (each is padded to it); the
            parser's `max_words` by default.
    """

    def __init__(self, parser: ParserModel, explore: float = 0.9, max_words: int | None = None):
        max_words = parser.max_words if max_words is None else max_words
        self.parser, self.max_words = parser, max_words
        self.layer = Walk(parser, max_words, oracle=True, name="exploring_walk")
        self.explore = explore
        self.block = self._block(heads=False)
        self.heads_block = self._block(heads=True)

    @property
    def explore(self) -> float:
        return float(keras.ops.convert_to_numpy(self.layer.explore))

    @explore.setter
    def explore(self, value: float) -> None:
        self.layer.explore.assign(float(value))

    def schedule(self, static_epochs: int = 2, explore: float = 0.9) -> keras.callbacks.Callback:
        """A Keras callback for `fit`: no exploration for the first `static_epochs`
        epochs, then `explore` (as `Exploration.schedule`)."""
        owner = self

        class Schedule(keras.callbacks.Callback):
            def on_epoch_begin(self, epoch, logs=None):
                owner.explore = 0.0 if epoch < static_epochs else explore
        return Schedule()

    def _arrays(self, block: td.Block, x: dict) -> tuple:
        """`(n, gold heads, gold labels)` by position, checked (errors name `block`)."""
        heads = x["heads"]
        n = len(heads)
        if n > self.max_words:
            raise bad_input(block, f"a sentence of {n} words is longer than "
                                   f"max_words={self.max_words}")
        if n != len(x["tokens"]) - 1:
            raise bad_input(block, f"{n} heads for {len(x['tokens']) - 1} words")
        try:
            check_tree(heads)
        except ValueError as e:
            raise bad_input(block, f"the gold heads are not a tree: {e}") from None
        labels = x.get("labels") if self.parser.label_layers else None
        if labels is not None and len(labels) != n:
            raise bad_input(block, f"{len(labels)} labels for {n} words (one relation "
                                   "label per word)")
        gold = np.zeros(self.max_words + 1, np.int32)
        gold[1:n + 1] = heads
        ids = np.zeros(self.max_words + 1, np.int32)
        if labels is not None:
            ids[1:n + 1] = labels
        return n, gold, ids

    def _block(self, heads: bool) -> td.Block:
        w = self.max_words
        comp = td.Composition(name="exploring_parser")
        with comp.scope():
            # checked first: a bad sentence is named before anything reads it
            checked = td.InputTransform(lambda x: (x, self._arrays(comp, x))).reads(comp.input)
            gold = (td.GetItem(1) >> td.Record((td.Scalar("int32"), td.Vector(w + 1, "int32"),
                                                 td.Vector(w + 1, "int32")))).reads(checked)
            encodings = (td.GetItem(0) >> self.parser.make_encoder() >> td.Stack(w + 1)).reads(
                checked)
            walk = td.Function(self.layer, random=True, infer_output_type=False, handles_empty=True)
            walk.set_output_type(td.TupleType(
                td.TensorType((2 * w, 3)), td.TensorType((2 * w,), "int32"),
                td.TensorType((2 * w,)), td.TensorType((2 * w,)),
                td.TensorType((w,), "int32"), td.TensorType(()), td.TensorType(())))
            walked = walk.reads(encodings, gold[0], gold[1], gold[2])
            per_step = td.AllOf(
                td.GetItem(0) >> td.Broadcast(),
                td.GetItem(1) >> td.InputTransform(lambda x: range(2 * len(x["heads"])))
                >> td.Map(td.Scalar("int32"))) >> td.Zip() >> td.Map(_step_metrics())
            losses = td.AllOf(td.GetItem(2), td.GetItem(3))
            td.Void().reads(per_step.reads(losses.reads(walked), comp.input))
            if self.parser.label_layers:
                per_word = td.AllOf(td.GetItem(0) >> td.Broadcast(), td.GetItem(1)
                                    >> td.GetItem("heads")) >> td.Zip() \
                    >> td.Map(_word_metrics())
                label = td.AllOf(td.GetItem(5), td.GetItem(6))
                td.Void().reads(per_word.reads(label.reads(walked), comp.input))
            if heads:
                comp.output.reads(walked[0], walked[4])
            else:
                comp.output.reads(walked[0])
        return comp


class DeviceParser:
    """Greedy parsing (`greedy.parse`'s rule: the best legal transition; each arc
    labelled with its direction's best label) with the walk on the device: encoding
    and parsing a batch are one engine call.

    Attributes:
        block: `tokens -> (heads [max_words], label ids [max_words])` (label -1 for
            an unlabelled parser; zeros past the sentence).

    Args:
        parser: the layers.
        max_words: the longest sentence accepted (each is padded to it); the
            parser's `max_words` by default.
    """

    def __init__(self, parser: ParserModel, max_words: int | None = None):
        max_words = parser.max_words if max_words is None else max_words
        self.parser, self.max_words = parser, max_words
        self.layer = Walk(parser, max_words, oracle=False, name="parsing_walk")
        self.block = self._block()
        self._compiler = None

    def _length(self, block: td.Block, tokens: Sequence) -> int:
        n = len(tokens) - 1
        if n > self.max_words:
            raise bad_input(block, f"a sentence of {n} words is longer than "
                                   f"max_words={self.max_words}")
        return n

    def _block(self) -> td.Block:
        w = self.max_words
        comp = td.Composition(name="parsing")
        with comp.scope():
            checked = td.InputTransform(lambda x: (x, self._length(comp, x))).reads(comp.input)
            n = (td.GetItem(1) >> td.Scalar("int32")).reads(checked)
            encodings = (td.GetItem(0) >> self.parser.make_encoder(keyed=False)
                         >> td.Stack(w + 1)).reads(checked)
            walk = td.Function(self.layer, infer_output_type=False, handles_empty=True)
            walk.set_output_type(td.TupleType(td.TensorType((w,), "int32"),
                                              td.TensorType((w,), "int32")))
            comp.output.reads(walk.reads(encodings, n))
        return comp

    def parse(self, tokens: Sequence[list]) -> list[tuple[list[int], list[int] | None]]:
        """`(heads, label ids)` of each sentence given as its `Vocabulary.tokens`, in
        one engine call (label ids None for an unlabelled parser)."""
        if self._compiler is None:
            from refold.compiler import Compiler
            self._compiler = Compiler.create(self.block, scheduler=self.parser.scheduler)
        out = []
        for t, (heads, labels) in zip(tokens, self._compiler.run(list(tokens))):
            n = len(t) - 1
            out.append((heads[:n].tolist(), labels[:n].tolist() if self.layer.labelled
                        else None))
        return out
