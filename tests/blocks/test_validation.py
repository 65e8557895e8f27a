"""Tests for `blocks.validation` and for type inference while blocks are composed."""

import re

import numpy as np
import pytest
import tensorflow as tf

import refold as td
from refold.blocks.types import (
    PyObjectType,
    SequenceType,
    TensorType,
    TupleType,
    VoidType,
)
from refold.blocks.validation import iter_blocks

F32 = TensorType(())
I32 = TensorType((), "int32")
VEC2 = TensorType((2,))
VEC3 = TensorType((3,))
PY = PyObjectType()
VOID = VoidType()


def opaque(fn=tf.negative, name=None):
    """A `Function` that does not infer its output type, so tests control when it is known."""
    return td.Function(fn, name=name, infer_output_type=False)


def mismatch(path, which, expected, actual):
    """A regex for the composition-time mismatch error at `path`."""
    return re.escape(f"{path}: {which} type mismatch: ") + ".*" + re.escape(
        f"; the whole types: expected {expected}, got {actual}")


# --- validate: forward declarations --------------------------------------------------------


def test_unresolved_forward_declaration_fails_validation():
    decl = td.ForwardDeclaration(PY, F32, name="tree")
    with pytest.raises(TypeError, match=re.escape(
            "ForwardDeclaration 'tree'(): Forward declaration <td.ForwardDeclaration 'tree'> "
            "was never resolved.")):
        td.validate(decl())


def test_unresolved_forward_declaration_error_names_the_reference_path():
    decl = td.ForwardDeclaration(name="tree")
    block = td.Record([("left", decl()), ("right", td.Scalar())])
    with pytest.raises(TypeError, match=re.escape(
            "Record['left'] > ForwardDeclaration 'tree'(): Forward declaration")):
        td.validate(block)


def test_unresolved_forward_declaration_fails_eval_too():
    decl = td.ForwardDeclaration(PY, F32)
    with pytest.raises(TypeError, match="was never resolved"):
        (td.InputTransform(len) >> decl()).eval([1])


def test_resolved_forward_declaration_validates_and_includes_its_target_once():
    decl = td.ForwardDeclaration(PY, F32)
    leaf = td.Scalar()
    node = td.Record((decl(), decl())) >> td.Function(tf.add)
    case = td.OneOf(lambda x: isinstance(x, tuple), {False: leaf, True: node})
    decl.resolve_to(case)
    root = decl()
    blocks = td.validate(root)
    assert blocks[0] is root
    assert len(blocks) == len({id(b) for b in blocks})
    assert case in blocks and leaf in blocks and node in blocks
    assert list(iter_blocks(root)) == blocks
    assert float(root.eval((1, (2, 3)))) == 6.0


def test_forward_declaration_resolves_only_once():
    decl = td.ForwardDeclaration(PY, F32)
    decl.resolve_to(td.Scalar())
    with pytest.raises(ValueError, match="Declaration has already been resolved."):
        decl.resolve_to(td.Scalar())


def test_references_made_after_resolving_work():
    # Deliberately more lenient than Fold, which refused `decl()` after `resolve_to`.
    decl = td.ForwardDeclaration(PY, F32)
    decl.resolve_to(td.Scalar())
    ref = decl()
    assert (ref.input_type, ref.output_type) == (PY, F32)
    assert float(ref.eval(2)) == 2.0


def test_forward_declaration_target_must_agree_with_the_declared_types():
    decl = td.ForwardDeclaration(PY, F32)
    with pytest.raises(TypeError, match=r"ForwardDeclaration > Vector: output type mismatch: "
                                        r"expected \(2,\), got \(\); the whole types: "
                                        r"expected TensorType\(\(2,\), 'float32'\), got "
                                        r"TensorType\(\(\), 'float32'\)$"):
        decl.resolve_to(td.Vector(2))


