"""An input changed in place is never answered from the expansion cache: `predict`,
`evaluate`, `fit` and `Compiler.run` see the change; unchanged inputs still skip
expansion."""

from __future__ import annotations

import dataclasses

import keras
import numpy as np
import pytest

import refold as td
from refold.compiler.graphs import expansion
from refold.compiler.graphs.expansion_cache import ExpansionCache, fingerprint


def sum_model() -> td.Model:
    """The sum of a sequence of numbers, as a regression with no weights."""
    block = td.Map(td.Scalar()) >> td.Sum() >> td.Function(lambda x: x[:, None])
    model = td.Model(block)
    model.compile(optimizer=keras.optimizers.SGD(0.0), loss="mse")
    return model


def tree_sum() -> td.Block:
    """Trees `{"value": float, "children": [trees]}`: the sum of their values."""
    tree = td.ForwardDeclaration(td.PyObjectType(), td.TensorType(()))
    children = td.Map(tree()) >> td.Sum()
    tree.resolve_to(td.Record({"value": td.Scalar(), "children": children})
                    >> td.Function(lambda a, b: a + b))
    return tree()


def deep_tree() -> dict:
    leaf = {"value": 1.0, "children": []}
    return {"value": 1.0, "children": [{"value": 1.0, "children": [leaf]}, leaf]}


def test_predict_and_evaluate_see_a_sequence_grown_in_place():
    model = sum_model()
    xs = [[1.0, 2.0], [0.5]]
    np.testing.assert_allclose(model.predict(xs, verbose=0)[:, 0], [3.0, 0.5])
    loss = model.evaluate(xs, np.array([3.0, 0.5]), verbose=0)
    assert loss == pytest.approx(0.0)
    xs[0].append(100.0)
    np.testing.assert_allclose(model.predict(xs, verbose=0)[:, 0], [103.0, 0.5])
    loss = model.evaluate(xs, np.array([3.0, 0.5]), verbose=0)
    assert loss == pytest.approx(100.0 ** 2 / 2)


def test_fit_sees_an_input_changed_in_place():
    model = sum_model()
    xs, y = [[1.0, 2.0], [0.5]], np.array([3.0, 0.5])
    first = model.fit(xs, y, epochs=1, verbose=0).history["loss"][0]
    xs[1][0] = 2.5
    second = model.fit(xs, y, epochs=1, verbose=0).history["loss"][0]
    assert (first, second) == (pytest.approx(0.0), pytest.approx(2.0))


def test_compiler_run_sees_a_deep_leaf_changed_in_place(monkeypatch):
    compiler = td.Compiler.create(tree_sum())
    trees = [deep_tree(), deep_tree()]
    assert [float(v) for v in compiler.run(trees)] == [4.0, 4.0]
    calls = []
    real = expansion.expand_all
    monkeypatch.setattr("refold.compiler.compiler.expand_all",
                        lambda *a, **k: calls.append(len(a[1])) or real(*a, **k))
    assert [float(v) for v in compiler.run(trees)] == [4.0, 4.0]
    assert calls == []  # unchanged: from the cache
    trees[1]["children"][0]["children"][0]["value"] = 10.0  # the leaf, shared twice
    assert [float(v) for v in compiler.run(trees)] == [4.0, 22.0]
    assert calls == [1]  # only the changed tree expanded again


@dataclasses.dataclass
class Node:
    value: float
    children: list


class Slotted:
    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


def test_fingerprints_see_nested_content_of_every_kind():
    a = {"xs": [1.0, (2, "b")], "node": Node(1.0, [Node(2.0, [])]), "s": Slotted(3),
         "arr": np.arange(3.0)}
    before = fingerprint(a)
    assert before is not None and fingerprint(a) == before
    changes = [lambda: a["xs"].append(4), lambda: a["node"].children[0].children.append(1),
               lambda: setattr(a["s"], "value", 4), lambda: a["arr"].__setitem__(0, 9.0),
               lambda: a.__setitem__("new", None)]
    for change in changes:
        old = fingerprint(a)
        change()
        assert fingerprint(a) != old


def test_shared_and_cyclic_inputs_are_walked_once():
    leaf = [1.0]
    shared = [leaf] * 1000
    assert fingerprint(shared) is not None
    cyclic = {"value": 1.0, "children": []}
    cyclic["children"].append(cyclic)
    assert fingerprint(cyclic) is not None


def test_inputs_whose_content_cannot_be_seen_are_not_kept():
    cache = ExpansionCache(4)
    cache.put([{1, 2}], "graph")
    cache.put(3.0, "graph")
    assert len(cache) == 0
    kept = [1.0]
    cache.put(kept, "graph")
    assert cache.get(kept) == "graph" and cache.get([1.0]) is None  # by identity
