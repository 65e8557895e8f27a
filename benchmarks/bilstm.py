"""bilstm-tagger throughput: the engine beside a padded Keras BiLSTM and eager per-example.

Run: `python -m benchmarks.bilstm` (add `--quick` for a short run). The workload
(the DyNet paper's): sentences of round(Normal(24, 10)) words clipped to [2, 80], vocab
16,000, embedding 128, one BiLSTM layer of 128 units each way, 50 tags, a softmax
loss at every word. It prints sentences/s for training (forward, backward, plain
SGD) and inference at each batch size, for:

- `engine`: Refold's Compiler on the block model (`models.heads.tagger` over
  `models.encoders.bidirectional` of two `models.rnn_cells.LSTMCell`s), including
  the per-batch Python work (merge cached graphs, schedule, pack); the loss is the
  mean of the "loss" metric over every word of the batch;
- `keras-padded`: `Embedding >> Bidirectional(LSTM) >> Dense` on the batch padded
  to its longest sentence, masked (a hand-batched program: the usual ceiling);
- `eager`: per-sentence eager TensorFlow with the same cells, no batching.

All variants share one set of weights, so they compute the same function. Ratios
within one run are the reliable figures on a shared machine.
"""

from __future__ import annotations

import argparse

import numpy as np

from benchmarks.common import report, sgd_apply, throughput

VOCAB, EMBED, HIDDEN, TAGS = 16_000, 128, 128, 50


def sentence(rng: np.random.Generator) -> dict:
    """One random sentence of the workload: `{"words": [ids], "tags": [ids]}`."""
    n = int(np.clip(round(rng.normal(24, 10)), 2, 80))
    return {"words": rng.integers(0, VOCAB, n).tolist(), "tags": rng.integers(0, TAGS, n).tolist()}


class TaggerModel:
    """The bilstm tagger as blocks; its layers are shared with the baselines.
    `cell="gru"` makes it a BiGRU tagger (the GRU ablation)."""

    def __init__(self, seed: int = 0, cell: str = "lstm"):
        import keras

        import refold as td
        from refold.models import encoders, heads, rnn_cells
        keras.utils.set_random_seed(seed)
        cells = {"lstm": rnn_cells.LSTMCell, "gru": rnn_cells.GRUCell}
        if cell not in cells:
            raise ValueError(f"TaggerModel: cell must be one of {sorted(cells)}, got {cell!r}")
        cell_class = cells[cell]
        self.embedding = td.Embedding(VOCAB, EMBED, name="embedding")
        self.forward = cell_class(HIDDEN, input_size=EMBED, name="forward")
        self.backward = cell_class(HIDDEN, input_size=EMBED, name="backward")
        self.output = td.FC(TAGS, activation=None, name="tag_logits")
        words = td.GetItem("words") >> td.Map(td.Scalar("int32") >> self.embedding)
        self.block = heads.tagger(words >> encoders.bidirectional(self.forward, self.backward),
                                  TAGS, tags="tags", logits_layer=self.output)
        self.variables = heads.variables(self.block)




class Engine:
    def __init__(self, model: TaggerModel, scheduler: str = "agenda", lr: float = 0.01):
        import tensorflow as tf

        from refold.compiler import Compiler
        self.compiler = c = Compiler.create(model.block, scheduler=scheduler)
        program = c.program
        self.loss_id = program.metric_id["loss"]
        k_loss = program.type_id[program.metric_types[self.loss_id]]
        ex, variables = c.executor, model.variables

        @tf.function(input_signature=[ex.input_signature(), tf.TensorSpec([2], tf.int32)],
                     autograph=False)
        def train(arrays, bounds):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(ex.compute(arrays)[k_loss][bounds[0]:bounds[1]])
            sgd_apply(variables, tape.gradient(loss, variables), lr)
            return loss

        @tf.function(input_signature=[ex.input_signature()], autograph=False)
        def infer(arrays):
            return ex.compute(arrays)

        self.train_fn, self.infer_fn = train, infer

    def train(self, batch):
        plan = self.compiler.plan(batch, grouped=True)
        return self.train_fn(plan.feed.arrays, plan.metric_bounds(self.compiler.program)
                             [self.loss_id])

    def infer(self, batch):
        return self.infer_fn(self.compiler.plan(batch).feed.arrays)