def test_forward_declaration_types_flow_to_and_from_references():
    decl = td.ForwardDeclaration()
    ref = decl()
    pipe = td.Scalar() >> td.Function(tf.negative) >> ref
    assert decl.input_type == F32 and ref.input_type == F32  # from the pipe, upward
    assert pipe.output_type is None
    decl.resolve_to(td.Function(tf.square))
    assert decl.output_type == F32 and ref.output_type == F32  # from the target
    assert pipe.output_type == F32


def test_reference_mismatching_the_declaration_is_a_type_error():
    decl = td.ForwardDeclaration(PY, F32)
    with pytest.raises(TypeError, match=mismatch("Pipe[1] > ForwardDeclaration()", "input",
                                                 PY, F32)):
        td.Scalar() >> decl()


# --- validate: undetermined types ----------------------------------------------------------


def test_function_alone_has_an_undetermined_input_type():
    with pytest.raises(TypeError, match=r"^Function: cannot determine the input type; connect "
                                        r"the block to something that produces its input, or "
                                        r"call set_input_type\(\)"):
        td.validate(td.Function(tf.negative))


def test_undetermined_output_is_blamed_on_the_innermost_block():
    block = td.Scalar() >> opaque(name="neg") >> td.Function(tf.square)
    with pytest.raises(TypeError, match=re.escape(
            "Function 'neg': cannot determine the output type; "
            "call set_output_type()")):
        td.validate(block)


def test_undetermined_type_error_names_the_nested_path():
    block = td.Record({"a": td.Scalar() >> opaque(name="neg"), "b": td.Scalar()})
    with pytest.raises(TypeError, match=re.escape("Record['a'] > Function 'neg': "
                                                  "cannot determine the output type")):
        td.validate(block)


def test_undetermined_type_error_ends_a_recursive_search():
    decl = td.ForwardDeclaration(name="loop")
    decl.resolve_to(td.Record((decl(),)))  # nothing ever fixes the output type
    with pytest.raises(TypeError, match="cannot determine the output type"):
        td.validate(decl())


def test_setting_the_missing_type_makes_validation_pass():
    fn = opaque()
    block = td.Scalar() >> fn
    fn.set_output_type(F32)
    assert block.output_type == F32
    assert fn in td.validate(block)
    assert float(block.eval(2)) == -2.0


# --- validate: the root's input --------------------------------------------------------------


@pytest.mark.parametrize("make", [td.Identity, lambda: td.GetItem(0), td.Length, td.Void,
                                  lambda: td.Record((td.Identity(), td.Identity()))])
def test_root_input_becomes_a_python_object(make):
    root = make()
    assert root.input_type is None
    td.validate(root)
    assert root.input_type == PY


def test_root_input_of_a_record_root_collapses_item_types_to_a_python_object():
    root = td.Record((td.Identity(), td.Identity()))
    td.validate(root)
    assert root.output_type == PY  # a tuple of Python objects is a Python object


def test_root_with_void_input_stays_void():
    root = td.FromTensor(tf.ones([2]))
    td.validate(root)
    assert root.input_type == VOID
    np.testing.assert_array_equal(root.eval(), [1.0, 1.0])


def test_root_with_a_known_tensor_input_keeps_it_and_converts_the_input():
    root = td.Function(tf.negative).set_input_type([2])
    td.validate(root)
    assert root.input_type == VEC2
    np.testing.assert_array_equal(root.eval([1, 2]), [-1.0, -2.0])
    with pytest.raises(td.InputError, match=r"^Function: the input: expected a TensorType"
                                            r"\(\(2,\), 'float32'\), got 'ab': a string"):
        root.eval("ab")
    with pytest.raises(td.InputError, match=r"^Function: the input: .* nan is not finite"):
        root.eval([1.0, float("nan")])


def test_root_with_a_tuple_input_refuses_a_tuple_of_another_length():
    root = td.Concat().set_input_type(TupleType(TensorType((1,)), TensorType((1,))))
    td.validate(root)
    np.testing.assert_array_equal(root.eval(([1.0], [2.0])), [1.0, 2.0])
    for bad, got in ((([1.0], [2.0], [3.0]), 3), (([1.0],), 1)):
        with pytest.raises(td.InputError, match=rf"^Concat: .*expected a tuple of 2 items, "
                                                rf"got {got}"):
            root.eval(bad)


