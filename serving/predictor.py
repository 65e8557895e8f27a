"""`Predictor`: Python inputs in, the exported model's outputs out.

`Model.export(path)` writes a SavedModel of the batched computation plus, in
`assets.extra/refold.json`, the block expression (or the factory call) it was
built from. A `Predictor` loads both: it rebuilds the block, expands and plans a
batch of inputs into the packed request tensors (`compiler.feeding.packed`), and runs
the SavedModel on them, in this process or on a TF Serving REST endpoint
(`serving.rest`). Serving is a consumer of the compiler: it uses the block
language, lowering, expansion and planning, never `compiler.model` (Keras
training, the input pipeline, the step functions).

>>> import os, tempfile, keras
>>> import refold as td
>>> from refold.compiler import Model
>>> keras.utils.set_random_seed(0)
>>> model = Model(td.Map(td.Scalar()) >> td.Sum() >> td.Function(lambda x: x[:, None]))
>>> path = os.path.join(tempfile.mkdtemp(), "sum")
>>> model.export(path, verbose=False)
>>> predictor = Predictor(path, safe_mode=False)   # a lambda inside: see Args
>>> predictor.predict([[1.0, 2.0], [3.0]]).tolist()
[[3.0], [3.0]]
>>> predictor.predict([[1.0, "two"]])
Traceback (most recent call last):
...
refold.blocks.errors.InputError: example 0 at [1]: Pipe[0] > Map > Scalar: expected ..., got ...
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from refold.blocks.serialization.config import deserialize
from refold.compiler.compiler import Compiler
from refold.compiler.feeding.packed import EXPORT_CONFIG, EXPORT_FORMAT, EXPORT_VERSION, pack
from refold.compiler.graphs.expansion import ExampleGraph
from refold.serving.requests import RequestError, conform, tensorflow_reason


class Predictor:
    """An exported model, answering batches of Python inputs.

    Args:
        path: the directory `Model.export(path)` wrote.
        safe_mode: refuse a block expression whose lambdas or closures are stored as
            Python bytecode (as `keras.models.load_model` does); pass False for an
            export you trust, or export a `Model.from_factory` model, whose file
            holds the factory's name instead of code.
        server: None to run the SavedModel in this process; or the address of the
            model on a TF Serving REST API (`"http://host:8501/v1/models/name"`),
            to which requests are posted (`serving.rest`).
        signature_name: the signature to call.

    `predict(inputs)` gives an array `[N, ...]`, one row per input, in order; an
    input that does not fit the block raises `blocks.InputError` naming its index
    and the block path, before anything is sent. `request(inputs)` gives the
    packed tensors and `predict_packed(arrays)` runs such a request, checked.
    """

    def __init__(self, path, safe_mode: bool = True, server: str | None = None,
                 signature_name: str = "serving_default"):
        self.path = os.fspath(path)
        self.config = read_export_config(self.path)
        model = self.config["model"]
        self.block = _rebuild(model, safe_mode)
        self.compiler = Compiler.create(self.block, scheduler=model.get("scheduler", "agenda"),
                                        cache=False)
        if self.compiler.program.reads_values:
            raise ValueError(f"{self.path}: its block's structure depends on computed values "
                             "(Unfold), so expanding an input runs the model; serve it with "
                             "Model.predict instead")
        self.inputs = self.config["inputs"]
        self._check_packs_alike()
        self.signature_name = signature_name
        if server is None:
            self._run = _InProcess(self.path, signature_name, self.inputs)
        else:
            from refold.serving.rest import RestClient
            self._run = RestClient(server, signature_name, self.config["output"]["dtype"])

    def _check_packs_alike(self) -> None:
        """The rebuilt block must pack requests as the exported one did."""
        segments = list(self.compiler.executor.layout.segments)
        if segments != self.config["segments"]:
            raise ValueError(
                f"{self.path}: the block rebuilt from {EXPORT_CONFIG} packs its requests "
                f"differently from the exported model ({len(segments)} index segments, "
                f"the export has {len(self.config['segments'])}); was it exported by "
                "another version of Refold, or has its factory changed since?")

    # --- inputs into requests ---------------------------------------------------------

    def expand(self, inputs: Sequence[Any], start: int = 0) -> list[ExampleGraph]:
        """Each input's expanded graph; a bad input raises `blocks.InputError` naming
        its index (plus `start`) and the block path."""
        return self.compiler.expand(_as_list(inputs), start)

    def request(self, inputs: Sequence[Any]) -> dict:
        """The packed tensors (numpy, by signature name) of a batch of inputs."""
        return self.request_expanded(self.expand(inputs))

    def request_expanded(self, examples: list[ExampleGraph]) -> dict:
        """The packed tensors of a batch of expanded inputs (`expand`)."""
        return pack(self.compiler.plan_expanded(examples, grouped=True), self.compiler.program)

    # --- running ----------------------------------------------------------------------

    def predict(self, inputs: Sequence[Any]) -> np.ndarray:
        """The model's output for each input, stacked: `[N, *output shape]`."""
        return self.run(self.request(inputs))

    def run(self, arrays: dict) -> np.ndarray:
        """Runs packed tensors made by `request` (trusted: checked only inside the
        SavedModel)."""
        return self._run(arrays)

    def predict_packed(self, arrays: dict) -> np.ndarray:
        """Runs a request of packed tensors (`request`), after checking its names,
        dtypes and shapes here and its consistency in the SavedModel; a bad one
        raises `RequestError` naming the tensor at fault."""
        return self._run(conform(arrays, self.inputs))

    def rest_request(self, inputs: Sequence[Any]) -> dict:
        """The JSON body TF Serving's REST `:predict` takes for these inputs."""
        from refold.serving.rest import request_body
        return request_body(self.request(inputs), self.signature_name)


