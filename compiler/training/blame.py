"""Blaming an input: a TensorFlow error in a batched step as an `InputError`.

A batch fails inside the traced step with an error that names an op, not an input.
The reference evaluator checks one input at a time and names the block path, so
when a step fails its inputs are evaluated one by one to find the culprit.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import tensorflow as tf

from refold.blocks.errors import InputError
from refold.compiler.compiler import find_bad_input
from refold.compiler.feeding.lists import as_inputs


@contextlib.contextmanager
def blaming(block, datasets) -> Iterator[None]:
    """Turns a `tf.errors.OpError` raised inside into an `InputError` naming the input
    (its index in its dataset) and the block path.

    Args:
        block: the root block the inputs were run through.
        datasets: `(inputs, what, skipped)` triples: the inputs, their name in the
            error (`"x"`, `"validation_data"`), and the indices left out of the run;
            a fourth item, if given, is each input's index to name it by (a stream's
            batch: their positions in the stream). Or a function returning such a
            list when the error happens (the batches of streams being run).

    The original error is raised again if no input fails on the reference evaluator.
    """
    try:
        yield
    except tf.errors.OpError as e:
        for inputs, what, skipped, *positions in (datasets() if callable(datasets)
                                                  else datasets):
            bad = find_bad_input(block, as_inputs(inputs, what), skipped)
            if bad is not None:
                reason = bad.reason if what == "x" else f"{bad.reason} (in {what})"
                index = bad.example_index if not positions else \
                    int(positions[0][bad.example_index])
                raise InputError(bad.block_path, reason, index) from e
        raise
