"""What one iteration of the engine's loop runs: graph nodes by kind, and what a loop
variable costs.

At batch 1 TensorFlow's executor spends about as long per graph node as the node's
kernel does, so a training step's time follows the number of nodes each loop
iteration runs. This counts them in the training step that `Model.fit` traces (its
`train_step` on a packed batch of `--batch-size` items, with the weight-gradient
choice `fit` makes for that batch), per loop of the step (the forward loop, and the
backward loop the engine replays at small batches, or TensorFlow's), sorted into:

- `compute`: the cells' arithmetic and its gradient (matmuls, activations, products,
  sums, the gates' splits and concats, a custom gradient's `IdentityN`);
- `rows`: moving rows between the loop's buffers and the cells (gathers, in-place
  writes and adds of float rows);
- `indices`: the launch's int32 bookkeeping (its row of the launch table, the slices
  and splits of its row lists, scalars);
- `constants`: `Const` nodes (axes, shapes), run on every iteration;
- `pass-through`: `Identity` and `NoOp` nodes;
- `weights`: `ReadVariableOp`;
- `loop variables`: the body's inputs. Lowered for the executor, each becomes a
  `Merge`, a `Switch`, an `Identity` and a `NextIteration` run on every iteration,
  whether the body changes it or not (and an `Enter` and an `Exit` once a loop).

These are the traced graph's nodes. Grappler rewrites the graph before it runs and
may merge identical constants or drop pass-throughs, so those two kinds are upper
bounds; loop variables it keeps.

`--loop-vars` times a `tf.while_loop` of 22 iterations (a one-row matmul and a tanh
each) with `k` extra loop variables that the body passes through unchanged, taking
turns: the cost of one loop variable per iteration.

    python -m benchmarks.census                      # both workloads, batch 1
    python -m benchmarks.census --batch-size 16 --workloads bilstm
    python -m benchmarks.census --loop-vars 0,8,16 --rounds 7
"""

from __future__ import annotations

import argparse
import collections
import re
import time

import numpy as np

KINDS = ("compute", "rows", "indices", "constants", "pass-through", "weights",
         "loop variables")
_ROWS = {"GatherV2", "InplaceUpdate", "InplaceAdd", "TensorScatterUpdate",
         "TensorScatterAdd", "ScatterNd"}


def kind(op) -> str:
    """The census kind of graph operation `op` in a loop body."""
    if op.type == "Placeholder":
        return "loop variables"
    if op.type == "Const":
        return "constants"
    if op.type in ("Identity", "NoOp"):
        return "pass-through"
    if op.type == "ReadVariableOp":
        return "weights"
    if op.type in _ROWS:
        return "rows"
    if op.outputs and all(t.dtype.is_integer for t in op.outputs):
        return "indices"
    return "compute"


# a `tf.while_loop`'s functions (`while_body_12`, `while_1_cond_40`); the branches inside
# a body are named `while_switch_case_..._branch0_7`
_LOOP = re.compile(r"while(?:_\d+)?_(body|cond)_\d+$")


def loop_census(graph) -> dict:
    """`{loop body name: Counter of kinds}` for every `while` body traced in
    `graph` and in the functions it calls (nested loops get their own entry). A body's
    count includes the nodes of the `tf.cond` and `tf.switch_case` branches it runs (a
    loop of several ops picks its op through a `switch_case`), their arguments as
    pass-through."""
    out, seen = {}, set()

    def functions(g):
        for name, fn in g._functions.items():
            body = getattr(fn, "graph", None)
            if body is not None and id(body) not in seen:
                seen.add(id(body))
                yield name, body

    def walk(g, counter=None, branch=False):
        """Counts g's nodes into `counter` (None: outside any loop body) and walks the
        functions it calls: a loop body gets a counter of its own, a branch adds to
        its body's."""
        if counter is not None:  # a branch's placeholders are its arguments
            counter.update("pass-through" if branch and k == "loop variables" else k
                           for k in map(kind, g.get_operations()))
        for name, body in functions(g):
            loop = _LOOP.search(name)
            if loop is None:
                walk(body, counter, branch=counter is not None)
            elif loop.group(1) == "body":
                out[name] = collections.Counter()
                walk(body, out[name])

    walk(graph)
    return out


