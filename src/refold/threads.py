"""TensorFlow's intra-op threads on a small machine: one, unless the user chose.

TensorFlow runs a traced step's ops on its inter-op threads, and splits a costly op
(a matrix product, a concat, a reduction) across its intra-op threads; by default
each pool has a thread per core. Refold's steps are many small ops side by side, so
on two cores the two pools are four busy threads: a concat's half waits in the
intra-op queue behind half of a product the other op started, and the loop's chain
of launches waits with it. One intra-op thread (the inter-op threads kept) made
training at batch 16 faster on every standard workload (BENCHMARKS.md, "TensorFlow's
threads at small batches").

So `import refold` sets TensorFlow's intra-op threads to one where the process may
run on at most `SMALL` CPUs, unless the user chose otherwise: TensorFlow fixes its
pools when it starts, so this is done only if it has not started yet and its
intra-op threads are still TensorFlow's default (a later
`tf.config.threading.set_intra_op_parallelism_threads(n)`, before the first op,
still wins). More CPUs keep TensorFlow's default (not measured there). The
environment variable `REFOLD_INTRA_OP_THREADS` overrides the choice: a number of
threads, or 0 for TensorFlow's default.

>>> intra_op_threads(cpus=2, environ={}), intra_op_threads(cpus=8, environ={})
(1, None)
>>> intra_op_threads(cpus=2, environ={"REFOLD_INTRA_OP_THREADS": "0"}) is None
True
>>> intra_op_threads(cpus=8, environ={"REFOLD_INTRA_OP_THREADS": "3"})
3
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

ENV = "REFOLD_INTRA_OP_THREADS"
SMALL = 2  # at most this many CPUs: one intra-op thread

_log = logging.getLogger("refold")


def intra_op_threads(cpus: int | None = None, environ: Mapping[str, str] | None = None
                     ) -> int | None:
    """The intra-op thread count `import refold` asks TensorFlow for, or None for
    TensorFlow's default: `REFOLD_INTRA_OP_THREADS` if set, else one on at most
    `SMALL` CPUs (`cpus`: the CPUs this process may run on)."""
    environ = os.environ if environ is None else environ
    value = environ.get(ENV, "").strip()
    if value:
        try:
            n = int(value)
        except ValueError:
            n = -1
        if n < 0:
            raise ValueError(f"{ENV} must be a number of threads (0: TensorFlow's default), "
                             f"got {value!r}")
        return n or None
    if cpus is None:
        cpus = available_cpus()
    return 1 if cpus <= SMALL else None


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity where the system says)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def configure() -> int | None:
    """Sets TensorFlow's intra-op threads to `intra_op_threads()` if TensorFlow has
    not started and the user has not set them; returns the count set, or None."""
    n = intra_op_threads()
    if n is None:
        return None
    import tensorflow as tf
    threading = tf.config.threading
    if threading.get_intra_op_parallelism_threads() != 0:
        return None  # the user's choice
    try:
        threading.set_intra_op_parallelism_threads(n)
    except RuntimeError:  # TensorFlow has started: its pools are fixed
        return None
    _log.info("refold: TensorFlow's intra-op threads set to %d (%s)", n, __name__)
    return n


__all__ = ["ENV", "SMALL", "available_cpus", "configure", "intra_op_threads"]
