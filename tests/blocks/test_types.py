"""Tests for `blocks.types`: the result types, their traversal, and the shorthand."""

import itertools

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

import refold as td
from refold.blocks.types import (
    BroadcastSequenceType,
    PyObjectType,
    ResultType,
    SequenceType,
    TensorType,
    TupleType,
    VoidType,
    canonicalize_type,
    convert_to_type,
    first_difference,
)

NAMESPACE = {name: getattr(td, name) for name in td.__all__}

F32 = TensorType(())
I32 = TensorType((), "int32")
VEC3 = TensorType((3,))
PY = PyObjectType()
VOID = VoidType()


# --- strategies ----------------------------------------------------------------------------

DTYPES = ["float32", "float64", "float16", "int32", "int64", "uint8", "bool", "string"]
tensor_types = st.builds(
    TensorType, st.lists(st.integers(0, 4), max_size=3).map(tuple), st.sampled_from(DTYPES))
leaf_types = st.one_of(tensor_types, st.just(PY), st.just(VOID))
result_types = st.recursive(
    leaf_types,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3).map(lambda items: TupleType(*items)),
        inner.map(SequenceType),
        inner.map(BroadcastSequenceType)),
    max_leaves=8)
# Types without sequences: their flattening has exactly one value per terminal type.
fixed_types = st.recursive(
    leaf_types, lambda inner: st.lists(inner, max_size=3).map(lambda xs: TupleType(*xs)),
    max_leaves=8)


class Leaf:
    """A stand-in terminal value that remembers the terminal type it was made for."""

    counter = itertools.count()

    def __init__(self, rtype):
        self.rtype = rtype
        self.serial = next(Leaf.counter)

    def __repr__(self):
        return f"Leaf({self.rtype!r}, {self.serial})"


def draw_instance(data, t):
    """A value of type `t` whose terminals are distinct `Leaf`s."""
    if isinstance(t, VoidType):
        return None
    if isinstance(t, (TensorType, PyObjectType)):
        return Leaf(t)
    if isinstance(t, TupleType):
        return tuple(draw_instance(data, x) for x in t)
    if isinstance(t, BroadcastSequenceType):
        return itertools.repeat(draw_instance(data, t.element_type))
    assert isinstance(t, SequenceType)
    n = data.draw(st.integers(0, 3))
    return [draw_instance(data, t.element_type) for _ in range(n)]


def plain(x):
    """`x` with each broadcast sequence replaced by a comparable marker."""
    if isinstance(x, itertools.repeat):
        return ("repeat", plain(next(x)))
    if isinstance(x, tuple):
        return tuple(plain(v) for v in x)
    if isinstance(x, list):
        return [plain(v) for v in x]
    return x


def is_canonical(t):
    if isinstance(t, TupleType):
        items = list(t)
        if items and all(isinstance(x, PyObjectType) for x in items):
            return False
        return all(is_canonical(x) for x in items)
    if isinstance(t, SequenceType):
        return not isinstance(t.element_type, PyObjectType) and is_canonical(t.element_type)
    return True


def has_pyobject(t):
    if isinstance(t, TupleType):
        return any(has_pyobject(x) for x in t)
    if isinstance(t, SequenceType):
        return has_pyobject(t.element_type)
    return isinstance(t, PyObjectType)


# --- equality, hashing, ordering, reprs ---------------------------------------------------


@pytest.mark.parametrize("t, text", [
    (VOID, "VoidType()"),
    (PY, "PyObjectType()"),
    (TensorType((1, 2), "int32"), "TensorType((1, 2), 'int32')"),
    (TensorType([3]), "TensorType((3,), 'float32')"),
    (TupleType(F32, TensorType((1,), "int32")),
     "TupleType(TensorType((), 'float32'), TensorType((1,), 'int32'))"),
    (TupleType(), "TupleType()"),
    (SequenceType(TensorType((1, 2))), "SequenceType(TensorType((1, 2), 'float32'))"),
    (BroadcastSequenceType(I32), "BroadcastSequenceType(TensorType((), 'int32'))"),
    (SequenceType(TupleType(PY, F32)),
     "SequenceType(TupleType(PyObjectType(), TensorType((), 'float32')))"),
])
def test_repr_is_the_constructor_call(t, text):
    assert repr(t) == text
    assert str(t) == text


def test_types_with_equal_reprs_are_equal_and_hash_alike():
    a = TensorType([2, 3], np.int32)
    b = TensorType((2, 3), "int32")
    assert a == b and not a != b
    assert hash(a) == hash(b)
    assert {a: "x"}[b] == "x"
    assert len({TupleType(a, PY), TupleType(b, PY)}) == 1


