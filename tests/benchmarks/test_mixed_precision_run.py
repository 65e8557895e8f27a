"""`benchmarks.mixed_precision` runs at a tiny size and reports what BENCHMARKS.md quotes
(never a timing: the properties that are the code's)."""

from __future__ import annotations

import math

import keras

from benchmarks import mixed_precision


def test_every_policy_trains_and_the_low_dtypes_halve_the_loop_buffers(capsys):
    before = keras.mixed_precision.global_policy().name
    out = mixed_precision.main(["--trees", "8", "--batch", "4", "--rounds", "1"])
    assert keras.mixed_precision.global_policy().name == before  # restored
    assert list(out) == ["float32", "mixed_bfloat16", "mixed_float16"]
    for r in out.values():
        assert math.isfinite(r["trees_per_s"]) and r["trees_per_s"] > 0
        assert math.isfinite(r["last_loss"])
    full = out["float32"]["loop_buffer_bytes"]
    assert full > 0
    assert out["mixed_bfloat16"]["loop_buffer_bytes"] * 2 == full
    assert out["mixed_float16"]["loop_buffer_bytes"] * 2 == full
    assert "mixed_float16" in capsys.readouterr().out
