"""`Model` under XLA (`jit_compile=True`, `compiler.feeding.xla_buckets`): it trains exactly as the
default graph-mode step does, batched equals the reference under both schedulers,
each bucket is traced once, deep inputs run and bad inputs are named.

XLA compilations are slow on a loaded 2-core machine (~10-30 s each), so the batches
here are chosen to share a few buckets."""

from __future__ import annotations

import functools

import keras
import numpy as np
import pytest
import tensorflow as tf

from refold.blocks.errors import InputError
from refold.blocks.evaluation.contexts import reference_eval
from refold.compiler import Compiler, Model, NonFiniteLossError
from refold.scheduler.xla import XlaExecutor
from tests.compiler import factories
from tests.compiler.test_batched_equals_reference import (
    ATOL,
    GRAD_RTOL,
    _type_weights,
    assert_same_result,
    case,
    reference_loss_and_grads,
)
from tests.compiler.test_model import SCCE, ForwardSpy, sign_data

# --- the engine's XLA program against the reference evaluator ----------------------------


@functools.cache
def xla_engine(name: str, scheduler: str):
    """A compiler and a function running a planned batch under XLA: (per type the rows
    read, the weighted sum of them, its gradients), one compiled program per bucket."""
    c = case(name)
    comp = Compiler.create(c.block, scheduler=scheduler)
    weights = _type_weights(comp.program.value_types)
    xla = XlaExecutor(comp.executor, min_rows=32)
    fns: dict = {}

    def run(feed):
        arrays, rows = xla.pack(feed.arrays)
        sinks = [arrays[f"buffer_{k}"].shape[0] - 1 for k in range(len(rows))]
        counts = np.array([len(r) for r in rows], np.int32)
        rows = [np.concatenate([r, np.full(xla.bucket(len(r)) - len(r), s, np.int32)])
                for r, s in zip(rows, sinks)]
        key = (xla.key(arrays), tuple(len(r) for r in rows))
        if key not in fns:
            fns[key] = tf.function(functools.partial(_values_and_grads, xla, weights,
                                                     c.variables), jit_compile=True)
        outs, loss, grads = fns[key](arrays, rows, counts)
        return [o.numpy()[:n] for o, n in zip(outs, counts)], loss, grads

    return comp, run, weights, fns


def _values_and_grads(xla, weights, variables, arrays, rows, counts):
    with tf.GradientTape() as tape:
        bufs = xla.compute(arrays)
        outs = [tf.gather(b, r) for b, r in zip(bufs, rows)]
        terms = [tf.constant(0.0)]
        for k, (o, w) in enumerate(zip(outs, weights)):
            if o.dtype == tf.float32:
                real = tf.range(tf.shape(o)[0]) < counts[k]
                mask = tf.reshape(tf.cast(real, tf.float32), [-1] + [1] * (o.shape.rank - 1))
                terms.append(tf.reduce_sum(o * w * mask))
        loss = tf.add_n(terms)
    grads = tape.gradient(loss, variables, unconnected_gradients=tf.UnconnectedGradients.ZERO)
    return outs, loss, [tf.convert_to_tensor(g) for g in grads]


def check_xla_batch(name: str, scheduler: str, inputs: list):
    c = case(name)
    comp, run, weights, _ = xla_engine(name, scheduler)
    plan = comp.plan(inputs)
    outs, loss, grads = run(plan.feed)
    got = comp.results(plan, outs)
    for i, x in enumerate(inputs):
        assert_same_result(got[i], reference_eval(c.block, x), f"{name}/{scheduler} xla {i}")
    ref_loss, ref_grads = reference_loss_and_grads(c, comp, weights, inputs)
    np.testing.assert_allclose(loss.numpy(), ref_loss.numpy(), atol=1e-4, rtol=1e-5)
    for v, g, r in zip(c.variables, grads, ref_grads):
        np.testing.assert_allclose(g.numpy(), tf.convert_to_tensor(r).numpy(), atol=ATOL,
                                   rtol=GRAD_RTOL,
                                   err_msg=f"{name}/{scheduler} xla gradient of {v.name}")


def random_tree(rng, labelled: bool = False, max_leaves: int = 6):
    """A binary tree of word ids in [0, 7) (as `models.trees`), or of labelled dicts
    (as `models.labelled_trees`)."""
    n = int(rng.integers(1, max_leaves + 1))

    def grow(n):
        if n == 1:
            w = int(rng.integers(0, 7))
            return {"word": w, "label": int(rng.integers(0, 3))} if labelled else w
        k = int(rng.integers(1, n))
        left, right = grow(k), grow(n - k)
        return {"left": left, "right": right, "label": int(rng.integers(0, 3))} \
            if labelled else (left, right)
    return grow(n)


def random_input(name: str, rng):
    if name == "rnn_with_metric_per_step":
        return rng.uniform(-1, 1, size=(int(rng.integers(0, 7)), 3)).astype("float32").tolist()
    return random_tree(rng, labelled=name == "tree_lstm_loss_everywhere")


