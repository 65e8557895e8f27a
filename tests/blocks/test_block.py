"""The hooks a block overrides (`Block.evaluate`, `infer_types`, `dataflow`), how a
parent evaluates a child (`eval_in`), and the names they had until 0.2."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import refold as td
from refold.blocks.evaluation.contexts import ReferenceContext


def make_double():
    class Double(td.Block):
        """x -> 2 x for any tensor type, with the public hooks."""

        def infer_types(self):
            self.set_output_type(self.input_type)
            self.set_input_type(self.output_type)

        def evaluate(self, ctx, x):
            return ctx.op(self.ops()[0], [x])[0]

        def ops(self):
            if not hasattr(self, "_op"):
                t = self.input_type
                self._op = td.Op("double", lambda x: [2.0 * x], [t], [t])
            return [self._op]

    return Double


def test_a_block_with_the_public_hooks_evaluates_and_infers_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        double = make_double()
        block = td.Vector(2) >> double()
        assert block.output_type == td.TensorType((2,))
        np.testing.assert_array_equal(block.eval([1.0, -3.0]), [2.0, -6.0])


def test_the_old_names_are_the_public_hooks_themselves():
    # the hot path pays nothing for them: one function object under two names
    assert td.Block._eval is td.Block.eval_in
    assert td.Block._evaluate is td.Block.evaluate
    assert td.Pipe._evaluate is td.Pipe.evaluate
    assert td.Map._infer is td.Map.infer_types


def test_a_block_overriding_the_old_names_warns_once_naming_it_and_still_works():
    with pytest.warns(DeprecationWarning) as caught:
        class OldDouble(td.Block):
            def _infer(self):
                self.set_output_type(self.input_type)

            def _evaluate(self, ctx, x):
                return ctx.op(self.ops()[0], [x])[0]

            def ops(self):
                t = self.input_type
                self.__dict__.setdefault("_op", td.Op("old", lambda x: [2.0 * x], [t], [t]))
                return [self._op]
    messages = sorted(str(w.message) for w in caught)
    assert len(messages) == 2
    assert "OldDouble overrides _evaluate, which was renamed evaluate" in messages[0]
    assert "OldDouble overrides _infer, which was renamed infer_types" in messages[1]
    assert all(w.filename == __file__ for w in caught)  # points at the class statement
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # using it warns no more
        block = td.Vector(2) >> OldDouble()
        assert block.output_type == td.TensorType((2,))
        np.testing.assert_array_equal(block.eval([1.0, -3.0]), [2.0, -6.0])
        batched = td.Compiler(block).run([[1.0, 2.0], [0.5, 0.0]])
    np.testing.assert_allclose([r.tolist() for r in batched], [[2.0, 4.0], [1.0, 0.0]])


def test_an_old_subclass_of_a_library_block_reaches_its_parents_hooks_by_the_old_names():
    with pytest.warns(DeprecationWarning, match="Counted overrides _evaluate"):
        class Counted(td.Map):
            calls = 0

            def _infer(self):
                super()._infer()  # Map's inference, under its old name

            def _evaluate(self, ctx, x):
                type(self).calls += 1
                return super()._evaluate(ctx, x)

    block = Counted(td.Scalar())
    assert [float(v) for v in block.eval([1, 2])] == [1.0, 2.0]
    assert block.output_type == td.SequenceType(td.TensorType(()))
    assert Counted.calls == 1


def test_eval_in_names_the_block_where_an_error_escaped_and_evaluate_does_not():
    class Fails(td.Block):
        def evaluate(self, ctx, x):
            raise ValueError("boom")

    fails = Fails(input_type=td.TensorType(()), output_type=td.TensorType(()))
    block = td.Scalar() >> fails
    td.validate(block)
    ctx = ReferenceContext()
    with pytest.raises(td.InputError, match=r"Pipe\[1\] > Fails: ValueError: boom"):
        block.eval_in(ctx, 1.0)
    with pytest.raises(ValueError, match="^boom$"):
        fails.evaluate(ctx, 1.0)


def test_a_block_without_evaluate_says_so_with_its_path():
    class Nothing(td.Block):
        pass

    block = td.Scalar() >> Nothing(input_type=td.TensorType(()), output_type=td.TensorType(()))
    with pytest.raises(td.InputError,
                       match=r"Nothing: NotImplementedError: .*does not define evaluate"):
        block.eval(1.0)
