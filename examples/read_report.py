"""What reading a data file left out: the examples' readers skip a bad record, count it
and name the first one.

A real file has a bad record now and then; stopping the whole read for it loses a
run, and dropping it silently hides a broken file. So each reader (function names,
molecules, CoNLL-U treebanks) fills a `ReadReport`: how many records it read, how
many it skipped, and where the first skipped one is (`place` says what the number
counts: a line of the file or a record) and why.

>>> report = ReadReport("d.jsonl", place="line")
>>> report.records = 3
>>> report.skip(2, "not JSON")
>>> report.skip(3, "no 'label' field")
>>> print(report)
d.jsonl: 1 of 3 records read, 2 skipped (the first: line 2, not JSON)
>>> report.first_error
'd.jsonl:2: not JSON'
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["ReadReport", "read_json_lines"]


@dataclass
class ReadReport:
    """`records` read from `path`, `skipped` of them, and the `place` number (1-based)
    of the first skipped one and why (None if none was)."""
    path: str
    records: int = 0
    skipped: int = 0
    first_skipped: int | None = None
    first_reason: str | None = None
    place: str = "record"

    def skip(self, number: int, reason: str) -> None:
        """Counts a skipped record; the first one's number and reason are kept."""
        self.skipped += 1
        if self.first_skipped is None:
            self.first_skipped, self.first_reason = number, reason

    @property
    def first_error(self) -> str | None:
        """The first skipped record as `"path:number: reason"` (None if none was)."""
        if self.first_skipped is None:
            return None
        return f"{self.path}:{self.first_skipped}: {self.first_reason}"

    def __str__(self) -> str:
        text = f"{self.path}: {self.records - self.skipped} of {self.records} records read"
        if self.skipped:
            text += (f", {self.skipped} skipped (the first: {self.place} "
                     f"{self.first_skipped}, {self.first_reason})")
        return text


def read_json_lines(path: str, check: Callable[[dict], None]) -> tuple[list[dict], ReadReport]:
    """The records of a (gzipped, if its name ends in .gz) JSON-lines file that
    `check` accepts, and the report of those skipped: a line that is not JSON, or
    for which `check` raises a `ValueError` (its message is the reason).

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "d.jsonl")
    >>> with open(path, "w") as f:
    ...     _ = f.write('{"x": 1}\\n{"x": "one"}\\nnot JSON\\n')
    >>> def check(r):
    ...     if not isinstance(r["x"], int):
    ...         raise ValueError(f"x {r['x']!r} is not an int")
    >>> records, report = read_json_lines(path, check)
    >>> records, report.skipped, report.first_reason
    ([{'x': 1}], 2, "x 'one' is not an int")
    """
    report = ReadReport(path, place="line")
    records = []
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            report.records += 1
            try:
                record = json.loads(line)
                check(record)
            except ValueError as e:  # json.JSONDecodeError is a ValueError
                report.skip(number, str(e))
                continue
            records.append(record)
    return records, report
