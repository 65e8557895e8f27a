"""RNN cells equal Keras's cells with the same weights, one input at a time and batched."""

from __future__ import annotations

import keras
import numpy as np
import pytest

import refold as td
from refold.compiler import Compiler
from refold.models import rnn_cells

UNITS, DIM = 3, 2
SEQS = [[], [[0.5, -1.0]], [[1.0, 2.0], [0.0, -0.5], [-1.5, 0.25]], [[0.3, 0.3]] * 5]


def keras_run(cell, seq, stateful_c):
    """Runs a Keras cell over one sequence, eagerly; returns (outputs, final state)."""
    zeros = np.zeros((1, UNITS), np.float32)
    state = [zeros, zeros] if stateful_c else [zeros]
    outs = []
    for x in seq:
        out, state = cell(np.asarray([x], np.float32), state)
        outs.append(np.asarray(out)[0])
    return outs, [np.asarray(s)[0] for s in state]


def random_weights(cell, seed):
    rng = np.random.default_rng(seed)
    for w in cell.weights:
        w.assign(rng.normal(0, 0.7, tuple(w.shape)).astype(np.float32))


CASES = [
    (rnn_cells.SimpleRNNCell, keras.layers.SimpleRNNCell, False),
    (rnn_cells.LSTMCell, keras.layers.LSTMCell, True),
    (rnn_cells.GRUCell, keras.layers.GRUCell, False),
]


@pytest.mark.parametrize("ours, theirs, stateful_c", CASES, ids=["simple", "lstm", "gru"])
def test_cell_equals_keras_cell_in_eval_and_batched(ours, theirs, stateful_c):
    cell = ours(UNITS)
    block = td.Map(td.Vector(DIM)) >> td.RNN(cell)
    random_weights(cell, seed=1)
    ref = theirs(UNITS)
    ref.build((None, DIM))
    ref.set_weights([np.asarray(w) for w in cell.weights])
    batched = Compiler.create(block).run(SEQS)
    for seq, got_batched in zip(SEQS, batched):
        want_outs, want_state = keras_run(ref, seq, stateful_c)
        for got in (block.eval(seq), got_batched):
            outs, state = got
            assert len(outs) == len(want_outs)
            for o, w in zip(outs, want_outs):
                np.testing.assert_allclose(o, w, atol=1e-5)
            state = list(state) if stateful_c else [state]
            for s, w in zip(state, want_state):
                np.testing.assert_allclose(s, w, atol=1e-5)


@pytest.mark.parametrize("dim", [DIM, UNITS], ids=["narrow", "as_wide_as_the_state"])
@pytest.mark.parametrize("ours, theirs, stateful_c", CASES, ids=["simple", "lstm", "gru"])
def test_cell_with_its_input_projected_first_equals_keras_cell(ours, theirs, stateful_c, dim):
    cell = ours(UNITS)
    block = (td.Map(td.Vector(dim) >> rnn_cells.InputProjection(cell))
             >> td.RNN(rnn_cells.ProjectedCell(cell)))
    random_weights(cell, seed=2)
    ref = theirs(UNITS)
    ref.build((None, dim))
    ref.set_weights([np.asarray(w) for w in cell.weights])
    seqs = [[list(np.linspace(-1, 1, dim) * (t + 1)) for t in range(n)] for n in (0, 1, 4)]
    compiler = Compiler.create(block)
    lay = compiler.executor.layout
    assert [lay.op_names[o] for o in lay.head_ops] == ["InputProjection"]  # before the loop
    for seq, got_batched in zip(seqs, compiler.run(seqs)):
        want_outs, want_state = keras_run(ref, seq, stateful_c)
        for outs, state in (block.eval(seq), got_batched):
            np.testing.assert_allclose(np.reshape(outs, (-1, UNITS)),
                                       np.reshape(want_outs, (-1, UNITS)), atol=1e-5)
            for s, w in zip(list(state) if stateful_c else [state], want_state):
                np.testing.assert_allclose(s, w, atol=1e-5)


@pytest.mark.parametrize("scheduler, dim", [("agenda", DIM), ("depth", UNITS)],
                         ids=["agenda-narrow", "depth-as_wide_as_the_state"])
