"""The detectors: the function-names example's encoders, ending in two logits.

A detector reads one input of `data.Task.encode` and scores it as correct (logit 0) or
buggy (logit 1). The encoders are `examples.function_names.models`' (same tokens, same
sizes), so the two examples compare the same models on a task where order and
structure carry the label (here) and on one where they barely do (there):

* `tree_lstm_pos`: a child-sum TreeLSTM over the statement's tree with each node's
  position among its siblings added to its input, so `f(a, b)` and `f(b, a)` differ;
* `tree_lstm`: the same without positions: a child-sum cell sums its children, so it
  cannot tell swapped arguments apart any more than the bag can;
* `bilstm`: an LSTM each way over the tokens in pre-order, the final `h` of both read;
* `bag`: the mean of the tokens' embeddings, then a ReLU layer; the same tokens in any
  order give the same score, so on swapped arguments it is at chance by construction.

>>> leaf = {"t": 2, "i": 0, "c": []}
>>> x = {"tree": {"t": 1, "i": 0, "c": [leaf, {**leaf, "t": 3, "i": 1}]}, "tokens": [1, 2, 3]}
>>> [detector(k, vocab_size=5, embed=4, hidden=6).eval(x).shape for k in DETECTORS]
[(2,), (2,), (2,), (2,)]
"""

from __future__ import annotations

import refold as td
from refold.examples.function_names.models import encoder_block

__all__ = ["DETECTORS", "DEFAULT_DETECTORS", "detector"]

DETECTORS = ("tree_lstm_pos", "tree_lstm", "bilstm", "bag")
DEFAULT_DETECTORS = ("tree_lstm_pos", "bilstm", "bag")


def detector(kind: str, vocab_size: int, embed: int = 32, hidden: int = 64,
             dropout: float = 0.0) -> td.Block:
    """`input -> logits[2]` (correct, buggy) for detector `kind` (one of `DETECTORS`);
    `dropout`: `function_names.models.encoder_block`'s."""
    if kind not in DETECTORS:
        raise ValueError(f"detector must be one of {DETECTORS}, got {kind!r}")
    return encoder_block(kind, vocab_size, 2, embed, hidden, dropout)
