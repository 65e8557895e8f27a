"""`DataFlow` declarations (`blocks.evaluation.dataflow`): the library's rules, and which rule a
subclass gets (`dataflow_of`)."""

from __future__ import annotations

import pytest

import refold as td
from refold.blocks.evaluation.dataflow import dataflow_of

IN, OUT = td.DataFlow.INPUT, td.DataFlow.OUTPUT


def test_a_dataflow_refuses_what_is_not_a_part():
    with pytest.raises(TypeError, match="a DataFlow reader must be DataFlow.OUTPUT"):
        td.DataFlow({"x": [IN]})
    with pytest.raises(TypeError, match="a DataFlow source must be DataFlow.INPUT, a block"):
        td.DataFlow({OUT: [42]})


def test_library_blocks_declare_what_they_read():
    key, pre, a, b = td.Identity(), td.Identity(), td.Scalar(), td.Scalar()
    one_of = td.OneOf(key, {0: a, 1: b}, pre_block=pre)
    flow = dataflow_of(one_of)
    assert flow.sources(key) == [IN] and flow.sources(pre) == [IN]
    assert flow.sources(a) == [pre] and flow.sources(b) == [pre]
    assert flow.sources(OUT) == [a, b]
    elem = td.Scalar()
    assert dataflow_of(td.Map(elem)).sources(elem) == [IN]
    fn = td.Function(abs)
    td.validate(td.Scalar() >> fn)
    (op,) = fn.ops()
    assert dataflow_of(fn).sources(op) == [IN] and dataflow_of(fn).sources(OUT) == [op]


def test_a_subclass_keeps_its_parents_rule_only_with_its_parents_evaluate():
    class Named(td.Map):  # evaluates as Map does
        pass

    class OwnWay(td.Map):
        def evaluate(self, ctx, x):
            return [self.element_block.eval_in(ctx, item) for item in reversed(x)]

    assert dataflow_of(Named(td.Scalar())).sources(OUT)
    with pytest.raises(TypeError, match="OwnWay has children but does not declare"):
        dataflow_of(OwnWay(td.Scalar()))


def test_a_leaf_that_evaluates_its_own_way_gets_the_leaf_rule():
    class Absolute(td.Function):
        def evaluate(self, ctx, x):
            return super().evaluate(ctx, x)

    leaf = Absolute(abs)
    td.validate(td.Scalar() >> leaf)
    (op,) = leaf.ops()
    flow = dataflow_of(leaf)
    assert flow.sources(op) == [IN] and flow.sources(OUT) == [IN, op]


def test_the_opaque_rule_lets_every_part_read_every_part():
    fold = td.Fold(td.Function(lambda s: s[0] + s[1]), td.Zeros(()))
    combine, start = fold.children
    flow = td.DataFlow.opaque(fold)
    for reader in (combine, start, OUT):
        assert flow.sources(reader) == [IN, combine, start]
