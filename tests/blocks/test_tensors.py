"""Tests for blocks/tensors.py: FromTensor, Function, Identity, Concat, Zeros."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from numpy.testing import assert_allclose

import refold as td
from refold.blocks.evaluation.contexts import ReferenceContext, call_with_deep_stack
from refold.blocks.types import (
    BroadcastSequenceType,
    PyObjectType,
    SequenceType,
    TensorType,
    TupleType,
    VoidType,
)

F32 = TensorType(())


def grad_of_eval(block, inp, variable):
    """Evaluates `block` on `inp` under a GradientTape; returns (value, d sum(value) / d var)."""
    td.validate(block)

    def run():
        with tf.GradientTape() as tape:
            out = block.eval_in(ReferenceContext(), inp)
            total = tf.reduce_sum(out)
        return out.numpy(), tape.gradient(total, variable)

    return call_with_deep_stack(run)


# --- FromTensor -----------------------------------------------------------------------------


def test_from_tensor_numpy_array_becomes_constant_of_its_shape_and_dtype():
    arr = np.arange(6, dtype="float32").reshape(2, 3)
    block = td.FromTensor(arr)
    assert block.input_type == VoidType()
    assert block.output_type == TensorType((2, 3), "float32")
    result = block.eval()
    assert isinstance(result, np.ndarray)
    assert_allclose(result, arr)


def test_from_tensor_tf_constant_keeps_integer_dtype():
    block = td.FromTensor(tf.constant([4, 5, 6], tf.int32))
    assert block.output_type == TensorType((3,), "int32")
    result = block.eval()
    assert result.dtype == np.int32
    np.testing.assert_array_equal(result, [4, 5, 6])


def test_from_tensor_tf_variable_reads_current_value_and_takes_its_name():
    var = tf.Variable([1.0, 2.0], name="from_tensor_var")
    block = td.FromTensor(var)
    assert block.name is not None and block.name.startswith("from_tensor_var")
    assert_allclose(block.eval(), [1.0, 2.0])
    var.assign([7.0, 8.0])
    assert_allclose(block.eval(), [7.0, 8.0])


def test_from_tensor_explicit_name_wins():
    block = td.FromTensor(tf.Variable(1.0, name="ignored"), name="mine")
    assert block.name == "mine"


def test_from_tensor_keras_variable_is_accepted_and_named():
    var = keras.Variable(np.array([1.0, -1.0], "float32"), name="kvar")
    block = td.FromTensor(var)
    assert block.output_type == TensorType((2,), "float32")
    assert block.name == "kvar"
    assert_allclose(block.eval(), [1.0, -1.0])


def test_gradients_flow_into_tf_variable():
    var = tf.Variable([1.0, 2.0, 3.0])
    block = td.FromTensor(var) >> td.Function(tf.square)
    value, grad = grad_of_eval(block, None, var)
    assert_allclose(value, [1.0, 4.0, 9.0])
    assert_allclose(grad.numpy(), [2.0, 4.0, 6.0])


def test_gradients_flow_into_keras_variable():
    var = keras.Variable(np.array([0.5, -2.0], "float32"))
    block = td.FromTensor(var) >> td.Function(lambda x: 3.0 * x)
    _, grad = grad_of_eval(block, None, var)
    assert grad is not None
    assert_allclose(np.asarray(grad), [3.0, 3.0])


def test_gradients_flow_into_variable_used_as_fold_start():
    var = tf.Variable(3.0)
    block = td.Map(td.Scalar()) >> td.Fold(td.Function(tf.multiply), var)
    value, grad = grad_of_eval(block, [2.0, 5.0], var)
    assert_allclose(value, 30.0)
    assert_allclose(grad.numpy(), 10.0)


def test_from_tensor_rejects_non_tensors():
    with pytest.raises(TypeError, match="not a tensor or np.ndarray"):
        td.FromTensor([1.0, 2.0])
    with pytest.raises(TypeError, match="not a tensor or np.ndarray"):
        td.FromTensor(3.0)


def test_from_tensor_rejects_shape_not_fully_defined():
    seen = []

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
    def make(x):
        try:
            td.FromTensor(x)
        except TypeError as e:
            seen.append(str(e))
        return x

    make(tf.zeros([2]))
    assert seen and "not fully defined" in seen[0]


def test_from_tensor_exposes_tensor():
    t = tf.constant(2.0)
    assert td.FromTensor(t).tensor is t


def test_from_tensor_takes_no_input():
    with pytest.raises(TypeError, match="FromTensor"):
        td.FromTensor(np.zeros(2, "float32")).set_input_type(PyObjectType())


# --- Function -------------------------------------------------------------------------------


def test_function_tuple_input_is_unpacked_into_positional_arguments():
    calls = []

    def f(a, b):
        calls.append((a.shape.rank, b.shape.rank))
        return a[:, None] * b

    block = (td.Scalar(), td.Vector(2)) >> td.Function(f)
    assert_allclose(block.eval((2.0, [3.0, 4.0])), [6.0, 8.0])
    assert (1, 2) in calls  # a batch of scalars and a batch of vectors


def test_function_nested_tuple_arrives_as_a_tuple():
    seen = []

    def f(a, bc):
        seen.append(type(bc))
        b, c = bc
        return a + b * c

    block = (td.Scalar(), (td.Scalar(), td.Scalar())) >> td.Function(f)
    assert_allclose(block.eval((1.0, (2.0, 3.0))), 7.0)
    assert seen and all(t is tuple for t in seen)


def test_function_single_tensor_input_is_one_argument():
    block = td.Vector(3) >> td.Function(lambda x: tf.reduce_sum(x, axis=1))
    assert block.output_type == F32
    assert_allclose(block.eval([1.0, 2.0, 3.0]), 6.0)


def test_function_tuple_output_type_and_value():
    def f(x):
        return x, (2.0 * x, tf.cast(x, tf.int32))

    block = td.Scalar() >> td.Function(f)
    assert block.output_type == TupleType(F32, TupleType(F32, TensorType((), "int32")))
    out = block.eval(3.0)
    assert isinstance(out, tuple) and isinstance(out[1], tuple)
    assert_allclose(out[0], 3.0)
    assert_allclose(out[1][0], 6.0)
    assert out[1][1].dtype == np.int32 and int(out[1][1]) == 3


def test_function_output_type_inferred_from_shape_and_dtype():
    block = td.Vector(3) >> td.Function(lambda x: tf.cast(tf.stack([x, x], axis=1), tf.int64))
    assert block.output_type == TensorType((2, 3), "int64")


def test_function_output_type_not_inferred_when_disabled():
    calls = []

    def f(x):
        calls.append(1)
        return tf.cast(x, tf.int32)

    fn = td.Function(f, infer_output_type=False)
    pipe = td.Scalar() >> fn
    assert fn.output_type is None and not calls
    with pytest.raises(TypeError, match="cannot determine the output type"):
        pipe.eval(1.0)


def test_function_set_output_type_with_inference_disabled():
    fn = td.Function(lambda x: tf.cast(x, tf.int32), infer_output_type=False)
    fn.set_output_type(TensorType((), "int32"))
    block = td.Scalar() >> fn
    assert block.output_type == TensorType((), "int32")
    out = block.eval(2.0)
    assert out.dtype == np.int32 and int(out) == 2


def test_function_declared_output_type_wrong_is_an_input_error_naming_the_path():
    fn = td.Function(lambda x: x, infer_output_type=False).set_output_type(
        TensorType((), "int32"))
    block = td.Scalar() >> fn
    with pytest.raises(td.InputError, match=r"Pipe\[1\] > Function") as info:
        block.eval(1.0)
    assert "int32" in str(info.value) and "float32" in str(info.value)


def test_function_that_changes_batch_dimension_is_a_type_error_naming_the_path():
    with pytest.raises(TypeError, match=r"Pipe\[1\] > Function.*batch dimension"):
        td.Scalar() >> td.Function(lambda x: x[:1])


def test_function_that_returns_a_scalar_is_a_type_error_naming_the_path():
    with pytest.raises(TypeError, match=r"Pipe\[1\] > Function.*scalar"):
        td.Scalar() >> td.Function(tf.reduce_sum)


def test_function_that_returns_a_non_tensor_is_a_type_error():
    with pytest.raises(TypeError, match=r"Pipe\[1\] > Function.*not a tensor"):
        td.Scalar() >> td.Function(lambda x: None)
    with pytest.raises(TypeError, match=r"Pipe\[1\] > Function.*empty tuple"):
        td.Scalar() >> td.Function(lambda x: ())


def test_function_that_fails_on_its_input_type_is_a_type_error_naming_the_path():
    def bad(x):
        raise ValueError("boom")

    with pytest.raises(TypeError, match=r"Function 'f'.*boom"):
        td.Scalar() >> td.Function(bad, name="f")


def test_function_output_checked_against_type_set_by_context():
    # The Fold's state is a scalar; the combine function returns vectors.
    with pytest.raises(TypeError, match=r"Pipe\[2\] > Fold\.combine > Function.*expected "
                                        r"TensorType\(\(\), 'float32'\), got "
                                        r"TensorType\(\(2,\), 'float32'\)"):
        td.InputTransform(list) >> td.Map(td.Vector(2)) >> td.Fold(td.Function(tf.add),
                                                                   td.Zeros(F32))


def test_function_rejects_non_tensor_inputs():
    with pytest.raises(TypeError, match=r"Pipe\[1\] > Function: bad input type PyObjectType"):
        td.InputTransform(str) >> td.Function(tf.negative)
    with pytest.raises(TypeError, match=r"Pipe\[1\] > Function: bad input type VoidType"):
        td.Void() >> td.Function(tf.negative)


def test_function_rejects_non_callable():
    with pytest.raises(TypeError, match="not callable"):
        td.Function(3)
    with pytest.raises(TypeError, match="not callable"):
        td.Function("tf.add")


def test_function_repr_and_tf_fn():
    fn = td.Function(tf.add)
    assert fn.tf_fn is tf.add
    assert repr(fn) == "<td.Function tf_fn='add'>"
    assert repr(td.Function(lambda x: x, name="f")) == "<td.Function 'f' tf_fn='<lambda>'>"


def test_function_runtime_failure_is_input_error_naming_the_path():
    def check_positive(x):
        tf.debugging.assert_non_negative(x)
        return x

    block = td.Scalar() >> td.Function(check_positive, name="pos")
    assert_allclose(block.eval(1.0), 1.0)
    with pytest.raises(td.InputError, match=r"Function 'pos'"):
        block.eval(-1.0)


# --- Identity -------------------------------------------------------------------------------


def test_identity_input_type_gives_output_type():
    ident = td.Identity().set_input_type(TensorType((2,)))
    assert ident.output_type == TensorType((2,))


def test_identity_output_type_gives_input_type():
    ident = td.Identity().set_output_type(SequenceType(F32))
    assert ident.input_type == SequenceType(F32)


def test_identity_rejects_disagreeing_types():
    ident = td.Identity(name="id").set_input_type(F32)
    with pytest.raises(TypeError, match=r"Identity 'id': output type mismatch"):
        ident.set_output_type(TensorType((3,)))


def test_identity_passes_values_through():
    block = td.AllOf(td.Identity(), td.Scalar())
    ident = block.children[0]
    out = block.eval(5)
    assert ident.output_type == PyObjectType()
    assert out[0] == 5
    assert_allclose(out[1], 5.0)


def test_identity_is_dropped_from_pipes():
    scalar = td.Scalar()
    assert td.Pipe(td.Identity(), scalar, td.Identity()) is scalar
    assert isinstance(td.Pipe(), td.Identity)


# --- Concat ---------------------------------------------------------------------------------


def test_concat_scalars_become_vectors():
    block = (td.Scalar(), td.Scalar(), td.Scalar()) >> td.Concat()
    assert block.output_type == TensorType((3,))
    assert_allclose(block.eval((1, 2, 3)), [1.0, 2.0, 3.0])


def test_concat_scalar_and_vector():
    block = (td.Vector(2), td.Scalar()) >> td.Concat()
    assert block.output_type == TensorType((3,))
    assert_allclose(block.eval(([1, 2], 3)), [1.0, 2.0, 3.0])


def test_concat_along_dim_one():
    block = (td.Tensor([2, 2]), td.Tensor([2, 3])) >> td.Concat(concat_dim=1)
    assert block.output_type == TensorType((2, 5))
    a, b = np.ones((2, 2), "float32"), np.arange(6, dtype="float32").reshape(2, 3)
    assert_allclose(block.eval((a, b)), np.concatenate([a, b], axis=1))


def test_concat_along_dim_zero_of_matrices():
    block = (td.Tensor([1, 3]), td.Tensor([2, 3])) >> td.Concat()
    a, b = np.ones((1, 3)), np.zeros((2, 3))
    assert block.output_type == TensorType((3, 3))
    assert_allclose(block.eval((a, b)), np.concatenate([a, b]))


def test_concat_flatten_accepts_nested_tuples_in_order():
    block = (td.Scalar(), (td.Vector(2), (td.Scalar(),))) >> td.Concat(flatten=True)
    assert block.output_type == TensorType((4,))
    assert_allclose(block.eval((1, ([2, 3], (4,)))), [1.0, 2.0, 3.0, 4.0])


def test_concat_nested_tuples_without_flatten_is_a_type_error():
    with pytest.raises(TypeError, match=r"Pipe\[1\] > Concat.*nested tuples.*flatten=True"):
        (td.Scalar(), (td.Scalar(), td.Scalar())) >> td.Concat()


def test_concat_dtype_mismatch_is_a_type_error_naming_the_path():
    with pytest.raises(TypeError, match=r"Pipe\[1\] > Concat.*different dtypes: float32 vs. "
                                        r"int32"):
        (td.Scalar(), td.Scalar("int32")) >> td.Concat()


def test_concat_shape_mismatch_is_a_type_error_naming_the_path():
    with pytest.raises(TypeError, match=r"Pipe\[1\] > Concat.*don't match: \(2, 2\) vs. "
                                        r"\(3, 3\)"):
        (td.Tensor([2, 2]), td.Tensor([3, 3])) >> td.Concat()


def test_concat_dim_beyond_rank_is_a_type_error():
    with pytest.raises(TypeError, match=r"Concat.*rank less than 2"):
        (td.Vector(2), td.Vector(2)) >> td.Concat(concat_dim=1)


def test_concat_of_a_single_tensor_is_a_type_error():
    with pytest.raises(TypeError, match=r"Pipe\[1\] > Concat.*tuple of tensors"):
        td.Vector(2) >> td.Concat()


def test_function_of_a_callable_object_is_named_by_its_class():
    """Not the object's repr with its address: the name errors and paths show."""
    import functools

    class Square:
        def __call__(self, x):
            return x * x

    assert td.Function(Square()).fn_name == "Square"
    assert repr(td.Function(Square())) == "<td.Function tf_fn='Square'>"
    assert td.Function(functools.partial(max, 0)).fn_name == "partial(max)"


