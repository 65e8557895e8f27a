"""`Compiler`: runs a block expression on batches of inputs with dynamic batching.

>>> import tensorflow as tf
>>> import refold as td
>>> from refold.compiler import Compiler
>>> block = td.Map(td.Scalar() >> td.Function(tf.square)) >> td.Sum()
>>> c = Compiler.create(block)
>>> [float(r) for r in c.run([[1, 2], [3], []])]
[5.0, 9.0, 0.0]
>>> c.schedule([[1, 2], [3]]).stats.launches   # all squares (the prelude), one add
2
"""

from __future__ import annotations

import functools
import operator
import time
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from refold.blocks.evaluation.precision import compute_dtype, held_program
from refold.blocks.types import TensorType
from refold.compiler import kernels  # noqa: F401  (says when a kernel compiles here)
from refold.compiler.feeding.prefetch import Prefetch
from refold.compiler.graphs.batch_plan import BatchPlan
from refold.compiler.graphs.expansion import BatchGraph, ExampleGraph, expand_all, expand_batch
from refold.compiler.graphs.expansion_cache import ExpansionCache
from refold.compiler.graphs.lowering import Program, lower
from refold.compiler.graphs.op_feeds import op_feeds
from refold.compiler.rounds.context import expand_in_rounds
from refold.compiler.rounds.engines import RoundEngines
from refold.compiler.scheduler_choice import AUTO, FALLBACK, SchedulerChoice
from refold.compiler.straight_inference import StraightInference
from refold.compiler.training.tf_executor import InferenceExecutorChoice
from refold.scheduler.executor import Executor
from refold.scheduler.graph import OpGraph
from refold.scheduler.planner import Planner, plan_record
from refold.scheduler.schedules import SCHEDULERS


