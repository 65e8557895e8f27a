"""Ablations: a model-zoo choice against its alternatives, paired in one process.

Run: `python -m benchmarks.ablations
[--only rowlists,conds,cells,bidirectional,weightgrads,fusedcells,xla,
fitweightgrads,xlaweightgrads,replay,projection,transpose,outer,executor,grugates]
[--rounds N]
[--batch-sizes 16,64]`.
Every variant is built on the same weights and batch; the calls of all variants
are interleaved round after round (each round in another order), and the median
time per call counts, so the machine's load drifts over all of them alike.

- `rowlists`: how the engine's loop moves a launch's values when it has one op
  (`Executor(row_lists=...)`): one row list per argument and per output (the
  default), or the rows of a value type stacked (one gather then a split, one
  concat of the outputs then one write). Engine (both) and hand-batched program
  on the same weights, sst-synth, same-shape trees, train and inference steps
  (planning not included).
- `conds`: a `tf.cond(n > 0, ...)` around every launch outside the loop (the
  engine before ops said `handles_empty`) against none (the engine now: the
  TreeLSTM's ops all handle zero rows, so every head, step-0 and tail launch runs
  unconditionally, the binary cell's empty step-0 launch included) and against
  one on the middle ops' step-0 launches only (the ones that are empty here).
  Engine only, sst-synth, same-shape trees, train and inference steps (planning
  not included), each variant on several engines (`--instances`); the last
  columns are medians of per-round ratios.
- `cells`: how the TreeLSTM cells cut their gate pre-activations into gates
  (`models.gates.cut_gates`): strided slices, `tf.split` (the zoo's choice), or
  strided slices with a one-concat custom gradient. Engine and hand-batched
  program, sst-synth, same-shape trees, train and inference steps (planning not
  included).
- `weightgrads`: the weight gradients of the loop's ops taken once per step,
  batched over all their nodes (`Executor(batched_weight_grads=True)`), against
  TensorFlow's, taken in every iteration of the backward loop (the default).
  Training steps of the sst-synth TreeLSTM (same-shape trees, loss at the root)
  and of the bilstm tagger (loss at every word), planning not included, each
  variant on several engines (`--instances`), at `--batch-sizes`; the last
  column is the median of per-round ratios.
- `fusedcells`: the TreeLSTM and LSTM cells as the zoo writes them (`bias_add`
  and the memory update with its own gradient, `models.gates.lstm_memory`)
  against the same cells on autodiff (a Dense layer's broadcasting bias, the
  gate arithmetic op by op; the cells before the change). Train and inference
  steps (planning not included) of the sst-synth TreeLSTM (same-shape trees,
  loss at the root) and of the bilstm tagger, and whole TreeLSTM `Model.fit` /
  `Model.predict` calls (random trees, 32 per call at batch 1, 128 at 16, 256 at
  64; the rows "TreeLSTM fit", ms per call), at `--batch-sizes`; the ratio columns
  are medians of per-round ratios. `--cpu-time` times the calls by the process's
  CPU time rather than wall time (less disturbed by other jobs).
- `xla`: `Model.fit` with `jit_compile=True` (`compiler.feeding.xla_buckets`: batches padded to
  buckets, one XLA program per bucket) against `jit_compile=False` (the default
  graph-mode step), whole `fit(epochs=1)` calls on the sst-synth TreeLSTM (loss at the
  root, random trees, 32 per call at batch 1, 128 at 16, 256 at 64, `shuffle=False`
  so that every call meets the buckets the warm-up call compiled) at `--batch-sizes`;
  also the warm-up calls (tracing and XLA compilation), the buckets compiled, the
  compilation seconds per bucket (the warm-up's difference over the buckets), and whole
  `predict` calls on the same trees likewise.
- `fitweightgrads`: the loop's weight gradients once per step (`Model.weight_grads`
  forced on for every batch) against once per backward iteration (forced off), whole
  `Model.fit(epochs=1, shuffle=False)` calls on the sst-synth TreeLSTM (random trees,
  loss at the root) and the bilstm tagger (loss at every word), 32 items per call at
  batch 1, 128 at 16, 256 at 64, after a warm-up call each; SGD; `--instances`
  models per variant; the ratio column is the median of per-round ratios.
  `xlaweightgrads`: the same under XLA (`jit_compile=True`,
  `XlaExecutor(batched_weight_grads=...)`), after warm-up calls that compile.
- `replay`: a training batch's loop backward pass replayed by the engine
  (`scheduler.reverse`, with the weight gradients once per step: what `Model`
  chooses for batches of small launches) against TensorFlow's gradient of the
  loop with the weight gradients once per step (`Model.weight_grads.replay =
  False`) and with them in every backward iteration (`max_rows = 0`), each forced
  for every batch; whole `Model.fit` calls as in `fitweightgrads` (and the char
  tagger's, four ops in its loop); the ratio columns are medians of per-round
  ratios to the replayed variant.
- `bidirectional`: the bilstm tagger with `encoders.bidirectional` (both cells as
  one `rnn_cells.CellPair`) against the same encoder written as two RNNs, and the
  padded Keras BiLSTM, train and inference steps (planning included).
- `projection`: the bilstm tagger with its LSTMs' input projection `x W + b` run
  before the loop over every word of the batch (`rnn_cells.InputProjection`, what
  `encoders.bidirectional` builds) against the cells whole in the loop; whole
  `Model.fit` and `Model.predict` calls; ratios are medians of per-round ratios.
- `transpose`: the TreeLSTM's (the zoo's cells, and a user's `td.Function`s over
  Keras `Dense` layers) and the bilstm tagger's training with the gradient of the
  loop's weight products `h U` taking U transposed once per step
  (`scheduler.loop_products`) against TensorFlow's
  `transpose_b` product in every backward iteration; whole `Model.fit` calls.
- `outer`: the TreeLSTM's and the tagger's training with the weight gradients of a
  loop op's launch before the loop taken by the tap with its loop launches' (one
  weight-sized gradient per op; `scheduler.executor.TAP_OUTER_LAUNCHES`) against
  TensorFlow's gradient for that launch, added to the tap's; batches that replay
  their loop (10 rows a launch or fewer); whole `Model.fit` calls.
- `executor`: the TreeLSTM's and the tagger's inference with the executor chosen per
  batch (`compiler.training.tf_executor`: TensorFlow's single-threaded one for batches
  of small loop launches) against TensorFlow's default executor always; whole
  `Model.predict` calls.
- `grugates`: the bilstm tagger on GRU cells, their gated products `r * (h U_n)`
  and `z * h + (1 - z) * n` with their own gradients (`models.gates.product`,
  `interpolate`: what `GRUCell` does) against autodiff's, which builds the
  broadcasting machinery in the loop; whole `Model.fit` calls.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import time

import numpy as np


@contextlib.contextmanager
def _patched(module, name: str, value):
    old = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, old)


def _rounds(fns: dict, rounds: int, clock=time.perf_counter) -> dict:
    """ms of each call of each function, calls interleaved round after round; round
    r starts at the r-th function (mod their number), odd rounds run backwards.
    `clock`: wall time by default; `time.process_time` counts the CPU time of this
    process's threads, which other jobs on a shared machine disturb less."""
    for f in fns.values():
        f()
    keys = list(fns)
    times: dict = {k: [] for k in fns}
    for r in range(rounds):
        order = keys[r % len(keys):] + keys[:r % len(keys)]
        for k in order if r % 2 == 0 else order[::-1]:
            t = clock()
            fns[k]()
            times[k].append((clock() - t) * 1e3)
    return times


