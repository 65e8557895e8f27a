"""The loop's weight products take their gradient with the weight transposed once per step.

TensorFlow differentiates `x @ W` to `x` as `MatMul(dz, W, transpose_b=True)`, which
repacks `W` at every call, at the loop's few rows a cost that outweighs the product
itself (BENCHMARKS.md, "The recurrent kernel transposed once per step"). The graph
executor calls every loop op under `transposed_once()`: a `MatMul` made there whose
second argument is a weight read (a variable or a captured tensor, maybe cast, from
outside the loop) takes its gradient to `x` as `dz @ W^T` with `W^T` made once in the
graph that holds the loop, and `x^T dz` for `W` as TensorFlow does. The weight is read
there as the loop is traced (its value at the forward pass, as TensorFlow's gradient
sees it), and transposed when the gradient is built. Any other product keeps
TensorFlow's gradient. This reaches every cell, the zoo's and a user's (a `td.Function`,
a Keras `Dense`), wherever TensorFlow differentiates the loop. The backward loop the
engine replays itself at small batches (`scheduler.reverse`) takes each launch's
gradient with a tape, which does not see this gradient, and keeps TensorFlow's
(transposing there did not pay: BENCHMARKS.md, "Any cell's weight products"). The XLA
executor (`scheduler.xla`) leaves its products to XLA (not measured there).

>>> import tensorflow as tf
>>> w = tf.Variable([[1.0, 2.0], [3.0, 4.0]])
>>> def loss(x):
...     def body(i, h):
...         with transposed_once():
...             return i + 1, tf.tanh(h @ w)
...     return tf.reduce_sum(tf.while_loop(lambda i, h: i < 3, body, (0, x))[1])
>>> def grads(x):
...     with tf.GradientTape() as tape:
...         tape.watch(x)
...         y = loss(x)
...     return tape.gradient(y, [x, w])
>>> x = tf.constant([[0.1, -0.2]])
>>> graph = tf.function(grads).get_concrete_function(x).graph
>>> [op.type for op in graph.get_operations() if op.type == "Transpose"]
['Transpose']
>>> eager = grads(x)
>>> all(bool(tf.reduce_all(tf.abs(a - b) < 1e-6)) for a, b in zip(tf.function(grads)(x), eager))
True
"""

from __future__ import annotations

import contextlib

from refold import compat

GRADIENT = "RefoldLoopMatMul"

# Whether loop products take the gradient above (`benchmarks.ablations --only
# transpose` switches it, at trace time).
TRANSPOSE_ONCE = True


@contextlib.contextmanager
def transposed_once():
    """Within: every `MatMul` made in the current graph takes `_matmul_grad`, if a
    tape could record it (an inference trace keeps TensorFlow's ops as they are,
    so that a SavedModel of it holds no gradient of ours); on the way out, each
    such product whose weight can be read outside the loop gets that read."""
    graph = compat.default_graph()
    holder = _loop_holder(graph)
    if not (TRANSPOSE_ONCE and holder is not None and compat.tape_may_record()):
        yield
        return
    first = len(graph.get_operations())
    with graph.gradient_override_map({"MatMul": GRADIENT}):
        yield
    for op in graph.get_operations()[first:]:
        if op.type == "MatMul" and not (op.get_attr("transpose_a")
                                        or op.get_attr("transpose_b")):
            compat.set_op_note(op, "weight", _outside(op.inputs[1], holder))


@compat.register_gradient(GRADIENT)
def _matmul_grad(op, grad):
    w_t = _transposed(op)
    if w_t is None:
        return compat.matmul_gradient(op, grad)
    return (compat.matmul(grad, w_t, grad_a=True),
            compat.matmul(op.inputs[0], grad, transpose_a=True, grad_b=True))


def _transposed(op):
    """The weight of product `op` transposed in the graph that holds the loop and
    captured by the current graph, if `transposed_once` read it there; else None."""
    import tensorflow as tf
    w = compat.op_note(op, "weight")
    chain = None if w is None or not w.dtype.is_floating else _graphs_below(w.graph)
    if chain is None:
        return None
    with w.graph.as_default():
        w_t = tf.transpose(w)
    for graph in reversed(chain):  # a conditional's gradient graph captures only
        w_t = graph.capture(w_t)   # from its own outer graph (or its forward branch)
    return w_t


def _graphs_below(holder) -> list | None:
    """The graphs from the current one up to `holder` (excluded), or None if
    `holder` does not enclose the current graph."""
    chain, graph = [], compat.default_graph()
    while graph is not holder:
        if getattr(graph, "outer_graph", None) is None:
            return None
        chain.append(graph)
        graph = graph.outer_graph
    return chain


def _loop_holder(graph):
    """The graph that holds the nearest `tf.while_loop` around `graph` (its body, or
    a branch inside it), or None outside loop bodies. The nearest: around an outer
    loop that changes the weights between its iterations, each reads its own.

    A loop body is known by its class, not its name: a graph's second loop (the
    backward loop `scheduler.reverse` replays after the forward one) is named
    `while_1_body_*`, which a test of the name for "while_body" missed."""
    while getattr(graph, "outer_graph", None) is not None:
        if compat.is_while_body(graph):
            return graph.outer_graph
        graph = graph.outer_graph
    return None


def _outside(t, holder):
    """The tensor of graph `holder` that `t` reads or recomputes from it: a captured
    placeholder's outer tensor (captured by `holder` if eager), or a variable read,
    cast or identity of one made again in `holder`; None for anything computed
    inside the loop."""
    import tensorflow as tf
    while compat.is_eager_tensor(t) or t.graph is not holder:
        if compat.is_eager_tensor(t):  # a variable's handle, say
            return holder.capture(t)
        if t.op.type == "Placeholder":
            t = next((ext for ext, inner in t.graph.captures if inner is t), None)
            if t is None:
                return None
            continue
        if t.op.type not in ("ReadVariableOp", "Cast", "Identity"):
            return None
        source = _outside(t.op.inputs[0], holder)
        if source is None:
            return None
        with holder.as_default():
            if t.op.type == "ReadVariableOp":
                return tf.raw_ops.ReadVariableOp(resource=source, dtype=t.op.get_attr("dtype"))
            if t.op.type == "Cast":
                return tf.cast(source, t.op.get_attr("DstT"))
            return tf.identity(source)
    return t
