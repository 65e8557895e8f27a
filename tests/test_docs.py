"""The documentation site builds strictly, covers the API, shows the library's pictures,
and the README stays a short front door.

`mkdocs build --strict` fails on a broken link or anchor, a page missing from the
navigation, a docstring reference it cannot resolve, or a module the API pages name
that does not exist. The code on the pages runs in `tests/docs/`.
"""

from __future__ import annotations

import importlib
import inspect
import os
import pkgutil
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # the `test` extra brings tomli, the same parser, to Python 3.10
    import tomli as tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PUBLIC_PACKAGES = ("refold", "refold.blocks", "refold.compiler", "refold.scheduler",
                   "refold.serving")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(out)], cwd=ROOT,
        capture_output=True, text=True, timeout=600, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert run.returncode == 0, run.stderr[-4000:]
    return out


def test_the_docs_build_strictly_with_every_page(site):
    pages = [os.path.relpath(os.path.join(d, f), site) for d, _, files in os.walk(site)
             for f in files if f.endswith(".html") and f != "404.html"]
    assert len(pages) >= 15
    for page in ("index.html", "getting-started/install.html", "getting-started/quick-start.html",
                 "guide/blocks.html", "guide/recursion.html", "guide/training.html",
                 "guide/inputs.html", "guide/saving.html", "guide/unfold.html",
                 "guide/distributed.html", "guide/mixed-precision.html", "guide/extending.html",
                 "guide/performance.html", "tutorials/sentiment.html", "tutorials/parser.html",
                 "tutorials/bugs.html",
                 "coming-from-fold.html", "coming-from-dynet.html", "benchmarks.html",
                 "design.html", *(f"api/{p}.html" for p in api_pages())):
        assert page in pages, page


def api_pages() -> list[str]:
    """The API reference's pages, from the site's navigation (`index` aside)."""
    with open(os.path.join(ROOT, "mkdocs.yml"), encoding="utf-8") as f:
        nav = f.read().split("  - API reference:", 1)[1]
    return [p for p in re.findall(r"api/([\w-]+)\.md", nav) if p != "index"]


def documented(page: str) -> list[str]:
    with open(os.path.join(ROOT, "docs", "api", f"{page}.md"), encoding="utf-8") as f:
        return re.findall(r"^::: (\S+)", f.read(), re.M)


def resolve(path: str):
    module, _, name = path.rpartition(".")
    try:
        return importlib.import_module(path)
    except ImportError:
        return getattr(importlib.import_module(module), name)


def public_names() -> dict[int, tuple]:
    """{id: (object, its public spellings)} for every name in `__all__` of `refold` and
    its public subpackages (dunders such as `__version__` aside)."""
    out: dict[int, tuple] = {}
    for package in PUBLIC_PACKAGES:
        module = importlib.import_module(package)
        for name in module.__all__:
            if not name.startswith("_"):
                obj = getattr(module, name)
                out.setdefault(id(obj), (obj, set()))[1].add(f"{package}.{name}")
    return out


# Methods of `Block` that only the type inference of block classes calls.
TYPE_INFERENCE_HOOKS = {"set_io_types", "set_input_type_classes", "set_output_type_classes"}


def internal_names() -> set[str]:
    """Names the layers' modules define without a leading underscore that no `__all__`
    makes public (`FactoryCall`, `IOBase`, `batch_function`, ...)."""
    public = {name for _, spellings in public_names().values()
              for name in (s.rpartition(".")[2] for s in spellings)}
    found = set()
    for package in PUBLIC_PACKAGES[1:]:
        module = importlib.import_module(package)
        for info in pkgutil.walk_packages(module.__path__, f"{package}."):
            if any(part.startswith("_") for part in info.name.split(".")):
                continue
            sub = importlib.import_module(info.name)
            found |= {name for name, value in vars(sub).items()
                      if not name.startswith("_") and name not in public
                      and getattr(value, "__module__", None) == info.name}
    return found


def test_every_public_name_is_on_exactly_one_concept_page_and_nothing_else_is():
    public = public_names()
    pages = {page: documented(page) for page in api_pages() if page != "models"}
    assert len(pages) >= 10
    seen: dict[int, list[str]] = {}
    for page, paths in pages.items():
        for path in paths:
            obj = resolve(path)
            assert id(obj) in public, f"{page}.md documents {path}, which no __all__ names"
            seen.setdefault(id(obj), []).append(f"{page}: {path}")
    assert {k: v for k, v in seen.items() if len(v) > 1} == {}
    missing = sorted(min(spellings) for k, (_, spellings) in public.items() if k not in seen)
    assert missing == []


def test_the_zoo_page_names_every_module_of_the_zoo():
    module = importlib.import_module("refold.models")
    zoo = {m.name for m in pkgutil.walk_packages(module.__path__, "refold.models.")
           if not any(part.startswith("_") for part in m.name.split("."))}
    assert set(documented("models")) == zoo | {"refold.models"}


