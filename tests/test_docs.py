"""The documentation site builds strictly, covers the API, shows the library's pictures,
and the README stays a short front door.

`mkdocs build --strict` fails on a broken link or anchor, a page missing from the
navigation, a docstring reference it cannot resolve, or a module the API pages name
that does not exist. The code on the pages runs in `tests/docs/`.
"""

from __future__ import annotations

import importlib
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
API_PAGES = {"blocks": "refold.blocks", "compiler": "refold.compiler",
             "scheduler": "refold.scheduler", "serving": "refold.serving",
             "models": "refold.models"}


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
                 "coming-from-fold.html", "coming-from-dynet.html", "benchmarks.html",
                 *(f"api/{p}.html" for p in API_PAGES)):
        assert page in pages, page


@pytest.mark.parametrize("page, package", sorted(API_PAGES.items()))
def test_the_api_pages_name_every_public_module(page, package):
    with open(os.path.join(ROOT, "docs", "api", f"{page}.md")) as f:
        named = set(re.findall(r"^::: (\S+)", f.read(), re.M))
    module = importlib.import_module(package)
    public = {f"{package}.{m.name}" for m in pkgutil.iter_modules(module.__path__)
              if not m.name.startswith("_")}
    assert named == public | {package}


def test_the_api_pages_hold_the_docstrings(site):
    with open(os.path.join(site, "api", "blocks.html"), encoding="utf-8") as f:
        html = f.read()
    assert "refold.blocks.diagram.plot_block" in html
    assert "Draws a block expression as an SVG diagram" in html
    # docstring examples are code blocks, their output not read as Markdown links
    assert 'class="language-pycon' in html or "highlight" in html
    with open(os.path.join(site, "api", "compiler.html"), encoding="utf-8") as f:
        html = f.read()
    assert "refold.compiler.schedule_picture.draw_schedule" in html
    # a loaded model's block expression is a documented property
    assert "refold.compiler.model.Model.block" in html
    assert "rebuilt from the file" in html


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
