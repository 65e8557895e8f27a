"""`BatchingPredictor`: concurrent requests answered together, in shared batches.

A server answers many clients at once, each with one input. Dynamic batching pays
off when those inputs run as one batch: one planned batch, one call of the
SavedModel, the nodes of all the trees batched together. A `BatchingPredictor`
gathers the inputs queued while the previous batch ran, and those that arrive
within `max_wait` seconds of the first (up to `max_batch`), runs them as one batch
on a background thread, and hands
each caller its own row. An input is expanded in its caller's thread when it
arrives, so a bad one fails there, alone, and never spoils the batch it would
have joined.

>>> import os, tempfile, threading, keras
>>> import refold as td
>>> from refold.compiler import Model
>>> from refold.serving import Predictor
>>> path = os.path.join(tempfile.mkdtemp(), "m")
>>> Model(td.Map(td.Scalar()) >> td.Sum() >> td.Function(lambda x: x[:, None])).export(
...     path, verbose=False)
>>> with BatchingPredictor(Predictor(path, safe_mode=False), max_wait=0.05) as server:
...     futures = [server.submit([float(i), 1.0]) for i in range(4)]
...     [f.result().tolist() for f in futures], server.batch_sizes
([[1.0], [2.0], [3.0], [4.0]], [4])
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future
from typing import Any

import numpy as np

from refold.serving.predictor import Predictor

_STOP = object()


class BatchingPredictor:
    """Answers single inputs from many threads in shared batches.

    Args:
        predictor: the `Predictor` that runs the batches.
        max_batch: the most inputs in one batch.
        max_wait: how long (seconds) a batch waits for more inputs after its first
            one arrives: the latency a lone request pays for batching. 0 (default)
            takes what is queued: the requests that arrive while a batch runs make
            up the next one, so under load batches grow on their own, and a lone
            request waits for nothing (a longer wait gave larger batches but no
            clear gain in throughput: BENCHMARKS.md, "Serving an export").

    `predict(x)` blocks until `x`'s output is ready; `submit(x)` returns a
    `concurrent.futures.Future` of it. `batch_sizes` lists the sizes of the
    batches run so far. `close()` (or leaving a `with` block) answers the inputs
    already submitted, then stops the batching thread.
    """

    def __init__(self, predictor: Predictor, max_batch: int = 64, max_wait: float = 0.0):
        if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
            raise ValueError(f"max_batch must be a positive int, got {max_batch!r}")
        if not max_wait >= 0:
            raise ValueError(f"max_wait must be a number of seconds >= 0, got {max_wait!r}")
        self.predictor = predictor
        self.max_batch, self.max_wait = max_batch, float(max_wait)
        self.batch_sizes: list[int] = []
        self._queue: queue.Queue = queue.Queue()
        self._closed = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._serve, name="refold-batching",
                                        daemon=True)
        self._thread.start()

    def submit(self, x: Any) -> Future:
        """A future of the output for input `x`; an input that does not fit the
        block raises `blocks.InputError` here (naming the block path)."""
        example = self.predictor.expand([x])[0]
        future: Future = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("this BatchingPredictor is closed")
            self._queue.put((example, future))
        return future

    def predict(self, x: Any) -> np.ndarray:
        """The output for input `x` (run in a batch with concurrent callers' inputs)."""
        return self.submit(x).result()

    def _serve(self) -> None:
        while True:
            first = self._queue.get()
            if first is _STOP:
                return
            batch, stop = [first], False
            deadline = time.monotonic() + self.max_wait
            while len(batch) < self.max_batch:
                try:
                    item = self._queue.get(timeout=max(deadline - time.monotonic(), 0))
                except queue.Empty:
                    break
                if item is _STOP:
                    stop = True
                    break
                batch.append(item)
            self._run(batch)
            if stop:
                return

    def _run(self, batch: list) -> None:
        self.batch_sizes.append(len(batch))
        try:
            out = self.predictor.run(self.predictor.request_expanded([e for e, _ in batch]))
        except Exception as e:  # every caller of the batch hears of it
            for _, future in batch:
                future.set_exception(e)
            return
        for (_, future), row in zip(batch, out):
            future.set_result(row)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._queue.put(_STOP)
        self._thread.join()

    def __enter__(self) -> BatchingPredictor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
