"""Refold's side of the peer benchmark: the workloads through the public `Model` API.

A timed training pass is one whole `Model.fit(x, y, batch_size=B, epochs=1,
shuffle=False)` call, and a timed inference pass one whole `Model.predict(x,
batch_size=B)` call, since that is what a user pays for; the parser's parsing pass is
one `ParserModel.parse_tokens(batch_size=B)` call (greedy, on the device: one engine call
per batch). Both parser workloads pad sentences to the data's longest, as the example
does (`ParserModel.max_words`); exploration training walks on the device
(`examples.parser.ondevice`, the example's default).
Run as a module it answers the runner's JSON-line requests (see
`benchmarks.peers.protocol`), with TensorFlow's thread pools set by `--threads` before
any op runs.
"""

from __future__ import annotations

import argparse
import math
import time

from benchmarks.peers import protocol


class RefoldSide:
    """Builds the workloads' models once and times passes over the shared data.

    Args:
        data: the runner's data (`protocol.make_data`), trees as nested tuples.
        workloads: which models to build ("treelstm", "bilstm", "parser",
            "chartagger").
        lr: the plain SGD learning rate.
        scheduler: the models' scheduler, "agenda" (default) or "depth".
        jit_compile: every `fit` and `predict` call's `jit_compile` (XLA,
            `compiler.feeding.xla_buckets`).
    """

    def __init__(self, data: dict, workloads, lr: float, scheduler: str = "agenda",
                 jit_compile: bool = False):
        import keras

        from refold.compiler import Model
        self.data = data
        self.scheduler = scheduler
        self.jit_compile = jit_compile
        self.train_models: dict = {}
        self.infer_models: dict = {}
        if "treelstm" in workloads:
            from benchmarks.workloads import TreeLSTMModel
            tree = TreeLSTMModel(seed=0)
            model = Model(tree.block, scheduler=scheduler)
            model.compile(optimizer=keras.optimizers.SGD(lr),
                          loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
            self.train_models["treelstm"] = self.infer_models["treelstm"] = model
        if "bilstm" in workloads:
            train, infer = tagger_models(scheduler)
            train.compile(optimizer=keras.optimizers.SGD(lr))
            self.train_models["bilstm"], self.infer_models["bilstm"] = train, infer
        if "parser" in workloads:
            self.parser, train, infer = parser_models(data["parser"], scheduler)
            train.compile(optimizer=keras.optimizers.SGD(lr))
            self.train_models["parser"], self.infer_models["parser"] = train, infer
        if "explore" in workloads:
            self.train_models["explore"] = exploration_model(data["explore"], scheduler)
            self.train_models["explore"].compile(optimizer=keras.optimizers.SGD(lr))
        if "chartagger" in workloads:
            train, infer = char_tagger_models(data["chartagger"]["vocabulary"], scheduler)
            train.compile(optimizer=keras.optimizers.SGD(lr))
            self.train_models["chartagger"], self.infer_models["chartagger"] = train, infer

    def _inputs(self, workload: str, n: int):
        d = self.data[workload]
        if workload == "treelstm":
            return d["trees"][:n], d["labels"][:n]
        return d["sentences"][:n], None

    def run(self, request: dict) -> dict:
        """Times one pass; `{"seconds": s, "loss": training loss or None}`."""
        workload, op, b = request["workload"], request["op"], request["batch"]
        x, y = self._inputs(workload, request["items"])
        start = time.perf_counter()
        loss = None
        if op == "train":
            history = self.train_models[workload].fit(x, y, batch_size=b, epochs=1, verbose=0,
                                                      shuffle=False, jit_compile=self.jit_compile)
            loss = history.history["loss"][-1]
        elif op == "infer":
            self.infer_models[workload].predict(x, batch_size=b, verbose=0,
                                                jit_compile=self.jit_compile)
        elif op == "parse" and workload == "parser":
            self.parser.parse_tokens([s["tokens"] for s in x], batch_size=b)
        else:
            raise ValueError(f"unknown op {op!r}")
        seconds = time.perf_counter() - start
        if loss is not None and not math.isfinite(loss):
            raise FloatingPointError(f"{workload} training loss is {loss}")
        return {"seconds": seconds, "loss": loss}

    def close(self) -> None:
        """Nothing to stop (the runner calls it as it does on its worker processes)."""


def tagger_models(scheduler: str = "agenda", cell: str = "lstm"):
    """The bilstm tagger as two `Model`s on one set of layers: one trains with a loss
    at every word (`td.Metric`, Fold style), the other predicts logits without tags
    (`cell="gru"`: on GRU cells)."""
    import refold as td
    from benchmarks.bilstm import TAGS, TaggerModel
    from refold.compiler import Model
    from refold.models import encoders, heads
    tagger = TaggerModel(seed=0, cell=cell)
    words = td.GetItem("words") >> td.Map(td.Scalar("int32") >> tagger.embedding)
    logits = heads.tagger(words >> encoders.bidirectional(tagger.forward, tagger.backward),
                          TAGS, logits_layer=tagger.output)
    return Model(tagger.block, scheduler=scheduler), Model(logits, scheduler=scheduler)


def char_tagger_models(vocabulary: int, scheduler: str = "agenda"):
    """`examples.tagger.char_tagger`'s model at the workload's sizes (those of the
    DyNet side, `CHAR_TAGGER` in `dynet_worker.py`), to train with a loss at every word,
    and the same architecture without tags to predict (its own weights: a pass costs
    the same whatever the weights are)."""
    from refold.compiler import Model
    from refold.examples.tagger.char_tagger import char_tagger_model
    sizes = dict(words="char", char_embed=20, char_hidden=64, hidden=128)
    return (Model(char_tagger_model(vocabulary, **sizes), scheduler=scheduler, seed=0),
            Model(char_tagger_model(vocabulary, tags=None, **sizes), scheduler=scheduler,
                  seed=0))


def parser_models(data: dict, scheduler: str = "agenda"):
    """`examples.parser`'s model at the data's sizes (its `ParserModel`, which parses
    greedily) and two `Model`s on its layers: one trains with a loss at every
    transition, the other predicts the logits of every configuration without the loss."""
    import keras

    from refold.compiler import Model
    from refold.examples.parser.model import ParserModel, Vocabulary
    keras.utils.set_random_seed(0)
    sizes = data["sizes"]
    parser = ParserModel(Vocabulary(**data["vocab"]), embed=sizes["embed"],
                         tag_embed=sizes["tag_embed"], hidden=sizes["hidden"], mlp=sizes["mlp"],
                         scheduler=scheduler,
                         max_words=max(len(s["tokens"]) - 1 for s in data["sentences"]))
    return (parser, Model(parser.training_block, scheduler=scheduler),
            Model(parser.scoring_block, scheduler=scheduler))


def exploration_model(data: dict, scheduler: str = "agenda", walk: str = "device"):
    """`examples.parser`'s exploration training at the data's sizes, as a `Model` (the
    loss at every transition the walk takes): the walk on the device
    (`examples.parser.ondevice`, the example's default) or, with `walk="python"`, the
    `td.Unfold` deciding in Python (`examples.parser.exploration`)."""
    import keras

    from refold.compiler import Model
    from refold.examples.parser.exploration import Exploration
    from refold.examples.parser.model import ParserModel, Vocabulary
    from refold.examples.parser.ondevice import DeviceExploration
    keras.utils.set_random_seed(0)
    sizes = data["sizes"]
    parser = ParserModel(Vocabulary(**data["vocab"]), embed=sizes["embed"],
                         tag_embed=sizes["tag_embed"], hidden=sizes["hidden"], mlp=sizes["mlp"],
                         scheduler=scheduler,
                         max_words=max(len(s["heads"]) for s in data["sentences"]))
    exploring = (DeviceExploration if walk == "device" else Exploration)(
        parser, explore=data["explore"])
    return Model(exploring.block, scheduler=scheduler)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="the runner's JSON data file")
    parser.add_argument("--threads", type=int, default=0,
                        help="TensorFlow intra- and inter-op threads (0: TensorFlow's default)")
    parser.add_argument("--workloads", default="treelstm,bilstm")
    parser.add_argument("--scheduler", choices=("agenda", "depth"), default="agenda")
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args(argv)
    reply = protocol.claim_stdout()
    import tensorflow as tf
    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    data = protocol.load_data(args.data, tuples=True)
    side = RefoldSide(data, args.workloads.split(","), args.lr, args.scheduler)
    from tensorflow.python.util import _pywrap_util_port
    protocol.serve(side.run, reply, {"system": "refold", "threads": args.threads,
                                     "scheduler": args.scheduler,
                                     "tensorflow": tf.__version__,
                                     "onednn": bool(_pywrap_util_port.IsMklEnabled())})


if __name__ == "__main__":
    main()
