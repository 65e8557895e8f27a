"""The loop's backward pass written by the engine: each launch replayed in reverse.

Differentiating the forward `tf.while_loop` makes TensorFlow push every
intermediate of every iteration onto a stack in the forward loop and pop it in
the backward one (about two dozen stack operations an iteration for an LSTM
cell), besides the gradient of each op. The engine needs none of that: every
value owns one row of its type's buffer and is written once, so after the loop
the buffers hold every value any launch read. `replay_loop` runs the forward
loop with no gradient recorded and gives it a gradient of its own, a second
`tf.while_loop` over the launches from the last to the first that, per launch,

1. gathers the launch's inputs from the final buffers and its outputs' total
   gradients from the gradient buffers (complete by then: every reader of those
   outputs is a later launch, already replayed), one gather per value type, since
   replayed launches are small (its forward loop runs as a step of small launches:
   `scheduler.executor.small_launches`);
2. runs the op again on them and differentiates it with respect to its inputs
   only (a `tf.GradientTape` inside the body, so ops with a gradient of their own
   under a tape use it);
3. adds the inputs' gradients into the gradient buffers in place (`InplaceAdd`,
   which sums duplicate reads).

The weights' gradients are taken once per step after it (`scheduler.weight_grads`),
from the outputs' total gradients that the gradient buffers hold at the end. The
values are the same sums in another order (tested against the oracle). Per
iteration this costs one more forward run of the op and saves the stacks and the
per-iteration weight gradients: it pays where launches are small (batch 1);
`compiler.Model` chooses per training batch. Figures: BENCHMARKS.md, "The loop's
backward pass replayed".

Where things run: as in the forward loop (`scheduler.executor`), each iteration
reads its launch's scalars from a table built before the loop (int32, on the
host on a GPU) and the data stays on the device. Graph mode only: the XLA step
(`scheduler.xla`) keeps TensorFlow's gradient of its loop.

>>> import numpy as np, tensorflow as tf
>>> from collections import namedtuple
>>> from types import SimpleNamespace as Op
>>> from refold.scheduler.executor import Executor
>>> from refold.scheduler.gradient_mode import GradientMode
>>> from refold.scheduler.graph import OpGraph
>>> from refold.scheduler.planner import Planner
>>> from refold.scheduler.schedules import SCHEDULERS
>>> t = namedtuple("ValueType", "shape dtype")((), "float32")
>>> w = tf.Variable(3.0)
>>> scale = Op(name="scale", input_types=[t], output_types=[t], fn=lambda x: [w * x])
>>> ex = Executor([scale], [t])
>>> g = OpGraph.build([0, 0], [1, 1], [0, 1], [0, 0, 0], [-1, 0, 1], [0, 0, 0],
...                   [np.ones(1, np.float32)])   # scale(scale(1.0)) = w * w
>>> feed = Planner(ex.layout).feed(g, SCHEDULERS["agenda"](g), [2])
>>> @tf.function(input_signature=[ex.input_signature()], autograph=False)
... def value_and_grad(arrays):
...     with tf.GradientTape() as tape:
...         y = tf.reduce_sum(ex.compute(arrays, GradientMode.once_per_step(replay=True))[0])
...     return y, tape.gradient(y, w)
>>> [float(v) for v in value_and_grad(feed.arrays)]   # w * w, 2 * w
[9.0, 6.0]
"""

from __future__ import annotations

import tensorflow as tf

from refold.scheduler.executor import small_launches
from refold.scheduler.layout import dtype_name


def replay_loop(executor, bufs: list, seg) -> tuple[list, list]:
    """The loop of `executor` on its loop types' starting buffers `bufs` (in
    `layout.loop_types` order), with the replayed backward pass.

    Returns `(post, final)`, per loop type: the rows the tail and the results
    read (`post_rows_k`), and the buffer as the loop left it (every value written).
    Only for executors whose loop ops' weights are all deferred to the tap
    (`Launches.all_deferrable`): the weights get no gradient here. It reads the
    executor through its public surface: `Executor.loop_values` and
    `Executor.launches` (`scheduler.launches`).
    """
    lay = executor.layout
    loop_types = list(lay.loop_types)
    n = len(loop_types)
    post_rows = [seg(f"post_rows_{k}") for k in loop_types]

    @tf.custom_gradient
    def loop(*starts):
        with small_launches():  # replayed batches are those of small launches
            final = executor.loop_values(list(starts), seg)
        post = [tf.gather(b, r) for b, r in zip(final, post_rows)]

        def grad(*g_outs, variables=None):
            g_post, g_final = g_outs[:n], g_outs[n:]
            g_starts = _backward(executor, final, g_post, g_final, post_rows, seg)
            return (g_starts, [None] * len(variables)) if variables else g_starts

        return post + final, grad

    outs = loop(*bufs)
    return list(outs[:n]), list(outs[n:])


