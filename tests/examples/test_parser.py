"""The parser example: CoNLL-U, the arc-hybrid system and its oracle, the synthetic
treebank, the model (batched == reference), greedy parsing and a tiny run."""

from __future__ import annotations

import filecmp
import math
import os
import warnings

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import example, given, settings
from hypothesis import strategies as st

from refold.examples.parser import __main__ as parser_main
from refold.examples.parser.model import ParserModel, Vocabulary, labelled_input, training_input
from refold.examples.parser.synthetic import (
    ATTRIBUTES,
    INSTRUMENTS,
    SPLITS,
    generate,
    write_splits,
)
from refold.examples.parser.transitions import (
    LEFT,
    RIGHT,
    SHIFT,
    Configuration,
    NonProjectiveError,
    labelled_oracle,
    oracle,
)
from refold.examples.parser.treebank import (
    Sentence,
    check_tree,
    is_projective,
    parse_conllu,
    read_conllu,
    to_conllu,
    write_conllu,
)
from refold.models.heads import variables
from tests.compiler.models import Case
from tests.compiler.test_batched_equals_reference import check_case_batch, engine_for

# --- trees ------------------------------------------------------------------------------


def projective_tree(n: int, rng: np.random.Generator) -> list[int]:
    """A random projective tree over n words: each span's head takes the heads of
    consecutive sub-spans on either side as dependents."""
    heads = [0] * n

    def build(lo: int, hi: int, head: int) -> None:  # words lo..hi-1 depend on `head`
        while lo < hi:
            end = int(rng.integers(lo + 1, hi + 1))
            h = int(rng.integers(lo, end))
            heads[h] = head
            build(lo, h, h + 1)
            build(h + 1, end, h + 1)
            lo = end

    root = int(rng.integers(n))
    heads[root] = 0
    build(0, root, root + 1)
    build(root + 1, n, root + 1)
    return heads


def random_tree(n: int, rng: np.random.Generator) -> list[int]:
    """A random tree over n words, projective or not."""
    order = [int(x) + 1 for x in rng.permutation(n)]
    heads = [0] * n
    for k, d in enumerate(order[1:], 1):
        heads[d - 1] = order[int(rng.integers(k))]
    return heads


def dominates(heads, h: int, d: int) -> bool:
    while d != 0:
        if d == h:
            return True
        d = heads[d - 1]
    return h == 0


def projective_by_definition(heads) -> bool:
    """Every word between a head and its dependent descends from the head."""
    return all(dominates(heads, h, k) for d, h in enumerate(heads, 1)
               for k in range(min(h, d) + 1, max(h, d)))


seeds = st.integers(0, 2**32 - 1)


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 14), seed=seeds)
def test_projectivity_is_the_textbook_definition(n, seed):
    rng = np.random.default_rng(seed)
    for heads in (projective_tree(n, rng), random_tree(n, rng)):
        check_tree(heads)
        assert is_projective(heads) == projective_by_definition(heads)
    assert is_projective(projective_tree(n, rng))


@pytest.mark.parametrize("heads, message", [
    ([2, 1], "exactly one word attached to the root"),
    ([0, 0], "exactly one word attached to the root"),
    ([0, 3, 2], "cycle through word"),
    ([0, 5], "not one of 0..2"),
    ([1], "not one of 0..1 other than itself"),
])
def test_check_tree_refuses_what_is_not_a_tree(heads, message):
    with pytest.raises(ValueError, match=message):
        check_tree(heads)


# --- CoNLL-U ----------------------------------------------------------------------------

def test_conllu_round_trips_and_skips_multiword_tokens_and_empty_nodes(tmp_path):
    sentences = generate(20, np.random.default_rng(5))
    path = tmp_path / "x.conllu"
    write_conllu(path, sentences)
    assert read_conllu(path) == sentences
    ud = ("# text = don't go\n1-2\tdon't\t_\t_\t_\t_\t_\t_\t_\t_\n"
          "1\tdo\tdo\tAUX\t_\t_\t3\taux\t_\t_\n2\tn't\tnot\tPART\t_\t_\t3\tadvmod\t_\t_\n"
          "2.1\tx\t_\tX\t_\t_\t_\t_\t_\t_\n3\tgo\tgo\tVERB\t_\t_\t0\troot\t_\t_\n\n")
    [s] = parse_conllu(ud)
    assert (s.words, s.tags, s.heads) == (["do", "n't", "go"], ["AUX", "PART", "VERB"],
                                          [3, 3, 0])
    assert to_conllu(s).splitlines()[1] == "1\tdo\t_\tAUX\t_\t_\t3\taux\t_\t_"


