"""Build-time pictures: the docs show what the library's own drawing functions make.

mkdocs calls `on_files` before it renders the pages; each picture below is drawn then,
by the same calls the pages show (`td.plot_block`, `td.draw_schedule`), from the code of
the checkout being built, and added to the site under `images/generated/`. The benchmarks
page opens with Refold ÷ DyNet by batch size, drawn from the committed results of
`python -m benchmarks.peers --json` (`PEERS_RESULTS`), and says what they measured.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import sys
import tempfile

from mkdocs.plugins import event_priority

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # the checkout's `refold`, whatever is installed
    sys.path.insert(0, ROOT)


def quick_start_block():
    """The quick start's tree classifier (getting-started/quick-start.md)."""
    import refold as td
    tree = td.ForwardDeclaration(td.PyObjectType(), td.TensorType((16,)), name="tree")
    leaf = td.Scalar() >> td.Function(lambda x: x[:, None]) >> td.FC(16)
    pair = td.Record((tree(), tree())) >> td.Concat() >> td.FC(16)
    tree.resolve_to(td.OneOf(lambda t: isinstance(t, tuple), {False: leaf, True: pair}))
    return tree() >> td.FC(2, activation=None)


def words_tree_block():
    """A tree of words, each read letter by letter (guide/pictures.md)."""
    import refold as td
    tree = td.ForwardDeclaration(td.PyObjectType(), td.TensorType((4,)), name="tree")
    letter = td.Scalar() >> td.Function(lambda x: x[:, None]) >> td.FC(4)
    word = td.Map(letter) >> td.Fold(td.Concat() >> td.FC(4), td.Zeros(4))
    pair = td.Record((tree(), tree())) >> td.Concat() >> td.FC(4)
    tree.resolve_to(td.OneOf(lambda t: isinstance(t, tuple), {False: word, True: pair}))
    return tree() >> td.FC(2, activation=None)


PEERS_RESULTS = os.path.join(ROOT, "benchmarks", "results", "peers.json")
PEERS_CAPTION = re.compile(r"^<!-- peers caption:.*-->$", re.M)

WORDS = [(([1.0, 2.0], [3.0, 4.0, 5.0]), [6.0] * 5), ([7.0], ([8.0, 9.0], [1.0] * 4)),
         [2.0] * 4]


def pictures(folder: str) -> dict[str, str]:
    """Draws every picture into `folder`; {site path: file}."""
    import refold as td
    from refold.examples.quickstart import expression_model
    from refold.models import rnn_cells, tree_lstm  # noqa: F401  (the zoo's cells)
    out = {}

    def path(name):
        out[f"images/generated/{name}"] = os.path.join(folder, name)
        return out[f"images/generated/{name}"]

    td.plot_block(quick_start_block(), path("quick-start-block.svg"))
    td.plot_block(words_tree_block(), path("words-tree-block.svg"))
    td.plot_block(expression_model(), path("expression-block.svg"))
    td.draw_schedule(words_tree_block(), WORDS, path("words-tree-schedule.svg"),
                     title="A tree of words, each word read letter by letter")
    from benchmarks.peers import picture
    picture.draw(picture.load(PEERS_RESULTS), path("peers.svg"))
    return out


LAYERS = ("blocks", "compiler", "scheduler", "models", "serving", "examples")


def package_tree() -> str:
    """A folder where `refold/` holds the layers as subfolders, as the wheel installs
    them (links into the checkout), so that mkdocstrings reads `refold.blocks` from its
    source; in the checkout the layers are folders at the root (docs/design.md)."""
    folder = tempfile.mkdtemp(prefix="refold-api-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    package = os.path.join(folder, "refold")
    os.mkdir(package)
    for name in os.listdir(os.path.join(ROOT, "src", "refold")):
        if name.endswith(".py"):
            os.symlink(os.path.join(ROOT, "src", "refold", name), os.path.join(package, name))
    for layer in LAYERS:
        os.symlink(os.path.join(ROOT, layer), os.path.join(package, layer))
    return folder


@event_priority(100)  # before mkdocstrings reads its handlers' configuration
def on_config(config):
    handlers = config.plugins["mkdocstrings"].config.handlers
    handlers.setdefault("python", {})["paths"] = [package_tree()]
    return config


def on_files(files, config):
    from mkdocs.structure.files import File
    folder = tempfile.mkdtemp(prefix="refold-docs-")
    try:
        for uri, filename in pictures(folder).items():
            with open(filename, "rb") as f:
                files.append(File.generated(config, uri, content=f.read()))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return files


def on_page_markdown(markdown, page, config, files):
    """The benchmarks page's caption of its picture: the run's machine, date, commit, load."""
    if page.file.src_uri != "benchmarks.md":
        return markdown
    from benchmarks.peers import picture
    caption = picture.caption(picture.load(PEERS_RESULTS))
    markdown, found = PEERS_CAPTION.subn(lambda _: caption, markdown)
    if found != 1:
        raise ValueError("docs/benchmarks.md has lost its '<!-- peers caption: ... -->' line")
    return markdown
