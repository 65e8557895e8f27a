"""The executor: batched values and gradients equal a node-by-node oracle; one trace.

The ops below cover: two arguments of one value type (`mix`), outputs of different value
types (`split`, `dup`, the latter with two outputs of one type), a zero-argument op reading a
variable (`bias`), interleaved argument types (`combine`), int32 values inside the loop
(`inc`, `scale`), scalar values (`sq`, `gate`) and prelude-only ops (`embed`, a variable
lookup; `outer`, whose output type never enters the loop; `look`, a lookup of an int type
the loop computes) and a leaf transform of a lookup (`embed2` then `leaf`, as in a
TreeLSTM). The stages: `bias`, `embed`, `embed2` and `leaf` run before the loop on all their
nodes (head), `outer` after it (tail), every other op in it. A second op set, `ONE_LOOP_OP`,
has one loop op (`cell`: two arguments and two outputs of one type, an argument of a type the
loop never writes, an output of a type it never reads), whose values travel as one row list
each.

The oracle evaluates the graph one node at a time in eager TensorFlow with each op's
unbatched `ref` formula, from the plain-Python record of the graph (`RawGraph`).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from refold.scheduler import SCHEDULERS, OpGraph, Schedule
from refold.scheduler import executor as executor_module
from refold.scheduler.executor import Executor, launches_outside_loop_in_halves, small_launches
from refold.scheduler.planner import Planner
from tests.scheduler.graphs import Choices, OpSpec, RawGraph, build, concat_raw, draw_graph

ATOL = 1e-5
NAMES = sorted(SCHEDULERS)


@dataclass(frozen=True)
class VT:
    """A value type: a shape and a dtype name (the name keeps equal shapes apart)."""

    name: str
    shape: tuple
    dtype: str = "float32"


F, INT, G, TOK, S, P, E = (VT("f", (3,)), VT("i", (), "int32"), VT("g", (2,)),
                           VT("tok", (), "int32"), VT("s", ()), VT("p", (2, 2)), VT("e", (2,)))
TYPES = [F, INT, G, TOK, S, P, E]
FLOAT_IDS = [k for k, t in enumerate(TYPES) if t.dtype == "float32"]

_rng = np.random.default_rng(1234)


def _var(name, *shape, scale=0.5):
    return tf.Variable((_rng.normal(size=shape) * scale).astype("float32"), name=name)


W1, W2, W3, W4 = _var("w1", 3, 3), _var("w2", 3, 3), _var("w3", 2, 2), _var("w4", 2, 3)
WS, WB, EMB = _var("ws", 2), _var("wb", 3), _var("emb", 5, 3, scale=1.0)
VARIABLES = [W1, W2, W3, W4, WS, WB, EMB]


@dataclass(eq=False)
class Op:
    name: str
    input_types: tuple
    output_types: tuple
    fn: Callable  # batched: [n, *shape] tensors in, a list out
    ref: Callable  # one node: [*shape] tensors in, a list out
    prelude_only: bool = False
    handles_empty: bool = False
    side_by_side: bool = False


def _cos(i):
    return tf.cos(tf.cast(i, tf.float32))


OPS = [
    Op("mix", (F, F), (F,),
       lambda a, b: [tf.tanh(a @ W1 + b @ W2)],
       lambda a, b: [tf.tanh(tf.tensordot(a, W1, 1) + tf.tensordot(b, W2, 1))]),
    Op("split", (F,), (G, F),
       lambda a: [a[:, :2] * WS, tf.sin(a)],
       lambda a: [a[:2] * WS, tf.sin(a)]),
    Op("bias", (), (F,),
       lambda n: [tf.tile(WB[None], tf.stack([n, 1]))],
       lambda: [tf.convert_to_tensor(WB)]),
    Op("combine", (G, F, G), (G,),
       lambda g1, f, g2: [tf.tanh(g1 * f[:, :2] + g2 @ W3)],
       lambda g1, f, g2: [tf.tanh(g1 * f[:2] + tf.tensordot(g2, W3, 1))]),
    Op("inc", (INT,), (INT,), lambda i: [i + 1], lambda i: [i + 1]),
    Op("scale", (F, INT), (F,),
       lambda a, i: [a * _cos(i)[:, None]],
       lambda a, i: [a * _cos(i)]),
    Op("embed", (TOK,), (F,),
       lambda t: [tf.gather(EMB, t)], lambda t: [tf.gather(EMB, t)], prelude_only=True),
    Op("sq", (F,), (S,),
       lambda a: [tf.reduce_sum(a * a, -1)], lambda a: [tf.reduce_sum(a * a)]),
    Op("dup", (F,), (F, G, F),
       lambda a: [0.5 * a + 0.1, a[:, 1:] * a[:, :2], -a],
       lambda a: [0.5 * a + 0.1, a[1:] * a[:2], -a]),
    Op("outer", (F,), (P,),
       lambda a: [a[:, :2, None] * a[:, None, 1:]],
       lambda a: [a[:2, None] * a[None, 1:]], prelude_only=True),
    Op("gate", (S, F), (F,),
       lambda s, a: [a * tf.sigmoid(s)[:, None]],
       lambda s, a: [a * tf.sigmoid(s)]),
    Op("embed2", (TOK,), (E,),
       lambda t: [tf.gather(EMB[:, :2], t)], lambda t: [tf.gather(EMB[:, :2], t)],
       prelude_only=True),
    Op("leaf", (E,), (F,),
       lambda e: [tf.tanh(e @ W4)], lambda e: [tf.tanh(tf.tensordot(e, W4, 1))]),
    Op("look", (INT,), (F,),
       lambda i: [tf.gather(EMB, tf.math.floormod(i, 5))],
       lambda i: [tf.gather(EMB, tf.math.floormod(i, 5))], prelude_only=True),
]
OP_ID = {op.name: o for o, op in enumerate(OPS)}
NO_CONSTANTS = [np.zeros((0, *t.shape), t.dtype) for t in TYPES]
SHAPES = [t.shape for t in TYPES]
DTYPES = [t.dtype for t in TYPES]


class OpSet:
    """The ops one executor runs, with their specs for drawing graphs and the traced
    functions (values; values and gradients) of its executor."""

    def __init__(self, ops: list, row_lists: bool = True, batched_weight_grads: bool = False,
                 replay_backward: bool = False, halves: bool = False, small: bool = False):
        self.ops = list(ops)
        self.halves = halves  # traced with the launches outside the loop in halves
        self.small = small  # traced as a step of small launches (rows stacked)
        self.row_lists = row_lists
        self.batched_weight_grads = batched_weight_grads
        self.replay_backward = replay_backward
        self.mode = None  # the GradientMode `with_gradients` passes (None: the executor's)
        self.specs = [OpSpec(tuple(TYPES.index(t) for t in op.input_types),
                             tuple(TYPES.index(t) for t in op.output_types))
                      for op in self.ops]
        self.const_only = [o for o, op in enumerate(self.ops) if op.prelude_only]

    @functools.cached_property
    def executor(self) -> Executor:
        return Executor(self.ops, TYPES, row_lists=self.row_lists,
                        batched_weight_grads=self.batched_weight_grads,
                        replay_backward=self.replay_backward)

    @functools.cached_property
    def planner(self) -> Planner:
        return Planner(self.executor.layout)

    @functools.cached_property
    def forward(self):
        ex = self.executor

        @tf.function(input_signature=[ex.input_signature()], autograph=False)
        def run(arrays):
            with self.scope():
                return ex.compute(arrays)
        return run

    def scope(self):
        scope = contextlib.ExitStack()
        if self.halves:
            scope.enter_context(launches_outside_loop_in_halves())
        if self.small:
            scope.enter_context(small_launches())
        return scope

    @functools.cached_property
    def with_gradients(self):
        ex = self.executor
        weight_specs = [tf.TensorSpec([None, *TYPES[k].shape], tf.float32) for k in FLOAT_IDS]

        @tf.function(input_signature=[ex.input_signature(), weight_specs], autograph=False)
        def run(arrays, weights):
            consts = arrays["consts_float32"]
            with tf.GradientTape() as tape, self.scope():
                tape.watch(consts)
                outs = ex.compute(arrays, self.mode)
                loss = tf.add_n([tf.constant(0.0)] + [tf.reduce_sum(outs[k] * w)
                                                      for k, w in zip(FLOAT_IDS, weights)])
            grads = tape.gradient(loss, VARIABLES + [consts],
                                  unconnected_gradients=tf.UnconnectedGradients.ZERO)
            return outs, [tf.convert_to_tensor(g) for g in grads]
        return run


ALL = OpSet(OPS)  # a loop of several ops (one `switch_case` branch each)
SPECS, CONST_ONLY = ALL.specs, ALL.const_only
# One loop op, `cell`, reading two values of type f and one of type e (from the head), and
# writing two of type f and one of type g: each read and write is a row list of its own.
CELL = Op("cell", (F, E, F), (F, G, F),
          lambda a, e, b: [tf.tanh(a @ W1 + b @ W2 + e @ W4), a[:, :2] * e + WS,
                           0.5 * tf.sin(b) - a],
          lambda a, e, b: [tf.tanh(tf.tensordot(a, W1, 1) + tf.tensordot(b, W2, 1)
                                   + tf.tensordot(e, W4, 1)), a[:2] * e + WS,
                           0.5 * tf.sin(b) - a])
ONE_LOOP_OP = OpSet([OPS[OP_ID[name]] for name in ("bias", "embed2", "leaf", "sq", "outer")]
                    + [CELL])
ONE_LOOP_OP_STACKED = OpSet(ONE_LOOP_OP.ops, row_lists=False)  # rows stacked per value type
# The loop's weight gradients once per step, batched (scheduler.weight_grads)
ONCE_PER_STEP = OpSet(OPS, batched_weight_grads=True)
ONE_LOOP_OP_ONCE_PER_STEP = OpSet(ONE_LOOP_OP.ops, batched_weight_grads=True)
ONE_LOOP_OP_STACKED_ONCE_PER_STEP = OpSet(ONE_LOOP_OP.ops, row_lists=False,
                                          batched_weight_grads=True)
# The backward loop replayed by the engine (scheduler.reverse)
REPLAYED = OpSet(OPS, replay_backward=True)
ONE_LOOP_OP_REPLAYED = OpSet(ONE_LOOP_OP.ops, replay_backward=True)
ONE_LOOP_OP_STACKED_REPLAYED = OpSet(ONE_LOOP_OP.ops, row_lists=False, replay_backward=True)
# Every op said to work on zero rows (they all do): launches outside the loop run unconditionally
NO_CONDS = OpSet([dataclasses.replace(op, handles_empty=True) for op in OPS])
# ... and in two halves each (`launches_outside_loop_in_halves`)
HALVES = OpSet(NO_CONDS.ops, halves=True)
SMALL = OpSet(OPS, small=True)  # several loop ops: rows stacked by any means
ONE_LOOP_OP_SMALL = OpSet(ONE_LOOP_OP.ops, small=True)  # rows stacked instead of row lists


# A chain of launches after the loop: `sq` (f -> s), `spread` (s -> p), `pool` (p -> g), and
# `outer` (f -> p) making more rows of the type `pool` reads. A tail launch reading exactly
# the latest launch's outputs of its type takes them without a gather (`_tail_rows`).
SPREAD = Op("spread", (S,), (P,),
            lambda s: [tf.sin(s)[:, None, None] * W3], lambda s: [tf.sin(s) * W3])
POOL = Op("pool", (P,), (G,),
          lambda p: [tf.reduce_sum(p, 1) * WS], lambda p: [tf.reduce_sum(p, 0) * WS])
# `square` lays four scalars side by side (`Op.side_by_side`): gathered, not called
SQUARE = Op("square", (S, S, S, S), (P,),
            lambda *s: [tf.reshape(tf.stack(s, 1), [-1, 2, 2])],
            lambda *s: [tf.reshape(tf.stack(s), [2, 2])], side_by_side=True)
TAIL_CHAIN = OpSet(ONE_LOOP_OP.ops + [SPREAD, POOL, SQUARE])
DIRECT = OpSet(ONE_LOOP_OP.ops + [SPREAD, POOL])  # `pool` reads the latest p rows made


def make_const(k, rng):
    if TYPES[k] is TOK:
        return rng.integers(0, 5)
    if TYPES[k] is INT:
        return rng.integers(-3, 4)
    return rng.normal(size=TYPES[k].shape)


def draw_batch(draw, max_graphs=3, max_nodes=20, hub=None, opset=ALL):
    """A batch of 1..max_graphs random graphs over OPS: (OpGraph, RawGraph).

    `draw` is hypothesis' or a numpy `Generator`.
    """
    c = Choices(draw)
    pairs = [draw_graph(draw, opset.specs, len(TYPES), max_nodes=max_nodes,
                        const_only=opset.const_only,
                        hub=bool(c.int(0, 1)) if hub is None else hub,
                        make_const=make_const, shapes=SHAPES, dtypes=DTYPES)
             for _ in range(c.int(1, max_graphs))]
    return OpGraph.concatenate([g for g, _ in pairs]), concat_raw([r for _, r in pairs])


def random_batch(draw, **kw):
    """`draw_batch` from a numpy generator seeded by hypothesis (varied graphs per example)."""
    return draw_batch(np.random.default_rng(draw(st.integers(0, 2**32 - 1))), **kw)


def draw_reads(draw, n_values):
    """Value ids to read: every value plus some again, or a random list with repeats."""
    if n_values == 0:
        return np.zeros(0, np.int64)
    some = draw(st.lists(st.integers(0, n_values - 1), max_size=10))
    if draw(st.booleans()):
        some = list(range(n_values)) + some
    return np.asarray(some, np.int64)


# --- the oracle ------------------------------------------------------------------------------

def oracle(raw: RawGraph, reads, weights=None, opset=ALL):
    """(values read, gradients w.r.t. VARIABLES, gradients w.r.t. each float table)."""
    tables = [tf.constant(np.asarray(raw.tables[k], t.dtype).reshape((-1, *t.shape)))
              for k, t in enumerate(TYPES)]
    float_tables = [tables[k] for k in FLOAT_IDS]
    with tf.GradientTape() as tape:
        tape.watch(float_tables)
        vals: list = [None] * len(raw.value_type)
        for v, row in raw.const_row.items():
            vals[v] = tables[raw.value_type[v]][row]
        for j, o in enumerate(raw.node_op):
            outs = opset.ops[o].ref(*[vals[a] for a in raw.node_args[j]])
            assert len(outs) == len(raw.node_outs[j])
            for v, y in zip(raw.node_outs[j], outs):
                vals[v] = y
        loss = tf.constant(0.0)
        if weights is not None:
            for v, w in zip(reads, weights):
                if w is not None:
                    loss += tf.reduce_sum(vals[v] * w)
    got = [vals[v].numpy() for v in reads]
    if weights is None:
        return got, None, None
    grads = tape.gradient(loss, VARIABLES + float_tables,
                          unconnected_gradients=tf.UnconnectedGradients.ZERO)
    grads = [tf.convert_to_tensor(g).numpy() for g in grads]
    return got, grads[:len(VARIABLES)], grads[len(VARIABLES):]


def read_positions(graph: OpGraph, reads):
    """(type, position among the reads of that type) of every read."""
    types = [int(graph.value_type[v]) for v in reads]
    return types, [types[:i].count(k) for i, k in enumerate(types)]


# --- the engine ------------------------------------------------------------------------------

def schedule_and_feed(graph: OpGraph, name: str, reads, opset=ALL):
    graph.validate()
    schedule = SCHEDULERS[name](graph)
    schedule.validate()
    feed = opset.planner.feed(graph, schedule, reads)
    types, pos = read_positions(graph, reads)
    assert feed.read_type.tolist() == types
    assert feed.read_pos.tolist() == pos
    return feed


def assert_values_equal(outs, graph, reads, want, where=""):
    types, pos = read_positions(graph, reads)
    for k, t in enumerate(TYPES):
        assert tuple(outs[k].shape) == (types.count(k), *t.shape), f"{where} type {t.name}"
    for i, (k, p) in enumerate(zip(types, pos)):
        got = outs[k][p].numpy()
        msg = f"{where} read {i}: value {reads[i]} of type {TYPES[k].name}"
        if TYPES[k].dtype == "int32":
            np.testing.assert_array_equal(got, want[i], err_msg=msg)
        else:
            np.testing.assert_allclose(got, want[i], atol=ATOL, rtol=0, err_msg=msg)


def const_grads_by_type(flat, graph: OpGraph):
    """Splits the gradient of the flat float32 constants into one array per float type."""
    out, at = [], 0
    for k in FLOAT_IDS:
        table = graph.constants[k]
        out.append(flat[at:at + table.size].reshape(table.shape))
        at += table.size
    assert at == len(flat)
    return out


def check_values(graph, raw, name, reads, where="", opset=ALL):
    feed = schedule_and_feed(graph, name, reads, opset)
    outs = opset.forward(feed.arrays)
    want, _, _ = oracle(raw, reads, opset=opset)
    assert_values_equal(outs, graph, reads, want, where)


def check_gradients(graph, raw, name, reads, seed, opset=ALL):
    feed = schedule_and_feed(graph, name, reads, opset)
    rng = np.random.default_rng(seed)
    types, pos = read_positions(graph, reads)
    weights = [rng.normal(size=TYPES[k].shape).astype("float32")
               if TYPES[k].dtype == "float32" else None for k in types]
    per_type = [np.zeros((types.count(k), *TYPES[k].shape), np.float32) for k in FLOAT_IDS]
    for w, k, p in zip(weights, types, pos):
        if w is not None:
            per_type[FLOAT_IDS.index(k)][p] = w
    outs, grads = opset.with_gradients(feed.arrays, per_type)
    want, want_var_grads, want_const_grads = oracle(raw, reads, weights, opset)
    assert_values_equal(outs, graph, reads, want)
    for v, g, r in zip(VARIABLES, grads, want_var_grads):
        np.testing.assert_allclose(g.numpy(), r, atol=ATOL, rtol=0,
                                   err_msg=f"{name}: gradient of {v.name}")
    for k, g, r in zip(FLOAT_IDS, const_grads_by_type(grads[-1].numpy(), graph),
                       want_const_grads):
        np.testing.assert_allclose(g, r, atol=ATOL, rtol=0,
                                   err_msg=f"{name}: gradient of the {TYPES[k].name} constants")


# --- values and gradients on random graphs ---------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=20)
@given(data=st.data())
def test_values_of_random_graphs_equal_the_oracle(name, data):
    graph, raw = random_batch(data.draw)
    check_values(graph, raw, name, draw_reads(data.draw, graph.num_values))
    assert ALL.forward.experimental_get_tracing_count() == 1


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=20)
@given(data=st.data())
def test_gradients_of_random_graphs_equal_the_oracle(name, data):
    graph, raw = random_batch(data.draw)
    reads = draw_reads(data.draw, graph.num_values)
    check_gradients(graph, raw, name, reads, data.draw(st.integers(0, 2**31 - 1)))
    assert ALL.with_gradients.experimental_get_tracing_count() == 1


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=15)
@given(data=st.data())
def test_gradients_sum_over_values_read_by_many_nodes(name, data):
    graph, raw = random_batch(data.draw, max_graphs=2, max_nodes=25, hub=True)
    reads = draw_reads(data.draw, graph.num_values)
    check_gradients(graph, raw, name, reads, data.draw(st.integers(0, 2**31 - 1)))


def _equal_the_oracle(opset: OpSet, name: str, draw) -> None:
    """Values and gradients of a random batch of `opset`'s ops equal the oracle's."""
    graph, raw = random_batch(draw, opset=opset)
    reads = draw_reads(draw, graph.num_values)
    check_values(graph, raw, name, reads, opset=opset)
    check_gradients(graph, raw, name, reads, draw(st.integers(0, 2**31 - 1)), opset=opset)


@pytest.mark.parametrize("opset", [ONE_LOOP_OP, ONE_LOOP_OP_STACKED], ids=["lists", "stacked"])
@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=14)
@given(data=st.data())
def test_values_and_gradients_with_one_loop_op_equal_the_oracle(name, opset, data):
    _equal_the_oracle(opset, name, data.draw)
    assert opset.forward.experimental_get_tracing_count() == 1
    assert opset.with_gradients.experimental_get_tracing_count() == 1


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=14)
@given(data=st.data())
def test_values_and_gradients_without_conds_equal_the_oracle(name, data):
    # random batches leave most of the 14 ops without nodes, outside the loop too
    _equal_the_oracle(NO_CONDS, name, data.draw)


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=14)
@given(data=st.data())
def test_values_and_gradients_with_the_launches_outside_the_loop_in_halves_equal_the_oracle(
        name, data):
    _equal_the_oracle(HALVES, name, data.draw)


@pytest.mark.parametrize("opset", [SMALL, ONE_LOOP_OP_SMALL], ids=["several", "one"])
@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=15)
@given(data=st.data())
def test_values_and_gradients_of_a_step_of_small_launches_equal_the_oracle(opset, name, data):
    _equal_the_oracle(opset, name, data.draw)


def _loop_body_ops(fn, index: int = 0) -> collections.Counter:
    """The op types of the body of the `index`-th loop a traced function holds."""
    graph = fn.get_concrete_function().graph
    loops = [op for op in graph.get_operations() if op.type in ("While", "StatelessWhile")]
    body = graph._functions[loops[index].get_attr("body").name].graph
    return collections.Counter(op.type for op in body.get_operations())


def test_a_step_of_small_launches_moves_each_value_type_s_rows_stacked():
    """Without a tape, its loop gathers each loop type's rows once (one more gather
    reads the launch's row of the table) and writes each type it makes once, where
    row lists take a gather per argument and a write per output."""
    lay = ONE_LOOP_OP.executor.layout
    cell = lay.loop_ops[0]
    read, made = set(lay.op_in[cell]), set(lay.op_out[cell])
    assert len(lay.op_in[cell]) > len(read) and len(lay.op_out[cell]) > len(made)
    lists, stacked = _loop_body_ops(ONE_LOOP_OP.forward), _loop_body_ops(ONE_LOOP_OP_SMALL.forward)
    assert (lists["GatherV2"], lists["InplaceUpdate"]) == (1 + len(lay.op_in[cell]),
                                                           len(lay.op_out[cell]))
    assert (stacked["GatherV2"], stacked["InplaceUpdate"]) == (1 + len(read), len(made))


def test_the_replayed_backward_pass_reads_each_value_type_s_rows_with_one_gather():
    """Its forward run is a step of small launches (rows stacked), and each replayed
    launch gathers its arguments and its outputs' gradients one type at a time."""
    lay = ONE_LOOP_OP.executor.layout
    cell = lay.loop_ops[0]
    forward = _loop_body_ops(ONE_LOOP_OP_REPLAYED.with_gradients, 0)
    assert forward["InplaceUpdate"] == len(set(lay.op_out[cell]))
    backward = _loop_body_ops(ONE_LOOP_OP_REPLAYED.with_gradients, 1)
    floats = set(ONE_LOOP_OP.executor.launches.tapped_types)
    # the launch table's row, each argument type, each float output type
    assert backward["GatherV2"] == 1 + len(set(lay.op_in[cell])) + len(
        set(lay.op_out[cell]) & floats)


