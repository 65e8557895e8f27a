"""Test-wide settings: quiet TensorFlow, cheaper XLA compilations, deterministic hypothesis
profiles, a garbage collector that does not rescan what earlier test files left alive, and
the longest test files handed to the workers first."""

import gc
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# XLA's CPU backend compiles without LLVM's expensive optimisation passes: the tests'
# programs (the HLO Refold builds, its buckets and padding) are the same, and each
# compilation takes ~40% less time (tests/compiler/test_xla.py compiles ~20 of them).
# Subprocesses the tests start inherit it. A user's XLA_FLAGS is left alone.
os.environ.setdefault(
    "XLA_FLAGS", "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true")

import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile(
    "refold", deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
settings.load_profile("refold")


@pytest.fixture(autouse=True, scope="module")
def _freeze_what_the_module_left_alive():
    """After each test file: collect its garbage, then freeze what is still alive.

    A worker runs many files, and what their traced TensorFlow graphs leave alive (about
    a million objects after one large file) made every later full collection, automatic
    or a test's `gc.collect()`, take seconds. Frozen objects are never scanned again;
    each file's own objects are collected as before (a file's tests see no change).

    Then checks that nothing imported a layer by its folder's bare name."""
    yield
    gc.collect()
    gc.freeze()
    bare = sorted(m for m in sys.modules if m.split(".")[0] in _FOLDERS)
    for m in bare:  # reported once, by the file that imported them
        del sys.modules[m]
    assert not bare, f"modules imported by their folders' bare names (use refold.*): {bare}"


# The repository's layer folders: in a clone they are importable by these bare names too,
# and a module imported so would be a second copy of `refold.<name>`, with its own classes.
_FOLDERS = {"blocks", "compiler", "scheduler", "models", "serving", "examples"}


# Longest test files first. `pytest -n auto --dist loadfile` hands each worker whole
# files in collection order (once xdist's own order, by number of tests, is switched off
# in `pytest_configure`: it put the one-test files that start processes last, where one
# worker could run them alone). `tests/durations.json` holds each file's seconds
# from a recorded run (`--record-durations tests/durations.json`); a file it does not
# know runs after those it knows. A stale table changes the order only, never a result.
DURATIONS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tests", "durations.json")


def pytest_addoption(parser):
    parser.addoption("--record-durations", metavar="PATH", default=None,
                     help="write each test file's seconds (setup, call, teardown) as JSON")


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist's option
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    seconds = _file_seconds(DURATIONS)
    items.sort(key=lambda item: -seconds.get(item.nodeid.split("::")[0], 0.0))


def _file_seconds(path: str) -> dict:
    import json
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


_recorded: dict = {}


def pytest_runtest_logreport(report):
    file = report.nodeid.split("::")[0]
    _recorded[file] = _recorded.get(file, 0.0) + report.duration


def pytest_sessionfinish(session):
    path = session.config.getoption("--record-durations")
    if path and not hasattr(session.config, "workerinput"):  # the controller writes
        import json
        with open(path, "w") as f:
            json.dump({k: round(v, 1) for k, v in sorted(_recorded.items(),
                                                          key=lambda kv: -kv[1])}, f, indent=0)
            f.write("\n")
