"""Training under `tf.distribute.MirroredStrategy` on two logical CPU devices.

Logical devices must be set before TensorFlow starts, so the check runs in a fresh
Python process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np, tensorflow as tf, keras
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from compiler import Model, MirroredTrainer
    from tests.compiler import factories
    from tests.compiler.test_model import sign_data, labelled

    trees, y = sign_data(13, seed=2)
    cases = {
        "labels": (factories.tree_sign, trees, y),
        "metric losses": (factories.labelled_tree_sign, [labelled(t) for t in trees], None),
    }
    strategy = tf.distribute.MirroredStrategy(["CPU:0", "CPU:1"])
    assert strategy.num_replicas_in_sync == 2
    for name, (factory, x, labels) in cases.items():
        def compiled(model):
            model.compile(optimizer=keras.optimizers.SGD(0.5),
                          loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
                          if labels is not None else None)
            return model
        single = compiled(Model(factory(seed=4)))
        with strategy.scope():
            mirrored = compiled(Model(factory(seed=4)))
        mirrored.set_weights(single.get_weights())
        trainer = MirroredTrainer(mirrored, strategy)
        before = [w.numpy().copy() for w in single.weights]
        for step in range(2):
            # one full-batch step each: the same examples on one device and on two
            single.fit(x, labels, batch_size=len(x), epochs=1, shuffle=False, verbose=0)
            loss = trainer.train_step(x, labels)
        moved = 0.0
        for a, b, w0 in zip(single.weights, mirrored.weights, before):
            np.testing.assert_allclose(a.numpy(), b.numpy(), atol=2e-6, err_msg=name)
            moved = max(moved, float(np.abs(a.numpy() - w0).max()))
        assert moved > 1e-3, (name, moved)
        assert np.isfinite(loss)
        print(name, "ok", loss, moved)
    # labels, a weight penalty, and the loss a step returns, on two replicas
    with strategy.scope():
        mirrored = Model(factories.tree_sign(seed=4, l2=0.1))
        mirrored.compile(optimizer=keras.optimizers.SGD(0.5),
                         loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    single = Model(factories.tree_sign(seed=4, l2=0.1))
    single.compile(optimizer=keras.optimizers.SGD(0.5),
                   loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    mirrored.set_weights(single.get_weights())
    want_loss = single.evaluate(trees, y, batch_size=len(trees), verbose=0)
    trainer = MirroredTrainer(mirrored, strategy)
    loss = trainer.train_step(trees, y)
    assert abs(loss - want_loss) < 1e-5, (loss, want_loss)
    single.fit(trees, y, batch_size=len(trees), epochs=1, shuffle=False, verbose=0)
    for a, b in zip(single.weights, mirrored.weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=2e-6, err_msg="l2")
    # fit over epochs, from a generator; a batch too small for the replicas; Keras fit
    history = trainer.fit((t for t in trees), y, batch_size=4, epochs=2, verbose=0)
    assert len(history["loss"]) == 2 and all(np.isfinite(history["loss"]))
    try:
        trainer.train_step(trees[:1], y[:1])
        raise AssertionError("a one-input batch on two replicas was accepted")
    except ValueError as e:
        assert "cannot feed 2 replicas" in str(e)
    try:
        trainer.fit(trees[:1], y[:1], verbose=0)
        raise AssertionError("one input for two replicas was accepted")
    except ValueError as e:
        assert "1 inputs cannot feed 2 replicas" in str(e)
    try:
        mirrored.fit(trees, y, verbose=0)
        raise AssertionError("Model.fit under a two-replica strategy was accepted")
    except ValueError as e:
        assert "MirroredTrainer" in str(e)
    print("DONE")
""")


def test_mirrored_training_equals_single_device_training():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=root)
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=root, env=env,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "DONE" in out.stdout
