"""A new install compiles the planning kernels in a background process that `import
refold` starts (`refold.kernel_cache`), from their signatures (`compiler.kernels.KERNELS`):
the user's process says so once, and meanwhile plans with the kernels' plain-Python
twins (`refold.kernel_calls`): it neither waits nor compiles, and its plans are the
compiled kernels' plans."""

from __future__ import annotations

import ast
import fcntl
import os
import random
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import tensorflow as tf

import refold as td
from refold import kernel_cache, kernel_calls
from refold.compiler import Compiler, kernels
from refold.kernel_calls import KERNEL
from refold.scheduler import SCHEDULERS
from tests.scheduler.test_kernel_calls import replayed

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Every kernel of KERNELS the compiler calls is called: planning under every scheduler
# with a metric (as kernels.load), an embedding's id check, and expansion in rounds run
# straight-line. The digest: of every array planned and computed.
PLANS = textwrap.dedent("""
    import hashlib, sys
    import refold
    from refold import kernel_cache
    print("started:", kernel_cache._child is not None)
    if sys.argv[1:] == ["stop"]:
        raise SystemExit
    import numpy as np
    import tensorflow as tf
    import refold as td
    from refold.compiler import Compiler, kernels
    from refold.scheduler import SCHEDULERS
    digest = hashlib.sha1()

    def note(arrays):
        for a in arrays:
            if isinstance(a, (np.ndarray, tf.Tensor)):
                a = np.asarray(a)
                digest.update(a.dtype.str.encode() + a.tobytes())

    with kernels.compilations() as compiled:
        trees = [((1.0, (2.0, -1.0)), 0.5), (3.0, -2.0), ((1.0, 2.0), 1.0)]
        for scheduler in SCHEDULERS:
            c = Compiler.create(kernels._block(), scheduler=scheduler, cache=False)
            for grouped in (False, True):
                note(c.plan(trees, grouped=grouped).plan)
        c = Compiler.create(td.Map(td.Scalar("int32") >> td.Embedding(5, 2)) >> td.Sum())
        note(c.plan([[1, 2], [4]]).plan)
        step = td.GetItem(0) >> td.Function(lambda s: s + 1.0) >> td.AllOf(
            td.Identity(), td.Identity())
        count = td.AllOf(td.Scalar() >> td.Function(tf.square), td.Identity()) >> td.Unfold(
            step, decide=lambda c, out: float(out), done=lambda c: c >= 4.0, max_steps=10)
        c = Compiler.create(count)
        note(tf.nest.flatten(c.run([1.0, 2.5])))
        assert c.round_engines.straight_rounds == 1
    print("compiled:", compiled)
    print("digest:", digest.hexdigest())
""")


