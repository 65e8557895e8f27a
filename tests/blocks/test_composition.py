"""Tests for `blocks.composition`: Composition, Pipe (`>>`), Record, AllOf, wires,
`convert_to_block` and the one-parent rule."""

import threading
from collections import OrderedDict

import numpy as np
import pytest
import tensorflow as tf

import refold as td
from refold.blocks.composition import current_composition
from tests.blocks.helpers import fails_on_eval, neg, raises

# --- Composition: wiring with scope() and reads() ----------------------------------------


def test_reads_feeds_one_block_output_to_another():
    c = td.Composition()
    with c.scope():
        x = td.Scalar().reads(c.input)
        y = neg().reads(x)
        c.output.reads(y)
    assert float(c.eval(4)) == -4.0
    assert c.input_type == td.PyObjectType()
    assert c.output_type == td.TensorType(())


def test_reads_returns_the_reader_so_calls_chain():
    c = td.Composition()
    with c.scope():
        s = td.Scalar()
        assert s.reads(c.input) is s
        c.output.reads(s)


def test_reads_of_several_blocks_feeds_a_tuple_in_that_order():
    c = td.Composition()
    with c.scope():
        x = td.Scalar().reads(c.input[0])
        y = td.Scalar().reads(c.input[1])
        c.output.reads(td.Function(tf.subtract).reads(x, y))
    assert float(c.eval((10, 3))) == 7.0
    assert float(c.eval((3, 10))) == -7.0


def test_reads_of_a_list_is_a_tuple_input():
    c = td.Composition()
    with c.scope():
        x = td.Scalar().reads(c.input[0])
        y = td.Scalar().reads(c.input[1])
        c.output.reads(td.Function(tf.subtract).reads([x, y]))
    assert float(c.eval((10, 3))) == 7.0


def test_composition_input_items_are_wired_by_index():
    c = td.Composition()
    with c.scope():
        x = td.Scalar().reads(c.input[1])
        y = td.Scalar("int32").reads(c.input[0])
        c.output.reads(x, y)
    result = c.eval((5, 7))
    assert result[0].dtype == np.float32 and float(result[0]) == 7.0
    assert result[1].dtype == np.int32 and int(result[1]) == 5


def test_output_reads_two_blocks_gives_a_tuple_output_type():
    c = td.Composition()
    with c.scope():
        x = td.Scalar().reads(c.input)
        y = td.Scalar("int32").reads(c.input)
        c.output.reads(x, y)
    assert c.output_type == td.TupleType(td.TensorType(()), td.TensorType((), "int32"))
    assert [v.item() for v in c.eval(3)] == [3.0, 3]


def test_wire_to_an_item_of_a_tuple_output():
    c = td.Composition()
    with c.scope():
        pair = td.Record((td.Scalar(), td.Scalar("int32"))).reads(c.input)
        negated = neg().reads(pair[0])
        c.output.reads(negated, pair[1])
    assert c.output_type == td.TupleType(td.TensorType(()), td.TensorType((), "int32"))
    first, second = c.eval((5, 7))
    assert float(first) == -5.0 and int(second) == 7


def test_wire_to_a_block_with_tensor_output_is_a_type_error():
    c = td.Composition()
    with raises(TypeError, "Composition[0] > Scalar", "TupleType", "TensorType"):
        with c.scope():
            s = td.Scalar().reads(c.input)
            c.output.reads(s[0])


def test_wire_index_beyond_the_tuple_is_a_type_error_naming_the_source():
    c = td.Composition()
    with raises(TypeError, "AllOf", "cannot get output 2", "2 outputs"):
        with c.scope():
            pair = td.AllOf(td.Scalar(), td.Scalar()).reads(c.input)
            c.output.reads(pair[2])


def test_slice_of_a_block_output_reads_a_getitem():
    c = td.Composition()
    with c.scope():
        triple = td.AllOf(td.Scalar(), td.Scalar("int32"), td.Scalar("int64")).reads(c.input)
        c.output.reads(triple[1:])
    assert c.output_type == td.TupleType(td.TensorType((), "int32"), td.TensorType((), "int64"))
    assert isinstance(c.children[-1], td.GetItem)
    result = c.eval(6)
    assert [r.dtype for r in result] == [np.int32, np.int64]
    assert [int(r) for r in result] == [6, 6]


def test_composition_input_item_beyond_a_known_input_tuple_is_a_type_error():
    c = td.Composition()
    c.set_input_type((td.TensorType(()), td.TensorType(())))
    with raises(TypeError, "Composition.input:", "cannot get output 3", "2 outputs"):
        with c.scope():
            td.Identity().reads(c.input[3])


def test_wires_have_readable_reprs():
    assert repr(td.Scalar()[0]) == "<td.Scalar dtype='float32'>[0]"
    assert repr(td.Record({"a": td.Scalar()})["a"]) == "<td.Record ordered=False>['a']"


