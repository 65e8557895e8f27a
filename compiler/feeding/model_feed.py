"""`ModelFeed`: where a `Model`'s calls get their batches.

Each `fit`, `evaluate` or `predict` call makes one feeder per role ("train",
"validation", "test", "predict"): a `BatchFeeder` over a list (`compiler.feeding.lists`),
a `StreamFeeder` over a stream (`compiler.feeding.streams`), or their per-replica
forms under a strategy (`compiler.distribute`). Keras iterates only the feeder's
batch indices; the step functions ask `current(kind)` for the batches themselves.
The feed also keeps what those calls share: the epoch (it seeds the shuffling, so
that a resumed run sees the batches an uninterrupted one does) and the indices of
the inputs skipped as bad (`on_bad_example="skip"`).

Apart from `Model` so that the Keras class holds the Keras hooks and this one the
feeding; both read each other only through public names.
"""

from __future__ import annotations

import contextlib
import warnings

import numpy as np

from refold import compat
from refold.blocks.errors import InputError
from refold.callsite import user_line, warn
from refold.compiler.distribute.sharded_streams import ShardedStreamFeeder
from refold.compiler.distribute.strategy import is_distributed, sharded_feeder
from refold.compiler.feeding.lists import (
    InputPipeline,
    Labels,
    as_inputs,
    check_batch_size,
    hold_out,
    split_validation,
)
from refold.compiler.feeding.streams import StreamFeeder, is_stream, reads_once


class Skipped:
    """The inputs the last call skipped, kept out of Keras' attribute tracking.

    A list assigned to a Keras model's attribute is wrapped, and its name appended
    to the model's tracked list, on every assignment, so assigning one per `predict`
    call grew the model without bound (BENCHMARKS.md, memory over repeated calls)."""

    def __init__(self):
        self.x: list[int] = []
        self.validation: list[int] = []

    def record(self, what: str, bad: list[int]) -> None:
        """The indices skipped of `x` (`what == "x"`) or of the validation inputs."""
        if what != "x":
            self.validation = bad
        else:
            self.x = bad