def test_concat_repr():
    assert repr(td.Concat(1, True)) == "<td.Concat concat_dim=1 flatten=True>"


# --- Zeros ----------------------------------------------------------------------------------


def test_zeros_tensor():
    block = td.Zeros(TensorType((2, 3), "int32"))
    assert block.input_type == VoidType()
    out = block.eval()
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, np.zeros((2, 3)))


def test_zeros_shorthand_type():
    assert td.Zeros(4).output_type == TensorType((4,))


def test_zeros_tuple():
    block = td.Zeros((TensorType((2,)), (TensorType((), "int64"),)))
    out = block.eval()
    assert isinstance(out, tuple) and isinstance(out[1], tuple)
    assert_allclose(out[0], [0.0, 0.0])
    assert out[1][0].dtype == np.int64 and int(out[1][0]) == 0


def test_zeros_sequence_is_empty_list():
    assert td.Zeros(SequenceType(TensorType((2,)))).eval() == []


def test_zeros_tuple_with_sequence():
    out = td.Zeros(TupleType(F32, SequenceType(F32))).eval()
    assert_allclose(out[0], 0.0)
    assert out[1] == []


def test_zeros_output_type_inferred_from_context():
    block = td.Optional(td.Vector(3))
    assert_allclose(block.eval(None), [0.0, 0.0, 0.0])
    assert_allclose(block.eval([1, 2, 3]), [1.0, 2.0, 3.0])


