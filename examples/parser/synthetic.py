"""A synthetic dependency treebank from a small grammar, with attachments a parser must
read from context.

Sentences are clauses (subject, optional auxiliary and adverbs, a verb and what the
verb takes), joined by "and"; noun phrases have determiners, adjectives, an "of"
phrase, a "with" phrase or a relative clause ("the dog that sees the cat"); saying
verbs take a "that" clause. Heads follow Universal Dependencies (the verb heads its
clause, the noun its phrase, a preposition hangs off its noun). What makes it a
parsing task:

* a "with" phrase attaches to the *verb* when its noun is an instrument ("sees the man
  with a telescope") and to the *noun before it* when it is an attribute ("sees the
  man with a hat"): the word after "with" decides;
* "to"/"into"/"from" phrases attach to the verb, "of" phrases to the noun before;
* a clause-final adverb attaches to its verb across the object; a relative clause or a
  "that" clause puts whole clauses between a verb and its subject or its next
  dependent.

Every tree is projective. The shipped files `data/{train,test}.conllu` are made by::

    python -m refold.examples.parser.synthetic --out examples/parser/data --seed 0

(2,000 / 400 sentences; the same seed and sizes always give the same files).

>>> import numpy as np
>>> from refold.examples.parser.treebank import is_projective
>>> s = random_sentence(np.random.default_rng(1))
>>> len(s.words) == len(s.heads) and is_projective(s.heads) and s.heads.count(0) == 1
True
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

import numpy as np

from refold.examples.parser.treebank import Sentence, write_conllu

__all__ = ["random_sentence", "generate", "write_splits", "SPLITS", "INSTRUMENTS",
           "ATTRIBUTES", "main"]

SPLITS = {"train": 2000, "test": 400}

ANIMATE = ["dog", "cat", "man", "woman", "child", "teacher", "farmer", "bird", "doctor",
           "student"]
THINGS = ["ball", "book", "letter", "apple", "car", "house", "song", "picture", "box",
          "bottle"]
PLACES = ["park", "city", "river", "school", "market", "forest"]
INSTRUMENTS = ["telescope", "knife", "spoon", "hammer", "brush", "camera"]
ATTRIBUTES = ["hat", "beard", "roof", "scarf", "garden", "smile"]
NAMES = ["Anna", "Bob", "Clara", "David", "Emma"]
PRONOUNS = ["she", "he", "they", "we", "I"]
DETERMINERS = ["the", "a", "every", "this", "some"]
ADJECTIVES = ["big", "old", "red", "small", "happy", "quiet", "young", "green"]
TRANSITIVE = ["sees", "likes", "takes", "finds", "eats", "reads", "paints", "opens"]
INTRANSITIVE = ["sleeps", "laughs", "waits", "sings", "smiles"]
MOTION = ["walks", "goes", "drives", "runs"]
SAYING = ["says", "thinks", "knows", "believes"]
AUXILIARIES = ["can", "will", "must", "may"]
ADVERBS = ["often", "quickly", "never", "slowly", "today"]
MOTION_PREPOSITIONS = ["to", "into", "from"]


class _Tree:
    """A sentence under construction: words are added left to right, attached later."""

    def __init__(self):
        self.words: list[str] = []
        self.tags: list[str] = []
        self.heads: list[int] = []
        self.relations: list[str] = []

    def add(self, word: str, tag: str) -> int:
        self.words.append(word)
        self.tags.append(tag)
        self.heads.append(-1)
        self.relations.append("_")
        return len(self.words)

    def attach(self, dependent: int, head: int, relation: str) -> None:
        self.heads[dependent - 1] = head
        self.relations[dependent - 1] = relation

    def sentence(self) -> Sentence:
        assert -1 not in self.heads, "every word is attached"
        return Sentence(self.words, self.tags, self.heads, self.relations)


def _pick(rng: np.random.Generator, words: Sequence[str]) -> str:
    return words[int(rng.integers(len(words)))]


def _noun_phrase(t: _Tree, rng, nouns: Sequence[str], depth: int, pronoun: bool = True,
                 modifiers: bool = True) -> int:
    """Adds a noun phrase; returns its head noun."""
    r = rng.random()
    if pronoun and r < 0.15:
        return t.add(_pick(rng, PRONOUNS), "PRON")
    if pronoun and r < 0.25:
        return t.add(_pick(rng, NAMES), "PROPN")
    det = t.add(_pick(rng, DETERMINERS), "DET")
    adjectives = [t.add(_pick(rng, ADJECTIVES), "ADJ")
                  for _ in range(int(rng.choice([0, 0, 1, 1, 2])))]
    noun = t.add(_pick(rng, nouns), "NOUN")
    t.attach(det, noun, "det")
    for a in adjectives:
        t.attach(a, noun, "amod")
    r = rng.random()
    if not modifiers:
        return noun
    if r < 0.12:  # "the roof of the house"
        _prepositional(t, rng, "of", THINGS + PLACES, noun, "nmod", depth)
    elif r < 0.27:  # "the man with a hat": an attribute belongs to the noun
        _prepositional(t, rng, "with", ATTRIBUTES, noun, "nmod", depth)
    elif r < 0.37 and depth < 2 and nouns is ANIMATE:  # "the dog that sees the cat"
        that = t.add("that", "PRON")
        verb = _predicate(t, rng, that, depth + 1)
        t.attach(verb, noun, "acl:relcl")
    return noun


def _prepositional(t: _Tree, rng, preposition: str, nouns: Sequence[str], head: int,
                   relation: str, depth: int) -> None:
    case = t.add(preposition, "ADP")
    noun = _noun_phrase(t, rng, nouns, depth + 1, pronoun=False, modifiers=False)
    t.attach(case, noun, "case")
    t.attach(noun, head, relation)


def _predicate(t: _Tree, rng, subject: int, depth: int) -> int:
    """Adds the rest of a clause after its subject; returns the verb."""
    before = []
    if rng.random() < 0.15:
        before.append((t.add(_pick(rng, ADVERBS), "ADV"), "advmod"))
    if rng.random() < 0.25:
        before.append((t.add(_pick(rng, AUXILIARIES), "AUX"), "aux"))
    r = rng.random()
    if r < 0.45:
        verb = t.add(_pick(rng, TRANSITIVE), "VERB")
        obj = _noun_phrase(t, rng, THINGS if rng.random() < 0.6 else ANIMATE, depth)
        t.attach(obj, verb, "obj")
    elif r < 0.6:
        verb = t.add(_pick(rng, INTRANSITIVE), "VERB")
    elif r < 0.8:
        verb = t.add(_pick(rng, MOTION), "VERB")
        _prepositional(t, rng, _pick(rng, MOTION_PREPOSITIONS), PLACES, verb, "obl", depth)
    else:
        verb = t.add(_pick(rng, SAYING), "VERB")
        if depth < 2 and rng.random() < 0.7:
            mark = t.add("that", "SCONJ")
            inner = _clause(t, rng, depth + 1)
            t.attach(mark, inner, "mark")
            t.attach(inner, verb, "ccomp")
        else:
            t.attach(_noun_phrase(t, rng, THINGS, depth), verb, "obj")
    t.attach(subject, verb, "nsubj")
    for word, relation in before:
        t.attach(word, verb, relation)
    if rng.random() < 0.2:  # "with a telescope": an instrument belongs to the verb
        _prepositional(t, rng, "with", INSTRUMENTS, verb, "obl", depth)
    if rng.random() < 0.15:
        t.attach(t.add(_pick(rng, ADVERBS), "ADV"), verb, "advmod")
    return verb


def _clause(t: _Tree, rng, depth: int) -> int:
    subject = _noun_phrase(t, rng, ANIMATE, depth)
    return _predicate(t, rng, subject, depth)


MAX_WORDS = 30


def random_sentence(rng: np.random.Generator) -> Sentence:
    """One tree: one to three clauses joined by "and", at most `MAX_WORDS` words (a
    longer one is drawn again)."""
    while True:
        sentence = _sentence(rng)
        if len(sentence) <= MAX_WORDS:
            return sentence


def _sentence(rng: np.random.Generator) -> Sentence:
    t = _Tree()
    first = _clause(t, rng, 0)
    t.attach(first, 0, "root")
    for _ in range(2):
        if rng.random() >= 0.25:
            break
        cc = t.add("and", "CCONJ")
        verb = _clause(t, rng, 1)
        t.attach(cc, verb, "cc")
        t.attach(verb, first, "conj")
    return t.sentence()


def generate(n: int, rng: np.random.Generator) -> list[Sentence]:
    """`n` random trees."""
    return [random_sentence(rng) for _ in range(n)]


def write_splits(out_dir: str | os.PathLike, seed: int = 0,
                 sizes: dict[str, int] | None = None) -> dict[str, str]:
    """Writes `{split}.conllu` for each split (train first, from one generator seeded with
    `seed`); returns the paths."""
    rng = np.random.default_rng(seed)
    os.makedirs(out_dir, exist_ok=True)
    paths = {}
    for split, n in (sizes or SPLITS).items():
        paths[split] = os.path.join(out_dir, f"{split}.conllu")
        write_conllu(paths[split], generate(n, rng))
    return paths


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m refold.examples.parser.synthetic",
        description="Writes the synthetic dependency treebank (train.conllu, test.conllu).")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "data"))
    parser.add_argument("--seed", type=int, default=0)
    for split, n in SPLITS.items():
        parser.add_argument(f"--{split}", type=int, default=n, help=f"sentences (default {n})")
    args = parser.parse_args(argv)
    for split, path in write_splits(args.out, args.seed,
                                    {s: getattr(args, s) for s in SPLITS}).items():
        print(f"{split}: {path}")


if __name__ == "__main__":
    main()
