"""Greedy parsing of a batch of sentences on arrays: the parser's rounds at the cost
of their arithmetic.

Parsing acts on its own predictions: each transition depends on the scores of the
one before, so a batch advances in rounds, one transition per unfinished sentence
per round, 2n rounds for its longest sentence of n words. A round's arithmetic is
tiny (a `[sentences, 4 x encoding]` by `[4 x encoding, mlp]` product and a few
vectors), far less than the fixed cost of a TensorFlow call (0.1-0.5 ms here), so
the rounds run in NumPy on the layers' weights, read once per batch, and the
configurations of all sentences are arrays (`Rounds`) advanced together, not one
Python object per sentence. Two more savings:

* the MLP's first layer is linear in each position's encoding, so it is applied to
  every encoding once per batch (`hidden = tanh(sum over slots of P_slot[position] +
  b)`, `P_slot = encodings @ W_slot`): a round adds four rows instead of multiplying
  a matrix, and a sentence's n + 1 encodings are multiplied once instead of its 2n
  configurations' 4 slots;
* the transition system (arc-hybrid, `transitions`: the root at the end of the
  buffer) is a stack per sentence in one `[sentences, n + 1]` array with its heights,
  and the buffer is its first word `b0` (the buffer is always `b0..n` then the root).

The encoder (the BiLSTM) runs through the engine as every block does
(`ParserModel.encode`); this module starts from its encodings.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> w = rng.normal(size=(4 * 2, 3)).astype("float32")
>>> layers = Layers(w, np.zeros(3, "float32"), rng.normal(size=(3, 3)).astype("float32"),
...                 np.zeros(3, "float32"), np.zeros((3, 2), "float32"))
>>> encodings = [rng.normal(size=(n + 1, 2)).astype("float32") for n in (3, 1)]
>>> [len(heads) for heads, _ in parse(layers, encodings)]
[3, 1]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from refold.examples.parser.transitions import LEFT, RIGHT, SHIFT, STACK_FEATURES

__all__ = ["Layers", "parse"]


@dataclass
class Layers:
    """The parser's scoring layers as arrays: the MLP's hidden layer (`hidden_w`
    `[4 * width, mlp]`, tanh), its transition layer, the pads of empty stack slots
    (`[3, width]`) and, for a labelled parser, each arc direction's label layer
    (`{LEFT: (w, b), RIGHT: (w, b)}`)."""

    hidden_w: np.ndarray
    hidden_b: np.ndarray
    logits_w: np.ndarray
    logits_b: np.ndarray
    pads: np.ndarray
    labels: dict | None = None


class Rounds:
    """The configurations of a batch of sentences of `lengths` words, as arrays."""

    def __init__(self, lengths: Sequence[int]):
        b = len(lengths)
        self.n = np.asarray(lengths, np.int64)
        most = int(self.n.max(initial=0))
        self.stack = np.zeros((b, most + 1), np.int64)
        self.height = np.zeros(b, np.int64)
        self.b0 = np.where(self.n > 0, 1, 0)  # the first word, or the root when none
        self.heads = np.full((b, most + 1), -1, np.int64)  # by word (from 1)
        self.labels = np.full((b, most + 1), -1, np.int64)

    def active(self) -> np.ndarray:
        """The sentences not parsed yet."""
        return np.flatnonzero((self.height > 0) | (self.b0 != 0))

    def features(self, at: np.ndarray) -> np.ndarray:
        """`[len(at), 4]`: s2, s1, s0 (-1 for an empty slot) and b0 of sentences `at`."""
        out = np.empty((len(at), STACK_FEATURES + 1), np.int64)
        height = self.height[at]
        for slot in range(STACK_FEATURES):
            depth = STACK_FEATURES - slot  # s2 is the third from the top
            there = height >= depth
            out[:, slot] = np.where(there, self.stack[at, np.maximum(height - depth, 0)], -1)
        out[:, STACK_FEATURES] = self.b0[at]
        return out

    def legal(self, at: np.ndarray) -> np.ndarray:
        """`[len(at), 3]`: whether SHIFT, LEFT and RIGHT are legal (`Configuration.legal`)."""
        height, b0 = self.height[at], self.b0[at]
        return np.stack([b0 != 0, (height > 0) & ((b0 != 0) | (height == 1)), height >= 2], 1)

    def apply(self, at: np.ndarray, transitions: np.ndarray, labels: np.ndarray) -> None:
        """Applies each sentence's transition (legal ones only), its arc taking `labels`."""
        height, b0 = self.height[at], self.b0[at]
        shift = transitions == SHIFT
        i, h = at[shift], height[shift]
        self.stack[i, h] = b0[shift]
        self.b0[i] = np.where(b0[shift] < self.n[i], b0[shift] + 1, 0)
        arc = ~shift
        i, h = at[arc], height[arc]
        s0 = self.stack[i, h - 1]
        head = np.where(transitions[arc] == LEFT, b0[arc], self.stack[i, np.maximum(h - 2, 0)])
        self.heads[i, s0] = head
        self.labels[i, s0] = labels[arc]
        self.height[at] = height + np.where(shift, 1, -1)


def parse(layers: Layers, encodings: Sequence[np.ndarray]) -> list[tuple[list, list]]:
    """Each sentence's greedy parse, `(heads, label ids)` (label ids None for an
    unlabelled parser), from its `[n + 1, width]` encodings (the root's first)."""
    width = layers.pads.shape[1]
    slots = STACK_FEATURES + 1
    lengths = [len(e) - 1 for e in encodings]
    starts = np.concatenate([[0], np.cumsum([len(e) for e in encodings])])[:-1]
    stacked = np.concatenate(encodings) if encodings else np.zeros((0, width), np.float32)
    w = layers.hidden_w.reshape(slots, width, -1)
    mlp = w.shape[2]
    # every position's contribution to the hidden layer from each slot (one product),
    # and the pads'
    projected = (stacked @ w.transpose(1, 0, 2).reshape(width, slots * mlp)).reshape(
        len(stacked), slots, mlp)
    pads = np.stack([layers.pads[s] @ w[s] for s in range(STACK_FEATURES)])
    rounds = Rounds(lengths)
    at = rounds.active()
    while len(at):
        positions = rounds.features(at)
        hidden = np.broadcast_to(layers.hidden_b, (len(at), mlp)).copy()
        for slot in range(slots):
            p = positions[:, slot]
            rows = projected[starts[at] + np.maximum(p, 0), slot]
            hidden += np.where((p >= 0)[:, None], rows, pads[slot]) if slot < STACK_FEATURES \
                else rows
        np.tanh(hidden, out=hidden)
        logits = hidden @ layers.logits_w + layers.logits_b
        transitions = np.argmax(np.where(rounds.legal(at), logits, -np.inf), 1)
        labels = np.full(len(at), -1, np.int64)
        if layers.labels:
            for direction in (LEFT, RIGHT):
                mine = transitions == direction
                if mine.any():
                    lw, lb = layers.labels[direction]
                    labels[mine] = np.argmax(hidden[mine] @ lw + lb, 1)
        rounds.apply(at, transitions, labels)
        at = at[(rounds.height[at] > 0) | (rounds.b0[at] != 0)]
    out = []
    for i, n in enumerate(lengths):
        heads = rounds.heads[i, 1:n + 1].tolist()
        ids = rounds.labels[i, 1:n + 1].tolist() if layers.labels else None
        out.append((heads, ids))
    return out