def test_slice_outside_a_scope_is_an_error():
    with raises(ValueError, "Scalar", "Composition scope"):
        td.Scalar()[1:]


def test_one_output_read_by_several_blocks():
    c = td.Composition()
    with c.scope():
        x = td.Scalar().reads(c.input)
        square = td.Function(tf.square).reads(x)
        negated = neg().reads(x)
        c.output.reads(td.Function(tf.add).reads(square, negated))
    assert float(c.eval(5)) == 20.0


def test_children_are_evaluated_in_dependency_order_not_creation_order():
    c = td.Composition()
    with c.scope():
        last = td.Function(tf.square)
        middle = td.Function(lambda x: x + 1.0)
        first = td.Scalar().reads(c.input)
        c.output.reads(last)
        last.reads(middle)
        middle.reads(first)
    assert float(c.eval(2)) == 9.0


def test_connect_without_a_scope():
    c = td.Composition()
    s, n = td.Scalar(), neg()
    c.connect(c.input, s)
    c.connect(s, n)
    c.connect(n, c.output)
    assert s.parent is c and n.parent is c
    assert float(c.eval(2)) == -2.0


def test_children_given_to_the_constructor_are_wired_later():
    s, n = td.Scalar(), neg()
    c = td.Composition([s, n])
    assert c.children == [s, n]
    with c.scope():
        s.reads(c.input)
        n.reads(s)
        c.output.reads(n)
    assert float(c.eval(3)) == -3.0


def test_a_child_that_reads_nothing_gets_a_void_input():
    c = td.Composition()
    with c.scope():
        const = td.FromTensor(np.array([1.0, 2.0], "float32"))
        c.output.reads(const)
    np.testing.assert_array_equal(c.eval(None), [1.0, 2.0])
    assert const.input_type == td.VoidType()


def test_reads_with_no_arguments_gives_a_void_input():
    c = td.Composition()
    with c.scope():
        v = td.Void().reads()
    assert v.input_type == td.VoidType()


def test_composition_types_are_known_as_soon_as_they_are_wired():
    c = td.Composition()
    with c.scope():
        x = td.Vector(3).reads(c.input)
        y = neg().reads(x)
        c.output.reads(y)
    assert y.input_type == td.TensorType((3,))
    assert c.output_type == td.TensorType((3,))


def test_composition_output_type_pushes_back_to_readers():
    c = td.Composition()
    with c.scope():
        ident = td.Identity().reads(c.input)
        c.output.reads(ident)
    c.set_output_type(td.TensorType((2,), "int32"))
    assert ident.output_type == td.TensorType((2,), "int32")
    assert ident.input_type == td.TensorType((2,), "int32")
    assert c.input_type == td.TensorType((2,), "int32")


def test_composition_output_type_mismatch_names_the_composition_and_both_types():
    c = td.Composition(name="c")
    with c.scope():
        c.output.reads(td.Scalar().reads(c.input))
    with raises(TypeError, "Composition 'c'", "TensorType((), 'float32')",
                "TensorType((), 'int32')"):
        c.set_output_type(td.TensorType((), "int32"))


def test_composition_input_type_error_names_the_input_placeholder():
    c = td.Composition()
    with c.scope():
        c.output.reads(neg().reads(c.input))
    with raises(TypeError, "Composition.input:", "PyObjectType()", "TensorType"):
        c.set_input_type(td.PyObjectType())


def test_input_and_output_placeholders_have_readable_reprs():
    c = td.Composition(name="c")
    assert repr(c.input) == "<td.Composition.input 'c'>"
    assert repr(c.output) == "<td.Composition.output 'c'>"
    assert repr(td.Composition().input) == "<td.Composition.input>"


def test_nested_compositions_and_scopes():
    outer, inner = td.Composition(), td.Composition()
    with outer.scope():
        with inner.scope():
            assert current_composition() is inner
            inner.output.reads(neg().reads(td.Scalar().reads(inner.input)))
        assert current_composition() is outer
        inner.reads(outer.input)
        outer.output.reads(td.Function(tf.square).reads(inner))
    assert current_composition() is None
    assert float(outer.eval(3)) == 9.0
    assert inner.parent is outer


def test_scope_is_restored_after_an_exception():
    c = td.Composition()
    with pytest.raises(RuntimeError):
        with c.scope():
            raise RuntimeError("boom")
    assert current_composition() is None


def test_scope_is_local_to_its_thread():
    c = td.Composition()
    seen = []
    with c.scope():
        thread = threading.Thread(target=lambda: seen.append(current_composition()))
        thread.start()
        thread.join()
        assert current_composition() is c
    assert seen == [None]


