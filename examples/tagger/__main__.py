"""Trains a BiLSTM tagger (and a left-to-right LSTM of the same size) on the synthetic
language of `examples.tagger.tagger`, with a loss at every word.

    python -m refold.examples.tagger [--epochs 6] [--train-size 2000] [--models bilstm,lstm]

Prints Keras' per-epoch log, then per model the test accuracy over all words and over
the ambiguous words only, and one tagged test sentence.

With `--data` it tags a real treebank instead (`examples.tagger.treebank`):

    python -m refold.examples.tagger --data turkish-web [--epochs 6]   # see --data --help
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from refold.examples.tagger.tagger import AMBIGUOUS, TAGS, dataset, tagger_model  # noqa: E402

MODELS = {"bilstm": True, "lstm": False}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m refold.examples.tagger", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", help="tag a real treebank instead: turkish-web, turkish-wiki, "
                   "a CoNLL-U file or folder (options: --data turkish-web --help)")
    p.add_argument("--train-size", type=int, default=2000)
    p.add_argument("--test-size", type=int, default=500)
    p.add_argument("--models", default="bilstm,lstm",
                   help="comma-separated, of: bilstm (BiLSTM), lstm (left-to-right only)")
    p.add_argument("--embed", type=int, default=16)
    p.add_argument("--hidden", type=int, default=32, help="LSTM units in each direction")
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--verbose", type=int, default=2, choices=(0, 1, 2))
    args = p.parse_args(argv)
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    if not args.models or any(m not in MODELS for m in args.models):
        p.error(f"--models: choose from {', '.join(MODELS)}")
    return args


def tag_accuracy(predictions: list, items: list[dict], texts: list[list[str]]):
    """(accuracy over all words, accuracy over the ambiguous words) of `predictions`,
    one `[n_words]` array of tag ids per sentence."""
    hits, ambiguous_hits = [], []
    for pred, item, words in zip(predictions, items, texts):
        ok = np.asarray(pred) == np.asarray(item["tags"])
        hits.extend(ok.tolist())
        ambiguous_hits.extend(h for h, w in zip(ok, words) if w in AMBIGUOUS)
    return float(np.mean(hits)), float(np.mean(ambiguous_hits))


def main(argv: Sequence[str] | None = None) -> dict:
    """Runs the example; returns histories, accuracies and the first test predictions.
    With `--data`, runs `examples.tagger.treebank.main` instead."""
    import sys
    if any(a == "--data" or a.startswith("--data=")
           for a in (sys.argv[1:] if argv is None else argv)):
        from refold.examples.tagger import treebank
        return treebank.main(argv)
    import keras

    from refold.compiler import Model
    args = parse_args(argv)
    rng = np.random.default_rng(args.seed)
    train, _ = dataset(args.train_size, rng)
    test, test_words = dataset(args.test_size, rng)
    n_words = sum(len(x["words"]) for x in train)
    print(f"{len(train)} training sentences ({n_words} words, "
          f"{n_words / len(train):.1f} per sentence), {len(test)} test sentences")
    out = {"history": {}, "accuracy": {}, "ambiguous_accuracy": {}, "predictions": {}}
    for name in args.models:
        print(f"\n== {name} ==")
        keras.utils.set_random_seed(args.seed)
        model = Model(tagger_model(args.embed, args.hidden, bidirectional=MODELS[name]),
                      seed=args.seed)
        model.compile(optimizer=keras.optimizers.Adam(args.lr))
        history = model.fit(train, batch_size=args.batch_size, epochs=args.epochs,
                            validation_data=test, verbose=args.verbose)
        results = model.predict(test, batch_size=128, verbose=0)
        predictions = [np.argmax(np.stack(logits), axis=1) if len(logits) else np.zeros(0)
                       for logits, _ in results]
        acc, amb = tag_accuracy(predictions, test, test_words)
        out["history"][name] = history.history
        out["accuracy"][name], out["ambiguous_accuracy"][name] = acc, amb
        out["predictions"][name] = predictions
        print(f"{name}: test accuracy {100 * acc:.1f}% of words, {100 * amb:.1f}% of "
              "ambiguous words")
        print("  " + " ".join(f"{w}/{TAGS[t]}" for w, t in zip(test_words[0], predictions[0])))
    print("\n" + "\n".join(f"{name:<8} all words {100 * out['accuracy'][name]:5.1f}%   "
                           f"ambiguous words {100 * out['ambiguous_accuracy'][name]:5.1f}%"
                           for name in args.models))
    return out


if __name__ == "__main__":
    main()
