"""`refold.compat`, the one door to TensorFlow's and Keras' private interfaces: each
function works on the installed versions, and each falls back (or names the version)
where its interface is missing."""

from __future__ import annotations

import importlib.metadata

import keras
import numpy as np
import pytest
import tensorflow as tf

from refold import compat
from tests.test_dependencies import project


def test_the_declared_bounds_are_the_tested_range():
    deps = {d.split(">")[0].split("=")[0].split("<")[0].strip(): d
            for d in project()["dependencies"]}
    for package, (low, high) in compat.TESTED.items():
        major, minor = map(int, high.split("."))
        assert deps[package] == f"{package}>={low},<{major}.{minor + 1}"
        installed = importlib.metadata.version(package)
        assert tuple(map(int, installed.split(".")[:2])) >= tuple(map(int, low.split(".")))


def test_tape_may_record_sees_a_tape():
    assert not compat.tape_may_record()
    with tf.GradientTape():
        assert compat.tape_may_record()


def test_call_flat_calls_a_concrete_function_as_a_plain_call_does():
    fn = tf.function(lambda a, b: a * b + 1.0).get_concrete_function(
        tf.TensorSpec([2]), tf.TensorSpec([2]))
    a, b = tf.constant([1.0, 2.0]), tf.constant([3.0, 4.0])
    np.testing.assert_array_equal(compat.call_flat(fn, [a, b]), fn(a, b))


def test_call_flat_calls_by_name_with_the_plain_call_s_outputs_and_gradients():
    v = tf.Variable([0.5, 2.0])
    shapes = {
        "list": tf.function(lambda a: [a * v, a + 1.0]),
        "dict": tf.function(lambda a: {"y": a * v, "pair": (a, 2.0 * a)}),
        "tensor": tf.function(lambda a: tf.reduce_sum(a * v)),
        "none": tf.function(lambda a: None),
    }
    a = tf.constant([1.0, 3.0])
    for name, f in shapes.items():
        fn = f.get_concrete_function(tf.TensorSpec([2]))
        assert compat._direct_call(fn), name  # called by its name, not through _call_flat
        got, want = compat.call_flat(fn, [a]), fn(a)
        tf.nest.map_structure(np.testing.assert_array_equal, got, want)
        assert type(got) is type(want), name
    fn = shapes["list"].get_concrete_function(tf.TensorSpec([2]))
    with tf.GradientTape() as tape:  # a tape records: the plain flat call, differentiable
        tape.watch(a)
        y = tf.reduce_sum(compat.call_flat(fn, [a])[0])
    np.testing.assert_array_equal(tape.gradient(y, [a, v])[1], [1.0, 3.0])


def _rewrites(attrs: tuple):
    """The Grappler options in a call's flat attributes."""
    from tensorflow.core.protobuf import config_pb2
    config = config_pb2.ConfigProto()
    config.ParseFromString(dict(zip(attrs[::2], attrs[1::2]))["config_proto"])
    return config.graph_options.rewrite_options


def test_a_direct_call_asks_grappler_for_one_round_without_tfg_or_memory_rewrites(
        monkeypatch):
    """A function's first call optimizes its graph with the options its call passes:
    Refold's calls pass one round of optimizers, no TFG and (without GPUs) no memory
    optimizer; an option the user set in the context is kept."""
    from tensorflow.core.protobuf import config_pb2, rewriter_config_pb2
    from tensorflow.python.eager import context
    rewrite = rewriter_config_pb2.RewriterConfig
    compat._direct_call(tf.function(lambda: 1.0).get_concrete_function())  # its modules
    seen, execute = [], compat._eager.execute.execute
    monkeypatch.setattr(compat._eager.execute, "execute",
                        lambda *a, **k: seen.append(k["attrs"]) or execute(*a, **k))
    fn = tf.function(lambda a: a * 2.0).get_concrete_function(tf.TensorSpec([2]))
    np.testing.assert_array_equal(compat.call_flat(fn, [tf.constant([1.0, 2.0])]), [2.0, 4.0])
    ours = _rewrites(seen[-1])
    assert ours.meta_optimizer_iterations == rewrite.ONE and ours.disable_tfg_optimizer
    gpu = bool(tf.config.list_physical_devices("GPU"))
    assert ours.memory_optimization == (rewrite.DEFAULT_MEM_OPT if gpu else rewrite.NO_MEM_OPT)
    theirs = context.context().function_call_options.as_attrs()  # the context's: unchanged
    assert _rewrites(tuple(x for kv in theirs.items() for x in kv)).meta_optimizer_iterations == 0
    config = config_pb2.ConfigProto()
    config.graph_options.rewrite_options.meta_optimizer_iterations = rewrite.TWO
    config.graph_options.rewrite_options.memory_optimization = rewrite.HEURISTICS
    options = context.FunctionCallOptions(config_proto=config)
    kept = _rewrites(compat._lean_attrs(options))
    assert kept.meta_optimizer_iterations == rewrite.TWO
    assert kept.memory_optimization == rewrite.HEURISTICS


