"""Which items of a stream a worker reads, and how they make its steps.

A stream is read in steps. A step's global batch is `batch_size` items, cut into one
contiguous part per replica (the first `batch_size % replicas` parts one longer),
as `compiler.distribute.strategy.replica_parts` cuts a list's batch. On one device there is
one worker with one replica: its steps are the stream's batches. Under a
`tf.distribute` strategy each worker reads only the parts of its own replicas:

- **By position** (one file, several files but fewer than workers, a generator or
  other iterable, a `tf.data` dataset): the stream's items are numbered in its
  order; step `s` is items `s*B .. s*B+B-1` (`B` the global batch size) and each
  replica's part is its slice of them, so the global batches are exactly those of
  one device. Every worker goes through the whole stream (a file's lines are
  scanned, a generator's items made), but parses, expands and plans only its own
  items (`Lines` parses a line only for the worker that keeps it).
- **By file** (`Lines` of at least as many files as workers): worker `w` of `W`
  reads files `w, w+W, w+2W, ...` one after the other and never opens the others;
  its step `s` is its items `s*b .. s*b+b-1` (`b` its replicas' share of a global
  batch), cut at the same offsets into its replicas' parts. A step's global batch
  is then every worker's `s`-th chunk.
- **A `keras.utils.PyDataset`** (whole batches): worker `w` reads batches
  `w, w+W, ...`; its step `s` is batch `s*W + w`, cut into its replicas' parts as
  a list's batch is. A step trains on `W` of the dataset's batches.

Positions (what errors and `skipped_examples` name an input by) count the items of
the stream as this worker reads it: by position, the whole stream's; by file, its
own files' items one after the other; for a PyDataset, the items of the batches it
reads. A `Lines` item also carries where it came from (`file:line`).

>>> shard = Shard.of(batch_size=5, replicas=4, local=range(2, 4))  # worker 1 of 2
>>> shard.worker, shard.workers, shard.offset, shard.parts
(1, 2, 3, 2)
>>> shard.part_sizes
(1, 1)
>>> [[p.positions for p in step] for step in read_steps(range(12), shard)]
[[[3], [4]], [[8], [9]], [[], []]]
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import keras
import numpy as np
import tensorflow as tf


@dataclass(frozen=True)
class Shard:
    """One worker's place in the cluster, for reading a stream.

    Attributes:
        worker: this worker's index (`TF_CONFIG`'s task index), from 0.
        workers: the number of workers.
        batch_size: the global batch size.
        part_sizes: the sizes of this worker's replicas' parts of a full global batch.
        offset: where this worker's first part starts in a global batch.
    """

    worker: int
    workers: int
    batch_size: int
    part_sizes: tuple[int, ...]
    offset: int

    @classmethod
    def of(cls, batch_size: int, replicas: int, local: range) -> Shard:
        """The shard of the worker whose replicas are `local` (replica ids, as
        `compiler.distribute.strategy.local_replicas` gives them) among `replicas`."""
        sizes = [len(p) for p in np.array_split(np.arange(batch_size), replicas)]
        per_worker = len(local)
        return cls(worker=local[0] // per_worker, workers=replicas // per_worker,
                   batch_size=batch_size, part_sizes=tuple(sizes[local[0]:local[-1] + 1]),
                   offset=sum(sizes[:local[0]]))

    @classmethod
    def single(cls, batch_size: int) -> Shard:
        """One device: one worker, one replica."""
        return cls.of(batch_size, 1, range(1))

    @property
    def parts(self) -> int:
        """The number of parts of each step (this worker's replicas)."""
        return len(self.part_sizes)

    @property
    def size(self) -> int:
        """This worker's items in a full global batch."""
        return sum(self.part_sizes)

    def by_file(self, source: Any) -> bool:
        """Whether this worker reads `source` by file (see the module docstring)."""
        paths = getattr(source, "paths", None)
        return self.workers > 1 and paths is not None and len(paths) >= self.workers


@dataclass
class Part:
    """One replica's part of a step, as read: the raw items (a `Lines` item is its
    `LineRecord`, parsed later, only if the step is trained on), their positions,
    where they came from (`file:line`, or None) and, from a `PyDataset`, the labels
    and sample weights it gave with them (or None)."""

    records: list
    positions: list[int]
    where: list[str] | None = None
    y: Any = None
    w: Any = None
    batch: int | None = field(default=None)  # the PyDataset batch it came from


def read_steps(source: Any, shard: Shard, items: Iterator | None = None,
               skip: int = 0) -> Iterator[list[Part] | None]:
    """The steps of one pass over `source` for `shard`: one `Part` per local replica
    each, None for each of the first `skip` steps (read past: neither parsed nor
    expanded; a `PyDataset`'s batches are not even fetched).

    Args:
        source: a `Lines`, a `PyDataset`, a `tf.data.Dataset` or an iterable.
        shard: where this worker reads (`Shard.single` on one device).
        items: the iterator to read instead of a fresh one (a generator, which can
            be read only once, goes on where the last pass stopped).
        skip: steps to read past first.
    """
    if isinstance(source, keras.utils.PyDataset):
        yield from _pydataset_steps(source, shard, skip)
        return
    if shard.by_file(source):
        mine = source.paths[shard.worker::shard.workers]
        yield from _chunked(_line_records(source, mine), shard.size, shard, skip)
        return
    if items is None:
        items = _line_records(source) if hasattr(source, "lines") else iter(_items(source))
    yield from _chunked(items, shard.batch_size, shard, skip, shard.offset)


def _line_records(lines, paths=None) -> Iterator[tuple]:
    """A `Lines` source's records: `(path, line number, text)`, unparsed."""
    return lines.lines(paths)


def _items(source) -> Iterable:
    if isinstance(source, tf.data.Dataset):
        return source.as_numpy_iterator()
    return source


def _chunked(records: Iterator, step_size: int, shard: Shard, skip: int,
             offset: int = 0) -> Iterator[list[Part] | None]:
    """Steps of `step_size` records; this worker's items are those from `offset` on
    (by position: its slice of each global batch; by file: all of its chunk)."""
    records = iter(records)
    cuts = np.cumsum([0, *shard.part_sizes]) + offset
    position = 0
    while True:
        chunk = list(itertools.islice(records, step_size))
        if not chunk:
            return
        start, position = position, position + len(chunk)
        if skip:
            skip -= 1
            yield None
            continue
        yield [_part(chunk, start, int(cuts[k]), int(cuts[k + 1]))
               for k in range(shard.parts)]


def _part(chunk: list, start: int, lo: int, hi: int) -> Part:
    mine = chunk[lo:hi]
    positions = list(range(start + lo, start + lo + len(mine)))
    if mine and isinstance(mine[0], LineRecord):
        return Part(mine, positions, [f"{r.path}:{r.number}" for r in mine])
    return Part(mine, positions)


class LineRecord(tuple):
    """A line as `Lines.lines` gives it: `(path, number, text)`."""

    __slots__ = ()

    def __new__(cls, path: str, number: int, text: str):
        return super().__new__(cls, (path, number, text))

    path = property(lambda self: self[0])
    number = property(lambda self: self[1])
    text = property(lambda self: self[2])


def _pydataset_steps(ds, shard: Shard, skip: int) -> Iterator[list[Part] | None]:
    """Batches `w, w+W, ...` of a PyDataset, each cut into this worker's parts."""
    ds.on_epoch_begin()
    n = known_batches(ds)
    position = 0
    batches = range(shard.worker, n, shard.workers) if n is not None else \
        itertools.count(shard.worker, shard.workers)
    for b in batches:
        if skip:
            skip -= 1
            yield None
            continue
        x, y, w = pydataset_batch(ds, b)
        bounds = np.cumsum([0, *(len(p) for p in np.array_split(np.arange(len(x)),
                                                                 shard.parts))])
        parts = []
        for k in range(shard.parts):
            lo, hi = int(bounds[k]), int(bounds[k + 1])
            parts.append(Part(x[lo:hi], list(range(position + lo, position + hi)),
                              y=None if y is None else y[lo:hi],
                              w=None if w is None else w[lo:hi], batch=b))
        position += len(x)
        yield parts
    ds.on_epoch_end()


def pydataset_batch(ds, b: int) -> tuple:
    """`(inputs, y or None, sample_weight or None)` of batch `b` of a PyDataset, as
    lists or arrays; refused with the batch named if it is not such a batch."""
    item = ds[b]
    if isinstance(item, tuple) and len(item) in (2, 3):
        x, y, w = (*item, None) if len(item) == 2 else item
    elif isinstance(item, tuple):
        raise ValueError(f"{source_name(ds)}[{b}] is a tuple of {len(item)}: a PyDataset "
                         "yields a list of inputs or (inputs, y[, sample_weight])")
    else:
        x, y, w = item, None, None
    if isinstance(x, (str, bytes, dict)) or not isinstance(x, Iterable):
        raise TypeError(f"{source_name(ds)}[{b}]: a batch must be a list of inputs, got "
                        f"{type(x).__name__}")
    return list(x), y, w


def known_batches(source) -> int | None:
    """The number of batches of a `PyDataset` (None if endless); None for other streams."""
    if not isinstance(source, keras.utils.PyDataset):
        return None
    try:
        n = source.num_batches
    except NotImplementedError:
        return None
    return None if n is None else int(n)


def steps_in_order(source: Any, batch_size: int, workers: int,
                   replicas_per_worker: int = 1) -> Iterator[list]:
    """The global batches, in step order, that `workers` workers (of
    `replicas_per_worker` replicas each) train on from `source` under a strategy:
    each a list of items (a `Lines` item parsed), worker 0's first. What one
    process can train on (`train_on_batch`, or a `PyDataset` of these batches) to
    reproduce a distributed run.

    >>> [list(b) for b in steps_in_order(range(7), batch_size=4, workers=2)]
    [[0, 1, 2, 3], [4, 5, 6]]
    """
    replicas = workers * replicas_per_worker
    readers = [read_steps(source, Shard.of(batch_size, replicas, range(
        w * replicas_per_worker, (w + 1) * replicas_per_worker))) for w in range(workers)]
    for steps in itertools.zip_longest(*readers):
        yield [source.parse_line(*r) if isinstance(r, LineRecord) else r
               for step in steps if step is not None for part in step for r in part.records]


def source_name(source) -> str:
    """A stream's repr for errors, or its type when the repr is long."""
    text = repr(source)
    return text if len(text) <= 60 else f"<{type(source).__name__}>"
