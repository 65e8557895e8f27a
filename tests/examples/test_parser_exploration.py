"""Exploration training of the parser: the batched walk decides, computes and
differentiates as the reference evaluator does (both schedulers); the policy follows
the dynamic oracle and the model as told; a tiny run trains and parses."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refold.blocks.errors import InputError
from refold.compiler import Compiler
from refold.examples.parser import __main__ as parser_main
from refold.examples.parser.dynamic_oracle import costs
from refold.examples.parser.exploration import Exploration, Walk, exploration_input
from refold.examples.parser.model import Vocabulary, labelled_input, training_input
from refold.examples.parser.synthetic import generate
from refold.examples.parser.transitions import LEFT, RIGHT, SHIFT, Configuration, oracle
from refold.examples.parser.treebank import Sentence, read_conllu
from refold.models.heads import variables
from tests.compiler.models import Case
from tests.compiler.test_batched_equals_reference import check_case_batch, engine_for
from tests.examples.test_parser import random_tree, tiny_parser

SHORT = [s for s in generate(200, np.random.default_rng(21)) if len(s) <= 7]


def crossing(n_seed: int) -> Sentence:
    """A sentence with a random tree, projective or not (exploration takes any)."""
    rng = np.random.default_rng(n_seed)
    s = SHORT[n_seed % len(SHORT)]
    return Sentence(s.words, s.tags, random_tree(len(s), rng), s.relations)


SENTENCES = SHORT[:20] + [crossing(k) for k in range(6)]


def unambiguous(s: Sentence) -> bool:
    """The static oracle's transition is the only zero-cost one at every step of its path."""
    c = Configuration(len(s))
    for _, t in oracle(s.heads):
        if [x == 0 for x in costs(c, s.heads)] != [u == t for u in range(3)]:
            return False
        c.apply(t)
    return True


def check_batches(name: str, block, inputs, scheduler: str) -> Case:
    """Random batches of `inputs` through `block` equal the reference (values, metrics
    and gradients) under `scheduler`; returns the case."""
    case = Case(name, block, inputs, variables(block))
    engine = engine_for(case, scheduler)

    @settings(max_examples=2, deadline=None)
    @given(batch=st.lists(inputs, min_size=1, max_size=5))
    def check(batch):
        check_case_batch(case, scheduler, batch, engine)
    check()
    return case


@pytest.fixture(scope="module")
def exploring():
    """The walk over tiny random layers, following wrong predictions by a coin flip
    (so the sentences leave the gold path, some steps by the model, some not)."""
    return Exploration(tiny_parser(SHORT), explore=0.5)


@pytest.mark.parametrize("scheduler", ["agenda", "depth"])
def test_the_walk_batched_equals_the_reference_in_decisions_values_and_gradients(
        exploring, scheduler):
    block = exploring.heads_block  # the heads reached show the decisions taken
    inputs = st.sampled_from([exploration_input(s, exploring.parser.vocab, seed=k)
                              for k, s in enumerate(SENTENCES)])
    case = check_batches("exploration", block, inputs, scheduler)
    assert {id(p.value) for p in exploring.parser.pads} <= {id(v) for v in case.variables}


def test_the_walk_leaves_the_gold_path_and_the_training_block_is_the_same_walk():
    exploring = Exploration(tiny_parser(SHORT), explore=1.0)
    items = [exploration_input(s, exploring.parser.vocab, seed=k)
             for k, s in enumerate(SHORT[:10])]
    # a run gives (output, metrics) per input, as `block.eval`
    walked = Compiler.create(exploring.heads_block).run(items)
    assert any(heads != list(s.heads) for ((_, heads), _), s in zip(walked, SHORT))
    trained = Compiler.create(exploring.block).run(items)
    for ((logits, _), metrics), (same, same_metrics) in zip(walked, trained):
        np.testing.assert_allclose(logits, same, atol=1e-6)
        np.testing.assert_allclose(metrics["loss"], same_metrics["loss"], atol=1e-6)


def test_always_following_the_model_is_greedy_parsing():
    # explore=1: every prediction is followed, right or wrong: the parse `parse` gives
    exploring = Exploration(tiny_parser(SHORT), explore=1.0)
    parser = exploring.parser
    items = [exploration_input(s, parser.vocab, seed=k) for k, s in enumerate(SENTENCES)]
    walked = Compiler.create(exploring.heads_block).run(items)
    assert [heads for (_, heads), _ in walked] == parser.parse(SENTENCES)


