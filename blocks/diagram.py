"""A block expression as a diagram, with the type of every edge: `plot_block`.

What `keras.utils.plot_model` is to a Keras model: data flows top to bottom, every
arrow is labelled with the type it carries, a pipe is a column of blocks, a block with
children (`Record`, `AllOf`, `OneOf`, `Map`, `Fold`, ...) is a frame with one column
per child, headed by the key that tells it apart (`'left'`, `combine`, a `OneOf`'s
case), and a reference to a `ForwardDeclaration` is a box `↻ name`, its definition
drawn once beside the expression. The drawing is SVG written here, with no dependency
(nothing of the engine is imported: a diagram is about the block language).

>>> import refold as td
>>> block = td.Map(td.Scalar() >> td.Function(lambda x: 2.0 * x)) >> td.Sum()
>>> svg = plot_block(block).svg
>>> svg.startswith("<svg") and "Seq[float32]" in svg and "Sum" in svg
True
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from xml.sax.saxutils import escape

from refold.blocks.block import Block
from refold.blocks.types import (
    BroadcastSequenceType,
    PyObjectType,
    SequenceType,
    TensorType,
    TupleType,
    VoidType,
)

CHAR_W, FONT = 7.2, 12        # monospace: the width of a character at this size
LEAF_H, ARROW_H, PAD, GAP = 26, 30, 10, 18
TITLE_H, KEY_H, BAND_H = 20, 16, 12
MAX_LABEL = 44                # longer type labels are cut with "…"


def type_label(t) -> str:
    """A short name for a block type: `float32[8]`, `(float32, int32[])`, `Seq[PyObject]`.

    >>> type_label(TupleType(TensorType((8,)), SequenceType(TensorType((), 'int32'))))
    '(float32[8], Seq[int32])'
    """
    if t is None:
        return "?"
    if isinstance(t, TensorType):
        return f"{t.dtype}[{', '.join(map(str, t.shape))}]" if t.shape else t.dtype
    if isinstance(t, BroadcastSequenceType):
        return f"Broadcast[{type_label(t.element_type)}]"
    if isinstance(t, SequenceType):
        return f"Seq[{type_label(t.element_type)}]"
    if isinstance(t, TupleType):
        return "(" + ", ".join(type_label(x) for x in t) + ("," if len(t) == 1 else "") + ")"
    if isinstance(t, PyObjectType):
        return "PyObject"
    if isinstance(t, VoidType):
        return "Void"
    return str(t)


def _cut(text: str, limit: int = MAX_LABEL) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _width(text: str) -> float:
    return len(text) * CHAR_W


@dataclass
class _Box:
    """A laid-out piece: its size, and `draw(x, y)` giving SVG elements with its top-left
    at (x, y); data enters at the middle of its top edge and leaves at the middle of its
    bottom edge."""

    w: float
    h: float
    draw: object = field(repr=False)


def _text(x, y, s, anchor="middle", cls="label"):
    return (f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" class="{cls}">'
            f"{escape(s)}</text>")


def _arrow(x, y0, y1, label: str | None):
    out = [f'<line x1="{x:.1f}" y1="{y0:.1f}" x2="{x:.1f}" y2="{y1 - 2:.1f}" class="edge" '
           f'marker-end="url(#arrow)"/>']
    if label:
        out.append(_text(x + 6, (y0 + y1) / 2 + 4, label, "start", "type"))
    return out


def _leaf(label: str, kind: str = "block") -> _Box:
    w = _width(label) + 2 * PAD

    def draw(x, y):
        return [f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{LEAF_H}" rx="5" '
                f'class="{kind}"/>', _text(x + w / 2, y + LEAF_H / 2 + 4, label)]
    return _Box(w, LEAF_H, draw)


def _chain(boxes: list[_Box], labels: list[str]) -> _Box:
    """Boxes in a column, `labels[i]` on the arrow from box i to box i + 1."""
    w = max([b.w for b in boxes] + [2 * (_width(s) + 8) for s in labels])
    h = sum(b.h for b in boxes) + ARROW_H * (len(boxes) - 1)

    def draw(x, y):
        out, cy = [], y
        for i, b in enumerate(boxes):
            out += b.draw(x + (w - b.w) / 2, cy)
            cy += b.h
            if i < len(labels):
                out += _arrow(x + w / 2, cy, cy + ARROW_H, labels[i])
                cy += ARROW_H
        return out
    return _Box(w, h, draw)


def _frame(title: str, columns: list[tuple[str, _Box, str, str]], kind: str = "frame") -> _Box:
    """A titled frame holding one column per child: (key, box, type in, type out)."""
    has_keys = any(key for key, *_ in columns)
    cols = []
    for key, box, t_in, t_out in columns:
        cw = max(box.w, 2 * (_width(t_in) + 8), 2 * (_width(t_out) + 8), _width(key) + 4)
        ch = BAND_H + (KEY_H if has_keys else 0) + 2 * ARROW_H + box.h + BAND_H
        cols.append((key, box, t_in, t_out, cw, ch))
    inner_w = sum(c[4] for c in cols) + GAP * (len(cols) - 1)
    w = max(inner_w, _width(title) + 8) + 2 * PAD
    h = TITLE_H + max(c[5] for c in cols) + PAD

    def draw(x, y):
        out = [f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" rx="7" '
               f'class="{kind}"/>', _text(x + 8, y + 14, title, "start", "title")]
        top, bottom, mid = y + TITLE_H, y + h - PAD, x + w / 2
        cx = x + PAD + (w - 2 * PAD - inner_w) / 2
        for key, box, t_in, t_out, cw, _ in cols:
            c = cx + cw / 2
            out.append(f'<polyline points="{mid:.1f},{y:.1f} {mid:.1f},{top:.1f} '
                       f'{c:.1f},{top + BAND_H:.1f}" class="edge"/>')
            cy = top + BAND_H
            if has_keys:
                out.append(_text(c, cy + 12, key, cls="key"))
                cy += KEY_H
            out += _arrow(c, cy, cy + ARROW_H, t_in)
            cy += ARROW_H
            out += box.draw(c - box.w / 2, cy)
            cy += box.h
            out += _arrow(c, cy, cy + ARROW_H, t_out)
            out.append(f'<polyline points="{c:.1f},{cy + ARROW_H:.1f} {c:.1f},'
                       f'{bottom - BAND_H:.1f} {mid:.1f},{bottom:.1f} {mid:.1f},{y + h:.1f}" '
                       f'class="edge"/>')
            cx += cw + GAP
        return out
    return _Box(w, h, draw)


class _Layout:
    """Lays out one expression; collects the forward declarations it references."""

    def __init__(self):
        self.declarations: list = []

    def block(self, b: Block) -> _Box:
        from refold.blocks.composition import Composition, Pipe
        if b.is_forward_declaration_ref():
            decl = b.declaration
            if all(d is not decl for d in self.declarations):
                self.declarations.append(decl)
            return _leaf("↻ " + self.declaration_name(decl), "ref")
        children = b.children if isinstance(b, Block) else []
        label = _block_label(b)
        if isinstance(b, Pipe) and not _factory_made(b):
            members = b.members
            return _chain([self.block(m) for m in members],
                          [_cut(type_label(m.output_type)) for m in members[:-1]])
        if not children or (_factory_made(b) and label.split()[0] != "ZipWith"):
            return _leaf(label)
        if isinstance(b, Composition) and not isinstance(b, Pipe):
            return self.composition(b, label)
        return _frame(label, [(b.child_key(c).lstrip("."), self.block(c),
                               _cut(type_label(c.input_type)), _cut(type_label(c.output_type)))
                              for c in children])

    def composition(self, comp, label: str) -> _Box:
        """A wired composition: its children in order, each headed by what it reads."""
        names = {id(comp.input): "input"}
        columns = []
        for i, c in enumerate(comp.children):
            names[id(c)] = f"[{i}]"
        for i, c in enumerate(comp.children):
            reads = [names.get(id(src), "?") + ("" if idx is None else f"[{idx!r}]")
                     for src, idx in comp.sources(c)]
            key = f"[{i}] reads " + (", ".join(reads) or "nothing")
            columns.append((key, self.block(c), _cut(type_label(c.input_type)),
                            _cut(type_label(c.output_type))))
        return _frame(label, columns)

    def declaration_name(self, decl) -> str:
        if decl.name is not None:
            return decl.name
        for i, d in enumerate(self.declarations):
            if d is decl:
                return f"decl{i + 1}"
        return "decl"


def _factory_made(b) -> bool:
    """Made by a function (`td.Sum()`, `td.Mean()`, `td.Scalar()`): drawn as one box."""
    made = getattr(b, "_constructor_name", None)
    return made is not None and made != type(b).__name__


def _block_label(b) -> str:
    """A leaf's text: its label in block paths, and what tells it apart."""
    layer = getattr(b, "_layer", None)
    if layer is not None:  # a layer (`td.FC(8)`) wrapped as a `Function`
        size = getattr(layer, "output_size", None)
        activation = getattr(layer.keras_layer, "activation", None)
        parts = [b.name or layer.label, "" if size is None else str(size),
                 getattr(activation, "__name__", "")]
        return " ".join(p for p in parts if p)
    if type(b).__name__ == "Function" and b.name is None:
        return f"Function {b.fn_name}"
    try:
        args = b._repr_args()
    except Exception:  # a half-built block: its label is enough
        args = {}
    shown = [str(v) if k == "dtype" else f"{k}={v!r}" for k, v in sorted(args.items())
             if isinstance(v, (str, int, float)) and not isinstance(v, bool)]
    return _cut(" ".join([b.label, *shown]), 40)


