"""Tests for blocks/sequences.py: Map, Fold, RNN, Reduce and its reducers, Broadcast, Zip,
ZipWith, NGrams, Nth, Stack."""

import itertools
import math
import re

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_allclose

import refold as td
from refold.blocks.types import (
    BroadcastSequenceType,
    PyObjectType,
    SequenceType,
    TensorType,
    TupleType,
)

F32 = TensorType(())
VEC3 = TensorType((3,))

tf_settings = settings(max_examples=20, deadline=None)

small_ints = st.integers(min_value=-50, max_value=50)
floats = st.floats(min_value=-100, max_value=100, allow_nan=False, width=32)
vectors = st.lists(floats, min_size=3, max_size=3)


def scalars(seq):
    """A list of python floats from a list of 0-d arrays."""
    return [float(x) for x in seq]


def balanced_reduce(combine, items):
    """The pairing rule, written independently: rounds over (even, odd) index pairs."""
    while len(items) > 1:
        evens, odds = items[0::2], items[1::2]
        merged = [combine(a, b) for a, b in zip(evens, odds)]
        items = merged + evens[len(odds):]
    return items[0]


# --- Map ------------------------------------------------------------------------------------


@tf_settings
@given(st.lists(small_ints, max_size=6))
def test_map_applies_element_block_to_each_item(xs):
    block = td.Map(td.Scalar() >> td.Function(tf.square))
    out = block.eval(xs)
    assert isinstance(out, list) and len(out) == len(xs)
    assert_allclose(scalars(out), np.square(np.asarray(xs, "float32")))


def test_map_output_type_follows_element_block():
    block = td.InputTransform(list) >> td.Map(td.Vector(2) >> td.Function(tf.negative))
    assert block.output_type == SequenceType(TensorType((2,)))


def test_map_over_homogeneous_tuple():
    block = (td.Scalar(), td.Scalar()) >> td.Map(td.Function(tf.negative))
    assert block.output_type == SequenceType(F32)
    assert scalars(block.eval((1, 2))) == [-1.0, -2.0]


def test_map_over_broadcast_stays_broadcast():
    block = td.Scalar() >> td.Broadcast() >> td.Map(td.Function(tf.negative))
    assert block.output_type == BroadcastSequenceType(F32)
    out = block.eval(3)
    assert isinstance(out, itertools.repeat)
    assert_allclose(next(out), -3.0)


def test_map_over_mixed_tuple_is_a_type_error_naming_the_path():
    with pytest.raises(TypeError, match=r"Pipe\[1\] > Map: cannot map over a tuple of mixed"):
        (td.Scalar(), td.Vector(2)) >> td.Map(td.Function(tf.negative))


def test_map_element_type_mismatch_is_a_type_error_naming_the_path():
    with pytest.raises(TypeError, match=r"Pipe\[2\] > Map > Vector: input type mismatch: "
                                        r"expected a Python object, got a tensor \(\) "
                                        r"float32; the whole types: expected PyObjectType"
                                        r"\(\), got TensorType"):
        td.InputTransform(list) >> td.Map(td.Scalar()) >> td.Map(td.Vector(2))


def test_map_over_non_sequence_is_an_input_error_naming_the_path():
    with pytest.raises(td.InputError, match=r"Map 'm': expected a sequence, got int"):
        td.Map(td.Scalar(), name="m").eval(5)


def test_map_bad_element_is_an_input_error_naming_the_element_path():
    with pytest.raises(td.InputError, match=r"Map > Scalar: expected a TensorType"):
        td.Map(td.Scalar()).eval([1, "x"])


# --- Fold -----------------------------------------------------------------------------------


@tf_settings
@given(st.lists(small_ints, max_size=6), small_ints)
def test_fold_is_a_left_fold(xs, start):
    block = td.Map(td.Scalar()) >> td.Fold(td.Function(tf.subtract),
                                           td.FromTensor(np.array(start, "float32")))
    expected = float(start)
    for x in xs:
        expected = expected - x
    assert_allclose(block.eval(xs), expected)


