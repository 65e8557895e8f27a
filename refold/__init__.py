"""Refold: neural networks over structured data, in TensorFlow Fold's block language.

Import it as Fold users imported Fold: `import refold as td`. The top level holds the
block language (`refold.blocks`: types, blocks, `InputError`) and what compiles and
trains a block (`Model`, `Compiler`, `load_model`, `Lines`); the layers below are
subpackages:

| subpackage | what it holds |
|---|---|
| `refold.blocks` | types and block combinators; `block.eval(x)` runs one input unbatched |
| `refold.compiler` | lowering, expansion, `Compiler`, `Model` (a `keras.Model`), saving |
| `refold.scheduler` | the dynamic-batching engine over op graphs; knows nothing of blocks |
| `refold.models` | the zoo: TreeLSTM and RNN cells, encoders, heads |
| `refold.serving` | a client for exported models (`Predictor`, `BatchingPredictor`) |
| `refold.examples` | runnable programs with their data (`python -m refold.examples.sentiment`) |

Importing `refold` registers `Model` with Keras, so `keras.models.load_model(path)`
reads a saved model in a fresh process after `import refold` alone.

>>> import refold as td
>>> block = td.Map(td.Scalar()) >> td.Sum()
>>> block.output_type
TensorType((), 'float32')
>>> float(block.eval([1.0, 2.0, 3.5]))
6.5
"""

import os as _os

# The repository keeps its layers as folders at its root (DESIGN.md); the wheel maps them
# under refold/ (pyproject.toml's package-dir). In a clone, with or without an editable
# install, this package's path reaches the root, so `refold.blocks` is `blocks/` there.
_here = _os.path.dirname(_os.path.abspath(__file__))
_root = _os.path.dirname(_here)
if not _os.path.isdir(_os.path.join(_here, "blocks")) and _os.path.isfile(
        _os.path.join(_root, "blocks", "__init__.py")):
    __path__.append(_root)  # noqa: F821 (a package's __path__)

from refold import warm_kernels as _warm_kernels  # noqa: E402
from refold.blocks import *  # noqa: E402,F403  (the block language, as Fold's `td`)
from refold.blocks import __all__ as _blocks_all  # noqa: E402
from refold.compiler.compiler import Compiler  # noqa: E402
from refold.compiler.model import Model  # noqa: E402  (registers "refold>Model" with Keras)
from refold.compiler.saving import ModelFileError, load_model  # noqa: E402
from refold.compiler.schedule_picture import describe_schedule, draw_schedule  # noqa: E402
from refold.compiler.steps import NonFiniteLossError  # noqa: E402
from refold.compiler.streaming import Lines  # noqa: E402
from refold.version import __version__  # noqa: E402

_warm_kernels.start()  # the planning kernels, loaded or compiled while the user's code runs

__all__ = [*_blocks_all, "Model", "Compiler", "load_model", "ModelFileError",
           "NonFiniteLossError", "Lines", "describe_schedule", "draw_schedule", "__version__"]