def test_error_at_eval_inside_a_composition_names_the_child():
    c = td.Composition()
    with c.scope():
        x = td.InputTransform(str).reads(c.input)
        bad = fails_on_eval().reads(x)
        c.output.reads(td.Scalar().reads(bad))
    with raises(td.InputError, "Composition[1] > InputTransform", "ZeroDivisionError") as info:
        c.eval(1)
    assert info.value.block_path == "Composition[1] > InputTransform"


def test_error_inside_a_named_composition_in_a_pipe_names_both():
    c = td.Composition(name="inner")
    with c.scope():
        c.output.reads(fails_on_eval().reads(c.input))
    p = td.InputTransform(str) >> c
    with raises(td.InputError) as info:
        p.eval(1)
    assert info.value.block_path == "Composition 'inner'[0] > InputTransform"


# --- Composition: connection errors -----------------------------------------------------


def test_reads_outside_a_scope_is_an_error_naming_the_block():
    with raises(ValueError, "Scalar 'x'", "outside of a Composition scope"):
        td.Scalar(name="x").reads(td.Scalar())


def test_reading_from_the_composition_output_is_an_error():
    c = td.Composition(name="c")
    with raises(ValueError, "Composition 'c'", "cannot read from composition output"):
        with c.scope():
            td.Scalar().reads(c.output)


def test_writing_to_the_composition_input_is_an_error():
    c = td.Composition(name="c")
    with raises(ValueError, "Composition 'c'", "cannot write to composition input"):
        with c.scope():
            c.input.reads(td.Scalar())


def test_connecting_a_block_twice_is_an_error_naming_it():
    c = td.Composition()
    with raises(ValueError, "Composition[0] > Scalar 's'", "already connected"):
        with c.scope():
            s = td.Scalar(name="s").reads(c.input)
            s.reads(c.input)


def test_connecting_the_output_twice_is_an_error():
    c = td.Composition()
    with raises(ValueError, "already connected"):
        with c.scope():
            x = td.Scalar().reads(c.input)
            c.output.reads(x)
            c.output.reads(x)


def test_reading_another_compositions_input_is_an_error():
    c, other = td.Composition(name="c"), td.Composition(name="other")
    with raises(ValueError, "Composition 'c'", "<td.Composition.input 'other'>",
                "different composition"):
        with c.scope():
            td.Scalar().reads(other.input)


def test_writing_another_compositions_output_is_an_error():
    c, other = td.Composition(name="c"), td.Composition(name="other")
    with raises(ValueError, "Composition 'c'", "<td.Composition.output 'other'>",
                "different composition"):
        with c.scope():
            other.output.reads(td.Scalar().reads(c.input))


def test_a_cycle_is_an_error_at_validation():
    c = td.Composition(name="loop")
    with c.scope():
        a = td.Function(tf.negative)
        b = td.Function(tf.negative).reads(a)
        a.reads(b)
        c.output.reads(b)
    with raises(ValueError, "Composition 'loop'", "cycles"):
        c.eval(1.0)


def test_a_cycle_through_a_tuple_input_is_an_error():
    c = td.Composition()
    with c.scope():
        x = td.Scalar().reads(c.input)
        total = td.Function(tf.add)
        again = neg().reads(total)
        total.reads(x, again)
        c.output.reads(again)
    with raises(ValueError, "cycles"):
        td.validate(c)


def test_a_block_reading_itself_is_a_cycle():
    c = td.Composition()
    with c.scope():
        ident = td.Identity()
        ident.reads(ident)
        c.output.reads(ident)
    with raises(ValueError, "cycles"):
        td.validate(c)


def test_unused_outputs_are_an_error_naming_the_unused_children():
    c = td.Composition()
    with c.scope():
        x = td.Scalar().reads(c.input)
        td.Scalar("int32", name="forgotten").reads(c.input)
        c.output.reads(x)
    with raises(TypeError, "Composition", "unused outputs", "Composition[1] > Scalar 'forgotten'"):
        c.eval(1)


def test_a_composition_whose_output_is_never_wired_reports_the_unused_child():
    c = td.Composition()
    with c.scope():
        td.Scalar(name="lonely").reads(c.input)
    with raises(TypeError, "unused outputs", "Scalar 'lonely'"):
        c.eval(1)


def test_a_composition_with_a_typed_output_but_no_output_wire_is_an_error():
    c = td.Composition()
    c.set_output_type(td.TensorType(()))
    with c.scope():
        td.Metric("m").reads(td.Scalar().reads(c.input))
    with raises(TypeError, "Composition", "no output"):
        c.eval(1)


def test_void_output_children_need_not_be_read():
    c = td.Composition()
    with c.scope():
        x = td.Scalar().reads(c.input)
        td.Metric("seen").reads(x)
        c.output.reads(neg().reads(x))
    result, metrics = c.eval(2)
    assert float(result) == -2.0
    assert metrics["seen"].tolist() == [2.0]


