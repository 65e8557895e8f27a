"""The peer benchmark's runner, Refold's side alone (DyNet is not installed in CI):
its tables and results have the stated structure and every rate is a positive number."""

from __future__ import annotations

import json

from benchmarks.peers import run
from tests.benchmarks.tables import rate


def test_refold_side_alone_reports_every_workload_mode_and_batch(tmp_path, capsys):
    path = tmp_path / "peers.json"
    out = run.main(["--peer", "none", "--tf-threads", "default", "--batch-sizes", "1,2",
                    "--items", "3", "--items-b1", "2", "--rounds", "2", "--json", str(path)])
    assert out["meta"]["sides"] == ["refold"]
    low, high = out["meta"]["load"]  # the 1-minute load average, before and after
    assert low <= high and {low, high} <= {out["meta"]["load_before"][0],
                                           out["meta"]["load_after"][0]}
    for workload in ("treelstm", "bilstm"):
        for b, items in ((1, 2), (2, 3)):
            for mode in ("train", "infer"):
                row = out["results"][workload][b][mode]
                assert row["items"] == items and "ratio" not in row
                assert len(row["rates"]["refold"]) == 2
                assert all(map(rate, row["rates"]["refold"])) and rate(row["median"]["refold"])
    saved = json.loads(path.read_text())
    assert saved["results"]["bilstm"]["2"]["infer"]["items"] == 3
    printed = capsys.readouterr().out
    assert "python -m benchmarks.peers --peer none" in printed and "load average" in printed
    assert f"machine: {out['meta']['machine']}" in printed
    assert "cores" in out["meta"]["machine"] and "oneDNN o" in out["meta"]["machine"]
    for workload in ("treelstm", "bilstm"):
        lines = printed.split(f"### {workload}:")[1].strip().splitlines()
        assert lines[2] == "| B | items | train Refold | infer Refold |"
        assert [line.split(" | ")[:2] for line in lines[4:6]] == [["| 1", "2"], ["| 2", "3"]]


def test_missing_dynet_says_how_to_build_it(monkeypatch, capsys):
    monkeypatch.setattr(run, "DYNET_PYTHON", "/nonexistent/python")
    try:
        run.main(["--peer", "dynet"])
    except SystemExit as e:
        assert e.code == 2
    else:
        raise AssertionError("expected SystemExit")
    assert run.DYNET_SETUP in capsys.readouterr().err


def test_ratio_table_has_a_column_per_refold_variant_and_mode():
    rows = {16: {mode: {"items": 32, "median": {"dynet": 100.0, "refold": 150.0},
                        "ratio": {"refold": {"median": 1.5, "min": 1.25, "max": 1.75}}}
                 for mode in ("train", "infer")}}
    lines = run.format_table("treelstm", rows, ["dynet", "refold"]).splitlines()
    assert lines[2] == ("| B | items | train Refold ÷ DyNet | infer Refold ÷ DyNet | "
                        "train DyNet / Refold | infer DyNet / Refold |")
    assert lines[4] == "| 16 | 32 | 1.50 [1.25-1.75] | 1.50 [1.25-1.75] | 100 / 150 | 100 / 150 |"


def test_the_parser_workload_runs_on_refolds_side_with_both_schedulers(capsys):
    out = run.main(["--peer", "none", "--tf-threads", "default", "--depth", "--workloads",
                    "parser", "--batch-sizes", "2", "--items", "3", "--rounds", "1"])
    assert out["meta"]["sides"] == ["refold", "refold-depth"]
    assert out["meta"]["workers"]["refold-depth"]["scheduler"] == "depth"
    for mode in ("train", "infer", "parse"):
        row = out["results"]["parser"][2][mode]
        assert row["items"] == 3
        assert all(map(rate, row["rates"]["refold"] + row["rates"]["refold-depth"]))
    lines = capsys.readouterr().out.split("### parser:")[1].strip().splitlines()
    assert lines[2] == ("| B | items | train Refold / Refold depth | infer Refold / Refold "
                        "depth | parse Refold / Refold depth |")


def test_parser_data_holds_each_sentences_oracle_configurations_and_the_sizes():
    data = run.make_data(["parser"], 5, seed=3)["parser"]
    assert len(data["sentences"]) == 5
    assert data["sizes"] == {**run.PARSER_SIZES, "words": len(data["vocab"]["words"]),
                             "tags": len(data["vocab"]["tags"])}
    for item in data["sentences"]:
        n = len(item["tokens"]) - 1  # the root token first
        assert len(item["configs"]) == 2 * n and item["tokens"][0] == (0, 0)


