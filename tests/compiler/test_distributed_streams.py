"""Streams under `tf.distribute.MirroredStrategy` on two logical CPU devices train as
one device does on the same stream: `Lines` files, generators, PyDatasets, tf.data
datasets, with worker processes, validation streams, a resumed run reading on where
a whole run would be; bad lines are named by file and line or skipped; an early stop
or a failing stream leaves no planning thread behind.

Logical devices must be set before TensorFlow starts, so the checks run in a fresh
Python process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import json, os, tempfile, threading, warnings
    import numpy as np, tensorflow as tf, keras
    warnings.filterwarnings("error", message=".*no block declares")
    warnings.filterwarnings("ignore", message="Your input ran out of data")
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import refold as td
    from refold.compiler import Model
    from refold.compiler.feeding.streams import LineError
    from tests.compiler import factories
    from tests.compiler.test_model import compiled, labelled, sign_data

    strategy = tf.distribute.MirroredStrategy(["CPU:0", "CPU:1"])
    trees, y = sign_data(26, seed=2)      # batches of 4: the last one of 2
    val, val_y = sign_data(7, seed=3)
    folder = tempfile.mkdtemp()

    def tuplify(t):
        return tuple(tuplify(s) for s in t) if isinstance(t, list) else t

    def parse(line):
        tree, label = json.loads(line)
        return tuplify(tree), label

    def write(name, xs, ys, extra=()):
        path = os.path.join(folder, name)
        with open(path, "w") as f:
            f.write("".join(json.dumps([t, int(v)]) + "\\n" for t, v in zip(xs, ys)))
            f.write("".join(line + "\\n" for line in extra))
        return path
    train_path, val_path = write("train.jsonl", trees, y), write("val.jsonl", val, val_y)

    def close(a, b, what, tol=1e-5):
        np.testing.assert_allclose(a, b, atol=tol, rtol=tol, err_msg=what)

    def both(workers=0, fold=False, **kw):
        models = []
        for scope in (None, strategy):
            with (scope.scope() if scope else tf.init_scope()):
                if fold:
                    m = Model(factories.labelled_tree_sign(seed=4), workers=workers)
                    m.compile(optimizer=keras.optimizers.Adam(0.05))
                else:
                    m = compiled(Model(factories.tree_sign(seed=4), workers=workers, **kw))
            models.append(m)
        models[1].set_weights(models[0].get_weights())
        return models

    def same(models, histories=(), what=""):
        for a, b in zip(models[0].weights, models[1].weights, strict=True):
            close(a.numpy(), b.numpy(), f"weights, {what}")
        if histories:
            h1, h2 = (h.history for h in histories)
            assert sorted(h1) == sorted(h2), (h1, h2)
            for k in h1:
                close(h1[k], h2[k], f"{k}, {what}")

    def no_thread_left():
        names = [t.name for t in threading.enumerate()]
        assert not any(n.startswith("refold-stream") for n in names), names

    # one pair of models (same weights) goes through sections 1-4, training on: a
    # model traces its steps once, and the pair's weights stay equal throughout
    models = both()

    # 1. a Lines file, a validation Lines file, two epochs
    hs = [m.fit(td.Lines(train_path, parse), batch_size=4, epochs=2, verbose=0,
                validation_data=td.Lines(val_path, parse)) for m in models]
    same(models, hs, "Lines")
    assert sorted(hs[1].history) == ["accuracy", "loss", "val_accuracy", "val_loss"]
    assert int(models[1].optimizer.iterations.numpy()) == 14
    close(models[0].evaluate(td.Lines(val_path, parse), batch_size=3, verbose=0),
          models[1].evaluate(td.Lines(val_path, parse), batch_size=3, verbose=0), "evaluate")
    close(models[0].predict(iter(trees), batch_size=3, verbose=0),
          models[1].predict(iter(trees), batch_size=3, verbose=0), "predict")
    no_thread_left()
    print("lines ok")

    # 2. a generator, parts of 3 and 2; batch 1: one replica's part empty every step
    for batch_size in (5, 1):
        for m in models:
            m.fit(((t, v) for t, v in zip(trees[:12], y[:12])), batch_size=batch_size,
                  verbose=0)
        same(models, (), f"generator, batch {batch_size}")
    print("generator ok")

    # 3. a PyDataset of batches; a tf.data dataset
    class Batches(keras.utils.PyDataset):
        def __len__(self):
            return 4
        def __getitem__(self, b):
            return trees[5 * b:5 * b + 5], y[5 * b:5 * b + 5]
    for m in models:
        m.fit(Batches(), epochs=2, verbose=0)
    same(models, (), "PyDataset")
    ds = tf.data.Dataset.from_tensor_slices(np.array([-1.5, 2.0, 0.5, -0.25, 3.0],
                                                     np.float32))
    close(models[0].predict(ds, batch_size=2, verbose=0),
          models[1].predict(ds, batch_size=2, verbose=0), "tf.data")
    print("pydataset ok")

    # 4. steps_per_epoch: a run resumed at epoch 1 reads on from step 2
    single, mirrored = models
    single.fit(td.Lines(train_path, parse), batch_size=4, steps_per_epoch=2, epochs=3,
               verbose=0)
    mirrored.fit(td.Lines(train_path, parse), batch_size=4, steps_per_epoch=2, epochs=1,
                 verbose=0)
    mirrored.fit(td.Lines(train_path, parse), batch_size=4, steps_per_epoch=2, epochs=3,
                 initial_epoch=1, verbose=0)
    same(models, (), "resumed")
    print("resume ok")

    # 5. worker processes plan the stream; lines that do not parse or fit are skipped
    bad_path = write("bad.jsonl", trees[:9], y[:9], extra=["{oops", json.dumps([["x"], 1])])
    models = both(workers=1, on_bad_example="skip")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for m in models:
            m.fit(td.Lines(bad_path, parse), batch_size=4, epochs=2, verbose=0)
    assert any("bad.jsonl:10" in str(w.message) for w in caught), caught
    assert models[0].skipped_examples == models[1].skipped_examples == [9, 10], \
        models[1].skipped_examples
    same(models, (), "workers, skipped")
    models[0].compiler.close()
    print("workers ok")

    # 6. an early stop, a stream that fails: no planning thread left; workers again
    class Stop(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 1:
                self.model.stop_training = True
    mirrored = models[1]
    before = int(mirrored.optimizer.iterations.numpy())
    endless = ((t, v) for _ in range(1000) for t, v in zip(trees, y))
    h = mirrored.fit(endless, batch_size=4, epochs=3, steps_per_epoch=50, verbose=0,
                     callbacks=[Stop()])
    assert int(mirrored.optimizer.iterations.numpy()) == before + 2
    assert len(h.history["loss"]) == 1
    no_thread_left()
    def failing():
        yield from zip(trees[:6], y[:6])
        raise RuntimeError("the source broke")
    try:
        mirrored.fit(failing(), batch_size=4, verbose=0)
        raise AssertionError("the source's error was lost")
    except RuntimeError as e:
        assert "the source broke" in str(e), e
    no_thread_left()
    mirrored.fit(td.Lines(train_path, parse), batch_size=4, verbose=0)  # workers again
    mirrored.compiler.close()
    print("early stop ok")

    # 7. raised: a line that does not parse, an input that does not fit the block
    with strategy.scope():
        raising = compiled(Model(factories.tree_sign(seed=4)))
    try:
        raising.fit(td.Lines(bad_path, parse), batch_size=4, verbose=0)
        raise AssertionError("a bad line was accepted")
    except LineError as e:
        assert "example 9" in str(e) and "bad.jsonl:10: cannot parse" in str(e), e
    no_thread_left()
    lines = [json.dumps([t, int(v)]) for t, v in zip(trees[:9], y[:9])]
    try:
        raising.fit(td.Lines(write("unfit.jsonl", [], [], lines + [json.dumps(["x", 1])]),
                             parse), batch_size=4, verbose=0)
        raise AssertionError("an input that does not fit was accepted")
    except td.InputError as e:
        assert "example 9" in str(e) and "(at " in str(e) and "unfit.jsonl:10)" in str(e), e
    print("bad lines ok")

    # 8. Fold-style losses in the inputs
    models = both(fold=True)
    for m in models:
        m.fit(iter([labelled(t) for t in trees]), batch_size=6, verbose=0)
    same(models, (), "Fold-style")
    print("DONE")
""")


def test_streams_under_mirrored_strategy_train_as_on_one_device():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=root)
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=root, env=env,
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "DONE" in out.stdout
