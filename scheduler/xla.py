"""The engine under XLA: every shape static, launches padded to power-of-two buckets.

`XlaExecutor(executor)` runs the same planned batches as `scheduler.executor.Executor`
in a program that XLA compiles (`tf.function(jit_compile=True)`). XLA needs every
shape at compile time and has no kernels for the default executor's in-place
buffer ops (`InplaceUpdate`, `InplaceAdd`), so two things change:

- **Bucketed, static shapes.** `XlaExecutor.pack(feed.arrays)` turns a `Feed`'s
  arrays into arrays whose shapes are powers of two (`bucket`): each value type's
  buffer, the constant rows, each launch outside the loop, the loop's iterations
  (all of one row count W, chosen by `loop_width`: a launch larger than W runs as
  several iterations, a smaller one is padded) and the number of iterations. A compiled
  program is reused by every batch of the same buckets (`XlaExecutor.key`), so a
  `tf.function` traced per key is traced once per bucket.
- **Scatter and gather.** Every value of type k owns a row of one buffer (as in
  the default executor, plus the tail's outputs and a last, *sink* row). A launch
  gathers its arguments and scatters its outputs (`tf.tensor_scatter_nd_update`,
  which XLA updates in place inside the loop). Padded rows are harmless: a padded
  argument reads a copy of a real row of its launch (so a function defined on the
  real rows is defined there, and its local derivatives are finite), a padded
  output goes to the sink, which nothing reads. So padded outputs get zero
  gradient and pass zero to the rows they read: the gradients equal the
  unpadded ones exactly. In the loop, one fused op per value type writes the
  previous launch's outputs and reads the next launch's arguments, with a
  custom gradient that scatter-adds the arguments' gradients into one gradient
  buffer (which sums duplicate reads) instead of a dense buffer per iteration.
- **No conds, no per-iteration weight reads.** A launch outside the loop runs
  under a `tf.cond` only when its op may fail on no rows (as in `Executor`; an op
  that `handles_empty` runs on padding rows instead): under XLA the gradient of a
  variable read in a cond branch is made dense, an embedding table's included.
  The loop's ops read the weights once before the loop (`variables`), so the
  loop's gradient does not keep a copy of every kernel per iteration.

Where things run: under XLA the whole step is one compiled cluster, index tables
included, so on a GPU the loop's bookkeeping (reading iteration g's row of the
launch tables, a `tf.gather`, which XLA lowers to a dynamic slice) stays on the
device; the loop's trip count is the number of real launches (a device scalar),
bounded by the bucketed table size that sizes the gradient's accumulators. Only
CPU runs are tested here.

Weight gradients once per step (`batched_weight_grads`, `scheduler.weight_grads`)
work as in `Executor`: the tap sits on the loop types' buffers before the loop,
and each loop op runs once more after it on all its nodes, padded to a bucket
(`wgrad_*` arrays; padded rows read a copy of a real row and get zero output
gradient). It is off unless asked for: at batch 1 it measured no clear gain under
XLA (BENCHMARKS.md, "Weight gradients once per step"). Not supported under
XLA: blocks that read computed values (`compiler.rounds.context`). `tf.debugging`
assertions in user functions are compiled away by XLA, so they do not stop a
compiled step.

>>> import numpy as np, tensorflow as tf
>>> from collections import namedtuple
>>> from types import SimpleNamespace as Op
>>> from refold.scheduler.executor import Executor
>>> from refold.scheduler.graph import OpGraph
>>> from refold.scheduler.planner import Planner
>>> from refold.scheduler.schedules import SCHEDULERS
>>> t = namedtuple("ValueType", "shape dtype")((), "float32")
>>> double = Op(name="double", input_types=[t], output_types=[t], fn=lambda x: [2 * x])
>>> ex = Executor([double], [t])
>>> g = OpGraph.build([0, 0], [1, 1], [0, 1], [0, 0, 0], [-1, 0, 1], [0, 0, 0],
...                   [np.ones(1, np.float32)])   # double(double(1.0))
>>> feed = Planner(ex.layout).feed(g, SCHEDULERS["agenda"](g), [2])
>>> xla = XlaExecutor(ex)
>>> arrays, rows = xla.pack(feed.arrays)
>>> run = tf.function(lambda a: tf.gather(xla.compute(a)[0], rows[0]), jit_compile=True)
>>> run(arrays).numpy().tolist()
[4.0]
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from refold.scheduler.executor import Executor
from refold.scheduler.layout import dtype_name


def bucket(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1): the padded size of n rows."""
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