def test_never_exploring_reaches_the_gold_tree_of_a_projective_sentence():
    exploring = Exploration(tiny_parser(SHORT), explore=0.0)
    items = [exploration_input(s, exploring.parser.vocab) for s in SHORT[:12]]
    walked = Compiler.create(exploring.heads_block).run(items)
    assert [heads for (_, heads), _ in walked] == [list(s.heads) for s in SHORT[:12]]


def test_on_the_gold_path_the_loss_is_the_static_cross_entropy():
    # where the static oracle's transition is the only zero-cost one at every step,
    # the walk is its path and each step's loss the static training block's
    exploring = Exploration(tiny_parser(SHORT), explore=0.0)
    parser = exploring.parser

    chosen = [s for s in SHORT if unambiguous(s)]
    assert len(chosen) >= 3
    for s in chosen[:3]:
        logits, metrics = exploring.block.eval(exploration_input(s, parser.vocab))
        static_logits, static = parser.training_block.eval(training_input(s, parser.vocab))
        np.testing.assert_allclose(np.stack(logits), np.stack(static_logits), atol=1e-5)
        np.testing.assert_allclose(metrics["loss"], static["loss"], atol=1e-5)
        np.testing.assert_array_equal(metrics["accuracy"], static["accuracy"])



def labelled(s: Sentence) -> Sentence:
    """`s` with relation labels that vary (the synthetic treebank has none)."""
    return Sentence(s.words, s.tags, s.heads, [("a", "b", "c")[(i + len(s)) % 3]
                                               for i in range(len(s))])


def test_gold_arc_names_the_direction_and_label_of_a_correct_arc_to_the_top():
    walk = Walk.start([2, 3, 0], seed=0, labels=[7, 8, 9])  # the -> dog -> sleeps
    assert walk.gold_arc() == (SHIFT, -1)                    # empty stack
    walk = walk.after(SHIFT)
    assert walk.gold_arc() == (LEFT, 7)                      # b0 = dog heads the
    walk = walk.after(SHIFT).after(SHIFT)                    # stack the dog sleeps
    assert walk.gold_arc() == (SHIFT, -1)                    # no gold arc to s0
    right = Walk.start([0, 1], seed=0, labels=[5, 6]).after(SHIFT).after(SHIFT)
    assert right.gold_arc() == (RIGHT, 6)                    # s1 heads s0
    assert Walk.start([2, 3, 0], seed=0).after(SHIFT).gold_arc() == (SHIFT, -1)  # no labels


def test_on_the_gold_path_the_label_loss_is_the_static_label_loss():
    # where the static oracle's path is the only correct one, exploration learns each
    # label where static training does, with the same loss
    sentences = [labelled(s) for s in SHORT]
    exploring = Exploration(tiny_parser(sentences), explore=0.0)
    parser = exploring.parser
    assert len(parser.vocab.labels) == 3

    chosen = [s for s in sentences if unambiguous(s)]
    for s in chosen[:3]:
        _, metrics = exploring.block.eval(exploration_input(s, parser.vocab))
        _, static = parser.training_block.eval(labelled_input(s, parser.vocab))
        assert metrics["label_loss"].shape == (len(s),)
        np.testing.assert_allclose(metrics["label_loss"], static["label_loss"], atol=1e-5)
        np.testing.assert_array_equal(metrics["label_accuracy"], static["label_accuracy"])


@pytest.mark.parametrize("scheduler", ["agenda", "depth"])
def test_the_labelled_walk_batched_equals_the_reference(scheduler):
    sentences = [labelled(s) for s in SHORT]
    exploring = Exploration(tiny_parser(sentences), explore=0.5)
    block = exploring.block
    inputs = st.sampled_from([exploration_input(s, exploring.parser.vocab, seed=k)
                              for k, s in enumerate(sentences[:12])])
    check_batches("labelled_exploration", block, inputs, scheduler)

def test_the_loss_is_the_cross_entropy_of_the_best_scoring_correct_transition():
    from refold.examples.parser.exploration import _hit, _loss
    logits = np.array([[1.0, 3.0, 2.0], [0.0, 0.0, 5.0]], "float32")
    correct = np.array([[1.0, 0.0, 1.0], [1.0, 1.0, 0.0]], "float32")
    z = np.log(np.exp(logits).sum(1))
    np.testing.assert_allclose(_loss(logits, correct).numpy(), z - [2.0, 0.0], rtol=1e-6)
    np.testing.assert_array_equal(_hit(logits, correct).numpy(), [0.0, 0.0])


def walk_at(gold, transitions) -> Walk:
    w = Walk.start(gold, seed=3)
    for t in transitions:
        w = w.after(t)
    return w