class Compiler:
    """Compiles a block expression for batched execution.

    Use `Compiler.create(block, scheduler=...)`. `run(inputs)` gives one result per
    input, in order, exactly as `block.eval` would (with `(result, metrics)` when
    the expression has metrics); `schedule(inputs)` shows how a batch is batched.

    Args:
        block: the root block (block-like values allowed). Its input is a Python
            object unless its type says otherwise.
        scheduler: `"agenda"` (DyNet's agenda-based batching, the default),
            `"depth"` (TensorFlow Fold's depth-based batching), `"auto"`, or the
            name of one added with `scheduler.register_scheduler`. Depth won on
            the DyNet paper's TreeLSTM and agenda wins on others, so `"auto"` runs
            the first batches (18) under each in turn, timing what each batch
            costs, and keeps the faster (`compiler.scheduler_choice`): see
            `scheduler_chosen`, `describe_schedule`, and the INFO line on the
            `refold` logger. Results are the same under every scheduler.
        cache: keep each input's expanded graph, found by the input object's
            identity and checked against a fingerprint of its content, so later
            batches skip expansion and an input changed in place is expanded again
            (`compiler.graphs.expansion_cache`). `True` keeps up to `DEFAULT_CACHE_SIZE`
            inputs, an int that many; past that the least recently used is
            dropped, so a long stream of fresh inputs cannot grow memory without
            bound. `False` keeps none.
            A block whose structure depends on computed values (`blocks.Unfold`)
            is never cached: its inputs expand in rounds that run the model
            (`compiler.rounds.context`), and its decisions change with the weights.
        workers: if > 0, expand uncached inputs of large batches (at least
            `min_parallel_batch`, 64 by default) in that many forked worker
            processes (`compiler.feeding.process_pool.ExpansionPool`), and let
            `plan_batches` plan whole batches there ahead of the device; streams
            fed to `Model` are expanded and planned in as many processes of their
            own (`stream_workers`). The workers are forked on first use and
            stopped by `close()`.
        share_layers: batch `Function` blocks that share a layer and a signature
            as one op (the default); False gives each block instance its own op,
            as TensorFlow Fold does (for comparison).
    """

    min_parallel_batch = 64

    def __init__(self, block, scheduler: str = "agenda", cache: bool | int = True,
                 workers: int = 0, share_layers: bool = True):
        if not isinstance(workers, int) or workers < 0:
            raise ValueError(f"workers must be a non-negative int, got {workers!r}")
        self.program: Program = lower(block, share_layers=share_layers)
        if self.program.reads_values:
            if workers:
                raise ValueError("workers cannot expand a block whose structure depends on "
                                 "computed values (Unfold): its expansion runs the model")
            cache = False
        if not isinstance(scheduler, str) or (scheduler != AUTO and scheduler not in SCHEDULERS):
            raise ValueError(f"scheduler must be {AUTO!r} or one of {sorted(SCHEDULERS)}, got "
                             f"{scheduler!r}")
        self.scheduler = scheduler
        # under "auto", what measures the schedulers on the first batches
        self.scheduler_choice = SchedulerChoice(on_choice=self._keep_scheduler) \
            if scheduler == AUTO else None
        # under a mixed policy, values of float32 types are held in its low dtype
        self.compute_dtype = compute_dtype(self.program.root)
        ops, types = held_program(self.program.ops, self.program.value_types,
                                  self.compute_dtype, self.program.metric_types)
        self.executor = Executor(ops, types, output_dtypes=[
            t.dtype for t in self.program.value_types] if self.compute_dtype else None,
            feeds=op_feeds(self.program))
        self.planner = Planner(self.executor.layout, FALLBACK if scheduler == AUTO else scheduler,
                               len(self.program.metric_names))
        self.cache_size = _cache_size(cache)
        self._cache = ExpansionCache(self.cache_size) if self.cache_size else None
        self._run_fn = None
        # run's traced functions on the batch as few tensors, per executor choice
        self._run_flat: dict = {}
        # which TensorFlow executor runs a batch of `run` and of Model's inference
        self.inference_executor = InferenceExecutorChoice(self.executor)
        # small batches of `run` and of Model.predict, run without the loop
        self.straight_inference = StraightInference(self)
        self.last_rounds = 0  # engine calls the last expansion in rounds made
        # executors of the parts of the program that rounds run
        self.round_engines = RoundEngines(self) if self.program.reads_values else None
        self.workers = workers
        self._pool = None
        self._stream_workers = None

    @classmethod
    def create(cls, block, scheduler: str = "agenda", cache: bool | int = True,
               workers: int = 0, share_layers: bool = True) -> Compiler:
        """A compiler for `block` (see the class docstring)."""
        return cls(block, scheduler=scheduler, cache=cache, workers=workers,
                   share_layers=share_layers)

    def pool(self):
        """The worker pool (forked on first call), or None without workers."""
        if self.workers and self._pool is None:
            from refold.compiler.feeding.process_pool import ExpansionPool
            self._pool = ExpansionPool(self, self.workers)
        return self._pool

    def stream_workers(self):
        """The worker processes that expand and plan a stream's batches
        (`compiler.feeding.streams`, a `compiler.feeding.process_pool.StreamWorkers`), forked on the
        first call, or None without workers. Call it from the main thread."""
        if not self.workers:
            return None
        if self._stream_workers is None:
            from refold.compiler.feeding.process_pool import StreamWorkers, warm_planner
            from refold.compiler.feeding.streams import plan_in_worker
            warm_planner(self)
            self._stream_workers = StreamWorkers(functools.partial(plan_in_worker, self),
                                                 self.workers, "refold-stream-worker")
        return self._stream_workers

    def close(self) -> None:
        """Stops the worker processes, if any (a later parallel call forks new ones)."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        if self._stream_workers is not None:
            self._stream_workers.close()
            self._stream_workers = None

    @property
    def root(self):
        return self.program.root

    @property
    def scheduler_chosen(self) -> str | None:
        """The scheduler batches run with: `scheduler`, or under `"auto"` the one kept
        (None while the first batches are measured, planned in turn by each).

        >>> import refold as td
        >>> c = Compiler.create(td.Scalar() >> td.Function(lambda x: x + 1), scheduler="auto")
        >>> c.scheduler_chosen is None, Compiler.create(td.Scalar()).scheduler_chosen
        (True, 'agenda')
        """
        if self.scheduler_choice is None:
            return self.scheduler
        return self.scheduler_choice.chosen

    def _keep_scheduler(self, name: str) -> None:
        """Under "auto": every batch from now on is planned with `name` (in worker
        processes forked from now on too; the rounds of an `Unfold` keep agenda)."""
        self.planner.scheduler = SCHEDULERS[name]

    def _batch_scheduler(self, counted: bool) -> str | None:
        """The scheduler for the batch being planned: None for the planner's own,
        except under "auto" while measuring (`counted`: a batch the user runs)."""
        choice = self.scheduler_choice
        if choice is None or choice.chosen is not None or not counted:
            return None
        return choice.next()

    def _planned(self, plan, counted: bool) -> None:
        if counted and self.scheduler_choice is not None:
            self.scheduler_choice.planned(plan.num_nodes)

    # --- Python side: expansion, batching, scheduling ---------------------------------

    def expand(self, inputs: Sequence[Any], start: int = 0,
               in_workers: bool = True) -> list[ExampleGraph]:
        """The expanded graph of each input (from the cache where possible); with
        `in_workers=False`, never in the worker processes."""
        if self._cache is None:
            return self._expand_fresh(list(inputs), start, in_workers=in_workers)
        out: list[ExampleGraph | None] = [self._cache.get(x) for x in inputs]
        missing_at = [i for i, g in enumerate(out) if g is None]
        if missing_at:
            missing = [inputs[i] for i in missing_at]
            fresh = self._expand_fresh(missing, start, missing_at, in_workers)
            for i, x, g in zip(missing_at, missing, fresh):
                out[i] = g
                self._cache.put(x, g)
        return out  # type: ignore[return-value]

    @property
    def cached(self) -> int:
        """How many inputs' expanded graphs the cache holds now."""
        return 0 if self._cache is None else len(self._cache)

    def _expand_fresh(self, inputs: list, start: int, positions=None,
                      in_workers: bool = True) -> list[ExampleGraph]:
        """Expands inputs (in the workers for large batches); an error names the
        input's index, `start + positions[i]` (or `start + i`)."""
        from refold.blocks.errors import InputError
        try:
            if self.program.reads_values:
                return self._expand_in_rounds(inputs)
            if in_workers and self.workers and len(inputs) >= self.min_parallel_batch:
                return self.pool().expand(inputs, 0)
            return expand_all(self.program, inputs, 0)
        except InputError as e:
            idx = e.example_index or 0
            raise e.with_example_index(
                start + (positions[idx] if positions is not None else idx)) from e.__cause__

    def _expand_in_rounds(self, inputs: list) -> list[ExampleGraph]:
        driver = expand_in_rounds(self.program, inputs, self._run_round)
        self.last_rounds = driver.rounds
        return driver.example_graphs()

    def _batch_in_rounds(self, inputs: list) -> BatchGraph:
        """The batch expanded in rounds, as one graph (what a training step plans)."""
        driver = expand_in_rounds(self.program, inputs, self._run_round)
        self.last_rounds = driver.rounds
        return driver.batch_graph()

    def _run_round(self, graph: OpGraph, reads: np.ndarray) -> tuple:
        """Runs an op graph forward (a round of `compiler.rounds.context`): `(outputs per value
        type, read_type, read_pos)`, value `reads[i]` being row `read_pos[i]` of
        `outputs[read_type[i]]`. A round of some of the ops runs on an executor of
        those, or, most often, as a straight-line function of its few launches
        (`compiler.rounds.engines`)."""
        straight = self.round_engines.run_straight(graph, reads)
        if straight is not None:
            return straight
        part = self.round_engines.part_for(graph)
        if part is not None:
            return part.run(graph, reads)
        self.planner.check(graph)
        plan = self.planner.plan([plan_record(graph, reads, [], [])], [graph.constants])
        outputs = [o.numpy() for o in self._compute(plan.feed.arrays)]
        return outputs, plan.read_type, plan.read_pos

    def plan_batches(self, batches: Iterable[Sequence[Any]], grouped: bool = False,
                     ahead: int = 0):
        """Yields `plan(batch, grouped)` for each batch, in order.

        With `ahead > 0` (and no workers), a background thread plans up to `ahead`
        batches ahead (`compiler.feeding.prefetch`) while the caller runs the device:
        TensorFlow and the compiled planning kernels release the GIL, so on a machine
        with a spare core the planning time is mostly hidden. Do not call `plan` on the
        same compiler while such a generator is running: it shares the graph cache.
        With workers, whole batches are expanded, scheduled and packed in the worker
        processes, a few batches ahead (the cache is not used there). An `InputError`
        names the example's index in its batch.

        >>> import refold as td
        >>> c = Compiler.create(td.Map(td.Scalar() >> td.Function(lambda x: x * 2)))
        >>> [p.stats.launches for p in c.plan_batches([[[1.0]], [[1.0, 2.0], [3.0]]], ahead=1)]
        [1, 1]
        """
        if self.workers:
            yield from self.pool().plan_batches((_as_list(b) for b in batches), grouped)
            return
        plans = (self.plan(batch, grouped) for batch in batches)
        yield from (Prefetch(plans, ahead, name="refold-planner") if ahead > 0 else plans)

    def plan_in_process(self, inputs: list, grouped: bool) -> BatchPlan:
        """`plan` of `inputs` in this process, expanded afresh, never by the worker
        processes: what each worker of `compiler.feeding.process_pool` runs (the
        parent's cache is not shared with it)."""
        if grouped and not self.program.reads_values:
            return self.plan_batch(expand_batch(self.program, inputs))
        examples = expand_all(self.program, inputs, 0)
        return self._plan_examples(examples, grouped)

    def plan_batch(self, batch: BatchGraph) -> BatchPlan:
        """The grouped `BatchPlan` of a batch expanded as one graph (`expand_batch`):
        checked against the ops, scheduled and packed, with no graphs to merge."""
        self.planner.check(batch.graph)
        plan = self.planner.plan([batch.record], [batch.graph.constants], grouped=True,
                                 scheduler=self._batch_scheduler(True))
        self._planned(plan, True)
        return BatchPlan(batch, plan, grouped=True)

    @property
    def expands_batches(self) -> bool:
        """Whether grouped batches of fresh inputs are expanded as one graph each
        (`expand_batch`): without a cache to fill, and for a block whose expansion
        does not run the model (`Unfold`'s expands in rounds)."""
        return self._cache is None and not self.program.reads_values

    def plan_expanded(self, examples: list[ExampleGraph], grouped: bool = False) -> BatchPlan:
        """`plan` of inputs already expanded (`expand(inputs)`): merged, scheduled, packed."""
        return self._plan_examples(examples, grouped)

    def plan(self, inputs: Sequence[Any], grouped: bool = False) -> BatchPlan:
        """Expands, merges, schedules and packs a batch of inputs.

        The executor returns, per value type, the values read: by default each
        example's results then its metrics, example after example; with
        `grouped=True` all examples' results first, then the values of each
        metric in turn (see `BatchPlan.metric_bounds`), as training wants them.
        Without a cache, a grouped batch is expanded as one graph (`plan_batch`),
        unless the worker processes expand it; a block that reads computed values
        (`Unfold`) always expands a grouped batch as one graph, in rounds.
        """
        inputs = _as_list(inputs)
        if grouped and self.program.reads_values and inputs:
            return self.plan_batch(self._batch_in_rounds(inputs))
        if grouped and self.expands_batches and inputs and not (
                self.workers and len(inputs) >= self.min_parallel_batch):
            return self.plan_batch(expand_batch(self.program, inputs))
        return self._plan_examples(self.expand(inputs), grouped)

    def _plan_examples(self, examples: list[ExampleGraph], grouped: bool,
                       scheduler: str | None = None, counted: bool = True) -> BatchPlan:
        # The one hand-off to the scheduler: the examples' records and constants in,
        # a plan (merged, scheduled, packed) out. `counted`: a batch the user runs
        # (under "auto", measured), not one only looked at (`schedule`).
        key_type = self.program.key_type  # random nodes: the keys name each example's index
        tables = [e.graph.constants for e in examples] if key_type is None else \
            [e.constants_at(i, key_type) for i, e in enumerate(examples)]
        records = self._records(examples)
        plan = self.planner.plan(records, tables, grouped,
                                 scheduler=scheduler or self._batch_scheduler(counted))
        self._planned(plan, counted and scheduler is None)
        return BatchPlan(examples, plan, grouped)

    def _records(self, examples: list[ExampleGraph]) -> list[np.ndarray]:
        """Each example's `plan_record`. An example's graph is checked against the
        ops (`Planner.check`) when it is first planned, and its record kept: the
        checks are per node, so a batch of checked graphs needs none."""
        try:
            return list(map(_CHECKED_RECORD, examples))
        except AttributeError:  # some examples are planned for the first time
            pass
        fresh = [e for e in examples if not hasattr(e, "_checked_record")]
        self.planner.check(OpGraph.concatenate([e.graph for e in fresh]))
        out_type = self.program.root.output_type
        for e in fresh:
            e._checked_record = e.plan_record(out_type)
        return list(map(_CHECKED_RECORD, examples))

    def schedule(self, inputs: Sequence[Any], scheduler: str | None = None) -> BatchPlan:
        """How a batch would run: `.stats` has steps, launches and mean batch sizes.

        `scheduler`: a registered scheduler to plan it with instead of the compiler's
        (under `"auto"`, the one kept, or while measuring the fallback, agenda). A
        batch only looked at is not one of those `"auto"` measures.
        """
        if scheduler is not None and scheduler not in SCHEDULERS:
            raise ValueError(f"scheduler must be one of {sorted(SCHEDULERS)}, got "
                             f"{scheduler!r}")
        return self._plan_examples(self.expand(_as_list(inputs)), False, scheduler,
                                   counted=False)

    # --- running ---------------------------------------------------------------------

    def _function(self):
        if self._run_fn is None:
            import tensorflow as tf
            self._run_fn = tf.function(self.executor.compute, autograph=False,
                                       input_signature=[self.executor.input_signature()])
        return self._run_fn

    def _compute(self, arrays: dict) -> list:
        """The executor's traced outputs (tensors) on a batch's packed `arrays`.

        The batch enters as few tensors (`compiler.feeding.handoff`), and the traced
        function is called directly: at batch 1 the `tf.function`'s own argument
        matching and the conversion of each array cost a sizeable part of a call
        (BENCHMARKS.md, "the hand-off"). It is traced once per executor choice: a
        batch of small loop launches runs on TensorFlow's single-threaded executor
        (`compiler.training.tf_executor`)."""
        choice = self.inference_executor
        single = choice.key(arrays, self._run_flat.keys())
        if single not in self._run_flat:
            traced = self._trace_run(single)
            if not choice.admits(single, traced[1]):  # an Assert: the default executor
                single = False
                traced = self._run_flat.get(False) or self._trace_run(False)
            self._run_flat[single] = traced
        handoff, fn = self._run_flat[single]
        tensors = handoff.tensors(arrays)
        with choice.calling(single):
            return handoff.call(fn, tensors)

    def _trace_run(self, single: bool) -> tuple:
        """`run`'s traced function for executor choice `single`, with its `Handoff`
        (each choice its own trace: no `tf.function` is shared between them)."""
        import tensorflow as tf

        from refold.compiler.feeding.handoff import Handoff
        handoff, compute = Handoff(self.executor.input_signature()), self.executor.compute
        with self.inference_executor.tracing(single):
            fn = tf.function(lambda *t: compute(handoff.unfold(t)), autograph=False,
                             input_signature=handoff.signature).get_concrete_function()
        return handoff, fn

    def run(self, inputs: Iterable[Any], tolist: bool = False) -> list:
        """Evaluates a batch of inputs together; one result per input, in order.

        A bad input raises `blocks.InputError` naming its index in the batch and
        the block path where it failed. A batch of few small launches runs as a
        straight-line function (`compiler.straight_inference`).
        """
        inputs = _as_list(inputs)
        if self.program.reads_values:
            return self._run_in_rounds(inputs, tolist)
        return self.run_planned(self.plan(inputs), inputs, tolist)

    def run_planned(self, plan: BatchPlan, inputs: list, tolist: bool = False) -> list:
        """`run(inputs)` of a batch planned already (`plan(inputs)`, or `plan_expanded`
        of their graphs, which `Model.predict` has checked once: no second look-up)."""
        try:
            straight = self.straight_inference.run(plan.plan)
            if straight is not None:
                return self.results(plan, straight[0], tolist, rows=straight[1:])
            start = time.perf_counter()
            outputs = [o.numpy() for o in self._compute(plan.feed.arrays)]
            self.straight_inference.looped(time.perf_counter() - start)
        except Exception as e:
            raise _blame(self.program.root, inputs, e) from e
        return self.results(plan, outputs, tolist=tolist)

    def _run_in_rounds(self, inputs: list, tolist: bool) -> list:
        """`run` of a block that reads computed values: the results are read from the
        rounds (`compiler.rounds.context`), which compute every node once, forward only."""
        from refold.blocks.errors import InputError
        try:
            driver = expand_in_rounds(self.program, inputs, self._run_round, finish=True)
        except InputError:
            raise
        except Exception as e:
            raise _blame(self.program.root, inputs, e) from e
        self.last_rounds = driver.rounds
        value_of = driver.shared.value_of
        return [self._result(ExampleGraph(None, result, ctx.metrics), value_of, tolist)
                for result, ctx in zip(driver.results, driver.contexts)]

    def _result(self, example: ExampleGraph, value_of, tolist: bool) -> Any:
        """One input's result (as `block.eval` returns it), `value_of(value id)` giving
        the values."""
        def fill(t, v):
            if isinstance(t, TensorType):
                arr = np.array(value_of(v))
                return arr.tolist() if tolist else arr
            return v
        value = self.program.root.output_type.for_each_terminal(fill, example.result)
        names = self.program.metric_names
        if not names:
            return value
        found: dict[int, list] = {}
        for m, v, _ in example.metrics:
            found.setdefault(m, []).append(np.array(value_of(v)))
        return value, self._metric_dict(found, tolist)

    def _metric_dict(self, found: dict, tolist: bool) -> dict:
        """`{name: stacked values}` from `{metric id: [values]}` (every metric named)."""
        metrics = {}
        for m, name in enumerate(self.program.metric_names):
            t = self.program.metric_types[m]
            arr = np.stack(found[m]) if m in found else np.zeros((0, *t.shape), t.numpy_dtype)
            metrics[name] = arr.tolist() if tolist else arr
        return metrics

    def run_eagerly(self, inputs: Iterable[Any], tolist: bool = False) -> list:
        """`run` without tracing a `tf.function`: quicker for one-off small batches."""
        import tensorflow as tf
        inputs = _as_list(inputs)
        plan = self.plan(inputs)
        try:
            outputs = self.executor.compute(
                {k: tf.constant(v) for k, v in plan.feed.arrays.items()})
        except Exception as e:
            raise _blame(self.program.root, inputs, e) from e
        return self.results(plan, [o.numpy() for o in outputs], tolist=tolist)

    def results(self, plan: BatchPlan, outputs: list, tolist: bool = False,
                rows: tuple | None = None) -> list:
        """Per-input results (as `block.eval` returns them) from the executor's outputs
        (`rows`: where each read lands, `(read_type, read_pos)`, if not the plan's)."""
        if plan.grouped:
            raise ValueError("results() needs a plan made with grouped=False")
        read_type, read_pos = rows or (plan.plan.read_type, plan.plan.read_pos)
        reads = iter(_read_rows(outputs, read_type, read_pos, tolist))
        out_type = self.program.root.output_type
        names = self.program.metric_names
        results = []

        def fill(t, v):
            return next(reads) if isinstance(t, TensorType) else v

        for e in plan.examples:
            value = out_type.for_each_terminal(fill, e.result)
            if not names:
                results.append(value)
                continue
            found: dict[int, list] = {}
            for m, _, _ in e.metrics:
                found.setdefault(m, []).append(next(reads))
            results.append((value, self._metric_dict(found, tolist)))
        return results


