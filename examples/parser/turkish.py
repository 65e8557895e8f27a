"""The Turkish Web Treebank, as the `turkish-treebanks` package ships it, in a fixed split.

The package (Google Research, Apache-2.0; `pip install -e ".[treebanks]"`) installs the
treebank's CoNLL-U files, `data/web.conllu` (2,541 sentences from forums, blogs and
other web text) and `data/wiki.conllu` (2,310 from Wikipedia). They are read with the
`conllu` library. Tokens are inflectional groups: a word of several derivations is
several tokens joined by `ig` arcs. The split is fixed by position in the file, so it
is the same on every machine: every `TEST_EVERY`-th sentence (the 0th, the 10th, ...)
is a test sentence, the rest train. Non-projective sentences stay in both lists; the
parser's static oracle leaves them out of training and counts them, and the test scores
them like any other.

>>> train, test = load("web")
>>> len(train), len(test)
(2286, 255)
"""

from __future__ import annotations

import importlib.metadata

from refold.examples.parser.treebank import Sentence, read_conllu

TEST_EVERY = 10
PARTS = ("web", "wiki")


def path(part: str = "web") -> str:
    """The installed CoNLL-U file of the treebank's `part` ("web" or "wiki")."""
    if part not in PARTS:
        raise ValueError(f"the Turkish treebank has parts {PARTS}, got {part!r}")
    try:
        files = importlib.metadata.files("turkish-treebanks") or []
    except importlib.metadata.PackageNotFoundError:
        raise ModuleNotFoundError(
            "the Turkish Web Treebank comes with the 'turkish-treebanks' package: "
            "pip install turkish-treebanks conllu (from a clone of Refold: pip install -e "
            "\".[treebanks]\")") from None
    for f in files:
        if str(f).replace("\\", "/").endswith(f"data/{part}.conllu"):
            return str(f.locate())
    raise FileNotFoundError(f"turkish-treebanks is installed without data/{part}.conllu")


def sentences(part: str = "web") -> list[Sentence]:
    """Every sentence of the part, in file order (words, universal tags, heads, relations),
    read as any CoNLL-U file is (`examples.parser.treebank.read_conllu`)."""
    return read_conllu(path(part))


def load(part: str = "web") -> tuple[list[Sentence], list[Sentence]]:
    """(train, test): every `TEST_EVERY`-th sentence of the part is a test sentence."""
    every = sentences(part)
    return ([s for i, s in enumerate(every) if i % TEST_EVERY],
            [s for i, s in enumerate(every) if i % TEST_EVERY == 0])