def test_in_halves_each_launch_outside_the_loop_calls_its_op_twice_and_the_loop_s_once():
    def traced_calls(halves: bool) -> collections.Counter:
        calls = collections.Counter()

        def counted(op):
            def fn(*args):
                calls[op.name] += 1
                return op.fn(*args)
            return dataclasses.replace(op, fn=fn)
        opset = OpSet([counted(op) for op in NO_CONDS.ops], halves=halves)
        opset.forward.get_concrete_function()
        return calls
    plain, halved = traced_calls(False), traced_calls(True)
    lay = NO_CONDS.executor.layout
    # a launch outside the loop (an op with arguments) is one call more; the loop's none
    outside = collections.Counter(OPS[o].name for o in [*lay.outer_ops, *lay.tail_ops]
                                  if OPS[o].input_types)
    assert len(outside) >= 5
    assert halved == plain + outside, (plain, halved, outside)


@pytest.mark.parametrize("opset", [ONCE_PER_STEP, ONE_LOOP_OP_ONCE_PER_STEP,
                                   ONE_LOOP_OP_STACKED_ONCE_PER_STEP],
                         ids=["several", "one", "one-stacked"])
@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=15)
@given(data=st.data())
def test_gradients_with_weight_gradients_once_per_step_equal_the_oracle(name, opset, data):
    graph, raw = random_batch(data.draw, opset=opset)
    reads = draw_reads(data.draw, graph.num_values)
    check_gradients(graph, raw, name, reads, data.draw(st.integers(0, 2**31 - 1)),
                    opset=opset)