class ModelFeed:
    """The feeders of a `Model`'s calls, by role, and what the calls share.

    Args:
        model: the `Model` (its pipeline, strategy, seed, compiled loss and
            `on_bad_example` are read as each call starts).

    Attributes:
        pipeline: the model's `InputPipeline` (expansion, labels, packing).
        skipped: the `Skipped` inputs of the last call.
        epoch: the epoch under way (set by `fit`'s bookkeeping callback).
        test_role: the role `test_function` reads: "validation" while `fit`
            validates, "test" otherwise.
    """

    def __init__(self, model, pipeline: InputPipeline):
        self.model = model
        self.pipeline = pipeline
        self.skipped = Skipped()
        self.epoch = 0
        self.test_role = "test"
        self._feeders: dict = {}  # role -> the feeder of the call under way

    def current(self, kind: str):
        """The feeder the `kind` ("train", "test", "predict") step function reads."""
        return self._feeders[self.test_role if kind == "test" else kind]

    def of_role(self, role: str):
        """The feeder of the call under way for `role`."""
        return self._feeders[role]

    def _compiled_loss(self, with_labels: bool):
        model = self.model
        return model.loss if with_labels and compat.compiled_loss(model) is not None else None

    def lists(self, x, y, sample_weight, batch_size: int, shuffle: bool, role: str,
              with_labels: bool = True, what: str = "x", raise_errors: bool = False,
              offset: int = 0, verbose=0):
        """The feeder of one call's batches over in-memory `x`, kept for `role` ("train",
        "validation", "test" or "predict"); its `dataset()` is what Keras iterates."""
        model = self.model
        if is_distributed(model.distribute_strategy):
            feeder = sharded_feeder(model, x, y, sample_weight, batch_size, shuffle,
                                    with_labels, what, raise_errors, offset, verbose)
            self._feeders[role] = feeder
            return feeder
        check_batch_size(batch_size)
        inputs = as_inputs(x, what)
        labels = self.pipeline.labels(y, sample_weight, len(inputs),
                                      self._compiled_loss(with_labels),
                                      "y" if what == "x" else f"{what} y")
        n_given = len(inputs)
        if model.compiler.cache_size == 0 and (raise_errors or model.on_bad_example == "raise"):
            # nothing to cache: each batch is expanded (and checked) as it is packed,
            # and a bad input raises there, named by its index (not expanded twice)
            self.skipped.record(what, [])
            graphs = None
        else:
            inputs, labels, graphs = self.expand(inputs, labels, raise_errors=raise_errors,
                                                 what=what, offset=offset, verbose=verbose)
        skipped = self.skipped.validation if what != "x" else self.skipped.x
        if not inputs:
            raise ValueError(f"no inputs in {what}" + (" (all were skipped)" if
                                                       len(x) else ""))
        n = len(inputs)

        def order() -> np.ndarray:  # called as each epoch starts reading
            return np.random.default_rng(model.seed + self.epoch).permutation(n) \
                if shuffle else np.arange(n)

        feeder = self.pipeline.feeder(inputs, labels, batch_size, order, with_labels, what,
                                      graphs)
        feeder.offset = offset  # errors name an input by offset + its index
        if skipped:
            feeder.positions = np.setdiff1d(np.arange(n_given), skipped)
        self._feeders[role] = feeder
        return feeder

    def stream(self, x, batch_size: int, role: str, what: str = "x",
               labelled: bool | None = None, class_weight=None, endless: bool = False,
               resume=None) -> StreamFeeder:
        """The `StreamFeeder` of one call over stream `x`, kept for `role` (under a
        strategy, this worker's shard of it: `compiler.distribute.sharded_streams`)."""
        model = self.model
        check_batch_size(batch_size)
        if labelled is None:
            labelled = compat.compiled_loss(model) is not None
        skipped = self.skipped.validation if what != "x" else self.skipped.x
        skipped.clear()
        seen: set = set()  # a stream read again (each epoch) skips its bad inputs again
        caller = user_line()  # on_skip runs on the thread that reads the stream

        def on_skip(position: int, error: InputError) -> None:
            if not skipped:
                warn(f"skipping the inputs of {what} that do not fit the block "
                     f"(on_bad_example='skip'); the first: {error}", at=caller)
            if position not in seen:
                seen.add(position)
                skipped.append(position)

        sharded = is_distributed(model.distribute_strategy)
        feeder = (ShardedStreamFeeder if sharded else StreamFeeder)(
            model if sharded else self.pipeline, x, batch_size, labelled,
            loss=self._compiled_loss(labelled),
            skip=model.on_bad_example == "skip" and role != "predict", what=what,
            class_weight=class_weight, endless=endless, on_skip=on_skip, resume=resume)
        self._feeders[role] = feeder
        return feeder

    def expand(self, inputs: list, labels: Labels, raise_errors: bool = False,
               what: str = "x", offset: int = 0, verbose=0):
        """Expands every input once; drops (and records) or raises on bad ones.
        With `verbose`, many inputs show a progress bar (`lists.PROGRESS_AFTER`).
        Returns `(inputs, labels, graphs)`: `graphs` are the kept inputs' graphs
        (None where one is not known) if a batch of them can be planned from its
        graphs as it would from the inputs (a cache on: graphs of single inputs),
        else None; the first pass packs them, so an input is checked once an epoch."""
        skip = self.model.on_bad_example == "skip" and not raise_errors
        inputs, labels, bad, graphs = self.pipeline.expand_graphs(inputs, labels, skip, what,
                                                                  offset, verbose)
        self.skipped.record(what, bad)
        if self.model.compiler.cache_size == 0:  # batches are planned whole, or in rounds
            graphs = None
        return inputs, labels, graphs

    def stream_blame(self) -> list:
        """What a failed step is blamed on: the streams' batches being run."""
        return [(f.current.inputs, f.what, [], f.current.positions)
                for f in self._feeders.values() if isinstance(f, StreamFeeder)]

    def close_streams(self) -> None:
        """Stops the readers of the streams of the call that ends."""
        for feeder in self._feeders.values():
            if isinstance(feeder, StreamFeeder):
                feeder.close()

    def split_off_validation(self, x, y, sample_weight, fraction, validation_data):
        """`fit(validation_split=fraction)`: `(split_at, (x, y, sample_weight) of the
        training part, validation_data of the held-out last part)`, as Keras splits."""
        if validation_data is not None:
            raise ValueError("give validation_data or validation_split, not both")
        # labels checked whole first, so that an error names the row of y
        self.pipeline.labels(y, sample_weight, len(x), self._compiled_loss(True))
        split_at = hold_out(len(x), fraction)
        head, tail = slice(None, split_at), slice(split_at, None)
        return split_at, (x[head], _rows(y, head), _rows(sample_weight, head)), \
            (x[tail], _rows(y, tail), _rows(sample_weight, tail))

    def validation(self, validation_data, split_at, batch_size: int, validation_steps,
                   validation_freq, epochs: range, verbose):
        """What `fit` validates on (a dataset of batch indices, or a stream's), and
        whether it is a stream."""
        vx, vy, vw = split_validation(validation_data)
        what = "validation_data" if split_at is None else \
            f"x[{split_at}:], the validation split"
        if not streamed(vx, vy, vw):
            return self.lists(vx, vy, vw, batch_size, False, "validation", what=what,
                              offset=split_at or 0, verbose=verbose).dataset(), False
        if validation_steps is None and reads_once(vx) \
                and sum(_validates(e, validation_freq) for e in epochs) > 1:
            raise ValueError(
                f"validation_data is a {type(vx).__name__}, which can be read only once, "
                "and fit validates more than once: give validation_steps, or a stream "
                "that can be read again")
        return self.stream(vx, batch_size, "validation", what="validation_data",
                           endless=validation_steps is not None).dataset(), True

    def fit_blame(self, x, given_x, split_at, validation_data) -> list:
        """Where a non-finite step of a `fit` on lists looks for the examples to name:
        `(inputs, what, skipped indices)` for x and the validation inputs."""
        skipped = self.skipped
        if split_at is not None:  # the two parts of x, blamed by their index in x
            return [(given_x, "x", [*skipped.x, *(split_at + i for i in skipped.validation)])]
        blame = [(x, "x", skipped.x)]
        if validation_data is not None:
            blame.append((split_validation(validation_data)[0], "validation_data",
                          skipped.validation))
        return blame