def test_fold_output_type_comes_from_start_block():
    fold = td.Fold(td.Function(tf.add), td.Zeros(TensorType((2,))))
    assert fold.output_type == TensorType((2,))
    block = td.InputTransform(list) >> td.Map(td.Vector(2)) >> fold
    assert fold.combine_block.input_type == TupleType(TensorType((2,)), TensorType((2,)))
    assert_allclose(block.eval([[1, 2], [3, 4]]), [4.0, 6.0])


def test_fold_with_tuple_state():
    def combine(state, x):
        total, count = state
        return total + x, count + 1.0

    fold = td.Fold(td.Function(combine), td.Zeros((F32, F32)))
    block = td.Map(td.Scalar()) >> fold
    total, count = block.eval([1, 2, 3])
    assert_allclose((total, count), (6.0, 3.0))


def test_fold_empty_sequence_gives_start():
    block = td.Map(td.Scalar()) >> td.Fold(td.Function(tf.add), tf.constant(7.0))
    assert_allclose(block.eval([]), 7.0)


def test_fold_combine_with_three_inputs_is_a_type_error():
    combine = td.Function(lambda a, b, c: a).set_input_type((F32, F32, F32))
    with pytest.raises(TypeError, match=r"Fold 'f'.*2-tuple"):
        td.Fold(combine, td.Zeros(F32), name="f")


def test_fold_over_broadcast_is_a_type_error_naming_the_path():
    with pytest.raises(TypeError, match=r"Pipe\[2\] > Fold: cannot fold over an infinite"):
        td.Scalar() >> td.Broadcast() >> td.Fold(td.Function(tf.add), td.Zeros(F32))


def test_fold_over_non_sequence_is_an_input_error_naming_the_path():
    fold = td.Fold(td.Function(tf.add), td.Zeros(F32), name="f")
    fold.set_input_type(SequenceType(F32))
    with pytest.raises(td.InputError, match=r"Fold 'f'"):
        fold.eval(3)


def test_fold_combine_failure_is_an_input_error_naming_the_combine_path():
    def checked_add(state, x):
        tf.debugging.assert_non_negative(x)
        return state + x

    block = td.Map(td.Scalar()) >> td.Fold(td.Function(checked_add), td.Zeros(F32))
    assert_allclose(block.eval([1, 2]), 3.0)
    with pytest.raises(td.InputError, match=r"Pipe\[1\] > Fold\.combine > Function"):
        block.eval([1, -2])


# --- RNN ------------------------------------------------------------------------------------


def running_sum_cell():
    cell = td.Function(lambda x, s: (2.0 * x, x + s))
    cell.set_output_type((F32, F32))
    return cell


def test_rnn_default_initial_state_is_zeros():
    block = td.Map(td.Scalar()) >> td.RNN(running_sum_cell())
    outputs, state = block.eval([1, 2, 3])
    assert block.output_type == TupleType(SequenceType(F32), F32)
    assert scalars(outputs) == [2.0, 4.0, 6.0]
    assert_allclose(state, 6.0)


def test_rnn_default_state_needs_a_cell_with_known_state_type():
    cell = td.Function(lambda x, s: (x + s, x + s), name="cell")
    block = td.Map(td.Scalar()) >> td.RNN(cell)
    with pytest.raises(TypeError, match=r"Pipe\[1\] > RNN\.cell > Function 'cell': cannot "
                                        r"determine"):
        block.eval([1.0])


def test_rnn_empty_sequence_returns_initial_state():
    block = td.Map(td.Scalar()) >> td.RNN(running_sum_cell(), initial_state=tf.constant(5.0))
    outputs, state = block.eval([])
    assert outputs == []
    assert_allclose(state, 5.0)


@tf_settings
@given(st.lists(small_ints, max_size=6), small_ints)
def test_rnn_initial_state_block(xs, start):
    cell = td.Function(lambda x, s: (x * s, s - x))
    start_block = td.FromTensor(np.array(start, "float32"))
    block = td.Map(td.Scalar()) >> td.RNN(cell, initial_state=start_block)
    outputs, state = block.eval(xs)
    expected_out, s = [], float(start)
    for x in xs:
        expected_out.append(x * s)
        s = s - x
    assert_allclose(scalars(outputs), expected_out)
    assert_allclose(state, s)