def test_zeros_pyobject_type_is_a_type_error():
    with pytest.raises(TypeError, match="Zeros: all terminal types must be tensors"):
        td.Zeros(PyObjectType())
    with pytest.raises(TypeError, match="Zeros 'z': all terminal types must be tensors"):
        td.Zeros(TupleType(F32, PyObjectType()), name="z")


def test_zeros_broadcast_type_is_a_type_error():
    with pytest.raises(TypeError, match="Zeros: cannot create Zeros for an infinite sequence"):
        td.Zeros(BroadcastSequenceType(F32))


@pytest.mark.parametrize("t", [
    TensorType(()),
    TupleType(TensorType(()), TensorType((2,))),
    TupleType(TupleType(TensorType(()), TensorType(())), TupleType(TensorType((3,)))),
    TupleType(TensorType(()), TupleType(TensorType(()), TupleType(TensorType(())))),
])
def test_a_functions_kept_flatten_and_unflatten_equal_the_types_own(t):
    from refold.blocks.tensors import _shape_of, nest_flattener, nest_unflattener
    n = len(list(t.terminal_types()))
    flat = [f"v{i}" for i in range(n)]
    value = t.unflatten(iter(flat), _shape_of(t))
    assert nest_unflattener(t)(flat) == value
    assert nest_flattener(t)(value) == t.flatten(value) == flat
    # another length goes the generic way, as before: extra items are left out
    assert nest_unflattener(t)([*flat, "extra"]) == value


def test_a_functions_kept_flatten_reads_a_tuple_as_zip_does():
    from refold.blocks.tensors import nest_flattener
    pair = TupleType(TensorType(()), TensorType(()))
    assert nest_flattener(pair)((1, 2, 3)) == pair.flatten((1, 2, 3)) == [1, 2]
    assert nest_flattener(pair)((1,)) == pair.flatten((1,)) == [1]
    with pytest.raises(TypeError):
        nest_flattener(pair)(5)


def test_a_functions_kept_flatten_of_two_levels_reads_tuples_as_zip_does():
    # (state, state) inputs of a cell take the two-level flatten: same reading
    from refold.blocks.tensors import nest_flattener
    scalar = TensorType(())
    t = TupleType(TupleType(scalar, scalar), scalar)
    for value in [((1, 2), 3), ((1, 2, 9), 3, 4), ((1,), 3), (((1, 2),))]:
        assert nest_flattener(t)(value) == t.flatten(value), value
    with pytest.raises(TypeError):
        nest_flattener(t)((5, 3))
