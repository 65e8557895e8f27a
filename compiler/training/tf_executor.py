"""Which of TensorFlow's executors runs an inference step, chosen per batch.

TensorFlow runs a traced function's graph with its default executor, which hands
every costly op to its inter-op thread pool, or with a single-threaded one that runs
the ops in order on the calling thread (`tf.experimental.function_executor_type`).
A batch of one sentence is hundreds of small ops, where the hand-offs cost more than
the ops; a large batch is fewer, larger ops, which the pool runs side by side.

>>> import numpy as np
>>> from types import SimpleNamespace
>>> layout = SimpleNamespace(loop_ops=[1], segment_id={"group_size": 1})
>>> choice = InferenceExecutorChoice(SimpleNamespace(layout=layout), max_rows=4)
>>> one_row = {"index": np.array([9, 1, 1, 1, 7]), "layout": np.array([0, 1, 4, 5])}
>>> many_rows = {"index": np.array([9, 64, 64, 7]), "layout": np.array([0, 1, 3, 4])}
>>> choice.key(one_row), choice.key(many_rows)
(True, False)
"""

from __future__ import annotations

import collections
import contextlib
import functools
from collections.abc import Collection


class InferenceExecutorChoice:
    """Per inference batch (`predict`, `evaluate`, validation data), which of
    TensorFlow's executors runs the step: its single-threaded one where the batch's
    loop launches average at most `max_rows` rows
    (`scheduler.weight_grads.mean_loop_rows`), its default one otherwise; `max_rows=0`
    never chooses it.

    At such sizes a step is hundreds of small ops for one example, and the default
    executor hands each costly one to its thread pool and waits; the single-threaded
    one runs them in order on the calling thread. It measured faster for the BiLSTM
    tagger's one-sentence inference and no slower for the TreeLSTM's, and lost its
    edge as launches grew; training steps keep the default executor, where it
    measured as often slower as faster (BENCHMARKS.md, "The single-threaded
    executor"). It runs `tf.while_loop` and `tf.cond` as functional ops
    (not lowered to `Switch`/`Merge`), so each choice is its own trace; a batch
    within a factor `NEAR` of `max_rows` takes the other choice's trace if only that
    one exists, as does any batch until `PATIENCE` batches have asked for a choice
    not yet traced.

    A step that holds an `Assert` (a `tf.debugging` check in a user's function) is
    refused (`admits`) and runs on the default executor from then on: TensorFlow's
    single-threaded executor hangs on an `Assert` inside a `tf.cond` branch, even
    one that holds (TensorFlow 2.21). So is a step holding a `tf.cond` or a
    `tf.switch_case` (a loop of several ops: the char tagger's) where TensorFlow's
    inter-op pool has one thread (`tf.config.threading`): that executor then waits
    for the branch on the pool's only thread, its own. Where a GPU is visible the
    choice is never made: that executor is measured and tested on the CPU only.
    """

    NEAR = 2.0
    PATIENCE = 8  # `key`: batches asking for a choice before it gets its own trace
    EXECUTOR = "SINGLE_THREADED_EXECUTOR"

    def __init__(self, executor, max_rows: float = 4.0):
        self.executor = executor
        self.max_rows = max_rows
        self.refused = False  # a step held an Assert: the default executor only
        self._asked = collections.Counter()  # batches that asked for an untraced choice

    @property
    def max_rows(self) -> float:
        """Rows per loop launch, on average, up to which an inference batch runs on
        the single-threaded executor (0: never; `float("inf")`: always)."""
        return self._max_rows

    @max_rows.setter
    def max_rows(self, value) -> None:
        self._max_rows = rows_limit(value, "inference_executor.max_rows")

    def key(self, arrays: dict, traced: Collection[bool] = ()) -> bool:
        """Whether batch `arrays` (packed) runs on the single-threaded executor
        (`traced`: the choices traced for its signature, as `WeightGradsChoice.key`).

        Where only the other choice has a trace, a batch runs on it until
        `PATIENCE` batches have asked for this one: a predict call's last, smaller
        batch costs no second trace (seconds), a run of small requests does."""
        if self.refused or _gpu_visible():
            return False
        chosen = by_rows(self.executor.layout, arrays, self.max_rows, traced, self.NEAR)
        if len(traced) == 1 and chosen not in traced:
            self._asked[chosen] += 1
            if self._asked[chosen] < self.PATIENCE:
                return not chosen
        return chosen

    def admits(self, single: bool, traced) -> bool:
        """Whether the step `traced` (a concrete function) for choice `single` can
        run that way: not on the single-threaded executor if it holds an `Assert`
        in any function it calls (then no later batch is given that choice)."""
        if single:
            found = op_types(traced)
            if "Assert" in found or (found & BRANCHING_OPS and one_inter_op_thread()):
                self.refused = True
        return not (single and self.refused)

    @contextlib.contextmanager
    def tracing(self, single: bool):
        """The scope a step is traced in for choice `single`: its loops and conds
        stay functional ops, which the single-threaded executor runs, and its loop,
        whose launches are small, moves each value type's rows stacked
        (`scheduler.executor.small_launches`). A step for the default executor runs
        its launches outside the loop in halves, side by side, where TensorFlow has
        one intra-op thread and several inter-op threads
        (`scheduler.executor.launches_outside_loop_in_halves`)."""
        from refold.scheduler.executor import launches_outside_loop_in_halves, small_launches
        with contextlib.ExitStack() as scope:
            if single:
                scope.enter_context(self.calling(True))
                scope.enter_context(small_launches())
            elif halves_pay():
                scope.enter_context(launches_outside_loop_in_halves())
            yield

    def calling(self, single: bool):
        """The scope a step traced with choice `single` is called in."""
        if not single:
            return contextlib.nullcontext()
        import tensorflow as tf
        return tf.experimental.function_executor_type(self.EXECUTOR)


