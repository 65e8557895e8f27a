"""`benchmarks.distributed_streams` runs at a tiny size and reports what the guide's
scaling model takes; its model's arithmetic. Never a timing."""

from __future__ import annotations

import math

import pytest

from benchmarks import distributed_streams
from benchmarks.distributed_streams import PER_REPLICA, WORKERS, scaling_model


def test_the_benchmark_measures_each_workers_shard_and_the_gradients(capsys):
    result = distributed_streams.main(["--items", "128", "--rounds", "1"])
    out = capsys.readouterr().out
    for name in ("TreeLSTM", "tagger"):
        r = result[name]
        assert f"\n{name}: 128 lines" in out
        for w in WORKERS:  # worker 0's shard: its part of every global batch
            m = r["input"][w]
            assert m["steps"] == math.ceil(128 / (PER_REPLICA * w))
            assert m["inputs"] == sum(max(0, min(PER_REPLICA, 128 - s * PER_REPLICA * w))
                                      for s in range(int(m["steps"])))
            assert all(m[k] > 0 for k in ("scan", "parse", "plan"))
        g = r["gradients"]
        # the embedding's gradient is rows (IndexedSlices); the rest is dense
        assert g["sparse"] > 0 and g["dense"] + g["sparse as dense"] == g["weights"]
        assert g["sparse as dense"] == {"TreeLSTM": 16_000 * 300, "tagger": 16_000 * 128}[
            name] * 4
        assert r["fit step"] > 0 and len(r["model"]["rows"]) == 2 * 5
        assert r["model"]["reading-bound from"] > 1
    assert "| link | workers | comm ms |" in out


def test_the_scaling_model():
    fast = (1e15, 0.0)
    one = scaling_model(1, 0.05, 0.01, 0.2, 1e6, 1e6, (1e9, 1e-4))
    assert one["comm"] == 0 and one["processes"] == 4 and one["bound"] == "compute"
    assert one["inputs/s"] == pytest.approx(PER_REPLICA / 0.05)
    # ring all-reduce of 8 MB dense and all-gather of 7 x 1 MB rows over 1 GB/s
    eight = scaling_model(8, 0.05, 0.01, 0.01, 8e6, 1e6, (1e9, 0.0))
    assert eight["comm"] == pytest.approx(2 * 7 / 8 * 8e-3 + 7 * 1e-3)
    assert eight["bound"] == "compute"
    assert scaling_model(64, 0.05, 0.01, 0.01, 8e6, 1e6, (1e9, 0.0))["bound"] == "network"
    assert scaling_model(8, 0.05, 0.2, 0.01, 8e6, 1e6, fast)["bound"] == "reading"
    assert scaling_model(8, 0.05, 0.01, 0.01, 8e6, 1e6, fast)["inputs/s"] == \
        pytest.approx(8 * PER_REPLICA / 0.05)
