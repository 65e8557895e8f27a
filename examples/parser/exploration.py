"""Training the parser with exploration: it follows its own predictions, mistakes
included, and learns from the dynamic oracle (Goldberg and Nivre 2012, 2013).

Static training (`ParserModel.training_block`) only ever sees gold configurations,
so at test time the parser has never learnt what to do after its first mistake.
Here each sentence is parsed by the model being trained, written once per sentence
as a `td.Unfold`:

* the *step* scores the current configuration (the same BiLSTM encodings, pads and
  MLP as `ParserModel`) and emits a loss: the cross-entropy of the best-scoring
  *correct* transition (legal and of least cost, `dynamic_oracle.costs`; zero cost
  while the gold tree is still reachable), against all three;
* *decide* (Python) takes the predicted transition if it is correct; if it is not,
  it takes it anyway with probability `explore` (the parser walks into its mistake
  and learns to recover), else the best-scoring correct one.

Batched, all sentences of a batch advance together, one engine call per round for
the whole batch (`compiler.rounds.context`), and the gradient flows through every step
taken. With `explore = 0` the walk never leaves the gold path; `Exploration.schedule`
keeps it there for the first epochs, when the model's predictions are still noise.
Each decision's coin is a hash of (epoch, sentence seed, step), so a run is
reproducible and the batched run decides as the reference evaluator does.

Input, one per sentence (`exploration_input`)::

    {"tokens": [(word id, tag id), ...], "heads": [gold head of each word], "seed": k}

>>> from refold.examples.parser.model import ParserModel, Vocabulary
>>> from refold.examples.parser.treebank import Sentence
>>> s = Sentence(["the", "dog", "sleeps"], ["DET", "NOUN", "VERB"], [2, 3, 0])
>>> parser = ParserModel(Vocabulary.from_sentences([s]), embed=4, tag_embed=2,
...                      hidden=3, mlp=5)
>>> exploring = Exploration(parser, explore=1.0)
>>> logits, metrics = exploring.block.eval(exploration_input(s, parser.vocab))
>>> len(logits), metrics["loss"].shape            # 2n transitions, whatever is taken
(6, (6,))
"""

from __future__ import annotations

import copy
import random
from collections.abc import Sequence

import keras
import numpy as np
import tensorflow as tf

import refold as td
from refold.blocks.block import bad_input
from refold.examples.parser.dynamic_oracle import best_transitions, costs
from refold.examples.parser.model import ParserModel, Vocabulary
from refold.examples.parser.transitions import LEFT, RIGHT, SHIFT, STACK_FEATURES, Configuration
from refold.examples.parser.treebank import Sentence, check_tree
from refold.models.heads import classification_metrics

__all__ = ["Walk", "Exploration", "exploration_input"]


def exploration_input(sentence: Sentence, vocab: Vocabulary, seed: int = 0) -> dict:
    """The exploration block's input for a sentence (any tree, projective or not);
    `seed` tells its coin flips apart from other sentences'. With a labelled
    vocabulary it also carries each word's gold relation label id (`"labels"`); a
    label the vocabulary does not have is a `ValueError` (`Vocabulary.label_ids`)."""
    x = {"tokens": vocab.tokens(sentence), "heads": list(sentence.heads), "seed": seed}
    if vocab.labels:
        x["labels"] = vocab.label_ids(sentence)
    return x


