"""`td.Unfold` batched, in rounds (`compiler.rounds.context`): stopping, rounds, errors.

That batched runs take the reference's decisions and give its values and gradients
(both schedulers) is tested with the other models in `test_batched_equals_reference`
(`greedy_decoder`, `transition_system`).
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import refold as td
from refold.blocks.errors import InputError, InternalError
from refold.compiler import Compiler
from tests.compiler import models


def _counter(max_steps: int, done=None, decide=None, reads_values=True, lookahead=1):
    """A state counting up by one per step; the configuration holds the values seen."""
    step = td.GetItem(0) >> td.Function(lambda s: s + 1.0) >> td.AllOf(
        td.Identity(), td.Identity())
    decide = decide or (lambda seen, out: seen + (float(out),))
    return td.AllOf(td.Scalar(), td.InputTransform(lambda x: ())) >> td.Unfold(
        step, decide=decide, done=done, max_steps=max_steps, reads_values=reads_values,
        lookahead=lookahead)


@pytest.mark.parametrize("scheduler", ["agenda", "depth"])
def test_a_decoder_that_never_ends_stops_at_max_steps(scheduler):
    block = _counter(max_steps=6, done=lambda seen: False)
    comp = Compiler.create(block, scheduler=scheduler)
    got = comp.run([0.0, 10.0])
    assert comp.last_rounds == 6
    for x, (outs, state, seen) in zip([0.0, 10.0], got):
        want = block.eval(x)
        assert len(outs) == len(want[0]) == 6
        assert seen == want[2] == tuple(x + k for k in range(1, 7))
        assert float(state) == x + 6


def test_examples_stop_at_their_own_step_and_take_one_round_each():
    block = _counter(max_steps=20, done=lambda seen: bool(seen) and seen[-1] >= 5.0)
    comp = Compiler.create(block)
    got = comp.run([4.5, 0.0, 9.0])
    assert [len(outs) for outs, _, _ in got] == [1, 5, 1]
    assert comp.last_rounds == 5  # the longest example's steps, not their sum


def test_examples_expand_one_at_a_time_each_resumed_once_per_walk():
    # examples share one graph, so only one records at a time; a walk's steps are
    # expanded by the driver, so an example is resumed once per walk, not per step
    from refold.compiler.rounds import context as rounds
    running, seen, runs = [0], [], []

    def one_at_a_time(x):
        running[0] += 1
        seen.append(running[0])
        running[0] -= 1
        return ()
    step = td.GetItem(0) >> td.Function(lambda s: s + 1.0) >> td.AllOf(
        td.Identity(), td.Identity())
    block = td.AllOf(td.Scalar(), td.InputTransform(one_at_a_time)) >> td.Unfold(
        step, decide=lambda c, out: c, max_steps=5)
    comp = Compiler.create(block)
    run = rounds._Driver._run

    def counting(driver, i):
        runs.append(i)
        return run(driver, i)
    rounds._Driver._run = counting
    try:
        comp.run([float(k) for k in range(12)])
    finally:
        rounds._Driver._run = run
    assert seen == [1] * 12 and comp.last_rounds == 5
    # each example started, then resumed once when its walk of 5 steps ended
    assert sorted(runs) == sorted(list(range(12)) * 2)


def test_an_example_done_at_the_start_takes_no_step():
    block = _counter(max_steps=3, done=lambda seen: True)
    (outs, state, seen), = Compiler.create(block).run([2.0])
    assert outs == [] and float(state) == 2.0 and seen == ()
    assert block.eval(2.0)[0] == []


def test_every_node_is_computed_once_across_rounds():  # and a run needs no other pass
    case = models.make_greedy_decoder()
    comp = Compiler.create(case.block)
    ran = []
    run_round = comp._run_round

    def counting(graph, reads):
        ran.append(graph.num_nodes)
        return run_round(graph, reads)
    comp._run_round = counting
    inputs = [[0.5, -1.0], [1.5, 0.25], [-2.0, 2.0]]
    graphs = comp.expand(inputs)
    assert len(ran) == comp.last_rounds >= 1
    # the decoder reads after its last step, so the rounds ran the whole graphs
    assert sum(ran) == sum(g.graph.num_nodes for g in graphs)


def test_a_bad_input_names_its_example_and_the_block():
    block = _counter(max_steps=4, decide=lambda seen, out: (
        seen + (float(out),) if out < 3.0 else seen[10]))  # fails once a value reaches 3
    comp = Compiler.create(block)
    with pytest.raises(InputError) as e:
        comp.run([5.0, 1.0, 2.5, 0.0])  # examples 0 and 2 fail in round 1, 1 in round 2
    assert e.value.example_index == 0 and "Unfold" in e.value.block_path
    with pytest.raises(InputError) as e:
        comp.run([-5.0, -4.0, "x"])  # not a number: fails before any round
    assert e.value.example_index == 2 and "Scalar" in e.value.block_path
    with pytest.raises(InputError) as e:
        comp.run([-5.0, 0.0, 1.5])  # 1 fails in round 3, 2 in round 2: the first is named
    assert e.value.example_index == 1
    assert [len(r[0]) for r in comp.run([-5.0, -9.0])] == [4, 4]  # the compiler still runs


def test_done_must_give_a_truth_value():
    block = _counter(max_steps=2, done=lambda seen: np.array([1.0, 2.0]))
    with pytest.raises(InputError, match="not a truth value") as e:
        Compiler.create(block).run([0.0, 1.0])
    assert e.value.example_index == 0


def test_step_types_are_checked_and_inferred():
    step = td.GetItem(0) >> td.Function(tf.negative)  # outputs a tensor, not (state, out)
    with pytest.raises(TypeError, match=r"Unfold.step > Pipe: the step must output \(state"):
        td.AllOf(td.Scalar(), td.Identity()) >> td.Unfold(
            step, decide=lambda c, o: c, max_steps=2)
    with pytest.raises(TypeError, match="configuration second"):
        td.AllOf(td.Identity(), td.Scalar()) >> td.Unfold(
            td.AllOf(td.GetItem(1), td.GetItem(1)), decide=lambda c, o: c, max_steps=2)
    unfold = td.Unfold(td.AllOf(td.GetItem(0), td.GetItem(0) >> td.Function(tf.square)),
                       decide=lambda c, o: c, max_steps=2)
    unfold.set_input_type(td.TupleType(td.TensorType((3,)), td.PyObjectType()))
    assert unfold.output_type == td.TupleType(
        td.SequenceType(td.TensorType((3,))), td.TensorType((3,)), td.PyObjectType())
    with pytest.raises(ValueError, match="max_steps"):
        td.Unfold(td.Identity(), decide=lambda c, o: c, max_steps=0)
    with pytest.raises(TypeError, match="decide is not callable"):
        td.Unfold(td.Identity(), decide=None, max_steps=1)


def test_max_depth_and_workers_refuse_unfold_clearly():
    block = _counter(max_steps=2)
    with pytest.raises(InternalError, match="max_depth cannot follow"):
        block.max_depth(1.0)
    with pytest.raises(ValueError, match="workers cannot expand"):
        Compiler.create(_counter(max_steps=2), workers=2)


def test_unfold_inputs_are_not_cached_since_decisions_follow_the_weights():
    case = models.make_greedy_decoder()
    comp = Compiler.create(case.block)
    x = [0.5, -1.0]
    first = comp.expand([x])[0]
    assert comp.expand([x])[0] is not first


def test_an_unfold_that_reads_no_values_expands_without_rounds_and_is_cached():
    # teacher forcing: decide ignores the values, and is given None
    seen = []
    block = _counter(max_steps=3, decide=lambda c, out: seen.append(out) or c + (0.0,),
                     reads_values=False)
    comp = Compiler.create(block)
    (outs, state, config), = comp.run([1.0])
    assert comp.last_rounds == 0 and len(outs) == 3 and float(state) == 4.0
    assert seen == [None] * 3 and block.eval(1.0)[2] == config == (0.0,) * 3
    inputs = [[2.0]]  # a list: cached by identity
    comp2 = Compiler.create(td.InputTransform(lambda xs: xs[0]) >> block)
    assert comp2.expand(inputs)[0] is comp2.expand(inputs)[0]


def test_model_fit_trains_through_the_steps_taken_and_the_decisions_follow():
    # Each step's loss pulls its logits towards symbol 1; symbol 0 ends decoding and
    # starts 3 ahead, so every example first stops after one step. Training through
    # the steps taken (rounds run every batch: nothing cached) makes it emit 1s.
    import keras

    from refold.compiler import Model
    keras.utils.set_random_seed(0)
    enc, cell = td.FC(4, activation="tanh"), td.FC(4, activation="tanh")
    out = td.FC(3, activation=None)

    def decoder():
        def xent(z):
            return tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=tf.ones(tf.shape(z)[:1], tf.int32), logits=z)
        logits = out >> td.Function(lambda z: z + tf.constant([3.0, 0.0, 0.0]))
        step = td.GetItem(0) >> cell >> td.AllOf(td.Identity(), logits >> td.AllOf(
            td.Identity(), td.Function(xent) >> td.Metric("loss")) >> td.GetItem(0))
        return td.AllOf(td.Vector(2) >> enc, td.InputTransform(lambda x: ())) >> td.Unfold(
            step, decide=lambda c, z: c + (int(np.argmax(z)),), max_steps=4,
            done=lambda c: c[-1:] == (0,))

    decode = Compiler.create(decoder() >> td.GetItem(2))
    xs = [[0.5, -1.0], [1.0, 0.25], [-0.5, 0.75], [0.0, 1.0]]
    assert [c for c, _ in decode.run(xs)] == [(0,)] * 4
    model = Model(decoder() >> td.Void())
    model.compile(optimizer=keras.optimizers.Adam(0.1))
    losses = model.fit(xs, batch_size=2, epochs=15, verbose=0).history["loss"]
    assert losses[-1] < losses[0]
    assert [c for c, _ in decode.run(xs)] == [(1, 1, 1, 1)] * 4
    assert decode.last_rounds == 4


@pytest.mark.parametrize("scheduler", ["agenda", "depth"])
def test_lookahead_takes_k_steps_a_round_and_drops_those_after_done(scheduler):
    def done(seen):
        return bool(seen) and seen[-1] >= 5.0
    step_by_step = Compiler.create(_counter(max_steps=9, done=done), scheduler=scheduler)
    block = _counter(max_steps=9, done=done, lookahead=3)
    ahead = Compiler.create(block, scheduler=scheduler)
    inputs = [0.0, 3.5, 7.0, -4.0]  # 5, 2, 1 and 9 steps (the last stops at max_steps)
    got, want = ahead.run(inputs), step_by_step.run(inputs)
    assert [len(r[0]) for r in got] == [5, 2, 1, 9]
    refs = [block.eval(x) for x in inputs]
    for (outs, state, seen), (w_outs, w_state, w_seen), ref in zip(got, want, refs):
        assert seen == w_seen == ref[2] and float(state) == float(w_state) == float(ref[1])
        assert [float(o) for o in outs] == [float(o) for o in w_outs]
    assert (ahead.last_rounds, step_by_step.last_rounds) == (3, 9)
    # the dropped steps leave nothing behind in the graphs that training runs
    assert [g.graph.num_nodes for g in ahead.expand(inputs)] == [
        g.graph.num_nodes for g in step_by_step.expand(inputs)]


def test_with_lookahead_the_step_is_not_given_the_configuration():
    configs = []

    def step_fn(s):
        return s + 1.0
    step = td.AllOf(td.GetItem(1) >> td.InputTransform(lambda c: configs.append(c) or 0),
                    td.GetItem(0) >> td.Function(step_fn)) >> td.GetItem(1) >> td.AllOf(
        td.Identity(), td.Identity())
    block = td.AllOf(td.Scalar(), td.InputTransform(lambda x: "config")) >> td.Unfold(
        step, decide=lambda c, out: c, max_steps=2, lookahead=2)
    block.eval(0.0)
    Compiler.create(block).run([0.0])
    assert configs == [None] * 4


@pytest.mark.parametrize("name", ["greedy_decoder", "device_decoder", "transition_system"])
def test_run_reads_the_rounds_values_which_equal_running_the_finished_graphs(name):
    from tests.compiler.test_batched_equals_reference import assert_same_result
    case = {c.__name__: c for c in models.ALL}[f"make_{name}"]()
    comp = Compiler.create(case.block)
    rng = np.random.default_rng(0)
    if name == "transition_system":
        inputs = [rng.uniform(-2, 2, (n, 2)).tolist() for n in (1, 3, 5)]
    else:
        inputs = rng.uniform(-2, 2, (5, 2)).tolist()
    from_rounds = comp.run(inputs)
    plan = comp.plan(inputs)
    outputs = comp._function()(plan.feed.arrays)
    assert_same_result(from_rounds, comp.results(plan, [o.numpy() for o in outputs]), name)
    assert_same_result(from_rounds, [case.block.eval(x) for x in inputs], name)


def _unfold_inputs(name, rng, n):
    if name == "transition_system":
        return [rng.uniform(-2, 2, (int(rng.integers(1, 7)), 2)).tolist() for _ in range(n)]
    return rng.uniform(-2, 2, (n, 2)).tolist()


@pytest.mark.parametrize("scheduler", ["agenda", "depth"])
@pytest.mark.parametrize("name", ["greedy_decoder", "device_decoder", "transition_system"])
def test_rounds_run_straight_line_and_equal_the_executors_path(name, scheduler):
    # every round of these is a handful of launches: each runs as the straight-line
    # function of its launch sequence (scheduler.straight), a few sequences in all,
    # once the sequence came twice; with the values the executors' path (parts of the
    # program) gives
    from tests.compiler.test_batched_equals_reference import assert_same_result
    case = {c.__name__: c for c in models.ALL}[f"make_{name}"]()
    straight = Compiler.create(case.block, scheduler=scheduler)
    executors = Compiler.create(case.block, scheduler=scheduler)
    executors.round_engines.use_straight = False
    rng = np.random.default_rng(3)
    rounds = 0
    for n in (1, 4, 9):
        inputs = _unfold_inputs(name, rng, n)
        got = straight.run(inputs)
        rounds += straight.last_rounds
        assert_same_result(got, executors.run(inputs), f"{name}/{scheduler}")
        assert_same_result(got, [case.block.eval(x) for x in inputs], f"{name}/{scheduler}")
        graphs = straight.expand(inputs)  # training's rounds too
        rounds += straight.last_rounds
        assert [g.graph.num_nodes for g in graphs] == [
            g.graph.num_nodes for g in executors.expand(inputs)]
    engines = straight.round_engines
    # executors ran a sequence's first round, and a call's first if it has too many
    # launches (the encoder and, with lookahead, three steps)
    assert set(engines.fallbacks) <= {"new", "launches"} and engines.fallbacks["launches"] <= 6
    assert engines.straight_rounds + sum(engines.fallbacks.values()) == rounds
    # (with lookahead, a call is 1 to 3 rounds, most of them its first)
    assert engines.straight_rounds > (rounds // 2 if name != "device_decoder" else 0)
    assert 1 <= engines.straight.traced <= 12
    assert executors.round_engines.straight_rounds == 0


def test_rounds_of_too_many_launches_take_the_executors_path():
    from tests.compiler.test_batched_equals_reference import assert_same_result
    case = models.make_transition_system()
    comp = Compiler.create(case.block)
    engines = comp.round_engines
    engines.straight.max_launches = 2  # the first round (encoder and a step) has more
    engines.straight.patience = 1
    inputs = _unfold_inputs("transition_system", np.random.default_rng(4), 5)
    got = comp.run(inputs)
    assert_same_result(got, [case.block.eval(x) for x in inputs], "transition_system")
    assert engines.fallbacks["launches"] >= 1
    assert engines.straight_rounds + engines.fallbacks["launches"] == comp.last_rounds
    engines.straight.max_launches, engines.straight.max_sequences = 100, 0
    engines.straight.clear()  # none traced, and none may be
    assert_same_result(comp.run(inputs), got, "transition_system")
    assert engines.fallbacks["sequences"] == comp.last_rounds and not engines.straight.traced


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_straight_line_rounds_hold_values_as_a_mixed_policy_says(policy):
    # values held in the low dtype, returned in the declared one: as the executors' path
    import keras
    before = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(policy)
    try:
        case = models.make_greedy_decoder()
        straight, executors = Compiler.create(case.block), Compiler.create(case.block)
        executors.round_engines.use_straight = False
        inputs = _unfold_inputs("greedy_decoder", np.random.default_rng(6), 6)
        for _ in range(2):  # the second time, every sequence is traced
            got, want = straight.run(inputs), executors.run(inputs)
    finally:
        keras.mixed_precision.set_global_policy(before)
    assert straight.compute_dtype is not None and straight.round_engines.straight.traced
    assert straight.round_engines.straight_rounds >= straight.last_rounds
    from tests.compiler.test_batched_equals_reference import assert_same_result
    assert_same_result(got, want, policy, 1e-2, 1e-2)
    (_, metrics), = got[:1]
    assert all(np.asarray(v).dtype == np.float32 for v in metrics["lse"])


def test_a_round_holding_an_assert_runs_straight_line_on_the_default_executor():
    # TensorFlow's single-threaded executor may hang on an Assert: such a sequence is
    # traced again for the default one (as compiler.training.tf_executor refuses it)
    def checked(s):
        with tf.control_dependencies([tf.debugging.assert_greater(s + 1.0, s)]):
            return s + 1.0
    step = td.GetItem(0) >> td.Function(checked) >> td.AllOf(td.Identity(), td.Identity())
    block = td.AllOf(td.Scalar(), td.InputTransform(lambda x: ())) >> td.Unfold(
        step, decide=lambda seen, out: seen + (float(out),), max_steps=4)
    comp = Compiler.create(block)
    for _ in range(2):
        got = comp.run([0.0, 2.5])
    assert [seen for _, _, seen in got] == [(1.0, 2.0, 3.0, 4.0), (3.5, 4.5, 5.5, 6.5)]
    engines = comp.round_engines
    assert engines.straight_rounds and engines.straight.traced and not engines.single
