"""Nothing outside `scheduler/executor.py` uses the executor's private attributes.

The other loops over a batch's launches (`scheduler.reverse`, `scheduler.xla`), the
compiler's round engines and the tests read the executor through its public surface
(`Executor.compute`, `Executor.launches`: `scheduler.launches`), so the executor can
change inside without breaking them. Checked on the source, with `ast`: an attribute
starting with `_` on an expression that names an executor (`executor`, `ex`,
`self.executor`, `compiler.executor.launches`, ...), any of the executor's (or its
`Launches`') own private attributes on anything but `self` (whatever the variable's
name), the same through `getattr`, `hasattr` or `setattr`, and a private name
imported from `scheduler.executor`.
"""

import ast
import os
import re

from tests.test_layering import LAYERS, ROOT, python_files

EXECUTOR_NAME = re.compile(r"^_?(ex|executor|\w+_executor)$")
HOME = os.path.join(ROOT, "scheduler", "executor.py")
# the classes whose private attributes stay home: (file, class)
OWNERS = [(HOME, "Executor"), (os.path.join(ROOT, "scheduler", "launches.py"), "Launches")]


def private_names(path: str, cls: str) -> set[str]:
    """The private attributes class `cls` of `path` defines: its methods and the
    attributes its methods set on `self`."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    names = {n.name for n in body.body if isinstance(n, ast.FunctionDef)}
    names |= {n.attr for n in ast.walk(body) if isinstance(n, ast.Attribute)
              and isinstance(n.value, ast.Name) and n.value.id == "self"
              and isinstance(n.ctx, ast.Store)}
    return {n for n in names if _private(n)}


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


def private_uses(source: str, owned: frozenset = frozenset()) -> list[str]:
    """The uses of an executor's private attributes in `source`, as source text: on
    an expression naming an executor, or one of the `owned` names (the executor's
    own private attributes) on anything but `self` or `cls`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and _private(node.attr) and (
                _names_an_executor(node.value) or node.attr in owned and not (
                    isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):
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
    owned = frozenset({"_row_lists", "_found"})
    assert private_uses("batched._row_lists(); run.launches._found()", owned) == [
        "batched._row_lists", "run.launches._found"]
    assert private_uses("self._row_lists()", owned) == []


def test_the_owners_private_names_are_found():
    assert {"_loop", "_row_lists", "_replays"} <= private_names(*OWNERS[0])
    assert {"_weights", "_found", "_all_deferrable"} <= private_names(*OWNERS[1])


def test_no_module_outside_the_executor_uses_its_private_attributes():
    files = python_files(*LAYERS, "src", "tests", "benchmarks")
    owned = {path: private_names(path, cls) for path, cls in OWNERS}
    uses = {}
    for path in files:
        if path == HOME:
            continue
        names = frozenset().union(*(n for p, n in owned.items() if p != path))
        with open(path, encoding="utf-8") as f:
            found = private_uses(f.read(), names)
        if found:
            uses[os.path.relpath(path, ROOT)] = found
    assert uses == {}
