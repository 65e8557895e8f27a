"""sst-synth TreeLSTM throughput: the engine beside eager and hand-batched TensorFlow.

Run: `python -m benchmarks.treelstm` (add `--quick` for a short run). It prints a
markdown table of trees/s for training (forward, backward, plain SGD) and
inference at each batch size, for:

- `engine-agenda`, `engine-depth`: Refold's Compiler on random sst-synth trees,
  including the per-batch Python work (merge cached graphs, schedule, pack; every
  batch is planned once before timing, so graphs are cached as from epoch 2 on);
- `engine-same`: the engine on same-shape trees (what the hand-batched program gets);
- `hand-batched`: a level-by-level TensorFlow program for same-shape trees (19
  leaves), unrolled in Python with static indices: the manual-batching ceiling;
- `eager`: per-example eager TensorFlow recursion, no batching.

All variants share one set of weights, so they compute the same function. Ratios
within one run are the reliable figures on a shared machine.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from benchmarks.common import report, sgd_apply, throughput
from benchmarks.workloads import (
    CLASSES,
    TreeLSTMModel,
    count_nodes,
    same_shape_trees,
    sst_synth_tree,
)

# the ratio rows of the results table: (numerator, denominator, label)
RATIOS = [("engine-same", "hand-batched", "engine-same ÷ hand-batched")] + [
    (name, "hand-batched", f"{name} (random shapes) ÷ hand-batched")
    for name in ("engine-agenda", "engine-depth")]


def _tf():
    import tensorflow as tf
    return tf




class EngineVariant:
    """The engine: plan in Python, then one traced train or inference step."""

    def __init__(self, model: TreeLSTMModel, scheduler: str, lr: float = 0.01):
        tf = _tf()
        from refold.blocks.types import TensorType
        from refold.compiler import Compiler
        self.compiler = Compiler.create(model.block, scheduler=scheduler)
        self.k_logits = self.compiler.program.type_id[TensorType((CLASSES,))]
        variables = model.variables
        ex = self.compiler.executor
        signature = ex.input_signature()
        k = self.k_logits

        @tf.function(input_signature=[signature, tf.TensorSpec([None], tf.int32)],
                     autograph=False)
        def train(arrays, labels):
            with tf.GradientTape() as tape:
                logits = ex.compute(arrays)[k]
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                    labels=labels, logits=logits))
            sgd_apply(variables, tape.gradient(loss, variables), lr)
            return loss

        @tf.function(input_signature=[signature], autograph=False)
        def infer(arrays):
            return ex.compute(arrays)[k]

        self.train_fn, self.infer_fn = train, infer

    def train(self, trees, labels):
        plan = self.compiler.plan(trees)
        return self.train_fn(plan.feed.arrays, labels)

    def infer(self, trees):
        plan = self.compiler.plan(trees)
        return self.infer_fn(plan.feed.arrays)

    def train_stream(self, batches, labels):
        """Trains on each batch in turn, planning the next one in a background thread
        (`Compiler.plan_batches(..., ahead=1)`), as `Model.fit`'s input pipeline does."""
        for plan, y in zip(self.compiler.plan_batches(batches, ahead=1), labels):
            loss = self.train_fn(plan.feed.arrays, y).numpy()
        return loss

    def infer_stream(self, batches):
        for plan in self.compiler.plan_batches(batches, ahead=1):
            logits = self.infer_fn(plan.feed.arrays).numpy()
        return logits