@pytest.mark.parametrize("text, message", [
    ("1\tthe\t_\tDET\n", r"f.conllu:1: expected 10 tab-separated columns, got 4"),
    ("1\ta\t_\tX\t_\t_\tzero\t_\t_\t_\n",
     r"f.conllu:1: Failed parsing field 'head': 'zero' is not a valid value"),
    ("2\ta\t_\tX\t_\t_\t0\t_\t_\t_\n", r"f.conllu:1: word 2 where word 1 was expected"),
    ("1\ta\t_\tX\t_\t_\t2\t_\t_\t_\n2\tb\t_\tX\t_\t_\t1\t_\t_\t_\n",
     r"f.conllu: sentence 1: a tree has exactly one word attached to the root"),
])
def test_malformed_conllu_names_the_file_and_line(text, message):
    with pytest.raises(ValueError, match=message):
        parse_conllu(text, "f.conllu")


# --- the transition system --------------------------------------------------------------

def rebuild(heads) -> tuple[list, Configuration]:
    steps = oracle(heads)
    c = Configuration(len(heads))
    for features, t in steps:
        assert features == c.features()
        c.apply(t)
    return steps, c


@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 25), seed=seeds)
def test_the_oracle_rebuilds_every_projective_tree_in_2n_transitions(n, seed):
    heads = projective_tree(n, np.random.default_rng(seed))
    steps, c = rebuild(heads)
    assert c.is_terminal() and c.heads == heads
    assert len(steps) == 2 * n
    assert [t for _, t in steps].count(SHIFT) == n


def test_the_oracle_rebuilds_the_synthetic_trees():
    for s in generate(300, np.random.default_rng(11)):
        assert rebuild(s.heads)[1].heads == s.heads


@settings(max_examples=300, deadline=None)
@given(n=st.integers(3, 12), seed=seeds)
def test_the_oracle_refuses_exactly_the_non_projective_trees(n, seed):
    heads = random_tree(n, np.random.default_rng(seed))
    if projective_by_definition(heads):
        assert rebuild(heads)[1].heads == heads
    else:
        with pytest.raises(NonProjectiveError, match="not projective"):
            oracle(heads)


def test_a_non_projective_sentence_is_detected():
    # "A hearing is scheduled on the issue today": "on the issue" (5-7) modifies
    # "hearing" (2) across "is scheduled" (3-4), whose head is the root.
    heads = [2, 4, 4, 0, 7, 7, 2, 4]
    assert not is_projective(heads)
    with pytest.raises(NonProjectiveError):
        oracle(heads)


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 20), seed=seeds)
def test_any_legal_transitions_end_in_a_tree_with_one_root(n, seed):
    rng = np.random.default_rng(seed)
    c = Configuration(n)
    steps = 0
    while not c.is_terminal():
        legal = [t for t, ok in enumerate(c.legal()) if ok]
        assert legal, "a configuration that is not terminal has a legal transition"
        c.apply(legal[int(rng.integers(len(legal)))])
        steps += 1
    assert steps == 2 * n
    check_tree(c.heads)


LABELS = ["nsubj", "obj", "det", "root", "acl:relcl"]


@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 25), seed=seeds)
def test_the_labelled_oracle_rebuilds_every_projective_tree_with_its_labels(n, seed):
    rng = np.random.default_rng(seed)
    heads = projective_tree(n, rng)
    relations = [LABELS[int(i)] for i in rng.integers(len(LABELS), size=n)]
    steps = labelled_oracle(heads, relations)
    assert [(f, t) for f, t, _ in steps] == oracle(heads)  # the same transitions
    c = Configuration(n)
    for features, t, label in steps:
        assert features == c.features()
        assert (label is None) == (t == SHIFT)
        c.apply(t, label)
    assert c.is_terminal() and (c.heads, c.relations) == (heads, relations)


