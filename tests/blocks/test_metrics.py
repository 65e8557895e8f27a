"""Tests for `blocks.metrics.Metric` and how `eval` reports metrics."""


import numpy as np
import pytest
import tensorflow as tf

import refold as td
from refold.blocks.evaluation.contexts import ReferenceContext, root_input
from tests.blocks.helpers import raises

SCALAR = td.TensorType(())


# --- types ---------------------------------------------------------------------------------


def test_metric_outputs_void():
    metric = td.Metric("loss")
    assert metric.output_type == td.VoidType()
    assert metric.metric_name == "loss"
    assert metric.name == "loss"


def test_metric_with_a_tensor_input_has_no_labels():
    metric = td.Metric("m")
    td.Vector(2) >> metric
    assert metric.value_type == td.TensorType((2,))
    assert not metric.has_labels


def test_metric_with_a_tensor_and_label_input_has_labels():
    metric = td.Metric("m")
    (td.Scalar(), td.InputTransform(str)) >> metric
    assert metric.input_type == td.TupleType(SCALAR, td.PyObjectType())
    assert metric.value_type == SCALAR
    assert metric.has_labels


def test_metric_name_must_be_a_string():
    for bad in (3, None, b"loss", ["loss"]):
        with raises(TypeError, "metric_name must be a string", repr(bad)):
            td.Metric(bad)


def test_metric_tuple_input_must_have_two_items():
    with raises(TypeError, "Metric 't'", "2 items", "TupleType("):
        (td.Scalar(), td.Scalar(), td.InputTransform(str)) >> td.Metric("t")


def test_metric_label_must_be_a_python_object():
    with raises(TypeError, "Metric 't'", "pyobj", "TensorType((), 'float32')"):
        (td.Scalar(), td.Scalar()) >> td.Metric("t")


def test_metric_value_in_a_tuple_must_be_a_tensor():
    with raises(TypeError, "Metric 't'", "tensor", "SequenceType("):
        (td.Map(td.Scalar()), td.InputTransform(str)) >> td.Metric("t")


@pytest.mark.parametrize("source", [lambda: td.InputTransform(str),
                                    lambda: td.Map(td.Scalar())],
                         ids=["python object", "sequence"])
def test_metric_of_a_non_tensor_is_a_type_error(source):
    with raises(TypeError, "Metric 't'", "TensorType or TupleType"):
        source() >> td.Metric("t")


def test_nothing_can_read_a_metric_output():
    with raises(TypeError, "Pipe[2] > Function", "VoidType()"):
        td.Scalar() >> td.Metric("m") >> td.Function(tf.negative)


# --- eval ----------------------------------------------------------------------------------


def test_eval_returns_the_result_and_the_metrics():
    c = td.Composition()
    with c.scope():
        x = td.Scalar().reads(c.input)
        td.Metric("seen").reads(x)
        c.output.reads(td.Function(tf.negative).reads(x))
    result, metrics = c.eval(4)
    assert float(result) == -4.0
    assert list(metrics) == ["seen"]
    assert isinstance(metrics["seen"], np.ndarray)
    assert metrics["seen"].tolist() == [4.0]


def test_eval_without_metrics_returns_only_the_result():
    result = (td.Scalar() >> td.Function(tf.negative)).eval(4)
    assert not isinstance(result, tuple)
    assert float(result) == -4.0


def test_metric_of_a_void_expression_gives_none_as_the_result():
    result, metrics = (td.Scalar() >> td.Metric("x")).eval(3)
    assert result is None
    assert metrics["x"].tolist() == [3.0]


def test_metric_values_are_stacked_along_a_new_first_axis():
    _, metrics = (td.Vector(2, "int32") >> td.Metric("v")).eval([1, 2])
    assert metrics["v"].shape == (1, 2)
    assert metrics["v"].dtype == np.int32
    assert metrics["v"].tolist() == [[1, 2]]


def test_metric_with_a_label_reports_the_values():
    block = (td.Scalar(), td.InputTransform(str)) >> td.Metric("labelled")
    result, metrics = block.eval((1.5, "one and a half"))
    assert result is None
    assert metrics["labelled"].tolist() == [1.5]


def test_metric_labels_are_collected_alongside_the_values():
    block = td.Map((td.Scalar(), td.Identity()) >> td.Metric("hit")) >> td.Void()
    td.validate(block)
    ctx = ReferenceContext()
    block.eval_in(ctx, root_input(block, ctx, [(1, "a"), (0, "b"), (1, "c")]))
    assert [float(v) for v in ctx.metrics["hit"]] == [1.0, 0.0, 1.0]
    assert ctx.metric_labels["hit"] == ["a", "b", "c"]


