"""`benchmarks.expansion_cache` runs and reports a ratio and the per-input costs."""

import math

from benchmarks import expansion_cache


def test_the_cache_check_benchmark_runs_on_both_workloads(capsys):
    out = expansion_cache.main(["--inputs", "8", "--rounds", "1", "--batch-sizes", "4"])
    assert sorted(out) == ["bilstm", "treelstm"]
    for row in out.values():
        assert all(math.isfinite(v) and v > 0 for v in row.values())
        assert row["fingerprint us/input"] < row["expand us/input"]
    assert "| treelstm | " in capsys.readouterr().out
