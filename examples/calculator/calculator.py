"""Arithmetic expression trees and a recursive model that predicts the sign of their value.

An expression is a digit 0-9 or a dict ``{"op": "+" | "-" | "*", "left": e, "right": e}``.
The model encodes it bottom up: a digit is looked up in an embedding; an operator node
concatenates its children's codes and applies that operator's own fully connected
layer (`td.OneOf` picks the layer, `td.ForwardDeclaration` makes the recursion).
The root's code goes through a classifier over three classes: negative, zero, positive.

>>> import numpy as np
>>> tree = {"op": "-", "left": 3, "right": {"op": "*", "left": 2, "right": 4}}
>>> evaluate(tree), sign_label(tree), depth(tree), to_infix(tree)
(-5, 0, 2, '(3 - (2 * 4))')
>>> rng = np.random.default_rng(0)
>>> all(depth(random_expression(rng, max_depth=5)) <= 5 for _ in range(100))
True
>>> model = expression_classifier(state=8)
>>> model.eval(tree).shape
(3,)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

import refold as td

__all__ = ["OPS", "CLASSES", "evaluate", "sign_label", "depth", "to_infix",
           "random_expression", "dataset", "expression_classifier"]

OPS = ("+", "-", "*")
CLASSES = ("negative", "zero", "positive")


def evaluate(expr) -> int:
    """The exact integer value of an expression (iteratively, any depth)."""
    out: list[int] = []
    stack = [(expr, False)]
    while stack:
        node, done = stack.pop()
        if not isinstance(node, dict):
            out.append(int(node))
        elif done:
            right, left = out.pop(), out.pop()
            op = node["op"]
            out.append(left + right if op == "+" else left - right if op == "-"
                       else left * right)
        else:
            stack.extend([(node, True), (node["right"], False), (node["left"], False)])
    return out[0]


def sign_label(expr) -> int:
    """0 for a negative value, 1 for zero, 2 for positive."""
    return int(np.sign(evaluate(expr))) + 1


def depth(expr) -> int:
    """The number of operators on the longest root-to-leaf path (a digit has depth 0)."""
    best, stack = 0, [(expr, 0)]
    while stack:
        node, d = stack.pop()
        best = max(best, d)
        if isinstance(node, dict):
            stack.extend([(node["left"], d + 1), (node["right"], d + 1)])
    return best


def to_infix(expr) -> str:
    """The expression written out with full parentheses."""
    if not isinstance(expr, dict):
        return str(expr)
    return f"({to_infix(expr['left'])} {expr['op']} {to_infix(expr['right'])})"


def random_expression(rng: np.random.Generator, max_depth: int = 5,
                      leaf_probability: float = 0.25):
    """A random expression of depth <= `max_depth`; below the root, each subtree is
    a digit with probability `leaf_probability` (and always at `max_depth`)."""
    def grow(d: int, root: bool):
        if d == max_depth or (not root and rng.random() < leaf_probability):
            return int(rng.integers(10))
        return {"op": OPS[int(rng.integers(len(OPS)))], "left": grow(d + 1, False),
                "right": grow(d + 1, False)}
    return grow(0, max_depth > 0)


def dataset(n: int, rng: np.random.Generator, max_depth: int = 5):
    """`n` random expressions and their sign labels (int32 array)."""
    exprs = [random_expression(rng, max_depth) for _ in range(n)]
    return exprs, np.array([sign_label(e) for e in exprs], np.int32)


def expression_classifier(state: int = 32) -> td.Block:
    """`expression -> float32[3]`: logits over (negative, zero, positive)."""
    expr = td.ForwardDeclaration(td.PyObjectType(), td.TensorType((state,)))
    digit = td.Scalar("int32") >> td.Embedding(10, state, name="digits")
    cases = {"digit": digit}
    for op, name in zip(OPS, ("plus", "minus", "times")):
        combine = td.FC(state, activation="tanh", name=f"combine_{name}")
        cases[op] = td.Record({"left": expr(), "right": expr()}, name=name) \
            >> td.Concat() >> combine
    expr.resolve_to(td.OneOf(
        lambda e: e["op"] if isinstance(e, dict) else "digit", cases, name="node"))
    return expr() >> td.FC(state, activation="relu", name="hidden") \
        >> td.FC(len(CLASSES), activation=None, name="logits")


def majority_accuracy(train_labels: Sequence[int], test_labels: Sequence[int]) -> float:
    """The accuracy of always predicting the most frequent training label."""
    majority = np.bincount(np.asarray(train_labels), minlength=len(CLASSES)).argmax()
    return float(np.mean(np.asarray(test_labels) == majority))
