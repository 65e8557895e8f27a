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
started TensorFlow works because the children only run Python, numpy and the
planning kernels (never TensorFlow), provided the kernels are loaded before the
fork and the child's garbage collector never finalizes the parent's objects
(`warm_planner`, `frozen_garbage`); the pool forks once and keeps its workers.

`StreamWorkers` is the same idea for a stream's batches, with explicit pipes
instead of a `multiprocessing.Pool` (see its docstring for why).

Whether it pays depends on the machine: a worker's result has to be pickled and
unpickled, so it helps when expansion dominates and spare cores exist (see
BENCHMARKS.md for the measured figures).
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from refold.blocks.errors import InputError
from refold.compiler import kernels
from refold.compiler.graphs.expansion import expand_all

# The program the workers expand with; set in the parent just before forking and
# inherited by the children (never pickled).
_PROGRAMS: dict[int, Any] = {}


def _expand_chunk(key: int, inputs: list) -> tuple:
    """Runs in a worker: ("ok", graphs) or ("input_error", index, class, path, reason,
    data path)."""
    program = _PROGRAMS[key]
    program = getattr(program, "program", program)  # a Compiler or a Program
    try:
        return ("ok", expand_all(program, inputs, 0))
    except InputError as e:
        return ("input_error", e.example_index, type(e).__name__, e.block_path, e.reason,
                e.data_path)


def _plan_chunk(key: int, inputs: list, grouped: bool) -> tuple:
    """Runs in a worker: a whole `BatchPlan` (expansion, merging, scheduling, packing)."""
    compiler = _PROGRAMS[key]
    try:
        return ("ok", compiler.plan_in_process(inputs, grouped))
    except InputError as e:
        return ("input_error", e.example_index, type(e).__name__, e.block_path, e.reason,
                e.data_path)


def _raise_input_error(reply: tuple, offset: int) -> None:
    _, index, cls_name, path, reason, data_path = reply
    from refold.blocks import errors
    cls = getattr(errors, cls_name, InputError)
    if not (isinstance(cls, type) and issubclass(cls, InputError)):
        cls = InputError
    raise cls(path, reason, offset + (index or 0), data_path)


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
        warm_planner(program)
        with frozen_garbage():
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


