"""Engine figures beyond throughput: schedules, memory, layer sharing, expansion, plan cost.

Run: `python -m benchmarks.engine [--quick] [--only schedules,memory,sharing,expansion,plan,cache]`.
Each section prints a markdown table (the figures in BENCHMARKS.md come from it):

- `schedules`: agenda vs depth (steps, launches, mean batch size = nodes per
  launch, train examples/s from paired calls: the two variants alternate on the
  same batch and the median call time counts) on (a) sst-synth TreeLSTM with a loss at every node
  (variant A) and (b) variable-length LSTM sequences with one loss at the end
  (DyNet's Figure 1 case).
- `memory`: peak extra memory of one TreeLSTM training step at 256 and 1,024 trees,
  per node (VmHWM of a fresh subprocess).
- `sharing`: a TreeLSTM with two kinds of internal node that share one cell
  layer, compiled with sharing (one op) and per block instance (two ops, as
  TensorFlow Fold batches): launches and train trees/s (paired calls).
- `expansion`: op-graph nodes/s expanding unseen inputs, serial and with workers.
- `plan`: merging + scheduling + packing cached graphs, as % of a training step,
  and its median time when each plan follows a training step (cold caches).
- `cache`: what a look-up in the expansion cache costs (its fingerprint writes the
  input with the C pickler, `compiler.graphs.expansion_cache`) against expanding the same
  inputs afresh, and the fingerprint against the Python walk it falls back on.

The default runs every section but `cache`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

from benchmarks.workloads import (
    CLASSES,
    HIDDEN,
    VOCAB,
    TreeLSTMModel,
    sst_synth_tree,
)


def _tf():
    import tensorflow as tf
    return tf


# --- workloads -----------------------------------------------------------------------


def tree_lstm_all_nodes_block(model: TreeLSTMModel):
    """sst-synth variant A: logits at every node, emitted as metric "node_logits"."""
    import refold as td
    from refold.models import tree_lstm
    tree = td.ForwardDeclaration(td.PyObjectType(), tree_lstm.state_type(HIDDEN))

    def with_loss(b):
        loss = td.GetItem(0) >> model.output >> td.Metric("node_logits")
        return b >> td.AllOf(td.Identity(), loss) >> td.GetItem(0)

    leaf = with_loss(td.Scalar("int32") >> model.embedding >> model.leaf)
    node = with_loss(td.Record((tree(), tree())) >> model.cell)
    tree.resolve_to(td.OneOf(lambda t: isinstance(t, tuple), {False: leaf, True: node}))
    return tree() >> td.GetItem(0) >> model.output


def sequence_block(seed: int = 0, hidden: int = 128):
    """DyNet's Figure 1 case: an LSTM over each sequence, one loss after the last step."""
    import keras

    import refold as td
    keras.utils.set_random_seed(seed)
    cell = td.ScopedLayer(keras.layers.LSTMCell(hidden), "lstm")
    return (td.Map(td.Scalar("int32") >> td.Embedding(VOCAB, 128)) >> td.RNN(cell)
            >> td.GetItem(1) >> td.GetItem(0) >> td.FC(1, activation=None)
            >> td.Metric("loss"))


def sequences(rng, n: int) -> list:
    lengths = np.clip(np.round(rng.normal(24, 10, n)), 2, 80).astype(int)
    return [rng.integers(0, VOCAB, k).tolist() for k in lengths]


def two_kind_tree(rng, n_leaves: int | None = None):
    """An sst-synth tree whose internal nodes are tagged "a" or "b" at random."""
    def tag(t):
        if isinstance(t, tuple):
            return ("a" if rng.random() < 0.5 else "b", tag(t[0]), tag(t[1]))
        return t
    return tag(sst_synth_tree(rng, n_leaves))


