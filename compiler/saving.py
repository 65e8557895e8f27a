"""Writing a `Model` to files and reading it back: atomic writes, refusal after a
NaN, checked loading, SavedModel export.

A checkpoint is written to a temporary file and renamed, so a crash mid-write
leaves the previous one whole; and none is written once a training loss was NaN,
so the last good weights survive a diverged run. `load_model` is
`keras.models.load_model` with the file checked first, so that a truncated or
foreign file says so (Keras reports any unreadable file as "File not found").
The SavedModel for serving holds the traced forward computation on packed
arrays, so loading it needs TensorFlow only.
"""

from __future__ import annotations

import json
import os
import warnings
import zipfile
from collections.abc import Callable

import keras
import numpy as np
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


def refuse_after_nan(nan_seen: bool, filepath, stacklevel: int = 3) -> bool:
    """True (with a warning to the caller's caller) if a training loss was NaN."""
    if nan_seen:
        warnings.warn(f"not writing {filepath}: a training loss was NaN, so the weights "
                      "are not trustworthy; the last checkpoint is left as it was",
                      stacklevel=stacklevel)
        return True
    return False


class ModelFiles:
    """What a `Model` writes (`save`, `save_weights`, `export`), and when it refuses.

    Atomically, and nothing once a training loss was NaN (`diverged`), so that the
    last good checkpoint survives a diverged run.

    Apart from `Model` so that the Keras class holds the Keras hooks and this one
    the writing; loaded weights count as good again (`loaded`).

    Args:
        model: the `Model` (`export` reads its program, pipeline, forward pass and
            config).
    """

    def __init__(self, model):
        self.model = model
        self.diverged = False

    def noticed_loss(self, loss) -> None:
        """Takes note of a training batch's logged loss (None: none logged)."""
        if loss is not None and not np.isfinite(float(loss)):
            self.diverged = True

    def loaded(self) -> None:
        """Weights were loaded: they count as good again."""
        self.diverged = False

    def write(self, filepath, overwrite: bool, write: Callable[[str], None]) -> None:
        """`write(tmp)` then renamed to `filepath` (`atomic_write`), unless a training
        loss was NaN (a warning to the caller of the model's method instead)."""
        if refuse_after_nan(self.diverged, filepath, stacklevel=4):
            return
        atomic_write(filepath, overwrite, write)

    def export(self, filepath, verbose: bool = True) -> None:
        """`Model.export`: a SavedModel for serving (`write_saved_model`) with the
        block expression beside it (`compiler.feeding.packed.EXPORT_CONFIG`)."""
        from refold.compiler.feeding import packed
        model = self.model
        if refuse_after_nan(self.diverged, filepath, stacklevel=4):
            return
        if model.output_type_id is None:
            raise ValueError("export needs a block whose output is one tensor per input, "
                             f"got {model.block.output_type}")
        executor, n_metrics = model.compiler.executor, len(model.program.metric_names)
        forward = model.tracer.forward

        def serve(arrays):
            arrays = packed.checked(arrays, executor, n_metrics)
            return packed.check_output_rows(forward(arrays)[0], arrays["batch_size"])
        config = packed.export_config(model.get_config(), executor, model.program)
        write_saved_model(filepath, model.weights, model.pipeline.signature(), serve,
                          {packed.EXPORT_CONFIG: json.dumps(config)})
        if verbose:
            print(f"Saved a SavedModel for serving at {filepath}")


def write_saved_model(filepath, weights: list, signature: dict,
                      forward: Callable[[dict], tf.Tensor],
                      extra_files: dict[str, str] | None = None) -> None:
    """A SavedModel whose `serving_default` maps the packed arrays (`signature`: name
    -> `tf.TensorSpec`) to `{"output": forward(arrays)}`, holding `weights`; and
    `extra_files` (relative path -> text) written inside its directory."""
    module = tf.Module()
    module.weights = [w.value if isinstance(w, keras.Variable) else w for w in weights]
    spec = {k: tf.TensorSpec(v.shape, v.dtype, name=k) for k, v in signature.items()}

    @tf.function(input_signature=[spec], autograph=False)
    def serve(arrays):
        return {"output": forward(arrays)}

    module.serve = serve
    tf.saved_model.save(module, str(filepath),
                        signatures={"serving_default": serve.get_concrete_function()})
    for name, text in (extra_files or {}).items():
        path = os.path.join(os.fspath(filepath), name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)


class ModelFileError(ValueError):
    """A file that `load_model` cannot read as a saved model: missing, truncated,
    corrupted, or not a `.keras` file."""


def load_model(filepath, custom_objects=None, compile: bool = True,  # noqa: A002
               safe_mode: bool = True):
    """`keras.models.load_model(filepath, ...)`, after checking that the file is a
    whole `.keras` archive; a bad file raises `ModelFileError` saying what is wrong.

    Use it like Keras' (`keras.models.load_model` works too, with Keras' errors).
    `safe_mode=True` refuses blocks holding lambdas or closures (saved as
    bytecode); pass `safe_mode=False` for a file you trust.
    """
    check_model_file(filepath)
    return keras.models.load_model(filepath, custom_objects=custom_objects,
                                   compile=compile, safe_mode=safe_mode)


def check_model_file(filepath) -> None:
    """Raises `ModelFileError` unless `filepath` is a readable `.keras` archive."""
    path = os.fspath(filepath)
    if not os.path.exists(path):
        raise ModelFileError(f"{path}: no such file")
    if os.path.isdir(path):
        raise ModelFileError(f"{path} is a directory, not a .keras file (a SavedModel "
                             "from Model.export loads with tf.saved_model.load)")
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
    if not zipfile.is_zipfile(path):
        what = "empty" if size == 0 else (
            "the start of a zip archive without its end: truncated (an interrupted "
            "copy or download?)" if head.startswith(b"PK") else
            "an HDF5 file (weights: load them with model.load_weights)"
            if head.startswith(b"\x89HDF") else f"not a zip archive (it starts with {head!r})")
        raise ModelFileError(f"{path} is not a .keras model file ({size} bytes, {what})")
    try:
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
            bad = archive.testzip()
            config = json.loads(archive.read("config.json")) if "config.json" in names \
                else None
    except (zipfile.BadZipFile, OSError, ValueError) as e:
        raise ModelFileError(f"{path} is a damaged .keras archive: {e}") from e
    if bad is not None:
        raise ModelFileError(f"{path} is a damaged .keras archive: {bad} fails its checksum")
    if config is None or "model.weights.h5" not in names:
        raise ModelFileError(f"{path} is a zip archive but not a .keras model file (it has "
                             f"{sorted(names)[:5]}, not config.json and model.weights.h5)")