def test_rnn_initial_state_from_input():
    cell = td.Function(lambda x, s: (x + s, 10.0 * s))
    rnn = td.RNN(cell, initial_state_from_input=True)
    block = (td.Map(td.Scalar()), td.Scalar()) >> rnn
    assert rnn.input_type == TupleType(SequenceType(F32), F32)
    assert block.output_type == TupleType(SequenceType(F32), F32)
    outputs, state = block.eval(([1, 2], 3))
    assert scalars(outputs) == [4.0, 32.0]
    assert_allclose(state, 300.0)


def test_rnn_vector_state():
    cell = td.Function(lambda x, s: (tf.reduce_sum(s, axis=1), s + x[:, None]))
    block = td.Map(td.Scalar()) >> td.RNN(cell, initial_state=np.ones(2, "float32"))
    outputs, state = block.eval([1, 2])
    # out_t = sum(s_{t-1}); s_t = s_{t-1} + x_t, from s_0 = [1, 1].
    assert scalars(outputs) == [2.0, 4.0]
    assert_allclose(state, [4.0, 4.0])


def test_rnn_initial_state_and_from_input_together_is_a_value_error():
    with pytest.raises(ValueError, match="Cannot specify initial_state"):
        td.RNN(running_sum_cell(), initial_state=td.Zeros(F32), initial_state_from_input=True)


def test_rnn_cell_with_non_tuple_output_is_a_type_error():
    with pytest.raises(TypeError, match="RNN 'r': RNN cell must have tuple output type"):
        td.RNN(td.Scalar() >> td.Function(tf.negative), name="r")


def test_rnn_cell_with_three_outputs_is_a_type_error_naming_the_path():
    cell = td.Function(lambda x, s: (x, s, s))
    with pytest.raises(TypeError, match=r"Pipe\[2\] > RNN: RNN cell must have tuple output"):
        td.InputTransform(list) >> td.Map(td.Scalar()) >> td.RNN(cell, initial_state=td.Zeros(
            F32))


def test_rnn_state_type_change_is_a_type_error_naming_the_path():
    cell = td.Function(lambda x, s: (x, tf.stack([s, s], axis=1)))
    with pytest.raises(TypeError, match=r"Pipe\[2\] > RNN.*expected TensorType\(\(\), "
                                        r"'float32'\), got TensorType\(\(2,\), 'float32'\)"):
        td.InputTransform(list) >> td.Map(td.Scalar()) >> td.RNN(cell, initial_state=td.Zeros(
            F32))


def test_rnn_from_input_needs_a_sequence_first():
    rnn = td.RNN(running_sum_cell(), initial_state_from_input=True)
    with pytest.raises(TypeError, match=r"Pipe\[1\] > RNN: First RNN input must be a sequence"):
        (td.Scalar(), td.Scalar()) >> rnn


def test_rnn_over_broadcast_is_a_type_error():
    with pytest.raises(TypeError, match=r"Pipe\[2\] > RNN: cannot run an RNN on an infinite"):
        td.Scalar() >> td.Broadcast() >> td.RNN(running_sum_cell())


def test_rnn_over_non_sequence_is_an_input_error_naming_the_path():
    rnn = td.RNN(running_sum_cell(), name="r").set_input_type(SequenceType(F32))
    with pytest.raises(td.InputError, match=r"RNN 'r'"):
        rnn.eval(4)
    block = td.InputTransform(lambda x: x) >> td.Map(td.Scalar()) >> td.RNN(running_sum_cell())
    with pytest.raises(td.InputError, match=r"Pipe\[1\] > Map: expected a sequence"):
        block.eval(4)


# --- Reduce ---------------------------------------------------------------------------------


def test_reduce_is_balanced_not_a_left_fold():
    block = td.Map(td.Scalar()) >> td.Reduce(td.Function(tf.subtract))
    # ((1 - 2) - (3 - 4)) = 0, while a left fold would give -8.
    assert_allclose(block.eval([1, 2, 3, 4]), 0.0)
    # Round 1: (1-2), (3-4), 5 carried; round 2: (-1 - -1), 5; round 3: 0 - 5.
    assert_allclose(block.eval([1, 2, 3, 4, 5]), -5.0)


