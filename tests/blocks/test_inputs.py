"""Tests for `blocks.inputs`: the blocks that read Python inputs."""

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

import refold as td
from refold.blocks.evaluation.contexts import reference_eval
from refold.blocks.types import (
    PyObjectType,
    SequenceType,
    TensorType,
    TupleType,
    VoidType,
)

F32 = TensorType(())
PY = PyObjectType()


def raises_key_error(block, value):
    """The `InputKeyError` that `block` raises on `value`, checked on both evaluators.

    `block.eval` must raise an `InputError` with the same path and reason; the
    reference evaluator (the oracle) must raise an `InputKeyError`, which is also a
    `KeyError` as in Fold.
    """
    with pytest.raises(td.InputError) as via_eval:
        block.eval(value)
    with pytest.raises(td.InputKeyError) as via_reference:
        reference_eval(block, value)
    err = via_reference.value
    assert isinstance(err, KeyError)
    assert (via_eval.value.block_path, via_eval.value.reason) == (err.block_path, err.reason)
    return err


def seq_of_scalars():
    """A block whose output is `SequenceType(float32 scalar)` (from a Python list)."""
    return td.InputTransform(list) >> td.Map(td.Scalar())


# --- Tensor, Scalar, Vector ----------------------------------------------------------------


def test_tensor_converts_nested_lists_to_an_array_of_its_shape_and_dtype():
    block = td.Tensor([2, 3], "int32")
    assert block.input_type == PY
    assert block.output_type == TensorType((2, 3), "int32")
    out = block.eval([[1, 2, 3], [4, 5, 6]])
    assert isinstance(out, np.ndarray) and out.dtype == np.int32
    np.testing.assert_array_equal(out, [[1, 2, 3], [4, 5, 6]])


def test_tensor_accepts_numpy_arrays_and_casts_them():
    out = td.Tensor([2]).eval(np.array([1, 2], dtype=np.int64))
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, [1.0, 2.0])


def test_tensor_properties_and_repr():
    block = td.Tensor((2, 3), tf.int64)
    assert block.shape == (2, 3) and block.dtype == "int64"
    assert repr(block) == "<td.Tensor dtype='int64' shape=(2, 3)>"
    assert repr(td.Tensor([1], name="t")) == "<td.Tensor 't' dtype='float32' shape=(1,)>"


def test_scalar_is_a_zero_dim_tensor():
    block = td.Scalar("int32")
    assert block.output_type == TensorType((), "int32")
    assert repr(block) == "<td.Scalar dtype='int32'>"
    assert repr(td.Scalar()) == "<td.Scalar dtype='float32'>"
    assert repr(td.Scalar(name="x")) == "<td.Scalar 'x' dtype='float32'>"
    out = block.eval(7)
    assert out.shape == () and out.dtype == np.int32 and out == 7


def test_vector_is_a_one_dim_tensor():
    block = td.Vector(3, "float64")
    assert block.output_type == TensorType((3,), "float64")
    assert repr(td.Vector(3)) == "<td.Vector dtype='float32' size=3>"
    np.testing.assert_array_equal(block.eval((1, 2, 3)), [1.0, 2.0, 3.0])


def test_tensor_eval_with_tolist_gives_python_values():
    assert td.Vector(2, "int32").eval([1, 2], tolist=True) == [1, 2]
    assert td.Scalar().eval(1.5, tolist=True) == 1.5


@pytest.mark.parametrize("dtype", ["float16", "float64", "int8", "int64", "uint8", "bool",
                                   "bfloat16"])
def test_scalar_evaluates_in_each_dtype(dtype):
    out = td.Scalar(dtype).eval(1)
    assert out.dtype.name == dtype and out == 1


def test_string_tensors_read_str_and_bytes():
    out = reference_eval(td.Vector(2, "string"), ["ab", b"c"])
    assert out.tolist() == [b"ab", b"c"]
    length = td.Scalar("string") >> td.Function(tf.strings.length)
    assert length.output_type == TensorType((), "int32")
    assert reference_eval(length, "abcd") == 4


