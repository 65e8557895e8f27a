"""The tagger on real treebanks: reading CoNLL-U (malformed sentences left out and
reported), the vocabulary from training data, the most-frequent-tag baseline and its
accuracies, the taggers batched against the reference, and tiny end-to-end runs."""

import json
import math
import os

import numpy as np
import pytest
import tensorflow as tf

from refold.examples import treebanks
from refold.examples.parser.treebank import Sentence
from refold.examples.tagger import __main__ as tagger_main
from refold.examples.tagger import treebank
from refold.examples.tagger.char_tagger import char_tagger_model
from refold.examples.tagger.rare_words import random_sentence
from refold.models import heads
from tests.compiler.models import Case
from tests.compiler.test_batched_equals_reference import check_case_batch

GOOD = ["1\tthe\t_\tDET\t_\t_\t2\tdet\t_\t_", "2\tdog\t_\tNOUN\t_\t_\t0\troot\t_\t_"]


def _conllu(sentences) -> str:
    """CoNLL-U text of (words, tags) pairs, each word headed by the one before it."""
    blocks = []
    for k, (words, tags) in enumerate(sentences):
        lines = [f"# sent_id = {k}"]
        lines += [f"{i}\t{w}\t_\t{t}\t_\t_\t{i - 1}\t{'root' if i == 1 else 'dep'}\t_\t_"
                  for i, (w, t) in enumerate(zip(words, tags), 1)]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


# --- reading CoNLL-U ----------------------------------------------------------------


@pytest.mark.parametrize("bad, message", [
    ("1\tthe\t_\tDET", "expected 10 tab-separated columns, got 4"),
    ("1 the _ DET _ _ 2 det _ _", "expected 10 tab-separated columns, got 1"),
    ("1\tthe\t_\tDET\t_\t_\tzero\tdet\t_\t_", "'zero' is not a valid value"),
    ("x\tthe\t_\tDET\t_\t_\t2\tdet\t_\t_", "'x' is not a valid ID"),
    ("1\tthe\t_\t_\t_\t_\t2\tdet\t_\t_", "UPOS is missing"),
    ("1\t\t_\tDET\t_\t_\t2\tdet\t_\t_", "FORM is empty"),
    ("1\tthe\t_\tDET\t_\t_\t_\tdet\t_\t_", "HEAD must be an integer, got '_'"),
    ("3\tthe\t_\tDET\t_\t_\t2\tdet\t_\t_", "word 3 where word 1 was expected"),
])
def test_a_malformed_line_leaves_its_sentence_out_and_is_reported(bad, message):
    text = "\n".join(GOOD + ["", "# text = bad", bad, GOOD[1], ""] + GOOD + ["", bad])
    reading = treebanks.parse(text, "f.conllu")
    assert [s.words for s in reading.sentences] == [["the", "dog"]] * 2
    assert reading.skipped == 2
    assert reading.first_error.startswith("f.conllu:5: ") and message in reading.first_error
    assert "2 malformed left out (the first at f.conllu:5: " in reading.summary()


def test_without_conllu_the_reader_says_what_an_installed_package_needs(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "conllu", None)  # as if not installed
    with pytest.raises(ModuleNotFoundError, match=r"needs the 'conllu' package: pip install "
                       r"conllu \(from a clone of Refold: pip install -e"):
        treebanks.parse("\n".join(GOOD) + "\n\n")


def test_the_reader_skips_multiword_tokens_and_empty_nodes_and_reads_heads():
    text = "\n".join(["1-2\tdon't\t_\t_\t_\t_\t_\t_\t_\t_", "1\tdo\t_\tAUX\t_\t_\t3\taux\t_\t_",
                      "2\tn't\t_\tPART\t_\t_\t3\tadvmod\t_\t_",
                      "2.1\tx\t_\tX\t_\t_\t_\t_\t_\t_", "3\tgo\t_\tVERB\t_\t_\t0\troot\t_\t_"])
    reading = treebanks.parse(text)
    assert reading.skipped == 0 and reading.first_error is None
    assert reading.sentences == [Sentence(["do", "n't", "go"], ["AUX", "PART", "VERB"],
                                          [3, 3, 0], ["aux", "advmod", "root"])]


def test_the_reader_agrees_with_the_parsers_turkish_reader():
    from refold.examples.parser import turkish
    reading = treebanks.read(turkish.path("web"))
    assert reading.skipped == 0 and reading.sentences == turkish.sentences("web")


