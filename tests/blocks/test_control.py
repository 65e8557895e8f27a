"""Tests for `blocks.control`: OneOf, Optional, ForwardDeclaration and recursion,
including inputs nested far deeper than Python's recursion limit."""

import functools
import inspect
import sys

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import refold as td
from refold.blocks.evaluation.contexts import reference_eval
from tests.blocks.helpers import fails_on_eval, neg, raises

SCALAR = td.TensorType(())


# --- OneOf ---------------------------------------------------------------------------------


def test_oneof_with_a_callable_key_runs_the_chosen_case():
    block = td.OneOf(lambda x: x["kind"], {
        "keep": td.GetItem("v") >> td.Scalar(),
        "negate": td.GetItem("v") >> td.Scalar() >> neg(),
    })
    assert float(block.eval({"kind": "keep", "v": 3})) == 3.0
    assert float(block.eval({"kind": "negate", "v": 3})) == -3.0
    assert block.output_type == SCALAR


def test_oneof_with_a_block_key_runs_the_chosen_case():
    key = td.GetItem("kind")
    block = td.OneOf(key, {"a": td.GetItem("a") >> td.Scalar(),
                           "b": td.GetItem("b") >> td.Scalar()})
    assert key.output_type == td.PyObjectType()
    assert float(block.eval({"kind": "b", "a": 1, "b": 2})) == 2.0
    assert float(block.eval({"kind": "a", "a": 1, "b": 2})) == 1.0


def test_oneof_runs_only_the_chosen_case():
    block = td.OneOf(lambda x: x > 0, {True: td.Scalar(), False: fails_on_eval() >> td.Scalar()})
    assert float(block.eval(5)) == 5.0
    with pytest.raises(td.InputError):
        block.eval(-5)


def test_oneof_with_a_tuple_of_cases_uses_positions_as_keys():
    block = td.OneOf(len, (td.Void() >> td.Zeros(SCALAR),
                           td.GetItem(0) >> td.Scalar(),
                           td.InputTransform(sum) >> td.Scalar()))
    assert set(block.case_blocks) == {0, 1, 2}
    assert float(block.eval([])) == 0.0
    assert float(block.eval([7])) == 7.0
    assert float(block.eval([3, 4])) == 7.0


def test_oneof_with_a_list_of_pairs():
    block = td.OneOf(lambda x: x >= 0, [(True, td.Scalar()),
                                        (False, td.Scalar() >> td.Function(tf.square))])
    assert float(block.eval(3)) == 3.0
    assert float(block.eval(-3)) == 9.0


def test_oneof_pre_block_output_is_what_the_case_reads():
    block = td.OneOf(lambda xs: min(len(xs), 2),
                     (td.Void() >> td.Zeros(SCALAR), td.GetItem(0), td.Sum()),
                     pre_block=td.Map(td.Scalar()))
    assert block.output_type == SCALAR
    assert block.case_blocks[2].input_type == td.SequenceType(SCALAR)
    assert float(block.eval([])) == 0.0
    assert float(block.eval([4])) == 4.0
    assert float(block.eval([4, 5, 6])) == 15.0


def test_oneof_key_fn_sees_the_raw_input_not_the_pre_block_output():
    seen = []

    def key(x):
        seen.append(x)
        return 0

    block = td.OneOf(key, (td.Identity(),), pre_block=td.InputTransform(lambda x: x * 10)
                     >> td.Scalar())
    assert float(block.eval(2)) == 20.0
    assert seen == [2]


def test_oneof_case_output_types_must_agree():
    with raises(TypeError, "OneOf[1] > Scalar", "output type mismatch with the other cases: "
                "expected float32, got int32; the other cases output TensorType((), "
                "'float32'), this one TensorType((), 'int32')"):
        td.OneOf(lambda x: x, {0: td.Scalar(), 1: td.Scalar("int32")})


def test_oneof_case_output_shapes_must_agree():
    with raises(TypeError, "OneOf['vec'] > Vector", "TensorType((), 'float32')",
                "TensorType((2,), 'float32')"):
        td.OneOf(lambda x: x, [("scalar", td.Scalar()), ("vec", td.Vector(2))])


