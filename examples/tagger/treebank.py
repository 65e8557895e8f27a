"""Part-of-speech tagging on a real treebank: the Turkish Web Treebank or any CoNLL-U.

    python -m refold.examples.tagger --data turkish-web    # or turkish-wiki
    python -m refold.examples.tagger --data FILE.conllu    # every tenth sentence is test
    python -m refold.examples.tagger --data DIR            # DIR/train.conllu, DIR/test.conllu

Trains two BiLSTM taggers of one size on the UPOS column, with a loss at every word
(`examples.tagger.char_tagger`): *lookup only*, where a word seen fewer than twice in
training reads the `<unk>` vector, and *char BiLSTM*, where such a word is read from
its spelling by a character BiLSTM. Every tenth training sentence (`--dev-every`) is
held out as a development set, and each tagger keeps the weights of its epoch of best
development accuracy (with `--dev-every 0`, all train and the last epoch is kept); the
test set chooses nothing. Then prints one table of test accuracy over all words and
over the words never seen in training, for both and for the most-frequent-tag
baseline (each training word's commonest tag; an unseen word gets the commonest tag
overall), and writes to `--out` `curves.png` (training and development curves),
`history_<model>.csv` and `results.json`. In training the word LSTMs drop half of each
word vector and 0.3 of their state (`--dropout`, `--recurrent-dropout`; 0 for none),
which measured better than none here (docs/guide/dropout.md).

The Turkish parts are read and split as the parser reads them
(`examples.parser.turkish`: every tenth sentence, from the 0th, is test); another file
is read by `examples.treebanks.read`, which leaves malformed sentences out and says so.
The tags, the word vocabulary and the alphabet come from the training sentences
(`vocabulary`); characters not in the alphabet read as one unknown character.

>>> from refold.examples.parser.treebank import Sentence
>>> train = [Sentence(["a", "dog", "a", "run"], ["DET", "NOUN", "DET", "NOUN"], [2, 0, 4, 2]),
...          Sentence(["run"], ["VERB"], [0]), Sentence(["run"], ["VERB"], [0]),
...          Sentence(["dog"], ["NOUN"], [0])]
>>> baseline = MostFrequentTag(train)
>>> baseline(["a", "run", "cat"])
['DET', 'VERB', 'NOUN']
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import Counter
from collections.abc import Sequence

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from refold.examples.parser.treebank import Sentence  # noqa: E402
from refold.examples.tagger.rare_words import RARE_BELOW, Vocabulary  # noqa: E402

__all__ = ["MODELS", "load", "hold_out", "vocabulary", "MostFrequentTag", "accuracies",
           "format_table", "main"]

MODELS = {"lookup": "lookup-only BiLSTM", "char": "char BiLSTM for rare words"}
# the word LSTMs' dropouts, from runs with and without on the Turkish web part, same
# seeds and budget (docs/guide/dropout.md): test accuracy +0.3 points for both taggers
# at 10 epochs (+0.5/+0.7 at 20), development accuracy at the last epoch +0.6/+1.0
DROPOUT, RECURRENT_DROPOUT = 0.5, 0.3
BASELINE = "most frequent tag"
CURVES = [("loss", "loss (cross-entropy per word)"), ("accuracy", "tag accuracy")]


def load(data: str) -> tuple[list[Sentence], list[Sentence], str]:
    """(train, test, a line saying what was read) of `--data`."""
    from refold.examples.parser import turkish
    from refold.examples.treebanks import read
    if data.startswith("turkish-"):
        if data[len("turkish-"):] not in turkish.PARTS:
            raise SystemExit(f"error: --data {data}: the Turkish treebank's parts are "
                             + ", ".join(f"turkish-{p}" for p in turkish.PARTS))
        train, test = turkish.load(data[len("turkish-"):])
        return train, test, f"the Turkish treebank's {data[len('turkish-'):]} part"
    if os.path.isdir(data):
        readings = [read(os.path.join(data, f"{split}.conllu")) for split in ("train", "test")]
        train, test = (r.sentences for r in readings)
        what = "; ".join(f"{split}.conllu: {r.summary()}"
                         for split, r in zip(("train", "test"), readings))
    elif os.path.isfile(data):
        reading = read(data)
        train = [s for i, s in enumerate(reading.sentences) if i % turkish.TEST_EVERY]
        test = [s for i, s in enumerate(reading.sentences) if i % turkish.TEST_EVERY == 0]
        what = f"{data}: {reading.summary()}; every {turkish.TEST_EVERY}th is test"
    else:
        raise SystemExit(f"error: --data {data!r} is not turkish-web, turkish-wiki, a "
                         "CoNLL-U file or a folder with train.conllu and test.conllu")
    if not train or not test:
        raise SystemExit(f"error: --data {data}: {len(train)} training and {len(test)} test "
                         f"sentences; both are needed ({what})")
    return train, test, what


def hold_out(train: Sequence[Sentence], every: int) -> tuple[list, list]:
    """(train, dev): every `every`-th sentence (the 0th, ...) is dev; none if 0."""
    if every < 1:
        return list(train), []
    return ([s for i, s in enumerate(train) if i % every],
            [s for i, s in enumerate(train) if i % every == 0])


def vocabulary(train: Sequence[Sentence], test: Sequence[Sentence] = ()) -> Vocabulary:
    """The training words seen at least `RARE_BELOW` times, the training tags (most
    frequent first) and the training words' characters (in code-point order).

    A tag found only in `test` goes last: no model learns to predict it, but the test
    can still count it wrong.
    """
    tag_counts = Counter(t for s in train for t in s.tags)
    tags = sorted(tag_counts, key=lambda t: (-tag_counts[t], t))
    tags += sorted({t for s in test for t in s.tags} - set(tags))
    characters = sorted({c for s in train for w in s.words for c in w})
    return Vocabulary.build((s.words for s in train), RARE_BELOW, tags, characters)


class MostFrequentTag:
    """The baseline: each training word's commonest tag (ties to the tag commoner
    overall); a word not seen in training gets the commonest tag overall."""

    def __init__(self, train: Sequence[Sentence]):
        overall = Counter(t for s in train for t in s.tags)
        rank = {t: (-n, t) for t, n in overall.items()}
        per_word: dict[str, Counter] = {}
        for s in train:
            for w, t in zip(s.words, s.tags):
                per_word.setdefault(w, Counter())[t] += 1
        self.default = min(rank, key=rank.get)
        self.tags = {w: min(c, key=lambda t: (-c[t], rank[t])) for w, c in per_word.items()}

    def __call__(self, words: Sequence[str]) -> list[str]:
        return [self.tags.get(w, self.default) for w in words]


def accuracies(predicted: Sequence[Sequence[str]], test: Sequence[Sentence],
               seen: Counter | dict) -> dict:
    """Accuracy of `predicted` (tags per test sentence) over all words and over the
    words not in `seen` (the training words); None where there are none."""
    hits: dict = {"all": [], "unseen": []}
    for tags, s in zip(predicted, test):
        if len(tags) != len(s):
            raise ValueError(f"{len(tags)} predicted tags for a sentence of {len(s)} words")
        for p, g, w in zip(tags, s.tags, s.words):
            hits["all"].append(p == g)
            if w not in seen:
                hits["unseen"].append(p == g)
    return {k: float(np.mean(v)) if v else None for k, v in hits.items()}


def format_table(results: dict, counts: dict) -> str:
    """The accuracy table, one row per tagger."""
    rows = [f"| tagger | all words ({counts['all']}) | unseen words ({counts['unseen']}) |",
            "|---|---|---|"]
    for name, acc in results.items():
        cells = ["-" if acc[k] is None else f"{100 * acc[k]:.1f}%" for k in ("all", "unseen")]
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m refold.examples.tagger", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="turkish-web, turkish-wiki (the "
                   "treebanks extra), a CoNLL-U file, or a folder with train.conllu and "
                   "test.conllu")
    p.add_argument("--models", default="lookup,char",
                   help="comma-separated, of: lookup (rare words are <unk>), char (rare "
                        "words through a character BiLSTM); the baseline always runs")
    p.add_argument("--train-size", type=int, default=None,
                   help="use the first N training sentences (default all)")
    p.add_argument("--test-size", type=int, default=None)
    p.add_argument("--char-embed", type=int, default=16)
    p.add_argument("--char-hidden", type=int, default=32,
                   help="character LSTM units each way (word vectors have twice this)")
    p.add_argument("--hidden", type=int, default=32, help="word LSTM units each way")
    p.add_argument("--dropout", type=float, default=DROPOUT,
                   help="fraction of each word vector the word LSTMs drop in training")
    p.add_argument("--recurrent-dropout", type=float, default=RECURRENT_DROPOUT,
                   help="fraction of the word LSTMs' state h dropped in training")
    p.add_argument("--dev-every", type=int, default=10, help="hold out every Nth training "
                   "sentence to choose the epoch (0: none; keep the last epoch)")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.005, help="Adam's learning rate")
    p.add_argument("--scheduler", default="agenda", choices=("agenda", "depth"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="folder for curves.png, history CSVs and "
                   "results.json (default runs/tagger-<data>)")
    p.add_argument("--no-plot", action="store_true", help="do not write curves.png")
    p.add_argument("--verbose", type=int, default=2, choices=(0, 1, 2))
    args = p.parse_args(argv)
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    if any(m not in MODELS for m in args.models):
        p.error(f"--models: choose from {', '.join(MODELS)}")
    for name in ("train_size", "test_size", "epochs"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be positive")
    if args.out is None:
        args.out = os.path.join("runs", "tagger-" + os.path.basename(
            os.path.normpath(args.data)).removesuffix(".conllu"))
    return args


def train_tagger(name: str, vocab: Vocabulary, train: list[dict], dev: list[dict],
                 args: argparse.Namespace):
    """A trained `compiler.Model` of the `name` tagger (at its best dev epoch if there
    is a dev set), its Keras history, and the epoch kept (1-based)."""
    import keras

    from refold.compiler import Model
    from refold.examples.tagger.char_tagger import char_tagger_model
    from refold.examples.training import keep_best
    keras.utils.set_random_seed(args.seed)
    block = char_tagger_model(len(vocab), name, args.char_embed, args.char_hidden,
                              args.hidden, num_tags=len(vocab.tags),
                              characters=len(vocab.characters), dropout=args.dropout,
                              recurrent_dropout=args.recurrent_dropout)
    model = Model(block, scheduler=args.scheduler, seed=args.seed)
    model.compile(optimizer=keras.optimizers.Adam(args.lr))
    callbacks = [keras.callbacks.CSVLogger(os.path.join(args.out, f"history_{name}.csv"))]
    if dev:
        callbacks.append(keep_best("val_accuracy"))
    history = model.fit(train, batch_size=args.batch_size, epochs=args.epochs,
                        validation_data=dev or None, callbacks=callbacks,
                        verbose=args.verbose)
    kept = callbacks[1].best_epoch + 1 if dev else args.epochs
    return model, history, kept


def main(argv: Sequence[str] | None = None) -> dict:
    """Runs the example; returns the accuracies, the predicted tags, the histories."""
    args = parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    start = time.perf_counter()
    train, test, what = load(args.data)
    train, dev = hold_out(train[:args.train_size], args.dev_every)
    test = test[:args.test_size]
    vocab = vocabulary(train, dev + test)
    flat = [w for s in test for w in s.words]
    counts = {"all": len(flat), "unseen": sum(w not in vocab.counts for w in flat)}
    n_words = sum(len(s) for s in train)
    print(f"data: {what}\n{len(train)} training sentences ({n_words} words, "
          f"{len(vocab.counts)} distinct, {len(vocab) - 1} seen twice or more), {len(dev)} "
          f"development sentences, {len(test)} "
          f"test sentences ({counts['all']} words, {counts['unseen']} unseen in training); "
          f"{len(vocab.tags)} tags, {len(vocab.characters)} characters")
    baseline = MostFrequentTag(train)
    predicted = {BASELINE: [baseline(s.words) for s in test]}
    histories, seconds, kept = {}, {}, {}
    train_items, dev_items, test_items = ([vocab.encode(s.words, s.tags) for s in part]
                                          for part in (train, dev, test))
    for name in args.models:
        print(f"\n== {MODELS[name]} ==")
        began = time.perf_counter()
        model, history, kept[name] = train_tagger(name, vocab, train_items, dev_items, args)
        results = model.predict(test_items, batch_size=128, verbose=0)
        predicted[MODELS[name]] = [[vocab.tags[i] for i in np.argmax(np.stack(logits), 1)]
                                   for logits, _ in results]
        histories[MODELS[name]] = history.history
        seconds[name] = round(time.perf_counter() - began, 1)
        print(f"trained and tagged in {seconds[name]:.0f} s; kept epoch {kept[name]}"
              + (" (best development accuracy)" if dev else " (the last)"))
    accuracy = {name: accuracies(tags, test, vocab.counts) for name, tags in predicted.items()}
    if histories and not args.no_plot:
        from refold.examples.training import plot_curves
        plot_curves(histories, CURVES, os.path.join(args.out, "curves.png"),
                    kept={MODELS[n]: e - 1 for n, e in kept.items()})
    total = time.perf_counter() - start
    print("\ntest part-of-speech accuracy (" + ", ".join(
        f"{MODELS[n]}: epoch {e} of {args.epochs}" for n, e in kept.items()) + "):")
    print(format_table(accuracy, counts))
    s = test[0]
    for name, tags in predicted.items():
        print(f"  {name}: " + " ".join(f"{w}/{t}" for w, t in zip(s.words, tags[0])))
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"args": vars(args), "data": what, "counts": counts, "accuracy": accuracy,
                   "kept_epoch": kept, "train_seconds": seconds, "seconds": round(total, 1)},
                  f, indent=2)
    print(f"\nwrote {args.out}/: " + ("curves.png, " if histories and not args.no_plot else "")
          + f"history_*.csv, results.json; total {total:.0f} s")
    return {"accuracy": accuracy, "predicted": predicted, "histories": histories,
            "counts": counts, "kept_epoch": kept}