@settings(max_examples=10)
@given(st.lists(st.integers(-1000, 1000), min_size=0, max_size=4))
def test_vector_round_trips_integer_lists(values):
    out = td.Vector(len(values), "int32").eval(values)
    assert out.tolist() == values


@pytest.mark.parametrize("block, value, reason", [
    (td.Scalar(), "abc", "expected a TensorType((), 'float32'), got 'abc'"),
    (td.Scalar(), [1, 2], "expected shape (), got shape (2,)"),
    (td.Scalar(), None, "got None"),
    (td.Vector(3), [1, 2], "expected shape (3,), got shape (2,)"),
    (td.Tensor([2, 2]), [[1, 2], [3]], "expected a TensorType((2, 2), 'float32')"),
    (td.Scalar("int8"), 1000, "expected a TensorType((), 'int8'), got 1000"),
    (td.Scalar(), {"a": 1}, "expected a TensorType((), 'float32')"),
])
def test_tensor_rejects_bad_input_with_an_input_error(block, value, reason):
    with pytest.raises(td.InputError) as info:
        block.eval(value)
    assert info.value.block_path == block.path
    assert reason in info.value.reason
    assert str(info.value).startswith(f"{block.path}: ")


def test_tensor_input_error_names_its_place_in_a_pipe():
    block = td.Scalar() >> td.Function(tf.negative)
    with pytest.raises(td.InputError, match=r"^Pipe\[0\] > Scalar: expected") as info:
        block.eval("x")
    assert info.value.block_path == "Pipe[0] > Scalar"
    assert info.value.example_index is None


def test_tensor_input_and_output_types_are_fixed():
    with pytest.raises(TypeError, match=r"Scalar: input type mismatch: expected a Python object"
                                        r", got a tensor \(\) float32; the whole types: "
                                        r"expected PyObjectType\(\), got TensorType"):
        td.Scalar().set_input_type(F32)
    with pytest.raises(TypeError, match=r"^Vector: output type mismatch: expected \(3,\), got "
                                        r"\(2,\); the whole types: expected TensorType"
                                        r"\(\(3,\), 'float32'\), got TensorType"
                                        r"\(\(2,\), 'float32'\)$"):
        td.Vector(3).set_output_type([2])


def test_tensor_rejects_bad_shape_and_dtype_at_construction():
    with pytest.raises(TypeError, match="non-negative ints"):
        td.Tensor([-1])
    with pytest.raises(TypeError, match="not a dtype"):
        td.Scalar("no_such_dtype")


def test_tensor_max_depth_is_zero():
    assert td.Scalar().max_depth(3) == 0
    assert (td.Scalar() >> td.Function(tf.negative)).max_depth(3) == 1


# --- strict conversion (blocks.evaluation.values) -------------------------------------------------


@pytest.mark.parametrize("block, value, reason", [
    (td.Scalar(), "3.5", "got '3.5': a string is not a number"),
    (td.Vector(2), [1.0, "2"], "a string is not a number"),
    (td.Scalar("int32"), "3", "a string is not a number"),
    (td.Scalar("int32"), 2.7, "got 2.7: 2.7 is not an integer (int32)"),
    (td.Vector(2, "int64"), np.array([1.0, 2.5]), "2.5 is not an integer (int64)"),
    (td.Scalar("int32"), True, "a bool is not an integer (int32)"),
    (td.Scalar("int32"), 2**40, "1099511627776 is out of int32's range"),
    (td.Vector(2, "uint8"), [1, -1], "-1 is out of uint8's range [0, 255]"),
    (td.Scalar(), 1e39, "1e+39 overflows float32"),
    (td.Scalar("float16"), 70000, "70000 overflows float16"),
    (td.Scalar(), float("nan"), "nan is not finite (give the block allow_nonfinite=True"),
    (td.Vector(3), [1.0, float("-inf"), 2.0], "-inf is not finite"),
    (td.Scalar("float64"), np.float64("nan"), "nan is not finite"),
    (td.Scalar("bool"), 2, "2 is not a bool"),
    (td.Scalar(), 1 + 2j, "a complex number is not a float32"),
    (td.Vector(2), [1.0, None], "expected numbers, got NoneType"),
])
def test_tensor_refuses_values_that_are_not_numbers_of_its_dtype(block, value, reason):
    with pytest.raises(td.InputError) as info:
        block.eval(value)
    assert info.value.block_path == block.path
    assert reason in info.value.reason
    assert info.value.reason.startswith(f"expected a {block.output_type}, got ")


