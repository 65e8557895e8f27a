"""The planning kernels' plain-Python twins give what the compiled kernels give.

While a new install's kernels compile in a background process, Python code calls
their twins (`refold.kernel_calls`). Under `plain_python()`, every kernel call a
workload makes is recorded (arguments copied, read-only flags kept) and replayed
on the compiled kernel: results and arguments afterwards must be equal, dtypes
included. The workloads here: random batches planned under every scheduler, grouped
and not, merged, scheduled with op costs and packed step by step; the compiler's
(expansion, rounds, straight-line) are in tests/compiler/test_kernel_cache.py. Then
the switch itself: twins until the background process is done, compiled after.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numba.core.dispatcher import Dispatcher

from refold import kernel_cache, kernel_calls
from refold.kernel_calls import KERNEL, plain_python, twin
from refold.scheduler import SCHEDULERS, OpGraph, agenda_schedule
from refold.scheduler.graph import _merge_records
from refold.scheduler.planner import Planner, _merge, _pack, _pack_plan, _segments, plan_record
from refold.scheduler.schedules import _agenda, group_by_step
from tests.scheduler.graphs import random_batches
from tests.scheduler.test_executor import ALL, INT, Builder
from tests.scheduler.test_planner import N_METRICS, draw_example


def _copy(a):
    if not isinstance(a, np.ndarray):
        return a
    c = a.copy()
    c.flags.writeable = a.flags.writeable  # a read-only array is another Numba type
    return c


def assert_same(a, b, where: str = "result") -> None:
    """Equal values of equal kinds: arrays of one dtype, nested tuples and lists."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        assert isinstance(a, np.ndarray) and isinstance(b, np.ndarray), where
        assert a.dtype == b.dtype, (where, a.dtype, b.dtype)
        np.testing.assert_array_equal(a, b, where)
    elif isinstance(a, (tuple, list)):
        assert isinstance(b, (tuple, list)) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    else:  # a scalar: the twin's may be a NumPy scalar where Numba gives a Python one
        assert np.asarray(a).dtype.kind == np.asarray(b).dtype.kind, (where, a, b)
        assert a == b, (where, a, b)


@contextlib.contextmanager
def replayed(kernels) -> Iterator[dict]:
    """Inside, Python code calls the twins of `kernels`; each call is replayed on the
    compiled kernel and compared. Yields the number of calls per kernel name."""
    calls: dict = {}

    def recorder(kernel):
        plain = twin(kernel)

        def call(*args):
            copies = [_copy(a) for a in args]
            got = plain(*args)
            want = kernel(*copies)
            assert_same(got, want, kernel.py_func.__name__)
            assert_same(list(args), copies, kernel.py_func.__name__ + " arguments")
            calls[kernel.py_func.__name__] = calls.get(kernel.py_func.__name__, 0) + 1
            return got

        return call

    with plain_python():
        for kernel in kernels:
            KERNEL[kernel] = recorder(kernel)
        yield calls


def scheduler_kernels() -> list:
    return [s.kernel for s in SCHEDULERS.values()]


def test_a_twin_calls_twins_only():
    plain = twin(_pack_plan)
    assert not isinstance(plain, Dispatcher) and plain.__code__ is _pack_plan.py_func.__code__
    assert plain.__globals__["_pack"] is twin(_pack)
    assert plain.__globals__["_segments"] is twin(_segments)
    assert twin(_pack_plan) is plain  # made once
    for kernel in (_pack_plan, *scheduler_kernels()):
        assert not any(isinstance(v, Dispatcher) for v in twin(kernel).__globals__.values())
    assert twin(len) is len  # not a Numba function: its own twin


def test_the_loop_heaviest_kernels_have_numpy_twins():
    # registered with `kernel_calls.vectorised`; the replays below check them
    from refold.scheduler.graph import _merge_records_numpy
    from refold.scheduler.packing import (
        _launch_arg_rows,
        _launch_arg_rows_numpy,
        _pack_numpy,
        _remap,
        _remap_numpy,
    )
    from refold.scheduler.schedules import (
        _agenda_priority,
        _agenda_priority_numpy,
        _agenda_steps,
        _agenda_steps_numpy,
    )
    assert twin(_pack) is _pack_numpy and twin(_merge_records) is _merge_records_numpy
    assert twin(_launch_arg_rows) is _launch_arg_rows_numpy and twin(_remap) is _remap_numpy
    assert twin(_agenda_steps) is _agenda_steps_numpy
    assert twin(_agenda_priority) is _agenda_priority_numpy
    assert twin(_agenda).__globals__["_agenda_steps"] is _agenda_steps_numpy


