"""The parser's model: a BiLSTM over the words, and an MLP scoring each configuration
from the BiLSTM's encodings of s2, s1, s0 and b0 (Kiperwasser and Goldberg 2016).

Training input, one per sentence (`training_input`)::

    {"tokens": [(word id, tag id), ...],     # the root token first, then the words
     "configs": [(s2, s1, s0, b0, gold transition), ...]}   # from the static oracle

Position i of "tokens" is word i of the sentence (0 the root), so a configuration's
positions index the BiLSTM's output directly. The model (`ParserModel.training_block`)
encodes the tokens once, pairs every configuration with the encodings (`td.Zip` of
`td.Broadcast(encodings)` and the configurations), and picks the encodings at its
positions with `td.Nth` on `(encodings, position)`: while an input is expanded the
sequence is a list of value handles, so picking one is free and a sentence costs one
BiLSTM and one MLP per transition, linear in its length. An empty stack slot reads a
learned pad vector instead (one per slot). The MLP's logits over the three
transitions get a cross-entropy loss at every transition (`td.Metric`s, so `fit`
needs no labels).

Relation labels (`labelled_input`: each arc configuration also carries the id of the
gold arc's label) come from a second classifier on the same MLP hidden layer, one
linear layer per arc direction (`left_labels`, `right_labels`): the label is chosen
after the transition, given it, with a `"label_loss"` at arc transitions only. This
factored form keeps the three-way transition system and its oracles exactly as in the
unlabelled parser (a joint softmax over 2L + 1 labelled transitions would make every
oracle speak labels), and a label never competes with SHIFT for probability. An input
without labels (`training_input`) trains the transitions alone.

Parsing (`ParserModel.parse`) is greedy, on the device: one engine call per batch
encodes the sentences and runs every transition of every sentence in one loop of
tensor ops (`examples.parser.ondevice.DeviceParser`; each sentence padded to
`max_words`). A batch holding a longer sentence is parsed on arrays instead: one
engine call encodes it and its rounds run in NumPy, one transition per unfinished
sentence per round (`examples.parser.greedy`). A sentence of n words is done after
2n transitions. `parse_labelled` also labels each arc with its direction's best
label; `ParserModel.score` scores given configurations with the layers themselves.

>>> import numpy as np
>>> from refold.examples.parser.treebank import Sentence
>>> s = Sentence(["the", "dog", "sleeps"], ["DET", "NOUN", "VERB"], [2, 3, 0])
>>> vocab = Vocabulary.from_sentences([s])
>>> item = training_input(s, vocab)
>>> item["tokens"], item["configs"][:2]
([(0, 0), (2, 2), (3, 3), (4, 4)], [(None, None, None, 1, 0), (None, None, 1, 2, 1)])
>>> model = ParserModel(vocab, embed=4, tag_embed=2, hidden=3, mlp=5)
>>> logits, metrics = model.training_block.eval(item)
>>> len(logits), logits[0].shape, metrics["loss"].shape     # one per transition
(6, (3,), (6,))
>>> [len(heads) for heads in model.parse([s])]
[3]
>>> labelled = labelled_input(s, vocab)           # arcs carry their label's id
>>> vocab.labels, labelled["configs"][:2]
({'_': 0}, [(None, None, None, 1, 0, None), (None, None, 1, 2, 1, 0)])
>>> _, metrics = model.training_block.eval(labelled)
>>> metrics["label_loss"].shape                   # one per arc
(3,)
>>> [(len(h), len(r)) for h, r in model.parse_labelled([s])]
[(3, 3)]
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import keras
import numpy as np

import refold as td
from refold.examples.parser import greedy
from refold.examples.parser.transitions import (
    LEFT,
    RIGHT,
    SHIFT,
    STACK_FEATURES,
    TRANSITIONS,
    labelled_oracle,
    oracle,
)
from refold.examples.parser.treebank import Sentence
from refold.models import encoders, heads, rnn_cells

__all__ = ["Vocabulary", "training_input", "labelled_input", "ParserModel", "ROOT",
           "UNKNOWN"]

ROOT, UNKNOWN = "<root>", "<unk>"


@dataclass
class Vocabulary:
    """Word and tag ids: 0 is the root token's, 1 an unknown word's or tag's; and
    relation label ids from 0 (none: an unlabelled parser)."""

    words: dict[str, int]
    tags: dict[str, int]
    labels: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_sentences(cls, sentences: Iterable[Sentence], min_count: int = 1) -> Vocabulary:
        """Every word seen at least `min_count` times, every tag and every relation
        label, in order of first appearance."""
        sentences = list(sentences)
        counts = Counter(w for s in sentences for w in s.words)
        words = {ROOT: 0, UNKNOWN: 1}
        tags = {ROOT: 0, UNKNOWN: 1}
        labels: dict[str, int] = {}
        for s in sentences:
            for w, t, r in zip(s.words, s.tags, s.relations):
                if counts[w] >= min_count:
                    words.setdefault(w, len(words))
                tags.setdefault(t, len(tags))
                labels.setdefault(r, len(labels))
        return cls(words, tags, labels)

    def tokens(self, sentence: Sentence) -> list[tuple[int, int]]:
        """`(word id, tag id)` of the root token and each word (unknown ones get 1)."""
        return [(0, 0)] + [(self.words.get(w, 1), self.tags.get(t, 1))
                           for w, t in zip(sentence.words, sentence.tags)]

    def label_ids(self, sentence: Sentence) -> list[int]:
        """The relation label id of each word; a label the vocabulary does not have is
        a `ValueError` naming the sentence (a label has no unknown id to fall back on:
        training on it would teach a wrong one)."""
        unknown = sorted(set(sentence.relations) - set(self.labels))
        if unknown:
            known = ", ".join(list(self.labels)[:12]) + (", ..." if len(self.labels) > 12
                                                         else "")
            raise ValueError(f"sentence {' '.join(sentence.words)!r:.80}: relation labels "
                             f"{unknown} are not among the vocabulary's {len(self.labels)} "
                             f"labels ({known})")
        return [self.labels[r] for r in sentence.relations]


def training_input(sentence: Sentence, vocab: Vocabulary) -> dict:
    """The model's input for a sentence: its tokens and its oracle's configurations.
    A non-projective tree raises `transitions.NonProjectiveError`."""
    return {"tokens": vocab.tokens(sentence),
            "configs": [(*features, t) for features, t in oracle(sentence.heads)]}


def labelled_input(sentence: Sentence, vocab: Vocabulary) -> dict:
    """`training_input` whose configurations also carry the gold arc's label id
    (None for a shift): `(s2, s1, s0, b0, transition, label)`. A label the vocabulary
    does not have is a `ValueError` (`Vocabulary.label_ids`)."""
    vocab.label_ids(sentence)
    steps = labelled_oracle(sentence.heads, sentence.relations)
    return {"tokens": vocab.tokens(sentence),
            "configs": [(*features, t, None if label is None else vocab.labels[label])
                        for features, t, label in steps]}


class ParserModel:
    """The parser's layers and the blocks that use them.

    Attributes:
        encoder: `{"tokens"} -> [encoding of each position]` (the BiLSTM).
        training_block: `{"tokens", "configs"} -> [logits of each configuration]`,
            with a cross-entropy `"loss"` and a 0/1 `"accuracy"` at every transition,
            and `"label_loss"` and `"label_accuracy"` at every arc whose
            configuration carries a label (`labelled_input`; if the vocabulary has
            labels).
        scoring_block: the same without the metrics (the gold transitions are not
            read), e.g. for `Model.predict`.

    Args:
        vocab: the word and tag ids.
        embed: the word embedding size.
        tag_embed: the tag embedding size; 0 for words alone.
        hidden: LSTM units in each direction.
        mlp: the MLP's hidden units (tanh).
        scheduler: the batching scheduler of the compilers `parse` uses.
        max_words: the longest sentence parsed on the device (each is padded to it;
            a batch with a longer one is parsed on arrays); also the default of the
            walks on the device (`examples.parser.ondevice`).
    """

    def __init__(self, vocab: Vocabulary, embed: int = 32, tag_embed: int = 16,
                 hidden: int = 32, mlp: int = 64, scheduler: str = "agenda",
                 max_words: int = 100):
        self.vocab = vocab
        self.scheduler = scheduler
        self.max_words = max_words
        self._device_parser = None
        self.width = 2 * hidden
        self.word_embedding = td.Embedding(len(vocab.words), embed, name="words")
        self.tag_embedding = (td.Embedding(len(vocab.tags), tag_embed, name="tags")
                              if tag_embed else None)
        self.cells = (rnn_cells.LSTMCell(hidden, name="forward"),
                      rnn_cells.LSTMCell(hidden, name="backward"))
        self.pads = [keras.Variable(np.zeros(self.width, "float32"), name=f"pad_{slot}")
                     for slot in ("s2", "s1", "s0")[-STACK_FEATURES:]]
        self.hidden_layer = td.FC(mlp, activation="tanh", name="mlp")
        self.logits_layer = td.FC(len(TRANSITIONS), activation=None, name="transition_logits")
        self.label_names = list(vocab.labels)
        self.label_layers = {
            d: td.FC(len(vocab.labels), activation=None, name=f"{name}_labels")
            for d, name in ((LEFT, "left"), (RIGHT, "right"))} if vocab.labels else {}
        self.encoder = self.make_encoder()
        self.training_block = self._configurations_block(loss=True)
        self.scoring_block = self._configurations_block(loss=False)
        self._encoder_compiler = None
        self._mlp_function = None
        self._labels_function = None

    def _mlp(self, features: td.Block) -> td.Block:
        return td.Pipe(features, td.Concat(), self.hidden_layer)

    def make_encoder(self, keyed: bool = True) -> td.Block:
        """A new encoder block (a parser's encoder, its layers shared):
        `{"tokens"} -> encodings` (`keyed`) or `tokens -> encodings`."""
        word = td.Scalar("int32") >> self.word_embedding
        if self.tag_embedding is not None:
            tag = td.Scalar("int32") >> self.tag_embedding
            token = td.Record((word, tag)) >> td.Concat()
        else:
            token = td.GetItem(0) >> word
        encode = td.Map(token) >> encoders.bidirectional(*self.cells)
        return td.GetItem("tokens") >> encode if keyed else encode

    def _configurations_block(self, loss: bool) -> td.Block:
        # the configurations stay Python objects: Zip pairs each with the encodings
        configs = td.GetItem("configs")
        if loss and self.label_layers:
            # an arc with a label also trains its direction's label classifier
            score = td.OneOf(_labelled_direction,
                             {SHIFT: self._score(loss), LEFT: self._score(loss, LEFT),
                              RIGHT: self._score(loss, RIGHT)})
        else:
            score = self._score(loss)
        comp = td.Composition(name="parser")
        with comp.scope():
            encodings = self.make_encoder().reads(comp.input)
            scores = (td.Zip() >> td.Map(score)).reads(
                td.Broadcast().reads(encodings), configs.reads(comp.input))
            comp.output.reads(scores)
        return comp

    def _score(self, loss: bool, direction: int | None = None) -> td.Block:
        """`(encodings, configuration) -> transition logits`, with the metrics if
        `loss`, and the label metrics of an arc in `direction` if one is given."""
        # On (encodings, configuration): the encoding at each of its positions.
        def at(slot: int) -> td.Block:
            position = td.GetItem(1) >> td.GetItem(slot)
            pick = td.AllOf(td.GetItem(0), position) >> td.Nth()
            if slot == STACK_FEATURES:  # b0: the buffer always holds at least the root
                return pick
            pad = td.Void() >> td.FromTensor(self.pads[slot])
            return td.OneOf(lambda x, slot=slot: x[1][slot] is None,
                            {False: pick, True: pad})

        features = td.AllOf(*(at(k) for k in range(STACK_FEATURES + 1)))
        name = "transition" if direction is None else TRANSITIONS[direction]
        score = td.Composition(name=name)
        with score.scope():
            hidden = self._mlp(features).reads(score.input)
            logits = td.convert_to_block(self.logits_layer).reads(hidden)
            if loss:
                gold = td.GetItem(1) >> td.GetItem(STACK_FEATURES + 1) >> td.Scalar("int32")
                target = gold.reads(score.input)
                heads.classification_metrics().reads(logits, target)
            if direction is not None:
                label = td.GetItem(1) >> td.GetItem(STACK_FEATURES + 2)
                label_logits = td.convert_to_block(self.label_layers[direction]).reads(hidden)
                heads.classification_metrics("label_loss", "label_accuracy").reads(
                    label_logits, (label >> td.Scalar("int32")).reads(score.input))
            score.output.reads(logits)
        return score

    def score(self, encodings: Sequence[np.ndarray], configurations: Sequence[tuple]
              ) -> np.ndarray:
        """`[len(configurations), 3]` logits, in one call of the MLP's layers.

        Args:
            encodings: for each configuration, its sentence's `[n + 1, 2 * hidden]`
                encodings (the encoder's output, stacked).
            configurations: each one's `Configuration.features()` positions.
        """
        rows = self._features(encodings, configurations)
        if self._mlp_function is None:  # traced once: an eager Keras call costs ~ms
            self._mlp_function = _traced(lambda x: self.logits_layer(self.hidden_layer(x)),
                                         rows.shape[1])
        return self._mlp_function(rows).numpy()

    def score_labels(self, encodings: Sequence[np.ndarray], configurations: Sequence[tuple]
                     ) -> tuple[np.ndarray, dict[int, np.ndarray]]:
        """`score`'s logits and, for `LEFT` and `RIGHT`, the `[len(configurations),
        labels]` logits of the label an arc in that direction would take (one call of
        the layers; a vocabulary without labels gives an empty dict)."""
        if not self.label_layers:
            return self.score(encodings, configurations), {}
        rows = self._features(encodings, configurations)
        if self._labels_function is None:
            def layers(x):
                hidden = self.hidden_layer(x)
                return (self.logits_layer(hidden), self.label_layers[LEFT](hidden),
                        self.label_layers[RIGHT](hidden))
            self._labels_function = _traced(layers, rows.shape[1])
        logits, left, right = (t.numpy() for t in self._labels_function(rows))
        return logits, {LEFT: left, RIGHT: right}

    def _features(self, encodings, configurations) -> np.ndarray:
        pads = np.stack([keras.ops.convert_to_numpy(p) for p in self.pads])
        w = self.width
        rows = np.empty((len(configurations), (STACK_FEATURES + 1) * w), "float32")
        for j, (enc, positions) in enumerate(zip(encodings, configurations)):
            for k, p in enumerate(positions):
                rows[j, k * w:(k + 1) * w] = pads[k] if p is None else enc[p]
        return rows

    def parse(self, sentences: Sequence[Sentence], batch_size: int = 256) -> list[list[int]]:
        """The heads the model gives each sentence (greedy, legal transitions only)."""
        return self.parse_tokens([self.vocab.tokens(s) for s in sentences], batch_size)

    def parse_labelled(self, sentences: Sequence[Sentence], batch_size: int = 256
                       ) -> list[tuple[list[int], list[str | None]]]:
        """`(heads, relations)` of each sentence: `parse`'s heads, each arc labelled
        with the best label for its direction (None if the vocabulary has no labels)."""
        tokens = [self.vocab.tokens(s) for s in sentences]
        return self._parses(tokens, batch_size, labels=True)

    def parse_tokens(self, tokens: Sequence[list], batch_size: int = 256) -> list[list[int]]:
        """`parse` of sentences given as their `Vocabulary.tokens`, `batch_size` sentences
        at a time."""
        return [heads for heads, _ in self._parses(tokens, batch_size, labels=False)]

    def _parses(self, tokens: Sequence[list], batch_size: int, labels: bool
                ) -> list[tuple[list[int], list[str | None]]]:
        """`(heads, relations)` of each sentence, `batch_size` sentences at a time: one
        engine call a batch on the device (`ondevice.DeviceParser`), or, for a batch
        with a sentence longer than `max_words`, one engine call to encode it and its
        rounds on arrays (`greedy.parse`)."""
        out: list = []
        for start in range(0, len(tokens), batch_size):
            batch = tokens[start:start + batch_size]
            if max((len(t) - 1 for t in batch), default=0) <= self.max_words:
                parses = self.device_parser().parse(batch)
                if not labels:
                    parses = [(found, None) for found, _ in parses]
            else:
                parses = greedy.parse(self.layers(labels), self.encode(batch))
            for found, ids in parses:
                out.append((found, [None] * len(found) if ids is None
                            else [self.label_names[i] for i in ids]))
        return out

    def device_parser(self):
        """The greedy parser on the device on these layers (`ondevice.DeviceParser`,
        made at the first call)."""
        if self._device_parser is None:
            from refold.examples.parser.ondevice import DeviceParser
            self._device_parser = DeviceParser(self, self.max_words)
        return self._device_parser

    def layers(self, labels: bool = True) -> greedy.Layers:
        """The scoring layers' weights now, as arrays (`greedy.Layers`); with `labels`,
        the label layers too (if the vocabulary has labels)."""
        def dense(layer, inputs: int):
            d = layer.keras_layer
            if not d.built:  # a layer no block has typed yet (a parser never trained)
                d.build((None, inputs))
            return keras.ops.convert_to_numpy(d.kernel), keras.ops.convert_to_numpy(d.bias)
        mlp = self.hidden_layer.output_size
        hidden_w, hidden_b = dense(self.hidden_layer, (STACK_FEATURES + 1) * self.width)
        logits_w, logits_b = dense(self.logits_layer, mlp)
        pads = np.stack([keras.ops.convert_to_numpy(p) for p in self.pads])
        label_layers = {d: dense(layer, mlp) for d, layer in self.label_layers.items()} \
            if labels and self.label_layers else None
        return greedy.Layers(hidden_w, hidden_b, logits_w, logits_b, pads, label_layers)

    def encode(self, tokens: Sequence[list]) -> list[np.ndarray]:
        """Each sentence's `[n + 1, 2 * hidden]` encodings, in one engine call. The
        expanded graph of a token list is kept (the compiler's cache: the same list
        object with the same content), as `Model.predict` keeps its inputs': parsing
        the same sentences again (a test set after every epoch) skips expanding them."""
        if self._encoder_compiler is None:
            from refold.compiler import Compiler
            self._encoder_compiler = Compiler.create(self.make_encoder(keyed=False),
                                                     scheduler=self.scheduler)
        encoded = self._encoder_compiler.run(list(tokens))
        return [np.stack(e) for e in encoded]


def _labelled_direction(x) -> int:
    """On `(encodings, configuration)`: the arc's direction if the configuration
    carries a label, else `SHIFT` (no label to learn)."""
    config = x[1]
    if len(config) > STACK_FEATURES + 2 and config[STACK_FEATURES + 2] is not None:
        return config[STACK_FEATURES + 1]
    return SHIFT


def _traced(layers, width: int):
    """`layers` as a `tf.function` of a `[None, width]` float32 batch."""
    import tensorflow as tf
    return tf.function(layers, input_signature=[tf.TensorSpec([None, width], tf.float32)])
