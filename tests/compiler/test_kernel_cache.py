"""A new install compiles the planning kernels in a background process that `import
refold` starts (`refold.kernel_cache`), from their signatures (`compiler.kernels.KERNELS`):
the user's process compiles none of them, waits for that process, and says so once."""

from __future__ import annotations

import ast
import fcntl
import os
import subprocess
import sys
import textwrap
import threading
import time

from refold import kernel_cache
from refold.compiler import kernels

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Every kernel of KERNELS is called: planning under every scheduler with a metric
# (kernels.load), an embedding's id check, and expansion in rounds run straight-line.
PLANS = textwrap.dedent("""
    import sys
    import refold
    from refold import kernel_cache
    print("started:", kernel_cache._child is not None)
    if sys.argv[1:] == ["stop"]:
        raise SystemExit
    import tensorflow as tf
    import refold as td
    from refold.compiler import Compiler, kernels
    with kernels.compilations() as compiled:
        kernels.load(Compiler)
        Compiler.create(td.Map(td.Scalar("int32") >> td.Embedding(5, 2)) >> td.Sum()).plan(
            [[1, 2], [4]])
        step = td.GetItem(0) >> td.Function(lambda s: s + 1.0) >> td.AllOf(
            td.Identity(), td.Identity())
        count = td.AllOf(td.Scalar() >> td.Function(tf.square), td.Identity()) >> td.Unfold(
            step, decide=lambda c, out: float(out), done=lambda c: c >= 4.0, max_steps=10)
        c = Compiler.create(count)
        c.run([1.0, 2.5])
        assert c.round_engines.straight_rounds == 1
    print("compiled:", compiled)
""")


def run(tmp_path, *args: str, **env: str) -> subprocess.CompletedProcess:
    env = {**{k: v for k, v in os.environ.items() if k != kernel_cache.ENV},
           "NUMBA_CACHE_DIR": str(tmp_path / "numba"), "PYTHONPATH": ROOT,
           "XDG_CACHE_HOME": str(tmp_path / "cache"), "TF_CPP_MIN_LOG_LEVEL": "3", **env}
    out = subprocess.run([sys.executable, "-c", PLANS, *args], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def test_a_new_install_compiles_the_kernels_in_the_background_and_says_so_once(tmp_path):
    cold = run(tmp_path)  # empty caches: a new install
    assert cold.stdout.splitlines() == ["started: True", "compiled: []"], cold.stdout
    assert cold.stderr.count(kernel_cache.MESSAGE) == 1, cold.stderr[-3000:]
    assert kernels.MESSAGE not in cold.stderr  # this process compiled nothing
    warm = run(tmp_path)  # the stamp is there: no process, no message, nothing compiled
    assert warm.stdout.splitlines() == ["started: False", "compiled: []"], warm.stdout
    assert kernel_cache.MESSAGE not in warm.stderr and kernels.MESSAGE not in warm.stderr


def test_no_background_process_when_switched_off(tmp_path):
    off = run(tmp_path, "stop", **{kernel_cache.ENV: "0"})
    assert off.stdout.splitlines() == ["started: False"]
    assert not os.path.exists(tmp_path / "cache" / "refold") or not any(
        f.endswith(".ready") for f in os.listdir(tmp_path / "cache" / "refold"))


def test_a_process_waits_while_another_compiles_and_starts_none(tmp_path, monkeypatch):
    """The lock held (as by another process's compilation): `start` starts nothing and
    `wait` returns only when it is released (or after its timeout); a stamp ends the
    waiting."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv(kernel_cache.ENV, raising=False)
    monkeypatch.setattr(kernel_cache, "_child", None)
    stamp, lock = kernel_cache.paths()
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        assert kernel_cache.start(["unused"]) is None
        assert kernel_cache._child is None
        started = time.monotonic()
        kernel_cache.wait(timeout=0.3)  # a stuck compilation is waited for so long only
        assert 0.3 <= time.monotonic() - started < 5
        waiting = threading.Thread(target=kernel_cache.wait)
        waiting.start()
        time.sleep(0.5)
        assert waiting.is_alive()
    finally:
        os.close(fd)  # the compiling process ends
    waiting.join(10)
    assert not waiting.is_alive()
    kernel_cache.mark_ready()
    assert os.path.exists(stamp) and kernel_cache.start(["unused"]) is None


def test_signatures():
    sig = kernels.signature("i4 i8x2! b1 int bool")
    assert [str(t) for t in sig] == ["array(int32, 1d, C)", "readonly array(int64, 2d, C)",
                                     "array(bool, 1d, C)", "int64", "bool"]


def njit_functions(tree: ast.Module) -> set[str]:
    return {f.name for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and any(
        "njit" in ast.unparse(d) for d in f.decorator_list)}


def test_every_kernel_python_names_has_a_signature():
    """A kernel that Python code names (calls, registers as a scheduler), not only
    other kernels, is in KERNELS, so that the background process compiles it."""
    named: dict[str, set] = {}
    for folder in ("scheduler", "compiler"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, folder)):
            for name in files:
                if not name.endswith(".py"):
                    continue
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8") as f:
                    tree = ast.parse(f.read())
                jitted = njit_functions(tree)
                inside = {id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
                          and f.name in jitted for n in ast.walk(f)}
                used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
                        and n.id in jitted and id(n) not in inside}
                if used:
                    module = "refold." + os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                    named[module] = used
    assert {m: sorted(n) for m, n in named.items()} == {
        m: sorted(n) for m, n in kernels.KERNELS.items()}