def test_while_gradients_are_the_gradients_of_a_forward_graph():
    @tf.function
    def grads(x):
        @tf.custom_gradient
        def f(x):
            y = tf.sin(x) * x

            def grad(dy):
                return compat.while_gradients([y], [x], [dy], y.graph)[0]
            return y, grad

        with tf.GradientTape() as tape:
            tape.watch(x)
            out = f(x)
        return tape.gradient(out, x)

    x = tf.constant([0.5, 1.5])
    np.testing.assert_allclose(grads(x), np.cos(x) * x + np.sin(x), rtol=1e-6)


def test_scratch_graphs_loop_bodies_and_eager_tensors():
    with compat.scratch_graph("scratch").as_default() as g:
        assert compat.default_graph() is g
        assert not compat.is_eager_tensor(tf.constant(1.0))
    assert compat.is_eager_tensor(tf.constant(1.0))
    seen = []

    @tf.function
    def loop():
        def body(i):
            seen.append(compat.is_while_body(compat.default_graph()))
            return i + 1
        return tf.while_loop(lambda i: i < 3, body, [0])

    loop()
    assert seen == [True] and not compat.is_while_body(tf.Graph())


def test_the_matmul_gradient_and_kernel_are_tensorflows():
    a, b = tf.constant([[1.0, 2.0]]), tf.constant([[3.0], [4.0]])
    np.testing.assert_array_equal(compat.matmul(a, b, grad_a=True), a @ b)
    np.testing.assert_array_equal(compat.matmul(a, tf.transpose(b), transpose_b=True,
                                                grad_b=True), a @ b)

    @tf.function
    def check(a, b):
        z = tf.linalg.matmul(a, b)
        ga, gb = compat.matmul_gradient(z.op, tf.ones_like(z))
        return ga, gb

    ga, gb = check(a, b)
    np.testing.assert_array_equal(ga, tf.ones([1, 1]) @ tf.transpose(b))
    np.testing.assert_array_equal(gb, tf.transpose(a) @ tf.ones([1, 1]))


def test_op_notes_ride_on_graph_operations():
    with tf.Graph().as_default():
        op = tf.constant(1.0).op
        assert compat.set_op_note(op, "weight", "w") and compat.op_note(op, "weight") == "w"
        assert compat.op_note(op, "other") is None


def test_keras_compiled_loss_metrics_layers_and_safe_mode():
    inner = keras.layers.Dense(2)
    outer = keras.Sequential([keras.Input((3,)), inner])
    outer.compile(loss="mse", metrics=["mae"])
    assert compat.compiled_loss(outer) is not None
    assert compat.compiled_metrics(outer) is not None
    assert inner in compat.inner_layers(outer) and compat.inner_layers(outer)[0] is outer
    from keras.src.saving import serialization_lib
    with serialization_lib.SafeModeScope(False):
        assert compat.keras_safe_mode() is False
    with serialization_lib.SafeModeScope(True):
        assert compat.keras_safe_mode() is True


def test_missing_interfaces_fall_back_or_name_the_version(monkeypatch):
    from tensorflow.python.eager import record
    from tensorflow.python.ops import gradients_util
    monkeypatch.delattr(record, "could_possibly_record")
    assert compat.tape_may_record()  # never wrong: the caller builds the gradient
    assert compat.call_flat(lambda a, b: a + b, [1, 2]) == 3
    monkeypatch.delattr(gradients_util, "_GradientsHelper")
    with pytest.raises(compat.VersionError, match=r"missing in tensorflow 2\.\d+.*tested with "
                                                  r"tensorflow 2\.\d+ to 2\.\d+\.x"):
        compat.while_gradients([], [], [], None)
    with pytest.raises(compat.VersionError, match=r"_compile_loss.*missing in keras 3\."):
        compat.compiled_loss(object())

    class Holder:  # no _flatten_layers: the attributes are walked instead
        def __init__(self):
            self.dense = keras.layers.Dense(1)
            self.more = [keras.layers.Dense(2)]

    holder = Holder()
    found = compat.inner_layers(holder)
    assert found[0] is holder and len(found) == 3
    assert {id(x) for x in found} == {id(holder), id(holder.dense), id(holder.more[0])}