def _interleaved(fns: dict, rounds: int) -> dict:
    """Median ms per call of each function, calls interleaved round after round."""
    return {k: float(np.median(v)) for k, v in _rounds(fns, rounds).items()}


def _treelstm_batch(batch: int, leaves: int = 19):
    """(shape tree, same-shape trees, labels) of the sst-synth TreeLSTM ablations
    (`leaves`: of the one shape; fewer make a smoke test's hand-batched trace cheaper)."""
    from benchmarks.treelstm import _reshape_like
    from benchmarks.workloads import CLASSES, sst_synth_tree
    rng = np.random.default_rng(0)
    shape = sst_synth_tree(np.random.default_rng(1), leaves)
    trees = [_reshape_like(shape, None, rng) for _ in range(batch)]
    return shape, trees, rng.integers(0, CLASSES, batch).astype(np.int32)


def rowlists(batch: int, rounds: int, leaves: int = 19) -> dict:
    """ms per step of the engine's loop with row lists and with stacked rows."""
    from benchmarks.treelstm import EngineVariant, HandBatched
    from benchmarks.workloads import TreeLSTMModel
    shape, trees, labels = _treelstm_batch(batch, leaves)
    model = TreeLSTMModel(seed=0)
    hand = HandBatched(model, shape)
    words = hand.words(trees)
    fns = {("hand", "train"): lambda: hand.train_fn(words, labels).numpy(),
           ("hand", "infer"): lambda: hand.infer_fn(words, np.int32(batch)).numpy()}
    variants = {"row lists (default)": True, "stacked": False}
    for name, lists in variants.items():
        engine = EngineVariant(model, "agenda")
        ex = engine.compiler.executor
        assert isinstance(ex.row_lists, bool), "Executor has no row_lists setting"
        ex.row_lists = lists  # read when the step is traced
        arrays = engine.compiler.plan(trees).feed.arrays
        fns[(name, "train")] = lambda e=engine, a=arrays: e.train_fn(a, labels).numpy()
        fns[(name, "infer")] = lambda e=engine, a=arrays: e.infer_fn(a).numpy()
    ms = _interleaved(fns, rounds)
    print(f"\n## engine loop, row lists or stacked: ms per step, sst-synth TreeLSTM, B={batch}"
          f" (median of {rounds})")
    print("| engine | train | infer | hand-batched ÷ engine, train / infer |")
    print("|---|---|---|---|")
    for name in variants:
        tr, inf = ms[(name, "train")], ms[(name, "infer")]
        print(f"| {name} | {tr:.2f} | {inf:.2f} | {ms[('hand', 'train')] / tr:.2f} / "
              f"{ms[('hand', 'infer')] / inf:.2f} |")
    print(f"| (hand-batched) | {ms[('hand', 'train')]:.2f} | {ms[('hand', 'infer')]:.2f} | |",
          flush=True)
    return {f"{n} / {m}": v for (n, m), v in ms.items()}


def conds(batch: int, rounds: int, instances: int = 3, leaves: int = 19) -> dict:
    """ms per step of the engine with and without the conds around its launches
    outside the loop.

    Two engines of the same code in one process can differ by ~5% for as long as they
    live (measured: an A/A pair, B=1), which is more than the effect measured here;
    so each variant is built `instances` times, in a rotated order, and a round's
    time of a variant is the mean over its instances.
    """
    from types import SimpleNamespace

    from benchmarks.treelstm import EngineVariant
    from benchmarks.workloads import TreeLSTMModel
    _, trees, labels = _treelstm_batch(batch, leaves)
    model = TreeLSTMModel(seed=0)

    def guard(ex, which):
        """The executor's ops `which` as if they failed on zero rows (read when traced)."""
        assert isinstance(ex.ops[0].handles_empty, bool), "ops have no handles_empty"
        ex.ops = [SimpleNamespace(**{**vars(op), "handles_empty": False}) if o in which
                  else op for o, op in enumerate(ex.ops)]

    base = "tf.cond on every launch (before)"
    variants = {base: lambda lay: range(lay.n_ops),
                "no tf.cond (engine: every op handles zero rows)": lambda lay: (),
                "tf.cond on the middle ops only": lambda lay: lay.middle_ops}
    names = list(variants)
    fns = {}
    for i in range(instances):
        for name in _turn(names, i):
            engine = EngineVariant(model, "agenda")
            ex = engine.compiler.executor
            guard(ex, set(variants[name](ex.layout)))
            arrays = engine.compiler.plan(trees).feed.arrays
            fns[(name, i, "train")] = lambda e=engine, a=arrays: e.train_fn(a, labels).numpy()
            fns[(name, i, "infer")] = lambda e=engine, a=arrays: e.infer_fn(a).numpy()
    raw = _rounds(fns, rounds)
    times = {(n, m): np.mean([raw[(n, i, m)] for i in range(instances)], axis=0)
             for n in names for m in ("train", "infer")}
    print(f"\n## launches outside the loop, with or without tf.cond: ms per step, sst-synth "
          f"TreeLSTM, B={batch} (median of {rounds}, {instances} engines each)")
    print("| launches outside the loop | train | infer | ÷ tf.cond on every launch, "
          "train / infer |")
    print("|---|---|---|---|")
    for name in names:
        ratios = [float(np.median(times[(name, m)] / times[(base, m)]))
                  for m in ("train", "infer")]
        print(f"| {name} | {np.median(times[(name, 'train')]):.2f} | "
              f"{np.median(times[(name, 'infer')]):.2f} | "
              f"{ratios[0]:.3f} / {ratios[1]:.3f} |", flush=True)
    return {f"{n} / {m}": float(np.median(v)) for (n, m), v in times.items()}


