"""Every use of a private TensorFlow or Keras interface, in one place.

Refold's hot paths need a few things TensorFlow and Keras do not export: whether a
gradient tape is recording, a concrete function's flat call, the gradient helper
`tf.while_loop` itself uses, TensorFlow's own `MatMul` gradient, the class of a loop
body's graph, and Keras' compiled loss and metrics. Each is reached only through a
function (or mixin) here, which names what it wraps and what happens on a version without it: a
fallback that keeps results right (perhaps slower), or a `VersionError` naming the
installed version and the tested range. `pyproject.toml` declares that range
(`TESTED`), and `tests/test_compat.py` runs every function on the installed versions.

>>> from refold import compat
>>> compat.tape_may_record()            # no tape is watching here
False
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# The versions the suite has run on: pyproject.toml's bounds stop at the first
# untested minor release (BENCHMARKS.md and the docs' install page say which ran).
TESTED = {"tensorflow": ("2.18", "2.21"), "keras": ("3.10", "3.15")}


class VersionError(RuntimeError):
    """An installed TensorFlow or Keras lacks an interface Refold needs."""


def _missing(what: str, package: str) -> VersionError:
    import importlib.metadata
    version = importlib.metadata.version(package)
    low, high = TESTED[package]
    return VersionError(f"{what} is missing in {package} {version}; Refold is tested with "
                        f"{package} {low} to {high}.x (pip install '{package}>={low},"
                        f"<={high}.*')")


# --- TensorFlow ------------------------------------------------------------------------

def tape_may_record() -> bool:
    """Whether a gradient tape (or a `tf.function` being differentiated) could record
    ops made now: `tensorflow.python.eager.record.could_possibly_record`. Without it,
    True: the caller then builds what a gradient needs, which is never wrong."""
    try:
        from tensorflow.python.eager import record
        return bool(record.could_possibly_record())
    except (ImportError, AttributeError):
        return True


def call_flat(fn: Any, tensors: list) -> Any:
    """`fn(*tensors)` for a `ConcreteFunction`, without binding the tensors to its
    signature again: `ConcreteFunction._call_flat`. Without it, the plain call.

    Eagerly, with no gradient tape that could record and no cancellation scope, the
    function runs straight through the eager context's `execute` by its name
    (`_direct_call`): what `_call_flat` then does around that call (control
    captures, tape checks, error interpolation) has nothing to do, and skipping it
    halves the Python cost of a small function's call."""
    flat = getattr(fn, "_call_flat", None)
    if flat is None:
        return fn(*tensors)
    direct = _direct.get(fn) if _direct is not None else None
    if direct is None:
        direct = _direct_call(fn)
    if direct:
        ctx = _eager.context.context()
        if ctx.executing_eagerly() and _eager.cancellation.context() is None \
                and not _eager.could_record():
            return direct(ctx, tensors)
    return flat(tensors, fn.captured_inputs)


_direct: Any = None  # WeakKeyDictionary: function -> its direct call, or False
_eager: Any = None  # the TensorFlow modules `call_flat` uses


def _direct_call(fn: Any) -> Callable | bool:
    """A call of `fn` by its name through `tensorflow.python.eager.execute`, outputs
    packed as `_call_flat` packs them; False for a function it cannot call (control
    captures, outputs with resource handle data, or an interface missing)."""
    global _direct, _eager
    if _direct is None:
        import types
        import weakref

        from tensorflow.python.eager import cancellation, context, execute, record
        _eager = types.SimpleNamespace(
            cancellation=cancellation, context=context, execute=execute,
            could_record=getattr(record, "could_possibly_record", None))
        _direct = weakref.WeakKeyDictionary()
    call = _direct[fn] = _eager.could_record is not None and _make_direct_call(fn) or False
    return call


