"""`benchmarks.serving` runs at tiny sizes and prints the table BENCHMARKS.md quotes.

Structure only: the speeds are measured by running the benchmark."""

from __future__ import annotations

from benchmarks import serving
from tests.serving.exports import export_calculator


def test_serving_prints_one_row_per_setting(tmp_path, capsys):
    export_calculator(tmp_path / "calc")
    runs = serving.main(["--export", str(tmp_path / "calc"), "--clients", "1,3",
                         "--requests", "6", "--rounds", "1", "--max-wait", "0.05"])
    assert list(runs) == ["alone", (1, 0.05), (3, 0.05)]
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| ") and "---" not in line]
    assert [r.split(" | ")[0] for r in rows] == [
        "| setting", "| one at a time", "| 1 clients, batched, max_wait 50 ms",
        "| 3 clients, batched, max_wait 50 ms"]
    assert all(len(r.split(" | ")) == 6 for r in rows)
    assert max(b for *_, b in runs[3, 0.05]) > 1  # three concurrent clients shared batches


def test_the_check_cost_compares_checked_and_unchecked_exports(capsys):
    ratios = serving.main(["--check-cost", "--pairs", "3"])
    assert sorted(ratios) == [1, 64] and all(r > 0 for r in ratios.values())
    assert capsys.readouterr().out.count("median ratio") == 2
