"""The parser's walks on the device (`examples.parser.ondevice`): the tensor dynamic
oracle costs what `dynamic_oracle.costs` does; the exploration walk takes the
transitions, logits, losses and heads of the Python `Exploration` block; greedy
parsing on the device parses as `greedy.parse`; batched equals the reference, values
and gradients, under both schedulers, with the exploration coins drawn in training."""

from __future__ import annotations

import functools
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from refold.blocks.errors import InputError
from refold.compiler import Compiler, Model
from refold.examples.parser import greedy
from refold.examples.parser.dynamic_oracle import costs
from refold.examples.parser.exploration import Exploration, exploration_input
from refold.examples.parser.ondevice import ILLEGAL, DeviceExploration, DeviceParser, oracle_costs
from refold.examples.parser.transitions import Configuration
from refold.examples.parser.treebank import Sentence
from refold.models.heads import variables
from tests.compiler.models import Case
from tests.compiler.test_batched_equals_reference import (
    ATOL,
    GRAD_RTOL,
    assert_same_result,
)
from tests.compiler.test_dropout_equals_reference import (
    reference_loss_and_grads,
    traced_training_run,
)
from tests.examples.test_parser import SHORT, random_tree, tiny_parser
from tests.examples.test_parser_dynamic_oracle import random_walk

MAX = 8  # max_words of the walks here (SHORT's sentences have at most 7 words)


def crossing(k: int) -> Sentence:
    """A short sentence with a random tree, projective or not."""
    rng = np.random.default_rng(k)
    s = SHORT[k % len(SHORT)]
    return Sentence(s.words, s.tags, random_tree(len(s), rng), s.relations)


SENTENCES = SHORT[:12] + [crossing(k) for k in range(6)]


@functools.cache
def parser():
    return tiny_parser(SHORT, max_words=MAX)


def as_arrays(configs: list[Configuration], golds: list, width: int) -> list[np.ndarray]:
    """`oracle_costs`'s arguments for a batch of configurations."""
    stack = np.zeros((len(configs), width), np.int32)
    gold = np.full((len(configs), width), -1, np.int32)
    for i, (c, g) in enumerate(zip(configs, golds)):
        stack[i, :len(c.stack)] = c.stack
        gold[i, 1:len(g) + 1] = g
    return [stack, [len(c.stack) for c in configs], [c.buffer[0] for c in configs],
            [len(g) for g in golds], gold]


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 9), seed=st.integers(0, 2 ** 32 - 1))
def test_the_tensor_oracle_costs_what_the_dynamic_oracle_does(n, seed):
    # every configuration of random legal walks, to projective and non-projective trees
    rng = np.random.default_rng(seed)
    configs, golds = [], []
    for _ in range(3):
        gold = random_tree(n, rng)
        for c in random_walk(gold, rng):
            snapshot = Configuration(n)
            snapshot.stack, snapshot.buffer = list(c.stack), list(c.buffer)
            configs.append(snapshot)
            golds.append(gold)
    got = oracle_costs(*as_arrays(configs, golds, 11)).numpy()
    want = [[ILLEGAL if x is None else x for x in costs(c, g)] for c, g in zip(configs, golds)]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("explore", [0.0, 1.0])
def test_the_device_walk_takes_the_python_walks_steps_logits_losses_and_heads(explore):
    # at explore 0 and 1 the coins do not matter: the two walks must agree step by step
    device = DeviceExploration(parser(), explore=explore)
    python = Exploration(parser(), explore=explore)
    for k, s in enumerate(SENTENCES):
        x = exploration_input(s, parser().vocab, seed=k)
        (logits, heads), metrics = device.heads_block.eval(x)
        (want_logits, want_heads), want = python.heads_block.eval(x)
        n = len(s)
        np.testing.assert_allclose(logits[:2 * n], np.stack(want_logits), atol=1e-6)
        assert not logits[2 * n:].any()
        assert heads[:n].tolist() == want_heads and not heads[n:].any()
        for name in ("loss", "accuracy"):  # per transition taken
            np.testing.assert_allclose(metrics[name], want[name], atol=1e-6)
        # once per word: the sentence's label loss over its words, its label accuracy
        labelled = want.get("label_loss", np.zeros(0))
        np.testing.assert_allclose(metrics["label_loss"], [np.sum(labelled) / n] * n,
                                   atol=1e-5)
        hits = want.get("label_accuracy", np.zeros(0))
        np.testing.assert_allclose(metrics["label_accuracy"],
                                   [np.mean(hits) if len(hits) else 0.0] * n, atol=1e-6)