def _make_direct_call(fn: Any) -> Callable | None:
    try:
        atomic = fn._inference_function
        name = atomic.name.decode("utf-8")
        outputs = atomic.function_type.flat_outputs
        pack = fn.function_type.pack_output
        captures = list(fn.captured_inputs)
        control = atomic._call_options.control_captures
    except (AttributeError, TypeError):
        return None
    if control or any(o.dtype._handle_data for o in outputs):
        return None
    n, execute = len(outputs), _eager.execute.execute
    if _flat_list_of_tensors(fn):
        pack = list  # what pack_output makes of a flat list of tensors

    def call(ctx, tensors):
        options = ctx.function_call_options
        attrs = _ATTRS.get((options.config_proto_serialized, options.executor_type))
        if attrs is None:
            attrs = _lean_attrs(options)
        return pack(execute(name, num_outputs=n, inputs=[*tensors, *captures],
                            attrs=attrs, ctx=ctx) or None) if n else pack(None)
    return call


# (config, executor) -> the call's attributes with Grappler's lean options (`_lean_attrs`)
_ATTRS: dict = {}


def _lean_attrs(options: Any) -> tuple:
    """The attributes a function call passes (`FunctionCallOptions.as_attrs`), with
    leaner graph rewrites for Grappler to run when the function is first called: one
    round of the optimizers instead of two and, on a machine without GPUs, no memory
    optimizer (it rewrites for device memory), each where the user left it at its
    default; and no TFG optimizer. Refold's functions are large generated graphs whose
    second round changes a few nodes, and the rounds were a large part of a step's
    first call (BENCHMARKS.md, "Streams and the first fit")."""
    import itertools

    from tensorflow.core.protobuf import config_pb2, rewriter_config_pb2

    attrs = options.as_attrs()
    config = config_pb2.ConfigProto()
    try:
        config.ParseFromString(attrs["config_proto"])
    except Exception:  # noqa: BLE001 (an unreadable config: passed on as it is)
        config = None
    if config is not None:
        rewrites = config.graph_options.rewrite_options
        defaults = rewriter_config_pb2.RewriterConfig
        if rewrites.meta_optimizer_iterations == defaults.DEFAULT_NUM_ITERS:
            rewrites.meta_optimizer_iterations = defaults.ONE
        if not rewrites.disable_tfg_optimizer:
            rewrites.disable_tfg_optimizer = True
        if rewrites.memory_optimization == defaults.DEFAULT_MEM_OPT and not _has_gpu():
            rewrites.memory_optimization = defaults.NO_MEM_OPT
        attrs["config_proto"] = config.SerializeToString(deterministic=True)
    found = tuple(itertools.chain(*attrs.items()))
    _ATTRS[(options.config_proto_serialized, options.executor_type)] = found
    return found


def _has_gpu() -> bool:
    import tensorflow as tf
    return bool(tf.config.list_physical_devices("GPU"))


def _flat_list_of_tensors(fn: Any) -> bool:
    import tensorflow as tf
    out = getattr(fn, "structured_outputs", None)
    return type(out) is list and len(out) > 0 and all(type(o) is tf.Tensor or (
        isinstance(o, tf.Tensor) and not isinstance(o, tf.__internal__.CompositeTensor))
        for o in out)


def while_gradients(ys: list, xs: list, grad_ys: list, src_graph: Any) -> list:
    """The gradients of `ys` to `xs` taken in the forward graph `src_graph` from
    inside a gradient function, as `tf.while_loop`'s own gradient does:
    `tensorflow.python.ops.gradients_util._GradientsHelper`."""
    try:
        from tensorflow.python.ops import gradients_util
        helper = gradients_util._GradientsHelper  # noqa: SLF001
    except (ImportError, AttributeError):
        raise _missing("gradients_util._GradientsHelper (the loop's input gradients)",
                       "tensorflow") from None
    return helper(ys, xs, grad_ys=grad_ys, src_graph=src_graph)