@pytest.mark.parametrize("block, value, expected", [
    (td.Scalar(), 3, 3.0),                              # ints into floats
    (td.Scalar(), True, 1.0),                           # a bool flag into a float
    (td.Scalar("int32"), 2.0, 2),                       # an integral float into an int
    (td.Scalar("int32"), np.int64(-2**31), -2**31),     # the edge of the range
    (td.Scalar("bool"), 0, False),
    (td.Scalar(), 3.4e38, np.float32(3.4e38)),
    (td.Scalar(), 1e-50, 0.0),                          # underflow is rounding, not an error
    (td.Vector(1), [2**70], [np.float32(2.0**70)]),   # a big int fits a float32
])
def test_tensor_accepts_values_that_keep_their_meaning(block, value, expected):
    out = block.eval(value)
    assert out.dtype.name == block.dtype
    np.testing.assert_array_equal(out, expected)


def test_allow_nonfinite_accepts_nan_and_inf_but_not_overflow():
    out = td.Vector(3, allow_nonfinite=True).eval([float("nan"), float("inf"), 1.0])
    assert np.isnan(out[0]) and np.isposinf(out[1]) and out[2] == 1.0
    assert np.isneginf(td.Scalar(allow_nonfinite=True).eval(float("-inf")))
    assert np.isnan(td.Tensor([1, 1], allow_nonfinite=True).eval([[np.nan]]))
    with pytest.raises(td.InputError, match="overflows float32"):
        td.Scalar(allow_nonfinite=True).eval(1e39)
    assert repr(td.Scalar(allow_nonfinite=True)) == \
        "<td.Scalar allow_nonfinite=True dtype='float32'>"
    assert td.Vector(2, allow_nonfinite=True).allow_nonfinite
    with pytest.raises(TypeError, match="allow_nonfinite must be True or False"):
        td.Scalar(allow_nonfinite="yes")


def test_a_nonfinite_input_names_the_block_path_in_a_record():
    block = td.Record({"a": td.Scalar(), "b": td.Vector(2)}) >> td.Concat()
    with pytest.raises(td.InputError) as info:
        block.eval({"a": 1.0, "b": [0.0, float("nan")]})
    assert info.value.block_path == "Pipe[0] > Record['b'] > Vector"
    assert "nan is not finite" in str(info.value)


# --- InputTransform ------------------------------------------------------------------------


def test_input_transform_applies_a_python_function():
    block = td.InputTransform(str.split)
    assert block.input_type == PY and block.output_type == PY
    assert block.eval("a b c") == ["a", "b", "c"]
    assert td.InputTransform(str).eval(42) == "42"


def test_input_transform_feeds_later_blocks():
    block = td.InputTransform(lambda s: float(s) * 2) >> td.Scalar()
    assert block.eval("1.5") == 3.0


def test_input_transform_repr_and_py_fn():
    block = td.InputTransform(str.lower, name="low")
    assert block.py_fn is str.lower
    assert repr(block) == "<td.InputTransform 'low' py_fn='lower'>"


def test_input_transform_needs_a_callable():
    with pytest.raises(TypeError, match="py_fn is not callable: 3"):
        td.InputTransform(3)


def test_input_transform_failure_is_an_input_error_naming_the_block():
    block = td.InputTransform(len) >> td.Scalar()
    with pytest.raises(td.InputError) as info:
        block.eval(5)
    assert info.value.block_path == "Pipe[0] > InputTransform"
    assert "TypeError" in info.value.reason and "len()" in info.value.reason
    with pytest.raises(td.InputError) as info:
        reference_eval(block, 5)
    assert isinstance(info.value.__cause__, TypeError)  # the user's error is kept


def test_input_transform_cannot_follow_a_tensor():
    with pytest.raises(TypeError, match=r"Pipe\[1\] > InputTransform: input type mismatch: "
                                        r"expected a Python object, got a tensor"):
        td.Scalar() >> td.InputTransform(str)


