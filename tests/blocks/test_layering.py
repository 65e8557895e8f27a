"""The block language stands alone: `blocks` imports nothing of `compiler` or `scheduler`.

Each check runs in a fresh interpreter, since this test process has imported everything.
`import tensorflow` imports Keras, and Keras imports its model and trainer code on
`import keras` (keras 3.15), so after a block computes, only Refold's own engine
packages can be asserted absent; before, neither TensorFlow nor Keras is loaded.
"""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ENGINE = ("compiler", "scheduler")


def loaded_after(code: str) -> set[str]:
    """The top-level and `keras.src.*` modules loaded after running `code` afresh."""
    script = code + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))\n"
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "3"}
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def engine_modules(loaded: set[str]) -> list[str]:
    return sorted(m for m in loaded if m.split(".")[0] in ENGINE)


def test_importing_blocks_loads_no_engine_tensorflow_or_keras():
    loaded = loaded_after("import blocks")
    assert "blocks" in loaded
    assert engine_modules(loaded) == []
    assert not {"tensorflow", "keras"} & loaded


def test_building_and_evaluating_blocks_with_a_layer_loads_no_engine():
    loaded = loaded_after(
        "import tensorflow as tf\n"
        "import blocks as td\n"
        "block = td.Scalar() >> td.Function(lambda x: x[:, None]) >> td.FC(3)\n"
        "block = block >> td.Function(tf.negative)\n"
        "assert block.eval(2.0).shape == (3,)\n"
        "assert td.Map(td.Scalar()).max_depth([1.0]) == 0\n")
    assert "blocks.layers" in loaded
    assert engine_modules(loaded) == []