def _model(workload: str):
    """A compiled training `Model` of `workload`, and a function making `n` of its
    training items: `(inputs, labels or None)`."""
    import keras

    rng = np.random.default_rng(0)
    if workload == "treelstm":
        from benchmarks.workloads import CLASSES, TreeLSTMModel, sst_synth_tree
        from refold.compiler import Model
        model = Model(TreeLSTMModel(seed=0).block)
        model.compile(optimizer=keras.optimizers.SGD(0.01),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return model, lambda n: ([sst_synth_tree(rng) for _ in range(n)],
                                 rng.integers(0, CLASSES, n).astype(np.int32))
    if workload == "chartagger":
        from benchmarks.peers.refold_side import char_tagger_models
        from benchmarks.peers.run import make_data
        data = make_data(["chartagger"], 256)["chartagger"]
        model = char_tagger_models(data["vocabulary"])[0]
        model.compile(optimizer=keras.optimizers.SGD(0.01))
        return model, lambda n: (data["sentences"][:n], None)
    from benchmarks.bilstm import sentence
    from benchmarks.peers.refold_side import tagger_models
    model = tagger_models()[0]
    model.compile(optimizer=keras.optimizers.SGD(0.01))
    return model, lambda n: ([sentence(rng) for _ in range(n)], None)


def train_step_census(workload: str, batch_size: int) -> dict:
    """The census of the training step `Model.fit` traces for a batch of
    `batch_size` items of `workload` ("treelstm" or "bilstm"): `{"replayed": bool,
    "launches": the loop ops' launches (about one an iteration), "loops":
    {"forward" | "backward": Counter of kinds}}`."""
    import tensorflow as tf
    model, items = _model(workload)
    x, y = items(batch_size)
    model.fit(x, y, batch_size=batch_size, epochs=1, verbose=0)  # builds the weights
    packed = model.pipeline.pack(x)
    once = model.weight_grads.key(packed)
    step = model.training_step(model.weight_grads.mode(once))
    graph = tf.function(step, autograph=False).get_concrete_function(
        (tf.nest.map_structure(tf.constant, packed),
         None if y is None else tf.constant(y))).graph
    loops = sorted(loop_census(graph).items(), key=lambda kv: _order(kv[0]))
    if len(loops) != 2:
        raise RuntimeError(f"expected a forward and a backward loop, found {len(loops)}: "
                           f"{[name for name, _ in loops]}")
    schedule = model.compiler.plan(x).schedule
    loop_ops = list(model.compiler.executor.layout.loop_ops)
    return {"replayed": bool(once and model.weight_grads.replay),
            "launches": int(np.isin(schedule.group_op, loop_ops).sum()),
            "loops": dict(zip(("forward", "backward"), (c for _, c in loops)))}


def _order(name: str) -> tuple:
    """Loop bodies in the order they were traced: the forward loop first."""
    digits = "".join(ch for ch in name.rsplit("_", 1)[-1] if ch.isdigit())
    return (int(digits) if digits else 0, name)


def loop_variable_cost(extras: list[int], rounds: int, calls: int = 200,
                       iterations: int = 22) -> dict:
    """`{k: microseconds per iteration}`, median of `rounds` taking turns, of a loop
    whose body does a one-row matmul and a tanh and passes `k` more variables on."""
    import tensorflow as tf

    def make(k):
        @tf.function(autograph=False)
        def f(h, w, extra):
            def body(i, h, *rest):
                return (i + 1, tf.tanh(tf.matmul(h, w)), *rest)
            return tf.while_loop(lambda i, *_: i < iterations, body,
                                 (tf.constant(0), h, *extra))[1]
        return f
    h, w = tf.ones([1, 64]), tf.fill([64, 64], 0.01)
    fns = {k: (make(k), [tf.ones([8]) * j for j in range(k)]) for k in extras}
    for f, extra in fns.values():
        f(h, w, extra)  # traced
    times: dict = {k: [] for k in extras}
    for _ in range(rounds):
        for k, (f, extra) in fns.items():
            start = time.perf_counter()
            for _ in range(calls):
                f(h, w, extra)
            times[k].append((time.perf_counter() - start) / calls / iterations * 1e6)
    return {k: float(np.median(t)) for k, t in times.items()}


def census_table(results: dict) -> str:
    lines = ["| workload | B | loop | loop-op launches | " + " | ".join(KINDS) + " | all |",
             "|---|---|---|---|" + "---|" * (len(KINDS) + 1)]
    for (workload, b), r in results.items():
        for loop, counts in r["loops"].items():
            label = f"{loop} ({'replayed' if r['replayed'] else 'TensorFlow'})" \
                if loop == "backward" else loop
            lines.append(f"| {workload} | {b} | {label} | {r['launches']} | "
                         + " | ".join(str(counts[k]) for k in KINDS)
                         + f" | {sum(counts.values())} |")
    return "\n".join(lines)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="treelstm,bilstm")
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--loop-vars", help="extra loop variables to time, e.g. 0,8,16 "
                                            "(only that)")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    if args.loop_vars:
        cost = loop_variable_cost([int(k) for k in args.loop_vars.split(",")], args.rounds)
        print("| extra loop variables | us per iteration |\n|---|---|")
        for k, us in cost.items():
            print(f"| {k} | {us:.1f} |")
        return cost
    results = {(w, args.batch_size): train_step_census(w, args.batch_size)
               for w in args.workloads.split(",")}
    print(f"Graph nodes per loop iteration of `Model.fit`'s training step, batch "
          f"{args.batch_size} (a loop variable: 4 nodes an iteration once lowered)")
    print(census_table(results))
    return results


if __name__ == "__main__":
    main()
