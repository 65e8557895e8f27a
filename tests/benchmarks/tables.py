"""What the benchmark smoke tests read from a benchmark's output: `rate`, `table`."""

from __future__ import annotations

import math


def rate(x) -> bool:
    """Whether `x` is a measured rate: a finite positive float."""
    return isinstance(x, float) and math.isfinite(x) and x > 0


def table(text: str, header: str) -> list[str]:
    """The rows of the markdown table whose header line starts with `header`.

    >>> table("x\\n| a | b |\\n|---|---|\\n| 1 | 2 |\\nend", "| a |")
    ['| 1 | 2 |']
    """
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    assert lines[start + 1].startswith("|---")
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    return rows
