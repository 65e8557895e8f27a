"""Serving an exported model: Python inputs into requests, requests into answers.

`Model.export(path)` (in `compiler`) writes a SavedModel and the block it was built
from; this package is its client, which needs no training code:

- `Predictor`: loads an export, turns a batch of Python inputs into the packed
  request tensors (`compiler.feeding.packed`) and runs them, in this process or on a
  TF Serving REST API (`Predictor(path, server=url)`).
- `BatchingPredictor`: gathers concurrent single-input requests into shared batches.
- `rest`: TF Serving's REST request and response shapes, a client, and a stand-in
  server for trying it without TF Serving.
- `RequestError`: a request the model cannot take, naming the tensor at fault.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from refold.lazy import lazy_exports
from refold.serving.requests import RequestError

# A predictor packs inputs with the compiler's expansion (client side), so it and the
# compiler load on first use; `import refold.serving` alone loads neither.
_LAZY = {"Predictor": "refold.serving.predictor", "BatchingPredictor": "refold.serving.batching"}

__all__ = ["Predictor", "BatchingPredictor", "RequestError"]

if TYPE_CHECKING:  # `_LAZY`'s names, seen by type checkers and the API pages (mkdocstrings)
    from refold.serving.batching import BatchingPredictor
    from refold.serving.predictor import Predictor


__getattr__, __dir__ = lazy_exports(globals(), _LAZY, __all__)
