"""Streams under `MultiWorkerMirroredStrategy`: two worker processes on 127.0.0.1 train
from files, each parsing only its shard (`compiler.feeding.shards`), to the weights of one
process training on the documented order; a run killed mid-epoch resumes
(`BackupAndRestore`) mid-stream; shards of unequal length end every epoch on both
workers at the same step (a hang would be killed by the harness' time limit and
fail the test); a bad line is skipped and counted by the worker that read it, or
raises there while the other worker stops at the same step.

Two runs of both workers (TensorFlow and the cluster start slowly): the first is
killed in its second epoch; the second resumes it, then trains on the unequal
files.
"""

from __future__ import annotations

import json
import os
import textwrap

import numpy as np
import pytest

import refold as td
from refold.compiler import Model
from refold.compiler.feeding import streams as streaming
from refold.compiler.feeding.shards import steps_in_order
from tests.compiler import factories
from tests.compiler.test_model import compiled, sign_data
from tests.compiler.test_multi_worker import run_workers

BATCH, STEPS, EPOCHS = 4, 4, 3   # 24 lines: 6 steps a pass, 12 steps in 3 epochs
UNEQUAL = (5, 9, 2)              # lines of the three files read by file
BAD = (1, 3)                     # file 1's 4th line does not parse

WORKER = textwrap.dedent("""
    import json, os, sys
    import numpy as np, tensorflow as tf, keras
    strategy = tf.distribute.MultiWorkerMirroredStrategy()   # reads TF_CONFIG
    import refold as td
    from refold.compiler.distribute.sharded_streams import WorkerFailedError
    from tests.compiler import test_multi_worker_streams as t
    from tests.compiler.test_multi_worker import exit_together
    out, stop = sys.argv[1], int(sys.argv[2])
    task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    with strategy.scope():
        model = t.build(workers=1)   # the stream planned in a forked process
    callbacks = [keras.callbacks.BackupAndRestore(os.path.join(out, f"backup{task}"))]
    if stop:
        class Kill(keras.callbacks.Callback):   # mid-epoch, after epoch 0's backup
            def on_train_batch_end(self, batch, logs=None):
                if self.model.feed.epoch == 1 and batch == 1:
                    exit_together(out, task)
        callbacks.append(Kill())
    history = t.train(model, out, callbacks)
    train_ids = list(t.PARSED["train"])
    # shards of unequal length, a bad line skipped, then raised
    with strategy.scope():
        skipping = t.build(on_bad_example="skip")
    t.PARSED["train"].clear()
    unequal = skipping.fit(t.unequal_lines(out), batch_size=t.BATCH, epochs=2, verbose=0)
    with strategy.scope():
        raising = t.build()
    try:
        raising.fit(t.unequal_lines(out), batch_size=t.BATCH, verbose=0)
        error = "none"
    except (td.InputError, WorkerFailedError) as e:
        error = f"{type(e).__name__}: {e}"
    np.savez(os.path.join(out, f"worker{task}.npz"), *model.get_weights(),
             history=json.dumps(history.history), train_ids=train_ids,
             unequal_weights=np.concatenate([w.ravel() for w in skipping.get_weights()]),
             unequal_history=json.dumps(unequal.history),
             unequal_skipped=np.array(skipping.skipped_examples, np.int64),
             unequal_ids=list(t.PARSED["train"]), error=error)
    print("DONE", task)
""")

PARSED: dict[str, list] = {"train": [], "val": []}


def parse_to(kind: str):
    """A `Lines` parser of `{"id", "tree", "label"}` lines that records the ids parsed."""
    def parse(line: str):
        item = json.loads(line)
        PARSED[kind].append(item["id"])
        return tuplify(item["tree"]), item["label"]
    return parse


def tuplify(t):
    return tuple(tuplify(s) for s in t) if isinstance(t, list) else t


def write(path: str, trees, labels, first_id: int = 0, bad_line: int | None = None) -> str:
    with open(path, "w") as f:
        for k, (t, y) in enumerate(zip(trees, labels)):
            if k == bad_line:
                f.write("{not json\n")
                continue
            f.write(json.dumps({"id": first_id + k, "tree": t, "label": int(y)}) + "\n")
    return path


def files(out: str) -> tuple[str, str]:
    """The training and validation files (written once, by the test)."""
    return os.path.join(out, "train.jsonl"), os.path.join(out, "val.jsonl")


def unequal_paths(out: str) -> list[str]:
    return [os.path.join(out, f"part{k}.jsonl") for k in range(len(UNEQUAL))]


def unequal_lines(out: str) -> td.Lines:
    return td.Lines(unequal_paths(out), parse_to("train"))


def write_files(out: str) -> None:
    trees, y = sign_data(24, seed=21)
    val, val_y = sign_data(5, seed=22)
    train_path, val_path = files(out)
    write(train_path, trees, y)
    write(val_path, val, val_y, first_id=100)
    more, more_y = sign_data(sum(UNEQUAL), seed=23)
    start = 0
    for k, (path, n) in enumerate(zip(unequal_paths(out), UNEQUAL)):
        write(path, more[start:start + n], more_y[start:start + n], first_id=200 + start,
              bad_line=BAD[1] if k == BAD[0] else None)
        start += n


