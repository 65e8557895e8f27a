"""Tests for blocks/layers.py: FC, Embedding, ScopedLayer, and layers composing with `>>`."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_allclose

import refold as td
from refold.blocks.evaluation.contexts import reference_eval
from refold.blocks.types import SequenceType, TensorType, TupleType

F32 = TensorType(())

tf_settings = settings(max_examples=15, deadline=None)
float_vectors = st.lists(st.floats(min_value=-3, max_value=3, width=32), min_size=2, max_size=2)


def numpy_weights(layer):
    return [np.asarray(w) for w in layer.weights]


# --- FC -------------------------------------------------------------------------------------


FC_TANH = td.FC(3, activation="tanh", name="fc_tanh")


@tf_settings
@given(float_vectors)
def test_fc_computes_activation_of_affine_map(x):
    fc = FC_TANH
    out = (td.Vector(2) >> fc).eval(x)
    kernel, bias = numpy_weights(fc)
    assert kernel.shape == (2, 3) and bias.shape == (3,)
    assert_allclose(out, np.tanh(np.asarray(x, "float32") @ kernel + bias), rtol=1e-5,
                    atol=1e-6)


def test_fc_default_activation_is_relu():
    fc = td.FC(4, initializer=keras.initializers.RandomNormal(seed=1))
    x = np.array([1.0, -2.0, 0.5], "float32")
    out = (td.Vector(3) >> fc).eval(x)
    kernel, bias = numpy_weights(fc)
    assert_allclose(out, np.maximum(x @ kernel + bias, 0.0), rtol=1e-5, atol=1e-6)
    assert (out >= 0).all()


def test_fc_linear_with_constant_initializer():
    fc = td.FC(2, activation=None, initializer=keras.initializers.Constant(0.5))
    out = (td.Vector(3) >> fc).eval([1.0, 2.0, -4.0])
    assert_allclose(out, [-0.5, -0.5])  # 0.5 * (1 + 2 - 4), zero bias


def test_fc_types_and_properties():
    fc = td.FC(5)
    assert fc.output_type == TensorType((5,))
    assert fc.output_size == 5
    assert fc.input_type is None
    assert fc.weights == []  # not built before its first call
    td.Vector(7) >> fc
    assert fc.input_type == TensorType((7,))


def test_fc_shared_by_two_blocks_has_one_set_of_weights():
    fc = td.FC(3, activation=None)
    a = td.Vector(2) >> fc
    b = td.Map(td.Vector(2) >> fc)
    out_a = a.eval([1.0, 2.0])
    out_b = b.eval([[1.0, 2.0], [0.0, 0.0]])
    assert len(fc.weights) == 2
    assert_allclose(out_b[0], out_a)
    kernel, bias = numpy_weights(fc)
    assert_allclose(out_b[1], bias)
    # Changing the one kernel changes both blocks.
    fc.weights[0].assign(np.ones((2, 3), "float32"))
    assert_allclose(a.eval([1.0, 2.0]), 3.0 + bias, rtol=1e-6)
    assert_allclose(b.eval([[1.0, 2.0]])[0], 3.0 + bias, rtol=1e-6)
    assert len(fc.weights) == 2


def test_fc_shared_within_one_expression_gives_equal_outputs():
    fc = td.FC(4)
    block = (td.Vector(2) >> fc, td.Vector(2) >> fc) >> td.Function(tf.subtract)
    assert_allclose(block.eval(([0.3, -1.0], [0.3, -1.0])), np.zeros(4))
    assert len(fc.weights) == 2


def test_fc_input_size_fixed_by_first_use():
    fc = td.FC(3)
    td.Vector(2) >> fc
    with pytest.raises(TypeError, match=r"Pipe\[1\] > FC: input type mismatch: expected "
                                        r"\(2,\), got \(4,\); the whole types: expected "
                                        r"TensorType\(\(2,\), 'float32'\), got "
                                        r"TensorType\(\(4,\), 'float32'\)"):
        td.Vector(4) >> fc


def test_fc_input_dtype_error_names_the_block_path():
    with pytest.raises(TypeError, match=r"Pipe\[1\] > FC: FC input dtype must be float32.*int32"):
        td.Vector(2, "int32") >> td.FC(2)


def test_fc_input_rank_error_names_the_block_path():
    with pytest.raises(TypeError, match=r"Pipe\[1\] > FC: FC input shape must be 1D.*\(2, 2\)"):
        td.Tensor([2, 2]) >> td.FC(2)
    with pytest.raises(TypeError, match=r"Pipe\[1\] > FC: FC input shape must be 1D"):
        td.Scalar() >> td.FC(2)


@pytest.mark.parametrize("bad", [0, -1, 2.0, True, "3"])
def test_fc_num_units_must_be_a_positive_int(bad):
    with pytest.raises(ValueError, match="num_units_out"):
        td.FC(bad)


# --- Embedding ------------------------------------------------------------------------------


EMB = td.Embedding(5, 3, name="emb_5_3")
WRAPPING = td.Embedding(5, 3, name="emb_5_3_mod", mod_inputs=True)


@tf_settings
@given(st.integers(min_value=-30, max_value=30))
def test_a_wrapping_embedding_looks_up_the_row_after_abs_mod(i):
    out = (td.Scalar("int32") >> WRAPPING).eval(i)
    table = np.asarray(WRAPPING.embeddings)
    assert_allclose(out, table[abs(i) % 5])


@tf_settings
@given(st.integers(min_value=-30, max_value=30))
def test_an_embedding_takes_ids_in_range_and_refuses_others_naming_them(i):
    block = td.Scalar("int32") >> EMB
    if 0 <= i < 5:
        assert_allclose(block.eval(i), np.asarray(EMB.embeddings)[i])
        return
    with pytest.raises(td.InputError) as info:
        block.eval(i)
    assert info.value.block_path == "Embedding 'emb_5_3'"  # its name, not its position
    assert info.value.reason.startswith(f"id {i} is not in [0, 5) (")
    assert "mod_inputs=True" in info.value.reason


def test_embedding_refuses_what_fold_wrapped_unless_told_to_wrap():
    # Fold's default wrapped 13 and -3 onto row 3; Refold's refuses them, one keyword away
    e = td.Scalar("int32") >> td.Embedding(10, 3)
    for bad in (13, -3, 10):
        with pytest.raises(td.InputError, match=rf"id {bad} is not in \[0, 10\)"):
            e.eval(bad)
    wrapped = td.Scalar("int32") >> td.Embedding(10, 3, mod_inputs=True)
    assert_allclose(wrapped.eval(13), wrapped.eval(3))
    assert_allclose(wrapped.eval(-3), wrapped.eval(3))
    with pytest.raises(ValueError, match="mod_inputs must be True or False, got 1"):
        td.Embedding(10, 3, mod_inputs=1)


def test_embedding_over_a_sequence_of_ids():
    init = np.arange(12, dtype="float32").reshape(4, 3)
    emb = td.Embedding(4, 3, initializer=init)
    out = (td.Map(td.Scalar("int64")) >> td.Map(td.Function(emb))).eval([0, 3, 2])
    assert_allclose(np.stack(out), init[[0, 3, 2]])
    wrapping = td.Embedding(4, 3, initializer=init, mod_inputs=True)
    out = (td.Map(td.Scalar("int64")) >> td.Map(td.Function(wrapping))).eval([0, 3, 5])
    assert_allclose(np.stack(out), init[[0, 3, 1]])


def test_embedding_ndarray_initializer_is_the_table():
    init = np.random.RandomState(0).randn(3, 2).astype("float32")
    emb = td.Embedding(3, 2, initializer=init)
    assert emb.output_type == TensorType((2,))
    assert_allclose(np.asarray(emb.embeddings), init)
    assert [tuple(w.shape) for w in emb.weights] == [(3, 2)]
    assert_allclose((td.Scalar("int32") >> emb).eval(2), init[2])


def test_embedding_tensor_initializer():
    init = tf.reshape(tf.range(6, dtype=tf.float32), [3, 2])
    emb = td.Embedding(3, 2, initializer=init)
    assert_allclose((td.Scalar("int32") >> emb).eval(1), [2.0, 3.0])


def test_embedding_accepts_ids_in_range_and_fails_outside():
    init = np.arange(10, dtype="float32").reshape(5, 2)
    emb = td.Embedding(5, 2, initializer=init)
    block = td.Scalar("int32") >> emb
    assert_allclose(block.eval(4), [8.0, 9.0])
    with pytest.raises(td.InputError, match=r"^Pipe\[1\] > Embedding: id 7 is not in"):
        block.eval(7)


def test_embedding_op_checks_ids_only_when_they_are_not_wrapped():
    # a wrapped lookup has no check, so expansion reads no id's row to check nothing
    wrapped = td.Scalar("int32") >> td.Embedding(5, 2, mod_inputs=True)
    checked = td.Scalar("int32") >> td.Embedding(5, 2)
    assert wrapped.eval(7).shape == (2,)
    ops = [b.op() for b in (wrapped, checked) for b in b.children if hasattr(b, "op")]
    assert [op.check is None for op in ops] == [True, False]
    from refold.compiler import Compiler
    with pytest.raises(td.InputError, match=r"Pipe\[1\] > Embedding: id 7 is not in \[0, 5\)"):
        Compiler.create(checked).plan([7])
    assert Compiler.create(wrapped).plan([7]).stats.launches >= 1


def test_embedding_fed_by_another_op_is_refused_by_eval_as_by_the_engine():
    # the engine runs sparse lookups before its loop, on input data only; eval agrees
    block = td.Scalar("int32") >> td.Function(lambda x: x + 1) >> td.Embedding(5, 2)
    with pytest.raises(td.InputError, match=r"Pipe\[2\] > Embedding: .*Embedding.* must come "
                                            r"from the input data"):
        block.eval(3)
    assert (td.Scalar("int32") >> td.Embedding(5, 2)).eval(3).shape == (2,)


def test_embedding_narrow_integer_ids_are_accepted():
    init = np.arange(6, dtype="float32").reshape(3, 2)
    for dtype in ("int8", "uint8", "int16"):
        emb = td.Embedding(3, 2, initializer=init)
        assert_allclose((td.Scalar(dtype) >> emb).eval(2), [4.0, 5.0])


def test_embedding_not_trainable():
    emb = td.Embedding(3, 2, trainable=False)
    assert emb.embeddings.trainable is False


def test_embedding_properties():
    emb = td.Embedding(7, 4)
    assert (emb.num_buckets, emb.num_units_out) == (7, 4)


def test_embedding_float_ids_are_a_type_error_naming_the_path():
    with pytest.raises(TypeError, match=r"Pipe\[1\] > Embedding: .*integer.*float32"):
        td.Scalar() >> td.Embedding(4, 2)


def test_embedding_vector_ids_are_a_type_error_naming_the_path():
    with pytest.raises(TypeError, match=r"Pipe\[1\] > Embedding: .*scalar.*\(2,\)"):
        td.Vector(2, "int32") >> td.Embedding(4, 2)


def test_embedding_bad_arguments_are_value_errors():
    with pytest.raises(ValueError, match="num_buckets"):
        td.Embedding(0, 2)
    with pytest.raises(ValueError, match="num_units_out"):
        td.Embedding(2, -1)
    with pytest.raises(ValueError, match=r"initializer has shape \(4, 3\), expected \(4, 2\)"):
        td.Embedding(4, 2, initializer=np.zeros((4, 3)))


# --- ScopedLayer around Keras RNN cells -----------------------------------------------------


def keras_steps(cell, xs, state):
    """Runs a Keras cell step by step on a batch of one; returns outputs and final state."""
    outputs = []
    for x in xs:
        out, state = cell(tf.constant([x], tf.float32), state)
        outputs.append(np.asarray(out)[0])
    return outputs, state


XS = [[0.5, -1.0], [2.0, 0.25], [-0.75, 1.5]]


def test_scoped_lstm_cell_types():
    layer = td.ScopedLayer(keras.layers.LSTMCell(4))
    vec4 = TensorType((4,))
    assert layer.output_type == TupleType(vec4, TupleType(vec4, vec4))
    assert layer.state_size == [4, 4] and layer.output_size == 4


def test_scoped_lstm_cell_in_rnn_matches_keras_steps():
    cell = keras.layers.LSTMCell(4)
    block = td.Map(td.Vector(2)) >> td.RNN(td.ScopedLayer(cell, "lstm"))
    outputs, (h, c) = block.eval(XS)
    assert block.output_type == TupleType(SequenceType(TensorType((4,))),
                                          TupleType(TensorType((4,)), TensorType((4,))))
    expected, state = keras_steps(cell, XS, [tf.zeros([1, 4]), tf.zeros([1, 4])])
    assert_allclose(np.stack(outputs), np.stack(expected), rtol=1e-5, atol=1e-6)
    assert_allclose(h, np.asarray(state[0])[0], rtol=1e-5, atol=1e-6)
    assert_allclose(c, np.asarray(state[1])[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("make_cell", [keras.layers.GRUCell, keras.layers.SimpleRNNCell])
def test_scoped_single_state_cell_in_rnn_matches_keras_steps(make_cell):
    cell = make_cell(3)
    layer = td.ScopedLayer(cell)
    assert layer.output_type == TupleType(TensorType((3,)), TensorType((3,)))
    outputs, state = (td.Map(td.Vector(2)) >> td.RNN(layer)).eval(XS)
    expected, final = keras_steps(cell, XS, tf.zeros([1, 3]))
    assert_allclose(np.stack(outputs), np.stack(expected), rtol=1e-5, atol=1e-6)
    assert_allclose(state, np.asarray(final)[0], rtol=1e-5, atol=1e-6)


def test_scoped_gru_cell_in_rnn_with_initial_state():
    cell = keras.layers.GRUCell(3)
    h0 = np.array([0.1, -0.2, 0.3], "float32")
    block = td.Map(td.Vector(2)) >> td.RNN(td.ScopedLayer(cell), initial_state=h0)
    outputs, state = block.eval(XS)
    expected, final = keras_steps(cell, XS, tf.constant(h0[None]))
    assert_allclose(np.stack(outputs), np.stack(expected), rtol=1e-5, atol=1e-6)
    assert_allclose(state, np.asarray(final)[0], rtol=1e-5, atol=1e-6)


def test_scoped_lstm_cell_in_rnn_with_initial_state_pair():
    cell = keras.layers.LSTMCell(3)
    h0, c0 = np.full(3, 0.1, "float32"), np.full(3, -0.2, "float32")
    start = td.AllOf(td.FromTensor(h0), td.FromTensor(c0))
    block = td.Map(td.Vector(2)) >> td.RNN(td.ScopedLayer(cell), initial_state=start)
    # The reference evaluator: the oracle for the block semantics.
    outputs, (h, c) = reference_eval(block, XS)
    expected, state = keras_steps(cell, XS, [tf.constant(h0[None]), tf.constant(c0[None])])
    assert_allclose(np.stack(outputs), np.stack(expected), rtol=1e-5, atol=1e-6)
    assert_allclose(c, np.asarray(state[1])[0], rtol=1e-5, atol=1e-6)


def swap_then_cell_then_state(layer):
    """A Fold combine block for a cell: `(state, x) -> cell(x, state)[1]`."""
    return td.AllOf(td.GetItem(1), td.GetItem(0)) >> layer >> td.GetItem(1)


@pytest.mark.parametrize("make_cell", [keras.layers.GRUCell, keras.layers.SimpleRNNCell])
def test_scoped_single_state_cell_in_fold_matches_keras_steps(make_cell):
    cell = make_cell(3)
    fold = td.Fold(swap_then_cell_then_state(td.ScopedLayer(cell)), td.Zeros(TensorType((3,))))
    state = (td.Map(td.Vector(2)) >> fold).eval(XS)
    _, final = keras_steps(cell, XS, tf.zeros([1, 3]))
    assert_allclose(state, np.asarray(final)[0], rtol=1e-5, atol=1e-6)


def test_scoped_lstm_cell_in_fold_matches_keras_steps():
    cell = keras.layers.LSTMCell(4)
    vec4 = TensorType((4,))
    fold = td.Fold(swap_then_cell_then_state(td.ScopedLayer(cell)), td.Zeros((vec4, vec4)))
    assert fold.output_type == TupleType(vec4, vec4)
    h, c = (td.Map(td.Vector(2)) >> fold).eval(XS)
    _, state = keras_steps(cell, XS, [tf.zeros([1, 4]), tf.zeros([1, 4])])
    assert_allclose(h, np.asarray(state[0])[0], rtol=1e-5, atol=1e-6)
    assert_allclose(c, np.asarray(state[1])[0], rtol=1e-5, atol=1e-6)


def test_one_scoped_cell_in_two_rnns_shares_weights():
    layer = td.ScopedLayer(keras.layers.GRUCell(3))
    a = td.Map(td.Vector(2)) >> td.RNN(layer)
    b = td.Map(td.Vector(2)) >> td.RNN(layer)
    out_a, out_b = a.eval(XS), b.eval(XS)
    assert_allclose(out_a[1], out_b[1])
    assert len(layer.weights) == 3  # kernel, recurrent kernel, bias


# --- ScopedLayer around plain layers and callables ------------------------------------------


def test_scoped_dense_layer_types_values_and_sharing():
    dense = keras.layers.Dense(2, kernel_initializer="glorot_uniform")
    layer = td.ScopedLayer(dense, "dense")
    a = td.Vector(3) >> layer
    b = td.Vector(3) >> layer
    assert layer.input_type == TensorType((3,))
    assert layer.output_type == TensorType((2,))
    x = np.array([1.0, -2.0, 0.5], "float32")
    out = a.eval(x)
    kernel, bias = numpy_weights(layer)
    assert_allclose(out, x @ kernel + bias, rtol=1e-5, atol=1e-6)
    assert_allclose(b.eval(x), out)
    assert len(layer.weights) == 2
    assert repr(layer) == "<td.ScopedLayer 'dense'>" and layer.name == "dense"


def test_scoped_dense_layer_input_mismatch_is_a_type_error():
    layer = td.ScopedLayer(keras.layers.Dense(2))
    td.Vector(3) >> layer
    with pytest.raises(TypeError, match=r"Pipe\[1\] > ScopedLayer: input type mismatch"):
        td.Vector(4) >> layer


def test_scoped_callable_with_tuple_input():
    layer = td.ScopedLayer(tf.add)
    block = (td.Scalar(), td.Scalar()) >> layer
    assert layer.output_type == F32
    assert_allclose(block.eval((1.0, 2.5)), 3.5)
    assert layer.weights == []


def test_scoped_layer_rejects_non_callable():
    with pytest.raises(TypeError, match="not callable"):
        td.ScopedLayer(3)


# --- `>>` with layers, and Keras layers as blocks -------------------------------------------


def test_layer_rshift_block():
    fc = td.FC(2, activation=None, initializer=keras.initializers.Constant(1.0))
    block = fc >> td.Function(tf.negative)
    assert block.output_type == TensorType((2,))
    assert_allclose((td.Vector(3) >> block).eval([1.0, 2.0, 3.0]), [-6.0, -6.0])


def test_block_rshift_layer():
    fc = td.FC(2, activation=None, initializer=keras.initializers.Constant(1.0))
    block = td.Vector(3) >> fc
    assert isinstance(block, td.Pipe)
    assert isinstance(block.children[1], td.Function) and block.children[1].tf_fn is fc
    assert_allclose(block.eval([1.0, 2.0, 3.0]), [6.0, 6.0])


def test_layer_rshift_layer():
    first = td.FC(3, activation=None, initializer=keras.initializers.Constant(1.0))
    second = td.FC(1, activation=None, initializer=keras.initializers.Constant(2.0))
    block = first >> second
    assert block.output_type == TensorType((1,))
    assert_allclose((td.Vector(2) >> block).eval([1.0, 1.0]), [12.0])


def test_tuple_and_array_rshift_layer():
    adder = td.ScopedLayer(tf.add)
    assert_allclose(((td.Scalar(), td.Scalar()) >> adder).eval((2.0, 3.0)), 5.0)
    fc = td.FC(2, activation=None, initializer=keras.initializers.Constant(1.0))
    block = np.array([1.0, 2.0], "float32") >> fc
    assert_allclose(block.eval(), [3.0, 3.0])
    assert_allclose((tf.constant([1.0, 1.0]) >> fc).eval(), [2.0, 2.0])


def test_convert_keras_layer_to_block():
    dense = keras.layers.Dense(2)
    block = td.convert_to_block(dense)
    assert isinstance(block, td.Function) and block.tf_fn is dense
    pipe = td.Vector(3) >> block
    assert block.output_type == TensorType((2,))
    x = np.array([[0.5, 1.0, -1.0]], "float32")
    assert_allclose(pipe.eval(x[0]), np.asarray(dense(x))[0], rtol=1e-5, atol=1e-6)


def test_keras_layer_used_twice_shares_weights():
    dense = keras.layers.Dense(2)
    a = td.Vector(3) >> dense
    b = td.Vector(3) >> dense
    assert_allclose(a.eval([1.0, 2.0, 3.0]), b.eval([1.0, 2.0, 3.0]))
    assert len(dense.weights) == 2


def test_convert_layer_to_block():
    fc = td.FC(2)
    block = td.convert_to_block(fc)
    assert isinstance(block, td.Function) and block.tf_fn is fc
    assert block.output_type == TensorType((2,))


def test_an_embedding_lookup_reads_only_the_rows_it_gathers():
    # a dense read of the table would copy all of it on every step once a sparse
    # update has touched the variable; a ResourceGather reads the rows asked for
    emb = td.Embedding(1000, 8)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.int32)], autograph=False)
    def lookup(ids):
        return emb._call(ids)

    types = {op.type for op in lookup.get_concrete_function().graph.get_operations()}
    assert "ResourceGather" in types
    assert "ReadVariableOp" not in types
    np.testing.assert_array_equal(lookup(tf.constant([3, 3, 999])).numpy(),
                                  emb.embeddings.numpy()[[3, 3, 999]])


# --- zero rows (`Op.handles_empty`) ------------------------------------------------------

def _library_blocks():
    """A block using each layer and library function said to work on zero rows."""
    from refold.models import heads, rnn_cells, tree_lstm, tree_rnn
    keras.utils.set_random_seed(0)

    def vec(n=3):
        return td.Vector(n)

    def state():
        return td.Record((vec(4), vec(4)))

    cells = rnn_cells.CellPair(rnn_cells.LSTMCell(4, input_size=3),
                               rnn_cells.SimpleRNNCell(4, input_size=3))
    return {
        "FC": vec() >> td.FC(4),
        "Embedding": td.Scalar("int32") >> td.Embedding(10, 4),
        "leaf cell": vec() >> tree_lstm.leaf_cell(4, 3),
        "binary cell": td.Record((state(), state())) >> tree_lstm.binary_cell(4),
        "child-sum cell": td.Record((vec(), td.Map(state())))
        >> tree_lstm.ChildSumTreeLSTMCell(4, 3),
        "tree-rnn cell": td.Record((vec(4), vec(4))) >> tree_rnn.TreeRNNCell(4),
        "LSTM cell": td.Record((vec(), state())) >> rnn_cells.LSTMCell(4, input_size=3),
        "GRU cell": td.Record((vec(), vec(4))) >> rnn_cells.GRUCell(4, input_size=3),
        "cell pair": td.Record((td.Record((vec(), vec())), td.Record((state(), vec(4)))))
        >> cells,
        "Concat": td.Record((vec(), td.Scalar())) >> td.Concat(),
        "Sum, Max, Mean": td.Map(vec()) >> td.AllOf(td.Sum(), td.Max(), td.Mean()),
        "FromTensor": td.FromTensor(np.ones(2, np.float32)),
        "classification metrics": td.Record((vec(), td.Scalar("int32")))
        >> heads.classification_metrics(),
    }


def _ops(block) -> list:
    from refold.compiler import Compiler
    return Compiler.create(block).program.ops


@pytest.mark.parametrize("name", sorted(_library_blocks()))
def test_library_ops_said_to_handle_zero_rows_do(name):
    ops = _ops(_library_blocks()[name])
    assert ops and all(op.handles_empty for op in ops)
    for op in ops:
        sig = [tf.TensorSpec((None, *t.shape), t.dtype) for t in op.input_types]

        @tf.function(input_signature=sig, autograph=False)
        def run(*xs, op=op):
            floats = [x for x in xs if x.dtype == tf.float32]
            with tf.GradientTape() as tape:
                tape.watch(floats)
                outs = op.fn(*xs) if xs else op.fn(tf.constant(0))
                loss = tf.add_n([tf.reduce_sum(tf.cast(y, tf.float32)) for y in outs])
            return outs, tape.gradient(loss, floats)

        outs, grads = run(*[tf.zeros((0, *t.shape), t.dtype) for t in op.input_types])
        assert [tuple(y.shape) for y in outs] == [(0, *t.shape) for t in op.output_types]
        assert all(g is None or g.shape[0] == 0 for g in grads)


def test_user_functions_and_wrapped_keras_layers_are_not_said_to_handle_zero_rows():
    def flags(block):
        return [op.handles_empty for op in _ops(block)]
    assert flags(td.Vector(3) >> td.Function(lambda x: -x)) == [False]
    assert flags(td.Vector(3) >> td.ScopedLayer(keras.layers.Dense(2))) == [False]
    assert flags(td.Vector(3) >> td.Function(lambda x: -x, handles_empty=True)) == [True]
    with pytest.raises(TypeError, match="handles_empty must be True, False or None, got 1"):
        td.Function(tf.negative, handles_empty=1)
