"""Block expressions saved as configs and made again (`blocks.serialization.config`).

Every kind of block round-trips through JSON: the loaded expression has the same
types and block paths and, given the same weights, evaluates to the same values;
shared layers stay shared, recursion stays recursion, lambdas need safe_mode=False.
"""

from __future__ import annotations

import collections
import functools
import json
import math

import keras
import numpy as np
import pytest
import tensorflow as tf

import refold as td
from refold.blocks.serialization.config import UnsafeConfigError, deserialize, serialize
from refold.blocks.validation import validate
from refold.models import encoders, tree_lstm
from tests.models.zoo import ZOO, ZOO_INPUTS


def double(x):
    return 2.0 * x


def is_pair(t):
    return isinstance(t, tuple)


def roundtrip(block, safe_mode=False):
    """The block saved to JSON text and loaded back, with the original's weights."""
    loaded = deserialize(json.loads(json.dumps(serialize(block))), safe_mode=safe_mode)
    copy_weights(block, loaded)
    return loaded


def weights_of(block) -> list:
    out, seen = [], set()
    for b in validate(block):
        for w in b.weights():
            if id(w) not in seen:
                seen.add(id(w))
                out.append(w)
    return out


def copy_weights(source, target) -> None:
    a, b = weights_of(source), weights_of(target)
    assert [type(x) for x in a] == [type(x) for x in b]
    for x, y in zip(a, b):
        if isinstance(x, keras.Variable):
            y.assign(x.numpy())
        else:
            y.set_weights(x.get_weights())


def same(a, b) -> None:
    """Equal results of `eval` (arrays, tuples, lists, metrics dicts)."""
    if isinstance(a, dict):
        assert sorted(a) == sorted(b)
        for k in a:
            same(a[k], b[k])
    elif isinstance(a, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            same(x, y)
    elif isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b)
    else:
        assert a == b


def quickstart():
    tree = td.ForwardDeclaration(td.PyObjectType(), td.TensorType((8,)))
    leaf = td.Scalar() >> td.Function(lambda x: x[:, None]) >> td.FC(8)
    pair = td.Record((tree(), tree())) >> td.Concat() >> td.FC(8)
    tree.resolve_to(td.OneOf(lambda t: isinstance(t, tuple), {False: leaf, True: pair}))
    return tree() >> td.FC(2, activation=None)


def composition():
    c = td.Composition(name="wired")
    with c.scope():
        rec = td.Record({"a": td.Scalar(), "b": td.Vector(2)}).reads(c.input)
        total = td.Function(lambda a, b: a[:, None] + b).reads(rec["a"], rec["b"])
        td.Metric("size").reads(td.Length().reads(c.input))
        c.output.reads(td.Function(tf.negative).reads(total))
    return c


def recursion_by_name():
    total = td.ForwardDeclaration(td.PyObjectType(), td.TensorType(()), name="total")
    node = td.Record((total(), total())) >> td.Function(tf.add)
    total.resolve_to(td.OneOf(is_pair, {False: td.Scalar(), True: node}))
    return total()


def closure_over(scale, offset):
    return td.Scalar() >> td.Function(lambda x: scale * tf.square(x) + offset)


LSTM = keras.layers.LSTMCell(3)