@pytest.mark.parametrize("a, b", [
    (TensorType((2,)), TensorType((3,))),
    (TensorType((2,)), TensorType((2,), "int32")),
    (TensorType(()), TensorType((1,))),
    (SequenceType(F32), BroadcastSequenceType(F32)),
    (TupleType(F32), F32),
    (TupleType(F32, I32), TupleType(I32, F32)),
    (PY, VOID),
    (TupleType(), VOID),
])
def test_different_types_are_unequal(a, b):
    assert a != b and b != a
    assert not a == b


def test_a_type_is_not_equal_to_its_repr_or_other_objects():
    assert F32 != "TensorType((), 'float32')"
    assert F32 != ()
    assert VOID != None  # noqa: E711


def test_types_order_by_repr_consistently():
    types = [VOID, F32, PY, TupleType(F32), SequenceType(I32), I32]
    assert sorted(types) == sorted(types, key=repr)
    assert PY < VOID and VOID > PY and PY <= PY and VOID >= PY


@settings(max_examples=50)
@given(result_types)
def test_repr_evaluates_back_to_an_equal_type(t):
    again = eval(repr(t), NAMESPACE)  # noqa: S307
    assert type(again) is type(t)
    assert again == t and hash(again) == hash(t) and repr(again) == repr(t)


@settings(max_examples=50)
@given(result_types, result_types)
def test_equality_and_ordering_agree_with_repr(a, b):
    assert (a == b) == (repr(a) == repr(b))
    assert (a < b) == (repr(a) < repr(b))
    assert (a <= b) == (repr(a) <= repr(b))
    if a == b:
        assert hash(a) == hash(b)


# --- TensorType ----------------------------------------------------------------------------


@pytest.mark.parametrize("shape, size", [((), 1), ((3,), 3), ((2, 3), 6), ((0, 5), 0),
                                         ((4, 1, 2), 8)])
def test_tensor_type_size_is_the_product_of_the_shape(shape, size):
    t = TensorType(shape)
    assert t.size == size
    assert t.ndim == len(shape)
    assert t.shape == shape


def test_tensor_type_shape_is_a_tuple_of_ints():
    t = TensorType([np.int64(2), 3])
    assert t.shape == (2, 3)
    assert all(type(d) is int for d in t.shape)


def test_tensor_type_takes_a_fully_defined_tensor_shape():
    assert TensorType(tf.TensorShape([2, 3]), "int64") == TensorType((2, 3), "int64")


@pytest.mark.parametrize("dtype, name", [
    ("float32", "float32"), ("int32", "int32"), (np.float64, "float64"),
    (np.dtype("int16"), "int16"), (tf.int64, "int64"), (tf.bool, "bool"), ("bool", "bool"),
    (tf.string, "string"), ("string", "string"), ("bfloat16", "bfloat16"),
    (tf.bfloat16, "bfloat16"), ("f4", "float32"), ("uint8", "uint8"),
])
def test_tensor_type_dtype_is_a_canonical_name(dtype, name):
    assert TensorType((), dtype).dtype == name


@pytest.mark.parametrize("alias, name", [("float", "float32"), ("double", "float64"),
                                         ("half", "float16")])
def test_tensor_type_reads_dtype_aliases_as_tensorflow_does(alias, name):
    assert TensorType((), alias).dtype == name == tf.as_dtype(alias).name


@pytest.mark.parametrize("dtype", ["foo", None, 3, "object", "str", "datetime64", "U"])
def test_tensor_type_rejects_what_is_not_a_tensorflow_dtype(dtype):
    with pytest.raises(TypeError, match="not a dtype"):
        TensorType((), dtype)


def test_tensor_type_shape_must_be_a_tuple_or_list():
    with pytest.raises(TypeError, match="shape must be a tuple or list: 3"):
        TensorType(3)


@pytest.mark.parametrize("shape", [(-1,), (2.5,), (True,), ("3",), (None,)])
def test_tensor_type_dims_must_be_non_negative_ints(shape):
    with pytest.raises(TypeError, match="non-negative ints"):
        TensorType(shape)


def test_tensor_type_converts_to_a_zero_array():
    t = TensorType((2, 3), "int32")
    ones = np.ones_like(t)
    assert ones.shape == (2, 3) and ones.dtype == np.int32 and (ones == 1).all()
    zeros = np.asarray(t)
    assert zeros.dtype == np.int32 and not zeros.any()


def test_string_tensor_type_converts_to_an_array_of_objects():
    arr = np.asarray(TensorType((2,), "string"))
    assert arr.shape == (2,) and arr.dtype == object


