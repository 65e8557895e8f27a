"""The functions Keras' loop calls for each step of a `Model`.

Keras makes `train_function`, `test_function` and `predict_function` in its
`make_*_function` hooks (public API, meant to be overridden). A `Model`'s count the
batches of the pass Keras' iterator stands for (the model's `BatchFeeder.dataset()`,
a range of batch indices, which they need not read) or take the indices given
(`predict_function`, from `compiler.training.predict_loop`), ask the feeder for those packed
batches and run one traced step on each. The batch enters the step as a few flat
tensors (`compiler.feeding.handoff`); the traced step has a fixed input signature (the
packed arrays' and the labels' `TensorSpec`s, all of unknown length), so it is
traced once per label layout.

It runs in TensorFlow's graph mode by default. A training step is traced twice at
most there: a batch whose loop launches are small (batch 1, say) takes the loop's
weight gradients once per step rather than in every backward iteration
(`WeightGradsChoice`, `scheduler.weight_grads`), each choice its own trace (a batch
near the threshold reuses the other choice's trace). An inference step likewise, by
which of TensorFlow's executors runs a batch (`compiler.training.tf_executor`). With
`Model.jit_compile` on, each batch is converted to its bucketed XLA form
(`compiler.feeding.xla_buckets`) and the step is traced with static shapes under
`jit_compile=True`, once per bucket key.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Collection, Sequence

import tensorflow as tf

from refold.compiler.feeding.handoff import Handoff
from refold.compiler.feeding.lists import BatchFeeder
from refold.compiler.training.tf_executor import InferenceExecutorChoice, by_rows, rows_limit
from refold.scheduler.gradient_mode import GradientMode


class NonFiniteLossError(FloatingPointError):
    """A training step's loss or gradients were not finite; its update was not applied.

    Raised by `Model.fit` (and `train_on_batch`) instead of applying the update, so
    the weights and the optimizer's state are those after the last good step. A
    `FloatingPointError`: bad data is one cause (an extreme input or label among
    the batch's examples), a learning rate too high is another.

    Under a `tf.distribute` strategy no replica applies the update if any
    replica's step was not finite (`apply_if_finite_on_every_replica`).

    Attributes:
        examples: the indices in `x` of the batch's inputs.
        loss: the step's loss (NaN or inf; finite when only a gradient was not).
        epoch: the epoch (from 0) and `batch` the batch in it.
    """

    def __init__(self, examples: Sequence[int], loss: float, epoch: int, batch: int):
        self.examples = [int(i) for i in examples]
        self.loss, self.epoch, self.batch = loss, epoch, batch
        shown = self.examples if len(self.examples) <= 64 else \
            [*self.examples[:64], "..."]
        what = f"the loss is {loss}" if not _isfinite(loss) else \
            f"the loss is {loss} but a gradient is not finite"
        state = ("The step's update was not applied: the weights and the optimizer are "
                 "those of the last good step.")
        super().__init__(
            f"epoch {epoch}, batch {batch}: {what}, on the examples at indices {shown} of x. "
            f"{state} Look for extreme inputs or labels among these examples, or lower "
            "the learning rate.")


def _isfinite(v: float) -> bool:
    return v == v and v not in (float("inf"), float("-inf"))


# The keys of a train step's outputs that `StepFunction` takes out of Keras' logs.
STEP_FINITE, STEP_LOSS = "_step_finite", "_step_loss"


def all_finite(loss, grads: list):
    """A scalar bool: `loss` and every gradient are finite. One reduction per weight
    and one test of their sum (NaN and inf survive a sum; finite gradients that
    overflow float32 when summed would be taken for non-finite, and stop training)."""
    sums = [tf.reduce_sum(tf.cast(g.values if isinstance(g, tf.IndexedSlices) else g,
                                  tf.float32)) for g in grads]
    total = tf.add_n([tf.cast(loss, tf.float32), *sums])
    return tf.math.is_finite(total)


def apply_if_finite_on_every_replica(optimizer, finite, grads: list, weights: list):
    """In a replica's step (`compiler.distribute.strategy`): applies the gradients only if
    `finite` holds on every replica; returns that (a scalar bool, the same on all).

    Replicas cannot differ: the optimizer sums their gradients, so they agree (an
    all-reduce) and then all apply or all skip. The branch is taken in the
    cross-replica context, since an update that sums across replicas cannot sit
    inside one replica's `tf.cond`."""
    ctx = tf.distribute.get_replica_context()
    failed = ctx.all_reduce("SUM", 1.0 - tf.cast(finite, tf.float32))
    everywhere = failed < 0.5

    def decide(strategy, everywhere, grads):
        def apply():
            strategy.extended.call_for_each_replica(
                lambda g: optimizer.apply_gradients(zip(g, weights)), args=(grads,))
            return tf.constant(True)
        ok = strategy.experimental_local_results(everywhere)[0]
        return tf.cond(ok, apply, lambda: tf.constant(False))

    ctx.merge_call(decide, args=(everywhere, grads))
    return everywhere


class WeightGradsChoice:
    """Per training batch, where the step takes the loop's weight gradients: once per
    step where the batch's loop launches average at most `max_rows` rows
    (`scheduler.weight_grads.mean_loop_rows`; by default 10 per loop op,
    `scheduler.weight_grads.once_per_step_rows`), in every backward iteration
    otherwise; always once per step if the executor says so (`Executor(
    batched_weight_grads=True)`). `max_rows=0` never chooses it. A batch that takes
    them once per step also gets the loop's backward pass replayed by the engine
    (`scheduler.reverse`) unless `replay` is False (then TensorFlow's gradient of
    the loop, its weights' part cut off: `scheduler.weight_grads`).
    """

    NEAR = 2.0  # `key`: a batch this close to `max_rows` may take the other choice's trace

    def __init__(self, executor, max_rows: float | None = None, replay: bool = True):
        from refold.scheduler.weight_grads import once_per_step_rows
        self.executor = executor
        self.max_rows = once_per_step_rows(executor.layout) if max_rows is None else max_rows
        self.replay = replay

    @property
    def max_rows(self) -> float:
        """Rows per loop launch, on average, up to which a batch takes its weight
        gradients once per step (0: never; `float("inf")`: always)."""
        return self._max_rows

    @max_rows.setter
    def max_rows(self, value) -> None:
        self._max_rows = rows_limit(value, "weight_grads.max_rows")

    @property
    def replay(self) -> bool:
        """Whether a batch taking its weight gradients once per step also gets the
        loop's backward pass replayed by the engine (`scheduler.reverse`)."""
        return self._replay

    @replay.setter
    def replay(self, value) -> None:
        if not isinstance(value, bool):
            raise ValueError(f"weight_grads.replay must be True or False, got {value!r}")
        self._replay = value

    def key(self, arrays: dict, traced: Collection[bool] = ()) -> bool:
        """Whether batch `arrays` (packed) takes its weight gradients once per step.

        `traced` holds the choices that have a trace for the batch's signature: a
        batch within a factor `NEAR` of `max_rows` takes the one traced choice
        rather than tracing its own, since near the threshold the two choices cost
        about the same and a trace costs seconds."""
        if self.executor.batched_weight_grads:
            return True
        return by_rows(self.executor.layout, arrays, self.max_rows, traced, self.NEAR)

    def mode(self, once: bool) -> GradientMode:
        """The `GradientMode` the step traced for choice `once` passes to the executor
        (`Model.training_step`): the weight gradients as `once` says; once per step,
        the loop also replayed backward by the engine unless `replay` is False
        (`scheduler.reverse`), which measured faster than TensorFlow's backward loop
        for such batches.

        A value passed to the step rather than the executor's settings changed
        while it is traced: the executor is shared by every step of the model.

        >>> from types import SimpleNamespace
        >>> choice = WeightGradsChoice(SimpleNamespace(
        ...     batched_weight_grads=False, layout=SimpleNamespace(loop_ops=[0])))
        >>> choice.mode(True)
        GradientMode(weights_once_per_step=True, replay_backward=True)
        >>> choice.mode(False) == GradientMode()   # TensorFlow's gradient of the loop
        True
        """
        return GradientMode.once_per_step(self.replay) if once else GradientMode()

    def tracing(self, once: bool):
        """The scope a step is traced in for choice `once`: any (the choice reaches
        the step as its `mode`, an argument)."""
        return contextlib.nullcontext()

    def calling(self, once: bool):
        """The scope a step traced with choice `once` is called in: any."""
        return contextlib.nullcontext()

    def admits(self, once: bool, traced) -> bool:
        """Whether the step `traced` for choice `once` can run: always."""
        return True


class StepFunction:
    """Runs `step(data)` on packed batches, traced once per input signature.

    Args:
        step: the model's `train_step`, `test_step` or `predict_step`.
        feeder: returns the `BatchFeeder` of the call under way.
        eager: returns whether to run the step without tracing (`run_eagerly`).
        xla: returns the model's `compiler.feeding.xla_buckets.XlaBatches` when its steps run under
            XLA, None otherwise.
        choice: what the step's trace varies by per batch (graph mode only): a
            training step's `WeightGradsChoice`, an inference step's
            `InferenceExecutorChoice`.
        before_trace: called with the signature of the batches about to be traced,
            before the trace (to make the variables the step would otherwise make
            in it, which makes TensorFlow trace it a second time).
        after_trace: called with each traced step (a `ConcreteFunction`), once per
            trace (the model's check of the weights the step reads).
        step_for_mode: for a training step, the step to trace for a `GradientMode`
            (`Model.training_step`), which `choice.mode` gives per variant; None:
            `step` for every variant.
        straight: for an inference step in graph mode, called with the feeder
            after it packed a batch: the step's outputs computed another way
            (`compiler.straight_inference`), or None to run the traced step;
            `looped` is then told the seconds the traced step took.
    """

    def __init__(self, step: Callable, feeder: Callable[[], BatchFeeder],
                 eager: Callable[[], bool], epoch: Callable[[], int] | None = None,
                 xla: Callable[[], object] | None = None,
                 choice: WeightGradsChoice | InferenceExecutorChoice | None = None,
                 before_trace: Callable | None = None, after_trace: Callable | None = None,
                 step_for_mode: Callable[[GradientMode], Callable] | None = None,
                 straight: Callable[[BatchFeeder], object] | None = None,
                 looped: Callable[[float], None] | None = None):
        self._step, self._feeder, self._eager = step, feeder, eager
        self._straight = straight or (lambda feeder: None)
        self._looped = looped or (lambda seconds: None)
        self._step_for_mode = step_for_mode
        self._before_trace = before_trace or (lambda signature: None)
        self._after_trace = after_trace or (lambda concrete_fn: None)
        self._choice = choice
        self._epoch = epoch
        self._xla = xla or (lambda: None)
        self._traced: dict = {}
        self._called: set = set()  # the traced steps called so far
        # the last signature, its variant, its step, its flat form
        self._last: tuple = (None, None, None, None)
        self._variants: dict = {}  # flat signature -> the choices traced
        self._pass: tuple = (None, None)  # the (feeder, Keras iterator) being read
        self._next = 0
        self.xla_traces = 0  # compiled (bucket) programs traced so far

    def run(self, i: int):
        """The step's outputs on batch `i` of the current feeder.

        A train step's outputs (logs) carry `STEP_FINITE` and `STEP_LOSS`: they are
        taken out here, and a step whose loss or gradients were not finite (its update
        was skipped) raises `NonFiniteLossError` naming the batch's examples."""
        feeder = self._feeder()
        data = feeder.batch(i)
        xla = None if self._eager() else self._xla()
        if self._eager():
            outputs = self._step(tf.nest.map_structure(tf.convert_to_tensor, data))
        elif xla is not None:
            layout, data = xla.flatten(xla.convert(data))
            key = ("xla", layout)
            fn = self._traced.get(key)
            if fn is None:
                self.xla_traces += 1
                self._before_trace(feeder.signature)
                fn = self._traced[key] = tf.function(
                    _expanding(self._step, xla, layout), input_signature=[xla.signature(data)],
                    autograph=False, jit_compile=True).get_concrete_function()
                self._after_trace(fn)
            outputs = fn(data)
        else:
            outputs = self._straight(feeder)
            if outputs is None:
                start = time.perf_counter()
                outputs = self._call_graph_step(feeder, data, i)
                self._looped(time.perf_counter() - start)
        if isinstance(outputs, dict) and STEP_FINITE in outputs:
            outputs = dict(outputs)
            finite, loss = outputs.pop(STEP_FINITE), outputs.pop(STEP_LOSS)
            if not bool(finite):
                epoch = self._epoch() if self._epoch is not None else 0
                raise NonFiniteLossError(feeder.examples(i), float(loss), epoch, i)
        return outputs

    def _call_graph_step(self, feeder, data, i: int):
        """The traced step's outputs on a packed batch (traced for its signature and
        its choice's variant if need be)."""
        variant = None if self._choice is None else self._choice.key(
            data[0], self._choices(feeder.signature))
        handoff, fn, variant = self._graph_step(feeder.signature, variant)
        tensors = handoff.tensors(data)
        first = fn not in self._called  # TensorFlow then readies the graph: plan ahead
        with feeder.planning_ahead(i + 1) if first else contextlib.nullcontext():
            if variant is None:
                outputs = handoff.call(fn, tensors)
            else:
                with self._choice.calling(variant):
                    outputs = handoff.call(fn, tensors)
        if first:
            self._called.add(fn)
        return outputs

    def _choices(self, signature) -> set:
        """The choices (`choice.key`) traced for batches of `signature`."""
        flat = self._last[3] if signature is self._last[0] else tuple(
            tf.nest.flatten(signature))
        return self._variants.get(flat, set())

    def _graph_step(self, signature, variant: bool | None = None
                    ) -> tuple[Handoff, Callable, bool | None]:
        """The `Handoff` and the traced step of batches of `signature`, traced once
        (per `variant` of the step's choice, if it has one), and the variant it was
        traced for: the other one if the choice refused the trace (`admits`)."""
        if signature is self._last[0] and variant == self._last[1]:
            return (*self._last[2], variant)
        flat = tuple(tf.nest.flatten(signature))
        key = (flat, variant)
        got = self._traced.get(key)
        if got is None:
            got = self._trace(signature, variant)
            if variant is not None and not self._choice.admits(variant, got[1]):
                variant = not variant  # e.g. an Assert refused by the executor choice
                key = (flat, variant)
                got = self._traced.get(key) or self._trace(signature, variant)
            self._traced[key] = got
            self._variants.setdefault(flat, set()).add(variant)
        self._last = (signature, variant, got, flat)
        return (*got, variant)

    def _trace(self, signature, variant: bool | None) -> tuple[Handoff, Callable]:
        self._before_trace(signature)
        handoff = Handoff(signature)
        step = self._step

        if isinstance(self._choice, WeightGradsChoice) and variant is not None \
                and self._step_for_mode is not None:
            step = self._step_for_mode(self._choice.mode(variant))

        def flat_step(*tensors):
            return step(handoff.unfold(tensors))
        scope = (contextlib.nullcontext() if variant is None
                 else self._choice.tracing(variant))
        with scope:
            fn = tf.function(flat_step, input_signature=handoff.signature,
                             autograph=False).get_concrete_function()
        self._after_trace(fn)
        return handoff, fn

    def on_iterator(self, iterator, steps: int):
        """For `train_function` / `test_function`: up to `steps` batches of the pass
        that Keras' `iterator` stands for; the last step's outputs (its logs).

        The batches of a pass are counted here, from 0 for each new iterator (Keras
        makes one per pass), rather than read from it: the iterator of a `tf.data`
        range yields just these numbers, and reading one cost a `tf.data` call per
        step (BENCHMARKS.md, "the hand-off")."""
        outputs = None
        n = getattr(self._feeder(), "n_batches", None)  # None: until a stream ends
        for _ in range(steps):
            i = self._next_batch(iterator)
            if n is not None and i >= n:
                break
            try:
                outputs = self.run(i)
            except StopIteration:  # a stream ended (compiler.feeding.streams)
                break
        if outputs is None:
            raise StopIteration
        return outputs

    def _next_batch(self, iterator) -> int:
        """The index of the next batch of the pass `iterator` (with its feeder)
        stands for."""
        feeder = self._feeder()
        if self._pass[0] is not feeder or self._pass[1] is not iterator:
            self._pass, self._next = (feeder, iterator), 0
        i, self._next = self._next, self._next + 1
        return i

    def on_data(self, data: list):
        """For `predict_function`: the outputs of the batches whose indices Keras
        fetched (`data`), concatenated."""
        outs = []
        for i in data:
            try:
                outs.append(self.run(int(i)))
            except StopIteration:  # a stream ended (compiler.feeding.streams)
                if not outs:
                    raise
                break
        return outs[0] if len(outs) == 1 else tf.concat(outs, 0)


def _expanding(step: Callable, xla, layout: tuple) -> Callable:
    """`step` on a batch flattened by `xla.flatten` with this layout."""
    return lambda data: step(xla.expand(data, layout))


def next_indices(iterator, n: int) -> list[int]:
    """Up to `n` batch indices from Keras' iterator (fewer at the end of a pass)."""
    out = []
    for _ in range(n):
        try:
            out.append(int(next(iterator)))
        except (StopIteration, tf.errors.OutOfRangeError):
            break
    return out