def test_oneof_case_input_types_must_agree():
    with raises(TypeError, "OneOf[1] > Function", "PyObjectType()"):
        td.OneOf(lambda x: x, {0: td.Scalar(), 1: neg()})


def test_oneof_output_type_flows_to_every_case():
    block = td.OneOf(lambda x: x, {0: td.Identity(), 1: td.Identity()})
    block.set_output_type(td.TensorType((3,)))
    assert all(c.output_type == td.TensorType((3,)) for c in block.case_blocks.values())


def test_oneof_unknown_key_at_eval_is_an_input_key_error_naming_the_path():
    block = td.InputTransform(abs) >> td.OneOf(lambda x: x, {0: td.Scalar(), 1: td.Scalar()})
    with raises(td.InputKeyError, "Pipe[1] > OneOf", "7", "[0, 1]") as info:
        block.eval(-7)
    assert info.value.block_path == "Pipe[1] > OneOf"
    assert isinstance(info.value, KeyError)


def test_oneof_unhashable_key_at_eval_is_an_input_key_error():
    block = td.OneOf(lambda x: x, {0: td.Scalar()})
    with raises(td.InputKeyError, "OneOf", "[1]"):
        block.eval([1])


def test_oneof_error_in_the_key_block_names_it():
    block = td.OneOf(td.GetItem("kind"), {"a": td.GetItem("a") >> td.Scalar()})
    with raises(td.InputError, "missing key 'kind'") as info:
        block.eval({"a": 1})
    assert info.value.block_path == "OneOf.key_fn > GetItem('kind')"


def test_oneof_error_in_a_case_names_the_case_key():
    block = td.OneOf(lambda x: "bad", {"bad": fails_on_eval() >> td.Scalar()})
    with raises(td.InputError) as info:
        block.eval(1)
    assert info.value.block_path == "OneOf['bad'] > Pipe[0] > InputTransform"


def test_oneof_error_in_the_pre_block_names_it():
    block = td.OneOf(lambda x: 0, (td.Scalar(),), pre_block=fails_on_eval())
    with raises(td.InputError) as info:
        block.eval(1)
    assert info.value.block_path == "OneOf.pre_block > InputTransform"


def test_oneof_needs_at_least_one_case():
    with raises(ValueError, "non-empty"):
        td.OneOf(lambda x: x, {})


def test_oneof_key_fn_must_be_callable_or_a_block():
    with raises(TypeError, "key_fn is not callable", "3"):
        td.OneOf(3, {0: td.Scalar()})


def test_oneof_case_keys_must_be_hashable():
    with raises(TypeError, "hashable", "[1]"):
        td.OneOf(len, [([1], td.Scalar())])


# --- Optional ------------------------------------------------------------------------------


def test_optional_none_gives_zeros_of_the_output_type():
    block = td.Optional(td.Vector(3))
    np.testing.assert_array_equal(block.eval(None), [0.0, 0.0, 0.0])
    assert block.eval(None).dtype == np.float32


def test_optional_value_goes_to_some_case():
    block = td.Optional(td.Vector(3, "int32"))
    assert block.eval([1, 2, 3]).tolist() == [1, 2, 3]


def test_optional_treats_only_none_as_missing():
    block = td.Optional(td.InputTransform(lambda x: x + 1 if x is not None else 1 / 0)
                        >> td.Scalar())
    assert float(block.eval(0)) == 1.0
    assert float(block.eval(False)) == 1.0


def test_optional_none_case_runs_for_none():
    block = td.Optional(td.Vector(3), td.FromTensor(np.array([7.0, 8.0, 9.0], "float32")))
    assert block.eval(None).tolist() == [7.0, 8.0, 9.0]
    assert block.eval([1, 2, 3]).tolist() == [1.0, 2.0, 3.0]


def test_optional_default_for_a_tuple_is_a_tuple_of_zeros():
    block = td.Optional((td.Scalar(), td.Vector(2, "int32")))
    a, b = block.eval(None)
    assert float(a) == 0.0 and b.tolist() == [0, 0] and b.dtype == np.int32