def test_tensor_type_is_its_own_only_terminal():
    t = TensorType((2,))
    assert list(t.terminal_types()) == [t]
    assert t.flatten("x") == ["x"]
    assert t.unflatten(iter(["y", "z"]), None) == "y"
    assert t.for_each_terminal(lambda tt, v: (tt, v), 5) == (t, 5)


# --- VoidType and PyObjectType --------------------------------------------------------------


def test_void_type_has_no_terminals():
    assert list(VOID.terminal_types()) == []
    assert VOID.flatten(None) == []
    flat = iter(["untouched"])
    assert VOID.unflatten(flat, None) is None
    assert next(flat) == "untouched"
    assert VOID.for_each_terminal(lambda t, v: pytest.fail("called"), None) is None


def test_pyobject_type_is_a_terminal_holding_any_value():
    value = {"any": [object()]}
    assert list(PY.terminal_types()) == [PY]
    assert PY.flatten(value) == [value]
    assert PY.unflatten(iter([value]), None) is value


# --- TupleType ------------------------------------------------------------------------------


def test_tuple_type_is_a_sequence_of_types():
    t = TupleType(F32, I32, PY)
    assert len(t) == 3
    assert list(t) == [F32, I32, PY]
    assert t[0] == F32 and t[-1] == PY
    assert I32 in t and VOID not in t


@pytest.mark.parametrize("key, expected", [
    (slice(1, None), TupleType(I32, PY)),
    (slice(None, 1), TupleType(F32)),
    (slice(None, None, -1), TupleType(PY, I32, F32)),
    (slice(3, None), TupleType()),
])
def test_tuple_type_slice_is_a_tuple_type(key, expected):
    t = TupleType(F32, I32, PY)
    assert isinstance(t[key], TupleType)
    assert t[key] == expected


def test_tuple_type_index_out_of_range_raises_index_error():
    with pytest.raises(IndexError):
        TupleType(F32)[1]


def test_tuple_type_takes_one_iterable_of_types():
    assert TupleType([F32, I32]) == TupleType(F32, I32)
    assert TupleType(x for x in (F32, I32)) == TupleType(F32, I32)
    assert TupleType([]) == TupleType()
    assert len(TupleType(TupleType(F32))) == 1  # one type is an item, not an iterable


def test_tuple_type_items_must_be_types():
    with pytest.raises(TypeError, match=r"item_types\[1\] is not a type: 3"):
        TupleType(F32, 3)
    with pytest.raises(TypeError, match=r"item_types\[0\] is not a type: 'float32'"):
        TupleType(["float32"])


@pytest.mark.parametrize("t, size", [
    (TupleType(F32, VEC3, TensorType((2, 2))), 8),
    (TupleType(TupleType(F32), VEC3), 4),
    (TupleType(), 0),
    (TupleType(F32, SequenceType(F32)), None),
    (TupleType(F32, PY), None),
])
def test_tuple_type_size_sums_items_or_is_none(t, size):
    assert t.size == size


def test_tuple_type_terminal_types_are_pre_order():
    t = TupleType(F32, TupleType(I32, TupleType(PY, VOID)), VEC3)
    assert list(t.terminal_types()) == [F32, I32, PY, VEC3]


def test_tuple_type_flatten_and_unflatten_nested_tuples():
    t = TupleType(F32, TupleType(I32, VOID, PY))
    value = (1, (2, None, "p"))
    assert t.flatten(value) == [1, 2, "p"]
    assert t.unflatten(iter([1, 2, "p"]), value) == value


# --- SequenceType and BroadcastSequenceType ------------------------------------------------


def test_sequence_type_has_an_element_type_and_no_size():
    t = SequenceType(VEC3)
    assert t.element_type == VEC3
    assert t.size is None
    assert list(t.terminal_types()) == [VEC3]


def test_sequence_type_element_must_be_a_type():
    with pytest.raises(TypeError, match="elem_type is not a type"):
        SequenceType("float32")


def test_sequence_type_flattens_every_element_and_unflattens_by_lengths():
    t = SequenceType(TupleType(F32, SequenceType(I32)))
    value = [(1, [2, 3]), (4, []), (5, [6])]
    assert t.flatten(value) == [1, 2, 3, 4, 5, 6]
    assert t.unflatten(iter([1, 2, 3, 4, 5, 6]), value) == value
    assert t.unflatten(iter([9, 8]), [(0, []), (0, [])]) == [(9, []), (8, [])]


