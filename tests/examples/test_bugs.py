"""The bug-detector example: seeding bugs into Python statements, reading the shipped
sites, the detectors (batched as the reference evaluator computes them; which of them
can tell swapped arguments apart), and a run end to end on tiny data."""

from __future__ import annotations

import gzip
import json
import os
import sys
import sysconfig
from collections import Counter

import numpy as np
import pytest

from refold.compiler import Compiler
from refold.examples.bugs import __main__ as bugs_main
from refold.examples.bugs.data import Task, parts, read_sites, sample
from refold.examples.bugs.extract import (
    DEFAULT_PATH,
    FAMILIES,
    KINDS,
    extract,
    seeded,
    sites_in,
)
from refold.examples.bugs.models import DEFAULT_DETECTORS, DETECTORS, detector

SHIPPED_PYTHON = (3, 11, 7)


def _key(site: dict) -> str:
    return json.dumps([site["kind"], site["tree"], site["at"], site["to"]])


def _by_kind(source: str) -> dict[str, list[dict]]:
    out: dict = {}
    for s in sites_in(source, "m.py"):
        out.setdefault(s["kind"], []).append(s)
    return out


def test_a_swap_site_swaps_the_first_two_positional_arguments():
    (site,) = _by_kind("x = f(a, g(b), c, key=d)\n")["swap"]
    assert site["tree"] == ["Assign", "x", ["@Call", "f", "a", ["Call", "g", "b"], "c",
                                           ["keyword", "key", "d"]]]
    assert seeded(site) == ["Assign", "x", ["@Call", "f", ["Call", "g", "b"], "a", "c",
                                            ["keyword", "key", "d"]]]
    assert site["tree"][2][2] == "a"  # seeding copies: the site's own tree is unchanged
    assert (site["line"], site["col"], site["code"]) == (1, 4, "f(a, g(b), c, key=d)")
    # one argument, a starred one among the first two, or two equal ones: no swap
    assert "swap" not in _by_kind("f(a)\nf(*a, b)\nf(a, *b)\nf(x.y, x.y)\n")


def test_an_operator_site_changes_the_operator_within_its_family():
    family = {op: fam for fam in FAMILIES for op in fam}
    src = "".join(f"y{k} = a {op} b\n" for k, op in enumerate(
        ["+", "-", "*", "/", "//", "%", "**", "&", "|", "^", "<<", ">>", "<", "<=", ">",
         ">=", "==", "!=", "is", "is not", "in", "not in"]))
    found = _by_kind(src)["operator"]
    assert len(found) == 22
    for site in found:
        was = site["tree"][2][2]
        assert site["at"] == [2, 2] and site["to"] != was and site["to"] in family[was]
        assert seeded(site)[2][2] == site["to"]
    # chained comparisons and `@` are left out
    assert "operator" not in _by_kind("ok = a < b < c\nm = a @ b\n")


def test_an_operand_site_puts_another_variable_of_the_function_in_its_place():
    src = "def f(items, n, limit):\n    if n < len(items):\n        return limit\n"
    (site,) = _by_kind(src)["operand"]
    assert site["at"] == [1, 1] and site["tree"][1][1] == "n"
    assert site["to"] in {"items", "limit"}  # not `len`: a name the function only calls
    # the same source gives the same choice
    assert sites_in(src, "m.py") == sites_in(src, "m.py")
    assert "operand" not in _by_kind("y = a.b + 1\n")  # no plain name to replace


def test_a_compound_statement_is_judged_by_its_header_and_defaults_are_not_sites():
    src = ("def g(x=a + b):\n    pass\n"
           "if f(a, b):\n    y = c - d\n"
           "for k in range(i, j):\n    pass\n")
    trees = [s["tree"] for s in sites_in(src, "m.py")]
    assert ["If", ["@Call", "f", "a", "b"]] in trees
    assert ["Assign", "y", ["@BinOp", "c", "Sub", "d"]] in trees
    assert ["For", "k", ["@Call", "range", "i", "j"]] in trees
    assert not any("Add" in json.dumps(t) for t in trees)
    assert all(len(json.dumps(t)) < 60 for t in trees)  # the body is not in the If's tree


def test_extract_skips_tests_unparsable_files_big_statements_and_duplicates(tmp_path):
    root = tmp_path / "lib"
    (root / "pkg").mkdir(parents=True)
    (root / "test").mkdir()
    (root / "pkg" / "a.py").write_text("y = f(a, b)\nz = " + " + ".join("v" * 40) + "\n")
    (root / "pkg" / "b.py").write_text("y = f(a, b)\nw = g(a, b)\n")
    (root / "broken.py").write_text("def (:\n")
    (root / "test" / "test_a.py").write_text("y = h(a, b)\n")
    sites, stats = extract(str(root), max_nodes=30)
    assert [(s["file"], s["code"]) for s in sites] == [(os.path.join("pkg", "a.py"), "f(a, b)"),
                                                      (os.path.join("pkg", "b.py"), "g(a, b)")]
    assert stats == {"files": 3, "unparsable_files": 1, "duplicates": 1, "swap_sites": 2,
                     "operator_sites": 0, "operand_sites": 0}


