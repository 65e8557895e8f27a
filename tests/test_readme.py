"""The README's quick start runs as written and prints what its comments say."""

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


def test_the_quick_start_runs_and_its_comments_are_true():
    code = re.search(r"## Quick start\n\n```python\n(.*?)```", readme(), re.S).group(1)
    *body, bad_line, error_comment = code.rstrip("\n").split("\n")
    assert error_comment.startswith("# TypeError: ")
    body = "\n".join(body).replace("epochs=5)", "epochs=5, verbose=0)").replace(
        "model.predict([(3.0, -1.0)])", "model.predict([(3.0, -1.0)], verbose=0)")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(body, "README.md", "exec"), {})
    printed = out.getvalue()
    assert "PyObjectType() -> TensorType((2,), 'float32')" in printed
    try:
        exec(bad_line, {"td": __import__("refold"), "tf": __import__("tensorflow")})
    except TypeError as e:
        assert str(e) == error_comment[len("# TypeError: "):]
    else:
        raise AssertionError("the README's type error example raised nothing")


def test_the_saving_section_runs_on_the_quick_start_model(tmp_path, monkeypatch):
    quick = re.search(r"## Quick start\n\n```python\n(.*?)```", readme(), re.S).group(1)
    section = readme().split("## Saving, resuming and serving", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    *body, unsafe_line, error_comment = code.rstrip("\n").split("\n")
    assert error_comment.startswith("# UnsafeConfigError: ") and error_comment.endswith(" ...")
    quiet = {"epochs=5)": "epochs=5, verbose=0)", "callbacks=[": "verbose=0, callbacks=[",
             ".predict(trees[:4])": ".predict(trees[:4], verbose=0)",
             "model.predict([(3.0, -1.0)])": "model.predict([(3.0, -1.0)], verbose=0)"}
    program = "\n".join([*quick.rstrip("\n").split("\n")[:-2], *body])
    for old, new in quiet.items():
        program = program.replace(old, new)
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(program, "README.md", "exec"), scope)
    assert out.getvalue().rstrip().endswith("True")
    assert sorted(os.listdir(tmp_path)) == ["best.keras", "tree.keras"]  # backup: deleted
    assert len(scope["history"].history["val_loss"]) == 3
    from refold.blocks.serialization import UnsafeConfigError
    try:
        exec(unsafe_line, scope)
    except UnsafeConfigError as e:
        assert str(e).startswith(error_comment[len("# UnsafeConfigError: "):-len(" ...")])
    else:
        raise AssertionError("loading the quick start in safe mode raised nothing")


def test_the_serving_section_runs_on_the_quick_start_model(tmp_path, monkeypatch):
    quick = re.search(r"## Quick start\n\n```python\n(.*?)```", readme(), re.S).group(1)
    section = readme().split("## Serving", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    *body, bad_line, error_comment = code.rstrip("\n").split("\n")
    assert error_comment.startswith("# InputError: ")
    program = "\n".join([*quick.rstrip("\n").split("\n")[:-2], *body]).replace(
        "epochs=5)", "epochs=1, verbose=0)").replace(
        "model.predict([(3.0, -1.0)])", "model.predict([(3.0, -1.0)], verbose=0)")
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(program, "README.md", "exec"), scope)
    assert out.getvalue().rstrip().endswith("(3, 2)")
    np = scope["np"]
    np.testing.assert_allclose(scope["logits"],
                               scope["model"].predict([(1.0, -2.0)], verbose=0)[0], atol=1e-5)
    from refold.blocks.errors import InputError
    try:
        exec(bad_line, scope)
    except InputError as e:
        assert str(e) == error_comment[len("# InputError: "):]
    else:
        raise AssertionError("the README's bad request raised nothing")
