"""A Griffe extension for the API pages: docstring examples shown as code.

Refold's docstrings hold runnable `>>>` examples (doctested by the test suite), often in
their body rather than in an `Example:` section. Markdown would read their output as
text (and `[1.0, 2.0]` as a link), so each run of example lines is fenced as a `pycon`
block before the docstring is rendered.
"""

from __future__ import annotations

import griffe


def fence_examples(text: str) -> str:
    """Wraps every run of lines starting with `>>>` (with the `...` continuations and the
    output that follow, up to a blank line) in a ```` ```pycon ```` fence."""
    lines, out, i = text.split("\n"), [], 0
    inside_fence = False
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("```"):
            inside_fence = not inside_fence
        if inside_fence or not line.lstrip().startswith(">>>"):
            out.append(line)
            i += 1
            continue
        indent = line[:len(line) - len(line.lstrip())]
        block = []
        while i < len(lines) and lines[i].strip():
            block.append(lines[i])
            i += 1
        out += [f"{indent}```pycon", *block, f"{indent}```"]
    return "\n".join(out)


class DoctestFences(griffe.Extension):
    def on_object(self, *, obj, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = fence_examples(obj.docstring.value)
