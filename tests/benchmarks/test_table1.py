"""The Table 1 runner and the chartagger workload, Refold's side alone (DyNet is not
installed in CI): the table has a row per task of the paper, "-" for a task not run,
and every measured rate is a positive number."""

from __future__ import annotations

import math

from benchmarks.peers import run, table1


def test_chartagger_data_spells_out_rare_words_with_ids_in_the_vocabulary():
    data = run.make_data(["chartagger"], 40)["chartagger"]
    words = [w for s in data["sentences"] for w in s["words"]]
    assert len(data["sentences"]) == 40
    assert all(0 <= w["word"] < data["vocabulary"] for w in words)
    rare = [w for w in words if "chars" in w]
    assert rare and all(w["word"] == 0 and w["chars"] for w in rare)
    assert all(len(s["words"]) == len(s["tags"]) for s in data["sentences"])


def test_table1_refold_alone_measures_each_task_asked_for(capsys):
    out = table1.main(["--peer", "none", "--tasks", "chartagger,bilstm,parser", "--batch",
                       "2", "--items", "3", "--rounds", "1"])
    assert out["meta"]["sides"] == ["refold", "refold-depth"]
    for task in ("chartagger", "bilstm", "parser"):
        rates = out["results"][task]["median"]
        assert all(isinstance(r, float) and math.isfinite(r) and r > 0 for r in rates.values())
    lines = capsys.readouterr().out.splitlines()
    assert f"machine: {out['meta']['machine']}" in lines
    header = next(i for i, line in enumerate(lines) if line.startswith("| task"))
    assert lines[header] == ("| task | Refold agenda | Refold depth | "
                             "paper, DyNet CPU: none / depth / agenda |")
    rows = {line.split(" | ")[0][2:]: line for line in lines[header + 2:]}
    assert set(rows) == set(table1.TASKS.values())
    assert rows["TreeLSTM"].startswith("| TreeLSTM | - | - |")  # not asked for
    # the paper's parser row is exploration training's; static training has none
    assert rows["transition parser"].startswith("| transition parser | - | - |")
    assert rows["transition parser"].endswith("| 16.8 / 61 / 61.2 |")
    assert rows["transition parser, static oracle"].endswith(" | - |")
    assert rows["BiLSTM w/ char"].endswith("| 15.7 / 93.8 / 132 |")


def test_table1_ratio_column_compares_refold_agenda_with_dynet_agenda():
    names = ["dynet", "dynet-depth", "dynet-none", "refold", "refold-depth"]
    row = {"median": {n: 100.0 + i for i, n in enumerate(names)},
           "ratio": {"refold": {"median": 1.03, "min": 0.9, "max": 1.2}}}
    lines = table1.format_table({"treelstm": row}, names).splitlines()
    assert lines[0].endswith("| Refold agenda ÷ DyNet agenda | "
                             "paper, DyNet CPU: none / depth / agenda |")
    tree = next(line for line in lines if line.startswith("| TreeLSTM"))
    assert tree == ("| TreeLSTM | 100 | 101 | 102 | 103 | 104 | 1.03 [0.90-1.20] | "
                    "50.2 / 348 / 357 |")
