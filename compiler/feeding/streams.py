"""Streams of inputs: generators, iterables, `keras.utils.PyDataset`s and files read
line by line, fed to `Model.fit`, `evaluate` and `predict` without holding them in memory.

A stream's items are read by a background thread that groups them into batches,
expands and plans each batch, and hands the packed arrays to the training step over a
bounded queue (`compiler.feeding.prefetch`): at most `ahead` batches wait, so memory
stays bounded however long the stream, and planning overlaps the device step
(TensorFlow and the planning kernels release the GIL). The thread is stopped and
joined when the call ends, early stop or not, so nothing is left to wait on at
interpreter exit.

With `Model(workers=n)` the thread hands each batch's inputs (pickled) to one of n
worker processes (`compiler.feeding.process_pool.StreamWorkers`, forked once per model), which
expands and plans it and sends back the packed arrays; the thread keeps each worker
busy with one batch and passes the batches on in the stream's order, so training
sees the same batches as without workers. Expanding a batch is Python (it holds
the GIL), so only processes can run it beside the step and beside each other.

What a stream yields:

- to a model compiled with a loss (Keras style), `(input, label)` or
  `(input, label, sample_weight)` tuples; otherwise (losses from `td.Metric`s,
  and always for `predict`), inputs;
- a `keras.utils.PyDataset` yields whole batches: a list of inputs, or
  `(inputs, labels[, sample_weights])`; its `num_batches` may be None (endless).

A list stays a list: it is expanded once up front and cached. A stream is read
afresh on every pass: each epoch iterates it again (a generator, which can be read
only once, needs `steps_per_epoch`, and then gives its next items to each epoch).

>>> import json, os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "trees.jsonl")
>>> with open(path, "w") as f:
...     _ = f.write('[1.0, [2.0, -3.0]]\\n\\n[-1.5, 0.5]\\n')
>>> list(Lines(path, json.loads))
[[1.0, [2.0, -3.0]], [-1.5, 0.5]]
"""

from __future__ import annotations

import gzip
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from refold.blocks.errors import InputError
from refold.compiler.feeding.feeder import Feeder
from refold.compiler.feeding.prefetch import Prefetch
from refold.compiler.feeding.shards import (
    LineRecord,
    Part,
    Shard,
    known_batches,
    read_steps,
    source_name,
)

# Batches planned ahead of the step, waiting in the queue.
AHEAD = 4


class LineError(InputError):
    """A line of a `Lines` file that its `parse` refused: an `InputError` whose
    `block_path` is the line (`file:number`), so that it reads like a bad input
    (skipped with `on_bad_example="skip"`, named by its position in the stream)."""


class Lines:
    """The lines of text files as a stream of inputs, read anew on every pass.

    Args:
        path: the file, or a list of files read one after the other; a name ending
            in `.gz` is read through gzip. Under a `tf.distribute` strategy with at
            least as many files as workers, each worker reads only its own files
            (`compiler.feeding.shards`).
        parse: turns a line (without its newline) into an input, or into an
            `(input, label)` tuple for a model compiled with a loss. Default: the line.
        skip_blank: leave out lines that are only whitespace.
        encoding: the files' text encoding.

    Memory holds one line at a time (and the batches the model plans ahead). A
    line that `parse` refuses raises `LineError` (a `blocks.InputError`, so a
    `ValueError`) naming the file and line number.
    """

    def __init__(self, path: str | os.PathLike | Sequence[str | os.PathLike],
                 parse: Callable[[str], Any] | None = None,
                 skip_blank: bool = True, encoding: str = "utf-8"):
        several = isinstance(path, (list, tuple))
        self.paths = [os.fspath(p) for p in path] if several else [os.fspath(path)]
        if not self.paths:
            raise ValueError("Lines needs at least one file, got an empty list")
        self.path = self.paths if several else self.paths[0]
        self.parse = parse
        self.skip_blank = skip_blank
        self.encoding = encoding
        for p in self.paths:
            if not os.path.isfile(p):
                raise FileNotFoundError(f"no such file: {p}")

    def __iter__(self) -> Iterator[Any]:
        for record in self.lines():
            yield self.parse_line(*record)

    def lines(self, paths: Sequence[str] | None = None) -> Iterator[LineRecord]:
        """`(path, line number, text)` of each line of `paths` (default: every file),
        in order, unparsed (blank ones left out with `skip_blank`)."""
        for path in self.paths if paths is None else paths:
            opener = gzip.open if path.endswith(".gz") else open
            with opener(path, "rt", encoding=self.encoding) as f:
                for number, line in enumerate(f, 1):
                    line = line.rstrip("\r\n")
                    if self.skip_blank and not line.strip():
                        continue
                    yield LineRecord(path, number, line)

    def parse_line(self, path: str, number: int, text: str) -> Any:
        """`parse(text)`, or `LineError` naming `path:number` when it fails."""
        if self.parse is None:
            return text
        try:
            return self.parse(text)
        except Exception as e:
            raise LineError(f"{path}:{number}", f"cannot parse the line "
                            f"({type(e).__name__}: {e}): {text[:80]!r}") from e

    def __repr__(self) -> str:
        return f"Lines({self.path!r})"