def _read_rows(outputs: list, read_type: np.ndarray, read_pos: np.ndarray,
               tolist: bool) -> list:
    """The rows read, in read order: `outputs[read_type[i]][read_pos[i]]`, as rows
    of one copy per value type (lists with `tolist`), not a copy per row: a
    tagger's prediction is a row per word."""
    read_type, read_pos = np.asarray(read_type), np.asarray(read_pos)
    if len(read_type) and (read_type == read_type[0]).all():  # one type: in order
        return _rows(np.asarray(outputs[read_type[0]])[read_pos], tolist)
    got: list = [None] * len(read_type)
    for k in np.unique(read_type).tolist():
        where = np.flatnonzero(read_type == k)
        for i, row in zip(where.tolist(),
                          _rows(np.asarray(outputs[k])[read_pos[where]], tolist)):
            got[i] = row
    return got


def _rows(block: np.ndarray, tolist: bool) -> list:
    """`block`'s rows: lists, arrays (views), 0-d arrays for a block of scalars."""
    if tolist:
        return block.tolist()
    return list(block) if block.ndim > 1 else [block[j, ...] for j in range(len(block))]


def find_bad_input(root, inputs: Iterable[Any], skip: Iterable[int] = ()):
    """The `InputError` (with the input's index) of the first input that fails on the
    reference evaluator, whose errors name the block path; None if all pass. Used to
    say which input made a batched run fail inside TensorFlow."""
    from refold.blocks.errors import InputError
    from refold.blocks.evaluation.contexts import reference_eval
    skip = set(skip)
    for i, x in enumerate(inputs):
        if i in skip:
            continue
        try:
            reference_eval(root, x)
        except InputError as e:
            return e.with_example_index(i)
    return None


def _blame(root, inputs: list, error: Exception) -> Exception:
    """The error to raise when the engine failed on `inputs`."""
    return find_bad_input(root, inputs) or error


# The inputs `Compiler(cache=True)` keeps expanded at most (least recently used dropped).
DEFAULT_CACHE_SIZE = 100_000


def _cache_size(cache) -> int:
    """The cache's capacity in inputs from `Compiler`'s `cache` argument (0: none)."""
    if cache is True:
        return DEFAULT_CACHE_SIZE
    if cache is False or cache is None:
        return 0
    if isinstance(cache, (int, np.integer)) and cache >= 0:
        return int(cache)
    raise ValueError(f"cache must be True, False or a number of inputs (an int >= 0), got "
                     f"{cache!r}")


def _as_list(inputs) -> list:
    if isinstance(inputs, (str, bytes, dict)) or not isinstance(inputs, Iterable):
        raise TypeError("Compiler takes a batch of inputs (a list or other iterable), not "
                        f"a single input: {inputs!r:.80}")
    return list(inputs)


_CHECKED_RECORD = operator.attrgetter("_checked_record")

