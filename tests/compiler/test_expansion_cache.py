"""An input changed in place is never answered from the expansion cache: `predict`,
`evaluate`, `fit` and `Compiler.run` see the change; unchanged inputs still skip
expansion."""

from __future__ import annotations

import collections
import dataclasses
import enum
import sys

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
    cache.put([iter([1, 2])], "graph")
    cache.put(3.0, "graph")
    assert len(cache) == 0
    kept = [1.0]
    cache.put(kept, "graph")
    assert cache.get(kept) == "graph" and cache.get([1.0]) is None  # by identity


def test_sets_and_subclasses_of_containers_and_numbers_are_seen():
    Pair = collections.namedtuple("Pair", "left right")
    a = {"set": {1, 2}, "ordered": collections.OrderedDict(a=[1]), "pair": Pair([1], 2),
         "flag": enum.IntEnum("Flag", "A B").A, "nested": [np.float32(1.5), 2 + 1j]}
    changes = [lambda: a["set"].add(3), lambda: a["ordered"]["a"].append(2),
               lambda: a["ordered"].__setitem__("b", 0), lambda: a["pair"].left.append(0),
               lambda: a.__setitem__("flag", a["flag"].__class__.B),
               lambda: a["nested"].__setitem__(0, np.float64(1.5)),
               lambda: a["nested"].__setitem__(1, 2 + 2j)]
    for change in changes:
        old = fingerprint(a)
        assert old is not None and fingerprint(a) == old
        change()
        assert fingerprint(a) != old


def test_arrays_are_seen_with_their_shape_and_dtype():
    arr = np.arange(6.0)
    x = [arr]
    before = fingerprint(x)
    arr.shape = (2, 3)  # the same bytes, another shape
    after = fingerprint(x)
    arr.dtype = np.int64  # the same bytes, another dtype
    assert len({before, after, fingerprint(x)}) == 3


def test_functions_and_classes_count_by_identity():
    def f():
        return 1

    class Local:
        pass

    x = {"f": f, "cls": Local, "obj": Local()}
    before = fingerprint(x)
    assert before is not None and fingerprint(x) == before
    x["obj"].value = 3
    assert fingerprint(x) != before


def test_cycles_through_objects_and_subclasses_end():
    node = Node(1.0, [])
    node.children.append(node)
    od = collections.OrderedDict()
    od["self"] = od
    changes = [lambda: node.children.append(Node(2.0, [])), lambda: od.__setitem__("b", 1)]
    for x, change in zip((node, od), changes):
        before = fingerprint(x)
        assert before is not None and fingerprint(x) == before
        change()
        assert fingerprint(x) != before


def test_inputs_too_deep_for_the_pickler_are_walked():
    deep: list = []
    for _ in range(5 * sys.getrecursionlimit()):
        deep = [deep]
    before = fingerprint(deep)
    assert isinstance(before, int) and fingerprint(deep) == before
    inner = deep
    while inner:
        inner = inner[0]
    inner.append(1.0)  # the innermost list changed in place
    assert fingerprint(deep) != before


def test_long_inputs_are_kept_as_a_digest_that_sees_one_changed_number():
    x = [float(i) for i in range(10_000)]
    before = fingerprint(x)
    assert isinstance(before, bytes) and len(before) == 16
    x[5_000] = -1.0
    assert fingerprint(x) != before


def test_a_change_made_by_a_callback_during_fit_is_seen_by_the_next_epoch():
    model = sum_model()
    xs, y = [[1.0, 2.0], [0.5]], np.array([3.0, 0.5])

    class Change(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            xs[1][0] = 2.5

    losses = model.fit(xs, y, epochs=2, verbose=0, shuffle=False,
                       callbacks=[Change()]).history["loss"]
    assert losses == [pytest.approx(0.0), pytest.approx(2.0)]


def test_fit_checks_each_input_once_an_epoch(monkeypatch):
    from refold.compiler.graphs import expansion_cache
    model = sum_model()
    xs, y = [[1.0, 2.0], [0.5], [4.0]], np.array([3.0, 0.5, 4.0])
    model.fit(xs, y, epochs=1, verbose=0)  # expanded and cached
    checked = []
    real = expansion_cache.fingerprint
    monkeypatch.setattr(expansion_cache, "fingerprint",
                        lambda x: checked.append(id(x)) or real(x))
    model.fit(xs, y, batch_size=2, epochs=3, verbose=0)
    assert sorted(checked) == sorted(map(id, xs * 3))
    checked.clear()
    model.predict(xs, batch_size=2, verbose=0)
    assert sorted(checked) == sorted(map(id, xs))


def test_predict_of_per_item_outputs_checks_each_input_once(monkeypatch):
    """A model whose output is not one tensor an input (a value per word) predicts
    through `Compiler.run_planned` from the graphs it checked, not a second look-up."""
    from refold.compiler.graphs import expansion_cache
    model = td.Model(td.Map(td.Vector(1) >> td.FC(2)))
    xs = [[[1.0], [2.0]], [[0.5]], [[4.0], [1.0], [2.0]]]
    want = model.predict(xs, batch_size=2, verbose=0)  # expanded and cached
    checked = []
    real = expansion_cache.fingerprint
    monkeypatch.setattr(expansion_cache, "fingerprint",
                        lambda x: checked.append(id(x)) or real(x))
    got = model.predict(xs, batch_size=2, verbose=0)
    assert sorted(checked) == sorted(map(id, xs))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.stack(g), np.stack(w))
    xs[0].append([3.0])  # changed in place: expanded again, not answered from its old graph
    assert len(model.predict(xs, batch_size=2, verbose=0)[0]) == 3


def test_inputs_that_cannot_change_are_found_by_identity_alone(monkeypatch):
    from refold.compiler.graphs import expansion_cache
    cache = ExpansionCache(4)
    tree, holder = ((1, 2), (3, ("a", 4.5))), ((1, 2), [3])
    cache.put(tree, "tree")
    cache.put(holder, "holder")
    checked = []
    real = expansion_cache.fingerprint
    monkeypatch.setattr(expansion_cache, "fingerprint",
                        lambda x: checked.append(x) or real(x))
    assert cache.get(tree) == "tree" and checked == []
    assert cache.get(holder) == "holder" and checked == [holder]  # a list inside: checked
    holder[1].append(4)
    assert cache.get(holder) is None
