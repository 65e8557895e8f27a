"""Every docstring example of the library runs and prints what it shows.

The modules are imported by their installed names (`refold.blocks.block`, ...), as a
user imports them; pytest's own `--doctest-modules` would import the root folders
under their bare names (`blocks.block`), a second copy of each module.
"""

import doctest
import importlib
import os
import pkgutil

import pytest

LAYERS = ("blocks", "compiler", "scheduler", "models", "serving", "examples")
FLAGS = doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS


def library_modules() -> list[str]:
    import refold
    names = ["refold"] + [f"refold.{m.name}" for m in pkgutil.iter_modules(
        [os.path.dirname(refold.__file__)]) if not m.ispkg]   # refold.compat, ...
    for layer in LAYERS:
        package = importlib.import_module(f"refold.{layer}")
        names.append(package.__name__)
        names += [m.name for m in pkgutil.walk_packages(package.__path__, f"{package.__name__}.")]
    return names


def with_examples(names: list[str]) -> list[str]:
    """The modules whose source shows a `>>>` example (read, not imported)."""
    out = []
    for name in names:
        spec = importlib.util.find_spec(name)
        with open(spec.origin, encoding="utf-8") as f:
            if ">>>" in f.read():
                out.append(name)
    return out


MODULES = with_examples(library_modules())


def test_the_library_has_docstring_examples_in_every_layer():
    assert set(LAYERS) <= {m.split(".")[1] for m in MODULES if m != "refold"}


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    tests = finder.find(module, name)
    assert tests, f"{name} shows >>> but no docstring example was found"
    for test in tests:
        runner.run(test)
    failed, attempted = runner.summarize(verbose=False)
    assert failed == 0, f"{failed} of {attempted} examples failed in {name} (see above)"
