"""Stable names for what a saved model refers to: block classes and block factories.

A saved block expression names each class (and each `@block_factory` function) by a
registered name such as `"refold>Map"` rather than by where it lives
(`"refold.blocks.sequences:Map"`), so a file keeps loading when code moves between
modules, as Keras' `"package>Name"` registered names do for layers. Refold's own
classes and factories register themselves under `refold>` by their qualified name; a
user's may register with `register` (or with `keras.saving.register_keras_serializable`,
which saving honours too); anything else is saved by its importable module path.

>>> from refold.blocks.serialization import registry
>>> import refold as td
>>> registry.registered_name(td.Map)
'refold>Map'
>>> registry.registered_object("refold>Map") is td.Map
True
>>> @registry.register(package="mine")
... def double_encoder(width):
...     return td.Vector(width) >> td.Function(lambda x: 2.0 * x)
>>> registry.registered_name(double_encoder)
'mine>double_encoder'
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

PACKAGE = "refold"

_OBJECTS: dict[str, Any] = {}
_NAMES: dict[Any, str] = {}
# Packages above this layer whose modules define registered blocks (the zoo, the
# examples), searched for a name that the module it was saved from no longer holds.
# The `refold` package fills it (`search_packages`), so that blocks imports no layer.
_SEARCHED: list[str] = []


def register(name: str | None = None, package: str = "Custom"):
    """Decorator: registers a class or function as `"{package}>{name}"` (`name`
    defaults to its `__qualname__`), so saved models name it so. A name registered for
    another object is an error (two classes cannot share a name in saved files)."""

    def decorate(obj):
        add(obj, f"{package}>{name or obj.__qualname__}")
        return obj

    return decorate


def add(obj: Any, name: str) -> None:
    """Registers `obj` under the full registered name `name` ("package>name")."""
    if ">" not in name:
        raise ValueError(f"a registered name is 'package>name', got {name!r}")
    held = _OBJECTS.get(name)
    if held is not None and held is not obj and _where(held) != _where(obj):
        raise ValueError(f"cannot register {_where(obj)} as {name!r}: "
                         f"{_where(held)} is registered under that name")
    _OBJECTS[name] = obj
    _NAMES[obj] = name


def register_own(obj: Any) -> None:
    """Registers a class or factory of Refold's own (its module is under `refold.`)
    as `"refold>{qualname}"`; anything else is left alone."""
    module = getattr(obj, "__module__", "") or ""
    if module.startswith(PACKAGE + ".") and "<" not in obj.__qualname__:
        add(obj, f"{PACKAGE}>{obj.__qualname__}")


def registered_name(obj: Any) -> str | None:
    """The name `obj` is registered under: here, or with Keras' registry; else None."""
    try:
        name = _NAMES.get(obj)
    except TypeError:  # unhashable
        return None
    if name is not None:
        return name
    keras_name = _keras_registered_name(obj)
    return keras_name


def registered_object(name: str) -> Any | None:
    """The object registered under `name` (here, or with Keras), or None."""
    if name in _OBJECTS:
        return _OBJECTS[name]
    import keras
    return keras.saving.get_registered_object(name)


def find(name: str, module: str | None = None) -> Any | None:
    """`registered_object(name)`, importing what may register it first if needed:
    `module` (where it lived when saved), then, for Refold's own names, the modules of
    the packages named by `search_packages` (a class may have moved since)."""
    found = registered_object(name)
    for where in ([module] if module else []) + (
            _own_modules() if name.startswith(PACKAGE + ">") else []):
        if found is not None:
            break
        try:
            importlib.import_module(where)
        except ImportError:
            continue
        found = registered_object(name)
    return found


def search_packages(*packages: str) -> None:
    """Names packages whose modules `find` imports to look for a moved Refold name."""
    _SEARCHED.extend(p for p in packages if p not in _SEARCHED)


def _own_modules() -> list[str]:
    """Refold's modules that define blocks, beyond `refold.blocks` itself."""
    out = []
    for package in _SEARCHED:
        root = importlib.import_module(package)
        out += [m.name for m in pkgutil.walk_packages(root.__path__, package + ".")
                if not m.name.endswith("__main__")]
    return out


def _keras_registered_name(obj: Any) -> str | None:
    import sys
    keras = sys.modules.get("keras")
    if keras is None or not callable(obj):
        return None
    try:
        name = keras.saving.get_registered_name(obj)
    except Exception:
        return None
    if ">" in name and keras.saving.get_registered_object(name) is obj:
        return name
    return None


def _where(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"