_STYLE = ("<style>text{font-family:monospace;font-size:" + str(FONT) + "px}"
          ".title{font-weight:bold}"
          ".type{fill:#555;font-size:11px}.key{fill:#7a3e9d}.edge{stroke:#333;fill:none}"
          ".block{fill:#e8f0fe;stroke:#4a6fa5}.ref{fill:#fff4d6;stroke:#b8860b}"
          ".frame{fill:none;stroke:#999;stroke-dasharray:4 3}"
          ".decl{fill:#fffaf0;stroke:#b8860b}</style>")
_MARKER = ('<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
           'markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#333"/>'
           "</marker></defs>")


@dataclass
class BlockDiagram:
    """A drawn block expression: `svg` (the text of an SVG image), `save(path)`; shown
    inline in Jupyter."""

    svg: str

    def save(self, path: str | os.PathLike) -> str:
        """Writes the SVG text to `path`, a `.svg` file (or one with no extension).

        Another extension (`.png`, `.pdf`) is refused before anything is written:
        the diagram is SVG only, and SVG text in a `.png` file is not a PNG. A
        browser, Inkscape or `cairosvg` converts the SVG."""
        path = os.fspath(path)
        suffix = os.path.splitext(path)[1]
        if suffix and suffix.lower() != ".svg":
            raise ValueError(f"plot_block draws SVG only, and {path!r} asks for "
                             f"{suffix[1:]!r}: save it as a .svg file (a browser, Inkscape "
                             f"or cairosvg converts it to {suffix[1:]})")
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.svg)
        return path

    def _repr_svg_(self) -> str:
        return self.svg