class _InProcess:
    """Runs the SavedModel's signature in this process."""

    def __init__(self, path: str, signature_name: str, inputs: dict):
        self.saved = tf.saved_model.load(path)  # kept alive: the signature uses its weights
        if signature_name not in self.saved.signatures:
            raise ValueError(f"{path} has no signature {signature_name!r}; it has "
                             f"{sorted(self.saved.signatures)}")
        self.fn = self.saved.signatures[signature_name]
        self.inputs = inputs

    def __call__(self, arrays: dict) -> np.ndarray:
        return run_signature(self.fn, arrays)


def run_signature(fn, arrays: dict) -> np.ndarray:
    """`fn(**arrays)["output"]` as numpy; a failed request check raises `RequestError`."""
    try:
        out = fn(**{k: tf.constant(v) for k, v in arrays.items()})
    except tf.errors.InvalidArgumentError as e:
        reason = tensorflow_reason(e)
        if reason is None:
            raise
        raise RequestError(reason) from None
    return out["output"].numpy()


def read_export_config(path: str) -> dict:
    """The `assets.extra/refold.json` of an export, checked."""
    where = os.path.join(path, EXPORT_CONFIG)
    if not os.path.isdir(path):
        raise FileNotFoundError(f"{path}: no such directory (Model.export(path) writes one)")
    if not os.path.exists(where):
        raise ValueError(f"{path} has no {EXPORT_CONFIG}: it was not written by "
                         "Model.export, or by a Refold older than serving.Predictor "
                         "(export it again)")
    with open(where) as f:
        config = json.load(f)
    if config.get("format") != EXPORT_FORMAT or config.get("version") != EXPORT_VERSION:
        raise ValueError(f"{where} is not a Refold export description of version "
                         f"{EXPORT_VERSION} (format {config.get('format')!r}, version "
                         f"{config.get('version')!r})")
    return config


def _rebuild(model: dict, safe_mode: bool):
    """The block of an export's model config: deserialized, or made by its factory."""
    if "factory" in model:
        module, _, name = model["factory"].partition(":")
        return getattr(importlib.import_module(module), name)(**model["factory_kwargs"])
    return deserialize(model["block"], safe_mode=safe_mode)


def _as_list(inputs) -> list:
    if isinstance(inputs, (str, bytes, dict)) or not hasattr(inputs, "__iter__"):
        raise TypeError("Predictor takes a batch of inputs (a list), not a single input: "
                        f"{inputs!r:.80}")
    return list(inputs)
