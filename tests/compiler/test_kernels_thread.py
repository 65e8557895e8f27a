"""With `REFOLD_WARM_KERNELS=1`, importing the compiler loads or compiles the planning
kernels on a thread of its own, and says so once when they compile: a new install's
first `fit` finds them ready. Off by default."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from refold.compiler import kernels as warm_kernels

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

AFTER_IMPORT = textwrap.dedent("""
    import refold
    from refold.compiler import kernels as warm_kernels
    from refold.compiler import Compiler
    from refold.compiler.kernels import compilations
    from tests.compiler import factories
    print("thread:", warm_kernels.start() is not None)
    warm_kernels.wait()   # what a fit started later finds: no kernel left to compile
    trees = [(1.0, (2.0, -3.0)), 0.5]
    with compilations() as compiled:
        for scheduler in ("agenda", "depth"):
            Compiler.create(factories.tree_sign(), scheduler=scheduler).plan(trees)
            Compiler.create(factories.labelled_tree_sign(), scheduler=scheduler).plan(
                [{"l": {"x": 1.0, "y": 1}, "r": {"x": -2.0, "y": 0}, "y": 0}], grouped=True)
    print("compiled:", compiled)
""")


def run(cache: str, **env: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "NUMBA_CACHE_DIR": cache, "PYTHONPATH": ROOT,
           "TF_CPP_MIN_LOG_LEVEL": "3", **env}
    out = subprocess.run([sys.executable, "-c", AFTER_IMPORT], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> str:
    """An empty Numba cache (a new install's), filled by the first test."""
    return str(tmp_path_factory.mktemp("numba-cache"))


def test_a_new_install_compiles_the_kernels_after_import_and_says_so_once(cache):
    cold = run(cache, REFOLD_WARM_KERNELS="1")   # an empty cache: a new install
    assert cold.stdout.split("\n")[:2] == ["thread: True", "compiled: []"], cold.stdout
    assert cold.stderr.count(warm_kernels.MESSAGE) == 1, cold.stderr[-3000:]
    warm = run(cache, REFOLD_WARM_KERNELS="1")   # the next process loads them: no message
    assert warm.stdout.split("\n")[:2] == ["thread: True", "compiled: []"], warm.stdout
    assert warm_kernels.MESSAGE not in warm.stderr


def test_the_thread_is_off_by_default(cache, monkeypatch):
    monkeypatch.delenv("REFOLD_WARM_KERNELS", raising=False)
    off = run(cache)
    assert off.stdout.startswith("thread: False"), off.stdout


def test_a_fork_waits_for_the_thread(monkeypatch):
    """A child forked while the kernels compile could not compile: the fork waits."""
    done = threading.Event()
    thread = threading.Thread(target=lambda: (time.sleep(0.5), done.set()))
    monkeypatch.setattr(warm_kernels, "_thread", thread)
    thread.start()
    pid = os.fork()
    if pid == 0:   # the child
        os._exit(0)
    os.waitpid(pid, 0)
    assert done.is_set()   # the parent joined the thread before it forked
