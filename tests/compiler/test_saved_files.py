"""Saved files outlive code moves: classes are named by registered names, files written
before Refold moved under the `refold` namespace still load, and a fresh process that
ran only `import refold` (the quick start's import) loads a file with Keras' own
`keras.models.load_model` or with `refold.load_model`."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import zipfile

import keras
import numpy as np
import pytest

import refold as td
from refold.blocks.serialization.config import deserialize, registry, serialize
from tests.compiler import saving_jobs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OLD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures",
                   "saved_before_refold_namespace")


def old_cases() -> dict:
    """name -> (inputs, predictions at save time), written with the files (Refold 0.1)."""
    with open(os.path.join(OLD, "cases.pkl"), "rb") as f:
        return pickle.load(f)


def close(a, b) -> None:
    """Equal results of `predict` (arrays, tuples, lists, metrics dicts) up to rounding:
    the files were saved by another TensorFlow version's kernels, maybe."""
    if isinstance(a, dict):
        assert sorted(a) == sorted(b)
        for k in a:
            close(a[k], b[k])
    elif isinstance(a, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            close(x, y)
    elif a is None or isinstance(a, (str, bool)):
        assert a == b
    else:
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def test_the_old_files_name_the_old_top_level_modules():
    with zipfile.ZipFile(os.path.join(OLD, "sentiment_tree_lstm.keras")) as f:
        config = f.read("config.json").decode()
    assert '"blocks.composition:Pipe"' in config and '"models.tree_lstm:' in config
    assert '"module": "compiler.model"' in config and '"version": 1' in config
    assert '"class": "refold>' not in config


@pytest.mark.parametrize("name", sorted(old_cases()))
def test_a_file_saved_before_the_namespace_change_loads_and_predicts_the_same(name):
    xs, before = old_cases()[name]
    model = td.load_model(os.path.join(OLD, f"{name}.keras"), safe_mode=False)
    close(before, model.predict(xs, verbose=0))


def test_new_files_name_refold_classes_and_factories_by_registered_name(tmp_path):
    from refold.models import encoders, tree_lstm
    block = encoders.tree_encoder(tree_lstm.child_sum_cell(3, 2),
                                  td.GetItem("x") >> td.Vector(2)) >> td.GetItem(0)
    config = json.dumps(serialize(block))
    assert '"refold>Pipe"' in config and '"refold>tree_encoder"' in config
    assert '"refold.blocks.composition:Pipe"' not in config


def test_a_registered_class_loads_when_the_module_it_was_saved_from_is_gone():
    config = serialize(td.Map(td.Scalar()) >> td.Sum())
    for entry in config["objects"]:
        if "module" in entry:
            entry["module"] = "refold.a_module_that_moved"
    again = deserialize(config, safe_mode=True)
    assert float(again.eval([1.0, 2.5])) == 3.5


@keras.saving.register_keras_serializable(package="refold_tests")
def doubled(x):
    return 2.0 * x


def test_a_function_registered_with_keras_is_saved_by_that_name():
    config = serialize(td.Scalar() >> td.Function(doubled))
    assert {"__function__": "refold_tests>doubled", "module": __name__} in [
        v for e in config["objects"] for v in e.get("config", {}).values()]
    assert float(deserialize(config, safe_mode=True).eval(2.0)) == 4.0


def test_a_name_that_nothing_registers_is_a_clear_error():
    config = serialize(td.Scalar() >> td.Function(doubled))
    text = json.dumps(config).replace("refold_tests>doubled", "refold_tests>gone")
    with pytest.raises(ValueError, match="names 'refold_tests>gone', which nothing registers"):
        deserialize(json.loads(text), safe_mode=True)


def test_two_classes_cannot_share_a_registered_name():
    @registry.register("Taken", package="refold_tests")
    class One:
        pass

    with pytest.raises(ValueError, match="'refold_tests>Taken'.*is registered under"):
        @registry.register("Taken", package="refold_tests")
        class Other:
            pass


LOAD_AND_PREDICT = """
import json, pickle, sys
{imports}
model = {load}(sys.argv[1], safe_mode=False)
print(json.dumps(model.predict(pickle.load(open(sys.argv[2], "rb")), verbose=0).tolist()))
"""


@pytest.mark.parametrize("imports, load", [
    ("import keras\nimport refold as td", "keras.models.load_model"),
    ("import refold", "refold.load_model"),
])
def test_a_fresh_process_that_imported_refold_alone_loads_a_saved_model(
        tmp_path, imports, load):
    xs, ys = saving_jobs.trees(8, seed=5)
    model = saving_jobs.quickstart_model(seed=2)
    model.save(tmp_path / "m.keras")
    (tmp_path / "xs.pkl").write_bytes(pickle.dumps(xs))
    script = LOAD_AND_PREDICT.format(imports=imports, load=load)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path / "m.keras"),
                          str(tmp_path / "xs.pkl")], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    got = np.array(json.loads(out.stdout.strip().splitlines()[-1]))
    np.testing.assert_allclose(got, model.predict(xs, verbose=0), rtol=1e-5, atol=1e-6)


AT_A2AEEDD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures",
                          "saved_at_a2aeedd")


def cases_at_a2aeedd() -> dict:
    """name -> (inputs, predictions at save time), written by a2aeedd's code, the last
    commit before compiler/ moved into subpackages (refold.compiler.graphs, ...)."""
    with open(os.path.join(AT_A2AEEDD, "cases.pkl"), "rb") as f:
        return pickle.load(f)


@pytest.mark.parametrize("name", sorted(cases_at_a2aeedd()))
def test_a_file_saved_before_compiler_moved_into_subpackages_loads_and_predicts_the_same(name):
    xs, before = cases_at_a2aeedd()[name]
    model = keras.models.load_model(os.path.join(AT_A2AEEDD, f"{name}.keras"),
                                    safe_mode=False)
    assert isinstance(model, td.Model)
    close(before, model.predict(xs, verbose=0))
