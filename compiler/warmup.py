"""Compiles the planning kernels ahead of the first `fit`: `python -m refold.compiler.warmup`.

The scheduler's Numba kernels are compiled with `cache=True`: the first process on a
machine that plans a batch compiles them (about 10 s of CPU) and writes them to Numba's
on-disk cache; later processes load them in a fraction of a second. `import refold`
compiles them in a background process on a new install (`refold.kernel_cache`); this
command pays that at install time instead (a Dockerfile, a CI setup step), in this
process: every kernel for its signature (`kernels.compile_all`), then a small batch of a
tree model with a metric planned under every registered scheduler, grouped and not.

>>> first = warm_up()                   # compiles what the on-disk cache lacks
>>> warm_up()["compiled"]               # then nothing is left to compile
[]
"""

from __future__ import annotations

import time

import numba

from refold import kernel_cache
from refold.compiler import kernels
from refold.compiler.compiler import Compiler
from refold.scheduler.schedules import SCHEDULERS


def warm_up(schedulers=None) -> dict:
    """`kernels.compile_all`, then `kernels.load` with the `Compiler` under every
    scheduler (or those named): `{"seconds": s, "compiled": [kernels compiled]}`."""
    start = time.perf_counter()
    compiled = kernels.compile_all()
    stats = kernels.load(Compiler, schedulers)
    return {"seconds": time.perf_counter() - start, "compiled": compiled + stats["compiled"]}


def main(argv=None) -> None:
    import argparse
    argparse.ArgumentParser(prog="python -m refold.compiler.warmup",
                            description=__doc__.splitlines()[0]).parse_args(argv)
    stats = warm_up()
    kernel_cache.mark_ready()
    where = numba.config.CACHE_DIR or "next to the sources"
    print(f"planned under {len(SCHEDULERS)} schedulers in {stats['seconds']:.1f} s: "
          f"{len(stats['compiled'])} kernels compiled and written to the cache ({where}); "
          "the rest were loaded from it")


if __name__ == "__main__":
    main()
