"""`Model.predict`'s loop: Keras' predict loop, over the model's own batches.

Keras' `predict` iterates a `tf.data` dataset (here, of batch indices) and at the
end concatenates the batches' outputs with TensorFlow ops, a few of them per batch
(`tf.shape` of each, to look for ragged results). At batch 1 these cost about as
much as the step's own fixed cost (BENCHMARKS.md, "predict's loop"). A `Model`
knows its batches and that every output has the block's fixed shape, so this loop
asks the step function for batch indices directly and concatenates NumPy arrays.
It keeps what Keras' loop promises: callbacks (with a progress bar by `verbose`)
see `on_predict_begin`, every batch's `on_predict_batch_begin` and
`on_predict_batch_end` (with `{"outputs": ...}`) and `on_predict_end`; a callback
may set `model.stop_predicting`; `steps_per_execution` batches go to each call of
`predict_function`.

`predict` is the whole of `Model.predict`: this loop for a block whose output is one
tensor per input, `Compiler.run` batch by batch for the others.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import keras
import numpy as np

from refold.blocks.errors import InputError
from refold.compiler.distribute.strategy import is_distributed
from refold.compiler.feeding.lists import Labels, as_inputs, check_batch_size
from refold.compiler.feeding.model_feed import streamed
from refold.compiler.feeding.streams import StreamFeeder
from refold.compiler.training.blame import blaming


def predict_loop(model, n_batches: int | None, verbose, callbacks) -> np.ndarray:
    """The outputs of `model.predict_function` on batches `0 .. n_batches - 1` (until
    the feeder's stream ends when `n_batches` is None), concatenated in order."""
    if not isinstance(callbacks, keras.callbacks.CallbackList):
        callbacks = keras.callbacks.CallbackList(
            callbacks, add_progbar=verbose != 0, verbose=verbose, epochs=1,
            steps=n_batches, model=model)
    predict = model.make_predict_function()
    model.stop_predicting = False
    callbacks.on_predict_begin()
    outputs: list[np.ndarray] = []
    per_call, step = model.steps_per_execution, 0
    while n_batches is None or step < n_batches:
        callbacks.on_predict_batch_begin(step)
        last = step + per_call if n_batches is None else min(step + per_call, n_batches)
        try:
            batch = predict(list(range(step, last)))
        except StopIteration:  # a stream ended (compiler.feeding.streams)
            break
        outputs.append(np.asarray(batch))
        callbacks.on_predict_batch_end(step + per_call - 1, {"outputs": batch})
        step += per_call
        if model.stop_predicting:
            break
    callbacks.on_predict_end()
    if not outputs:
        raise ValueError("predict ran no batch: no inputs")
    return outputs[0] if len(outputs) == 1 else np.concatenate(outputs, 0)


def predict(model, x, batch_size: int | None, verbose, callbacks, steps,
            keras_predict: Callable):
    """`Model.predict` (its arguments; `keras_predict(dataset)`: Keras' own, which
    runs the strategy's steps): one output per input, in input order."""
    batch_size = 32 if batch_size is None else batch_size
    if streamed(x, None, None):
        return _predict_stream(model, x, batch_size, verbose, callbacks, steps)
    feed = model.feed
    if model.output_type_id is not None:
        x = as_inputs(x)
        feeder = feed.lists(x, None, None, batch_size, False, "predict", with_labels=False,
                            raise_errors=True, verbose=verbose)
        with blaming(model.block, [(x, "x", [])]):
            if is_distributed(model.distribute_strategy):
                return keras_predict(feeder.dataset())
            return predict_loop(model, feeder.n_batches, verbose, callbacks)
    check_batch_size(batch_size)
    inputs, _, graphs = feed.expand(as_inputs(x), Labels(None, None), raise_errors=True,
                                    verbose=verbose)
    compiler, results = model.compiler, []
    for b in range(0, len(inputs), batch_size):
        batch = inputs[b:b + batch_size]
        known = None if graphs is None else graphs[b:b + batch_size]
        if known is None or any(g is None for g in known):
            results.extend(compiler.run(batch))
        else:  # expanded and checked above: planned from the graphs, no second look-up
            results.extend(compiler.run_planned(compiler.plan_expanded(known), batch))
    return results


def _predict_stream(model, x, batch_size: int, verbose, callbacks, steps):
    check_batch_size(batch_size)
    feed = model.feed
    if model.output_type_id is not None:
        feeder = feed.stream(x, batch_size, "predict", labelled=False)
        try:
            with blaming(model.block, feed.stream_blame):
                return predict_loop(model, steps or feeder.n_batches, verbose, callbacks)
        finally:
            feed.close_streams()
    # results in block.eval's form: one batch at a time, no step function
    reader = StreamFeeder(feed.pipeline, x, batch_size, labelled=False)
    results: list = []
    for raw in itertools.islice(reader.batches(), steps):
        try:
            results.extend(model.compiler.run(raw.inputs))
        except InputError as e:
            raise reader.named_in(e, raw) from e.__cause__
    if not results:
        raise ValueError(f"no inputs in x: the stream {x!r:.60} gave none")
    return results
