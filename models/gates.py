"""`cut_gates`: a gated cell's pre-activations cut into its gates.

LSTM and GRU cells compute all their gates with one matmul, `z = [x, h] W + b`,
then cut `z` into one block of columns per gate. Every gated cell of the zoo cuts
with `cut_gates`, one `tf.split`: the gradient of a strided slice per gate
builds a zero tensor the size of `z` for each gate (and, in the engine's loop,
one more saved tensor per gate), where the split's gradient is one concat.
`python -m benchmarks.ablations --only cells` compares the cuts (figures in
BENCHMARKS.md): the split trains faster than strided slices and as fast as a
slice-forward, concat-backward custom gradient.

>>> import tensorflow as tf
>>> z = tf.reshape(tf.range(12.0), [2, 6])
>>> [g.numpy().tolist() for g in cut_gates(z, 3)]
[[[0.0, 1.0], [6.0, 7.0]], [[2.0, 3.0], [8.0, 9.0]], [[4.0, 5.0], [10.0, 11.0]]]
"""

from __future__ import annotations


def cut_gates(z, n_gates: int) -> list:
    """`z` `[n, n_gates * width]` cut into `n_gates` tensors `[n, width]`, in order."""
    import tensorflow as tf
    return tf.split(z, n_gates, axis=1)
