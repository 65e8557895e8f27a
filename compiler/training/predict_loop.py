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
"""

from __future__ import annotations

import keras
import numpy as np


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
