"""Private TensorFlow and Keras names appear in `src/refold/compat.py` only.

Refold must keep working across the TensorFlow and Keras versions it declares, and a
private interface may change in any release; so every use of one sits behind a
function (or the `AutoJitOff` mixin) in `refold.compat`, which names what it wraps and
what happens where it is missing (`tests/test_compat.py` runs each on the installed
versions). Checked on every library file (the layers, `src/refold`; compat aside):

- no import of `tensorflow.python`, `tensorflow.core` or `keras.src` (nor such a
  module name in a string), no `tf.compat.v1` chain;
- no `x._name` (x not `self`/`cls`), nor `getattr(x, "_name")`, where `_name` is
  defined nowhere in the library: it can then only be TensorFlow's or Keras';
- at run time, no library class that subclasses a TensorFlow or Keras class defines
  an underscored method, or sets or reads an underscored attribute, that its
  TensorFlow or Keras base also has (a private override, like Keras'
  `_resolve_auto_jit_compile`, or a read of its state, like `self._loss_tracker`);
  compat's mixins are the one way to override one.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import os
import re
import textwrap

from tests.test_layering import LAYERS, ROOT, python_files

COMPAT = os.path.join(ROOT, "src", "refold", "compat.py")
PRIVATE_MODULES = ("tensorflow.python", "tensorflow.core", "keras.src")
MODULE_STRING = re.compile(rf"^({'|'.join(map(re.escape, PRIVATE_MODULES))})(\.\w+)*$")
V1 = ("tf.compat.v1", "tensorflow.compat.v1")
FRAMEWORKS = ("tensorflow", "keras", "tf_keras")
# Python's own underscored API (namedtuples), which rule (b) would otherwise take
# for a framework's
PYTHON_API = {"_fields", "_asdict", "_replace", "_make", "_field_defaults"}


def library_files() -> list[str]:
    """Every Python file of the library: the layers and `src/refold`."""
    return python_files(*LAYERS, os.path.join("src", "refold"))


def _tree(path: str) -> ast.Module:
    with open(path, encoding="utf-8") as f:
        return ast.parse(f.read(), path)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def defined_names(tree: ast.AST) -> set[str]:
    """The names a module defines: functions, classes, assigned names and attributes,
    arguments, keyword arguments, imported aliases."""
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(n.name)
        elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            out.add(n.id)
        elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
            out.add(n.attr)
        elif isinstance(n, ast.arg):
            out.add(n.arg)
        elif isinstance(n, ast.keyword) and n.arg:
            out.add(n.arg)
        elif isinstance(n, ast.alias):
            out.add(n.asname or n.name.split(".")[-1])
    return out


def private_imports(tree: ast.AST) -> list[str]:
    """Rule (a): imports of private modules, such names in strings, `tf.compat.v1`."""
    found = []
    for n in ast.walk(tree):
        names = [a.name for a in n.names] if isinstance(n, ast.Import) else \
            [n.module or ""] if isinstance(n, ast.ImportFrom) and not n.level else []
        found += [f"{n.lineno}: import {m}" for m in names
                  if m.startswith(PRIVATE_MODULES)]
        if isinstance(n, ast.Constant) and isinstance(n.value, str) \
                and MODULE_STRING.match(n.value):
            found.append(f"{n.lineno}: {n.value!r}")
        if isinstance(n, ast.Attribute) and ast.unparse(n) in V1:
            found.append(f"{n.lineno}: {ast.unparse(n)}")
    return found


def foreign_reaches(tree: ast.AST, library_names: set[str]) -> list[str]:
    """Rule (b): `x._name` (or `getattr(x, "_name")`) with `_name` not the library's."""
    found = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute) and _private(n.attr) \
                and not (isinstance(n.value, ast.Name) and n.value.id in ("self", "cls")) \
                and n.attr not in library_names:
            found.append(f"{n.lineno}: {ast.unparse(n)}")
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) \
                and n.func.id in ("getattr", "hasattr", "setattr") and len(n.args) >= 2 \
                and isinstance(n.args[1], ast.Constant) and isinstance(n.args[1].value, str) \
                and _private(n.args[1].value) and n.args[1].value not in library_names:
            found.append(f"{n.lineno}: {ast.unparse(n)[:80]}")
    return sorted(found, key=lambda hit: int(hit.split(":")[0]))


def library_names() -> set[str]:
    names: set[str] = set(PYTHON_API)
    for path in library_files():
        names |= defined_names(_tree(path))
    return names


def test_only_compat_imports_private_modules_or_tf_compat_v1():
    found = {os.path.relpath(p, ROOT): hits for p in library_files()
             if p != COMPAT and (hits := private_imports(_tree(p)))}
    assert found == {}