def test_a_composition_of_only_void_outputs_outputs_void():
    c = td.Composition()
    with c.scope():
        td.Metric("m").reads(td.Scalar().reads(c.input))
    result, metrics = c.eval(3)
    assert result is None
    assert c.output_type == td.VoidType()
    assert metrics["m"].tolist() == [3.0]


# --- Pipe and >> --------------------------------------------------------------------------


def test_rshift_feeds_left_output_to_right():
    p = td.Scalar() >> td.Function(tf.square) >> neg()
    assert isinstance(p, td.Pipe)
    assert float(p.eval(3)) == -9.0
    assert p.input_type == td.PyObjectType()
    assert p.output_type == td.TensorType(())


def test_pipe_is_the_same_as_rshift():
    p = td.Pipe(td.Scalar(), td.Function(tf.square), neg())
    assert float(p.eval(3)) == -9.0
    assert repr(p) == "<td.Pipe>"


def test_pipe_evaluates_in_order_with_non_commuting_steps():
    p = td.Pipe(td.InputTransform(lambda x: x + 1), td.InputTransform(lambda x: x * 10),
                td.Scalar())
    assert float(p.eval(2)) == 30.0


def test_pipe_drops_identity_blocks():
    s, n = td.Scalar(), neg()
    p = td.Pipe(td.Identity(), s, td.Identity(), n, td.Identity())
    assert p.children == [s, n]
    assert float(p.eval(2)) == -2.0


def test_pipe_keeps_a_typed_identity():
    """A typed Identity is a constraint the user wrote: a pipe keeps it, so the
    pipe's input type is the Identity's (dropping it lost the type silently)."""
    typed = td.Identity().set_input_type(td.TensorType((2,)))
    double = td.Function(lambda x: 2 * x)
    p = td.Pipe(typed, double)
    assert p.children == [typed, double]
    assert p.input_type == td.TensorType((2,))
    assert p.eval([1.0, 2.0]).tolist() == [2.0, 4.0]
    again = td.Identity().set_output_type(td.TensorType((2,)))
    assert (again >> td.Function(abs)).input_type == td.TensorType((2,))


def test_rshift_with_identity_returns_the_other_block():
    s = td.Scalar()
    assert (s >> td.Identity()) is s
    n = neg()
    assert (td.Identity() >> n) is n


def test_empty_pipe_is_an_identity():
    p = td.Pipe()
    assert isinstance(p, td.Identity)
    assert p.eval("anything") == "anything"


def test_empty_pipe_keeps_its_name():
    p = td.Pipe(name="nothing")
    assert isinstance(p, td.Identity) and p.name == "nothing"


def test_pipe_of_only_identities_is_an_identity():
    p = td.Pipe(td.Identity(), td.Identity())
    assert isinstance(p, td.Identity)


def test_pipe_of_one_block_is_that_block():
    s = td.Scalar()
    assert td.Pipe(s) is s
    n = neg()
    assert td.Pipe(td.Identity(), n) is n


def test_named_pipe_of_one_block_keeps_the_name_in_paths():
    bad = fails_on_eval()
    p = td.Pipe(bad, name="p")
    assert isinstance(p, td.Pipe)
    with raises(td.InputError, "Pipe 'p'[0] > InputTransform"):
        p.eval(1)


def test_rshift_type_error_names_the_flat_position_of_the_third_block():
    with raises(TypeError, "Pipe[2] > Function", "PyObjectType()", "TensorType or TupleType"):
        td.InputTransform(str) >> td.InputTransform(len) >> neg()


def test_eval_error_in_the_third_block_of_a_chain_names_pipe_2():
    p = td.InputTransform(str) >> td.InputTransform(len) >> td.InputTransform(
        lambda n: 1 / (n - 1))
    with raises(td.InputError, "ZeroDivisionError") as info:
        p.eval(7)
    assert info.value.block_path == "Pipe[2] > InputTransform"


def test_blocks_of_a_long_chain_have_flat_paths():
    blocks = [td.InputTransform(str) for i in range(5)]
    p = blocks[0] >> blocks[1] >> blocks[2] >> blocks[3] >> blocks[4]
    assert [b.path for b in blocks] == [f"Pipe[{i}] > InputTransform" for i in range(5)]
    assert p.path == "Pipe"


def test_a_named_block_in_a_pipe_is_named_without_its_position():
    named = [td.InputTransform(str, name=str(i)) for i in range(3)]
    unnamed = td.InputTransform(str)
    named[0] >> unnamed >> named[1] >> named[2]
    assert [b.path for b in named] == [f"InputTransform '{i}'" for i in range(3)]
    assert unnamed.path == "Pipe[1] > InputTransform"
    inner = td.InputTransform(str, name="inner")
    outer = td.Pipe(td.InputTransform(str), inner >> td.InputTransform(len), name="enc")
    assert inner.path == "Pipe 'enc'[1] > InputTransform 'inner'"  # a named pipe shows
    assert outer.path == "Pipe 'enc'"