@contextlib.contextmanager
def frozen_garbage():
    """Forks inside see the parent's objects out of reach of their garbage collector.

    A child's collector would otherwise finalize the parent's unreachable cycles, and
    finalizers of TensorFlow objects call into a runtime whose threads did not
    survive the fork: a worker crashed (SIGSEGV) or hung there. `gc.freeze()` moves
    every object to a generation the collector never visits; the parent unfreezes
    them once the child is forked."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def warm_planner(compiler) -> None:
    """Loads (or compiles) the planning kernels in this process before it forks, so
    that children inherit them: loading them in a forked child runs Numba's and
    LLVM's initialisation there, which is not safe after a fork. On a new install it
    waits for the background compilation (`kernels.load`) rather than plan in plain
    Python: the children would switch to the compiled kernels after the fork."""
    scheduler = getattr(compiler, "scheduler", None)
    if scheduler is not None:
        kernels.load(type(compiler), [scheduler])


class WorkerDiedError(RuntimeError):
    """A worker process ended without replying (killed, or crashed in native code)."""


class StreamWorkers:
    """Forked processes that each run `task(payload)` on payloads sent to them, one at
    a time, for a stream's batches: `map` keeps every worker busy with one payload,
    hands the replies back in the order the payloads came, and never holds more than
    one payload per worker in flight.

    Design, after a `multiprocessing.Pool` hung here (a task whose reply never came):

    - Each worker has its own pipe and at most one payload in flight, and payloads
      go only to a worker that has replied to its last one (so waiting in `recv`).
      Neither side can then block on a full pipe while the other waits for it.
    - The processes are forked from the thread that creates this object (make it in
      the main thread, before any planning thread runs: a lock held by another
      thread at the fork would stay held in the child), with the parent's objects
      hidden from the child's garbage collector (`frozen_garbage`), after the
      planning kernels are loaded (`warm_planner`): a child that collected the
      parent's TensorFlow objects, or loaded Numba kernels, crashed. They inherit `task` (blocks
      hold lambdas and layers, which do not pickle: only fork can give them the
      program); payloads and replies are pickled. A child closes the parent's ends of
      every worker's pipe, so it sees the parent go (`EOFError`) and ends.
    - A child ignores SIGINT (Ctrl-C stops the parent's loop, which then stops the
      workers), runs its loop on a deep-stack thread (expansion needs no thread per
      call), and sends back any exception `task` raises (it must pickle; one that
      does not comes back as a `RuntimeError` with its text).
    - A child can lower its priority (`nice`) so that the step's threads in the
      parent come first; by default it does not (see `nice` below).
    - `stop()` (a callable) is polled while waiting, so a caller that is shutting down
      is never stuck behind a busy worker. Replies left unread when `map` ends early
      are drained (a batch's worth of work), or the worker is killed (`revive()`
      forks it anew). `close()` sends each worker the end, joins it with a timeout, and
      kills it if it has not ended; the processes are daemons, so they cannot
      outlive an interpreter that exits without calling it.

    Args:
        task: what a worker runs on each payload (called in the child).
        workers: the number of processes (>= 1).
        name: the processes' name prefix.
        nice: how much lower than this process the workers run (default `nice`).
    """

    poll_seconds = 0.05
    drain_seconds = 10.0
    # How much lower the workers run than the parent (`os.nice` in the child). 0:
    # with the kernel's per-session groups (autogroup) a lower priority also lowers
    # the session's share against other jobs, which cost more than it saved the step
    # (BENCHMARKS.md, "Streams and the first fit").
    nice = 0

    def __init__(self, task, workers: int, name: str = "refold-worker",
                 nice: int | None = None):
        if not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be a positive int, got {workers!r}")
        if "fork" not in multiprocessing.get_all_start_methods():
            raise ValueError("worker processes need the 'fork' start method (POSIX)")
        self._task, self._name = task, name
        if nice is not None:
            self.nice = nice
        self._context = multiprocessing.get_context("fork")
        self._owner = os.getpid()
        self._procs: list = [None] * workers
        self._conns: list = [None] * workers
        self._busy = [False] * workers
        self._claim = threading.Lock()
        for k in range(workers):
            self._start(k)

    @property
    def workers(self) -> int:
        return len(self._procs)

    def pids(self) -> list[int]:
        """The process ids of the running workers (to account for their CPU time)."""
        return [p.pid for p in self._procs if p is not None and p.is_alive()]

    def _start(self, k: int) -> None:
        parent_end, child_end = self._context.Pipe()
        others = [c for c in self._conns if c is not None] + [parent_end]
        proc = self._context.Process(target=_serve,
                                     args=(self._task, child_end, others, self.nice),
                                     name=f"{self._name}-{k}", daemon=True)
        with frozen_garbage():
            proc.start()
        child_end.close()
        self._procs[k], self._conns[k], self._busy[k] = proc, parent_end, False

    def map(self, items, payload_of, stop=lambda: False):
        """Yields `(item, reply)` for each of `items`, in order, where `reply` is
        `task(payload_of(item))` computed in a worker. An exception raised by the task
        is raised here, at its item; `stop()` true while waiting ends the generator."""
        pending: deque = deque()  # (worker, item), in the items' order
        free = deque(k for k in range(self.workers) if not self._busy[k])
        items = iter(items)
        more = True
        try:
            while True:
                while more and free:
                    try:
                        item = next(items)
                    except StopIteration:
                        more = False
                        break
                    k = free.popleft()
                    self._send(k, payload_of(item))
                    pending.append((k, item))
                if not pending:
                    return
                k, item = pending[0]
                try:
                    reply = self._receive(k, stop)
                except _StoppedError:
                    return
                pending.popleft()
                free.append(k)
                yield item, reply
        finally:
            self._drain([k for k, _ in pending])

    def claim(self) -> bool:
        """Takes the workers for one stream (until `release()`); False if another
        stream has them (a validation stream read while the training stream's
        batches are in flight): `map` must not run twice at once on them."""
        return self._claim.acquire(blocking=False)

    def release(self) -> None:
        self._claim.release()

    def revive(self) -> None:
        """Forks anew the workers that were killed or died (call it where the first
        ones were forked: in the main thread, with no planning thread running)."""
        for k, proc in enumerate(self._procs):
            if proc is None or not proc.is_alive():
                self._kill(k)
                self._start(k)

    def _send(self, k: int, payload) -> None:
        proc = self._procs[k]
        if proc is None or not proc.is_alive():
            raise WorkerDiedError(f"worker process {self._name}-{k} is not running "
                             f"(exit code {None if proc is None else proc.exitcode})")
        self._busy[k] = True
        self._conns[k].send(payload)

    def _receive(self, k: int, stop):
        conn, proc = self._conns[k], self._procs[k]
        while not conn.poll(self.poll_seconds):
            if stop():
                raise _StoppedError
            if not proc.is_alive() and not conn.poll(0):
                self._busy[k] = False
                raise WorkerDiedError(f"worker process {proc.name} ended (exit code "
                                 f"{proc.exitcode}) without replying")
        try:
            kind, value = conn.recv()
        except EOFError:
            self._busy[k] = False
            raise WorkerDiedError(f"worker process {proc.name} ended (exit code "
                             f"{proc.exitcode}) without replying") from None
        self._busy[k] = False
        if kind == "error":
            raise value
        return value

    def _drain(self, busy: list[int]) -> None:
        """Reads the replies of payloads in flight, or kills their workers."""
        deadline = time.monotonic() + self.drain_seconds
        for k in busy:
            conn = self._conns[k]
            try:
                if conn.poll(max(0.0, deadline - time.monotonic())):
                    conn.recv()
                    self._busy[k] = False
                    continue
            except (EOFError, OSError):
                pass
            self._kill(k)

    def _kill(self, k: int) -> None:
        proc, conn = self._procs[k], self._conns[k]
        self._procs[k] = self._conns[k] = None
        self._busy[k] = False
        if conn is not None:
            conn.close()
        if proc is not None:
            proc.kill()
            proc.join(5)

    def close(self, timeout: float = 5.0) -> None:
        """Ends the workers: the end message, a join, a kill for those still running."""
        if os.getpid() != self._owner:
            return
        for k, conn in enumerate(self._conns):
            if conn is not None and not self._busy[k]:
                try:
                    conn.send(None)
                except (OSError, ValueError):
                    pass
        deadline = time.monotonic() + timeout
        for k, proc in enumerate(self._procs):
            if proc is None:
                continue
            if not self._busy[k]:
                proc.join(max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()
                proc.join(5)
            if self._conns[k] is not None:
                self._conns[k].close()
            self._procs[k] = self._conns[k] = None

    def __del__(self):
        try:
            self.close(timeout=1.0)
        except Exception:  # interpreter shutdown
            pass


class _StoppedError(Exception):
    """`StreamWorkers.map`'s `stop()` turned true while it waited."""


