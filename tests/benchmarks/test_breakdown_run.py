"""`benchmarks.breakdown` and `benchmarks.handoff` report every layer of a step and its
profile.

Structure and the code's own properties at tiny sizes, never a timing: speed is measured
by running the benchmarks (BENCHMARKS.md).
"""

from __future__ import annotations

from benchmarks import breakdown, handoff
from tests.benchmarks.tables import rate, table


def test_breakdown_reports_every_layer_and_its_differences(capsys):
    out = breakdown.main(["--batch-sizes", "2", "--trees", "4", "--rounds", "1",
                          "--repeat", "1"])
    assert sorted(out[2]) == sorted(breakdown.ROWS)
    assert all(rate(v) for v in out[2].values())
    rows = table(capsys.readouterr().out, "| ms per step or batch | B=2 |")
    assert [r.split(" | ")[0][2:] for r in rows[:len(breakdown.ROWS)]] == list(breakdown.ROWS)
    assert rows[-1].startswith("| run - bare infer - plan |")


def test_handoff_times_old_and_new_fit_and_predict_on_both_workloads(capsys):
    out = handoff.main(["--batch-sizes", "2", "--items", "4", "--rounds", "1"])
    assert sorted(out) == [("bilstm", 2), ("treelstm", 2)]
    for r in out.values():
        assert sorted(r) == sorted(["fit old", "fit new", "fit old/new", "fit old/new cpu",
                                    "predict old", "predict new", "predict old/new",
                                    "predict old/new cpu"])
        assert all(rate(v) for v in r.values())
    rows = table(capsys.readouterr().out, "| workload | B |")
    assert [r.split(" | ")[:2] for r in rows] == [["| treelstm", "2"], ["| bilstm", "2"]]


def test_breakdown_chains_and_profile_print_their_tables(capsys):
    breakdown.main(["--chains", "1,2", "--rounds", "1", "--repeat", "1"])
    rows = table(capsys.readouterr().out, "| cells in the chain |")
    assert [r.split(" | ")[0] for r in rows] == ["| 1", "| 2"]
    breakdown.main(["--profile", "--batch-sizes", "1"])
    printed = capsys.readouterr().out
    for mode in ("train", "infer"):
        ops = table(printed, f"B=1 {mode}: | op type |")
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
        assert rate(row["ms"]) and 0 < row["traced share"] <= 1
        assert row["matmuls"] >= 1 and row["tasks"] > row["matmuls"]
        assert 0 < row["matmul ms"] < row["ms"] * 10  # profiled: slower than the timed call
    rows = table(capsys.readouterr().out, "| workload | call | ms per step |")
    assert [r.split(" | ")[:2] for r in rows] == [
        ["| treelstm", "fit"], ["| treelstm", "predict"], ["| bilstm", "fit"],
        ["| bilstm", "predict"]]


def test_breakdown_profiles_whole_calls_of_the_char_tagger(capsys):
    out = breakdown.main(["--profile-calls", "--workloads", "chartagger", "--batch-sizes", "2",
                          "--trees", "2", "--rounds", "1"])
    assert sorted(out[2]) == [("chartagger", "fit"), ("chartagger", "predict")]
    assert all(rate(row["ms"]) and row["matmuls"] >= 1 for row in out[2].values())

