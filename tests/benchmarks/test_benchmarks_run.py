"""Every benchmark entry point runs, at tiny sizes, and reports what BENCHMARKS.md quotes.

These check the tables' and results' structure and the properties that are the code's,
not the machine's (agenda never launches more than depth; sharing a layer launches less;
the variants compared share their weights, so they compute the same function), never a
timing: speed is measured by running the benchmarks, not by tests.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from benchmarks import (
    ablations,
    bilstm,
    breakdown,
    engine,
    fit,
    handoff,
    treelstm,
    warm_start,
    worker_cpu,
)


def _rate(x) -> bool:
    return isinstance(x, float) and math.isfinite(x) and x > 0


def _table(text: str, header: str) -> list[str]:
    """The rows of the markdown table whose header line starts with `header`."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    assert lines[start + 1].startswith("|---")
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    return rows


def test_treelstm_throughput_runs_every_variant(tmp_path, capsys):
    path = tmp_path / "treelstm.json"
    variants = ["engine-agenda", "engine-depth", "engine-same", "hand-batched", "eager"]
    out = treelstm.main(["--batch-sizes", "1,2", "--seconds", "0.03", "--leaves", "5",
                         "--variants", ",".join(variants), "--json", str(path)])
    for mode in ("train", "infer"):
        assert sorted(out[mode]) == sorted(variants)
        assert all(_rate(out[mode][v][b]) for v in variants for b in (1, 2))
    assert json.loads(path.read_text())["train"]["hand-batched"]["2"] > 0
    rows = _table(capsys.readouterr().out, "| variant | B=1 train / infer | B=2 train / infer |")
    assert [r.split(" | ")[0][2:] for r in rows] == variants + [label for *_, label in
                                                                treelstm.RATIOS]


def test_treelstm_paired_reports_both_modes():
    from benchmarks.workloads import TreeLSTMModel, sst_synth_tree
    shape = sst_synth_tree(np.random.default_rng(1), 5)
    out = treelstm.paired([2], 1, TreeLSTMModel(seed=0), shape, np.random.default_rng(0),
                          stream=2)
    assert sorted(out[2]) == ["infer_ahead", "infer_inline", "train_ahead", "train_inline"]
    assert all(_rate(ratio) and _rate(speed) for ratio, speed in out[2].values())


def test_engine_schedules_and_sharing_keep_their_launch_counts(capsys):
    out = engine.main(["--only", "schedules,sharing", "--quick", "--batch", "16",
                       "--reps", "2"])
    (a, tree_lstm), (b, sequences) = out["schedules"].items()
    assert "loss at every node" in a and "loss at the end" in b
    assert tree_lstm["agenda"]["launches"] <= tree_lstm["depth"]["launches"]
    assert sequences["agenda"]["launches"] < sequences["depth"]["launches"]
    sharing = out["sharing"]
    assert sharing["shared"]["launches"] < sharing["per block instance"]["launches"]
    assert sharing["shared"]["ops"] < sharing["per block instance"]["ops"]
    printed = capsys.readouterr().out
    assert len(_table(printed, "| workload | scheduler | steps | launches |")) == 4
    assert len(_table(printed, "| lowering | ops | steps | launches |")) == 2


def test_engine_memory_expansion_and_plan_sections(capsys):
    memory = engine.section_memory(sizes=(4,))["rows"]
    assert memory[0]["trees"] == 4 and memory[0]["nodes"] > 4 and memory[0]["extra_kb"] >= 0
    expansion = engine.section_expansion(n_trees=32, workers=1)
    assert sorted(expansion) == ["1 workers", "serial"] and all(map(_rate, expansion.values()))
    plan = engine.section_plan(sizes=(2,), seconds=0.02)
    assert sorted(plan) == ["agenda-2", "depth-2"]
    assert all(_rate(x) for row in plan.values() for x in row)
    printed = capsys.readouterr().out
    assert len(_table(printed, "| scheduler | B | plan ms")) == 2


def test_engine_cache_section_times_a_hit_against_expansion(capsys):
    out = engine.section_cache(n_trees=8, rounds=1)
    prints = [f"{how}, {form}" for how in ("fingerprint", "Python walk")
              for form in ("tuples", "dicts")]
    assert sorted(out) == sorted(["cache hit", "expansion", "ratio", *prints])
    assert all(map(_rate, out.values()))
    assert out["ratio"] == out["cache hit"] / out["expansion"]
    assert len(_table(capsys.readouterr().out, "| per sst-synth tree | µs |")) == 7