def plot_block(block, to_file: str | os.PathLike | None = None) -> BlockDiagram:
    """Draws a block expression as an SVG diagram with the type on every edge.

    The expression's input enters at the top, its output leaves at the bottom; each
    `ForwardDeclaration` the expression refers to is drawn once, beside it, as a frame
    holding its definition. Types not known yet (an expression not yet validated) show
    as `?`. The expression is validated first where it can be (as `td.Model` would),
    which fixes types still open, such as the root's input.

    Args:
        block: a block, or a block-like value (`td.convert_to_block` takes it).
        to_file: where to write the SVG (a `.svg` path), if anywhere. Another
            extension (`.png`, `.pdf`) is a `ValueError`, raised before drawing.

    Returns:
        A `BlockDiagram` (its `svg` text; Jupyter shows it inline).
    """
    from refold.blocks.composition import convert_to_block
    from refold.blocks.validation import validate
    if to_file is not None:  # a wrong extension is refused before anything is drawn
        suffix = os.path.splitext(os.fspath(to_file))[1]
        if suffix and suffix.lower() != ".svg":
            BlockDiagram("").save(to_file)  # raises, naming the file
    root = convert_to_block(block)
    try:  # the types a compiler would find (the root's input becomes a Python object)
        validate(root)
    except (TypeError, ValueError):  # a half-built expression: draw what is known
        pass
    layout = _Layout()
    main = _chain([_leaf("input", "ref"), layout.block(root), _leaf("output", "ref")],
                  [_cut(type_label(root.input_type)), _cut(type_label(root.output_type))])
    panels, i = [main], 0
    while i < len(layout.declarations):  # definitions may refer to further declarations
        decl = layout.declarations[i]
        name = layout.declaration_name(decl)
        body = layout.block(decl.target) if decl.target is not None else _leaf("unresolved")
        panels.append(_frame(f"↻ {name} := ForwardDeclaration", [
            ("", body, _cut(type_label(decl.input_type)),
             _cut(type_label(decl.output_type)))], "decl"))
        i += 1
    width = sum(p.w for p in panels) + 2 * GAP * len(panels)
    height = max(p.h for p in panels) + 2 * GAP
    parts, x = [], GAP
    for p in panels:
        parts += p.draw(x, GAP)
        x += p.w + 2 * GAP
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
           f'viewBox="0 0 {width:.0f} {height:.0f}">' + _STYLE + _MARKER
           + "".join(parts) + "</svg>\n")
    diagram = BlockDiagram(svg)
    if to_file is not None:
        diagram.save(os.fspath(to_file))
    return diagram