def scratch_graph(name: str) -> Any:
    """A `FuncGraph` to trace a function in without running it (what `tf.function`
    traces into), for finding the variables it reads. Without the class, a plain
    `tf.Graph`, in which variable reads trace the same."""
    try:
        from tensorflow.python.framework.func_graph import FuncGraph
        return FuncGraph(name)
    except (ImportError, AttributeError):
        import tensorflow as tf
        return tf.Graph()


def is_while_body(graph: Any) -> bool:
    """Whether `graph` is the body of a `tf.while_loop` (its class, which TensorFlow
    does not export: `control_flow_v2_func_graphs.WhileBodyFuncGraph`). Without it,
    False: the loop products then keep TensorFlow's gradient."""
    try:
        from tensorflow.python.ops.control_flow_v2_func_graphs import WhileBodyFuncGraph
    except (ImportError, AttributeError):
        return False
    return isinstance(graph, WhileBodyFuncGraph)


def matmul_gradient(op: Any, grad: Any) -> Any:
    """TensorFlow's own gradient of a `MatMul` op: `math_grad._MatMulGrad`."""
    try:
        from tensorflow.python.ops import math_grad
        return math_grad._MatMulGrad(op, grad)  # noqa: SLF001
    except (ImportError, AttributeError):
        raise _missing("math_grad._MatMulGrad (the MatMul gradient)", "tensorflow") from None


def matmul(a: Any, b: Any, **kwargs) -> Any:
    """The `MatMul` kernel with its gradient flags (`grad_a`, `grad_b`: the product
    is a gradient, which oneDNN may compute differently), which `tf.linalg.matmul`
    does not pass: `tf.raw_ops.MatMul`. Where the kernel lacks the flags, without
    them (the same product)."""
    import tensorflow as tf
    try:
        return tf.raw_ops.MatMul(a=a, b=b, **kwargs)
    except TypeError:
        kwargs.pop("grad_a", None)
        kwargs.pop("grad_b", None)
        return tf.raw_ops.MatMul(a=a, b=b, **kwargs)


def is_eager_tensor(t: Any) -> bool:
    """Whether `t` is an eager tensor (a value; a graph tensor has a `graph`)."""
    import tensorflow as tf
    return tf.is_tensor(t) and not hasattr(t, "graph")


def default_graph() -> Any:
    """The graph ops are being made in (`tf.compat.v1.get_default_graph`, which a
    `tf.function` trace sets)."""
    import tensorflow as tf
    return tf.compat.v1.get_default_graph()


def graph_store(graph: Any, key: str) -> dict:
    """A dict kept on `graph` under `key`, for values made once per graph.

    A Python attribute of the `tf.Graph`, made on first use, so the values go when
    the graph goes. Where graphs take no attributes, a new dict each call (the
    values are then made again: slower, the same results)."""
    name = f"_refold_{key}"
    store = getattr(graph, name, None)
    if store is None:
        store = {}
        try:
            setattr(graph, name, store)
        except (AttributeError, TypeError):
            pass
    return store


def in_multi_worker_mode(strategy: Any) -> bool:
    """Whether `strategy` (a `MultiWorkerMirroredStrategy`) spans several workers.

    `strategy.extended._in_multi_worker_mode()`. Without it, whether its cluster
    resolver names a task (a cluster of one worker then counts as several, which
    only costs a gather where a concatenation would do)."""
    check = getattr(strategy.extended, "_in_multi_worker_mode", None)
    if check is not None:
        return bool(check())
    resolver = getattr(strategy, "cluster_resolver", None)
    return bool(resolver is not None and resolver.task_type)


def register_gradient(name: str) -> Callable:
    """`tf.RegisterGradient(name)`, as a decorator."""
    import tensorflow as tf
    return tf.RegisterGradient(name)


def set_op_note(op: Any, key: str, value: Any) -> bool:
    """Attaches `value` to graph operation `op` under `key` (a Python attribute of the
    `tf.Operation`), for a gradient function to find; False where operations take no
    attributes (the gradient then takes its fallback)."""
    try:
        setattr(op, f"_refold_{key}", value)
        return True
    except (AttributeError, TypeError):
        return False


