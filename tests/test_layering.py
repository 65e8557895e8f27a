"""The layers import in one direction (DESIGN.md), and only under the `refold` namespace.

`refold.blocks` imports nothing of the engine; `refold.scheduler` imports nothing else
of Refold (it batches any op graph); `refold.compiler` takes blocks and the scheduler,
never the zoo, serving or the examples. Checked on the source (every import statement,
inside functions too), since `import refold` itself loads every layer.

Nothing anywhere (library, tests, benchmarks, docs' snippets) imports the repository's
folders by their bare names (`import blocks`): in a clone they are importable so, and a
second copy of a module would hold second copies of its classes.
"""

import ast
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAYERS = ("blocks", "compiler", "scheduler", "models", "serving", "examples")
MAY_IMPORT = {
    "blocks": set(),
    "scheduler": set(),
    "compiler": {"blocks", "scheduler"},
    "models": {"blocks", "compiler"},
    "serving": {"blocks", "compiler", "scheduler"},
}


def python_files(*folders: str) -> list[str]:
    out = []
    for folder in folders:
        for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, folder)):
            dirnames[:] = [d for d in dirnames if d not in ("__pycache__", "fixtures")]
            out += [os.path.join(dirpath, f) for f in filenames if f.endswith(".py")]
    return sorted(out)


def refold_layers_imported(path: str) -> set[str]:
    """The layers (`blocks`, ...) that `path` imports as `refold.<layer>`."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    found = set()
    for node in ast.walk(tree):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
        if names == ["refold"] and isinstance(node, ast.ImportFrom):  # from refold import x
            names = [f"refold.{a.name}" for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "refold" and len(parts) > 1 and parts[1] in LAYERS:
                found.add(parts[1])
            elif parts == ["refold"]:
                found.add("refold")  # the facade: every layer
            # refold.compat and refold.version serve every layer and import none
    return found


@pytest.mark.parametrize("layer", sorted(MAY_IMPORT))
def test_a_layer_imports_only_the_layers_below_it(layer):
    allowed = MAY_IMPORT[layer] | {layer}
    wrong = {os.path.relpath(p, ROOT): sorted(used - allowed)
             for p in python_files(layer) if (used := refold_layers_imported(p)) - allowed}
    assert wrong == {}


BARE = re.compile(rf"^\s*(?:>>> |\.\.\. )?(?:from|import) ({'|'.join(LAYERS)})\b", re.M)


def test_nothing_imports_the_folders_by_their_bare_names():
    files = python_files(*LAYERS, "refold", "tests", "benchmarks")
    files += [os.path.join(ROOT, f) for f in os.listdir(ROOT) if f.endswith((".md", ".py"))]
    bare = {}
    for path in files:
        with open(path, encoding="utf-8") as f:
            hits = BARE.findall(f.read())
        if hits:
            bare[os.path.relpath(path, ROOT)] = sorted(set(hits))
    assert bare == {}


def module_imports(path: str, package: str) -> set[str]:
    """The modules of `refold.<package>` that the file at `path` imports (anywhere but
    under `if TYPE_CHECKING:`, which only annotations read)."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            node.body = []
    prefix = f"refold.{package}."
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        found |= {n[len(prefix):].split(".")[0] for n in names if n.startswith(prefix)}
    return found


def import_cycle(package: str) -> list[str] | None:
    """A cycle of imports among the modules of `refold.<package>`, if there is one."""
    folder = os.path.join(ROOT, package)
    names = [f[:-3] for f in os.listdir(folder) if f.endswith(".py") and f != "__init__.py"]
    graph = {n: module_imports(os.path.join(folder, f"{n}.py"), package) & set(names)
             for n in names}
    state: dict[str, int] = {}

    def visit(n: str, path: list[str]) -> list[str] | None:
        state[n] = 1
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                return path[path.index(m):] + [m] if m in path else [n, m]
            if m not in state and (cycle := visit(m, path + [m])):
                return cycle
        state[n] = 2
        return None

    for n in sorted(names):
        if n not in state and (cycle := visit(n, [n])):
            return cycle
    return None


def test_the_compilers_modules_import_each_other_without_a_cycle():
    assert import_cycle("compiler") is None
