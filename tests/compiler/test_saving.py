"""Saving a `Model` whole and getting it back as Keras does: `model.save` and
`keras.models.load_model` (or `compiler.load_model`, with clear errors for bad
files), `ModelCheckpoint`, `BackupAndRestore`, in this process and in fresh ones."""

from __future__ import annotations

import inspect
import json
import os
import pickle
import signal
import subprocess
import sys
import time
import zipfile

import keras
import numpy as np
import pytest

import refold as td
from refold.blocks.serialization.config import UnsafeConfigError
from refold.compiler import Model, ModelFileError, load_model
from tests.blocks.test_serialization import same
from tests.compiler import saving_jobs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def job(*args, wait: bool = True):
    """`python -m tests.compiler.saving_jobs ARGS` in a fresh process."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=ROOT)
    cmd = [sys.executable, "-m", "tests.compiler.saving_jobs", *map(str, args)]
    if not wait:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stderr=subprocess.PIPE)
    done = subprocess.run(cmd, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    assert done.returncode == 0, done.stderr[-3000:]


def weights(path) -> list:
    with np.load(path) as f:
        return [f[k] for k in sorted(f.files, key=lambda k: int(k.split("_")[1]))]


def tf_sum3(a, b, c):
    return a + b + c


@pytest.fixture(scope="module")
def trained_quickstart() -> Model:
    """The quick-start model after one epoch (4 steps), trained once for the tests that
    only save it, load it back or predict with it (none of them changes it)."""
    xs, ys = saving_jobs.trees(32, seed=4)
    model = saving_jobs.quickstart_model(seed=1)
    model.fit(xs, ys, batch_size=8, epochs=1, verbose=0)
    return model


def test_every_example_model_and_zoo_block_predicts_the_same_in_a_fresh_process(tmp_path):
    saving_jobs.build_models(str(tmp_path))
    job("load", tmp_path)
    with open(tmp_path / "cases.pkl", "rb") as f:
        saved = pickle.load(f)
    with open(tmp_path / "loaded.pkl", "rb") as f:
        loaded = pickle.load(f)
    names = set(saved)
    assert {"README quick start", "calculator", "molecules", "sentiment tree_lstm",
            "sentiment bag_of_words logits", "tagger bidirectional=True",
            "zoo child-sum TreeLSTM", "zoo bidirectional LSTM tagger"} <= names
    assert sorted(loaded) == sorted(saved)
    for name, (_, _, before) in saved.items():
        same(before, loaded[name])


def test_fit_continued_in_a_fresh_process_gives_the_weights_of_an_uninterrupted_fit(tmp_path):
    xs, ys = saving_jobs.trees(48, seed=2)
    model = saving_jobs.quickstart_model(seed=3)
    model.fit(xs, ys, batch_size=8, epochs=1, verbose=0)
    model.save(tmp_path / "model.keras")
    model.fit(xs, ys, batch_size=8, epochs=3, initial_epoch=1, verbose=0)  # uninterrupted
    job("continue", tmp_path)
    continued = weights(tmp_path / "continued.npz")
    for a, b in zip(model.get_weights(), continued, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)


def test_backup_and_restore_resumes_a_run_killed_mid_epoch(tmp_path):
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    whole.mkdir(), killed.mkdir()
    saving_jobs.backup(str(whole))  # the run never killed, here
    run = job("backup", killed, 2, 3, wait=False)  # epoch 2 (of 0-3), batch 3 (of 0-5)
    deadline = time.monotonic() + 300
    while not (killed / "reached").exists():
        assert run.poll() is None, run.stderr.read().decode()[-3000:]
        assert time.monotonic() < deadline, "the run never reached the kill point"
        time.sleep(0.2)
    run.send_signal(signal.SIGKILL)
    assert run.wait() == -signal.SIGKILL
    assert not (killed / "weights.npz").exists() and os.listdir(killed / "backup")
    job("backup", killed)  # resumes from the backup of the end of epoch 1
    assert not (killed / "backup").exists()  # deleted by Keras once training ended
    for a, b in zip(weights(whole / "weights.npz"), weights(killed / "weights.npz"),
                    strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)


@pytest.mark.parametrize("filename", ["best.keras", "best.weights.h5"])
def test_model_checkpoint_keeps_the_best_epoch(tmp_path, filename):
    xs, ys = saving_jobs.trees(32, seed=4)
    model = saving_jobs.quickstart_model(seed=1)
    at_epoch_end = []
    remember = keras.callbacks.LambdaCallback(
        on_epoch_end=lambda epoch, logs: at_epoch_end.append(model.get_weights()))
    path = tmp_path / filename
    # "best" is the highest loss here: the first epoch's, not the last's
    checkpoint = keras.callbacks.ModelCheckpoint(
        str(path), monitor="loss", mode="max", save_best_only=True,
        save_weights_only=filename.endswith(".weights.h5"))
    history = model.fit(xs, ys, batch_size=8, epochs=3, verbose=0,
                        callbacks=[checkpoint, remember])
    best = int(np.argmax(history.history["loss"]))
    assert best == 0 and history.history["loss"][-1] < history.history["loss"][0]
    if filename.endswith(".keras"):
        restored = load_model(path, safe_mode=False)
    else:
        restored = saving_jobs.quickstart_model(seed=9)
        restored.load_weights(path)
    for a, b in zip(at_epoch_end[best], restored.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    assert sorted(os.listdir(tmp_path)) == [filename]  # no temporary file left


def test_the_quick_start_model_round_trips_and_safe_mode_explains(tmp_path, trained_quickstart):
    model = trained_quickstart
    xs, _ = saving_jobs.trees(8, seed=5)
    path = tmp_path / "m.keras"
    model.save(path)
    loaded = keras.models.load_model(path, safe_mode=False)
    assert isinstance(loaded, Model) and loaded.optimizer.iterations.numpy() == 4
    np.testing.assert_array_equal(model.predict(xs, verbose=0), loaded.predict(xs, verbose=0))
    for load in (keras.models.load_model, load_model):
        with pytest.raises(UnsafeConfigError, match=r"^ForwardDeclaration > OneOf "
                                                    r"\(argument key_fn\): .*safe_mode=False"):
            load(path)


@pytest.mark.parametrize("load", [load_model, keras.models.load_model])
def test_a_loaded_models_block_is_its_documented_property(tmp_path, trained_quickstart, load):
    path = tmp_path / "m.keras"
    trained_quickstart.save(path)
    loaded = load(path, safe_mode=False)
    block = loaded.block   # rebuilt from the file, with the loaded weights
    assert isinstance(block, td.Block) and block is not trained_quickstart.block
    assert (block.input_type, block.output_type) == (
        trained_quickstart.block.input_type, trained_quickstart.block.output_type)
    xs, _ = saving_jobs.trees(6, seed=5)
    np.testing.assert_allclose(np.stack([block.eval(x) for x in xs]),
                               loaded.predict(xs, verbose=0), rtol=1e-5, atol=1e-6)
    documented = inspect.getattr_static(Model, "block")
    assert isinstance(documented, property) and "load_model" in documented.__doc__
    with pytest.raises(AttributeError):
        loaded.block = td.Scalar()   # read-only: the model was compiled from its block


def test_a_block_with_named_functions_loads_in_safe_mode(tmp_path):
    model = Model(td.Map(td.Vector(2) >> td.FC(3)) >> td.Sum() >> td.FC(2))
    model.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras")
    xs = [[[1.0, 2.0]], [[0.5, -1.0], [2.0, 2.0]]]
    np.testing.assert_array_equal(model.predict(xs, verbose=0), loaded.predict(xs, verbose=0))


def test_a_block_variable_and_a_shared_layer_come_back_with_their_values(tmp_path):
    keras.utils.set_random_seed(2)
    fc = td.FC(2, activation=None)
    bias = keras.Variable(np.array([0.5, -0.5], "float32"))
    block = td.AllOf(td.GetItem(0) >> td.Vector(2) >> fc, td.GetItem(1) >> td.Vector(2) >> fc,
                     td.FromTensor(bias)) >> td.Function(tf_sum3)
    model = Model(block)
    model.compile(optimizer="sgd", loss="mse")
    xs, ys = [([1.0, 2.0], [3.0, -1.0])] * 4, np.ones((4, 2), "float32")
    model.fit(xs, ys, batch_size=4, epochs=2, verbose=0)  # the variable trains too
    assert not np.allclose(bias.numpy(), [0.5, -0.5])
    model.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras")  # no lambdas: safe mode loads it
    assert len(loaded.trainable_weights) == 3  # kernel, bias of the one FC; the variable
    np.testing.assert_array_equal(loaded.block_variables[0].numpy(), bias.numpy())
    np.testing.assert_array_equal(model.predict(xs, verbose=0), loaded.predict(xs, verbose=0))
    with zipfile.ZipFile(tmp_path / "m.keras") as archive:
        config = json.loads(archive.read("config.json"))
    assert config["config"]["block"]["format"] == "refold.blocks"


def test_a_failed_save_leaves_the_previous_file_whole(tmp_path, monkeypatch, trained_quickstart):
    model = trained_quickstart
    path = tmp_path / "m.keras"
    model.save(path)
    before = path.read_bytes()

    def crash(self, filepath, *args, **kwargs):
        with open(filepath, "wb") as f:
            f.write(b"PK half a file")
        raise KeyboardInterrupt

    monkeypatch.setattr(keras.Model, "save", crash)
    with pytest.raises(KeyboardInterrupt):
        model.save(path)
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["m.keras"]


def test_a_block_that_cannot_be_saved_fails_before_anything_is_written(tmp_path):
    class Double:  # a callable object: neither a function nor a Keras object
        def __call__(self, x):
            return 2.0 * x

    model = Model(td.Vector(2) >> td.Function(Double()))
    with pytest.raises(TypeError, match=r"Function \(argument tf_fn\): cannot save"):
        model.save(tmp_path / "m.keras")
    assert not os.listdir(tmp_path)


def test_bad_model_files_get_clear_errors(tmp_path, trained_quickstart):
    good = tmp_path / "good.keras"
    trained_quickstart.save(good)
    data = good.read_bytes()
    cases = {
        "missing.keras": (None, "no such file"),
        "empty.keras": (b"", "0 bytes, empty"),
        "truncated.keras": (data[: len(data) // 2], "truncated"),
        "text.keras": (b"hello, not a model", "not a zip archive (it starts with b'hello, n"),
        "weights.keras": (b"\x89HDF\r\n\x1a\n" + bytes(100), "an HDF5 file (weights"),
    }
    for name, (content, message) in cases.items():
        if content is not None:
            (tmp_path / name).write_bytes(content)
        with pytest.raises(ModelFileError, match=f"{name} is not|{name}: no such") as err:
            load_model(tmp_path / name)
        assert message in str(err.value), str(err.value)
    with zipfile.ZipFile(tmp_path / "other.keras", "w") as archive:
        archive.writestr("notes.txt", "hello")
    with pytest.raises(ModelFileError, match="a zip archive but not a .keras model file"):
        load_model(tmp_path / "other.keras")
    os.mkdir(tmp_path / "dir.keras")
    with pytest.raises(ModelFileError, match="is a directory"):
        load_model(tmp_path / "dir.keras")
