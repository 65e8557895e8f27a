"""A synthetic language with an open vocabulary: most content words are rare, and
their tags follow from their spelling (suffixes), not from their context.

Sentences are clauses joined by "and": a subject (a pronoun or a noun phrase), an
optional modal, a verb, an optional object (a noun phrase, or a bare noun), and an
optional adverb. Content words (nouns, adjectives, verbs, adverbs) are either one of
a few frequent words per tag, or a fresh word: a random stem and a suffix of its tag,
so that most fresh words occur once. Two slots are ambiguous in context and only the
spelling decides:

* a noun phrase's modifiers, `the X car`: X is an ADJ ("the zumous car") or a NOUN
  (a compound, "the zument car");
* the word after a verb, `she sings X`: a bare NOUN object ("she sings zuments") or
  an ADV ("she sings zumously").

The suffixes overlap on purpose ("-ment" NOUN and "-ent" ADJ, "-ness" and "-less",
"-ism" and "-ic"), so the last letter or two are not enough.

A word is *rare* if it occurs fewer than `RARE_BELOW` times in the training data
(`Vocabulary.build`); unknown words at test time are rare too. `encode` gives each
word as `{"word": id}`, or `{"word": 0, "chars": [ids]}` for a rare word, so that one
input serves a lookup-only tagger (which reads id 0, `<unk>`, for every rare word) and
a tagger that spells rare words out (`examples.tagger.char_tagger`).

>>> import numpy as np
>>> words, tags = random_sentence(np.random.default_rng(1))
>>> len(words) == len(tags) and set(tags) <= set(TAGS)
True
>>> vocab = Vocabulary.build([["she", "sings", "she"]])
>>> vocab.encode(["she", "sings"], ["PRON", "VERB"])
{'words': [{'word': 1}, {'word': 0, 'chars': [19, 9, 14, 7, 19]}], 'tags': [3, 2]}
"""

from __future__ import annotations

import string
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

__all__ = ["TAGS", "SUFFIXES", "RARE_BELOW", "CHARACTERS", "random_sentence", "Vocabulary",
           "dataset"]

TAGS = ("DET", "NOUN", "VERB", "PRON", "ADJ", "ADV", "AUX", "CONJ")
SUFFIXES = {
    "NOUN": ("ment", "ness", "ism", "ation"),
    "ADJ": ("ent", "less", "ic", "ous"),
    "VERB": ("izes", "ifies", "ates"),
    "ADV": ("ently", "lessly", "ically", "ously"),
}
"""The suffixes of each open tag's words; a fresh word is a random stem and one of them."""

RARE_BELOW = 2
"""A word seen fewer times than this in training is rare (and spelled out)."""

CHARACTERS = string.ascii_lowercase
"""Character ids are 1 + the index here; 0 is any other character."""

_DETS = ["the", "a", "every", "this", "that"]
_PRONOUNS = ["she", "he", "they", "we", "it"]
_MODALS = ["can", "will", "must", "may"]
_ONSETS = list("bdfgklmnprstvz") + ["br", "st", "tr", "pl"]
_VOWELS = list("aeiou")
_FREQUENT_PER_TAG = 8
_FRESH = 0.35  # the chance a content word is a fresh one


def _stem(rng: np.random.Generator) -> str:
    syllables = int(rng.integers(2, 4))
    return "".join(_ONSETS[int(rng.integers(len(_ONSETS)))]
                   + _VOWELS[int(rng.integers(len(_VOWELS)))] for _ in range(syllables))


def _fresh_word(rng: np.random.Generator, tag: str) -> str:
    suffixes = SUFFIXES[tag]
    return _stem(rng) + suffixes[int(rng.integers(len(suffixes)))]


_FREQUENT = {tag: sorted({_fresh_word(np.random.default_rng(100 + i), tag)
                          for i in range(_FREQUENT_PER_TAG)}) for tag in SUFFIXES}


def _content(rng: np.random.Generator, tag: str) -> tuple[str, str]:
    if rng.random() < _FRESH:
        return _fresh_word(rng, tag), tag
    words = _FREQUENT[tag]
    return words[int(rng.integers(len(words)))], tag


def _pick(rng: np.random.Generator, words: list) -> str:
    return words[int(rng.integers(len(words)))]


def _noun_phrase(rng: np.random.Generator, out: list) -> None:
    out.append((_pick(rng, _DETS), "DET"))
    for _ in range(int(rng.choice([0, 1, 1, 2]))):
        out.append(_content(rng, "ADJ" if rng.random() < 0.5 else "NOUN"))
    out.append(_content(rng, "NOUN"))


