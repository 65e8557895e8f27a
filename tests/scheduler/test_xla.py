"""The engine under XLA (`scheduler.xla`): values and gradients equal the node-by-node
oracle of `test_executor` on random graphs of its ops, under both schedulers; padded
rows change nothing; one trace (and one XLA compilation) per bucket."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from refold.scheduler.xla import XlaExecutor, bucket, loop_width
from tests.scheduler.test_executor import (
    ALL,
    ATOL,
    FLOAT_IDS,
    NAMES,
    ONCE_PER_STEP,
    ONE_LOOP_OP,
    OP_ID,
    OPS,
    TYPES,
    VARIABLES,
    Builder,
    OpSet,
    assert_values_equal,
    draw_batch,
    hub_graph,
    oracle,
    schedule_and_feed,
)


class Compiled:
    """An opset's XLA program: values and gradients, traced once per bucket key.
    The reads and their weights are padded to `min_rows` too (weights of padded reads:
    zero), so that the random batches of a test share one compiled program (an XLA
    compilation of the 14-op set takes ~25 s on a loaded 2-core machine)."""

    def __init__(self, opset, min_rows: int = 1):
        self.xla = XlaExecutor(opset.executor, min_rows)
        self.fns: dict = {}
        self.traces = 0

    def __call__(self, feed, weights: list):
        arrays, rows = self.xla.pack(feed.arrays)
        sinks = [arrays[f"buffer_{k}"].shape[0] - 1 for k in range(len(TYPES))]
        rows = [np.concatenate([r, np.full(self.xla.bucket(len(r)) - len(r), sink, np.int32)])
                for r, sink in zip(rows, sinks)]
        weights = [np.concatenate([w, np.zeros((self.xla.bucket(len(w)) - len(w),
                                                *w.shape[1:]), np.float32)])
                   for w in weights]
        key = (self.xla.key(arrays), tuple(w.shape for w in weights),
               tuple(r.shape for r in rows))
        if key not in self.fns:
            self.fns[key] = tf.function(self._run, jit_compile=True, autograph=False,
                                        input_signature=[self.xla.input_signature(arrays),
                                                         [tf.TensorSpec(w.shape, tf.float32)
                                                          for w in weights],
                                                         [tf.TensorSpec(r.shape, tf.int32)
                                                          for r in rows]])
        outs, grads = self.fns[key](arrays, weights, rows)
        return arrays, outs, grads

    def _run(self, arrays, weights, rows):
        self.traces += 1  # Python runs only while tracing
        consts = [arrays[f"consts_{k}"] for k in FLOAT_IDS]
        with tf.GradientTape() as tape:
            tape.watch(consts)
            bufs = self.xla.compute(arrays)
            outs = [tf.gather(b, r) for b, r in zip(bufs, rows)]
            loss = tf.add_n([tf.constant(0.0)] + [tf.reduce_sum(outs[k] * w)
                                                  for k, w in zip(FLOAT_IDS, weights)])
        grads = tape.gradient(loss, VARIABLES + consts,
                              unconnected_gradients=tf.UnconnectedGradients.ZERO)
        return outs, [tf.convert_to_tensor(g) for g in grads]


# a loop of one op, `mix`, fed by `bias` (zero arguments, before the loop)
SMALL = OpSet([OPS[OP_ID["bias"]], OPS[OP_ID["mix"]]])
COMPILED = {"all": Compiled(ALL, 128), "one": Compiled(ONE_LOOP_OP, 128),
            "once": Compiled(ONCE_PER_STEP, 128)}
OPSETS = {"all": ALL, "one": ONE_LOOP_OP, "small": SMALL, "once": ONCE_PER_STEP}


def check(graph, raw, name, reads, seed, which="all", rtol=0.0):
    opset, run = OPSETS[which], COMPILED[which]
    feed = schedule_and_feed(graph, name, reads, opset)
    rng = np.random.default_rng(seed)
    types = [int(graph.value_type[v]) for v in reads]
    weights = [rng.normal(size=TYPES[k].shape).astype("float32")
               if TYPES[k].dtype == "float32" else None for k in types]
    per_type = [np.zeros((types.count(k), *TYPES[k].shape), np.float32) for k in FLOAT_IDS]
    pos = [types[:i].count(k) for i, k in enumerate(types)]
    for w, k, p in zip(weights, types, pos):
        if w is not None:
            per_type[FLOAT_IDS.index(k)][p] = w
    arrays, outs, grads = run(feed, per_type)
    want, want_var, want_const = oracle(raw, reads, weights, opset)
    outs = [o[:types.count(k)] for k, o in enumerate(outs)]  # the reads' padding cut off
    assert_values_equal(outs, graph, reads, want, f"{name} (xla)")
    for v, g, r in zip(VARIABLES, grads, want_var):
        np.testing.assert_allclose(g.numpy(), r, atol=ATOL, rtol=rtol,
                                   err_msg=f"{name} (xla): gradient of {v.name}")
    for i, k in enumerate(FLOAT_IDS):
        g = grads[len(VARIABLES) + i].numpy()
        n = len(graph.constants[k])
        np.testing.assert_allclose(g[:n], want_const[i], atol=ATOL, rtol=0,
                                   err_msg=f"{name} (xla): gradient of the {TYPES[k].name} "
                                           "constants")
        np.testing.assert_array_equal(g[n:], 0)  # padding rows: no gradient
    return arrays


def test_values_and_gradients_of_random_graphs_under_xla_equal_the_oracle():
    # every batch and both schedulers in one bucket: one XLA compilation
    rng = np.random.default_rng(11)
    for i in range(3):
        graph, raw = draw_batch(rng, hub=i == 2)
        check(graph, raw, NAMES[i % 2], np.arange(graph.num_values), seed=i)
        reads = rng.integers(0, max(graph.num_values, 1), size=min(graph.num_values, 12))
        check(graph, raw, NAMES[1 - i % 2], reads, seed=100 + i)
    for name in NAMES:
        graph, raw, reads = hub_graph()  # a value read by many nodes, many times
        check(graph, raw, name, reads, seed=7)
    assert COMPILED["all"].traces == 1


def test_one_loop_op_under_xla_equals_the_oracle():
    rng = np.random.default_rng(12)
    for i in range(4):
        graph, raw = draw_batch(rng, opset=ONE_LOOP_OP)
        check(graph, raw, NAMES[i % 2], np.arange(graph.num_values), seed=i, which="one")
    assert COMPILED["one"].traces == 1


def test_weight_gradients_once_per_step_under_xla_equal_the_oracle():
    # the loop's weight gradients taken after it, on all of each op's nodes padded to a
    # bucket (scheduler.weight_grads): several loop ops, ops of no nodes, a hub
    rng = np.random.default_rng(13)
    for i in range(4):
        graph, raw = draw_batch(rng, hub=i == 2, opset=ONCE_PER_STEP)
        check(graph, raw, NAMES[i % 2], np.arange(graph.num_values), seed=i, which="once")
    graph, raw, reads = hub_graph()
    check(graph, raw, NAMES[0], reads, seed=7, which="once")
    assert COMPILED["once"].traces == 1
    # the weights' gradients really are deferred: the loop's ops read weights
    with tf.GradientTape():
        assert COMPILED["once"].xla.executor.launches.deferred_weights(True)


def test_padding_fills_buckets_and_each_bucket_is_traced_once():
    run = COMPILED["small"] = Compiled(SMALL, 4)
    batches = [draw_batch(np.random.default_rng(i), max_graphs=3, max_nodes=[3, 12][i % 2],
                          opset=SMALL) for i in range(3)]
    keys = []
    for i in range(8):  # each batch again, under the other scheduler
        graph, raw = batches[i % 3]
        reads = np.arange(graph.num_values)
        arrays = check(graph, raw, NAMES[i % 2], reads, seed=i, which="small")
        keys.append(XlaExecutor.key(arrays))
        for name, a in arrays.items():  # every length a power of two, at least min_rows
            n = a.shape[0] - name.startswith("loop_out")  # + 1: row 0 writes nothing
            if not name.endswith("count"):
                assert bucket(n) == n >= 4, name
    assert 1 < len(set(keys)) < len(keys)
    assert run.traces == len(set(keys))


def test_a_deep_chain_runs_under_xla():
    COMPILED["small"] = Compiled(SMALL)
    b = Builder(SMALL)
    x = b.node("bias")[0]
    for _ in range(300):
        (x,) = b.node("mix", x, x)
    graph, raw = b.graph()
    # 300 steps of float32 sums in a different order: gradients ~30 agree to ~3e-6
    arrays = check(graph, raw, "agenda", np.array([x]), seed=1, which="small", rtol=1e-5)
    assert arrays["loop_op"].shape == (512,)  # 300 launches, bucketed


def test_a_launch_wider_than_the_loop_width_runs_as_several_iterations():
    COMPILED["small"] = Compiled(SMALL)
    b = Builder(SMALL)
    reads = [b.node("mix", *b.node("bias") * 2)[0] for _ in range(31)]  # one launch of 31
    x = reads[0]
    for _ in range(19):  # then 19 launches of one
        (x,) = b.node("mix", x, reads[-1])
    graph, raw = b.graph()
    arrays = check(graph, raw, "agenda", np.array(reads + [x]), seed=2, which="small")
    width = arrays["loop_width"].shape[0]
    assert width == 4 and int(arrays["loop_count"][0]) == 8 + 19  # 31 rows: 8 iterations


def test_loop_width_trades_padding_against_the_iteration_cost():
    sizes = np.array([5, 4, 3, 2, 2, 1, 1, 1])  # 19 nodes
    # (sum of ceil(n / W)) * (W + cost): W=1 19, W=2 12, W=4 9, W=8 8 iterations
    assert loop_width(sizes, 1, iteration_cost=16) == 4
    assert loop_width(sizes, 1, iteration_cost=1) == 2
    assert loop_width(sizes, 8, iteration_cost=1) == 8  # the floor


def test_the_loop_width_floor_is_separate_from_the_rows_floor():
    b = Builder(SMALL)
    x = b.node("bias")[0]
    for _ in range(5):  # a chain: launches of one node
        (x,) = b.node("mix", x, x)
    graph, _ = b.graph()
    feed = schedule_and_feed(graph, "agenda", np.array([x]), SMALL)
    arrays, _ = XlaExecutor(SMALL.executor, 32, min_width=1, iteration_cost=1).pack(feed.arrays)
    assert arrays["loop_width"].shape == (1,)
    for name, a in arrays.items():
        if name != "loop_width" and not name.endswith("count"):
            rows = a.shape[0] - name.startswith("loop_out")  # + 1: row 0 writes nothing
            assert rows >= 32 and bucket(rows) == rows, name
    assert XlaExecutor(SMALL.executor, 32).pack(feed.arrays)[0]["loop_width"].shape == (32,)
