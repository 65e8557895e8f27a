"""Compiles the planning kernels ahead of the first `fit`: `python -m refold.compiler.warmup`.

The scheduler's Numba kernels are compiled with `cache=True`: the first process on a
machine that plans a batch compiles them (tens of seconds, BENCHMARKS.md) and writes
them to Numba's on-disk cache; later processes load them in a fraction of a second.
This command pays that once, at install time (a Dockerfile, a CI setup step), so
that no user-facing first `fit` does: it plans a small batch of a tree model with a
metric under every registered scheduler, grouped and not, which calls every kernel.

>>> first = warm_up()                   # compiles what the on-disk cache lacks
>>> warm_up()["compiled"]               # then nothing is left to compile
[]
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import numba

import refold.blocks as td
from refold.compiler.compiler import Compiler
from refold.scheduler.schedules import SCHEDULERS


def _block():
    """A small recursive block with a `td.Metric`: every kind of planning work."""
    tree = td.ForwardDeclaration(td.PyObjectType(), td.TensorType((2,)))
    leaf = td.Scalar() >> td.Function(lambda x: x[:, None]) >> td.FC(2)
    pair = td.Record((tree(), tree())) >> td.Concat() >> td.FC(2)
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


def warm_up(schedulers=None) -> dict:
    """Plans a batch under every scheduler (or those named), grouped and not;
    `{"seconds": s, "compiled": [kernels compiled here, not loaded from the cache]}`.
    A scheduler warmed up once in a process is not planned again there."""
    start = time.perf_counter()
    inputs = [((1.0, (2.0, -1.0)), 0.5), (3.0, -2.0), ((1.0, 2.0), 1.0)]
    block = None
    with compilations() as compiled:
        for scheduler in SCHEDULERS if schedulers is None else schedulers:
            if schedulers is not None and scheduler in _WARM:
                continue
            block = block or _block()
            c = Compiler.create(block, scheduler=scheduler, cache=False)
            for grouped in (False, True):
                c.plan(inputs, grouped=grouped)
            _WARM.add(scheduler)
    return {"seconds": time.perf_counter() - start, "compiled": compiled}


_WARM: set = set()  # the schedulers warm_up planned in this process


def main(argv=None) -> None:
    import argparse
    argparse.ArgumentParser(prog="python -m refold.compiler.warmup",
                            description=__doc__.splitlines()[0]).parse_args(argv)
    stats = warm_up()
    where = numba.config.CACHE_DIR or "next to the sources"
    print(f"planned under {len(SCHEDULERS)} schedulers in {stats['seconds']:.1f} s: "
          f"{len(stats['compiled'])} kernels compiled and written to the cache ({where}); "
          "the rest were loaded from it")


if __name__ == "__main__":
    main()
