"""Tests for blocks/evaluation/contexts.py: `max_depth` as Fold counts it, and `eval`'s return
conventions (numpy arrays, tuples, lists, repeats, None, Python objects, tolist)."""

import itertools
import math

import numpy as np
import pytest
import tensorflow as tf
from numpy.testing import assert_allclose

import refold as td
from refold.blocks.evaluation.contexts import (
    DepthContext,
    ReferenceContext,
    call_with_deep_stack,
    reference_eval,
)
from refold.blocks.types import SequenceType, TensorType

F32 = TensorType(())


def fold_add():
    return td.Fold(td.Function(tf.add), td.FromTensor(tf.zeros([])))


# --- max_depth ------------------------------------------------------------------------------


def test_scalar_has_depth_zero():
    assert td.Scalar().max_depth(42) == 0


@pytest.mark.parametrize("i", range(6))
def test_fold_over_range_has_depth_i(i):
    block = td.InputTransform(range) >> td.Map(td.Scalar()) >> fold_add()
    assert block.max_depth(i) == i


def test_fold_depth_is_length_times_combine_depth():
    combine = td.Function(tf.add) >> td.Function(tf.negative)
    block = td.Map(td.Scalar()) >> td.Fold(combine, td.Zeros(F32))
    assert block.max_depth([1, 2, 3]) == 6


@pytest.mark.parametrize("n", [0, 1, 2, 5, 9])
def test_map_adds_no_depth(n):
    one = td.Map(td.Scalar() >> td.Function(tf.negative))
    two = td.Map(td.Scalar() >> td.Function(tf.negative) >> td.Function(tf.square))
    assert one.max_depth(list(range(n))) == (1 if n else 0)
    assert two.max_depth(list(range(n))) == (2 if n else 0)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 6, 8, 11, 16, 33])
def test_reduce_depth_is_ceil_log2_n(n):
    block = td.Map(td.Scalar()) >> td.Sum()
    assert block.max_depth(list(range(n))) == math.ceil(math.log2(n))


def test_constants_have_depth_zero_and_ops_add_one():
    assert td.FromTensor(np.ones(2, "float32")).max_depth() == 0
    assert td.Zeros(TensorType((3,))).max_depth() == 0
    assert (td.FromTensor(np.ones(2, "float32")) >> td.Function(tf.negative)).max_depth() == 1
    assert td.Length().max_depth([1, 2]) == 0


def test_routing_blocks_add_no_depth():
    neg = td.Function(tf.negative)
    block = (td.InputTransform(lambda d: d["x"]) >> td.Record((td.Scalar(), td.Scalar()))
             >> td.GetItem(1) >> td.Identity() >> neg)
    assert block.max_depth({"x": (1, 2)}) == 1
    one_of = td.OneOf(lambda x: x > 0, {True: td.Scalar() >> td.Function(tf.negative),
                                        False: td.Scalar()})
    assert one_of.max_depth(1) == 1
    assert one_of.max_depth(-1) == 0


def test_depth_of_tuple_is_deepest_item():
    deep = td.Scalar() >> td.Function(tf.negative) >> td.Function(tf.negative)
    shallow = td.Scalar() >> td.Function(tf.negative)
    block = (deep, shallow) >> td.Function(tf.add)
    assert block.max_depth((1, 2)) == 3


def test_max_depth_runs_no_tensorflow_op():
    calls = []

    def negate(x):
        calls.append(1)
        return -x

    block = td.Map(td.Scalar() >> td.Function(negate))
    td.validate(block)
    before = len(calls)
    assert block.max_depth([1, 2, 3]) == 1
    assert len(calls) == before