def test_optional_default_for_a_sequence_is_empty():
    block = td.Optional(td.Map(td.Scalar()))
    assert block.eval(None) == []
    assert [float(v) for v in block.eval([1, 2])] == [1.0, 2.0]


def test_optional_input_is_a_python_object():
    block = td.Optional(td.Scalar())
    assert block.input_type == td.PyObjectType()
    assert block.output_type == SCALAR


def test_optional_none_case_gets_a_void_input():
    with raises(TypeError, "Optional.none_case > Scalar", "VoidType()", "PyObjectType()"):
        td.Optional(td.Scalar(), td.Scalar())


def test_optional_cases_must_agree_on_the_output_type():
    with raises(TypeError, "Optional.none_case > FromTensor", "TensorType((2,), 'float32')",
                "TensorType((), 'float32')"):
        td.Optional(td.Scalar(), td.FromTensor(np.zeros(2, "float32")))


def test_optional_error_in_some_case_names_it():
    block = td.Optional(fails_on_eval() >> td.Scalar())
    with raises(td.InputError) as info:
        block.eval(1)
    assert info.value.block_path == "Optional.some_case > Pipe[0] > InputTransform"


def test_optional_inside_a_record_handles_missing_fields():
    block = td.Record({"x": td.Optional(td.Scalar()), "y": td.Scalar()})
    x, y = block.eval({"x": None, "y": 2})
    assert float(x) == 0.0 and float(y) == 2.0


# --- ForwardDeclaration: definitions ----------------------------------------------------


def _tree_sum():
    """Sums the leaves of a binary tree of numbers given as nested pairs."""
    total = td.ForwardDeclaration(td.PyObjectType(), SCALAR, name="total")
    node = td.Record((total(), total())) >> td.Function(tf.add)
    total.resolve_to(td.OneOf(lambda x: isinstance(x, tuple), {False: td.Scalar(), True: node}))
    return total


def test_recursive_sum_over_a_tree():
    total = _tree_sum()
    assert float(total().eval(((1, 2), (3, (4, 5))))) == 15.0
    assert float(total().eval(7)) == 7.0


def test_references_made_before_and_after_resolve_to_evaluate_the_target():
    decl = td.ForwardDeclaration(td.PyObjectType(), SCALAR)
    before = decl()
    decl.resolve_to(td.Scalar() >> td.Function(tf.square))
    after = decl()
    assert float(before.eval(3)) == 9.0
    assert float(after.eval(4)) == 16.0
    assert float((td.Map(decl()) >> td.Sum()).eval([1, 2])) == 5.0


def test_types_flow_from_the_target_to_the_declaration_and_its_references():
    decl = td.ForwardDeclaration()
    before = decl()
    decl.resolve_to(td.Scalar("int32"))
    after = decl()
    for io in (decl, before, after):
        assert io.input_type == td.PyObjectType()
        assert io.output_type == td.TensorType((), "int32")


def test_types_flow_from_a_reference_to_the_declaration_and_the_target():
    decl = td.ForwardDeclaration()
    ref = decl()
    pipe = td.Vector(2) >> ref
    assert decl.input_type == td.TensorType((2,))
    target = neg()
    decl.resolve_to(target)
    assert target.input_type == td.TensorType((2,))
    assert decl.output_type == td.TensorType((2,))
    assert ref.output_type == td.TensorType((2,))
    assert pipe.output_type == td.TensorType((2,))
    assert pipe.eval([1, 2]).tolist() == [-1.0, -2.0]


def test_output_type_from_a_reading_block_flows_back_to_the_target():
    int64 = td.TensorType((), "int64")
    decl = td.ForwardDeclaration(int64)
    reader = td.Function(tf.square).set_input_type(int64)
    td.Scalar("int64") >> decl() >> reader
    assert decl.output_type == int64
    target = td.Function(tf.negative, infer_output_type=False)  # learns its output type
    decl.resolve_to(target)
    assert target.output_type == int64


