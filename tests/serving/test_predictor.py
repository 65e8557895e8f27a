"""`serving.Predictor`: an export answers Python inputs as the model does."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import refold as td
from refold.blocks.errors import InputError
from refold.blocks.serialization.config import UnsafeConfigError
from refold.compiler import Model
from refold.compiler.feeding.packed import EXPORT_CONFIG
from refold.serving import Predictor
from tests.compiler import factories
from tests.serving.exports import expressions

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def as_column(x):
    return x[:, None]


def test_a_predictor_answers_as_the_model_and_the_reference_evaluator(calculator):
    model, path = calculator
    xs = expressions(12, seed=1)
    got = Predictor(path).predict(xs)
    np.testing.assert_allclose(got, model.predict(xs, verbose=0), atol=1e-5)
    np.testing.assert_allclose(got, np.stack([model.block.eval(x) for x in xs]), atol=1e-5)


def test_a_block_with_lambdas_loads_only_outside_safe_mode(tmp_path):
    model = Model(factories.tree_sign(hidden=4))
    model.export(str(tmp_path / "m"), verbose=False)
    with pytest.raises(UnsafeConfigError, match="safe_mode=False"):
        Predictor(tmp_path / "m")
    trees = [1.0, (2.0, -3.0), ((0.5, 1.5), -1.0)]
    np.testing.assert_allclose(Predictor(tmp_path / "m", safe_mode=False).predict(trees),
                               model.predict(trees, verbose=0), atol=1e-5)


def test_a_bad_input_names_its_index_and_the_block_path(calculator):
    predictor = Predictor(calculator[1])
    good = {"op": "+", "left": 1, "right": 2}
    with pytest.raises(InputError) as err:
        predictor.predict([good, good, {"op": "/", "left": 1, "right": 2}])
    assert err.value.example_index == 2
    assert "node" in err.value.block_path and "'/'" in str(err.value)
    with pytest.raises(TypeError, match="a batch of inputs"):
        predictor.predict(good)


def test_the_export_describes_its_signature(calculator):
    _, path = calculator
    with open(os.path.join(path, EXPORT_CONFIG)) as f:
        config = json.load(f)
    spec = tf.saved_model.load(path).signatures["serving_default"].structured_input_signature[1]
    assert config["inputs"] == {k: {"dtype": v.dtype.name, "shape": v.shape.as_list()}
                                for k, v in spec.items()}
    assert set(config["inputs"]) == {"index", "layout", "consts_float32", "consts_int32",
                                     "metric_bounds", "batch_size"}
    assert config["output"] == {"dtype": "float32", "shape": [3]}
    assert config["model"]["factory"] == \
        "refold.examples.calculator.calculator:expression_classifier"


def test_an_export_without_its_block_or_of_another_layout_is_refused(calculator, tmp_path):
    _, path = calculator
    copy = tmp_path / "copy"
    shutil.copytree(path, copy)
    config_path = copy / EXPORT_CONFIG
    config = json.loads(config_path.read_text())
    config["model"]["factory_kwargs"] = {"state": 4}  # a block of other ops: same segments
    config["segments"] = config["segments"][:-1]
    config_path.write_text(json.dumps(config))
    with pytest.raises(ValueError, match="packs its requests differently"):
        Predictor(copy)
    os.remove(config_path)
    with pytest.raises(ValueError, match="not written by Model.export"):
        Predictor(copy)
    with pytest.raises(FileNotFoundError):
        Predictor(tmp_path / "nothing")


def test_the_client_runs_in_a_fresh_process(calculator, tmp_path):
    model, path = calculator
    xs = expressions(6, seed=2)
    script = textwrap.dedent(f"""
        import json, sys
        import numpy as np
        from refold.serving import Predictor
        xs = json.load(open({str(tmp_path / 'xs.json')!r}))
        np.save({str(tmp_path / 'out.npy')!r}, Predictor({path!r}).predict(xs))
    """)
    (tmp_path / "xs.json").write_text(json.dumps(xs))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    subprocess.run([sys.executable, "-c", script], check=True, cwd=ROOT, env=env, timeout=300)
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), model.predict(xs, verbose=0),
                               atol=1e-5)


def test_a_block_that_reads_computed_values_is_refused_clearly(tmp_path):
    from tests.compiler.test_unfold import _counter
    model = Model(_counter(max_steps=3, done=lambda seen: False) >> td.GetItem(1))
    model.export(str(tmp_path / "m"), verbose=False)
    with pytest.raises(ValueError, match=r"depends on computed values \(Unfold\)"):
        Predictor(tmp_path / "m", safe_mode=False)


def test_a_block_with_metrics_serves_its_output(tmp_path):
    seen = td.AllOf(td.Identity(), td.Metric("seen")) >> td.GetItem(0)
    block = td.Map(td.Scalar() >> seen) >> td.Sum() >> td.Function(as_column)
    model = Model(block)
    model.export(str(tmp_path / "m"), verbose=False)
    predictor = Predictor(tmp_path / "m")  # a function by name: safe mode loads it
    xs = [[1.0, 2.0], [3.0], [-1.0, 0.5, 0.25]]
    assert predictor.config["metrics"] == ["seen"]
    assert predictor.request(xs)["metric_bounds"].tolist() == [0, 6]
    np.testing.assert_allclose(predictor.predict(xs), [[3.0], [3.0], [-0.25]], atol=1e-6)
    np.testing.assert_allclose(predictor.predict(xs), model.predict(xs, verbose=0), atol=1e-6)