@tf_settings
@given(st.lists(small_ints, min_size=1, max_size=9))
def test_reduce_subtraction_matches_pairing_rule(xs):
    block = td.Map(td.Scalar()) >> td.Reduce(td.Function(tf.subtract))
    expected = balanced_reduce(lambda a, b: a - b, [float(x) for x in xs])
    assert_allclose(block.eval(xs), expected)


@tf_settings
@given(st.lists(st.floats(min_value=0.5, max_value=4, width=32), min_size=1, max_size=9))
def test_reduce_division_matches_pairing_rule(xs):
    block = td.Map(td.Scalar()) >> td.Reduce(td.Function(tf.divide))
    expected = balanced_reduce(lambda a, b: np.float32(a) / np.float32(b),
                               [np.float32(x) for x in xs])
    assert_allclose(block.eval(xs), expected, rtol=1e-5)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 5, 7, 8, 9, 16, 17])
def test_reduce_depth_is_ceil_log2_n(n):
    block = td.Map(td.Scalar()) >> td.Reduce(td.Function(tf.add))
    expected = math.ceil(math.log2(n)) if n > 1 else 0
    assert block.max_depth(list(range(n))) == expected


def test_reduce_empty_gives_default_block():
    block = td.Map(td.Scalar()) >> td.Reduce(td.Function(tf.add), tf.constant(-1.0))
    assert_allclose(block.eval([]), -1.0)
    assert_allclose(block.eval([2, 3]), 5.0)


def test_reduce_empty_default_is_zeros_of_element_type():
    block = td.Map(td.Vector(3)) >> td.Reduce(td.Function(tf.multiply))
    assert_allclose(block.eval([]), [0.0, 0.0, 0.0])


def test_reduce_over_homogeneous_tuple():
    block = (td.Scalar(), td.Scalar(), td.Scalar()) >> td.Reduce(td.Function(tf.subtract))
    assert block.output_type == F32
    assert_allclose(block.eval((1, 2, 3)), (1 - 2) - 3)


def test_reduce_properties_and_types():
    reduce = td.Reduce(td.Function(tf.add))
    reduce.set_input_type(SequenceType(VEC3))
    assert reduce.output_type == VEC3
    assert reduce.combine_block.input_type == TupleType(VEC3, VEC3)
    assert reduce.default_block.output_type == VEC3


def test_reduce_over_broadcast_is_a_type_error():
    with pytest.raises(TypeError, match=r"Pipe\[2\] > Sum: cannot reduce an infinite"):
        td.Scalar() >> td.Broadcast() >> td.Sum()


def test_reduce_mixed_tuple_is_a_type_error():
    with pytest.raises(TypeError, match=r"Sum 's': cannot reduce a tuple of mixed"):
        (td.Scalar(), td.Vector(2)) >> td.Sum(name="s")


def test_reduce_output_type_mismatch_is_a_type_error():
    reduce = td.Sum().set_input_type(SequenceType(F32))
    with pytest.raises(TypeError, match=r"Sum: output type mismatch: expected \(\), got \(2,\); "
                                        r"the whole types: expected TensorType\(\(\), "
                                        r"'float32'\), got TensorType\(\(2,\), 'float32'\)"):
        reduce.set_output_type(TensorType((2,)))


def test_reduce_over_non_sequence_is_an_input_error_naming_the_path():
    reduce = td.Sum(name="total").set_input_type(SequenceType(F32))
    with pytest.raises(td.InputError, match=r"Sum 'total'"):
        reduce.eval(5)


# --- Sum, Min, Max, Mean --------------------------------------------------------------------


@tf_settings
@given(st.lists(vectors, max_size=6))
def test_sum_min_max_match_numpy(xs):
    arr = np.asarray(xs, "float32").reshape(len(xs), 3)
    for reducer, fn in ((td.Sum, np.sum), (td.Min, np.min), (td.Max, np.max)):
        out = (td.Map(td.Vector(3)) >> reducer()).eval(xs)
        expected = fn(arr, axis=0) if xs else np.zeros(3, "float32")
        assert_allclose(out, expected, rtol=1e-5, atol=1e-3)