def test_declared_types_flow_to_references_and_target():
    decl = td.ForwardDeclaration(td.TensorType((3,)), td.TensorType((3,)))
    ref = decl()
    target = td.Identity()
    decl.resolve_to(target)
    assert ref.input_type == td.TensorType((3,))
    assert target.input_type == td.TensorType((3,))
    assert target.output_type == td.TensorType((3,))


def test_target_type_that_disagrees_with_the_declaration_is_a_type_error():
    decl = td.ForwardDeclaration(td.PyObjectType(), SCALAR)
    with raises(TypeError, "ForwardDeclaration > Vector", "TensorType((2,), 'float32')",
                "TensorType((), 'float32')"):
        decl.resolve_to(td.Vector(2))


def test_reference_used_where_its_type_does_not_fit_is_a_type_error():
    decl = td.ForwardDeclaration(td.PyObjectType(), SCALAR)
    with raises(TypeError, "Pipe[1] > Map", "TensorType((), 'float32')"):
        decl() >> td.Map(td.Scalar())


def test_never_resolved_declaration_is_an_error_naming_the_reference():
    decl = td.ForwardDeclaration(td.PyObjectType(), SCALAR, name="later")
    block = td.Map(decl())
    with raises(TypeError, "Map > ForwardDeclaration 'later'()", "never resolved"):
        block.eval([1])


def test_resolving_twice_is_an_error():
    decl = td.ForwardDeclaration(td.PyObjectType(), SCALAR, name="d")
    decl.resolve_to(td.Scalar())
    with raises(ValueError, "ForwardDeclaration 'd'", "already been resolved"):
        decl.resolve_to(td.Scalar())


def test_a_block_cannot_resolve_two_declarations():
    target = td.Scalar()
    td.ForwardDeclaration().resolve_to(target)
    with raises(TypeError, repr(target), "already resolves"):
        td.ForwardDeclaration().resolve_to(target)


def test_resolve_to_accepts_block_like_values():
    decl = td.ForwardDeclaration()
    decl.resolve_to((td.Scalar(), td.Scalar("int32")))
    assert isinstance(decl.target, td.Record)
    a, b = decl().eval((1, 2))
    assert float(a) == 1.0 and int(b) == 2


def test_declaration_and_reference_reprs_and_paths():
    decl = td.ForwardDeclaration(name="expr")
    ref = decl()
    assert repr(decl) == "<td.ForwardDeclaration 'expr'>"
    assert repr(ref) == "<td.ForwardDeclaration() 'expr'>"
    assert ref.is_forward_declaration_ref()
    assert ref.declaration is decl
    td.Map(ref)
    assert ref.path == "Map > ForwardDeclaration 'expr'()"


def test_error_deep_in_a_recursion_names_the_path_through_the_declaration():
    total = _tree_sum()
    with raises(td.InputError, "'x'") as info:
        total().eval(((1, 2), (3, ("x", 5))))
    assert info.value.block_path == "ForwardDeclaration 'total' > OneOf[False] > Scalar"


def test_mutually_recursive_declarations():
    # even(t) counts the leaves at even depth; odd(t) those at odd depth.
    even = td.ForwardDeclaration(td.PyObjectType(), SCALAR)
    odd = td.ForwardDeclaration(td.PyObjectType(), SCALAR)
    one = td.Void() >> td.FromTensor(np.array(1.0, "float32"))
    zero = td.Void() >> td.Zeros(SCALAR)
    even.resolve_to(td.OneOf(lambda t: isinstance(t, list), {
        False: one, True: td.Map(odd()) >> td.Sum()}))
    odd.resolve_to(td.OneOf(lambda t: isinstance(t, list), {
        False: zero, True: td.Map(even()) >> td.Sum()}))
    tree = [1, [2, [3, 4]], 5]  # leaves at depth 1, 2, 3, 3, 1
    assert float(odd().eval(tree)) == 4.0
    assert float(even().eval(tree)) == 1.0
    assert float(even().eval(7)) == 1.0 and float(odd().eval(7)) == 0.0


# --- ForwardDeclaration: recursion over random trees against a Python oracle --------------


