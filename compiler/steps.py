"""The functions Keras' loop calls for each step of a `Model`.

Keras makes `train_function`, `test_function` and `predict_function` in its
`make_*_function` hooks (public API, meant to be overridden). A `Model`'s take the
batch indices that Keras' iterator yields (the model's `BatchFeeder.dataset()`),
ask the feeder for those packed batches and run one traced step on each. The
traced step has a fixed input signature (the packed arrays' and the labels'
`TensorSpec`s, all of unknown length), so it is traced once per label layout.

It runs in TensorFlow's graph mode, never under XLA: the engine updates its value
buffers in place with ops that XLA has no kernels for (`InplaceUpdate`,
`InplaceAdd`), so `Model.compile` turns Keras' `jit_compile` off.
"""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

from compiler.pipeline import BatchFeeder


class StepFunction:
    """Runs `step(data)` on packed batches, traced once per input signature.

    Args:
        step: the model's `train_step`, `test_step` or `predict_step`.
        feeder: returns the `BatchFeeder` of the call under way.
        eager: returns whether to run the step without tracing (`run_eagerly`).
    """

    def __init__(self, step: Callable, feeder: Callable[[], BatchFeeder],
                 eager: Callable[[], bool]):
        self._step, self._feeder, self._eager = step, feeder, eager
        self._traced: dict = {}

    def run(self, i: int):
        """The step's outputs on batch `i` of the current feeder."""
        feeder = self._feeder()
        data = feeder.batch(i)
        if self._eager():
            return self._step(tf.nest.map_structure(tf.convert_to_tensor, data))
        key = tuple(tf.nest.flatten(feeder.signature))
        fn = self._traced.get(key)
        if fn is None:
            # the concrete function: calling it skips the tf.function's argument
            # matching, ~0.25 ms a step (BENCHMARKS.md)
            fn = self._traced[key] = tf.function(
                self._step, input_signature=[feeder.signature],
                autograph=False).get_concrete_function()
        return fn(data)

    def on_iterator(self, iterator, steps: int):
        """For `train_function` / `test_function`: up to `steps` batches, the indices
        taken from Keras' `iterator`; the last step's outputs (its logs)."""
        outputs = None
        for i in next_indices(iterator, steps):
            outputs = self.run(i)
        if outputs is None:
            raise StopIteration
        return outputs

    def on_data(self, data: list):
        """For `predict_function`: the outputs of the batches whose indices Keras
        fetched (`data`), concatenated."""
        outs = [self.run(int(i)) for i in data]
        return outs[0] if len(outs) == 1 else tf.concat(outs, 0)


def next_indices(iterator, n: int) -> list[int]:
    """Up to `n` batch indices from Keras' iterator (fewer at the end of a pass)."""
    out = []
    for _ in range(n):
        try:
            out.append(int(next(iterator)))
        except (StopIteration, tf.errors.OutOfRangeError):
            break
    return out