def build(workers: int = 0, on_bad_example: str = "raise") -> Model:
    return compiled(Model(factories.tree_sign(hidden=4, seed=4), workers=workers,
                          on_bad_example=on_bad_example))


def train(model: Model, out: str, callbacks=()):
    train_path, val_path = files(out)
    return model.fit(td.Lines(train_path, parse_to("train")), batch_size=BATCH,
                     epochs=EPOCHS, steps_per_epoch=STEPS,
                     validation_data=td.Lines(val_path, parse_to("val")),
                     callbacks=list(callbacks), verbose=0)


def unequal_reference(out: str):
    """One process on the documented order: worker w reads files w, w+2, ...; step s
    is each worker's s-th chunk of 2 lines (positions counted over its files, the bad
    line among them), worker 0's first. The bad line is left out."""
    shards = []
    for w in range(2):
        items = []
        for path in unequal_paths(out)[w::2]:
            with open(path) as f:
                items.extend(f.read().splitlines())
        shards.append(items)
    chunks = [[s[i:i + 2] for i in range(0, len(s), 2)] for s in shards]
    steps = []
    for s in range(max(map(len, chunks))):
        lines = [line for c in chunks if s < len(c) for line in c[s]]
        steps.append([line for line in lines if not line.startswith("{not")])
    parse = parse_to("reference")
    PARSED.setdefault("reference", [])
    model = build()
    for _ in range(2):
        for lines in steps:
            items = [parse(line) for line in lines]
            model.train_on_batch([x for x, _ in items], np.array([y for _, y in items]))
    # the library's own statement of the order gives the same batches
    assert list(steps_in_order(td.Lines(unequal_paths(out)), BATCH, workers=2)) == [
        [line for c in chunks if s < len(c) for line in c[s]] for s in range(len(steps))]
    return np.concatenate([w.ravel() for w in model.get_weights()])


def results(out: str, task: int) -> dict:
    with np.load(os.path.join(out, f"worker{task}.npz")) as f:
        n = sum(k.startswith("arr_") for k in f.files)
        got = {k: f[k] for k in f.files if not k.startswith("arr_")}
        got["weights"] = [f[f"arr_{j}"] for j in range(n)]
    for k in ("history", "unequal_history"):
        got[k] = json.loads(str(got[k]))
    got["error"] = str(got["error"])
    return got


@pytest.mark.filterwarnings("ignore:Your input ran out of data")
def test_two_workers_train_from_files_each_on_its_shard_and_resume_mid_stream(tmp_path):
    out = str(tmp_path)
    write_files(out)
    run_workers(out, stop_after=1, script=WORKER)   # killed in epoch 1
    assert not os.path.exists(tmp_path / "worker0.npz")
    run_workers(out, script=WORKER)   # restores epoch 0's backup, reads on from step 4
    reference = build()
    history = train(reference, out).history
    got = [results(out, w) for w in range(2)]
    for g in got:
        for a, b in zip(g["weights"], reference.get_weights(), strict=True):
            np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5)
        assert sorted(g["history"]) == sorted(history)
        for k in history:   # the rerun's history: epochs 1 and 2
            np.testing.assert_allclose(g["history"][k], history[k][1:], atol=1e-5, err_msg=k)
    # by position: worker 0 parses lines 0, 1 of every 4, worker 1 lines 2, 3; the
    # first step once more before the loop (building the metrics), then the 8 steps
    # of epochs 1 and 2 (the 4 steps of epoch 0 read past, not parsed)
    # (and at most a few steps planned ahead when the run ends)
    for w, g in enumerate(got):
        ids = [int(i) for i in g["train_ids"]]
        assert all(i % 4 in (2 * w, 2 * w + 1) for i in ids), (w, ids)
        assert 2 + 8 * 2 <= len(ids) <= 2 + 2 * (8 + streaming.AHEAD + 2), (w, ids)
    assert set(got[0]["train_ids"]) | set(got[1]["train_ids"]) == set(range(24))

    # unequal shards: 7 and 9 lines, 4 and 5 steps of 2; every epoch ran 5 steps
    expected = unequal_reference(out)
    for g in got:
        np.testing.assert_allclose(g["unequal_weights"], expected, atol=1e-5, rtol=1e-5)
        assert len(g["unequal_history"]["loss"]) == 2
    # each worker parsed only its own files (and counted its own bad line)
    assert set(got[0]["unequal_ids"].tolist()) == {*range(200, 205), 214, 215}
    assert set(got[1]["unequal_ids"].tolist()) == set(range(205, 214)) - {208}
    assert got[0]["unequal_skipped"].tolist() == []
    assert got[1]["unequal_skipped"].tolist() == [BAD[1]]
    # raised by the worker that read it, naming file and line; the other stops too
    assert got[1]["error"].startswith("LineError") and "part1.jsonl:4" in got[1]["error"]
    assert got[0]["error"].startswith("WorkerFailedError") and "worker 1" in got[0]["error"]