@tf_settings
@given(st.lists(floats, max_size=8))
def test_mean_of_scalars_matches_numpy(xs):
    out = (td.Map(td.Scalar()) >> td.Mean()).eval(xs)
    expected = np.mean(np.asarray(xs, "float32")) if xs else 0.0
    assert_allclose(out, expected, rtol=1e-5, atol=1e-4)


@tf_settings
@given(st.lists(vectors, max_size=6))
def test_mean_of_vectors_matches_numpy(xs):
    block = td.Map(td.Vector(3)) >> td.Mean()
    out = block.eval(xs)
    assert block.output_type == VEC3
    expected = np.mean(np.asarray(xs, "float32"), axis=0) if xs else np.zeros(3)
    assert out.shape == (3,)
    assert_allclose(out, expected, rtol=1e-5, atol=1e-4)


def test_mean_of_matrices_broadcasts_the_count():
    block = td.Map(td.Tensor([2, 2])) >> td.Mean()
    a, b = np.arange(4).reshape(2, 2), np.ones((2, 2))
    assert_allclose(block.eval([a, b]), (a + b) / 2.0)


@pytest.mark.parametrize("reducer", [td.Sum, td.Min, td.Max, td.Mean])
def test_reducers_of_empty_input_are_zeros(reducer):
    out = (td.Map(td.Vector(2)) >> reducer()).eval([])
    assert out.shape == (2,)
    assert_allclose(out, [0.0, 0.0])


def test_min_max_of_scalars():
    assert_allclose((td.Map(td.Scalar()) >> td.Min()).eval([3, -1, 2]), -1.0)
    assert_allclose((td.Map(td.Scalar()) >> td.Max()).eval([3, -1, 2]), 3.0)


def test_sum_keeps_integer_dtype():
    out = (td.Map(td.Scalar("int32")) >> td.Sum()).eval([1, 2, 3])
    assert out.dtype == np.int32 and int(out) == 6


def test_reducer_reprs():
    assert repr(td.Sum("foo")) == "<td.Sum 'foo' combine_block=<td.Function tf_fn='add'>>"
    assert repr(td.Min()) == "<td.Min combine_block=<td.Function tf_fn='minimum'>>"
    assert repr(td.Max()) == "<td.Max combine_block=<td.Function tf_fn='maximum'>>"
    assert repr(td.Mean()) == "<td.Mean>" and repr(td.Mean("m")) == "<td.Mean 'm'>"
    assert repr(td.ZipWith(td.Function(tf.add))) == "<td.ZipWith>"


def test_mean_error_path_names_mean():
    with pytest.raises(TypeError, match=r"Pipe\[1\] > Mean\[0\] > AllOf\[0\] > Sum: cannot "
                                        r"reduce a tuple of mixed types"):
        (td.Scalar(), td.Vector(2)) >> td.Mean()


# --- Broadcast, Zip, ZipWith ----------------------------------------------------------------


def test_broadcast_types():
    b = td.Broadcast().set_input_type(F32)
    assert b.output_type == BroadcastSequenceType(F32)
    b2 = td.Broadcast().set_output_type(BroadcastSequenceType(VEC3))
    assert b2.input_type == VEC3


@tf_settings
@given(st.lists(small_ints, max_size=5), st.lists(small_ints, max_size=5))
def test_zip_truncates_to_shortest(xs, ys):
    block = (td.Map(td.Scalar()), td.Map(td.Scalar("int32"))) >> td.Zip()
    out = block.eval((xs, ys))
    assert isinstance(out, list) and len(out) == min(len(xs), len(ys))
    for (a, b), x, y in zip(out, xs, ys):
        assert float(a) == x and int(b) == y and b.dtype == np.int32


def test_zip_with_broadcast_repeats_the_value():
    block = (td.Scalar() >> td.Broadcast(), td.Map(td.Scalar())) >> td.Zip()
    assert block.output_type == SequenceType(TupleType(F32, F32))
    out = block.eval((7, [1, 2, 3]))
    assert [(float(a), float(b)) for a, b in out] == [(7.0, 1.0), (7.0, 2.0), (7.0, 3.0)]


