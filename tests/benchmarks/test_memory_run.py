"""`benchmarks.memory` runs at tiny sizes and prints the table BENCHMARKS.md quotes.

Structure only: how much memory grows is measured by running the benchmark."""

from __future__ import annotations

import pytest

from benchmarks import memory
from tests.benchmarks.tables import table


def test_memory_prints_one_row_per_sample_and_the_growth(capsys):
    results = memory.main(["--calls", "20", "--warm-up", "2", "--cases", "predict"])
    assert [r["case"] for r in results] == ["predict"]
    rows = table(capsys.readouterr().out, "| calls after warm-up | predict RSS MB |")
    calls = [int(r.split(" | ")[0][2:]) for r in rows[:-4]]
    assert calls == list(range(21))  # a sample every 20th of the calls, and one at the end
    assert [r.split(" | ")[0][2:] for r in rows[-4:]] == [
        "MB per 1,000 calls, 2nd half: RSS floor",
        "MB per 1,000 calls, 2nd half: least squares",
        "Python objects per 1,000 calls (2nd half)", "ms per call"]
    assert all(len(r.split(" | ")) == 2 for r in rows)
    assert all(s["rss_mb"] > 0 and s["objects"] > 0 for r in results for s in r["samples"])


@pytest.mark.parametrize("case", [c for c in memory.CASES if c != "predict"])
def test_memory_child_runs_each_other_case(case):
    # in this process (no TensorFlow start-up per case); predict ran in a subprocess above
    out = memory.child(case, "quickstart", calls=3, warm_up=1)
    assert [s["calls"] for s in out["samples"]] == [0, 1, 2, 3]
    assert out["ms_per_call"] > 0


def test_growth_is_the_slope_over_the_second_half():
    samples = [{"calls": c, "rss_mb": 100.0 + (0.0 if c < 500 else 0.002 * (c - 500))}
               for c in range(0, 1001, 100)]
    assert memory.slope_per_1000(samples) == pytest.approx(2.0)
    flat = [{"calls": c, "rss_mb": 50.0 + (c < 300) * c} for c in range(0, 1001, 100)]
    assert memory.slope_per_1000(flat) == pytest.approx(0.0, abs=1e-9)


def test_floor_growth_ignores_the_saw_of_the_allocator():
    saw = [{"calls": c, "rss_mb": 100.0 + 6.0 * (c // 100 % 2) + 0.001 * c}
           for c in range(0, 2001, 100)]
    assert memory.floor_per_1000(saw) == pytest.approx(1.0, abs=0.25)  # within a sample
    flat_saw = [{**s, "rss_mb": s["rss_mb"] - 0.001 * s["calls"]} for s in saw]
    assert memory.floor_per_1000(flat_saw) == pytest.approx(0.0)