def gate_cuts() -> dict:
    """name -> `cut(z, n_gates)`: the ways of cutting gates compared."""
    import tensorflow as tf

    def slices(z, n):
        width = z.shape[1] // n
        return [z[:, g * width:(g + 1) * width] for g in range(n)]

    def slices_concat_gradient(z, n):
        @tf.custom_gradient
        def cut(z):
            def grad(*d_gates):
                return tf.concat([tf.zeros_like(g) if d is None else d
                                  for g, d in zip(gates, d_gates)], axis=1)
            gates = slices(z, n)
            return gates, grad
        return cut(z)

    return {"strided slices": slices, "tf.split (zoo)": lambda z, n: tf.split(z, n, axis=1),
            "slices, concat gradient": slices_concat_gradient}


def cells(batch: int, rounds: int, leaves: int = 19) -> dict:
    """ms per step of engine and hand-batched TreeLSTM with each gate cut."""
    from benchmarks.treelstm import EngineVariant, HandBatched
    from benchmarks.workloads import TreeLSTMModel
    from refold.models import gates
    shape, trees, labels = _treelstm_batch(batch, leaves)
    fns = {}
    for name, cut in gate_cuts().items():
        # the cells look the cut up when traced: trace every step under the patch
        with _patched(gates, "cut_gates", cut):
            model = TreeLSTMModel(seed=0)
            engine, hand = EngineVariant(model, "agenda"), HandBatched(model, shape)
            arrays = engine.compiler.plan(trees).feed.arrays
            words = hand.words(trees)
            steps = {
                "engine train": lambda e=engine, a=arrays: e.train_fn(a, labels).numpy(),
                "hand train": lambda h=hand, w=words: h.train_fn(w, labels).numpy(),
                "engine infer": lambda e=engine, a=arrays: e.infer_fn(a).numpy(),
                "hand infer": lambda h=hand, w=words: h.infer_fn(w, np.int32(batch)).numpy()}
            for step_name, f in steps.items():
                f()  # traced here
                fns[(name, step_name)] = f
    ms = _interleaved(fns, rounds)
    print(f"\n## gate cuts: ms per step, sst-synth TreeLSTM, B={batch} (median of {rounds})")
    cols = ["engine train", "hand train", "engine infer", "hand infer"]
    print("| cut | " + " | ".join(cols) + " | engine ÷ hand train / infer |")
    print("|---" * (len(cols) + 2) + "|")
    for name in gate_cuts():
        row = [ms[(name, c)] for c in cols]
        print(f"| {name} | " + " | ".join(f"{x:.2f}" for x in row)
              + f" | {row[1] / row[0]:.2f} / {row[3] / row[2]:.2f} |", flush=True)
    return {f"{n} / {c}": v for (n, c), v in ms.items()}


def bidirectional(batch_sizes: list, rounds: int) -> dict:
    """ms per step of the bilstm tagger: one CellPair, two RNNs, padded Keras."""
    import refold as td
    from benchmarks import bilstm
    from refold.models import heads
    model = bilstm.TaggerModel(seed=0)
    words = td.GetItem("words") >> td.Map(td.Scalar("int32") >> model.embedding)
    two_rnns = td.AllOf(
        td.RNN(model.forward) >> td.GetItem(0),
        td.Slice(step=-1) >> td.RNN(model.backward) >> td.GetItem(0) >> td.Slice(step=-1),
    ) >> td.Zip() >> td.Map(td.Concat())

    class TwoRNNs:  # the same weights, the encoder written as two RNNs
        block = heads.tagger(words >> two_rnns, bilstm.TAGS, tags="tags",
                             logits_layer=model.output)
        variables = model.variables

    runners = {"CellPair": bilstm.Engine(model), "two RNNs": bilstm.Engine(TwoRNNs()),
               "Keras padded": bilstm.KerasPadded(model)}
    rng = np.random.default_rng(0)
    out = {}
    print(f"\n## bidirectional encoder: ms per step (median of {rounds})")
    print("| B | " + " | ".join(f"{n} train / infer" for n in runners)
          + " | CellPair ÷ two RNNs, train / infer |")
    print("|---" * (len(runners) + 2) + "|")
    for b in batch_sizes:
        batch = [bilstm.sentence(rng) for _ in range(b)]
        fns = {}
        for name, r in runners.items():
            fns[(name, "train")] = lambda r=r, x=batch: np.asarray(r.train(x))
            fns[(name, "infer")] = lambda r=r, x=batch: _fetch(r.infer(x))
        ms = _interleaved(fns, rounds)
        out[b] = {f"{n} / {m}": v for (n, m), v in ms.items()}
        cells_ = " | ".join(f"{ms[(n, 'train')]:.1f} / {ms[(n, 'infer')]:.1f}" for n in runners)
        print(f"| {b} | {cells_} | {ms[('two RNNs', 'train')] / ms[('CellPair', 'train')]:.2f}"
              f" / {ms[('two RNNs', 'infer')] / ms[('CellPair', 'infer')]:.2f} |", flush=True)
    return out


