"""`python -m refold.compiler.warmup` fills Numba's on-disk cache so that a later process
plans any model without compiling a kernel."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

AFTER = textwrap.dedent("""
    import numpy as np
    from refold.compiler import Compiler
    from refold.compiler.kernels import compilations
    from tests.compiler import factories
    trees = [(1.0, (2.0, -3.0)), 0.5]
    with compilations() as compiled:
        for scheduler in ("agenda", "depth"):
            Compiler.create(factories.tree_sign(), scheduler=scheduler).plan(trees)
            Compiler.create(factories.labelled_tree_sign(), scheduler=scheduler).plan(
                [{"l": {"x": 1.0, "y": 1}, "r": {"x": -2.0, "y": 0}, "y": 0}], grouped=True)
    print("compiled:", compiled)
""")


def test_after_the_warm_up_a_fresh_process_plans_other_models_without_compiling(tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path), "PYTHONPATH": root,
           "TF_CPP_MIN_LOG_LEVEL": "3", "REFOLD_WARM_KERNELS": "0"}  # the command compiles

    def run(*args) -> str:
        out = subprocess.run([sys.executable, *args], cwd=root, env=env, capture_output=True,
                             text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-3000:]
        return out.stdout
    warm = run("-m", "refold.compiler.warmup")
    assert "kernels compiled and written to the cache" in warm
    assert int(warm.split(": ")[1].split()[0]) > 0  # the cache was empty: it compiled
    assert run("-c", AFTER).strip().splitlines()[-1] == "compiled: []"