def op_note(op: Any, key: str) -> Any:
    """What `set_op_note` attached to `op` under `key`, or None."""
    return getattr(op, f"_refold_{key}", None)


# --- Keras -----------------------------------------------------------------------------

def compiled_loss(model: Any) -> Any:
    """The loss `model.compile(loss=...)` made (Keras' `CompileLoss`, `model._compile_loss`),
    or None without one."""
    if not hasattr(model, "_compile_loss"):
        raise _missing("Model._compile_loss (the compiled loss)", "keras")
    return model._compile_loss  # noqa: SLF001


def compiled_metrics(model: Any) -> Any:
    """The metrics `model.compile(metrics=...)` made (`model._compile_metrics`), or None."""
    if not hasattr(model, "_compile_metrics"):
        raise _missing("Model._compile_metrics (the compiled metrics)", "keras")
    return model._compile_metrics  # noqa: SLF001


def loss_tracker(model: Any) -> Any:
    """The `keras.metrics.Mean` of the logged "loss", or None before `compile`.

    `model._loss_tracker`, which Keras' own steps update and a custom `train_step`
    must too."""
    if not hasattr(model, "_loss_tracker"):
        raise _missing("Trainer._loss_tracker (the loss metric)", "keras")
    return model._loss_tracker  # noqa: SLF001


def logs_in_order(model: Any, logs: dict) -> Any:
    """`logs` as `train_on_batch(return_dict=False)` gives them.

    The loss then the metrics in Keras' order (`model._flatten_metrics_in_order`),
    one value alone as a scalar. Without it, the values in the order of `logs`,
    which Keras' own steps fill loss first."""
    flatten = getattr(model, "_flatten_metrics_in_order", None)
    if flatten is not None:
        return flatten(logs)
    values = list(logs.values())
    return values[0] if len(values) == 1 else values


def loss_keywords(loss: Any) -> dict:
    """The keyword arguments a Keras built-in loss passes to its function.

    `from_logits` and the like: `LossFunctionWrapper._fn_kwargs`. Without it, `{}`
    (labels are then checked as for the function's defaults)."""
    return dict(getattr(loss, "_fn_kwargs", None) or {})


class AutoJitOff:
    """Mixin for a `keras.Model` whose `jit_compile="auto"` leaves XLA off.

    Keras' "auto" (its default) turns XLA on whenever a GPU is visible. A mixin
    because Keras asks the model itself (`Trainer._resolve_auto_jit_compile`,
    private); if a Keras release stops asking, "auto" falls to Keras' own choice.

    Refold's `Model` uses it: "auto" cannot know how many epochs will repay XLA's
    compilations (BENCHMARKS.md, "XLA for the loop")."""

    def _resolve_auto_jit_compile(self) -> bool:
        return False


def inner_layers(layer: Any) -> list:
    """`layer` and every Keras layer inside it, at any depth (`Layer._flatten_layers`).
    Without it, the layers reached through attributes, depth first."""
    flatten = getattr(layer, "_flatten_layers", None)
    if flatten is not None:
        return list(flatten(include_self=True))
    import keras
    out, stack, seen = [], [layer], set()
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        out.append(x)
        for v in vars(x).values():
            items = v if isinstance(v, (list, tuple)) else [v]
            stack += [i for i in items if isinstance(i, keras.layers.Layer)]
    return out


def keras_safe_mode() -> bool | None:
    """The safe mode `keras.models.load_model(safe_mode=...)` or
    `keras.config.enable_unsafe_deserialization()` set (True, False, or None when
    neither said): `keras.src.saving.serialization_lib.in_safe_mode`. Without it,
    None (safe)."""
    try:
        from keras.src.saving import serialization_lib
        return serialization_lib.in_safe_mode()
    except (ImportError, AttributeError):
        return None
