"""The README's set-up commands are CI's, and its quick start runs, learns and prints what
its comments say.

The longer sections moved to the documentation site; their code runs in `tests/docs/`
(saving, resuming and serving: `docs/guide/saving.md`).
"""

from __future__ import annotations

import contextlib
import io
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def readme() -> str:
    with open(os.path.join(ROOT, "README.md")) as f:
        return f.read()


def test_the_readme_has_exactly_two_setup_commands():
    setup = readme().split("## Set up", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```sh\n(.*?)```", setup, re.S)
    assert [c.strip() for c in commands] == [
        'python -m pip install ".[examples]" && python -m refold.examples.sentiment',
        'python -m pip install -e ".[test]" && python -m pytest -q -n auto --dist loadfile']


def quick_start() -> str:
    return re.search(r"## Quick start\n\n```python\n(.*?)```", readme(), re.S).group(1)


def test_the_quick_start_runs_learns_and_its_comments_are_true(tmp_path, monkeypatch):
    """Pasted whole, the block runs to its end (its type error is caught and printed)."""
    code = quick_start()
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})
    printed = out.getvalue()
    assert "PyObjectType() -> TensorType((2,), 'float32')" in printed
    # the model visibly learns: well above always guessing the majority class
    claimed = re.search(r"# (test accuracy (\d+)% \(always guessing the majority class: "
                        r"(\d+)%\))", code)
    got = re.search(r"test accuracy (\d+)% \(always guessing the majority class: (\d+)%\)",
                    printed)
    assert got, printed
    accuracy, majority = int(got.group(1)), int(got.group(2))
    assert majority == int(claimed.group(3)) and majority <= 60
    assert accuracy >= majority + 30 and abs(accuracy - int(claimed.group(2))) <= 4
    # the type error shown is the one raised, word for word
    error_comment = code.rstrip("\n").split("\n")[-1]
    assert error_comment.startswith("# TypeError: ")
    assert error_comment[2:] in printed.splitlines(), printed


def test_the_quick_start_is_the_docs_quick_start():
    """The README's model and data are those the quick-start page explains step by step."""
    code = quick_start()
    with open(os.path.join(ROOT, "docs", "getting-started", "quick-start.md")) as f:
        page = f.read()
    for line in ("leaf = td.Scalar() >> td.Function(lambda x: x[:, None]) >> td.FC(16)",
                 "pair = td.Record((tree(), tree())) >> td.Concat() >> td.FC(16)",
                 "trees = [random_tree() for _ in range(1200)]",
                 "model.fit(trees[:1000], labels[:1000], batch_size=32, epochs=10, verbose=0)"):
        assert line in code and line in page, line