def two_kind_block(model: TreeLSTMModel):
    """Two internal-node blocks (for tags "a", "b") that share one binary cell layer."""
    import refold as td
    from refold.models import tree_lstm
    tree = td.ForwardDeclaration(td.PyObjectType(), tree_lstm.state_type(HIDDEN))
    leaf = td.Scalar("int32") >> model.embedding >> model.leaf
    node_a = td.AllOf(td.GetItem(1) >> tree(), td.GetItem(2) >> tree()) >> model.cell
    node_b = td.AllOf(td.GetItem(1) >> tree(), td.GetItem(2) >> tree()) >> model.cell
    tree.resolve_to(td.OneOf(lambda t: t[0] if isinstance(t, tuple) else "leaf",
                             {"leaf": leaf, "a": node_a, "b": node_b}))
    return tree() >> td.GetItem(0) >> model.output


# --- a generic training step on a Compiler --------------------------------------------


class Trainer:
    """Plan + one traced train step: softmax cross-entropy of the root logits (if a
    result type is given) plus the mean square of every metric's values; plain SGD
    on every variable the step reads."""

    def __init__(self, compiler, result_type=None, lr: float = 0.01):
        tf = _tf()
        from benchmarks.common import sgd_apply
        self.c = compiler
        ex = compiler.executor
        k_res = None if result_type is None else compiler.program.type_id[result_type]
        metric_k = [compiler.program.type_id[t] for t in compiler.program.metric_types]

        @tf.function(input_signature=[ex.input_signature(), tf.TensorSpec([None], tf.int32),
                                      tf.TensorSpec([None, 2], tf.int32)], autograph=False)
        def train(arrays, labels, bounds):
            with tf.GradientTape() as tape:
                outs = ex.compute(arrays)
                loss = 0.0
                if k_res is not None:
                    logits = outs[k_res][:tf.size(labels)]
                    loss += tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                        labels=labels, logits=logits))
                for m, k in enumerate(metric_k):
                    vals = outs[k][bounds[m, 0]:bounds[m, 1]]
                    loss += tf.reduce_mean(tf.square(vals))
            variables = tape.watched_variables()
            sgd_apply(variables, tape.gradient(loss, variables), lr)
            return loss

        self.fn = train

    def step(self, batch, labels):
        plan = self.c.plan(batch, grouped=True)
        bounds = plan.metric_bounds(self.c.program)
        if len(bounds) == 0:
            bounds = np.zeros((0, 2), np.int32)
        return self.fn(plan.feed.arrays, labels, bounds)


def _paired_rates(fns: dict, batches, reps: int) -> dict:
    """Examples/s of each of `fns`, called in turn on the same batch, `reps` times
    (graphs cached first): from the median call time, so that every variant sees
    the same load on a shared machine."""
    for fn in fns.values():
        for b in batches:
            fn(b)
    times: dict = {name: [] for name in fns}
    for r in range(reps):
        b = batches[r % len(batches)]
        for name, fn in fns.items():
            t = time.perf_counter()
            fn(b)
            times[name].append((time.perf_counter() - t) / len(b))
    return {name: 1.0 / float(np.median(t)) for name, t in times.items()}


# --- sections --------------------------------------------------------------------------


def section_schedules(reps: int, batch: int = 64) -> dict:
    from refold.blocks.types import TensorType
    from refold.compiler import Compiler
    rng = np.random.default_rng(0)
    model = TreeLSTMModel(seed=0)
    out = {}
    cases = {
        f"(a) TreeLSTM, loss at every node, B={batch}":
            (tree_lstm_all_nodes_block(model), TensorType((CLASSES,)),
             [[sst_synth_tree(rng) for _ in range(batch)] for _ in range(4)]),
        f"(b) LSTM sequences, loss at the end, B={batch}":
            (None, None, [sequences(rng, batch) for _ in range(4)]),
    }
    for name, (block, rtype, batches) in cases.items():
        if block is None:
            block = sequence_block()
        row, fns = {}, {}
        labels = np.zeros(batch, np.int32)
        for sched in ("depth", "agenda"):
            c = Compiler.create(block, scheduler=sched)
            first = c.schedule(batches[0])
            st = first.stats
            tr = Trainer(c, rtype)
            fns[sched] = lambda b, tr=tr, y=labels: tr.step(b, y)
            row[sched] = {"steps": st.steps, "launches": st.launches,
                          "mean_batch": first.graph.num_nodes / st.launches}
        for sched, rate in _paired_rates(fns, batches, reps).items():
            row[sched]["train_per_s"] = rate
        out[name] = row
    lines = ["| workload | scheduler | steps | launches | mean batch size (nodes/launch) | "
             "train examples/s |", "|---|---|---|---|---|---|"]
    for name, row in out.items():
        for sched, r in row.items():
            lines.append(f"| {name} | {sched} | {r['steps']} | {r['launches']} | "
                         f"{r['mean_batch']:.1f} | {r['train_per_s']:.0f} |")
    print("\n".join(lines), flush=True)
    return out