def test_root_that_cannot_take_a_python_object_has_an_undetermined_input():
    root = td.Function(tf.negative)
    with pytest.raises(TypeError, match="^Function: cannot determine the input type"):
        td.validate(root)
    assert root.input_type is None


# --- validate: metrics -------------------------------------------------------------------------


def test_metrics_of_one_name_must_have_one_type():
    block = td.AllOf(td.Scalar() >> td.Metric("m"), td.Vector(2) >> td.Metric("m")) >> td.Void()
    with pytest.raises(TypeError) as info:
        td.validate(block)
    message = str(info.value)
    assert message.startswith("Pipe[0] > AllOf[1] > Metric 'm': Metric 'm' has "
                              "incompatible types: ")
    assert "TensorType((), 'float32') (at Pipe[0] > AllOf[0] > Metric 'm')" in message
    assert message.endswith("vs TensorType((2,), 'float32')")


def test_labelled_and_unlabelled_metrics_of_one_name_conflict():
    labelled = td.Record((td.Scalar(), td.InputTransform(str))) >> td.Metric("m")
    block = td.AllOf(td.Scalar() >> td.Metric("m"), labelled) >> td.Void()
    with pytest.raises(TypeError, match=re.escape(
            "incompatible types: TensorType((), 'float32') (at Pipe[0] > AllOf[0] > Metric 'm') "
            "vs TupleType(TensorType((), 'float32'), PyObjectType())")):
        td.validate(block)


def test_metrics_of_one_name_and_type_are_collected_together():
    block = td.AllOf(td.Scalar() >> td.Metric("m"),
                     td.Scalar() >> td.Function(tf.square) >> td.Metric("m")) >> td.Void()
    td.validate(block)
    result, metrics = block.eval(3)
    assert result is None
    assert sorted(metrics["m"].tolist()) == [3.0, 9.0]


def test_metrics_of_different_names_may_differ():
    block = td.AllOf(td.Scalar() >> td.Metric("a"), td.Vector(2) >> td.Metric("b")) >> td.Void()
    td.validate(block)


def test_metric_input_must_be_a_tensor_or_a_labelled_tensor():
    with pytest.raises(TypeError, match=r"^Metric 'loss': bad input type "
                                        r"PyObjectType\(\): expected TensorType or TupleType"):
        td.InputTransform(str) >> td.Metric("loss")
    with pytest.raises(TypeError, match=r"^Metric 'loss': expected a pyobj type, "
                                        r"saw: TensorType"):
        (td.Scalar(), td.Scalar()) >> td.Metric("loss")


# --- validate: compositions ----------------------------------------------------------------


def test_composition_cycle_is_a_value_error():
    comp = td.Composition(name="loop")
    with comp.scope():
        a = td.Identity()
        b = td.Identity().reads(a)
        a.reads(b)
        comp.output.reads(b)
    with pytest.raises(ValueError, match=r"^Composition 'loop': Composition cannot have "
                                         r"cycles\."):
        td.validate(comp)


def test_composition_unused_output_is_a_type_error_naming_the_child():
    comp = td.Composition(name="comp")
    with comp.scope():
        used = td.Scalar().reads(comp.input)
        td.Scalar().reads(comp.input)
        comp.output.reads(used)
    with pytest.raises(TypeError, match=re.escape(
            "Composition 'comp': children have unused outputs: Composition 'comp'[1] > Scalar")):
        td.validate(comp)


def test_composition_void_outputs_need_not_be_used():
    comp = td.Composition()
    with comp.scope():
        value = td.Scalar().reads(comp.input)
        td.Metric("x").reads(value)
        comp.output.reads(value)
    td.validate(comp)
    result, metrics = comp.eval(3)
    assert float(result) == 3.0 and metrics["x"].tolist() == [3.0]


def test_composition_with_a_known_output_type_but_no_output_is_a_type_error():
    comp = td.Composition(name="c")
    comp.set_output_type(F32)
    with comp.scope():
        value = td.Scalar().reads(comp.input)
        td.Metric("x").reads(value)
    with pytest.raises(TypeError, match=r"^Composition 'c': Composition block has no output"):
        td.validate(comp)