@pytest.mark.parametrize("opset", [REPLAYED, ONE_LOOP_OP_REPLAYED, ONE_LOOP_OP_STACKED_REPLAYED],
                         ids=["several", "one", "one-stacked"])
@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=15)
@given(data=st.data())
def test_gradients_with_the_replayed_backward_loop_equal_the_oracle(name, opset, data):
    graph, raw = random_batch(data.draw, opset=opset, hub=None)
    reads = draw_reads(data.draw, graph.num_values)
    check_gradients(graph, raw, name, reads, data.draw(st.integers(0, 2**31 - 1)),
                    opset=opset)
    assert opset.with_gradients.experimental_get_tracing_count() == 1


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=14)
@given(data=st.data())
def test_values_and_gradients_of_a_chain_of_tail_launches_equal_the_oracle(name, data):
    _equal_the_oracle(TAIL_CHAIN, name, data.draw)
    assert TAIL_CHAIN.with_gradients.experimental_get_tracing_count() == 1


def _tail_chain(extra_read: bool):
    """Two cells in the loop, then per cell output `sq`, `spread` and `pool`; with
    `extra_read`, one more `pool` of the first `spread` output (so `pool`'s rows are
    no longer exactly `spread`'s outputs) and one of an `outer` output."""
    b = Builder(DIRECT)
    (e,) = b.node("embed2", b.const(TOK, 2))
    x = b.const(F, [0.1, -0.2, 0.3])
    spread = []
    for _ in range(2):
        x = b.node("cell", x, e, x)[0]
        spread.append(b.node("spread", b.node("sq", x)[0])[0])
    for p in spread:
        b.node("pool", p)
    if extra_read:
        b.node("pool", spread[0])
        b.node("pool", b.node("outer", b.const(F, [0.5, 0.4, -0.3]))[0])
    return b.graph()


