"""Dependency treebanks in CoNLL-U: reading, writing, and checking trees.

A file holds sentences separated by blank lines; a sentence is optional `#` comment
lines, then one line per word with ten tab-separated columns::

    # text = the dog sleeps
    1	the	_	DET	_	_	2	det	_	_
    2	dog	_	NOUN	_	_	3	nsubj	_	_
    3	sleeps	_	VERB	_	_	0	root	_	_

Only ID, FORM, UPOS, HEAD and DEPREL are read (columns 1, 2, 4, 7, 8); the others are
written as `_`. Multiword-token lines (`1-2`) and empty nodes (`1.1`) are skipped, so
Universal Dependencies files read as they are. HEAD 0 is the root.

In memory a sentence is a `Sentence`: its words, tags, heads (`heads[i]` is the head of
word `i + 1`) and relations.

>>> rows = ["1 the _ DET _ _ 2 det _ _", "2 dog _ NOUN _ _ 0 root _ _"]
>>> [s] = parse_conllu("\\n".join(r.replace(" ", "\\t") for r in rows))
>>> s.words, s.tags, s.heads
(['the', 'dog'], ['DET', 'NOUN'], [2, 0])
>>> is_projective([2, 0]), is_projective([3, 4, 0, 3])   # 1->3 crosses 2->4
(True, False)
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

__all__ = ["Sentence", "parse_conllu", "read_conllu", "to_conllu", "write_conllu",
           "check_tree", "is_projective"]


@dataclass
class Sentence:
    """One dependency tree: `heads[i]` is the head of word `i + 1` (0 for the root)."""

    words: list[str]
    tags: list[str]
    heads: list[int]
    relations: list[str] = field(default_factory=list)

    def __post_init__(self):
        if not self.relations:
            self.relations = ["_"] * len(self.words)
        n = len(self.words)
        if not (len(self.tags) == len(self.heads) == len(self.relations) == n):
            raise ValueError(f"a sentence needs one tag, head and relation per word: "
                             f"{n} words, {len(self.tags)} tags, {len(self.heads)} heads, "
                             f"{len(self.relations)} relations")

    def __len__(self) -> int:
        return len(self.words)


def parse_conllu(text: str, source: str = "<text>") -> list[Sentence]:
    """The sentences of CoNLL-U text, read with the `conllu` library
    (`examples.treebanks`). A malformed line is a `ValueError` naming `source` and the
    line number, and a sentence that is not a tree one naming the sentence: a parser
    cannot learn from either, and a silent loss would change its scores."""
    from refold.examples.treebanks import parse
    reading = parse(text, source)
    if reading.skipped:
        raise ValueError(f"{reading.first_error} ({reading.skipped} malformed sentences "
                         "in all)")
    for i, s in enumerate(reading.sentences):
        try:
            check_tree(s.heads)
        except ValueError as e:
            raise ValueError(f"{source}: sentence {i + 1}: {e}") from None
    return reading.sentences


def read_conllu(path: str | os.PathLike) -> list[Sentence]:
    """The sentences of a CoNLL-U file."""
    with open(path, encoding="utf-8") as f:
        return parse_conllu(f.read(), str(path))


def to_conllu(sentence: Sentence, sent_id: str | None = None) -> str:
    """One sentence as CoNLL-U lines (with `# sent_id` and `# text` comments)."""
    lines = [] if sent_id is None else [f"# sent_id = {sent_id}"]
    lines.append(f"# text = {' '.join(sentence.words)}")
    for i, (w, t, h, r) in enumerate(zip(sentence.words, sentence.tags, sentence.heads,
                                         sentence.relations), 1):
        lines.append(f"{i}\t{w}\t_\t{t}\t_\t_\t{h}\t{r}\t_\t_")
    return "\n".join(lines) + "\n"


def write_conllu(path: str | os.PathLike, sentences: Iterable[Sentence]) -> None:
    """Writes sentences to a CoNLL-U file, numbered from 1."""
    with open(path, "w", encoding="utf-8") as f:
        for i, s in enumerate(sentences, 1):
            f.write(to_conllu(s, str(i)) + "\n")


def check_tree(heads: Sequence[int]) -> None:
    """Raises `ValueError` unless `heads` is a tree: every head in [0, n], no word its
    own ancestor, exactly one word attached to the root."""
    n = len(heads)
    for d, h in enumerate(heads, 1):
        if not 0 <= h <= n or h == d:
            raise ValueError(f"word {d} has head {h}, not one of 0..{n} other than itself")
    roots = [d for d, h in enumerate(heads, 1) if h == 0]
    if len(roots) != 1:
        raise ValueError(f"a tree has exactly one word attached to the root, this one "
                         f"{len(roots)}: {roots}")
    state = [0] * (n + 1)  # 0 unseen, 1 on the current path, 2 reaches the root
    state[0] = 2
    for start in range(1, n + 1):
        path, d = [], start
        while state[d] == 0:
            state[d] = 1
            path.append(d)
            d = heads[d - 1]
        if state[d] == 1:
            raise ValueError(f"the heads have a cycle through word {d}")
        for p in path:
            state[p] = 2


def is_projective(heads: Sequence[int]) -> bool:
    """Whether no two arcs cross (the root's arc, from position 0, included): every
    word between a head and its dependent descends from that head."""
    arcs = [(min(h, d), max(h, d)) for d, h in enumerate(heads, 1)]
    for i, (a, b) in enumerate(arcs):
        for c, e in arcs[i + 1:]:
            if a < c < b < e or c < a < e < b:
                return False
    return True