def test_never_exploring_reaches_the_gold_tree_and_always_exploring_parses_greedily():
    never = DeviceExploration(parser(), explore=0.0)
    always = DeviceExploration(parser(), explore=1.0)
    layers = parser().layers()
    for s in SHORT[:8]:
        x = exploration_input(s, parser().vocab)
        assert never.heads_block.eval(x)[0][1][:len(s)].tolist() == s.heads
        greedy_heads = greedy.parse(layers, parser().encode([parser().vocab.tokens(s)]))[0][0]
        assert always.heads_block.eval(x)[0][1][:len(s)].tolist() == greedy_heads


@pytest.mark.parametrize("labelled", [True, False])
def test_greedy_parsing_on_the_device_is_greedy_parse(labelled):
    model = parser() if labelled else tiny_parser(
        [Sentence(s.words, s.tags, s.heads) for s in SHORT], max_words=MAX)
    tokens = [model.vocab.tokens(s) for s in SENTENCES]
    want = greedy.parse(model.layers(), model.encode(tokens))
    assert DeviceParser(model).parse(tokens) == want
    # ParserModel.parse goes through it, and a batch with a longer sentence through NumPy
    assert model.parse_tokens(tokens, batch_size=5) == [h for h, _ in want]
    long = SENTENCES[0]
    model.max_words = len(long) - 1
    assert model.parse_tokens([model.vocab.tokens(long)]) == [want[0][0]]
    model.max_words = MAX


@functools.cache
def engine(scheduler: str):
    """A compiler of the exploration block (explore 0.5: coins matter) and a traced
    training-mode `run(arrays, seed) -> (outputs, loss, gradients)`."""
    exploring = DeviceExploration(parser(), explore=0.5)
    case = Case("device_exploration", exploring.heads_block, None,
                variables(exploring.heads_block))
    return (case, *traced_training_run(case, scheduler))


@pytest.mark.parametrize("scheduler", ["agenda", "depth"])
@settings(max_examples=3, deadline=None)
@given(data=st.data())
def test_batched_exploration_with_coins_equals_the_reference(scheduler, data):
    case, comp, run, weights = engine(scheduler)
    picks = data.draw(st.lists(st.integers(0, len(SENTENCES) - 1), min_size=1, max_size=5))
    inputs = [exploration_input(SENTENCES[k], parser().vocab, seed=k) for k in picks]
    seed = data.draw(st.tuples(st.integers(0, 2 ** 31 - 1), st.integers(0, 1000),
                               st.integers(0, 3)))
    plan = comp.plan(inputs)
    outs, loss, grads = run(plan.feed.arrays, tf.constant(seed, tf.int32))
    got = comp.results(plan, [o.numpy() for o in outs])
    for i, x in enumerate(inputs):
        want = case.block.eval(x, training=True, seed=seed, example=i)
        assert_same_result(got[i], want, f"{scheduler} input {i}")
    ref_loss, ref_grads = reference_loss_and_grads(case, comp, weights, inputs, seed)
    np.testing.assert_allclose(loss.numpy(), ref_loss.numpy(), atol=1e-4, rtol=1e-5)
    for v, g, r in zip(case.variables, grads, ref_grads):
        np.testing.assert_allclose(g.numpy(), tf.convert_to_tensor(r).numpy(), atol=ATOL,
                                   rtol=GRAD_RTOL, err_msg=f"{scheduler} gradient of {v.name}")