def halves_pay() -> bool:
    """Whether a launch split in halves can use two cores: TensorFlow runs ops on one
    intra-op thread (`refold.threads`) and on more than one inter-op thread, on a
    CPU-only machine of several CPUs."""
    import tensorflow as tf

    from refold.threads import available_cpus
    threading = tf.config.threading
    inter = threading.get_inter_op_parallelism_threads()
    return (threading.get_intra_op_parallelism_threads() == 1 and inter != 1
            and available_cpus() > 1 and not _gpu_visible())


def by_rows(layout, arrays: dict, max_rows: float, traced: Collection[bool],
             near_factor: float) -> bool:
    """Whether a batch's loop launches average at most `max_rows` rows; a batch
    within `near_factor` of it takes the one choice traced (in `traced`) rather than
    tracing its own, since near the threshold both cost about the same and a trace
    costs seconds."""
    from refold.scheduler.weight_grads import mean_loop_rows
    rows = mean_loop_rows(layout, arrays)
    if rows is None or max_rows == 0:
        return False
    chosen = rows <= max_rows
    near = max_rows / near_factor <= rows <= max_rows * near_factor
    if near and len(traced) == 1 and chosen not in traced:
        return not chosen
    return chosen


def rows_limit(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(f"{what} must be a number >= 0 (rows per loop launch), got "
                         f"{value!r}")
    return value


BRANCHING_OPS = frozenset({"If", "StatelessIf", "Case", "StatelessCase"})
"""The functional conds, which the single-threaded executor runs on the inter-op pool."""


def one_inter_op_thread() -> bool:
    """Whether TensorFlow's inter-op pool has a single thread (set so, or by default
    on a machine of one core)."""
    import os

    import tensorflow as tf
    n = tf.config.threading.get_inter_op_parallelism_threads()
    return n == 1 or (n == 0 and (os.cpu_count() or 1) == 1)


def op_types(traced) -> set:
    """The types of the ops of a concrete function and of every function it calls."""
    graph_def = traced.graph.as_graph_def()
    found = {node.op for node in graph_def.node}
    for f in graph_def.library.function:
        found.update(node.op for node in f.node_def)
    return found


@functools.cache
def _gpu_visible() -> bool:
    import tensorflow as tf
    return bool(tf.config.list_logical_devices("GPU"))