@pytest.fixture(scope="module")
def shipped():
    return read_sites(DEFAULT_PATH)


def test_the_shipped_sites_read_whole_split_by_file_with_every_kind(shipped):
    sites, report = shipped
    assert report.skipped == 0 and len(sites) > 30000
    split_of_file = {}
    for s in sites:
        assert split_of_file.setdefault(s["file"], s["split"]) == s["split"]
        assert not any(p in ("test", "tests", "idle_test") for p in s["file"].split("/"))
    counts = Counter((s["split"], s["kind"]) for s in sites)
    for kind in KINDS:
        assert counts["train", kind] > 5 * counts["test", kind] > 0 and counts["dev", kind] > 0
    for s in sites[::97]:
        assert seeded(s) != s["tree"] and "@" in json.dumps(s["tree"])


@pytest.mark.skipif(sys.version_info[:3] != SHIPPED_PYTHON,
                    reason="the shipped sites are CPython 3.11.7's; other versions' ASTs differ")
def test_the_shipped_sites_are_what_extract_makes_from_this_stdlib(shipped):
    sites, _ = shipped
    root = sysconfig.get_paths()["stdlib"]
    earlier = {}
    for s in sites:
        earlier.setdefault(_key(s), s["file"])
    for path in ("json/decoder.py", "colorsys.py"):
        with open(os.path.join(root, path), "rb") as f:
            found = sites_in(f.read(), path)
        ours = [s for s in sites if s["file"] == path]
        assert ours and [s for s in found if s in ours] == ours, path
        # the rest repeat a site (tree and change) shipped from this file or one before
        for s in found:
            if s not in ours:
                assert _key(s) in earlier and earlier[_key(s)] <= path, (path, s)


def test_reader_skips_and_counts_bad_lines(tmp_path):
    good = {"file": "a.py", "line": 1, "col": 0, "split": "train", "code": "f(a, b)",
            "kind": "swap", "tree": ["@Call", "f", "a", "b"], "at": [], "to": None}
    lines = [json.dumps(good), "{not json", json.dumps({**good, "kind": "typo"}),
             json.dumps({**good, "at": [5]}), json.dumps({**good, "to": "x"}), "",
             json.dumps({k: v for k, v in good.items() if k != "tree"}), json.dumps(good)]
    path = tmp_path / "d.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.write("\n".join(lines) + "\n")
    sites, report = read_sites(str(path))
    assert len(sites) == 2
    assert (report.records, report.skipped, report.first_skipped) == (7, 5, 2)


def test_sample_draws_per_kind_and_keeps_file_order():
    sites = [{"split": "train", "kind": k, "n": i} for i in range(10) for k in KINDS]
    drawn = sample(sites, "train", 4)
    assert Counter(s["kind"] for s in drawn) == {k: 4 for k in KINDS}
    assert [s["n"] for s in drawn] == sorted(s["n"] for s in drawn)
    assert drawn == sample(sites, "train", 4) and drawn != sample(sites, "train", 4, seed=1)
    assert len(sample(sites, "train", None)) == 30 and sample(sites, "test", 4) == []


def test_rare_identifiers_are_read_from_their_parts():
    assert parts("maxLineLen") == ["max", "line", "len"] and parts("Add") == ["add"]
    train = {"split": "train", "kind": "swap", "at": [], "to": None,
             "tree": ["@Call", "get_value", "self", "value"]}
    task = Task([train], min_count=1)
    x = task.encode(["@Call", "set_value", "self", "other"], 0)
    leaf = x["tree"]["c"][0]
    assert leaf["t"] == task.vocabulary.index("<parts>")
    assert [task.vocabulary[c["t"]] for c in leaf["c"]] == ["<unk>", "value"]
    assert task.vocabulary[x["tree"]["c"][2]["t"]] == "<unk>"  # one part: nothing to split
    assert len(x["tokens"]) == 6 and x["tokens"][1] == leaf["t"]
    good, bad = task.pair(train)
    assert (good["label"], bad["label"]) == (0, 1) and good["tokens"] != bad["tokens"]
    assert sorted(good["tokens"]) == sorted(bad["tokens"])


def _swapped_pair():
    site = {"split": "train", "kind": "swap", "at": [1], "to": None,
            "tree": ["Assign", ["@Call", "isinstance", "obj", "int"], "y"]}
    task = Task([site], min_count=1)
    return task, task.pair(site)


@pytest.mark.parametrize("kind", DETECTORS)
def test_batched_detectors_equal_the_reference_evaluator(kind):
    task, pair = _swapped_pair()
    block = detector(kind, len(task.vocabulary), embed=4, hidden=5)
    want = [block.eval(x) for x in pair]
    for scheduler in ("agenda", "depth") if kind.startswith("tree") else ("agenda",):
        got = Compiler(block, scheduler=scheduler).run(list(pair))
        np.testing.assert_allclose(np.stack(got), np.stack(want), rtol=1e-5, atol=1e-6)


