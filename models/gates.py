"""Gate arithmetic of the zoo's gated cells: `cut_gates`, `lstm_memory`, `product`, `interpolate`.

`cut_gates`: a gated cell's pre-activations cut into its gates.

LSTM and GRU cells compute all their gates with one matmul, `z = [x, h] W + b`,
then cut `z` into one block of columns per gate. Every gated cell of the zoo cuts
with `cut_gates`, one `tf.split`: the gradient of a strided slice per gate
builds a zero tensor the size of `z` for each gate (and, in the engine's loop,
one more saved tensor per gate), where the split's gradient is one concat.
`python -m benchmarks.ablations --only cells` compares the cuts (figures in
BENCHMARKS.md): the split trains faster than strided slices and as fast as a
slice-forward, concat-backward custom gradient.

`lstm_memory`: the LSTM memory update from the pre-activations of all gates (cut
with `cut_gates`), with its own gradient under a tape (the TreeLSTM cells and `LSTMCell` use it;
`python -m benchmarks.ablations --only fusedcells` against autodiff).

`product` and `interpolate`: a GRU's gated products, `r * a` and `z * a + (1 - z) * b`,
with their own gradients under a tape (`GRUCell` uses them).

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


def lstm_memory(z, children_c: list, layout: str, update_mask=None) -> tuple:
    """An LSTM memory update from gate pre-activations: `(h, c)`.

    `layout` names `z`'s gate blocks of columns in order, one letter each: `i`
    (input), `o` (output), `u` (update, tanh) once, and one `f` (forget) per
    child memory in `children_c`, in their order. Then

        c = sigmoid(i) * tanh(u) * m + sum_k sigmoid(f_k) * c_k,   h = sigmoid(o) * tanh(c)

    where `m` is `update_mask` (a dropout mask on the candidate update, Semeniuta
    et al. 2016: `blocks.noise.keep_mask`), or 1 if None.

    Under a gradient tape the update carries its own gradient (`_fused_memory`),
    with none of the broadcasting-gradient machinery (shapes,
    `BroadcastGradientArgs`, `Sum`, `Reshape`) that autodiff builds for each
    elementwise op of a dynamic row count, and fewer tensors saved for the
    backward pass. Without a tape it is the plain forward (no `IdentityN` of a
    custom gradient around it). Figures: BENCHMARKS.md, "Fused LSTM memory
    updates in the zoo's cells".

    >>> import tensorflow as tf
    >>> z = tf.zeros([1, 8])
    >>> h, c = lstm_memory(z, [tf.ones([1, 2])], "iouf")  # i, o, f = 0.5; u = 0
    >>> c.numpy().tolist(), round(float(h[0, 0]), 4)
    ([[0.5, 0.5]], 0.2311)
    """
    from refold import compat
    _check_layout(layout, len(children_c))
    if compat.tape_may_record():
        return _fused_memory(z, list(children_c), layout, update_mask)
    h, c, _ = _memory_forward(z, list(children_c), layout, update_mask)
    return h, c


def _check_layout(layout: str, n_children: int) -> None:
    if sorted(layout) != sorted("iou" + "f" * n_children):
        raise ValueError(f"layout must hold i, o, u once and one f per child memory "
                         f"({n_children}), got {layout!r}")


def _memory_forward(z, cs: list, layout: str, update_mask=None):
    """`(h, c, (gates, tanh_c))`: gates by letter (`f`: a list, in order; `m`: the
    update as it enters the memory, `u` masked)."""
    import tensorflow as tf
    gate: dict = {"f": []}
    for letter, pre in zip(layout, cut_gates(z, len(layout))):
        if letter == "f":
            gate["f"].append(tf.sigmoid(pre))
        else:
            gate[letter] = tf.tanh(pre) if letter == "u" else tf.sigmoid(pre)
    gate["m"] = gate["u"] if update_mask is None else gate["u"] * update_mask
    c = tf.add_n([gate["i"] * gate["m"]] + [f * c_k for f, c_k in zip(gate["f"], cs)])
    tanh_c = tf.tanh(c)
    return gate["o"] * tanh_c, c, (gate, tanh_c)


def _fused_memory(z, cs: list, layout: str, update_mask=None) -> tuple:
    """`lstm_memory` with a hand-written gradient: the upstream gradient of c
    (through h and directly) formed once, each gate's gradient one product and
    one `SigmoidGrad` or `TanhGrad`, then one concat in column order (as the
    split's gradient). It keeps the gates, tanh(c) and the children's memories
    for the backward pass, not the products and sums autodiff would. A mask on the
    update is a constant (no gradient)."""
    import tensorflow as tf

    @tf.custom_gradient
    def memory(z, *cs):
        h, c, (gate, tanh_c) = _memory_forward(z, list(cs), layout, update_mask)

        def grad(d_h, d_c):
            if d_h is None:
                d_h = tf.zeros_like(h)
            d_total = tf.raw_ops.TanhGrad(y=tanh_c, dy=d_h * gate["o"])
            if d_c is not None:
                d_total = d_total + d_c
            d_update = d_total * gate["i"]
            if update_mask is not None:
                d_update = d_update * update_mask
            d_pre = {"i": tf.raw_ops.SigmoidGrad(y=gate["i"], dy=d_total * gate["m"]),
                     "o": tf.raw_ops.SigmoidGrad(y=gate["o"], dy=d_h * tanh_c),
                     "u": tf.raw_ops.TanhGrad(y=gate["u"], dy=d_update)}
            d_forget = iter([tf.raw_ops.SigmoidGrad(y=f, dy=d_total * c_k)
                             for f, c_k in zip(gate["f"], cs)])
            d_z = tf.concat([next(d_forget) if letter == "f" else d_pre[letter]
                             for letter in layout], axis=1)
            return [d_z] + [d_total * f for f in gate["f"]]

        return (h, c), grad

    h, c = memory(z, *cs)
    return h, c


def product(a, b):
    """`a * b` for two tensors of one shape, with its own gradient under a tape.

    Autodiff's gradient of `*` on tensors of a dynamic row count builds the
    broadcasting machinery (`Shape`, `BroadcastGradientArgs`, `Sum`, `Reshape`)
    though nothing broadcasts; in the engine's loop a batch-1 step pays for it
    on every launch. This gradient is two products.

    >>> import tensorflow as tf
    >>> product(tf.constant([[2.0, 3.0]]), tf.constant([[4.0, 5.0]])).numpy().tolist()
    [[8.0, 15.0]]
    """
    import tensorflow as tf

    from refold import compat
    if not compat.tape_may_record():
        return a * b

    @tf.custom_gradient
    def fused(a, b):
        return a * b, lambda dy: (dy * b, dy * a)
    return fused(a, b)


def interpolate(z, a, b):
    """`z * a + (1 - z) * b` for tensors of one shape (a GRU's new state: `z` its
    update gate, `a` the old state, `b` the candidate), computed as
    `b + z * (a - b)`, with its own gradient under a tape (as `product`'s: no
    broadcasting machinery, and no `1 - z` against a scalar).

    >>> import tensorflow as tf
    >>> z, a, b = tf.constant([[0.25]]), tf.constant([[4.0]]), tf.constant([[0.0]])
    >>> interpolate(z, a, b).numpy().tolist()
    [[1.0]]
    """
    import tensorflow as tf

    from refold import compat
    if not compat.tape_may_record():
        return b + z * (a - b)

    @tf.custom_gradient
    def fused(z, a, b):
        diff = a - b

        def grad(dy):
            d_a = dy * z
            return dy * diff, d_a, dy - d_a
        return b + z * diff, grad
    return fused(z, a, b)