def test_flat_paths_inside_another_block():
    elem = td.InputTransform(str) >> td.InputTransform(len) >> fails_on_eval()
    m = td.Map(elem)
    with raises(td.InputError) as info:
        m.eval([1])
    assert info.value.block_path == "Map > Pipe[2] > InputTransform"


def test_explicit_pipes_nest_in_paths():
    inner = td.Pipe(td.InputTransform(str), fails_on_eval())
    outer = td.Pipe(inner, td.Scalar())
    with raises(td.InputError) as info:
        outer.eval(1)
    assert info.value.block_path == "Pipe[0] > Pipe[1] > InputTransform"


def test_tuple_on_the_left_of_rshift_is_a_record():
    p = (td.Scalar(), td.Scalar()) >> td.Function(tf.subtract)
    assert float(p.eval((10, 4))) == 6.0


def test_dict_on_the_left_of_rshift_is_a_record_sorted_by_key():
    p = {"b": td.Scalar(), "a": td.Scalar()} >> td.Function(tf.subtract)
    assert float(p.eval({"a": 10, "b": 4})) == 6.0  # a - b


def test_list_of_blocks_on_the_left_of_rshift_is_an_ordered_record():
    p = [td.Scalar(), td.Scalar()] >> td.Function(tf.subtract)
    assert float(p.eval([10, 4])) == 6.0


def test_list_of_pairs_on_the_left_of_rshift_keeps_its_order():
    p = [("b", td.Scalar()), ("a", td.Scalar())] >> td.Function(tf.subtract)
    assert float(p.eval({"a": 10, "b": 4})) == -6.0  # b - a


def test_numpy_array_on_the_left_of_rshift_is_a_constant():
    p = np.array([1.0, 2.0], "float32") >> neg()
    np.testing.assert_array_equal(p.eval(None), [-1.0, -2.0])
    assert p.input_type == td.VoidType()


def test_tensor_on_the_left_of_rshift_is_a_constant():
    p = tf.constant([1, 2]) >> td.Function(tf.negative)
    np.testing.assert_array_equal(p.eval(None), [-1, -2])


def test_variable_on_the_left_of_rshift_is_a_constant():
    v = tf.Variable([3.0, 4.0])
    p = v >> neg()
    np.testing.assert_array_equal(p.eval(None), [-3.0, -4.0])


def test_tuple_on_the_right_of_rshift_is_a_record():
    p = td.InputTransform(lambda x: (x, 2 * x)) >> (td.Scalar(), td.Scalar("int32"))
    first, second = p.eval(3)
    assert float(first) == 3.0 and int(second) == 6


def test_dict_on_the_right_of_rshift_is_a_record_sorted_by_key():
    p = td.InputTransform(lambda x: {"q": x, "p": -x}) >> {"q": td.Scalar(), "p": td.Scalar()}
    assert [float(v) for v in p.eval(3)] == [-3.0, 3.0]


def test_list_on_the_right_of_rshift_is_an_ordered_record():
    p = td.InputTransform(lambda x: [x, x + 1]) >> [td.Scalar(), td.Scalar()]
    assert [float(v) for v in p.eval(3)] == [3.0, 4.0]


def test_array_on_the_right_of_rshift_is_a_constant():
    p = td.Void() >> np.array([5.0, 6.0], "float32")
    np.testing.assert_array_equal(p.eval(1), [5.0, 6.0])


def test_tensor_on_the_right_of_rshift_is_a_constant():
    p = td.Void() >> tf.constant([5, 6])
    np.testing.assert_array_equal(p.eval(1), [5, 6])


def test_constant_on_the_right_of_a_tensor_block_is_a_type_error():
    with raises(TypeError, "Pipe[1] > FromTensor", "VoidType()", "TensorType((), 'float32')"):
        td.Scalar() >> np.ones(2, "float32")


def test_layer_on_either_side_of_rshift_is_a_function():
    fc = td.FC(3)
    p = td.Vector(2) >> fc
    assert p.output_type == td.TensorType((3,))
    assert p.eval([1, 2]).shape == (3,)


def test_non_block_on_the_left_of_rshift_is_a_type_error():
    with raises(TypeError, "3 cannot be converted to a block"):
        3 >> td.Scalar()


def test_non_block_on_the_right_of_rshift_is_a_type_error():
    with raises(TypeError, "'abc' cannot be converted to a block"):
        td.Scalar() >> "abc"


# --- Record --------------------------------------------------------------------------------