def check_stream(x, epochs: int, steps_per_epoch, validation_split) -> None:
    """Refuses a `fit` over stream `x` that cannot be read as asked."""
    if validation_split:
        raise ValueError("validation_split needs x in memory (a list); with a stream, "
                         "give validation_data")
    if steps_per_epoch is None and epochs > 1 and reads_once(x):
        raise ValueError(
            f"x is a {type(x).__name__}, which can be read only once, and fit runs "
            f"{epochs} epochs: give steps_per_epoch (each epoch then reads on), or a "
            "stream that can be read again (a PyDataset, compiler.Lines, or an object "
            "whose __iter__ returns a fresh generator)")


def streamed(x, y, sample_weight) -> bool:
    """Whether `x` is read as a stream: labels given apart (`y`) need x in memory."""
    return y is None and sample_weight is None and is_stream(x)


@contextlib.contextmanager
def end_of_stream_is_end_of_epoch(on: bool):
    """Keras warns that the input "ran out of data" whenever data of unknown size
    ends; for a stream read without `steps_per_epoch` that is the epoch's end."""
    if not on:
        yield
        return
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Your input ran out of data")
        yield


def _validates(epoch: int, validation_freq) -> bool:
    """Whether `fit` validates after epoch `epoch` (from 0): every `validation_freq`-th
    epoch (an int), or the epochs (from 1) it lists, as Keras documents the argument."""
    if isinstance(validation_freq, int):
        return (epoch + 1) % validation_freq == 0
    return epoch + 1 in validation_freq


def _rows(a, rows: slice):
    return None if a is None else np.asarray(a)[rows]