def test_a_file_is_split_like_the_turkish_treebank_and_a_folder_by_its_files(tmp_path):
    rng = np.random.default_rng(0)
    sentences = [random_sentence(rng) for _ in range(25)]
    path = tmp_path / "all.conllu"
    path.write_text(_conllu(sentences), encoding="utf-8")
    train, test, what = treebank.load(str(path))
    assert [s.words for s in test] == [sentences[i][0] for i in (0, 10, 20)]
    assert [s.words for s in train] == [w for i, (w, _) in enumerate(sentences) if i % 10]
    assert "25 sentences" in what and "malformed" not in what
    (tmp_path / "train.conllu").write_text(_conllu(sentences[:20]), encoding="utf-8")
    (tmp_path / "test.conllu").write_text(_conllu(sentences[20:]), encoding="utf-8")
    train, test, _ = treebank.load(str(tmp_path))
    assert len(train) == 20 and [s.tags for s in test] == [t for _, t in sentences[20:]]
    with pytest.raises(SystemExit, match="is not turkish-web, turkish-wiki, a CoNLL-U file"):
        treebank.load(str(tmp_path / "missing.conllu"))
    with pytest.raises(SystemExit, match="parts are turkish-web, turkish-wiki"):
        treebank.load("turkish-news")


def test_a_file_without_test_sentences_is_refused(tmp_path):
    path = tmp_path / "bad.conllu"
    path.write_text("1\tthe\t_\tDET\n", encoding="utf-8")
    with pytest.raises(SystemExit, match=r"0 training and 0 test.*bad.conllu:1: expected 10"):
        treebank.load(str(path))


# --- vocabulary, baseline, accuracies -------------------------------------------------


def _tiny_treebank():
    train = [Sentence(["Ali", "eve", "gitti", "."], ["NOUN", "NOUN", "VERB", "PUNCT"],
                      [3, 3, 0, 3]),
             Sentence(["eve", "gel", "."], ["ADV", "VERB", "PUNCT"], [2, 0, 2]),
             Sentence(["eve", "gitti"], ["NOUN", "VERB"], [2, 0])]
    test = [Sentence(["Ali", "eve", "koştu", "."], ["NOUN", "NOUN", "VERB", "PUNCT"],
                     [3, 3, 0, 3]),
            Sentence(["gel", "Ayşe", "!"], ["VERB", "NOUN", "X"], [0, 1, 1])]
    return train, test


def test_the_vocabulary_comes_from_the_training_data():
    train, test = _tiny_treebank()
    vocab = treebank.vocabulary(train, test)
    assert vocab.tags == ("NOUN", "VERB", "PUNCT", "ADV", "X")  # X only in test: last
    assert vocab.words == ("eve", ".", "gitti")  # seen twice or more, most frequent first
    assert vocab.characters == tuple(sorted(set("Alievegittigel.")))
    item = vocab.encode(["gitti", "Ayşe"], ["VERB", "NOUN"])
    assert item["tags"] == [1, 0] and item["words"][0] == {"word": 3}
    spelled = item["words"][1]["chars"]
    assert spelled[0] == 1 + vocab.characters.index("A") and spelled[2] == 0  # "ş": unknown
    with pytest.raises(ValueError, match="unknown tag 'DET'; the tags are NOUN, VERB"):
        vocab.encode(["eve"], ["DET"])


def test_the_baseline_takes_each_words_commonest_tag_and_the_overall_one_for_new_words():
    train, test = _tiny_treebank()
    baseline = treebank.MostFrequentTag(train)
    # eve: NOUN twice, ADV once; an unseen word: NOUN (tied with VERB, first by name)
    assert baseline.default == "NOUN"
    predicted = [baseline(s.words) for s in test]
    assert predicted == [["NOUN", "NOUN", "NOUN", "PUNCT"], ["VERB", "NOUN", "NOUN"]]
    vocab = treebank.vocabulary(train, test)
    acc = treebank.accuracies(predicted, test, vocab.counts)
    assert acc == {"all": 5 / 7, "unseen": 1 / 3}  # unseen: koştu, Ayşe, !
    table = treebank.format_table({"baseline": acc}, {"all": 7, "unseen": 3})
    assert table.splitlines()[0] == "| tagger | all words (7) | unseen words (3) |"
    assert table.splitlines()[2] == "| baseline | 71.4% | 33.3% |"
    with pytest.raises(ValueError, match="3 predicted tags for a sentence of 4 words"):
        treebank.accuracies([["NOUN"] * 3], test, vocab.counts)


def test_a_tie_goes_to_the_tag_commoner_overall():
    train = [Sentence(["a", "b", "b", "b"], ["X", "Y", "Y", "Y"], [0, 1, 1, 1]),
             Sentence(["a"], ["Y"], [0])]
    baseline = treebank.MostFrequentTag(train)
    assert baseline(["a", "c"]) == ["Y", "Y"]


# --- the taggers on real-data vocabularies -------------------------------------------


