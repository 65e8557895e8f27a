"""Names a package exports but imports on first use (PEP 562).

Light imports stay light (`import refold` loads no compiler, `import refold.serving`
no training stack) while `refold.Model` and the like still work as attributes.

>>> import types
>>> pkg = types.ModuleType("pkg")
>>> pkg.__getattr__, pkg.__dir__ = lazy_exports(pkg.__dict__, {"sqrt": "math"}, ["sqrt"])
>>> pkg.sqrt(4.0), "sqrt" in vars(pkg)   # imported, then kept as a plain attribute
(2.0, True)
>>> pkg.cbrt
Traceback (most recent call last):
AttributeError: module 'pkg' has no attribute 'cbrt'
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable


def lazy_exports(namespace: dict, where: dict[str, str],
                 exported: Iterable[str]) -> tuple[Callable, Callable]:
    """The module-level `__getattr__` and `__dir__` of a package whose name `n` in
    `where` is `where[n]`'s attribute `n`, imported when first asked for and then
    stored in `namespace` (the package's globals), so it is looked up once."""
    listed = set(exported)

    def attribute(name: str):
        if name not in where:
            raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(where[name]), name)
        namespace[name] = value
        return value

    def names() -> list:
        return sorted(set(namespace) | listed)

    return attribute, names
