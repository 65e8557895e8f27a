"""Trains a TreeLSTM sentiment classifier and a bag-of-words baseline on a treebank.

    python -m refold.examples.sentiment                      # the shipped synthetic treebank
    python -m refold.examples.sentiment --data DIR           # SST: DIR/{train,dev,test}.txt
    python -m refold.examples.sentiment --data DIR --glove glove.840B.300d.txt --hidden 150 \\
        --epochs 20

Both models get a loss at every node (labels come with the trees) and are trained the
same way (Adam, same batches, same epochs); the best epoch on dev root accuracy is
kept. The program prints a table of root and all-node accuracies, fine-grained
(5 classes) and binary (positive vs negative, neutral nodes left out), on dev and
test, and writes to `--out` (default `runs/sentiment`): `curves.png` (training
curves), `tensorboard/<model>/` (TensorBoard logs), `history_<model>.csv` and
`results.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Sequence

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # keep TensorFlow's C++ start-up logs quiet

import numpy as np  # noqa: E402

from refold.examples.sentiment.model import (  # noqa: E402
    ENCODERS,
    SentimentModel,
    accuracies,
    prepare,
)
from refold.examples.sentiment.treebank import Vocabulary, read_glove, read_treebank  # noqa: E402
from refold.examples.training import describe_kept, keep_best, plot_curves  # noqa: E402

DATA = os.path.join(os.path.dirname(__file__), "data")
SPLITS = ("train", "dev", "test")
COLUMNS = ("root", "root_binary", "all", "all_binary")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m refold.examples.sentiment", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=DATA,
                   help="folder with train.txt, dev.txt, test.txt in SST (PTB) format "
                        "(default: the shipped synthetic treebank)")
    p.add_argument("--glove", default=None,
                   help="GloVe text file of word vectors to initialise the embedding")
    p.add_argument("--freeze-embeddings", action="store_true",
                   help="keep the (pretrained) word vectors fixed")
    p.add_argument("--models", default=",".join(ENCODERS),
                   help=f"comma-separated models to train, of {', '.join(ENCODERS)}")
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.01, help="Adam's learning rate")
    p.add_argument("--embed", type=int, default=32, help="word vector size")
    p.add_argument("--hidden", type=int, default=64,
                   help="TreeLSTM state size; the baseline's hidden layer size")
    p.add_argument("--train-size", type=int, default=None, help="use the first N train trees")
    p.add_argument("--eval-size", type=int, default=None,
                   help="use the first N dev and test trees")
    p.add_argument("--lowercase", action="store_true", help="lowercase words")
    p.add_argument("--min-count", type=int, default=1,
                   help="rarer training words share the unknown word's vector")
    p.add_argument("--scheduler", default="agenda", choices=("agenda", "depth"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=os.path.join("runs", "sentiment"),
                   help="folder for curves.png, tensorboard/, history CSVs, results.json")
    p.add_argument("--no-plot", action="store_true", help="do not write curves.png")
    p.add_argument("--verbose", type=int, default=2, choices=(0, 1, 2),
                   help="Keras verbosity: 0 silent, 1 progress bars, 2 one line per epoch")
    args = p.parse_args(argv)
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    for m in args.models:
        if m not in ENCODERS:
            p.error(f"--models: unknown model {m!r}; choose from {', '.join(ENCODERS)}")
    if args.epochs < 1:
        p.error("--epochs must be at least 1")
    return args


def load_splits(args: argparse.Namespace) -> dict[str, list[dict]]:
    splits = {}
    for name in SPLITS:
        path = os.path.join(args.data, f"{name}.txt")
        if not os.path.exists(path):
            raise SystemExit(f"error: {path} not found; --data needs train.txt, dev.txt "
                             "and test.txt in SST (PTB) format")
        trees = read_treebank(path)
        limit = args.train_size if name == "train" else args.eval_size
        splits[name] = trees[:limit] if limit else trees
    return splits


def build_vocabulary(splits: dict[str, list[dict]], args: argparse.Namespace):
    """The vocabulary (train words; with GloVe, every split's words, as their vectors
    come pretrained) and the initial embedding table, or None."""
    sources = splits["train"] if args.glove is None else \
        [t for name in SPLITS for t in splits[name]]
    vocab = Vocabulary.from_trees(sources, min_count=args.min_count,
                                  lowercase=args.lowercase)
    embeddings = None
    if args.glove is not None:
        embeddings = read_glove(args.glove, vocab, seed=args.seed)
    return vocab, embeddings


def evaluate(model: SentimentModel, trees: list, batch_size: int = 128,
             scheduler: str = "agenda") -> dict[str, float]:
    """The four accuracies (see `model.accuracies`) of `model` on prepared `trees`."""
    from refold.compiler import Compiler
    compilers = model.__dict__.setdefault("_eval_compilers", {})  # one trace per model
    if scheduler not in compilers:
        compilers[scheduler] = Compiler(model.eval_block, scheduler=scheduler, cache=False)
    compiler = compilers[scheduler]
    node_rows, root_rows = [], []
    for start in range(0, len(trees), batch_size):
        for _, metrics in compiler.run(trees[start:start + batch_size]):
            node_rows.append(metrics["node"])
            root_rows.append(metrics["root"])
    return accuracies(np.concatenate(node_rows), np.concatenate(root_rows))


def train(encoder: str, data: dict[str, list], vocab_size: int, embeddings,
          args: argparse.Namespace):
    """Trains one model; returns (SentimentModel, Keras History, best epoch, seconds)."""
    import keras

    from refold.compiler import Model
    keras.utils.set_random_seed(args.seed)
    sentiment = SentimentModel(encoder, vocab_size, embed=args.embed, hidden=args.hidden,
                               embeddings=embeddings,
                               train_embeddings=not args.freeze_embeddings)
    model = Model(sentiment.train_block, scheduler=args.scheduler, seed=args.seed)
    model.compile(optimizer=keras.optimizers.Adam(args.lr))
    best = keep_best("val_root_accuracy")
    callbacks = [best,
                 keras.callbacks.CSVLogger(os.path.join(args.out, f"history_{encoder}.csv"))]
    callbacks.append(keras.callbacks.TensorBoard(
        os.path.join(args.out, "tensorboard", encoder), write_graph=False))
    start = time.perf_counter()
    history = model.fit(data["train"], batch_size=args.batch_size, epochs=args.epochs,
                        validation_data=data["dev"], callbacks=callbacks,
                        verbose=args.verbose)
    return sentiment, history, best.best_epoch, time.perf_counter() - start


CURVES = (("loss", "loss per node"), ("root_accuracy", "root accuracy (5 classes)"),
          ("accuracy", "all-node accuracy (5 classes)"))
"""The panels of `curves.png` (`examples.training.plot_curves`)."""


def format_table(results: dict[str, dict[str, dict[str, float]]]) -> str:
    """Accuracies (in %) by model, split and column, as a text table.

    For example (tests/examples/test_sentiment.py checks it)::

                      |             dev              |            test
        model         |  root root-bin   all all-bin |  root root-bin   all all-bin
        m             |  50.0     75.0  87.5   100.0 |  50.0     75.0  87.5   100.0
    """
    names = {"root": "root", "root_binary": "root-bin", "all": "all", "all_binary": "all-bin"}
    widths = [max(len(names[c]), 5) + 1 for c in COLUMNS]
    span = sum(widths)
    lines = [f"{'':<14}|" + " |".join(f"{split:^{span}}" for split in ("dev", "test")),
             f"{'model':<14}|" + " |".join(
                 "".join(f"{names[c]:>{w}}" for c, w in zip(COLUMNS, widths))
                 for _ in ("dev", "test"))]
    for name, by_split in results.items():
        lines.append(f"{name:<14}|" + " |".join(
            "".join(f"{100 * by_split[split][c]:>{w}.1f}" for c, w in zip(COLUMNS, widths))
            for split in ("dev", "test")))
    return "\n".join(line.rstrip() for line in lines)


def main(argv: Sequence[str] | None = None) -> dict:
    """Runs the example; returns `{"results": ..., "histories": ..., "seconds": ...}`."""
    args = parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    start = time.perf_counter()
    raw = load_splits(args)
    vocab, embeddings = build_vocabulary(raw, args)
    data = {name: prepare(trees, vocab) for name, trees in raw.items()}
    print(f"data: {args.data}: " + ", ".join(f"{len(data[s])} {s}" for s in SPLITS)
          + f" trees; vocabulary {len(vocab)} words"
          + (f"; word vectors from {args.glove}" if args.glove else ""))
    results, histories, report, kept = {}, {}, {}, {}
    for encoder in args.models:
        print(f"\n== {encoder} ==")
        model, history, best, seconds = train(encoder, data, len(vocab), embeddings, args)
        histories[encoder], kept[encoder] = history.history, best
        results[encoder] = {split: evaluate(model, data[split], scheduler=args.scheduler)
                            for split in ("dev", "test")}
        report[encoder] = {"train_seconds": round(seconds, 1), "best_epoch": best + 1
                           if best is not None else None}
        print(f"{encoder}: trained in {seconds:.0f} s; kept epoch {report[encoder]['best_epoch']}"
              " (best dev root accuracy)")
    if not args.no_plot:
        plot_curves(histories, list(CURVES), os.path.join(args.out, "curves.png"), kept=kept)
    total = time.perf_counter() - start
    print("\naccuracy (%): root and all nodes, fine-grained (5 classes) and binary")
    print(format_table(results))
    print(describe_kept(kept, args.epochs, "best dev root accuracy"))
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"args": {k: v for k, v in vars(args).items()}, "accuracy": results,
                   "training": report, "seconds": round(total, 1)}, f, indent=2)
    print(f"\nwrote {args.out}/: " + ("curves.png, " if not args.no_plot else "")
          + "tensorboard/, history_*.csv, results.json"
          + f"; total {total:.0f} s")
    return {"results": results, "histories": histories, "seconds": total}


if __name__ == "__main__":
    main()