def test_zip_of_only_broadcasts_is_broadcast():
    block = (td.Scalar() >> td.Broadcast(), td.Vector(2) >> td.Broadcast()) >> td.Zip()
    assert block.output_type == BroadcastSequenceType(TupleType(F32, TensorType((2,))))
    out = block.eval((1, [2, 3]))
    assert isinstance(out, itertools.repeat)
    a, b = next(out)
    assert_allclose(a, 1.0)
    assert_allclose(b, [2.0, 3.0])


def test_zip_of_non_sequences_is_a_type_error_naming_the_path():
    with pytest.raises(TypeError, match=r"Pipe\[1\] > Zip: item types must be sequences"):
        (td.Scalar(), td.InputTransform(list) >> td.Map(td.Scalar())) >> td.Zip()



def test_zip_pairs_a_sequence_with_a_list_of_python_objects():
    block = td.AllOf(td.GetItem(0) >> td.Map(td.Scalar()), td.GetItem(1)) >> td.Zip()
    block.set_input_type(PyObjectType())
    assert block.output_type == SequenceType(TupleType(F32, PyObjectType()))
    out = block.eval(([1, 2, 3], ["a", "b"]))
    assert [(float(a), b) for a, b in out] == [(1.0, "a"), (2.0, "b")]


def test_zip_of_a_broadcast_and_python_objects_is_finite():
    block = td.AllOf(td.GetItem(0) >> td.Scalar() >> td.Broadcast(), td.GetItem(1)) >> td.Zip()
    block.set_input_type(PyObjectType())
    assert block.output_type == SequenceType(TupleType(F32, PyObjectType()))
    assert [b for _, b in block.eval((5, [{"k": 1}, None]))] == [{"k": 1}, None]


def test_zip_of_only_python_objects_is_a_python_object():
    block = td.AllOf(td.GetItem(0), td.GetItem(1)) >> td.Zip()
    block.set_input_type(PyObjectType())
    assert block.output_type == PyObjectType()
    assert block.eval(("ab", [1, 2, 3])) == [("a", 1), ("b", 2)]


def test_zip_of_a_python_object_that_is_not_a_sequence_names_the_item():
    block = td.AllOf(td.GetItem(0) >> td.Map(td.Scalar()), td.GetItem(1)) >> td.Zip()
    with pytest.raises(ValueError, match=r"Zip.*item 1: expected a sequence, got int: 7"):
        block.eval(([1, 2], 7))

def test_zip_of_empty_tuple_is_a_type_error():
    with pytest.raises(TypeError, match="Zip: zip requires at least one input sequence"):
        td.Zip().set_input_type(TupleType())


@tf_settings
@given(st.lists(small_ints, max_size=5), st.lists(small_ints, max_size=5))
def test_zip_with_applies_block_to_pairs(xs, ys):
    block = (td.Map(td.Scalar()), td.Map(td.Scalar())) >> td.ZipWith(td.Function(tf.subtract))
    out = block.eval((xs, ys))
    assert scalars(out) == [float(x - y) for x, y in zip(xs, ys)]


def test_zip_with_element_block_type_error_names_the_path():
    with pytest.raises(TypeError, match=r"Pipe\[1\] > ZipWith\[1\] > Map > Function 'one'"):
        (td.InputTransform(list) >> td.Map(td.Scalar()),
         td.InputTransform(list) >> td.Map(td.Scalar())) >> td.ZipWith(
            td.Function(lambda a: a, name="one"))


def test_zip_of_non_sequences_at_eval_is_an_input_error():
    block = td.Zip(name="z").set_input_type((SequenceType(F32), SequenceType(F32)))
    with pytest.raises(td.InputError, match=r"Zip 'z'"):
        block.eval((1, [2]))


def test_broadcast_output_must_be_infinite():
    with pytest.raises(TypeError, match=r"Broadcast: bad output type SequenceType"):
        td.Broadcast().set_output_type(SequenceType(F32))


