"""A new install's planning kernels, compiled in a background process: `start`,
`compiling`, `wait`.

Numba compiles the scheduler's planning kernels on first use and caches them on disk;
a wheel cannot carry that cache (it is specific to the CPU). On a new install the
compilation took about 10 s of CPU inside the first `fit`. So `import refold`, while
this installation's kernels are not known to be cached, starts a Python process that
compiles them into Numba's cache (`refold.compiler.kernels.compile_all`), at a lower
priority (`os.nice`), while this one imports TensorFlow, builds its model and fits;
until that process is done (`compiling`), this one runs the kernels as plain Python
(`refold.kernel_calls`), then loads the compiled ones from the cache. A
process of its own rather than a thread: the two compile and import on two cores
rather than sharing one interpreter lock, and nothing compiles in the user's process
(a thread compiling there once made the suite's doctests lose their output, cause not
found).

That process imports Numba and the kernels' modules only (not TensorFlow), holds a
lock file while it compiles (a process importing Refold meanwhile starts none and
runs plain Python until the lock is released), and leaves a stamp when it is done:
later imports cost one `os.path.exists`. The stamp is per installation, Python,
Numba, Numba cache directory and machine. `REFOLD_WARM_KERNELS=0` in the environment
starts nothing (the first plan then compiles the kernels, saying so); POSIX only
(`fcntl`).

>>> wait()          # returns once no background compilation is under way
>>> compiling()     # so none is
False
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys
import time

try:
    import fcntl
except ImportError:  # Windows: no background compilation
    fcntl = None

ENV = "REFOLD_WARM_KERNELS"

MESSAGE = ("refold: compiling the planner's Numba kernels in a background process, once per "
           "installation (later processes load them from Numba's cache); until they are "
           "ready the first batches plan in plain Python")

# The process that compiles: `refold` as a bare namespace over the installed package's
# folders, so that importing the kernels' modules runs no `refold/__init__.py` (which
# imports Keras and TensorFlow); argv: the package's folders, the stamp to write, how
# much to lower its priority (`NICE`).
_CHILD = """
import os, sys, time, types
start = time.perf_counter()
try:  # behind the user's process (its import of TensorFlow, its first epoch)
    os.nice(int(sys.argv[3]))
except OSError:
    pass
package = types.ModuleType("refold")
package.__path__ = sys.argv[1].split(os.pathsep)
sys.modules["refold"] = package
try:  # the stamp either way: a failure is not retried by every import (the first plan
    from refold.compiler.kernels import compile_all  # then compiles, as without this)
    # a core to spare (Linux): a forked process compiles half the kernels (none compiled
    # yet); on a busy machine the halves' duplicated work (1 s of CPU) would cost time
    two = sys.platform.startswith("linux") and \
        os.getloadavg()[0] + 1 < len(os.sched_getaffinity(0))
    pid = os.fork() if two else -1
    if pid == 0:
        try:
            compile_all(1)
        finally:
            os._exit(0)
    compile_all(None if pid < 0 else 0)
    if pid > 0:
        os.waitpid(pid, 0)
    cpu = os.times()
    done = (f"compiled in {time.perf_counter() - start:.1f} s, "
            f"{cpu.user + cpu.system + cpu.children_user + cpu.children_system:.1f} s of CPU")
except BaseException as e:
    done = repr(e)
with open(sys.argv[2], "w") as f:
    f.write(f"{done} (at nice {os.nice(0)})\\n")
"""

# The background process's priority below the user's (`os.nice`): it takes most of the
# cores the user's process leaves. It stays in the user's session (a process group of
# its own, so that Ctrl-C in a terminal does not stop it): where the kernel groups
# processes by session (Linux's autogroup, the desktop default), a new session's group
# would get as much CPU as the user's whatever its nice value, which left the user's
# process one core of two while it compiled (BENCHMARKS.md, "Streams and the first fit").
NICE = 5
# (Python 3.10's `Popen` has no `process_group`: a session of its own there.)
_OWN_GROUP = {"process_group": 0} if sys.version_info >= (3, 11) else {"start_new_session": True}

_child: subprocess.Popen | None = None


def paths() -> tuple[str, str] | None:
    """This installation's `(stamp, lock)` files, in `$XDG_CACHE_HOME/refold` (or
    `~/.cache/refold`); None where that folder cannot be made."""
    here = os.path.dirname(os.path.abspath(__file__))
    numba = importlib.util.find_spec("numba")
    key = [here, sys.version, os.environ.get("NUMBA_CACHE_DIR", ""), os.uname().nodename]
    for f in (os.path.join(here, "__init__.py"), os.path.join(here, "version.py"),
              numba.origin if numba is not None and numba.origin else ""):
        try:
            key.append(f"{f}:{os.stat(f).st_mtime_ns}")
        except OSError:
            key.append(f)
    digest = hashlib.sha1("\n".join(key).encode()).hexdigest()[:16]
    folder = os.path.join(os.environ.get("XDG_CACHE_HOME") or
                          os.path.join(os.path.expanduser("~"), ".cache"), "refold")
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:
        return None
    base = os.path.join(folder, f"kernels-{digest}")
    return base + ".ready", base + ".lock"


def start(package_path: list[str]) -> subprocess.Popen | None:
    """Starts the process that compiles the kernels into Numba's cache, unless they are
    known to be there, another process is compiling them, or `REFOLD_WARM_KERNELS=0`;
    the process or None. `package_path`: `refold.__path__`."""
    global _child
    if fcntl is None or os.environ.get(ENV, "1") == "0" or _child is not None:
        return None
    where = paths()
    if where is None or os.path.exists(where[0]):
        return None
    stamp, lock = where
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # another process is compiling them: `wait` waits for it
        os.close(fd)
        return None
    try:  # the child holds the lock (its inherited descriptor) until it exits
        _child = subprocess.Popen(
            [sys.executable, "-c", _CHILD, os.pathsep.join(package_path), stamp, str(NICE)],
            pass_fds=(fd,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, env={**os.environ, ENV: "0"}, **_OWN_GROUP)
    except OSError:
        return None
    finally:
        os.close(fd)
    import logging
    logging.getLogger("refold").warning(MESSAGE)
    return _child


def mark_ready() -> None:
    """Leaves the stamp that says this installation's kernels are cached
    (`python -m refold.compiler.warmup` does, after compiling them)."""
    where = paths()
    if where is not None:
        with open(where[0], "w") as f:
            f.write("compiled\n")


def compiling() -> bool:
    """Whether a process is compiling this installation's kernels now: the one `start`
    started here (one `waitpid`), or another's (no stamp, its lock held)."""
    if _child is not None:
        return _child.poll() is None
    if fcntl is None or os.environ.get(ENV, "1") == "0":  # the compiling process's own
        return False
    where = paths()
    if where is None or os.path.exists(where[0]):
        return False
    try:
        fd = os.open(where[1], os.O_RDONLY)
    except OSError:  # no lock file: nobody started compiling
        return False
    try:  # the compiling process holds the lock until it exits
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


def wait(timeout: float = 600.0) -> None:
    """Returns when no process is compiling this installation's kernels (at once if
    none is; `compiling`), or after `timeout` seconds (a stuck process). A process that
    forks workers that plan waits so (`refold.compiler.kernels.load`)."""
    if _child is not None:
        try:
            _child.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        return
    deadline = time.monotonic() + timeout
    while compiling() and time.monotonic() < deadline:
        time.sleep(0.05)
