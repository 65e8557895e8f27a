"""The throughput benchmarks (`benchmarks.treelstm`, `benchmarks.bilstm`) run every variant,
and the variants they compare compute the same function.

Structure and the code's own properties at tiny sizes, never a timing: speed is measured
by running the benchmarks (BENCHMARKS.md).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks import bilstm, treelstm
from tests.benchmarks.tables import rate, table


def test_treelstm_throughput_runs_every_variant(tmp_path, capsys):
    path = tmp_path / "treelstm.json"
    variants = ["engine-agenda", "engine-depth", "engine-same", "hand-batched", "eager"]
    out = treelstm.main(["--batch-sizes", "1,2", "--seconds", "0.03", "--leaves", "5",
                         "--variants", ",".join(variants), "--json", str(path)])
    for mode in ("train", "infer"):
        assert sorted(out[mode]) == sorted(variants)
        assert all(rate(out[mode][v][b]) for v in variants for b in (1, 2))
    assert json.loads(path.read_text())["train"]["hand-batched"]["2"] > 0
    rows = table(capsys.readouterr().out, "| variant | B=1 train / infer | B=2 train / infer |")
    assert [r.split(" | ")[0][2:] for r in rows] == variants + [label for *_, label in
                                                                treelstm.RATIOS]


def test_treelstm_paired_reports_both_modes():
    from benchmarks.workloads import TreeLSTMModel, sst_synth_tree
    shape = sst_synth_tree(np.random.default_rng(1), 5)
    out = treelstm.paired([2], 1, TreeLSTMModel(seed=0), shape, np.random.default_rng(0),
                          stream=2)
    assert sorted(out[2]) == ["infer_ahead", "infer_inline", "train_ahead", "train_inline"]
    assert all(rate(ratio) and rate(speed) for ratio, speed in out[2].values())


def test_bilstm_throughput_runs_every_variant(tmp_path, capsys):
    path = tmp_path / "bilstm.json"
    out = bilstm.main(["--batch-sizes", "2", "--seconds", "0.03", "--rounds", "1",
                       "--json", str(path)])
    for mode in ("train", "infer"):
        assert sorted(out[mode]) == ["eager", "engine", "keras-padded"]
        assert all(rate(r[2]) for r in out[mode].values())
    assert json.loads(path.read_text())["words_per_sentence"] > 0
    rows = table(capsys.readouterr().out, "| variant | B=2 train / infer |")
    assert [r.split(" | ")[0][2:] for r in rows][-2:] == ["engine ÷ keras-padded",
                                                          "engine ÷ eager"]


def test_treelstm_variants_compute_the_same_function():
    """Engine (both schedulers), hand-batched and eager give the same logits on one batch."""
    from benchmarks.workloads import CLASSES, TreeLSTMModel, sst_synth_tree
    rng = np.random.default_rng(0)
    model = TreeLSTMModel(seed=0)
    shape = sst_synth_tree(np.random.default_rng(1), 5)
    trees = [treelstm._reshape_like(shape, None, rng) for _ in range(3)]
    want = np.concatenate([np.asarray(x) for x in treelstm.Eager(model).infer(trees)])
    assert want.shape == (3, CLASSES)
    got = {"hand-batched": treelstm.HandBatched(model, shape).infer(trees)}
    for sched in ("agenda", "depth"):
        got[f"engine-{sched}"] = treelstm.EngineVariant(model, sched).infer(trees)
    for name, logits in got.items():
        np.testing.assert_allclose(np.asarray(logits), want, rtol=1e-4, atol=1e-5,
                                   err_msg=name)


def test_bilstm_variants_compute_the_same_function():
    """Padded Keras and eager give the same logits, and the engine the same mean loss."""
    import tensorflow as tf
    model = bilstm.TaggerModel(seed=0)
    rng = np.random.default_rng(0)
    batch = [bilstm.sentence(rng) for _ in range(2)]
    eager = [np.asarray(x) for x in bilstm.Eager(model).infer(batch)]
    padded = np.asarray(bilstm.KerasPadded(model).infer(batch))
    xent = []
    for s, want, got in zip(batch, eager, padded):
        n = len(s["words"])
        assert want.shape == (n, bilstm.TAGS)
        np.testing.assert_allclose(got[:n], want, rtol=1e-4, atol=1e-5)
        xent.append(tf.nn.sparse_softmax_cross_entropy_with_logits(s["tags"], want).numpy())
    # the engine's train step returns the loss before its update (run last: it updates)
    loss = float(bilstm.Engine(model).train(batch))
    assert loss == pytest.approx(float(np.mean(np.concatenate(xent))), rel=1e-4)

