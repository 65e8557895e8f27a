"""`Feeder`: what a `Model`'s step functions ask of the source of one call's batches.

`fit`, `evaluate` and `predict` make one feeder per call and role (training data,
validation data, ...): a list's (`compiler.feeding.lists.BatchFeeder`), a stream's
(`compiler.feeding.streams.StreamFeeder`), and their counterparts under a
`tf.distribute` strategy (`compiler.distribute.strategy.ShardFeeder`,
`compiler.distribute.sharded_streams.ShardedStreamFeeder`). Keras' loop iterates the
feeder's `dataset()` only to pace itself; the step functions (`compiler.training.steps`)
take each step's packed batch from `batch(i)` and, when a batch fails, name its inputs
with `examples(i)`. A new kind of input source is a new `Feeder`: the steps, Keras' loop
and `predict`'s loop then take it as they take the others.
"""

from __future__ import annotations

import abc
import contextlib
from typing import Any

import numpy as np
import tensorflow as tf


class Feeder(abc.ABC):
    """The batches of one `fit`, `evaluate` or `predict` call, packed when asked for.

    The contract, which the step functions and `Model` rely on:

    - `dataset()` is what Keras' loop iterates: one element per step (under a
      strategy, one per replica per step, batched by replica). Only how many elements
      it has counts, not what they hold; it is endless when the number of steps is
      not known before the source ends.
    - `batch(i)` is the packed batch of step `i` of the current pass, numpy arrays:
      `(arrays, y)` or `(arrays, y, sample_weight)` with labels, `(arrays,)` without
      (`compiler.feeding.packed` says what `arrays` holds); under a strategy, a list of
      such tuples, one per local replica. `batch(0)` starts a pass (a new shuffle, a
      stream read again). A source of unknown length raises `StopIteration` at its end,
      as Keras expects of such data. A bad input raises `blocks.InputError` naming its
      position in the caller's data.
    - `examples(i)`, called after `batch(i)`, gives the positions in the caller's data
      of that batch's inputs (errors and `NonFiniteLossError` name inputs by them).
    - `n_batches` is the number of steps of a pass, or None while unknown.
    - `signature` holds the `tf.TensorSpec`s of a batch's tuple (of one replica's), once
      known (a stream knows it after its first batch).
    - `with_labels` says whether batches carry labels and sample weights.
    - `planning_ahead(i)` is a scope in which the step function waits on TensorFlow (a traced
      step's first call): the feeder may plan batches from `i` on meanwhile.
    - `close()` stops whatever works ahead for the feeder (a planning thread) and
      releases what it holds; it may be called more than once.
    """

    n_batches: int | None
    signature: tuple | None
    with_labels: bool

    @abc.abstractmethod
    def dataset(self) -> tf.data.Dataset:
        """What Keras' loop iterates: one element per step (see the class docstring)."""

    @abc.abstractmethod
    def batch(self, i: int) -> Any:
        """The packed batch of step `i` of the current pass; `batch(0)` starts a pass."""

    @abc.abstractmethod
    def examples(self, i: int) -> np.ndarray:
        """The positions in the caller's data of the inputs of `batch(i)`, after it."""

    def planning_ahead(self, i: int) -> contextlib.AbstractContextManager:
        """A scope in which the caller waits outside Python (a traced step's first
        call) and the feeder may prepare batches from `i` on meanwhile; by default it
        does nothing."""
        return contextlib.nullcontext()

    def close(self) -> None:  # noqa: B027  (not abstract: most feeders hold nothing)
        """Stops and releases what works ahead for this feeder; a feeder that packs each
        batch when asked, in the caller's thread, holds nothing to release."""
