"""The benchmarks that time this checkout against another, in worker processes
(`benchmarks.worker_cpu`, `benchmarks.warm_start`, `benchmarks.dropout`), run against this
checkout itself.

Structure and the code's own properties at tiny sizes, never a timing: speed is measured
by running the benchmarks (BENCHMARKS.md).
"""

from __future__ import annotations

import math

from benchmarks import warm_start, worker_cpu
from tests.benchmarks.tables import rate, table


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


def test_dropout_compares_a_checkout_with_itself_and_the_cost_of_dropout(capsys):
    # an A/A run against this very checkout (two worker processes), tiny calls
    from benchmarks import dropout
    out = dropout.main(["--base", dropout.HERE, "--batch-sizes", "2", "--items", "2",
                        "--rounds", "1"])
    assert sorted(out["base"]) == ["TreeLSTM 2", "tagger 2"]
    assert all(rate(v["this"]) and rate(v["base"]) for v in out["base"].values())
    assert sorted(out["cost"]) == [f"{w} 2 {c}" for w in ("TreeLSTM", "tagger")
                                   for c in ("fit", "predict")]
    text = capsys.readouterr().out
    assert len(table(text, "| workload | B | this | base |")) == 2
    assert len(table(text, "| workload | B | call | without | with |")) == 4

