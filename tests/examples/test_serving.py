"""The serving example: trains, exports, and serves from a fresh process (tiny run)."""

from __future__ import annotations

import numpy as np

from refold.examples.serving import __main__ as serving_main


def test_the_example_trains_exports_and_serves_in_a_fresh_process(tmp_path, capsys):
    report = serving_main.main(["--train-size", "40", "--epochs", "1", "--state", "8",
                                "--requests", "12", "--clients", "3", "--rounds", "1",
                                "--max-wait", "0.05", "--out", str(tmp_path / "export")])
    assert (tmp_path / "export" / "saved_model.pb").exists()
    assert np.asarray(report["answers"]).shape == (12, 3)
    assert report["alone_throughput"] > 0 and report["batched_throughput"] > 0
    assert report["mean_batch"] > 1  # concurrent requests were batched together
    assert 0.0 <= report["accuracy"] <= 1.0
    assert "served accuracy" in capsys.readouterr().out
