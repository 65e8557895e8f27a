"""A first Refold program: a recursive block over expression trees, evaluated one input
at a time. Run it with `python -m refold.examples.quickstart`.

Each tree is a number (a leaf) or a dict `{"op": "+" or "*", "left": tree, "right": tree}`.
The model embeds leaves with a small fully connected layer and combines children with
one layer per operator; both layers are shared by every node of every tree.

>>> out = encode_tree(seed=0)
>>> out.shape
(8,)
"""

from __future__ import annotations

import numpy as np

import refold as td

STATE = 8


def expression_model() -> td.Block:
    """`PyObject tree -> float32[STATE]`: a recursive encoder of arithmetic trees."""
    expr = td.ForwardDeclaration(td.PyObjectType(), td.TensorType((STATE,)))
    leaf = td.Scalar() >> td.Function(lambda x: x[:, None]) >> td.FC(STATE, activation="tanh")
    combine = {op: td.FC(STATE, activation="tanh", name=f"combine_{name}")
               for op, name in (("+", "plus"), ("*", "times"))}
    cases = {op: td.Record({"left": expr(), "right": expr()}) >> td.Concat() >> layer
             for op, layer in combine.items()}
    cases["leaf"] = leaf
    expr.resolve_to(td.OneOf(lambda t: t["op"] if isinstance(t, dict) else "leaf", cases))
    return expr()


def random_tree(rng: np.random.Generator, depth: int = 3):
    if depth == 0 or rng.random() < 0.3:
        return float(rng.integers(0, 10))
    return {"op": str(rng.choice(["+", "*"])), "left": random_tree(rng, depth - 1),
            "right": random_tree(rng, depth - 1)}


def encode_tree(seed: int = 0) -> np.ndarray:
    return expression_model().eval(random_tree(np.random.default_rng(seed)))


def main(argv=None) -> None:
    import argparse
    argparse.ArgumentParser(prog="python -m refold.examples.quickstart",
                            description=__doc__.splitlines()[0]).parse_args(argv)
    model = expression_model()
    rng = np.random.default_rng(0)
    print(f"model: {model!r}, {model.input_type} -> {model.output_type}")
    for _ in range(3):
        tree = random_tree(rng)
        print(f"tree {tree}\n  depth {model.max_depth(tree)}, encoding "
              f"{np.round(model.eval(tree), 3)}")


if __name__ == "__main__":
    main()