@pytest.mark.parametrize("extra_read", [False, True], ids=["exact", "gathered"])
def test_a_tail_launch_reading_exactly_the_latest_launch_s_outputs_gathers_nothing(
        extra_read, monkeypatch):
    gathers: list = []
    plain = executor_module._gather_dense_grad

    def counted(params, rows):
        def note():
            gathers.append(1)
            return np.int32(0)
        with tf.control_dependencies([tf.numpy_function(note, [], tf.int32)]):
            return plain(tf.identity(params), rows)

    monkeypatch.setattr(executor_module, "_gather_dense_grad", counted)
    opset = OpSet(DIRECT.ops)  # traced anew, with the counting gather
    graph, raw = _tail_chain(extra_read)
    reads = np.arange(graph.num_values)
    check_gradients(graph, raw, "agenda", reads, 0, opset=opset)
    # exact: `spread` reads all of `sq`'s rows and `pool` all of `spread`'s, in order
    assert (len(gathers) > 0) == extra_read


def test_an_op_laying_its_arguments_side_by_side_is_one_gather_not_a_call():
    calls: list = []
    square = dataclasses.replace(SQUARE, fn=lambda *s: calls.append(1) or SQUARE.fn(*s))
    opset = OpSet(ONE_LOOP_OP.ops + [SPREAD, POOL, square])
    b = Builder(opset)
    (e,) = b.node("embed2", b.const(TOK, 1))
    x = b.const(F, [0.4, -0.1, 0.2])
    s = []
    for _ in range(3):
        x = b.node("cell", x, e, x)[0]
        s.append(b.node("sq", x)[0])
    # the scalars in another order, one twice, one a constant
    b.node("pool", b.node("square", s[2], s[0], b.const(S, 0.7), s[2])[0])
    b.node("pool", b.node("square", s[1], s[1], s[0], s[2])[0])
    graph, raw = b.graph()
    check_gradients(graph, raw, "agenda", np.arange(graph.num_values), 3, opset=opset)
    assert calls == []
    laid_out = OpSet([dataclasses.replace(square, side_by_side=False) if op is square else op
                      for op in opset.ops])
    check_gradients(graph, raw, "agenda", np.arange(graph.num_values), 3, opset=laid_out)
    assert calls  # called when not said to lay its arguments side by side


