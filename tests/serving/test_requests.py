"""A malformed request gets an error naming the tensor at fault, from the client and
from the SavedModel itself (raw tensors, TensorFlow only)."""

from __future__ import annotations

import re

import numpy as np
import pytest
import tensorflow as tf

from refold.serving import Predictor, RequestError
from tests.serving.exports import expressions


@pytest.fixture(scope="module")
def served(calculator):
    """`(predictor, a good request of 3 inputs, the raw SavedModel signature)`."""
    predictor = Predictor(calculator[1])
    raw = tf.saved_model.load(calculator[1])
    return predictor, predictor.request(expressions(3, seed=4)), raw


def changed(request: dict, **tensors) -> dict:
    return {**{k: v.copy() for k, v in request.items()}, **tensors}


def test_a_good_request_runs_as_predict(served):
    predictor, request, _ = served
    np.testing.assert_allclose(predictor.predict_packed(request),
                               predictor.predict(expressions(3, seed=4)), atol=1e-6)
    as_lists = {k: v.tolist() for k, v in request.items()}  # Python ints: int64 arrays
    np.testing.assert_allclose(predictor.predict_packed(as_lists),
                               predictor.predict_packed(request), atol=1e-6)


@pytest.mark.parametrize("edit, message", [
    (lambda r: {k: v for k, v in r.items() if k != "layout"}, r"missing \['layout'\]"),
    (lambda r: {**r, "extra": np.zeros(1)}, r"unknown \['extra'\]"),
    (lambda r: changed(r, index=r["index"].astype(np.float32) + 0.5),
     "'index' must hold integers"),
    (lambda r: changed(r, layout=r["layout"][None]), r"'layout' must have shape \[None\]"),
    (lambda r: changed(r, batch_size=np.int32(3)), r"'batch_size' must have shape \[1\]"),
    (lambda r: changed(r, consts_float32=np.array(["a"])), "'consts_float32' must hold"),
    (lambda r: changed(r, index=r["index"].astype(np.int64) + 2**40),
     "'index' holds values outside int32"),
    (lambda r: [1, 2], "a request is a dict"),
])
def test_the_client_names_a_missing_unknown_or_mistyped_tensor(served, edit, message):
    predictor, request, _ = served
    with pytest.raises(RequestError, match=message):
        predictor.predict_packed(edit(request))


@pytest.mark.parametrize("edit, message", [
    (lambda r: changed(r, layout=r["layout"][:-1]), "'layout' must hold .* bounds"),
    (lambda r: changed(r, layout=np.array([0], np.int32)), "'layout' must hold .* bounds"),
    (lambda r: changed(r, layout=r["layout"] + 1), "'layout' must start at 0"),
    (lambda r: changed(r, layout=np.zeros_like(r["layout"])), "'layout' must end at the size"),
    (lambda r: changed(r, index=r["index"][:-1]), "'layout' must end at the size"),
    (lambda r: changed(r, consts_int32=r["consts_int32"][:-1]), "'consts_int32' must hold"),
    (lambda r: changed(r, metric_bounds=np.zeros(2, np.int32)), "'metric_bounds' must hold"),
    (lambda r: changed(r, batch_size=np.array([4], np.int32)), "'batch_size' is larger"),
    (lambda r: changed(r, batch_size=np.array([-1], np.int32)), "'batch_size' must be >= 0"),
])
def test_the_savedmodel_names_an_inconsistent_tensor(served, edit, message):
    predictor, request, raw = served
    bad = edit(request)
    with pytest.raises(RequestError, match=message):
        predictor.predict_packed(bad)
    # a client with TensorFlow only: the SavedModel's own check, not a split error
    with pytest.raises(tf.errors.InvalidArgumentError) as e:
        raw.signatures["serving_default"](**{k: tf.constant(v) for k, v in bad.items()})
    assert re.search("bad request: " + message.replace("'", r"\\'"), str(e.value))


def test_a_request_of_zero_inputs_gives_zero_rows(served):
    predictor, _, _ = served
    assert predictor.predict([]).shape == (0, 3)
