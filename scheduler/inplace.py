"""Value buffers updated in place, with gradients that stay linear in the number of values.

The executor keeps every value of one value type in one buffer `[rows, *shape]`:
each value owns a row and is written exactly once (SSA). Each loop iteration
writes the previous launch's outputs and reads the next launch's inputs with one
fused op, `write_read`; `final_read` writes the last outputs and reads the
results after the loop.

Why fused and in place (measured in ENGINE_NOTES.md and BENCHMARKS.md): a buffer
updated with `tensor_scatter_nd_update` is copied whole every iteration (time
grows as steps x values); one grown by `tf.concat` is kept whole for the backward
pass every iteration (memory grows as steps x values). `InplaceUpdate` writes only
the new rows; fusing the write with the read orders every mutation after the
previous read, and the custom gradient accumulates into a gradient buffer with
`InplaceAdd`, which also sums duplicate reads correctly. The gradient of
`final_read` starts from a fresh zero buffer, so the backward loop only ever
mutates buffers it created.

Use these only on buffers created inside the same traced step with a dynamic
shape (never on constants, which could be folded and shared).
"""

from __future__ import annotations

import tensorflow as tf


def _is_float(dtype: tf.DType) -> bool:
    return dtype.is_floating or dtype.is_complex


@tf.custom_gradient
def _write_read_float(buf, y, out_rows, in_rows):
    new_buf = tf.raw_ops.InplaceUpdate(x=buf, i=out_rows, v=y)
    x = tf.gather(new_buf, in_rows)

    def grad(g_buf, g_x):
        g = tf.raw_ops.InplaceAdd(x=g_buf, i=in_rows, v=g_x)
        return g, tf.gather(g, out_rows), None, None

    return (new_buf, x), grad


@tf.custom_gradient
def _final_read_float(buf, y, out_rows, read_rows):
    new_buf = tf.raw_ops.InplaceUpdate(x=buf, i=out_rows, v=y)
    x = tf.gather(new_buf, read_rows)

    def grad(g_x):
        g = tf.raw_ops.InplaceAdd(x=tf.zeros(tf.shape(buf), buf.dtype), i=read_rows, v=g_x)
        return g, tf.gather(g, out_rows), None, None

    return x, grad


def write_read(buf: tf.Tensor, y: tf.Tensor, out_rows: tf.Tensor, in_rows: tf.Tensor):
    """Writes `y` to rows `out_rows` of `buf` in place, then gathers rows `in_rows`.

    Returns `(buf, gathered)`.
    """
    if _is_float(buf.dtype):
        return _write_read_float(buf, y, out_rows, in_rows)
    new_buf = tf.raw_ops.InplaceUpdate(x=tf.stop_gradient(buf), i=out_rows,
                                       v=tf.stop_gradient(y))
    return new_buf, tf.gather(new_buf, in_rows)


def final_read(buf: tf.Tensor, y: tf.Tensor, out_rows: tf.Tensor, read_rows: tf.Tensor):
    """Writes `y` to rows `out_rows` of `buf` in place, then gathers rows `read_rows`."""
    if _is_float(buf.dtype):
        return _final_read_float(buf, y, out_rows, read_rows)
    new_buf = tf.raw_ops.InplaceUpdate(x=tf.stop_gradient(buf), i=out_rows,
                                       v=tf.stop_gradient(y))
    return tf.gather(new_buf, read_rows)
