"""A small synthetic language whose part-of-speech tags need context on both sides.

Sentences come from a little grammar (clauses joined by "and"; noun phrases with
determiners and adjectives; verbs with objects, modals, or a "that" clause). Three
kinds of words are ambiguous, and only their neighbours tell their tag:

* "run", "walk", "play", "watch", "fly", "cook": a NOUN after a determiner or an
  adjective ("the fast run"), a VERB after a subject or a modal ("she can run")
  - the left context decides;
* "light", "fast", "dark", "cold", "right", "clean": an ADJ before a noun or another
  adjective ("the light car"), a NOUN at the end of a noun phrase ("the light
  fades") - the right context decides;
* "that": a DET before a noun phrase ("that car"), an SCONJ before a clause ("says
  that she runs") - the right context decides.

A left-to-right LSTM cannot get the second and third kinds right (it must tag a word
before it has read the next one); a bidirectional one can.

>>> import numpy as np
>>> words, tags = random_sentence(np.random.default_rng(3))
>>> len(words) == len(tags) and set(tags) <= set(TAGS)
True
>>> encode(["she", "can", "run"], ["PRON", "AUX", "VERB"])
{'words': [33, 37, 41], 'tags': [3, 5, 2]}
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

import refold as td
from refold.models import encoders, heads, rnn_cells

__all__ = ["TAGS", "VOCABULARY", "AMBIGUOUS", "random_sentence", "dataset", "encode",
           "tagger_model"]

TAGS = ("DET", "NOUN", "VERB", "PRON", "ADJ", "AUX", "SCONJ", "CONJ")

_NOUNS = ["dog", "car", "idea", "house", "river", "song", "friend", "city", "book", "tree"]
_VERBS = ["sees", "likes", "takes", "finds", "eats", "hears", "builds", "sings"]
_SAYS = ["says", "thinks", "knows", "hopes"]
_DETS = ["the", "a", "every", "this"]
_ADJS = ["big", "old", "red", "small", "happy", "quiet"]
_PRONOUNS = ["she", "he", "they", "we"]
_MODALS = ["can", "will", "must", "may"]
NOUN_VERB = ["run", "walk", "play", "watch", "fly", "cook"]
ADJ_NOUN = ["light", "fast", "dark", "cold", "right", "clean"]

AMBIGUOUS = frozenset(NOUN_VERB + ADJ_NOUN + ["that"])
"""Words whose tag depends on their context."""

VOCABULARY = ("<unk>", *_NOUNS, *_VERBS, *_SAYS, *_DETS, *_ADJS, *_PRONOUNS, *_MODALS,
              *NOUN_VERB, *ADJ_NOUN, "that", "and")
_WORD_ID = {w: i for i, w in enumerate(VOCABULARY)}
_TAG_ID = {t: i for i, t in enumerate(TAGS)}


def _pick(rng, words):
    return words[int(rng.integers(len(words)))]


def _noun_phrase(rng, out: list, allow_pronoun: bool = True) -> None:
    if allow_pronoun and rng.random() < 0.3:
        out.append((_pick(rng, _PRONOUNS), "PRON"))
        return
    det = "that" if rng.random() < 0.2 else _pick(rng, _DETS)
    out.append((det, "DET"))
    for _ in range(int(rng.choice([0, 0, 1, 1, 2]))):
        out.append((_pick(rng, ADJ_NOUN if rng.random() < 0.4 else _ADJS), "ADJ"))
    head = rng.random()
    if head < 0.5:
        out.append((_pick(rng, _NOUNS), "NOUN"))
    elif head < 0.75:
        out.append((_pick(rng, NOUN_VERB), "NOUN"))
    else:
        out.append((_pick(rng, ADJ_NOUN), "NOUN"))


def _clause(rng, out: list, depth: int = 0) -> None:
    _noun_phrase(rng, out)
    kind = rng.random()
    if kind < 0.35:
        out.append((_pick(rng, _VERBS), "VERB"))
        if rng.random() < 0.7:
            _noun_phrase(rng, out)
    elif kind < 0.7:
        if rng.random() < 0.5:
            out.append((_pick(rng, _MODALS), "AUX"))
        out.append((_pick(rng, NOUN_VERB), "VERB"))
        if rng.random() < 0.5:
            _noun_phrase(rng, out)
    else:  # "knows that she runs" or "knows that car": only the next word tells
        out.append((_pick(rng, _SAYS), "VERB"))
        if depth < 2 and rng.random() < 0.6:
            out.append(("that", "SCONJ"))
            _clause(rng, out, depth + 1)
        else:
            _noun_phrase(rng, out, allow_pronoun=False)


def random_sentence(rng: np.random.Generator) -> tuple[list[str], list[str]]:
    """Words and their tags: one to three clauses joined by "and"."""
    return joined_clauses(rng, _clause)


def joined_clauses(rng: np.random.Generator, clause) -> tuple[list[str], list[str]]:
    """Words and tags of clauses joined by "and" (`clause(rng, out)` appends one
    clause's `(word, tag)` pairs; the synthetic languages of the tagger examples)."""
    out: list[tuple[str, str]] = []
    clause(rng, out)
    while rng.random() < 0.35 and len(out) < 30:
        out.append(("and", "CONJ"))
        clause(rng, out)
    words, tags = zip(*out)
    return list(words), list(tags)


def encode(words: Sequence[str], tags: Sequence[str] | None = None) -> dict:
    """The model's input: `{"words": [ids], "tags": [ids]}` (unknown words get id 0)."""
    item = {"words": [_WORD_ID.get(w, 0) for w in words]}
    if tags is not None:
        item["tags"] = [_TAG_ID[t] for t in tags]
    return item


def dataset(n: int, rng: np.random.Generator) -> tuple[list[dict], list[list[str]]]:
    """`n` encoded sentences, and their words (for reports)."""
    items, texts = [], []
    for _ in range(n):
        words, tags = random_sentence(rng)
        items.append(encode(words, tags))
        texts.append(words)
    return items, texts


def tagger_model(embed: int = 16, hidden: int = 32, bidirectional: bool = True) -> td.Block:
    """`{"words", "tags"} -> [tag logits per word]`, with a loss and a hit at every word.

    Bidirectional: an LSTM each way (`hidden` units each); otherwise one left-to-right
    LSTM of `2 * hidden` units, as a same-size comparison.
    """
    words = td.GetItem("words") >> td.Map(
        td.Scalar("int32") >> td.Embedding(len(VOCABULARY), embed, name="words"))
    if bidirectional:
        encoder = words >> encoders.bidirectional(rnn_cells.LSTMCell(hidden, name="forward"),
                                                  rnn_cells.LSTMCell(hidden, name="backward"))
    else:
        encoder = words >> td.RNN(rnn_cells.LSTMCell(2 * hidden, name="forward")) \
            >> td.GetItem(0)
    return heads.tagger(encoder, len(TAGS), tags="tags")
