"""`import refold` sets TensorFlow's intra-op threads on a small machine, and only
where the user has not chosen (`refold.threads`). Each case runs in a fresh process:
TensorFlow fixes its thread pools when it starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from refold.threads import ENV, SMALL, intra_op_threads

# prints [intra-op threads as TensorFlow will start, what `import refold`'s rule gives]
CHILD = """
import json, sys
import tensorflow as tf
if sys.argv[1] == "user":
    tf.config.threading.set_intra_op_parallelism_threads(3)
elif sys.argv[1] == "started":
    tf.constant(1.0) + 1.0   # TensorFlow starts, its pools fixed
import refold
from refold.threads import intra_op_threads
print(json.dumps([tf.config.threading.get_intra_op_parallelism_threads(),
                  intra_op_threads()]))
"""


def _child(case: str, env_value: str | None = None) -> list:
    env = {k: v for k, v in os.environ.items() if k != ENV}
    if env_value is not None:
        env[ENV] = env_value
    out = subprocess.run([sys.executable, "-c", CHILD, case], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_one_thread_on_a_small_machine_and_the_default_on_a_larger_one():
    assert intra_op_threads(cpus=1, environ={}) == 1
    assert intra_op_threads(cpus=SMALL, environ={}) == 1
    assert intra_op_threads(cpus=SMALL + 1, environ={}) is None


def test_the_environment_variable_overrides_the_rule():
    assert intra_op_threads(cpus=1, environ={ENV: "0"}) is None  # TensorFlow's default
    assert intra_op_threads(cpus=64, environ={ENV: "2"}) == 2
    assert intra_op_threads(cpus=64, environ={ENV: " 1 "}) == 1
    for bad in ("two", "-1", "1.5"):
        with pytest.raises(ValueError, match=f"{ENV} must be a number of threads.*{bad!r}"):
            intra_op_threads(cpus=1, environ={ENV: bad})


def test_import_refold_sets_the_rule_s_threads_before_tensorflow_starts():
    threads, rule = _child("plain")
    assert threads == (rule or 0)  # this machine's rule (0: TensorFlow's default)
    assert _child("plain", env_value="1") == [1, 1]
    assert _child("plain", env_value="0") == [0, None]


def test_the_user_s_threads_and_a_started_tensorflow_are_left_alone():
    assert _child("user", env_value="1")[0] == 3
    assert _child("started", env_value="1")[0] == 0  # no error, TensorFlow's pools kept
