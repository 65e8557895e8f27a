"""The tagger example: the synthetic language's tagging rules and the BiLSTM tagger."""

import math
from collections import defaultdict

import numpy as np
import pytest

from refold.examples.tagger import __main__ as tagger_main
from refold.examples.tagger.tagger import (
    ADJ_NOUN,
    NOUN_VERB,
    TAGS,
    VOCABULARY,
    dataset,
    encode,
    random_sentence,
    tagger_model,
)


def _sentences(n=600, seed=0):
    rng = np.random.default_rng(seed)
    return [random_sentence(rng) for _ in range(n)]


def test_ambiguous_words_are_tagged_by_their_neighbours():
    seen = defaultdict(set)
    for words, tags in _sentences():
        nxt = list(tags[1:]) + ["END"]
        prev = ["START"] + list(tags[:-1])
        for w, t, before, after in zip(words, tags, prev, nxt):
            if w in NOUN_VERB:
                assert t == ("NOUN" if before in ("DET", "ADJ") else "VERB")
            elif w in ADJ_NOUN:
                assert t == ("ADJ" if after in ("ADJ", "NOUN") else "NOUN")
            elif w == "that":
                assert t == ("DET" if after in ("ADJ", "NOUN") else "SCONJ")
            seen[w].add(t)
    for w in NOUN_VERB + ADJ_NOUN + ["that"]:
        assert len(seen[w]) == 2, w  # each reading occurs


def test_the_left_context_alone_does_not_determine_the_tags():
    # The same words up to and including position i, with different tags at i: a
    # left-to-right tagger must get some of them wrong.
    tags_after_prefix = defaultdict(set)
    for words, tags in _sentences(2000):
        for i in range(len(words)):
            tags_after_prefix[tuple(words[:i + 1])].add(tags[i])
    ambiguous = [p for p, t in tags_after_prefix.items() if len(t) > 1]
    assert len(ambiguous) >= 20
    assert {p[-1] for p in ambiguous} <= set(ADJ_NOUN) | {"that"} | set(NOUN_VERB)


def test_sentences_vary_in_length_and_are_reproducible():
    a, words_a = dataset(200, np.random.default_rng(4))
    b, _ = dataset(200, np.random.default_rng(4))
    assert a == b
    lengths = [len(x["words"]) for x in a]
    assert min(lengths) <= 3 and max(lengths) >= 15
    assert all(len(x["words"]) == len(x["tags"]) == len(w) for x, w in zip(a, words_a))


def test_encode_maps_unknown_words_to_zero():
    item = encode(["she", "zzz"], ["PRON", "NOUN"])
    assert item == {"words": [VOCABULARY.index("she"), 0],
                    "tags": [TAGS.index("PRON"), TAGS.index("NOUN")]}
    assert encode(["the"]) == {"words": [VOCABULARY.index("the")]}


@pytest.mark.parametrize("bidirectional", [True, False])
def test_tagger_gives_logits_and_a_loss_at_every_word(bidirectional):
    block = tagger_model(embed=4, hidden=5, bidirectional=bidirectional)
    logits, metrics = block.eval(encode(["she", "can", "run"], ["PRON", "AUX", "VERB"]))
    assert [np.shape(x) for x in logits] == [(len(TAGS),)] * 3
    assert metrics["loss"].shape == (3,) and metrics["accuracy"].shape == (3,)


def test_only_the_bidirectional_tagger_reads_the_right_context():
    for bidirectional in (True, False):
        block = tagger_model(embed=4, hidden=5, bidirectional=bidirectional)
        a, _ = block.eval(encode(["the", "fast", "car"], [
            "DET", "ADJ", "NOUN"]))
        b, _ = block.eval(encode(["the", "fast", "sees"], ["DET", "NOUN", "VERB"]))
        same = np.allclose(a[1], b[1])
        assert same is (not bidirectional)


def test_tag_accuracy_counts_all_and_ambiguous_words():
    items = [encode(["the", "fast", "car"], ["DET", "ADJ", "NOUN"])]
    pred = [np.array([TAGS.index("DET"), TAGS.index("NOUN"), TAGS.index("NOUN")])]
    assert tagger_main.tag_accuracy(pred, items, [["the", "fast", "car"]]) == (2 / 3, 0.0)


def test_main_trains_the_bilstm_on_a_small_set(capsys):
    out = tagger_main.main(["--models", "bilstm", "--train-size", "64", "--test-size", "8",
                            "--epochs", "4", "--batch-size", "8", "--embed", "8",
                            "--hidden", "8", "--lr", "0.03", "--verbose", "0"])
    losses = out["history"]["bilstm"]["loss"]
    assert all(math.isfinite(v) for v in losses) and losses[-1] < 0.5 * losses[0]
    assert 0 <= out["accuracy"]["bilstm"] <= 1
    rng = np.random.default_rng(0)
    dataset(64, rng)
    test, _ = dataset(8, rng)
    assert [len(p) for p in out["predictions"]["bilstm"]] == [len(x["words"]) for x in test]
    assert "ambiguous words" in capsys.readouterr().out
