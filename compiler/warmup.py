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

import numba

from refold.compiler import kernels
from refold.compiler.compiler import Compiler
from refold.scheduler.schedules import SCHEDULERS


def warm_up(schedulers=None) -> dict:
    """Plans a small batch under every scheduler (or those named), grouped and not:
    `kernels.load` with the `Compiler`."""
    return kernels.load(Compiler, schedulers)


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