# --- GetItem and Slice ---------------------------------------------------------------------


def test_get_item_of_a_python_object():
    block = td.GetItem("a")
    assert repr(block) == "<td.GetItem key='a'>" and block.key == "a"
    block.set_input_type(PY)
    assert block.output_type == PY
    assert td.GetItem("a").eval({"a": 3}) == 3
    assert (td.GetItem(-1) >> td.Scalar()).eval([1, 2, 5]) == 5


def test_get_item_of_a_tuple_type_has_the_item_type():
    block = (td.Scalar(), td.Vector(2)) >> td.GetItem(1)
    assert block.output_type == TensorType((2,))
    np.testing.assert_array_equal(block.eval((1, [2, 3])), [2.0, 3.0])


def test_get_item_of_a_sequence_type_has_the_element_type():
    block = seq_of_scalars() >> td.GetItem(1)
    assert block.output_type == F32
    assert block.eval([4, 5, 6]) == 5.0


def test_get_item_tuple_index_out_of_range_is_a_type_error():
    with pytest.raises(TypeError, match=r"^GetItem\(2\): cannot take item 2 of "
                                        r"TupleType\("):
        (td.Scalar(), td.Vector(2)) >> td.GetItem(2)


def test_get_item_of_an_infinite_sequence_is_a_type_error():
    with pytest.raises(TypeError, match=r"^GetItem\(0\): cannot get an item from an "
                                        r"infinite sequence: BroadcastSequenceType"):
        td.Scalar() >> td.Broadcast() >> td.GetItem(0)


def test_get_item_cannot_read_a_tensor():
    with pytest.raises(TypeError, match=r"^GetItem\(0\): bad input type TensorType"):
        td.Scalar() >> td.GetItem(0)


def test_get_item_missing_dict_key_is_an_input_key_error_naming_the_path():
    err = raises_key_error(td.GetItem("a") >> td.Scalar(), {"b": 1})
    assert err.block_path == "GetItem('a')"
    assert str(err).startswith("GetItem('a'): missing key 'a'")
    assert "'b'" in str(err)


def test_get_item_index_out_of_range_is_an_input_key_error():
    err = raises_key_error(td.GetItem(5) >> td.Scalar(), [1])
    assert str(err) == "GetItem(5): missing key 5; the input has length 1"


def test_get_item_and_slice_keys_written_in_the_expression_count_from_the_end():
    # a key in the block expression is Python's (Nth's index, from the data, is not)
    assert td.GetItem(-1).eval([1, 2, 3]) == 3
    assert (td.Map(td.Scalar()) >> td.GetItem(-1)).eval([1, 2, 3]) == 3.0
    assert td.Slice(start=-2).eval([1, 2, 3]) == [2, 3]
    err = raises_key_error(td.GetItem(-4) >> td.Scalar(), [1, 2, 3])
    assert str(err) == "GetItem(-4): missing key -4; the input has length 3"


def test_get_item_of_a_sequence_out_of_range_is_an_input_key_error():
    err = raises_key_error(seq_of_scalars() >> td.GetItem(5), [1, 2])
    assert str(err).startswith("GetItem(5): missing key 5")


def test_get_item_of_something_unindexable_is_an_input_error():
    with pytest.raises(td.InputError, match=r"^GetItem\(0\): cannot take item 0 of 5"):
        (td.GetItem(0) >> td.Scalar()).eval(5)


def test_get_item_path_inside_a_record():
    err = raises_key_error(td.Record({"x": td.GetItem(0) >> td.Scalar()}), {"x": []})
    assert err.block_path == "Record['x'] > GetItem(0)"


def test_slice_takes_keyword_arguments_only():
    with pytest.raises(TypeError, match="Slice does not accept positional arguments; allowed "
                                        "keyword arguments are start, stop, and step"):
        td.Slice(1)


def test_slice_of_a_python_object():
    block = td.Slice(start=1, stop=None, step=2)
    assert block.key == slice(1, None, 2)
    assert repr(block) == "<td.Slice key=slice(1, None, 2)>"
    assert block.eval([0, 1, 2, 3, 4]) == [1, 3]
    assert td.Slice(stop=2, name="s").eval((1, 2, 3)) == (1, 2)