def weightgrads(batch_sizes: list, rounds: int, instances: int = 2) -> dict:
    """ms per training step with the loop's weight gradients once per step (batched)
    and once per iteration (TensorFlow's), TreeLSTM and bilstm tagger."""
    from benchmarks import bilstm
    from benchmarks.treelstm import EngineVariant
    variants = {"once per step": True, "every iteration (default)": False}
    out = {}
    print(f"\n## weight gradients of the loop's ops: ms per training step (median of "
          f"{rounds}, {instances} engines each)")
    print("| workload | B | once per step | every iteration | every ÷ once |")
    print("|---|---|---|---|---|")
    for b in batch_sizes:
        trees, labels, sentences, tree_model, tagger_model = _two_workloads(b)
        fns = {}
        for i in range(instances):
            for name in _turn(list(variants), i):
                tree = EngineVariant(tree_model, "agenda")
                tree.compiler.executor.batched_weight_grads = variants[name]  # read when traced
                arrays = tree.compiler.plan(trees).feed.arrays
                fns[("TreeLSTM", name, i)] = \
                    lambda e=tree, a=arrays, y=labels: e.train_fn(a, y).numpy()
                tagger = bilstm.Engine(tagger_model)
                tagger.compiler.executor.batched_weight_grads = variants[name]
                plan = tagger.compiler.plan(sentences, grouped=True)
                bounds = plan.metric_bounds(tagger.compiler.program)[tagger.loss_id]
                fns[("tagger", name, i)] = \
                    lambda e=tagger, a=plan.feed.arrays, bd=bounds: e.train_fn(a, bd).numpy()
        _once_every_rows(_rounds(fns, rounds), list(variants), instances, b, 1, out)
    return out


def _once_every_rows(raw: dict, variants: list, instances: int, b: int, per: int,
                     out: dict) -> None:
    """The weight-gradient ablations' rows at batch `b`: per workload, each variant's
    (`variants`: once per step, then every iteration) ms per call over `per` (averaged
    over its instances, median over rounds) and the median of per-round ratios."""
    for work in ("TreeLSTM", "tagger"):
        t = {v: np.mean([raw[(work, v, i)] for i in range(instances)], axis=0) / per
             for v in variants}
        once, every = t[variants[0]], t[variants[1]]
        ratio = float(np.median(every / once))
        out[(work, b)] = {"once": float(np.median(once)), "every": float(np.median(every)),
                          "every / once": ratio}
        print(f"| {work} | {b} | {np.median(once):.2f} | {np.median(every):.2f} | "
              f"{ratio:.3f} |", flush=True)


def _autodiff_nary_call(self, *args):
    """`NaryTreeLSTMCell._call` before `lstm_memory`: Dense, then op by op."""
    import tensorflow as tf

    from refold.models import gates
    from refold.models.nodes import split_node_args
    x, states = split_node_args(args, self.num_children, self.input_size)
    hs, cs = [s[0] for s in states], [s[1] for s in states]
    inputs = ([x] if x is not None else []) + hs
    z = self._dense(inputs[0] if len(inputs) == 1 else tf.concat(inputs, axis=1))
    i, o, u, *f = gates.cut_gates(z, 3 + len(cs))
    c = tf.sigmoid(i) * tf.tanh(u)
    for f_k, c_k in zip(f, cs):
        c = c + tf.sigmoid(f_k) * c_k
    return tf.sigmoid(o) * tf.tanh(c), c


def _two_workloads(b: int) -> tuple:
    """A batch of `b` sst-synth trees with labels, `b` tagger sentences, and a fresh
    TreeLSTM and tagger model (the weight-gradient and fused-cell ablations)."""
    from benchmarks import bilstm
    from benchmarks.workloads import TreeLSTMModel
    _, trees, labels = _treelstm_batch(b)
    sentences = [bilstm.sentence(np.random.default_rng(i)) for i in range(b)]
    return trees, labels, sentences, TreeLSTMModel(seed=0), bilstm.TaggerModel(seed=0)


def _autodiff_lstm_call(self, x, state):
    """`LSTMCell._call` before `lstm_memory`: the cell's op-by-op path for any activation."""
    x, h, c, kernel, recurrent_kernel, bias = self._computed(
        x, *state, self.kernel, self.recurrent_kernel, self.bias)
    return self._op_by_op(x @ kernel + h @ recurrent_kernel + bias, c)


