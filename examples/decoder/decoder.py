"""The reversal task and its sequence-to-sequence model, decoded step by step.

An input is a string of 1 to `max_len` digits; the answer is the same digits in
reverse order, then the end symbol. The model reads the digits with an LSTM and
hands its final state to a decoder LSTM, which emits one symbol per step from the
symbol it emitted last. The per-step logic (`decoder_step`) is written once and
run by `td.Unfold` in two ways, sharing the layers:

- `training_block`: teacher forcing. The configuration carries the answer; each
  step's loss and accuracy are `td.Metric`s, and `decide` feeds the answer's next
  symbol back, whatever the model predicted. It reads no values
  (`reads_values=False`), so it expands once, as any block, and is cached.
- `greedy_block`: the model's own argmax is fed back until it emits `END` or has
  taken `max_steps` steps; the output is the configuration, the symbols emitted.
  Python feeds it back after each step (a round each), or the step does, on the
  device (`device_step`), Python reading the logits every `lookahead` steps.

>>> import keras
>>> keras.utils.set_random_seed(0)
>>> model = Seq2Seq(embed=4, hidden=8)
>>> tokens = model.greedy_block(max_steps=3).eval([1, 2, 3])[0]
>>> tokens[0] == START and 1 <= len(tokens) - 1 <= 3
True
>>> reverse_task(np.random.default_rng(0), 2, max_len=4)
[[5, 2, 3, 0], [0, 0, 1]]
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tensorflow as tf

import refold as td
from refold.models import heads, rnn_cells

DIGITS = 10
END, START = 10, 11  # the symbols after the digits
VOCABULARY = 12


def reverse_task(rng: np.random.Generator, n: int, max_len: int = 6) -> list[list[int]]:
    """`n` random digit strings (as lists of ints) of 1 to `max_len` digits."""
    lengths = rng.integers(1, max_len + 1, n)
    return [rng.integers(0, DIGITS, k).tolist() for k in lengths]


def answer(digits: Sequence[int]) -> tuple[int, ...]:
    """What the decoder should emit: the digits reversed, then `END`."""
    return (*reversed(digits), END)


def emitted(config) -> list[int]:
    """The symbols a greedy decoder emitted, without `START` and the final `END`."""
    tokens = list(config[0][1:])
    return tokens[:-1] if tokens and tokens[-1] == END else tokens


class Seq2Seq:
    """The layers of the encoder and the decoder, and the blocks that use them."""

    def __init__(self, embed: int = 16, hidden: int = 64):
        self.source = td.Embedding(DIGITS, embed, name="source")
        self.target = td.Embedding(VOCABULARY, embed, name="target")
        self.encoder_cell = rnn_cells.LSTMCell(hidden, name="encoder")
        self.decoder_cell = rnn_cells.LSTMCell(hidden, name="decoder")
        self.logits = td.FC(VOCABULARY, activation=None, name="logits")

    def encode(self) -> td.Block:
        """digits -> the encoder's final `(h, c)`."""
        return (td.Map(td.Scalar("int32") >> self.source) >> td.RNN(self.encoder_cell)
                >> td.GetItem(1))

    def decoder_step(self, teacher: bool) -> td.Block:
        """`((h, c), config) -> ((h', c'), logits)`: one step from the last symbol
        emitted; with `teacher`, also the loss and accuracy against the answer's
        symbol at this step. A configuration is `(symbols so far, answer or None)`."""
        step = td.Composition()
        with step.scope():
            state = td.GetItem(0).reads(step.input)
            config = td.GetItem(1).reads(step.input)
            last = (td.InputTransform(lambda c: c[0][-1]) >> td.Scalar("int32")
                    >> self.target).reads(config)
            cell = td.Function(self.decoder_cell).reads(last, state)
            h, new_state = td.GetItem(0).reads(cell), td.GetItem(1).reads(cell)
            logits = td.Function(self.logits).reads(h)
            if teacher:
                label = (td.InputTransform(lambda c: c[1][len(c[0]) - 1])
                         >> td.Scalar("int32")).reads(config)
                td.Void().reads(heads.classification_metrics().reads(logits, label))
            step.output.reads(new_state, logits)
        return step

    def training_block(self) -> td.Block:
        """digits -> nothing; a loss and an accuracy per answer symbol (teacher forcing)."""
        def feed_the_answer(config, logits):
            tokens, target = config
            return tokens + (target[len(tokens) - 1],), target

        decode = td.Unfold(self.decoder_step(teacher=True), decide=feed_the_answer,
                           done=lambda c: len(c[0]) > len(c[1]), max_steps=64,
                           reads_values=False)
        start = td.InputTransform(lambda digits: ((START,), answer(digits)))
        return td.AllOf(self.encode(), start) >> decode >> td.Void()

    def device_step(self) -> td.Block:
        """`(((h, c), symbol), None) -> (((h', c'), argmax), logits)`: the step of
        `decoder_step`, with the last symbol carried as a tensor in the state and
        the argmax taken on the device, so that it needs no configuration."""
        embed = td.Function(lambda ids: tf.gather(self.target.embeddings, ids))
        argmax = td.Function(lambda z: tf.argmax(z, 1, output_type=tf.int32))
        cell = (td.GetItem(0) >> td.AllOf(td.GetItem(1) >> embed, td.GetItem(0))
                >> self.decoder_cell)
        return cell >> td.AllOf(td.GetItem(1), td.GetItem(0) >> self.logits) >> td.AllOf(
            td.AllOf(td.GetItem(0), td.GetItem(1) >> argmax), td.GetItem(1))

    def greedy_block(self, max_steps: int, lookahead: int | None = None) -> td.Block:
        """digits -> the configuration after greedy decoding: `(symbols, None)`, the
        symbols starting with `START` and ending with `END` unless `max_steps` ran out.

        By default Python reads each step's logits and feeds the argmax back through
        the configuration: one round (engine call) per step. With `lookahead=k` the
        step feeds it back on the device (`device_step`) and Python reads the logits
        every k steps: a round per k steps, the steps after `END` computed and
        dropped. Both emit the same symbols."""
        def feed_the_argmax(config, logits):
            return config[0] + (int(np.argmax(logits)),), None

        config = td.InputTransform(lambda digits: ((START,), None))
        if lookahead is not None:
            decode = td.Unfold(self.device_step(), decide=feed_the_argmax,
                               done=lambda c: c[0][-1] == END, max_steps=max_steps,
                               lookahead=lookahead)
            start = td.AllOf(self.encode(), td.InputTransform(lambda d: START)
                             >> td.Scalar("int32"))
        else:
            decode = td.Unfold(self.decoder_step(teacher=False), decide=feed_the_argmax,
                               done=lambda c: c[0][-1] == END, max_steps=max_steps)
            start = self.encode()
        return td.AllOf(start, config) >> decode >> td.GetItem(2)