def test_fit_against_the_bare_engine():
    out = fit.main(["--trees", "8", "--batch", "4", "--rounds", "1"])
    rates = ["engine", "fit", "ratio", "stream", "stream_ratio", "workers", "workers_ratio"]
    cpu = ["fit_cpu", "stream_cpu", "workers_cpu"]
    bounds = ["stream_bound", "workers_bound"]
    assert sorted(out) == sorted(rates + cpu + bounds)
    assert all(_rate(out[k]) for k in rates)
    # per batch: wall and this process's CPU; only the workers variant has workers
    # (clock ticks of 10 ms: a tiny run may show none)
    assert all(_rate(out[k][0]) and _rate(out[k][1]) for k in cpu)
    assert out["fit_cpu"][2] == out["stream_cpu"][2] == 0.0 and out["workers_cpu"][2] >= 0
    assert all(0 < r <= 1 for k in bounds for r in out[k])


def test_fit_times_expansion_alone():
    out = fit.main(["--expansion", "--trees", "6", "--batch", "3", "--rounds", "1"])
    assert sorted(out) == ["example_expand_ms", "example_plan_ms", "expand_ms", "nodes_per_s",
                           "plan_ms"]
    assert all(map(_rate, out.values()))


def test_a_worker_times_this_checkout_against_another_taking_turns():
    out = worker_cpu.main(["--trees", "6", "--batch", "3", "--rounds", "2"])  # itself
    assert sorted(out) == ["other_ms", "ratio", "this_ms"]
    assert all(isinstance(v, float) and math.isfinite(v) and v >= 0 for v in out.values())


def test_the_first_fit_of_this_checkout_against_another_in_fresh_processes(capsys):
    out = warm_start.main(["--against", ".", "--rounds", "1", "--trees", "4",
                           "--batch-size", "2", "--metrics", "accuracy"])  # itself
    assert sorted(out) == ["fit other / this", "other", "this"]
    assert all(0 < out[k]["fit"] < out[k]["total"] for k in ("this", "other"))
    assert math.isfinite(out["fit other / this"])
    assert "batch 2, metrics ['accuracy']" in capsys.readouterr().out


def test_the_cpu_model_of_a_stream_against_the_cached_list():
    # list: 40 ms wall, 50 ms CPU a batch; the stream adds 25 ms of expansion
    idle, saturated = fit.cpu_model((0.040, 0.050, 0.0), (0.045, 0.052, 0.023), cores=2)
    assert idle == 1.0  # 75 ms of CPU fit in the list's 40 ms on two cores
    assert saturated == pytest.approx(0.050 / 0.075)
    idle, _ = fit.cpu_model((0.040, 0.050, 0.0), (0.045, 0.060, 0.040), cores=2)
    assert idle == pytest.approx(0.040 / 0.050)


def test_bilstm_throughput_runs_every_variant(tmp_path, capsys):
    path = tmp_path / "bilstm.json"
    out = bilstm.main(["--batch-sizes", "2", "--seconds", "0.03", "--rounds", "1",
                       "--json", str(path)])
    for mode in ("train", "infer"):
        assert sorted(out[mode]) == ["eager", "engine", "keras-padded"]
        assert all(_rate(r[2]) for r in out[mode].values())
    assert json.loads(path.read_text())["words_per_sentence"] > 0
    rows = _table(capsys.readouterr().out, "| variant | B=2 train / infer |")
    assert [r.split(" | ")[0][2:] for r in rows][-2:] == ["engine ÷ keras-padded",
                                                          "engine ÷ eager"]