def test_the_api_pages_hold_the_docstrings_and_no_internal_name(site):
    with open(os.path.join(site, "api", "sequences.html"), encoding="utf-8") as f:
        html = f.read()
    assert 'id="refold.Map"' in html and "Map" in html
    # docstring examples are code blocks, their output not read as Markdown links
    assert 'class="language-pycon' in html or "highlight" in html
    with open(os.path.join(site, "api", "pictures.html"), encoding="utf-8") as f:
        html = f.read()
    assert "Draws a block expression as an SVG diagram" in html
    assert all(f'id="refold.{n}"' in html for n in ("plot_block", "draw_schedule"))
    internal = internal_names()
    assert {"FactoryCall", "IOBase", "batch_function"} <= internal
    for page in api_pages():
        with open(os.path.join(site, "api", f"{page}.html"), encoding="utf-8") as f:
            anchors = re.findall(r'id="(refold[\w.]*)"', f.read())
        roots = documented(page)
        for anchor in anchors:
            root = max((r for r in roots if anchor == r or anchor.startswith(r + ".")),
                       key=len, default=None)
            assert root is not None, (page, anchor)  # nothing but what the page names
            member = anchor[len(root) + 1:].split(".")[0]
            hidden = internal if inspect.ismodule(resolve(root)) else TYPE_INFERENCE_HOOKS
            assert member not in hidden, (page, anchor)
    with open(os.path.join(site, "api", "model.html"), encoding="utf-8") as f:
        html = f.read()
    # a loaded model's block expression is a documented property
    assert 'id="refold.Model.block"' in html and "rebuilt from the file" in html


def test_the_pictures_are_drawn_by_the_library_at_build_time(site):
    folder = os.path.join(site, "images", "generated")
    svg = "{http://www.w3.org/2000/svg}"
    block = ET.parse(os.path.join(folder, "quick-start-block.svg")).getroot()
    texts = [t.text for t in block.iter(f"{svg}text")]
    assert "↻ tree" in texts and "(float32[16], float32[16])" in texts
    schedule = ET.parse(os.path.join(folder, "words-tree-schedule.svg")).getroot()
    ids = {g.get("id") for g in schedule.iter(f"{svg}g")}
    assert {"depth-0-rows", "agenda-16-rows"} <= ids and "agenda-17-rows" not in ids
    for page, picture in (("getting-started/quick-start.html", "quick-start-block.svg"),
                          ("guide/pictures.html", "words-tree-schedule.svg"),
                          ("guide/pictures.html", "curves/sentiment.png")):
        with open(os.path.join(site, page), encoding="utf-8") as f:
            assert picture in f.read(), (page, picture)


def test_the_benchmarks_page_is_benchmarks_md(site):
    with open(os.path.join(site, "benchmarks.html"), encoding="utf-8") as f:
        html = f.read()
    assert 'id="the-replay-threshold"' in html and "python -m benchmarks.peers" in html
    assert html.count("<h1") == 1  # BENCHMARKS.md's own title is left out


def test_the_benchmarks_page_opens_with_the_peers_picture_and_what_it_measured(site):
    import json
    with open(os.path.join(site, "benchmarks.html"), encoding="utf-8") as f:
        html = f.read()
    with open(os.path.join(ROOT, "benchmarks", "results", "peers.json"), encoding="utf-8") as f:
        meta = json.load(f)["meta"]
    body = html.split('id="benchmarks"', 1)[1]
    first = body.split('id="how-to-read-these-figures"', 1)[0]
    assert 'src="images/generated/peers.svg"' in first  # before the first section
    caption = first.split("Measured on", 1)[1].split("</p>", 1)[0]
    for value in (meta["machine"], meta["date"], meta["commit"], meta["command"]):
        assert value in caption, value
    assert "<!-- peers caption" not in html
    svg = ET.parse(os.path.join(site, "images", "generated", "peers.svg")).getroot()
    ids = {g.get("id") for g in svg.iter("{http://www.w3.org/2000/svg}g")}
    assert {"train-treelstm", "infer-bilstm", "train-parity", "infer-target"} <= ids


def test_the_docs_extra_installs_the_builder_and_the_tests_pull_it_in():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        extras = tomllib.load(f)["project"]["optional-dependencies"]
    assert sorted(re.split(r"[><=\[]", d)[0] for d in extras["docs"]) == [
        "matplotlib", "mkdocs", "mkdocs-material", "mkdocstrings"]
    assert "refold[docs]" in extras["test"]


def test_the_readme_is_a_short_front_door():
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    assert len(readme.splitlines()) <= 250
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert os.path.isfile(os.path.join(ROOT, link)), link
    # every example is in the table, with the command that runs it
    examples = {m.name for m in pkgutil.iter_modules(
        importlib.import_module("refold.examples").__path__) if m.ispkg}
    for name in examples:
        assert f"python -m refold.examples.{name}" in readme, name


def test_the_design_page_maps_every_folder_and_module_of_the_layers():
    with open(os.path.join(ROOT, "docs", "design.md"), encoding="utf-8") as f:
        page = f.read()
    tree = page.split("## Where each concern lives", 1)[1]
    for layer in ("blocks", "compiler", "scheduler", "models", "serving", "examples"):
        assert f"\n{layer}/" in tree, layer
    for name in sorted(os.listdir(os.path.join(ROOT, "compiler"))):
        if os.path.isfile(os.path.join(ROOT, "compiler", name, "__init__.py")):
            assert f"  {name}/" in tree, f"compiler/{name}/"
    for layer in ("blocks", "compiler", "scheduler"):
        for name in sorted(os.listdir(os.path.join(ROOT, layer))):
            if name.endswith(".py") and name != "__init__.py":
                assert re.search(rf"\b{re.escape(name)}\b", tree), f"{layer}/{name}"


def test_the_files_that_cite_the_design_page_point_at_it():
    assert os.path.isfile(os.path.join(ROOT, "docs", "design.md"))
    for path in ("pyproject.toml", "tests/test_layering.py", "docs/hooks.py",
                 "src/refold/__init__.py"):
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            text = f.read()
        assert "docs/design.md" in text and "DESIGN.md" not in text, path