def test_broadcast_sequence_type_is_a_sequence_type_of_one_repeated_value():
    t = BroadcastSequenceType(TupleType(F32, I32))
    assert isinstance(t, SequenceType)
    assert t.element_type == TupleType(F32, I32)
    assert t.flatten(itertools.repeat((1, 2))) == [1, 2]
    out = t.unflatten(iter([3, 4]), itertools.repeat((0, 0)))
    assert isinstance(out, itertools.repeat)
    assert [next(out) for _ in range(3)] == [(3, 4)] * 3


def test_broadcast_sequence_for_each_terminal_keeps_a_repetition():
    t = BroadcastSequenceType(F32)
    out = t.for_each_terminal(lambda tt, v: v * 10, itertools.repeat(2))
    assert isinstance(out, itertools.repeat)
    assert next(out) == 20 and next(out) == 20


# --- traversal properties -----------------------------------------------------------------


@settings(max_examples=50)
@given(result_types, st.data())
def test_unflatten_inverts_flatten(t, data):
    value = draw_instance(data, t)
    flat = t.flatten(value)
    assert all(isinstance(v, Leaf) for v in flat)
    it = iter(flat)
    assert plain(t.unflatten(it, value)) == plain(value)
    assert next(it, "end") == "end"  # every flat value was used


@settings(max_examples=50)
@given(result_types, st.data())
def test_for_each_terminal_visits_terminals_in_flatten_order_with_their_types(t, data):
    value = draw_instance(data, t)
    visited = []

    def visit(tt, v):
        assert tt == v.rtype
        visited.append(v)
        return v

    same = t.for_each_terminal(visit, value)
    assert visited == t.flatten(value)
    assert plain(same) == plain(value)


@settings(max_examples=50)
@given(fixed_types, st.data())
def test_flatten_of_a_sequence_free_type_matches_its_terminal_types(t, data):
    value = draw_instance(data, t)
    assert [v.rtype for v in t.flatten(value)] == list(t.terminal_types())


tensor_tuples = st.recursive(
    tensor_types, lambda inner: st.lists(inner, max_size=3).map(lambda xs: TupleType(*xs)),
    max_leaves=8)


@settings(max_examples=50)
@given(tensor_tuples)
def test_size_of_a_tensor_tuple_is_the_sum_of_terminal_sizes(t):
    assert t.size == sum(x.size for x in t.terminal_types())


# --- convert_to_type -----------------------------------------------------------------------


@settings(max_examples=50)
@given(result_types)
def test_convert_to_type_returns_a_type_unchanged(t):
    assert convert_to_type(t) is t


@pytest.mark.parametrize("shorthand, expected", [
    ([16, 16], TensorType((16, 16), "float32")),
    (42, TensorType((42,), "float32")),
    (np.int64(5), TensorType((5,))),
    (0, TensorType((0,))),
    (["bool"], TensorType((), "bool")),
    ([], TensorType(())),
    ([3, 4, "int32"], TensorType((3, 4), "int32")),
    ([3, tf.int64], TensorType((3,), "int64")),
    ("int64", TensorType((), "int64")),
    ("float", TensorType((), "float32")),
    (tf.int32, TensorType((), "int32")),
    (np.float16, TensorType((), "float16")),
    (np.dtype("uint8"), TensorType((), "uint8")),
    (tf.TensorShape([2, 3]), TensorType((2, 3), "float32")),
    (tf.TensorShape([]), TensorType(())),
    ((), TupleType()),
    (([], [3, 3, "int64"]), TupleType(TensorType(()), TensorType((3, 3), "int64"))),
    ((2, ("int32", PY)), TupleType(TensorType((2,)), TupleType(I32, PY))),
])
def test_convert_to_type_reads_shorthand(shorthand, expected):
    assert convert_to_type(shorthand) == expected


def test_convert_to_type_doc_examples_agree():
    assert convert_to_type(([], [3, 3, "int64"])) == convert_to_type(
        (["float32"], [3, 3, "int64"]))


def test_convert_to_type_keeps_pyobject_tuples_uncanonicalized():
    assert convert_to_type((PY, PY)) == TupleType(PY, PY)


@pytest.mark.parametrize("bad", [None, 3.5, True, {}, {"a": 1}, object(), "no_such_dtype",
                                 lambda: 0])
def test_convert_to_type_rejects_what_is_not_a_type(bad):
    with pytest.raises(TypeError, match="Cannot convert .* to a type"):
        convert_to_type(bad)


@pytest.mark.parametrize("bad", [tf.TensorShape([None, 3]), tf.TensorShape(None)])
def test_convert_to_type_rejects_partially_known_shapes(bad):
    with pytest.raises(TypeError, match="not fully defined"):
        convert_to_type(bad)