def test_the_explore_workload_runs_on_refolds_side_and_its_data_holds_gold_trees(capsys):
    data = run.make_data(["explore"], 4, seed=3)["explore"]
    assert data["explore"] == run.EXPLORE and [s["seed"] for s in data["sentences"]] == [
        0, 1, 2, 3]
    assert all(len(s["heads"]) == len(s["tokens"]) - 1 for s in data["sentences"])
    out = run.main(["--peer", "none", "--tf-threads", "default", "--workloads", "explore",
                    "--batch-sizes", "2", "--items", "3", "--rounds", "1"])
    row = out["results"]["explore"][2]
    assert list(row) == ["train"] and all(map(rate, row["train"]["rates"]["refold"]))
    assert "### explore:" in capsys.readouterr().out


def test_the_dynet_exploration_program_walks_as_the_refold_model_decides():
    # DyNet is not installed here: a stand-in whose expressions are numpy arrays runs
    # the DyNet side's loop; its losses' targets and its walk must be what
    # `Exploration.decide` and the dynamic oracle give, sentence by sentence
    import types

    import numpy as np

    from benchmarks.peers import dynet_worker
    from refold.examples.parser.dynamic_oracle import best_transitions
    from refold.examples.parser.exploration import Exploration, Walk
    from tests.examples.test_parser import tiny_parser

    data = run.make_data(["explore"], 6, seed=5)["explore"]
    batch = data["sentences"]
    rng = np.random.default_rng(0)
    weights = rng.normal(size=(3, 4))
    vectors = {}

    def encode(tokens):
        return [vectors.setdefault(tuple(t), rng.normal(size=1)[0]) for t in tokens]

    def score(encodings, positions):
        x = np.array([0.5 if p is None else encodings[p] for p in positions])
        return weights @ x
    dy = types.SimpleNamespace(
        concatenate_cols=lambda zs: types.SimpleNamespace(npvalue=lambda: np.stack(zs, 1)),
        pickneglogsoftmax=lambda z, t: (z, t))
    terms = dynet_worker.exploration_losses(dy, encode, score, batch, explore=0.5)

    from refold.examples.parser.treebank import Sentence
    exploring = Exploration(tiny_parser([Sentence(["a"], ["X"], [0])]), explore=0.5)
    want = []  # per sentence, its (logits, target) at every step, as Refold decides
    for s in batch:
        enc, walk, steps = encode(s["tokens"]), Walk.start(s["heads"], s["seed"]), []
        while not walk.config.is_terminal():
            z = score(enc, walk.features)
            correct = best_transitions(walk.costs)
            steps.append((z, max((t for t in range(3) if correct[t]), key=lambda t: z[t])))
            walk = exploring.decide(walk, z)
        want.append(steps)
    # the DyNet loop adds one term per unfinished sentence per round, in sentence order
    got = [[] for _ in batch]
    pending = [i for i, steps in enumerate(want) if steps]
    k = 0
    while pending:
        for i in pending:
            got[i].append(terms[k])
            k += 1
        pending = [i for i in pending if len(got[i]) < len(want[i])]
    assert k == len(terms) == sum(map(len, want))
    for g, w in zip(got, want):
        assert [t for _, t in g] == [t for _, t in w]
        np.testing.assert_allclose([z for z, _ in g], [z for z, _ in w])


def test_the_jit_side_runs_the_same_models_under_xla(capsys):
    out = run.main(["--peer", "none", "--tf-threads", "default", "--jit", "--workloads",
                    "treelstm", "--batch-sizes", "4", "--items", "4", "--rounds", "1"])
    assert out["meta"]["sides"] == ["refold", "refold-jit"]
    assert out["meta"]["workers"]["refold-jit"]["jit_compile"] is True
    for mode in ("train", "infer"):
        assert all(map(rate, out["results"]["treelstm"][4][mode]["rates"]["refold-jit"]))
    assert "train Refold / Refold jit" in capsys.readouterr().out


def test_the_onednn_side_runs_in_a_worker_with_onednn_on(capsys):
    out = run.main(["--peer", "none", "--tf-threads", "default", "--onednn", "--workloads",
                    "bilstm", "--batch-sizes", "2", "--items", "2", "--rounds", "1"])
    assert out["meta"]["sides"] == ["refold", "refold-onednn"]
    assert out["meta"]["workers"]["refold-onednn"]["onednn"] is True
    for mode in ("train", "infer"):
        assert rate(out["results"]["bilstm"][2][mode]["median"]["refold-onednn"])
    assert "oneDNN's kernels (TF_ENABLE_ONEDNN_OPTS=1)" in capsys.readouterr().out