def test_the_labelled_oracle_rebuilds_the_synthetic_trees_and_their_labels():
    for s in generate(300, np.random.default_rng(12)):
        c = Configuration(len(s))
        for _, t, label in labelled_oracle(s.heads, s.relations):
            c.apply(t, label)
        assert (c.heads, c.relations) == (s.heads, s.relations)


def test_labels_go_to_arcs_only_and_must_match_the_words():
    c = Configuration(2)
    with pytest.raises(ValueError, match="a shift makes no arc to label, got 'det'"):
        c.apply(SHIFT, "det")
    c.apply(SHIFT)
    c.apply(LEFT)  # an arc without a label
    assert c.relations == [None, None] and c.heads == [2, None]
    with pytest.raises(ValueError, match="one relation per word: 2 heads, 1 relations"):
        labelled_oracle([2, 0], ["det"])
    with pytest.raises(NonProjectiveError):
        labelled_oracle([2, 4, 4, 0, 7, 7, 2, 4], ["x"] * 8)


def test_illegal_transitions_are_refused_and_features_name_empty_slots():
    c = Configuration(2)
    assert c.legal() == (True, False, False)
    assert c.features() == (None, None, None, 1)
    for t in (LEFT, RIGHT, 7):
        with pytest.raises(ValueError, match="is not legal"):
            c.apply(t)
    c.apply(SHIFT)
    c.apply(SHIFT)
    assert c.features() == (None, 1, 2, 0)
    assert c.legal() == (False, False, True)  # onto the root only as the last word


# --- the synthetic treebank -------------------------------------------------------------

def test_shipped_treebank_is_what_the_documented_command_writes(tmp_path):
    paths = write_splits(tmp_path, seed=0)
    assert sorted(paths) == sorted(SPLITS)
    for split in SPLITS:
        assert filecmp.cmp(paths[split], os.path.join(parser_main.DATA, f"{split}.conllu"),
                           shallow=False), split


def test_with_attaches_to_the_verb_or_the_noun_by_the_word_after_it():
    seen = set()
    for s in generate(800, np.random.default_rng(3)):
        assert is_projective(s.heads) and len(s) <= 30
        for i, w in enumerate(s.words):
            if w != "with":
                continue
            noun = s.heads[i] - 1
            head_tag = s.tags[s.heads[noun] - 1]
            if s.words[noun] in INSTRUMENTS:
                assert head_tag == "VERB" and s.relations[noun] == "obl"
            else:
                assert s.words[noun] in ATTRIBUTES
                assert head_tag == "NOUN" and s.relations[noun] == "nmod"
            seen.add(head_tag)
    assert seen == {"VERB", "NOUN"}


def test_random_sentences_are_reproducible_and_vary():
    a = generate(50, np.random.default_rng(9))
    assert a == generate(50, np.random.default_rng(9))
    assert len({len(s) for s in a}) > 5


# --- the model --------------------------------------------------------------------------

def tiny_parser(sentences, **sizes) -> ParserModel:
    import keras
    keras.utils.set_random_seed(4)
    vocab = Vocabulary.from_sentences(sentences)
    parser = ParserModel(vocab, **{"embed": 3, "tag_embed": 2, "hidden": 3, "mlp": 4,
                                   **sizes})
    rng = np.random.default_rng(4)
    for pad in parser.pads:  # not zeros, so that a pad read in the wrong place shows
        pad.assign(rng.normal(size=pad.shape).astype("float32"))
    return parser


SHORT = [s for s in generate(200, np.random.default_rng(21)) if len(s) <= 7]


@pytest.fixture(scope="module")
def parser_case():
    """The training block on labelled inputs and on inputs without labels (the
    transitions alone), drawn into the same batches; and one batch of both kinds."""
    parser = tiny_parser(SHORT)
    assert len(parser.vocab.labels) > 5
    labelled = [labelled_input(s, parser.vocab) for s in SHORT[:20]]
    plain = [training_input(s, parser.vocab) for s in SHORT[20:]]
    case = Case("parser", parser.training_block, st.sampled_from(labelled + plain),
                variables(parser.training_block))
    # the pad vectors and the label classifiers are trained weights too, their
    # gradients checked
    label_kernels = [layer.weights[0] for layer in parser.label_layers.values()]
    assert {id(p.value) for p in parser.pads} <= {id(v) for v in case.variables}
    assert {id(k.value) for k in label_kernels} <= {id(v) for v in case.variables}
    return case, [plain[0], labelled[0], plain[1], labelled[1]]