def test_a_gather_with_a_dense_gradient_sums_the_rows_read_twice():
    params = tf.constant(np.arange(12, dtype=np.float32).reshape(4, 3))
    rows = tf.constant([2, 0, 2])
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(params)
        got = executor_module._gather_dense_grad(params, rows)
        want = tf.gather(params, rows)
    np.testing.assert_array_equal(got, want)
    dense = tape.gradient(got, params, output_gradients=tf.ones_like(got) * [[1.0], [2], [3]])
    assert isinstance(dense, tf.Tensor)
    sparse = tape.gradient(want, params, output_gradients=tf.ones_like(got) * [[1.0], [2], [3]])
    np.testing.assert_array_equal(dense, tf.convert_to_tensor(sparse))


GRADIENT_RUNS: list = []


def _note_run():
    GRADIENT_RUNS.append(1)
    return np.int32(0)


@tf.custom_gradient
def _counted(w):
    """`w`; each run of its gradient appends to GRADIENT_RUNS (a stateful host call)."""
    def grad(g):
        with tf.control_dependencies([tf.numpy_function(_note_run, [], tf.int32)]):
            return tf.identity(g)
    return tf.identity(w), grad


# `cell` with W1 read through `_counted`: GRADIENT_RUNS tells how often W1's gradient ran
COUNTED = dataclasses.replace(
    CELL, fn=lambda a, e, b: [
        tf.tanh(a @ _counted(tf.convert_to_tensor(W1)) + b @ W2 + e @ W4),
        a[:, :2] * e + WS, 0.5 * tf.sin(b) - a],
    handles_empty=True)


# A chain of 7 cells, all in the loop (the first reads a head output), and an empty
# launch before it (cell's step-0 nodes: none; it runs, as cell handles zero rows).
# Batched, the tap takes W1's gradient once, over the loop's launches and that one.
@pytest.mark.parametrize("batched, runs", [(True, 1), (False, 1 + 7)])
def test_loop_weight_gradients_run_once_per_step_when_batched(batched, runs):
    opset = OpSet([OPS[OP_ID["embed2"]], COUNTED], batched_weight_grads=batched)
    b = Builder(opset)
    e = b.node("embed2", b.const(TOK, 1))[0]
    x = b.const(F, [0.1, -0.2, 0.3])
    for _ in range(7):
        x = b.node("cell", x, e, x)[0]
    graph, raw = b.graph()
    GRADIENT_RUNS.clear()
    check_gradients(graph, raw, "agenda", np.arange(graph.num_values), 0, opset=opset)
    assert len(GRADIENT_RUNS) == runs


