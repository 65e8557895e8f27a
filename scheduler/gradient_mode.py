"""How a traced step differentiates the executor's loop: a value passed to `Executor.compute`.

A training step's gradient through the loop can be taken three ways: TensorFlow's
gradient of the `tf.while_loop`, which takes the weights' gradients in every backward
iteration (the default); the same with the weights' gradients taken once per step,
batched over all the loop ops' nodes (`scheduler.weight_grads`); or the engine's own
backward loop, which replays each launch in reverse and takes the weights' gradients
once per step too (`scheduler.reverse`). `compiler.Model` chooses per training batch
(`compiler.training.steps.WeightGradsChoice`) and traces one step per choice.

The choice is a frozen value given to the call that builds the step, not a setting of
the executor changed while a step is traced: one executor serves every step of a
model (training, evaluation, rounds), and a setting flipped for one trace would be
seen by any other traced meanwhile.

>>> GradientMode()                        # TensorFlow's gradient of the loop
GradientMode(weights_once_per_step=False, replay_backward=False)
>>> GradientMode.once_per_step(replay=True)
GradientMode(weights_once_per_step=True, replay_backward=True)
>>> GradientMode(weights_once_per_step=1)
Traceback (most recent call last):
    ...
TypeError: weights_once_per_step must be True or False, got 1
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class GradientMode:
    """How the loop of a step traced under a gradient tape is differentiated.

    Attributes:
        weights_once_per_step: take the loop ops' weight gradients once per step,
            batched over all their nodes (`scheduler.weight_grads`), rather than in
            every iteration of TensorFlow's backward loop.
        replay_backward: give the loop the engine's backward loop, which replays each
            launch in reverse (`scheduler.reverse`) and takes the weight gradients
            once per step itself, whatever `weights_once_per_step` says. Falls back to
            TensorFlow's gradient of the loop (with the weights as
            `weights_once_per_step` says) when a loop op's weights cannot be found (an
            op that fails on zero rows).

    A step traced with no gradient tape active reads neither.
    """

    weights_once_per_step: bool = False
    replay_backward: bool = False

    def __post_init__(self):
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, bool):
                raise TypeError(f"{f.name} must be True or False, got {value!r}")

    @classmethod
    def once_per_step(cls, replay: bool) -> GradientMode:
        """The weights' gradients once per step, through the replayed backward loop if
        `replay` (what `Model` chooses for a batch of small loop launches)."""
        return cls(weights_once_per_step=True, replay_backward=replay)