def _backward(executor, final: list, g_post: list, g_final: list, post_rows: list,
              seg) -> list:
    """The gradients of the loop's starting buffers, from those of its outputs."""
    lay = executor.layout
    loop_types = list(lay.loop_types)
    launches = executor.launches
    tapped = set(launches.tapped_types)  # the float loop types
    floats = [i for i, k in enumerate(loop_types) if k in tapped]
    g_bufs = []
    for i in floats:
        g = tf.raw_ops.InplaceAdd(x=tf.zeros(tf.shape(final[i]), final[i].dtype),
                                  i=post_rows[i], v=g_post[i])
        g_bufs.append(g if g_final[i] is None else g + g_final[i])
    if not lay.loop_ops:
        return _starts(loop_types, floats, g_bufs)
    table = launches.table(seg, dict(zip(loop_types, final)), own_outputs=True)
    branches_of = list(lay.loop_ops)

    def body(j, g_bufs):
        op, size, rows, written = table.launch(j)
        branches = [lambda o=o: _replay(launches, o, final, g_bufs, rows, written, size,
                                        floats)
                    for o in branches_of]
        g_rows = tf.switch_case(op, branches) if len(branches) > 1 else branches[0]()
        new = []
        for slot, i in enumerate(floats):
            k = loop_types[i]
            new.append(tf.raw_ops.InplaceAdd(x=g_bufs[slot], i=rows[k], v=g_rows[slot]))
        return j - 1, new

    j0 = table.count - 1
    _, g_bufs = tf.while_loop(lambda j, *_: j >= 0, body, (j0, g_bufs))
    return _starts(loop_types, floats, g_bufs)


def _cut(rows, m: int) -> list:
    """`rows` (m same-typed values' rows, one value after the other) cut in m."""
    return tf.split(rows, m) if m > 1 else [rows]


def _starts(loop_types: list, floats: list, g_bufs: list) -> list:
    by_slot = dict(zip(floats, g_bufs))
    return [by_slot.get(i) for i in range(len(loop_types))]


def _replay(launches, o: int, final: list, g_bufs: list, rows: dict, written: dict, n,
            floats: list) -> list:
    """Launch of op o replayed: per float loop type, its arguments' gradients, in the
    order of that type's gather rows (zeros where none flows)."""
    lay = launches.layout
    loop_types = list(lay.loop_types)
    slot = {k: i for i, k in enumerate(loop_types)}
    ins, outs = lay.op_in[o], lay.op_out[o]
    g_slot = {i: s for s, i in enumerate(floats)}
    # each type's rows in one gather, cut into its arguments (outputs): the launches
    # replayed are small, so one op less an argument beats the copy
    values = {k: _cut(tf.gather(final[slot[k]], rows[k]), ins.count(k)) for k in set(ins)}
    args = [values[k][int(lay.arg_typepos[o, a])] for a, k in enumerate(ins)]
    out_grads = {k: _cut(tf.gather(g_bufs[g_slot[slot[k]]], written[k]), outs.count(k))
                 for k in set(outs) if slot[k] in g_slot}
    diff = [a for a, k in enumerate(ins) if slot[k] in g_slot]
    # under a tape, as when TensorFlow differentiates the loop: ops that carry their
    # own gradient under one (`models.gates.lstm_memory`) use it. Weight products keep
    # TensorFlow's gradient here: taking it with the weight transposed before this
    # loop (`scheduler.loop_products`) measured slower (BENCHMARKS.md, "A second
    # machine"). Only the float arguments are watched: an integer one (an id, a
    # label) has no gradient, and watching it makes TensorFlow log a warning.
    with tf.GradientTape(watch_accessed_variables=False) as tape:
        tape.watch([args[a] for a in diff])
        ys = launches.call(o, args, n)
    diff_ys, g_ys = [], []
    for s, k in enumerate(outs):
        if slot[k] in g_slot:
            diff_ys.append(ys[s])
            g_ys.append(out_grads[k][int(lay.slot_typepos[o, s])])
    got = tape.gradient(diff_ys, [args[a] for a in diff], output_gradients=g_ys) \
        if diff_ys else [None] * len(diff)
    g_args = {a: None if g is None else tf.convert_to_tensor(g) for a, g in zip(diff, got)}
    result = []
    for i in floats:
        k = loop_types[i]
        pieces = [g_args[a] if g_args.get(a) is not None else tf.zeros_like(args[a])
                  for a in sorted((a for a, kk in enumerate(ins) if kk == k),
                                  key=lambda a: int(lay.arg_typepos[o, a]))]
        shape = (0, *lay.value_types[k].shape)
        result.append(tf.concat(pieces, 0) if len(pieces) > 1 else pieces[0] if pieces
                      else tf.zeros(shape, dtype_name(lay.value_types[k])))
    return result
