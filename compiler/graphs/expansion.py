"""Expanding inputs into op graphs: the context blocks evaluate in for batching.

`ExpansionContext` is the third evaluation context (see `blocks.evaluation.contexts`): a
handle is an int, the id of a value in the example's op graph. A constant
appends a row to its type's constant table; an op call appends a node. The result
is an `ExampleGraph`: the arrays of one example's `OpGraph`, the result's
structure (handles where tensors will be) and the metrics it emitted. Example
graphs are cached and concatenated into batches (`scheduler.OpGraph.concatenate`).
Inputs that are not cached (streams, worker processes, a model without cache) are
expanded a batch at a time into one context instead (`expand_batch`, a
`BatchGraph`): the same graph, with no per-example graph to make and concatenate.

>>> import tensorflow as tf
>>> import refold as td
>>> from refold.compiler.graphs.lowering import lower
>>> block = td.Map(td.Scalar() >> td.Function(tf.negative))
>>> program = lower(block)
>>> graph = expand(program, [1.0, 2.0])
>>> graph.graph.num_nodes, graph.result
(2, [1, 3])
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np

from refold.blocks.errors import BadValueError, InputError
from refold.blocks.evaluation.contexts import call_with_deep_stack, root_input
from refold.blocks.op import NODE_KEY, IdRange
from refold.blocks.types import TensorType
from refold.kernel_calls import KERNEL, vectorised
from refold.scheduler.graph import OpGraph
from refold.scheduler.planner import plan_record


@dataclass
class ExampleGraph:
    """One input, expanded.

    Attributes:
        graph: its op graph.
        result: the root's output with value ids where tensors are.
        metrics: `(metric id, value id, label)` triples, in emission order.
        key_rows: int64, the rows of its random nodes' keys (`blocks.noise`) in the
            key type's constant table, whose example column is its index in a
            batch (`constants_at`); None if it has none.
    """

    graph: OpGraph
    result: Any
    metrics: list
    key_rows: np.ndarray | None = None

    def constants_at(self, position: int, key_type: int | None) -> list:
        """The graph's constant tables with its random nodes' keys naming it the
        example at `position` of a batch (copies: the cached graph is unchanged)."""
        tables = self.graph.constants
        if self.key_rows is None or key_type is None or position == 0:
            return tables  # expanded as example 0
        tables = list(tables)
        keys = tables[key_type] = tables[key_type].copy()
        keys[self.key_rows, 0] = position
        return tables

    def result_values(self, out_type) -> np.ndarray:
        """int64: the value ids of the result's tensors, in `out_type`'s order
        (computed once: example graphs are cached and merged every epoch)."""
        cached = self.__dict__.get("_result_values")
        if cached is None:
            found: list[int] = []

            def collect(t, v):
                if isinstance(t, TensorType):
                    found.append(v)
                return v
            out_type.for_each_terminal(collect, self.result)
            cached = self._result_values = np.asarray(found, np.int64)
        return cached

    def plan_record(self, out_type) -> np.ndarray:
        """int32: this example for `scheduler.planner` (its graph's record, then the
        value ids of its results and metrics). The compiler keeps it once made."""
        m_ids, m_values = self.metric_arrays()
        return plan_record(self.graph, self.result_values(out_type), m_ids, m_values)

    def metric_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """int64 `(metric ids, value ids)` of the emitted metrics (computed once)."""
        cached = self.__dict__.get("_metric_arrays")
        if cached is None:
            n = len(self.metrics)
            cached = self._metric_arrays = (
                np.fromiter((m for m, _, _ in self.metrics), np.int64, n),
                np.fromiter((v for _, v, _ in self.metrics), np.int64, n))
        return cached


class ExpansionContext:
    """Records constants and op calls as an op graph (handles are value ids).

    Per value it records only its depth (what the next node's depth needs): a node's
    outputs are numbered from its op when the graph is made (`value_fields`), and a
    constant keeps its value id and its place in its type's table. That is one
    append per node output instead of four, the largest cost of recording a node.

    Ops' input checks (`Op.check`, say an embedding's ids) run per node when `strict`;
    otherwise the caller runs them on the finished graph, on all nodes of an op at
    once (`checks_pass`), and expands again strictly if one fails, so that the
    error names the block and the example's place as a per-node check does."""

    def __init__(self, program, strict: bool = True):
        self.strict = strict
        self._op_signatures = program.op_signatures
        self._type_id = program.type_id
        self._metric_id = program.metric_id
        self._n_types = n_types = len(program.value_types)
        self._dtypes = [t.numpy_dtype for t in program.value_types]
        self.node_op: list[int] = []
        self.node_arity: list[int] = []
        self.node_args: list[int] = []
        self.sdepth: list[int] = []
        self.value_depth: list[int] = []  # producing node's sdepth, -1 for constants
        self.constant_value: list[int] = []  # each constant's value id, ascending
        self.constant_code: list[int] = []  # its row * n_types + its type id
        self.constants: list[list] = [[] for _ in range(n_types)]
        self.metrics: list[tuple] = []
        self._sources: dict[int, list[int]] = {}  # zero-argument ops, called once
        self.recursion_path: set = set()  # cycle detection (see blocks.evaluation.contexts)
        self._last_type, self._last_type_id = None, -1
        # random nodes' keys (blocks.noise): the example's index in the batch, the
        # number of its random nodes so far, and their rows in the key type's table
        self.example = 0
        self.random_nodes = 0
        self.key_rows: list[int] = []

    @property
    def num_values(self) -> int:
        return len(self.value_depth)

    def constant(self, value: np.ndarray, ttype) -> int:
        if ttype is self._last_type:  # a block's constants share its type object
            k = self._last_type_id
        else:
            k = self._last_type_id = self._type_id[ttype]
            self._last_type = ttype
        vd = self.value_depth
        v = len(vd)
        vd.append(-1)
        table = self.constants[k]
        self.constant_value.append(v)
        self.constant_code.append(len(table) * self._n_types + k)
        table.append(value)
        return v

    # A Python number of a scalar type is kept as it is: its table converts it with
    # the others (`graph`), not one `np.asarray` per leaf.
    number = constant

    def op(self, op, args: list) -> list[int]:
        signature = self._op_signatures.get(op)
        if signature is None:  # imported here: the error path only
            from refold.compiler.graphs.lowering import UnloweredOpError
            raise UnloweredOpError.of(op)
        o, out_types, prelude_only, check, random = signature
        if random:
            args = [*args, self._node_key()]
        vd = self.value_depth
        n_args = len(args)
        if n_args == 1:  # one more than the deepest argument (constants are at -1)
            d = vd[args[0]] + 1
        elif n_args:
            d = max(map(vd.__getitem__, args)) + 1
        else:
            cached = self._sources.get(o)
            if cached is not None:
                return cached
            d = 0
        if d:
            if prelude_only:
                raise op.prelude_error()
        elif check is not None and self.strict:
            check(*[self._constant_row(a) for a in args])
        self.node_op.append(o)
        self.node_arity.append(n_args)
        self.node_args.extend(args)
        self.sdepth.append(d)
        v = len(vd)
        if len(out_types) == 1:
            vd.append(d)
            outs = [v]
        else:
            n = len(out_types)
            vd.extend([d] * n)
            outs = list(range(v, v + n))
        if not n_args:
            self._sources[o] = outs
        return outs

    def _node_key(self) -> int:
        """A constant for the next random node's key, `(example, node)` (the same as
        the reference evaluator's, `blocks.evaluation.contexts.ReferenceContext`)."""
        k = self._type_id[NODE_KEY]
        self.key_rows.append(len(self.constants[k]))
        v = self.constant(np.array([self.example, self.random_nodes], np.int32), NODE_KEY)
        self.random_nodes += 1
        return v

    def start_example(self, example: int = 0) -> tuple:
        """Starts the next input of a batch, the one at index `example`, whose
        argument-less ops get nodes of its own (as in its own graph, not one per
        batch) and whose random nodes are numbered from 0; its `mark`, to rewind it."""
        self._sources = {}
        self.example, self.random_nodes = example, 0
        return self.mark()

    def mark(self) -> tuple:
        """Where the graph ends now, for `rewind` (a block building steps ahead)."""
        return (len(self.node_op), len(self.node_args), len(self.value_depth),
                len(self.constant_value), [len(t) for t in self.constants],
                len(self.metrics), set(self._sources), self.random_nodes, len(self.key_rows))

    def rewind(self, mark: tuple) -> None:
        """Drops every node, value, constant and metric added since `mark`."""
        (nodes, args, values, n_constants, rows, metrics, sources, self.random_nodes,
         keys) = mark
        del self.key_rows[keys:]
        for a in (self.node_op, self.node_arity, self.sdepth):
            del a[nodes:]
        del self.node_args[args:]
        del self.value_depth[values:]
        del self.constant_value[n_constants:]
        del self.constant_code[n_constants:]
        for table, n in zip(self.constants, rows):
            del table[n:]
        del self.metrics[metrics:]
        for o in set(self._sources) - sources:
            del self._sources[o]

    def key_array(self) -> np.ndarray | None:
        """The random nodes' key rows (`ExampleGraph.key_rows`), None if none."""
        return np.asarray(self.key_rows, np.int64) if self.key_rows else None

    def read(self, value_type, value):
        from refold.blocks.errors import InternalError
        raise InternalError("this block reads computed values (Unfold), so its inputs "
                            "expand in rounds (compiler.rounds.context.expand_in_rounds)")

    def constant_at(self, v: int) -> tuple[int, int]:
        """`(type id, row)` of constant value `v` in its type's table."""
        code = self.constant_code[bisect.bisect_left(self.constant_value, v)]
        return code % self._n_types, code // self._n_types

    def _constant_row(self, v: int) -> np.ndarray:
        k, row = self.constant_at(v)
        return np.asarray(self.constants[k][row], self._dtypes[k])[None]

    def metric(self, name: str, value: int, label: Any = None) -> None:
        self.metrics.append((self._metric_id[name], value, label))

    def value_fields(self, program, values: int = 0,
                     nodes: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """int32 `(value_type, value_node, value_index)` of the values from value id
        `values` on, whose node outputs are those of the nodes from `nodes` on (a
        `mark` of the two taken together). Node ids are the graph's."""
        first = bisect.bisect_left(self.constant_value, values)
        n_out, out_type = program.op_outputs
        fields, ok = KERNEL[_number_values](
            np.asarray(self.node_op[nodes:], np.int64), n_out, out_type,
            np.asarray(self.constant_value[first:], np.int64) - values,
            np.asarray(self.constant_code[first:], np.int64), self._n_types,
            len(self.value_depth) - values, nodes)
        if not ok:
            from refold.blocks.errors import InternalError
            raise InternalError("the recorded values do not match the nodes' outputs")
        return fields[0], fields[1], fields[2]

    def graph(self, program) -> OpGraph:
        """The recorded graph. Its integer arrays are views of one int32 array, which
        is also the graph's `merge_record` (what batching concatenates)."""
        return self._record(program, [])[0]

    def _record(self, program, tail: list) -> tuple[OpGraph, np.ndarray]:
        """`(graph, record)`: the graph (see `graph`) and its `merge_record` followed
        by the ints of `tail` (a planner's read record), in one array."""
        constants = []
        for k, t in enumerate(program.value_types):
            rows = self.constants[k]
            constants.append(np.asarray(rows, dtype=t.numpy_dtype).reshape((len(rows), *t.shape)))
        n, a, v = len(self.node_op), len(self.node_args), len(self.value_depth)
        header = [n, a, v, *map(len, self.constants)]
        head = np.array(header + self.node_op + self.node_arity + self.sdepth
                        + self.node_args, np.int32)
        record = np.concatenate([head, *self.value_fields(program), np.array(tail, np.int32)])
        ends = list(itertools.accumulate((len(header), n, n, n, a, v, v, v)))
        node_op, arity, sdepth, args, vtype, vnode, vindex = (
            record[s:e] for s, e in zip(ends, ends[1:]))
        graph = OpGraph(node_op, arity, args, vtype, vnode, vindex, constants, sdepth)
        # its cached_property, computed (the record itself when nothing follows)
        graph.__dict__["merge_record"] = record[:ends[-1]] if tail else record
        return graph, record


@numba.njit(cache=True, nogil=True)
def _number_values(node_op, n_out, out_type, constant_value, constant_code, n_types,
                   n_values, first_node):
    """`ExpansionContext.value_fields`: values in order are constants (at
    `constant_value`, relative) or the next output of the next node with outputs
    left. Returns the three fields as one int32 [3, V] array, and False if the
    values and the nodes' outputs do not add up."""
    fields = np.empty((3, n_values), np.int32)
    j, slot, c = 0, 0, 0
    for v in range(n_values):
        if c < len(constant_value) and constant_value[c] == v:
            code = constant_code[c]
            fields[0, v] = code % n_types
            fields[1, v] = -1
            fields[2, v] = code // n_types
            c += 1
            continue
        while j < len(node_op) and slot == n_out[node_op[j]]:
            j += 1
            slot = 0
        if j == len(node_op):
            return fields, False
        fields[0, v] = out_type[node_op[j], slot]
        fields[1, v] = first_node + j
        fields[2, v] = slot
        slot += 1
    while j < len(node_op) and slot == n_out[node_op[j]]:
        j += 1
        slot = 0
    return fields, j == len(node_op) and c == len(constant_value)


@vectorised(_number_values)
def _number_values_numpy(node_op, n_out, out_type, constant_value, constant_code, n_types,
                         n_values, first_node):
    """`_number_values` in NumPy where the values and outputs add up (the common
    case); the kernel's own code, line by line, where they do not."""
    constants = np.asarray(constant_value, np.int64)
    outs = np.asarray(n_out, np.int64)[node_op]
    computed = n_values - len(constants)
    if int(outs.sum()) != computed or len(constants) and (
            constants[0] < 0 or constants[-1] >= n_values or np.any(np.diff(constants) <= 0)):
        return _number_values.py_func(node_op, n_out, out_type, constant_value, constant_code,
                                      n_types, n_values, first_node)
    fields = np.empty((3, n_values), np.int32)
    codes = np.asarray(constant_code, np.int64)[:len(constants)]
    fields[0, constants] = codes % n_types
    fields[1, constants] = -1
    fields[2, constants] = codes // n_types
    is_constant = np.zeros(n_values, bool)
    is_constant[constants] = True
    at = np.flatnonzero(~is_constant)
    node = np.repeat(np.arange(len(node_op)), outs)
    slot = np.arange(computed) - np.repeat(np.cumsum(outs) - outs, outs)
    fields[0, at] = out_type[node_op[node], slot]
    fields[1, at] = first_node + node
    fields[2, at] = slot
    return fields, True


def expand(program, x: Any) -> ExampleGraph:
    """Expands input `x` of `program.root` into its `ExampleGraph`.

    Raises `InputError` naming the block path when the input does not fit.
    """
    return call_with_deep_stack(_expand_here, program, x)


def expand_all(program, inputs: list, start: int = 0) -> list[ExampleGraph]:
    """Expands each input; an error names the input's index (offset by `start`)."""
    def run():
        out = []
        for i, x in enumerate(inputs):
            try:
                out.append(_expand_here(program, x))
            except InputError as e:
                raise e.locate_in(x).with_example_index(start + i) from e.__cause__
        return out
    return call_with_deep_stack(run)


def _expand_here(program, x: Any, strict: bool = False) -> ExampleGraph:
    ctx = ExpansionContext(program, strict)
    root = program.root

    result = root.eval_in(ctx, root_input(root, ctx, x))
    graph = ctx.graph(program)
    if not strict and not checks_pass(program, graph):  # again, to say where it fails
        return _expand_here(program, x, strict=True)
    return ExampleGraph(graph, result, ctx.metrics, ctx.key_array())


def checks_pass(program, graph: OpGraph) -> bool:
    """Whether every node of `graph` whose op has an input check (`Op.check`) and
    whose arguments are all constants passes it: one check per op, on the rows of
    all its nodes (checks are vectorised), instead of one call per node. An id
    range (`IdRange`, an embedding's) is checked in compiled code, with no array
    made per op."""
    for o, check in program.input_checks:
        if isinstance(check, IdRange):
            table = graph.constants[program.type_id[program.ops[o].input_types[0]]]
            if not KERNEL[_ids_in_range](graph.node_op, graph.sdepth, graph.node_arity,
                                 graph.node_args, graph.value_index, table.reshape(-1), o,
                                 check.num_rows):
                return False
            continue
        nodes = np.flatnonzero((graph.node_op == o) & (graph.sdepth == 0))
        if not len(nodes):
            continue
        starts = np.cumsum(graph.node_arity, dtype=np.int64) - graph.node_arity
        rows = []
        for i in range(int(graph.node_arity[nodes[0]])):
            args = graph.node_args[starts[nodes] + i]
            k = int(graph.value_type[args[0]])  # an op's i-th input has one type
            rows.append(graph.constants[k][graph.value_index[args]])
        try:
            check(*rows)
        except BadValueError:
            return False
    return True


@numba.njit(cache=True, nogil=True)
def _ids_in_range(node_op, sdepth, node_arity, node_args, value_index, ids, op, num_rows):
    """Whether the first argument of every depth-0 node of `op`, a row of `ids`,
    is in `[0, num_rows)`."""
    p = 0
    for j in range(len(node_op)):
        if node_op[j] == op and sdepth[j] == 0:
            x = ids[value_index[node_args[p]]]
            if x < 0 or x >= num_rows:
                return False
        p += node_arity[j]
    return True


@dataclass
class BatchGraph:
    """A batch of inputs expanded together, into one op graph (`expand_batch`).

    Inputs that are not cached (a stream's, a worker process's, a model's without
    cache) are expanded once and never reused, so nothing needs an example's graph
    of its own: one context records the whole batch, and the planner gets one
    record instead of one per example to concatenate. The graph is the one
    `OpGraph.concatenate` makes of the examples' graphs, node for node.

    Attributes:
        graph: the examples' graphs side by side (value ids of the whole batch).
        record: the batch's `plan_record` for grouped reads: every example's
            results in input order, then every metric value in emission order.
        kept: the indices (into the inputs) of the examples in the graph.
        skipped: `(index, InputError)` of the inputs left out (`skip=True`).
    """

    graph: OpGraph
    record: np.ndarray
    kept: list
    skipped: list

    def __len__(self) -> int:
        """The number of examples in the batch."""
        return len(self.kept)


def expand_batch(program, inputs: list, skip: bool = False) -> BatchGraph:
    """Expands the inputs into one `BatchGraph`.

    A bad input raises `InputError` naming its index in `inputs` and the block
    path; with `skip`, it is left out instead (what it added to the graph is
    rewound) and listed in `skipped` with its error, and the others go on.
    """
    return call_with_deep_stack(_expand_batch_here, program, list(inputs), skip)


def _expand_batch_here(program, inputs: list, skip: bool, strict: bool = False) -> BatchGraph:
    ctx = ExpansionContext(program, strict)
    root = program.root
    out_type = root.output_type
    one_tensor = isinstance(out_type, TensorType)  # the result is its value id
    results: list[int] = []
    kept, skipped = [], []
    for i, x in enumerate(inputs):
        mark = ctx.start_example(len(kept))  # its index in the batch: the keys' example
        try:
            result = root.eval_in(ctx, root_input(root, ctx, x))
        except InputError as e:
            e.locate_in(x)
            if not skip:
                raise e.with_example_index(i) from e.__cause__
            ctx.rewind(mark)
            skipped.append((i, e.with_example_index(i)))
            continue
        kept.append(i)
        if one_tensor:
            results.append(result)
        else:
            out_type.for_each_terminal(
                lambda t, v: results.append(v) if isinstance(t, TensorType) else None, result)
    metrics = ctx.metrics
    reads = [len(results), len(metrics), *results, *(m for m, _, _ in metrics),
             *(v for _, v, _ in metrics)]
    graph, record = ctx._record(program, reads)
    if not strict and not checks_pass(program, graph):  # again, to say which fails
        return _expand_batch_here(program, inputs, skip, strict=True)
    return BatchGraph(graph, record, kept, skipped)
