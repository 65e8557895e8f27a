"""The SST-format treebank reader and writer, vocabulary and GloVe loading."""

import numpy as np
import pytest

from refold.examples.sentiment.treebank import (
    UNK,
    Vocabulary,
    binary_label,
    iter_treebank,
    leaves,
    node_labels,
    nodes,
    num_leaves,
    parse_tree,
    read_glove,
    read_treebank,
    to_ptb,
    tree_depth,
    write_treebank,
)


def test_parse_tree_reads_labels_on_every_node_and_words_at_leaves():
    tree = parse_tree("(3 (2 It) (4 (2 's) (4 great)))")
    assert tree["label"] == 3
    assert tree["children"][0] == {"label": 2, "word": "It"}
    assert tree["children"][1]["label"] == 4
    assert leaves(tree) == ["It", "'s", "great"]
    assert node_labels(tree) == [2, 2, 4, 4, 3]
    assert num_leaves(tree) == 3 and tree_depth(tree) == 3


def test_parse_tree_accepts_a_lone_leaf_any_arity_and_loose_spacing():
    assert parse_tree("(4 wow)") == {"label": 4, "word": "wow"}
    tree = parse_tree("  (1(2 a)  (2 b)(0 c) )\n")
    assert [c["word"] for c in tree["children"]] == ["a", "b", "c"]


def test_parse_tree_strips_backslashes_from_words():
    assert leaves(parse_tree(r"(2 (2 1\/2) (2 \*))")) == ["1/2", "*"]


@pytest.mark.parametrize("line, column, message", [
    ("(3 (2 It) (4 great)", 20, "unbalanced parentheses"),
    ("(3 (2 It)) (4 x))", 12, "trailing text"),
    ("(7 (2 It) (4 great))", 2, "label 7 out of range"),
    ("(x (2 It) (4 great))", 2, "non-integer label 'x'"),
    ("(3 (2 It) ( great))", 13, "non-integer label 'great'"),
    ("(3 (2) (4 great))", 6, "found ')'"),
    ("(3 (2 It) good (4 great))", 11, "bare word 'good'"),
    ("3 (2 It)", 1, "expected '(' to start a tree"),
    (")", 1, "unbalanced parentheses: ')' with no open '('"),
    ("(2 (2 a b))", 9, "expected ')' to close the leaf"),
])
def test_parse_tree_errors_name_line_column_and_problem(line, column, message):
    with pytest.raises(ValueError) as err:
        parse_tree(line, source="f.txt", lineno=7)
    text = str(err.value)
    assert text.startswith(f"f.txt:7:{column}: "), text
    assert message in text


def test_read_treebank_reports_the_line_number_of_a_malformed_line(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text("(3 (2 a) (3 b))\n\n(2 (2 c) (2 d)\n(1 e)\n")
    with pytest.raises(ValueError, match=r"bad\.txt:3:15: unbalanced parentheses"):
        read_treebank(path)


def test_read_treebank_skips_blank_lines_and_keeps_order(tmp_path):
    path = tmp_path / "ok.txt"
    path.write_text("(3 (2 a) (3 b))\n\n   \n(1 e)\n")
    trees = read_treebank(path)
    assert [to_ptb(t) for t in trees] == ["(3 (2 a) (3 b))", "(1 e)"]
    assert [t["label"] for t in iter_treebank(path)] == [3, 1]


def test_write_then_read_gives_the_same_trees(tmp_path):
    trees = [parse_tree("(3 (2 It) (4 (2 's) (4 great)))"), parse_tree("(0 awful)")]
    write_treebank(tmp_path / "t.txt", trees)
    assert (tmp_path / "t.txt").read_text() == \
        "(3 (2 It) (4 (2 's) (4 great)))\n(0 awful)\n"
    assert read_treebank(tmp_path / "t.txt") == trees


@pytest.mark.parametrize("tree, message", [
    ({"label": 5, "word": "x"}, "label must be an int 0-4"),
    ({"label": 2, "word": "a b"}, "cannot write leaf word"),
    ({"label": 2, "word": "(x"}, "cannot write leaf word"),
    ({"label": 2, "children": []}, "no children"),
])
def test_to_ptb_refuses_trees_it_cannot_write_faithfully(tree, message):
    with pytest.raises(ValueError, match=message):
        to_ptb(tree)


def test_deep_trees_parse_and_traverse_without_recursion():
    depth = 10_000
    line = "(2 " * depth + "(2 x)" + ")" * depth
    tree = parse_tree(line)
    assert tree_depth(tree) == depth + 1
    assert len(nodes(tree)) == depth + 1
    assert to_ptb(tree) == line


def test_nodes_are_in_post_order_with_the_root_last():
    tree = parse_tree("(0 (1 (2 a) (3 b)) (4 c))")
    assert [n["label"] for n in nodes(tree)] == [2, 3, 1, 4, 0]


def test_binary_label_drops_neutral_and_rejects_bad_labels():
    assert [binary_label(y) for y in range(5)] == [0, 0, None, 1, 1]
    with pytest.raises(ValueError):
        binary_label(5)


def test_vocabulary_orders_by_frequency_and_maps_unknown_to_zero():
    trees = [parse_tree("(2 (2 b) (2 a))"), parse_tree("(2 (2 a) (2 c))")]
    vocab = Vocabulary.from_trees(trees)
    assert vocab.words == [UNK, "a", "b", "c"]
    assert vocab.ids(["c", "zzz", "a"]) == [3, 0, 1]
    assert Vocabulary.from_trees(trees, min_count=2).words == [UNK, "a"]
    lower = Vocabulary(["Good"], lowercase=True)
    assert lower.id("GOOD") == 1 and "gOOd" in lower


def test_vocabulary_save_load_roundtrip_and_errors(tmp_path):
    vocab = Vocabulary(["x", "y"])
    vocab.save(tmp_path / "v.txt")
    assert Vocabulary.load(tmp_path / "v.txt") == vocab
    (tmp_path / "bad.txt").write_text(f"{UNK}\nx\nx\n")
    with pytest.raises(ValueError, match=r"bad\.txt:3: duplicate word 'x'"):
        Vocabulary.load(tmp_path / "bad.txt")
    (tmp_path / "nounk.txt").write_text("x\n")
    with pytest.raises(ValueError, match="first line"):
        Vocabulary.load(tmp_path / "nounk.txt")


def test_read_glove_fills_known_words_and_randomises_the_rest(tmp_path):
    path = tmp_path / "glove.txt"
    path.write_text("good 1 2 3\nother 9 9 9\nbad -1 -2 -3\ngood 7 7 7\n")
    vocab = Vocabulary(["good", "bad", "meh"])
    table = read_glove(path, vocab)
    assert table.shape == (4, 3) and table.dtype == np.float32
    np.testing.assert_array_equal(table[vocab.id("good")], [1, 2, 3])  # first one wins
    np.testing.assert_array_equal(table[vocab.id("bad")], [-1, -2, -3])
    for row in (table[0], table[vocab.id("meh")]):
        assert np.all(np.abs(row) <= 0.05)


@pytest.mark.parametrize("text, message", [
    ("good 1 2 3\nbad 1 2\n", r"glove\.txt:2: inconsistent dimension: 2 values, expected 3"),
    ("good 1 x 3\n", r"glove\.txt:1: malformed line, non-numeric value 'x'"),
    ("good\n", r"glove\.txt:1: malformed line"),
])
def test_read_glove_errors_name_the_line(tmp_path, text, message):
    path = tmp_path / "glove.txt"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        read_glove(path, Vocabulary(["good", "bad"]))