def is_stream(x: Any) -> bool:
    """Whether `x` is read as a stream: a `PyDataset`, a `tf.data.Dataset`, or an
    iterable that is not a sequence (a generator, an iterator, `Lines`, ...).
    Lists, tuples, arrays and other sequences are in-memory datasets."""
    if isinstance(x, (keras.utils.PyDataset, tf.data.Dataset)):
        return True
    if isinstance(x, (str, bytes, dict, Sequence, np.ndarray)):
        return False
    return isinstance(x, Iterable)


def reads_once(x: Any) -> bool:
    """Whether a stream can be read only once (iterating it gives itself: a generator
    or an iterator), so that a second pass would find it empty."""
    if isinstance(x, (keras.utils.PyDataset, tf.data.Dataset)):
        return False
    return iter(x) is x


@dataclass
class RawBatch:
    """A batch as read from a stream: inputs, their labels and weights (lists or
    None) and their positions in the pass (what errors name them by)."""

    inputs: list
    y: list | np.ndarray | None
    w: list | np.ndarray | None
    positions: np.ndarray
    where: list[str] | None = None  # each input's file and line (`Lines`), or None

    def take(self, keep: list[int]) -> RawBatch:
        """The batch of the inputs at `keep` only."""
        return RawBatch([self.inputs[k] for k in keep], _take(self.y, keep),
                        _take(self.w, keep), self.positions[keep],
                        _take(self.where, keep))