@pytest.mark.parametrize("ours, theirs, stateful_c", CASES, ids=["simple", "lstm", "gru"])
def test_an_rnn_runs_a_library_cell_split_with_the_whole_cells_results(ours, theirs,
                                                                     stateful_c, scheduler,
                                                                     dim):
    import tensorflow as tf

    from refold.blocks.composition import convert_to_block
    from refold.blocks.evaluation.contexts import ReferenceContext
    from refold.blocks.serialization.config import deserialize, serialize
    cell = ours(UNITS)
    split = td.Map(td.Vector(dim)) >> td.RNN(cell)
    whole = td.Map(td.Vector(dim)) >> td.RNN(convert_to_block(cell))  # a block: not split
    random_weights(cell, seed=3)
    name = type(cell).__name__
    assert stages(split, scheduler) == (["InputProjection"], ["ProjectedCell"])
    assert stages(whole, scheduler) == ([], [name])
    again = deserialize(serialize(split))  # made again, it splits again
    assert stages(again, scheduler) == (["InputProjection"], ["ProjectedCell"])
    seqs = [[list(np.linspace(-1, 1, dim) * (t + 1)) for t in range(n)] for n in (0, 1, 4)]
    got = Compiler.create(split, scheduler=scheduler).run(seqs)
    for seq, batched in zip(seqs, got):
        want_outs, want_state = whole.eval(seq)
        for outs, state in (split.eval(seq), batched):
            np.testing.assert_allclose(np.reshape(outs, (-1, UNITS)),
                                       np.reshape(want_outs, (-1, UNITS)), atol=1e-5)
            np.testing.assert_allclose(np.ravel(state), np.ravel(want_state), atol=1e-5)
    grads = []
    for block in (split, whole):
        with tf.GradientTape() as tape:
            loss = tf.add_n([tf.reduce_sum(tf.sin(tf.concat([tf.reshape(o, [-1]) for o in
                                                             tf.nest.flatten(out)], 0)))
                             for seq in seqs[1:]
                             for out in [block.eval_in(ReferenceContext(), seq)]])
        grads.append(tape.gradient(loss, cell.weights))
    for a, b in zip(*grads):
        np.testing.assert_allclose(a, b, atol=1e-5)

    class Peephole(ours):  # computes its own way: run whole
        def _call(self, *args):
            return super()._call(*args)
    custom = td.Map(td.Vector(dim)) >> td.RNN(Peephole(UNITS))
    assert stages(custom, scheduler) == ([], ["Peephole"])


@pytest.mark.parametrize("transpose_once", [True, False])
def test_the_backward_loop_multiplies_by_the_kernel_transposed_before_the_loop(
        transpose_once, monkeypatch):
    import tensorflow as tf

    from refold.scheduler import loop_products
    monkeypatch.setattr(loop_products, "TRANSPOSE_ONCE", transpose_once)
    cell = rnn_cells.GRUCell(UNITS)
    compiler = Compiler.create(td.Map(td.Vector(DIM)) >> td.RNN(cell) >> td.GetItem(1))

    def loss(arrays):
        with tf.GradientTape() as tape:
            out = compiler.executor.compute(arrays)
            total = tf.add_n([tf.reduce_sum(v) for v in out])
        return tape.gradient(total, cell.weights)
    arrays = {k: tf.constant(v) for k, v in compiler.plan(SEQS).feed.arrays.items()}
    graph = tf.function(loss, autograph=False).get_concrete_function(arrays).graph
    products = [(op.get_attr("transpose_a"), op.get_attr("transpose_b"))
                for name, f in graph._functions.items() if "grad" in name
                for op in f.graph.get_operations() if op.type == "MatMul"]
    outside = [op for op in graph.get_operations() if op.type == "Transpose"]
    # dz U^T from U^T laid out before the loop; h^T dz for the weight
    assert sorted(products) == ([(False, False), (True, False)] if transpose_once
                                else [(False, True), (True, False)])
    assert len(outside) == (1 if transpose_once else 0)


def stages(block, scheduler: str = "agenda") -> tuple[list, list]:
    """The names of the ops the engine runs before its loop and in it."""
    lay = Compiler.create(block, scheduler=scheduler).executor.layout
    return [lay.op_names[o] for o in lay.head_ops], [lay.op_names[o] for o in lay.loop_ops]


def test_projection_names_a_cell_it_cannot_split_and_a_wrong_input():
    with pytest.raises(TypeError, match="InputProjection: cells must be"):
        rnn_cells.InputProjection(td.FC(3))
    with pytest.raises(TypeError, match="ProjectedCell: cell must be"):
        rnn_cells.ProjectedCell(rnn_cells.CellPair(rnn_cells.GRUCell(2), rnn_cells.GRUCell(2)))
    cell = rnn_cells.GRUCell(UNITS, input_size=DIM)
    with pytest.raises(TypeError, match="must have 2 items"):
        td.Vector(DIM + 1) >> rnn_cells.InputProjection(cell)

    class Peephole(rnn_cells.LSTMCell):  # computes its own way: never split
        def _call(self, x, state):
            return super()._call(x, state)
    assert not rnn_cells.projects_input(Peephole(UNITS))
    assert rnn_cells.projects_input(rnn_cells.LSTMCell(UNITS))