def test_convert_to_type_rejects_bad_list_shorthand():
    with pytest.raises(TypeError, match="non-negative ints"):
        convert_to_type([2.5])
    with pytest.raises(TypeError, match="not a dtype"):
        convert_to_type([3, "no_such_dtype"])


def test_convert_to_type_rejects_a_bad_tuple_item():
    with pytest.raises(TypeError, match="Cannot convert None to a type"):
        convert_to_type((F32, None))


def test_block_type_setters_accept_shorthand():
    block = td.Identity()
    block.set_input_type([2, "int32"])
    assert block.input_type == TensorType((2,), "int32")
    assert block.output_type == TensorType((2,), "int32")


# --- canonicalize_type ---------------------------------------------------------------------


@pytest.mark.parametrize("t, expected", [
    (TupleType(PY, PY), PY),
    (TupleType(PY), PY),
    (TupleType(PY, TupleType(PY, PY)), PY),
    (SequenceType(PY), PY),
    (BroadcastSequenceType(PY), PY),
    (SequenceType(TupleType(PY, SequenceType(PY))), PY),
    (TupleType(PY, F32), TupleType(PY, F32)),
    (TupleType(SequenceType(PY), F32), TupleType(PY, F32)),
    (BroadcastSequenceType(TupleType(F32, TupleType(PY))),
     BroadcastSequenceType(TupleType(F32, PY))),
    (TupleType(), TupleType()),
    (TupleType(VOID), TupleType(VOID)),
    (F32, F32), (PY, PY), (VOID, VOID), (None, None),
])
def test_canonicalize_type_collapses_pyobject_containers(t, expected):
    out = canonicalize_type(t)
    assert out == expected
    assert type(out) is type(expected)


@settings(max_examples=50)
@given(result_types)
def test_canonicalize_type_is_idempotent_and_canonical(t):
    once = canonicalize_type(t)
    assert canonicalize_type(once) == once
    assert is_canonical(once)
    assert isinstance(once, ResultType)


@settings(max_examples=50)
@given(result_types)
def test_canonicalize_type_leaves_pyobject_free_types_alone(t):
    if not has_pyobject(t):
        assert canonicalize_type(t) == t


def test_block_types_are_canonicalized_when_set():
    block = td.Identity()
    block.set_input_type((PY, (PY,)))
    assert block.input_type == PY
    assert td.Map(td.InputTransform(str.lower)).output_type == PY
    assert td.Map(td.Scalar()).output_type == SequenceType(F32)


# --- first_difference ------------------------------------------------------------------------


def test_a_type_mismatch_shows_the_first_difference_located_then_the_whole_types():
    # the zoo's child-sum cell given 64-wide inputs where it takes 80
    from refold.models import tree_lstm
    cell = tree_lstm.ChildSumTreeLSTMCell(8, 80)
    with pytest.raises(TypeError) as info:
        td.AllOf(td.Vector(64), td.Map(td.Vector(8))) >> cell
    message = str(info.value)
    assert message.startswith("Pipe[1] > ChildSumTreeLSTMCell: input type mismatch: expected "
                              "(80,), got (64,) at the first item of the tuple; the whole "
                              "types: expected TupleType(TensorType((80,), 'float32'), ")
    assert message.endswith("got TupleType(TensorType((64,), 'float32'), "
                            "SequenceType(TensorType((8,), 'float32')))")


@pytest.mark.parametrize("expected, got, difference", [
    (TensorType((3,)), TensorType((3,)), None),
    (TensorType((3,)), TensorType((2,)), "expected (3,), got (2,)"),
    (TensorType(()), TensorType((), "int32"), "expected float32, got int32"),
    (TensorType((2,)), TensorType((), "int8"), "expected (2,) float32, got () int8"),
    (TupleType(F32, TupleType(F32, F32)), TupleType(F32, TupleType(F32, I32)),
     "expected float32, got int32 at the second item of the second item of the tuple"),
    (TupleType(F32, F32), TupleType(F32), "expected a tuple of 2 items, got 1"),
    (SequenceType(F32), SequenceType(I32), "expected float32, got int32 in the elements of "
                                           "the sequence"),
    (SequenceType(TupleType(F32, F32)), SequenceType(TupleType(F32, I32)),
     "expected float32, got int32 at the second item of the elements of the sequence"),
    (SequenceType(F32), BroadcastSequenceType(F32), "expected a sequence, got a broadcast "
                                                    "sequence"),
    (TupleType(*[F32] * 12), TupleType(*[F32] * 11, I32),
     "expected float32, got int32 at item 11 of the tuple"),
    (PyObjectType(), VoidType(), "expected a Python object, got no value (void)"),
])
def test_first_difference_names_how_and_where(expected, got, difference):
    assert first_difference(expected, got) == difference
