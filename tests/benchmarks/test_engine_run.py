"""`benchmarks.engine` and `benchmarks.fit` run their sections and keep the launch counts that
are the code's.

Structure and the code's own properties at tiny sizes, never a timing: speed is measured
by running the benchmarks (BENCHMARKS.md).
"""

from __future__ import annotations

import pytest

from benchmarks import engine, fit
from tests.benchmarks.tables import rate, table


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
    assert len(table(printed, "| workload | scheduler | steps | launches |")) == 4
    assert len(table(printed, "| lowering | ops | steps | launches |")) == 2


def test_engine_memory_expansion_and_plan_sections(capsys):
    memory = engine.section_memory(sizes=(4,))["rows"]
    assert memory[0]["trees"] == 4 and memory[0]["nodes"] > 4 and memory[0]["extra_kb"] >= 0
    expansion = engine.section_expansion(n_trees=32, workers=1)
    assert sorted(expansion) == ["1 workers", "serial"] and all(map(rate, expansion.values()))
    plan = engine.section_plan(sizes=(2,), seconds=0.02)
    assert sorted(plan) == ["agenda-2", "depth-2"]
    assert all(rate(x) for row in plan.values() for x in row)
    printed = capsys.readouterr().out
    assert len(table(printed, "| scheduler | B | plan ms")) == 2


def test_engine_cache_section_times_a_hit_against_expansion(capsys):
    out = engine.section_cache(n_trees=8, rounds=1)
    prints = [f"{how}, {form}" for how in ("fingerprint", "Python walk")
              for form in ("tuples", "dicts")]
    assert sorted(out) == sorted(["cache hit", "expansion", "ratio", *prints])
    assert all(map(rate, out.values()))
    assert out["ratio"] == out["cache hit"] / out["expansion"]
    assert len(table(capsys.readouterr().out, "| per sst-synth tree | µs |")) == 7


def test_fit_against_the_bare_engine():
    out = fit.main(["--trees", "8", "--batch", "4", "--rounds", "1"])
    rates = ["engine", "fit", "ratio", "stream", "stream_ratio", "workers", "workers_ratio"]
    cpu = ["fit_cpu", "stream_cpu", "workers_cpu"]
    bounds = ["stream_bound", "workers_bound"]
    assert sorted(out) == sorted(rates + cpu + bounds)
    assert all(rate(out[k]) for k in rates)
    # per batch: wall and this process's CPU; only the workers variant has workers
    # (clock ticks of 10 ms: a tiny run may show none)
    assert all(rate(out[k][0]) and rate(out[k][1]) for k in cpu)
    assert out["fit_cpu"][2] == out["stream_cpu"][2] == 0.0 and out["workers_cpu"][2] >= 0
    assert all(0 < r <= 1 for k in bounds for r in out[k])


def test_fit_times_expansion_alone():
    out = fit.main(["--expansion", "--trees", "6", "--batch", "3", "--rounds", "1"])
    assert sorted(out) == ["example_expand_ms", "example_plan_ms", "expand_ms", "nodes_per_s",
                           "plan_ms"]
    assert all(map(rate, out.values()))


def test_the_cpu_model_of_a_stream_against_the_cached_list():
    # list: 40 ms wall, 50 ms CPU a batch; the stream adds 25 ms of expansion
    idle, saturated = fit.cpu_model((0.040, 0.050, 0.0), (0.045, 0.052, 0.023), cores=2)
    assert idle == 1.0  # 75 ms of CPU fit in the list's 40 ms on two cores
    assert saturated == pytest.approx(0.050 / 0.075)
    idle, _ = fit.cpu_model((0.040, 0.050, 0.0), (0.045, 0.060, 0.040), cores=2)
    assert idle == pytest.approx(0.040 / 0.050)