def run(tmp_path, *args: str, timeout: float = 900, **env: str) -> subprocess.CompletedProcess:
    env = {**{k: v for k, v in os.environ.items() if k != kernel_cache.ENV},
           "NUMBA_CACHE_DIR": str(tmp_path / "numba"), "PYTHONPATH": ROOT,
           "XDG_CACHE_HOME": str(tmp_path / "cache"), "TF_CPP_MIN_LOG_LEVEL": "3", **env}
    out = subprocess.run([sys.executable, "-c", PLANS, *args], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def new_install(tmp_path_factory):
    """A new install's first process (empty caches) and the next one's outputs."""
    tmp_path = tmp_path_factory.mktemp("install")
    return run(tmp_path), run(tmp_path)


def test_a_new_install_compiles_the_kernels_in_the_background_and_says_so_once(new_install):
    cold, warm = new_install
    lines = cold.stdout.splitlines()
    assert lines[:2] == ["started: True", "compiled: []"], cold.stdout
    assert cold.stderr.count(kernel_cache.MESSAGE) == 1, cold.stderr[-3000:]
    assert kernels.MESSAGE not in cold.stderr  # this process compiled nothing
    # the stamp is there: no process, no message, nothing compiled, the same plans
    assert warm.stdout.splitlines() == ["started: False", "compiled: []", lines[2]], warm.stdout
    assert kernel_cache.MESSAGE not in warm.stderr and kernels.MESSAGE not in warm.stderr


def test_while_another_process_compiles_one_plans_in_plain_python(tmp_path, new_install,
                                                                  monkeypatch):
    """The lock held for the whole run (another process compiling): the process starts
    no compilation, waits for none and compiles nothing (Numba's cache is empty: any
    compiled kernel called would compile), and plans as the compiled kernels do."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "numba"))
    stamp, lock = kernel_cache.paths()
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        out = run(tmp_path, timeout=300)
    finally:
        os.close(fd)
    assert out.stdout.splitlines() == ["started: False", "compiled: []",
                                       new_install[1].stdout.splitlines()[2]], out.stdout
    assert kernels.MESSAGE not in out.stderr and not os.path.exists(stamp)


def tree(rng: random.Random, depth: int):
    if depth == 0 or rng.random() < 0.3:
        return round(rng.uniform(-2, 2), 2)
    return (tree(rng, depth - 1), tree(rng, depth - 1))


@pytest.mark.parametrize("seed", range(3))
def test_plain_python_expands_and_plans_as_the_compiled_kernels(seed):
    """Random trees under every scheduler, an embedding's ids (in range and not) and
    rounds run straight-line, in plain Python: every kernel call replayed compiled
    gives the same arrays (`replayed`), and the results are the compiled run's."""
    rng = random.Random(seed)
    trees = [(tree(rng, 4), rng.uniform(-1, 1)) for _ in range(rng.randint(1, 6))]
    ids = [[rng.randrange(5) for _ in range(rng.randint(1, 4))] for _ in range(3)]
    starts = [round(rng.uniform(0.5, 3.0), 1) for _ in range(rng.randint(1, 4))]
    embed = Compiler.create(td.Map(td.Scalar("int32") >> td.Embedding(5, 2)) >> td.Sum())
    count = Compiler.create(td.AllOf(td.Scalar() >> td.Function(tf.square), td.Identity())
                            >> td.Unfold(td.GetItem(0) >> td.Function(lambda s: s + 1.0)
                                         >> td.AllOf(td.Identity(), td.Identity()),
                                         decide=lambda c, out: float(out),
                                         done=lambda c: c >= 4.0, max_steps=10))
    want = count.run(starts, tolist=True)
    every = [getattr(__import__(m, fromlist=["_"]), k) for m, ks in kernels.KERNELS.items()
             for k in ks]
    with replayed(every) as calls:
        for scheduler in SCHEDULERS:
            c = Compiler.create(kernels._block(), scheduler=scheduler, cache=False)
            for grouped in (False, True):
                c.plan(trees, grouped=grouped)
        embed.plan(ids)
        with pytest.raises(td.InputError):
            embed.plan([[1, 5]])
        assert count.run(starts, tolist=True) == want
    # Python calls these only outside the compiler (tests/scheduler/test_kernel_calls.py)
    alone = {"_agenda", "_pack", "_segments"}
    assert set(calls) == {k for ks in kernels.KERNELS.values() for k in ks} - alone


def test_no_background_process_when_switched_off(tmp_path):
    off = run(tmp_path, "stop", **{kernel_cache.ENV: "0"})
    assert off.stdout.splitlines() == ["started: False"]
    assert not os.path.exists(tmp_path / "cache" / "refold") or not any(
        f.endswith(".ready") for f in os.listdir(tmp_path / "cache" / "refold"))


def test_a_process_sees_another_compile_and_starts_none(tmp_path, monkeypatch):
    """The lock held (as by another process's compilation): `start` starts nothing,
    `compiling` says so, and `wait` returns only when it is released (or after its
    timeout); a stamp ends the compiling."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv(kernel_cache.ENV, raising=False)
    monkeypatch.setattr(kernel_cache, "_child", None)
    stamp, lock = kernel_cache.paths()
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        assert kernel_cache.start(["unused"]) is None
        assert kernel_cache._child is None and kernel_cache.compiling()
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
    assert not waiting.is_alive() and not kernel_cache.compiling()
    fd = os.open(lock, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        kernel_cache.mark_ready()
        assert not kernel_cache.compiling()  # a stamp: done, whatever holds the lock
    finally:
        os.close(fd)
    assert os.path.exists(stamp) and kernel_cache.start(["unused"]) is None


def test_the_background_process_runs_at_a_lower_priority_in_this_session(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv(kernel_cache.ENV, raising=False)
    monkeypatch.setattr(kernel_cache, "_child", None)
    child = kernel_cache.start(td.__path__)  # loads the kernels from Numba's cache
    assert child is not None
    # in this session (where sessions are scheduled as groups, its nice value then
    # ranks it below this process), in a process group of its own (no Ctrl-C)
    if sys.version_info >= (3, 11):
        assert os.getsid(child.pid) == os.getsid(0)
    assert os.getpgid(child.pid) == child.pid != os.getpgid(0)
    assert child.wait(300) == 0 and not kernel_cache.compiling()
    with open(kernel_cache.paths()[0]) as f:
        stamp = f.read()
    nice = min(19, os.nice(0) + kernel_cache.NICE)
    assert stamp.endswith(f"(at nice {nice})\n"), stamp


def test_forking_and_compiling_here_wait_for_the_background_process(monkeypatch):
    """`load` (before a pool forks workers that plan) waits for the background process,
    then plans with the compiled kernels: the children must not load them after the
    fork. `compile_all` (the warm-up command) waits before it compiles anything."""
    waited = []
    monkeypatch.setattr(kernel_cache, "wait", lambda timeout=600.0: waited.append(timeout))
    monkeypatch.setattr(kernel_cache, "compiling", lambda: True)  # it never ends
    monkeypatch.setattr(kernel_calls, "_plain", True)
    KERNEL.clear()
    depth = SCHEDULERS["depth"].kernel
    assert KERNEL[depth] is not depth
    kernels.load(Compiler, ["depth"])
    assert waited and not kernel_calls._plain and KERNEL[depth] is depth

    def stop(timeout=600.0):
        raise InterruptedError
    monkeypatch.setattr(kernel_cache, "wait", stop)
    with kernels.compilations() as compiled, pytest.raises(InterruptedError):
        kernels.compile_all()
    assert compiled == []


def test_signatures():
    sig = kernels.signature("i4 i8x2! b1 int bool")
    assert [str(t) for t in sig] == ["array(int32, 1d, C)", "readonly array(int64, 2d, C)",
                                     "array(bool, 1d, C)", "int64", "bool"]


def njit_functions(tree: ast.Module) -> set[str]:
    return {f.name for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and any(
        "njit" in ast.unparse(d) for d in f.decorator_list)}


def modules() -> dict[str, ast.Module]:
    """The scheduler's and the compiler's modules, parsed, by name."""
    out = {}
    for folder in ("scheduler", "compiler"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, folder)):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(dirpath, name)
                    with open(path, encoding="utf-8") as f:
                        module = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                        out["refold." + module] = ast.parse(f.read())
    return out


def outside_kernels(tree: ast.Module, jitted: set[str]) -> list[ast.AST]:
    """The nodes of `tree` that are not inside a kernel's body (Python code's), nor in
    a `@vectorised(kernel)` decorator (which names the kernel a NumPy twin stands
    for: no call)."""
    inside = {id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
              and f.name in jitted for n in ast.walk(f)}
    inside |= {id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
               for d in f.decorator_list if isinstance(d, ast.Call)
               and getattr(d.func, "id", None) == "vectorised" for n in ast.walk(d)}
    return [n for n in ast.walk(tree) if id(n) not in inside]


def test_every_kernel_python_names_has_a_signature():
    """A kernel that Python code names (calls, registers as a scheduler), not only
    other kernels, is in KERNELS, so that the background process compiles it."""
    named: dict[str, set] = {}
    for module, tree in modules().items():
        jitted = njit_functions(tree)
        used = {n.id for n in outside_kernels(tree, jitted)
                if isinstance(n, ast.Name) and n.id in jitted}
        if used:
            named[module] = used
    assert {m: sorted(n) for m, n in named.items()} == {
        m: sorted(n) for m, n in kernels.KERNELS.items()}


def test_python_calls_a_kernel_only_through_KERNEL():
    """Python code calls a kernel (its own module's, one it imports, a scheduler's
    `kernel`) as `KERNEL[kernel](...)`, so that it runs in plain Python while the
    kernels compile (`refold.kernel_calls`); kernels call kernels directly."""
    parsed = modules()
    every = set().union(*map(njit_functions, parsed.values()))
    direct, through = [], 0
    for module, tree in parsed.items():
        for n in outside_kernels(tree, njit_functions(tree)):
            if isinstance(n, ast.Call) and (
                    isinstance(n.func, ast.Name) and n.func.id in every or
                    isinstance(n.func, ast.Attribute) and n.func.attr == "kernel"):
                direct.append(f"{module}: {ast.unparse(n)[:60]}")
            through += isinstance(n, ast.Subscript) and ast.unparse(n.value) == "KERNEL"
    assert direct == [] and through >= 12