class StreamFeeder(Feeder):
    """The batches of one `fit`, `evaluate` or `predict` call over a stream.

    Keras' loop iterates `dataset()` (batch indices) and the model's step function
    asks for `batch(i)`, as with a `compiler.feeding.lists.BatchFeeder`. Batch 0 starts a
    pass over the stream (each epoch, without `steps_per_epoch`); with `endless`
    (`steps_per_epoch` given), the one pass goes on across epochs and a stream that
    can be read again is started over when it ends. The end of a pass ends the
    epoch (`StopIteration`, as Keras expects of data of unknown size).

    Args:
        pipeline: the model's `InputPipeline`.
        source: the stream (see the module docstring).
        batch_size: inputs per batch (a `PyDataset` makes its own batches).
        labelled: items are `(input, label[, weight])` tuples.
        loss: the compiled Keras loss the labels are checked against, or None.
        skip: leave out inputs that do not fit the block (`on_bad_example="skip"`),
            calling `on_skip(position, error)` for each.
        what: the stream's name in errors (`"x"`, `"validation_data"`).
        class_weight: `{class id: weight}` for the labels, or None.
        endless: read on across epochs (`steps_per_epoch`).
        ahead: batches planned ahead of the step.
        resume: with `endless`, returns how many batches to read past when a run
            starts (`epoch * steps_per_epoch` for a run resumed at `epoch`, so that
            it reads on where an uninterrupted run would be); a stream read only
            once is never read past (it goes on where it stands).
        shard: where this process reads the stream (`compiler.feeding.shards`); default:
            one device, every item.
    """

    def __init__(self, pipeline, source, batch_size: int, labelled: bool, loss=None,
                 skip: bool = False, what: str = "x", class_weight: dict | None = None,
                 endless: bool = False, on_skip: Callable | None = None, ahead: int = AHEAD,
                 resume: Callable[[], int] | None = None, shard: Shard | None = None):
        self.pipeline, self.source, self.batch_size = pipeline, source, batch_size
        self.labelled, self.loss, self.skip, self.what = labelled, loss, skip, what
        self.class_weight, self.endless, self.ahead = class_weight, endless, ahead
        self.with_labels = labelled
        self.shard = shard or Shard.single(batch_size)
        self._on_skip = on_skip
        self._resume = resume
        self._ahead: Prefetch | None = None
        self._workers = None  # the worker processes this feeder has claimed
        self._once = None if not reads_once(source) else source
        self.n_batches = known_batches(source) if not endless else None
        self.signature = None
        self.current = RawBatch([], None, None, np.zeros(0, np.int64))

    def dataset(self) -> tf.data.Dataset:
        """The batch indices Keras iterates: `range(n)` when the number of batches
        is known, else endless (the end of the stream ends the epoch)."""
        options = tf.data.Options()
        options.experimental_optimization.apply_default_optimizations = False
        options.autotune.enabled = False
        ds = tf.data.Dataset.range(self.n_batches) if self.n_batches is not None \
            else tf.data.Dataset.counter()
        return ds.with_options(options)

    def batch(self, i: int) -> tuple:
        """The next batch of the stream: `(arrays, y?, sample_weight?)`, numpy."""
        if i == 0 or self._ahead is None:
            self.start()
        item = self._ahead.next()
        if item is None:
            if i == 0:
                raise ValueError(f"no inputs in {self.what}: the stream "
                                 f"{source_name(self.source)} gave none")
            raise StopIteration
        arrays, labels, raw = item
        self.current = raw
        spec = (self.pipeline.signature(), *labels.signature())
        self.signature = spec if self.with_labels else spec[:1]
        batch = (arrays, *labels.batch(slice(None)))
        return batch if self.with_labels else batch[:1]

    def start(self) -> None:
        """Starts a pass (or, with `endless`, the run): the planning thread, which
        hands the batches to the compiler's worker processes if it can claim them."""
        self._start(self.batches())

    def _start(self, raws: Iterator) -> None:
        self.close()
        workers = self._claim_workers()
        stop = threading.Event()
        self._ahead = Prefetch(self._packed(raws, workers, stop.is_set), self.ahead, stop,
                               name="refold-stream")

    def examples(self, i: int) -> np.ndarray:
        """The positions in the stream (of its pass) of the last batch's inputs."""
        return self.current.positions

    def close(self) -> None:
        """Stops the planning thread (joined), dropping the batches it planned ahead
        (the worker processes, if any, stay with the compiler for the next pass)."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            ahead.close()
        workers, self._workers = self._workers, None
        if workers is not None and (ahead is None or ahead.ended()):
            workers.release()  # else a thread stuck in the stream keeps them

    def _claim_workers(self):
        """The compiler's worker processes for this pass, or None: without workers,
        or when another stream has them (validation data read during training with
        `steps_per_epoch`), which then is expanded in its thread. Here, in the main
        thread with no planning thread of ours running, dead workers are forked anew."""
        workers = self.pipeline.compiler.stream_workers()
        if workers is None or not workers.claim():
            return None
        workers.revive()
        self._workers = workers
        return workers

    # --- in the planning thread ------------------------------------------------------

    def batches(self) -> Iterator[RawBatch]:
        """The raw batches of one run: a pass, or with `endless` pass after pass."""
        skip = self._resume() if self._resume and self.endless and self._once is None \
            else 0
        while True:
            n = 0
            for step in read_steps(self.source, self.shard, self._once, skip):
                n += 1
                if step is None:  # read past (a resumed run)
                    skip -= 1
                    continue
                yield self._step(step)
            if not self.endless or self._once is not None or n == 0:
                return

    def _step(self, parts: list[Part]):
        """What `batches` yields for a step read (one device: its one part)."""
        return self._raw(parts[0])

    def _raw(self, part: Part) -> RawBatch:
        """A part as read, parsed (a `Lines` record) and split into inputs, labels and
        weights; lines that do not parse are skipped (`skip`) or raise."""
        records, positions, where = part.records, part.positions, part.where
        if where is not None and isinstance(self.source, Lines):
            items, keep = [], []
            for k, record in enumerate(records):
                try:
                    items.append(self.source.parse_line(*record))
                    keep.append(k)
                except LineError as e:
                    e = self.named(e, positions[k], where[k])
                    if not self.skip:
                        raise e from e.__cause__
                    self._skipped(positions[k], e)
            if len(keep) < len(records):
                positions, where = [positions[k] for k in keep], [where[k] for k in keep]
            records = items
        positions = np.asarray(positions, np.int64)
        if part.batch is not None:  # a PyDataset's batch
            if not self.labelled:
                return RawBatch(records, None, None, positions)
            if part.y is None:
                raise ValueError(f"{source_name(self.source)}[{part.batch}] has no labels, "
                                 "but the model is compiled with a loss: yield (inputs, y) "
                                 "batches")
            return RawBatch(records, part.y, part.w, positions)
        return self._unpack(records, positions, where)

    def _unpack(self, chunk: list, positions: np.ndarray, where=None) -> RawBatch:
        if not self.labelled or not chunk:
            return RawBatch(chunk, None, None, positions, where)
        for k, item in enumerate(chunk):
            if not (isinstance(item, tuple) and len(item) in (2, 3)):
                raise ValueError(
                    f"{self.what}[{positions[k]}]{_at(where, k)} is a {type(item).__name__}, "
                    "not an (input, label) or (input, label, sample_weight) tuple: a model "
                    "compiled with a loss trains on a stream of such tuples")
        w = [item[2] for item in chunk] if len(chunk[0]) == 3 else None
        if w is not None and any(len(item) != 3 for item in chunk):
            raise ValueError(f"{self.what}: some items have a sample weight and some do not "
                             f"(around {self.what}[{positions[0]}])")
        return RawBatch([item[0] for item in chunk], [item[1] for item in chunk], w,
                        positions, where)

    def _packed(self, raws: Iterator[RawBatch], workers=None,
                stop: Callable[[], bool] = lambda: False,
                keep_empty: bool = False) -> Iterator[tuple]:
        """`(arrays, labels, raw)` per batch: expanded here through the compiler's cache,
        or with `workers` (`compiler.feeding.process_pool.StreamWorkers`) expanded and planned in
        their processes (the cache unused), replies in the batches' order. A batch
        left with no input (all skipped) is left out, or with `keep_empty` given as
        `(None, None, raw)`."""
        if workers is None:
            compiler = self.pipeline.compiler
            for raw in raws:
                if not raw.inputs:
                    pass
                elif compiler.expands_batches:  # no cache to fill: one graph a batch
                    arrays, kept, skipped, error = plan_in_worker(
                        compiler, (raw.inputs, self.skip))
                    raw = self._kept(raw, kept, skipped, error)
                    if raw.inputs:
                        yield arrays, self._labels(raw), raw
                        continue
                else:
                    examples, kept, skipped, error = expand_skipping(
                        lambda xs: compiler.expand(xs, 0, in_workers=False), raw.inputs,
                        self.skip)
                    raw = self._kept(raw, kept, skipped, error)
                    if raw.inputs:
                        plan = compiler.plan_expanded(examples, grouped=True)
                        yield self.pipeline.arrays(plan), self._labels(raw), raw
                        continue
                if keep_empty:
                    yield None, None, raw
            return
        replies = workers.map(raws, lambda raw: (raw.inputs, self.skip), stop)
        try:
            for raw, (arrays, kept, skipped, error) in replies:
                raw = self._kept(raw, kept, skipped, error)
                if raw.inputs:
                    yield arrays, self._labels(raw), raw
                elif keep_empty:
                    yield None, None, raw
        finally:
            replies.close()  # drains the replies of batches still in the workers

    def _kept(self, raw: RawBatch, kept: list, skipped: list,
              error: InputError | None) -> RawBatch:
        """The batch without its skipped inputs (each reported to `on_skip`), or the
        error of its bad input raised, naming it by its position in the stream."""
        if error is not None:
            raise self.named_in(error, raw) from error.__cause__
        if not skipped:
            return raw
        for j, e in skipped:
            self._skipped(int(raw.positions[j]), self.named_in(e, raw))
        return raw.take(kept)

    def _skipped(self, position: int, error: InputError) -> None:
        if self._on_skip is not None:
            self._on_skip(position, error)

    def named_in(self, e: InputError, raw: RawBatch) -> InputError:
        """The error of an input of `raw` naming it by its position in the stream (and
        its file and line)."""
        j = e.example_index or 0
        return self.named(e, int(raw.positions[j]), None if raw.where is None
                          else raw.where[j])

    def named(self, e: InputError, position: int, where: str | None = None) -> InputError:
        """The error naming the input by its position in the stream (its index in
        the pass: `compiler.feeding.shards` says how a worker counts) and where it came from."""
        reason = e.reason
        if where is not None and where != e.block_path:
            reason = f"{reason} (at {where})"
        if self.what != "x":
            reason = f"{reason} (in {self.what})"
        err = type(e)(e.block_path, reason, int(position), e.data_path)
        err.__cause__ = e.__cause__
        return err

    def _labels(self, raw: RawBatch):
        from refold.compiler.feeding.lists import Labels, class_weights
        if raw.y is None:
            return Labels(None, None)
        what = "labels" if self.what == "x" else f"{self.what} labels"
        w = raw.w
        if self.class_weight is not None:
            w = class_weights(raw.y, self.class_weight)
        labels = Labels(np.asarray(raw.y), w, len(raw.inputs), what, rows=raw.positions)
        if self.loss is not None:
            labels.check_against(self.loss, self.pipeline.program.root.output_type)
        return labels


def expand_skipping(expand: Callable[[list], list], inputs: list, skip: bool) -> tuple:
    """`(examples, kept, skipped, error)`: `expand` of the inputs that fit the block.

    With `skip`, an input that raises `InputError` is left out and expansion goes on
    without it: `kept` lists the indices (into `inputs`) of the expanded ones and
    `skipped` holds `(index, error)` for the others. Without `skip`, the first bad
    input ends it: `error` is its `InputError` naming its index in `inputs`. Errors
    are returned, not raised, so that a worker process can send them back."""
    kept = list(range(len(inputs)))
    skipped: list = []
    while True:
        try:
            return expand([inputs[k] for k in kept]), kept, skipped, None
        except InputError as e:
            j = e.example_index
            if j is not None:
                e = e.with_example_index(kept[j])
            if not skip or j is None:
                return [], kept, skipped, e
            skipped.append((kept[j], e))
            kept = kept[:j] + kept[j + 1:]


def plan_in_worker(compiler, payload: tuple) -> tuple:
    """What a stream's worker process does with a batch (`Compiler.stream_workers`),
    and a stream's thread for a model without cache: `(arrays, kept, skipped,
    error)`, the packed arrays of the inputs that fit (None if none does) and, as
    `expand_skipping` says them, the inputs left out or the error of the first bad
    one. The batch is expanded as one graph (`compiler.graphs.expansion.expand_batch`):
    inputs that arrive pickled never hit the compiler's cache (keyed by the object)."""
    from refold.compiler.feeding.lists import InputPipeline
    from refold.compiler.graphs.expansion import expand_batch
    inputs, skip = payload
    try:
        batch = expand_batch(compiler.program, inputs, skip)
    except InputError as e:
        return None, list(range(len(inputs))), [], e
    if not batch.kept:
        return None, batch.kept, batch.skipped, None
    plan = compiler.plan_batch(batch)
    return InputPipeline(compiler).arrays(plan), batch.kept, batch.skipped, None


def _take(a, keep: list):
    if a is None:
        return None
    return [a[k] for k in keep]


def _at(where: list[str] | None, k: int) -> str:
    return "" if where is None else f" (at {where[k]})"
