"""`benchmarks.before_after` runs each side on its own tree's code, including a commit
from before the `refold` namespace, whose layers are imported by their folders' names."""

import os
import subprocess

import pytest

from benchmarks import before_after

OLD_LAYOUT = "14cf31e"  # the last commits before `refold` were imported as folders


def test_the_layout_is_read_from_the_tree(tmp_path):
    assert before_after.layout(before_after.ROOT) == "refold."
    (tmp_path / "compiler").mkdir()
    assert before_after.layout(str(tmp_path)) == ""


def test_modules_from_outside_a_tree_are_named():
    import refold.compiler  # noqa: F401  (imported from this tree)
    assert before_after.foreign_modules(before_after.ROOT) == []
    assert "refold.compiler" in before_after.foreign_modules(os.path.join(os.sep, "elsewhere"))


def _has(commit: str) -> bool:
    return subprocess.run(["git", "cat-file", "-e", commit], cwd=before_after.ROOT,
                          capture_output=True).returncode == 0


def test_first_passes_of_a_commit_from_before_the_namespace_run_against_this_tree(capsys):
    """One real run covers both: the old commit's layers are imported by their folders'
    names, and with `--first` every timed pass is the first request of a new worker
    (the order of workers is `test_first_passes_start_one_untimed_worker...`'s). A
    shallow clone without the old commit compares HEAD with itself."""
    base = OLD_LAYOUT if _has(OLD_LAYOUT) else "HEAD"
    rows = before_after.main(["--base", base, "--workloads", "usertree", "--first",
                              "--batch-sizes", "2", "--rounds", "1", "--items", "4",
                              "--modes", "infer"])
    assert list(rows) == [("usertree", "infer", 2)]
    row = rows[("usertree", "infer", 2)]
    assert row["before"] > 0 and row["after"] > 0
    assert all(v > 0 for v in (*row["ratio"], *row["cpu ratio"]))
    out = capsys.readouterr().out
    assert f"before: {base}" in out and "| usertree | infer | 2 |" in out


def test_first_passes_start_one_untimed_worker_and_one_per_round(monkeypatch):
    started = []

    class Side:
        def __init__(self, name):
            started.append(name)
            self.requests = 0

        def run(self, request):
            self.requests += 1
            assert self.requests == 1, "a fresh worker answers one request"
            return {"seconds": 1.0 + len(started), "cpu": 1.0}

        def close(self):
            pass

    monkeypatch.setattr(before_after, "_worker", lambda name, *_: Side(name))
    row = before_after._first_passes({"before": "b", "after": "a"}, [],
                                     {"workload": "treelstm", "items": 4}, rounds=2)
    assert started == ["before", "after"] * 3
    # the n-th worker answers in n + 1 s: timed before 4 and 6 s, after 5 and 7 s
    assert row["before"] == pytest.approx((4 / 4 + 4 / 6) / 2)
    assert row["ratio"][1:] == pytest.approx((4 / 5, 6 / 7))