def test_zip_with_output_type():
    block = (td.InputTransform(list) >> td.Map(td.Scalar()),
             td.InputTransform(list) >> td.Map(td.Scalar())) >> td.ZipWith(td.Function(tf.add))
    assert block.output_type == SequenceType(F32)


# --- NGrams ---------------------------------------------------------------------------------


@tf_settings
@given(st.lists(small_ints, max_size=6), st.integers(min_value=1, max_value=4))
def test_ngrams_are_sliding_windows(xs, n):
    out = (td.Map(td.Scalar()) >> td.NGrams(n)).eval(xs)
    expected = [tuple(xs[i:i + n]) for i in range(len(xs) - n + 1)]
    assert [tuple(float(v) for v in gram) for gram in out] == [
        tuple(float(v) for v in gram) for gram in expected]


def test_ngrams_output_type():
    ngrams = td.NGrams(3).set_input_type(SequenceType(VEC3))
    assert ngrams.output_type == SequenceType(TupleType(VEC3, VEC3, VEC3))
    assert ngrams.n == 3
    assert repr(ngrams) == "<td.NGrams n=3>"


def test_ngrams_n_must_be_positive():
    with pytest.raises(ValueError, match="n must be positive: 0"):
        td.NGrams(0)
    with pytest.raises(ValueError, match="n must be positive"):
        td.NGrams(-2)


def test_ngrams_of_broadcast_is_a_type_error():
    with pytest.raises(TypeError, match=r"Pipe\[2\] > NGrams: cannot take n-grams of an "
                                        r"infinite"):
        td.Scalar() >> td.Broadcast() >> td.NGrams(2)


def test_ngrams_of_non_sequence_is_an_input_error():
    block = td.NGrams(2, name="bigrams").set_input_type(SequenceType(F32))
    with pytest.raises(td.InputError, match=r"NGrams 'bigrams'"):
        block.eval(3)


# --- Nth ------------------------------------------------------------------------------------


@tf_settings
@given(st.lists(small_ints, min_size=1, max_size=6), st.data())
def test_nth_picks_the_item_and_refuses_a_negative_index(xs, data):
    n = data.draw(st.integers(min_value=-len(xs), max_value=len(xs) - 1))
    block = (td.Map(td.Scalar()), td.Identity()) >> td.Nth()
    if n >= 0:
        assert_allclose(block.eval((xs, n)), float(xs[n]))
        assert_allclose(block.eval((xs, np.int64(n))), float(xs[n]))
        return
    with pytest.raises(td.InputKeyError) as info:  # seq[-1] would silently be the last
        block.eval((xs, n))
    assert info.value.block_path == "Pipe[1] > Nth"
    assert info.value.reason == (f"index {n} is out of range for a sequence of length "
                                 f"{len(xs)} (Nth takes indices from 0, not from the end)")


def test_nth_output_type_is_element_type():
    block = (td.InputTransform(list) >> td.Map(td.Vector(3)), td.InputTransform(int)) >> td.Nth()
    assert block.output_type == VEC3
    assert_allclose(block.eval(([[1, 2, 3], [4, 5, 6]], 1)), [4.0, 5.0, 6.0])


def test_nth_out_of_range_is_an_input_key_error_naming_the_path():
    block = (td.Map(td.Scalar()), td.Identity()) >> td.Nth()
    with pytest.raises(td.InputKeyError, match=r"Pipe\[1\] > Nth: index 5 is out of range for "
                                               r"a sequence of length 3"):
        block.eval(([1, 2, 3], 5))
    with pytest.raises(KeyError):
        block.eval(([1, 2, 3], 3))


def test_nth_non_integer_index_is_an_input_error():
    block = (td.Map(td.Scalar()), td.Identity()) >> td.Nth()
    with pytest.raises(td.InputError, match=r"Pipe\[1\] > Nth: index must be an integer"):
        block.eval(([1, 2, 3], "a"))
    for bad in (True, 1.0, np.float64(2.0)):  # seq[True] would be seq[1]; no truncation
        with pytest.raises(td.InputError, match=r"Nth: index must be an integer, got"):
            block.eval(([1, 2, 3], bad))