def _clause(rng: np.random.Generator, out: list) -> None:
    if rng.random() < 0.4:
        out.append((_pick(rng, _PRONOUNS), "PRON"))
    else:
        _noun_phrase(rng, out)
    if rng.random() < 0.3:
        out.append((_pick(rng, _MODALS), "AUX"))
    out.append(_content(rng, "VERB"))
    after = rng.random()
    if after < 0.4:
        _noun_phrase(rng, out)
    elif after < 0.8:  # a bare noun or an adverb: only the spelling tells
        out.append(_content(rng, "NOUN" if rng.random() < 0.5 else "ADV"))
    if rng.random() < 0.2:
        out.append(_content(rng, "ADV"))


def random_sentence(rng: np.random.Generator) -> tuple[list[str], list[str]]:
    """Words and their tags: one to three clauses joined by "and"."""
    from refold.examples.tagger.tagger import joined_clauses
    return joined_clauses(rng, _clause)


def spell(word: str) -> list[int]:
    """Character ids of `word` (1-26 for a-z, 0 for anything else)."""
    return [CHARACTERS.index(c) + 1 if c in CHARACTERS else 0 for c in word]


class Vocabulary:
    """The frequent words of a training set (ids from 1; 0 is `<unk>`), every word's
    count there, the tags (ids from 0) and the alphabet rare words are spelled in.

    The tags and alphabet default to this language's; a real treebank's come from its
    training data (`examples.tagger.treebank.vocabulary`).
    """

    def __init__(self, words: Sequence[str], counts: dict, tags: Sequence[str] = TAGS,
                 characters: str | Sequence[str] = CHARACTERS):
        self.words, self.counts = tuple(words), dict(counts)
        self.tags, self.characters = tuple(tags), tuple(characters)
        self._ids = {w: i + 1 for i, w in enumerate(self.words)}
        self._tag_ids = {t: i for i, t in enumerate(self.tags)}
        self._char_ids = {c: i + 1 for i, c in enumerate(self.characters)}

    @classmethod
    def build(cls, sentences: Iterable[Sequence[str]], rare_below: int = RARE_BELOW,
              tags: Sequence[str] = TAGS, characters: str | Sequence[str] = CHARACTERS
              ) -> Vocabulary:
        """The words seen at least `rare_below` times in `sentences`, most frequent first."""
        counts = Counter(w for s in sentences for w in s)
        frequent = sorted((w for w, n in counts.items() if n >= rare_below),
                          key=lambda w: (-counts[w], w))
        return cls(frequent, counts, tags, characters)

    def __len__(self) -> int:
        """The number of word ids, `<unk>` included."""
        return len(self.words) + 1

    def id(self, word: str) -> int:
        """The word's id, 0 if it is rare."""
        return self._ids.get(word, 0)

    def is_rare(self, word: str) -> bool:
        """Whether `word` is seen fewer than `rare_below` times in training (or never)."""
        return self.id(word) == 0

    def spell(self, word: str) -> list[int]:
        """Character ids of `word` in this vocabulary's alphabet (0: not in it)."""
        return [self._char_ids.get(c, 0) for c in word]

    def tag_id(self, tag: str) -> int:
        """The tag's id; a `ValueError` naming the known tags if it is not one."""
        try:
            return self._tag_ids[tag]
        except KeyError:
            raise ValueError(f"unknown tag {tag!r}; the tags are {', '.join(self.tags)}"
                             ) from None

    def encode(self, words: Sequence[str], tags: Sequence[str] | None = None) -> dict:
        """`{"words": [...], "tags": [ids]}`: each word `{"word": id}` if frequent, else
        `{"word": 0, "chars": [character ids]}`."""
        item = {"words": [{"word": i} if i else {"word": 0, "chars": self.spell(w)}
                          for w, i in ((w, self.id(w)) for w in words)]}
        if tags is not None:
            item["tags"] = [self.tag_id(t) for t in tags]
        return item


def dataset(train_size: int, test_size: int, rng: np.random.Generator):
    """Training and test sentences, encoded with the training set's vocabulary.

    Returns `(train, test, test_words, vocabulary)`: encoded items, the test
    sentences' words (for reports), and the `Vocabulary`.
    """
    train_raw = [random_sentence(rng) for _ in range(train_size)]
    test_raw = [random_sentence(rng) for _ in range(test_size)]
    vocab = Vocabulary.build(words for words, _ in train_raw)
    train = [vocab.encode(w, t) for w, t in train_raw]
    test = [vocab.encode(w, t) for w, t in test_raw]
    return train, test, [w for w, _ in test_raw], vocab