def test_a_loop_ops_launch_before_the_loop_joins_its_weight_gradient_once_per_step():
    # the first cell reads constants only: its launch runs before the loop; batched,
    # the tap takes W1's gradient once for it and the loop's six (TensorFlow would
    # add a second, weight-sized gradient for the launch before the loop)
    opset = OpSet([OPS[OP_ID["embed2"]], COUNTED], batched_weight_grads=True)
    b = Builder(opset)
    e = b.const(E, [0.3, -0.7])
    x = b.node("cell", b.const(F, [0.1, -0.2, 0.3]), e, b.const(F, [0.5, 0.0, -0.4]))[0]
    for _ in range(6):
        x = b.node("cell", x, e, x)[0]
    graph, raw = b.graph()
    layout = opset.executor.layout
    assert layout.op_names[layout.outer_ops[0]] == "cell"
    GRADIENT_RUNS.clear()
    check_gradients(graph, raw, "agenda", np.arange(graph.num_values), 0, opset=opset)
    assert len(GRADIENT_RUNS) == 1


def test_inference_traces_no_weight_tap():
    def tap_ops(fn):
        return [op.name for op in fn.get_concrete_function().graph.get_operations()
                if "weight_tap" in op.name]
    assert tap_ops(ONCE_PER_STEP.forward) == []
    assert tap_ops(ONCE_PER_STEP.with_gradients) != []
    assert tap_ops(ALL.with_gradients) == []  # the default: TensorFlow's gradients


def test_a_loop_traced_without_a_tape_keeps_no_gradient_bookkeeping():
    def body_ops(fn) -> set:
        graph = fn.get_concrete_function().graph
        return {op.type for name, f in graph._functions.items() if "body" in name
                for op in f.graph.get_operations()}
    # the custom gradient of the fused write and read (an IdentityN around it)
    assert "IdentityN" not in body_ops(ONE_LOOP_OP.forward)
    assert "IdentityN" in body_ops(ONE_LOOP_OP.with_gradients)
    # and no runtime shape check where the static shape is known
    assert "EnsureShape" not in body_ops(ONE_LOOP_OP.forward)


@pytest.mark.parametrize("opset", [ONE_LOOP_OP, ONE_LOOP_OP_STACKED, ALL],
                         ids=["row lists", "stacked", "switch"])
def test_a_loop_traced_without_a_tape_carries_only_its_buffers(opset):
    """Each iteration writes its own launch's outputs: no loop variable holds them for
    the next one (a variable costs nodes every iteration), unlike the differentiated
    loop's fused write-then-read."""
    def changing(fn) -> list:
        """Per loop, its variables that an iteration changes (not passed through:
        the captured tensors are loop variables too)."""
        graph = fn.get_concrete_function().graph
        counts = []
        for op in graph.get_operations():
            if op.type in ("While", "StatelessWhile"):
                body = graph._functions[op.get_attr("body").name].graph
                made = [t.op.inputs[0] if t.op.type == "Identity" else t for t in body.outputs]
                counts.append(sum(t.op.type != "Placeholder" for t in made))
        return counts
    # the loop counter, the launch index, a buffer per loop type the loop writes
    written = {k for o in opset.executor.layout.loop_ops for k in opset.executor.layout.op_out[o]}
    assert changing(opset.forward) == [2 + len(written)]
    assert max(changing(opset.with_gradients)) > 2 + len(written)


def test_an_iteration_cuts_its_launch_row_with_one_split():
    graph = ONE_LOOP_OP.forward.get_concrete_function().graph
    body = [op for name, f in graph._functions.items() if "body" in name
            for op in f.graph.get_operations()]
    fields = 2 + 4 * len(ONE_LOOP_OP.executor.layout.loop_types)
    row_splits = [op for op in body if op.type == "Split" and op.get_attr("num_split") == fields]
    assert len(row_splits) == 1  # the row of the launch table: one gather, one split
    row = row_splits[0].inputs[1]
    assert row.op.type == "GatherV2"
    # and no op per field: nothing else reads the row, and no Range makes written rows
    assert [c.type for c in row.consumers()] == ["Split"]
    assert "Range" not in [op.type for op in body]


def _conds(fn) -> int:
    graph = fn.get_concrete_function().graph
    return sum(op.type in ("If", "StatelessIf") for op in graph.get_operations())


def test_only_launches_of_ops_that_may_fail_on_zero_rows_run_under_a_cond():
    assert _conds(NO_CONDS.forward) == 0
    # head: bias, embed, embed2, leaf; step 0 of the 9 middle ops; tail: outer
    assert _conds(ALL.forward) == 14
    ops = [OPS[OP_ID["embed2"]], dataclasses.replace(OPS[OP_ID["leaf"]], handles_empty=True),
           dataclasses.replace(OPS[OP_ID["outer"]], handles_empty=True)]
    assert _conds(OpSet(ops).forward) == 1


# `first` fails on zero rows (it reads row 0), as a user's function may
FIRST = Op("first", (F,), (F,), lambda a: [a + 0.0 * a[0]], lambda a: [a])


@pytest.mark.parametrize("name", NAMES)
def test_an_op_that_fails_on_zero_rows_is_skipped_when_it_has_no_nodes(name):
    strict = OpSet([OPS[OP_ID["bias"]], OPS[OP_ID["sq"]], FIRST])
    b = Builder(strict)
    b.node("sq", b.node("bias")[0])  # `first` has no node: its head launch is empty
    graph, raw = b.graph()
    check_values(graph, raw, name, np.arange(graph.num_values), opset=strict)
    unguarded = OpSet([*strict.ops[:2], dataclasses.replace(FIRST, handles_empty=True)])
    with pytest.raises(tf.errors.InvalidArgumentError):
        unguarded.forward(schedule_and_feed(graph, name, np.arange(graph.num_values),
                                            unguarded).arrays)