@pytest.mark.parametrize("scheduler", ["agenda", "depth"])
@pytest.mark.parametrize("name", ["tree_lstm_loss_everywhere", "rnn_with_metric_per_step"])
def test_batched_under_xla_equals_the_reference(name, scheduler):
    rng = np.random.default_rng(0)
    batches = [[random_input(name, rng) for _ in range(n)] for n in (6, 9)]
    for inputs in batches:
        check_xla_batch(name, scheduler, inputs)
    assert len(xla_engine(name, scheduler)[3]) <= 2


# --- Model.fit / evaluate / predict with jit_compile=True --------------------------------


def _fit_weights(make_model, x, y, jit: bool, **fit_kwargs):
    model = make_model()
    start = [w.numpy().copy() for w in model.weights]
    history = model.fit(x, y, jit_compile=jit, verbose=0, **fit_kwargs)
    after = [w.numpy().copy() for w in model.weights]
    for w, v in zip(model.weights, start):  # the blocks' layers are shared: reset them
        w.assign(v)
    return model, after, history.history


def _tree_lstm_model():
    model = Model(case("tree_lstm").block)
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss=SCCE, metrics=["accuracy"])
    return model


def test_fit_with_jit_compile_trains_a_tree_lstm_exactly_as_without():
    rng = np.random.default_rng(0)
    trees = [random_tree(rng) for _ in range(16)]
    labels = rng.integers(0, 3, size=16)
    _, plain, h_plain = _fit_weights(_tree_lstm_model, trees, labels, False, batch_size=8,
                                     epochs=2)
    model, jit, h_jit = _fit_weights(_tree_lstm_model, trees, labels, True, batch_size=8,
                                     epochs=2)
    assert not all(np.allclose(a, b) for a, b in zip(plain, [w.numpy() for w in model.weights]))
    for a, b in zip(plain, jit):
        np.testing.assert_allclose(b, a, atol=1e-5)
    np.testing.assert_allclose(h_jit["loss"], h_plain["loss"], atol=1e-5)
    np.testing.assert_allclose(h_jit["accuracy"], h_plain["accuracy"])
    np.testing.assert_allclose(model.predict(trees, batch_size=16, jit_compile=True, verbose=0),
                               model.predict(trees, batch_size=16, verbose=0), atol=1e-5)
    np.testing.assert_allclose(
        model.evaluate(trees, labels, batch_size=16, jit_compile=True, verbose=0),
        model.evaluate(trees, labels, batch_size=16, verbose=0), atol=1e-5)
    assert model.jit_compile is False  # a call's jit_compile is the call's only


def _fold_rnn_model():
    model = Model(case("fold_rnn").block)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss=SCCE, jit_compile=True)
    return model


def test_compile_with_jit_compile_trains_a_sequence_model_exactly_as_without():
    rng = np.random.default_rng(1)
    seqs = [rng.normal(size=(int(rng.integers(0, 7)), 2)).astype("float32").tolist()
            for _ in range(20)]
    labels = rng.integers(0, 2, size=20)
    model, jit, h_jit = _fit_weights(_fold_rnn_model, seqs, labels, None, batch_size=10,
                                     epochs=2, shuffle=False)
    assert model.jit_compile is True
    _, plain, h_plain = _fit_weights(_fold_rnn_model, seqs, labels, False, batch_size=10,
                                     epochs=2, shuffle=False)
    for a, b in zip(plain, jit):
        np.testing.assert_allclose(b, a, atol=1e-5)
    np.testing.assert_allclose(h_jit["loss"], h_plain["loss"], atol=1e-5)


def test_fold_style_losses_and_metrics_under_xla_equal_the_graph_step():
    # a loss Metric at every node: a different number of values per batch, padded
    def make():
        model = Model(case("tree_lstm_loss_everywhere").block)
        model.compile(optimizer=keras.optimizers.Adam(0.05))
        return model

    rng = np.random.default_rng(2)
    trees = [random_tree(rng, labelled=True) for _ in range(16)]
    _, plain, h_plain = _fit_weights(make, trees, None, False, batch_size=8, epochs=2)
    model, jit, h_jit = _fit_weights(make, trees, None, True, batch_size=8, epochs=2)
    for a, b in zip(plain, jit):
        np.testing.assert_allclose(b, a, atol=1e-5)
    np.testing.assert_allclose(h_jit["loss"], h_plain["loss"], atol=1e-5)


