"""Streams of inputs (`compiler.feeding.streams`): generators, PyDatasets, files read line by
line, tf.data datasets; the bounded graph cache; clean shutdown after an early stop."""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor

import keras
import numpy as np
import pytest
import tensorflow as tf

import refold as td
from refold.blocks.errors import InputError
from refold.compiler import Compiler, Lines, Model
from refold.compiler.feeding import streams as streaming
from tests.compiler import factories
from tests.compiler.test_model import compiled, sign_data


def trained(x, y=None, cache=100, workers=0, **fit):
    """A tree-sign model after `fit(x, y, shuffle=False, **fit)`, with its history."""
    model = compiled(Model(factories.tree_sign(), cache=cache, workers=workers))
    try:
        history = model.fit(x, y, shuffle=False, verbose=0, **fit)
    finally:
        model.compiler.close()
    return model, history


def assert_same_weights(a: Model, b: Model) -> None:
    for u, v in zip(a.get_weights(), b.get_weights(), strict=True):
        np.testing.assert_array_equal(u, v)


class Counted:
    """A generator's items, counting how many were taken."""

    def __init__(self, items):
        self.items, self.taken = items, 0

    def __iter__(self):
        for item in self.items:
            self.taken += 1
            yield item


def test_a_generator_of_10x_the_cache_trains_as_its_list_with_the_cache_bounded():
    trees, y = sign_data(100, seed=1)
    trees = [(t, 0.0) for t in trees]  # every input a tuple: all cacheable
    streamed, _ = trained(((t, label) for t, label in zip(trees, y)), cache=10,
                          batch_size=10)
    assert streamed.compiler.cached == 10  # used, and bounded
    listed, _ = trained(trees, y, cache=10, batch_size=10)
    assert listed.compiler.cached == 10
    assert_same_weights(streamed, listed)


def test_the_cache_drops_the_least_recently_used_input():
    c = Compiler.create(td.Map(td.Scalar() >> td.Function(lambda x: x * 2)), cache=2)
    a, b, d = [1.0], [2.0], [3.0]
    c.expand([a, b])
    first_a = c.expand([a])[0]  # a is now the most recently used
    c.expand([d])               # drops b
    assert c.cached == 2
    assert c.expand([a])[0] is first_a
    assert [id(x) for x, _, _ in c._cache._entries.values()] == [id(d), id(a)]
    with pytest.raises(ValueError, match="cache must be True, False or a number"):
        Compiler.create(td.Scalar(), cache=-1)