class Walk:
    """A configuration on a parser's own path, with the gold tree it is judged by.

    Immutable as far as the block language sees (`after` makes a new one), and it
    caches its features and costs, which the step reads several times.
    """

    __slots__ = ("config", "gold", "seed", "steps", "labels", "_features", "_costs")

    def __init__(self, config: Configuration, gold: Sequence[int], seed: int, steps: int,
                 labels: tuple | None = None):
        self.config, self.gold, self.seed, self.steps = config, gold, seed, steps
        self.labels = labels
        self._features = self._costs = None

    @classmethod
    def start(cls, gold: Sequence[int], seed: int, labels: Sequence[int] | None = None
              ) -> Walk:
        return cls(Configuration(len(gold)), tuple(gold), seed, 0,
                   None if labels is None else tuple(labels))

    @property
    def features(self) -> tuple:
        if self._features is None:
            self._features = self.config.features()
        return self._features

    @property
    def costs(self) -> tuple:
        """The cost of each transition (None where illegal)."""
        if self._costs is None:
            self._costs = costs(self.config, self.gold)
        return self._costs

    def correct(self) -> list[float]:
        """1.0 for each transition that is legal and of least cost, else 0.0."""
        return [float(b) for b in best_transitions(self.costs)]

    def after(self, transition: int) -> Walk:
        config = copy.copy(self.config)
        for k, v in vars(config).items():  # its lists (stack, buffer, heads) are its own
            if isinstance(v, list):
                setattr(config, k, list(v))
        config.apply(transition)
        return Walk(config, self.gold, self.seed, self.steps + 1, self.labels)

    def gold_arc(self) -> tuple[int, int]:
        """`(direction, gold label id)` where an arc transition is correct here (of
        least cost) and gives the stack's top its gold head, else `(SHIFT, -1)`: where
        that direction's label classifier has something to learn. On the gold path
        these are exactly the static oracle's arcs."""
        c = self.config
        if self.labels is None or not c.stack:
            return SHIFT, -1
        s0, best = c.stack[-1], best_transitions(self.costs)
        head = self.gold[s0 - 1]
        if best[LEFT] and head == c.buffer[0]:
            return LEFT, self.labels[s0 - 1]
        if best[RIGHT] and len(c.stack) >= 2 and head == c.stack[-2]:
            return RIGHT, self.labels[s0 - 1]
        return SHIFT, -1

    def __repr__(self):
        c = self.config
        return f"Walk(stack={c.stack}, buffer={c.buffer}, step {self.steps})"


def _loss(logits, correct):
    """Cross-entropy of the best-scoring correct transition, per row."""
    best = tf.reduce_max(tf.where(correct > 0, logits, tf.fill(tf.shape(logits), -1e9)), 1)
    return tf.reduce_logsumexp(logits, 1) - best


def _hit(logits, correct):
    """1.0 where the model's best transition (legal or not) is a correct one."""
    return tf.gather(correct, tf.argmax(logits, 1, output_type=tf.int32), batch_dims=1)


