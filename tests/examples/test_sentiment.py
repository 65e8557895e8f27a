"""The sentiment example: data preparation, the two models, evaluation, and main()."""

import csv
import json
import math
import os

import numpy as np
import pytest

from refold.examples.sentiment import __main__ as sentiment
from refold.examples.sentiment.model import SentimentModel, accuracies, binarize, prepare
from refold.examples.sentiment.synthetic import relabel
from refold.examples.sentiment.treebank import (
    Vocabulary,
    parse_tree,
    read_treebank,
    to_ptb,
    write_treebank,
)


def _tree(text):
    return relabel(parse_tree(text))


GOOD_BUT_DULL = "(2 (2 (2 the) (2 (2 plot) (2 (2 is) (2 good)))) (2 (2 but) (2 (2 the) " \
                "(2 (2 cast) (2 (2 is) (2 dull))))))"
DULL_BUT_GOOD = GOOD_BUT_DULL.replace("good", "X").replace("dull", "good").replace("X", "dull")


def test_binarize_collapses_unary_nodes_and_chains_wide_ones():
    tree = parse_tree("(3 (1 (2 a)) (4 (2 b) (3 c) (0 d)))")
    assert to_ptb(binarize(tree)) == "(3 (2 a) (4 (2 b) (4 (3 c) (0 d))))"
    assert to_ptb(tree) == "(3 (1 (2 a)) (4 (2 b) (3 c) (0 d)))"  # not changed


def test_prepare_puts_word_ids_at_the_leaves():
    tree = parse_tree("(3 (2 It) (4 (2 so) (4 great)))")
    vocab = Vocabulary(["great", "It"])
    (out,) = prepare([tree], vocab)
    assert [out["children"][0]["word"], out["children"][1]["children"][0]["word"],
            out["children"][1]["children"][1]["word"]] == [2, 0, 1]
    assert tree["children"][0]["word"] == "It"


def test_bag_of_words_is_blind_to_order_and_the_tree_lstm_is_not():
    from refold.compiler import Compiler
    a, b = _tree(GOOD_BUT_DULL), _tree(DULL_BUT_GOOD)
    assert a["label"] != b["label"]
    vocab = Vocabulary.from_trees([a])
    data = prepare([a, b], vocab)
    logits = {}
    for encoder in ("bag_of_words", "tree_lstm"):
        model = SentimentModel(encoder, len(vocab), embed=6, hidden=7)
        logits[encoder] = Compiler(model.logits_block).run(data)
        assert logits[encoder][0].shape == (5,)
    # the same sum in another order: equal up to float32 rounding (logits ~1e-3 here)
    np.testing.assert_allclose(logits["bag_of_words"][0], logits["bag_of_words"][1],
                               rtol=1e-5, atol=1e-8)
    assert np.abs(logits["tree_lstm"][0] - logits["tree_lstm"][1]).max() > 1e-4


def test_accuracies_count_fine_grained_and_binary_hits():
    rows = np.array([[4, 1, 4], [0, 0, 1], [2, 1, 2], [3, 1, 1]], np.float32)
    acc = accuracies(rows, rows[:2])
    assert acc == {"root": 0.5, "root_binary": 1.0, "all": 0.5, "all_binary": 2 / 3}


def test_evaluate_matches_the_unbatched_eval_block():
    trees = [_tree(GOOD_BUT_DULL), _tree(DULL_BUT_GOOD), _tree("(2 (2 very) (2 good))")]
    vocab = Vocabulary.from_trees(trees)
    data = prepare(trees, vocab)
    model = SentimentModel("tree_lstm", len(vocab), embed=5, hidden=6)
    rows = [model.eval_block.eval(t)[1] for t in data]
    expected = accuracies(np.concatenate([r["node"] for r in rows]),
                          np.concatenate([r["root"] for r in rows]))
    assert sentiment.evaluate(model, data, batch_size=2) == expected


def test_glove_vectors_initialise_the_embedding(tmp_path):
    glove = tmp_path / "glove.txt"
    glove.write_text("good 0.5 0.25 1\nmovie 1 2 3\n")
    args = sentiment.parse_args(["--glove", str(glove)])
    splits = {"train": [parse_tree("(3 (2 movie) (3 good))")], "dev": [parse_tree("(1 bad)")],
              "test": []}
    vocab, table = sentiment.build_vocabulary(splits, args)
    assert "bad" in vocab  # dev words get (random) vectors too when vectors are given
    model = SentimentModel("tree_lstm", len(vocab), hidden=4, embeddings=table)
    weights = np.asarray(model.embedding.embeddings)
    assert weights.shape == (len(vocab), 3)
    np.testing.assert_allclose(weights[vocab.id("good")], [0.5, 0.25, 1])
    np.testing.assert_allclose(weights[vocab.id("movie")], [1, 2, 3])


def test_format_table_lines_up_dev_and_test_columns():
    row = {"root": 0.5, "root_binary": 0.75, "all": 0.875, "all_binary": 1.0}
    assert sentiment.format_table({"m": {"dev": row, "test": dict(row, root=0.25)}}) == (
        "              |             dev              |            test\n"
        "model         |  root root-bin   all all-bin |  root root-bin   all all-bin\n"
        "m             |  50.0     75.0  87.5   100.0 |  25.0     75.0  87.5   100.0")


