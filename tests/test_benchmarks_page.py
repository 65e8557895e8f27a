"""BENCHMARKS.md is a current reference: short, undated headings, every cited section exists.

Code, docstrings and docs cite its sections by title, `BENCHMARKS.md, "The replay threshold"`
(a title may be cited by its first words: "the hand-off" for "The hand-off outside the
traced step"). A citation of a section that is gone fails here.
"""

from __future__ import annotations

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, "BENCHMARKS.md")
# `BENCHMARKS.md, "Title"` / `BENCHMARKS.md`, "Title" / (BENCHMARKS.md, # "Title" across a
# comment's line break; the title itself may be broken across lines (and comment markers)
CITATION = re.compile(r'BENCHMARKS\.md`?\s*,\s*(?:#\s*)?"([^"]{1,200})"')
THIS = os.path.basename(__file__)
SKIP_DIRS = {".git", "site", "__pycache__", "runs", "build", "dist"}


def headings() -> list[str]:
    with open(PAGE) as f:
        return [line.lstrip("#").strip() for line in f if re.match(r"#{1,4} ", line)]


def normal(title: str) -> str:
    return " ".join(re.sub(r"\s#\s", " ", title).split()).lower()


def citations() -> list[tuple[str, str]]:
    """(where, cited title) for every citation in the repository's Python and Markdown."""
    found = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        for name in files:
            if not name.endswith((".py", ".md")) or name in ("BENCHMARKS.md", THIS):
                continue
            path = os.path.join(folder, name)
            with open(path, encoding="utf-8") as f:
                text = f.read()
            for m in CITATION.finditer(text):
                line = text.count("\n", 0, m.start()) + 1
                found.append((f"{os.path.relpath(path, ROOT)}:{line}", normal(m.group(1))))
    return found


def test_every_cited_section_exists():
    titles = [normal(h) for h in headings()]
    cited = citations()
    assert len(cited) >= 20  # the code cites it a lot: a broken pattern would find nothing
    missing = [(where, t) for where, t in cited if not any(h.startswith(t) for h in titles)]
    assert not missing, f"BENCHMARKS.md has no section titled (or starting) so: {missing}"


def test_the_citation_pattern_reads_citations_across_lines():
    text = '# measured (BENCHMARKS.md, "The loop\'s\n    # backward pass replayed").'
    assert [normal(m.group(1)) for m in CITATION.finditer(text)] == [
        "the loop's backward pass replayed"]


def test_the_page_is_short_and_has_no_diary_headings():
    with open(PAGE) as f:
        text = f.read()
    # 600 lines, and 20 for the figures the docstrings handed over (issue 47)
    assert len(text.splitlines()) <= 620
    dated = [h for h in headings()
             if re.search(r"\b20\d\d-\d\d-\d\d\b|\bcommit\b|previous stop|morning|afternoon|"
                          r"evening|night", h, re.I)]
    assert not dated, dated


def test_no_path_outside_the_repository_in_the_page_or_the_code():
    outside = re.compile(r"/work/|\.\./shared|\bshared/peers|~/\.?refold|/home/")
    bad = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        for name in files:
            if name.endswith((".py", ".md", ".toml", ".yml", ".sh")):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as f:
                    for i, line in enumerate(f, 1):
                        if outside.search(line) and name != THIS:
                            bad.append(f"{os.path.relpath(path, ROOT)}:{i}: {line.strip()}")
    assert not bad, bad


def test_every_table_names_its_command():
    """Each section with figures gives the command that regenerates them."""
    with open(PAGE) as f:
        sections = re.split(r"\n(?=## )", f.read())
    for section in sections[2:]:  # the intro and "How to read these figures" have none
        assert re.search(r"python\s+-m\s", section), section.splitlines()[0]


# A figure with its unit, a speed-up, or a machine's name.
FIGURE = re.compile(r"\d(?:\.\d+)? ?(?:ms|µs|us)\b|\d(?:\.\d+)?x\b|\bEPYC\b|\bXeon\b")
# Docstrings being reworded on another branch (issue 47), which the merge brings in line.
REWORDED_ELSEWHERE = {"compiler/model.py"}


def test_the_library_s_docstrings_give_reasons_and_leave_the_figures_here():
    import ast
    found = []
    for layer in ("blocks", "compiler", "scheduler", "models", "serving", "src"):
        for folder, dirs, files in os.walk(os.path.join(ROOT, layer)):
            dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
            for name in files:
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, ROOT)
                if not name.endswith(".py") or rel in REWORDED_ELSEWHERE:
                    continue
                with open(path, encoding="utf-8") as f:
                    tree = ast.parse(f.read(), path)
                for node in ast.walk(tree):
                    if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                         ast.AsyncFunctionDef)):
                        doc = ast.get_docstring(node) or ""
                        found += [f"{rel}: {m.group(0)}" for m in FIGURE.finditer(doc)]
    assert found == []
    assert FIGURE.search("costs 130 us a call") and FIGURE.search("1.5x faster")