@pytest.mark.parametrize("scheduler", ["agenda", "depth"])
@pytest.mark.parametrize("words", ["lookup", "char"])
def test_the_batched_treebank_taggers_equal_the_reference(words, scheduler):
    from refold.examples.parser import turkish
    train, test = turkish.load("web")
    vocab = treebank.vocabulary(train[:300], test)
    block = char_tagger_model(len(vocab), words, char_embed=3, char_hidden=2, hidden=3,
                              num_tags=len(vocab.tags), characters=len(vocab.characters))
    short = [s for s in test if len(s) <= 6][:3]  # the reference is slow on long ones
    sentences = [vocab.encode(s.words, s.tags) for s in short]
    sentences.append(vocab.encode(["官", "ve"], ["NOUN", "CONJ"]))  # an unknown character
    spelled = [c for s in sentences for w in s["words"] for c in w.get("chars", [])]
    assert 0 in spelled and max(spelled) > 26
    check_case_batch(Case(f"turkish_{words}_tagger", block, None, heads.variables(block)),
                     scheduler, sentences)


@pytest.mark.parametrize("words", ["lookup", "char"])
def test_the_treebank_taggers_with_dropout_train_as_the_reference_does(words):
    from refold.blocks.evaluation.training_mode import training_mode
    from refold.compiler import Compiler
    from refold.examples.parser import turkish
    train, test = turkish.load("web")
    vocab = treebank.vocabulary(train[:300], test)
    block = char_tagger_model(len(vocab), words, char_embed=3, char_hidden=2, hidden=3,
                              num_tags=len(vocab.tags), characters=len(vocab.characters),
                              dropout=0.5, recurrent_dropout=0.3)
    sentences = [vocab.encode(s.words, s.tags) for s in test if len(s) <= 6][:3]
    c = Compiler(block)
    plan = c.plan(sentences)
    with training_mode(True, (0, 4, 0)):
        outs = c.executor.compute({k: tf.constant(v) for k, v in plan.feed.arrays.items()})
    got = c.results(plan, [o.numpy() for o in outs])
    for i, x in enumerate(sentences):
        want = block.eval(x, training=True, seed=(0, 4, 0), example=i)
        np.testing.assert_allclose(np.stack(got[i][0]), np.stack(want[0]), atol=1e-5)
        np.testing.assert_allclose(got[i][1]["loss"], want[1]["loss"], atol=1e-5)
    args = treebank.parse_args(["--data", "turkish-web"])
    assert (args.dropout, args.recurrent_dropout) == (treebank.DROPOUT,
                                                      treebank.RECURRENT_DROPOUT)


# --- whole runs -----------------------------------------------------------------------


def test_main_tags_a_conllu_file_end_to_end(tmp_path, capsys):
    rng = np.random.default_rng(1)
    text = _conllu(random_sentence(rng) for _ in range(30))
    path = tmp_path / "tiny.conllu"
    path.write_text(text + "\n1\tbroken\n", encoding="utf-8")
    out = tagger_main.main(["--data", str(path), "--epochs", "2", "--batch-size", "9",
                            "--char-embed", "4", "--char-hidden", "4", "--hidden", "6",
                            "--lr", "0.03", "--verbose", "0", "--out", str(tmp_path / "run")])
    printed = capsys.readouterr().out
    assert "30 sentences, 1 malformed left out (the first at " in printed
    assert "24 training sentences" in printed and "3 development sentences, 3 test" in printed
    assert f"tiny.conllu:{text.count(chr(10)) + 2}: expected 10" in printed
    for key, name in treebank.MODELS.items():
        losses = out["histories"][name]["loss"]
        assert all(math.isfinite(v) for v in losses) and losses[-1] < losses[0]
        assert f"| {name} |" in printed
        best = int(np.argmax(out["histories"][name]["val_accuracy"])) + 1
        assert out["kept_epoch"][key] == best
    assert set(out["accuracy"]) == {"most frequent tag", "lookup-only BiLSTM",
                                    "char BiLSTM for rare words"}
    assert out["counts"]["all"] == sum(len(t) for t in out["predicted"]["most frequent tag"])
    for name in ("curves.png", "history_lookup.csv", "history_char.csv", "results.json"):
        assert os.path.getsize(tmp_path / "run" / name) > 0
    with open(tmp_path / "run" / "results.json") as f:
        assert json.load(f)["accuracy"] == out["accuracy"]


def test_main_tags_the_turkish_treebank(tmp_path, capsys):
    out = treebank.main(["--data", "turkish-web", "--train-size", "20", "--test-size", "3",
                         "--models", "char", "--epochs", "1", "--char-embed", "3",
                         "--char-hidden", "3", "--hidden", "4", "--verbose", "0",
                         "--dev-every", "0", "--no-plot", "--out", str(tmp_path)])
    printed = capsys.readouterr().out
    assert "the Turkish treebank's web part\n20 training sentences" in printed
    assert "0 development sentences, 3 test sentences" in printed
    assert "kept epoch 1 (the last)" in printed and out["kept_epoch"] == {"char": 1}
    from refold.examples.parser import turkish
    _, test = turkish.load("web")
    assert [len(t) for t in out["predicted"]["char BiLSTM for rare words"]] == \
        [len(s) for s in test[:3]]
    assert 0 <= out["accuracy"]["char BiLSTM for rare words"]["unseen"] <= 1
    assert not os.path.exists(tmp_path / "curves.png")
