"""The house stays one a newcomer finds their way in (docs/design.md): no folder of the
library holds more than `MAX_MODULES` modules, and the whole library reads at most
`MAX_REACH` private names of other modules (`x._name` with x not `self`/`cls`, where
the file does not define `_name` itself; compat.py, the one home of TensorFlow's and
Keras' private names, aside)."""

from __future__ import annotations

import ast
import os

from tests.compiler.test_model_parts import private_reads
from tests.test_layering import LAYERS, ROOT, python_files

MAX_MODULES = 15
MAX_REACH = 15
LIBRARY = (*LAYERS, "src")


def module_counts() -> dict[str, int]:
    """Folder of the library (not the examples' own programs) -> its modules."""
    counts = {}
    for layer in LIBRARY:
        for folder, dirs, files in os.walk(os.path.join(ROOT, layer)):
            dirs[:] = [d for d in dirs if d not in ("__pycache__", "data")]
            rel = os.path.relpath(folder, ROOT)
            if rel.startswith("examples" + os.sep):  # one program a folder
                continue
            counts[rel] = sum(f.endswith(".py") and f != "__init__.py" for f in files)
    return counts


def test_no_folder_of_the_library_holds_more_than_fifteen_modules():
    counts = module_counts()
    assert counts["compiler"] >= 5 and "compiler/graphs" in counts  # the walk sees them
    assert {f: n for f, n in counts.items() if n > MAX_MODULES} == {}


def test_the_library_reads_few_private_names_of_other_modules():
    reaches = {}
    for path in python_files(*LIBRARY):
        if os.path.basename(path) == "compat.py":
            continue
        with open(path, encoding="utf-8") as f:
            found = private_reads(ast.parse(f.read(), path))
        if found:
            reaches[os.path.relpath(path, ROOT)] = found
    assert sum(map(len, reaches.values())) <= MAX_REACH, reaches


def test_a_private_read_is_counted():
    tree = ast.parse("def f(model):\n    return model._out_type, self._mine\n")
    assert private_reads(tree) == ["2: model._out_type"]