def test_slice_of_a_tuple_type_is_a_tuple_type():
    block = (td.Scalar(), td.Vector(2), td.Scalar("int32")) >> td.Slice(start=1)
    assert block.output_type == TupleType(TensorType((2,)), TensorType((), "int32"))
    second, third = block.eval((1, [2, 3], 4))
    np.testing.assert_array_equal(second, [2.0, 3.0])
    assert third == 4 and third.dtype == np.int32


def test_slice_of_a_sequence_type_keeps_the_sequence_type():
    block = seq_of_scalars() >> td.Slice(start=1)
    assert block.output_type == SequenceType(F32)
    assert [float(x) for x in block.eval([1, 2, 3])] == [2.0, 3.0]


def test_slice_of_an_infinite_sequence_is_a_type_error():
    with pytest.raises(TypeError, match="infinite sequence"):
        td.Scalar() >> td.Broadcast() >> td.Slice(stop=2)


def test_slice_of_an_unsliceable_input_is_an_input_error():
    with pytest.raises(td.InputError, match=r"^Slice\(start=1\): cannot take item slice"):
        td.Slice(start=1).eval(3)


# --- Length --------------------------------------------------------------------------------


def test_length_of_a_python_object():
    block = td.Length()
    assert repr(block) == "<td.Length dtype='float32'>"
    assert block.output_type == F32
    out = block.eval([1, 2, 3])
    assert out == 3.0 and out.dtype == np.float32
    assert td.Length("int32").eval("abcd") == 4


def test_length_of_a_sequence_and_of_a_tuple():
    seq = seq_of_scalars() >> td.Length("int64")
    assert seq.children[-1].input_type == SequenceType(F32)
    out = seq.eval([1, 2, 3])
    assert out == 3 and out.dtype == np.int64
    assert seq.eval([]) == 0
    tup = (td.Scalar(), td.Vector(2)) >> td.Length()
    assert tup.eval((1, [2, 3])) == 2.0


def test_length_rejects_a_void_input_type():
    with pytest.raises(TypeError, match=r"^Length: bad input type VoidType\(\): expected "
                                        r"PyObjectType or SequenceType or TupleType"):
        td.Length().set_input_type(VoidType())


def test_length_of_a_tensor_is_a_type_error_naming_the_path():
    with pytest.raises(TypeError, match=r"^Pipe\[1\] > Length: bad input type TensorType"):
        td.Scalar() >> td.Length()


def test_length_of_an_infinite_sequence_is_a_type_error():
    with pytest.raises(TypeError, match=r"Pipe\[2\] > Length: cannot get the length of an "
                                        r"infinite sequence"):
        td.Scalar() >> td.Broadcast() >> td.Length()


def test_length_of_an_object_without_length_is_an_input_error():
    with pytest.raises(td.InputError, match=r"^at \['n'\]: Pipe\[1\] > Length: expected "
                                            r"something with a length, got 5"):
        (td.GetItem("n") >> td.Length()).eval({"n": 5})


def test_length_output_type_follows_its_dtype():
    assert td.Length("int32").output_type == TensorType((), "int32")
    with pytest.raises(TypeError, match="output type mismatch"):
        td.Length("int32").set_output_type(F32)


# --- OneHot and OneHotFromList -------------------------------------------------------------


def test_one_hot_over_zero_to_n():
    block = td.OneHot(3)
    assert repr(block) == "<td.OneHot dtype='float32' start=0 stop=3>"
    assert block.input_type == PY and block.output_type == TensorType((3,))
    np.testing.assert_array_equal(block.eval(1), [0.0, 1.0, 0.0])


def test_one_hot_over_a_range_with_a_dtype():
    block = td.OneHot(-1, 2, dtype="int32")
    assert repr(block) == "<td.OneHot dtype='int32' start=-1 stop=2>"
    assert block.output_type == TensorType((3,), "int32")
    assert block.eval(-1).tolist() == [1, 0, 0]
    assert block.eval(np.int64(1)).tolist() == [0, 0, 1]