def test_max_depth_of_deep_recursion():
    # A nested list `[[[...]]]` n deep: one op per level.
    expr = td.ForwardDeclaration(td.PyObjectType(), F32)
    leaf = td.Scalar()
    node = td.InputTransform(lambda x: x[0]) >> expr() >> td.Function(tf.negative)
    expr.resolve_to(td.OneOf(lambda x: isinstance(x, list), {False: leaf, True: node}))
    model = expr()
    inp = 1.0
    for _ in range(3000):
        inp = [inp]
    assert model.max_depth(inp) == 3000


def test_depth_context_counts_one_plus_deepest_argument():
    ctx = DepthContext()
    op = td.Function(tf.add).set_input_type((F32, F32)).op()
    assert ctx.constant(np.zeros(()), F32) == 0
    assert ctx.op(op, [0, 4]) == [5]
    assert ctx.deepest == 5


# --- eval return conventions ----------------------------------------------------------------


def test_eval_tensor_is_numpy_array_with_dtype():
    out = td.Scalar("int32").eval(7)
    assert isinstance(out, np.ndarray) and out.shape == () and out.dtype == np.int32
    vec = td.Vector(3).eval([1, 2, 3])
    assert isinstance(vec, np.ndarray) and vec.dtype == np.float32
    assert_allclose(vec, [1.0, 2.0, 3.0])


def test_eval_tuple_is_a_tuple():
    out = td.Record((td.Scalar(), (td.Vector(2), td.Scalar("int64")))).eval((1, ([2, 3], 4)))
    assert isinstance(out, tuple) and isinstance(out[1], tuple)
    assert_allclose(out[0], 1.0)
    assert_allclose(out[1][0], [2.0, 3.0])
    assert out[1][1].dtype == np.int64


def test_eval_sequence_is_a_list_of_arrays():
    out = td.Map(td.Vector(2)).eval([[1, 2], [3, 4]])
    assert isinstance(out, list) and len(out) == 2
    assert all(isinstance(x, np.ndarray) for x in out)
    assert td.Map(td.Scalar()).eval([]) == []


def test_eval_broadcast_is_itertools_repeat():
    out = (td.Scalar() >> td.Broadcast()).eval(2)
    assert isinstance(out, itertools.repeat)
    first, second = next(out), next(out)
    assert_allclose(first, 2.0)
    assert_allclose(second, 2.0)


def test_eval_void_is_none():
    assert td.Void().eval(3) is None
    assert (td.Scalar() >> td.Void()).eval(3) is None


def test_eval_pyobject_output_is_the_object_itself():
    obj = {"a": [1, 2]}
    assert td.InputTransform(lambda x: x).eval(obj) is obj
    assert td.InputTransform(str).eval(42) == "42"
    assert td.GetItem("a").eval(obj) is obj["a"]


def test_eval_mixes_tensors_and_python_objects():
    out = td.AllOf(td.Length(), td.Identity()).eval([1, 2])
    assert_allclose(out[0], 2.0)
    assert out[1] == [1, 2]


def test_eval_tolist_gives_python_values():
    assert td.Scalar().eval(2, tolist=True) == 2.0
    assert isinstance(td.Scalar().eval(2, tolist=True), float)
    out = td.Record((td.Scalar("int32"), td.Map(td.Vector(2)), td.InputTransform(str))).eval(
        (1, [[1, 2]], 5), tolist=True)
    assert out == (1, [[1.0, 2.0]], "5")
    assert isinstance(out[0], int) and isinstance(out[1][0], list)


def test_eval_tolist_of_broadcast_repeats_a_python_value():
    out = (td.Vector(2) >> td.Broadcast()).eval([1, 2], tolist=True)
    assert isinstance(out, itertools.repeat)
    assert next(out) == [1.0, 2.0]


def test_eval_with_metrics_returns_result_and_metric_arrays():
    squares = td.Map(td.Scalar() >> td.Function(tf.square) >> td.Metric("sq")) >> td.Void()
    result, metrics = squares.eval([1, 2, 3])
    assert result is None
    assert list(metrics) == ["sq"]
    assert_allclose(metrics["sq"], [1.0, 4.0, 9.0])
    _, as_lists = squares.eval([1, 2], tolist=True)
    assert as_lists == {"sq": [1.0, 4.0]}
    _, empty = squares.eval([])
    assert empty["sq"].shape == (0,)


