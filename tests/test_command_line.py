"""Every `python -m` entry point answers `--help` with its usage, without doing its work.

The entry points are found in the source (a module with a `__main__` guard, a package
with a `__main__.py`), so a new one is checked without being listed. They all run in one
fresh process (TensorFlow imported once), each through `runpy` as `python -m` runs it;
`--help` must end it with `SystemExit(0)` after printing a usage line: a module that
ignores its arguments runs to its end instead, and fails here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAYERS = ("blocks", "compiler", "scheduler", "models", "serving", "examples")
GUARD = 'if __name__ == "__main__":'


def entry_points() -> list[str]:
    """Module names `python -m` runs: `refold.<layer>...` for the library, `benchmarks...`."""
    found = []
    for top in (*LAYERS, "benchmarks"):
        for folder, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs[:] = sorted(d for d in dirs if d not in ("__pycache__", "data", "fixtures"))
            rel = os.path.relpath(folder, ROOT).split(os.sep)
            package = ".".join(["refold", *rel] if top != "benchmarks" else rel)
            for name in sorted(files):
                if not name.endswith(".py"):
                    continue
                with open(os.path.join(folder, name), encoding="utf-8") as f:
                    source = f.read()
                if name == "__main__.py":
                    found.append(package)
                elif GUARD in source:
                    found.append(f"{package}.{name[:-3]}")
    return found


RUN_ALL = textwrap.dedent("""
    import contextlib, io, json, runpy, sys
    results = {}
    for module in sys.argv[1:]:
        sys.argv = [module, "--help"]
        out = io.StringIO()
        code = "returned without exiting"
        try:
            with contextlib.redirect_stdout(out):
                runpy.run_module(module, run_name="__main__", alter_sys=True)
        except SystemExit as e:
            code = e.code
        except BaseException as e:
            code = f"{type(e).__name__}: {e}"[:300]
        results[module] = [code, out.getvalue()[:2000]]
    print("RESULTS" + json.dumps(results))
""")


def test_the_entry_points_are_found():
    found = entry_points()
    for module in ("refold.compiler.warmup", "refold.examples.sentiment",
                   "refold.examples.parser", "refold.examples.quickstart",
                   "benchmarks.peers", "benchmarks.treelstm", "benchmarks.census"):
        assert module in found
    assert len(found) >= 30


def test_every_entry_point_answers_help_without_doing_its_work():
    modules = entry_points()
    run = subprocess.run([sys.executable, "-c", RUN_ALL, *modules], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads(run.stdout.split("RESULTS", 1)[1])
    assert sorted(results) == sorted(modules)
    wrong = {m: code for m, (code, out) in results.items() if code != 0 or "usage:" not in out}
    assert not wrong, wrong
    usage = results["refold.compiler.warmup"][1]
    assert usage.startswith("usage: python -m refold.compiler.warmup")