def _kind(tree):
    if isinstance(tree, tuple):
        return "pair"
    if isinstance(tree, dict):
        return "unary"
    if isinstance(tree, list):
        return "list"
    return "leaf"


@functools.cache
def _calculator():
    """A model over trees: a number, (a, b) for a - b, {'op', 'arg'}, or a list to sum."""
    expr = td.ForwardDeclaration(td.PyObjectType(), SCALAR, name="expr")
    pair = td.Record((expr(), expr())) >> td.Function(tf.subtract)
    unary = td.OneOf(td.GetItem("op"), {
        "neg": td.GetItem("arg") >> expr() >> neg(),
        "double": td.GetItem("arg") >> expr() >> td.Function(lambda x: 2.0 * x),
    })
    total = td.Map(expr()) >> td.Sum()
    expr.resolve_to(td.OneOf(_kind, {"leaf": td.Scalar(), "pair": pair, "unary": unary,
                                     "list": total}))
    return expr()


def _python_value(tree):
    kind = _kind(tree)
    if kind == "leaf":
        return float(tree)
    if kind == "pair":
        return _python_value(tree[0]) - _python_value(tree[1])
    if kind == "unary":
        arg = _python_value(tree["arg"])
        return -arg if tree["op"] == "neg" else 2.0 * arg
    return sum(_python_value(t) for t in tree)


def _python_depth(tree):
    """Op layers, Fold's way: constants at 0, an op at 1 + its deepest input."""
    kind = _kind(tree)
    if kind == "leaf":
        return 0
    if kind == "pair":
        return 1 + max(_python_depth(tree[0]), _python_depth(tree[1]))
    if kind == "unary":
        return 1 + _python_depth(tree["arg"])
    depths = [_python_depth(t) for t in tree]
    if not depths:
        return 0
    while len(depths) > 1:  # Reduce pairs neighbours, carrying an odd last one over
        paired = [1 + max(a, b) for a, b in zip(depths[::2], depths[1::2])]
        depths = paired + depths[len(paired) * 2:]
    return depths[0]


_trees = st.recursive(
    st.integers(-9, 9),
    lambda sub: st.one_of(
        st.tuples(sub, sub),
        st.fixed_dictionaries({"op": st.sampled_from(["neg", "double"]), "arg": sub}),
        st.lists(sub, max_size=4),
    ),
    max_leaves=16,
)

_tree_settings = settings(max_examples=40, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])


@_tree_settings
@given(_trees)
def test_recursive_model_matches_python_on_random_trees(tree):
    model = _calculator()
    expected = _python_value(tree)
    np.testing.assert_allclose(float(model.eval(tree)), expected, rtol=1e-6)
    np.testing.assert_allclose(float(reference_eval(model, tree)), expected, rtol=1e-6)


@_tree_settings
@given(_trees)
def test_recursive_model_depth_matches_python_on_random_trees(tree):
    assert _calculator().max_depth(tree) == _python_depth(tree)


def test_calculator_oracle_on_a_fixed_tree():
    tree = (5, [1, {"op": "double", "arg": (4, 1)}, {"op": "neg", "arg": 2}])  # 5 - (1+6-2)
    assert float(_calculator().eval(tree)) == 0.0
    # list items at depths 0, 2, 1: reduced as (0, 2) -> 3, then (3, 1) -> 4; the pair adds 1
    assert _calculator().max_depth(tree) == 5


# --- deep inputs ----------------------------------------------------------------------------

DEEP = 10_000


def _chain(depth):
    tree = 1.0
    for _ in range(depth):
        tree = (tree, 1.0)
    return tree


def test_tree_nested_ten_thousand_deep_evaluates_without_recursion_error():
    model = _tree_sum()()
    assert float(reference_eval(model, _chain(DEEP))) == DEEP + 1.0
    assert model.max_depth(_chain(DEEP)) == DEEP


def test_tree_deeper_than_the_recursion_limit_evaluates_through_eval():
    depth = 2_000  # twice Python's default recursion limit, and fast enough for eval
    assert float(_tree_sum()().eval(_chain(depth))) == depth + 1.0


