"""Reading the function-name dataset and turning it into model inputs.

`read_records(path)` reads the gzip JSON lines `extract` writes; a line that is not
JSON, lacks a field or holds a malformed tree is skipped, counted, and the first one's
line number reported (`ReadReport`). `Task` fixes the classes (the `k` most frequent
first words of the training split, optionally plus `"other"`) and the vocabulary of
node types and identifiers (tokens seen at least `min_count` times in training; the
rest are `<unk>`), and `Task.encode` turns a record into a model input:

* `"tree"`: nested `{"t": token id, "i": position among its siblings (0 for the
  root, at most `MAX_POSITION`), "c": [children]}` for the TreeLSTMs;
* `"tokens"`: the same token ids in pre-order (the tree read left to right, which is
  close to source order) for the bag of tokens and the BiLSTM.

>>> recs = [{"label": "get", "split": "train", "tree": ["FunctionDef", "self", "x"]},
...         {"label": "get", "split": "train", "tree": ["FunctionDef", ["Return", "x"]]},
...         {"label": "set", "split": "train", "tree": ["FunctionDef", "self"]}]
>>> task = Task(recs, classes=1, min_count=2)
>>> task.classes, task.vocabulary
(['get'], ['<unk>', 'FunctionDef', 'x'])
>>> task.encode(recs[1])
{'tree': {'t': 1, 'i': 0, 'c': [{'t': 0, 'i': 0, 'c': [{'t': 2, 'i': 0, 'c': []}]}]}, \
'tokens': [1, 0, 2], 'label': 0}
>>> task.encode(recs[2]) is None               # "set" is not one of the classes
True
"""

from __future__ import annotations

from collections import Counter

from refold.examples.read_report import ReadReport, read_json_lines

__all__ = ["ReadReport", "read_records", "check_tree", "Task", "SPLITS", "MAX_POSITION"]

SPLITS = ("train", "dev", "test")
MAX_POSITION = 7
"""Children after the eighth share the last position id."""


def check_tree(tree, depth: int = 0) -> None:
    """Raises ValueError unless `tree` is a string or `[string, tree, ...]`."""
    if isinstance(tree, str):
        return
    if not isinstance(tree, list) or not tree or not isinstance(tree[0], str):
        raise ValueError(f"a tree node must be a string or [type, children...], got "
                         f"{str(tree)[:60]!r}")
    if depth > 200:
        raise ValueError("tree deeper than 200 levels")
    for child in tree[1:]:
        check_tree(child, depth + 1)


def _check(record) -> None:
    if not isinstance(record, dict):
        raise ValueError("not a JSON object")
    for key in ("label", "split", "tree"):
        if key not in record:
            raise ValueError(f"no {key!r} field")
    if record["split"] not in SPLITS:
        raise ValueError(f"split {record['split']!r} is not one of {SPLITS}")
    if not isinstance(record["label"], str):
        raise ValueError(f"label {record['label']!r} is not a string")
    check_tree(record["tree"])


def read_records(path: str) -> tuple[list[dict], ReadReport]:
    """The records of a (gzipped) JSON-lines file, and what was skipped."""
    return read_json_lines(path, _check)


def tokens(tree):
    """The tokens of a `[label, child, ...]` tree (a leaf: a string), in preorder."""
    if isinstance(tree, str):
        yield tree
        return
    yield tree[0]
    for child in tree[1:]:
        yield from tokens(child)


class Task:
    """The classes and vocabulary, fixed from the training records.

    Args:
        records: all records (only `split == "train"` ones count).
        classes: keep the `classes` most frequent first words (ties by name).
        other: also keep the rest, as one class `"other"` (the last).
        min_count: a token needs this many training occurrences to get an id.
        max_nodes: `encode` drops trees with more nodes (None: no limit).
    """

    def __init__(self, records: list[dict], classes: int = 20, other: bool = False,
                 min_count: int = 2, max_nodes: int | None = None):
        train = [r for r in records if r["split"] == "train"]
        counts = Counter(r["label"] for r in train)
        ranked = sorted(counts, key=lambda w: (-counts[w], w))
        self.classes = ranked[:classes] + (["other"] if other else [])
        self._class_id = {w: i for i, w in enumerate(self.classes)}
        self.other = other
        kept = [r for r in train if other or r["label"] in self._class_id]
        seen = Counter(t for r in kept for t in tokens(r["tree"]))
        self.vocabulary = ["<unk>"] + sorted(t for t, n in seen.items() if n >= min_count)
        self._token_id = {t: i for i, t in enumerate(self.vocabulary)}
        self.max_nodes = max_nodes

    def label(self, word: str) -> int | None:
        """The class id of a first word (None if the task leaves it out)."""
        if word in self._class_id:
            return self._class_id[word]
        return len(self.classes) - 1 if self.other else None

    def _node(self, tree, position: int = 0):
        i = min(position, MAX_POSITION)
        if isinstance(tree, str):
            return {"t": self._token_id.get(tree, 0), "i": i, "c": []}
        return {"t": self._token_id.get(tree[0], 0), "i": i,
                "c": [self._node(c, k) for k, c in enumerate(tree[1:])]}

    def encode(self, record: dict) -> dict | None:
        """`{"tree", "tokens", "label"}`, or None if the record's label is not a
        class or its tree is larger than `max_nodes`."""
        label = self.label(record["label"])
        if label is None:
            return None
        ids = [self._token_id.get(t, 0) for t in tokens(record["tree"])]
        if self.max_nodes is not None and len(ids) > self.max_nodes:
            return None
        return {"tree": self._node(record["tree"]), "tokens": ids, "label": label}
