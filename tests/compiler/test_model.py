"""`compiler.Model`: Keras training, evaluation, prediction, callbacks, saving, export."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

import refold as td
from refold.blocks.errors import InputError
from refold.compiler import Compiler, Model, NonFiniteLossError
from refold.compiler.feeding import lists as pipeline
from tests.compiler import factories


class ForwardSpy(Model):
    """A `Model` that calls its `forward_traced(x, gradient_mode)` at each run of its
    forward pass (`StepTracer.forward`), in Python: while a step is traced."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        forward = self.tracer.forward

        def spy(x, gradient_mode=None):
            self.forward_traced(x, gradient_mode)
            return forward(x, gradient_mode)
        self.tracer.forward = spy

    def forward_traced(self, x, gradient_mode) -> None:
        pass


def random_tree(rng, n_leaves: int):
    if n_leaves == 1:
        return float(np.round(rng.normal(), 2))
    k = int(rng.integers(1, n_leaves))
    return (random_tree(rng, k), random_tree(rng, n_leaves - k))


def leaves(t):
    return leaves(t[0]) + leaves(t[1]) if isinstance(t, tuple) else [t]


def sign_data(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    trees = [random_tree(rng, int(rng.integers(1, 7))) for _ in range(n)]
    return trees, np.array([int(sum(leaves(t)) > 0) for t in trees])


def labelled(t):
    """A tree of numbers as the Fold-style input: a label (sum > 0) at every node."""
    if isinstance(t, tuple):
        left, right = labelled(t[0]), labelled(t[1])
        return {"l": left, "r": right, "y": int(left["s"] + right["s"] > 0),
                "s": left["s"] + right["s"]}
    return {"x": t, "y": int(t > 0), "s": t}


def compiled(model: Model, lr: float = 0.05, **kwargs) -> Model:
    model.compile(optimizer=keras.optimizers.Adam(lr),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"], **kwargs)
    return model


SCCE = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def test_fit_trains_a_tree_model_beyond_the_majority_baseline():
    trees, y = sign_data(240)
    model = compiled(Model(factories.tree_sign()))
    history = model.fit(trees[:200], y[:200], batch_size=16, epochs=8, verbose=0,
                        validation_data=(trees[200:], y[200:]))
    losses = history.history["loss"]
    assert losses[-1] < 0.6 * losses[0]
    majority = max(y[200:].mean(), 1 - y[200:].mean())
    assert history.history["val_accuracy"][-1] > majority + 0.1
    loss, acc = model.evaluate(trees[200:], y[200:], verbose=0)
    assert acc == pytest.approx(history.history["val_accuracy"][-1])


def test_fold_style_losses_and_metrics_come_from_metric_blocks():
    trees, _ = sign_data(160, seed=1)
    data = [labelled(t) for t in trees]
    model = Model(factories.labelled_tree_sign())
    model.compile(optimizer=keras.optimizers.Adam(0.05))
    history = model.fit(data[:120], batch_size=16, epochs=6, verbose=0,
                        validation_data=data[120:])
    h = history.history
    assert sorted(h) == ["accuracy", "loss", "val_accuracy", "val_loss"]
    assert h["loss"][-1] < 0.7 * h["loss"][0]
    assert h["val_accuracy"][-1] > 0.8
    # the logged loss is the mean over nodes of the per-node losses
    logs = model.evaluate(data[120:], batch_size=100, verbose=0, return_dict=True)
    per_node = np.concatenate([model.block.eval(x)[1]["loss"] for x in data[120:]])
    assert logs["loss"] == pytest.approx(per_node.mean(), rel=1e-4)


def test_training_changes_the_weights_the_blocks_use():
    block = factories.tree_sign()
    before = block.eval((1.0, -0.5))
    model = compiled(Model(block))
    trees, y = sign_data(32)
    model.fit(trees, y, batch_size=8, epochs=1, verbose=0)
    after = block.eval((1.0, -0.5))
    assert not np.allclose(before, after)
    np.testing.assert_allclose(model.predict([(1.0, -0.5)], verbose=0)[0], after, atol=1e-5)


def test_predict_returns_one_output_per_input_in_order():
    block = factories.tree_sign()
    model = Model(block)
    trees, _ = sign_data(37, seed=3)
    got = model.predict(trees, batch_size=8, verbose=0)
    assert got.shape == (37, 2)
    want = Compiler.create(block).run(trees)
    np.testing.assert_allclose(got, np.stack(want), atol=1e-5)


def test_repeated_calls_do_not_grow_the_models_containers():
    # a list assigned to a Keras model's attribute on every call grew its `_tracked`
    # list by one name per call: a long-running server's memory grew without bound
    model = compiled(Model(factories.tree_sign()))
    trees, y = sign_data(8)

    def calls(n: int) -> dict:
        for _ in range(n):
            model.predict(trees[:2], verbose=0)
            model.evaluate(trees[:2], y[:2], verbose=0)
            model.fit(trees[:2], y[:2], epochs=1, verbose=0, validation_data=(trees, y))
        return {k: len(v) for k, v in vars(model).items() if isinstance(v, (list, dict, set))}

    before = calls(2)
    assert calls(10) == before
    assert model.skipped_examples == [] and model.skipped_validation_examples == []


def test_predict_of_structured_outputs_gives_eval_results():
    block = td.Map(td.Scalar() >> td.Function(tf.square))
    got = Model(block).predict([[1.0, 2.0], [], [3.0]], batch_size=2, verbose=0)
    assert [[float(v) for v in r] for r in got] == [[1.0, 4.0], [], [9.0]]


def test_training_is_traced_once_for_every_batch_shape_and_weight_gradient_choice():
    from refold.scheduler import GradientMode

    class Counting(ForwardSpy):
        traces: dict = {}
        settings: set = set()

        def forward_traced(self, x, gradient_mode=None):  # Python runs only while tracing
            once = gradient_mode is not None and gradient_mode.weights_once_per_step
            Counting.traces[once] = Counting.traces.get(once, 0) + 1
            # the choice reaches the executor as an argument: its settings stay
            Counting.settings.add(self.compiler.executor.gradient_mode)

    trees, y = sign_data(45, seed=4)
    model = compiled(Counting(factories.tree_sign()))
    model.fit(trees, y, batch_size=45, epochs=1, verbose=0)
    model.fit(trees[:4], y[:4], batch_size=1, epochs=1, verbose=0)
    # small launches take the weight gradients once per step, large ones per iteration
    assert set(Counting.traces) == {False, True}
    assert Counting.settings == {GradientMode()}
    # once each: the compiled metrics' variables are made before the first trace
    # (made in it, TensorFlow would trace the step a second time)
    first = dict(Counting.traces)
    assert first == {False: 1, True: 1}
    model.fit(trees, y, batch_size=30, epochs=2, verbose=0)
    model.fit(trees[:20], y[:20], batch_size=3, epochs=1, verbose=0)
    model.fit(trees[:5], y[:5], batch_size=1, epochs=1, verbose=0)
    assert Counting.traces == first  # every batch shape ran on its choice's trace
    Counting.traces = {}
    compiled(Counting(factories.tree_sign())).evaluate(trees, y, batch_size=45, verbose=0)
    assert Counting.traces == {False: 1}  # evaluate first: its metrics made before, too


def test_a_train_step_overridden_without_the_gradient_mode_trains_with_the_executors():
    # Keras' habit: train_step(self, data) calling super(); traced as it is (the
    # choice's GradientMode goes to Model's own step, `Model.training_step`)
    class Overriding(ForwardSpy):
        modes: list = []

        def train_step(self, data):
            return super().train_step(data)

        def forward_traced(self, x, gradient_mode=None):  # Python runs only while tracing
            Overriding.modes.append(gradient_mode)

    trees, y = sign_data(8, seed=5)
    model = compiled(Overriding(factories.tree_sign()))
    before = [w.numpy().copy() for w in model.trainable_weights]
    model.fit(trees, y, batch_size=1, epochs=1, verbose=0)  # small launches: once chosen
    assert Overriding.modes and set(Overriding.modes) == {None}
    assert any(not np.array_equal(b, w.numpy()) for b, w in zip(before, model.trainable_weights))


def test_a_batch_near_the_threshold_runs_on_the_other_choices_trace():
    from types import SimpleNamespace

    from refold.compiler.training.steps import WeightGradsChoice
    layout = SimpleNamespace(loop_ops=[1], segment_id={"group_size": 1})
    choice = WeightGradsChoice(SimpleNamespace(layout=layout, batched_weight_grads=False),
                               max_rows=4)

    def key(rows: list, traced=()):  # a batch whose loop launches have these rows
        return choice.key({"index": np.array([0, *rows]),
                           "layout": np.array([0, 1, 1 + len(rows)])}, set(traced))
    assert (key([3, 3]), key([6, 6])) == (True, False)  # the threshold, with no trace
    assert (key([3, 3], {False}), key([6, 6], {True})) == (False, True)  # near: reused
    assert (key([1, 1], {False}), key([9, 9], {True})) == (True, False)  # far: its own
    assert (key([3, 3], {False, True}), key([6, 6], {False, True})) == (True, False)
    choice.max_rows = 0
    assert key([1], {True}) is False  # never, however near
    choice.max_rows = float("inf")
    assert key([100], {False}) is True  # always, for a batch with loop rows
    assert key([0]) is False  # no loop rows: no weight gradients to take there
    # by default: the tagger at batch 16 (8.8 rows a launch) replays, the TreeLSTM at
    # batch 8 (14) does not (BENCHMARKS.md, "The replay threshold")
    default = WeightGradsChoice(choice.executor)
    assert default.key({"index": np.array([0, 9, 8]), "layout": np.array([0, 1, 3])})
    assert not default.key({"index": np.array([0, 14, 14]), "layout": np.array([0, 1, 3])})

    class Counting(ForwardSpy):
        traces: list = []

        def forward_traced(self, x, gradient_mode=None):  # Python runs only while tracing
            Counting.traces.append(gradient_mode.weights_once_per_step)

    trees, y = sign_data(24, seed=7)
    model = compiled(Counting(factories.tree_sign()))
    rows = [mean_loop_rows(model, trees[i:i + 2]) for i in range(0, 24, 2)]
    # a threshold the batches of 2 sit near, on both sides of it
    model.weight_grads.max_rows = t = 1.5
    assert t / 2 <= min(rows) < t < max(rows) <= 2 * t
    model.fit(trees, y, batch_size=2, epochs=1, verbose=0, shuffle=False)
    first = rows[0] <= model.weight_grads.max_rows
    assert set(Counting.traces) == {first}  # every batch ran on the first batch's trace


def test_the_default_replay_threshold_is_ten_rows_a_launch_per_loop_op():
    # TensorFlow's backward loop costs more an iteration the more ops its switch_case
    # has: the char tagger (four loop ops) replays up to 40 rows a launch (BENCHMARKS.md,
    # "The replay threshold")
    from types import SimpleNamespace

    from refold.compiler.training.steps import WeightGradsChoice
    from refold.examples.tagger.char_tagger import char_tagger_model
    from refold.examples.tagger.tagger import tagger_model
    chars = Model(char_tagger_model(6, "char", char_embed=3, char_hidden=2, hidden=3))
    words = Model(tagger_model(embed=3, hidden=3))
    assert [len(m.compiler.executor.layout.loop_ops) for m in (chars, words)] == [4, 1]
    assert (chars.weight_grads.max_rows, words.weight_grads.max_rows) == (40, 10)
    chars.weight_grads.max_rows = 10  # a threshold set stays as set
    assert chars.weight_grads.max_rows == 10
    batch = {"index": np.array([0, 30, 30]), "layout": np.array([0, 1, 3])}  # 30 rows a launch
    choices = [WeightGradsChoice(SimpleNamespace(batched_weight_grads=False, layout=SimpleNamespace(
        loop_ops=list(range(n)), segment_id={"group_size": 1}))) for n in (4, 1)]
    assert [c.key(batch) for c in choices] == [True, False]


def mean_loop_rows(model, trees) -> float:
    from refold.scheduler.weight_grads import mean_loop_rows
    plan = model.compiler.plan(trees, grouped=True)
    return mean_loop_rows(model.compiler.executor.layout, plan.feed.arrays)


def test_weight_gradients_once_per_step_train_as_every_iteration_does():
    # the choice made per batch changes no weight: forced either way (once per step
    # with the replayed backward loop or TensorFlow's), same training
    trees, y = sign_data(24, seed=6)

    def trained(max_rows: float, replay: bool = True) -> list:
        model = compiled(Model(factories.tree_sign(), seed=1))
        model.weight_grads.max_rows, model.weight_grads.replay = max_rows, replay
        model.fit(trees, y, batch_size=1, epochs=1, verbose=0, shuffle=False)
        model.fit(trees, y, batch_size=5, epochs=1, verbose=0, shuffle=False)
        return [w.numpy() for w in model.weights]

    every = trained(0)
    for once in (trained(float("inf")), trained(float("inf"), replay=False)):
        for a, b in zip(every, once, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    model = Model(factories.tree_sign())
    for bad in ("4", -1, float("nan"), True):
        with pytest.raises(ValueError, match="weight_grads.max_rows must be a number >= 0"):
            model.weight_grads.max_rows = bad
    for bad in (1, "no", None):
        with pytest.raises(ValueError, match="weight_grads.replay must be True or False"):
            model.weight_grads.replay = bad


def test_batches_of_small_launches_replay_the_loop_backward(monkeypatch):
    import refold.scheduler.reverse
    traced = []
    replay_loop = refold.scheduler.reverse.replay_loop
    monkeypatch.setattr(refold.scheduler.reverse, "replay_loop",
                        lambda *args: traced.append(1) or replay_loop(*args))
    trees, y = sign_data(120, seed=6)
    model = compiled(Model(factories.tree_sign(), seed=1))
    model.fit(trees, y, batch_size=60, epochs=1, verbose=0)
    assert traced == []  # wide launches: TensorFlow's backward loop
    model.fit(trees[:4], y[:4], batch_size=1, epochs=1, verbose=0)
    assert traced == [1]  # traced once, replayed at every step
    model = compiled(Model(factories.tree_sign(), seed=1))
    model.weight_grads.replay = False
    model.fit(trees[:4], y[:4], batch_size=1, epochs=1, verbose=0)
    assert traced == [1]


def test_shuffling_changes_per_epoch_and_is_reproducible():
    trees, y = sign_data(40, seed=5)

    def run(shuffle):
        model = compiled(Model(factories.tree_sign(), seed=3))
        model.fit(trees, y, batch_size=8, epochs=2, verbose=0, shuffle=shuffle)
        return [w.numpy() for w in model.weights]

    a, b, c = run(True), run(True), run(False)
    for x, z in zip(a, b):
        np.testing.assert_array_equal(x, z)
    assert any(not np.allclose(x, z) for x, z in zip(a, c))


def test_keras_callbacks_work_unchanged(tmp_path):
    trees, y = sign_data(64, seed=6)
    model = compiled(Model(factories.tree_sign()))
    ckpt = tmp_path / "best.weights.h5"
    log = tmp_path / "log.csv"
    tb = tmp_path / "tb"
    history = model.fit(
        trees[:48], y[:48], batch_size=16, epochs=30, verbose=0,
        validation_data=(trees[48:], y[48:]),
        callbacks=[keras.callbacks.EarlyStopping(monitor="loss", patience=1, min_delta=10.0),
                   keras.callbacks.ModelCheckpoint(str(ckpt), save_weights_only=True),
                   keras.callbacks.CSVLogger(str(log)),
                   keras.callbacks.TensorBoard(str(tb))])
    assert len(history.history["loss"]) == 2  # EarlyStopping stopped it
    with open(log) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 and {"loss", "accuracy", "val_loss", "val_accuracy"} <= set(rows[0])
    assert any(name.startswith("events") for _, _, files in os.walk(tb) for name in files)
    other = Model(factories.tree_sign(seed=9))
    other.load_weights(str(ckpt))
    for a, b in zip(model.weights, other.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_an_interrupted_save_leaves_the_old_checkpoint_intact(tmp_path, monkeypatch):
    model = Model(factories.tree_sign())
    path = tmp_path / "m.weights.h5"
    model.save_weights(str(path))
    before = path.read_bytes()

    def crash(self, filepath, *a, **k):
        with open(filepath, "wb") as f:
            f.write(b"half a file")
        raise KeyboardInterrupt

    monkeypatch.setattr(keras.Model, "save_weights", crash)
    with pytest.raises(KeyboardInterrupt):
        model.save_weights(str(path))
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["m.weights.h5"]


def test_resuming_from_a_checkpoint_continues_exactly(tmp_path):
    trees, y = sign_data(24, seed=7)  # 3 steps an epoch, resumed after the first

    def fresh():
        return compiled(Model.from_factory("tests.compiler.factories:tree_sign",
                                           {"seed": 1}, seed=5))

    straight = fresh()
    straight.fit(trees, y, batch_size=8, epochs=3, verbose=0)

    first = fresh()
    path = tmp_path / "model.keras"
    first.fit(trees, y, batch_size=8, epochs=1, verbose=0,
              callbacks=[keras.callbacks.ModelCheckpoint(str(path))])
    resumed = keras.models.load_model(str(path))
    assert isinstance(resumed, Model)
    resumed.fit(trees, y, batch_size=8, epochs=3, initial_epoch=1, verbose=0)
    for a, b in zip(straight.weights, resumed.weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-6, err_msg=a.name)


def test_an_exported_savedmodel_predicts_the_same_in_a_fresh_process(tmp_path):
    trees, y = sign_data(20, seed=8)
    model = compiled(Model(factories.tree_sign()))
    model.fit(trees, y, batch_size=8, epochs=1, verbose=0)
    path = tmp_path / "served"
    model.export(str(path), verbose=False)
    np.savez(tmp_path / "feed.npz", **model.packed_inputs(trees))
    script = textwrap.dedent(f"""
        import sys, numpy as np, tensorflow as tf
        assert "blocks" not in sys.modules and "compiler" not in sys.modules
        feed = dict(np.load({str(tmp_path / 'feed.npz')!r}))
        serve = tf.saved_model.load({str(path)!r}).signatures["serving_default"]
        out = serve(**{{k: tf.constant(v) for k, v in feed.items()}})["output"].numpy()
        np.save({str(tmp_path / 'out.npy')!r}, out)
        assert "blocks" not in sys.modules
    """)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    subprocess.run([sys.executable, "-c", script], check=True, cwd=tmp_path, env=env)
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"),
                               model.predict(trees, verbose=0), atol=1e-5)


def test_a_bad_example_names_its_index_in_the_dataset_and_the_block_path():
    trees, y = sign_data(50, seed=9)
    trees[37] = (1.0, "two")
    model = compiled(Model(factories.tree_sign()))
    with pytest.raises(InputError) as err:
        model.fit(trees, y, batch_size=8, epochs=1, verbose=0)
    assert err.value.example_index == 37
    assert "Scalar" in err.value.block_path
    assert str(err.value).startswith("example 37 at [1]: ")


def test_bad_examples_can_be_skipped_and_counted():
    trees, y = sign_data(50, seed=10)
    trees[3], trees[41] = "three", (None, 1.0)
    model = compiled(Model(factories.tree_sign(), on_bad_example="skip"))
    with pytest.warns(UserWarning, match="skipped 2 of 50 examples") as w:
        history = model.fit(trees, y, batch_size=8, epochs=1, verbose=0)
    assert "example 3: " in str(w[0].message)
    assert model.skipped_examples == [3, 41]
    assert np.isfinite(history.history["loss"][0])


@pytest.mark.parametrize("call", ["fit", "fit_validation", "evaluate", "fit_stream"])
def test_the_skip_warning_names_the_users_line(call):
    """Not a line of Refold or Keras: the call in the user's code that met the inputs."""
    trees, y = sign_data(12, seed=10)
    trees[3] = "three"
    model = compiled(Model(factories.tree_sign(), on_bad_example="skip"))
    run = {"fit": lambda: model.fit(trees, y, batch_size=4, verbose=0),
           "fit_validation": lambda: model.fit(trees[4:], y[4:], batch_size=4, verbose=0,
                                               validation_data=(trees, y)),
           "evaluate": lambda: model.evaluate(trees, y, batch_size=4, verbose=0),
           "fit_stream": lambda: model.fit(iter(list(zip(trees, y))), batch_size=4,
                                           verbose=0)}[call]
    with pytest.warns(UserWarning, match="not fit the block") as w:
        run()
    assert [(x.filename, x.lineno) for x in w] == [(__file__, run.__code__.co_firstlineno)]


def test_a_nan_loss_stops_training_and_keeps_the_last_good_checkpoint(tmp_path):
    keras.utils.set_random_seed(0)
    # a NaN feature on purpose: allowed in, to reach the loss
    block = td.Scalar(allow_nonfinite=True) >> td.Function(lambda x: x[:, None]) \
        >> td.FC(1, activation=None) >> td.Function(lambda z: tf.square(z[:, 0] - 1.0)) \
        >> td.Metric("loss")
    data = list(np.random.default_rng(0).normal(size=64))
    model = Model(block)
    model.compile(optimizer=keras.optimizers.SGD(0.01))
    path = tmp_path / "ckpt.weights.h5"
    ckpt = keras.callbacks.ModelCheckpoint(str(path), save_weights_only=True)
    model.fit(data, batch_size=16, epochs=1, verbose=0, callbacks=[ckpt])
    good = path.read_bytes()
    poisoned = list(data)
    poisoned[20] = float("nan")
    with pytest.raises(NonFiniteLossError, match=r"the loss is nan, on the examples at "
                                                 r"indices \[16, 17, .*, 31\] of x"):
        model.fit(poisoned, batch_size=16, epochs=3, verbose=0, shuffle=False,
                  callbacks=[ckpt])
    assert path.read_bytes() == good  # no epoch ended: nothing written
    assert all(np.isfinite(w.numpy()).all() for w in model.weights)
    model.save_weights(str(tmp_path / "again.weights.h5"))  # the weights are good
    assert (tmp_path / "again.weights.h5").exists()


def test_fit_without_any_loss_says_what_to_do():
    model = Model(factories.tree_sign())
    model.compile(optimizer="adam")
    trees, y = sign_data(8)
    with pytest.raises(ValueError, match="nothing to train on"):
        model.fit(trees, y, verbose=0)


def test_unknown_loss_metrics_and_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="not metrics of the block"):
        Model(factories.labelled_tree_sign(), loss_metrics=["los"])
    with pytest.raises(ValueError, match="on_bad_example"):
        Model(factories.tree_sign(), on_bad_example="ignore")
    model = compiled(Model(factories.tree_sign()))
    with pytest.raises(TypeError, match="x must be a list"):
        model.fit({"a": 1}, verbose=0)
    with pytest.raises(TypeError, match="does not support"):
        model.fit([1.0], [1], max_queue_size=1, verbose=0)


def test_expanding_many_inputs_shows_a_progress_bar_when_verbose(monkeypatch, capsys):
    monkeypatch.setattr(pipeline, "PROGRESS_AFTER", 10)
    trees, y = sign_data(24)
    model = compiled(Model(factories.tree_sign()))
    model.fit(trees[:20], y[:20], batch_size=32, epochs=1, verbose=1,
              validation_data=(trees[20:], y[20:]))
    out = capsys.readouterr().out
    assert "expanding 20 inputs" in out and "20/20" in out
    assert "of validation_data" not in out  # 4 inputs: too few for a bar
    model.predict(trees, verbose=1)
    out = capsys.readouterr().out
    assert "expanding 24 inputs" in out and "24/24" in out
    model.fit(trees, y, epochs=1, verbose=0)
    model.evaluate(trees, y, verbose=0)
    model.predict(trees, verbose=0)
    assert "expanding" not in capsys.readouterr().out


def test_sample_weights_weigh_the_loss():
    trees, y = sign_data(16, seed=12)
    model = compiled(Model(factories.tree_sign()))
    full = model.evaluate(trees, y, verbose=0, return_dict=True)["loss"]
    w = np.zeros(16, np.float32)
    w[:8] = 1.0
    half = model.evaluate(trees, y, sample_weight=w, verbose=0, batch_size=16,
                          return_dict=True)["loss"]
    logits = model.predict(trees[:8], verbose=0)
    want = float(SCCE(y[:8], logits)) * 8 / 16  # Keras averages over the whole batch
    assert half == pytest.approx(want, rel=1e-4)
    assert half != pytest.approx(full)


def test_predict_never_skips_a_bad_input():
    trees, _ = sign_data(10, seed=13)
    trees[4] = "four"
    model = Model(factories.tree_sign(), on_bad_example="skip")
    with pytest.raises(InputError) as err:
        model.predict(trees, verbose=0)
    assert err.value.example_index == 4


def test_skipping_keeps_labels_with_their_inputs():
    trees, y = sign_data(40, seed=14)
    bad = list(trees)
    bad[5], bad[22] = "five", None
    model = compiled(Model(factories.tree_sign(), on_bad_example="skip"))
    with pytest.warns(UserWarning):
        got = model.evaluate(bad, y, batch_size=40, verbose=0, return_dict=True)
    assert model.skipped_examples == [5, 22]
    keep = [i for i in range(40) if i not in (5, 22)]
    want = model.evaluate([trees[i] for i in keep], y[keep], batch_size=40, verbose=0,
                          return_dict=True)
    assert got == pytest.approx(want)


def test_validation_data_takes_label_lists_and_names_itself_in_errors():
    trees, y = sign_data(24, seed=15)
    model = compiled(Model(factories.tree_sign(), on_bad_example="skip"))
    history = model.fit(trees[:16], y[:16], batch_size=8, epochs=1, verbose=0,
                        validation_data=(trees[16:], list(y[16:])))
    assert "val_accuracy" in history.history
    bad = list(trees[16:])
    bad[2] = "two"
    with pytest.warns(UserWarning, match="examples of validation_data"):
        model.fit(trees[:16], y[:16], batch_size=8, epochs=1, verbose=0,
                  validation_data=(bad, y[16:]))
    assert model.skipped_validation_examples == [2]
    assert model.skipped_examples == []
    strict = compiled(Model(factories.tree_sign()))
    with pytest.raises(InputError, match=r"\(in validation_data\)") as err:
        strict.fit(trees[:16], y[:16], verbose=0, validation_data=(bad, y[16:]))
    assert err.value.example_index == 2


def test_every_epoch_sees_its_own_order_and_a_resumed_run_sees_the_same():
    trees, y = sign_data(24, seed=16)

    def orders(epochs, initial_epoch=0):
        model = compiled(Model(factories.tree_sign(), seed=7))
        seen = []
        plan = model.pipeline.plan

        def spy(batch, graphs=None):
            seen.append([trees.index(t) for t in batch])
            return plan(batch, graphs)
        model.pipeline.plan = spy
        model.fit(trees, y, batch_size=24, epochs=epochs, initial_epoch=initial_epoch,
                  verbose=0)
        return seen

    straight = orders(3)
    assert straight[0] != straight[1] != straight[2]
    assert sorted(straight[0]) == list(range(24))
    assert orders(3, initial_epoch=2) == straight[2:]


def test_labels_and_batch_sizes_are_checked_with_clear_errors():
    trees, y = sign_data(8, seed=17)
    model = compiled(Model(factories.tree_sign()))
    with pytest.raises(TypeError, match="y must hold numbers"):
        model.fit(trees, np.array(["a"] * 8), verbose=0)
    with pytest.raises(ValueError, match="one row per input"):
        model.fit(trees, 1, verbose=0)
    with pytest.raises(ValueError, match="y has 7 rows but there are 8 inputs"):
        model.fit(trees, y[:7], verbose=0)
    for bad in (0, -1, 2.5):
        with pytest.raises(ValueError, match="batch_size must be a positive int"):
            model.fit(trees, y, batch_size=bad, verbose=0)
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        model.predict(trees, batch_size=0, verbose=0)
    fold = Model(factories.labelled_tree_sign())
    fold.compile(optimizer="adam")
    data = [labelled(t) for t in trees]
    with pytest.raises(ValueError, match="sample_weight needs labels y"):
        fold.fit(data, sample_weight=np.ones(8), verbose=0)
    structured = Model(td.Map(td.Scalar()) >> td.Sum() >> td.Function(lambda s: (s, s)))
    structured.compile(optimizer="adam", loss="mse")
    with pytest.warns(UserWarning, match="no trainable weights"), \
            pytest.raises(ValueError, match="one tensor per input"):
        structured.fit([[1.0]], np.array([1.0]), verbose=0)


def test_evaluate_without_any_loss_says_what_to_do():
    model = Model(factories.tree_sign())
    model.compile(optimizer="adam", loss=SCCE)
    with pytest.raises(ValueError, match="nothing to train on"):
        model.evaluate(sign_data(4)[0], verbose=0)


def test_a_chosen_loss_metric_trains_and_survives_saving(tmp_path):
    trees, _ = sign_data(48, seed=18)
    data = [labelled(t) for t in trees]

    def build(**kw):
        return Model.from_factory("tests.compiler.factories:labelled_tree_sign",
                                  loss_metrics=["accuracy"], **kw)
    model = build()  # maximising nothing sensible, but it must be *this* metric's mean
    model.compile(optimizer=keras.optimizers.SGD(0.0))
    logs = model.evaluate(data, batch_size=48, verbose=0, return_dict=True)
    per_node = np.concatenate([model.block.eval(x)[1]["accuracy"] for x in data])
    assert logs["loss"] == pytest.approx(per_node.mean(), rel=1e-5)
    path = tmp_path / "m.keras"
    model.save(str(path))
    assert keras.models.load_model(str(path)).loss_metrics == ["accuracy"]


def test_regularization_losses_join_the_training_loss():
    trees, y = sign_data(16, seed=19)
    plain = compiled(Model(factories.tree_sign(seed=2)))
    penalised = compiled(Model(factories.tree_sign(seed=2, l2=0.5)))
    penalised.set_weights(plain.get_weights())
    a = plain.evaluate(trees, y, batch_size=16, verbose=0)[0]
    b = penalised.evaluate(trees, y, batch_size=16, verbose=0)[0]
    kernel = next(w for w in penalised.weights if "kernel" in w.path and "logits" in w.path)
    assert b - a == pytest.approx(0.5 * float(np.sum(kernel.numpy() ** 2)), rel=1e-4)


def test_a_depth_scheduled_model_predicts_the_same():
    trees, _ = sign_data(20, seed=20)
    block = factories.tree_sign()
    agenda = Model(block).predict(trees, verbose=0)
    depth = Model(block, scheduler="depth").predict(trees, verbose=0)
    np.testing.assert_allclose(agenda, depth, atol=1e-5)


def test_an_input_failing_inside_a_training_step_is_named():
    def checked_sqrt(x):
        tf.debugging.assert_non_negative(x, message="sqrt of a negative number")
        return tf.sqrt(x)

    block = td.Map(td.Scalar() >> td.Function(checked_sqrt)) >> td.Sum() \
        >> td.Function(lambda s: s[:, None]) >> td.FC(2, activation=None)
    xs = [[float(i + 1), 2.0] for i in range(30)]
    xs[17] = [1.0, -3.0]
    model = compiled(Model(block))
    with pytest.raises(InputError) as err:
        model.fit(xs, np.zeros(30, np.int32), batch_size=8, verbose=0)
    assert err.value.example_index == 17
    assert "sqrt of a negative number" in str(err.value)
    assert err.value.block_path.endswith("Function")


def test_the_graph_cache_can_be_turned_off():
    trees, y = sign_data(16, seed=21)
    cached, streaming = Model(factories.tree_sign()), Model(factories.tree_sign(), cache=False)
    np.testing.assert_allclose(cached.predict(trees, verbose=0),
                               streaming.predict(trees, verbose=0), atol=1e-6)
    # single-leaf trees are floats: small immutable values are not worth caching
    assert len(cached.compiler._cache) == sum(isinstance(t, tuple) for t in trees) > 0
    assert streaming.compiler._cache is None


def test_fromtensor_variables_are_trained_when_keras_can_track_them():
    target = keras.Variable(np.zeros(2, np.float32))
    block = td.Record((td.Vector(2), td.FromTensor(target))) \
        >> td.Function(lambda a, b: tf.reduce_sum((a - b) ** 2, 1)) >> td.Metric("loss")
    model = Model(block)
    model.compile(optimizer=keras.optimizers.SGD(0.1))
    model.fit([([1.0, 2.0], None)] * 8, batch_size=4, epochs=20, verbose=0)
    np.testing.assert_allclose(np.asarray(target), [1.0, 2.0], atol=1e-2)
    raw = td.Record((td.Vector(2), td.FromTensor(tf.Variable(np.zeros(2, np.float32))))) \
        >> td.Function(lambda a, b: tf.reduce_sum((a - b) ** 2, 1)) >> td.Metric("loss")
    with pytest.raises(TypeError, match="keras.Variable"):
        Model(raw)


def test_a_block_without_weights_still_reports_its_metrics():
    block = td.Scalar() >> td.Function(tf.square) >> td.Metric("loss")
    model = Model(block)
    model.compile(optimizer="sgd")
    with pytest.warns(UserWarning, match="no trainable weights"):
        history = model.fit([1.0, 2.0, 3.0], batch_size=3, verbose=0)
    assert history.history["loss"] == [pytest.approx(14 / 3)]


def test_expansion_in_worker_processes_trains_the_same():
    trees, y = sign_data(150, seed=22)

    def trained(**kw):
        model = compiled(Model(factories.tree_sign(seed=3), seed=1, **kw))
        model.fit(trees, y, batch_size=32, epochs=1, verbose=0)
        return model

    serial, parallel = trained(), trained(workers=2)
    try:
        assert parallel.compiler._pool is not None  # the workers did the expanding
        for a, b in zip(serial.weights, parallel.weights):
            np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-6)
    finally:
        parallel.compiler.close()


def test_the_on_batch_methods_take_a_list_of_inputs_as_one_batch():
    trees, labels = [(1.0, 2.0), -1.0, (0.5, (1.0, -3.0))], np.array([1, 0, 0])
    model = _on_batch_model()
    before = model.predict(trees, verbose=0)
    np.testing.assert_allclose(model.predict_on_batch(trees), before, rtol=1e-6, atol=1e-6)
    loss = model.test_on_batch(trees, labels)
    assert np.isclose(loss, model.evaluate(trees, labels, batch_size=3, verbose=0))
    logs = model.train_on_batch(trees, labels, return_dict=True)
    assert np.isclose(logs["loss"], loss)  # the loss before the step
    assert not np.allclose(model.predict(trees, verbose=0), before)
    with pytest.raises(ValueError, match="class_weight or sample_weight, not both"):
        model.train_on_batch(trees, labels, class_weight={0: 1.0}, sample_weight=np.ones(3))


def _on_batch_model(**compile_kwargs):
    keras.utils.set_random_seed(3)
    tree = td.ForwardDeclaration(td.PyObjectType(), td.TensorType((4,)))
    leaf = td.Scalar() >> td.Function(lambda x: x[:, None]) >> td.FC(4)
    pair = td.Record((tree(), tree())) >> td.Concat() >> td.FC(4)
    tree.resolve_to(td.OneOf(lambda t: isinstance(t, tuple), {False: leaf, True: pair}))
    model = Model(tree() >> td.FC(2, activation=None))
    model.compile(optimizer=keras.optimizers.SGD(0.5),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  **compile_kwargs)
    return model


def test_several_steps_per_execution_train_as_one_step_at_a_time():
    trees = [(1.0, 2.0), -1.0, (0.5, (1.0, -3.0)), 2.0, (-1.0, -1.0), 0.25, (3.0, 0.5)]
    labels = np.array([1, 0, 0, 1, 0, 1, 1])
    weights = []
    for spe in (1, 3):
        model = _on_batch_model(steps_per_execution=spe)
        history = model.fit(trees, labels, batch_size=2, epochs=2, verbose=0)
        weights.append((model.get_weights(), history.history["loss"]))
    for a, b in zip(weights[0][0], weights[1][0]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(weights[0][1], weights[1][1], rtol=1e-5)


def test_fit_and_predict_hand_keras_batch_indices_not_a_python_producer(monkeypatch):
    # the batches come from the model's BatchFeeder when the step asks; no
    # tf.data.Dataset.from_generator (a py_func thread per call) is built
    def refuse(*args, **kwargs):
        raise AssertionError("from_generator was used")
    monkeypatch.setattr(tf.data.Dataset, "from_generator", refuse)
    model = _on_batch_model()
    trees, labels = [(1.0, 2.0), -1.0, 0.5], np.array([1, 0, 1])
    model.fit(trees, labels, batch_size=2, epochs=1, verbose=0, validation_data=(trees, labels))
    assert model.predict(trees, batch_size=2, verbose=0).shape == (3, 2)


class _NeverRead:
    """A stand-in for Keras' iterator that fails if the step reads it."""

    def __next__(self):
        raise AssertionError("the step read Keras' iterator")


def test_the_train_and_test_steps_count_the_batches_of_a_pass_themselves():
    # reading Keras' tf.data iterator cost a tf.data call per step; its elements are
    # 0, 1, 2, ... of each pass, which the step function counts itself
    model = _on_batch_model()
    trees, labels = [(1.0, 2.0), -1.0, 0.5, (2.0, -3.0), 1.5], np.array([1, 0, 1, 0, 1])
    model.fit(trees, labels, batch_size=2, epochs=1, verbose=0)
    seen = []
    feeder = model.feed.of_role("train")
    batch = feeder.batch
    feeder.batch = lambda i: seen.append(i) or batch(i)
    first, second = _NeverRead(), _NeverRead()
    for _ in range(3):
        model.train_function(first)
    with pytest.raises(StopIteration):  # the feeder's 3 batches end the pass
        model.train_function(first)
    model.train_function(second)  # a new iterator is a new pass
    assert seen == [0, 1, 2, 0]
    model.evaluate(trees, labels, batch_size=2, verbose=0)
    logs = model.test_function(_NeverRead())
    assert np.isfinite(float(logs["loss"]))


def test_fit_with_fewer_steps_per_epoch_reads_on_across_epochs(monkeypatch):
    trees = [(1.0, 2.0), -1.0, 0.5, (2.0, -3.0), 1.5, -0.5, (1.0, 1.0)]
    labels = np.array([1, 0, 1, 0, 1, 0, 1])
    model = _on_batch_model()
    seen = []
    batch = pipeline.BatchFeeder.batch
    monkeypatch.setattr(pipeline.BatchFeeder, "batch",
                        lambda self, i: seen.append(i) or batch(self, i))
    model.fit(trees, labels, batch_size=2, epochs=3, steps_per_epoch=2, verbose=0,
              shuffle=False)
    assert seen == [0, 1, 2, 3, 0, 1]  # as Keras reads its range: on, then over


class _PredictLog(keras.callbacks.Callback):
    def __init__(self, stop_after: int | None = None):
        super().__init__()
        self.events, self.stop_after = [], stop_after

    def on_predict_begin(self, logs=None):
        self.events.append("begin")

    def on_predict_batch_begin(self, batch, logs=None):
        self.events.append(("batch", batch))

    def on_predict_batch_end(self, batch, logs=None):
        self.events.append(("end", batch, tuple(np.shape(logs["outputs"]))))
        if self.stop_after is not None and batch + 1 >= self.stop_after:
            self.model.stop_predicting = True

    def on_predict_end(self, logs=None):
        self.events.append("done")


def test_predict_callbacks_see_every_batch_and_may_stop_it():
    model = _on_batch_model()
    trees = [(1.0, 2.0), -1.0, 0.5, (2.0, -3.0), 1.5]
    log = _PredictLog()
    out = model.predict(trees, batch_size=2, verbose=0, callbacks=[log])
    assert out.shape == (5, 2) and isinstance(out, np.ndarray)
    assert log.events == ["begin", ("batch", 0), ("end", 0, (2, 2)), ("batch", 1),
                          ("end", 1, (2, 2)), ("batch", 2), ("end", 2, (1, 2)), "done"]
    stopped = _PredictLog(stop_after=2)
    part = model.predict(trees, batch_size=2, verbose=0, callbacks=[stopped])
    np.testing.assert_allclose(part, out[:4], atol=1e-6)
    assert stopped.events[-1] == "done" and ("batch", 2) not in stopped.events


def test_predict_with_several_steps_per_execution_gives_the_same_outputs():
    trees = [(1.0, 2.0), -1.0, 0.5, (2.0, -3.0), 1.5, (0.25, (1.0, 1.0)), -2.0]
    want = _on_batch_model().predict(trees, batch_size=2, verbose=0)
    model = _on_batch_model(steps_per_execution=3)
    log = _PredictLog()
    got = model.predict(trees, batch_size=2, verbose=0, callbacks=[log])
    np.testing.assert_allclose(got, want, atol=1e-6)
    # as Keras: one call (and callback pair) per 3 batches, named by its first and last
    assert [e for e in log.events if e[0] == "batch"] == [("batch", 0), ("batch", 3)]
    assert [e[1:] for e in log.events if e[0] == "end"] == [(2, (6, 2)), (5, (1, 2))]


def test_predict_shows_keras_progress_bar(capsys):
    model = _on_batch_model()
    model.predict([1.0, 2.0, 3.0], batch_size=1, verbose=1)
    assert "3/3" in capsys.readouterr().out


def test_the_feeders_range_skips_tf_datas_optimizations():
    # creating an optimized iterator cost ~10 ms per fit/predict call and per epoch
    model = _on_batch_model()
    ds = model.feed.lists([1.0, (2.0, 3.0)], None, None, 1, False, "predict",
                          with_labels=False).dataset()
    assert list(ds.as_numpy_iterator()) == [0, 1]
    options = ds.options()
    assert options.experimental_optimization.apply_default_optimizations is False
    assert options.autotune.enabled is False
    # building it cost ~11 ms per call: the next call with as many batches reuses it
    again = model.feed.lists([3.0, 4.0], None, None, 1, False, "predict",
                             with_labels=False).dataset()
    assert again is ds
    assert list(again.as_numpy_iterator()) == [0, 1]


def test_a_function_reading_weights_no_block_declares_is_named_in_a_warning():
    """A Keras layer called inside a plain function: Model would neither train nor
    save it."""
    import warnings
    dense = keras.layers.Dense(2, name="hidden_gates")
    cell = td.Vector(3) >> td.Function(lambda x: tf.tanh(dense(x)), name="my_cell")
    with pytest.warns(UserWarning, match=r"Function 'my_cell': <lambda> reads "
                      r"weights that no block declares.*hidden_gates/kernel"):
        model = Model(cell)
    assert not model.trainable_weights
    with warnings.catch_warnings():  # declared: the layer is the function, or is used
        warnings.simplefilter("error")  # by another block too
        Model(td.Vector(3) >> td.Function(dense))
        both = Model(td.Record((td.Vector(3) >> td.Function(lambda x: dense(x) * 2.0),
                                td.Vector(3) >> td.Function(dense))))
    assert {id(w) for w in both.trainable_weights} == {id(dense.kernel), id(dense.bias)}


def _uncalled(fn, name: str, size: int = 2) -> td.Function:
    """`td.Function(fn)` with its output type set rather than inferred: not called
    before the model's step is traced."""
    f = td.Function(fn, name=name, infer_output_type=False)
    f.set_output_type(td.TensorType((size,)))
    return f


def test_weights_read_by_a_function_not_called_before_tracing_are_named_at_the_trace():
    """`infer_output_type=False`: the model is made without calling the function, so
    the traced step's reads are checked instead, once per weight."""
    import warnings
    hidden, out = keras.layers.Dense(2, name="hidden_proj"), keras.layers.Dense(2, name="out")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = Model(td.Vector(3) >> _uncalled(lambda x: tf.tanh(hidden(x)), "my_proj")
                      >> td.Function(out))
    model.compile(optimizer="sgd", loss="mse")
    x, y = [[1.0, 2.0, 3.0], [0.0, 1.0, -1.0]], np.zeros((2, 2), np.float32)
    with pytest.warns(UserWarning, match=r"traced step reads weights that no block declares"
                      r".*hidden_proj/kernel.*infer_output_type=False: "
                      r"Function 'my_proj'") as seen:
        model.fit(x, y, batch_size=2, epochs=1, verbose=0)
    assert "out/kernel" not in str(seen[0].message)
    with warnings.catch_warnings():  # once per weight: not at the predict step's trace
        warnings.simplefilter("error")
        model.predict(x, verbose=0)
    assert {w.name for w in model.trainable_weights} == {"kernel", "bias"}  # out's only


def test_an_uncalled_function_over_declared_weights_traces_without_a_warning():
    import warnings
    dense = keras.layers.Dense(2, name="declared")
    model = Model(td.Vector(3) >> _uncalled(dense, "dense_fn"))
    model.compile(optimizer="sgd", loss="mse")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.fit([[1.0, 2.0, 3.0]], np.zeros((1, 2), np.float32), verbose=0)
        model.predict([[1.0, 2.0, 3.0]], verbose=0)
    assert {id(w) for w in model.trainable_weights} == {id(dense.kernel), id(dense.bias)}


class _PositiveOnly(keras.layers.Layer):
    """A layer that checks its inputs' values (zeros fail) and makes its weights in a
    sublayer at its first call (no `build` of its own)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.inner = keras.layers.Dense(2, name="inner")

    def call(self, x):
        tf.debugging.assert_positive(x, message="needs positive inputs")
        return self.inner(tf.math.log(x))


def test_the_unbuilt_layers_of_an_uncalled_function_are_built_when_the_model_is_made():
    """Keras makes a layer's weights at its first call, and the optimizer must know
    them before the first step: `Model` builds them on symbolic inputs (no value is
    computed, so the layer's check of its values does not fail)."""
    layer = _PositiveOnly(name="positive")
    model = Model(td.Vector(3) >> _uncalled(layer, "log_proj"))
    assert sorted(w.path for w in model.trainable_weights) == [
        "positive/inner/bias", "positive/inner/kernel"]
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    before = layer.inner.kernel.numpy().copy()
    model.fit([[1.0, 2.0, 3.0], [0.5, 1.0, 4.0]], np.ones((2, 2), np.float32), verbose=0)
    assert not np.allclose(layer.inner.kernel.numpy(), before)
    with pytest.raises(td.InputError, match=r"Function 'log_proj': positive failed on this "
                       r"input") as err:  # its check still runs, and names the input
        model.predict([[2.0, 1.0, 1.0], [0.0, 1.0, 1.0]], batch_size=2, verbose=0)
    assert err.value.example_index == 1


def test_an_uncalled_function_whose_layers_cannot_be_built_is_refused_with_its_path():
    class NeedsValues(keras.layers.Layer):
        def call(self, x):
            return keras.layers.Dense(2)(x.numpy())  # no values in a symbolic call
    with pytest.raises(TypeError, match=r"(?s)Function 'eager_only': building "
                       r"the Keras layers of .* failed.*Build them before"):
        Model(td.Vector(3) >> _uncalled(NeedsValues(), "eager_only"))
