"""The function-names example: extraction from Python source, the shipped dataset, reading,
the three encoders, and a tiny end-to-end run (no network)."""

import ast
import gzip
import json
import os
import sys
import sysconfig
import textwrap
from collections import Counter

import numpy as np
import pytest
import tensorflow as tf

from refold.compiler import Compiler
from refold.examples.function_names import __main__ as names_main
from refold.examples.function_names.data import Task, check_tree, read_records
from refold.examples.function_names.extract import (
    DEFAULT_PATH,
    extract,
    first_word,
    function_tree,
    split_of,
    tree_size,
)
from refold.examples.function_names.models import DEFAULT_ENCODERS, ENCODERS, encoder_block

SHIPPED_PYTHON = (3, 11, 7)


def _fn(src: str):
    return ast.parse(textwrap.dedent(src)).body[0]


def _leaves(tree):
    if isinstance(tree, str):
        yield tree
        return
    for child in tree[1:]:
        yield from _leaves(child)


def test_first_word_splits_snake_and_camel_case():
    names = ["get_item", "__getitem__", "_isDir", "setUp", "HTTPServer", "x2y", "__", "run"]
    assert [first_word(n) for n in names] == ["get", "getitem", "is", "set", "httpserver",
                                              "x2y", "__", "run"]


def test_the_tree_hides_the_name_and_drops_docstring_and_decorators():
    tree = function_tree(_fn('''
        @cached
        def _get_size(self, key: int) -> int:
            """Docstring."""
            total = self.get_size(key) + len("abc") * 100
            return total
        '''))
    assert tree[0] == "FunctionDef"
    leaves = list(_leaves(tree))
    assert "get_size" not in leaves and "_get_size" not in leaves and "<name>" in leaves
    assert "cached" not in leaves and "Docstring." not in str(tree)
    assert {"<str>", "<int>", "len", "total", "self", "key", "int"} <= set(leaves)
    assert "Load" not in str(tree) and "Store" not in str(tree)
    assert function_tree(_fn("def f():\n    'only a docstring'\n")) == [
        "FunctionDef", "arguments", "<empty>"]
    assert tree_size(["a", "b", ["c", "d"]]) == 4


def test_split_is_a_function_of_the_file_path():
    splits = Counter(split_of(f"pkg/mod{i}.py") for i in range(2000))
    assert set(splits) == {"train", "dev", "test"}
    assert 0.7 < splits["train"] / 2000 < 0.9
    assert split_of("a/b.py") == split_of("a/b.py")


def test_extract_skips_tests_unparsable_files_big_trees_and_duplicates(tmp_path):
    root = tmp_path / "lib"
    (root / "pkg").mkdir(parents=True)
    (root / "test").mkdir()
    (root / "pkg" / "a.py").write_text("def get_x(self):\n    return self.x\n\n"
                                       "def big():\n" + "".join(f"    v{i} = {i}\n"
                                                                for i in range(60)))
    (root / "pkg" / "b.py").write_text("def get_y(self):\n    return self.x\n\n"
                                       "class C:\n    def is_ok(self):\n        return True\n")
    (root / "broken.py").write_text("def (:\n")
    (root / "test" / "test_a.py").write_text("def test_a():\n    pass\n")
    records, stats = extract(str(root), max_nodes=50)
    assert [r["name"] for r in records] == ["get_x", "is_ok"]  # get_y: the same tree
    assert stats == {"files": 3, "unparsable_files": 1, "functions": 4, "too_big": 1,
                     "duplicates": 1}
    assert records[1]["file"] == os.path.join("pkg", "b.py") and records[1]["line"] == 5
    assert records[1]["label"] == "is" and records[1]["split"] == split_of(records[1]["file"])


@pytest.fixture(scope="module")
def shipped():
    records, report = read_records(DEFAULT_PATH)
    return records, report


