"""Refold as a stranger's project meets it: a wheel (not this checkout) installed into a
fresh virtual environment, used from a folder whose own modules carry the generic names
Refold's layers have (`models.py`, `scheduler.py`, `compiler.py`, `blocks.py`,
`serving.py`, an `examples` package). The README's quick start runs there, saves its
model, and a fresh process with only the quick start's imports loads it and predicts
the same; the sentiment example runs from the wheel on its shipped data."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import sysconfig
import zipfile

import numpy as np
import pytest

from tests.test_dependencies import project
from tests.test_readme import quick_start

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAYERS = ("blocks", "compiler", "scheduler", "models", "serving", "examples")


def test_the_package_list_is_every_folder_of_the_layers():
    config = project("tool")["setuptools"]
    folders = sorted(
        "refold." + os.path.relpath(d, ROOT).replace(os.sep, ".")
        for layer in LAYERS for d, _, files in os.walk(os.path.join(ROOT, layer))
        if "__init__.py" in files)
    assert sorted(p for p in config["packages"] if p != "refold") == folders
    assert config["package-dir"] == {"refold": "src/refold",
                                     **{f"refold.{layer}": layer for layer in LAYERS}}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out),
                    ROOT], check=True, capture_output=True, timeout=600)
    (path,) = [os.path.join(out, f) for f in os.listdir(out) if f.endswith(".whl")]
    return path


def test_the_wheel_installs_one_top_level_name_and_the_examples_data(wheel):
    with zipfile.ZipFile(wheel) as f:
        names = f.namelist()
    assert {n.split("/")[0] for n in names} == {"refold", *(
        n.split("/")[0] for n in names if ".dist-info/" in n)}
    for data in ("refold/examples/sentiment/data/train.txt",
                 "refold/examples/parser/data/train.conllu",
                 "refold/examples/molecules/data/solubility.train.sdf.gz",
                 "refold/examples/function_names/data/functions.jsonl.gz",
                 "refold/examples/bugs/data/bugs.jsonl.gz",
                 "refold/blocks/__init__.py", "refold/compat.py"):
        assert data in names
    assert not any(n.startswith(("refold/tests/", "refold/benchmarks/")) for n in names)


def imports_of(code: str) -> str:
    return "\n".join(line for line in code.splitlines()
                     if line.startswith(("import ", "from ")))


def see_the_running_interpreters_packages(python: str) -> None:
    """Lets the venv of `python` import what the interpreter running the tests can:
    `--system-site-packages` shows it the *base* interpreter's packages only, and when
    the suite runs from a venv its dependencies are in that venv's site-packages. A .pth
    file in the new venv lists them after its own (its wheel of Refold comes first); a
    .pth file in those folders (an editable install of this checkout) is not run."""
    ours = list(dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib")))
    theirs = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()"
                             "['purelib'])"], check=True, capture_output=True, text=True,
                            timeout=300).stdout.strip()
    with open(os.path.join(theirs, "_running_interpreter.pth"), "w") as f:
        f.write("".join(f"{path}\n" for path in ours))


@pytest.fixture(scope="module")
def user(tmp_path_factory, wheel):
    """A fresh venv with the wheel, and a project folder whose own modules shadow every
    generic name: `(python, folder, env)`."""
    base = tmp_path_factory.mktemp("user")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                   check=True, timeout=300)
    python = str(venv / "bin" / "python")
    see_the_running_interpreters_packages(python)
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--ignore-installed",
                    wheel], check=True, capture_output=True, timeout=600)
    folder = base / "project"
    folder.mkdir()
    for name in ("models", "scheduler", "compiler", "blocks", "serving"):
        (folder / f"{name}.py").write_text(f"WHOSE = {'the project own ' + name!r}\n")
    (folder / "examples").mkdir()
    (folder / "examples" / "__init__.py").write_text("WHOSE = 'the user project'\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    return python, folder, env


def run(user, code: str, *args: str) -> str:
    python, folder, env = user
    done = subprocess.run([python, "-c", code, *args], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_user_venv_imports_the_dependencies_the_tests_run_with(user):
    """The same files as this interpreter's, whether it is the system's Python or a venv
    (where `--system-site-packages` alone would show the base interpreter's, or none)."""
    names = ("tensorflow", "keras", "numpy", "numba", "greenlet", "matplotlib")
    code = f"import importlib.util\nfor n in {names!r}: print(importlib.util.find_spec(n).origin)"
    theirs = run(user, code).split()
    assert theirs == [importlib.util.find_spec(n).origin for n in names]


def test_the_quick_start_saves_and_a_fresh_process_loads_it_from_the_wheel(user):
    code = quick_start()
    here = run(user, "import refold, os; print(refold.__file__)")
    assert "site-packages" in here and os.path.realpath(ROOT) not in os.path.realpath(here)
    trained = run(user, code + "\nimport json, pickle\nmodel.save('quick.keras')\n"
                  "pickle.dump(trees[:6], open('trees.pkl', 'wb'))\n"
                  "print(json.dumps(model.predict(trees[:6], verbose=0).tolist()))\n"
                  "import models, scheduler, compiler, blocks, serving, examples\n"
                  "print(models.WHOSE, examples.WHOSE)\n")
    *_, before, whose = trained.strip().splitlines()
    assert whose == "the project own models the user project"
    loaded = run(user, imports_of(code) + "\nimport json, keras, pickle\n"
                 "trees = pickle.load(open('trees.pkl', 'rb'))\n"
                 "model = keras.models.load_model('quick.keras', safe_mode=False)\n"
                 "print(json.dumps(model.predict(trees, verbose=0).tolist()))\n")
    np.testing.assert_allclose(np.array(eval(loaded.strip().splitlines()[-1])),
                               np.array(eval(before)), rtol=1e-6)


def test_an_example_runs_from_the_wheel_on_its_shipped_data(user, tmp_path):
    python, folder, env = user
    done = subprocess.run(
        [python, "-m", "refold.examples.sentiment", "--epochs", "1", "--train-size", "16",
         "--eval-size", "8", "--models", "bag_of_words", "--no-plot", "--verbose", "0",
         "--out", str(tmp_path)], cwd=folder, env=env, capture_output=True, text=True,
        timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "site-packages/refold/examples/sentiment/data" in done.stdout


def test_from_the_clone_s_root_python_runs_the_installed_package(user):
    """The README's main job runs from the clone's root: `refold` there is the wheel's, not
    the checkout's source (no `refold/` at the root to shadow it, no path trick)."""
    python, _, env = user
    done = subprocess.run([python, "-c", "import refold.examples, refold; "
                           "print(refold.__file__); print(refold.examples.__file__)"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    for path in done.stdout.split():
        assert "site-packages" in path and os.path.realpath(ROOT) not in os.path.realpath(path)
