"""Test-wide settings: quiet TensorFlow, cheaper XLA compilations, deterministic hypothesis
profiles, and a garbage collector that does not rescan what earlier test files left alive."""

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