class TreeBatches(keras.utils.PyDataset):
    """Batches of trees and labels; counts the epochs it saw end."""

    def __init__(self, trees, y, batch_size):
        super().__init__()
        self.trees, self.y, self.batch_size = trees, y, batch_size
        self.epochs_ended = 0

    def __len__(self):
        return -(-len(self.trees) // self.batch_size)

    def __getitem__(self, i):
        s = slice(i * self.batch_size, (i + 1) * self.batch_size)
        return self.trees[s], self.y[s]

    def on_epoch_end(self):
        self.epochs_ended += 1


def test_a_pydataset_of_python_batches_trains_as_its_list():
    trees, y = sign_data(60, seed=2)
    data = TreeBatches(trees, y, 16)
    streamed, history = trained(data, epochs=3)
    assert len(history.history["loss"]) == 3 and data.epochs_ended == 3
    listed, _ = trained(trees, y, epochs=3, batch_size=16)
    assert_same_weights(streamed, listed)
    np.testing.assert_allclose(streamed.predict(TreeBatches(trees, y, 7), verbose=0),
                               listed.predict(trees, verbose=0), atol=1e-6)


def test_a_file_read_line_by_line_trains_as_its_list(tmp_path):
    trees, y = sign_data(50, seed=3)
    path = tmp_path / "trees.jsonl"
    path.write_text("".join(json.dumps([t, int(label)]) + "\n" for t, label in zip(trees, y)))

    def parse(line: str):
        tree, label = json.loads(line)
        return tuplify(tree), label
    streamed, history = trained(Lines(path, parse), epochs=2, batch_size=8)
    assert len(history.history["loss"]) == 2
    listed, _ = trained(trees, y, epochs=2, batch_size=8)
    assert_same_weights(streamed, listed)


def tuplify(t):
    return tuple(tuplify(s) for s in t) if isinstance(t, list) else t


def test_lines_names_the_file_and_line_it_cannot_parse(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text("[1.0, 2.0]\n{oops\n")
    with pytest.raises(ValueError, match=r"x.jsonl:2: cannot parse the line.*'\{oops'"):
        list(Lines(path, json.loads))
    with pytest.raises(FileNotFoundError):
        Lines(tmp_path / "missing.txt")


def test_steps_per_epoch_reads_an_endless_generator_on_across_epochs():
    trees, y = sign_data(48, seed=4)
    items = Counted(itertools.cycle(list(zip(trees, y))))
    streamed, history = trained(iter(items), epochs=3, steps_per_epoch=2, batch_size=8)
    assert len(history.history["loss"]) == 3
    # 6 batches trained, a few planned ahead: bounded
    assert 48 <= items.taken <= 8 * (6 + streaming.AHEAD + 2)
    listed, _ = trained(trees, y, epochs=3, steps_per_epoch=2, batch_size=8)
    assert_same_weights(streamed, listed)


def test_a_generator_read_once_needs_steps_per_epoch_for_several_epochs():
    trees, y = sign_data(8)
    with pytest.raises(ValueError, match="can be read only once.*steps_per_epoch"):
        trained(zip(trees, y), epochs=2)
    with pytest.raises(ValueError, match="validation_data is a zip.*validation_steps"):
        trained(trees, y, epochs=2, validation_data=zip(trees, y))


def test_a_bad_streamed_example_is_named_by_its_position():
    trees, y = sign_data(40, seed=5)
    items = list(zip(trees, y))
    items[27] = ("not a tree", 1)
    with pytest.raises(InputError) as err:
        trained(iter(items), batch_size=8)
    assert err.value.example_index == 27 and "example 27" in str(err.value)
    assert "Scalar" in err.value.block_path
    with pytest.raises(InputError, match="example 27"):
        Model(factories.tree_sign()).predict((t for t, _ in items), verbose=0)
    leaf = next(i for i, t in enumerate(trees) if not isinstance(t, tuple))
    with pytest.raises(ValueError, match=rf"x\[{leaf}\] is a float, not an \(input, label"):
        trained(iter(trees), batch_size=8)


def test_bad_streamed_labels_are_named_by_their_position():
    trees, y = sign_data(20, seed=6)
    labels = [int(v) for v in y]
    labels[13] = 5
    with pytest.raises(ValueError, match=r"labels\[13\] is 5: sparse_categorical"):
        trained(zip(trees, labels), batch_size=8)


def test_on_bad_example_skip_leaves_bad_streamed_inputs_out():
    trees, y = sign_data(30, seed=7)
    items = list(zip(trees, y))
    items[4] = ("bad", 0)
    model = compiled(Model(factories.tree_sign(), on_bad_example="skip"))
    with pytest.warns(UserWarning, match="skipping the inputs of x.*example 4"):
        model.fit(iter(items), batch_size=8, verbose=0, shuffle=False)
    assert model.skipped_examples == [4]


def test_evaluate_predict_and_validation_data_take_streams():
    trees, y = sign_data(40, seed=8)
    model, history = trained(trees, y, batch_size=8, validation_data=iter(zip(trees, y)))
    assert "val_loss" in history.history
    listed = model.evaluate(trees, y, batch_size=8, verbose=0, return_dict=True)
    streamed = model.evaluate(zip(trees, y), batch_size=8, verbose=0, return_dict=True)
    assert streamed == pytest.approx(listed)
    assert history.history["val_loss"][-1] == pytest.approx(listed["loss"])
    np.testing.assert_allclose(model.predict(iter(trees), batch_size=6, verbose=0),
                               model.predict(trees, verbose=0), atol=1e-6)
    ds = tf.data.Dataset.from_tensor_slices(np.array([1.5, -2.0, 0.25], np.float32))
    np.testing.assert_allclose(model.predict(ds, verbose=0),
                               model.predict([1.5, -2.0, 0.25], verbose=0), atol=1e-6)
    endless = itertools.cycle(trees)
    assert model.predict(endless, batch_size=8, steps=3, verbose=0).shape == (24, 2)
    with pytest.raises(ValueError, match="no inputs in x"):
        model.predict(iter([]), verbose=0)


def test_a_fold_style_stream_of_inputs_with_their_own_losses_trains():
    trees, _ = sign_data(32, seed=9)
    from tests.compiler.test_model import labelled
    inputs = [labelled(t) for t in trees]

    def fit(x):
        model = Model(factories.labelled_tree_sign())
        model.compile(optimizer=keras.optimizers.Adam(0.05))
        model.fit(x, batch_size=8, epochs=1, verbose=0, shuffle=False)
        return model
    assert_same_weights(fit(iter(inputs)), fit(inputs))


def test_results_of_a_non_tensor_output_from_a_stream():
    model = Model(td.Map(td.Scalar() >> td.Function(lambda x: x * 2)))
    out = model.predict(iter([[1.0], [2.0, 3.0]]), batch_size=1, verbose=0)
    assert [[float(v) for v in r] for r in out] == [[2.0], [4.0, 6.0]]
    with pytest.raises(InputError, match="example 1"):
        model.predict(iter([[1.0], ["x"]]), batch_size=1, verbose=0)


# --- lists without cache --------------------------------------------------------------

def counting_tree_sign(counts: dict):
    """`factories.tree_sign` behind an `InputTransform` counting each root's expansions."""
    def count(t):
        counts[id(t)] = counts.get(id(t), 0) + 1
        return t
    return td.InputTransform(count) >> factories.tree_sign()


def test_a_list_without_cache_is_expanded_once_per_epoch():
    trees, y = sign_data(24, seed=14)
    counts: dict = {}
    model = compiled(Model(counting_tree_sign(counts), cache=False))
    model.fit(trees, y, batch_size=8, epochs=2, verbose=0)
    assert sorted(counts.values()) == [2] * 24  # once per epoch, no check up front
    counts.clear()
    model.predict(trees, batch_size=8, verbose=0)
    assert sorted(counts.values()) == [1] * 24


def test_a_bad_input_of_a_list_without_cache_is_named_by_its_index_in_x():
    trees, y = sign_data(40, seed=15)
    trees[29] = "not a tree"
    model = compiled(Model(factories.tree_sign(), cache=False))
    with pytest.raises(InputError) as err:
        model.fit(trees, y, batch_size=8, verbose=0)  # shuffled: found in any batch
    assert err.value.example_index == 29 and "Scalar" in err.value.block_path
    good = [t for i, t in enumerate(trees) if i != 29]
    with pytest.raises(InputError, match=r"example 3: .*\(in validation_data\)"):
        model.fit(good, y[1:], batch_size=8, verbose=0,
                  validation_data=(trees[26:], y[26:]))
    with pytest.raises(InputError, match="example 29"):
        model.fit(trees, y, batch_size=8, verbose=0, validation_split=0.5)
    with pytest.raises(InputError, match="example 29"):
        model.predict(trees, batch_size=8, verbose=0)
    skipping = compiled(Model(factories.tree_sign(), cache=False, on_bad_example="skip"))
    with pytest.warns(UserWarning, match="skipped 1 of 40"):
        skipping.fit(trees, y, batch_size=8, verbose=0)
    assert skipping.skipped_examples == [29]


# --- worker processes (Model(workers=n)) ------------------------------------------------

def test_worker_processes_train_a_stream_to_the_weights_of_its_list():
    trees, y = sign_data(120, seed=11)
    streamed, history = trained(zip(trees, y), cache=False, workers=2, batch_size=8)
    assert len(history.history["loss"]) == 1
    listed, _ = trained(trees, y, cache=False, batch_size=8)
    assert_same_weights(streamed, listed)
    endless = Counted(itertools.cycle(list(zip(trees, y))))
    streamed, _ = trained(iter(endless), workers=2, epochs=3, steps_per_epoch=5,
                          batch_size=8)
    listed, _ = trained(trees, y, epochs=3, steps_per_epoch=5, batch_size=8)
    assert_same_weights(streamed, listed)
    # 15 batches trained; at most 2 in the workers and AHEAD in the queue beyond
    assert 8 * 15 <= endless.taken <= 8 * (15 + 2 + streaming.AHEAD + 1)


def test_a_validation_stream_read_while_training_batches_are_in_the_workers():
    trees, y = sign_data(64, seed=16)

    def run(workers: int):
        return trained(itertools.cycle(list(zip(trees, y))), workers=workers, epochs=2,
                       steps_per_epoch=4, batch_size=8,
                       validation_data=Reread(trees[:24], y[:24]))
    (with_workers, h1), (without, h2) = run(2), run(0)
    assert_same_weights(with_workers, without)
    assert h1.history["val_loss"] == pytest.approx(h2.history["val_loss"], abs=1e-6)


class Reread:
    """A stream that can be read again (as `Lines` is): `(tree, label)` pairs."""

    def __init__(self, trees, y):
        self.items = list(zip(trees, y))

    def __iter__(self):
        return iter(self.items)


def test_worker_processes_name_a_bad_streamed_example_or_skip_it():
    trees, y = sign_data(40, seed=12)
    items = list(zip(trees, y))
    items[27] = ("not a tree", 1)
    model = compiled(Model(factories.tree_sign(), workers=2))
    try:
        with pytest.raises(InputError) as err:
            model.fit(iter(items), batch_size=8, verbose=0)
        assert err.value.example_index == 27 and "Scalar" in err.value.block_path
        # the workers survive a bad batch: the next call runs on them
        model.fit(iter(items[:24]), batch_size=8, verbose=0)
    finally:
        model.compiler.close()
    items[4] = ("bad", 0)
    model = compiled(Model(factories.tree_sign(), on_bad_example="skip", workers=2))
    try:
        with pytest.warns(UserWarning, match="skipping the inputs of x.*example 4"):
            model.fit(iter(items), batch_size=8, verbose=0)
    finally:
        model.compiler.close()
    assert model.skipped_examples == [4, 27]


def test_an_error_raised_in_a_worker_process_is_raised_by_fit():
    def refuse(x):
        if x == [13.0]:
            raise ZeroDivisionError("thirteen")
        return x
    block = td.InputTransform(refuse) >> td.Vector(1) >> td.FC(2)
    model = Model(block, workers=1)
    model.compile(optimizer="sgd", loss=keras.losses.MeanSquaredError())
    try:
        data = [([float(v)], [0.0, 0.0]) for v in range(20)]
        with pytest.raises(Exception, match="thirteen"):
            model.fit(iter(data), batch_size=4, verbose=0)
        assert model.predict(iter([[1.0], [2.0]]), verbose=0).shape == (2, 2)
    finally:
        model.compiler.close()


def test_a_killed_worker_is_reported_and_forked_anew_on_the_next_call():
    import signal
    trees, y = sign_data(32, seed=13)
    model = compiled(Model(factories.tree_sign(), workers=2))
    try:
        model.fit(zip(trees, y), batch_size=8, verbose=0)
        workers = model.compiler.stream_workers()
        os.kill(workers._procs[0].pid, signal.SIGKILL)
        workers._procs[0].join(10)
        replies = workers.map(range(4), lambda i: ([trees[i]], False))
        with pytest.raises(RuntimeError, match="worker process .* is not running"):
            list(replies)
        model.fit(zip(trees, y), batch_size=8, verbose=0)  # forked anew
        assert all(p.is_alive() for p in workers._procs)
    finally:
        model.compiler.close()
    assert not [p for p in multiprocessing.active_children()
                if p.name.startswith("refold-stream-worker")]


@pytest.mark.parametrize("nice", [None, 5])
def test_worker_processes_run_at_the_priority_asked_for(nice):
    from refold.compiler.feeding.process_pool import StreamWorkers
    parent = os.getpriority(os.PRIO_PROCESS, 0)
    workers = StreamWorkers(lambda payload: os.getpriority(os.PRIO_PROCESS, 0), 2,
                            nice=nice)
    try:
        replies = [reply for _, reply in workers.map(range(4), lambda i: i)]
    finally:
        workers.close()
    lower = StreamWorkers.nice if nice is None else nice
    assert replies == [min(19, parent + lower)] * 4
    assert os.getpriority(os.PRIO_PROCESS, 0) == parent


# --- clean shutdown --------------------------------------------------------------------

SHUTDOWN_SCRIPT = textwrap.dedent("""
    import multiprocessing, sys, threading
    import keras
    from refold.compiler import Model
    from tests.compiler import factories
    from tests.compiler.test_model import compiled, sign_data

    class StopMidEpoch(keras.callbacks.Callback):  # as TerminateOnNaN stops
        def on_train_batch_end(self, batch, logs=None):
            if batch == 2:
                self.model.stop_training = True

    class CtrlC(keras.callbacks.Callback):  # as Ctrl-C interrupts
        def on_train_batch_end(self, batch, logs=None):
            if batch == 1:
                raise KeyboardInterrupt

    trees, y = sign_data(200)
    stop_early = [StopMidEpoch(), keras.callbacks.EarlyStopping(monitor="loss", patience=0,
                                                                min_delta=100.0)]

    def endless():
        while True:
            yield from zip(trees, y)

    listed = compiled(Model(factories.tree_sign(), cache=False))
    streamed = compiled(Model(factories.tree_sign(), cache=False))
    workers = compiled(Model(factories.tree_sign(), cache=False, workers=2))
    for _ in range(int(sys.argv[1])):
        listed.fit(trees, y, batch_size=8, epochs=3, verbose=0, callbacks=stop_early)
        streamed.fit(endless(), batch_size=8, epochs=3, steps_per_epoch=20, verbose=0,
                     callbacks=stop_early)
        streamed.fit(zip(trees, y), batch_size=8, verbose=0, callbacks=[StopMidEpoch()])
        workers.fit(endless(), batch_size=64, epochs=2, steps_per_epoch=4, verbose=0,
                    callbacks=stop_early)
        workers.fit(zip(trees, y), batch_size=8, verbose=0, callbacks=[StopMidEpoch()])
        try:
            workers.fit(endless(), batch_size=8, steps_per_epoch=20, verbose=0,
                        callbacks=[CtrlC()])
            raise AssertionError("not interrupted")
        except KeyboardInterrupt:
            pass
        try:
            workers.fit(iter([*zip(trees, y)][:30] + [("bad", 0)]), batch_size=8,
                        verbose=0)
            raise AssertionError("no error")
        except ValueError as e:
            assert "example 30" in str(e), e
        left = [t.name for t in threading.enumerate() if t.name == "refold-stream"]
        assert not left, left
        procs = [p.name for p in multiprocessing.active_children()]
        assert sorted(procs) == ["refold-stream-worker-0", "refold-stream-worker-1"], procs
    print("stopped", flush=True)
""")


def test_an_early_stop_with_streams_or_without_cache_exits_promptly_10_of_10():
    """Ten tries of each early stop (mid-epoch, as TerminateOnNaN stops, and at an
    epoch's end, EarlyStopping) over a list without cache, a stream, an endless
    stream, and streams into a model with two worker processes (early stops, a
    KeyboardInterrupt mid-epoch, a bad example): no planning thread outlives a fit,
    the workers stay two, and the two processes (five tries each) exit with the
    workers still running (daemons, ended at exit)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": root, "TF_CPP_MIN_LOG_LEVEL": "3"}

    def run(tries: int) -> tuple:
        """(printed, seconds from the fits' end to the exit, return code, stderr)."""
        p = subprocess.Popen([sys.executable, "-c", SHUTDOWN_SCRIPT, str(tries)], cwd=root,
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
        line = p.stdout.readline()  # blocks until the fits are done
        stopped = time.monotonic()
        try:
            p.wait(timeout=120)
        except subprocess.TimeoutExpired:  # hung at exit
            p.kill()
            p.wait()
        return line.strip(), time.monotonic() - stopped, p.returncode, p.stderr.read()

    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(run, [5, 5]))
    for printed, _, code, err in runs:
        assert printed == "stopped" and code == 0, err[-3000:]
    # TensorFlow's own teardown takes seconds on a loaded machine (a plain fit's too)
    assert max(seconds for _, seconds, _, _ in runs) < 60, [r[1] for r in runs]