@pytest.mark.parametrize("scheduler", ["agenda", "depth"])
def test_the_parser_batched_equals_the_reference_in_values_and_gradients(
        parser_case, scheduler):
    # one engine per scheduler for labelled and unlabelled inputs (one block): they
    # were two cases, each paying for its own engine
    case, mixed = parser_case
    engine = engine_for(case, scheduler)

    @settings(max_examples=3, deadline=None)
    @given(inputs=st.lists(case.inputs, min_size=1, max_size=5))
    @example(inputs=mixed)
    def check(inputs):
        check_case_batch(case, scheduler, inputs, engine)
    check()


def test_the_label_loss_is_at_every_arc_from_its_directions_classifier():
    s = Sentence(["the", "dog", "sleeps", "now"], ["DET", "NOUN", "VERB", "ADV"],
                 [2, 3, 0, 3], ["det", "nsubj", "root", "advmod"])
    parser = tiny_parser([s])
    assert parser.vocab.labels == {"det": 0, "nsubj": 1, "root": 2, "advmod": 3}
    item = labelled_input(s, parser.vocab)
    logits, metrics = parser.training_block.eval(item)
    arcs = [c for c in item["configs"] if c[4] != SHIFT]
    assert len(arcs) == 4 and metrics["label_loss"].shape == (4,)
    assert set(metrics["label_accuracy"]) <= {0.0, 1.0}
    # the transitions' logits and loss are those of the unlabelled input
    plain_logits, plain = parser.training_block.eval(training_input(s, parser.vocab))
    np.testing.assert_allclose(np.stack(logits), np.stack(plain_logits), atol=1e-6)
    np.testing.assert_allclose(metrics["loss"], plain["loss"], atol=1e-6)
    assert plain["label_loss"].shape == (0,)  # no arc carries a label
    # each arc's label loss: the cross-entropy of its direction's label logits
    [encodings] = parser.encode([item["tokens"]])
    transition_logits, label_logits = parser.score_labels([encodings] * len(arcs),
                                                          [c[:4] for c in arcs])
    np.testing.assert_allclose(transition_logits,
                               parser.score([encodings] * len(arcs), [c[:4] for c in arcs]),
                               atol=1e-6)
    want = [-tf.nn.log_softmax(label_logits[c[4]][j])[c[5]].numpy()
            for j, c in enumerate(arcs)]
    np.testing.assert_allclose(metrics["label_loss"], want, atol=1e-5)
    assert not np.allclose(label_logits[LEFT], label_logits[RIGHT])


def test_a_label_outside_the_vocabulary_is_refused_in_training_input():
    vocab = Vocabulary.from_sentences([Sentence(["a"], ["X"], [0], ["root"])])
    with pytest.raises(ValueError, match=r"sentence 'a b': relation labels \['det'\] are "
                                         r"not among the vocabulary's 1 labels \(root\)"):
        labelled_input(Sentence(["a", "b"], ["X", "X"], [0, 1], ["root", "det"]), vocab)


def test_parse_labelled_labels_each_arc_with_its_directions_best_label():
    sentences = SHORT[:8]
    parser = tiny_parser(sentences)
    labelled = parser.parse_labelled(sentences, batch_size=3)
    assert [h for h, _ in labelled] == parser.parse(sentences)
    for s, (_, relations) in zip(sentences, labelled):
        assert len(relations) == len(s) and set(relations) <= set(parser.vocab.labels)
    s = sentences[1]
    [encodings] = parser.encode([parser.vocab.tokens(s)])
    c = Configuration(len(s))
    while not c.is_terminal():
        scores, labels = parser.score_labels([encodings], [c.features()])
        t = int(np.argmax(np.where(c.legal(), scores[0], -np.inf)))
        c.apply(t, None if t == SHIFT else parser.label_names[int(np.argmax(labels[t][0]))])
    assert (c.heads, c.relations) == labelled[1]


