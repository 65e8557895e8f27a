"""The executor: any planned batch of an `OpGraph`, run by one static `tf.while_loop`.

`Executor(ops, value_types)` builds, once, the TensorFlow program that runs every
schedule of every batch for these ops. A batch arrives as a handful of flat
arrays (a `Feed`, made by `scheduler.planner`), so one traced `tf.function`
serves all batch shapes without retracing (tested: its tracing count stays 1).
What the ops' types fix (stages, loop ops, segment names) is the `Layout`
(`scheduler.layout`), which the planner reads too.

How a batch runs (`compute`, one method per stage):

1. **Constants** (`_constants`): the flat constant vectors cut into one table of
   rows per value type.
2. **Before the loop** (`_before_loop`): the *outer* launches (each middle op on
   its step-0 nodes, whose arguments are all constants; then each head op on all
   its nodes) gather their arguments from the rows made so far and run (under a
   `tf.cond` that skips a launch of no nodes, unless its op `handles_empty`).
   Every value of type k owns one row of buffer k: first the constants, then every
   launch's outputs in launch order (within a launch: output slot, then node);
   a loop type's buffer starts as `[constants; outer outputs; zeros]`.
3. **The loop** (`_loop`): iteration g writes launch g-1's outputs and gathers
   launch g's inputs with one fused in-place op per loop value type
   (`scheduler.inplace.write_read`), then runs launch g's op on all its nodes:
   through `tf.switch_case` when the loop has several ops, directly when it has
   one. With one loop op every argument and output travels as its own row list;
   with several, a value type's rows travel stacked and are split in the branch.
   A loop no gradient goes through (inference, the forward run of the replayed
   backward pass) writes each launch's outputs in its own iteration instead
   (`_loop_writing_own`), so only the buffers are loop variables; in a step of
   small launches (`small_launches`) it moves each value type's rows stacked.
4. **After the loop** (`_loop_reads`, `_after_loop`): `final_read` writes the
   last launch's outputs and gathers, per type, the rows the tail and the results
   need; the tail ops run on them, then the results are gathered. In a training
   step a tail launch whose rows are exactly the latest launch's outputs of their
   type takes them as they are (`_tail_rows`); outside the loop an op that lays
   many arguments of one type side by side (`Op.side_by_side`) is one gather.

Under a gradient tape TensorFlow differentiates the loop, unless the executor
replays it backward itself (`scheduler.reverse`): the `GradientMode` passed to
`compute` says which (`scheduler.gradient_mode`; `Model` chooses per batch, and
replays for batches of small launches). The other loops over the same launches
(the replayed backward one, the XLA program's) read them through
`Executor.launches` (`scheduler.launches`) and `loop_values`, never this module's
internals.

Why this design, in short (figures: BENCHMARKS.md, "Why the executor looks as it does"):
per-type buffers updated in place are the one storage scheme measured linear in
time and memory for every dependency pattern; variable lookups (head ops) run
before the loop because inside it each iteration would accumulate a dense
vocabulary-sized gradient; the tail runs after it, so the loop holds only the
recursion and, with one op, needs no `switch_case`; row lists avoid the copies
that splitting and concatenating unaligned rows cost forward and backward;
each iteration reads its launch's scalars from one row of a table built before
the loop, and all index segments arrive in one int32 vector cut by one `SplitV`
(each `tf.function` argument and each slice costs per call).

Where things run: all index bookkeeping is int32 tensors made before the loop
(the per-launch table, the row lists) and read with `tf.gather`/`tf.slice`/
`tf.range` in the body; TensorFlow keeps int32 tensors of that kind on the host
on a GPU, so on a GPU each iteration reads a few host scalars. The loop's data
(buffers, gathers, the ops) stays on the device. Only CPU runs are tested here. Under
XLA (`scheduler.xla`, `Model(...).compile(jit_compile=True)`) the same batches run
as one compiled program, bookkeeping included, with no host scalar per iteration.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from refold import compat
from refold.scheduler.gradient_mode import GradientMode
from refold.scheduler.launches import Launches, LaunchTable, row_parts, rows_shaped
from refold.scheduler.layout import Layout, dtype_name

# Whether the tap also takes the weight gradients of a deferred loop op's launch
# before the loop (read when a step is traced; `benchmarks.ablations --only outer`
# turns it off to measure it).
TAP_OUTER_LAUNCHES = True


@dataclass
class Feed:
    """A packed batch for `Executor.compute`: `arrays` maps argument name -> numpy array.

    `read_type[i]`, `read_pos[i]`: where the i-th value asked for lands in the
    outputs (value type, row in that type's output).
    """

    arrays: dict
    read_type: np.ndarray
    read_pos: np.ndarray


MANY_ARGS = 4
"""From this many arguments of one type on, a launch outside the loop gathers them in
one op (`Executor._outside_args`)."""

_HALVES: contextvars.ContextVar = contextvars.ContextVar("refold_outer_halves", default=False)


@contextlib.contextmanager
def launches_outside_loop_in_halves():
    """Within, while a step is traced: each launch before and after the loop, of an
    op that handles empty batches, runs as two calls on the two halves of its rows,
    which TensorFlow's inter-op threads run side by side. Where TensorFlow has one
    intra-op thread (`refold.threads`) a launch of many rows (a batch's every leaf)
    would otherwise run on one core; in the loop, halves would double every
    iteration's ops, which small batches pay for (`compiler.training.tf_executor`
    enters this for the inference steps it runs on the default executor)."""
    token = _HALVES.set(True)
    try:
        yield
    finally:
        _HALVES.reset(token)


_SMALL: contextvars.ContextVar = contextvars.ContextVar("refold_small_launches", default=False)


@contextlib.contextmanager
def small_launches():
    """Within, while a step is traced: its loop's launches are small (a few rows
    each), so a loop no gradient goes through moves each value type's rows stacked
    (one gather and one split in, one concat and one write out) instead of a row
    list per argument and output. Fewer ops an iteration, for a copy of the rows
    that costs more than it saves from some dozens of rows on: the inference steps
    of the single-threaded executor (`compiler.training.tf_executor`) and the
    replayed backward pass (`scheduler.reverse`) enter it."""
    token = _SMALL.set(True)
    try:
        yield
    finally:
        _SMALL.reset(token)


def _gather_dense_grad(params, rows):
    """`tf.gather(params, rows)` whose gradient is a dense tensor (one segment sum),
    not `tf.IndexedSlices`: a `tf.cond` makes both branches' gradients sparse if
    one is, and the other branch's dense gradient would then be scattered again."""
    import tensorflow as tf

    @tf.custom_gradient
    def gather(p):
        def grad(dy):
            return tf.math.unsorted_segment_sum(dy, rows, tf.shape(p, out_type=rows.dtype)[0])
        return tf.gather(p, rows), grad
    return gather(params)


