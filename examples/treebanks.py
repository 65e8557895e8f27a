"""Reading CoNLL-U treebanks with the `conllu` library, leaving malformed sentences out.

Real files have bad lines now and then. A read stops for nothing: each word line is
parsed by `conllu` on its own, a sentence with a malformed line (not ten tab-separated
columns, an ID or HEAD that is not an integer, an empty FORM, no UPOS, words not
numbered 1, 2, ...) is left out, and the `Reading` says how many were and where the
first one is, so a user can fix the file or accept the loss. Multiword-token lines
(`1-2`) and empty nodes (`1.1`) are skipped, as Universal Dependencies files need.
Sentences come as the parser's `Sentence` (words, tags, heads, relations).

>>> rows = ["1 the _ DET _ _ 2 det _ _", "2 dog _ NOUN _ _ 0 root _ _", "",
...         "1 a _ DET", "2 cat _ NOUN _ _ 0 root _ _"]
>>> reading = parse("\\n".join(r.replace(" ", "\\t") for r in rows), "f.conllu")
>>> [s.words for s in reading.sentences], reading.skipped
([['the', 'dog']], 1)
>>> reading.first_error
'f.conllu:4: expected 10 tab-separated columns, got 4'
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from refold.examples.parser.treebank import Sentence
from refold.examples.read_report import ReadReport

__all__ = ["Reading", "parse", "read"]


@dataclass
class Reading(ReadReport):
    """The well-formed sentences of a file, and what was left out (a `ReadReport`
    whose records are sentences, numbered by the line of the first malformed one:
    `first_error` is `"file:line: message"`, None if none was left out)."""

    sentences: list[Sentence] = field(default_factory=list)
    place: str = "line"

    def summary(self) -> str:
        """One line for a user: the sentences read and those left out."""
        text = f"{len(self.sentences)} sentences"
        if self.skipped:
            text += (f", {self.skipped} malformed left out (the first at "
                     f"{self.first_error})")
        return text


class _MalformedLineError(ValueError):
    def __init__(self, line: int, message: str):
        super().__init__(message)
        self.line = line


def _word(number: int, text: str) -> dict | None:
    """The fields of one word line (None for a multiword token or an empty node)."""
    from conllu.parser import DEFAULT_FIELDS, ParseException, parse_line
    columns = text.split("\t")
    if len(columns) != len(DEFAULT_FIELDS):
        raise _MalformedLineError(number, f"expected {len(DEFAULT_FIELDS)} tab-separated columns, "
                                 f"got {len(columns)}")
    try:
        token = parse_line(text, DEFAULT_FIELDS)
    except ParseException as e:
        raise _MalformedLineError(number, str(e)) from None
    if not isinstance(token["id"], int):
        return None
    if not token["form"]:
        raise _MalformedLineError(number, "FORM is empty")
    if token["upos"] in (None, "_"):
        raise _MalformedLineError(number, "UPOS is missing")
    if not isinstance(token["head"], int):
        raise _MalformedLineError(number, f"HEAD must be an integer, got {columns[6]!r}")
    return token


def _sentence(lines: list[tuple[int, str]]) -> Sentence:
    numbered = [(n, _word(n, t)) for n, t in lines if not t.startswith("#")]
    words = []
    for n, w in numbered:
        if w is not None:
            if w["id"] != len(words) + 1:
                raise _MalformedLineError(
                    n, f"word {w['id']} where word {len(words) + 1} was expected")
            words.append(w)
    return Sentence([w["form"] for w in words], [w["upos"] for w in words],
                    [w["head"] for w in words], [w["deprel"] or "_" for w in words])


def _blocks(text: str):
    """Each sentence's lines, numbered from 1 in the file."""
    block: list[tuple[int, str]] = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            block.append((number, line.rstrip("\r\n")))
        elif block:
            yield block
            block = []
    if block:
        yield block


def parse(text: str, source: str = "<text>") -> Reading:
    """The sentences of CoNLL-U `text`; `source` names it in the first error."""
    try:
        import conllu  # noqa: F401
    except ModuleNotFoundError:
        raise ModuleNotFoundError("reading CoNLL-U needs the 'conllu' package: pip install "
                                  "conllu (from a clone of Refold: pip install -e "
                                  "\".[treebanks]\")") from None
    reading = Reading(source)
    for lines in _blocks(text):
        reading.records += 1
        try:
            sentence = _sentence(lines)
        except _MalformedLineError as e:
            reading.skip(e.line, str(e))
            continue
        if len(sentence):
            reading.sentences.append(sentence)
    return reading


def read(path: str | os.PathLike) -> Reading:
    """The sentences of a CoNLL-U file (see `parse`)."""
    with open(path, encoding="utf-8") as f:
        return parse(f.read(), os.fspath(path))