def _serve(task, conn, others, nice: int = 0) -> None:
    """A worker's life: payloads in, `("ok", reply)` or `("error", exception)` out,
    until the end message (None) or the parent's end closes. It first lowers its
    priority by `nice` (its loop's thread inherits it). SIGTERM ends it, whatever
    handler it inherited: under `MultiWorkerMirroredStrategy` TensorFlow's
    preemption notifier catches SIGTERM in the parent, and a child that kept that
    handler outlived the terminate of multiprocessing's exit, which then hung."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if nice:
        try:
            os.nice(nice)
        except OSError:  # not permitted here: run at the parent's priority
            pass
    for c in others:
        c.close()
    from refold.blocks.evaluation.contexts import start_deep_thread
    start_deep_thread(_serve_loop, task, conn, name="refold-worker-loop").join()


def _serve_loop(task, conn) -> None:
    while True:
        try:
            payload = conn.recv()
        except (EOFError, OSError):
            return
        if payload is None:
            return
        try:
            reply = ("ok", task(payload))
        except BaseException as e:  # sent to the parent, raised there
            reply = ("error", _portable(e))
        try:
            conn.send(reply)
        except (BrokenPipeError, OSError):
            return


def _portable(e: BaseException) -> BaseException:
    """`e` if it pickles, else a `RuntimeError` with its text and traceback."""
    import pickle
    import traceback
    try:
        pickle.loads(pickle.dumps(e))
        return e
    except Exception:
        text = "".join(traceback.format_exception(e))
        return RuntimeError(f"{type(e).__name__} in a worker process: {e}\n{text}")