@settings(max_examples=10)
@given(st.integers(-5, 5), st.integers(1, 6), st.data())
def test_one_hot_puts_the_one_at_the_offset(start, n, data):
    value = data.draw(st.integers(start, start + n - 1))
    out = td.OneHot(start, start + n).eval(value)
    assert out.shape == (n,) and out.sum() == 1 and out[value - start] == 1


@pytest.mark.parametrize("args", [(0,), (3, 3), (3, 1)])
def test_one_hot_empty_range_raises_index_error(args):
    with pytest.raises(IndexError, match=r"range \[\d+, \d+\) is empty\."):
        td.OneHot(*args)


@pytest.mark.parametrize("args, shown", [
    ((["num", "+"],), "td.OneHotFromList"), ((0, "3"), "td.OneHotFromList"), ((2.5,), "2.5"),
    ((True, 3), "True")])
def test_one_hot_of_a_list_or_a_non_integer_bound_says_what_it_takes(args, shown):
    with pytest.raises(TypeError, match="OneHot\\(start, stop\\) takes integers") as e:
        td.OneHot(*args)
    assert shown in str(e.value)


@pytest.mark.parametrize("value", [3, -1])
def test_one_hot_out_of_range_is_an_input_key_error(value):
    err = raises_key_error(td.GetItem("k") >> td.OneHot(3), {"k": value})
    assert err.block_path == "Pipe[1] > OneHot"
    assert f"{value} is outside [0, 3)" in str(err)


@pytest.mark.parametrize("value", ["a", 1.0, True, None])
def test_one_hot_non_integer_is_an_input_error(value):
    with pytest.raises(td.InputError, match=r"^OneHot: expected an integer in \[0, 3\)"):
        td.OneHot(3).eval(value)


def test_one_hot_from_list_indexes_its_elements():
    block = td.OneHotFromList(["a", "b", "c"])
    assert repr(block) == "<td.OneHotFromList dtype='float32' strict=True>"
    assert block.output_type == TensorType((3,))
    np.testing.assert_array_equal(block.eval("c"), [0.0, 0.0, 1.0])
    ints = td.OneHotFromList([10, 20], dtype="int64")
    out = ints.eval(20)
    assert out.dtype == np.int64 and out.tolist() == [0, 1]


def test_one_hot_from_list_strict_unknown_is_an_input_key_error():
    err = raises_key_error(td.InputTransform(str.lower) >> td.OneHotFromList(["a", "b"]), "Z")
    assert str(err) == "Pipe[1] > OneHotFromList: 'z' is not one of the elements"


def test_one_hot_from_list_lenient_unknown_gives_zeros():
    block = td.OneHotFromList(["a", "b"], strict=False)
    assert repr(block) == "<td.OneHotFromList dtype='float32' strict=False>"
    np.testing.assert_array_equal(block.eval("z"), [0.0, 0.0])


def test_one_hot_from_list_unhashable_input_is_an_input_error():
    with pytest.raises(td.InputError, match=r"^OneHotFromList: unhashable input \[1\]"):
        td.OneHotFromList(["a"], strict=False).eval([1])


def test_one_hot_from_list_rejects_duplicates_and_empty_lists():
    with pytest.raises(ValueError, match="OneHotFromList was passed duplicate elements."):
        td.OneHotFromList(["a", "b", "a"])
    with pytest.raises(ValueError, match="duplicate"):
        td.OneHotFromList([1, True])  # equal as dict keys
    with pytest.raises(ValueError, match="at least one element"):
        td.OneHotFromList([])


# --- Void ----------------------------------------------------------------------------------


def test_void_discards_any_input():
    block = td.Void()
    assert repr(block) == "<td.Void>" and repr(td.Void("v")) == "<td.Void 'v'>"
    assert block.output_type == VoidType()
    assert block.eval({"anything": 1}) is None
    assert block.input_type == PY  # the root's input became a Python object


def test_void_takes_the_type_of_what_it_follows():
    block = td.Vector(2) >> td.Void()
    assert block.children[-1].input_type == TensorType((2,))
    assert block.output_type == VoidType()
    assert block.eval([1, 2]) is None


