"""The layout: what the ops' types and dataflow fix about every batch they will run.

`Layout.build(ops, value_types, feeds)` reads each op's signature (its `input_types`,
`output_types`, `prelude_only` flag and `name`), and optionally which op can feed
which (`compiler.graphs.op_feeds`: finer than the types), once and derives the integer
tables that planning (`scheduler.planner`) and the traced program
(`scheduler.executor`) share: value type ids per op slot, the *stages* (head ops
run before the loop, tail ops after it, the middle in it), the static launches
outside the loop, the loop's ops and value types, and the names of the packed
index segments. It is frozen and holds no TensorFlow object, so the planner can
read it in a worker process and the executor can trace from it.

>>> from collections import namedtuple
>>> from types import SimpleNamespace as Op
>>> T = namedtuple("ValueType", "shape dtype")
>>> word, state = T((), "int32"), T((4,), "float32")
>>> embed = Op(name="embed", input_types=[word], output_types=[state])
>>> cell = Op(name="cell", input_types=[state, state], output_types=[state])
>>> layout = Layout.build([embed, cell], [word, state])
>>> layout.head_ops, layout.loop_ops, layout.tail_ops
((0,), (1,), ())
>>> layout.arg_typepos[1].tolist()  # cell's 2nd argument is its 2nd of type `state`
[0, 1]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from refold.scheduler.errors import EngineError


def dtype_name(value_type) -> str:
    """The numpy dtype name of a value type (`float32` when it has none)."""
    return str(getattr(value_type, "dtype", "float32"))


# Why a batch cannot be planned: error codes of the compiled planner, and the
# messages both planning paths raise.
OK, NOT_CONSTANT, LOOKUP_IN_LOOP, TOO_LARGE, OUT_OF_ORDER = 0, 1, 2, 3, 4


@dataclass(frozen=True, eq=False)
class Layout:
    """The static tables of one set of ops (see the module docstring).

    Per op o (arrays have at least one row, so an op-less layout still indexes):
    `op_in[o]`, `op_out[o]`: value type ids of its inputs and outputs;
    `arity`, `n_outputs`; `in_count[o, k]` / `out_count[o, k]`: its inputs /
    outputs of type k; `in_type_table[o, a]` / `out_type_table[o, s]`: the type
    of input a / output s (-1 past the end); `arg_typepos[o, a]`: how many earlier
    inputs have input a's type; `slot_typepos[o, s]`: likewise for outputs.

    Stages: `head_ops` and `tail_ops` (producers first), `middle_ops`;
    `outer_ops` (middle then head: the launches before the loop); `stage[o]`
    (0 head, 1 middle, 2 tail); `outer_pos[o]`, `tail_pos[o]`: its launch among
    the outer or tail ones; `loop_ops` (the middle ops that can run after step 0,
    one loop branch each), `branch_of[o]` (-1: not in the loop), `loop_types`.
    `outer_arity`, `tail_arity`, `tail_in_type`, `tail_type_mask`: for packing
    the launches outside the loop.

    Value types: `value_types`, `dtypes` (sorted dtype names), `type_dtype` (each
    type's dtype name), `type_dtype_id` (its index in `dtypes`), `type_size`
    (elements per row). `segments`: the packed index's segment names, in order;
    `segment_id`: name -> position. The segments hold: the loop's launches (op
    branch, size; per loop type the gather rows and written-row bounds), each
    type's row count, per type the rows to read after the loop (`post_rows_k`:
    every row below the loop's end that the tail or the results need, gathered
    once) and the results' rows in `[those rows; the tail's outputs]`
    (`read_rows_k`), the outer and tail launches' sizes and argument rows, and
    last, per dtype, the flat size of each type's constants.
    """

    op_names: tuple
    value_types: tuple
    op_in: tuple
    op_out: tuple
    prelude_only: tuple
    arity: np.ndarray
    n_outputs: np.ndarray
    in_count: np.ndarray
    out_count: np.ndarray
    in_type_table: np.ndarray
    out_type_table: np.ndarray
    arg_typepos: np.ndarray
    slot_typepos: np.ndarray
    head_ops: tuple
    tail_ops: tuple
    middle_ops: tuple
    outer_ops: tuple
    loop_ops: tuple
    loop_types: tuple
    stage: np.ndarray
    outer_pos: np.ndarray
    tail_pos: np.ndarray
    branch_of: np.ndarray
    outer_arity: np.ndarray
    tail_arity: np.ndarray
    tail_in_type: np.ndarray
    tail_type_mask: np.ndarray
    dtypes: tuple
    type_dtype: tuple
    type_dtype_id: np.ndarray
    type_size: np.ndarray
    segments: tuple
    segment_id: dict

    @classmethod
    def build(cls, ops: Sequence[Any], value_types: Sequence[Any],
              feeds: np.ndarray | None = None) -> Layout:
        """The layout of `ops` over `value_types` (each with `shape` and `dtype`);
        every input and output type of an op must be among `value_types`.

        `feeds`, optional bool `[ops, ops]`: `[a, b]` False when no output of op a
        is ever an input of op b (the block expression's dataflow,
        `compiler.graphs.op_feeds`); by default every op whose output type is an input
        type of b may feed it."""
        value_types = tuple(value_types)
        index = {t: k for k, t in enumerate(value_types)}
        try:
            op_in = tuple(tuple(index[t] for t in op.input_types) for op in ops)
            op_out = tuple(tuple(index[t] for t in op.output_types) for op in ops)
        except KeyError as e:
            raise ValueError(f"an op uses value type {e} that is not among value_types") \
                from None
        prelude_only = tuple(bool(getattr(op, "prelude_only", False)) for op in ops)
        fields = dict(op_names=tuple(str(getattr(op, "name", o)) for o, op in enumerate(ops)),
                      value_types=value_types, op_in=op_in, op_out=op_out,
                      prelude_only=prelude_only)
        fields.update(_slot_tables(op_in, op_out, len(value_types)))
        fields.update(_stage_tables(op_in, op_out, prelude_only, len(value_types), feeds))
        dtypes = tuple(sorted({dtype_name(t) for t in value_types}))
        type_dtype = tuple(dtype_name(t) for t in value_types)
        fields.update(
            dtypes=dtypes, type_dtype=type_dtype,
            type_dtype_id=np.array([dtypes.index(d) for d in type_dtype], np.int64),
            type_size=np.array([int(np.prod(t.shape, dtype=np.int64)) for t in value_types],
                               np.int64))
        segments = _segment_names(fields["loop_types"], len(value_types), fields["outer_ops"],
                                  fields["tail_ops"], op_in, dtypes)
        fields.update(segments=segments, segment_id={s: i for i, s in enumerate(segments)})
        for value in fields.values():
            if isinstance(value, np.ndarray):
                value.flags.writeable = False
        return cls(**fields)

    @property
    def n_ops(self) -> int:
        return len(self.op_in)

    @property
    def n_types(self) -> int:
        return len(self.value_types)

    @property
    def n_middle(self) -> int:
        return len(self.middle_ops)

    @property
    def max_outputs(self) -> int:
        return self.out_type_table.shape[1]

    def planning_error(self, code: int, op: int = -1) -> Exception:
        """The error for a batch the executor cannot run (`code` as the planner
        reports it; `op`: the op concerned, where there is one)."""
        if code == NOT_CONSTANT:
            return ValueError("a prelude node reads a value that is not a constant")
        if code == LOOKUP_IN_LOOP:
            return ValueError(
                f"op {self.op_names[op]!r} looks up a variable, so it never runs inside the "
                "loop, but a node of it reads a value the loop computes: its inputs must be "
                "constants or come from ops outside the recursion")
        if code == TOO_LARGE:
            return ValueError("the batch is too large for int32 indices")
        if code == OUT_OF_ORDER:
            return EngineError(
                f"a node of op {self.op_names[op]!r} reads a value computed after it: the "
                "layout's stages say an op cannot feed it that does (an op feeds another "
                "that its `feeds` matrix, from compiler.graphs.op_feeds, says it never feeds)")
        raise AssertionError(f"unknown planning error code {code}")


def _slot_tables(op_in: tuple, op_out: tuple, n_types: int) -> dict:
    """The per-op tables of argument and output slots (see `Layout`)."""
    rows = max(len(op_in), 1)
    width = max([len(t) for t in op_in] + [1])
    out_width = max([len(t) for t in op_out] + [1])
    t = dict(arity=np.zeros(rows, np.int64), n_outputs=np.zeros(rows, np.int64),
             in_count=np.zeros((rows, n_types), np.int64),
             out_count=np.zeros((rows, n_types), np.int64),
             in_type_table=np.full((rows, width), -1, np.int64),
             out_type_table=np.full((rows, out_width), -1, np.int64),
             arg_typepos=np.zeros((rows, width), np.int64),
             slot_typepos=np.zeros((rows, out_width), np.int64))
    for o, (ins, outs) in enumerate(zip(op_in, op_out)):
        t["arity"][o], t["n_outputs"][o] = len(ins), len(outs)
        for a, k in enumerate(ins):
            t["in_count"][o, k] += 1
            t["in_type_table"][o, a] = k
            t["arg_typepos"][o, a] = ins[:a].count(k)
        for s, k in enumerate(outs):
            t["out_count"][o, k] += 1
            t["out_type_table"][o, s] = k
            t["slot_typepos"][o, s] = outs[:s].count(k)
    return t


def _stage_tables(op_in: tuple, op_out: tuple, prelude_only: tuple, n_types: int,
                  feeds: np.ndarray | None) -> dict:
    """The stages, the launches outside the loop and the loop's ops (see `Layout`)."""
    n_ops = len(op_in)
    head, tail = _stages(op_in, op_out, feeds)
    middle = tuple(o for o in range(n_ops) if o not in head and o not in tail)
    outer = middle + head
    # Only middle ops get a branch in the loop, and of them only those that can run
    # after step 0: a never-taken branch that gathers from a variable would still
    # cost a dense gradient per iteration (BENCHMARKS.md, "Why the executor looks as it does").
    loop_ops = tuple(o for o in middle if op_in[o] and not prelude_only[o])
    rows = max(n_ops, 1)
    stage = np.ones(rows, np.int64)
    stage[list(head)] = 0
    stage[list(tail)] = 2
    outer_pos, tail_pos = np.zeros(rows, np.int64), np.zeros(rows, np.int64)
    outer_pos[list(outer)] = np.arange(len(outer))
    tail_pos[list(tail)] = np.arange(len(tail))
    branch_of = np.full(rows, -1, np.int64)
    branch_of[list(loop_ops)] = np.arange(len(loop_ops))
    tail_arity = np.array([len(op_in[o]) for o in tail], np.int64)
    tail_in_type = np.full((len(tail), max([1, *tail_arity])), -1, np.int64)
    for j, o in enumerate(tail):
        tail_in_type[j, :len(op_in[o])] = op_in[o]
    tail_type_mask = np.zeros(n_types, bool)
    tail_type_mask[[k for o in tail for k in op_out[o]]] = True
    return dict(
        head_ops=head, tail_ops=tail, middle_ops=middle, outer_ops=outer, loop_ops=loop_ops,
        loop_types=tuple(sorted({k for o in loop_ops for k in op_in[o] + op_out[o]})),
        stage=stage, outer_pos=outer_pos, tail_pos=tail_pos, branch_of=branch_of,
        outer_arity=np.array([len(op_in[o]) for o in outer], np.int64),
        tail_arity=tail_arity, tail_in_type=tail_in_type, tail_type_mask=tail_type_mask)


def _stages(op_in: tuple, op_out: tuple, dataflow: np.ndarray | None) -> tuple[tuple, tuple]:
    """The head and tail ops, each in an order where producers come first.

    Op a *feeds* op b when an output type of a is an input type of b (and
    `dataflow[a, b]`, where given). A *head* op
    is on no cycle of this relation and is fed by head ops only: all its nodes
    can run before the loop. A *tail* op is on no cycle, is not a head op and
    feeds tail ops only: all its nodes can run after the loop. The rest, the
    *middle*, runs in the loop (but for its step-0 nodes, which run before it).
    """
    n = len(op_in)
    feeds = np.array([[bool(set(op_out[a]) & set(op_in[b])) for b in range(n)]
                      for a in range(n)], bool).reshape(n, n)
    if dataflow is not None:
        if np.shape(dataflow) != (n, n):
            raise ValueError(f"feeds must be a [{n}, {n}] bool matrix, got shape "
                             f"{np.shape(dataflow)}")
        feeds &= np.asarray(dataflow, bool)
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
    return tuple(o for o in order if head[o]), tuple(o for o in order if tail[o])


def _segment_names(loop_types, n_types: int, outer_ops, tail_ops, op_in, dtypes) -> tuple:
    """The packed index's segments, in order (`scheduler.packing` writes them)."""
    names = ["group_op", "group_size", "n_rows"]
    for k in loop_types:  # only the loop reads and writes in launches
        names += [f"in_splits_{k}", f"in_rows_{k}", f"out_bounds_{k}"]
    for k in range(n_types):
        names += [f"read_rows_{k}", f"post_rows_{k}"]
    for stage, ops in (("outer", outer_ops), ("tail", tail_ops)):
        for i, o in enumerate(ops):
            names.append(f"{stage}_count_{i}")
            names += [f"{stage}_args_{i}_{a}" for a in range(len(op_in[o]))]
    return tuple(names + [f"const_sizes_{d}" for d in dtypes])  # last: per dtype
