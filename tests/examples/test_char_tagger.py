"""The char-BiLSTM tagger example: the open-vocabulary language, the two ways of
embedding rare words, the batched model against the reference, and a tiny run."""

import math
from collections import defaultdict

import numpy as np
import pytest

from refold.examples.tagger import chars as chars_main
from refold.examples.tagger.char_tagger import char_tagger_model, word_vector
from refold.examples.tagger.rare_words import (
    SUFFIXES,
    TAGS,
    Vocabulary,
    dataset,
    random_sentence,
    spell,
)
from refold.models import heads
from refold.scheduler.gradient_mode import GradientMode
from tests.compiler.models import Case
from tests.compiler.test_batched_equals_reference import check_case_batch, engine_for


def _sentences(n=800, seed=0):
    rng = np.random.default_rng(seed)
    return [random_sentence(rng) for _ in range(n)]


def _suffix_tag(word):
    """The tag whose suffix ends `word` (the longest match), if any."""
    matches = [(len(s), t) for t, ss in SUFFIXES.items() for s in ss if word.endswith(s)]
    return max(matches)[1] if matches else None


def test_content_words_are_tagged_by_their_suffix():
    for words, tags in _sentences():
        for w, t in zip(words, tags):
            if t in SUFFIXES:
                assert _suffix_tag(w) == t, (w, t)


def test_some_slots_need_the_spelling():
    # The same tags on both sides, different tags in the middle: context alone cannot
    # tell, so a tagger reading <unk> for a rare word must guess there.
    middle = defaultdict(set)
    for _, tags in _sentences():
        padded = ["START", *tags, "END"]
        for i in range(1, len(padded) - 1):
            middle[(padded[i - 1], padded[i + 1])].add(padded[i])
    ambiguous = {k: v for k, v in middle.items() if len(v) > 1}
    assert ("DET", "NOUN") in ambiguous and {"ADJ", "NOUN"} <= ambiguous[("DET", "NOUN")]
    assert ("VERB", "END") in ambiguous and {"NOUN", "ADV"} <= ambiguous[("VERB", "END")]


def test_most_content_words_of_a_test_set_are_unseen_or_rare():
    train, test, test_words, vocab = dataset(300, 100, np.random.default_rng(2))
    flat = [w for s in test_words for w in s]
    unseen = [w for w in flat if w not in vocab.counts]
    assert 0.1 < len(unseen) / len(flat) < 0.5
    assert all(vocab.is_rare(w) and vocab.id(w) == 0 for w in unseen)
    rare_in_training = [w for w, n in vocab.counts.items() if n < 2]
    assert rare_in_training and all(vocab.is_rare(w) for w in rare_in_training)
    assert not any(vocab.is_rare(w) for w in vocab.words)
    again = dataset(300, 100, np.random.default_rng(2))
    assert again[0] == train and again[1] == test


def test_encode_spells_out_rare_words_only():
    vocab = Vocabulary.build([["the", "the", "zument"]])
    assert vocab.words == ("the",) and len(vocab) == 2
    item = vocab.encode(["the", "zument", "Zu"], ["DET", "NOUN", "NOUN"])
    assert item["words"] == [{"word": 1}, {"word": 0, "chars": spell("zument")},
                             {"word": 0, "chars": [0, 21]}]
    assert item["tags"] == [TAGS.index("DET"), TAGS.index("NOUN"), TAGS.index("NOUN")]
    assert spell("az") == [1, 26]


def test_word_vector_refuses_an_unknown_mode():
    with pytest.raises(ValueError, match="words must be one of"):
        word_vector(5, "subword")


@pytest.mark.parametrize("words", ["lookup", "char"])
def test_only_the_char_model_reads_a_rare_words_spelling(words):
    block = char_tagger_model(5, words, char_embed=3, char_hidden=2, hidden=3)
    a, _ = block.eval({"words": [{"word": 1}, {"word": 0, "chars": spell("zument")}],
                       "tags": [0, 1]})
    b, _ = block.eval({"words": [{"word": 1}, {"word": 0, "chars": spell("zumous")}],
                       "tags": [0, 1]})
    assert np.allclose(a[1], b[1]) is (words == "lookup")
    assert a[1].shape == (len(TAGS),)


@pytest.mark.parametrize("replay", [False, True])
@pytest.mark.parametrize("scheduler", ["agenda", "depth"])
def test_the_batched_char_tagger_equals_the_reference(scheduler, replay, monkeypatch):
    # its loop holds four ops (both LSTMs' cells, the spelling's concat, the word
    # LSTMs' input projection): gradients through TensorFlow's backward loop and
    # through the replayed one (what `Model` picks for it up to 40 rows a launch)
    block = char_tagger_model(6, "char", char_embed=3, char_hidden=2, hidden=3)
    variables = heads.variables(block)
    vocab = Vocabulary.build([["she", "she", "the", "the", "sings", "sings"]])
    rng = np.random.default_rng(5)
    sentences = [vocab.encode(*random_sentence(rng)) for _ in range(4)]
    sentences.append(vocab.encode(["she", "sings"], ["PRON", "VERB"]))
    sentences.append({"words": [], "tags": []})
    assert any("chars" in w for s in sentences for w in s["words"])
    import refold.scheduler.reverse
    traced = []
    replay_loop = refold.scheduler.reverse.replay_loop
    monkeypatch.setattr(refold.scheduler.reverse, "replay_loop",
                        lambda *args: traced.append(1) or replay_loop(*args))
    case = Case("char_tagger_example", block, None, variables)
    built = engine_for(case, scheduler, GradientMode.once_per_step(replay=True)
                       if replay else GradientMode())
    assert len(built[0].executor.layout.loop_ops) == 4
    check_case_batch(case, scheduler, sentences, built)
    assert traced == ([1] if replay else [])


def test_accuracies_count_all_rare_and_unseen_words():
    vocab = Vocabulary.build([["the", "the", "zument"]])
    items = [vocab.encode(["the", "zument", "zumous"], ["DET", "NOUN", "ADJ"])]
    pred = [np.array([TAGS.index("DET"), TAGS.index("ADJ"), TAGS.index("ADJ")])]
    acc = chars_main.accuracies(pred, items, [["the", "zument", "zumous"]], vocab)
    assert acc == {"all": 2 / 3, "rare": 0.5, "unseen": 1.0}
    table = chars_main.format_table({"lookup": acc}, {"all": 3, "rare": 2, "unseen": 1})
    assert table.splitlines()[2] == "| lookup only | 66.7% | 50.0% | 100.0% |"


def test_main_trains_both_models_on_a_small_set(capsys):
    out = chars_main.main(["--train-size", "32", "--test-size", "4", "--epochs", "2",
                           "--batch-size", "16", "--char-embed", "4", "--char-hidden", "4",
                           "--hidden", "6", "--lr", "0.03", "--verbose", "0"])
    for words in ("lookup", "char"):
        losses = out["history"][words]["loss"]
        assert all(math.isfinite(v) for v in losses) and losses[-1] < losses[0]
        assert set(out["accuracy"][words]) == {"all", "rare", "unseen"}
    rng = np.random.default_rng(0)
    _, test, _, _ = dataset(32, 4, rng)
    assert [len(p) for p in out["predictions"]["char"]] == [len(x["words"]) for x in test]
    printed = capsys.readouterr().out
    assert "| lookup only |" in printed and "| char BiLSTM for rare words |" in printed
