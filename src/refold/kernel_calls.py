"""Which version of a planning kernel Python code calls: `KERNEL[kernel](...)`.

The planning kernels are Numba functions cached on disk. On a new install a
background process compiles them (`refold.kernel_cache`); until it is done, this
process runs each kernel's plain-Python version, its *twin*, rather than waiting for
it or compiling them too, and from the first call after it is done, the compiled
kernels (loaded from Numba's cache). A twin runs the kernel's own code with the
kernels it calls replaced by their twins, so nothing in it compiles.

Python code calls a kernel as `KERNEL[kernel](args)`: a dict lookup. Once the
compiled kernels are in use `KERNEL[kernel]` is the kernel itself; before, it is a
function that asks whether the background process is done (one `waitpid`, against
the milliseconds a twin takes) and calls the twin or, from then on, the kernel.
`plain_python()` runs the twins whatever the background process does (a kernel can
then be stepped through in a debugger).

>>> import numpy as np
>>> from refold.scheduler.schedules import group_by_step
>>> steps = np.array([1, 0, 1]); ops = np.array([0, 0, 1])
>>> with plain_python():
...     plain = KERNEL[group_by_step](ops, steps)
>>> [a.tolist() for a in plain] == [a.tolist() for a in KERNEL[group_by_step](ops, steps)]
True
"""

from __future__ import annotations

import contextlib
import functools
import time
import types
from collections.abc import Callable, Iterator

from numba.core.dispatcher import Dispatcher

from refold import kernel_cache


def twin(kernel: Callable) -> Callable:
    """The plain-Python version of `kernel` (a Numba function; anything else is its
    own twin): the NumPy version registered for it (`vectorised`), else its code over
    a copy of its module's globals in which every Numba function is replaced by its
    twin. Made once per kernel."""
    if not isinstance(kernel, Dispatcher):
        return kernel
    found = _TWINS.get(kernel)
    if found is None:
        code = kernel.py_func
        scope = dict(code.__globals__)
        found = types.FunctionType(code.__code__, scope, code.__name__, code.__defaults__,
                                   code.__closure__)
        found = _TWINS.setdefault(kernel, functools.update_wrapper(found, code))
        for name, value in scope.items():  # after `setdefault`: a cycle finds it there
            if isinstance(value, Dispatcher):
                scope[name] = twin(value)
    return found


_TWINS: dict = {}


def vectorised(kernel: Callable) -> Callable[[Callable], Callable]:
    """Registers the decorated function as `kernel`'s twin: a NumPy version, for a
    kernel whose loops NumPy runs whole (its code line by line in Python would be
    slow while the background process compiles). It must return what the kernel
    returns, dtypes included (tests/scheduler/test_kernel_calls.py replays it)."""
    def register(fn: Callable) -> Callable:
        _TWINS[kernel] = fn
        return fn
    return register


class _Calls(dict):
    """kernel -> what Python code calls for it now (see the module docstring); filled
    on first use of each kernel, emptied when the choice changes."""

    def __missing__(self, kernel: Callable) -> Callable:
        if not _plain:
            call = kernel
        elif _forced:
            call = twin(kernel)
        else:
            call = _until_compiled(kernel)
        self[kernel] = call
        return call


KERNEL = _Calls()

# Plain Python while the background process compiles (for at most `_PATIENCE` seconds:
# a stuck process should not leave the planner slow for good); `_forced` by
# `plain_python`, whatever it does.
_PATIENCE = 600.0
_plain = kernel_cache.compiling()
_forced = False
_give_up = time.monotonic() + _PATIENCE


def _until_compiled(kernel: Callable) -> Callable:
    plain = twin(kernel)

    def call(*args):
        if _plain and kernel_cache.compiling() and time.monotonic() < _give_up:
            return plain(*args)
        use_compiled()
        return kernel(*args)

    return call


def use_compiled() -> None:
    """From now on Python code calls the compiled kernels (compiling them if Numba's
    cache lacks them): as after the background process, at once."""
    global _plain
    _plain = False
    KERNEL.clear()


@contextlib.contextmanager
def plain_python() -> Iterator[None]:
    """Inside, Python code calls the kernels' twins; after, as before."""
    global _plain, _forced
    before = _plain, _forced
    _plain = _forced = True
    KERNEL.clear()
    try:
        yield
    finally:
        _plain, _forced = before
        KERNEL.clear()