def test_a_treebank_without_labels_has_one_label_and_las_equals_uas():
    sentences = [Sentence(s.words, s.tags, s.heads) for s in SHORT[:6]]  # all "_"
    parser = tiny_parser(sentences)
    assert parser.vocab.labels == {"_": 0}
    labelled = parser.parse_labelled(sentences)
    assert all(set(r) == {"_"} for _, r in labelled)
    r = parser_main.scores([h for h, _ in labelled], sentences, [r for _, r in labelled])
    assert r["las"] == r["uas"]


def test_a_vocabulary_without_labels_makes_the_unlabelled_parser():
    s = SHORT[0]
    vocab = Vocabulary.from_sentences([s])
    parser = ParserModel(Vocabulary(vocab.words, vocab.tags), embed=3, tag_embed=2,
                         hidden=3, mlp=4)
    assert parser.label_layers == {}
    assert not any("labels" in v.name for v in variables(parser.training_block))
    _, metrics = parser.training_block.eval(training_input(s, parser.vocab))
    assert sorted(metrics) == ["accuracy", "loss"]
    [(heads, relations)] = parser.parse_labelled([s])
    assert heads == parser.parse([s])[0] and relations == [None] * len(s)


def test_the_training_block_scores_every_configuration_from_its_positions():
    s = Sentence(["the", "dog", "sleeps"], ["DET", "NOUN", "VERB"], [2, 3, 0])
    parser = tiny_parser([s])
    item = training_input(s, parser.vocab)
    logits, metrics = parser.training_block.eval(item)
    assert len(logits) == len(item["configs"]) == 6
    assert metrics["loss"].shape == (6,) and set(metrics["accuracy"]) <= {0.0, 1.0}
    # parsing's scoring gives the same logits from the encodings at the positions
    [encodings] = parser.encode([item["tokens"]])
    assert encodings.shape == (4, 6)  # the root and three words
    np.testing.assert_allclose(parser.encoder.eval(item), encodings, atol=1e-6)
    np.testing.assert_allclose(parser.score([encodings] * 6, [c[:4] for c in item["configs"]]),
                               np.stack(logits), atol=1e-5)
    # the scoring block: the same logits, no metrics
    for got, want in zip(parser.scoring_block.eval(item), logits):
        np.testing.assert_allclose(got, want, atol=1e-6)
    # a loss at every transition: the gold transition's cross-entropy
    gold = [t for *_, t in item["configs"]]
    want_loss = [-tf.nn.log_softmax(x)[t].numpy() for x, t in zip(logits, gold)]
    np.testing.assert_allclose(metrics["loss"], want_loss, atol=1e-5)


def test_a_bad_configuration_is_an_input_error_naming_the_block_path():
    from refold.blocks.errors import InputError
    s = Sentence(["the", "dog"], ["DET", "NOUN"], [2, 0])
    parser = tiny_parser([s])
    item = training_input(s, parser.vocab)
    item["configs"][1] = (None, None, 1, 9, 0)  # b0 beyond the sentence
    with pytest.raises(InputError, match=r"parser.*Nth.*index 9 is out of range for a "
                                         r"sequence of length 3"):
        parser.training_block.eval(item)


def test_words_alone_without_a_tag_embedding():
    s = SHORT[0]
    parser = tiny_parser([s], tag_embed=0)
    assert parser.encoder.eval(training_input(s, parser.vocab))[0].shape == (6,)
    assert not any("tags" in v.name for v in variables(parser.training_block))


def test_parse_gives_trees_and_follows_the_scores():
    sentences = SHORT[:12]
    parser = tiny_parser(sentences)
    parses = parser.parse(sentences, batch_size=5)  # batches of 5, 5 and 2
    assert [len(h) for h in parses] == [len(s) for s in sentences]
    for heads in parses:
        check_tree(heads)
    # greedy: replaying each parse, every step took the best-scored legal transition
    s, heads = sentences[0], parses[0]
    [encodings] = parser.encode([parser.vocab.tokens(s)])
    c = Configuration(len(s))
    while not c.is_terminal():
        [scores] = parser.score([encodings], [c.features()])
        c.apply(int(np.argmax(np.where(c.legal(), scores, -np.inf))))
    assert c.heads == heads