def test_the_coins_leave_the_gold_path_in_training_and_the_model_declares_the_layers():
    exploring = DeviceExploration(parser(), explore=0.5)
    x = exploration_input(SENTENCES[0], parser().vocab)
    heads = {tuple(exploring.heads_block.eval(x, training=True, seed=(s, 0, 0))[0][1])
             for s in range(12)}
    assert len(heads) > 1  # the coins differ from seed to seed
    # outside training no coin is drawn: a wrong prediction is never followed
    assert exploring.heads_block.eval(x)[0][1][:len(SENTENCES[0])].tolist() \
        == list(SENTENCES[0].heads)
    model = Model(exploring.block, seed=0)
    declared = {id(v) for v in model.trainable_weights}
    walk = exploring.layer
    for v in (walk.hidden.kernel, walk.scores.kernel, *walk.label_layers[0].weights,
              *parser().pads):
        assert id(v) in declared
    model.compile(optimizer=keras.optimizers.SGD(0.1))
    inputs = [exploration_input(s, parser().vocab, seed=k) for k, s in enumerate(SHORT[:6])]
    history = model.fit(inputs, batch_size=3, epochs=2, verbose=0)
    assert np.isfinite(history.history["loss"]).all()


@pytest.mark.parametrize("item, message", [
    ({"tokens": [(0, 0), (2, 2)], "heads": [0, 1]}, "2 heads for 1 words"),
    ({"tokens": [(0, 0), (2, 2), (2, 2)], "heads": [2, 1]}, "not a tree"),
    ({"tokens": [(0, 0)] + [(2, 2)] * 9, "heads": [0] + [1] * 8},
     f"a sentence of 9 words is longer than max_words={MAX}"),
])
def test_a_bad_sentence_names_its_example_and_the_block(item, message):
    exploring = DeviceExploration(parser())
    good = exploration_input(SHORT[0], parser().vocab)
    with pytest.raises(InputError, match=rf"exploring_parser.*{message}") as e:
        Compiler.create(exploring.block).run([good, item])
    assert "example 1" in str(e.value) or "input 1" in str(e.value)
    with pytest.raises(InputError, match=r"parsing.*a sentence of 9 words is longer"):
        DeviceParser(parser()).block.eval([(0, 0)] + [(2, 2)] * 9)


def test_the_walks_handle_an_empty_batch():
    # the engine runs them without a cond around their launch (handles_empty)
    for walk, extra in ((DeviceExploration(parser()).layer, 2), (DeviceParser(parser()).layer, 0)):
        args = [tf.zeros([0, MAX + 1, parser().width]), tf.zeros([0], tf.int32)]
        args += [tf.zeros([0, MAX + 1], tf.int32)] * extra
        assert all(o.shape[0] == 0 for o in walk(*args))


ONE_THREAD = """
import tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
import keras
from refold.compiler import Model
from refold.examples.parser.exploration import exploration_input
from refold.examples.parser.ondevice import DeviceExploration
from tests.examples.test_parser import SHORT, tiny_parser
p = tiny_parser(SHORT, max_words=8)
p.parse_tokens([p.vocab.tokens(s) for s in SHORT[:3]])
m = Model(DeviceExploration(p).block)
m.compile(optimizer=keras.optimizers.SGD(0.1))
m.fit([exploration_input(s, p.vocab) for s in SHORT[:4]], batch_size=2, verbose=0)
print("done")
"""


def test_the_walks_run_with_one_inter_op_thread():
    # a regression: the walk's compiled loop, called under a tf.cond in the engine's
    # function, waited forever for the one inter-op thread the call held
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    run = subprocess.run([sys.executable, "-c", ONE_THREAD], cwd=root, capture_output=True,
                         text=True, timeout=300, env={**os.environ, "PYTHONPATH": root})
    assert run.returncode == 0 and "done" in run.stdout, run.stderr[-2000:]