# An iteration's fixed cost in rows' worth of work: what `loop_width` trades the
# padding of small launches against the iterations of split large ones.
ITERATION_COST_ROWS = 16


def loop_width(sizes: np.ndarray, min_rows: int = 1,
               iteration_cost: float = ITERATION_COST_ROWS) -> int:
    """The rows of every loop iteration: the power of two W >= `min_rows` minimising
    `sum(ceil(n / W)) * (W + iteration_cost)` over the launches' sizes n (a launch
    larger than W runs as several iterations, its nodes being independent)."""
    sizes = np.asarray(sizes, np.int64)
    if not len(sizes):
        return bucket(min_rows)
    best, best_cost = None, None
    w = bucket(min_rows)
    while True:
        cost = int(np.sum(-(-sizes // w))) * (w + iteration_cost)
        if best_cost is None or cost < best_cost:
            best, best_cost = w, cost
        if w >= sizes.max():
            return best
        w *= 2


def _padded(rows: np.ndarray, width: int, fill: int) -> np.ndarray:
    out = np.full(width, fill, np.int32)
    out[:len(rows)] = rows
    return out


class XlaExecutor:
    """The XLA program of an `Executor`'s ops (see the module docstring).

    `pack(feed.arrays)` gives the padded arrays of a planned batch and, per value type,
    the buffer rows of the values the feed reads (in `read_pos` order);
    `compute(arrays)`, called inside a `tf.function(jit_compile=True)`, gives
    each value type's final buffer, from which those rows are gathered.
    `min_rows`: the smallest bucket (see `bucket`). `min_width` (default `min_rows`)
    and `iteration_cost`: the loop's width's floor and `loop_width`'s trade-off. A
    small width with a larger `min_rows` pads the loop little (its rows cost the most)
    while the cheap dimensions (buffers, launches outside the loop, the iteration
    table) share few buckets. `variables`: returns the Keras variables the loop's ops
    read (a `Model`'s trainable weights), read once before the loop (see `_loop`).
    `batched_weight_grads`: take the loop's weight gradients once per step (None:
    as the executor says, `Executor(batched_weight_grads=...)`).
    """

    def __init__(self, executor: Executor, min_rows: int = 1,
                 variables: Callable[[], list] | None = None, min_width: int | None = None,
                 iteration_cost: float = ITERATION_COST_ROWS,
                 batched_weight_grads: bool | None = None):
        self.executor = executor
        self.layout = executor.layout
        self.min_rows = int(min_rows)
        self.min_width = self.min_rows if min_width is None else int(min_width)
        self.iteration_cost = iteration_cost
        self._variables = variables or (lambda: [])
        self.batched_weight_grads = (executor.batched_weight_grads
                                     if batched_weight_grads is None else batched_weight_grads)

    def bucket(self, n: int) -> int:
        """The padded size of n rows: `bucket(n)`, at least `min_rows` (a larger
        `min_rows` lets small batches share one compiled program)."""
        return bucket(max(int(n), self.min_rows))

    # --- packing, on the host ----------------------------------------------------------

    def pack(self, feed: dict) -> tuple[dict, list]:
        """`(arrays, result_rows)`: the padded arrays of a `Feed`'s arrays and, per
        value type, the buffer rows of its reads (int32, in `read_pos` order)."""
        lay = self.layout
        index, bounds = feed["index"], feed["layout"]
        seg = {name: index[bounds[i]:bounds[i + 1]].astype(np.int64)
               for i, name in enumerate(lay.segments)}
        n_rows = seg["n_rows"]
        const_counts = self._const_counts(seg)
        tail_rows = np.zeros(lay.n_types, np.int64)
        for j, o in enumerate(lay.tail_ops):
            for k in lay.op_out[o]:
                tail_rows[k] += seg[f"tail_count_{j}"][0]
        size = [self.bucket(int(n_rows[k] + tail_rows[k]) + 1) for k in range(lay.n_types)]
        sink = [s - 1 for s in size]
        arrays: dict = {}
        self._pack_constants(feed, const_counts, sink, arrays)
        self._pack_outer(seg, const_counts, sink, arrays)
        self._pack_loop(seg, sink, arrays)
        if self.batched_weight_grads:
            self._pack_weight_grads(seg, sink, arrays)
        result_rows = self._pack_tail(seg, n_rows, sink, arrays)
        for k in range(lay.n_types):
            arrays[f"buffer_{k}"] = np.zeros(size[k], np.int32)  # its shape: the buffer's rows
        return arrays, result_rows

    def _const_counts(self, seg: dict) -> np.ndarray:
        lay = self.layout
        counts = np.zeros(lay.n_types, np.int64)
        for d in lay.dtypes:
            ks = [k for k in range(lay.n_types) if lay.type_dtype[k] == d]
            for k, s in zip(ks, seg[f"const_sizes_{d}"]):
                counts[k] = s // max(int(lay.type_size[k]), 1)
        return counts

    def _pack_constants(self, feed: dict, counts, sink, arrays: dict) -> None:
        lay = self.layout
        for d in lay.dtypes:
            flat = np.asarray(feed[f"consts_{d}"])
            at = 0
            for k in [k for k in range(lay.n_types) if lay.type_dtype[k] == d]:
                t = lay.value_types[k]
                n = int(counts[k])
                width = self.bucket(n)
                rows = np.zeros((width, *t.shape), d)
                rows[:n] = flat[at:at + n * int(lay.type_size[k])].reshape((n, *t.shape))
                at += n * int(lay.type_size[k])
                arrays[f"consts_{k}"] = rows
                arrays[f"consts_rows_{k}"] = _padded(np.arange(n), width, sink[k])

    def _launch(self, prefix: str, o: int, n: int, args: list, first_out: dict, sink,
                arrays: dict) -> None:
        """One launch outside the loop: its count, padded argument rows (a copy of
        the first real row) and output rows (the sink past the real ones)."""
        lay = self.layout
        width = self.bucket(n)
        arrays[f"{prefix}_count"] = np.array([n], np.int32)
        for a, rows in enumerate(args):
            fill = rows[0] if len(rows) else sink[lay.op_in[o][a]]
            arrays[f"{prefix}_args_{a}"] = _padded(rows, width, fill)
        for s, k in enumerate(lay.op_out[o]):
            arrays[f"{prefix}_out_{s}"] = _padded(first_out[k] + np.arange(n), width, sink[k])
            first_out[k] += n

    def _pack_outer(self, seg: dict, const_counts, sink, arrays: dict) -> None:
        lay = self.layout
        cursor = {k: int(const_counts[k]) for k in range(lay.n_types)}
        for i, o in enumerate(lay.outer_ops):
            n = int(seg[f"outer_count_{i}"][0])
            args = [seg[f"outer_args_{i}_{a}"] for a in range(len(lay.op_in[o]))]
            self._launch(f"outer_{i}", o, n, args, cursor, sink, arrays)

    def _loop_widths(self) -> tuple[dict, dict]:
        """Per loop type, the most arguments / outputs of that type of a loop op."""
        lay = self.layout
        n_in = {k: max(lay.op_in[o].count(k) for o in lay.loop_ops) for k in lay.loop_types}
        n_out = {k: max(lay.op_out[o].count(k) for o in lay.loop_ops) for k in lay.loop_types}
        return n_in, n_out

    def _pack_loop(self, seg: dict, sink, arrays: dict) -> None:
        """Per loop type k: `loop_in_k [I', A_k W]` (iteration i's argument rows,
        argument after argument, each padded to W) and `loop_out_k [I' + 1, S_k W]`
        (row i + 1: iteration i's output rows, slot after slot; row 0: nothing, all
        sink). A launch of more than W nodes (`loop_width`) runs as several
        iterations of W nodes, the last padded."""
        lay = self.layout
        if not lay.loop_ops:
            return
        sizes, branch = seg["group_size"], seg["group_op"]
        width = loop_width(sizes, self.min_width, self.iteration_cost)
        chunks = -(-sizes // width)  # iterations per launch
        n_iterations = int(chunks.sum())
        rows_of_table = self.bucket(n_iterations)
        arrays["loop_op"] = _padded(np.repeat(branch, chunks), rows_of_table, 0)
        arrays["loop_count"] = np.array([n_iterations], np.int32)
        arrays["loop_width"] = np.zeros(width, np.int32)  # its shape: the launches' rows
        n_in, n_out = self._loop_widths()
        for k in lay.loop_types:
            ins = np.full((rows_of_table, n_in[k] * width), sink[k], np.int32)
            outs = np.full((rows_of_table + 1, n_out[k] * width), sink[k], np.int32)
            splits, rows, out_bounds = (seg[f"in_splits_{k}"], seg[f"in_rows_{k}"],
                                        seg[f"out_bounds_{k}"])
            i = 0  # the iteration
            for g in range(len(sizes)):
                o = lay.loop_ops[branch[g]]
                n = int(sizes[g])
                mine = rows[splits[g]:splits[g + 1]]
                for lo in range(0, n, width):  # a chunk of the launch's nodes
                    m = min(width, n - lo)
                    for a in range(lay.op_in[o].count(k)):
                        part = mine[a * n + lo:a * n + lo + m]
                        ins[i, a * width:(a + 1) * width] = part[0]
                        ins[i, a * width:a * width + m] = part
                    first = out_bounds[g + 1] + lo
                    for s in range(lay.op_out[o].count(k)):
                        outs[i + 1, s * width:s * width + m] = first + s * n + np.arange(m)
                    i += 1
            arrays[f"loop_in_{k}"] = ins
            arrays[f"loop_out_{k}"] = outs

    def _pack_weight_grads(self, seg: dict, sink, arrays: dict) -> None:
        """Per loop op (branch b), all its nodes of the batch for its weight gradients:
        `wgrad_{b}_count` of them, `wgrad_{b}_args_{a}` the buffer rows of argument a
        (padded with a copy of the first), `wgrad_{b}_out_{s}` those of output s
        (padded with the sink)."""
        lay = self.layout
        sizes, branch = seg["group_size"], seg["group_op"]
        for b, o in enumerate(lay.loop_ops):
            launches = np.flatnonzero(branch == b)
            n = sizes[launches]
            total = int(n.sum())
            width = self.bucket(total)
            arrays[f"wgrad_{b}_count"] = np.array([total], np.int32)
            for a, k in enumerate(lay.op_in[o]):
                starts = seg[f"in_splits_{k}"][launches] + lay.arg_typepos[o, a] * n
                rows = seg[f"in_rows_{k}"][_ranges(starts, n)]
                arrays[f"wgrad_{b}_args_{a}"] = _padded(rows, width,
                                                        rows[0] if total else sink[k])
            for s, k in enumerate(lay.op_out[o]):
                starts = seg[f"out_bounds_{k}"][launches + 1] + lay.slot_typepos[o, s] * n
                arrays[f"wgrad_{b}_out_{s}"] = _padded(_ranges(starts, n), width, sink[k])

    def _pack_tail(self, seg: dict, n_rows, sink, arrays: dict) -> list:
        """The tail's launches; returns per type the buffer rows of the reads."""
        lay = self.layout

        def buffer_rows(k: int, rows: np.ndarray) -> np.ndarray:
            # a row of [post rows; tail outputs] as a buffer row
            post = seg[f"post_rows_{k}"]
            out = n_rows[k] + rows - len(post)
            inside = rows < len(post)
            out[inside] = post[rows[inside]]
            return out

        cursor = {k: int(n_rows[k]) for k in range(lay.n_types)}
        for j, o in enumerate(lay.tail_ops):
            n = int(seg[f"tail_count_{j}"][0])
            args = [buffer_rows(k, seg[f"tail_args_{j}_{a}"])
                    for a, k in enumerate(lay.op_in[o])]
            self._launch(f"tail_{j}", o, n, args, cursor, sink, arrays)
        if not lay.tail_ops:
            return [seg[f"post_rows_{k}"].astype(np.int32) for k in range(lay.n_types)]
        return [buffer_rows(k, seg[f"read_rows_{k}"]).astype(np.int32)
                for k in range(lay.n_types)]

    @staticmethod
    def key(arrays: dict) -> tuple:
        """What a compiled program depends on: every array's shape (the buckets)."""
        return tuple((name, a.shape) for name, a in sorted(arrays.items()))

    def input_signature(self, arrays: dict) -> dict:
        """Static `tf.TensorSpec`s of these arrays: one trace per bucket."""
        import tensorflow as tf
        return {name: tf.TensorSpec(a.shape, tf.as_dtype(a.dtype)) for name, a in arrays.items()}

    # --- the program ---------------------------------------------------------------------

    def compute(self, arrays: dict) -> list:
        """Each value type's final buffer `[rows, *shape]` (its last row the sink).

        Call it inside a `tf.function(jit_compile=True)` traced on `pack`'s arrays
        with static shapes (`input_signature`)."""
        import tensorflow as tf
        lay = self.layout
        bufs = []
        for k, t in enumerate(lay.value_types):
            zeros = tf.zeros((arrays[f"buffer_{k}"].shape[0], *t.shape), dtype_name(t))
            bufs.append(_scatter(zeros, arrays[f"consts_rows_{k}"], arrays[f"consts_{k}"]))
        for i, o in enumerate(lay.outer_ops):
            bufs = self._run_launch(f"outer_{i}", o, bufs, arrays)
        deferred = self.executor.launches.deferred_weights(self.batched_weight_grads)
        if deferred:
            final: dict = {}  # loop type -> its buffer after the loop, for the tap
            types = self.executor.launches.tapped_types
            tapped = self._weight_tap(deferred, final, arrays)([bufs[k] for k in types])
            bufs = list(bufs)
            for k, b in zip(types, tapped):
                bufs[k] = b
        bufs = self._loop(bufs, arrays, deferred)
        if deferred:
            final.update({k: bufs[k] for k in lay.loop_types})
        for j, o in enumerate(lay.tail_ops):
            bufs = self._run_launch(f"tail_{j}", o, bufs, arrays)
        return bufs

    def _run_launch(self, prefix: str, o: int, bufs: list, arrays: dict) -> list:
        """A launch outside the loop. As in `Executor`, a `tf.cond` skips it when it
        has no nodes unless its op `handles_empty`; such an op runs on its padding
        rows then (they read the sink; their outputs go to it and get no gradient).

        The cond matters more here than in graph mode: under XLA the gradient of a
        variable read inside a `tf.cond` branch is made dense, so an embedding
        table's sparse gradient became a whole-table one (16,000 x 300 floats zeroed,
        padded and summed per step; BENCHMARKS.md, "XLA for the loop")."""
        import tensorflow as tf
        lay = self.layout
        outs_rows = [arrays[f"{prefix}_out_{s}"] for s in range(len(lay.op_out[o]))]
        args = [tf.gather(bufs[k], arrays[f"{prefix}_args_{a}"])
                for a, k in enumerate(lay.op_in[o])]
        width = int(outs_rows[0].shape[0]) if outs_rows else 0
        touched = sorted(set(lay.op_out[o]))

        def run():
            new = list(bufs)
            for s, y in enumerate(self.executor.launches.call(o, args, width)):
                k = lay.op_out[o][s]
                new[k] = _scatter(new[k], outs_rows[s], y)
            return [new[k] for k in touched]

        if not touched:
            return bufs
        if getattr(self.executor.ops[o], "handles_empty", False) is True:
            done = run()
        else:
            done = tf.cond(arrays[f"{prefix}_count"][0] > 0, run,
                           lambda: [bufs[k] for k in touched])
        bufs = list(bufs)
        for k, b in zip(touched, done):
            bufs[k] = b
        return bufs

    def _branch(self, o: int, xs: dict, width: int, n_in: dict, n_out: dict,
                deferred: dict) -> list:
        """Loop op o on the gathered rows `xs[k]` (`n_in[k]` blocks of `width`):
        per loop type, its outputs stacked and padded to `n_out[k]` blocks (through
        `weight_grads.inputs_only` if its weight gradients are `deferred`)."""
        import tensorflow as tf
        lay = self.layout
        blocks = {k: tf.split(xs[k], n_in[k]) if n_in[k] > 1 else [xs[k]] for k in xs}
        args = [blocks[k][int(lay.arg_typepos[o, a])] for a, k in enumerate(lay.op_in[o])]
        if o in deferred:
            from refold.scheduler.weight_grads import inputs_only
            outs = inputs_only(lambda *a: self.executor.launches.call(o, list(a), width), args)
        else:
            outs = self.executor.launches.call(o, args, width)
        ys = []
        for k in lay.loop_types:
            t = lay.value_types[k]
            mine = [outs[s] for s, kk in enumerate(lay.op_out[o]) if kk == k]
            mine += [tf.zeros((width, *t.shape), dtype_name(t))] * (n_out[k] - len(mine))
            ys.append(tf.concat(mine, 0) if len(mine) > 1 else mine[0] if mine
                      else tf.zeros((0, *t.shape), dtype_name(t)))
        return ys

    def _loop(self, bufs: list, arrays: dict, deferred: dict) -> list:
        import tensorflow as tf
        lay = self.layout
        if not lay.loop_ops:
            return bufs
        n_in, n_out = self._loop_widths()
        types = lay.loop_types
        ins = [arrays[f"loop_in_{k}"] for k in types]
        outs = [arrays[f"loop_out_{k}"] for k in types]
        table_rows = int(arrays["loop_op"].shape[0])
        width = int(arrays["loop_width"].shape[0])
        n_launches = arrays["loop_count"][0]

        def body(g, carried, ys):
            new, xs = [], {}
            for i, k in enumerate(types):
                b, x = write_read(carried[i], ys[i], tf.gather(outs[i], g), tf.gather(ins[i], g))
                new.append(b)
                xs[k] = x
            branches = [lambda o=o: self._branch(o, xs, width, n_in, n_out, deferred)
                        for o in lay.loop_ops]
            op = tf.gather(arrays["loop_op"], g)
            ys = tf.switch_case(op, branches) if len(branches) > 1 else branches[0]()
            return g + 1, new, list(ys)

        ys0 = [tf.zeros((n_out[k] * width, *lay.value_types[k].shape),
                        dtype_name(lay.value_types[k])) for k in types]
        with _read_once(self._variables()):
            g_end, carried, ys = tf.while_loop(
                lambda g, *_: g < n_launches, body,
                (tf.constant(0, tf.int32), [bufs[k] for k in types], ys0),
                maximum_iterations=table_rows)
        bufs = list(bufs)
        write = _write_keeping_gradient if deferred else _scatter
        for i, k in enumerate(types):
            bufs[k] = write(carried[i], tf.gather(outs[i], g_end), ys[i])
        return bufs

    # --- weight gradients once per step (scheduler.weight_grads) ------------------------

    def _weight_tap(self, deferred: dict, final: dict, arrays: dict):
        """The tap on the loop types' buffers whose gradient adds the deferred
        weights' gradients (`final`: per loop type, its buffer after the loop)."""
        from refold.scheduler.weight_grads import tap_of
        return tap_of(deferred, self.executor.launches.tapped_types,
                      lambda o, vs, g_buf: self._op_weight_grads(o, vs, final, g_buf, arrays))

    def _op_weight_grads(self, o: int, variables: list, final: dict, g_buf: dict,
                         arrays: dict) -> list:
        """Gradients of loop op o's `variables` over all its nodes: the op run once on
        them (padded to a bucket, arguments read from `final`) and differentiated
        against its outputs' total gradients (`g_buf[k]`, per row of buffer k;
        the padded rows' zeroed). An op with no nodes in the batch gives zeros."""
        import tensorflow as tf
        lay = self.layout
        b = int(lay.branch_of[o])
        count = arrays[f"wgrad_{b}_count"][0]
        args = [tf.gather(final[k], arrays[f"wgrad_{b}_args_{a}"])
                for a, k in enumerate(lay.op_in[o])]
        width = int(arrays[f"wgrad_{b}_out_0"].shape[0])
        real = tf.range(width) < count
        slots, g_outs = [], []
        for s, k in enumerate(lay.op_out[o]):
            if k in g_buf:
                g = tf.gather(g_buf[k], arrays[f"wgrad_{b}_out_{s}"])
                mask = tf.reshape(real, [-1] + [1] * (g.shape.rank - 1))
                slots.append(s)
                g_outs.append(tf.where(mask, g, tf.zeros_like(g)))

        def grads():
            with tf.GradientTape(watch_accessed_variables=False) as tape:
                tape.watch(variables)
                outs = self.executor.launches.call(o, args, width)
            got = tape.gradient([outs[s] for s in slots], variables, output_gradients=g_outs)
            return [tf.zeros_like(v) if g is None else tf.convert_to_tensor(g)
                    for v, g in zip(variables, got)]

        return tf.cond(count > 0, grads, lambda: [tf.zeros_like(v) for v in variables])


def _read_once(variables: list):
    """A scope in which the Keras `variables` read as their values read on entering it.

    A weight read inside the loop body is a new tensor per iteration, which the loop's
    gradient keeps per iteration: a `[iterations, 300, 750]` stack of a kernel, zeroed,
    filled and read back on every step (BENCHMARKS.md, "XLA for the loop"). Read before
    the loop, it is a loop invariant, which the gradient does not stack. Only for reads:
    the loop's ops assign no variables."""
    import keras
    import tensorflow as tf
    return keras.StatelessScope(
        state_mapping=[(v, tf.convert_to_tensor(v.value)) for v in variables
                       if isinstance(v, keras.Variable)],  # a tf.Variable is read in place
        initialize_variables=False)


def _scatter(buf, rows, y):
    """`buf` with rows `rows` replaced by `y` (default gradients: used outside the loop)."""
    import tensorflow as tf
    return tf.tensor_scatter_nd_update(buf, tf.expand_dims(rows, 1), y)


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """`concatenate([arange(s, s + n) for s, n in zip(starts, lengths)])`, vectorised."""
    lengths = np.asarray(lengths, np.int64)
    offsets = np.cumsum(lengths) - lengths
    return (np.arange(int(lengths.sum()), dtype=np.int64)
            + np.repeat(np.asarray(starts, np.int64) - offsets, lengths))


def _write_keeping_gradient(buf, rows, y):
    """`_scatter(buf, rows, y)` whose gradient leaves the written rows' gradient in
    the buffer's too (as `write_read` does), so that a tap before the loop sees the
    total gradient of every value the loop made, the last launch's included. The
    rows' old contents are the loop's zeros (or the sink), which nothing reads."""
    import tensorflow as tf

    @tf.custom_gradient
    def write(buf, y):
        def grad(g):
            return g, tf.gather(g, rows)
        return _scatter(buf, rows, y), grad

    return write(buf, y)


def write_read(buf, y, out_rows, in_rows):
    """Writes `y` to rows `out_rows` of `buf`, then gathers rows `in_rows`: returns
    `(buf, gathered)`. For a float buffer the gradient accumulates the gathered rows'
    gradients into the buffer's with one scatter-add (duplicate rows summed) and reads
    `y`'s from it; the written rows' old contents (zeros, or the sink) get no gradient
    of their own, as each row but the sink is written once."""
    import tensorflow as tf
    if not (buf.dtype.is_floating or buf.dtype.is_complex):
        new = _scatter(tf.stop_gradient(buf), out_rows, tf.stop_gradient(y))
        return new, tf.gather(new, in_rows)

    @tf.custom_gradient
    def fused(buf, y):
        new = _scatter(buf, out_rows, y)

        def grad(g_buf, g_x):
            g = tf.tensor_scatter_nd_add(g_buf, tf.expand_dims(in_rows, 1), g_x)
            return g, tf.gather(g, out_rows)

        return (new, tf.gather(new, in_rows)), grad

    return fused(buf, y)
