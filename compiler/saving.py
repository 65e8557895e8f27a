"""Writing a `Model` to files: atomic writes, refusal after a NaN, SavedModel export.

A checkpoint is written to a temporary file and renamed, so a crash mid-write
leaves the previous one whole; and none is written once a training loss was NaN,
so the last good weights survive a diverged run. The SavedModel for serving holds
the traced forward computation on packed arrays, so loading it needs TensorFlow only.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable

import keras
import tensorflow as tf


def atomic_write(filepath, overwrite: bool, write: Callable[[str], None]) -> None:
    """Calls `write(tmp)` on a temporary path beside `filepath`, then renames it."""
    path = os.fspath(filepath)
    if os.path.exists(path) and not overwrite:
        raise FileExistsError(f"{path} exists and overwrite=False")
    head, tail = os.path.split(path)
    tmp = os.path.join(head, f".tmp-{os.getpid()}-{tail}")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def refuse_after_nan(nan_seen: bool, filepath) -> bool:
    """True (with a warning to the caller's caller) if a training loss was NaN."""
    if nan_seen:
        warnings.warn(f"not writing {filepath}: a training loss was NaN, so the weights "
                      "are not trustworthy; the last checkpoint is left as it was",
                      stacklevel=3)
        return True
    return False


def write_saved_model(filepath, weights: list, signature: dict,
                      forward: Callable[[dict], tf.Tensor]) -> None:
    """A SavedModel whose `serving_default` maps the packed arrays (`signature`: name
    -> `tf.TensorSpec`) to `{"output": forward(arrays)}`, holding `weights`."""
    module = tf.Module()
    module.weights = [w.value if isinstance(w, keras.Variable) else w for w in weights]
    spec = {k: tf.TensorSpec(v.shape, v.dtype, name=k) for k, v in signature.items()}

    @tf.function(input_signature=[spec], autograph=False)
    def serve(arrays):
        return {"output": forward(arrays)}

    module.serve = serve
    tf.saved_model.save(module, str(filepath),
                        signatures={"serving_default": serve.get_concrete_function()})