CASES = {
    "scalar, vector, tensor": (
        td.Record((td.Scalar("int32"), td.Vector(2, "float64"),
                   td.Tensor([2, 2], allow_nonfinite=True))) >> td.Identity(),
        [(1, [2.0, 3.0], [[1, 2], [3, float("inf")]])]),
    "input transform, get item, slice, length": (
        td.InputTransform(sorted) >> td.AllOf(td.Slice(stop=2), td.GetItem(0) >> td.Scalar(),
                                              td.Length("int64")),
        [[3, 1, 2]]),
    "one-hot": (td.AllOf(td.OneHot(2, 5), td.OneHotFromList(["a", ("b", 1)], strict=False)),
                [3]),
    "void and zeros": (td.AllOf(td.Void(), td.Zeros(td.TensorType((2,), "int32"))), [None]),
    "map, fold, reduce, rnn": (
        td.Map(td.Vector(2)) >> td.AllOf(
            td.Fold(td.Function(tf.add), td.FromTensor(np.array([1.0, 2.0], "float32"))),
            td.Reduce(td.Function(tf.maximum)),
            td.RNN(td.ScopedLayer(LSTM)),
            td.Sum(), td.Min(), td.Max(), td.Mean()),
        [[[1, 2], [3, -4], [0.5, 0.5]], []]),
    "zip, broadcast, zip with, n-grams, nth": (
        td.Record((td.Map(td.Scalar()), td.Scalar() >> td.Broadcast(), td.Identity()))
        >> td.AllOf(td.Slice(stop=2) >> td.Zip(),
                    td.Slice(stop=2) >> td.ZipWith(td.Function(tf.multiply)),
                    td.GetItem(0) >> td.NGrams(2),
                    td.AllOf(td.GetItem(0), td.GetItem(2)) >> td.Nth(),
                    td.GetItem(0) >> td.Stack(4)),
        [([1.0, 2.0, 3.0], 2.0, 1)]),
    "records of every kind": (
        td.AllOf(td.Record({"b": td.Scalar(), "a": td.Scalar()}),
                 td.Record(collections.OrderedDict([("b", td.Scalar()), ("a", td.Scalar())])),
                 td.Record([("a", td.Scalar()), (0, td.Scalar())])),
        [{"a": 1.0, "b": 2.0, 0: 3.0}]),
    "one of with a key block and a pre block; optional": (
        td.AllOf(td.OneOf(td.GetItem("k"), {1: td.Scalar(), "two": td.Scalar() >> td.Function(
            tf.negative)}, pre_block=td.GetItem("v")),
            td.GetItem("o") >> td.Optional(td.Vector(2), td.FromTensor(np.ones(2, "float32")))),
        [{"k": 1, "v": 2.0, "o": None}, {"k": "two", "v": 2.0, "o": [1, 2]}]),
    "layers: FC, embedding, keras layers in functions": (
        td.Record((td.Vector(3) >> td.FC(4, activation="tanh", name="fc")
                   >> td.Function(keras.layers.Dense(2)),
                   td.Scalar("int32") >> td.Embedding(5, 2, initializer=np.arange(
                       10, dtype="float32").reshape(5, 2), mod_inputs=False)))
        >> td.Concat(),
        [([1, 2, 3], 4)]),
    "trainable keras variable": (
        td.AllOf(td.FromTensor(keras.Variable(np.array([1.0, -1.0], "float32"))),
                 td.Scalar()) >> td.Concat(),
        [5.0]),
    "functions by name, bytecode, partial and closures": (
        td.Scalar() >> td.AllOf(td.Function(double), td.Function(lambda x: x + 1.0),
                                td.Function(functools.partial(tf.multiply, 3.0))),
        [2.0]),
    "a closure over values and a module": (closure_over(2.0, 0.5), [3.0]),
    "composition wired with reads": (composition(), [{"a": 1.0, "b": [2.0, 3.0]}]),
    "recursion": (recursion_by_name(), [((1.0, 2.0), (3.0, (4.0, 5.0))), 7.0]),
    "the quick start": (quickstart(), [(1.0, (2.0, -3.0)), -1.5]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_block_expression_round_trips(name):
    block, inputs = CASES[name]
    loaded = roundtrip(block)
    assert type(loaded) is type(block)
    assert (loaded.input_type, loaded.output_type) == (block.input_type, block.output_type)
    assert [b.path for b in validate(loaded)] == [b.path for b in validate(block)]
    for x in inputs:
        same(block.eval(x), loaded.eval(x))


def test_a_layer_used_in_two_places_is_one_layer_again():
    fc = td.FC(3)
    block = td.Record((td.Vector(2) >> fc, td.Vector(2) >> fc))
    loaded = roundtrip(block)
    first, second = (child.children[1].tf_fn for child in loaded.children)
    assert first is second and first is not fc
    assert len(weights_of(loaded)) == 1


def test_a_shared_child_sum_cell_shares_its_layers_after_loading():
    cell = tree_lstm.child_sum_cell(3, 2)
    twin = cell.shared()
    block = td.Record((td.Record((td.Vector(2), td.Map(td.Record((td.Vector(3), td.Vector(3))))))
                       >> cell, td.Record((td.Vector(2), td.Map(td.Record(
                           (td.Vector(3), td.Vector(3)))))) >> twin))
    loaded = roundtrip(block)
    a, b = (child.children[1] for child in loaded.children)
    assert a.gates is b.gates and a.forget is b.forget and a.gates is not cell.gates
    x = ([1.0, 2.0], [([0.1, 0.2, 0.3], [0.0, 1.0, 0.0])])
    same(block.eval((x, x)), loaded.eval((x, x)))


def test_recursion_stays_recursion():
    loaded = roundtrip(quickstart())
    decl = loaded.children[0].declaration
    refs = [b for b in validate(loaded) if b.is_forward_declaration_ref()]
    assert {id(r.declaration) for r in refs} == {id(decl)} and len(refs) == 3


def test_explicitly_set_types_come_back():
    block = td.Identity().set_input_type(td.TensorType((2,), "int64"))
    loaded = roundtrip(block)
    assert loaded.input_type == td.TensorType((2,), "int64") == loaded.output_type


def test_an_embedding_table_given_as_an_array_is_not_copied_into_the_config():
    table = np.ones((1000, 8), "float32")
    config = json.dumps(serialize(td.Scalar("int32") >> td.Embedding(1000, 8, table)))
    assert len(config) < 5000


@pytest.mark.parametrize("name", sorted(ZOO))
def test_zoo_blocks_round_trip(name):
    block = ZOO[name]()
    loaded = roundtrip(block)
    for x in ZOO_INPUTS[name]:
        same(block.eval(x), loaded.eval(x))


def test_zoo_factories_are_saved_as_their_calls():
    config = serialize(encoders.binary_tree_encoder(td.Vector(2) >> td.FC(3),
                                                     td.Concat() >> td.FC(3)))
    calls = [e["factory"] for e in config["objects"] if "factory" in e]
    assert {"__function__": "refold>binary_tree_encoder", "module": "refold.models.encoders"} \
        in calls
    assert not any("__code__" in json.dumps(e) for e in config["objects"])  # no bytecode


def test_safe_mode_refuses_bytecode_naming_the_block_path_and_the_fix():
    config = json.loads(json.dumps(serialize(quickstart())))
    with pytest.raises(UnsafeConfigError) as err:
        deserialize(config, safe_mode=True)
    message = str(err.value)
    assert message.startswith("ForwardDeclaration > OneOf (argument key_fn): its function "
                              "'<lambda>' is saved as Python bytecode")
    assert "safe_mode=False" in message and "module level" in message


def test_safe_mode_loads_blocks_whose_functions_have_names():
    assert roundtrip(recursion_by_name(), safe_mode=True).eval((1.0, 2.0)) == 3.0
    assert float(roundtrip(td.Scalar() >> td.Function(double), safe_mode=True).eval(2)) == 4


def test_safe_mode_follows_keras_when_not_given():
    config = serialize(td.Scalar() >> td.Function(lambda x: x))
    with pytest.raises(UnsafeConfigError):
        deserialize(config)
    keras.config.enable_unsafe_deserialization()
    try:
        assert float(deserialize(config).eval(2.0)) == 2.0
    finally:
        from keras.src.saving import serialization_lib
        serialization_lib.global_state.set_global_attribute("safe_mode_saving", None)


def test_safe_mode_refuses_a_config_that_names_a_dangerous_function():
    config = serialize(td.InputTransform(sorted))
    entry = next(e for e in config["objects"] if e.get("class", "").endswith("InputTransform"))
    entry["config"]["py_fn"] = {"__function__": "os:system"}
    with pytest.raises(UnsafeConfigError, match="InputTransform: the saved config names "
                                                 "os:system"):
        deserialize(config, safe_mode=True)


def test_a_block_that_cannot_be_saved_says_which_and_why():
    class Local(td.Block):  # not importable by name
        def __init__(self):
            super().__init__(input_type=td.PyObjectType(), output_type=td.PyObjectType())

    with pytest.raises(TypeError, match="Local: cannot save a .*Local: its class is not "
                                        "importable"):
        serialize(Local())
    with pytest.raises(TypeError, match=r"InputTransform \(argument py_fn\): cannot save"):
        serialize(td.InputTransform(math.floor.__call__))


def test_a_config_that_is_not_a_block_config_is_refused():
    with pytest.raises(ValueError, match="not a saved Refold block expression"):
        deserialize({"class_name": "Dense"})
    config = serialize(td.Scalar())
    config["version"] = 99
    with pytest.raises(ValueError, match="version 99"):
        deserialize(config)


def test_a_function_of_another_python_is_refused_clearly():
    config = serialize(td.Scalar() >> td.Function(lambda x: x))
    text = json.dumps(config).replace(f'"python": "{config["python"]}"', '"python": "2.7"')
    with pytest.raises(ValueError, match="bytecode of Python 2.7"):
        deserialize(json.loads(text), safe_mode=False)


def test_a_function_of_the_running_script_loads_by_name_there_and_as_code_elsewhere(
        monkeypatch):
    import sys

    def triple(x):
        return 3.0 * x

    triple.__module__, triple.__qualname__ = "__main__", "refold_test_triple"
    monkeypatch.setattr(sys.modules["__main__"], "refold_test_triple", triple, raising=False)
    config = json.loads(json.dumps(serialize(td.Scalar() >> td.Function(triple))))
    loaded = deserialize(config, safe_mode=True)  # the script defines it: no code is run
    assert loaded.children[1].tf_fn is triple
    monkeypatch.delattr(sys.modules["__main__"], "refold_test_triple")
    with pytest.raises(UnsafeConfigError, match="'triple' is saved as Python bytecode"):
        deserialize(config, safe_mode=True)  # another process: only the code is left
    assert float(deserialize(config, safe_mode=False).eval(2.0)) == 6.0