def test_lstm_state_is_h_c_and_output_is_h():
    cell = rnn_cells.LSTMCell(UNITS, input_size=DIM)
    vec = td.TensorType((UNITS,))
    assert cell.input_type == td.TupleType(td.TensorType((DIM,)), td.TupleType(vec, vec))
    assert cell.output_type == td.TupleType(vec, td.TupleType(vec, vec))
    out, (h, c) = (td.Record((td.Vector(DIM), (td.Vector(UNITS), td.Vector(UNITS)))) >> cell
                   ).eval(([1, 1], ([0.5] * UNITS, [-0.5] * UNITS)))
    np.testing.assert_array_equal(out, h)
    assert not np.allclose(h, c)


def test_lstm_forget_bias_starts_at_one():
    cell = rnn_cells.LSTMCell(UNITS, input_size=DIM)
    np.testing.assert_array_equal(np.asarray(cell.bias),
                                  [0] * UNITS + [1] * UNITS + [0] * 2 * UNITS)


@pytest.mark.parametrize("ours", [rnn_cells.SimpleRNNCell, rnn_cells.GRUCell])
def test_fold_step_gives_the_rnn_final_state(ours):
    cell = ours(UNITS)
    fold = td.Map(td.Vector(DIM)) >> td.Fold(rnn_cells.fold_step(cell), td.Zeros(cell.state_type))
    rnn = td.Map(td.Vector(DIM)) >> td.RNN(cell) >> td.GetItem(1)
    batched = Compiler.create(fold).run(SEQS)
    for seq, got in zip(SEQS, batched):
        want = rnn.eval(seq)
        np.testing.assert_allclose(fold.eval(seq), want, atol=1e-6)
        np.testing.assert_allclose(got, want, atol=1e-6)
    assert not np.allclose(batched[2], 0)


def test_cells_share_weights_across_uses():
    cell = rnn_cells.GRUCell(UNITS)
    a = td.Map(td.Vector(DIM)) >> td.RNN(cell)
    b = td.Map(td.Vector(DIM)) >> td.RNN(cell)
    assert len(cell.weights) == 3
    np.testing.assert_array_equal(a.eval(SEQS[2])[1], b.eval(SEQS[2])[1])


@pytest.mark.parametrize("args, match", [((0,), "units"), ((2.5,), "units"),
                                         ((3, 0), "input_size"), ((True,), "units")])
def test_bad_arguments_name_the_argument(args, match):
    with pytest.raises(ValueError, match=match):
        rnn_cells.LSTMCell(*args)


def test_wrong_state_type_is_a_type_error():
    cell = rnn_cells.LSTMCell(UNITS)
    with pytest.raises(TypeError, match="state"):
        td.Record((td.Vector(DIM), td.Vector(UNITS))) >> cell


def test_integer_input_is_a_type_error():
    cell = rnn_cells.SimpleRNNCell(UNITS)
    with pytest.raises(TypeError, match="float32 vector"):
        td.Record((td.Vector(DIM, "int32"), td.Vector(UNITS))) >> cell


def test_an_rnn_of_a_split_cell_names_its_path_on_a_wrong_input():
    cell = rnn_cells.LSTMCell(UNITS, input_size=DIM)
    with pytest.raises(TypeError, match=r"RNN\.per_element > .*InputProjection: the input "
                                        r"must have 2 items .* got TensorType\(\(5,\)"):
        td.Map(td.Vector(5)) >> td.RNN(cell)
    with pytest.raises(TypeError, match=r"RNN\.per_element > .*must be a float32 vector"):
        td.Map(td.Scalar("int32")) >> td.RNN(cell)


@pytest.mark.parametrize("replay", [True, False], ids=["replayed", "tensorflow's"])
@pytest.mark.parametrize("cell", [rnn_cells.SimpleRNNCell, rnn_cells.LSTMCell,
                                  rnn_cells.GRUCell], ids=["simple", "lstm", "gru"])
