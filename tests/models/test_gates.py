"""`cut_gates` cuts like strided slices and differentiates like them."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from refold.models.gates import cut_gates
from tests.compiler import test_batched_equals_reference as reference


@pytest.mark.parametrize("n_gates, width, used", [(1, 3, (0,)), (4, 2, (0, 1, 2, 3)),
                                                  (5, 3, (0, 2, 4)), (3, 1, (1,))])
def test_cut_gates_equal_strided_slices_in_values_and_gradients(n_gates, width, used):
    rng = np.random.default_rng(n_gates * 10 + width)
    z = tf.constant(rng.normal(size=(6, n_gates * width)), tf.float32)
    weights = [rng.normal(size=(6, width)) for _ in range(n_gates)]
    results = []
    for cut in (lambda z: cut_gates(z, n_gates),
                lambda z: [z[:, g * width:(g + 1) * width] for g in range(n_gates)]):
        with tf.GradientTape() as tape:
            tape.watch(z)
            gates = cut(z)
            # a nonlinear loss of some gates only: unused gates get no gradient
            loss = tf.add_n([tf.reduce_sum(tf.tanh(gates[g]) * weights[g]) for g in used])
        results.append([g.numpy() for g in gates] + [tape.gradient(loss, z).numpy()])
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, atol=1e-6)


def _memory_by_hand(z, cs, layout):
    """The LSTM memory update op by op, differentiated by TensorFlow."""
    width = z.shape[1] // len(layout)
    cut = {}
    forget = []
    for g, letter in enumerate(layout):
        block = z[:, g * width:(g + 1) * width]
        if letter == "f":
            forget.append(tf.sigmoid(block))
        else:
            cut[letter] = tf.tanh(block) if letter == "u" else tf.sigmoid(block)
    c = cut["i"] * cut["u"]
    for f, c_k in zip(forget, cs):
        c = c + f * c_k
    return cut["o"] * tf.tanh(c), c


@pytest.mark.parametrize("layout", ["iou", "iouff", "ifuo", "uoi", "fiofu"])
@pytest.mark.parametrize("used", ["h", "c", "both"])
def test_lstm_memory_equals_autodiff_in_values_and_gradients(layout, used):
    from refold.models.gates import lstm_memory
    rng = np.random.default_rng(len(layout) * 7 + len(used))
    n, width, n_kids = 5, 3, layout.count("f")
    z = tf.constant(rng.normal(size=(n, len(layout) * width)), tf.float32)
    cs = [tf.constant(rng.normal(size=(n, width)), tf.float32) for _ in range(n_kids)]
    w_h, w_c = (tf.constant(rng.normal(size=(n, width)), tf.float32) for _ in range(2))
    results = []
    for memory in (lstm_memory, _memory_by_hand):
        with tf.GradientTape() as tape:
            tape.watch([z, *cs])
            h, c = memory(z, cs, layout)
            # a loss of h, of c, or of both: an unused output has no gradient
            loss = tf.add_n([tf.reduce_sum(tf.tanh(t) * w) for t, w, name in
                             ((h, w_h, "h"), (c, w_c, "c")) if used in (name, "both")])
        grads = tape.gradient(loss, [z, *cs])
        results.append([h.numpy(), c.numpy()] + [g.numpy() for g in grads])
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_lstm_memory_is_its_plain_forward_without_a_tape_in_a_graph():
    from refold.models.gates import lstm_memory
    z = tf.random.normal([4, 10], seed=1)
    cs = [tf.random.normal([4, 2], seed=2), tf.random.normal([4, 2], seed=3)]
    traced = tf.function(lambda z, a, b: lstm_memory(z, [a, b], "iouff"))
    graph = traced.get_concrete_function(z, *cs).graph
    # no custom gradient (an IdentityN around the update) when nothing records
    assert "IdentityN" not in {op.type for op in graph.get_operations()}
    for got, want in zip(traced(z, *cs), _memory_by_hand(z, cs, "iouff")):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fn, by_hand", [
    ("product", lambda a, b: a * b),
    ("interpolate", lambda z, a, b: z * a + (1.0 - z) * b),
], ids=["product", "interpolate"])
def test_a_grus_gated_products_equal_autodiff_in_values_and_gradients(fn, by_hand):
    from refold.models import gates
    rng = np.random.default_rng(11)
    n_args = 2 if fn == "product" else 3
    args = [tf.constant(rng.normal(size=(4, 3)), tf.float32) for _ in range(n_args)]
    weight = tf.constant(rng.normal(size=(4, 3)), tf.float32)
    results = []
    for f in (getattr(gates, fn), by_hand):
        with tf.GradientTape() as tape:
            tape.watch(args)
            out = f(*args)
            loss = tf.reduce_sum(tf.tanh(out) * weight)
        results.append([out.numpy()] + [g.numpy() for g in tape.gradient(loss, args)])
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("layout, n_kids", [("iof", 1), ("iouu", 0), ("ioufx", 1), ("iouf", 2)])
def test_lstm_memory_rejects_a_layout_that_does_not_match_the_children(layout, n_kids):
    from refold.models.gates import lstm_memory
    with pytest.raises(ValueError, match="layout"):
        lstm_memory(tf.zeros([1, 3 * len(layout)]), [tf.zeros([1, 3])] * n_kids, layout)


@pytest.mark.parametrize("scheduler", ["agenda", "depth"])
@pytest.mark.parametrize("name", ["tree_lstm", "bidirectional_tagger"])
@settings(max_examples=2, deadline=None)
@given(data=st.data())
def test_fused_cells_equal_the_reference_with_weight_gradients_once_per_step(
        name, scheduler, data):
    """The cells' own gradient also under `Executor(batched_weight_grads=True)`, whose
    backward loop differentiates them to their inputs only (values and gradients
    against the reference evaluator, as for the default in
    tests/compiler/test_batched_equals_reference.py)."""
    case = reference.case(name)
    built = reference.engine_for(case, scheduler)
    built[0].executor.batched_weight_grads = True  # read when the step is traced
    inputs = data.draw(st.lists(case.inputs, min_size=1, max_size=6))
    reference.check_case_batch(case, scheduler, inputs, built)
    with tf.GradientTape():  # some loop op's weights are deferred under a tape
        assert built[0].executor.launches.deferred_weights(True), "no weights deferred"



@pytest.mark.parametrize("name, replay, shortcut", [
    ("stacked_encodings", False, True), ("stacked_encodings", True, True),
    ("bidirectional_tagger", True, False)])  # an LSTM and a GRU: the cells run again
@settings(max_examples=2, deadline=None)
@given(data=st.data())
def test_a_bilstm_s_kernel_gradients_come_from_its_projections_gradients(
        name, replay, shortcut, data):
    """Taken once per step, two LSTMs' recurrent kernels' gradients are `h^T dz` from
    the gradients their projected inputs got (`ProjectedCell.weight_grads_from_inputs`,
    the loop op's `Op.weight_grads`), without running the cells again; equal to the
    reference's."""
    from hypothesis import assume
    case = reference.case(name)
    built = reference.engine_for(case, "agenda")
    built[0].executor.batched_weight_grads = True  # read when the step is traced
    built[0].executor.replay_backward = replay
    lay = built[0].executor.layout
    (pair,) = [built[0].executor.ops[o] for o in lay.loop_ops]
    given = []

    def recorded(args, arg_grads, shortcut=pair.weight_grads):
        got = shortcut(args, arg_grads)
        given.append(got is not None)
        return got
    inputs = data.draw(st.lists(case.inputs, min_size=1, max_size=6))
    assume(any(len(x) > 1 for x in inputs))  # a loop: a sentence of two words
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pair, "weight_grads", recorded)
        reference.check_case_batch(case, "agenda", inputs, built)
    assert given and all(g == shortcut for g in given)


