"""A synthetic sentiment treebank whose labels follow compositional rules.

Every sentence is a binary parse tree in the SST format (labels 0-4 on every node),
built from a small grammar, and every node's label is computed from its children's
by a few rules (a node's *score* is its label minus 2, from -2 to +2):

* a word has a fixed polarity ("great" +2, "good" +1, "movie" 0, "dull" -1, "awful" -2);
* negation, ``(not X)``: flips X, and softens a strong X ("not great" is -1, "not bad" +1);
* an intensifier, ``(very X)``: strengthens X ("very good" is +2; neutral stays neutral);
* contrast, ``(C1 (but C2))``: the clause after "but" decides, unless it is neutral;
* anything else, e.g. ``(NP VP)`` or ``(C1 (and C2))``: the sum of the parts, clipped.

So the same words give opposite labels in different trees ("good but dull" and "dull
but good"), and a bag-of-words model cannot reach the accuracy of a model that reads
the tree. The shipped files ``data/{train,dev,test}.txt`` are made by::

    python -m refold.examples.sentiment.synthetic --out examples/sentiment/data --seed 0

(3,000 / 500 / 500 sentences; the same seed and sizes always give the same files).

>>> from refold.examples.sentiment.treebank import parse_tree, to_ptb
>>> to_ptb(relabel(parse_tree("(2 (2 not) (2 (2 very) (2 good)))")))
'(1 (2 not) (4 (2 very) (3 good)))'
>>> score_of("good but dull"), score_of("dull but good"), score_of("dull but new")
(-1, 1, -1)
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

import numpy as np

from refold.examples.sentiment.treebank import nodes, write_treebank

__all__ = ["LEXICON", "relabel", "score_of", "random_sentence", "generate", "write_splits",
           "SPLITS", "main"]

ADJECTIVES = {
    2: ["great", "brilliant", "superb", "wonderful", "excellent", "stunning"],
    1: ["good", "nice", "fun", "charming", "solid", "enjoyable", "clever", "sweet"],
    0: ["long", "new", "short", "quiet", "old", "familiar", "french", "loud"],
    -1: ["bad", "dull", "weak", "boring", "flat", "messy", "silly", "slow"],
    -2: ["awful", "terrible", "dreadful", "horrible", "painful", "pathetic"],
}
PREDICATE_NOUNS = {
    2: ["masterpiece", "triumph", "gem"],
    1: ["treat", "delight", "pleasure"],
    0: ["comedy", "drama", "thriller", "sequel"],
    -1: ["mess", "bore", "letdown"],
    -2: ["disaster", "catastrophe", "failure"],
}
SUBJECT_NOUNS = ["movie", "film", "plot", "script", "cast", "story", "ending", "soundtrack",
                 "director", "acting", "dialogue", "music", "pacing", "camera", "humor"]
DETERMINERS = ["the", "this", "its", "that"]
VERBS = ["is", "was", "seems", "feels", "looks", "remains"]
NEGATIONS = ["not", "never", "hardly"]
INTENSIFIERS = ["very", "really", "truly", "extremely", "incredibly"]
CONTRASTS = ["but", "yet", "though"]
CONJUNCTIONS = ["and"]

LEXICON: dict[str, int] = {
    word: score for table in (ADJECTIVES, PREDICATE_NOUNS)
    for score, words in table.items() for word in words}
"""The polarity (score, -2..2) of every polar word; every other word is neutral (0)."""


def _clip(score: int) -> int:
    return max(-2, min(2, score))


def _negate(score: int) -> int:
    return -score if abs(score) < 2 else -score // 2


def _intensify(score: int) -> int:
    return _clip(2 * score)


def _first_word(node: dict) -> str | None:
    """The word of a leaf, or None for an internal node."""
    return node.get("word")


def relabel(tree: dict) -> dict:
    """Sets every node's label by the rules of the module docstring; returns the tree.

    The tree must be binary (leaves and two-child nodes); it is changed in place.
    """
    for node in nodes(tree):
        children = node.get("children")
        if children is None:
            score = LEXICON.get(node["word"].lower(), 0)
        else:
            if len(children) != 2:
                raise ValueError(f"relabel needs a binary tree; a node has {len(children)} "
                                 "children")
            left, right = children
            s_left, s_right = left["label"] - 2, right["label"] - 2
            head = _first_word(left)
            right_head = None if "word" in right else _first_word(right["children"][0])
            if head in NEGATIONS:
                score = _negate(s_right)
            elif head in INTENSIFIERS:
                score = _intensify(s_right)
            elif head in CONTRASTS or head in CONJUNCTIONS:
                score = s_right
            elif right_head in CONTRASTS:
                score = s_right if s_right != 0 else s_left
            else:
                score = _clip(s_left + s_right)
        node["label"] = score + 2
    return tree


def score_of(sentence: str) -> int:
    """The root score (-2..2) of ``"A but B"`` / ``"A and B"`` over phrases of words,
    a quick way to see the rules (each phrase is parsed right-branching).

    >>> score_of("not very good"), score_of("very not good"), score_of("not awful")
    (-1, -2, 1)
    """
    words = sentence.split()
    for joiner in CONTRASTS + CONJUNCTIONS:
        if joiner in words:
            k = words.index(joiner)
            left = _right_branching(words[:k])
            right = {"label": 2, "children": [{"label": 2, "word": joiner},
                                               _right_branching(words[k + 1:])]}
            tree = {"label": 2, "children": [left, right]}
            return relabel(tree)["label"] - 2
    return relabel(_right_branching(words))["label"] - 2


def _right_branching(words: Sequence[str]) -> dict:
    tree = {"label": 2, "word": words[-1]}
    for word in reversed(words[:-1]):
        tree = {"label": 2, "children": [{"label": 2, "word": word}, tree]}
    return tree


# --- the grammar ---------------------------------------------------------------------

def _leaf(word: str) -> dict:
    return {"label": 2, "word": word}


def _node(left: dict, right: dict) -> dict:
    return {"label": 2, "children": [left, right]}


def _pick(rng: np.random.Generator, words: Sequence[str]) -> str:
    return words[int(rng.integers(len(words)))]


def _polar_word(rng: np.random.Generator, table: dict[int, list[str]]) -> str:
    score = int(rng.choice([2, 1, 0, -1, -2], p=[0.2, 0.25, 0.1, 0.25, 0.2]))
    return _pick(rng, table[score])


def _adjective_phrase(rng: np.random.Generator) -> dict:
    phrase = _leaf(_polar_word(rng, ADJECTIVES))
    if rng.random() < 0.3:
        phrase = _node(_leaf(_pick(rng, INTENSIFIERS)), phrase)
    return phrase


def _predicate(rng: np.random.Generator) -> dict:
    if rng.random() < 0.25:
        pred = _node(_leaf("a"), _leaf(_polar_word(rng, PREDICATE_NOUNS)))
    else:
        pred = _adjective_phrase(rng)
    if rng.random() < 0.3:
        pred = _node(_leaf(_pick(rng, NEGATIONS)), pred)
    return pred


def _clause(rng: np.random.Generator) -> dict:
    noun = _leaf(_pick(rng, SUBJECT_NOUNS))
    if rng.random() < 0.15:
        noun = _node(_adjective_phrase(rng), noun)
    subject = _node(_leaf(_pick(rng, DETERMINERS)), noun)
    return _node(subject, _node(_leaf(_pick(rng, VERBS)), _predicate(rng)))


def random_sentence(rng: np.random.Generator) -> dict:
    """One random labelled tree: a clause (50%), ``C1 but C2`` (35%) or ``C1 and C2``."""
    kind = rng.random()
    tree = _clause(rng)
    if kind >= 0.5:
        joiner = _pick(rng, CONTRASTS) if kind < 0.85 else _pick(rng, CONJUNCTIONS)
        tree = _node(tree, _node(_leaf(joiner), _clause(rng)))
    return relabel(tree)


def generate(n: int, rng: np.random.Generator) -> list[dict]:
    """``n`` random labelled trees."""
    return [random_sentence(rng) for _ in range(n)]


SPLITS = {"train": 3000, "dev": 500, "test": 500}
"""The shipped split sizes."""


def write_splits(out_dir: str | os.PathLike, seed: int = 0,
                 sizes: dict[str, int] | None = None) -> dict[str, list[dict]]:
    """Generates and writes ``{split}.txt`` for each split (train, dev, test by default).

    One generator seeded with ``seed`` makes the splits in order, so a seed and the
    sizes fix the files. Returns the trees by split.
    """
    sizes = dict(SPLITS if sizes is None else sizes)
    rng = np.random.default_rng(seed)
    os.makedirs(out_dir, exist_ok=True)
    splits = {}
    for name, n in sizes.items():
        splits[name] = generate(n, rng)
        write_treebank(os.path.join(out_dir, f"{name}.txt"), splits[name])
    return splits


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m refold.examples.sentiment.synthetic",
        description="Write a synthetic SST-format treebank with compositional sentiment.")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "data"),
                        help="output folder (default: the shipped examples/sentiment/data)")
    parser.add_argument("--seed", type=int, default=0)
    for name, n in SPLITS.items():
        parser.add_argument(f"--{name}", type=int, default=n, help=f"{name} sentences")
    args = parser.parse_args(argv)
    splits = write_splits(args.out, args.seed, {k: getattr(args, k) for k in SPLITS})
    for name, trees in splits.items():
        print(f"{os.path.join(args.out, name + '.txt')}: {len(trees)} trees")


if __name__ == "__main__":
    main()
