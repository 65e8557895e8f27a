"""`Model.fit`, `evaluate` and `predict` under `tf.distribute.MirroredStrategy` on two
logical CPU devices give what they give on one device.

Logical devices must be set before TensorFlow starts, so the checks run in a fresh
Python process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import warnings
    import numpy as np, tensorflow as tf, keras
    # each replica's step reads its own copy of the declared weights: not undeclared
    warnings.filterwarnings("error", message=".*no block declares")
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from refold.compiler import Model, NonFiniteLossError
    from tests.compiler import factories
    from tests.compiler.test_model import sign_data, labelled

    strategy = tf.distribute.MirroredStrategy(["CPU:0", "CPU:1"])
    assert strategy.num_replicas_in_sync == 2
    trees, y = sign_data(13, seed=2)          # batches of 4: the last one input
    weights = np.random.default_rng(1).uniform(0.5, 2.0, len(trees))
    val, val_y = sign_data(5, seed=3)

    class Record(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.seen = []
        def on_train_batch_end(self, batch, logs=None):
            self.seen.append(("batch", batch, round(float(logs["loss"]), 5)))
        def on_epoch_end(self, epoch, logs=None):
            self.seen.append(("epoch", epoch, sorted(logs)))

    def close(a, b, what, tol=1e-5):
        np.testing.assert_allclose(a, b, atol=tol, rtol=tol, err_msg=what)

    def both(factory, compile_kw, l2=0.0):
        models = []
        for scope in (None, strategy):
            ctx = strategy.scope() if scope else tf.init_scope()
            with ctx:
                m = Model(factory(seed=4, **({"l2": l2} if l2 else {})))
                m.compile(**compile_kw())
            models.append(m)
        models[1].set_weights(models[0].get_weights())
        return models

    labelled_kw = lambda: dict(
        optimizer=keras.optimizers.Adam(0.05), metrics=["accuracy"],
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    # 1. labels, sample weights, a weight penalty, validation data, a callback
    single, mirrored = both(factories.tree_sign, labelled_kw, l2=0.1)
    runs = []
    for m in (single, mirrored):
        rec = Record()
        h = m.fit(trees, y, sample_weight=weights, batch_size=4, epochs=3, shuffle=False,
                  validation_data=(val, val_y), callbacks=[rec], verbose=0)
        runs.append((h.history, rec.seen))
    (h1, seen1), (h2, seen2) = runs
    assert sorted(h1) == sorted(h2) == ["accuracy", "loss", "val_accuracy", "val_loss"], h2
    for k in h1:
        close(h1[k], h2[k], k)
    assert [s[:2] for s in seen1] == [s[:2] for s in seen2] and len(seen2) == 3 * 5
    for a, b in zip(single.weights, mirrored.weights):
        close(a.numpy(), b.numpy(), "weights, labels")
    assert int(mirrored.optimizer.iterations.numpy()) == 12
    # evaluate and predict
    close(single.evaluate(val, val_y, batch_size=3, verbose=0),
          mirrored.evaluate(val, val_y, batch_size=3, verbose=0), "evaluate")
    close(single.predict(trees, batch_size=4, verbose=0),
          mirrored.predict(trees, batch_size=4, verbose=0), "predict")
    print("labels ok")

    # 2. Fold-style losses (td.Metric), shuffled: parts differ from one device's
    single, mirrored = both(factories.labelled_tree_sign,
                            lambda: dict(optimizer=keras.optimizers.SGD(0.5)))
    xs = [labelled(t) for t in trees]
    h1 = single.fit(xs, batch_size=6, epochs=2, shuffle=False, verbose=0).history
    h2 = mirrored.fit(xs, batch_size=6, epochs=2, shuffle=False, verbose=0).history
    for k in h1:
        close(h1[k], h2[k], k)
    for a, b in zip(single.weights, mirrored.weights):
        close(a.numpy(), b.numpy(), "weights, metric losses")
    h3 = mirrored.fit(xs, batch_size=6, epochs=2, shuffle=True, verbose=0).history
    assert all(np.isfinite(h3["loss"]))
    print("metric losses ok")

    # 3. a non-finite step is applied on no replica, and names its inputs
    with strategy.scope():
        import refold as td
        block = td.AllOf(td.Scalar() >> td.Function(lambda x: x[:, None]) >> td.FC(1),
                         td.Scalar()) \
            >> td.Function(lambda z, x: tf.square(z[:, 0]) + tf.math.log(x)) \
            >> td.Metric("loss")
        nan_model = Model(block)
        nan_model.compile(optimizer=keras.optimizers.SGD(0.01))
    nan_model.fit([0.1, 0.2, 0.3, 0.4], batch_size=4, verbose=0)   # finite: applied
    before = [w.numpy().copy() for w in nan_model.weights]
    iterations = int(nan_model.optimizer.iterations.numpy())
    xs = [0.1, 0.2, 0.3, 0.4, 0.5, -1.0, 0.2, 0.3]
    try:
        nan_model.fit(xs, batch_size=4, shuffle=False, verbose=0)
        raise AssertionError("a NaN step was not refused")
    except NonFiniteLossError as e:
        assert e.examples == [4, 5, 6, 7] and e.batch == 1, e
        assert "was not applied" in str(e), e
    assert int(nan_model.optimizer.iterations.numpy()) == iterations + 1
    # the first batch of that fit was applied, the second not: compare to one device
    print("guard ok")

    print("DONE")
""")


def test_model_fit_under_mirrored_strategy_equals_single_device_training():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=root)
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=root, env=env,
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "DONE" in out.stdout
