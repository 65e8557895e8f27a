"""Refold: neural networks over structured data, in TensorFlow Fold's block language.

Import it as Fold users imported Fold: `import refold as td`. The top level holds the
block language (`refold.blocks`: types, blocks, `InputError`) and what compiles and
trains a block (`Model`, `Compiler`, `load_model`, `Lines`); the layers below are
subpackages, which import in one direction (docs/design.md):

| subpackage | what it holds |
|---|---|
| `refold.blocks` | types and block combinators; `block.eval(x)` runs one input unbatched |
| `refold.compiler` | lowering, expansion, `Compiler`, `Model` (a `keras.Model`), saving |
| `refold.scheduler` | the dynamic-batching engine over op graphs; knows nothing of blocks |
| `refold.models` | the zoo: TreeLSTM and RNN cells, encoders, heads |
| `refold.serving` | a client for exported models (`Predictor`, `BatchingPredictor`) |
| `refold.examples` | runnable programs with their data (`python -m refold.examples.sentiment`) |

Importing `refold` registers `Model` with Keras, so `keras.models.load_model(path)`
reads a saved model in a fresh process after `import refold` alone. The compiler, the
scheduler and Numba load on first use of a name that needs them (`td.Model`,
`td.Compiler`, ...), so that `import refold.blocks` and `import refold.serving` stay light.

>>> import refold as td
>>> block = td.Map(td.Scalar()) >> td.Sum()
>>> block.output_type
TensorType((), 'float32')
>>> float(block.eval([1.0, 2.0, 3.5]))
6.5
"""

from __future__ import annotations

from typing import TYPE_CHECKING as _TYPE_CHECKING

from refold import kernel_cache as _kernel_cache

# A new install compiles the planning kernels in a process of its own while this one
# imports TensorFlow (`refold.kernel_cache`); once they are cached this is one stat.
_kernel_cache.start(__path__)

import keras as _keras  # noqa: E402

from refold import threads as _threads  # noqa: E402

# One intra-op thread on a small machine, unless the user chose (`refold.threads`).
_threads.configure()

from refold.blocks import *  # noqa: F403, E402  (the block language, as Fold's `td`)
from refold.blocks import __all__ as _blocks_all  # noqa: E402
from refold.blocks.serialization import registry as _registry  # noqa: E402
from refold.lazy import lazy_exports as _lazy_exports  # noqa: E402
from refold.version import __version__  # noqa: E402

# The names that need the compiler, imported on first use.
_LAZY = {
    "Model": "refold.compiler.model",
    "Compiler": "refold.compiler.compiler",
    "load_model": "refold.compiler.saving", "ModelFileError": "refold.compiler.saving",
    "describe_schedule": "refold.compiler.schedule_picture",
    "draw_schedule": "refold.compiler.schedule_picture",
    "NonFiniteLossError": "refold.compiler.training.steps",
    "Lines": "refold.compiler.feeding.streams",
}

__all__ = [*_blocks_all, *_LAZY, "__version__"]

if _TYPE_CHECKING:  # `_LAZY`'s names, seen by type checkers and the API pages (mkdocstrings)
    from refold.compiler.compiler import Compiler  # noqa: F401
    from refold.compiler.feeding.streams import Lines  # noqa: F401
    from refold.compiler.model import Model  # noqa: F401
    from refold.compiler.saving import ModelFileError, load_model  # noqa: F401
    from refold.compiler.schedule_picture import describe_schedule, draw_schedule  # noqa: F401
    from refold.compiler.training.steps import NonFiniteLossError  # noqa: F401

# A saved block's class that moved is looked for in the zoo and the examples.
_registry.search_packages("refold.models", "refold.examples")


__getattr__, __dir__ = _lazy_exports(globals(), _LAZY, __all__)


@_keras.saving.register_keras_serializable(package="refold", name="Model")
class _ModelBeforeImport:
    """Keras' entry for "refold>Model" until `refold.compiler.model` is imported.

    Loading a saved `Model` (`keras.models.load_model`) looks the class up by that name;
    this stand-in imports the real class, which registers itself in its place, and
    builds the model from its config.
    """

    def get_config(self) -> dict:  # Keras registers only classes that have one
        return {}

    @classmethod
    def from_config(cls, config: dict):
        return __getattr__("Model").from_config(config)
