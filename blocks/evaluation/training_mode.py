"""Training mode: whether ops compute as in training, and the training step's seed.

Some layers compute differently in training (`keras.layers.Dropout`, anything whose
`call` takes `training`). An op sees the *mode* in effect where its function is
called: training in `Model.fit`'s training step (`compiler.Model` traces and
differentiates it inside `training_mode(True, seed)`), inference everywhere else
(`evaluate`, `predict`, `Compiler.run`, exports and serving), and either in
`block.eval(x, training=..., seed=...)`, the reference evaluator.

A `Function` whose callable takes `training` (a Keras layer whose `call` does, or
a function with a `training` parameter) gets the mode's flag; other callables are
called as before. Random draws (`blocks.noise`) also read the step's seed here.

In graph mode the mode is read when a step is traced, so a traced step keeps the
mode it was traced in (the training step and the inference steps are different
traces). The mode is per thread: a scope covers what its thread calls.

>>> import tensorflow as tf
>>> import refold as td
>>> def noisy(x, training=False):
...     return x + 1.0 if training else x
>>> block = td.Scalar() >> td.Function(noisy)
>>> float(block.eval(1.0)), float(block.eval(1.0, training=True))
(1.0, 2.0)
>>> current().training
False
>>> with training_mode(True, seed=(7, 0)):
...     current().training, current().seed
(True, (7, 0))
"""

from __future__ import annotations

import contextlib
import inspect
import threading
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Mode:
    """What ops see when called: `training` (bool) and, in training, the step's
    `seed` (a tuple of ints or a 1-D int tensor; None in inference) and `state`, the
    seed hashed (`blocks.noise.seed_state`), made where the scope is entered."""

    training: bool = False
    seed: Any = None
    state: Any = None

    @classmethod
    def of(cls, training: bool, seed: Any = None) -> Mode:
        if not isinstance(training, bool):
            raise TypeError(f"training must be True or False, got {training!r}")
        if not training and seed is None:
            return INFERENCE
        from refold.blocks.noise import seed_state
        return cls(training, seed, None if seed is None else seed_state(seed))


INFERENCE = Mode()
_local = threading.local()


def current() -> Mode:
    """The mode in effect on this thread (inference outside any `training_mode`)."""
    return getattr(_local, "mode", INFERENCE)


@contextlib.contextmanager
def training_mode(training: bool = True, seed: Any = None):
    """Ops called inside compute in training (`training=True`) or inference mode.

    Args:
        training: the flag a `training` argument gets.
        seed: the step's seed, which random draws (`blocks.noise`) are keyed by
            with each node's own key: an int, a tuple of ints or a 1-D int tensor
            (`Model` uses `(seed, optimizer step, replica)`). Needed for random
            draws in training.
    """
    with using(Mode.of(training, seed)):
        yield


@contextlib.contextmanager
def using(mode: Mode):
    """Ops called inside see `mode` (a `Mode` made once, `Mode.of`: the reference
    evaluator sets its own around each op it calls)."""
    before = current()
    _local.mode = mode
    try:
        yield
    finally:
        _local.mode = before


def takes_training(fn: Any) -> bool:
    """Whether `fn` takes a `training` keyword: a Keras layer whose `call` does, or
    any callable with a `training` parameter.

    >>> import keras
    >>> takes_training(keras.layers.Dropout(0.5)), takes_training(keras.layers.LayerNormalization())
    (True, False)
    >>> takes_training(lambda x, training=False: x)
    True
    """
    from refold.blocks.layers import is_keras_layer
    target = fn.call if is_keras_layer(fn) else fn
    try:
        param = inspect.signature(target).parameters.get("training")
    except (TypeError, ValueError):  # a builtin without a signature
        return False
    return param is not None and param.kind in (param.POSITIONAL_OR_KEYWORD,
                                                param.KEYWORD_ONLY)


__all__ = ["Mode", "INFERENCE", "current", "training_mode", "using", "takes_training"]
