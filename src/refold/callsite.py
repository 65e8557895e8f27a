"""Warnings that name the user's line: the first caller outside Refold, Keras and TensorFlow.

A warning raised deep in `Model.fit` (an input skipped, a loss that trains nothing) is
about the call the user wrote; a fixed `stacklevel` would name a line of Refold or of
Keras' training loop instead, and change whenever the path between them does (Python
3.12's `skip_file_prefixes` does this walk for one call; this module does it on 3.10
too). A warning raised on a thread the library started (a stream read ahead) has no
user's line on its stack: `user_line` is taken on the calling thread first and given
to `warn`. The examples (`refold.examples`) count as the user's code: they are
programs that call the library.

>>> import warnings
>>> from refold.callsite import warn
>>> with warnings.catch_warnings(record=True) as caught:
...     warnings.simplefilter("always")
...     warn("about this line")
>>> caught[0].filename.startswith("<doctest")   # this example's line, not Refold's
True
"""

from __future__ import annotations

import functools
import inspect
import os
import threading
import warnings

__all__ = ["warn", "user_stacklevel", "user_line"]


LAYERS = ("blocks", "compiler", "scheduler", "models", "serving")  # not the examples


@functools.lru_cache(maxsize=1)
def _library() -> tuple[tuple[str, ...], frozenset[str]]:
    """The folders of Refold's layers, Keras and TensorFlow, and the files of `refold`
    itself (not its folder: in a wheel it holds the examples too)."""
    import keras
    import tensorflow

    import refold
    import refold.blocks
    here = os.path.dirname(os.path.abspath(refold.__file__))
    files = frozenset(os.path.join(here, f) for f in os.listdir(here) if f.endswith(".py"))
    # the layers are siblings: under refold/ in a wheel, at the repository's root in a clone
    top = os.path.dirname(os.path.abspath(refold.blocks.__path__[0]))
    folders = [os.path.join(top, layer, "") for layer in LAYERS]
    folders += [os.path.join(os.path.abspath(p), "")
                for package in (keras, tensorflow) for p in package.__path__]
    return tuple(dict.fromkeys(folders)), files


_THREADING = os.path.abspath(threading.__file__)


def _first_user_frame(frame) -> tuple[int, object] | None:
    """`(stacklevel, frame)` of the first frame outside the library, counting from
    `frame` (stacklevel 1) outwards; None if there is none (a thread the library
    started)."""
    folders, files = _library()
    level = 1
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not path.startswith(folders) and path not in files and path != _THREADING:
            return level, frame
        frame, level = frame.f_back, level + 1
    return None


def user_stacklevel() -> int:
    """The `stacklevel` that makes a `warnings.warn` in the caller of this function name
    the first frame outside Refold's library, Keras and TensorFlow (1, the caller itself,
    if there is none)."""
    found = _first_user_frame(inspect.currentframe().f_back)
    return 1 if found is None else found[0]


def user_line() -> tuple[str, int, dict] | None:
    """The user's line that led to the caller of this function: `(filename, line
    number, the module's globals)`, or None if there is none (on a library's thread)."""
    found = _first_user_frame(inspect.currentframe().f_back)
    if found is None:
        return None
    frame = found[1]
    return frame.f_code.co_filename, frame.f_lineno, frame.f_globals


def warn(message: str, category: type[Warning] = UserWarning,
         at: tuple[str, int, dict] | None = None) -> None:
    """`warnings.warn(message, category)`, attributed to the user's line: `at` (from
    `user_line`, taken earlier on the user's thread) if given, else the first frame of
    the stack outside the library (`user_stacklevel`)."""
    if at is None:
        warnings.warn(message, category, stacklevel=user_stacklevel())
        return
    filename, lineno, module_globals = at
    # no `module_globals`: with them the source line is asked of the module's loader,
    # which for a `python -c` program (BuiltinImporter) raises instead of answering
    warnings.warn_explicit(message, category, filename, lineno,
                           module=module_globals.get("__name__"),
                           registry=module_globals.setdefault("__warningregistry__", {}))