@pytest.mark.parametrize("section, header, n_rows, n_times", [
    ("rowlists", "| engine | train | infer |", 3, 6),  # 2 layouts and hand-batched, 2 modes
    ("conds", "| launches outside the loop | train |", 3, 6),  # 3 variants x 2 modes
    ("cells", "| cut | engine train |", 3, 12),  # 3 cuts x engine/hand x 2 modes
    ("bidirectional", "| B | CellPair train / infer |", 1, 6),  # 1 size; 3 encoders x 2
    ("weightgrads", "| workload | B |", 2, 4),  # 1 size x 2 workloads x 2 variants
    ("fit_weightgrads", "| workload | B |", 2, 4),  # likewise, through Model.fit
])
def test_ablations_time_every_variant(section, header, n_rows, n_times, capsys):
    if section == "bidirectional":
        out = ablations.bidirectional([2], 1)[2]
    elif section in ("weightgrads", "fit_weightgrads"):
        out = (ablations.weightgrads([2], 1, instances=1) if section == "weightgrads"
               else ablations.fit_weightgrads([2], 1, instances=1, items=4))
        out = {f"{k} {v}": out[k][v] for k in out for v in ("once", "every")}
    elif section == "conds":  # one engine per variant, one 5-leaf shape: a cheap trace
        out = ablations.conds(2, 1, instances=1, leaves=5)
    else:
        out = getattr(ablations, section)(2, 1, leaves=5)
    assert len(out) == n_times and all(_rate(ms) for ms in out.values())
    assert len(_table(capsys.readouterr().out, header)) == n_rows


def test_treelstm_variants_compute_the_same_function():
    """Engine (both schedulers), hand-batched and eager give the same logits on one batch."""
    from benchmarks.workloads import CLASSES, TreeLSTMModel, sst_synth_tree
    rng = np.random.default_rng(0)
    model = TreeLSTMModel(seed=0)
    shape = sst_synth_tree(np.random.default_rng(1), 5)
    trees = [treelstm._reshape_like(shape, None, rng) for _ in range(3)]
    want = np.concatenate([np.asarray(x) for x in treelstm.Eager(model).infer(trees)])
    assert want.shape == (3, CLASSES)
    got = {"hand-batched": treelstm.HandBatched(model, shape).infer(trees)}
    for sched in ("agenda", "depth"):
        got[f"engine-{sched}"] = treelstm.EngineVariant(model, sched).infer(trees)
    for name, logits in got.items():
        np.testing.assert_allclose(np.asarray(logits), want, rtol=1e-4, atol=1e-5,
                                   err_msg=name)


def test_bilstm_variants_compute_the_same_function():
    """Padded Keras and eager give the same logits, and the engine the same mean loss."""
    import tensorflow as tf
    model = bilstm.TaggerModel(seed=0)
    rng = np.random.default_rng(0)
    batch = [bilstm.sentence(rng) for _ in range(2)]
    eager = [np.asarray(x) for x in bilstm.Eager(model).infer(batch)]
    padded = np.asarray(bilstm.KerasPadded(model).infer(batch))
    xent = []
    for s, want, got in zip(batch, eager, padded):
        n = len(s["words"])
        assert want.shape == (n, bilstm.TAGS)
        np.testing.assert_allclose(got[:n], want, rtol=1e-4, atol=1e-5)
        xent.append(tf.nn.sparse_softmax_cross_entropy_with_logits(s["tags"], want).numpy())
    # the engine's train step returns the loss before its update (run last: it updates)
    loss = float(bilstm.Engine(model).train(batch))
    assert loss == pytest.approx(float(np.mean(np.concatenate(xent))), rel=1e-4)


def test_ablations_gate_cuts_agree():
    """Every gate cut of the `cells` ablation gives the same gates and the same gradient."""
    import tensorflow as tf
    z = tf.constant(np.random.default_rng(0).normal(size=(3, 12)), tf.float32)
    weights = tf.constant(np.random.default_rng(1).normal(size=(3, 12)), tf.float32)
    want_gates, want_grad = None, None
    for name, cut in ablations.gate_cuts().items():
        with tf.GradientTape() as tape:
            tape.watch(z)
            gates = cut(z, 4)
            # the last gate unused: its gradient must come back as zeros
            loss = tf.reduce_sum(tf.concat(gates[:3], 1) * weights[:, :9])
        grad = tape.gradient(loss, z).numpy()
        gates = np.concatenate([np.asarray(g) for g in gates], 1)
        if want_gates is None:
            want_gates, want_grad = gates, grad
        np.testing.assert_array_equal(gates, want_gates, err_msg=name)
        np.testing.assert_allclose(grad, want_grad, err_msg=name)
    np.testing.assert_array_equal(want_gates, z.numpy())


