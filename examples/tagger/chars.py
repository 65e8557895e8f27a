"""Trains the BiLSTM tagger on the open-vocabulary language of
`examples.tagger.rare_words` twice: rare words as `<unk>` (lookup only), and rare
words read by a character BiLSTM (`examples.tagger.char_tagger`).

    python -m refold.examples.tagger.chars [--words lookup,char] [--epochs 5] [--train-size 2000]

A word is rare if it occurs fewer than twice in the training data; at test time
unknown words are rare too. Prints Keras' per-epoch log, then a table of test
accuracy over all words, over the rare words and over the unseen ones (never in the
training data) for each model.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from refold.examples.tagger.char_tagger import WORDS, char_tagger_model  # noqa: E402
from refold.examples.tagger.rare_words import TAGS, Vocabulary, dataset  # noqa: E402

NAMES = {"lookup": "lookup only", "char": "char BiLSTM for rare words"}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m refold.examples.tagger.chars", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--words", default="lookup,char",
                   help="comma-separated, of: lookup (rare words are <unk>), char (rare "
                        "words through a character BiLSTM)")
    p.add_argument("--train-size", type=int, default=2000)
    p.add_argument("--test-size", type=int, default=500)
    p.add_argument("--char-embed", type=int, default=20)
    p.add_argument("--char-hidden", type=int, default=64,
                   help="character LSTM units each way (word vectors have twice this)")
    p.add_argument("--hidden", type=int, default=32, help="word LSTM units each way")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--verbose", type=int, default=2, choices=(0, 1, 2))
    args = p.parse_args(argv)
    args.words = [m.strip() for m in args.words.split(",") if m.strip()]
    if not args.words or any(m not in WORDS for m in args.words):
        p.error(f"--words: choose from {', '.join(WORDS)}")
    return args


def accuracies(predictions: list, items: list[dict], texts: list[list[str]],
               vocabulary: Vocabulary) -> dict:
    """Accuracy of `predictions` (one `[n_words]` array of tag ids per sentence) over
    all words, the rare words and the unseen words; None where there are none."""
    hits: dict = {"all": [], "rare": [], "unseen": []}
    for pred, item, words in zip(predictions, items, texts):
        for ok, w in zip(np.asarray(pred) == np.asarray(item["tags"]), words):
            hits["all"].append(ok)
            if vocabulary.is_rare(w):
                hits["rare"].append(ok)
            if w not in vocabulary.counts:
                hits["unseen"].append(ok)
    return {k: float(np.mean(v)) if v else None for k, v in hits.items()}


def format_table(results: dict, counts: dict) -> str:
    """The accuracy table, one row per model."""
    header = (f"| words | all ({counts['all']}) | rare ({counts['rare']}) | "
              f"unseen ({counts['unseen']}) |")
    rows = [header, "|---|---|---|---|"]
    for name, acc in results.items():
        cells = ["-" if acc[k] is None else f"{100 * acc[k]:.1f}%"
                 for k in ("all", "rare", "unseen")]
        rows.append(f"| {NAMES[name]} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> dict:
    """Runs the example; returns histories, accuracies and the test predictions."""
    import keras

    from refold.compiler import Model
    args = parse_args(argv)
    rng = np.random.default_rng(args.seed)
    train, test, test_words, vocab = dataset(args.train_size, args.test_size, rng)
    n_words = sum(len(x["words"]) for x in train)
    n_rare = sum("chars" in w for x in train for w in x["words"])
    flat = [w for s in test_words for w in s]
    counts = {"all": len(flat), "rare": sum(map(vocab.is_rare, flat)),
              "unseen": sum(w not in vocab.counts for w in flat)}
    print(f"{len(train)} training sentences ({n_words} words, {n_rare} of them rare), "
          f"{len(vocab)} word ids; {len(test)} test sentences ({counts['all']} words, "
          f"{counts['rare']} rare, {counts['unseen']} unseen)")
    out: dict = {"history": {}, "accuracy": {}, "predictions": {}, "counts": counts}
    for name in args.words:
        print(f"\n== {NAMES[name]} ==")
        keras.utils.set_random_seed(args.seed)
        model = Model(char_tagger_model(len(vocab), name, args.char_embed, args.char_hidden,
                                        args.hidden), seed=args.seed)
        model.compile(optimizer=keras.optimizers.Adam(args.lr))
        history = model.fit(train, batch_size=args.batch_size, epochs=args.epochs,
                            validation_data=test, verbose=args.verbose)
        results = model.predict(test, batch_size=128, verbose=0)
        predictions = [np.argmax(np.stack(logits), axis=1) for logits, _ in results]
        out["history"][name] = history.history
        out["accuracy"][name] = accuracies(predictions, test, test_words, vocab)
        out["predictions"][name] = predictions
        print("  " + " ".join(f"{w}/{TAGS[t]}" for w, t in zip(test_words[0], predictions[0])))
    print("\nTest accuracy by word frequency in training (rare: seen < 2 times):")
    print(format_table(out["accuracy"], counts))
    return out


if __name__ == "__main__":
    main()