def test_dict_record_is_sorted_by_key():
    r = td.Record({"b": td.Scalar("int32"), "a": td.Scalar(), "c": td.Vector(2)})
    assert r.keys == ["a", "b", "c"]
    assert repr(r) == "<td.Record ordered=False>"
    assert r.output_type == td.TupleType(td.TensorType(()), td.TensorType((), "int32"),
                                         td.TensorType((2,)))
    a, b, c = r.eval({"c": [3, 4], "b": 2, "a": 1, "extra": "ignored"})
    assert float(a) == 1.0 and int(b) == 2 and c.tolist() == [3.0, 4.0]


def test_ordered_dict_record_keeps_its_order():
    r = td.Record(OrderedDict([("b", td.Scalar("int32")), ("a", td.Scalar())]))
    assert r.keys == ["b", "a"]
    assert repr(r) == "<td.Record ordered=True>"
    b, a = r.eval({"a": 1, "b": 2})
    assert int(b) == 2 and float(a) == 1.0


def test_list_of_pairs_record_keeps_its_order():
    r = td.Record([("b", td.Scalar("int32")), ("a", td.Scalar())])
    assert r.keys == ["b", "a"]
    assert r.output_type == td.TupleType(td.TensorType((), "int32"), td.TensorType(()))


def test_tuple_record_has_keys_zero_to_n():
    r = td.Record((td.Scalar("int32"), td.Scalar()))
    assert r.keys == [0, 1]
    first, second = r.eval([1, 2])
    assert int(first) == 1 and float(second) == 2.0


def test_list_of_blocks_record_has_keys_zero_to_n():
    r = td.Record([td.Scalar(), td.Scalar("int32")])
    assert r.keys == [0, 1]


def test_record_types_are_known_at_construction():
    r = td.Record({"x": td.Scalar(), "y": td.Vector(3, "int32")})
    assert r.input_type == td.PyObjectType()
    assert r.output_type == td.TupleType(td.TensorType(()), td.TensorType((3,), "int32"))


def test_record_with_a_tuple_input_gives_each_child_its_item():
    r = td.Record((neg(), td.Function(tf.square)))
    p = (td.Scalar(), td.Scalar()) >> r
    assert r.input_type == td.TupleType(td.TensorType(()), td.TensorType(()))
    assert [float(v) for v in p.eval((2, 3))] == [-2.0, 9.0]


def test_record_output_type_pushes_down_to_children():
    r = td.Record((td.Identity(), td.Identity()))
    r.set_output_type((td.TensorType(()), td.TensorType((2,), "int32")))
    assert r.children[1].output_type == td.TensorType((2,), "int32")
    assert r.children[1].input_type == td.TensorType((2,), "int32")


def test_record_output_type_of_the_wrong_length_is_an_error():
    r = td.Record((td.Identity(), td.Identity()), name="r")
    with raises(TypeError, "Record 'r'", "2 children", "3 items"):
        r.set_output_type((td.TensorType(()),) * 3)


def test_unordered_record_given_a_tuple_input_is_an_error():
    r = td.Record({"x": neg(), "y": td.Function(tf.square)})
    with raises(TypeError, "Pipe[1] > Record", "unordered dict", "OrderedDict"):
        (td.Scalar(), td.Scalar()) >> r


def test_record_arity_mismatch_with_its_tuple_input_is_an_error():
    r = td.Record((neg(), td.Function(tf.square)))
    with raises(TypeError, "Pipe[1] > Record", "2 children but 3 inputs"):
        (td.Scalar(), td.Scalar(), td.Scalar()) >> r


def test_record_of_python_objects_given_a_tuple_of_tensors_is_an_error():
    with raises(TypeError, "Pipe[1] > Record", "PyObjectType()", "TupleType("):
        td.AllOf(td.Scalar(), td.Scalar()) >> td.Record((td.Scalar(), td.Scalar()))


def test_record_missing_key_at_eval_names_the_child_slot():
    r = td.Record({"left": td.Scalar(), "right": td.Scalar()})
    with raises(td.InputKeyError, "Record['left']", "missing key 'left'", "'right'") as info:
        r.eval({"right": 1})
    assert isinstance(info.value, KeyError)
    assert info.value.block_path == "Record['left']"


def test_record_missing_key_in_a_nested_record_names_the_whole_path():
    r = td.InputTransform(dict) >> td.Record({"left": td.Record({"x": td.Scalar()}),
                                              "right": td.Scalar()})
    with raises(td.InputKeyError, "missing key 'x'") as info:
        r.eval({"left": {"y": 1}, "right": 1})
    assert info.value.block_path == "Pipe[1] > Record['left'] > Record['x']"


def test_tuple_record_given_too_short_an_input_names_the_missing_index():
    r = td.Record((td.Scalar(), td.Scalar()))
    with raises(td.InputKeyError, "Record[1]", "missing key 1"):
        r.eval([1])