def test_each_bucket_is_traced_once_deep_inputs_run_and_a_bad_input_is_named():
    # one model for the three (each XLA compilation costs ~10-30 s here)
    class Counting(ForwardSpy):
        traces = 0

        def forward_traced(self, x, gradient_mode=None):
            Counting.traces += "metric_counts" in x  # Python runs only while tracing

    trees, y = sign_data(32, seed=3)
    model = Counting(factories.tree_sign())
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss=SCCE, jit_compile=True)
    model.fit(trees, y, batch_size=16, epochs=1, verbose=0)
    step = next(c.cell_contents for c in model.train_function.__closure__
                if hasattr(c.cell_contents, "xla_traces"))  # its StepFunction
    buckets = [k for k in step._traced if k[0] == "xla"]
    assert Counting.traces == step.xla_traces == len(buckets) >= 1
    model.fit(trees, y, batch_size=16, epochs=3, verbose=0)  # shuffled: new buckets too
    buckets = [k for k in step._traced if k[0] == "xla"]
    assert Counting.traces == step.xla_traces == len(buckets)  # no bucket traced twice
    deep = 1.0
    for i in range(400):
        deep = (deep, float(i % 3 - 1))
    np.testing.assert_allclose(model.predict([deep, 2.0], verbose=0),
                               model.predict([deep, 2.0], jit_compile=False, verbose=0),
                               rtol=1e-5)  # 400 levels: logits ~3e7
    # a bad input in the second batch, after the first has run under XLA, is named
    trees[21] = (trees[21], float("nan"))
    with pytest.raises(InputError) as err:
        model.fit(trees, y, batch_size=16, verbose=0, shuffle=False)
    assert err.value.example_index == 21
    assert "nan is not finite" in str(err.value)


def test_jit_compile_auto_stays_off_and_bad_values_are_refused():
    model = Model(factories.tree_sign())
    model.compile(optimizer="sgd", loss=SCCE)  # Keras' default: "auto"
    assert model.jit_compile is False
    model.compile(optimizer="sgd", loss=SCCE, jit_compile=True)
    assert model.jit_compile is True
    with pytest.raises(ValueError, match="jit_compile must be True, False or 'auto'"):
        model.jit_compile = "yes"


def test_a_non_finite_step_under_xla_names_its_batch_and_is_not_applied():
    # tf.debugging assertions are compiled away by XLA; a NaN still stops fit, naming
    # the examples of its batch, with the weights of the last good step
    from tests.compiler.test_bad_data import log_loss_model
    xs = list(np.random.default_rng(0).normal(size=16))
    xs[11] = -1000.0
    model = log_loss_model()
    before = [w.numpy().copy() for w in model.weights]
    with pytest.raises(NonFiniteLossError) as err:
        model.fit(xs, batch_size=8, epochs=1, shuffle=False, jit_compile=True, verbose=0)
    assert err.value.examples == list(range(8, 16)) and err.value.batch == 1
    assert int(model.optimizer.iterations) == 1
    assert not np.allclose(before[0], model.weights[0].numpy())  # batch 0 was applied


def _xla_programs(model) -> list:
    step = next(c.cell_contents for c in model.train_function.__closure__
                if hasattr(c.cell_contents, "xla_traces"))  # its StepFunction
    return [fn for key, fn in step._traced.items() if key[0] == "xla"]


def test_the_compiled_step_takes_one_array_per_dtype_and_has_no_conds_or_loop_reads():
    rng = np.random.default_rng(4)
    trees = [random_tree(rng) for _ in range(8)]
    model = _tree_lstm_model()
    model.fit(trees, rng.integers(0, 3, size=8), batch_size=8, jit_compile=True, verbose=0)
    (fn,) = _xla_programs(model)
    flat, labels = fn.structured_input_signature[0][0]
    assert sorted(flat) == ["<f4", "<i4"] and labels.shape == (8,)
    # every launch's op handles empty launches: none runs under a tf.cond, inside
    # which the embedding's gradient would be made dense (a whole-table tensor); the
    # one cond is the update's, skipped when the step is not finite
    graph = fn.graph
    conds = [op for op in graph.get_operations() if op.type in ("If", "StatelessIf")]
    assert len(conds) == 1 and not conds[0].outputs[0].dtype.is_floating
    # the loop reads no weight per iteration: its gradient would keep each read
    library = graph.as_graph_def().library.function
    loop = [f for f in library if f.signature.name.startswith("while_")]  # and its branches
    assert loop and all(n.op != "ReadVariableOp" for f in loop for n in f.node_def)


def test_flattened_batches_expand_to_the_converted_arrays():
    from refold.compiler.feeding.xla_buckets import XlaBatches
    rng = np.random.default_rng(5)
    model = _tree_lstm_model()
    model.fit([random_tree(rng) for _ in range(3)], [0, 1, 2], jit_compile=True, verbose=0)
    xla = model.tracer.xla()
    batch = xla.convert(model.feed.of_role("train").batch(0))
    layout, flat = XlaBatches.flatten(batch)
    assert hash(layout) == hash(XlaBatches.flatten(batch)[0])  # a key
    arrays, labels = XlaBatches.expand(tf.nest.map_structure(tf.constant, flat), layout)
    np.testing.assert_array_equal(labels.numpy(), batch[1])
    assert sorted(arrays) == sorted(batch[0])
    for name, a in batch[0].items():
        assert arrays[name].shape == a.shape and arrays[name].dtype == a.dtype, name
        if not name.startswith(("buffer_", "loop_width")):  # read for its shape only
            np.testing.assert_array_equal(arrays[name].numpy(), a, err_msg=name)