class KerasPadded:
    """Embedding, Bidirectional(LSTM), Dense on padded batches, with the model's weights."""

    def __init__(self, model: TaggerModel, lr: float = 0.01):
        import keras
        import tensorflow as tf
        words = keras.Input((None,), dtype="int32")
        x = keras.layers.Embedding(VOCAB, EMBED, mask_zero=False)(words)
        mask = keras.Input((None,), dtype="bool")
        x = keras.layers.Bidirectional(keras.layers.LSTM(HIDDEN, return_sequences=True))(
            x, mask=mask)
        logits = keras.layers.Dense(TAGS)(x)
        self.net = net = keras.Model([words, mask], logits)
        emb, bi, dense = (layer for layer in net.layers if layer.weights)
        emb.set_weights([np.asarray(model.embedding.embeddings)])
        bi.set_weights([np.asarray(w) for w in model.forward.weights + model.backward.weights])
        dense.set_weights([np.asarray(w) for w in model.output.weights])
        variables = [w.value for w in net.trainable_weights]
        ids = tf.TensorSpec([None, None], tf.int32)
        spec = [ids, tf.TensorSpec([None, None], tf.bool)]

        @tf.function(input_signature=[*spec, ids], autograph=False)
        def train(words, mask, tags):
            with tf.GradientTape() as tape:
                xent = tf.nn.sparse_softmax_cross_entropy_with_logits(
                    labels=tags, logits=net([words, mask]))
                m = tf.cast(mask, tf.float32)
                loss = tf.reduce_sum(xent * m) / tf.reduce_sum(m)
            sgd_apply(variables, tape.gradient(loss, variables), lr)
            return loss

        @tf.function(input_signature=spec, autograph=False)
        def infer(words, mask):
            return net([words, mask])

        self.train_fn, self.infer_fn = train, infer

    @staticmethod
    def pad(batch, key):
        """`[batch, longest]` ids padded with 0, and the mask of real words."""
        lengths = np.asarray([len(s[key]) for s in batch])
        out = np.zeros((len(batch), lengths.max()), np.int32)
        for i, s in enumerate(batch):
            out[i, :lengths[i]] = s[key]
        return out, np.arange(lengths.max())[None, :] < lengths[:, None]

    def train(self, batch):
        words, mask = self.pad(batch, "words")
        return self.train_fn(words, mask, self.pad(batch, "tags")[0])

    def infer(self, batch):
        return self.infer_fn(*self.pad(batch, "words"))


class Eager:
    """Per-sentence eager TensorFlow with the same layers: no batching at all."""

    def __init__(self, model: TaggerModel, lr: float = 0.01):
        self.m, self.lr = model, lr

    def _logits(self, s):
        import tensorflow as tf
        m = self.m
        x = m.embedding(tf.constant(s["words"], tf.int32))
        outs = []
        for cell, order in ((m.forward, range(len(s["words"]))),
                            (m.backward, reversed(range(len(s["words"]))))):
            zero = tf.zeros([1, HIDDEN])
            state, seq = (zero, zero), {}
            for t in order:
                out, state = cell(x[t:t + 1], state)
                seq[t] = out
            outs.append(tf.concat([seq[t] for t in range(len(s["words"]))], 0))
        return m.output(tf.concat(outs, 1))

    def infer(self, batch):
        return [self._logits(s) for s in batch]

    def train(self, batch):
        import tensorflow as tf
        variables = self.m.variables
        with tf.GradientTape() as tape:
            xent = [tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=tf.constant(s["tags"], tf.int32), logits=self._logits(s)) for s in batch]
            loss = tf.reduce_mean(tf.concat(xent, 0))
        sgd_apply(variables, tape.gradient(loss, variables), self.lr)
        return loss




def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-sizes", default="1,16,64,256")
    parser.add_argument("--seconds", type=float, default=4.0, help="per measurement")
    parser.add_argument("--variants", default="engine,keras-padded,eager")
    parser.add_argument("--eager-max-batch", type=int, default=16,
                        help="skip eager above this batch size (it is per-sentence anyway)")
    parser.add_argument("--quick", action="store_true", help="short run (1 s each)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds per measurement, the best counts (a smoke test: 1)")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    seconds = 1.0 if args.quick else args.seconds
    sizes = [int(b) for b in args.batch_sizes.split(",")]
    variants = args.variants.split(",")
    model = TaggerModel(seed=0)
    makers = {"engine": lambda: Engine(model), "keras-padded": lambda: KerasPadded(model),
              "eager": lambda: Eager(model)}
    runners = {name: makers[name]() for name in variants}
    rng = np.random.default_rng(0)
    pool = [sentence(rng) for _ in range(max(sizes) * 4)]
    results: dict = {"train": {}, "infer": {},
                     "words_per_sentence": float(np.mean([len(s["words"]) for s in pool]))}
    for b in sizes:
        n_batches = max(1, min(8, 1024 // b))
        batches = [pool[(i * b) % len(pool):][:b] for i in range(n_batches)]
        batches = [x if len(x) == b else pool[:b] for x in batches]
        for name, runner in runners.items():
            if name == "eager" and b > args.eager_max_batch:
                continue
            # Every batch is planned once first, so the engine runs on cached graphs (as
            # from the second epoch on, the method BENCHMARKS.md states); the baselines
            # cache nothing, so one warm-up call is enough for them.
            kw = {"min_calls": 2, "warm_up": "all" if name == "engine" else "first",
                  "rounds": args.rounds}
            tr = throughput(runner.train, batches, seconds, **kw)
            inf = throughput(runner.infer, batches, seconds, **kw)
            results["train"].setdefault(name, {})[b] = tr
            results["infer"].setdefault(name, {})[b] = inf
            print(f"B={b:4d} {name:13s} train {tr:8.1f}  infer {inf:8.1f} sentences/s",
                  flush=True)
    ratios = [("engine", base, f"engine ÷ {base}") for base in ("keras-padded", "eager")]
    return report(results, sizes, ratios, args.json)




if __name__ == "__main__":
    main()
