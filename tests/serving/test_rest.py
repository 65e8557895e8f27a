"""TF Serving's REST shape: a JSON request round-trips through the SavedModel's
signature in-process, and the client talks HTTP to a stand-in server."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf

from refold.serving import Predictor, RequestError
from refold.serving.rest import RestServer, answer, outputs_of, request_body
from tests.serving.exports import expressions


def test_a_json_request_round_trips_through_the_signature(calculator):
    model, path = calculator
    predictor = Predictor(path)
    xs = expressions(5, seed=5)
    body = json.loads(json.dumps(predictor.rest_request(xs)))  # through text, as sent
    assert body["signature_name"] == "serving_default"
    assert set(body["inputs"]) == set(predictor.inputs)
    saved = tf.saved_model.load(path)
    reply = json.loads(json.dumps(answer(saved.signatures, body, predictor.inputs)))
    np.testing.assert_allclose(outputs_of(reply), model.predict(xs, verbose=0), atol=1e-5)


def test_a_bad_json_request_gets_an_error_reply(calculator):
    predictor = Predictor(calculator[1])
    saved = tf.saved_model.load(calculator[1])
    body = predictor.rest_request(expressions(2, seed=6))
    body["inputs"]["layout"] = body["inputs"]["layout"][:-1]
    reply = answer(saved.signatures, body, predictor.inputs)
    assert reply["error"].startswith("bad request: 'layout' must hold")
    with pytest.raises(RequestError, match="'layout' must hold"):
        outputs_of(reply)
    assert "no signature 'other'" in answer(saved.signatures, {**body, "signature_name": "other"},
                                            predictor.inputs)["error"]
    assert "'inputs'" in answer(saved.signatures, {"instances": []}, predictor.inputs)["error"]


def test_the_client_predicts_over_http(calculator):
    model, path = calculator
    xs = expressions(7, seed=7)
    with RestServer(path, name="calculator") as server:
        remote = Predictor(path, server=server.url)
        np.testing.assert_allclose(remote.predict(xs), model.predict(xs, verbose=0), atol=1e-5)
        bad = remote.request(xs)
        bad["consts_int32"] = bad["consts_int32"][:-1]
        with pytest.raises(RequestError, match="'consts_int32' must hold"):
            remote.run(bad)


def test_a_request_body_is_columnar_json():
    body = request_body({"index": np.array([1, 2], np.int32),
                         "consts_float32": np.array([0.5], np.float32)}, "sig")
    assert json.loads(json.dumps(body)) == {
        "signature_name": "sig", "inputs": {"index": [1, 2], "consts_float32": [0.5]}}
