"""Nothing outside `scheduler/executor.py` uses the executor's private attributes.

The other loops over a batch's launches (`scheduler.reverse`, `scheduler.xla`), the
compiler's round engines and the tests read the executor through its public surface
(`Executor.compute`, `Executor.launches`: `scheduler.launches`), so the executor can
change inside without breaking them. Checked on the source, with `ast`: an attribute
starting with `_` on an expression that names an executor (`executor`, `ex`,
`self.executor`, `compiler.executor.launches`, ...), the same through `getattr`,
`hasattr` or `setattr`, and a private name imported from `scheduler.executor`.
"""

import ast
import os
import re

from tests.test_layering import LAYERS, ROOT, python_files

EXECUTOR_NAME = re.compile(r"^_?(ex|executor|\w+_executor)$")
HOME = os.path.join(ROOT, "scheduler", "executor.py")


def _private(name) -> bool:
    return isinstance(name, str) and name.startswith("_") and not name.startswith("__")


def _names_an_executor(node) -> bool:
    """Whether an expression's chain (`a.b(...).c[...]`) passes through an executor's name."""
    while True:
        if isinstance(node, ast.Name):
            return bool(EXECUTOR_NAME.match(node.id))
        if isinstance(node, ast.Attribute):
            if EXECUTOR_NAME.match(node.attr):
                return True
            node = node.value
        elif isinstance(node, (ast.Call, ast.Subscript)):
            node = node.func if isinstance(node, ast.Call) else node.value
        else:
            return False


def private_uses(source: str) -> list[str]:
    """The uses of an executor's private attributes in `source`, as source text."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and _private(node.attr) \
                and _names_an_executor(node.value):
            found.append(ast.unparse(node))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("getattr", "hasattr", "setattr") and len(node.args) >= 2 \
                and isinstance(node.args[1], ast.Constant) and _private(node.args[1].value) \
                and _names_an_executor(node.args[0]):
            found.append(ast.unparse(node))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").endswith(
                "scheduler.executor"):
            found += [f"from {node.module} import {a.name}" for a in node.names
                      if _private(a.name)]
    return found


def test_the_check_finds_each_kind_of_private_use():
    snippet = """
executor._loop(bufs)
self.executor._call(o, args, n)
compiler.executor.launches._weights
getattr(ex, "_loop_weights", None)
from refold.scheduler.executor import _parts
"""
    assert len(private_uses(snippet)) == 5
    public = "executor.launches.call(o, args, n); self._executor_choice = 1; xla._loop(b)"
    assert private_uses(public) == []


def test_no_module_outside_the_executor_uses_its_private_attributes():
    files = python_files(*LAYERS, "refold", "tests", "benchmarks")
    uses = {}
    for path in files:
        if path == HOME:
            continue
        with open(path, encoding="utf-8") as f:
            found = private_uses(f.read())
        if found:
            uses[os.path.relpath(path, ROOT)] = found
    assert uses == {}
