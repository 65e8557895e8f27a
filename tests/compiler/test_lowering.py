"""`compiler.graphs.lowering`: every block's ops come from its `ops()` hook, so a block written
from scratch batches like the library's own; an op a block calls without declaring it
is a clear internal error, never blamed on the input.

Values and gradients of a user-written block (`models.Gate`) equal the reference
evaluator's under both schedulers in `test_batched_equals_reference` (`custom_block`).
"""

import numpy as np
import pytest
import tensorflow as tf

import refold as td
from refold.compiler import Compiler, Model
from refold.compiler.graphs.lowering import UnloweredOpError, lower
from tests.compiler.models import Gate

H = 3
PAIRS = [[([1.0, 0.0, -1.0], [0.5, 0.5, 0.5])],
         [([0.2, 0.3, 0.4], [1.0, -1.0, 2.0]), ([-1.0, 1.0, 0.0], [3.0, 0.0, 1.0])],
         []]


def gated_sum(gate: td.Block) -> td.Block:
    return td.Map(td.Record((td.Vector(H), td.Vector(H))) >> gate) >> td.Sum()


def test_lowering_collects_the_ops_every_block_declares():
    gate, fc = Gate(H), td.FC(H)
    tensor = td.Void() >> td.FromTensor(np.ones(H, "float32"))
    block = td.Record((gated_sum(gate), td.Vector(H) >> fc, tensor))
    program = lower(block)
    assert len(program.ops) == 4  # the gate's, the Sum's add, the layer's, the tensor's
    declared = gate.ops()[0]
    assert program.ops[program.op_id[declared]] is declared


def test_ops_must_be_a_list_of_ops_naming_the_block():
    class Bad(td.Identity):
        def ops(self):
            return "not ops"

    with pytest.raises(TypeError, match=r"Pipe\[1\] > Bad: ops\(\) must return a list of "
                                        r"blocks.Op, got 'not ops'"):
        lower(td.Scalar() >> Bad())


def test_without_layer_sharing_each_declared_op_is_its_own_op():
    gate = Gate(H)
    block = td.Record((gated_sum(gate), td.Vector(H) >> td.Function(tf.negative),
                       td.Vector(H) >> td.Function(tf.negative)))
    assert len(lower(block).ops) == 3  # Gate, add (Sum) and negative, shared
    assert len(lower(block, share_layers=False).ops) == 4


@pytest.mark.parametrize("scheduler", ["agenda", "depth"])
def test_a_user_written_block_runs_batched_and_in_a_model_as_in_eval(scheduler):
    block = gated_sum(Gate(H, seed=3))
    want = [block.eval(x) for x in PAIRS]
    assert not np.allclose(want[0], 0)
    model = Model(block, scheduler=scheduler)
    # Gate's tf.Variable is read but not declared in weights(): fine for predict, and
    # the model says it would not train it
    with pytest.warns(UserWarning, match="reads weights that no block declares"):
        predicted = model.predict(PAIRS, batch_size=2, verbose=0)
    for got in (Compiler.create(block, scheduler=scheduler).run(PAIRS), predicted):
        np.testing.assert_allclose(np.stack(got), np.stack(want), atol=1e-6)


class Undeclared(td.Block):
    """Calls an op without declaring it in `ops()` (the bug the error must explain)."""

    def __init__(self):
        super().__init__(input_type=td.TensorType((H,)), output_type=td.TensorType((H,)))
        self.op = td.Op("secret_double", lambda x: [2.0 * x], [td.TensorType((H,))],
                        [td.TensorType((H,))])

    def evaluate(self, ctx, x):
        return ctx.op(self.op, [x])[0]


def test_an_undeclared_op_is_an_internal_error_naming_the_op_and_the_hook():
    block = td.Map(td.Vector(H) >> Undeclared()) >> td.Sum()
    np.testing.assert_allclose(block.eval([[1.0, 2.0, 3.0]]), [2.0, 4.0, 6.0])
    with pytest.raises(UnloweredOpError) as err:
        Compiler.create(block).run([[[1.0, 2.0, 3.0]]])
    assert not isinstance(err.value, (td.InputError, KeyError))
    assert isinstance(err.value, RuntimeError)
    message = str(err.value)
    assert "'secret_double'" in message
    assert "Map > Pipe[1] > Undeclared" in message
    assert "ops()" in message
    with pytest.raises(UnloweredOpError):
        Model(block).predict([[[1.0, 2.0, 3.0]]], verbose=0)