def test_one_value_per_sequence_element():
    block = td.Map(td.Scalar() >> td.Function(tf.square) >> td.Metric("sq")) >> td.Void()
    result, metrics = block.eval([1, 2, 3, 4])
    assert result is None
    assert metrics["sq"].tolist() == [1.0, 4.0, 9.0, 16.0]


def test_metric_at_every_node_of_a_tree():
    total = td.ForwardDeclaration(td.PyObjectType(), SCALAR)
    node = td.Record((total(), total())) >> td.Function(tf.add)
    summed = td.OneOf(lambda x: isinstance(x, tuple), {False: td.Scalar(), True: node})
    total.resolve_to(summed >> td.AllOf(td.Identity(), td.Metric("node")) >> td.GetItem(0))
    tree = ((1, 2), (3, (4, 5)))
    result, metrics = total().eval(tree)
    assert float(result) == 15.0
    # One value per node: 5 leaves and 4 internal nodes, each the sum of its subtree.
    assert sorted(metrics["node"].tolist()) == sorted([1, 2, 3, 3, 4, 5, 9, 12, 15])


def test_metrics_of_one_name_from_several_blocks_are_merged():
    block = td.AllOf(td.GetItem(0) >> td.Scalar() >> td.Metric("m"),
                     td.GetItem(1) >> td.Scalar() >> td.Metric("m")) >> td.Void()
    _, metrics = block.eval((1, 2))
    assert sorted(metrics["m"].tolist()) == [1.0, 2.0]


def test_metric_names_are_sorted():
    block = td.AllOf(td.Scalar() >> td.Metric("zeta"), td.Scalar() >> td.Metric("alpha"),
                     td.Scalar() >> td.Metric("mid")) >> td.Void()
    _, metrics = block.eval(1)
    assert list(metrics) == ["alpha", "mid", "zeta"]


def test_metric_that_emitted_nothing_gives_an_empty_array_of_its_shape_and_dtype():
    block = td.Map(td.Vector(2, "int32") >> td.Metric("v")) >> td.Void()
    _, metrics = block.eval([])
    assert metrics["v"].shape == (0, 2)
    assert metrics["v"].dtype == np.int32


def test_labelled_metric_that_emitted_nothing_has_the_value_shape():
    block = td.Map((td.Vector(3), td.Identity()) >> td.Metric("l")) >> td.Void()
    _, metrics = block.eval([])
    assert metrics["l"].shape == (0, 3)
    assert metrics["l"].dtype == np.float32


def test_metric_in_a_case_not_taken_is_reported_empty():
    block = td.OneOf(lambda x: x > 0, {
        True: td.Scalar() >> td.AllOf(td.Identity(), td.Metric("positive")) >> td.GetItem(0),
        False: td.Scalar() >> td.AllOf(td.Identity(), td.Metric("negative")) >> td.GetItem(0),
    })
    result, metrics = block.eval(3)
    assert float(result) == 3.0
    assert list(metrics) == ["negative", "positive"]
    assert metrics["positive"].tolist() == [3.0]
    assert metrics["negative"].shape == (0,)
    assert metrics["negative"].dtype == np.float32


def test_metrics_with_tolist_are_python_lists():
    block = td.Map(td.Scalar("int32") >> td.Metric("i")) >> td.Void()
    _, metrics = block.eval([1, 2], tolist=True)
    assert metrics["i"] == [1, 2]
    _, empty = block.eval([], tolist=True)
    assert empty["i"] == []


# --- conflicts ---------------------------------------------------------------------------


def test_metrics_of_one_name_with_different_dtypes_are_an_error():
    block = td.AllOf(td.Scalar() >> td.Metric("a"), td.Scalar("int32") >> td.Metric("a"))
    with raises(TypeError, "Metric 'a'", "incompatible", "TensorType((), 'float32')",
                "TensorType((), 'int32')", "AllOf[0] > Metric 'a'",
                "AllOf[1] > Metric 'a'"):
        block.eval(1)


def test_metrics_of_one_name_with_different_shapes_are_an_error():
    block = td.AllOf(td.Vector(2) >> td.Metric("a"), td.Vector(3) >> td.Metric("a"))
    with raises(TypeError, "incompatible", "TensorType((2,), 'float32')",
                "TensorType((3,), 'float32')"):
        block.eval([1, 2])


def test_labelled_and_unlabelled_metrics_of_one_name_are_an_error():
    block = td.AllOf(td.Scalar() >> td.Metric("a"),
                     (td.Scalar(), td.Identity()) >> td.Metric("a"))
    with raises(TypeError, "incompatible", "TupleType(TensorType((), 'float32'), PyObjectType())"):
        block.eval(1)


def test_metrics_of_different_names_may_have_different_types():
    block = td.AllOf(td.Scalar() >> td.Metric("a"), td.Scalar("int32") >> td.Metric("b"))
    _, metrics = block.eval(2)
    assert metrics["a"].dtype == np.float32 and metrics["b"].dtype == np.int32