def test_unknown_words_and_tags_get_the_unknown_ids():
    vocab = Vocabulary.from_sentences([Sentence(["a"], ["X"], [0])])
    assert vocab.tokens(Sentence(["a", "b"], ["X", "Y"], [0, 1])) == [(0, 0), (2, 2), (1, 1)]


# --- the program ------------------------------------------------------------------------

def test_baselines_and_scores():
    s = Sentence(["the", "dog", "sleeps", "now"], ["DET", "NOUN", "VERB", "ADV"],
                 [2, 3, 0, 3])
    assert parser_main.previous_word(s) == [0, 1, 2, 3]
    assert parser_main.next_word(s) == [2, 3, 4, 0]
    r = parser_main.scores([parser_main.next_word(s), s.heads], [s, s])
    # next word: 2 of 4 right; arcs longer than one word: sleeps->root (3) only
    assert r == {"uas": (2 + 4) / 8, "long_arcs": 1 / 2, "exact": 1 / 2}
    # no arc longer than one word: no share of them, and no warning computing it
    short = Sentence(["sleep"], ["VERB"], [0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = parser_main.scores([short.heads], [short])
    assert math.isnan(r["long_arcs"]) and r["uas"] == 1.0
    assert "| baseline | 100.0 | - | - | 100.0 |" in parser_main.format_table({"baseline": r})


def test_baseline_labels_are_the_most_frequent_of_each_direction():
    train = [Sentence(list("abcd"), ["X"] * 4, [2, 3, 0, 3], ["det", "nsubj", "root", "obj"]),
             Sentence(list("ab"), ["X"] * 2, [2, 0], ["det", "top"])]
    majority = parser_main.majority_labels(train)
    assert majority == {"root": "root", "before": "obj", "after": "det"}
    assert parser_main.label_by_direction([2, 0, 2], majority) == ["det", "root", "obj"]
    # a direction without arcs gets the most frequent label overall
    only_left = [Sentence(list("abc"), ["X"] * 3, [3, 3, 0], ["det", "det", "root"])]
    assert parser_main.majority_labels(only_left)["before"] == "det"
    s = train[0]
    r = parser_main.scores([[2, 3, 0, 3]], [s], [["det", "obj", "root", "obj"]])
    assert (r["uas"], r["las"]) == (1.0, 3 / 4)


@settings(max_examples=100, deadline=None)
@given(n=st.integers(1, 12), seed=seeds)
def test_las_never_exceeds_uas(n, seed):
    rng = np.random.default_rng(seed)
    gold = [Sentence(["w"] * n, ["X"] * n, random_tree(n, rng),
                     [LABELS[int(i)] for i in rng.integers(3, size=n)]) for _ in range(3)]
    heads = [random_tree(n, rng) if rng.random() < 0.7 else s.heads for s in gold]
    labels = [[LABELS[int(i)] for i in rng.integers(3, size=n)] for _ in gold]
    r = parser_main.scores(heads, gold, labels)
    assert 0 <= r["las"] <= r["uas"] <= 1
    assert parser_main.scores(heads, gold, [s.relations for s in gold])["las"] == r["uas"]


def test_main_trains_and_parses_on_a_small_set(capsys):
    out = parser_main.main(["--train-size", "80", "--test-size", "12", "--epochs", "3",
                            "--embed", "8", "--tag-embed", "4", "--hidden", "8",
                            "--mlp", "16", "--lr", "0.02", "--verbose", "0"])
    losses, label_losses = out["history"]["loss"], out["history"]["label_loss"]
    assert all(math.isfinite(v) for v in losses) and losses[-1] < 0.8 * losses[0]
    assert label_losses[-1] < 0.8 * label_losses[0]
    test = read_conllu(os.path.join(parser_main.DATA, "test.conllu"))[:12]
    assert [len(h) for h in out["parses"]] == [len(s) for s in test]
    uas = {name: r["uas"] for name, r in out["scores"].items()}
    assert uas["BiLSTM arc-hybrid (greedy)"] > uas["previous word"]
    for r in out["scores"].values():
        assert 0 <= r["las"] <= r["uas"]
    assert [len(r) for r in out["relations"]] == [len(s) for s in test]
    printed = capsys.readouterr().out
    assert "| BiLSTM arc-hybrid (greedy) |" in printed and "| next word |" in printed
    assert "| test UAS | test LAS |" in printed


def test_non_projective_training_trees_are_left_out():
    good = generate(6, np.random.default_rng(2))
    crossing = Sentence(list("abcdefgh"), ["X"] * 8, [2, 4, 4, 0, 7, 7, 2, 4])
    vocab = Vocabulary.from_sentences(good + [crossing])
    items, skipped = parser_main.training_items(good[:3] + [crossing] + good[3:], vocab)
    assert skipped == 1
    assert items == [labelled_input(s, vocab) for s in good]


# --- the Turkish Web Treebank (the treebanks extra) ------------------------------------


def test_the_turkish_web_treebank_reads_whole_in_a_fixed_split():
    from refold.examples.parser import turkish
    every = turkish.sentences("web")
    train, test = turkish.load("web")
    assert len(every) == 2541 and (len(train), len(test)) == (2286, 255)
    assert test[0] == every[0] and test[1] == every[turkish.TEST_EVERY] and train[0] == every[1]
    for s in every:  # every sentence is one tree over its words
        check_tree(s.heads)
    assert sum(len(s) for s in every) > 30_000
    assert 0.02 < np.mean([not is_projective(s.heads) for s in every]) < 0.15
    assert "ig" in {r for s in every for r in s.relations}  # inflectional groups


def test_an_unknown_turkish_part_is_refused():
    from refold.examples.parser import turkish
    with pytest.raises(ValueError, match="parts \\('web', 'wiki'\\), got 'news'"):
        turkish.path("news")


def test_main_trains_on_the_turkish_treebank_leaving_non_projective_trees_out(capsys):
    out = parser_main.main(["--data", "turkish-web", "--train-size", "60", "--test-size",
                            "10", "--epochs", "1", "--embed", "8", "--tag-embed", "4",
                            "--hidden", "8", "--mlp", "16", "--verbose", "0"])
    assert all(math.isfinite(v) for v in out["history"]["loss"])
    assert all(math.isfinite(v) for v in out["history"]["label_loss"])
    assert len(out["parses"]) == len(out["relations"]) == 10
    for r in out["scores"].values():
        assert 0 <= r["las"] <= r["uas"]
    assert out["scores"]["next word"]["las"] > 0  # majority labels of the direction
    printed = capsys.readouterr().out
    assert "60 training sentences" in printed and "non-projective left out" in printed
    assert "relation labels" in printed and "| test LAS |" in printed


def test_greedy_rounds_follow_the_transition_system_on_any_legal_path():
    # the arrays of a batch (examples.parser.greedy.Rounds) against one Configuration
    # per sentence, on random legal transitions: same features, legality, heads, labels
    from refold.examples.parser.greedy import Rounds
    rng = np.random.default_rng(3)
    lengths = [0, 1, 2, 5, 9]
    rounds, configs = Rounds(lengths), [Configuration(n) for n in lengths]
    at = rounds.active()
    while len(at):
        features, legal = rounds.features(at), rounds.legal(at)
        chosen, labels = [], []
        for j, i in enumerate(at):
            want = configs[i].features()
            assert tuple(-1 if p is None else p for p in want) == tuple(features[j])
            assert tuple(legal[j]) == configs[i].legal()
            chosen.append(int(rng.choice(np.flatnonzero(legal[j]))))
            labels.append(int(rng.integers(0, 4)))
            configs[i].apply(chosen[-1], None if chosen[-1] == SHIFT else str(labels[-1]))
        rounds.apply(at, np.array(chosen), np.array(labels))
        at = rounds.active()
    assert [c.is_terminal() for c in configs] == [True] * len(lengths)
    for i, (n, c) in enumerate(zip(lengths, configs)):
        assert rounds.heads[i, 1:n + 1].tolist() == c.heads
        assert [str(r) for r in rounds.labels[i, 1:n + 1].tolist()] == c.relations
