"""Runs the code of a docs page, as a reader would, top to bottom in one namespace.

A page's fenced blocks run in order (in a fresh temporary folder, which is also the
working directory):

- ```` ```python ````: executed; if a ```` ```text ```` block follows it (blank lines
  between allowed), that is what it prints (`...` stands for any text, as in doctest);
- ```` ```pycon ````: a console session, checked as a doctest (the output shown, an
  exception's last line included);
- any other language (```` ```sh ````, ```` ```py ```` for Python that needs what a test
  cannot have, such as a cluster) is shown only.
"""

from __future__ import annotations

import contextlib
import doctest
import io
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = os.path.join(ROOT, "docs")
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```\s*$", re.S | re.M)
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def blocks(text: str) -> list[tuple[str, str, int, str | None]]:
    """(language, code, line, the printed output shown after it) of each fenced block."""
    found = [(m.group(1), m.group(2), text.count("\n", 0, m.start()) + 2, m.start(), m.end())
             for m in FENCE.finditer(text)]
    out = []
    for i, (lang, code, line, _, end) in enumerate(found):
        shown = None
        if lang == "python" and i + 1 < len(found) and found[i + 1][0] == "text" \
                and not text[end:found[i + 1][3]].strip():
            shown = found[i + 1][1]
        out.append((lang, code, line, shown))
    return out


def code_pages() -> list[str]:
    """The pages (relative to docs/) that hold code to run."""
    pages = []
    for folder, _, files in os.walk(DOCS):
        for name in sorted(files):
            if name.endswith(".md"):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as f:
                    if re.search(r"^```(python|pycon)\s*$", f.read(), re.M):
                        pages.append(os.path.relpath(path, DOCS))
    return sorted(pages)


def run_page(page: str, folder) -> None:
    """Runs the page's code in `folder`; what it registers process-wide (a scheduler:
    docs/guide/extending.md) is unregistered after, so that later tests in the worker
    see the registry as the library ships it."""
    from refold.scheduler.schedules import SCHEDULERS
    registered = dict(SCHEDULERS)
    try:
        _run_page(page, folder)
    finally:
        SCHEDULERS.clear()
        SCHEDULERS.update(registered)


def _run_page(page: str, folder) -> None:
    with open(os.path.join(DOCS, page), encoding="utf-8") as f:
        text = f.read()
    namespace: dict = {"__name__": "__docs__"}
    checker = doctest.OutputChecker()
    with contextlib.chdir(folder):
        for lang, code, line, shown in blocks(text):
            where = f"docs/{page}:{line}"
            if lang == "python":
                printed = io.StringIO()
                with contextlib.redirect_stdout(printed):
                    exec(compile(code, where, "exec"), namespace)
                if shown is not None and not checker.check_output(
                        shown, printed.getvalue(), FLAGS):
                    raise AssertionError(f"{where} printed\n{printed.getvalue()}\n"
                                         f"where the page shows\n{shown}")
            elif lang == "pycon":
                test = doctest.DocTestParser().get_doctest(code, namespace, where, where, line)
                test.globs = namespace  # DocTest copies them: share the page's namespace
                report = io.StringIO()
                runner = doctest.DocTestRunner(optionflags=FLAGS)
                runner.run(test, out=report.write, clear_globs=False)
                if runner.failures:
                    raise AssertionError(report.getvalue())
