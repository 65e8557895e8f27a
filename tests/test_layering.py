"""The layers import in one direction (docs/design.md), and only under the `refold` namespace.

`refold.blocks` imports nothing of the engine; `refold.scheduler` imports nothing else
of Refold (it batches any op graph); `refold.compiler` takes blocks and the scheduler,
never the zoo, serving or the examples. Checked on the source: every import statement,
inside functions too, and module names in strings (`importlib.import_module`'s). Every
allowed edge is one some file uses. `import refold`, `refold.blocks` and `refold.serving`
load no compiler, scheduler or Numba (a fresh process each).

Nothing anywhere (library, tests, benchmarks, docs' snippets) imports the repository's
folders by their bare names (`import blocks`): in a clone they are importable so, and a
second copy of a module would hold second copies of its classes.
"""

import ast
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAYERS = ("blocks", "compiler", "scheduler", "models", "serving", "examples")
MAY_IMPORT = {
    "blocks": set(),
    "scheduler": set(),
    "compiler": {"blocks", "scheduler"},
    "models": {"blocks"},
    "serving": {"blocks", "compiler"},
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
    files = python_files(*LAYERS, "src", "tests", "benchmarks")
    files += [os.path.join(ROOT, f) for f in os.listdir(ROOT) if f.endswith((".md", ".py"))]
    bare = {}
    for path in files:
        with open(path, encoding="utf-8") as f:
            hits = BARE.findall(f.read())
        if hits:
            bare[os.path.relpath(path, ROOT)] = sorted(set(hits))
    assert bare == {}


def package_modules(package: str) -> dict[str, str]:
    """`refold.<package>`'s modules, subpackages' included: dotted name below the package
    (`graphs.expansion`) -> file."""
    folder = os.path.join(ROOT, package)
    out = {}
    for path in python_files(package):
        rel = os.path.relpath(path, folder)[:-3].replace(os.sep, ".")
        if rel != "__init__" and not rel.endswith(".__init__"):
            out[rel] = path
    return out


def import_cycle(package: str) -> list[str] | None:
    """A cycle of imports among the modules of `refold.<package>`, if there is one."""
    modules = package_modules(package)
    prefix = f"refold.{package}."
    graph = {}
    for n, path in modules.items():
        imported = set()
        for name in dotted_imports(path):
            if name.startswith(prefix):
                rest = name[len(prefix):]
                imported |= {m for m in modules if rest == m or rest.startswith(m + ".")}
        graph[n] = imported - {n}
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

    for n in sorted(modules):
        if n not in state and (cycle := visit(n, [n])):
            return cycle
    return None


def dotted_imports(path: str) -> set[str]:
    """Every module name the file imports (`from a.b import c` gives `a.b` and `a.b.c`),
    inside functions too, but not under `if TYPE_CHECKING:`."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            node.body = []
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return found


def test_the_compilers_modules_import_each_other_without_a_cycle():
    assert len(package_modules("compiler")) > 20  # the subpackages' modules are seen
    assert import_cycle("compiler") is None


def test_every_allowed_edge_between_layers_is_used():
    used = {layer: set().union(*map(refold_layers_imported, python_files(layer))) - {layer}
            for layer in MAY_IMPORT}
    assert {layer: sorted(MAY_IMPORT[layer] - used[layer]) for layer in MAY_IMPORT} == {
        layer: [] for layer in MAY_IMPORT}


MODULE_NAME = re.compile(r"refold\.(\w+)(?:\.[\w.]*)?")


# Strings that look like module names and are not: an export's format tag.
NOT_MODULES = {"refold.serving": "compiler/feeding/packed.py"}


def layers_named_in_strings(path: str) -> set[str]:
    """The layers that string constants in the file name as modules (`"refold.models"`,
    as `importlib.import_module` takes them), docstrings aside."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    docstrings = {id(node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
    return {m.group(1) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docstrings and (m := MODULE_NAME.fullmatch(node.value))
            and m.group(1) in LAYERS
            and NOT_MODULES.get(node.value) != os.path.relpath(path, ROOT)}


@pytest.mark.parametrize("layer", sorted(MAY_IMPORT))
def test_no_layer_names_a_higher_one_as_a_string_to_import(layer):
    allowed = MAY_IMPORT[layer] | {layer}
    wrong = {os.path.relpath(p, ROOT): sorted(named - allowed)
             for p in python_files(layer) if (named := layers_named_in_strings(p)) - allowed}
    assert wrong == {}


LOADED = """
import sys, {module}
layers = sorted({{m.split(".")[1] for m in sys.modules
                 if m.startswith("refold.") and m.split(".")[1] in {layers!r}}})
print(layers, "numba" in sys.modules)
"""


@pytest.mark.parametrize("module, loaded", [
    ("refold", ["blocks"]),
    ("refold.blocks", ["blocks"]),
    ("refold.serving", ["blocks", "serving"]),
])
def test_importing_the_light_packages_loads_no_compiler_scheduler_or_numba(module, loaded):
    out = subprocess.run([sys.executable, "-c", LOADED.format(module=module, layers=LAYERS)],
                         capture_output=True, text=True, timeout=300, cwd=ROOT,
                         env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == f"{loaded} False"


def test_the_compiler_s_names_load_on_first_use_from_refold():
    import refold as td
    for name in ("Model", "Compiler", "load_model", "ModelFileError", "NonFiniteLossError",
                 "Lines", "describe_schedule", "draw_schedule"):
        assert name in td.__all__ and getattr(td, name) is not None
    assert td.Model.__module__ == "refold.compiler.model"
    from refold.serving import BatchingPredictor, Predictor, RequestError  # noqa: F401


def test_only_the_layers_import_under_refold():
    """No path trick: in a clone `refold.tests` and `refold.benchmarks` do not exist, and
    `refold`'s own path is its own folder (src/refold), not the repository's root."""
    import importlib.util

    import refold
    assert [os.path.realpath(p) for p in refold.__path__] == [
        os.path.realpath(os.path.join(ROOT, "src", "refold"))]
    for name in ("refold.tests", "refold.benchmarks", "refold.conftest", "refold.refold"):
        assert importlib.util.find_spec(name) is None, name