def test_the_loop_of_a_projected_cell_has_no_broadcasting_gradients(cell, replay):
    """The state's product is added to the projected input as AddN: `+` of two
    [None, n] tensors in a differentiated loop body also takes the gradient's
    broadcasting machinery (Shape, BroadcastGradientArgs, Sum, Reshape), 7 ops an
    iteration that a batch-1 step pays for on every launch."""
    import tensorflow as tf
    cell = cell(UNITS)
    block = td.Map(td.Vector(DIM)) >> td.RNN(cell) >> td.GetItem(1)
    compiler = Compiler.create(block)
    assert stages(block) == (["InputProjection"], ["ProjectedCell"])
    compiler.executor.replay_backward = replay
    compiler.executor.batched_weight_grads = replay  # the replayed loop defers them

    def loss(arrays):
        with tf.GradientTape() as tape:
            out = compiler.executor.compute(arrays)
            total = tf.add_n([tf.reduce_sum(v) for v in tf.nest.flatten(out)])
        return tape.gradient(total, cell.weights)
    arrays = {k: tf.constant(v) for k, v in compiler.plan(SEQS).feed.arrays.items()}
    graph = tf.function(loss, autograph=False).get_concrete_function(arrays).graph
    bodies = {id(f.graph): f.graph for name, f in graph._functions.items() if "body" in name}
    assert len(bodies) == 2  # the forward loop and the backward one
    bodies = bodies.values()
    in_loops = [op.type for g in bodies for op in g.get_operations()]
    assert "AddN" in in_loops and "BroadcastGradientArgs" not in in_loops


def _projected_call(cell, rows: int = 5, seed: int = 0):
    """A `ProjectedCell`'s flat arguments on random rows, and the tape's gradient of
    a random linear function of its outputs, for its weights and its arguments."""
    import tensorflow as tf
    rng = np.random.default_rng(seed)
    projected = rnn_cells.ProjectedCell(cell)
    flat = [tf.constant(rng.normal(size=(rows, *t.shape)), tf.float32)
            for t in [cell.projected_type, *cell.state_type.terminal_types()]]
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(flat)
        out, state = projected(flat[0], tuple(flat[1:]) if len(flat) > 2 else flat[1])
        loss = sum(tf.reduce_sum(y * rng.normal(size=y.shape).astype(np.float32))
                   for y in tf.nest.flatten((out, state)))
    kernel = cell.recurrent_kernel.value
    return projected, flat, tape.gradient(loss, flat), tape.gradient(loss, kernel), kernel


@pytest.mark.parametrize("cell", [rnn_cells.LSTMCell, rnn_cells.SimpleRNNCell])
def test_a_projected_cell_s_kernel_gradient_follows_from_its_projected_input_s(cell):
    projected, flat, arg_grads, want, kernel = _projected_call(cell(4, input_size=3))
    got = projected.weight_grads_from_inputs(flat, arg_grads)
    assert list(got) == [kernel.ref()]
    np.testing.assert_allclose(got[kernel.ref()], want, rtol=1e-5, atol=1e-6)


def test_a_cell_pair_s_kernel_gradients_are_each_cell_s():
    first, second = rnn_cells.LSTMCell(4, input_size=3), rnn_cells.SimpleRNNCell(2, input_size=3)
    pair = rnn_cells.CellPair(rnn_cells.ProjectedCell(first), rnn_cells.ProjectedCell(second))
    p1, f1, g1, want1, k1 = _projected_call(first, seed=1)
    p2, f2, g2, want2, k2 = _projected_call(second, seed=2)
    got = pair.weight_grads_from_inputs([f1[0], f2[0], *f1[1:], *f2[1:]],
                                        [g1[0], g2[0], *g1[1:], *g2[1:]])
    assert set(got) == {k1.ref(), k2.ref()}
    for k, want in ((k1, want1), (k2, want2)):
        np.testing.assert_allclose(got[k.ref()], want, rtol=1e-5, atol=1e-6)
    plain = rnn_cells.CellPair(first, second)  # cells reading x itself: no shortcut
    assert plain.weight_grads_from_inputs([f1[0], f2[0], *f1[1:], *f2[1:]],
                                          [g1[0], g2[0], *g1[1:], *g2[1:]]) is None


def test_no_kernel_gradient_shortcut_where_h_u_is_not_added_to_the_projection():
    # the GRU's reset gate multiplies h U; a dropped state differs per call; a
    # subclass may compute otherwise
    class Doubled(rnn_cells.LSTMCell):
        def _recur(self, z_x, state):
            return super()._recur(2.0 * z_x, state)

    for cell in (rnn_cells.GRUCell(4, input_size=3),
                 rnn_cells.LSTMCell(4, input_size=3, recurrent_dropout=0.5),
                 Doubled(4, input_size=3)):
        projected, flat, arg_grads, _, _ = _projected_call(cell)
        assert projected.weight_grads_from_inputs(flat, arg_grads) is None, cell
