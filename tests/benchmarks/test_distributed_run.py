"""`benchmarks.distributed` runs at a tiny size, and its three models (one device, 1 and
2 replicas) train to the same weights. It splits the CPU into logical devices before
TensorFlow starts, so it runs in a fresh process. Never a timing."""

from __future__ import annotations

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_distributed_benchmark_runs_and_its_models_agree():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-m", "benchmarks.distributed", "--trees", "12",
                          "--batch", "4", "--rounds", "1"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    for row in ("one device", "1 replica", "2 replicas", "planning, 4 workers (s)"):
        assert row in out.stdout, out.stdout
    diff = float(re.search(r"weights\(2 replicas\)\|: (\S+)", out.stdout).group(1))
    assert diff < 1e-4, out.stdout
