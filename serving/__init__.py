"""Serving an exported model: Python inputs into requests, requests into answers.

`Model.export(path)` (in `compiler`) writes a SavedModel and the block it was built
from; this package is its client, which needs no training code:

- `Predictor`: loads an export, turns a batch of Python inputs into the packed
  request tensors (`compiler.signature`) and runs them, in this process or on a
  TF Serving REST API (`Predictor(path, server=url)`).
- `BatchingPredictor`: gathers concurrent single-input requests into shared batches.
- `rest`: TF Serving's REST request and response shapes, a client, and a stand-in
  server for trying it without TF Serving.
- `RequestError`: a request the model cannot take, naming the tensor at fault.
"""

from refold.serving.batching import BatchingPredictor
from refold.serving.predictor import Predictor
from refold.serving.requests import RequestError

__all__ = ["Predictor", "BatchingPredictor", "RequestError"]