def test_nth_type_errors_name_the_path():
    seq = SequenceType(F32)
    with pytest.raises(TypeError, match="Nth: Nth block takes 2 inputs"):
        td.Nth().set_input_type(TupleType(seq, PyObjectType(), PyObjectType()))
    with pytest.raises(TypeError, match="Nth: first input to Nth must be a sequence"):
        td.Nth().set_input_type(TupleType(F32, PyObjectType()))
    with pytest.raises(TypeError, match="Nth: second input to Nth must be a PyObject"):
        td.Nth().set_input_type(TupleType(seq, F32))
    with pytest.raises(TypeError, match="Nth: cannot call Nth on an infinite sequence"):
        td.Nth().set_input_type(TupleType(BroadcastSequenceType(F32), PyObjectType()))
    with pytest.raises(TypeError, match=r"Pipe\[1\] > Nth: second input to Nth must be a "
                                        r"PyObject"):
        (td.InputTransform(list) >> td.Map(td.Scalar()), td.Scalar()) >> td.Nth()


# --- Stack ---------------------------------------------------------------------------------

def test_stack_pads_with_zeros_to_its_length_and_types_its_output():
    block = td.Map(td.Vector(2, "int32")) >> td.Stack(3)
    assert block.output_type == td.TensorType((3, 2), "int32")
    assert block.eval([[1, 2], [3, 4]]).tolist() == [[1, 2], [3, 4], [0, 0]]
    assert block.eval([]).tolist() == [[0, 0]] * 3


def test_stack_refuses_a_longer_sequence_naming_the_block_and_the_length():
    block = td.Map(td.Scalar()) >> td.Stack(2, name="padded")
    with pytest.raises(td.InputError, match=r"padded.*3 elements.*max_length=2"):
        block.eval([1.0, 2.0, 3.0])


def test_stack_takes_tensors_and_a_positive_length():
    with pytest.raises(ValueError, match="max_length"):
        td.Stack(0)
    with pytest.raises(TypeError, match="sequence of tensors"):
        td.Map(td.Map(td.Scalar())) >> td.Stack(2)


# --- sequences given as dicts or sets ----------------------------------------------------------


def _word_tree():
    tree = td.ForwardDeclaration(td.PyObjectType(), td.TensorType(()), name="tree")
    tree.resolve_to(td.AllOf(td.GetItem("w") >> td.Scalar(),
                             td.GetItem("children") >> td.Map(tree()) >> td.Sum())
                    >> td.Function(tf.add))
    return tree()


def test_children_given_as_a_dict_are_refused_not_iterated_by_their_keys():
    # Python iterates a dict by its keys: Map would have read "a" as a node, and failed
    # with "cannot take item 'w' of 'a'"
    leaf = {"w": 1.0, "children": []}
    node = {"w": 2.0, "children": {"a": leaf, "b": leaf}}
    with pytest.raises(td.InputError) as info:
        _word_tree().eval(node)
    assert info.value.data_path == "['children']"
    assert info.value.block_path.endswith("> Map")
    assert info.value.reason.startswith(
        "expected a sequence, got a dict (keys 'a', 'b'), whose items Python would iterate "
        "as its keys: give a list, or read the values with td.InputTransform(")
    assert float(_word_tree().eval({"w": 2.0, "children": [leaf, leaf]})) == 4.0


@pytest.mark.parametrize("block", [
    td.Map(td.Scalar()),
    td.Map(td.Scalar()) >> td.Sum(),
    td.Map(td.Scalar()) >> td.Fold(td.Function(tf.add), td.Zeros(td.TensorType(()))),
    td.NGrams(2),
    td.AllOf(td.Identity(), td.Identity()) >> td.Zip(),
])
@pytest.mark.parametrize("value, says", [
    ({"x": 1.0, "y": 2.0, "z": 3.0, "t": 4.0}, "got a dict (keys 'x', 'y', 'z', ...)"),
    ({1.0, 2.0}, "got a set, which has no order: give a list"),
    (frozenset({1.0}), "got a frozenset, which has no order"),
])
def test_a_dict_or_a_set_is_not_a_sequence(block, value, says):
    with pytest.raises(td.InputError, match=re.escape(says)):
        block.eval(value)