def test_composition_without_output_wiring_outputs_void():
    # Fold raised unless the output type was set to Void; we infer Void instead.
    comp = td.Composition()
    with comp.scope():
        value = td.Scalar().reads(comp.input)
        td.Metric("x").reads(value)
    td.validate(comp)
    assert comp.output_type == VOID
    assert comp.eval(3) == (None, {"x": np.array([3.0], np.float32)})


def test_composition_child_that_reads_nothing_gets_a_void_input():
    comp = td.Composition()
    with comp.scope():
        ones = td.FromTensor(np.ones(2, np.float32))
        total = td.Function(tf.add).reads(comp.input, ones)
        comp.output.reads(total)
    comp.set_input_type([2])
    td.validate(comp)
    assert ones.input_type == VOID
    np.testing.assert_array_equal(comp.eval([1, 2]), [2.0, 3.0])


def test_composition_reader_arity_must_match_its_tuple_input():
    comp = td.Composition(name="c")
    with comp.scope():
        add = td.Function(tf.add).set_input_type((F32, F32))
        with pytest.raises(TypeError, match=re.escape(
                "Composition 'c'[0] > Function: block has 3 inputs but expects 2")):
            add.reads(comp.input, comp.input, comp.input)


def test_composition_types_flow_through_wires():
    comp = td.Composition()
    with comp.scope():
        x = td.Scalar().reads(comp.input[0])
        y = td.Vector(2).reads(comp.input[1])
        both = td.Concat().reads(x, y)
        comp.output.reads(both)
    assert both.input_type == TupleType(F32, VEC2)
    assert comp.output_type == VEC3
    np.testing.assert_array_equal(comp.eval((1, [2, 3])), [1.0, 2.0, 3.0])


# --- inference at composition time: forward -----------------------------------------------


def test_downstream_input_is_known_as_soon_as_upstream_output_is():
    up, down = opaque(), td.Function(tf.square)
    pipe = up >> down
    assert down.input_type is None and pipe.output_type is None
    up.set_output_type(VEC3)
    assert down.input_type == VEC3
    assert down.output_type == VEC3  # and the function's output is inferred at once
    assert pipe.output_type == VEC3
    assert up.input_type is None and pipe.input_type is None
    up.set_input_type(VEC3)
    assert pipe.input_type == VEC3


def test_map_output_reaches_the_next_block_when_the_map_is_connected():
    length = td.Length()
    pipe = td.InputTransform(list) >> td.Map(td.Scalar()) >> length
    assert length.input_type == SequenceType(F32)
    assert pipe.output_type == F32


def test_map_output_reaches_the_next_block_before_the_map_is_connected():
    # Fold's documented example: the Length's input is known right after `>>`.
    length = td.Length()
    td.Map(td.Scalar()) >> length
    assert length.input_type == SequenceType(F32)


def test_record_output_type_is_known_from_its_children_at_construction():
    record = td.Record((td.Scalar(), td.Vector(2, "int32")))
    assert record.input_type == PY
    assert record.output_type == TupleType(F32, TensorType((2,), "int32"))
    assert (record >> td.GetItem(1)).output_type == TensorType((2,), "int32")


def test_types_propagate_through_nested_pipes_and_records():
    inner = td.Scalar() >> td.Function(lambda x: x[:, None])
    outer = td.Record({"a": inner, "b": td.Vector(2)}) >> td.Concat()
    assert inner.output_type == TensorType((1,))
    assert outer.output_type == VEC3


# --- inference at composition time: backward ----------------------------------------------


def test_upstream_output_is_set_from_a_downstream_input():
    up, down = opaque(), td.Function(tf.square)
    pipe = up >> down
    down.set_input_type([2])
    assert up.output_type == VEC2
    assert pipe.output_type == VEC2
    assert up.input_type is None


