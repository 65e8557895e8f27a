"""`scheduler="auto"`: the first batches run under depth and agenda in turn, the faster is kept.

No test here depends on the machine's speed: the timings are forced through the
choice's `clock`, or the choice through its `decide` hook.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

import refold as td
from refold.blocks.evaluation.contexts import reference_eval
from refold.compiler import Compiler, Model, scheduler_choice
from refold.compiler.scheduler_choice import SchedulerChoice, faster
from tests.compiler.test_batched_equals_reference import assert_same_result, case
from tests.compiler.test_model import ForwardSpy, compiled, factories, sign_data
from tests.compiler.test_schedule_picture import INPUTS, words_tree

# word trees of the TreeLSTM case whose depth and agenda schedules differ
TREES = [((1, 2), ((3, 4), 5)), (6, ((0, 1), (2, (3, 4)))), 2, (((5, 6), 0), 1)]


def forced_clock(choice: SchedulerChoice, cost: dict) -> None:
    """Makes every batch under scheduler s take `cost[s]` seconds (per batch of the
    same inputs, so per node too), whatever the machine does."""
    now = [0.0]

    def clock():
        i = choice.batches  # the batch about to be handed out; the one before it ran
        if i > 0:
            now[0] += cost[choice.order[i - 1]]
        return now[0]
    choice.clock = clock


def test_the_trial_alternates_and_keeps_the_faster_with_forced_timings(caplog):
    c = Compiler.create(case("tree_lstm").block, scheduler="auto")
    choice = c.scheduler_choice
    forced_clock(choice, {"depth": 1.0, "agenda": 1.5})
    schedules = {s: c.schedule(TREES, s).plan.node_step.tolist() for s in ("depth", "agenda")}
    assert schedules["depth"] != schedules["agenda"]
    used = []
    with caplog.at_level(logging.INFO, logger="refold"):
        for i in range(len(choice.order) + 3):
            assert c.scheduler_chosen == (None if i <= len(choice.order) else "depth")
            plan = c.plan(TREES).plan
            used.append(next(s for s, steps in schedules.items()
                             if plan.node_step.tolist() == steps))
    # the warm-up under agenda, then runs of 4 in the order A B B A, then the one kept
    assert used == choice.order + ["depth"] * 3
    assert used[:18] == ["agenda"] * 2 + ["depth"] * 4 + ["agenda"] * 8 + ["depth"] * 4
    assert c.scheduler_chosen == "depth" and c.planner.scheduler.name == "depth"
    # batches of one size: the trend is their median, 1.5 s (7 agenda batches to 6)
    assert choice.medians == pytest.approx({"depth": 1.0 / 1.5, "agenda": 1.0})
    assert [len(choice.samples[s]) for s in ("depth", "agenda")] == [6, 7]
    assert choice.samples["depth"][0] == (len(plan.node_op), 1.0)
    logged = [r for r in caplog.records if r.name == "refold" and "auto" in r.getMessage()]
    assert len(logged) == 1 and logged[0].levelno == logging.INFO
    message = logged[0].getMessage()
    assert "kept 'depth'" in message and "1e+03 ms a batch, median of 6" in message


def test_agenda_is_kept_when_it_is_faster_and_on_a_tie():
    for cost, kept in (({"depth": 2.0, "agenda": 1.0}, "agenda"),
                       ({"depth": 1.0, "agenda": 1.0}, "agenda"),
                       ({"depth": 0.97, "agenda": 1.0}, "agenda"),   # within the margin
                       ({"depth": 0.9, "agenda": 1.0}, "depth")):
        c = Compiler.create(td.Map(td.Scalar()) >> td.Sum(), scheduler="auto")
        forced_clock(c.scheduler_choice, cost)
        for _ in range(len(c.scheduler_choice.order) + 1):
            c.run([[1.0, 2.0], [3.0]])
        assert c.scheduler_chosen == kept
    assert faster({"depth": 1.0, "agenda": 1.0 + 1e-9}, margin=0.0) == "depth"


def test_the_trend_takes_out_the_batches_sizes():
    # a step costs 1 + 0.1 a node, depth's 0.9 of that; agenda's batches happen to be
    # the large ones, so per node agenda would look faster (the fixed cost spread over
    # more nodes); against the trend depth is faster
    batches = [(s, n, (0.9 if s == "depth" else 1.0) * (1 + 0.1 * n))
               for s, n in [("depth", 10), ("depth", 12), ("agenda", 40), ("agenda", 44),
                            ("depth", 11), ("agenda", 42)]]
    per_node = {s: np.median([t / n for s_, n, t in batches if s_ == s])
                for s in ("depth", "agenda")}
    assert per_node["agenda"] < per_node["depth"]
    medians = {s: np.median(r) for s, r in scheduler_choice.relative_times(batches).items()}
    assert medians["depth"] < medians["agenda"]


def test_the_decide_hook_forces_the_choice_and_later_plans_follow_it():
    c = Compiler.create(case("tree_lstm").block, scheduler="auto")
    seen = []
    c.scheduler_choice.decide = lambda medians: seen.append(dict(medians)) or "depth"
    for _ in range(len(c.scheduler_choice.order) + 1):
        c.plan(TREES)
    assert c.scheduler_chosen == "depth" and set(seen[0]) == {"depth", "agenda"}
    assert c.plan(TREES).plan.node_step.tolist() == \
        c.schedule(TREES, "depth").plan.node_step.tolist()


def test_auto_results_equal_the_reference_while_measuring_and_after_choosing():
    c = case("tree_lstm")
    comp = Compiler.create(c.block, scheduler="auto")
    comp.scheduler_choice.decide = lambda medians: "depth"
    rng = np.random.default_rng(0)
    inputs = [[TREES[i] for i in row] for row in rng.integers(0, len(TREES), size=(22, 3))]
    for batch in inputs:  # the trial's 18 batches, the choice, then depth's
        got = comp.run(batch)
        for x, g in zip(batch, got):
            assert_same_result(g, reference_eval(c.block, x), "auto")
    assert comp.scheduler_chosen == "depth"


def test_looking_at_a_schedule_is_not_a_measured_batch():
    c = Compiler.create(case("tree_lstm").block, scheduler="auto")
    c.schedule(TREES)
    td.describe_schedule(c, TREES)
    assert c.scheduler_choice.batches == 0
    c.plan(TREES)
    assert c.scheduler_choice.batches == 1


def test_describe_schedule_shows_the_choice():
    block = words_tree()  # where depth and agenda batching part
    c = Compiler.create(block, scheduler="auto")
    before = td.describe_schedule(c, INPUTS)
    assert before.splitlines()[0] == \
        "auto: measuring, 0 of 18 batches planned (until then 'agenda')"
    assert "(kept)" not in before
    forced_clock(c.scheduler_choice, {"depth": 1.0, "agenda": 3.0})
    for _ in range(len(c.scheduler_choice.order) + 1):
        c.plan(INPUTS)
    text = td.describe_schedule(c, INPUTS)
    first = text.splitlines()[0]
    assert first.startswith("auto: kept 'depth'; depth ") and "agenda" in first
    assert "depth (kept): " in text and "\nagenda: " in text
    # each heading is its own scheduler's schedule, not the compiler's twice
    sections = {s: td.describe_schedule(block, INPUTS, [s]) for s in ("depth", "agenda")}
    assert sections["depth"].splitlines()[1:] != sections["agenda"].splitlines()[1:]
    for s, alone in sections.items():
        assert td.describe_schedule(c, INPUTS, [s]).splitlines()[2:] == alone.splitlines()[1:]
    assert "auto" not in td.describe_schedule(Compiler.create(block), INPUTS)


def test_a_worker_process_plans_with_the_fallback_and_measures_nothing(monkeypatch):
    choice = SchedulerChoice()
    monkeypatch.setattr(scheduler_choice.os, "getpid", lambda: -1)
    assert [choice.next() for _ in range(30)] == ["agenda"] * 30
    assert choice.batches == 0 and choice.chosen is None


@pytest.mark.parametrize("bad", ["fast", "Auto", None, 3])
def test_a_bad_scheduler_is_an_error_listing_the_options(bad):
    block = td.Map(td.Scalar()) >> td.Sum()
    for make in (Compiler.create, Model):
        with pytest.raises(ValueError, match=r"scheduler must be 'auto' or one of "
                                             r"\['agenda', 'depth'\], got "):
            make(block, scheduler=bad)


def test_auto_cannot_be_registered_as_a_scheduler():
    from refold.scheduler.schedules import depth_kernel, depth_reference, register_scheduler
    with pytest.raises(ValueError, match="'auto' is reserved"):
        register_scheduler("auto", depth_kernel, depth_reference)


def test_model_passes_auto_to_its_compiler_and_saves_it():
    model = Model(td.Map(td.Scalar()) >> td.Sum(), scheduler="auto")
    assert model.compiler.scheduler_choice is not None and model.compiler.scheduler_chosen is None
    assert model.get_config()["scheduler"] == "auto"


def test_the_choice_does_not_add_traces():
    """The schedulers' batches run on the same traced steps: a fit and a predict
    under "auto" trace exactly as many steps as under agenda."""

    def traces(scheduler: str) -> list:
        found = []

        class Counting(ForwardSpy):
            def forward_traced(self, x, gradient_mode):  # Python runs only while tracing
                found.append(gradient_mode is not None and gradient_mode.weights_once_per_step)

        model = compiled(Counting(factories.tree_sign(), scheduler=scheduler))
        if scheduler == "auto":
            model.compiler.scheduler_choice.decide = lambda medians: "depth"
        trees, y = sign_data(48, seed=3)
        model.fit(trees, y, batch_size=2, epochs=1, verbose=0)  # 24 batches: the trial's 18
        model.predict(trees, batch_size=4, verbose=0)
        if scheduler == "auto":
            assert model.compiler.scheduler_chosen == "depth"
        return sorted(found)

    agenda = traces("agenda")
    assert 0 < len(agenda) <= 3
    assert traces("auto") == agenda


def test_compiler_run_traces_once_under_auto():
    comp = Compiler.create(case("tree_lstm").block, scheduler="auto")
    compute, calls = comp.executor.compute, []
    comp.executor.compute = lambda arrays: calls.append(1) or compute(arrays)
    for _ in range(len(comp.scheduler_choice.order) + 2):
        comp.run(TREES)
    assert comp.scheduler_chosen is not None
    assert len(calls) == 1


def test_a_stream_planned_ahead_trains_under_auto_as_a_list_under_agenda():
    """A stream's batches are planned in a thread ahead of the step: "auto" measures
    them there, chooses, and training gives agenda's weights (up to rounding: the
    schedules sum the gradients' terms in different orders)."""
    trees, y = sign_data(100, seed=1)

    def fitted(x, y, scheduler):
        model = compiled(Model(factories.tree_sign(), scheduler=scheduler))
        if scheduler == "auto":
            model.compiler.scheduler_choice.decide = lambda medians: "depth"
        model.fit(x, y, batch_size=4, shuffle=False, verbose=0)
        return model

    streamed = fitted(((t, label) for t, label in zip(trees, y)), None, "auto")
    assert streamed.compiler.scheduler_chosen == "depth"
    listed = fitted(trees, y, "agenda")
    for u, v in zip(streamed.get_weights(), listed.get_weights(), strict=True):
        np.testing.assert_allclose(u, v, atol=1e-5)
