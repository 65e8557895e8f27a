"""Trains a transition-based dependency parser (a BiLSTM and an MLP over arc-hybrid
configurations, Kiperwasser and Goldberg 2016) and parses the test set greedily.

    python -m refold.examples.parser                       # the shipped synthetic treebank
    python -m refold.examples.parser --data DIR            # DIR/{train,test}.conllu (e.g. UD)
    python -m refold.examples.parser --data turkish-web    # the Turkish Web Treebank (real data)
    python -m refold.examples.parser --train exploration   # follow its own predictions

Training has a loss at every transition of the static oracle's gold sequence and a
label loss at every arc (non-projective training trees are left out, and counted).
The program prints Keras' per-epoch log (losses and accuracies), then a table of
unlabelled and labelled attachment scores (UAS, LAS: the head right, and the head
and the relation label right) on the test set for the parser and two baselines that
attach every word to the word before it or after it (the first or last word to the
root), with the share of arcs longer than one word that each gets right (unlabelled)
and of sentences parsed entirely right (unlabelled), and one parsed test sentence.
The baselines label each arc with the training set's most frequent label for its
direction: of arcs to the root, of arcs from a head before the word, or of arcs from
a head after it. Labels are compared whole (`acl:relcl` is not `acl`); a test label
never seen in training cannot be predicted and counts as wrong.

With `--train exploration` the parser follows its own predictions (wrong ones with
probability `--explore`, after `--static-epochs` epochs on the gold path) and learns
from the dynamic oracle (`examples.parser.exploration`), on the same sentences; its
label classifiers learn at every configuration where an arc to the stack's top would
be gold. The walk runs on the device by default, every transition of a batch in one
engine call (`examples.parser.ondevice`); `--walk python` runs it as a `td.Unfold`
whose Python `decide` reads each step's logits (one engine call per transition).
Sentences are padded to the longest in the data (`ParserModel.max_words`); greedy
parsing of the test set runs on the device too.
"""

from __future__ import annotations

import argparse
import os
import time
from collections import Counter
from collections.abc import Sequence

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from refold.examples.parser.treebank import Sentence, read_conllu  # noqa: E402