def _treelstm_fit_predict(b: int) -> tuple:
    """Whole `Model.fit(epochs=1)` and `Model.predict` calls of the sst-synth TreeLSTM
    (random trees, 32 per call at batch 1, 128 at 16, 256 at 64), each run once
    here (traced)."""
    import keras

    from benchmarks.workloads import CLASSES, TreeLSTMModel, sst_synth_tree
    from refold.compiler import Model
    rng = np.random.default_rng(0)
    n = {1: 32, 16: 128}.get(b, 256)
    trees = [sst_synth_tree(rng) for _ in range(n)]
    labels = rng.integers(0, CLASSES, n).astype(np.int32)
    model = Model(TreeLSTMModel(seed=0).block)
    model.compile(optimizer=keras.optimizers.SGD(0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    fit = functools.partial(model.fit, trees, labels, batch_size=b, epochs=1, verbose=0,
                            shuffle=False)
    predict = functools.partial(model.predict, trees, batch_size=b, verbose=0)
    fit()
    predict()
    return fit, predict


def fusedcells(batch_sizes: list, rounds: int, cpu_time: bool = False) -> dict:
    """ms per step of the TreeLSTM and the tagger, cells fused or on autodiff."""
    from benchmarks import bilstm
    from benchmarks.treelstm import EngineVariant
    from refold.models import rnn_cells, tree_lstm
    variants = ("fused (zoo)", "autodiff (before)")
    out = {}
    print(f"\n## fused cells: {'CPU' if cpu_time else 'wall'} ms per step (median of {rounds})")
    print("| workload | B | fused train / infer | autodiff train / infer "
          "| autodiff ÷ fused, train / infer |")
    print("|---|---|---|---|---|")
    for b in batch_sizes:
        trees, labels, sentences, tree_model, tagger_model = _two_workloads(b)
        fns = {}
        for name in variants:
            fused = name == variants[0]
            with _patched(tree_lstm.NaryTreeLSTMCell, "_call",
                          tree_lstm.NaryTreeLSTMCell._call if fused else _autodiff_nary_call), \
                    _patched(rnn_cells.LSTMCell, "_call",
                             rnn_cells.LSTMCell._call if fused else _autodiff_lstm_call):
                tree = EngineVariant(tree_model, "agenda")
                arrays = tree.compiler.plan(trees).feed.arrays
                tagger = bilstm.Engine(tagger_model)
                plan = tagger.compiler.plan(sentences, grouped=True)
                bounds = plan.metric_bounds(tagger.compiler.program)[tagger.loss_id]
                steps = {
                    ("TreeLSTM", "train"):
                        lambda e=tree, a=arrays, y=labels: e.train_fn(a, y).numpy(),
                    ("TreeLSTM", "infer"): lambda e=tree, a=arrays: e.infer_fn(a).numpy(),
                    ("tagger", "train"):
                        lambda e=tagger, a=plan.feed.arrays, bd=bounds: e.train_fn(a, bd).numpy(),
                    ("tagger", "infer"):
                        lambda e=tagger, a=plan.feed.arrays: _fetch(e.infer_fn(a))}
                for key, f in steps.items():
                    f()  # traced here, under the patch
                    fns[(name, *key)] = f
            with _patched(tree_lstm.NaryTreeLSTMCell, "_call",
                          tree_lstm.NaryTreeLSTMCell._call if fused else _autodiff_nary_call):
                fit, predict = _treelstm_fit_predict(b)
                fns[(name, "TreeLSTM fit", "train")] = fit
                fns[(name, "TreeLSTM fit", "infer")] = predict
        raw = _rounds(fns, rounds, time.process_time if cpu_time else time.perf_counter)
        for work in ("TreeLSTM", "tagger", "TreeLSTM fit"):
            med = {(n, m): float(np.median(raw[(n, work, m)])) for n in variants
                   for m in ("train", "infer")}
            ratio = {m: float(np.median(np.array(raw[(variants[1], work, m)])
                                        / np.array(raw[(variants[0], work, m)])))
                     for m in ("train", "infer")}
            out[(work, b)] = {"ms": med, "autodiff / fused": ratio}
            print(f"| {work} | {b} | {med[(variants[0], 'train')]:.2f} / "
                  f"{med[(variants[0], 'infer')]:.2f} | {med[(variants[1], 'train')]:.2f} / "
                  f"{med[(variants[1], 'infer')]:.2f} | {ratio['train']:.3f} / "
                  f"{ratio['infer']:.3f} |", flush=True)
    return out


def xla(batch_sizes: list, rounds: int) -> dict:
    import keras

    from benchmarks.workloads import CLASSES, TreeLSTMModel, sst_synth_tree
    from refold.compiler import Model
    rng = np.random.default_rng(0)
    workload = TreeLSTMModel(seed=0)
    out = {}
    for b in batch_sizes:
        n = {1: 32, 16: 128}.get(b, 256)
        trees = [sst_synth_tree(rng) for _ in range(n)]
        labels = rng.integers(0, CLASSES, n).astype(np.int32)
        fns, models, warm = {}, {}, {}
        for jit in (False, True):
            model = models[jit] = Model(workload.block)
            model.compile(optimizer=keras.optimizers.SGD(0.01), jit_compile=jit,
                          loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
            fns[jit] = functools.partial(model.fit, trees, labels, batch_size=b, epochs=1,
                                         verbose=0, shuffle=False)
            t = time.perf_counter()
            fns[jit]()
            warm[jit] = time.perf_counter() - t
        ms = _interleaved(fns, rounds)
        step = next(c.cell_contents for c in models[True].train_function.__closure__
                    if hasattr(c.cell_contents, "xla_traces"))
        predicts = {jit: functools.partial(models[jit].predict, trees, batch_size=b,
                                           verbose=0) for jit in (False, True)}
        for f in predicts.values():
            f()  # warm-up: traces and compiles the inference buckets
        infer = _interleaved(predicts, rounds)
        out[b] = {"graph ms/tree": ms[False] / n, "xla ms/tree": ms[True] / n,
                  "xla / graph": ms[True] / ms[False], "warm-up s (graph)": warm[False],
                  "warm-up s (xla)": warm[True], "buckets": step.xla_traces,
                  "compile s/bucket": (warm[True] - warm[False]) / max(step.xla_traces, 1),
                  "predict graph ms/tree": infer[False] / n,
                  "predict xla ms/tree": infer[True] / n,
                  "predict xla / graph": infer[True] / infer[False]}
        print(f"xla, batch {b}: " + ", ".join(f"{k} {v:.3g}" for k, v in out[b].items()),
              flush=True)
    return out


def _fit_items(b: int, items: int | None) -> tuple:
    """`(n, trees, labels, sentences)`: the items of one `Model.fit` call at batch `b`
    (`items`, or 32 at batch 1, 128 at 16, 256 otherwise), seeded."""
    from benchmarks import bilstm
    from benchmarks.workloads import CLASSES, sst_synth_tree
    n = items or {1: 32, 16: 128}.get(b, 256)
    rng = np.random.default_rng(0)
    trees = [sst_synth_tree(rng) for _ in range(n)]
    labels = rng.integers(0, CLASSES, n).astype(np.int32)
    return n, trees, labels, [bilstm.sentence(rng) for _ in range(n)]


def _turn(names: list, i: int) -> list:
    """`names` starting at the `i`-th (mod its length): instance `i`'s order of
    building, so that no variant is always built (and its trace timed) first."""
    return names[i % len(names):] + names[:i % len(names)]


def _per_item(raw: dict, key: str, names: list, instances: int, n: int) -> dict:
    """`{variant: ms per item in each round}` from `_rounds`' figures of `key`'s
    calls over `n` items, averaged over the instances."""
    return {v: np.mean([raw[(key, v, i)] for i in range(instances)], axis=0) / n
            for v in names}


def _fits(b: int, trees, labels, sentences, workloads=("TreeLSTM", "tagger"),
          jit: bool = False) -> dict:
    """`{workload: (model, fit)}`: a fresh sst-synth TreeLSTM (the zoo's cells, or
    "user TreeLSTM": a user's `td.Function`s over Keras `Dense` layers) and bilstm
    tagger (SGD; "GRU tagger": the same with GRU cells; "char tagger": the peer
    benchmark's, on as many of its sentences), `fit()` one whole `Model.fit` epoch
    over their items at batch `b`."""
    import keras

    from benchmarks.peers.refold_side import tagger_models
    from benchmarks.workloads import TreeLSTMModel, UserTreeLSTMModel
    from refold.compiler import Model
    out = {}
    for name, workload in (("TreeLSTM", TreeLSTMModel), ("user TreeLSTM", UserTreeLSTMModel)):
        if name in workloads:
            tree = Model(workload(seed=0).block)
            tree.compile(optimizer=keras.optimizers.SGD(0.01), jit_compile=jit,
                         loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
            out[name] = (tree, functools.partial(tree.fit, trees, labels))
    for name, cell in (("tagger", "lstm"), ("GRU tagger", "gru")):
        if name in workloads:
            tagger, _ = tagger_models(cell=cell)
            tagger.compile(optimizer=keras.optimizers.SGD(0.01), jit_compile=jit)
            out[name] = (tagger, functools.partial(tagger.fit, sentences))
    if "char tagger" in workloads:  # the peer benchmark's, on as many of its sentences
        from benchmarks.peers.refold_side import char_tagger_models
        from benchmarks.peers.run import make_data
        data = make_data(["chartagger"], len(sentences))["chartagger"]
        tagger, _ = char_tagger_models(data["vocabulary"])
        tagger.compile(optimizer=keras.optimizers.SGD(0.01), jit_compile=jit)
        out["char tagger"] = (tagger, functools.partial(tagger.fit, data["sentences"]))
    return {work: (model, functools.partial(fit, batch_size=b, epochs=1, verbose=0,
                                            shuffle=False))
            for work, (model, fit) in out.items()}


def fit_weightgrads(batch_sizes: list, rounds: int, instances: int = 2,
                    jit: bool = False, items: int | None = None) -> dict:
    """ms per item of whole `Model.fit` calls (graph mode, or XLA with `jit`), the
    loop's weight gradients once per step against once per backward iteration
    (`items` per call: 32 at batch 1, 128 at 16, 256 otherwise, by default)."""
    variants = {"once per step": True, "every iteration": False}
    print(f"\n## {'XLA' if jit else 'graph mode'}: the loop's weight gradients, ms per item "
          f"of whole Model.fit calls (median of {rounds}, {instances} models each)")
    print("| workload | B | once per step | every iteration | every ÷ once |")
    print("|---|---|---|---|---|")
    out = {}
    for b in batch_sizes:
        n, trees, labels, sentences = _fit_items(b, items)
        fns = {}
        for i in range(instances):
            for name in _turn(list(variants), i):
                for work, (model, fit) in _fits(b, trees, labels, sentences,
                                                jit=jit).items():
                    # read when the steps are traced
                    model.weight_grads.max_rows = float("inf") if variants[name] else 0
                    if jit:
                        model.tracer.xla().xla.batched_weight_grads = variants[name]
                    fns[(work, name, i)] = fit
        # the first calls (untimed) trace (and compile)
        _once_every_rows(_rounds(fns, rounds), list(variants), instances, b, n, out)
    return out


REPLAY_VARIANTS = {"replayed": (float("inf"), True), "TF backward, once": (float("inf"), False),
                   "TF backward, every": (0, False)}


def fit_replay(batch_sizes: list, rounds: int, instances: int = 2,
               items: int | None = None, workloads=("TreeLSTM", "tagger", "char tagger"),
               cpu_time: bool = False) -> dict:
    """ms per item of whole `Model.fit` calls with the loop's backward pass replayed
    by the engine, against TensorFlow's with the weight gradients once per step and
    in every iteration (`items` per call: 32 at batch 1, 128 at 16, 256 otherwise;
    `cpu_time`: this process's CPU time rather than wall time)."""
    names = list(REPLAY_VARIANTS)
    print(f"\n## The loop's backward pass, {'CPU' if cpu_time else 'wall'} ms per item of "
          f"whole Model.fit calls (median of {rounds}, {instances} models each)")
    ratios = " | ".join(f"{v} ÷ replayed" for v in names[1:])
    print(f"| workload | B | {' | '.join(names)} | {ratios} |")
    print("|---|---|" + "---|" * (2 * len(names) - 1))
    out = {}
    for b in batch_sizes:
        n, trees, labels, sentences = _fit_items(b, items)
        fns = {}
        for i in range(instances):
            for name in _turn(names, i):
                for work, (model, fit) in _fits(b, trees, labels, sentences,
                                                workloads).items():
                    # read when the steps are traced
                    model.weight_grads.max_rows, model.weight_grads.replay = \
                        REPLAY_VARIANTS[name]
                    fns[(work, name, i)] = fit
        # the first calls (untimed) trace
        raw = _rounds(fns, rounds, time.process_time if cpu_time else time.perf_counter)
        for work in workloads:
            t = _per_item(raw, work, names, instances, n)
            ratios = {v: float(np.median(t[v] / t[names[0]])) for v in names[1:]}
            out[(work, b)] = {**{v: float(np.median(t[v])) for v in names},
                              **{f"{v} / replayed": r for v, r in ratios.items()}}
            print(f"| {work} | {b} | " + " | ".join(f"{np.median(t[v]):.2f}" for v in names)
                  + " | " + " | ".join(f"{r:.3f}" for r in ratios.values()) + " |", flush=True)
    return out


def fit_projection(batch_sizes: list, rounds: int, instances: int = 2,
                   items: int | None = None) -> dict:
    """ms per sentence of whole tagger `Model.fit` and `Model.predict` calls with the
    LSTMs' input projection before the loop and in it (`items` sentences per call:
    32 at batch 1, 128 at 16, 256 otherwise)."""
    import keras

    from benchmarks.peers.refold_side import tagger_models
    from refold.models import encoders
    variants = {"projected first": encoders.projects_input, "whole cells in the loop":
                lambda cell: False}
    names = list(variants)
    print(f"\n## The tagger's input projection, ms per sentence of whole Model.fit / "
          f"Model.predict calls (median of {rounds}, {instances} models each)")
    print(f"| B | {' | '.join(f'{v}, fit / predict' for v in names)} | "
          f"{names[1]} ÷ {names[0]}, fit / predict |")
    print("|---|" + "---|" * (len(names) + 1))
    out = {}
    for b in batch_sizes:
        n, _, _, sentences = _fit_items(b, items)
        words = [{"words": s["words"]} for s in sentences]
        fns, head = {}, {}
        for i in range(instances):
            for name in _turn(names, i):
                with _patched(encoders, "projects_input", variants[name]):
                    tagger, logits = tagger_models()
                lay = tagger.compiler.executor.layout
                head[name] = [lay.op_names[o] for o in lay.head_ops]
                tagger.compile(optimizer=keras.optimizers.SGD(0.01))
                fns[("fit", name, i)] = functools.partial(
                    tagger.fit, sentences, batch_size=b, epochs=1, verbose=0, shuffle=False)
                fns[("predict", name, i)] = functools.partial(
                    logits.predict, words, batch_size=b, verbose=0)
        raw = _rounds(fns, rounds)  # the first calls (untimed) trace
        row = {"ops before the loop": head}
        for call in ("fit", "predict"):
            t = _per_item(raw, call, names, instances, n)
            row[call] = {v: float(np.median(t[v])) for v in names}
            row[call]["ratio"] = float(np.median(t[names[1]] / t[names[0]]))
        out[b] = row
        print(f"| {b} | " + " | ".join(f"{row['fit'][v]:.2f} / {row['predict'][v]:.2f}"
                                       for v in names)
              + f" | {row['fit']['ratio']:.3f} / {row['predict']['ratio']:.3f} |", flush=True)
    return out


def fit_transpose(batch_sizes: list, rounds: int, instances: int = 2,
                  items: int | None = None,
                  workloads=("TreeLSTM", "user TreeLSTM", "tagger")) -> dict:
    """ms per item of whole `Model.fit` calls whose loop takes the gradient of its
    weight products `h U` with U transposed once per step (`scheduler.loop_products`)
    against TensorFlow's `transpose_b` product in every backward iteration (`items` per
    call: 32 at batch 1, 128 at 16, 256 otherwise)."""
    from refold.scheduler import loop_products
    return _fit_flag(loop_products, "TRANSPOSE_ONCE", ("U^T once per step", "transpose_b"),
                     "The loop's weight products transposed", batch_sizes, rounds, instances,
                     items, workloads)


def fit_outer(batch_sizes: list, rounds: int, instances: int = 2, items: int | None = None,
              workloads=("TreeLSTM", "tagger")) -> dict:
    """ms per item of whole `Model.fit` calls whose tap takes the weight gradients of
    the loop ops' launches before the loop too (`scheduler.executor.
    TAP_OUTER_LAUNCHES`) against TensorFlow's gradients for those launches (`items`
    per call: 32 at batch 1, 128 at 16, 256 otherwise)."""
    from refold.scheduler import executor
    return _fit_flag(executor, "TAP_OUTER_LAUNCHES", ("tap", "TensorFlow's"),
                     "The weight gradients of the launches before the loop", batch_sizes,
                     rounds, instances, items, workloads)


def fit_grugates(batch_sizes: list, rounds: int, instances: int = 2,
                 items: int | None = None, workloads=("GRU tagger",)) -> dict:
    """ms per item of whole `Model.fit` calls of the tagger on GRU cells, their gated
    products with their own gradients (`models.gates.product`, `interpolate`)
    against autodiff's (`items` per call: 32 at batch 1, 128 at 16, 256 otherwise)."""
    return _fit_variants(lambda on: contextlib.nullcontext() if on else _autodiff_gru_gates(),
                         ("own gradients", "autodiff"), "The GRU's gated products",
                         batch_sizes, rounds, instances, items, workloads)


@contextlib.contextmanager
def _autodiff_gru_gates():
    """`GRUCell` traced with its gated products as plain `*`, `+` and `1 - z`."""
    from refold.models import gates
    with _patched(gates, "product", lambda a, b: a * b), \
            _patched(gates, "interpolate", lambda z, a, b: z * a + (1.0 - z) * b):
        yield


def _fit_flag(module, flag: str, names: tuple, title: str, batch_sizes: list, rounds: int,
              instances: int, items: int | None, workloads) -> dict:
    """Whole `Model.fit` calls with `module.flag` True (variant `names[0]`) and False
    (`names[1]`) while each model traces; a table of their ms per item and ratio."""
    return _fit_variants(lambda on: _patched(module, flag, on), names, title, batch_sizes,
                         rounds, instances, items, workloads)


def _fit_variants(scope, names: tuple, title: str, batch_sizes: list, rounds: int,
                  instances: int, items: int | None, workloads) -> dict:
    """Whole `Model.fit` calls of models traced in `scope(True)` (variant `names[0]`)
    and in `scope(False)` (`names[1]`); a table of their ms per item and ratio."""
    variants = dict(zip(names, (True, False)))
    names = list(names)
    print(f"\n## {title}, ms per item of whole Model.fit calls (median of {rounds}, "
          f"{instances} models each)")
    print(f"| workload | B | {' | '.join(names)} | {names[1]} ÷ {names[0]} |")
    print("|---|---|---|---|---|")
    out = {}
    for b in batch_sizes:
        n, trees, labels, sentences = _fit_items(b, items)
        fns = {}
        for i in range(instances):
            for name in _turn(names, i):
                for work, (_, fit) in _fits(b, trees, labels, sentences,
                                            workloads).items():
                    with scope(variants[name]):
                        fit()  # traces: the variant is read then
                    fns[(work, name, i)] = fit
        raw = _rounds(fns, rounds)
        out.update(_pair_rows(raw, b, workloads, names, instances, n))
    return out


def _pair_rows(raw: dict, b: int, workloads, names: list, instances: int, n: int) -> dict:
    """Per workload at batch `b`, the median ms per item of two variants and the
    median of their per-round ratios (second ÷ first), printed as table rows."""
    out = {}
    for work in workloads:
        t = _per_item(raw, work, names, instances, n)
        row = out[(work, b)] = {**{v: float(np.median(t[v])) for v in names},
                                "ratio": float(np.median(t[names[1]] / t[names[0]]))}
        print(f"| {work} | {b} | " + " | ".join(f"{row[v]:.2f}" for v in names)
              + f" | {row['ratio']:.3f} |", flush=True)
    return out


def predict_executor(batch_sizes: list, rounds: int, instances: int = 2,
                     items: int | None = None, workloads=("TreeLSTM", "tagger")) -> dict:
    """ms per item of whole `Model.predict` calls with the inference executor chosen
    per batch (`compiler.training.tf_executor`: TensorFlow's single-threaded executor for
    batches of small loop launches) against TensorFlow's default executor always
    (`items` per call: 32 at batch 1, 128 at 16, 256 otherwise)."""
    from benchmarks.peers.refold_side import tagger_models
    from benchmarks.workloads import TreeLSTMModel
    from refold.compiler import Model
    variants = {"chosen per batch": None, "default executor": 0}
    names = list(variants)
    print(f"\n## The inference executor, ms per item of whole Model.predict calls "
          f"(median of {rounds}, {instances} models each)")
    print(f"| workload | B | {' | '.join(names)} | {names[1]} ÷ {names[0]} |")
    print("|---|---|---|---|---|")
    out = {}
    for b in batch_sizes:
        n, trees, _, sentences = _fit_items(b, items)
        words = [{"words": s["words"]} for s in sentences]
        fns = {}
        for i in range(instances):
            for name in _turn(names, i):
                models = {"TreeLSTM": (Model(TreeLSTMModel(seed=0).block), trees),
                          "tagger": (tagger_models()[1], words)}
                for work in workloads:
                    model, x = models[work]
                    if variants[name] is not None:
                        model.inference_executor.max_rows = variants[name]
                    fns[(work, name, i)] = functools.partial(model.predict, x, batch_size=b,
                                                             verbose=0)
        raw = _rounds(fns, rounds)  # the first calls (untimed) trace
        out.update(_pair_rows(raw, b, workloads, names, instances, n))
    return out


def _fetch(outputs):
    return [np.asarray(o) for o in outputs] if isinstance(outputs, (list, tuple)) \
        else np.asarray(outputs)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default="rowlists,conds,cells,bidirectional,weightgrads",
                        help="also: fitweightgrads, replay, projection, transpose, "
                             "outer, executor; xla, "
                             "xlaweightgrads "
                             "(not run by default: they compile for minutes)")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--batch", type=int, default=64, help="for rowlists, conds and cells")
    parser.add_argument("--batch-sizes", default="16,64",
                        help="for bidirectional, weightgrads, fusedcells and xla")
    parser.add_argument("--instances", type=int, default=3,
                        help="engines per variant, conds and weightgrads")
    parser.add_argument("--cpu-time", action="store_true",
                        help="fusedcells, replay: time calls by this process's CPU time")
    parser.add_argument("--replay-workloads", default="TreeLSTM,tagger,char tagger",
                        help="replay: of TreeLSTM, tagger, char tagger")
    args = parser.parse_args(argv)
    only = args.only.split(",")
    out = {}
    if "rowlists" in only:
        out["rowlists"] = rowlists(args.batch, args.rounds)
    if "conds" in only:
        out["conds"] = conds(args.batch, args.rounds, args.instances)
    if "cells" in only:
        out["cells"] = cells(args.batch, args.rounds)
    sizes = [int(b) for b in args.batch_sizes.split(",")]
    if "bidirectional" in only:
        out["bidirectional"] = bidirectional(sizes, args.rounds)
    if "weightgrads" in only:
        out["weightgrads"] = weightgrads(sizes, args.rounds, args.instances)
    if "fusedcells" in only:
        out["fusedcells"] = fusedcells(sizes, args.rounds, args.cpu_time)
    if "xla" in only:
        out["xla"] = xla(sizes, args.rounds)
    for name, jit in (("fitweightgrads", False), ("xlaweightgrads", True)):
        if name in only:
            out[name] = fit_weightgrads(sizes, args.rounds, args.instances, jit)
    # whole-call ablations of two variants: (batch sizes, rounds, models a variant)
    if "replay" in only:
        out["replay"] = fit_replay(sizes, args.rounds, args.instances,
                                   workloads=tuple(args.replay_workloads.split(",")),
                                   cpu_time=args.cpu_time)
    for name, ablation in (("transpose", fit_transpose),
                           ("outer", fit_outer), ("grugates", fit_grugates),
                           ("executor", predict_executor), ("projection", fit_projection)):
        if name in only:
            out[name] = ablation(sizes, args.rounds, args.instances)
    return out


if __name__ == "__main__":
    main()
