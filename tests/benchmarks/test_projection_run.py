"""`python -m benchmarks.ablations --only projection`, `--only transpose`, `--only
outer`, `--only executor` and `--only grugates` run, at a tiny size, and print their
tables."""

from __future__ import annotations

import math

import pytest

from benchmarks import ablations


def test_projection_ablation_times_both_taggers_and_prints_their_ratios(capsys):
    out = ablations.fit_projection([1], 1, instances=1, items=2)
    assert sorted(out) == [1]
    row = out[1]
    first, whole = "projected first", "whole cells in the loop"
    assert row["ops before the loop"][first] == ["embedding", "InputProjection"]
    assert "InputProjection" not in row["ops before the loop"][whole]
    for call in ("fit", "predict"):
        assert sorted(row[call]) == sorted([first, whole, "ratio"])
        assert all(isinstance(x, float) and math.isfinite(x) and x > 0
                   for x in row[call].values())
    lines = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| B | "))
    assert lines[header].count("|") == 5
    assert lines[header + 2].startswith("| 1 | ")


def _assert_pair_table(out: dict, printed: str, b: int, workloads: list, variants: list):
    """`out` has a row per workload with both variants' times and their ratio, all
    positive, and the printed table a row per workload in that order."""
    assert sorted(out) == sorted((w, b) for w in workloads)
    for row in out.values():
        assert sorted(row) == sorted([*variants, "ratio"])
        assert all(isinstance(x, float) and math.isfinite(x) and x > 0 for x in row.values())
    lines = printed.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| workload | B | "))
    for i, work in enumerate(workloads):
        assert lines[header + 2 + i].startswith(f"| {work} | {b} | ")


def test_transpose_ablation_times_both_variants_and_prints_their_ratio(capsys):
    out = ablations.fit_transpose([2], 1, instances=1, items=2)
    _assert_pair_table(out, capsys.readouterr().out, 2, ["TreeLSTM", "user TreeLSTM", "tagger"],
                       ["U^T once per step", "transpose_b"])


def test_outer_ablation_times_both_variants_and_prints_their_ratio(capsys):
    out = ablations.fit_outer([1], 1, instances=1, items=2, workloads=("TreeLSTM",))
    _assert_pair_table(out, capsys.readouterr().out, 1, ["TreeLSTM"], ["tap", "TensorFlow's"])


def test_executor_ablation_times_both_variants_of_predict_and_prints_their_ratio(capsys):
    out = ablations.predict_executor([1], 1, instances=1, items=2)
    _assert_pair_table(out, capsys.readouterr().out, 1, ["TreeLSTM", "tagger"],
                       ["chosen per batch", "default executor"])


def test_gru_gates_ablation_times_both_variants_and_prints_their_ratio(capsys):
    out = ablations.fit_grugates([1], 1, instances=1, items=2)
    _assert_pair_table(out, capsys.readouterr().out, 1, ["GRU tagger"],
                       ["own gradients", "autodiff"])


def test_main_runs_each_whole_call_ablation_asked_for_with_its_arguments(monkeypatch):
    names = {"replay": "fit_replay", "transpose": "fit_transpose", "outer": "fit_outer",
             "grugates": "fit_grugates", "executor": "predict_executor",
             "projection": "fit_projection"}
    for name, fn in names.items():
        monkeypatch.setattr(ablations, fn, lambda *args, name=name: (name, args))
    out = ablations.main(["--only", "outer,grugates,projection", "--batch-sizes", "1,4",
                          "--rounds", "3", "--instances", "2"])
    assert out == {k: (k, ([1, 4], 3, 2)) for k in ("outer", "grugates", "projection")}


def test_the_tagger_workload_names_an_unknown_cell():
    from benchmarks.bilstm import TaggerModel
    with pytest.raises(ValueError, match=r"cell must be one of \['gru', 'lstm'\], got 'rnn'"):
        TaggerModel(cell="rnn")
