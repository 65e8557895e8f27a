"""The planning kernels, loaded or compiled on a background thread from `import refold`.

The scheduler's Numba kernels (`cache=True`) are compiled on a machine's first planning
and cached on disk next to the installed sources; every later process loads them. A
wheel cannot carry that cache (Numba's files are specific to the CPU that compiled
them), so without this module a new install's first `fit` would stop for the
compilation (tens of seconds of CPU, BENCHMARKS.md). Instead `import refold` starts
`start()`: a daemon thread plans a small batch of a weightless tree block under every
scheduler (`compiler.kernels.warm_up`), which compiles or loads every kernel while the
program reads its data and builds its model. A `fit` that plans before the thread is
done waits only for the kernels it calls (Numba compiles one function at a time, and
a kernel the thread compiled is not compiled again).

While a kernel of Refold's compiles, in any thread, one line says so on the `refold`
logger (shown on stderr when logging is not configured), once per process.
`python -m refold.compiler.warmup` still fills the cache ahead, e.g. in a Docker image.
Set the environment variable `REFOLD_WARM_KERNELS=0` to start no thread.

A fork waits for the thread: a child forked while Numba compiles could not compile
(`compiler.parallel` forks planning workers).

>>> from refold import warm_kernels
>>> warm_kernels.wait()                 # the kernels are loaded (or it was not started)
>>> warm_kernels.wait() is None         # waiting again returns at once
True
"""

from __future__ import annotations

import logging
import os
import threading

import numba

__all__ = ["start", "wait", "MESSAGE"]

MESSAGE = ("refold: compiling the planner's Numba kernels, once per installation (later "
           "processes load them from Numba's cache); `python -m refold.compiler.warmup` "
           "does it ahead of time")

_thread: threading.Thread | None = None
_lock = threading.Lock()
_said = threading.Event()


class _Announce(numba.core.event.Listener):
    """Logs `MESSAGE` when the first of Refold's kernels starts compiling."""

    def on_start(self, event):
        func = getattr(event.data.get("dispatcher"), "py_func", None)
        if func is not None and func.__module__.startswith("refold.") and not _said.is_set():
            _said.set()
            logging.getLogger("refold").warning(MESSAGE)

    def on_end(self, event):
        pass


numba.core.event.register("numba:compile", _Announce())


def _load() -> None:
    from refold.compiler import kernels
    from refold.compiler.compiler import Compiler
    kernels.warm_up(Compiler)


def start() -> threading.Thread | None:
    """Starts loading (or compiling) the kernels on a daemon thread, once per process;
    the thread, or None if `REFOLD_WARM_KERNELS=0`."""
    global _thread
    if os.environ.get("REFOLD_WARM_KERNELS", "1") == "0":
        return None
    with _lock:
        if _thread is None:
            _thread = threading.Thread(target=_load, name="refold-warm-kernels", daemon=True)
            _thread.start()
    return _thread


def wait(timeout: float | None = None) -> None:
    """Returns when the thread `start` started is done (at once if none was)."""
    thread = _thread
    if thread is not None and thread is not threading.current_thread():
        thread.join(timeout)


os.register_at_fork(before=wait)
