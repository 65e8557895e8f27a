"""Gate arithmetic of the zoo's gated cells: `cut_gates`, `lstm_memory`.

`cut_gates`: a gated cell's pre-activations cut into its gates.

LSTM and GRU cells compute all their gates with one matmul, `z = [x, h] W + b`,
then cut `z` into one block of columns per gate. Every gated cell of the zoo cuts
with `cut_gates`, one `tf.split`: the gradient of a strided slice per gate
builds a zero tensor the size of `z` for each gate (and, in the engine's loop,
one more saved tensor per gate), where the split's gradient is one concat.
`python -m benchmarks.ablations --only cells` compares the cuts (figures in
BENCHMARKS.md): the split trains faster than strided slices and as fast as a
slice-forward, concat-backward custom gradient.

`lstm_memory`: the LSTM memory update from the pre-activations of all gates, with
its own gradient under a tape (the TreeLSTM cells and `LSTMCell` use it;
`python -m benchmarks.ablations --only fusedcells` against autodiff).

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


def lstm_memory(z, children_c: list, layout: str) -> tuple:
    """An LSTM memory update from gate pre-activations: `(h, c)`.

    `layout` names `z`'s gate blocks of columns in order, one letter each: `i`
    (input), `o` (output), `u` (update, tanh) once, and one `f` (forget) per
    child memory in `children_c`, in their order. Then

        c = sigmoid(i) * tanh(u) + sum_k sigmoid(f_k) * c_k,   h = sigmoid(o) * tanh(c)

    The sigmoid gates next to each other take one `Sigmoid` per run of columns,
    not one per gate. Under a gradient tape the update carries its own gradient
    (`_fused_memory`): a `SigmoidGrad` or `TanhGrad` per run of columns where
    autodiff takes one per gate, and none of the broadcasting-gradient machinery
    (shapes, `BroadcastGradientArgs`, `Sum`, `Reshape`) that autodiff builds for
    each elementwise op of a dynamic row count. Without a tape it is the plain
    forward (no `IdentityN` of a custom gradient around it). Figures:
    BENCHMARKS.md, "Fused LSTM memory updates in the zoo's cells".

    >>> import tensorflow as tf
    >>> z = tf.zeros([1, 8])
    >>> h, c = lstm_memory(z, [tf.ones([1, 2])], "iouf")  # i, o, f = 0.5; u = 0
    >>> c.numpy().tolist(), round(float(h[0, 0]), 4)
    ([[0.5, 0.5]], 0.2311)
    """
    from tensorflow.python.eager import record
    _check_layout(layout, len(children_c))
    if record.could_possibly_record():
        return _fused_memory(z, list(children_c), layout)
    h, c, _ = _memory_forward(z, list(children_c), layout)
    return h, c


def _check_layout(layout: str, n_children: int) -> None:
    if sorted(layout) != sorted("iou" + "f" * n_children):
        raise ValueError(f"layout must hold i, o, u once and one f per child memory "
                         f"({n_children}), got {layout!r}")


def _runs(layout: str) -> list:
    """`layout` cut around `u`: the runs of sigmoid gates before and after it and
    `u` itself, as (letters, is_sigmoid) in column order, empty runs left out."""
    at = layout.index("u")
    runs = [(layout[:at], True), ("u", False), (layout[at + 1:], True)]
    return [r for r in runs if r[0]]


def _memory_forward(z, cs: list, layout: str):
    """`(h, c, (acts, tanh_c, gates))`: the activations of the runs of `_runs`
    (what the gradient keeps), tanh(c), and the gates by letter."""
    import tensorflow as tf
    width = z.shape[1] // len(layout)
    runs = _runs(layout)
    pieces = tf.split(z, [len(letters) * width for letters, _ in runs], axis=1) \
        if len(runs) > 1 else [z]
    acts = [tf.sigmoid(p) if sig else tf.tanh(p) for p, (_, sig) in zip(pieces, runs)]
    gate = _gates_by_letter(acts, runs)
    fc = [f * c_k for f, c_k in zip(gate["f"], cs)]
    c = tf.add_n([gate["i"] * gate["u"]] + fc)
    tanh_c = tf.tanh(c)
    return gate["o"] * tanh_c, c, (acts, tanh_c, gate)


def _gates_by_letter(acts: list, runs: list) -> dict:
    """The activations cut into gates: letter -> tensor (`f` -> list, in order)."""
    import tensorflow as tf
    gate: dict = {"f": []}
    for act, (letters, _) in zip(acts, runs):
        for letter, g in zip(letters, tf.split(act, len(letters), axis=1)
                             if len(letters) > 1 else [act]):
            if letter == "f":
                gate["f"].append(g)
            else:
                gate[letter] = g
    return gate


def _fused_memory(z, cs: list, layout: str) -> tuple:
    """`lstm_memory` with a hand-written gradient: the upstream gradient of c
    (through h and directly) read once, the gates' gradients concatenated per run
    of activations and scaled by their derivatives in one `SigmoidGrad` or
    `TanhGrad` per run. It keeps only the run activations, tanh(c) and the
    children's memories for the backward pass and cuts the gates again there (a
    split costs less than saving each gate inside the engine's loop, where every
    saved tensor is a push forward and a pop backward per iteration)."""
    import tensorflow as tf
    runs = _runs(layout)

    @tf.custom_gradient
    def memory(z, *cs):
        h, c, (acts, tanh_c, _) = _memory_forward(z, list(cs), layout)

        def grad(d_h, d_c):
            gate = _gates_by_letter(acts, runs)
            if d_h is None:
                d_h = tf.zeros_like(h)
            d_total = tf.raw_ops.TanhGrad(y=tanh_c, dy=d_h * gate["o"])
            if d_c is not None:
                d_total = d_total + d_c
            d_gate = {"i": d_total * gate["u"], "o": d_h * tanh_c, "u": d_total * gate["i"],
                      "f": [d_total * c_k for c_k in cs]}
            forget = iter(d_gate["f"])
            d_runs = []
            for act, (letters, sig) in zip(acts, runs):
                ds = [next(forget) if letter == "f" else d_gate[letter] for letter in letters]
                d = ds[0] if len(ds) == 1 else tf.concat(ds, axis=1)
                d_runs.append(tf.raw_ops.SigmoidGrad(y=act, dy=d) if sig
                              else tf.raw_ops.TanhGrad(y=act, dy=d))
            d_z = d_runs[0] if len(d_runs) == 1 else tf.concat(d_runs, axis=1)
            return [d_z] + [d_total * f for f in gate["f"]]

        return (h, c), grad

    h, c = memory(z, *cs)
    return h, c
