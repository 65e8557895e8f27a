"""Value buffers updated in place, with gradients that stay linear in the number of values.

The executor keeps every value of one value type in one buffer `[rows, *shape]`:
each value owns a row and is written exactly once (SSA). Each iteration of a
differentiated loop writes the previous launch's outputs and reads the next
launch's inputs with one fused op, `write_read`; `final_read` writes the last
outputs and reads the results after the loop. Both take a list of outputs, each
with its own row list, and `write_read` a list of row lists to gather, one per
argument: a launch's values need not be stacked into one tensor (a copy) or split
out of one. (A loop no gradient goes through writes each launch's outputs in its
own iteration: `scheduler.executor`.)

Why fused and in place (measured: BENCHMARKS.md, "Why the executor looks as it does"): a buffer
updated with `tensor_scatter_nd_update` is copied whole every iteration (time
grows as steps x values); one grown by `tf.concat` is kept whole for the backward
pass every iteration (memory grows as steps x values). `InplaceUpdate` writes only
the new rows; fusing the write with the read orders every mutation after the
previous read, and the custom gradient accumulates into a gradient buffer with
`InplaceAdd`, which also sums duplicate reads correctly. The gradient of
`final_read` starts from a fresh zero buffer, so the backward loop only ever
mutates buffers it created.

A gradient buffer has its value buffer's dtype: under a mixed policy the low one
(`blocks.evaluation.precision`), like the rest of the backward pass through low-precision layers.
`InplaceAdd` there sums a value's gradients over the launches that read it (a few:
a node's parents), not over many children, and the loss scale under float16 keeps
them clear of underflow; the weight gradients leave the loop float32 (the casts of
the float32 variables take them back).

Use these only on buffers created inside the same traced step with a dynamic
shape (never on constants, which could be folded and shared).
"""

from __future__ import annotations

import tensorflow as tf


def _is_float(dtype: tf.DType) -> bool:
    return dtype.is_floating or dtype.is_complex


def _write_read_float(buf, ys, out_rows, in_rows):
    n_out, n_in = len(ys), len(in_rows)

    @tf.custom_gradient
    def fused(buf, *rest):
        ys, outs, ins = rest[:n_out], rest[n_out:2 * n_out], rest[2 * n_out:]
        new_buf = buf
        for y, rows in zip(ys, outs):
            new_buf = tf.raw_ops.InplaceUpdate(x=new_buf, i=rows, v=y)
        xs = [tf.gather(new_buf, rows) for rows in ins]

        def grad(g_buf, *g_xs):
            g = g_buf
            for rows, g_x in zip(ins, g_xs):
                g = tf.raw_ops.InplaceAdd(x=g, i=rows, v=g_x)
            return [g] + [tf.gather(g, rows) for rows in outs] + [None] * (n_out + n_in)

        return (new_buf, *xs), grad

    new_buf, *xs = fused(buf, *ys, *out_rows, *in_rows)
    return new_buf, xs


def _final_read_float(buf, ys, out_rows, read_rows):
    n_out = len(ys)

    @tf.custom_gradient
    def fused(buf, *rest):
        ys, outs = rest[:n_out], rest[n_out:]
        new_buf = buf
        for y, rows in zip(ys, outs):
            new_buf = tf.raw_ops.InplaceUpdate(x=new_buf, i=rows, v=y)
        x = tf.gather(new_buf, read_rows)

        def grad(g_x):
            g = tf.raw_ops.InplaceAdd(x=tf.zeros(tf.shape(buf), buf.dtype), i=read_rows, v=g_x)
            return [g] + [tf.gather(g, rows) for rows in outs] + [None] * n_out

        return x, grad

    return fused(buf, *ys, *out_rows)


def _write(buf, ys, out_rows):
    new_buf = tf.stop_gradient(buf)
    for y, rows in zip(ys, out_rows):
        new_buf = tf.raw_ops.InplaceUpdate(x=new_buf, i=rows, v=tf.stop_gradient(y))
    return new_buf


def write_read(buf: tf.Tensor, ys: list, out_rows: list, in_rows: list,
               differentiable: bool = True):
    """Writes each `ys[s]` to rows `out_rows[s]` of `buf` in place, then gathers
    each `in_rows[a]`.

    Returns `(buf, [gathered per in_rows])`. Several row lists rather than one
    stacked list spare a concat of the outputs and a split of the gathered rows,
    each a copy forward and backward (TensorFlow splits rows without copying only
    when a row's size in bytes is a multiple of 64). `differentiable=False` (a
    loop no gradient goes through: inference, or the forward loop of
    `scheduler.reverse`) leaves out the gradient's bookkeeping, an op per row list
    and iteration; differentiating the result then fails (`InplaceUpdate` has no
    gradient).
    """
    if not differentiable:
        for y, rows in zip(ys, out_rows):
            buf = tf.raw_ops.InplaceUpdate(x=buf, i=rows, v=y)
        return buf, [tf.gather(buf, rows) for rows in in_rows]
    if _is_float(buf.dtype):
        return _write_read_float(buf, list(ys), list(out_rows), list(in_rows))
    new_buf = _write(buf, ys, out_rows)
    return new_buf, [tf.gather(new_buf, rows) for rows in in_rows]


def final_read(buf: tf.Tensor, ys: list, out_rows: list, read_rows: tf.Tensor):
    """Writes each `ys[s]` to rows `out_rows[s]` of `buf` in place, then gathers
    rows `read_rows`."""
    if _is_float(buf.dtype):
        return _final_read_float(buf, list(ys), list(out_rows), read_rows)
    return tf.gather(_write(buf, ys, out_rows), read_rows)