def test_decide_takes_a_right_prediction_and_a_wrong_one_only_by_the_coin():
    gold = [2, 0, 2]
    w = walk_at(gold, [SHIFT])  # SHIFT costs 2, LEFT 0, RIGHT illegal
    wrong, right = np.array([5.0, 1.0, 9.0]), np.array([1.0, 5.0, 9.0])
    exploring = Exploration(tiny_parser(SHORT), explore=0.0)
    assert exploring.decide(w, right).config.stack == []         # LEFT, as predicted
    assert exploring.decide(w, wrong).config.stack == []         # LEFT, the correct one
    exploring.explore = 1.0
    assert exploring.decide(w, wrong).config.stack == [1, 2]     # SHIFT, as predicted
    exploring.explore = 0.5
    followed = []
    for seed in range(200):
        exploring.epoch = seed  # a new coin for each
        followed.append(exploring.decide(w, wrong).config.stack == [1, 2])
    assert 70 < sum(followed) < 130
    # the same epoch, sentence and step flip the same coin
    exploring.epoch = 7
    assert len({tuple(exploring.decide(w, wrong).config.stack) for _ in range(5)}) == 1
    # a wrong prediction not followed: the best-scoring of the correct transitions
    exploring.explore = 0.0
    gold = [0, 1, 4, 1]
    w = walk_at(gold, [SHIFT, SHIFT])  # stack [1 2], buffer [3 4 root]
    assert costs(w.config, gold) == (0, 1, 0)
    assert exploring.decide(w, np.array([0.0, 9.0, 5.0])).config.stack == [1]  # RIGHT
    assert exploring.decide(w, np.array([5.0, 9.0, 0.0])).config.stack == [1, 2, 3]
    assert (LEFT, RIGHT) == (1, 2)


def test_the_schedule_keeps_to_the_gold_path_for_the_first_epochs():
    exploring = Exploration(tiny_parser(SHORT), explore=0.7)
    callback = exploring.schedule(static_epochs=2, explore=0.7)
    seen = []
    for epoch in range(4):
        callback.on_epoch_begin(epoch)
        seen.append((exploring.epoch, exploring.explore))
    assert seen == [(0, 0.0), (1, 0.0), (2, 0.7), (3, 0.7)]


@pytest.mark.parametrize("item, message", [
    ({"tokens": [(0, 0), (2, 2)], "heads": [0, 1]}, "2 heads for 1 words"),
    ({"tokens": [(0, 0), (2, 2), (2, 2)], "heads": [2, 1]}, "not a tree"),
    ({"tokens": [(0, 0), (2, 2), (2, 2)], "heads": [2, 0], "labels": [0, 0, 0]},
     r"3 labels for 2 words \(one relation label per word\)"),
])
def test_a_bad_sentence_names_its_example_and_the_block(item, message):
    exploring = Exploration(tiny_parser(SHORT))
    assert exploring.parser.label_layers  # the labels are read
    good = exploration_input(SHORT[0], exploring.parser.vocab)
    with pytest.raises(InputError, match=rf"exploring_parser.*{message}") as e:
        Compiler.create(exploring.block).run([good, item])
    assert "example 1" in str(e.value) or "input 1" in str(e.value)


def test_a_label_outside_the_vocabulary_is_refused_in_exploration_input():
    vocab = Vocabulary.from_sentences([Sentence(["a"], ["X"], [0], ["root"])])
    with pytest.raises(ValueError, match=r"sentence 'a b': relation labels \['det'\] are "
                                         r"not among the vocabulary's 1 labels \(root\)"):
        exploration_input(Sentence(["a", "b"], ["X", "X"], [0, 1], ["root", "det"]), vocab)


def test_main_trains_with_exploration_and_parses(capsys):
    out = parser_main.main(["--train", "exploration", "--train-size", "36",
                            "--test-size", "6", "--epochs", "3", "--static-epochs", "2",
                            "--batch-size", "6", "--embed", "8", "--tag-embed", "4",
                            "--hidden", "8", "--mlp", "16", "--lr", "0.02", "--verbose", "0"])
    losses = out["history"]["loss"]  # the third epoch explores: its loss may rise
    assert all(math.isfinite(v) for v in losses) and losses[1] < 0.8 * losses[0]
    test = read_conllu(os.path.join(parser_main.DATA, "test.conllu"))[:6]
    assert [len(h) for h in out["parses"]] == [len(s) for s in test]
    uas = {name: r["uas"] for name, r in out["scores"].items()}
    assert uas["BiLSTM arc-hybrid (greedy)"] > uas["previous word"]
    assert "exploration training" in capsys.readouterr().out