@pytest.mark.parametrize("scheduler", ["agenda", "depth"])
@pytest.mark.parametrize("name", ["tree_lstm", "bidirectional_tagger"])
@settings(max_examples=2, deadline=None)
@given(data=st.data())
def test_fused_cells_equal_the_reference_with_the_replayed_backward_loop(name, scheduler, data):
    """The cells' own gradient in the engine's replayed backward loop
    (`Executor(replay_backward=True)`, `scheduler.reverse`): each launch is
    differentiated there under a tape of its own, so the fused update is used."""
    from refold.models import gates
    from refold.scheduler import reverse
    case = reference.case(name)
    built = reference.engine_for(case, scheduler)
    built[0].executor.replay_backward = True  # read when the step is traced
    inputs = data.draw(st.lists(case.inputs, min_size=1, max_size=6))
    replaying, fused = [], []
    fused_memory, replay = gates._fused_memory, reverse._replay

    def replayed(*args):
        replaying.append(1)
        try:
            return replay(*args)
        finally:
            replaying.pop()

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(gates, "_fused_memory", lambda *a: fused.extend(replaying[:1])
                      or fused_memory(*a))
        patch.setattr(reverse, "_replay", replayed)
        reference.check_case_batch(case, scheduler, inputs, built)
    assert fused, "the backward loop did not replay the fused update with its gradient"
