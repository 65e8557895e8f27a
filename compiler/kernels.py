"""Loading the scheduler's Numba planning kernels into this process: `warm_up`.

The kernels are compiled with `cache=True`; the first process on a machine compiles
them and later ones load them from Numba's on-disk cache. A process that forks workers
that plan (`compiler.parallel`) loads them first, since loading them in a forked child
runs Numba's and LLVM's initialisation there, which is not safe after a fork; and
`python -m refold.compiler.warmup` pays the compilation at install time. The
`Compiler` class is passed in, so that this module (which the worker pools use) does
not import the compiler that uses the pools.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import numba

import refold.blocks as td
from refold.scheduler.schedules import SCHEDULERS


def _block():
    """A small recursive block with a `td.Metric`: every kind of planning work. It has
    no weights, so building it makes no Keras layer (`refold.warm_kernels` builds it on
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


def warm_up(compiler_class, schedulers=None) -> dict:
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


_WARM: set = set()  # the schedulers warm_up planned in this process