def _tail_rows(pieces: list, rows):
    """For a tail launch, the rows `rows` of one value type's rows made so far
    (`pieces`, as `Executor._run_outside_loop` keeps them): when they are exactly
    the last piece (the latest launch's outputs of that type, in order: an FC after
    a `Concat`, a loss after its logits), that piece itself. A gather would copy it
    and send its gradient back as `tf.IndexedSlices` through the join, densified
    again at every consumer. A `tf.cond` on the fed rows decides (the plan says
    per batch, the trace cannot); otherwise the rows are gathered. Under a gradient
    tape only: without one the cond costs about what the copy does."""
    import tensorflow as tf
    if len(pieces) < 2:
        return tf.gather(_joined(pieces), rows)
    last, before = pieces[-1], tf.add_n([tf.shape(p)[0] for p in pieces[:-1]])
    n = tf.shape(rows)[0]
    exact = tf.logical_and(tf.equal(n, tf.shape(last)[0]),
                           tf.reduce_all(tf.equal(rows, tf.range(before, before + n))))
    joined = list(pieces)  # joined in the branch that gathers only
    gather = _gather_dense_grad if last.dtype.is_floating else tf.gather
    return tf.cond(exact, lambda: tf.identity(last),
                   lambda: gather(tf.concat(joined, 0), rows))


def _joined(pieces: list):
    """The pieces concatenated (rows); joins them once and keeps the result."""
    if len(pieces) > 1:
        import tensorflow as tf
        pieces[:] = [tf.concat(pieces, 0)]
    return pieces[0]