class HandBatched:
    """Level-by-level TreeLSTM for batches of trees of one shape (static indices)."""

    def __init__(self, model: TreeLSTMModel, shape_tree, lr: float = 0.01):
        tf = _tf()
        # Number the nodes of the shape: leaves first (left to right), then internal
        # nodes by height; children are given as (level, position) pairs.
        leaves, levels = [], []

        def walk(t):
            if not isinstance(t, tuple):
                leaves.append(t)
                return 0, len(leaves) - 1
            (hl, pl), (hr, pr) = walk(t[0]), walk(t[1])
            h = max(hl, hr) + 1
            while len(levels) < h:
                levels.append([])
            levels[h - 1].append(((hl, pl), (hr, pr)))
            return h, len(levels[h - 1]) - 1

        walk(shape_tree)
        self.n_leaves = len(leaves)
        m = model
        variables = m.variables

        def forward(words, batch):
            # words: [n_leaves * batch], row = leaf * batch + tree
            h, c = m.leaf(m.embedding(words))
            per_level = [(h, c)]
            offsets = [0]
            for level in levels:
                all_h = tf.concat([x[0] for x in per_level], 0)
                all_c = tf.concat([x[1] for x in per_level], 0)
                sizes = [0]
                total = 0
                for i in range(len(per_level)):
                    sizes.append(total)
                    total += (self.n_leaves if i == 0 else len(levels[i - 1]))
                rows_l = [(sizes[lv + 1] + p) for (lv, p), _ in level]
                rows_r = [(sizes[lv + 1] + p) for _, (lv, p) in level]
                b = tf.range(batch)
                idx_l = tf.reshape(tf.constant(rows_l)[:, None] * batch + b[None], [-1])
                idx_r = tf.reshape(tf.constant(rows_r)[:, None] * batch + b[None], [-1])
                state_l = (tf.gather(all_h, idx_l), tf.gather(all_c, idx_l))
                state_r = (tf.gather(all_h, idx_r), tf.gather(all_c, idx_r))
                per_level.append(m.cell(state_l, state_r))
                offsets.append(0)
            root_h = per_level[-1][0]
            return m.output(root_h)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.int32),
                                      tf.TensorSpec([None], tf.int32)], autograph=False)
        def train(words, labels):
            batch = tf.size(labels)
            with tf.GradientTape() as tape:
                logits = forward(words, batch)
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                    labels=labels, logits=logits))
            sgd_apply(variables, tape.gradient(loss, variables), lr)
            return loss

        @tf.function(input_signature=[tf.TensorSpec([None], tf.int32),
                                      tf.TensorSpec([], tf.int32)], autograph=False)
        def infer(words, batch):
            return forward(words, batch)

        self.train_fn, self.infer_fn = train, infer

    @staticmethod
    def words(trees) -> np.ndarray:
        per_tree = []
        for t in trees:
            out, stack = [], [t]
            while stack:  # left-to-right leaves
                x = stack.pop()
                if isinstance(x, tuple):
                    stack.extend((x[1], x[0]))
                else:
                    out.append(x)
            per_tree.append(out)
        return np.asarray(per_tree, np.int32).T.reshape(-1)  # row = leaf * batch + tree

    def train(self, trees, labels):
        return self.train_fn(self.words(trees), labels)

    def infer(self, trees):
        return self.infer_fn(self.words(trees), np.int32(len(trees)))


class Eager:
    """Per-example eager recursion with the same layers: no batching at all."""

    def __init__(self, model: TreeLSTMModel, lr: float = 0.01):
        self.m, self.lr = model, lr

    def _encode(self, t):
        tf = _tf()
        m = self.m
        if isinstance(t, tuple):
            return m.cell(self._encode(t[0]), self._encode(t[1]))
        # A plain gather keeps the table's gradient sparse; the Keras layer's lookup
        # gives a dense [vocab, 300] gradient per leaf in eager mode (tens of GB at B=64).
        table = getattr(m.embedding.embeddings, "value", m.embedding.embeddings)
        return m.leaf(tf.gather(table, tf.constant([t], tf.int32)))

    def infer(self, trees):
        return [self.m.output(self._encode(t)[0]) for t in trees]

    def train(self, trees, labels):
        tf = _tf()
        variables = self.m.variables
        with tf.GradientTape() as tape:
            logits = tf.concat(self.infer(trees), 0)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=labels, logits=logits))
        sgd_apply(variables, tape.gradient(loss, variables), self.lr)
        return loss




def _pair_fns(engine, hand, mode: str, batches: list, labels: list) -> dict:
    """{"inline" | "ahead": (engine call, hand-batched call, batches per call)}."""
    trees, y = batches[0], labels[0]
    if mode == "train":
        return {"inline": (lambda: engine.train(trees, y).numpy(),
                           lambda: hand.train(trees, y).numpy(), 1),
                "ahead": (lambda: engine.train_stream(batches, labels),
                          lambda: [hand.train(t, v).numpy() for t, v in zip(batches, labels)],
                          len(batches))}
    return {"inline": (lambda: engine.infer(trees).numpy(),
                       lambda: hand.infer(trees).numpy(), 1),
            "ahead": (lambda: engine.infer_stream(batches),
                      lambda: [hand.infer(t).numpy() for t in batches], len(batches))}