def test_tuple_record_refuses_a_longer_tuple_saying_expected_and_got():
    r = td.Record((td.Scalar(), td.Scalar()))
    with raises(td.InputError, "Record", "expected a tuple of 2 items (one per field), "
                                         "got 3: (1.0, 2.0, 3.0)"):
        r.eval((1.0, 2.0, 3.0))
    with raises(td.InputError, "Record", "expected a list of 2 items"):
        td.Record([td.Scalar(), td.Scalar()]).eval([1.0, 2.0, 3.0])
    with raises(td.InputKeyError, "Record[1]", "missing key 1: the input has 1 items, "
                                               "expected 2"):
        r.eval((1.0,))


def test_record_with_explicit_keys_takes_those_items_of_a_longer_input():
    r = td.Record([(0, td.Scalar()), (2, td.Scalar())])
    assert [float(v) for v in r.eval((1.0, 2.0, 3.0))] == [1.0, 3.0]


def test_record_error_in_a_child_names_the_key():
    r = td.Record({"a": td.Scalar(), "b": fails_on_eval()})
    with raises(td.InputError) as info:
        r.eval({"a": 1, "b": 2})
    assert info.value.block_path == "Record['b'] > InputTransform"


def test_record_wires_by_key():
    c = td.Composition()
    with c.scope():
        r = td.Record({"x": td.Scalar(), "y": td.Scalar("int32")}).reads(c.input)
        c.output.reads(r["y"], r["x"])
    y, x = c.eval({"x": 1, "y": 2})
    assert int(y) == 2 and float(x) == 1.0


def test_record_wires_by_key_not_by_position_for_integer_keys():
    c = td.Composition()
    with c.scope():
        r = td.Record([(1, td.Scalar("int32")), (0, td.Scalar())]).reads(c.input)
        c.output.reads(r[0])
    assert c.output_type == td.TensorType(())
    assert float(c.eval({0: 5, 1: 6})) == 5.0


def test_record_wire_with_an_unknown_key_is_a_key_error_naming_the_record():
    r = td.Record({"x": td.Scalar()})
    with raises(KeyError, "Record", "no child named 'z'", "['x']"):
        r["z"]


def test_record_slice_reads_a_getitem_of_the_record_output():
    c = td.Composition()
    with c.scope():
        r = td.Record({"a": td.Scalar(), "b": td.Scalar("int32"), "c": td.Scalar("int64")})
        r.reads(c.input)
        c.output.reads(r[1:])
    b, c_ = c.eval({"a": 1, "b": 2, "c": 3})
    assert (b.dtype, int(b), c_.dtype, int(c_)) == (np.int32, 2, np.int64, 3)


def test_record_keys_must_be_unique():
    with raises(ValueError, "unique"):
        td.Record([("a", td.Scalar()), ("a", td.Scalar())])


def test_record_rejects_a_block_as_its_argument():
    with raises(TypeError, "Record takes a dict"):
        td.Record(td.Scalar())


def test_record_children_may_be_block_like():
    r = td.Record({"pair": (td.Scalar(), td.Scalar("int32"))})
    ((a, b),) = r.eval({"pair": (1, 2)})
    assert float(a) == 1.0 and int(b) == 2


# --- AllOf ---------------------------------------------------------------------------------


def test_allof_of_no_blocks_is_void():
    v = td.AllOf()
    assert isinstance(v, td.Void)
    assert v.output_type == td.VoidType()
    assert v.eval(42) is None


def test_allof_of_no_blocks_keeps_its_name():
    assert td.AllOf(name="v").name == "v"


def test_allof_of_one_block_outputs_a_one_tuple():
    a = td.AllOf(neg())
    p = td.Scalar() >> a
    assert a.output_type == td.TupleType(td.TensorType(()))
    result = p.eval(2)
    assert isinstance(result, tuple) and len(result) == 1 and float(result[0]) == -2.0


def test_allof_runs_every_block_on_the_same_input():
    a = td.AllOf(td.Length(), td.InputTransform(sorted), td.GetItem(0) >> td.Scalar())
    length, ordered, first = a.eval([3, 1, 2])
    assert float(length) == 3.0 and ordered == [1, 2, 3] and float(first) == 3.0
    assert a.output_type == td.TupleType(td.TensorType(()), td.PyObjectType(),
                                         td.TensorType(()))


def test_allof_input_type_agrees_across_blocks():
    a = td.AllOf(neg(), td.Function(tf.square))
    td.Vector(2) >> a
    assert a.children[1].input_type == td.TensorType((2,))


def test_allof_blocks_with_different_input_types_is_a_type_error():
    with raises(TypeError, "AllOf[1] > Function", "PyObjectType()"):
        td.AllOf(td.Scalar(), neg())