def test_the_shipped_dataset_reads_whole_split_by_file_without_duplicates(shipped):
    records, report = shipped
    assert report.skipped == 0 and len(records) > 10000
    split_of_file = {}
    for r in records:
        assert split_of_file.setdefault(r["file"], r["split"]) == r["split"]
        assert not any(part in ("test", "tests", "idle_test") for part in r["file"].split("/"))
    assert len({json.dumps(r["tree"]) for r in records}) == len(records)
    counts = Counter(r["split"] for r in records)
    assert counts["train"] > 5 * counts["test"] > 0 and counts["dev"] > 0
    for r in records[::50]:
        hidden = r["name"].strip("_")
        assert hidden not in {leaf.strip("_") for leaf in _leaves(r["tree"])}


@pytest.mark.skipif(sys.version_info[:3] != SHIPPED_PYTHON,
                    reason="the shipped trees are CPython 3.11.7's; other versions' ASTs differ")
def test_the_shipped_dataset_is_what_extract_makes_from_this_stdlib(shipped):
    records, _ = shipped
    root = sysconfig.get_paths()["stdlib"]
    for path in ("json/decoder.py", "colorsys.py"):
        with open(os.path.join(root, path), "rb") as f:
            fns = [n for n in ast.walk(ast.parse(f.read()))
                   if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        ours = [r for r in records if r["file"] == path]
        assert ours, path
        by_line = {n.lineno: n for n in fns}
        for r in ours:
            assert function_tree(by_line[r["line"]]) == r["tree"]


def test_reader_skips_and_counts_bad_lines(tmp_path):
    good = {"file": "a.py", "line": 1, "name": "get", "label": "get", "split": "train",
            "tree": ["FunctionDef", "x"]}
    lines = [json.dumps(good), "{not json", json.dumps({**good, "split": "valid"}),
             json.dumps({**good, "tree": ["FunctionDef", [1, "x"]]}), "",
             json.dumps({k: v for k, v in good.items() if k != "label"}), json.dumps(good)]
    path = tmp_path / "d.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.write("\n".join(lines) + "\n")
    records, report = read_records(str(path))
    assert len(records) == 2
    assert (report.records, report.skipped, report.first_skipped) == (6, 4, 2)
    assert "4 skipped (the first: line 2" in str(report)
    with pytest.raises(ValueError, match="string or"):
        check_tree(["a", {"b": 1}])


def test_task_fixes_classes_vocabulary_and_size_limit_from_training():
    recs = ([{"label": "get", "split": "train", "tree": ["F", "a", "b"]}] * 3
            + [{"label": "set", "split": "train", "tree": ["F", "c", ["G", "a"]]}] * 2
            + [{"label": "is", "split": "train", "tree": ["F", "d"]}]
            + [{"label": "set", "split": "test", "tree": ["F", "zzz", "zzz"]}])
    task = Task(recs, classes=2)
    assert task.classes == ["get", "set"] and task.label("is") is None
    assert task.vocabulary == ["<unk>", "F", "G", "a", "b", "c"]  # not "d": "is" is out
    assert task.encode(recs[-1])["tokens"] == [1, 0, 0]            # test tokens never count
    other = Task(recs, classes=1, other=True)
    assert other.classes == ["get", "other"] and other.encode(recs[5])["label"] == 1
    assert Task(recs, classes=2, max_nodes=3).encode(recs[3]) is None


def _tiny_examples():
    recs = [{"label": "get", "split": "train", "tree": ["F", ["Return", ["Attribute", "s", "x"]]]},
            {"label": "set", "split": "train",
             "tree": ["F", ["Assign", ["Attribute", "s", "x"], "v"], ["Expr", "c"]]},
            {"label": "get", "split": "train", "tree": ["F", "s"]}]
    task = Task(recs, classes=2, min_count=1)
    return task, [task.encode(r) for r in recs]


@pytest.mark.parametrize("kind", ENCODERS)
def test_batched_encoders_equal_the_reference_evaluator(kind):
    task, xs = _tiny_examples()
    block = encoder_block(kind, len(task.vocabulary), 2, embed=4, hidden=5)
    schedulers = ("agenda", "depth") if kind.startswith("tree_lstm") else ("agenda",)
    want = [block.eval(x) for x in xs]
    for scheduler in schedulers:
        got = Compiler(block, scheduler=scheduler).run(xs)
        np.testing.assert_allclose(np.stack(got), np.stack(want), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["tree_lstm", "tree_lstm_pos", "bag", "bilstm"])
def test_encoders_with_dropout_train_as_the_reference_evaluator_does(kind):
    from refold.blocks.evaluation.training_mode import training_mode
    task, xs = _tiny_examples()
    block = encoder_block(kind, len(task.vocabulary), 2, embed=4, hidden=5, dropout=0.4,
                          recurrent_dropout=0.3)
    c = Compiler(block)
    plan = c.plan(xs)
    with training_mode(True, (3, 1, 0)):
        outs = c.executor.compute({k: tf.constant(v) for k, v in plan.feed.arrays.items()})
    got = np.stack(c.results(plan, [o.numpy() for o in outs]))
    want = np.stack([block.eval(x, training=True, seed=(3, 1, 0), example=i)
                     for i, x in enumerate(xs)])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert not np.allclose(got, np.stack([block.eval(x) for x in xs]))


def test_the_tree_lstm_drops_its_inputs_by_default_and_the_others_do_not():
    task, _ = _tiny_examples()
    args = names_main.parse_args(["--embed", "4", "--hidden", "5"])
    for kind in ENCODERS:
        random = Compiler(names_main.encoder_for(kind, task, args)).program.key_type
        assert (random is not None) == (kind == "tree_lstm"), kind
    args = names_main.parse_args(["--dropout", "0"])
    assert Compiler(names_main.encoder_for("tree_lstm", task, args)).program.key_type is None


def test_the_tree_lstm_sees_structure_the_bag_does_not():
    # The same tokens arranged in two trees: the bag gives one answer, the TreeLSTM two.
    task = Task([{"label": "get", "split": "train", "tree": ["F", ["G", "a"], "b"]}],
                classes=1, min_count=1)
    a = task.encode({"label": "get", "tree": ["F", ["G", "a"], "b"]})
    b = task.encode({"label": "get", "tree": ["F", ["G", "b"], "a"]})
    bag = encoder_block("bag", len(task.vocabulary), 3, embed=4, hidden=5)
    tree = encoder_block("tree_lstm", len(task.vocabulary), 3, embed=4, hidden=5)
    np.testing.assert_allclose(bag.eval(a), bag.eval(b), rtol=1e-6)
    assert not np.allclose(tree.eval(a), tree.eval(b))


def test_tree_totals_are_the_sum_of_every_nodes_h_and_the_node_count():
    import refold as td
    from refold.examples.function_names.models import _tree_with_totals
    from refold.models import encoders, tree_lstm
    task, xs = _tiny_examples()
    cell = tree_lstm.ChildSumTreeLSTMCell(5, 4)
    embedding = td.Embedding(len(task.vocabulary), 4)
    def node_input():
        return td.GetItem("t") >> td.Scalar("int32") >> embedding
    totals = _tree_with_totals(cell, node_input())
    plain = encoders.tree_encoder(cell.shared(), node_input(), children="c")

    def subtrees(t):
        yield t
        for c in t["c"]:
            yield from subtrees(c)

    for x in xs:
        (h, c), h_total, count = totals.eval(x["tree"])
        nodes = list(subtrees(x["tree"]))
        assert count.tolist() == [len(nodes)]
        np.testing.assert_allclose(h, plain.eval(x["tree"])[0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(h_total, sum(plain.eval(n)[0] for n in nodes),
                                   rtol=1e-5, atol=1e-6)


def test_only_the_position_input_tells_swapped_children_apart():
    # x = self.a and self.a = x: an Assign whose two children swap places.
    recs = [{"label": "get", "split": "train", "tree": ["Assign", "x", ["Attribute", "s", "a"]]},
            {"label": "set", "split": "train", "tree": ["Assign", ["Attribute", "s", "a"], "x"]}]
    task = Task(recs, classes=2, min_count=1)
    a, b = (task.encode(r) for r in recs)
    assert [c["i"] for c in a["tree"]["c"]] == [0, 1]
    plain = encoder_block("tree_lstm", len(task.vocabulary), 2, embed=4, hidden=5)
    np.testing.assert_allclose(plain.eval(a), plain.eval(b), rtol=1e-6)
    ordered = encoder_block("tree_lstm_pos", len(task.vocabulary), 2, embed=4, hidden=5)
    assert not np.allclose(ordered.eval(a), ordered.eval(b))
    deep = Task([{"label": "f", "split": "train", "tree": ["F", *["x"] * 12]}], classes=1)
    assert [c["i"] for c in deep.encode({"label": "f", "tree": ["F", *["x"] * 12]})[
        "tree"]["c"]] == list(range(8)) + [7] * 4


def test_scores_and_table():
    s = names_main.scores(np.array([0, 1, 1, 2]), np.array([0, 1, 2, 2]), 4)
    assert s["accuracy"] == 0.75 and abs(s["macro_f1"] - (1 + 2 / 3 + 2 / 3) / 3) < 1e-9
    table = names_main.format_table({"m": {"dev": s, "test": s}})
    assert table.splitlines()[1].split("|")[1].split() == ["75.0", "77.8"]


def test_main_runs_end_to_end_on_tiny_data(tmp_path, capsys, shipped):
    records, _ = shipped
    keep = {"get", "set", "init"}
    tiny = []
    for split, n in (("train", 40), ("dev", 10), ("test", 10)):
        tiny += [r for r in records if r["split"] == split and r["label"] in keep
                 and tree_size(r["tree"]) <= 30][:n]
    path = tmp_path / "tiny.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.write("\n".join(json.dumps(r) for r in tiny) + "\n{broken\n")
    out_dir = tmp_path / "out"
    out = names_main.main(["--data", str(path), "--classes", "3", "--epochs", "2",
                           "--models", "tree_lstm", "bag", "bilstm",
                           "--embed", "8", "--hidden", "8", "--batch-size", "16",
                           "--lr", "0.01", "--out", str(out_dir), "--verbose", "0"])
    printed = capsys.readouterr().out
    assert "60 of 61 records read, 1 skipped (the first: line 61" in printed
    assert sorted(out["task"].classes) == sorted(keep)
    assert list(out["rows"])[1:] == ["tree_lstm", "bag", "bilstm"]
    for kind in ("tree_lstm", "bag", "bilstm"):
        assert all(np.isfinite(out["histories"][kind]["loss"]))
        assert out["histories"][kind]["loss"][-1] < out["histories"][kind]["loss"][0]
        assert kind in printed
    assert sorted(os.listdir(out_dir)) == ["curves.png", "history_bag.csv",
                                           "history_bilstm.csv", "history_tree_lstm.csv",
                                           "results.json"]
    saved = json.loads((out_dir / "results.json").read_text())
    assert saved["sizes"] == {"train": 40, "dev": 10, "test": 10}


def test_the_default_run_compares_the_tree_lstms_with_the_bag_and_the_bilstm():
    args = names_main.parse_args([])
    assert args.models == list(DEFAULT_ENCODERS)
    assert {"tree_lstm", "bag", "bilstm"} <= set(args.models) <= set(ENCODERS)


def test_main_says_which_split_is_empty(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"label": "get", "split": "train", "tree": ["F", "x"]}) + "\n")
    with pytest.raises(ValueError, match="no dev functions"):
        names_main.main(["--data", str(path), "--out", str(tmp_path / "o"), "--verbose", "0"])


def test_the_extract_command_writes_what_the_reader_reads_byte_for_byte_again(tmp_path):
    from refold.examples.function_names import extract as extract_module
    root = tmp_path / "lib"
    root.mkdir()
    (root / "m.py").write_text("def get_x(self):\n    return self.x\n\n"
                               "async def read_all(s):\n    return await s.read()\n")
    paths = [tmp_path / "a.jsonl.gz", tmp_path / "b.jsonl.gz"]
    for p in paths:
        out = extract_module.main(["--stdlib", str(root), "--out", str(p)])
    assert out["records"] == 2
    assert paths[0].read_bytes() == paths[1].read_bytes()
    records, report = read_records(str(paths[0]))
    assert report.skipped == 0 and [r["label"] for r in records] == ["get", "read"]
    assert records[1]["tree"][0] == "AsyncFunctionDef"