# Every private name compat reaches, as (module or object, attribute): each must still
# exist, or compat runs its fallback; a release that drops one fails here by name
# rather than slowing Refold down silently.
def _private_names():
    from keras.src.saving import serialization_lib
    from tensorflow.python.eager import record
    from tensorflow.python.framework import func_graph
    from tensorflow.python.ops import control_flow_v2_func_graphs, gradients_util, math_grad
    multi_worker = tf.distribute.MultiWorkerMirroredStrategy
    return [
        (record, "could_possibly_record"), (gradients_util, "_GradientsHelper"),
        (func_graph, "FuncGraph"), (control_flow_v2_func_graphs, "WhileBodyFuncGraph"),
        (math_grad, "_MatMulGrad"), (serialization_lib, "in_safe_mode"),
        (tf.function(lambda: tf.constant(1.0)).get_concrete_function(), "_call_flat"),
        (keras.Model, "_flatten_metrics_in_order"), (keras.Model, "_resolve_auto_jit_compile"),
        (keras.layers.Layer, "_flatten_layers"),
        (type(multi_worker().extended), "_in_multi_worker_mode"),
    ]


def test_every_private_name_compat_uses_exists_in_the_installed_versions():
    missing = [f"{getattr(owner, '__name__', type(owner).__name__)}.{name}"
               for owner, name in _private_names() if not hasattr(owner, name)]
    assert missing == []
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    model.compile(loss="mse")
    for name in ("_loss_tracker", "_compile_loss", "_compile_metrics"):
        assert hasattr(model, name), name
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    assert getattr(loss, "_fn_kwargs", None) == compat.loss_keywords(loss)
    # the one private override (compat.AutoJitOff): Keras still asks the model itself
    asked = []

    class Asks(keras.Sequential):
        def _resolve_auto_jit_compile(self):
            asked.append(True)
            return True

    Asks([keras.Input((1,)), keras.layers.Dense(1)]).compile(loss="mse", jit_compile="auto")
    assert asked


def test_the_loss_tracker_logs_in_order_and_loss_keywords_are_keras():
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    model.compile(loss="mse", metrics=["mae"])
    tracker = compat.loss_tracker(model)
    assert isinstance(tracker, keras.metrics.Mean) and tracker.name == "loss"
    assert compat.logs_in_order(model, {"loss": 1.0, "mae": 2.0}) == [1.0, 2.0]
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    assert compat.loss_keywords(loss)["from_logits"] is True
    assert compat.loss_keywords(keras.losses.MeanSquaredError()) == {}


def test_auto_jit_off_keeps_keras_auto_from_choosing_xla():
    class Auto(compat.AutoJitOff, keras.Sequential):
        pass

    model = Auto([keras.Input((1,)), keras.layers.Dense(1)])
    model.compile(loss="mse", jit_compile="auto")
    assert model.jit_compile is False


def test_graph_stores_and_multi_worker_mode():
    with tf.Graph().as_default() as g:
        store = compat.graph_store(g, "test")
        store["x"] = 1
        assert compat.graph_store(g, "test") is store
        assert compat.graph_store(tf.Graph(), "test") == {}
    assert not compat.in_multi_worker_mode(tf.distribute.MultiWorkerMirroredStrategy())


def test_missing_keras_interfaces_fall_back(monkeypatch):
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    model.compile(loss="mse")
    for cls in type(model).__mro__:
        if "_flatten_metrics_in_order" in vars(cls):
            monkeypatch.delattr(cls, "_flatten_metrics_in_order")
    assert compat.logs_in_order(model, {"loss": 3.0}) == 3.0
    assert compat.logs_in_order(model, {"loss": 3.0, "mae": 1.0}) == [3.0, 1.0]
    with pytest.raises(compat.VersionError, match="_loss_tracker"):
        compat.loss_tracker(object())
    assert compat.loss_keywords(object()) == {}
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    monkeypatch.delattr(type(strategy.extended), "_in_multi_worker_mode")
    assert not compat.in_multi_worker_mode(strategy)
