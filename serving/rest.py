"""TF Serving's REST API shape: request bodies, responses, a client and a stand-in server.

TF Serving answers `POST {server}/v1/models/{name}:predict` with a JSON body
`{"signature_name": "serving_default", "inputs": {"index": [...], "layout": [...],
...}}` (the "columnar" form: one list per named tensor, here the packed tensors of
`compiler.feeding.packed`), and replies `{"outputs": [[...], ...]}` (the only output,
one row per input) or, for a bad request, HTTP 400 with `{"error": "..."}`.
`request_body` and `outputs_of` build and read those; `RestClient` posts them
(`Predictor(path, server=url)` uses it). `answer` does in-process what TF Serving
does with a body, on a loaded SavedModel, and `RestServer` serves it over HTTP:
a stand-in for trying the client without TF Serving (and what the tests talk to).

>>> import numpy as np
>>> body = request_body({"batch_size": np.array([2], np.int32)})
>>> json.dumps(body)
'{"signature_name": "serving_default", "inputs": {"batch_size": [2]}}'
>>> outputs_of({"outputs": [[0.5], [1.5]]}).tolist()
[[0.5], [1.5]]
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

from refold.serving.requests import RequestError, conform


def request_body(arrays: dict, signature_name: str = "serving_default") -> dict:
    """The JSON-able body of a `:predict` request for packed tensors `arrays`."""
    return {"signature_name": signature_name,
            "inputs": {k: np.asarray(v).tolist() for k, v in arrays.items()}}


def outputs_of(response: dict, dtype: str = "float32") -> np.ndarray:
    """The output rows (of `dtype`) of a `:predict` response; its `error` raises
    `RequestError`."""
    if "error" in response:
        raise RequestError(response["error"])
    outputs = response["outputs"]
    if isinstance(outputs, dict):  # several named outputs: ours is "output"
        outputs = outputs["output"]
    return np.asarray(outputs, dtype)


def answer(signatures, body: dict, spec: dict) -> dict:
    """What TF Serving replies to `body` for a SavedModel whose signatures are
    `signatures` (name -> concrete function) taking tensors described by `spec`
    (the export's `inputs`): `{"outputs": ...}`, or `{"error": ...}`."""
    from refold.serving.predictor import run_signature
    name = body.get("signature_name", "serving_default") if isinstance(body, dict) else None
    if not isinstance(body, dict) or "inputs" not in body:
        return {"error": "bad request: the body must be a JSON object with 'inputs'"}
    if name not in signatures:
        return {"error": f"bad request: no signature {name!r}"}
    try:
        return {"outputs": run_signature(signatures[name], conform(body["inputs"], spec))
                .tolist()}
    except RequestError as e:
        return {"error": str(e)}


class RestClient:
    """Posts packed requests to a model on a TF Serving REST API.

    Args:
        url: the model's address, `"http://host:8501/v1/models/name"` (a
            `/versions/N` suffix picks a version); `:predict` is appended.
        signature_name: the signature to call.
        dtype: the output's dtype.
        timeout: seconds to wait for an answer.
    """

    def __init__(self, url: str, signature_name: str = "serving_default",
                 dtype: str = "float32", timeout: float = 30.0):
        self.url = url.rstrip("/") + ":predict"
        self.signature_name = signature_name
        self.dtype = dtype
        self.timeout = timeout

    def __call__(self, arrays: dict) -> np.ndarray:
        data = json.dumps(request_body(arrays, self.signature_name)).encode()
        req = urllib.request.Request(self.url, data=data,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                return outputs_of(json.loads(r.read()), self.dtype)
        except urllib.error.HTTPError as e:
            text = e.read().decode(errors="replace")
            try:
                reply = json.loads(text)
            except ValueError:
                reply = {"error": f"HTTP {e.code} from {self.url}: {text[:200]}"}
            return outputs_of(reply if "error" in reply else
                              {"error": f"HTTP {e.code} from {self.url}"})


class RestServer:
    """A model's `:predict` endpoint over HTTP, answered by `answer`, on
    `http://host:port/v1/models/{name}` (`url`). Start with `start()` (a daemon
    thread), stop with `close()`; also a context manager.

    Args:
        path: an export directory (`Model.export`).
        name: the model's name in the URL.
        port: 0 picks a free port.
    """

    def __init__(self, path, name: str = "model", host: str = "127.0.0.1", port: int = 0):
        import tensorflow as tf

        from refold.serving.predictor import read_export_config
        self.saved = tf.saved_model.load(str(path))
        spec = read_export_config(str(path))["inputs"]
        route = f"/v1/models/{name}:predict"
        saved = self.saved

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                if self.path != route:
                    return self._reply(404, {"error": f"no such endpoint {self.path}"})
                try:
                    body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                except ValueError as e:
                    return self._reply(400, {"error": f"bad request: not JSON ({e})"})
                reply = answer(saved.signatures, body, spec)
                self._reply(400 if "error" in reply else 200, reply)

            def _reply(self, code: int, reply: dict):
                data = json.dumps(reply).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):  # quiet
                pass

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.url = f"http://{host}:{self.httpd.server_address[1]}/v1/models/{name}"
        self._thread: threading.Thread | None = None

    def start(self) -> RestServer:
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True,
                                        name="refold-rest-server")
        self._thread.start()
        return self

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> RestServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