class Exploration:
    """The exploration-trained parser's block, on a `ParserModel`'s layers (so that
    `ParserModel.parse` parses with what this trains).

    Attributes:
        block: `{"tokens", "heads", "seed"} -> [logits of each transition taken]`,
            with a `"loss"` and an `"accuracy"` (the prediction is correct) at every
            transition; `fit` needs no labels.
        heads_block: the same walk, outputting `(logits, the heads it reached)`.
        explore: the probability of following a wrong prediction (0 stays on the
            gold path); `schedule` sets it per epoch.
        epoch: part of every coin flip's seed; `schedule` sets it.

    Args:
        parser: the layers (encoder, pads, MLP) to train.
        explore: the starting `explore`.
        max_words: the longest sentence accepted (a parse of n words takes 2n steps).
    """

    def __init__(self, parser: ParserModel, explore: float = 0.9, max_words: int = 400):
        self.parser = parser
        self.explore = explore
        self.epoch = 0
        self.max_words = max_words
        self.block = self._block(heads=False)
        self.heads_block = self._block(heads=True)

    def schedule(self, static_epochs: int = 2, explore: float = 0.9) -> keras.callbacks.Callback:
        """A Keras callback for `fit`: no exploration for the first `static_epochs`
        epochs, then `explore`; each epoch flips other coins."""
        owner = self

        class Schedule(keras.callbacks.Callback):
            def on_epoch_begin(self, epoch, logs=None):
                owner.epoch = epoch
                owner.explore = 0.0 if epoch < static_epochs else explore
        return Schedule()

    def decide(self, walk: Walk, logits: np.ndarray) -> Walk:
        """The next configuration: the prediction if it is correct, or with
        probability `explore` anyway; else the best-scoring correct transition."""
        cost = walk.costs
        legal = np.array([c is not None for c in cost])
        predicted = int(np.argmax(np.where(legal, logits, -np.inf)))
        correct = np.array(best_transitions(cost))
        if not correct[predicted] and not self._coin(walk) < self.explore:
            predicted = int(np.argmax(np.where(correct, logits, -np.inf)))
        return walk.after(predicted)

    def _coin(self, walk: Walk) -> float:
        return random.Random(hash((self.epoch, walk.seed, walk.steps))).random()

    def _start(self, x: dict) -> Walk:
        heads = x["heads"]
        if len(heads) > self.max_words:
            raise bad_input(self.block, f"a sentence of {len(heads)} words is longer than "
                                        f"max_words={self.max_words}")
        if len(heads) != len(x["tokens"]) - 1:
            raise bad_input(self.block, f"{len(heads)} heads for {len(x['tokens']) - 1} "
                                        "words")
        try:
            check_tree(heads)
        except ValueError as e:
            raise bad_input(self.block, f"the gold heads are not a tree: {e}") from None
        labels = x.get("labels") if self.parser.label_layers else None
        if labels is not None and len(labels) != len(heads):
            raise bad_input(self.block, f"{len(labels)} labels for {len(heads)} words "
                                        "(one relation label per word)")
        return Walk.start(heads, int(x.get("seed", 0)), labels)

    def _step(self) -> td.Block:
        """`(encodings, walk) -> (encodings, logits)`, with the loss and accuracy."""
        parser = self.parser

        def at(slot: int) -> td.Block:  # the encoding of s2, s1, s0 or b0 (or a pad)
            pick = td.Record((td.Identity(), td.InputTransform(
                lambda w, slot=slot: w.features[slot]))) >> td.Nth()
            if slot == STACK_FEATURES:  # b0: the buffer always holds at least the root
                return pick
            pad = td.Void() >> td.FromTensor(parser.pads[slot])
            return td.OneOf(lambda x, slot=slot: x[1].features[slot] is None,
                            {False: pick, True: pad})

        step = td.Composition(name="transition")
        with step.scope():
            features = td.AllOf(*(at(k) for k in range(STACK_FEATURES + 1))).reads(step.input)
            hidden = td.Pipe(td.Concat(), parser.hidden_layer).reads(features)
            logits = td.convert_to_block(parser.logits_layer).reads(hidden)
            if parser.label_layers:
                td.Void().reads(self._label_metrics().reads(hidden, step.input))
            correct = (td.GetItem(1) >> td.InputTransform(Walk.correct)
                       >> td.Vector(3)).reads(step.input)
            loss = td.Function(_loss, handles_empty=True) >> td.Metric("loss")
            hit = td.Function(_hit, handles_empty=True) >> td.Metric("accuracy")
            td.Void().reads(td.AllOf(loss, hit).reads(logits, correct))
            step.output.reads(td.GetItem(0).reads(step.input), logits)
        return step

    def _label_metrics(self) -> td.Block:
        """`(hidden, (encodings, walk)) -> nothing`: where an arc to s0 would be gold,
        the label loss and accuracy of that direction's classifier (`ParserModel`'s)."""
        def learn(direction: int) -> td.Block:
            logits = td.GetItem(0) >> self.parser.label_layers[direction]
            label = (td.GetItem(1) >> td.GetItem(1)
                     >> td.InputTransform(lambda w: w.gold_arc()[1]) >> td.Scalar("int32"))
            return td.AllOf(logits, label) >> classification_metrics(
                "label_loss", "label_accuracy")
        return td.OneOf(lambda x: x[1][1].gold_arc()[0],
                        {SHIFT: td.Void(), LEFT: learn(LEFT), RIGHT: learn(RIGHT)})

    def _block(self, heads: bool) -> td.Block:
        walk = td.Unfold(self._step(), decide=self.decide, max_steps=2 * self.max_words,
                         done=lambda w: w.config.is_terminal(), name="walk")
        # the parser's own encoder block (the same layers, a block of this tree)
        encoder = self.parser.make_encoder()
        comp = td.Composition(name="exploring_parser")
        with comp.scope():
            start = td.InputTransform(self._start).reads(comp.input)
            outputs = walk.reads(encoder.reads(comp.input), start)
            logits = td.GetItem(0).reads(outputs)
            if heads:
                reached = (td.GetItem(2) >> td.InputTransform(lambda w: w.config.heads))
                comp.output.reads(logits, reached.reads(outputs))
            else:
                comp.output.reads(logits)
        return comp