def test_only_compat_reads_private_names_of_tensorflow_or_keras():
    names = library_names()
    found = {os.path.relpath(p, ROOT): hits for p in library_files()
             if p != COMPAT and (hits := foreign_reaches(_tree(p), names))}
    assert found == {}


def test_the_static_rules_catch_what_they_are_for():
    # each rule on a line that breaks it, so that the checks above can fail
    tree = ast.parse("from tensorflow.python.eager import record\nimport keras.src\n"
                     "g = tf.compat.v1.get_default_graph()\n"
                     "m = importlib.import_module('keras.src.saving')\n")
    assert len(private_imports(tree)) == 4
    tree = ast.parse("model._loss_tracker.update_state(1)\nself._mine = 1\nx._mine\n"
                     "getattr(model, '_compile_loss')\ngetattr(model, '_mine')\n"
                     "hasattr(row, '_fields')\n")
    assert foreign_reaches(tree, defined_names(tree) | PYTHON_API) == [
        "1: model._loss_tracker", "4: getattr(model, '_compile_loss')"]


# --- run time: private overrides -------------------------------------------------------

def _library_modules() -> list:
    """Every importable module of the library (`refold.<layer>...`, `refold.*`)."""
    modules = []
    for path in library_files():
        rel = os.path.relpath(path, ROOT)[:-3].split(os.sep)
        if rel[:2] == ["src", "refold"]:
            rel = rel[2:]
        if rel[-1] == "__init__":
            rel = rel[:-1]
        if rel[-1:] == ["__main__"] or rel == ["compat"]:
            continue
        name = ".".join(["refold", *rel]).rstrip(".")
        modules.append(importlib.import_module(name))
    return modules


def _framework_class(c: type) -> bool:
    return c.__module__.split(".")[0] in FRAMEWORKS


def _self_attributes(cls: type) -> tuple[set[str], set[str]]:
    """The underscored attributes the methods of `cls` itself set on `self`, and
    those they read from it."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError):
        return set(), set()
    found: tuple[set, set] = (set(), set())
    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) \
                and n.value.id == "self" and _private(n.attr):
            found[not isinstance(n.ctx, ast.Store)].add(n.attr)
    return found


_BARE: dict = {}


def _bare_attributes(base: type) -> set[str]:
    """The attributes a bare instance of framework class `base` holds (none if it
    cannot be made without arguments)."""
    if base not in _BARE:
        try:
            _BARE[base] = set(vars(base()))
        except Exception:  # noqa: BLE001 - a base that needs arguments: class names only
            _BARE[base] = set()
    return _BARE[base]


def private_overrides(classes: list[type]) -> dict[str, list[str]]:
    """Rule (c): per library class, the underscored names that a TensorFlow or Keras
    base also has and that the class defines (in its body, or as `self._x = ...` in
    its methods) or reads (`self._x`, not its own)."""
    found = {}
    for cls in classes:
        bases = [c for c in cls.__mro__[1:] if _framework_class(c)]
        if not bases or cls.__module__ == "refold.compat":
            continue
        sets, reads = _self_attributes(cls)
        ours = {n for c in cls.__mro__ if not _framework_class(c) for n in vars(c)}
        own = {n for n in vars(cls) if _private(n)} | sets | (reads - ours - sets)
        theirs = {n for n in own if any(n in vars(b) for b in bases)
                  or any(n in _bare_attributes(b) for b in bases)}
        if theirs:
            found[f"{cls.__module__}.{cls.__qualname__}"] = sorted(theirs)
    return found


def _library_classes() -> list[type]:
    classes = {}
    for module in _library_modules():
        for obj in vars(module).values():
            if inspect.isclass(obj) and obj.__module__ == module.__name__:
                classes[id(obj)] = obj
                classes.update({id(c): c for c in vars(obj).values() if inspect.isclass(c)
                                and c.__module__ == module.__name__})
    return list(classes.values())


def test_no_library_class_overrides_a_private_name_of_its_framework_base():
    assert private_overrides(_library_classes()) == {}


def test_the_override_rule_catches_an_override_and_spares_compat():
    import keras

    from refold import compat

    class Overrides(keras.Model):
        def _resolve_auto_jit_compile(self):
            return False

        def logs(self, logs):
            return self._flatten_metrics_in_order(logs)  # a read of Keras' own

        def _mine(self):
            return 1

    class SetsTheirs(keras.layers.Layer):
        def __init__(self):
            super().__init__()
            self._tracker = None  # Keras' own attribute of every layer
            self._mine = 2

    class ThroughCompat(compat.AutoJitOff, keras.Model):
        pass

    assert private_overrides([Overrides, SetsTheirs, ThroughCompat]) == {
        f"{__name__}.{Overrides.__qualname__}": ["_flatten_metrics_in_order",
                                                 "_resolve_auto_jit_compile"],
        f"{__name__}.{SetsTheirs.__qualname__}": ["_tracker"]}