def test_setting_a_pipes_output_type_reaches_its_last_block():
    last = opaque()
    pipe = td.Scalar() >> last
    assert last.output_type is None
    pipe.set_output_type([])
    assert last.output_type == F32
    assert float(pipe.eval(4)) == -4.0


def test_identity_ties_its_input_and_output_both_ways():
    forward = td.Identity()
    forward.set_input_type(VEC2)
    assert forward.output_type == VEC2
    backward = td.Identity()
    backward.set_output_type(PY)
    assert backward.input_type == PY


def test_identity_inside_a_record_takes_its_type_from_the_records_output():
    record = td.Record((td.Identity(), td.Scalar()))
    assert record.input_type is None
    record.set_output_type(([3], []))
    identity = record.children[0]
    assert identity.input_type == VEC3 and identity.output_type == VEC3
    assert record.input_type == TupleType(VEC3, PY)


def test_identity_mismatch_names_the_block_and_both_types():
    identity = td.Identity()
    identity.set_input_type(VEC2)
    with pytest.raises(TypeError, match=mismatch("Identity", "output", VEC2, VEC3)):
        identity.set_output_type(VEC3)


# --- Function output inference -------------------------------------------------------------


def test_function_output_is_inferred_from_a_call():
    block = td.Scalar() >> td.Function(lambda x: tf.reshape(x, [-1, 1]))
    assert block.output_type == TensorType((1,))


def test_function_unpacks_a_tuple_input_and_keeps_nested_tuples():
    block = (td.Scalar(), (td.Scalar(), td.Vector(2))) >> td.Function(
        lambda a, bc: a[:, None] + bc[0][:, None] * bc[1])
    assert block.output_type == VEC2
    np.testing.assert_array_equal(block.eval((1, (2, [3, 4]))), [7.0, 9.0])


def test_function_tuple_output_and_dtypes_are_inferred():
    block = td.Scalar("int32") >> td.Function(lambda x: (x, tf.cast(x, tf.float64)[:, None]))
    assert block.output_type == TupleType(I32, TensorType((1,), "float64"))


def test_function_without_inference_waits_for_its_output_type():
    fn = opaque()
    block = td.Scalar() >> fn
    assert fn.input_type == F32 and fn.output_type is None and block.output_type is None


def test_function_inferred_output_must_agree_with_a_set_output():
    with pytest.raises(TypeError, match=mismatch("Pipe[1] > Function", "output", VEC3, F32)):
        td.Scalar() >> td.Function(tf.negative).set_output_type([3])


@pytest.mark.parametrize("fn, reason", [
    (lambda x: tf.reduce_sum(x), "expected a batch tensor from the function, saw a scalar"),
    (lambda x: x[:1], "the function changed the batch dimension"),
    (lambda x: (), "the function returned an empty tuple"),
    (lambda x: 1 / 0, "calling <lambda> on a batch of TensorType((), 'float32') failed: "
                      "ZeroDivisionError"),
])
def test_function_inference_failure_is_a_type_error_naming_the_path(fn, reason):
    with pytest.raises(TypeError, match=re.escape(f"Pipe[1] > Function: {reason}")):
        td.Scalar() >> td.Function(fn)


def test_function_input_must_be_tensors():
    with pytest.raises(TypeError, match=r"^Pipe\[1\] > Function: bad input type PyObjectType\(\)"
                                        r": expected TensorType or TupleType"):
        td.InputTransform(str) >> td.Function(tf.negative)
    with pytest.raises(TypeError, match="^Function: functions must take at least one tensor "
                                        "input"):
        td.Function(tf.negative).set_input_type(TupleType())


def test_function_cannot_read_a_maps_sequence():
    with pytest.raises(TypeError, match=r"^Pipe\[1\] > Function: bad input type SequenceType\("
                                        r"TensorType\(\(\), 'float32'\)\): expected TensorType "
                                        r"or TupleType"):
        td.Map(td.Scalar()) >> td.Function(tf.negative)


# --- FromTensor output inference ------------------------------------------------------------


