"""Expanding (and planning) inputs in worker processes, ahead of the device.

Like TensorFlow Fold's multiprocessing pool: `ExpansionPool(program, workers)`
forks `workers` processes that inherit the lowered program (blocks hold lambdas and
layers, which do not pickle, so the program is never sent: the children get it by
fork). Inputs go to the workers pickled, in contiguous chunks; the expanded
`ExampleGraph`s (flat numpy arrays) come back pickled, in input order.

A bad input still raises `blocks.InputError` naming the example's index in the
whole batch and the block path: the worker sends the error's fields back, and the
parent re-raises it with the chunk's offset added.

Only the fork start method can do this (POSIX). Forking a process that has
started TensorFlow is safe here because the children only run Python and numpy
(expansion never calls TensorFlow); create the pool before heavy use anyway, as
it forks once and keeps its workers.

Whether it pays depends on the machine: a worker's result has to be pickled and
unpickled, so it helps when expansion dominates and spare cores exist (see
BENCHMARKS.md for the measured figures).
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Sequence
from typing import Any

from blocks.errors import InputError
from compiler.expansion import expand_all

# The program the workers expand with; set in the parent just before forking and
# inherited by the children (never pickled).
_PROGRAMS: dict[int, Any] = {}


def _expand_chunk(key: int, inputs: list) -> tuple:
    """Runs in a worker: ("ok", graphs) or ("input_error", index, class, path, reason)."""
    program = _PROGRAMS[key]
    program = getattr(program, "program", program)  # a Compiler or a Program
    try:
        return ("ok", expand_all(program, inputs, 0))
    except InputError as e:
        return ("input_error", e.example_index, type(e).__name__, e.block_path, e.reason)


def _plan_chunk(key: int, inputs: list, grouped: bool) -> tuple:
    """Runs in a worker: a whole `BatchPlan` (expansion, merging, scheduling, packing)."""
    compiler = _PROGRAMS[key]
    try:
        return ("ok", compiler._plan_serial(inputs, grouped))
    except InputError as e:
        return ("input_error", e.example_index, type(e).__name__, e.block_path, e.reason)


def _raise_input_error(reply: tuple, offset: int) -> None:
    _, index, cls_name, path, reason = reply
    from blocks import errors
    cls = getattr(errors, cls_name, InputError)
    if not (isinstance(cls, type) and issubclass(cls, InputError)):
        cls = InputError
    raise cls(path, reason, offset + (index or 0))


class ExpansionPool:
    """A pool of forked processes that expand inputs of one program.

    Args:
        program: the lowered `Program`, or the `Compiler` (needed by `plan_batches`).
        workers: the number of worker processes (>= 1).
        chunk_size: inputs per task; None picks about 4 tasks per worker per batch.
    """

    def __init__(self, program: Any, workers: int, chunk_size: int | None = None):
        if not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be a positive int, got {workers!r}")
        if "fork" not in multiprocessing.get_all_start_methods():
            raise ValueError("parallel expansion needs the 'fork' start method (POSIX)")
        self.workers = workers
        self.chunk_size = chunk_size
        self._key = id(self)
        _PROGRAMS[self._key] = program
        self._pool = multiprocessing.get_context("fork").Pool(workers)
        self._owner = os.getpid()

    def _chunks(self, n: int) -> list[tuple[int, int]]:
        size = self.chunk_size or max(1, -(-n // (4 * self.workers)))
        return [(s, min(n, s + size)) for s in range(0, n, size)]

    def expand(self, inputs: Sequence[Any], start: int = 0) -> list:
        """The `ExampleGraph` of each input, in order; errors name `start + index`."""
        inputs = list(inputs)
        chunks = self._chunks(len(inputs))
        asyncs = [self._pool.apply_async(_expand_chunk, (self._key, inputs[a:b]))
                  for a, b in chunks]
        out: list = []
        for (a, _), r in zip(chunks, asyncs):
            reply = r.get()
            if reply[0] != "ok":
                _raise_input_error(reply, start + a)
            out.extend(reply[1])
        return out

    def plan_batches(self, batches, grouped: bool = False, prefetch: int | None = None):
        """Yields one `BatchPlan` per batch, planned in the workers, in order.

        Up to `prefetch` (default: 2 per worker) batches are planned ahead.
        """
        from collections import deque
        prefetch = prefetch or 2 * self.workers
        pending: deque = deque()
        it = iter(batches)
        done = False
        while True:
            while not done and len(pending) < prefetch:
                try:
                    batch = list(next(it))
                except StopIteration:
                    done = True
                    break
                pending.append(self._pool.apply_async(_plan_chunk,
                                                      (self._key, batch, grouped)))
            if not pending:
                return
            reply = pending.popleft().get()
            if reply[0] != "ok":
                _raise_input_error(reply, 0)
            yield reply[1]

    def close(self) -> None:
        """Stops the workers (also done when the pool is garbage-collected)."""
        pool, self._pool = getattr(self, "_pool", None), None
        if pool is not None and os.getpid() == self._owner:
            pool.terminate()
            pool.join()
        _PROGRAMS.pop(getattr(self, "_key", None), None)

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass

    def __enter__(self) -> ExpansionPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
