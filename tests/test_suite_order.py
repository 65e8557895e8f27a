"""The suite hands its longest files to the workers first (conftest.py, `tests/durations.json`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import conftest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_table_names_only_files_that_exist():
    with open(conftest.DURATIONS) as f:
        seconds = json.load(f)
    missing = [name for name in seconds if not os.path.isfile(os.path.join(ROOT, name))]
    assert not missing, f"re-record tests/durations.json (conftest.py says how): {missing}"


def test_files_are_ordered_longest_first_and_keep_their_tests_together(monkeypatch):
    monkeypatch.setattr(conftest, "_file_seconds", lambda _: {"b.py": 9.0, "c.py": 3.0})
    items = [SimpleNamespace(nodeid=n) for n in
             ("a.py::x", "a.py::y", "b.py::x", "c.py::x", "b.py::y", "d.py::x")]
    conftest.pytest_collection_modifyitems(None, items)
    assert [i.nodeid for i in items] == ["b.py::x", "b.py::y", "c.py::x", "a.py::x",
                                         "a.py::y", "d.py::x"]


def test_a_run_records_each_file_s_seconds(tmp_path):
    path = tmp_path / "durations.json"
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:xdist",
                          "tests/test_compat.py", "--record-durations", str(path)],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:]
    seconds = json.loads(path.read_text())
    assert list(seconds) == ["tests/test_compat.py"] and seconds["tests/test_compat.py"] > 0