def test_keep_best_restores_the_weights_of_the_best_epoch():
    import keras
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    callback = sentiment.keep_best("val_root_accuracy")
    callback.set_model(model)
    for epoch, (score, weight) in enumerate([(0.5, 1.0), (0.9, 2.0), (0.7, 3.0)]):
        model.set_weights([np.full((1, 1), weight), np.zeros(1)])
        callback.on_epoch_end(epoch, {"val_root_accuracy": score})
    callback.on_train_end()
    assert callback.best_epoch == 1 and model.get_weights()[0][0, 0] == 2.0


def test_the_curves_mark_the_kept_epoch_of_each_model(tmp_path):
    histories = {"a": {"loss": [3.0, 2.0, 1.0], "val_loss": [2.5, 2.0, 2.2]},
                 "b": {"loss": [4.0, 3.0, 2.0]}}   # no validation: its training curve
    figure = sentiment.plot_curves(histories, [("loss", "loss")], str(tmp_path / "c.png"),
                                   kept={"a": 1, "b": None})
    (ax,) = figure.axes
    marks = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata()))
             for line in ax.get_lines() if "kept" in line.get_label()}
    assert marks == {"a kept (epoch 2)": ([2], [2.0]), "b kept (epoch 3)": ([3], [2.0])}
    assert "a kept (epoch 2)" in [t.get_text() for t in ax.get_legend().get_texts()]
    vertical = [list(line.get_xdata()) for line in ax.get_lines() if line.get_linestyle() == ":"]
    assert vertical == [[2, 2], [3, 3]]


def test_lowercase_and_frozen_embeddings_options():
    args = sentiment.parse_args(["--lowercase", "--freeze-embeddings", "--min-count", "2"])
    splits = {"train": [parse_tree("(3 (2 The) (3 good))"), parse_tree("(2 (2 the) (2 a))"),
                        parse_tree("(3 (2 GOOD) (2 film))")], "dev": [], "test": []}
    vocab, table = sentiment.build_vocabulary(splits, args)
    assert table is None and vocab.id("THE") == vocab.id("the") != 0
    assert vocab.id("film") == 0  # seen once
    (tree,) = prepare([parse_tree("(3 (2 the) (3 GOOD))")], vocab)
    assert [c["word"] for c in tree["children"]] == [vocab.id("the"), vocab.id("good")]
    frozen = SentimentModel("tree_lstm", len(vocab), embed=3, hidden=4,
                            train_embeddings=not args.freeze_embeddings)
    assert not frozen.embedding.weights[0].trainable
    assert SentimentModel("tree_lstm", len(vocab), embed=3, hidden=4).embedding \
        .weights[0].trainable


def test_arguments_are_checked():
    with pytest.raises(SystemExit):
        sentiment.parse_args(["--models", "cnn"])
    with pytest.raises(SystemExit):
        sentiment.parse_args(["--epochs", "0"])


def test_missing_data_files_are_reported(tmp_path):
    with pytest.raises(SystemExit, match="train.txt not found"):
        sentiment.main(["--data", str(tmp_path), "--out", str(tmp_path / "out")])


def test_default_data_is_the_shipped_treebank():
    args = sentiment.parse_args([])
    assert args.data == sentiment.DATA
    assert all(os.path.exists(os.path.join(args.data, f"{s}.txt")) for s in sentiment.SPLITS)


def test_main_trains_on_a_treebank_folder_with_glove_and_writes_its_outputs(tmp_path, capsys):
    # An SST-style folder: a few shipped trees, and word vectors for some words.
    trees = read_treebank(os.path.join(sentiment.DATA, "train.txt"))
    data = tmp_path / "sst"
    data.mkdir()
    for name, part in (("train", trees[:32]), ("dev", trees[32:40]), ("test", trees[40:48])):
        write_treebank(data / f"{name}.txt", part)
    glove = tmp_path / "glove.txt"
    glove.write_text("good 0.1 0.2 0.3 0.4 0.5 0.6\nthe 0 0 0 0 0 1\n")
    out = tmp_path / "out"
    result = sentiment.main([
        "--data", str(data), "--glove", str(glove), "--models", "tree_lstm",
        "--epochs", "2", "--batch-size", "16", "--hidden", "16", "--lr", "0.03",
        "--out", str(out), "--verbose", "0"])
    history = result["histories"]["tree_lstm"]
    losses = history["loss"]
    assert all(math.isfinite(v) for v in losses) and losses[-1] < losses[0]
    assert set(history) >= {"loss", "accuracy", "root_accuracy", "val_loss",
                            "val_root_accuracy"}
    acc = result["results"]["tree_lstm"]
    assert set(acc) == {"dev", "test"}
    assert all(0 <= v <= 1 for split in acc.values() for v in split.values())
    printed = capsys.readouterr().out
    assert "32 train, 8 dev, 8 test trees" in printed and "glove.txt" in printed
    assert "tree_lstm" in printed and "dev root" in printed
    best = int(np.argmax(history["val_root_accuracy"])) + 1
    assert f"kept epochs (best dev root accuracy): tree_lstm {best} of 2" in printed
    assert (out / "curves.png").read_bytes()[:4] == b"\x89PNG"
    saved = json.loads((out / "results.json").read_text())
    assert saved["accuracy"]["tree_lstm"] == acc
    with open(out / "history_tree_lstm.csv") as f:
        assert len(list(csv.DictReader(f))) == 2
    logs = [f for _, _, files in os.walk(out / "tensorboard" / "tree_lstm") for f in files]
    assert any(f.startswith("events.out.tfevents") for f in logs)
