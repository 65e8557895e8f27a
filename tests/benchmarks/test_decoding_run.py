"""The decoding benchmark runs at tiny sizes, its variants agreeing on every decision."""

import math

from benchmarks import decoding


def test_decoding_benchmark_runs_every_variant(capsys):
    out = decoding.main(["--batch-sizes", "1,2", "--steps", "3", "--seconds", "0.03"])
    assert sorted(out) == sorted(decoding.VARIANTS)
    assert all(math.isfinite(out[v][b]) and out[v][b] > 0 for v in out for b in (1, 2))
    text = capsys.readouterr().out
    assert "| device ÷ rounds |" in text and "| rounds ÷ eager |" in text