@pytest.mark.parametrize("tensor, expected", [
    (tf.zeros([2, 3], tf.int32), TensorType((2, 3), "int32")),
    (np.zeros((2,), np.float64), TensorType((2,), "float64")),
    (tf.Variable(tf.ones([4, 1])), TensorType((4, 1))),
    (tf.constant(3.0), F32),
])
def test_from_tensor_output_type_is_the_tensors(tensor, expected):
    block = td.FromTensor(tensor)
    assert block.input_type == VOID
    assert block.output_type == expected


def test_from_tensor_feeds_the_next_block():
    block = td.FromTensor(tf.constant([1.0, 2.0])) >> td.Function(tf.negative)
    assert block.input_type == VOID and block.output_type == VEC2
    np.testing.assert_array_equal(block.eval(), [-1.0, -2.0])


def test_from_tensor_rejects_non_tensors():
    with pytest.raises(TypeError, match=re.escape("[1, 2] is not a tensor or np.ndarray")):
        td.FromTensor([1, 2])


def test_from_tensor_cannot_read_an_input():
    with pytest.raises(TypeError, match=mismatch("Pipe[1] > FromTensor", "input", VOID, F32)):
        td.Scalar() >> td.FromTensor(tf.zeros([2]))


# --- composition-time mismatches -------------------------------------------------------------


def test_pipe_mismatch_names_the_path_and_both_types():
    with pytest.raises(TypeError, match=mismatch("Pipe[1] > Vector", "input", PY, F32)):
        td.Scalar() >> td.Vector(3)


def test_mismatch_deep_in_a_pipe_names_the_flat_position():
    check = td.Function(lambda x: x, name="id").set_input_type([2])
    with pytest.raises(TypeError, match=mismatch("Function 'id'", "input", VEC2, F32)):
        td.Scalar() >> td.Function(tf.negative) >> check


def test_mismatch_when_setting_a_named_pipes_output():
    pipe = td.Pipe(td.Scalar(), td.Function(tf.negative), name="neg")
    with pytest.raises(TypeError, match=mismatch("Pipe 'neg'", "output", F32,
                                                 TensorType((1,)))):
        pipe.set_output_type([1])


def test_mismatch_when_setting_a_records_output():
    record = td.Record({"x": td.Scalar(), "y": td.Scalar()})
    with pytest.raises(TypeError, match=mismatch("Record", "output", TupleType(F32, F32),
                                                 TupleType(F32, VEC2))):
        record.set_output_type((F32, VEC2))


def test_mismatch_inside_a_record_child_names_the_key():
    record = td.Record([("a", td.Identity()),
                        ("b", td.Function(tf.negative, name="f").set_input_type([2]))])
    with pytest.raises(TypeError, match=mismatch("Record['b'] > Function 'f'", "input", VEC2,
                                                 F32)):
        record.set_input_type((F32, F32))


def test_bad_type_class_names_the_allowed_classes():
    with pytest.raises(TypeError, match=r"^Pipe\[1\] > Length: bad input type TensorType\(\(\), "
                                        r"'float32'\): expected PyObjectType or SequenceType or "
                                        r"TupleType"):
        td.Scalar() >> td.Length()


def test_restricting_type_classes_intersects_them():
    identity = td.Identity().set_input_type_classes(TensorType)
    with pytest.raises(TypeError, match=r"^Identity: bad input type PyObjectType\(\): expected "
                                        r"TensorType$"):
        identity.set_input_type(PY)
    with pytest.raises(TypeError, match=r"^Length: bad input type TensorType: expected "
                                        r"PyObjectType or SequenceType or TupleType$"):
        td.Length().set_input_type_classes(TensorType)


def test_setting_an_equal_type_again_or_none_changes_nothing():
    block = td.Scalar()
    assert block.set_input_type(PY) is block
    assert block.set_output_type(None) is block
    assert block.set_output_type([]) is block
    assert (block.input_type, block.output_type) == (PY, F32)


def test_set_io_types_copies_both_types():
    block = td.Length().set_io_types(td.Scalar())
    assert (block.input_type, block.output_type) == (PY, F32)
    with pytest.raises(TypeError, match="output type mismatch"):
        td.Vector(2).set_io_types(td.Scalar())
