"""The core library needs TensorFlow, Keras, NumPy, Numba and greenlet only; the examples'
tools are extras."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

if sys.version_info >= (3, 11):
    import tomllib
else:  # the `test` extra brings tomli, the same parser, to Python 3.10
    import tomli as tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def project(table: str = "project") -> dict:
    """A table of pyproject.toml (`[project]` by default)."""
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)[table]


def test_the_core_dependencies_are_tensorflow_keras_numpy_numba_and_greenlet():
    # greenlet: an example paused between rounds of an Unfold (compiler.rounds.context)
    names = [d.split(">")[0].split("=")[0].strip() for d in project()["dependencies"]]
    assert sorted(names) == ["greenlet", "keras", "numba", "numpy", "tensorflow"]


def test_plotting_and_tensorboard_are_the_examples_extra_and_the_tests_pull_it_in():
    extras = project()["optional-dependencies"]
    assert sorted(d.split(">")[0] for d in extras["examples"]) == ["matplotlib", "tensorboard"]
    assert "refold[examples]" in extras["test"]


def test_rdkit_is_the_molecules_extra_and_the_tests_pull_it_in():
    extras = project()["optional-dependencies"]
    assert [d.split(">")[0] for d in extras["molecules"]] == ["rdkit"]
    assert "refold[molecules]" in extras["test"]


def test_the_library_imports_without_matplotlib_or_tensorboard():
    # Keras itself imports matplotlib when it is installed (keras.visualization, in a
    # try/except), so "not in sys.modules" cannot hold in an environment with the extras.
    # Instead make both unimportable, as on a machine without them: a Refold module that
    # imports either at module level then fails here.
    script = textwrap.dedent("""
        import sys
        for name in ("matplotlib", "tensorboard", "rdkit"):
            sys.modules[name] = None  # `import name` now raises ImportError
        import refold, refold.models, refold.scheduler, refold.serving  # noqa: F401
        from refold import compiler
        for name in compiler.__all__:  # imported on first use
            getattr(compiler, name)
        print(sum(m.startswith("refold.") for m in sys.modules), "modules")
    """)
    run = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert int(run.stdout.split()[0]) > 4


def test_the_turkish_treebank_is_the_treebanks_extra_and_the_tests_pull_it_in():
    extras = project()["optional-dependencies"]
    assert sorted(d.split(">")[0] for d in extras["treebanks"]) == ["conllu",
                                                                    "turkish-treebanks"]
    assert "refold[treebanks]" in extras["test"]