def test_eval_root_with_tensor_input_converts_the_input():
    block = td.Function(tf.negative).set_input_type(TensorType((2,)))
    assert_allclose(block.eval([1, 2]), [-1.0, -2.0])


def test_eval_root_input_of_wrong_shape_is_an_input_error_naming_the_path():
    block = td.Function(tf.negative, name="neg").set_input_type(TensorType((2,)))
    with pytest.raises(td.InputError, match=r"Function 'neg': .*\(2,\).*\(3,\)"):
        block.eval([1, 2, 3])


def test_eval_bad_input_is_an_input_error_naming_the_path():
    block = td.Map(td.Vector(2) >> td.Function(tf.negative))
    with pytest.raises(td.InputError, match=r"Map > Pipe\[0\] > Vector: expected shape \(2,\), "
                                            r"got shape \(3,\)"):
        block.eval([[1, 2], [1, 2, 3]])


def test_eval_agrees_with_reference_evaluator():
    block = td.Map(td.Scalar()) >> td.Reduce(td.Function(tf.subtract))
    xs = [3, 1, 4, 1, 5, 9, 2]
    assert_allclose(block.eval(xs), reference_eval(block, xs))


def test_reference_context_runs_ops_with_batch_of_one():
    seen = []

    def record(x):
        seen.append(tuple(x.shape))
        return -x

    block = td.Map(td.Vector(3) >> td.Function(record))
    td.validate(block)
    seen.clear()
    ctx = ReferenceContext()
    out = call_with_deep_stack(lambda: block.eval_in(ctx, [np.ones(3), np.zeros(3)]))
    assert seen == [(1, 3), (1, 3)]
    assert_allclose(np.stack(out), [-np.ones(3), np.zeros(3)])


def test_reference_context_checks_op_outputs():
    fn = td.Function(lambda x: x, infer_output_type=False).set_input_type(F32)
    fn.set_output_type(TensorType((2,)))
    with pytest.raises(ValueError, match="expected TensorType"):
        ReferenceContext().op(fn.op(), [tf.constant(1.0)])


def test_call_with_deep_stack_returns_and_raises():
    assert call_with_deep_stack(lambda a, b: a + b, 2, 3) == 5

    def fail():
        raise KeyError("gone")

    with pytest.raises(KeyError, match="gone"):
        call_with_deep_stack(fail)


def test_call_with_deep_stack_allows_deep_python_recursion():
    def depth(n):
        return 0 if n == 0 else 1 + depth(n - 1)

    assert call_with_deep_stack(depth, 20000) == 20000


def test_sequence_type_root_output():
    block = td.InputTransform(list) >> td.Map(td.Scalar())
    assert block.output_type == SequenceType(F32)
    assert [float(x) for x in block.eval((1, 2))] == [1.0, 2.0]


def test_kept_deep_threads_are_reused_raise_in_the_caller_and_restore_the_limit():
    import sys
    import threading

    from refold.blocks.evaluation.contexts import call_on_kept_deep_thread

    def depth(n):
        return 0 if n == 0 else 1 + depth(n - 1)
    limit = sys.getrecursionlimit()
    first = call_on_kept_deep_thread(threading.get_ident)
    assert call_on_kept_deep_thread(threading.get_ident) == first  # one thread, kept
    assert first != threading.get_ident()
    assert call_on_kept_deep_thread(depth, 30_000) == 30_000  # its deep stack
    assert sys.getrecursionlimit() == limit  # raised only while a call runs

    def fail():
        raise KeyError("inside")
    with pytest.raises(KeyError, match="inside"):
        call_on_kept_deep_thread(fail)
    assert call_on_kept_deep_thread(lambda: 7) == 7  # still serving
