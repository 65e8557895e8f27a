"""An input error says where inside the example it happened: a data path from the
example to the value the failing block was given."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import refold as td
from refold.blocks.evaluation.data_paths import locate


def tree_sum() -> td.Block:
    tree = td.ForwardDeclaration(td.PyObjectType(), td.TensorType(()))
    tree.resolve_to(td.Record({"tok": td.Scalar(), "children": td.Map(tree()) >> td.Sum()})
                    >> td.Function(lambda a, b: a + b))
    return tree()


def full_tree(depth: int, bad_leaf=None) -> dict:
    """A binary tree of 2**(depth+1) - 1 nodes; the right-most leaf's token is `bad_leaf`."""
    if depth == 0:
        return {"tok": 1.0 if bad_leaf is None else bad_leaf, "children": []}
    return {"tok": 1.0, "children": [full_tree(depth - 1), full_tree(depth - 1, bad_leaf)]}


DEEP = "['children'][1]" * 8 + "['tok']"


def test_a_bad_leaf_of_a_deep_tree_is_named_by_its_data_path_in_eval():
    with pytest.raises(td.InputError) as info:
        tree_sum().eval(full_tree(8, "oops"))  # 511 nodes
    assert info.value.data_path == DEEP
    assert str(info.value).startswith(f"at {DEEP}: ForwardDeclaration > ")


def test_batched_runs_name_the_example_and_the_data_path():
    trees = [full_tree(8), full_tree(8), full_tree(8, "oops")]
    with pytest.raises(td.InputError, match=rf"^example 2 at {DEEP.replace('[', '.')}: "):
        td.Compiler.create(tree_sum()).run(trees)
    model = td.Model(tree_sum() >> td.Function(lambda x: x[:, None]))
    model.compile(loss="mse")
    with pytest.raises(td.InputError) as info:
        model.evaluate(trees, np.zeros(3), verbose=0)
    assert (info.value.example_index, info.value.data_path) == (2, DEEP)


def test_expansion_in_worker_processes_keeps_the_data_path():
    trees = [full_tree(3) for _ in range(70)] + [full_tree(3, "oops")]
    compiler = td.Compiler.create(tree_sum(), workers=2, cache=False)
    try:
        with pytest.raises(td.InputError) as info:
            compiler.run(trees)
    finally:
        compiler.close()
    assert (info.value.example_index, info.value.data_path) == \
        (70, "['children'][1]" * 3 + "['tok']")


def test_a_value_a_block_could_not_take_an_item_of_is_located():
    tree = td.ForwardDeclaration(td.PyObjectType(), td.TensorType(()))
    tree.resolve_to(td.OneOf(lambda x: isinstance(x, dict) and "children" in x, {
        False: td.GetItem("tok") >> td.Scalar(),
        True: td.GetItem("children") >> td.Map(tree()) >> td.Sum()}))
    with pytest.raises(td.InputError,
                       match=r"at \['children'\]\[1\]\['children'\]\[0\]: .*GetItem\('tok'\): "
                             r"cannot take item 'tok' of 'a'"):
        tree().eval({"children": [{"tok": 1}, {"children": ["a"]}]})


def test_a_path_through_attributes_and_tuples():
    class Node:
        def __init__(self, value, kids=()):
            self.value, self.kids = value, tuple(kids)

    block = td.ForwardDeclaration(td.PyObjectType(), td.TensorType(()))
    block.resolve_to(td.InputTransform(lambda n: {"v": n.value, "k": list(n.kids)})
                     >> td.Record({"v": td.Scalar(), "k": td.Map(block()) >> td.Sum()})
                     >> td.Function(lambda a, b: a + b))
    root = Node(1.0, [Node(2.0), Node(3.0, [Node("bad")])])
    with pytest.raises(td.InputError) as info:
        block().eval(root)
    # the InputTransform makes new dicts and lists, passed over: the path is the Node's
    assert info.value.data_path == ".kids[1].kids[0].value"


def test_the_data_path_survives_pickling_and_a_new_example_index():
    err = td.InputError("Scalar", "bad", 3, "['a'][0]")
    again = pickle.loads(pickle.dumps(err.with_example_index(5)))
    assert (again.example_index, again.data_path, str(again)) == \
        (5, "['a'][0]", "example 5 at ['a'][0]: Scalar: bad")


def test_locate_passes_over_values_that_are_not_part_of_the_data():
    x = {"a": [1, 2], "b": [[float("3.5")]]}
    assert locate(x, [x, x["a"], [9]]) == "['a']"
    assert locate(x, [x, {"made": 1}, x["b"][0], float("3.5")]) == "['b'][0]"  # another 3.5
    assert locate(x, [x, {"made": 1}, x["b"][0], x["b"][0][0]]) == "['b'][0][0]"
