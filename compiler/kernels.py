"""The scheduler's Numba planning kernels: `KERNELS`, `compile_all`, `load`.

The kernels are compiled with `cache=True`; the first process on a machine compiles
them and later ones load them from Numba's on-disk cache. On a new install
`import refold` compiles them in a process of its own (`refold.kernel_cache`) with
`compile_all`, from their explicit signatures (`KERNELS`), while the user's program
imports TensorFlow and fits; until it is done the user's process runs them as plain
Python (`refold.kernel_calls`), then loads them from the cache. A process
that forks workers that plan (`compiler.feeding.process_pool`) loads them first with
`load`, which waits for that process (a forked child must not load them: that runs
Numba's and LLVM's initialisation there, which is not safe after a fork); and
`python -m refold.compiler.warmup` pays the compilation at install time. The
`Compiler` class is passed in, so that this module (which the worker pools use) does
not import the compiler that uses the pools.

While one of Refold's kernels compiles in this process, in any thread, one line says
so on the `refold` logger, once per process.

>>> signature("i4 i8x2! int bool")
(Array(int32, 1, 'C', False, aligned=True), Array(int64, 2, 'C', True, aligned=True), int64, bool)
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import threading
import time
from collections.abc import Iterator

import numba
from numba.core import types

import refold.blocks as td
from refold import kernel_cache, kernel_calls
from refold.scheduler.schedules import SCHEDULERS

# The kernels Python code calls, by module, with the argument types they are called
# with (`signature`); the kernels they call compile with them. tests/compiler/
# test_kernel_cache.py checks that a process planning, expanding in rounds and running
# straight-line after `compile_all` compiles nothing, and that every kernel Python
# code names is here.
KERNELS = {
    "refold.scheduler.schedules": {
        "agenda_kernel": "i4 i4 i4 i4 i4",
        "depth_kernel": "i4 i4 i4 i4 i4",
        "_agenda": "i4 i4 i4 i4 i4 f8",  # with op costs (`agenda_schedule`)
    },
    "refold.scheduler.packing": {  # `Planner.feed`'s steps, which `_pack_plan` fuses
        "_pack": "i4 i4 i4 i4 i4 i4 i8 i8 i8 i8x2! i8x2! i8x2! i8x2! int",
        "_segments": "int int i8 i8 i8 i8 i8 i8 i8x2 i8x2 i8 i8 i8 i8 i4 i4 i8 i8! i8! i8x2! b1!",
    },
    "refold.scheduler.graph": {
        "_merge_records": "i4 i8 int",
    },
    "refold.scheduler.planner": {
        "_merge": "i4 int int bool int",
        "_pack_plan": ("i4 i4 i4 i4 i4 i4 i4 i8 i8 i4 i4 i4 i4 i8! i8! i8! i8 i8 i8x2! i8x2! "
                       "i8x2! i8x2! int i8! i8 i8! i8! i8x2! b1! i8! i8! int"),
    },
    "refold.scheduler.straight": {
        "_index": "i4 i4 i8! i8x2! i8! i8 i4 i4 i4 i4 i8 i4 i8",
    },
    "refold.compiler.graphs.expansion": {
        "_number_values": "i8 i8 i8x2 i8 i8 int int int",
        "_ids_in_range": "i4 i4 i4 i4 i4 i4 int int",
    },
    "refold.compiler.rounds.context": {
        "_depths": "i4 i8 i8",
    },
}

_DTYPES = {"i4": types.int32, "i8": types.int64, "b1": types.boolean, "f8": types.float64}


def signature(spec: str) -> tuple:
    """The Numba argument types `spec` names: `int`, `bool` (scalars) or an array, C-order,
    as `i4` (int32), `i8`, `b1`, `f8`, with `x2` for two dimensions and `!` read-only."""
    out = []
    for word in spec.split():
        if word in ("int", "bool"):
            out.append(types.int64 if word == "int" else types.boolean)
            continue
        readonly = word.endswith("!")
        dtype, _, ndim = word.rstrip("!").partition("x")
        out.append(types.Array(_DTYPES[dtype], int(ndim or 1), "C", readonly=readonly))
    return tuple(out)


# `compile_all`'s two parts, about equal in compilation time: `_pack_plan` with the
# kernels it calls, and the others.
FIRST_PART = {"_pack_plan", "_pack", "_segments"}


def compile_all(part: int | None = None) -> list:
    """Compiles every kernel of `KERNELS` for its signature, or loads it from Numba's
    cache (`part` 0: those of `FIRST_PART`, 1: the others; None: all); the kernels
    compiled (`compilations`), after any background compilation (`refold.kernel_cache`)
    has ended. Imports no TensorFlow."""
    kernel_cache.wait()
    with compilations() as compiled:
        for module, kernels in KERNELS.items():
            found = importlib.import_module(module)
            for name, spec in kernels.items():
                if part is None or (name in FIRST_PART) == (part == 0):
                    getattr(found, name).compile(signature(spec))
    return compiled


def _block():
    """A small recursive block with a `td.Metric`: every kind of planning work. It has
    no weights, so building it makes no Keras layer."""
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
    planned again there. Waits for any background compilation (`refold.kernel_cache`),
    then plans with the compiled kernels (`kernel_calls.use_compiled`)."""
    start = time.perf_counter()
    kernel_cache.wait()
    kernel_calls.use_compiled()
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
