"""Items of an iterator made on a background thread, a bounded number ahead of the reader.

Planning a batch (expanding its inputs, scheduling and packing it) is Python and Numba
work that can overlap the device step, since TensorFlow and the planning kernels release
the GIL. `Prefetch` runs the iterator that plans them on a thread of its own and hands the
items over a bounded queue, so memory stays bounded however long the source. The
compiler's `plan_batches(ahead=n)` and a stream's feeder (`compiler.feeding.streams`) both
read their batches through it.

The thread has a deep stack (`blocks.evaluation.contexts.start_deep_thread`): expanding a deep
input runs on it directly, without a thread of its own per input.

>>> ahead = Prefetch(iter([1, 2, 3]), size=2)
>>> [ahead.next(), ahead.next(), ahead.next(), ahead.next()]
[1, 2, 3, None]
>>> list(Prefetch(x * x for x in range(4)))
[0, 1, 4, 9]
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Any

from refold.blocks.evaluation.contexts import start_deep_thread

_ITEM, _END, _ERROR = 0, 1, 2


class Prefetch:
    """Runs `items` in a daemon thread, at most `size` items ahead of `next()`.

    `next()` gives the next item, None once the items have ended, and raises an
    exception the iterator raised, at the item where it happened; iterating a
    `Prefetch` gives the items and closes it when the loop ends or is left. `close()`
    stops the thread and waits for it: the thread checks for the stop between items
    and while the queue is full, so it ends as soon as the item it is making (a user's
    generator step, a batch's planning) is done; the iterator's own `close` (a
    generator's cleanup: files) runs in that thread.

    Args:
        items: the iterator to run ahead.
        size: how many made items may wait (at least 1).
        stop: an event that stops the thread when set, for an iterator that checks it
            too (a feeder's worker processes); by default one of its own.
        name: the thread's name.
    """

    def __init__(self, items: Iterator, size: int = 1, stop: threading.Event | None = None,
                 name: str = "refold-prefetch"):
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, size))
        self._stop = stop or threading.Event()
        self._done = False
        self._items = items
        self._thread = start_deep_thread(self._produce, name=name, daemon=True)

    def _produce(self) -> None:
        try:
            for item in self._items:
                if not self._put((_ITEM, item)):
                    return
            self._put((_END, None))
        except BaseException as e:  # handed to the reader, raised there
            self._put((_ERROR, e))
        finally:
            close = getattr(self._items, "close", None)
            if close is not None:
                close()

    def _put(self, message: tuple) -> bool:
        """Queues `message`; False once the reader has stopped the thread."""
        while not self._stop.is_set():
            try:
                self._queue.put(message, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def next(self) -> Any:
        """The next item; None after the last."""
        if self._done:
            return None
        kind, value = self._queue.get()
        if kind == _ITEM:
            return value
        self._done = True
        if kind == _ERROR:
            raise value
        return None

    def __iter__(self) -> Iterator:
        try:
            while not self._done:
                kind, value = self._queue.get()
                if kind == _ITEM:
                    yield value
                    continue
                self._done = True
                if kind == _ERROR:
                    raise value
        finally:
            self.close(timeout=None)

    def ended(self) -> bool:
        """Whether the thread has finished (the items ended, failed or were stopped)."""
        return not self._thread.is_alive()

    def close(self, timeout: float | None = 30.0) -> None:
        """Stops the thread, drops the items made ahead, and waits up to `timeout`
        seconds (None: as long as it takes) for the thread to end."""
        self._stop.set()
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self._thread.join(timeout)