def test_only_the_ordered_detectors_tell_swapped_arguments_apart():
    task, (good, bad) = _swapped_pair()
    for kind in DETECTORS:
        block = detector(kind, len(task.vocabulary), embed=4, hidden=5)
        same = np.allclose(block.eval(good), block.eval(bad), rtol=1e-6, atol=1e-7)
        assert same == (kind in ("bag", "tree_lstm")), kind


def test_accuracies_spots_and_table():
    acc = bugs_main.accuracies(np.array([.6, .6, .1, .9, .2, .8]), np.array([0, 1] * 3),
                               ["swap", "swap", "operator", "operator", "operand", "operand"])
    assert acc == {"swap": 0.5, "operator": 1.0, "operand": 1.0, "all": 5 / 6}
    table = bugs_main.format_table({"m": {"dev": acc, "test": acc}})
    assert table.splitlines()[1].split("|")[2].split() == ["50.0", "100.0", "100.0", "83.3"]
    sites = [{"file": f"f{k}.py", "line": k, "col": 0, "kind": "swap", "code": "f(a, b)"}
             for k in range(5)]
    found = bugs_main.spots(sites, np.array([.1, .9, .3, .95, .2]), 2)
    assert [s["line"] for s in found] == [3, 1]
    assert bugs_main.format_spots(found).splitlines()[0] == " 1. 0.950  f3.py:3  [swap]  f(a, b)"


@pytest.mark.parametrize("bad", [["--epochs", "0"], ["--train-sites", "0"], ["--top", "-1"]])
def test_bad_arguments_are_refused(bad):
    with pytest.raises(SystemExit):
        bugs_main.parse_args(bad)


def test_the_default_run_compares_a_tree_a_sequence_and_a_bag():
    args = bugs_main.parse_args([])
    assert args.models == list(DEFAULT_DETECTORS) == ["tree_lstm_pos", "bilstm", "bag"]
    assert args.data == DEFAULT_PATH and os.path.exists(args.data)


def test_main_runs_end_to_end_on_tiny_data(tmp_path, capsys, shipped):
    sites, _ = shipped
    tiny = []
    for split, n in (("train", 30), ("dev", 6), ("test", 8)):
        for kind in KINDS:
            tiny += [s for s in sites if s["split"] == split and s["kind"] == kind][:n]
    path = tmp_path / "tiny.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.write("\n".join(json.dumps(s) for s in tiny) + "\n{broken\n")
    out_dir = tmp_path / "out"
    out = bugs_main.main(["--data", str(path), "--epochs", "2", "--train-sites", "30",
                          "--embed", "8", "--hidden", "8", "--batch-size", "16", "--lr", "0.01",
                          "--min-count", "1", "--top", "5", "--out", str(out_dir),
                          "--verbose", "0"])
    printed = capsys.readouterr().out
    assert f"{len(tiny)} of {len(tiny) + 1} records read, 1 skipped" in printed
    assert list(out["rows"]) == ["tree_lstm_pos", "bilstm", "bag"]
    for kind in out["rows"]:
        assert all(np.isfinite(out["histories"][kind]["loss"]))
        assert out["histories"][kind]["loss"][-1] < out["histories"][kind]["loss"][0]
        assert set(out["rows"][kind]["test"]) == {*KINDS, "all"}
    # the bag scores a call and its swapped twin alike: one of the two is always wrong
    assert out["rows"]["bag"]["test"]["swap"] == 0.5
    assert len(out["spots"][out["scanned"]]) == 5 and "most suspicious" in printed
    assert sorted(os.listdir(out_dir)) == sorted(
        ["curves.png", "results.json", *(f"{p}_{k}.{e}" for k in out["rows"]
                                         for p, e in (("history", "csv"), ("spots", "txt")))])
    saved = json.loads((out_dir / "results.json").read_text())
    assert saved["sizes"] == {"train": 180, "dev": 36, "test": 48}


def test_main_says_which_split_is_empty(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"split": "train", "kind": "swap", "tree": ["@Call", "f", "a", "b"],
                                "at": [], "to": None}) + "\n")
    with pytest.raises(ValueError, match="no dev sites"):
        bugs_main.main(["--data", str(path), "--out", str(tmp_path / "o"), "--verbose", "0"])


def test_the_extract_command_writes_what_the_reader_reads_byte_for_byte_again(tmp_path):
    from refold.examples.bugs import extract as extract_module
    root = tmp_path / "lib"
    root.mkdir()
    (root / "m.py").write_text("def f(a, b):\n    return g(a, b) + a\n")
    paths = [tmp_path / "a.jsonl.gz", tmp_path / "b.jsonl.gz"]
    for p in paths:
        out = extract_module.main(["--stdlib", str(root), "--out", str(p)])
    assert out["sites"] == 3  # the call's swap; the sum's operator and operand
    assert paths[0].read_bytes() == paths[1].read_bytes()
    sites, report = read_sites(str(paths[0]))
    assert report.skipped == 0 and [s["kind"] for s in sites] == ["operator", "operand", "swap"]