def test_the_one_loop_op_set_runs_cell_alone_in_the_loop():
    ex = ONE_LOOP_OP.executor
    assert [ex.ops[o].name for o in ex.layout.loop_ops] == ["cell"]
    assert sorted(TYPES[k].name for k in ex.layout.loop_types) == ["e", "f", "g"]


class Builder:
    """Builds a graph over the ops of `opset` by hand: `const` and `node` return value ids."""

    def __init__(self, opset: OpSet = ALL):
        self.specs = opset.specs
        self.op_id = {op.name: o for o, op in enumerate(opset.ops)}
        self.raw = RawGraph(opset.specs, tables=[[] for _ in TYPES])

    def const(self, vtype: VT, value) -> int:
        raw, k = self.raw, TYPES.index(vtype)
        v = len(raw.value_type)
        raw.value_type.append(k)
        raw.value_node.append(-1)
        raw.const_row[v] = len(raw.tables[k])
        raw.tables[k].append(value)
        return v

    def node(self, op: str, *args: int) -> list[int]:
        raw, o = self.raw, self.op_id[op]
        raw.node_op.append(o)
        raw.node_args.append(args)
        outs = []
        for k in self.specs[o].outputs:
            outs.append(len(raw.value_type))
            raw.value_type.append(k)
            raw.value_node.append(raw.num_nodes - 1)
        raw.node_outs.append(outs)
        return outs

    def graph(self) -> tuple[OpGraph, RawGraph]:
        return build(self.raw, SHAPES, DTYPES), self.raw


def hub_graph():
    """One value h = bias() read by every node (twice by some) and read out four times."""
    b = Builder()
    c = b.const(F, np.array([0.3, -0.2, 0.9]))
    i = b.const(INT, 2)
    (h,) = b.node("bias")
    (m1,) = b.node("mix", h, h)
    (m2,) = b.node("mix", c, h)
    g, f = b.node("split", h)
    (m3,) = b.node("mix", m1, h)
    (x,) = b.node("combine", g, h, g)
    (s,) = b.node("scale", h, i)
    (y,) = b.node("gate", b.node("sq", h)[0], m2)
    reads = [h, m3, x, h, s, y, f, h, h]
    return (*b.graph(), np.array(reads))


@pytest.mark.parametrize("name", NAMES)
def test_gradient_of_a_value_read_by_many_nodes_and_many_times_is_summed(name):
    graph, raw, reads = hub_graph()
    check_gradients(graph, raw, name, reads, seed=7)


def test_a_value_read_by_many_nodes_has_the_summed_gradient_in_closed_form():
    # WB's gradient for reading h = bias() = WB three times with weights w is sum(w)
    graph, raw, _ = hub_graph()
    h = 2  # constants c, i, then h
    reads = np.array([h, h, h])
    feed = schedule_and_feed(graph, "agenda", reads)
    w = np.array([[1.0, 2.0, 3.0], [0.5, 0.5, 0.5], [-1.0, 0.0, 4.0]], np.float32)
    weights = [np.zeros((0, *TYPES[k].shape), np.float32) for k in FLOAT_IDS]
    weights[0] = w
    outs, grads = ALL.with_gradients(feed.arrays, weights)
    np.testing.assert_allclose(outs[0].numpy(), np.tile(WB.numpy(), (3, 1)), atol=ATOL)
    wb_grad = grads[[v is WB for v in VARIABLES].index(True)]
    np.testing.assert_allclose(wb_grad.numpy(), w.sum(0), atol=ATOL)


# --- tracing ---------------------------------------------------------------------------------

def test_one_trace_serves_batches_of_every_shape():
    ex = ALL.executor

    @tf.function(input_signature=[ex.input_signature()], autograph=False)
    def run(arrays):
        return ex.compute(arrays)

    rng = np.random.default_rng(5)
    cases = [(OpGraph.build([], [], [], [], [], [],
                            [np.zeros((0, *t.shape), t.dtype) for t in TYPES]),
              RawGraph(SPECS, tables=[[] for _ in TYPES]))]
    for n in [1, 2, 3, 5, 8, 10, 15, 20, 30, 40, 50]:
        cases.append(draw_batch(rng, max_graphs=4, max_nodes=n))
    shapes = set()
    for i, (graph, raw) in enumerate(cases):
        reads = np.arange(graph.num_values)
        feed = schedule_and_feed(graph, NAMES[i % 2], reads)
        shapes.add(tuple(sorted((k, a.shape) for k, a in feed.arrays.items())))
        outs = run(feed.arrays)
        want, _, _ = oracle(raw, reads)
        assert_values_equal(outs, graph, reads, want, f"batch {i}")
    assert len(shapes) >= 10
    assert run.experimental_get_tracing_count() == 1


# --- errors ----------------------------------------------------------------------------------

def test_feed_rejects_a_prelude_only_op_reading_a_node_output_in_the_loop():
    # `look` runs in the loop (fed by `inc`, feeding `mix`), so it may only read constants
    b = Builder()
    b.node("look", b.node("inc", b.const(INT, 2))[0])
    graph, _ = b.graph()
    graph.validate()
    for name in NAMES:
        with pytest.raises(ValueError, match="look"):
            ALL.planner.feed(graph, SCHEDULERS[name](graph), np.array([1]))


def test_the_stages_of_the_test_ops():
    ex = ALL.executor
    assert sorted(OPS[o].name for o in ex.layout.head_ops) == ["bias", "embed", "embed2", "leaf"]
    assert ex.layout.head_ops.index(OP_ID["embed2"]) < ex.layout.head_ops.index(OP_ID["leaf"])
    assert [OPS[o].name for o in ex.layout.tail_ops] == ["outer"]
    assert "look" not in [OPS[o].name for o in ex.layout.loop_ops]  # prelude-only: step 0 only


@pytest.mark.parametrize("name", NAMES)
def test_a_prelude_only_tail_op_reads_node_outputs_after_the_loop(name):
    # `outer` feeds no op, so it runs after the loop, where reading a variable is cheap:
    # it may read values computed in the loop and by the head
    b = Builder()
    c = b.const(F, np.array([0.3, -1.2, 0.7]))
    (m,) = b.node("mix", c, b.node("embed", b.const(TOK, 3))[0])
    (m2,) = b.node("mix", m, c)
    b.node("outer", m2)
    b.node("outer", b.node("bias")[0])
    b.node("outer", c)
    b.node("outer", b.node("leaf", b.node("embed2", b.const(TOK, 1))[0])[0])
    graph, raw = b.graph()
    reads = np.arange(graph.num_values)
    check_values(graph, raw, name, reads)
    check_gradients(graph, raw, name, reads, seed=3)