@settings(max_examples=60, deadline=None)
@given(random_batches(max_nodes=40, max_graphs=4), st.lists(st.floats(0, 3), max_size=6))
def test_the_agenda_s_numpy_twin_schedules_random_batches_as_the_kernel(batch, costs):
    graph, _ = batch
    args = (graph.node_op, graph.node_arity, graph.node_args, graph.value_node, graph.sdepth,
            np.asarray(costs, np.float64))
    assert_same(twin(_agenda)(*[_copy(a) for a in args]), _agenda(*args), "_agenda")


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 30), max_size=12), st.integers(0, 30), st.integers(0, 4))
def test_the_remap_s_numpy_twin_changes_rows_and_post_as_the_kernel(rows, end, at):
    from refold.scheduler.packing import _remap
    rows = np.asarray(rows, np.int64)
    post = np.full(at + len(rows), -1, np.int64)
    got_rows, got_post, want_rows, want_post = rows.copy(), post.copy(), rows.copy(), post.copy()
    assert twin(_remap)(got_rows, end, got_post, at) == _remap(want_rows, end, want_post, at)
    assert_same([got_rows, got_post], [want_rows, want_post], "_remap")


@pytest.mark.parametrize("seed", range(4))
def test_plain_python_plans_as_the_compiled_kernels(seed):
    rng = np.random.default_rng(seed)
    kernels = [_merge, _merge_records, _pack_plan, _pack, _segments, _agenda,
               *scheduler_kernels()]
    with replayed(kernels) as calls:
        for _ in range(3):
            examples = [draw_example(rng) for _ in range(int(rng.integers(1, 5)))]
            records = [plan_record(*e) for e in examples]
            for name in SCHEDULERS:
                for grouped in (False, True):
                    Planner(ALL.executor.layout, name, N_METRICS).plan(
                        records, [e[0].constants for e in examples], grouped)
            graph = OpGraph.concatenate([e[0] for e in examples])
            schedule = agenda_schedule(graph, rng.random(len(ALL.executor.layout.arity)))
            ALL.planner.feed(graph, schedule, np.zeros(0, np.int64))
    assert set(calls) == {k.py_func.__name__ for k in kernels}, calls


def test_twins_raise_as_the_kernels_do():
    b = ALL.executor.layout  # a lookup of a value the loop computes: the planner's error
    builder = Builder()
    builder.node("look", builder.node("inc", builder.const(INT, 2))[0])
    graph, _ = builder.graph()
    record = plan_record(graph, [graph.num_values - 1], [], [])
    errors = []
    for context in (contextlib.nullcontext, plain_python):
        with context(), pytest.raises(ValueError) as e:
            Planner(b, "agenda").plan([record], [graph.constants])
        errors.append(str(e.value))
    assert errors[0] == errors[1] and "looks up a variable" in errors[0]


@pytest.fixture
def background(monkeypatch):
    """A background compilation under way until `done` is set; the switch as at the
    import of a new install's process."""
    state = {"done": False, "asked": 0}

    def compiling():
        state["asked"] += 1
        return not state["done"]

    monkeypatch.setattr(kernel_cache, "compiling", compiling)
    monkeypatch.setattr(kernel_calls, "_plain", True)
    # patience from now: the worker may have imported kernel_calls over 10 minutes ago
    monkeypatch.setattr(kernel_calls, "_give_up", time.monotonic() + kernel_calls._PATIENCE)
    KERNEL.clear()
    yield state
    KERNEL.clear()


def steps():
    return np.array([1, 0, 1, 2]), np.array([0, 0, 1, 0])


def test_python_runs_twins_until_the_background_process_is_done(background, monkeypatch):
    ran, plain = [], twin(group_by_step)
    monkeypatch.setitem(kernel_calls._TWINS, group_by_step,
                        lambda *a: ran.append("twin") or plain(*a))
    step, op = steps()
    first = KERNEL[group_by_step](op, step)
    assert ran == ["twin"] and background["asked"] == 1 and KERNEL[group_by_step] \
        is not group_by_step
    background["done"] = True
    second = KERNEL[group_by_step](op, step)  # asks once more, then runs compiled for good
    assert ran == ["twin"] and background["asked"] == 2
    assert KERNEL[group_by_step] is group_by_step and not kernel_calls._plain
    assert_same(list(first), list(second))


def test_a_stuck_background_process_is_not_waited_on_for_good(background, monkeypatch):
    monkeypatch.setattr(kernel_calls, "_give_up", 0.0)
    step, op = steps()
    KERNEL[group_by_step](op, step)
    assert KERNEL[group_by_step] is group_by_step


def test_plain_python_whatever_the_background_process_does(background):
    background["done"] = True
    with plain_python():
        assert KERNEL[group_by_step] is twin(group_by_step)
    assert background["asked"] == 0  # then as before: asks at the next call
    assert KERNEL[group_by_step] is not group_by_step
