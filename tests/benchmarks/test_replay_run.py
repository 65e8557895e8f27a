"""`python -m benchmarks.ablations --only replay` runs, at a tiny size, and prints its table."""

from __future__ import annotations

import math

from benchmarks import ablations


def test_replay_ablation_times_every_variant_and_prints_their_ratios(capsys):
    out = ablations.fit_replay([1], 1, instances=1, items=2, workloads=("TreeLSTM",))
    assert sorted(out) == [("TreeLSTM", 1)]
    names = list(ablations.REPLAY_VARIANTS)
    for row in out.values():
        assert sorted(row) == sorted(names + [f"{v} / replayed" for v in names[1:]])
        assert all(isinstance(x, float) and math.isfinite(x) and x > 0 for x in row.values())
    lines = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| workload | B |"))
    assert lines[header].count("|") == 2 * len(names) + 2
    assert lines[header + 2].startswith("| TreeLSTM | 1 | ")


def test_replay_ablation_times_the_char_tagger_by_cpu_time(capsys):
    out = ablations.fit_replay([1], 1, instances=1, items=2, workloads=("char tagger",),
                               cpu_time=True)
    assert sorted(out) == [("char tagger", 1)]
    assert all(math.isfinite(x) and x > 0 for x in out[("char tagger", 1)].values())
    assert "CPU ms per item" in capsys.readouterr().out
