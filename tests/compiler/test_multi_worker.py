"""`Model.fit` under `MultiWorkerMirroredStrategy`: two worker processes on
127.0.0.1 (`TF_CONFIG`) train as one process does, each expanding only its shard,
and a run stopped after its first epoch resumes there (`BackupAndRestore`).

Each run is bounded in time; on a failure or a timeout every worker is killed.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time

import keras
import numpy as np

from refold.compiler import Model
from tests.compiler import factories
from tests.compiler.test_model import labelled, sign_data

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TIMEOUT = 600  # seconds for one run of both workers (TensorFlow starts slowly under load)

WORKER = textwrap.dedent("""
    import json, os, sys, warnings
    import numpy as np, tensorflow as tf, keras
    warnings.filterwarnings("error", message=".*no block declares")  # replicas' copies
    strategy = tf.distribute.MultiWorkerMirroredStrategy()   # reads TF_CONFIG
    from tests.compiler.test_multi_worker import data, build, exit_together, train
    out, stop_after = sys.argv[1], int(sys.argv[2])
    task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    with strategy.scope():
        model = build()
    callbacks = [keras.callbacks.BackupAndRestore(os.path.join(out, f"backup{task}"))]
    if stop_after:
        class Stop(keras.callbacks.Callback):   # an interruption, after the backup
            def on_epoch_end(self, epoch, logs=None):
                if epoch + 1 == stop_after:
                    exit_together(out, task)
        callbacks.append(Stop())
    history = train(model, callbacks)
    cached = model.compiler.cached
    _, val = data()
    preds = np.array(model.evaluate(val, batch_size=3, verbose=0))
    np.savez(os.path.join(out, f"worker{task}.npz"), *model.get_weights(),
             cached=cached, preds=preds,
             history=json.dumps(history.history))
    print("DONE", task)
""")


def data():
    trees, _ = sign_data(12, seed=2)
    val, _ = sign_data(5, seed=3)
    return [labelled(t) for t in trees], [labelled(t) for t in val]


def build() -> Model:
    model = Model(factories.labelled_tree_sign(hidden=4, seed=4))
    model.compile(optimizer=keras.optimizers.Adam(0.05))
    return model


def train(model: Model, callbacks=()):
    x, val = data()
    return model.fit(x, batch_size=4, epochs=2, shuffle=False, validation_data=val,
                     callbacks=list(callbacks), verbose=0)


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def run_workers(out: str, stop_after: int = 0, n: int = 2, script: str = WORKER) -> list[int]:
    """Runs `n` workers of `script` (arguments: `out`, `stop_after`) to the end (or
    `TIMEOUT`, when every worker is killed: a hang fails the test, never stalls it);
    their exit codes: 3 when `stop_after` asks them to stop, else 0."""
    cluster = {"worker": [f"127.0.0.1:{p}" for p in free_ports(n)]}
    procs, logs = [], []
    for i in range(n):
        env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3",
                   TF_CONFIG=json.dumps({"cluster": cluster,
                                         "task": {"type": "worker", "index": i}}))
        log = open(os.path.join(out, f"log{i}-{stop_after}.txt"), "w")
        logs.append(log)
        procs.append(subprocess.Popen([sys.executable, "-c", script, out, str(stop_after)],
                                      cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT))
    deadline = time.monotonic() + TIMEOUT
    try:
        while any(p.poll() is None for p in procs):
            failed = any(p.returncode not in (None, 0, 3) for p in procs)
            if failed or time.monotonic() > deadline:
                raise AssertionError(f"workers {'failed' if failed else 'timed out'}:\n"
                                     + _tails(out, stop_after, n))
            time.sleep(0.2)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for log in logs:
            log.close()
    codes = [p.returncode for p in procs]
    assert codes == [3 if stop_after else 0] * n, f"exit codes {codes}:\n" + \
        _tails(out, stop_after, n)
    return codes


def exit_together(out: str, task: int, n: int = 2, code: int = 3) -> None:
    """Ends this worker process with `code` (an interruption) once all `n` workers
    have reached this point: a worker that left first could close its connections
    while the other still fetched the last step's collective buffers from it (which
    failed that worker with "Socket closed" on a loaded machine)."""
    open(os.path.join(out, f"stopping{task}"), "w").close()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not all(
            os.path.exists(os.path.join(out, f"stopping{i}")) for i in range(n)):
        time.sleep(0.05)
    time.sleep(0.5)  # the other may still be reading this one's marker
    os._exit(code)


def _tails(out: str, stop_after: int, n: int) -> str:
    return "\n".join(open(os.path.join(out, f"log{i}-{stop_after}.txt")).read()[-2000:]
                     for i in range(n))


def reference():
    """Training in this process, on one device: weights, history, evaluation."""
    model = build()
    history = train(model)
    _, val = data()
    return model.get_weights(), history.history, np.array(
        model.evaluate(val, batch_size=3, verbose=0))


def worker_results(out: str, n: int = 2):
    results = []
    for i in range(n):
        with np.load(os.path.join(out, f"worker{i}.npz")) as f:
            weights = [f[f"arr_{j}"] for j in range(len(f.files) - 3)]
            results.append((weights, json.loads(str(f["history"])), f["preds"],
                            int(f["cached"])))
    return results


def check_against_reference(out: str, history_too: bool = True, ref: tuple | None = None):
    """The workers' results against `ref` (`reference()`'s, computed here if not given)."""
    weights, history, preds = ref or reference()
    for got_weights, got_history, got_preds, _ in worker_results(out):
        assert len(got_weights) == len(weights)
        for a, b in zip(got_weights, weights):
            np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5)
        np.testing.assert_allclose(got_preds, preds, atol=1e-5)
        if history_too:
            assert sorted(got_history) == sorted(history)
            for k in history:
                np.testing.assert_allclose(got_history[k], history[k], atol=1e-5, err_msg=k)


def test_two_workers_stopped_and_resumed_train_as_one_process_each_expanding_its_shard(
        tmp_path):
    # one test, so that the suite starts worker processes twice rather than three times
    run_workers(str(tmp_path), stop_after=1)
    assert not os.path.exists(tmp_path / "worker0.npz")
    assert all(os.listdir(tmp_path / f"backup{i}") for i in range(2))
    run_workers(str(tmp_path))   # restores epoch 1's backup and trains epoch 2 only
    # equal to an uninterrupted run on one device, and the rerun's history is its
    # second epoch
    ref = reference()  # trained once, for both checks
    check_against_reference(str(tmp_path), history_too=False, ref=ref)
    _, history, _ = ref
    for _, got, _, _ in worker_results(str(tmp_path)):
        assert sorted(got) == sorted(history)
        for k in history:
            np.testing.assert_allclose(got[k], history[k][1:], atol=1e-5, err_msg=k)
    # batches of 4 in two parts of 2: each worker expands 6 of the 12 training
    # inputs, and of the 5 validation inputs ([0, 1] [2, 3] | [4] []) 3 and 2
    cached = [r[3] for r in worker_results(str(tmp_path))]
    assert cached == [6 + 3, 6 + 2], cached