DATA = os.path.join(os.path.dirname(__file__), "data")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m refold.examples.parser", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=DATA, help="a folder with train.conllu and "
                   "test.conllu, or turkish-web / turkish-wiki: the Turkish Web Treebank's "
                   "parts in a fixed split (examples.parser.turkish; the treebanks extra)")
    p.add_argument("--train-size", type=int, default=None, help="use the first N training "
                   "sentences (default all)")
    p.add_argument("--test-size", type=int, default=None)
    p.add_argument("--embed", type=int, default=32, help="word embedding size")
    p.add_argument("--tag-embed", type=int, default=16,
                   help="part-of-speech embedding size (0: words only)")
    p.add_argument("--hidden", type=int, default=32, help="LSTM units in each direction")
    p.add_argument("--mlp", type=int, default=64, help="the MLP's hidden units")
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.005)
    p.add_argument("--scheduler", default="agenda", choices=("agenda", "depth"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--train", default="static", choices=("static", "exploration"),
                   help="static: the static oracle's gold sequence; exploration: the "
                   "model's own path, judged by the dynamic oracle")
    p.add_argument("--explore", type=float, default=0.9, help="with --train exploration: "
                   "the probability of following a wrong prediction")
    p.add_argument("--static-epochs", type=int, default=2, help="with --train exploration: "
                   "epochs on the gold path before exploring")
    p.add_argument("--walk", default="device", choices=("device", "python"),
                   help="with --train exploration: the walk as tensor ops on the device, "
                   "one engine call per batch (examples.parser.ondevice), or as a td.Unfold "
                   "deciding in Python (examples.parser.exploration)")
    p.add_argument("--verbose", type=int, default=2, choices=(0, 1, 2))
    args = p.parse_args(argv)
    for name in ("train_size", "test_size"):
        if getattr(args, name) is not None and getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive")
    return args


def load_data(data: str) -> tuple[list[Sentence], list[Sentence]]:
    """(train, test) of `--data`: a folder's two CoNLL-U files, or a Turkish part."""
    if data.startswith("turkish-"):
        from refold.examples.parser import turkish
        return turkish.load(data[len("turkish-"):])
    return (read_conllu(os.path.join(data, "train.conllu")),
            read_conllu(os.path.join(data, "test.conllu")))


def previous_word(sentence: Sentence) -> list[int]:
    """Every word's head is the word before it; the first word's is the root."""
    return list(range(len(sentence)))


def next_word(sentence: Sentence) -> list[int]:
    """Every word's head is the word after it; the last word's is the root."""
    n = len(sentence)
    return [d + 1 if d < n else 0 for d in range(1, n + 1)]


def direction(word: int, head: int) -> str:
    """Where a word's head is: "root", "before" it or "after" it."""
    return "root" if head == 0 else "before" if head < word else "after"


def majority_labels(sentences: Sequence[Sentence]) -> dict[str, str]:
    """The most frequent relation label of each `direction` in the sentences (the
    first seen wins a tie); a direction without arcs gets the most frequent label
    overall."""
    counts: dict[str, Counter] = {k: Counter() for k in ("root", "before", "after")}
    for s in sentences:
        for d, (h, r) in enumerate(zip(s.heads, s.relations), 1):
            counts[direction(d, h)][r] += 1
    overall = sum(counts.values(), Counter()).most_common(1)[0][0]
    return {k: c.most_common(1)[0][0] if c else overall for k, c in counts.items()}


def label_by_direction(heads: Sequence[int], labels: dict[str, str]) -> list[str]:
    """Each word's arc labelled with `labels[direction]` (a baseline's labels)."""
    return [labels[direction(d, h)] for d, h in enumerate(heads, 1)]


def scores(predicted: Sequence[Sequence[int]], sentences: Sequence[Sentence],
           relations: Sequence[Sequence[str | None]] | None = None) -> dict:
    """UAS over all words, over the words whose head is more than one word away (the
    root counts as position 0; NaN when no word's is), and the share of sentences with
    every head right; with predicted `relations`, also LAS (head and label right) over
    all words."""
    hits, long_hits, exact, labelled = [], [], [], []
    for k, (heads, s) in enumerate(zip(predicted, sentences)):
        ok = [p == g for p, g in zip(heads, s.heads)]
        hits.extend(ok)
        long_hits.extend(o for d, (o, g) in enumerate(zip(ok, s.heads), 1) if abs(d - g) > 1)
        exact.append(all(ok))
        if relations is not None:
            labelled.extend(o and p == g for o, p, g in zip(ok, relations[k], s.relations))
    out = {"uas": float(np.mean(hits)),
           "long_arcs": float(np.mean(long_hits)) if long_hits else float("nan"),
           "exact": float(np.mean(exact))}
    if relations is not None:
        out["las"] = float(np.mean(labelled))
    return out


def format_table(results: dict[str, dict]) -> str:
    lines = ["| parser | test UAS | test LAS | arcs longer than 1 | sentences exact |",
             "|---|---|---|---|---|"]
    for name, r in results.items():
        las = f"{100 * r['las']:.1f}" if "las" in r else "-"
        long_arcs = "-" if np.isnan(r["long_arcs"]) else f"{100 * r['long_arcs']:.1f}"
        lines.append(f"| {name} | {100 * r['uas']:.1f} | {las} | {long_arcs} | "
                     f"{100 * r['exact']:.1f} |")
    return "\n".join(lines)


def training_items(sentences: Sequence[Sentence], vocab) -> tuple[list[dict], int]:
    """The model's inputs (with labels) for the projective sentences, and how many
    were not."""
    from refold.examples.parser.model import labelled_input
    from refold.examples.parser.transitions import NonProjectiveError
    items, skipped = [], 0
    for s in sentences:
        try:
            items.append(labelled_input(s, vocab))
        except NonProjectiveError:
            skipped += 1
    return items, skipped


def main(argv: Sequence[str] | None = None) -> dict:
    """Runs the example; returns the training history, the scores and the parses."""
    import keras

    from refold.compiler import Model
    from refold.examples.parser.model import ParserModel, Vocabulary
    args = parse_args(argv)
    start = time.perf_counter()
    train, test = load_data(args.data)
    train, test = train[:args.train_size], test[:args.test_size]
    vocab = Vocabulary.from_sentences(train)
    items, skipped = training_items(train, vocab)
    n_words = sum(len(s) for s in train)
    print(f"{len(train)} training sentences ({n_words} words, {n_words / len(train):.1f} "
          f"per sentence; {skipped} non-projective left out), {len(test)} test sentences; "
          f"{len(vocab.words)} words, {len(vocab.tags)} tags, {len(vocab.labels)} "
          "relation labels")
    keras.utils.set_random_seed(args.seed)
    longest = max(len(s) for s in (*train, *test))
    parser = ParserModel(vocab, embed=args.embed, tag_embed=args.tag_embed,
                         hidden=args.hidden, mlp=args.mlp, scheduler=args.scheduler,
                         max_words=longest)
    callbacks = []
    if args.train == "exploration":  # the same (projective) sentences as static training
        from refold.examples.parser.exploration import Exploration, exploration_input
        from refold.examples.parser.treebank import is_projective
        if args.walk == "device":
            from refold.examples.parser.ondevice import DeviceExploration
            exploring = DeviceExploration(parser, explore=args.explore)
        else:
            exploring = Exploration(parser, explore=args.explore)
        projective = [s for s in train if is_projective(s.heads)]
        items = [exploration_input(s, vocab, seed=i) for i, s in enumerate(projective)]
        block = exploring.block
        callbacks.append(exploring.schedule(args.static_epochs, args.explore))
    else:
        block = parser.training_block
    model = Model(block, scheduler=args.scheduler, seed=args.seed)
    model.compile(optimizer=keras.optimizers.Adam(args.lr))
    history = model.fit(items, batch_size=args.batch_size, epochs=args.epochs,
                        verbose=args.verbose, callbacks=callbacks)
    trained = time.perf_counter()
    labelled = parser.parse_labelled(test)
    parsed = time.perf_counter()
    parses = [heads for heads, _ in labelled]
    majority = majority_labels(train)
    results = {"BiLSTM arc-hybrid (greedy)": scores(parses, test,
                                                    [r for _, r in labelled])}
    for name, baseline in (("previous word", previous_word), ("next word", next_word)):
        guesses = [baseline(s) for s in test]
        results[name] = scores(guesses, test,
                               [label_by_direction(h, majority) for h in guesses])
    print(f"\n{args.train} training; trained in {trained - start:.0f} s; parsed {len(test)} "
          f"test sentences in {parsed - trained:.1f} s "
          f"({len(test) / (parsed - trained):.0f} sentences/s)\n")
    print(format_table(results))
    s, (heads, relations) = test[0], labelled[0]
    print("\n" + " ".join(f"{w}<-{h}:{r}" for w, h, r in zip(s.words, heads, relations))
          + f"   (head positions and labels; gold {list(zip(s.heads, s.relations))})")
    return {"history": history.history, "scores": results, "parses": parses,
            "relations": [r for _, r in labelled]}


if __name__ == "__main__":
    main()