class Executor:
    """Runs planned batches for a fixed set of ops (see the module docstring).

    Args:
        ops: op-like objects with `fn` (a batch function: tensors `[n, *shape]` in,
            a list of such out; a zero-argument op gets the batch size `n`),
            `input_types` and `output_types` (each with `shape` and `dtype`), and
            optionally `handles_empty` (True: `fn` works on zero rows, so its
            launches outside the loop need no `tf.cond`; False by default).
        value_types: every value type, each with `shape` and `dtype`; all the ops'
            input and output types must be among them.
        row_lists: with one loop op, gather each argument and write each output
            as its own row list (the default); False stacks the rows of a value
            type, as a loop of several ops must (for comparison: `python -m
            benchmarks.ablations --only rowlists`).
        batched_weight_grads: under a gradient tape, take the weight gradients of
            the loop's ops once per step, batched over all their nodes, rather than
            in every iteration of the backward loop, as TensorFlow does (the
            default, False). Measured faster at batch 1 and for the bilstm
            tagger, slower for the TreeLSTM from batch 16 on, since it runs the
            loop's ops once more (`scheduler.weight_grads`; BENCHMARKS.md,
            "Weight gradients once per step"; `python -m benchmarks.ablations
            --only weightgrads`).
        replay_backward: under a gradient tape, give the loop a backward loop
            of the engine's own that replays each launch in reverse order from the
            value buffers (`scheduler.reverse`), with the weight gradients once per
            step, rather than TensorFlow's gradient of the `tf.while_loop` (the
            default, False). Falls back to the latter when a loop op's weights
            cannot be found (an op that fails on zero rows). With
            `batched_weight_grads`, the executor's `gradient_mode`: that of a
            `compute` call given none, read when the call is traced.
        output_dtypes: per value type, the dtype `compute` returns its rows in (a
            cast where it differs from the type's); under a mixed policy the
            values are held in a low dtype and returned in the declared one
            (`blocks.evaluation.precision`). Default: each type's own dtype.
        feeds: optional bool `[ops, ops]`, False where op a never feeds op b
            (`compiler.graphs.op_feeds`): fewer ops in the loop (`Layout.build`).
    """

    def __init__(self, ops: Sequence[Any], value_types: Sequence[Any], row_lists: bool = True,
                 batched_weight_grads: bool = False, replay_backward: bool = False,
                 output_dtypes: Sequence[str] | None = None, feeds=None):
        for name, flag in (("row_lists", row_lists),
                           ("batched_weight_grads", batched_weight_grads),
                           ("replay_backward", replay_backward)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name} must be True or False, got {flag!r}")
        self.ops = list(ops)
        self.row_lists = row_lists
        self.batched_weight_grads = batched_weight_grads
        self.replay_backward = replay_backward
        self.feeds = feeds
        self.layout = Layout.build(self.ops, value_types, feeds)
        self.launches = Launches(self.ops, self.layout)  # what other loops read
        self.output_dtypes = None if output_dtypes is None else tuple(map(str, output_dtypes))

    @property
    def value_types(self) -> list:
        return list(self.layout.value_types)

    def input_signature(self) -> dict:
        """The `tf.TensorSpec`s of `Feed.arrays` (all with unknown lengths)."""
        import tensorflow as tf
        spec = {"index": tf.TensorSpec([None], tf.int32),
                "layout": tf.TensorSpec([None], tf.int32)}
        for d in self.layout.dtypes:
            spec[f"consts_{d}"] = tf.TensorSpec([None], tf.as_dtype(d))
        return spec

    # --- the TensorFlow program -------------------------------------------------------

    @property
    def gradient_mode(self) -> GradientMode:
        """The `GradientMode` of a `compute` call given none: as `batched_weight_grads`
        and `replay_backward` say when the call is traced."""
        return GradientMode(weights_once_per_step=self.batched_weight_grads,
                            replay_backward=self.replay_backward)

    def compute(self, arrays: dict, mode: GradientMode | None = None) -> list:
        """Runs a fed batch; returns, per value type, the rows asked for `[R_k, *shape]`.

        Call it inside a `tf.function` (or under a `GradientTape` there): it builds
        graph code. `arrays` holds tensors for the keys of `input_signature()`.
        Traced with no gradient tape active, the loop leaves out what its gradient
        would need, so trace a step that is to be differentiated under its tape;
        `mode` says how its loop is differentiated there (default: the executor's
        `gradient_mode`).
        """
        import tensorflow as tf
        mode = self.gradient_mode if mode is None else mode
        if not isinstance(mode, GradientMode):
            raise TypeError(f"mode must be a GradientMode, got {mode!r}")
        seg = self.launches.segments(arrays)
        made = [[c] for c in self._constants(arrays, seg)]
        replay = self._replays(mode)
        deferred = self.launches.deferred_weights(replay or mode.weights_once_per_step)
        final: dict = {}  # loop type -> its buffer as the loop left it (for the tap)
        outer: dict = {}  # deferred loop op -> its launch before the loop (for the tap)
        tap = self._weight_tap(deferred, final, outer, seg) if deferred else None
        bufs = self._before_loop(made, seg, tap, deferred, outer)
        if replay:
            from refold.scheduler.reverse import replay_loop
            post, ends = replay_loop(self, [bufs[k] for k in self.layout.loop_types], seg)
            final.update(zip(self.layout.loop_types, ends))
            post = dict(zip(self.layout.loop_types, post))
        else:
            carried, ys, g_end = self._loop(bufs, seg, deferred, compat.tape_may_record())
            post = self._loop_reads(carried, ys, g_end, seg, final if tap else None)
        outs = self._after_loop(bufs, post, seg)
        if self.output_dtypes is None:
            return outs
        return [o if o.dtype.name == d else tf.cast(o, d)
                for o, d in zip(outs, self.output_dtypes)]

    def _constants(self, arrays: dict, seg) -> list:
        """Per value type, its constant rows `[c_k, *shape]`."""
        import tensorflow as tf
        lay = self.layout
        consts: list = [None] * lay.n_types
        for d in lay.dtypes:
            ks = [k for k in range(lay.n_types) if lay.type_dtype[k] == d]
            for k, flat in zip(ks, tf.split(arrays[f"consts_{d}"], seg(f"const_sizes_{d}"),
                                            num=len(ks))):
                consts[k] = tf.reshape(flat, (-1, *lay.value_types[k].shape))
        return consts

    def _before_loop(self, made: list, seg, tap=None, deferred: dict | None = None,
                     outer: dict | None = None) -> list:
        """Runs the outer launches (appending to `made`, per type the row blocks made
        so far); returns each type's buffer (a loop type's padded to its rows; the
        float loop types' through `tap` if given). A launch here of a `deferred`
        loop op leaves its weights' gradients to the tap too, which takes them over
        it and the op's loop launches at once (`outer` records it)."""
        import tensorflow as tf
        lay = self.layout
        recording = tap is not None and TAP_OUTER_LAUNCHES
        self._run_outside_loop("outer", lay.outer_ops, made, seg,
                               deferred if recording else None, outer)
        n_rows = seg("n_rows")
        pads = {}
        for k in lay.loop_types:
            t = lay.value_types[k]
            have = tf.add_n([tf.shape(p)[0] for p in made[k]])
            pad_shape = tf.concat([[n_rows[k] - have],
                                   tf.constant(t.shape, tf.int32, shape=[len(t.shape)])], 0)
            pads[k] = tf.zeros(pad_shape, dtype_name(t))
        bufs = [tf.concat(made[k] + [pads[k]], 0) if k in pads else _joined(made[k])
                for k in range(lay.n_types)]
        if tap is not None:
            # on whole buffers: every row's gradient reaches the tap, the rows of
            # the recorded launches before the loop too. No later launch before the
            # loop reads those rows (a middle op's step-0 nodes read constants, a
            # head op only head ops' outputs), so none of their gradient bypasses it.
            types = self.launches.tapped_types
            for k, b in zip(types, tap([bufs[k] for k in types])):
                bufs[k] = b
        return bufs

    def _row_lists(self) -> tuple[dict, dict]:
        """Per loop type, how many row lists an iteration gathers and writes: with
        one loop op (and `row_lists`), one per argument / output of that type;
        otherwise one, all rows of the type stacked."""
        lay = self.layout
        only = lay.loop_ops[0] if len(lay.loop_ops) == 1 and self.row_lists else None
        n_in = {k: 1 if only is None else lay.op_in[only].count(k) for k in lay.loop_types}
        n_out = {k: 1 if only is None else lay.op_out[only].count(k) for k in lay.loop_types}
        return n_in, n_out

    def _branch(self, o: int, xs: list, n, stacked: bool, deferred: dict):
        """Loop op o's launch on gathered rows `xs` (per loop type, its row lists):
        returns its outputs as row lists per loop type (through
        `weight_grads.inputs_only` if its weight gradients are `deferred`)."""
        import tensorflow as tf

        from refold.scheduler.loop_products import transposed_once
        lay = self.layout
        ins = lay.op_in[o]
        slot = {k: i for i, k in enumerate(lay.loop_types)}
        if not stacked:  # xs[slot[k]]: one tensor per argument of type k
            args = [xs[slot[k]][int(lay.arg_typepos[o, a])] for a, k in enumerate(ins)]
        else:  # same-typed arguments arrive stacked (n rows each): one Split apiece
            split = {k: tf.split(xs[slot[k]][0], ins.count(k), axis=0)
                     for k in set(ins) if ins.count(k) > 1}
            args = [split[k][int(lay.arg_typepos[o, a])] if k in split else xs[slot[k]][0]
                    for a, k in enumerate(ins)]
        with transposed_once():  # its weight products' gradients: scheduler.loop_products
            if o in deferred:
                from refold.scheduler.weight_grads import inputs_only
                outs = inputs_only(lambda *a: self.launches.call(o, list(a), n), args)
            else:
                outs = self.launches.call(o, args, n)
        ys = []
        for k in lay.loop_types:
            mine = [outs[s] for s, kk in enumerate(lay.op_out[o]) if kk == k]
            if stacked:  # one tensor per type
                mine = [mine[0] if len(mine) == 1 else tf.concat(mine, 0) if mine
                        else tf.zeros((0, *lay.value_types[k].shape),
                                      dtype_name(lay.value_types[k]))]
            ys.append(mine)
        return ys

    def _loop(self, bufs: list, seg, deferred: dict, differentiable: bool = True):
        """The loop, one launch per iteration; returns the loop types' buffers, the
        last launch's outputs (not yet written) and the number of launches
        (`differentiable=False`: for a loop no gradient goes through)."""
        import tensorflow as tf

        from refold.scheduler.inplace import write_read
        lay = self.layout
        loop_types = lay.loop_types
        shapes = [tuple(t.shape) for t in lay.value_types]
        n_in, n_out = self._row_lists()
        stacked = len(lay.loop_ops) > 1 or not self.row_lists
        if not differentiable and lay.loop_ops:
            if _SMALL.get():  # one row list per value type
                n_in = n_out = {k: 1 for k in loop_types}
                stacked = True
            return self._loop_writing_own(bufs, seg, n_in, n_out, stacked, deferred)
        table = LaunchTable(lay, seg, bufs)

        def body(g, bufs, ys):
            op, size, rows, written = table.launch(g)
            new_bufs, xs = [], []
            for i, k in enumerate(loop_types):
                b, x = write_read(bufs[i], ys[i], row_parts(written[k], n_out[k]),
                                  row_parts(rows[k], n_in[k]), differentiable)
                new_bufs.append(b)
                xs.append(x)
            branches = [lambda o=o: self._branch(o, xs, size, stacked, deferred)
                        for o in lay.loop_ops]
            ys = tf.switch_case(op, branches) if len(branches) > 1 else branches[0]()
            ys = [[rows_shaped(y, shapes[k]) for y in ys_k] for k, ys_k in zip(loop_types, ys)]
            return g + 1, new_bufs, ys

        g0 = tf.constant(0, tf.int32)
        carried = [bufs[k] for k in loop_types]
        ys = [[tf.zeros((0, *shapes[k]), dtype_name(lay.value_types[k]))] * n_out[k]
              for k in loop_types]
        if not lay.loop_ops:
            return carried, ys, g0
        n_launches = table.count
        invariants = [[tf.TensorShape((None, *shapes[k]))] * n_out[k] for k in loop_types]
        g_end, carried, ys = tf.while_loop(
            lambda g, *_: g < n_launches, body, (g0, carried, ys),
            shape_invariants=(g0.shape, [tf.TensorShape((None, *shapes[k]))
                                         for k in loop_types], invariants))
        return carried, ys, g_end

    def _loop_writing_own(self, bufs: list, seg, n_in: dict, n_out: dict, stacked: bool,
                          deferred: dict):
        """`_loop` for a loop no gradient goes through: iteration g gathers launch g's
        inputs, runs it and writes its outputs in place, so only the buffers are
        carried from one iteration to the next (a loop variable costs nodes every
        iteration; the fused write-then-read of `scheduler.inplace` exists for the
        gradient). Returns as `_loop` does, with no outputs left to write."""
        import tensorflow as tf
        lay = self.layout
        loop_types = lay.loop_types
        shapes = [tuple(t.shape) for t in lay.value_types]
        table = LaunchTable(lay, seg, bufs, own_outputs=True)
        inputs = {k for o in lay.loop_ops for k in lay.op_in[o]}
        outputs = {k for o in lay.loop_ops for k in lay.op_out[o]}

        def body(g, bufs):
            op, size, rows, written = table.launch(g)
            xs = [[tf.gather(b, r) for r in row_parts(rows[k], n_in[k])] if k in inputs else []
                  for b, k in zip(bufs, loop_types)]
            branches = [lambda o=o: self._branch(o, xs, size, stacked, deferred)
                        for o in lay.loop_ops]
            ys = tf.switch_case(op, branches) if len(branches) > 1 else branches[0]()
            new_bufs = []
            for b, k, ys_k in zip(bufs, loop_types, ys):
                if k in outputs:  # (stacked: a type no loop op writes, no rows)
                    for y, r in zip(ys_k, row_parts(written[k], n_out[k])):
                        b = tf.raw_ops.InplaceUpdate(x=b, i=r, v=rows_shaped(y, shapes[k]))
                new_bufs.append(b)
            return g + 1, new_bufs

        g0 = tf.constant(0, tf.int32)
        n_launches = table.count
        g_end, carried = tf.while_loop(
            lambda g, *_: g < n_launches, body, (g0, [bufs[k] for k in loop_types]),
            shape_invariants=(g0.shape, [tf.TensorShape((None, *shapes[k]))
                                         for k in loop_types]))
        return carried, [[] for _ in loop_types], g_end

    def _loop_reads(self, carried: list, ys: list, g_end, seg, final: dict | None = None
                    ) -> dict:
        """Per loop type, the rows the tail and the results need, read from the
        buffers the loop left (the last launch's outputs written first). With
        `final`, also keeps there each loop type's buffer as the loop left it, for
        the weight gradients: it holds every row a loop launch read (the last
        launch's outputs, not yet written, are read by no launch)."""
        import tensorflow as tf

        from refold.scheduler.inplace import final_read
        _, n_out = self._row_lists()
        post = {}
        for i, k in enumerate(self.layout.loop_types):
            if not ys[i]:  # every output written in the loop (`_loop_writing_own`)
                post[k] = tf.gather(carried[i], seg(f"post_rows_{k}"))
            else:
                bounds = seg(f"out_bounds_{k}")
                written = tf.range(bounds[g_end], bounds[g_end + 1])
                post[k] = final_read(carried[i], ys[i], row_parts(written, n_out[k]),
                                     seg(f"post_rows_{k}"))
            if final is not None:
                final[k] = carried[i]
        return post

    def loop_values(self, starts: list, seg) -> list:
        """The loop run with no gradient recorded, from its loop types' starting
        buffers `starts` (in `layout.loop_types` order; `seg` as in
        `Launches.segments`): each buffer as the loop leaves it, with every value
        the loop made written (the last launch's outputs too). What the replayed
        backward loop (`scheduler.reverse`) runs forward and then reads."""
        lay = self.layout
        by_type = dict(zip(lay.loop_types, starts))
        carried, _, _ = self._loop([by_type.get(k) for k in range(lay.n_types)], seg, {},
                                   differentiable=False)
        return carried

    def _after_loop(self, bufs: list, post: dict, seg) -> list:
        """Runs the tail on the rows read after the loop (`post`: the loop types',
        the others read here from `bufs`); returns, per value type, the rows asked
        for."""
        import tensorflow as tf
        lay = self.layout
        post = [post[k] if k in post else tf.gather(bufs[k], seg(f"post_rows_{k}"))
                for k in range(lay.n_types)]
        if not lay.tail_ops:
            return post
        made = [[p] for p in post]
        self._run_outside_loop("tail", lay.tail_ops, made, seg)
        return [tf.gather(_joined(made[k]), seg(f"read_rows_{k}")) for k in range(lay.n_types)]

    # --- weight gradients once per step (scheduler.weight_grads) -----------------------

    def _replays(self, mode: GradientMode) -> bool:
        """Whether this call's loop gets the replayed backward pass (`scheduler.reverse`):
        under a gradient tape, as `mode` asks, when every loop op's weights can be
        deferred to the tap."""
        return (mode.replay_backward and compat.tape_may_record()
                and self.launches.all_deferrable())

    def _weight_tap(self, deferred: dict, final: dict, outer: dict, seg):
        """The tap whose gradient adds the deferred weights' gradients (`final`:
        per loop type, its buffer after the loop, filled in by `_after_loop`;
        `outer`: the deferred ops' launches before the loop, by `_before_loop`)."""
        from refold.scheduler.weight_grads import tap_of

        def op_grads(o, vs, g_buf):
            return self._op_weight_grads(o, vs, final, g_buf, seg, outer.get(o))
        return tap_of(deferred, self.launches.tapped_types, op_grads)

    def _op_weight_grads(self, o: int, variables: list, final: dict, g_buf: dict, seg,
                         launch: tuple | None = None) -> list:
        """Gradients of loop op o's `variables` over all its launches in the loop,
        and its `launch` before it if recorded (`_run_outside_loop`): the op run
        once on all their nodes (the arguments read from `final`) and
        differentiated against its outputs' total gradients (`g_buf[k]`: every row
        of type k's buffer); or, for an op whose weight gradients follow from its
        arguments' gradients (`Op.weight_grads`), those, without running it."""
        import tensorflow as tf
        lay = self.layout
        mine = tf.cast(tf.reshape(tf.where(tf.equal(seg("group_op"), int(lay.branch_of[o]))),
                                  [-1]), tf.int32)
        n = tf.gather(seg("group_size"), mine)
        total = tf.reduce_sum(n)

        def rows(starts, pos: int):  # per launch, its pos-th part of n rows, all launches
            first = starts + pos * n
            return tf.ragged.range(first, first + n).flat_values

        index = [tf.gather(seg(f"in_rows_{k}"), rows(tf.gather(seg(f"in_splits_{k}"), mine),
                                                        int(lay.arg_typepos[o, a])))
                 for a, k in enumerate(lay.op_in[o])]
        if launch is not None:  # its launch before the loop reads rows of the same buffers
            index = [tf.concat([i, r], 0) for i, r in zip(index, launch[0])]
        args = [tf.gather(final[k], i) for k, i in zip(lay.op_in[o], index)]
        shortcut = getattr(self.ops[o], "weight_grads", None)
        if shortcut is not None:  # from the arguments and their gradients, no second run
            got = shortcut(args, [tf.gather(g_buf[k], i) if k in g_buf else None
                                  for k, i in zip(lay.op_in[o], index)])
            if got is not None and all(v.ref() in got for v in variables):
                return [got[v.ref()] for v in variables]
        slots, g_outs = [], []
        for s, k in enumerate(lay.op_out[o]):
            if k in g_buf:  # launch j's outputs start at out_bounds[j + 1]
                written = rows(tf.gather(seg(f"out_bounds_{k}"), mine + 1),
                               int(lay.slot_typepos[o, s]))
                slots.append(s)
                g_outs.append(tf.gather(g_buf[k], written))
        if launch is not None:  # its launch before the loop: more rows of the same call
            _, outer_rows, outer_slots = launch
            first = {s: start for s, _, start in outer_slots}
            g_outs = [tf.concat([g, tf.gather(g_buf[lay.op_out[o][s]], tf.range(
                first[s], first[s] + outer_rows))], 0) for s, g in zip(slots, g_outs)]
            total = total + outer_rows

        def grads():
            with tf.GradientTape(watch_accessed_variables=False) as tape:
                tape.watch(variables)
                outs = self.launches.call(o, args, total)
            got = tape.gradient([outs[s] for s in slots], variables, output_gradients=g_outs)
            return [tf.zeros_like(v) if g is None else tf.convert_to_tensor(g)
                    for v, g in zip(variables, got)]

        if getattr(self.ops[o], "handles_empty", False) is True:
            return grads()
        return tf.cond(total > 0, grads, lambda: [tf.zeros_like(v) for v in variables])

    def _run_outside_loop(self, stage: str, ops: Sequence[int], made: list, seg,
                          deferred: dict | None = None, outer: dict | None = None) -> None:
        """Runs the launches of `stage` ("outer" or "tail"), one per op of `ops`, in
        order: each gathers its arguments from the rows of type k made so far,
        `made[k]` (a list of row blocks), and appends its outputs there. A launch
        of a `deferred` op leaves its weights' gradients to the tap and is recorded
        in `outer`: `(its arguments' rows in their types' buffers, rows, [(slot,
        type, its first row in the type's buffer) per float output])`."""
        import tensorflow as tf
        lay = self.layout
        tapped = set(self.launches.tapped_types) if deferred else set()
        for i, o in enumerate(ops):
            n = seg(f"{stage}_count_{i}")[0]
            recorded = deferred is not None and o in deferred
            if self._side_by_side(o) and not recorded:
                outs = [self._gathered_side_by_side(stage, i, o, made, seg, n)]
            else:
                args = self._outside_args(stage, i, o, made, seg, n)
                outs = self._call_unless_empty(o, args, n, inputs_only=recorded)
            slots = []
            for s, k in enumerate(lay.op_out[o]):
                if recorded and k in tapped:
                    slots.append((s, k, tf.add_n([tf.shape(p)[0] for p in made[k]])))
                made[k].append(outs[s])
            if recorded:  # its arguments' rows in their types' buffers
                outer[o] = ([seg(f"{stage}_args_{i}_{a}") for a in range(len(lay.op_in[o]))],
                            n, slots)

    def _side_by_side(self, o: int) -> bool:
        """Whether op o's output is its arguments' rows side by side (`Op.side_by_side`:
        at least `MANY_ARGS` arguments, all of one type, the output that many of their
        size). With fewer, a gather each and the op's own join measured as fast."""
        lay = self.layout
        types, outs = lay.op_in[o], lay.op_out[o]
        if not (getattr(self.ops[o], "side_by_side", False) is True and len(outs) == 1
                and len(types) >= MANY_ARGS and len(set(types)) == 1):
            return False
        size = [int(np.prod(lay.value_types[k].shape, dtype=np.int64)) for k in (types[0], outs[0])]
        return size[1] == len(types) * size[0]

    def _gathered_side_by_side(self, stage: str, i: int, o: int, made: list, seg, n):
        """The output of launch i of `stage` for an op that lays its arguments side by
        side: their rows interleaved (node by node) in one gather, reshaped. One copy
        where gathering each argument and joining them made two."""
        import tensorflow as tf
        lay = self.layout
        k, out = lay.op_in[o][0], lay.value_types[lay.op_out[o][0]]
        rows = tf.stack([seg(f"{stage}_args_{i}_{a}") for a in range(len(lay.op_in[o]))], 1)
        got = tf.reshape(tf.gather(_joined(made[k]), tf.reshape(rows, [-1])), [n, *out.shape])
        want = dtype_name(out)
        return got if got.dtype.name == want else tf.cast(got, want)

    def _in_halves(self, o: int, args: list, n) -> list:
        """Op o on `n` rows as two calls, on the first and the last half of them
        (`launches_outside_loop_in_halves`); the outputs joined."""
        import tensorflow as tf
        half = n // 2
        first = self.launches.call(o, [a[:half] for a in args], half)
        last = self.launches.call(o, [a[half:] for a in args], n - half)
        return [tf.concat([a, b], 0) for a, b in zip(first, last)]

    def _outside_args(self, stage: str, i: int, o: int, made: list, seg, n) -> list:
        """The arguments of launch i of `stage` (op o, `n` rows), gathered from the
        rows made so far. Many arguments of one type (`td.Stack`'s) are gathered in
        one `tf.gather` and split, not one gather each: a launch's cost there is the
        number of its ops, not of its rows."""
        import tensorflow as tf
        types = self.layout.op_in[o]
        names = [f"{stage}_args_{i}_{a}" for a in range(len(types))]
        if len(types) < MANY_ARGS or len(set(types)) > 1:
            direct = stage == "tail" and compat.tape_may_record()
            return [_tail_rows(made[k], seg(name)) if direct else
                    tf.gather(_joined(made[k]), seg(name)) for name, k in zip(names, types)]
        shape = self.layout.value_types[types[0]].shape
        rows = tf.gather(_joined(made[types[0]]), tf.concat([seg(name) for name in names], 0))
        return tf.unstack(tf.reshape(rows, [len(types), n, *shape]), len(types))

    def _call_unless_empty(self, o: int, args: list, n, inputs_only: bool = False) -> list:
        """Runs op o on `n` rows outside the loop (with `inputs_only`, its weights'
        gradients left to the tap: `weight_grads.inputs_only`). Unless the op
        `handles_empty`, the launch is skipped when `n` is 0 (a user's function may
        fail on zero rows); an op that does runs unconditionally: a `tf.cond` costs a
        few percent of a training step at batch 1 (BENCHMARKS.md, "The conds around
        the launches outside the loop")."""
        import tensorflow as tf

        empty_ok = getattr(self.ops[o], "handles_empty", False) is True

        def run():
            if inputs_only:
                from refold.scheduler.weight_grads import inputs_only as call
                return call(lambda *a: self.launches.call(o, list(a), n), args)
            if empty_ok and args and _HALVES.get():
                return self._in_halves(o, args, n)
            return self.launches.call(o, args, n)
        if empty_ok:
            return run()
        types = [self.layout.value_types[k] for k in self.layout.op_out[o]]
        return tf.cond(n > 0, run,
                       lambda: [tf.zeros((0, *t.shape), dtype_name(t)) for t in types])