_MEMORY_CHILD = r"""
import json, sys
import numpy as np
from benchmarks.workloads import TreeLSTMModel, sst_synth_tree, count_nodes
from benchmarks.treelstm import EngineVariant
n = int(sys.argv[1])
rng = np.random.default_rng(0)
model = TreeLSTMModel(seed=0)
ev = EngineVariant(model, "agenda")
small = [sst_synth_tree(rng) for _ in range(4)]
ev.train(small, np.zeros(4, np.int32))            # trace once on a small batch
trees = [sst_synth_tree(rng) for _ in range(n)]
labels = np.zeros(n, np.int32)
plan = ev.compiler.plan(trees)
arrays = {k: v for k, v in plan.feed.arrays.items()}
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1])
base = status("VmRSS")
open("/proc/self/clear_refs", "w").write("5")
ev.train_fn(arrays, labels).numpy()
peak = status("VmHWM")
print(json.dumps({"trees": n, "nodes": int(plan.graph.num_nodes), "extra_kb": peak - base}))
"""


def section_memory(sizes=(256, 1024)) -> dict:
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="0", MALLOC_MMAP_THRESHOLD_="4096",
               MALLOC_TRIM_THRESHOLD_="0", TF_CPP_MIN_LOG_LEVEL="3")
    rows = []
    for n in sizes:
        res = subprocess.run([sys.executable, "-c", _MEMORY_CHILD, str(n)], env=env,
                             capture_output=True, text=True, check=True,
                             cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        rows.append(json.loads(res.stdout.strip().splitlines()[-1]))
    lines = ["| trees | nodes | peak extra MB | KB per node |", "|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['trees']} | {r['nodes']} | {r['extra_kb'] / 1024:.1f} | "
                     f"{r['extra_kb'] / r['nodes']:.2f} |")
    print("\n".join(lines), flush=True)
    return {"rows": rows}


def section_sharing(reps: int, batch: int = 64) -> dict:
    from refold.blocks.types import TensorType
    from refold.compiler import Compiler
    rng = np.random.default_rng(0)
    model = TreeLSTMModel(seed=0)
    block = two_kind_block(model)
    batches = [[two_kind_tree(rng) for _ in range(batch)] for _ in range(4)]
    labels = rng.integers(0, CLASSES, batch).astype(np.int32)
    out, fns = {}, {}
    for share in (True, False):
        c = Compiler.create(block, share_layers=share)
        st = c.schedule(batches[0]).stats
        tr = Trainer(c, TensorType((CLASSES,)))
        name = "shared" if share else "per block instance"
        fns[name] = lambda b, tr=tr: tr.step(b, labels)
        out[name] = {"ops": len(c.program.ops), "steps": st.steps, "launches": st.launches}
    for name, rate in _paired_rates(fns, batches, reps).items():
        out[name]["train_per_s"] = rate
    lines = ["| lowering | ops | steps | launches | train trees/s |", "|---|---|---|---|---|"]
    for name, r in out.items():
        lines.append(f"| {name} | {r['ops']} | {r['steps']} | {r['launches']} | "
                     f"{r['train_per_s']:.0f} |")
    a, b = out["shared"]["train_per_s"], out["per block instance"]["train_per_s"]
    lines.append(f"\nshared ÷ per block instance, training: {a / b:.2f}x")
    print("\n".join(lines), flush=True)
    return out


def section_expansion(n_trees: int, workers: int) -> dict:
    from refold.compiler import Compiler
    rng = np.random.default_rng(0)
    model = TreeLSTMModel(seed=0)
    trees = [sst_synth_tree(rng) for _ in range(n_trees)]
    out = {}
    serial = Compiler.create(model.block, cache=False)
    par = Compiler.create(model.block, cache=False, workers=workers)
    par.expand(trees[:128])  # fork the workers before timing
    for _ in range(2):  # alternate; keep the best of each
        for name, c in (("serial", serial), (f"{workers} workers", par)):
            t = time.perf_counter()
            graphs = c.expand(trees)
            dt = time.perf_counter() - t
            rate = sum(g.graph.num_nodes for g in graphs) / dt
            out[name] = max(out.get(name, 0.0), rate)
    par.close()
    lines = ["| expansion of unseen inputs | op-graph nodes/s |", "|---|---|"]
    lines += [f"| {name} | {rate:,.0f} |" for name, rate in out.items()]
    print("\n".join(lines), flush=True)
    return out


def section_plan(sizes=(16, 64, 256), seconds: float = 1.0) -> dict:
    from benchmarks.treelstm import EngineVariant
    rng = np.random.default_rng(0)
    model = TreeLSTMModel(seed=0)
    out = {}
    for sched in ("agenda", "depth"):
        ev = EngineVariant(model, sched)
        for b in sizes:
            trees = [sst_synth_tree(rng) for _ in range(b)]
            labels = rng.integers(0, CLASSES, b).astype(np.int32)
            ev.compiler.plan(trees)  # cache the graphs
            plan_ms = _best_ms(lambda c=ev.compiler, t=trees: c.plan(t), seconds / 2)
            arrays = ev.compiler.plan(trees).feed.arrays
            step_ms = _best_ms(lambda f=ev.train_fn, a=arrays, y=labels: f(a, y).numpy(),
                               seconds)
            between_ms = _plan_between_steps_ms(ev, rng, b, seconds)
            out[(sched, b)] = (plan_ms, step_ms, between_ms)
    lines = ["| scheduler | B | plan ms (cached graphs) | train step ms (device) | "
             "plan ÷ (plan + step) | plan ms between steps |", "|---|---|---|---|---|---|"]
    for (sched, b), (p, s, m) in out.items():
        lines.append(f"| {sched} | {b} | {p:.2f} | {s:.1f} | {100 * p / (p + s):.1f}% "
                     f"| {m:.2f} |")
    print("\n".join(lines), flush=True)
    return {f"{k[0]}-{k[1]}": v for k, v in out.items()}


def _plan_between_steps_ms(ev, rng, b: int, seconds: float, n_batches: int = 8) -> float:
    """Median plan time of cached batches when each plan follows a training step, as in
    a training loop (the step leaves the CPU caches cold; back-to-back plans are faster)."""
    batches = [[sst_synth_tree(rng) for _ in range(b)] for _ in range(n_batches)]
    labels = rng.integers(0, CLASSES, b).astype(np.int32)
    for t in batches:
        ev.train(t, labels).numpy()  # cache the graphs, warm the step
    times, start = [], time.perf_counter()
    while time.perf_counter() - start < seconds or len(times) < n_batches:
        for t in batches:
            t0 = time.perf_counter()
            plan = ev.compiler.plan(t)
            times.append(time.perf_counter() - t0)
            ev.train_fn(plan.feed.arrays, labels).numpy()
    return float(np.median(times)) * 1e3


def _best_ms(fn, seconds: float) -> float:
    fn()
    best, start = float("inf"), time.perf_counter()
    while time.perf_counter() - start < seconds or best == float("inf"):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best * 1e3


def section_cache(n_trees: int, rounds: int = 5) -> dict:
    """µs per sst-synth tree: a cache hit (the fingerprint check included) against
    expanding the tree afresh; the fingerprint alone of the trees as nested tuples
    and as the nested dicts the docs teach (`{"children": [l, r]}`, `{"word": i}`),
    and the Python walk it falls back on for inputs too deep for the pickler;
    alternating rounds, medians."""
    from refold.compiler.graphs.expansion import expand_all
    from refold.compiler.graphs.expansion_cache import ExpansionCache, fingerprint, walk_fingerprint
    from refold.compiler.graphs.lowering import lower
    rng = np.random.default_rng(0)
    trees = [sst_synth_tree(rng) for _ in range(n_trees)]

    def as_dict(t):
        return {"children": [as_dict(t[0]), as_dict(t[1])]} if isinstance(t, tuple) \
            else {"word": t}

    dicts = [as_dict(t) for t in trees]
    program = lower(TreeLSTMModel(seed=0).block)
    cache = ExpansionCache(len(trees))
    for x, g in zip(trees, expand_all(program, trees)):
        cache.put(x, g)
    prints = {"fingerprint, tuples": (fingerprint, trees),
              "fingerprint, dicts": (fingerprint, dicts),
              "Python walk, tuples": (walk_fingerprint, trees),
              "Python walk, dicts": (walk_fingerprint, dicts)}
    times: dict[str, list[float]] = {"cache hit": [], "expansion": [],
                                     **{k: [] for k in prints}}
    for _ in range(rounds):
        t = time.perf_counter()
        hits = [cache.get(x) for x in trees]
        times["cache hit"].append(time.perf_counter() - t)
        t = time.perf_counter()
        expand_all(program, trees)
        times["expansion"].append(time.perf_counter() - t)
        for name, (f, xs) in prints.items():
            t = time.perf_counter()
            for x in xs:
                f(x)
            times[name].append(time.perf_counter() - t)
    assert all(h is not None for h in hits)
    out = {k: float(np.median(v)) / len(trees) * 1e6 for k, v in times.items()}
    out["ratio"] = out["cache hit"] / out["expansion"]
    print("| per sst-synth tree | µs |\n|---|---|\n"
          f"| cache hit (fingerprint checked) | {out['cache hit']:.1f} |\n"
          f"| expansion afresh | {out['expansion']:.1f} |\n"
          f"| hit ÷ expansion | {out['ratio']:.3f} |", flush=True)
    for name in prints:
        print(f"| {name} | {out[name]:.1f} |", flush=True)
    return out


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="schedules,memory,sharing,expansion,plan")
    parser.add_argument("--quick", action="store_true", help="short run (1 s each)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64, help="for schedules and sharing")
    parser.add_argument("--reps", type=int, help="paired calls per variant, schedules and "
                        "sharing (default 40; 12 with --quick)")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    seconds = 1.0 if args.quick else 4.0
    reps = args.reps or (12 if args.quick else 40)  # paired calls per variant
    only = args.only.split(",")
    results = {}
    if "schedules" in only:
        print("\n## agenda vs depth")
        results["schedules"] = section_schedules(reps, args.batch)
    if "memory" in only:
        print("\n## memory of one TreeLSTM training step")
        results["memory"] = section_memory()
    if "sharing" in only:
        print("\n## batching across blocks that share a layer")
        results["sharing"] = section_sharing(reps, args.batch)
    if "expansion" in only:
        print("\n## expansion")
        results["expansion"] = section_expansion(1024 if args.quick else 4096, args.workers)
    if "plan" in only:
        print("\n## plan overhead")
        results["plan"] = section_plan(seconds=seconds)
    if "cache" in only:
        print("\n## what the expansion cache costs")
        results["cache"] = section_cache(256 if args.quick else 1024)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=str)
    return results


if __name__ == "__main__":
    main()
