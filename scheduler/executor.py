"""The executor: any schedule of an `OpGraph`, run by one static `tf.while_loop`.

`Executor(ops, value_types)` builds, once, the TensorFlow program that runs every
schedule of every batch for these ops. A batch is fed as a handful of flat arrays
(`Executor.feed`), so one traced `tf.function` serves all batch shapes without
retracing (tested: its tracing count stays 1).

How a batch runs:

1. **Stages.** From the ops' types alone (`Executor.__init__`): op a *feeds* op b
   when an output type of a is an input type of b. *Head* ops are on no cycle
   of this relation and fed by head ops only (embedding lookups, leaf
   transforms, zero-argument ops); *tail* ops are on no cycle and feed tail ops
   only (output layers, losses, metrics); the rest, the *middle*, is the
   recursive part. A head op runs once, on all its nodes, before the loop; a
   tail op once after it; only middle ops run in the loop. A TreeLSTM's loop
   then holds the cell alone, like a hand-batched program's level loop.
2. **Buffers.** Every value of value type k owns one row of buffer k: first the
   constants of type k, then the outputs of type k of every launch, in launch
   order (within a launch: output slot, then node). Launches are ordered: the
   outer launches (each middle op on its step-0 nodes, whose arguments are all
   constants; then each head op), the loop's launches, the tail's.
3. **Before the loop.** Each outer launch gathers its arguments from the rows
   produced so far and runs its op (skipped when it has no nodes). Variable
   lookups therefore never run inside the loop, where TensorFlow would keep a
   dense vocabulary-sized gradient accumulator per iteration (ENGINE_NOTES
   P3). Buffer k starts as `[constants; outer outputs; zeros]`.
4. **The loop: one launch per iteration.** Iteration g writes launch g-1's outputs
   and gathers launch g's inputs in one fused in-place op per value type the
   middle ops use (`scheduler.inplace.write_read`), then runs launch g's op once
   on all its nodes: through `tf.switch_case` when the middle has several ops,
   directly when it has one. Inputs are gathered outside the branches. With one
   loop op, every argument is gathered and every output written as a row list
   of its own; with several, the rows of a value type travel stacked (one
   gather, split inside the branch; outputs concatenated before the write).
5. **After the loop.** `final_read` writes the last launch's outputs and gathers,
   per value type, the rows the tail and the results need; the tail ops run on
   those rows (and on earlier tail outputs), then the results are gathered.

Why this design (the storage and loop scheme chosen, with the figures behind it):

- **Storage: per-type SSA buffers updated in place** (`scheduler.inplace`). The
  prototype in ENGINE_NOTES.md §2 compared seven schemes on one workload (train
  ms / peak extra MB, N=8192 values, random dependencies): at depth 512 this
  scheme took 50 ms / 34 MB, Fold-style pass-through 267 ms / 370 MB, growing
  concat state 267 ms / 1,048 MB (memory grows as depth x nodes),
  `tensor_scatter_nd_update` 297 ms (copies the whole buffer every iteration),
  TensorArray per iteration 1,020 ms; a TensorArray per row gave wrong gradients
  on repeated reads. It was the only scheme linear in both time and memory for
  every dependency pattern. Re-measured here (BENCHMARKS.md, `python -m
  benchmarks.engine --only memory`): a TreeLSTM training step peaks at 5.2 KB
  per op-graph node at 256 trees (14k nodes) and 5.3 KB at 1,024 trees (58k
  nodes), i.e. linear; most of it is the cell's saved activations (8.6-8.8 KB
  before head and tail ops left the loop).
- **Hoisting the head and the tail.** Variable lookups inside the loop cost a
  dense vocabulary-sized gradient per iteration (1.8-12x slower training in the
  prototype), so lookups run before it. Running every head and tail op outside
  the loop goes further: the loop keeps only the value types and ops of the
  recursion, so each iteration does fewer in-place writes and reads, and with a
  single middle op it needs no `switch_case` at all (nor its gradient, which
  makes every branch return every branch's saved intermediates). On the
  sst-synth TreeLSTM this made the traced step 4-8% faster (paired, batch 16
  to 256), and depth schedules lose their extra per-height classifier launches.
- **One launch per iteration with `tf.switch_case`.** It serves depth and agenda
  schedules alike (the executor never sees which), runs nothing for ops absent
  from a step. Its fixed cost is small next to a TreeLSTM launch (milliseconds
  at batch >= 16) but not nil: in training, a tiny extra launch costs about
  0.5 ms here. Paired against a hand-written level-by-level TensorFlow program
  on sst-synth same-shape trees (BENCHMARKS.md), the traced step alone runs at
  0.93-0.96x of it at batch 16 to 256 (with the row lists below); the per-batch
  planning comes on top (~0.6 ms at batch 64 between steps, ~5% of an inference
  step; 0.90-0.94x in training and 0.90-0.93x in inference with it, paired) unless
  it is done ahead on a spare core (`Compiler.plan_batches(..., ahead=1)`,
  `Model.fit`).
- **One row list per argument and output** (one loop op). A TreeLSTM cell reads
  four values of one type, `(h_l, c_l, h_r, c_r)`, and writes two, `(h, c)`.
  Gathered as one `[4n, 150]` block and split, then written as one concat of
  `h` and `c`, each iteration copied those rows twice more forward and twice
  more backward (the split's and the concat's gradients): a 600-byte row is not
  64-byte aligned, so TensorFlow's axis-0 split cannot alias its input. A list
  per argument and per output leaves only the gathers and in-place writes.
  Interleaved on the same weights (`python -m benchmarks.ablations --only
  rowlists`, sst-synth, batch 16 / 64 / 256), the traced step got 8% / 6% / 4%
  faster in training and 1% / 6% / 6% in inference: 0.95-0.96x the
  hand-batched program's training step, 0.93-0.96x its inference step.
- **A lean loop body.** Each iteration reads its launch's scalars (op, size,
  gather and write bounds per value type) from one row of a table built before
  the loop, and separates same-typed arguments with one `Split`: 106 ops in the
  body instead of 156 and 35 saved tensors instead of 43 (TreeLSTM), which made
  training steps 9-14% faster (paired, BENCHMARKS.md).
- **Feeding.** `feed` is linear in the batch: buffer rows and gather positions
  come from per-launch cumulative sums, computed in one compiled pass over
  nodes, values and arguments (`scheduler.packing`, Numba). The checks that a
  graph's nodes match their ops run once per example graph, not per batch
  (`check`); the segments are written by a second compiled pass. At batch 64
  (3.6k nodes) packing takes about 0.2 ms back to back (0.4 ms between training
  steps, with cold caches), against 0.6 ms for the vectorised NumPy version and
  2-3 ms for the first, lexsort-based one. `Compiler.plan` goes further: it
  merges, schedules and packs cached example graphs in one compiled call
  (`scheduler.planner`), 0.6 ms between steps at batch 64 instead of 1.0-1.15.

The packed form: the schedule's integer arrays travel as one int32 vector `index`
plus the segment bounds `layout`, and constants as one flat vector per dtype,
because each `tf.function` argument costs tens of microseconds per call; one
`SplitV` cuts them apart inside the step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from scheduler.graph import OpGraph
from scheduler.packing import pack_rows, pack_segments
from scheduler.schedules import Schedule


@dataclass
class Feed:
    """A packed batch for `Executor.compute`: `arrays` maps argument name -> numpy array.

    `read_type[i]`, `read_pos[i]`: where the i-th value asked for lands in the
    outputs (value type, row in that type's output).
    """

    arrays: dict
    read_type: np.ndarray
    read_pos: np.ndarray


def _dtype_name(t) -> str:
    return str(getattr(t, "dtype", "float32"))


def _parts(rows, m: int) -> list:
    """`rows` (a launch's row list for m same-typed values, n rows each, one after
    the other) cut into the m lists."""
    if m == 1:
        return [rows]
    import tensorflow as tf
    return tf.split(rows, m) if m else []


def _joined(pieces: list):
    """The pieces concatenated (rows); joins them once and keeps the result."""
    if len(pieces) > 1:
        import tensorflow as tf
        pieces[:] = [tf.concat(pieces, 0)]
    return pieces[0]


class Executor:
    """Runs scheduled op graphs for a fixed set of ops (see the module docstring).

    Args:
        ops: op-like objects with `fn` (a batch function: tensors `[n, *shape]` in,
            a list of such out; a zero-argument op gets the batch size `n`),
            `input_types` and `output_types` (each with `shape` and `dtype`).
        value_types: every value type, each with `shape` and `dtype`; all the ops'
            input and output types must be among them.
        row_lists: with one loop op, gather each argument and write each output
            as its own row list (the default); False stacks the rows of a value
            type, as a loop of several ops must (for comparison: `python -m
            benchmarks.ablations --only rowlists`).
    """

    def __init__(self, ops: Sequence[Any], value_types: Sequence[Any], row_lists: bool = True):
        if not isinstance(row_lists, bool):
            raise TypeError(f"row_lists must be True or False, got {row_lists!r}")
        self.ops = list(ops)
        self.row_lists = row_lists
        self.value_types = list(value_types)
        index = {t: k for k, t in enumerate(self.value_types)}
        try:
            self.op_in = [[index[t] for t in op.input_types] for op in self.ops]
            self.op_out = [[index[t] for t in op.output_types] for op in self.ops]
        except KeyError as e:
            raise ValueError(f"an op uses value type {e} that is not among value_types") \
                from None
        self.dtypes = sorted({_dtype_name(t) for t in self.value_types})
        n_ops = len(self.ops)
        max_arity = max([len(a) for a in self.op_in] + [1])
        # arg_typepos[o, a]: how many earlier args of op o have the same value type.
        self.arg_typepos = np.zeros((max(n_ops, 1), max_arity), np.int64)
        for o, types in enumerate(self.op_in):
            for a, k in enumerate(types):
                self.arg_typepos[o, a] = types[:a].count(k)
        # out_count[o, k]: how many outputs of value type k op o has.
        self.out_count = np.zeros((max(n_ops, 1), len(self.value_types)), np.int64)
        self.out_typepos = []
        for o, types in enumerate(self.op_out):
            for k in types:
                self.out_count[o, k] += 1
            self.out_typepos.append([types[:s].count(k) for s, k in enumerate(types)])
        self.head_ops, self.tail_ops = self._stages()
        middle = [o for o in range(n_ops) if o not in self.head_ops and o not in self.tail_ops]
        # The static sequence of launches before the loop: every middle op on its step-0
        # nodes (all arguments constants), then every head op on all its nodes.
        self.outer_ops = middle + self.head_ops
        self._n_middle = len(middle)
        self._tail_types = {k for o in self.tail_ops for k in self.op_out[o]}
        # for pack_segments: arities of the outer and tail launches, tail argument types
        self._outer_arity = np.array([len(self.op_in[o]) for o in self.outer_ops], np.int64)
        self._tail_arity = np.array([len(self.op_in[o]) for o in self.tail_ops], np.int64)
        self._tail_in_type = np.full(
            (len(self.tail_ops), max([1] + list(self._tail_arity))), -1, np.int64)
        for j, o in enumerate(self.tail_ops):
            self._tail_in_type[j, :len(self.op_in[o])] = self.op_in[o]
        self._tail_type_mask = np.zeros(len(self.value_types), bool)
        self._tail_type_mask[list(self._tail_types)] = True
        rows = max(n_ops, 1)
        self._stage = np.ones(rows, np.int64)  # per op: 0 head, 1 middle, 2 tail
        self._stage[self.head_ops] = 0
        self._stage[self.tail_ops] = 2
        self._outer_pos = np.zeros(rows, np.int64)
        self._outer_pos[self.outer_ops] = np.arange(len(self.outer_ops))
        self._tail_pos = np.zeros(rows, np.int64)
        self._tail_pos[self.tail_ops] = np.arange(len(self.tail_ops))
        # Only middle ops get a branch in the loop, and of them only those that can run
        # after step 0: a never-taken branch that gathers from a variable would still
        # cost a dense gradient per iteration (ENGINE_NOTES P3).
        self.loop_ops = [o for o in middle
                         if self.op_in[o] and not getattr(self.ops[o], "prelude_only", False)]
        self.loop_types = sorted({k for o in self.loop_ops
                                  for k in self.op_in[o] + self.op_out[o]})
        self.branch_of = np.full(max(n_ops, 1), -1, np.int64)
        self.branch_of[self.loop_ops] = np.arange(len(self.loop_ops))
        self._segments = self._segment_names()
        # Tables for feed(), indexed by op: input count per value type, arity, number
        # of outputs, value type per input/output slot (-1 past the end), and the
        # position of each output among the op's outputs of the same type.
        width = max([len(t) for t in self.op_in] + [1])
        out_width = self._max_outputs
        rows = max(n_ops, 1)
        self.in_count = np.zeros((rows, len(self.value_types)), np.int64)
        self._arity = np.zeros(rows, np.int64)
        self._n_outputs = np.zeros(rows, np.int64)
        self._in_type_table = np.full((rows, width), -1, np.int64)
        self._out_type_table = np.full((rows, out_width), -1, np.int64)
        self._slot_typepos = np.zeros((rows, out_width), np.int64)
        for o in range(n_ops):
            self._arity[o] = len(self.op_in[o])
            self._n_outputs[o] = len(self.op_out[o])
            for a, k in enumerate(self.op_in[o]):
                self.in_count[o, k] += 1
                self._in_type_table[o, a] = k
            for s, k in enumerate(self.op_out[o]):
                self._out_type_table[o, s] = k
                self._slot_typepos[o, s] = self.out_typepos[o][s]
        self._type_dtypes = [_dtype_name(t) for t in self.value_types]
        # elements per row of each value type
        self.type_size = np.array([int(np.prod(t.shape, dtype=np.int64))
                                   for t in self.value_types], np.int64)

        self._segment_id = {name: i for i, name in enumerate(self._segments)}

    def _stages(self) -> tuple[list[int], list[int]]:
        """The head and tail ops, each in an order where producers come first.

        Op a *feeds* op b when an output type of a is an input type of b. A *head* op
        is on no cycle of this relation and is fed by head ops only: all its nodes
        can run before the loop. A *tail* op is on no cycle, is not a head op and
        feeds tail ops only: all its nodes can run after the loop. The rest, the
        *middle*, runs in the loop (but for its step-0 nodes, which run before it).
        """
        n = len(self.ops)
        feeds = np.array([[bool(set(self.op_out[a]) & set(self.op_in[b])) for b in range(n)]
                          for a in range(n)], bool).reshape(n, n)
        reach = feeds.copy()  # reach[a, b]: a path a -> ... -> b
        while True:
            wider = reach | ((reach.astype(np.int64) @ feeds.astype(np.int64)) > 0)
            if np.array_equal(wider, reach):
                break
            reach = wider
        acyclic = ~np.diag(reach)
        head, tail = np.zeros(n, bool), np.zeros(n, bool)
        changed = True
        while changed:
            changed = False
            for o in range(n):
                if acyclic[o] and not head[o] and np.all(head[feeds[:, o]]):
                    head[o] = changed = True
        changed = True
        while changed:
            changed = False
            for o in range(n):
                if acyclic[o] and not head[o] and not tail[o] and np.all(tail[feeds[o]]):
                    tail[o] = changed = True
        # on acyclic ops, a producer has strictly fewer ancestors than its consumers
        ancestors = reach.sum(0)
        order = sorted(range(n), key=lambda o: (ancestors[o], o))
        return [o for o in order if head[o]], [o for o in order if tail[o]]

    # --- the packed layout -------------------------------------------------------------

    def _segment_names(self) -> list[str]:
        names = ["group_op", "group_size", "n_rows"]
        for k in self.loop_types:  # only the loop reads and writes in launches
            names += [f"in_splits_{k}", f"in_rows_{k}", f"out_bounds_{k}"]
        for k in range(len(self.value_types)):
            names += [f"read_rows_{k}", f"post_rows_{k}"]
        for stage, ops in (("outer", self.outer_ops), ("tail", self.tail_ops)):
            for i, o in enumerate(ops):
                names.append(f"{stage}_count_{i}")
                names += [f"{stage}_args_{i}_{a}" for a in range(len(self.op_in[o]))]
        return names + [f"const_sizes_{d}" for d in self.dtypes]  # last: made in Python

    def input_signature(self) -> dict:
        """The `tf.TensorSpec`s of `Feed.arrays` (all with unknown lengths)."""
        import tensorflow as tf
        spec = {"index": tf.TensorSpec([None], tf.int32),
                "layout": tf.TensorSpec([None], tf.int32)}
        for d in self.dtypes:
            spec[f"consts_{d}"] = tf.TensorSpec([None], tf.as_dtype(d))
        return spec

    def _launches(self, schedule: Schedule):
        """The launches in execution order, from a schedule's (step, op) groups.

        Returns `(launch_op, node_launch, n_outer, n_loop)`: first the outer launches
        (one per entry of `outer_ops`, possibly empty: a middle op's step-0 nodes, a
        head op's nodes whatever their step), then the schedule's launches of middle
        ops after step 0 in its order (one loop iteration each), then one launch per
        tail op.
        """
        s_op = schedule.group_op.astype(np.int64)
        stage = self._stage[s_op]
        in_loop = (stage == 1) & (schedule.group_step > 0)
        n_outer, n_loop = len(self.outer_ops), int(np.count_nonzero(in_loop))
        launch_of_group = np.where(
            in_loop, n_outer + np.cumsum(in_loop) - 1,
            np.where(stage == 2, n_outer + n_loop + self._tail_pos[s_op], self._outer_pos[s_op]))
        launch_op = np.concatenate([np.asarray(self.outer_ops, np.int64), s_op[in_loop],
                                    np.asarray(self.tail_ops, np.int64)])
        node_launch = launch_of_group[schedule.node_group]
        return launch_op, node_launch, n_outer, n_loop

    def check(self, graph: OpGraph) -> None:
        """Raises `ValueError` unless every node of `graph` matches its op: as many
        arguments as the op's inputs, of its input types, and exactly one value per
        output, of its output type. These are properties of each node, so a graph
        merged from checked graphs needs no new check (`feed(..., checked=True)`)."""
        node_op = graph.node_op.astype(np.int64)
        vtype = graph.value_type.astype(np.int64)
        vnode = graph.value_node.astype(np.int64)
        vindex = graph.value_index.astype(np.int64)
        if len(node_op) and (node_op.min() < 0 or node_op.max() >= len(self.ops)):
            raise ValueError(f"a node's op id is not among the executor's {len(self.ops)} ops")
        arity = graph.node_arity.astype(np.int64)
        if np.any(arity != self._arity[node_op]):
            raise ValueError("a node's number of arguments differs from its op's")
        out_vals = np.flatnonzero(vnode >= 0)
        on, slot = vnode[out_vals], vindex[out_vals]
        o_of = node_op[on]
        n_out = self._n_outputs[o_of]
        if np.any((slot < 0) | (slot >= n_out)) or np.any(
                self._out_type_table[o_of, np.minimum(slot, n_out - 1)] != vtype[out_vals]) \
                or len(out_vals) != int(self._n_outputs[node_op].sum()) or (len(on) and np.bincount(
                    on * self._max_outputs + slot).max() > 1):
            raise ValueError("the graph's node outputs do not match its ops: every output "
                             "of every node must be exactly one value of the graph")
        consumer = np.repeat(np.arange(graph.num_nodes), arity)
        arg_idx = np.arange(len(graph.node_args)) - np.repeat(np.cumsum(arity) - arity, arity)
        if np.any(self._in_type_table[node_op[consumer], arg_idx]
                  != vtype[graph.node_args.astype(np.int64)]):
            raise ValueError("an argument's value type differs from its op's input type")

    def feed(self, graph: OpGraph, schedule: Schedule, read_values: np.ndarray,
             checked: bool = False) -> Feed:
        """Packs a scheduled batch; `read_values` are the value ids to return.

        `checked=True` skips `check(graph)`, for a graph merged from checked graphs
        (the compiler checks each example's graph once, when it is first planned).

        Linear in the batch: every value's buffer row and every argument's place in
        its launch's gather list come from per-launch offsets, in one compiled pass
        (`scheduler.packing.pack_rows`); the rest is per launch and per value type.
        """
        if not checked:
            self.check(graph)
        n_types = len(self.value_types)
        g_op, node_group, n_outer, n_loop = self._launches(schedule)
        lo, hi = n_outer, n_outer + n_loop  # the loop's launches
        const_counts = np.zeros(n_types, np.int64)
        for k, c in enumerate(graph.constants[:n_types]):
            const_counts[k] = len(c)
        packed = pack_rows(graph.node_op, graph.node_arity, graph.node_args, graph.value_type,
                           graph.value_node, graph.value_index, node_group, g_op,
                           const_counts, self.out_count, self.in_count, self._slot_typepos,
                           self.arg_typepos, const_only=self._n_middle)
        if not packed.const_only_ok:
            raise ValueError("a prelude node reads a value that is not a constant")
        type_counts = packed.out_cum[-1]
        branch = self.branch_of[g_op[lo:hi]]
        if np.any(branch < 0):
            bad = self.ops[int(g_op[lo:hi][np.argmax(branch < 0)])]
            raise ValueError(f"op {getattr(bad, 'name', bad)!r} looks up a variable, so it "
                             "never runs inside the loop, but a node of it reads a value "
                             "the loop computes: its inputs must be constants or come from "
                             "ops outside the recursion")
        # Segments (`_segment_names`): the loop's launches (op branch, size, rows per
        # type), per type the rows to read after the loop, the outer and tail launches'
        # argument rows; after the loop, every row of type k below the loop's end that
        # the tail or the results need is gathered once (`post_rows_k`), and the tail
        # and the results index [those rows; the tail's outputs of type k].
        index, lengths, read_type, read_pos = pack_segments(
            packed, lo, hi, branch, self.loop_types, const_counts, graph.node_args,
            graph.value_type, np.asarray(read_values, np.int64), self._outer_arity,
            self._tail_arity, self._tail_in_type, self._tail_type_mask)
        flat = self.flat_constants(graph.constants)
        sizes = const_counts * self.type_size  # flat elements per type
        const_sizes = [sizes[[k for k in range(n_types) if self._type_dtypes[k] == d]]
                       for d in self.dtypes]
        lengths = np.concatenate([lengths, [len(s) for s in const_sizes]])
        layout = np.zeros(len(lengths) + 1, np.int64)
        np.cumsum(lengths, out=layout[1:])
        if layout[-1] >= 2 ** 31 or (const_counts + type_counts).max(initial=0) >= 2 ** 31:
            raise ValueError("the batch is too large for int32 indices")
        arrays = {"index": np.concatenate([index] + const_sizes).astype(np.int32),
                  "layout": layout.astype(np.int32), **flat}
        return Feed(arrays, read_type, read_pos)

    def flat_constants(self, constants: list) -> dict:
        """`{"consts_<dtype>": the constant rows of every type of that dtype, flat, type
        after type}`, as `compute` takes them; `constants[k]` holds type k's rows."""
        flat: dict[str, list] = {d: [] for d in self.dtypes}
        for k, d in enumerate(self._type_dtypes):
            c = constants[k] if k < len(constants) else np.zeros(0, d)
            if len(c):
                flat[d].append(np.asarray(c, dtype=d).reshape(-1))
        return {f"consts_{d}": (pieces[0] if len(pieces) == 1 else np.concatenate(pieces))
                if pieces else np.zeros(0, d) for d, pieces in flat.items()}

    @property
    def _max_outputs(self) -> int:
        return max([len(t) for t in self.op_out] + [1])

    # --- the TensorFlow program -------------------------------------------------------

    def compute(self, arrays: dict) -> list:
        """Runs a fed batch; returns, per value type, the rows asked for `[R_k, *shape]`.

        Call it inside a `tf.function` (or under a `GradientTape` there): it builds
        graph code. `arrays` holds tensors for the keys of `input_signature()`.
        """
        import tensorflow as tf

        from scheduler.inplace import final_read, write_read
        index, layout = arrays["index"], arrays["layout"]
        # All segments with one SplitV: slicing each out of `index` cost ~200 small
        # ops (bounds, packs, slices) per step, ~0.3 ms at batch 64.
        parts = tf.split(index, layout[1:] - layout[:-1], num=len(self._segments))
        sid = self._segment_id

        def seg(name):
            return parts[sid[name]]

        types = self.value_types
        n_types = len(types)
        tf_dtypes = [tf.as_dtype(_dtype_name(t)) for t in types]
        shapes = [tuple(t.shape) for t in types]
        consts: list = [None] * n_types
        for d in self.dtypes:
            ks = [k for k in range(n_types) if self._type_dtypes[k] == d]
            for k, flat in zip(ks, tf.split(arrays[f"consts_{d}"], seg(f"const_sizes_{d}"),
                                            num=len(ks))):
                consts[k] = tf.reshape(flat, (-1, *shapes[k]))

        # Before the loop: the outer launches, each gathering its arguments from the rows
        # of its types produced so far (constants, then earlier outer launches' outputs).
        made = [[consts[k]] for k in range(n_types)]
        self._run_outside_loop("outer", self.outer_ops, made, seg)
        n_rows = seg("n_rows")
        bufs = []
        for k in range(n_types):
            if k not in self.loop_types:
                bufs.append(_joined(made[k]))
                continue
            have = tf.add_n([tf.shape(p)[0] for p in made[k]])
            pad_shape = tf.concat([[n_rows[k] - have],
                                   tf.constant(shapes[k], tf.int32, shape=[len(shapes[k])])], 0)
            bufs.append(tf.concat(made[k] + [tf.zeros(pad_shape, tf_dtypes[k])], 0))

        group_op, group_size = seg("group_op"), seg("group_size")
        in_splits = {k: seg(f"in_splits_{k}") for k in self.loop_types}
        in_rows = {k: seg(f"in_rows_{k}") for k in self.loop_types}
        out_bounds = {k: seg(f"out_bounds_{k}") for k in self.loop_types}
        empty = [tf.zeros((0, *shapes[k]), tf_dtypes[k]) for k in range(n_types)]

        loop_types = self.loop_types
        slot = {k: i for i, k in enumerate(loop_types)}  # loop type -> position in xs/ys
        # With one loop op, each iteration gathers every argument and writes every
        # output of a loop type as its own row list (n_in[k], n_out[k] of them); with
        # several, all rows of a type as one list, cut apart inside the op's branch.
        only = self.loop_ops[0] if len(self.loop_ops) == 1 and self.row_lists else None
        n_in = {k: 1 if only is None else self.op_in[only].count(k) for k in loop_types}
        n_out = {k: 1 if only is None else self.op_out[only].count(k) for k in loop_types}

        def branch(o, xs, n):
            def run():
                if only is not None:  # xs[slot[k]]: one tensor per argument of type k
                    args = [xs[slot[k]][int(self.arg_typepos[o, a])]
                            for a, k in enumerate(self.op_in[o])]
                else:
                    # Arguments of one value type arrive stacked, argument after
                    # argument (n rows each): one Split separates them.
                    parts = {k: tf.split(xs[slot[k]][0], self.op_in[o].count(k), axis=0)
                             for k in set(self.op_in[o]) if self.op_in[o].count(k) > 1}
                    args = [parts[k][int(self.arg_typepos[o, a])] if k in parts
                            else xs[slot[k]][0] for a, k in enumerate(self.op_in[o])]
                outs = self._call(o, self.ops[o], args, n)
                ys = []
                for k in loop_types:
                    mine = [outs[s] for s, kk in enumerate(self.op_out[o]) if kk == k]
                    if only is None:  # one stacked tensor per type
                        mine = [mine[0] if len(mine) == 1 else
                                tf.concat(mine, 0) if mine else empty[k]]
                    ys.append(mine)
                return ys
            return run

        # Every per-launch scalar the loop needs, as one table [launches, fields] built
        # before the loop: each iteration reads its row with one gather and slices it
        # at constant positions, instead of indexing a dozen vectors at `g` and `g + 1`
        # (each such read costs several ops, and their gradients, per iteration).
        cols = [group_op, group_size]
        for k in loop_types:
            s = in_splits[k]
            cols += [s[:-1], s[1:] - s[:-1], out_bounds[k][:-2], out_bounds[k][1:-1]]
        table = tf.stack(cols, axis=1)

        def body(g, bufs, ys):
            row = tf.gather(table, g)
            new_bufs, xs = [], []
            for i, k in enumerate(loop_types):
                f = 2 + 4 * i
                rows = tf.slice(in_rows[k], row[f:f + 1], row[f + 1:f + 2])
                written = tf.range(row[f + 2], row[f + 3])
                b, x = write_read(bufs[i], ys[i], _parts(written, n_out[k]),
                                  _parts(rows, n_in[k]))
                new_bufs.append(b)
                xs.append(x)
            n = row[1]
            branches = [branch(o, xs, n) for o in self.loop_ops]
            ys = tf.switch_case(row[0], branches) if len(branches) > 1 else branches[0]()
            ys = [[tf.ensure_shape(y, (None, *shapes[k])) for y in ys_k]
                  for k, ys_k in zip(loop_types, ys)]
            return g + 1, new_bufs, ys

        n_launches = tf.size(group_op)
        g0 = tf.constant(0, tf.int32)
        carried = [bufs[k] for k in loop_types]
        ys = [[empty[k]] * n_out[k] for k in loop_types]
        g_end = g0
        if self.loop_ops:
            invariants = [[tf.TensorShape((None, *shapes[k]))] * n_out[k] for k in loop_types]
            g_end, carried, ys = tf.while_loop(
                lambda g, *_: g < n_launches, body, (g0, carried, ys),
                shape_invariants=(g0.shape, [tf.TensorShape((None, *shapes[k]))
                                             for k in loop_types], invariants))
        # After the loop: gather the rows the tail and the results need, run the tail.
        post = []
        for k in range(n_types):
            rows = seg(f"post_rows_{k}")
            if k in slot:
                written = tf.range(out_bounds[k][g_end], out_bounds[k][g_end + 1])
                post.append(final_read(carried[slot[k]], ys[slot[k]],
                                       _parts(written, n_out[k]), rows))
            else:  # never touched by the loop: a plain read
                post.append(tf.gather(bufs[k], rows))
        if not self.tail_ops:
            return post
        made = [[p] for p in post]
        self._run_outside_loop("tail", self.tail_ops, made, seg)
        return [tf.gather(_joined(made[k]), seg(f"read_rows_{k}")) for k in range(n_types)]

    def _run_outside_loop(self, stage: str, ops: list, made: list, seg) -> None:
        """Runs the launches of `stage` ("outer" or "tail"), one per op of `ops`, in
        order: each gathers its arguments from the rows of type k made so far,
        `made[k]` (a list of row blocks), and appends its outputs there."""
        import tensorflow as tf
        for i, o in enumerate(ops):
            args = [tf.gather(_joined(made[k]), seg(f"{stage}_args_{i}_{a}"))
                    for a, k in enumerate(self.op_in[o])]
            outs = self._call_unless_empty(o, args, seg(f"{stage}_count_{i}")[0])
            for s, k in enumerate(self.op_out[o]):
                made[k].append(outs[s])

    def _call_unless_empty(self, o: int, args: list, n) -> list:
        """Runs op o on `n` rows outside the loop; skipped when `n` is 0, because some
        layers (Keras RNN cells, for one) fail on zero rows."""
        import tensorflow as tf
        types = [self.value_types[k] for k in self.op_out[o]]
        return tf.cond(n > 0, lambda: self._call(o, self.ops[o], args, n),
                       lambda: [tf.zeros((0, *t.shape), _dtype_name(t)) for t in types])

    def _call(self, o: int, op: Any, args: list, n) -> list:
        import tensorflow as tf
        outs = op.fn(*args) if args else op.fn(n)
        if not isinstance(outs, (list, tuple)):
            outs = [outs]
        if len(outs) != len(self.op_out[o]):
            raise ValueError(f"op {getattr(op, 'name', o)!r} returned {len(outs)} outputs, "
                             f"expected {len(self.op_out[o])}")
        result = []
        for s, y in enumerate(outs):
            k = self.op_out[o][s]
            t = self.value_types[k]
            y = tf.convert_to_tensor(y)
            if y.dtype != tf.as_dtype(_dtype_name(t)) or (
                    y.shape.rank is not None and tuple(y.shape[1:]) != tuple(t.shape)):
                raise ValueError(f"op {getattr(op, 'name', o)!r} output {s}: expected "
                                 f"{t} per row, got shape {y.shape[1:]} dtype {y.dtype.name}")
            result.append(tf.ensure_shape(y, (None, *t.shape)))
        return result
