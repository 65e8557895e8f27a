"""`plot_block` draws a block expression as SVG, with the type on every edge."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
import tensorflow as tf

import refold as td
from refold.blocks.diagram import plot_block, type_label

SVG = "{http://www.w3.org/2000/svg}"


def quick_start_tree():
    tree = td.ForwardDeclaration(td.PyObjectType(), td.TensorType((8,)), name="tree")
    leaf = td.Scalar() >> td.Function(lambda x: x[:, None]) >> td.FC(8)
    pair = td.Record((tree(), tree())) >> td.Concat() >> td.FC(8)
    tree.resolve_to(td.OneOf(lambda t: isinstance(t, tuple), {False: leaf, True: pair}))
    return tree() >> td.FC(2, activation=None)


def parse(svg: str):
    root = ET.fromstring(svg)
    texts = [t.text for t in root.iter(f"{SVG}text")]
    rects = {}
    for r in root.iter(f"{SVG}rect"):
        rects.setdefault(r.get("class"), []).append(r)
    return root, texts, rects


@pytest.mark.parametrize("t, label", [
    (td.TensorType(()), "float32"),
    (td.TensorType((8,)), "float32[8]"),
    (td.TensorType((2, 3), "int32"), "int32[2, 3]"),
    (td.TupleType(td.TensorType((8,)), td.TensorType((8,))), "(float32[8], float32[8])"),
    (td.TupleType(td.TensorType(())), "(float32,)"),
    (td.SequenceType(td.PyObjectType()), "Seq[PyObject]"),
    (td.BroadcastSequenceType(td.TensorType(())), "Broadcast[float32]"),
    (td.VoidType(), "Void"),
    (None, "?"),
])
def test_type_labels_are_short(t, label):
    assert type_label(t) == label


def test_the_quick_start_tree_shows_every_block_once_and_every_edge_type():
    _, texts, rects = parse(plot_block(quick_start_tree()).svg)
    # the expression, then the declaration's definition beside it
    assert {"input", "output", "↻ tree", "↻ tree := ForwardDeclaration"} <= set(texts)
    assert texts.count("↻ tree") == 3           # the root's reference and the pair's two
    blocks = sorted(t for t in texts if t in {
        "Scalar float32", "Function <lambda>", "FC 8 relu", "Concat concat_dim=0",
        "FC 2 linear"})
    assert blocks == ["Concat concat_dim=0", "FC 2 linear", "FC 8 relu", "FC 8 relu",
                      "Function <lambda>", "Scalar float32"]
    assert len(rects["block"]) == 6 and len(rects["ref"]) == 5  # input, output, 3 refs
    # the types on the edges, from the data in to the logits out
    for t in ("PyObject", "float32", "float32[1]", "float32[8]", "(float32[8], float32[8])",
              "float32[16]", "float32[2]"):
        assert t in texts, t
    # the OneOf's cases and the record's fields head their columns
    assert {"[False]", "[True]", "[0]", "[1]", "OneOf", "Record"} <= set(texts)


def test_the_picture_fits_its_canvas_and_is_written_to_a_file(tmp_path):
    path = tmp_path / "tree.svg"
    diagram = plot_block(quick_start_tree(), to_file=path)
    assert path.read_text() == diagram.svg == diagram._repr_svg_()
    root, _, rects = parse(diagram.svg)
    width, height = float(root.get("width")), float(root.get("height"))
    for r in (r for group in rects.values() for r in group):
        x, y = float(r.get("x")), float(r.get("y"))
        assert 0 <= x and x + float(r.get("width")) <= width
        assert 0 <= y and y + float(r.get("height")) <= height


@pytest.mark.parametrize("name", ["block.png", "block.PDF", "block.jpg"])
def test_a_file_name_asking_for_another_format_than_svg_is_refused(tmp_path, name):
    # SVG text written into a .png is not a PNG: refuse before writing anything
    with pytest.raises(ValueError, match=r"plot_block draws SVG only, and '.*block\.\w+' "
                                         r"asks for '(png|PDF|jpg)': save it as a \.svg file"):
        plot_block(quick_start_tree(), to_file=tmp_path / name)
    with pytest.raises(ValueError, match="draws SVG only"):
        plot_block(quick_start_tree()).save(str(tmp_path / name))
    assert list(tmp_path.iterdir()) == []
    for fine in ("block.SVG", "block"):  # an SVG, or no format asked for
        plot_block(quick_start_tree(), to_file=tmp_path / fine)
        assert (tmp_path / fine).read_text().startswith("<svg ")


def test_a_pipe_is_a_column_with_the_type_between_each_pair():
    block = td.Map(td.Scalar() >> td.Function(tf.square)) >> td.Sum()
    _, texts, rects = parse(plot_block(block).svg)
    # top to bottom: the data in (a Python object once validated), into the Map's frame,
    # each element through its pipe, the sequence out, summed, the output
    assert texts == ["input", "PyObject", "Map", "PyObject", "Scalar float32", "float32",
                     "Function square", "float32", "Seq[float32]", "Sum", "float32",
                     "output"]
    assert len(rects["frame"]) == 1  # the Map; Sum, made by a function, is one box


def test_a_half_built_expression_draws_with_unknown_types():
    decl = td.ForwardDeclaration(name="later")
    _, texts, _ = parse(plot_block(td.Record((decl(), td.Scalar()))).svg)
    assert "unresolved" in texts and "?" in texts and "↻ later" in texts


def test_a_wired_composition_says_what_each_child_reads():
    comp = td.Composition()
    with comp.scope():
        a = td.Scalar().reads(comp.input[0])
        b = td.Scalar().reads(comp.input[1])
        total = td.Function(tf.add).reads(a, b)
        comp.output.reads(total)
    _, texts, _ = parse(plot_block(comp).svg)
    assert "[0] reads input[0]" in texts and "[1] reads input[1]" in texts
    assert "[2] reads [0], [1]" in texts


def test_block_like_values_are_drawn_as_their_blocks():
    _, texts, _ = parse(plot_block((td.Scalar(), td.Scalar("int32"))).svg)
    assert "Record ordered=True" in texts or "Record" in texts
    assert "Scalar float32" in texts and "Scalar int32" in texts
