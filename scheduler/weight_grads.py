"""Weight gradients of the loop's ops, taken once per step instead of once per iteration.

Differentiating a `tf.while_loop` gives a backward loop that, every iteration,
computes the gradient of each weight the body reads (one small matmul per weight
at a launch of a few rows) and adds it to a running sum (an `AddN` per weight).
At batch 1 and 16 those small kernels are a large part of a training step. The
executor can instead (`Executor(batched_weight_grads=True)`; off by default):

1. call each loop op through `inputs_only`, whose gradient reaches the op's
   arguments but not its weights, so the backward loop only carries values back
   (its launch before the loop too, if it has one);
2. put a `WeightTap` on the loop types' buffers, before the loop: an identity
   whose gradient, once the backward loop is done, holds every row's total
   gradient;
3. there, run each loop op once more on all its nodes of the batch (arguments
   read from the buffers as the loop left them, and those of its launch before
   the loop) and take its weight gradients in one batched call, which the tap
   returns as the gradients of the weights' reads: one weight-sized gradient per
   op and step.

The values are the same sums in another order (tested against the oracle, as
the per-iteration gradients are). It pays where the loop's launches are small
(batch 1: each backward iteration's weight gradient is a weight-sized outer
product added to a weight-sized sum, which TensorFlow also splits across its
threads) and costs where the op's second run does (the TreeLSTM from batch 16
on). So `compiler.Model` chooses per training batch, from the mean rows of its
loop launches (`mean_loop_rows`, `compiler.training.steps.WeightGradsChoice.key`), with
one traced step per choice. Figures: BENCHMARKS.md, "Weight gradients once per
step".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import tensorflow as tf

from refold import compat

# A batch whose loop launches average at most this many rows per loop op takes the
# loop's weight gradients once per step (and `Model` replays its loop backward): below
# where the standard workloads cross over, a point that moves with the CPU (BENCHMARKS.md,
# "The replay threshold").
ONCE_PER_STEP_ROWS = 10


def once_per_step_rows(layout) -> float:
    """The default threshold of `mean_loop_rows` for taking the weight gradients once
    per step: `ONCE_PER_STEP_ROWS` per loop op. TensorFlow's gradient of a loop of
    several ops keeps, every iteration, the intermediates of every branch of its
    `switch_case`, so its cost an iteration grows with the ops, while the replayed
    loop's extra cost (each op run once more) grows with the rows.

    >>> from types import SimpleNamespace as Layout
    >>> once_per_step_rows(Layout(loop_ops=[3])), once_per_step_rows(Layout(loop_ops=[1, 4]))
    (10, 20)
    >>> once_per_step_rows(Layout(loop_ops=[]))
    10
    """
    return ONCE_PER_STEP_ROWS * max(1, len(layout.loop_ops))


def mean_loop_rows(layout, arrays: dict) -> float | None:
    """The mean rows per loop launch of a planned batch; None if it has none.

    >>> from types import SimpleNamespace as Layout
    >>> lay = Layout(loop_ops=[1], segment_id={"group_size": 1})
    >>> mean_loop_rows(lay, {"index": np.array([9, 1, 2, 3, 7]),
    ...                      "layout": np.array([0, 1, 4, 5])})
    2.0
    """
    if not layout.loop_ops:
        return None
    i = layout.segment_id["group_size"]
    bounds = arrays["layout"]
    sizes = np.asarray(arrays["index"][bounds[i]:bounds[i + 1]])
    total = int(sizes.sum())
    return total / len(sizes) if total > 0 else None


def inputs_only(fn: Callable, args: Sequence[tf.Tensor]) -> list:
    """`fn(*args)` (a list of tensors) whose gradient reaches `args` only.

    The weights `fn` reads get no gradient here: the caller takes them elsewhere
    (`WeightTap`). Meant for calls inside a `tf.while_loop` body, whose gradient is
    built in another graph than the forward call: the input gradients are taken
    from the forward graph's tensors as `tf.while_loop`'s own gradient does.
    """

    @tf.custom_gradient
    def call(*xs):
        ys = list(fn(*xs))

        def grad(*g_ys, variables=None):
            g_xs = compat.while_gradients(ys, list(xs), list(g_ys), ys[0].graph)
            return (g_xs, [None] * len(variables)) if variables else g_xs

        return ys, grad

    return list(call(*args))


def variables_of(fn: Callable, arg_types: Sequence) -> list | None:
    """The trainable variables `fn` reads, found by calling it on zero rows of
    `arg_types` (each with `shape` and `dtype`) in a scratch graph; None if that
    call fails (a function that cannot take zero rows keeps per-iteration
    gradients)."""
    with compat.scratch_graph("refold_variables_of").as_default():
        try:
            with tf.GradientTape() as tape:
                fn(*[tf.zeros((0, *t.shape), t.dtype) for t in arg_types])
        except Exception:  # noqa: BLE001 (any failure: fall back, never break the step)
            return None
    return list(tape.watched_variables())


def tap_of(deferred: dict, types: Sequence, op_grads: Callable) -> WeightTap:
    """The `WeightTap` of the loop ops' `deferred` weights (op -> its variables) on
    tensors of value `types`: its weight gradients sum, per variable,
    `op_grads(o, variables, {type: total gradient})` over the ops (the executors'
    ways of running an op once more on all its nodes)."""
    variables = list({v.ref(): v for vs in deferred.values() for v in vs}.values())

    def weight_grads(g_taps: list) -> list:
        by_type = dict(zip(types, g_taps))
        grads = {v.ref(): [] for v in variables}
        for o, vs in deferred.items():
            for v, g in zip(vs, op_grads(o, vs, by_type)):
                grads[v.ref()].append(g)
        return [tf.add_n(grads[v.ref()]) for v in variables]

    return WeightTap(variables, weight_grads)


class WeightTap:
    """An identity on the loop's buffers whose gradient adds the weights'.

    Args:
        variables: the loop ops' weights (each once).
        weight_grads: `weight_grads(grads) -> list of gradients, one per variable`
            (None where none flows); `grads[i]` is the total gradient of the i-th
            tapped tensor.
    """

    def __init__(self, variables: Sequence[tf.Variable], weight_grads: Callable):
        self.variables = list(variables)
        self.weight_grads = weight_grads

    def __call__(self, tapped: Sequence[tf.Tensor]) -> list:
        """`tapped`, unchanged; their gradient triggers the weight gradients."""
        n = len(tapped)

        @tf.custom_gradient
        def tap(*xs):
            def grad(*g_xs):
                g_xs = [tf.zeros_like(x) if g is None else g for x, g in zip(xs, g_xs)]
                return list(g_xs) + list(self.weight_grads(g_xs))

            return [tf.identity(x) for x in xs[:n]], grad

        with tf.name_scope("weight_tap"):
            return list(tap(*tapped, *[tf.convert_to_tensor(v) for v in self.variables]))