def test_breakdown_reports_every_layer_and_its_differences(capsys):
    out = breakdown.main(["--batch-sizes", "2", "--trees", "4", "--rounds", "1",
                          "--repeat", "1"])
    assert sorted(out[2]) == sorted(breakdown.ROWS)
    assert all(_rate(v) for v in out[2].values())
    rows = _table(capsys.readouterr().out, "| ms per step or batch | B=2 |")
    assert [r.split(" | ")[0][2:] for r in rows[:len(breakdown.ROWS)]] == list(breakdown.ROWS)
    assert rows[-1].startswith("| run - bare infer - plan |")


def test_handoff_times_old_and_new_fit_and_predict_on_both_workloads(capsys):
    out = handoff.main(["--batch-sizes", "2", "--items", "4", "--rounds", "1"])
    assert sorted(out) == [("bilstm", 2), ("treelstm", 2)]
    for r in out.values():
        assert sorted(r) == sorted(["fit old", "fit new", "fit old/new", "fit old/new cpu",
                                    "predict old", "predict new", "predict old/new",
                                    "predict old/new cpu"])
        assert all(_rate(v) for v in r.values())
    rows = _table(capsys.readouterr().out, "| workload | B |")
    assert [r.split(" | ")[:2] for r in rows] == [["| treelstm", "2"], ["| bilstm", "2"]]


def test_breakdown_chains_and_profile_print_their_tables(capsys):
    breakdown.main(["--chains", "1,2", "--rounds", "1", "--repeat", "1"])
    rows = _table(capsys.readouterr().out, "| cells in the chain |")
    assert [r.split(" | ")[0] for r in rows] == ["| 1", "| 2"]
    breakdown.main(["--profile", "--batch-sizes", "1"])
    printed = capsys.readouterr().out
    for mode in ("train", "infer"):
        ops = _table(printed, f"B=1 {mode}: | op type |")
        assert any("MatMul" in r for r in ops)
    out = breakdown.main(["--switches", "--batch-sizes", "2", "--trees", "4"])
    assert set(out[2]) == {"fit", "predict"}
    for row in out[2].values():
        assert row["ms"] > 0 and row["cpu ms"] > 0 and row["switches"] >= 0
    assert "B=2 fit: ms" in capsys.readouterr().out


def test_breakdown_profiles_whole_calls_of_both_workloads(capsys):
    out = breakdown.main(["--profile-calls", "--batch-sizes", "2", "--trees", "2",
                          "--rounds", "1"])
    assert sorted(out[2]) == [(w, c) for w in ("bilstm", "treelstm")
                              for c in ("fit", "predict")]
    for row in out[2].values():
        assert _rate(row["ms"]) and 0 < row["traced share"] <= 1
        assert row["matmuls"] >= 1 and row["tasks"] > row["matmuls"]
        assert 0 < row["matmul ms"] < row["ms"] * 10  # profiled: slower than the timed call
    rows = _table(capsys.readouterr().out, "| workload | call | ms per step |")
    assert [r.split(" | ")[:2] for r in rows] == [
        ["| treelstm", "fit"], ["| treelstm", "predict"], ["| bilstm", "fit"],
        ["| bilstm", "predict"]]


def test_breakdown_profiles_whole_calls_of_the_char_tagger(capsys):
    out = breakdown.main(["--profile-calls", "--workloads", "chartagger", "--batch-sizes", "2",
                          "--trees", "2", "--rounds", "1"])
    assert sorted(out[2]) == [("chartagger", "fit"), ("chartagger", "predict")]
    assert all(_rate(row["ms"]) and row["matmuls"] >= 1 for row in out[2].values())


def test_dropout_compares_a_checkout_with_itself_and_the_cost_of_dropout(capsys):
    # an A/A run against this very checkout (two worker processes), tiny calls
    from benchmarks import dropout
    out = dropout.main(["--base", dropout.HERE, "--batch-sizes", "2", "--items", "2",
                        "--rounds", "1"])
    assert sorted(out["base"]) == ["TreeLSTM 2", "tagger 2"]
    assert all(_rate(v["this"]) and _rate(v["base"]) for v in out["base"].values())
    assert sorted(out["cost"]) == [f"{w} 2 {c}" for w in ("TreeLSTM", "tagger")
                                   for c in ("fit", "predict")]
    text = capsys.readouterr().out
    assert len(_table(text, "| workload | B | this | base |")) == 2
    assert len(_table(text, "| workload | B | call | without | with |")) == 4
