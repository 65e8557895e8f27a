"""Reading the bug-detector dataset and turning its sites into model inputs.

`read_sites(path)` reads the gzip JSON lines `extract` writes; a line that is not JSON,
lacks a field or holds a malformed tree or change is skipped, counted, and the first
one's line number reported (`ReadReport`). `sample` draws a split's sites per kind.
`Task` fixes the vocabulary from the training sites' trees, and `Task.pair` turns a
site into two model inputs: the code as written (label 0) and with its bug seeded
(label 1). An input is

* `"tree"`: nested `{"t": token id, "i": position among its siblings (0 for the root,
  at most `MAX_POSITION`), "c": [children]}` for the TreeLSTMs;
* `"tokens"`: the same token ids in pre-order (source order, near enough) for the bag
  of tokens and the BiLSTM.

A token is a node type, an operator, a constant's kind or an identifier. An identifier
seen fewer than `min_count` times in training is read from its parts instead (split
at `_` and at case changes, as the function-names example splits names): a node
`<parts>` whose children are the parts, so `max_len` reads as `max` and `len` when
`max_len` itself is rare; a part rare too is `<unk>`.

>>> site = {"kind": "swap", "split": "train", "tree": ["@Call", "f", "max_len", "y"],
...         "at": [], "to": None}
>>> task = Task([site] * 2 + [{**site, "tree": ["@Call", "f", "max", "len"]}], min_count=2)
>>> task.vocabulary
['<parts>', '<unk>', '@Call', 'f', 'len', 'max', 'max_len', 'y']
>>> good, bad = task.pair({**site, "tree": ["@Call", "f", "max_size", "y"]})
>>> good["tokens"], bad["tokens"], good["label"], bad["label"]
([2, 3, 0, 5, 1, 7], [2, 3, 7, 0, 5, 1], 0, 1)
>>> good["tree"]["c"][1]
{'t': 0, 'i': 1, 'c': [{'t': 5, 'i': 0, 'c': []}, {'t': 1, 'i': 1, 'c': []}]}
"""

from __future__ import annotations

import random
import re
from collections import Counter

from refold.examples.bugs.extract import KINDS, seeded
from refold.examples.function_names.data import check_tree, tokens
from refold.examples.read_report import ReadReport, read_json_lines

__all__ = ["ReadReport", "read_sites", "sample", "Task", "SPLITS", "KINDS", "MAX_POSITION",
           "parts"]

SPLITS = ("train", "dev", "test")
MAX_POSITION = 7
"""Children after the eighth share the last position id."""
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def parts(token: str) -> list[str]:
    """An identifier's parts, lower-cased (one part: not worth splitting).

    >>> parts("max_len"), parts("getElementById"), parts("__init__"), parts("<str>")
    (['max', 'len'], ['get', 'element', 'by', 'id'], ['init'], ['<str>'])
    """
    if not _IDENTIFIER.match(token):
        return [token]
    words = [w for w in re.split(r"_|(?<=[a-z0-9])(?=[A-Z])", token) if w]
    return [w.lower() for w in words] or [token]


def _check(site) -> None:
    if not isinstance(site, dict):
        raise ValueError("not a JSON object")
    for key in ("kind", "split", "tree", "at", "to"):
        if key not in site:
            raise ValueError(f"no {key!r} field")
    if site["split"] not in SPLITS:
        raise ValueError(f"split {site['split']!r} is not one of {SPLITS}")
    if site["kind"] not in KINDS:
        raise ValueError(f"kind {site['kind']!r} is not one of {KINDS}")
    check_tree(site["tree"])
    if not isinstance(site["at"], list) or (site["to"] is None) != (site["kind"] == "swap"):
        raise ValueError(f"change at {site['at']!r} to {site['to']!r} does not fit the kind")
    try:
        bug = seeded(site)
    except (IndexError, TypeError) as e:
        raise ValueError(f"change at {site['at']!r} is not in the tree ({e})") from None
    check_tree(bug)


def read_sites(path: str) -> tuple[list[dict], ReadReport]:
    """The sites of a (gzipped) JSON-lines file, and what was skipped."""
    return read_json_lines(path, _check)


def sample(sites: list[dict], split: str, per_kind: int | None, seed: int = 0) -> list[dict]:
    """`split`'s sites, at most `per_kind` of each kind (a draw fixed by `seed`; None:
    all), in file order."""
    chosen = []
    for kind in KINDS:
        ids = [i for i, s in enumerate(sites) if s["split"] == split and s["kind"] == kind]
        if per_kind is not None and len(ids) > per_kind:
            ids = random.Random(f"{seed}:{split}:{kind}").sample(ids, per_kind)
        chosen.extend(ids)
    return [sites[i] for i in sorted(chosen)]


class Task:
    """The vocabulary, fixed from the training sites.

    Args:
        sites: all sites (only `split == "train"` ones count).
        min_count: a token (or an identifier's part) needs this many occurrences in
            the training sites' trees to get an id.
    """

    def __init__(self, sites: list[dict], min_count: int = 3):
        counts: Counter = Counter()
        for s in sites:
            if s["split"] == "train":
                for t in tokens(s["tree"]):
                    counts[t] += 1
                    if len(p := parts(t)) > 1:
                        counts.update(p)
        self.vocabulary = ["<parts>", "<unk>"] + sorted(
            t for t, n in counts.items() if n >= min_count and t not in ("<parts>", "<unk>"))
        self._id = {t: i for i, t in enumerate(self.vocabulary)}

    def _leaf(self, token: str, position: int) -> dict:
        if token in self._id:
            return {"t": self._id[token], "i": position, "c": []}
        words = parts(token)
        if len(words) == 1:
            return {"t": 1, "i": position, "c": []}
        return {"t": 0, "i": position,
                "c": [{"t": self._id.get(w, 1), "i": min(k, MAX_POSITION), "c": []}
                      for k, w in enumerate(words)]}

    def _node(self, tree, position: int = 0) -> dict:
        i = min(position, MAX_POSITION)
        if isinstance(tree, str):
            return self._leaf(tree, i)
        return {"t": self._id.get(tree[0], 1), "i": i,
                "c": [self._node(c, k) for k, c in enumerate(tree[1:])]}

    def encode(self, tree, label: int) -> dict:
        """`{"tree", "tokens", "label"}` of one tree."""
        node = self._node(tree)
        return {"tree": node, "tokens": list(_preorder(node)), "label": label}

    def pair(self, site: dict) -> tuple[dict, dict]:
        """The site as written (label 0) and with its bug seeded (label 1)."""
        return self.encode(site["tree"], 0), self.encode(seeded(site), 1)


def _preorder(node: dict):
    yield node["t"]
    for child in node["c"]:
        yield from _preorder(child)
