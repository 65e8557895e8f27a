"""A script run on a checkout's code, not the installed one: `python checkout.py ROOT SCRIPT`.

The repository keeps its layers as folders at its root and the `refold` package in
`src/refold`; an install maps them under `refold` (pyproject.toml's package-dir). A
benchmark that compares two trees (`benchmarks.before_after`: this checkout against a
commit exported to a temporary folder) must import each tree's own code, whatever is
installed, so this finder maps exactly `refold` and its six layer names to the folders of
one tree, ahead of every other finder. Standard library only: it runs before anything of
the tree is importable. Trees from before `src/` (with `refold/` at their root) map too.

>>> import os, sys
>>> root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
>>> finder = CheckoutFinder(root)
>>> finder.find_spec("refold.blocks").origin == os.path.join(root, "blocks", "__init__.py")
True
>>> finder.find_spec("refold.tests") is None  # only the layers
True
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import runpy
import sys

LAYERS = ("blocks", "compiler", "scheduler", "models", "serving", "examples")


class CheckoutFinder(importlib.abc.MetaPathFinder):
    """Finds `refold` and `refold.<layer>` in the checkout at `root`; nothing else."""

    def __init__(self, root: str):
        self.root = os.path.abspath(root)

    def folder(self, fullname: str) -> str | None:
        parts = fullname.split(".")
        if parts == ["refold"]:
            for package in (os.path.join(self.root, "src", "refold"),
                            os.path.join(self.root, "refold")):
                if os.path.isdir(package):
                    return package
        elif len(parts) == 2 and parts[0] == "refold" and parts[1] in LAYERS:
            return os.path.join(self.root, parts[1])
        return None

    def find_spec(self, fullname, path=None, target=None):
        folder = self.folder(fullname)
        init = folder and os.path.join(folder, "__init__.py")
        if not init or not os.path.isfile(init):
            return None
        return importlib.util.spec_from_file_location(
            fullname, init, submodule_search_locations=[folder])


def use(root: str) -> None:
    """Makes `root`'s code what `import refold` (and `tests`, `benchmarks`) import here."""
    sys.path.insert(0, os.path.abspath(root))
    sys.meta_path.insert(0, CheckoutFinder(root))


def main(argv: list[str]) -> None:
    import argparse
    parser = argparse.ArgumentParser(
        prog="python benchmarks/checkout.py",
        description="Runs SCRIPT (as __worker__, with ARGS) on the code of the checkout at "
                    "ROOT, whatever is installed.")
    parser.add_argument("root", metavar="ROOT")
    parser.add_argument("script", metavar="SCRIPT")
    parser.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS")
    args = parser.parse_args(argv)
    use(args.root)
    sys.argv = [args.script, *args.args]
    runpy.run_path(args.script, run_name="__worker__")


if __name__ == "__main__":
    main(sys.argv[1:])