def test_feed_rejects_a_schedule_whose_prelude_reads_a_node_output():
    b = Builder()
    b.node("sq", b.node("bias")[0])
    graph, _ = b.graph()
    with pytest.raises(ValueError, match="prelude"):
        ALL.planner.feed(graph, Schedule.from_steps(graph, np.array([0, 0])), np.array([1]))


def test_feed_rejects_an_argument_of_the_wrong_value_type():
    b = Builder()
    (g,) = b.node("sq", b.node("bias")[0])  # sq: f -> s
    b.node("gate", g, b.node("bias")[0])  # gate wants (s, f)
    graph, _ = b.graph()
    graph.node_args[[1, 2]] = graph.node_args[[2, 1]]  # gate now reads (f, s)
    for name in NAMES:
        with pytest.raises(ValueError, match="value type differs"):
            ALL.planner.feed(graph, SCHEDULERS[name](graph), np.array([1]))


def test_feed_rejects_a_node_with_the_wrong_number_of_arguments():
    b = Builder()
    b.node("mix", b.node("bias")[0], b.node("bias")[0])
    graph, _ = b.graph()
    assert graph.node_arity.tolist() == [0, 0, 2]
    graph = OpGraph.build(graph.node_op, [0, 0, 1], graph.node_args[:1], graph.value_type,
                          graph.value_node, graph.value_index, graph.constants)
    for name in NAMES:
        with pytest.raises(ValueError, match="number of arguments"):
            ALL.planner.feed(graph, SCHEDULERS[name](graph), np.array([1]))


def test_executor_rejects_a_row_lists_setting_that_is_not_a_bool():
    with pytest.raises(TypeError, match="row_lists must be True or False, got 'no'"):
        Executor(OPS, TYPES, row_lists="no")
    with pytest.raises(TypeError, match="batched_weight_grads must be True or False, got 1"):
        Executor(OPS, TYPES, batched_weight_grads=1)


def test_executor_rejects_an_op_whose_value_type_is_not_listed():
    with pytest.raises(ValueError, match="value type"):
        Executor([OPS[0], OPS[1]], [F])


# --- more paths ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_int_values_computed_in_one_launch_are_read_by_the_next(name):
    # per chain: i -> inc -> inc ... -> scale(c, i + n): each launch reads the int output of
    # the launch just before it
    b = Builder()
    for n, start in [(3, 1), (5, -2), (1, 0)]:
        c, last = b.const(F, np.array([1.0, 2.0, -0.5])), b.const(INT, start)
        for _ in range(n):
            (last,) = b.node("inc", last)
        b.node("scale", c, last)
    graph, raw = b.graph()
    reads = np.arange(graph.num_values)
    check_values(graph, raw, name, reads)
    ints = ALL.forward(schedule_and_feed(graph, name, reads).arrays)[TYPES.index(INT)]
    assert ints.numpy().tolist() == [1, 2, 3, 4, -2, -1, 0, 1, 2, 3, 0, 1]


def test_an_executor_without_loop_ops_runs_its_prelude():
    ops = [OPS[OP_ID["bias"]], OPS[OP_ID["embed"]], OPS[OP_ID["outer"]]]
    ex = Executor(ops, TYPES)

    @tf.function(input_signature=[ex.input_signature()], autograph=False)
    def run(arrays):
        return ex.compute(arrays)

    consts = list(NO_CONSTANTS)
    consts[TYPES.index(TOK)] = np.array([4, 1], np.int32)
    consts[0] = np.array([[0.5, -1.0, 2.0]], np.float32)
    # v0 = tok[1], v1 = bias(), v2 = embed(v0), v3 = f[0], v4 = outer(v3), v5 = tok[0]
    graph = OpGraph.build([0, 1, 2], [0, 1, 1], [0, 3], [3, 0, 0, 0, 5, 3],
                          [-1, 0, 1, -1, 2, -1], [1, 0, 0, 0, 0, 0], consts)
    planner = Planner(ex.layout)
    for name in NAMES:
        outs = run(planner.feed(graph, SCHEDULERS[name](graph), np.array([2, 1, 4, 5, 3])).arrays)
        np.testing.assert_allclose(outs[0].numpy(),
                                   [EMB.numpy()[1], WB.numpy(), [0.5, -1.0, 2.0]], atol=ATOL)
        np.testing.assert_allclose(outs[TYPES.index(P)].numpy(),
                                   [[[-0.5, 1.0], [1.0, -2.0]]], atol=ATOL)
        assert outs[TYPES.index(TOK)].numpy().tolist() == [4]
    assert run.experimental_get_tracing_count() == 1


def test_a_node_output_left_out_of_the_graph_does_not_shift_other_values():
    # n0: h = bias(); n1: dup(h) whose outputs 0 and 2 are not values of the graph, only
    # output 1 (type g) is; n2: (a, b) = split(h); n3: m = mix(b, b).
    # Either the planner refuses the graph, or every value read is right.
    graph = OpGraph.build([OP_ID["bias"], OP_ID["dup"], OP_ID["split"], OP_ID["mix"]],
                          [0, 1, 1, 2], [0, 0, 3, 3], [0, 2, 2, 0, 0], [0, 1, 2, 2, 3],
                          [0, 1, 0, 1, 0], NO_CONSTANTS)
    graph.validate()
    wb = WB.numpy()
    b = np.sin(wb)
    want = {0: [wb, b, np.tanh(b @ W1.numpy() + b @ W2.numpy())],
            2: [wb[1:] * wb[:2], wb[:2] * WS.numpy()]}
    for name in NAMES:
        schedule = SCHEDULERS[name](graph)
        schedule.validate()
        try:
            feed = ALL.planner.feed(graph, schedule, np.array([0, 3, 4, 1, 2]))
        except ValueError:
            continue
        outs = ALL.forward(feed.arrays)
        for k, rows in want.items():
            np.testing.assert_allclose(outs[k].numpy(), rows, atol=ATOL,
                                       err_msg=f"{name}: values of type {TYPES[k].name}")
