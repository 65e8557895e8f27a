"""Loading the scheduler's Numba planning kernels into this process: `load`, `start`.

The kernels are compiled with `cache=True`; the first process on a machine compiles
them and later ones load them from Numba's on-disk cache. A process that forks workers
that plan (`compiler.feeding.process_pool`) loads them first, since loading them in a forked child
runs Numba's and LLVM's initialisation there, which is not safe after a fork; and
`python -m refold.compiler.warmup` pays the compilation at install time. The
`Compiler` class is passed in, so that this module (which the worker pools use) does
not import the compiler that uses the pools.

While one of Refold's kernels compiles, in any thread, one line says so on the `refold`
logger, once per process: a wheel cannot carry Numba's cache (its files are specific to
the CPU that compiled them), so a new install's first plan compiles them.

With `REFOLD_WARM_KERNELS=1` in the environment, importing the compiler (`td.Model`,
`td.Compiler`, ... on first use) calls `start`: a daemon thread plans a small weightless
block under every scheduler, which loads or compiles the kernels while the program
builds its model, and a `fit` that plans before it is done waits only for the kernels it
calls. It is off by default: it contends for the interpreter with the user's own code,
and its gain on two cores was not shown (issue 46's note). A fork waits for the thread:
a child forked while Numba compiles could not compile.

>>> from refold.compiler import kernels
>>> kernels.wait()                      # the kernels are loaded (or it was not started)
>>> kernels.wait() is None              # waiting again returns at once
True
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterator

import numba

import refold.blocks as td
from refold.scheduler.schedules import SCHEDULERS


def _block():
    """A small recursive block with a `td.Metric`: every kind of planning work. It has
    no weights, so building it makes no Keras layer (`start` builds it on
    a thread of its own while the user builds a model)."""
    import tensorflow as tf
    tree = td.ForwardDeclaration(td.PyObjectType(), td.TensorType((2,)))
    leaf = td.Scalar() >> td.Function(lambda x: tf.stack([x, -x], axis=1))
    pair = td.Record((tree(), tree())) >> td.Function(tf.add)
    tree.resolve_to(td.OneOf(lambda t: isinstance(t, tuple), {False: leaf, True: pair}))
    return td.Record((tree(), td.Scalar() >> td.Metric("value"))) >> td.GetItem(0)


@contextlib.contextmanager
def compilations() -> Iterator[list]:
    """Counts Numba compilations inside (kernels loaded from the on-disk cache are not
    compiled): yields a list that collects the compiled kernels' names."""
    names: list = []

    class Listener(numba.core.event.Listener):
        def on_start(self, event):
            names.append(event.data["dispatcher"].py_func.__qualname__)

        def on_end(self, event):
            pass

    listener = Listener()
    numba.core.event.register("numba:compile", listener)
    try:
        yield names
    finally:
        numba.core.event.unregister("numba:compile", listener)


def load(compiler_class, schedulers=None) -> dict:
    """Plans a batch with `compiler_class` (`Compiler`) under every scheduler (or
    those named), grouped and not; `{"seconds": s, "compiled": [kernels compiled here,
    not loaded from the cache]}`. A scheduler warmed up once in a process is not
    planned again there."""
    start = time.perf_counter()
    inputs = [((1.0, (2.0, -1.0)), 0.5), (3.0, -2.0), ((1.0, 2.0), 1.0)]
    block = None
    with compilations() as compiled:
        for scheduler in SCHEDULERS if schedulers is None else schedulers:
            if schedulers is not None and scheduler in _WARM:
                continue
            block = block or _block()
            c = compiler_class.create(block, scheduler=scheduler, cache=False)
            for grouped in (False, True):
                c.plan(inputs, grouped=grouped)
            _WARM.add(scheduler)
    return {"seconds": time.perf_counter() - start, "compiled": compiled}


_WARM: set = set()  # the schedulers `load` planned in this process


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


_compiler_class = None  # the `Compiler` the thread plans with, given by its module


def start(compiler_class=None) -> threading.Thread | None:
    """Starts loading (or compiling) the kernels on a daemon thread, once per process;
    the thread, or None unless `REFOLD_WARM_KERNELS=1`. The compiler's module passes its
    `Compiler` class when it is imported (this module does not import the compiler,
    which imports it); later calls need none."""
    global _thread, _compiler_class
    if compiler_class is not None:
        _compiler_class = compiler_class
    if os.environ.get("REFOLD_WARM_KERNELS", "0") != "1":
        return None
    if _compiler_class is None:
        raise ValueError("kernels.start: no Compiler class yet (import refold.compiler.compiler)")
    with _lock:
        if _thread is None:
            _thread = threading.Thread(target=load, args=(_compiler_class,),
                                       name="refold-warm-kernels", daemon=True)
            _thread.start()
    return _thread


def wait(timeout: float | None = None) -> None:
    """Returns when the thread `start` started is done (at once if none was)."""
    thread = _thread
    if thread is not None and thread is not threading.current_thread():
        thread.join(timeout)


os.register_at_fork(before=wait)