def test_fold_over_ten_thousand_items_evaluates_without_recursion_error():
    values = [float(i % 7) for i in range(DEEP)]
    model = td.Map(td.Scalar()) >> td.Fold(td.Function(tf.add), td.Zeros(SCALAR))
    assert float(reference_eval(model, values)) == float(np.sum(values, dtype=np.float64))
    assert model.max_depth(values) == DEEP


def test_a_chain_a_hundred_thousand_deep_evaluates_through_eval():
    # no op: the cost is the evaluator's own, and the recursion is 100,000 levels deep
    tree = td.ForwardDeclaration(td.PyObjectType(), td.PyObjectType(), name="tree")
    tree.resolve_to(td.AllOf(td.GetItem("v"), td.GetItem("children") >> td.Map(tree()))
                    >> td.InputTransform(lambda p: p[0] + sum(p[1])))
    chain = {"v": 1, "children": []}
    for _ in range(100_000):
        chain = {"v": 1, "children": [chain]}
    assert tree().eval(chain) == 100_001


_GENERATORS = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


def _generators_on_the_stack() -> int:
    """The generator frames running on this thread's stack (a generator expression
    is one). While one runs, each exception raised deeper walks past it (CPython's
    `_PyErr_GetTopmostException`, on every raise), and TensorFlow raises and catches
    some in every eager op: one running per level of a recursion made `eval`
    quadratic in the input's depth."""
    frame, n = sys._getframe(), 0
    while frame is not None:
        n += bool(frame.f_code.co_flags & _GENERATORS)
        frame = frame.f_back
    return n


def _recursive_models():
    """Recursive models whose recursion goes through every kind of block that
    evaluates children: each is `(model, input of depth n)`."""
    from refold.models import encoders, tree_lstm

    def watched():
        return td.Function(_watch, name="watched")

    chain_tree = td.ForwardDeclaration(td.PyObjectType(), SCALAR)
    leaf = td.Scalar() >> watched()
    pair = td.AllOf(td.GetItem(0) >> chain_tree(), td.GetItem(1) >> td.Scalar()) \
        >> td.Function(tf.add) >> watched()
    chain_tree.resolve_to(td.OneOf(lambda x: isinstance(x, tuple), {False: leaf, True: pair}))

    nested = td.ForwardDeclaration(td.PyObjectType(), SCALAR)
    comp = td.Composition()
    with comp.scope():
        kids = (td.GetItem("kids") >> td.Map(nested()) >> td.Fold(
            td.Function(tf.add), td.Zeros(SCALAR))).reads(comp.input)
        here = (td.GetItem("v") >> td.Scalar()).reads(comp.input)
        comp.output.reads(td.Function(tf.add).reads(kids, here))
    extra = td.Record({"extra": td.Optional(td.Scalar() >> watched())}) >> td.GetItem(0)
    nested.resolve_to(td.AllOf(comp, extra) >> td.Function(lambda a, b: a + b) >> watched())

    cell = tree_lstm.ChildSumTreeLSTMCell(2, 1)
    child_sum = encoders.tree_encoder(cell, td.GetItem("x") >> td.Vector(1),
                                      per_node=td.GetItem(0) >> td.GetItem(0) >> watched())

    def pairs(n):
        t = 1.0
        for _ in range(n):
            t = (t, 1.0)
        return t

    def dicts(n):
        t = {"v": 1.0, "kids": [], "extra": 1.0}
        for _ in range(n):
            t = {"v": 1.0, "kids": [t], "extra": None}
        return t

    def children(n):
        t = {"x": [1.0], "children": []}
        for _ in range(n):
            t = {"x": [1.0], "children": [t]}
        return t

    return [(chain_tree(), pairs), (nested(), dicts), (child_sum, children)]


_seen: list[int] = []


def _watch(x):
    _seen.append(_generators_on_the_stack())
    return x


