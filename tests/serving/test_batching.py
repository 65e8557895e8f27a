"""`serving.BatchingPredictor`: concurrent requests share batches, each caller gets
its own answer."""

from __future__ import annotations

import threading
import urllib.error

import numpy as np
import pytest

from refold.blocks.errors import InputError
from refold.serving import BatchingPredictor, Predictor
from tests.serving.exports import expressions


@pytest.fixture(scope="module")
def predictor(calculator):
    return Predictor(calculator[1])


def test_concurrent_callers_get_the_answers_of_one_at_a_time_predictions(predictor):
    xs = expressions(40, seed=8)
    alone = [predictor.predict([x])[0] for x in xs]
    got: dict = {}
    start = threading.Barrier(8)

    def client(c: int):
        start.wait()
        for i in range(c, len(xs), 8):
            got[i] = server.predict(xs[i])

    with BatchingPredictor(predictor, max_batch=16, max_wait=0.5) as server:
        threads = [threading.Thread(target=client, args=(c,)) for c in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert sorted(got) == list(range(len(xs)))
    for i, x in enumerate(xs):
        np.testing.assert_allclose(got[i], alone[i], atol=1e-5, err_msg=str(x))
    assert sum(server.batch_sizes) == len(xs)
    assert max(server.batch_sizes) > 1 and max(server.batch_sizes) <= 16


def test_a_batch_holds_at_most_max_batch_inputs(predictor):
    xs = expressions(10, seed=9)
    with BatchingPredictor(predictor, max_batch=3, max_wait=0.5) as server:
        futures = [server.submit(x) for x in xs]
        rows = [f.result() for f in futures]
    np.testing.assert_allclose(np.stack(rows), predictor.predict(xs), atol=1e-5)
    assert max(server.batch_sizes) <= 3 and sum(server.batch_sizes) == 10


def test_a_bad_input_fails_alone_in_its_callers_thread(predictor):
    xs = expressions(3, seed=10)
    with BatchingPredictor(predictor, max_wait=0.2) as server:
        futures = [server.submit(xs[0])]
        with pytest.raises(InputError, match="'/'") as err:
            server.submit({"op": "/", "left": 1, "right": 2})
        assert "node" in err.value.block_path
        futures += [server.submit(x) for x in xs[1:]]
        np.testing.assert_allclose(np.stack([f.result() for f in futures]),
                                   predictor.predict(xs), atol=1e-5)
    with pytest.raises(RuntimeError, match="closed"):
        server.submit(xs[0])


def test_a_failed_batch_reaches_every_caller_in_it(calculator):
    down = Predictor(calculator[1], server="http://127.0.0.1:9/v1/models/none")
    with BatchingPredictor(down, max_wait=0.2) as server:
        futures = [server.submit(x) for x in expressions(3, seed=11)]
        for f in futures:
            with pytest.raises(urllib.error.URLError):
                f.result()


def test_bad_options_are_refused(predictor):
    with pytest.raises(ValueError, match="max_batch"):
        BatchingPredictor(predictor, max_batch=0)
    with pytest.raises(ValueError, match="max_wait"):
        BatchingPredictor(predictor, max_wait=-1)
