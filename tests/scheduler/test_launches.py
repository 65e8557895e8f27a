"""The launch interface (`scheduler.launches`) and the gradient mode passed to `compute`.

One executor serves every `GradientMode`: each traced step passes its own, the
executor's settings stay as built, and every mode's values and gradients equal the
node-by-node oracle under both schedulers (`tests.scheduler.test_executor`).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from refold.scheduler import GradientMode
from refold.scheduler.launches import Launch
from tests.scheduler.test_executor import (
    CELL,
    COUNTED,
    GRADIENT_RUNS,
    NAMES,
    ONE_LOOP_OP,
    OP_ID,
    OPS,
    TOK,
    TYPES,
    Builder,
    F,
    OpSet,
    check_gradients,
    draw_batch,
    draw_reads,
    random_batch,
    schedule_and_feed,
)

MODES = {"tensorflow's": GradientMode(),
         "once per step": GradientMode.once_per_step(replay=False),
         "replayed": GradientMode.once_per_step(replay=True)}


class WithMode(OpSet):
    """`base`'s executor (built with the default settings), its gradients traced with
    `mode` passed to `compute`."""

    def __init__(self, base: OpSet, mode: GradientMode):
        super().__init__(base.ops, row_lists=base.row_lists)
        self.mode = mode
        self.__dict__["executor"] = base.executor  # shared: a cached_property's slot


SHARED = {"several": OpSet(OPS), "one": OpSet(ONE_LOOP_OP.ops)}
WITH_MODE = {(ops, mode): WithMode(SHARED[ops], MODES[mode]) for ops in SHARED for mode in MODES}


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("ops", sorted(SHARED))
@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=8, deadline=None)
@given(data=st.data())
def test_each_gradient_mode_passed_to_one_executor_equals_the_oracle(name, ops, mode, data):
    opset = WITH_MODE[ops, mode]
    graph, raw = random_batch(data.draw, opset=opset)
    reads = draw_reads(data.draw, graph.num_values)
    check_gradients(graph, raw, name, reads, data.draw(st.integers(0, 2**31 - 1)),
                    opset=opset)
    ex = SHARED[ops].executor
    assert ex.gradient_mode == GradientMode()  # nothing flipped on the shared executor
    assert (ex.batched_weight_grads, ex.replay_backward) == (False, False)


def _chain(opset):
    """A chain of 7 `cell`s in the loop (as in test_executor): W1's gradient runs once
    per backward iteration, or once per step when taken after the loop."""
    b = Builder(opset)
    e = b.node("embed2", b.const(TOK, 1))[0]
    x = b.const(F, [0.1, -0.2, 0.3])
    for _ in range(7):
        x = b.node("cell", x, e, x)[0]
    return b.graph()


@pytest.mark.parametrize("mode, runs", [("tensorflow's", 1 + 7), ("once per step", 1),
                                        ("replayed", 1)])
def test_the_mode_passed_decides_how_the_loop_is_differentiated(mode, runs, monkeypatch):
    from refold.scheduler import reverse
    base = OpSet([OPS[OP_ID["embed2"]], COUNTED])
    opset = WithMode(base, MODES[mode])
    replayed = []
    replay_loop = reverse.replay_loop
    monkeypatch.setattr(reverse, "replay_loop",
                        lambda *a: replayed.append(1) or replay_loop(*a))
    graph, raw = _chain(opset)
    GRADIENT_RUNS.clear()
    check_gradients(graph, raw, "agenda", np.arange(graph.num_values), 0, opset=opset)
    assert len(GRADIENT_RUNS) == runs
    assert bool(replayed) == (mode == "replayed")
    assert base.executor.gradient_mode == GradientMode()


def test_the_executors_settings_are_the_mode_of_a_call_given_none():
    from refold.scheduler.executor import Executor
    ex = Executor(ONE_LOOP_OP.ops, TYPES, batched_weight_grads=True)
    assert ex.gradient_mode == GradientMode(weights_once_per_step=True)
    ex.replay_backward = True  # a setting, read when a call given no mode is traced
    assert ex.gradient_mode == GradientMode.once_per_step(replay=True)
    with pytest.raises(TypeError, match="mode must be a GradientMode, got True"):
        ex.compute({}, True)
    with pytest.raises(TypeError, match="replay_backward must be True or False, got None"):
        GradientMode(replay_backward=None)


@pytest.mark.parametrize("own_outputs", [True, False])
@pytest.mark.parametrize("name", NAMES)
def test_a_launch_tables_launches_are_the_plans_segments(name, own_outputs):
    """Launch g gathers its segment of `in_rows_k` and writes its own output rows
    (`own_outputs`) or the previous launch's (the forward loop writes one late)."""
    opset = SHARED["one"]
    launches = opset.executor.launches
    lay = launches.layout
    graph, _ = draw_batch(np.random.default_rng(5), opset=opset, max_nodes=30)
    feed = schedule_and_feed(graph, name, np.arange(graph.num_values), opset)
    index, bounds = feed.arrays["index"], feed.arrays["layout"]
    segs = {s: index[bounds[i]:bounds[i + 1]] for i, s in enumerate(lay.segments)}
    seg = launches.segments({k: tf.constant(v) for k, v in feed.arrays.items()})
    buffers = {k: tf.zeros(int(segs["n_rows"][k])) for k in lay.loop_types}
    table = launches.table(seg, buffers, own_outputs=own_outputs)
    n = len(segs["group_op"])
    assert int(table.count) == n > 0
    for g in range(n):
        got = table.launch(tf.constant(g))
        assert isinstance(got, Launch)
        assert (int(got.op), int(got.size)) == (segs["group_op"][g], segs["group_size"][g])
        for k in lay.loop_types:
            splits, out = segs[f"in_splits_{k}"], segs[f"out_bounds_{k}"]
            first = g + 1 if own_outputs else g
            np.testing.assert_array_equal(got.rows[k],
                                          segs[f"in_rows_{k}"][splits[g]:splits[g + 1]])
            np.testing.assert_array_equal(got.written[k], np.arange(out[first], out[first + 1]))


def test_a_launch_calls_its_op_and_names_it_when_its_outputs_are_wrong():
    launches = SHARED["one"].executor.launches
    o = launches.ops.index(CELL)
    args = [tf.zeros((2, *TYPES[k].shape)) for k in launches.layout.op_in[o]]
    outs = launches.call(o, args, 2)
    assert [tuple(y.shape) for y in outs] == [
        (2, *TYPES[k].shape) for k in launches.layout.op_out[o]]
    broken = OpSet([OPS[OP_ID["embed2"]], dataclasses.replace(
        CELL, fn=lambda a, e, b: [a])]).executor.launches
    with pytest.raises(ValueError, match="op 'cell' returned 1 outputs, expected 3"):
        broken.call(1, args, 2)
