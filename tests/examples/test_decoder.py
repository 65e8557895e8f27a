"""The decoder example: the reversal task, teacher-forced training, greedy decoding."""

import math

import keras
import numpy as np
import pytest

from refold.compiler import Compiler
from refold.examples.decoder import __main__ as decoder_main
from refold.examples.decoder.decoder import END, START, Seq2Seq, answer, emitted, reverse_task


def test_the_task_asks_for_the_digits_reversed_then_the_end_symbol():
    strings = reverse_task(np.random.default_rng(1), 300, max_len=4)
    assert {len(s) for s in strings} == {1, 2, 3, 4}
    assert all(0 <= d <= 9 for s in strings for d in s)
    assert answer([1, 2, 3]) == (3, 2, 1, END)
    assert emitted(((START, 3, 2, 1, END), None)) == [3, 2, 1]
    assert emitted(((START, 3, 3), None)) == [3, 3]  # ran out of steps: no END


def test_teacher_forcing_takes_one_step_per_answer_symbol_with_a_loss_each():
    keras.utils.set_random_seed(0)
    block = Seq2Seq(embed=4, hidden=8).training_block()
    _, metrics = block.eval([4, 5, 6])
    assert metrics["loss"].shape == (4,) and metrics["accuracy"].shape == (4,)


@pytest.mark.parametrize("scheduler", ["agenda", "depth"])
def test_greedy_decoding_batched_equals_the_reference_and_stops(scheduler):
    keras.utils.set_random_seed(3)
    seq2seq = Seq2Seq(embed=4, hidden=8)
    strings = reverse_task(np.random.default_rng(2), 12, max_len=5)
    results = {}
    for lookahead in (None, 2, 5):
        block = seq2seq.greedy_block(max_steps=5, lookahead=lookahead)
        comp = Compiler.create(block, scheduler=scheduler)
        got = comp.run(strings)
        assert got == [block.eval(s) for s in strings]
        results[lookahead] = got, comp.last_rounds
    got, rounds = results[None]
    assert results[5] == (got, 1)  # the same symbols, in one round
    assert results[2] == (got, (rounds + 1) // 2)
    lengths = [len(tokens) - 1 for tokens, _ in got]
    assert all(1 <= n <= 5 for n in lengths) and len(set(lengths)) > 1
    assert all(tokens[-1] == END or n == 5 for (tokens, _), n in zip(got, lengths))
    assert rounds == max(lengths)


def test_main_learns_to_reverse_short_strings(capsys):
    out = decoder_main.main(["--train-size", "256", "--test-size", "16", "--max-len", "2",
                             "--epochs", "6", "--batch-size", "32", "--embed", "8",
                             "--hidden", "24", "--lr", "0.02", "--verbose", "0"])
    losses = out["history"]["loss"]
    assert all(math.isfinite(v) for v in losses) and losses[-1] < 0.5 * losses[0]
    assert 0 <= out["baseline"] <= out["accuracy"] <= 1 and out["accuracy"] >= 0.5
    assert len(out["decoded"]) == 16 and 1 <= out["rounds"]["python"] <= 2 * 2 + 2
    assert out["rounds"]["device"] <= 2
    assert "exact match" in capsys.readouterr().out