def test_void_cannot_feed_a_block_that_needs_input():
    with pytest.raises(TypeError, match=r"Pipe\[1\] > Scalar: input type mismatch: expected "
                                        r"a Python object, got no value \(void\); the whole "
                                        r"types: expected PyObjectType\(\), got VoidType\(\)"):
        td.Void() >> td.Scalar()


def test_void_output_type_is_fixed():
    with pytest.raises(TypeError, match=r"^Void: output type mismatch: expected no value "
                                        r"\(void\), got a tensor \(\) float32; the whole types: "
                                        r"expected VoidType\(\), got TensorType"):
        td.Void().set_output_type(F32)


# --- errors are input errors, never raw TensorFlow errors ----------------------------------


@pytest.mark.parametrize("block, value, path", [
    (td.Record({"a": td.Scalar()}), {"a": "x"}, "Record['a'] > Scalar"),
    (td.Map(td.OneHot(2)), [0, 5], "Map > OneHot"),
    (td.GetItem(1) >> td.Map(td.Scalar()), [[1], ["q"]], "Pipe[1] > Map > Scalar"),
    (td.InputTransform(list) >> td.Map(td.Length()), [1], "Pipe[1] > Map > Length"),
])
def test_nested_input_errors_name_the_full_block_path(block, value, path):
    with pytest.raises(td.InputError) as info:
        block.eval(value)
    assert info.value.block_path == path
    assert not isinstance(info.value, tf.errors.OpError)


def test_input_error_with_example_index_names_the_example():
    err = td.InputError("Pipe[0] > GetItem", "missing key 'a'")
    indexed = err.with_example_index(4)
    assert str(indexed) == "example 4: Pipe[0] > GetItem: missing key 'a'"
    assert indexed.example_index == 4 and indexed.block_path == err.block_path
    key_err = td.InputKeyError("GetItem", "missing key 0").with_example_index(1)
    assert isinstance(key_err, td.InputKeyError)
    assert str(key_err) == "example 1: GetItem: missing key 0"


def test_types_of_input_blocks_are_what_fold_documents():
    assert td.Tensor([2]).input_type == PY
    assert td.InputTransform(str).output_type == PY
    assert td.GetItem(0).input_type is None  # PyObject, tuple or sequence: known when wired
    assert td.Length().input_type is None
    assert td.OneHot(2).input_type == PY
    assert td.OneHotFromList([1]).input_type == PY
    assert td.Void().input_type is None


def test_a_type_error_downstream_of_getitem_names_the_block_that_failed():
    t = td.TupleType(td.SequenceType(td.TensorType((2,))), td.PyObjectType())
    c = td.Composition()
    with c.scope():
        seq = td.GetItem(0).reads(c.input)
        idx = (td.GetItem(1) >> td.Scalar("int32")).reads(c.input)  # a tensor, not a sequence
        c.output.reads((td.Zip() >> td.Map(td.Nth())).reads(td.Broadcast().reads(seq), idx))
    with pytest.raises(TypeError) as err:
        c.set_input_type(t)
    assert "cannot take item" not in str(err.value)
    assert "Zip" in str(err.value)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64", "int32", "int8",
                                   "uint8", "int64", "bool", "complex64"])
def test_a_scalar_block_converts_numbers_as_to_array_does(dtype):
    # the Tensor block inlines to_array's common case (scalar_ranges): same answers
    from refold.blocks.evaluation.values import scalar_ranges, to_array
    t = TensorType((), dtype)
    block = td.Scalar(dtype)
    for x in (0, 1, -3, 200, 2**40, 1.5, -0.25, 1e300, float("nan"), float("inf"), True):
        try:
            want = to_array(x, t)
        except Exception:
            with pytest.raises(td.InputError, match="Tensor|Scalar"):
                block.eval(x)
            continue
        got = block.eval(x)
        assert got.dtype == want.dtype and got.shape == want.shape, (dtype, x)
        assert np.array_equal(got, want, equal_nan=dtype.startswith(("float", "bfloat"))), (
            dtype, x)
    assert scalar_ranges(TensorType((2,), dtype)) == {}