def test_allof_does_not_wire_constants_to_the_input():
    const = td.FromTensor(np.array([1.0, 2.0], "float32"))
    a = td.AllOf(td.Scalar(), const, td.Zeros(td.TensorType((3,))))
    assert a.input_type == td.PyObjectType()
    assert const.input_type == td.VoidType()
    value, c, zeros = a.eval(4)
    assert float(value) == 4.0 and c.tolist() == [1.0, 2.0] and zeros.tolist() == [0.0] * 3


def test_allof_of_only_constants_ignores_its_input():
    a = td.AllOf(np.array(1.0, "float32"), np.array(2.0, "float32"))
    assert [float(v) for v in a.eval("ignored")] == [1.0, 2.0]


def test_allof_error_names_the_position():
    a = td.AllOf(td.Scalar(), fails_on_eval())
    with raises(td.InputError) as info:
        a.eval(1)
    assert info.value.block_path == "AllOf[1] > InputTransform"


# --- convert_to_block ----------------------------------------------------------------------


def test_convert_to_block_returns_blocks_unchanged():
    s = td.Scalar()
    assert td.convert_to_block(s) is s


def test_convert_to_block_turns_containers_into_records():
    assert isinstance(td.convert_to_block((td.Scalar(),)), td.Record)
    assert isinstance(td.convert_to_block([td.Scalar()]), td.Record)
    assert td.convert_to_block({"b": td.Scalar(), "a": td.Scalar()}).keys == ["a", "b"]
    od = OrderedDict([("b", td.Scalar()), ("a", td.Scalar())])
    assert td.convert_to_block(od).keys == ["b", "a"]


def test_convert_to_block_turns_tensors_into_constants():
    for value in (np.ones(2, "float32"), tf.ones([2]), tf.Variable(tf.ones([2]))):
        block = td.convert_to_block(value)
        assert isinstance(block, td.FromTensor)
        assert block.output_type == td.TensorType((2,))


def test_convert_to_block_turns_layers_into_functions():
    block = td.convert_to_block(td.FC(4))
    assert isinstance(block, td.Function)


@pytest.mark.parametrize("value", [3, 2.5, "abc", None, object(), tf.negative])
def test_convert_to_block_rejects_other_values(value):
    with raises(TypeError, "cannot be converted to a block"):
        td.convert_to_block(value)


def test_convert_to_block_rejects_a_container_with_a_bad_item():
    with raises(TypeError, "3 cannot be converted to a block"):
        td.convert_to_block({"a": td.Scalar(), "b": 3})


# --- the one-parent rule ----------------------------------------------------------------


def _assert_reuse_error(info, block, parent_repr):
    message = str(info.value)
    assert repr(block) in message
    assert parent_repr in message
    assert "one place" in message


def test_block_used_in_two_maps_is_a_type_error_naming_it():
    s = td.Scalar(name="shared")
    td.Map(s)
    with pytest.raises(TypeError) as info:
        td.Map(s)
    _assert_reuse_error(info, s, "<td.Map>")
    assert "Map > Scalar 'shared'" in str(info.value)


def test_block_used_in_two_pipes_is_a_type_error():
    s = td.Scalar(name="shared")
    s >> neg()
    with pytest.raises(TypeError) as info:
        s >> neg()
    _assert_reuse_error(info, s, "<td.Pipe>")


def test_block_used_in_two_compositions_is_a_type_error():
    f = td.Function(tf.negative, name="f")
    c = td.Composition()
    with c.scope():
        f.reads(c.input)
    other = td.Composition()
    with pytest.raises(TypeError) as info:
        with other.scope():
            td.Function(tf.negative).reads(f)
    _assert_reuse_error(info, f, "<td.Composition>")


def test_block_used_twice_in_one_allof_is_a_type_error():
    f = td.Function(tf.negative, name="f")
    with pytest.raises(TypeError) as info:
        td.AllOf(f, f)
    _assert_reuse_error(info, f, "<td.AllOf>")


def test_block_used_twice_in_one_record_is_a_type_error():
    f = td.Scalar(name="s")
    with pytest.raises(TypeError) as info:
        td.Record((f, f))
    _assert_reuse_error(info, f, "<td.Record")


def test_block_used_twice_in_one_pipe_is_a_type_error():
    f = td.InputTransform(str, name="f")
    with pytest.raises(TypeError) as info:
        td.Pipe(f, f)
    _assert_reuse_error(info, f, "<td.Pipe>")


def test_failed_reuse_does_not_steal_the_block():
    s = td.Scalar()
    m = td.Map(s)
    with pytest.raises(TypeError):
        td.Record((s,))
    assert s.parent is m


def test_weights_are_shared_through_a_layer_used_by_two_blocks():
    fc = td.FC(2)
    p = (td.Vector(2) >> td.Function(fc), td.Vector(2) >> td.Function(fc))
    both = td.Record(p)
    first, second = both.eval(([1, 2], [1, 2]))
    np.testing.assert_allclose(first, second)