def test_no_generator_runs_on_each_level_of_a_recursion_in_eval():
    # The work an exception raised at depth d costs is the generators running above
    # it: it must not grow with d (here: the same at depths 20 and 80). Op by op: on a
    # large input the calls are deferred, and run after the recursion.
    from refold.blocks.evaluation.deferred import deferring_after
    for model, make in _recursive_models():
        counts = []
        for depth in (20, 80):
            _seen.clear()
            with deferring_after(10 ** 9):
                model.eval(make(depth))
            assert len(_seen) > depth  # the watch ran at every level
            counts.append(max(_seen))
        assert counts[0] == counts[1] <= 2, (model, counts)


# --- cyclic inputs ----------------------------------------------------------------------------


@pytest.fixture
def low_recursion_limit(monkeypatch):
    """Without cycle detection a cyclic input ends in a RecursionError here within a
    second or so, rather than after recursing a million frames deep."""
    import refold.blocks.evaluation.contexts
    monkeypatch.setattr(refold.blocks.evaluation.contexts, "_RECURSION_LIMIT", 20_000)


def _dict_tree_sum():
    """Trees of `{"value": float, "children": [trees]}`: the sum of the values."""
    tree = td.ForwardDeclaration(td.PyObjectType(), SCALAR)
    children = td.Map(tree()) >> td.Sum()
    tree.resolve_to(td.Record({"value": td.Scalar(), "children": children})
                    >> td.Function(tf.add))
    return tree


def test_a_dict_node_that_is_its_own_child_is_an_input_error_naming_the_path(
        low_recursion_limit):
    node = {"value": 1.0, "children": [{"value": 2.0, "children": []}]}
    node["children"].append(node)
    with raises(td.InputError, "Record['children'] > Pipe[0] > Map > ForwardDeclaration()",
                "the input contains a cycle"):
        _dict_tree_sum()().eval(node)


def test_a_cycle_deeper_down_is_found_where_it_closes(low_recursion_limit):
    inner = {"value": 3.0, "children": []}
    root = {"value": 1.0, "children": [{"value": 2.0, "children": [inner]}]}
    inner["children"].append(root)
    with raises(td.InputError, "the input contains a cycle"):
        _dict_tree_sum()().eval(root)


def test_a_tuple_tree_closed_through_a_list_is_an_input_error(low_recursion_limit):
    loop = [1.0]
    node = (2.0, loop)
    loop[0] = node  # node = (2.0, [node])
    block = td.ForwardDeclaration(td.PyObjectType(), SCALAR)
    block.resolve_to(td.OneOf(lambda x: type(x).__name__, {
        "float": td.Scalar(), "tuple": td.Record((block(), block())) >> td.Function(tf.add),
        "list": td.Map(block()) >> td.Sum()}))
    with raises(td.InputError, "the input contains a cycle"):
        block().eval(node)
    assert float(block().eval((2.0, [3.0, (1.0, [])]))) == 6.0


def test_a_subtree_shared_in_two_places_is_not_a_cycle(low_recursion_limit):
    leaf = {"value": 2.0, "children": []}
    middle = {"value": 0.5, "children": [leaf, leaf]}
    root = {"value": 1.0, "children": [leaf, middle, middle]}
    assert float(_dict_tree_sum()().eval(root)) == 1.0 + 2.0 + 2 * (0.5 + 4.0)


def test_one_object_read_by_two_declarations_in_turn_is_not_a_cycle(low_recursion_limit):
    # Mutual recursion: `outer` hands its very input to `inner`, which recurses
    # into `outer` on the children; only the same object under the same
    # declaration is a cycle.
    outer = td.ForwardDeclaration(td.PyObjectType(), SCALAR)
    inner = td.ForwardDeclaration(td.PyObjectType(), SCALAR)
    outer.resolve_to(inner())
    inner.resolve_to(td.Record({"value": td.Scalar(),
                                "children": td.Map(outer()) >> td.Sum()})
                     >> td.Function(tf.add))
    tree = {"value": 1.0, "children": [{"value": 2.0, "children": []}]}
    assert float(outer().eval(tree)) == 3.0
    tree["children"][0]["children"].append(tree)
    with raises(td.InputError, "the input contains a cycle"):
        outer().eval(tree)