def paired(sizes, reps: int, model, shape, rng, stream: int = 4) -> dict:
    """Engine (same-shape trees, planning included) and hand-batched steps, call after
    call: per batch size, the median per-pair time ratio. Pairing makes the ratio
    robust to the neighbours' load drifting during the run.

    Two engine figures: `inline`, planning each batch just before its step (one
    batch, repeated); `ahead`, a stream of `stream` batches planned one ahead in a
    background thread, as `Model.fit` feeds its steps, against the hand-batched
    program on the same stream.
    """
    engine, hand = EngineVariant(model, "agenda"), HandBatched(model, shape)
    out = {}
    for b in sizes:
        batches = [[_reshape_like(shape, None, rng) for _ in range(b)] for _ in range(stream)]
        labels = [rng.integers(0, CLASSES, b).astype(np.int32) for _ in range(stream)]
        row = {}
        for mode in ("train", "infer"):
            pairs = _pair_fns(engine, hand, mode, batches, labels)
            for how, (e_fn, h_fn, n_batches) in pairs.items():
                e_fn(), h_fn()
                ratios, e_times = [], []
                for _ in range(reps):
                    t0 = time.perf_counter()
                    e_fn()
                    t1 = time.perf_counter()
                    h_fn()
                    t2 = time.perf_counter()
                    ratios.append((t2 - t1) / (t1 - t0))  # engine speed / hand speed
                    e_times.append((t1 - t0) / n_batches)
                row[f"{mode}_{how}"] = (float(np.median(ratios)),
                                        b / float(np.median(e_times)))
        out[b] = row
        print(f"B={b:4d} engine ÷ hand-batched (same shape, paired median of {reps}): "
              + ", ".join(f"{key.replace('_', ' ')} {r:.2f} ({s:.0f} trees/s)"
                          for key, (r, s) in row.items()), flush=True)
    return out


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-sizes", default="1,16,64,256")
    parser.add_argument("--seconds", type=float, default=4.0, help="per measurement")
    parser.add_argument("--variants", default="engine-agenda,engine-depth,engine-same,"
                        "hand-batched,eager")
    parser.add_argument("--quick", action="store_true", help="short run (1.5 s each)")
    parser.add_argument("--eager-max-batch", type=int, default=64,
                        help="skip eager above this batch size (it runs ~10 trees/s)")
    parser.add_argument("--paired", type=int, default=0, metavar="REPS",
                        help="instead: engine vs hand-batched, call after call, REPS pairs")
    parser.add_argument("--leaves", type=int, default=19,
                        help="leaves of the one shape of the same-shape trees (hand-batched, "
                             "engine-same); fewer make a smoke test's trace cheaper")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    seconds = 1.5 if args.quick else args.seconds
    sizes = [int(b) for b in args.batch_sizes.split(",")]
    variants = args.variants.split(",")
    tf = _tf()
    rng = np.random.default_rng(0)
    model = TreeLSTMModel(seed=0)
    shape = sst_synth_tree(np.random.default_rng(1), args.leaves)
    if args.paired:
        return paired(sizes, args.paired, model, shape, rng)
    runners = {}
    if "engine-agenda" in variants:
        runners["engine-agenda"] = EngineVariant(model, "agenda")
    if "engine-depth" in variants:
        runners["engine-depth"] = EngineVariant(model, "depth")
    if "engine-same" in variants:
        runners["engine-same"] = EngineVariant(model, "agenda")
    if "hand-batched" in variants:
        runners["hand-batched"] = HandBatched(model, shape)
    if "eager" in variants:
        runners["eager"] = Eager(model)
    results: dict = {"train": {}, "infer": {}, "nodes_per_tree": None}
    random_trees = [sst_synth_tree(rng) for _ in range(max(sizes) * 4)]
    results["nodes_per_tree"] = float(np.mean([count_nodes(t) for t in random_trees]))
    for b in sizes:
        n_batches = max(1, min(8, 1024 // b))
        rand = [random_trees[(i * b) % len(random_trees):][:b] for i in range(n_batches)]
        rand = [r if len(r) == b else random_trees[:b] for r in rand]
        same = [same_shape_trees(rng, b, args.leaves) for _ in range(min(n_batches, 4))]
        for i in range(len(same)):  # one shape for all same-shape batches
            same[i] = [_reshape_like(shape, t, rng) for t in same[i]]
        labels = [rng.integers(0, CLASSES, b).astype(np.int32) for _ in range(n_batches)]
        for name, runner in runners.items():
            eager = name == "eager"
            if eager and b > args.eager_max_batch:
                continue
            secs = seconds / 2 if eager and b > 16 else seconds
            kw = {"min_calls": 1, "warm_up": None, "rounds": 1} if eager else {}
            batches = same if name in ("hand-batched", "engine-same") else rand
            data = [(x, labels[i % len(labels)]) for i, x in enumerate(batches)]
            kw["size"] = lambda d: len(d[0])
            tr = throughput(lambda d, r=runner: r.train(d[0], d[1]), data, secs, **kw)
            inf = throughput(lambda d, r=runner: r.infer(d[0]), data, secs, **kw)
            results["train"].setdefault(name, {})[b] = tr
            results["infer"].setdefault(name, {})[b] = inf
            print(f"B={b:4d} {name:14s} train {tr:8.1f}  infer {inf:8.1f} trees/s", flush=True)
    del tf
    return report(results, sizes, RATIOS, args.json)


def _reshape_like(shape, tree, rng):
    if isinstance(shape, tuple):
        return (_reshape_like(shape[0], None, rng), _reshape_like(shape[1], None, rng))
    from benchmarks.workloads import VOCAB
    return int(rng.integers(0, VOCAB))




if __name__ == "__main__":
    main()
