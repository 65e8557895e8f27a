"""A bug detector for Python, trained on bugs seeded into the standard library.

    python -m refold.examples.bugs [--train-sites 6000] [--epochs 6] [--models ...]

reads the shipped sites (`data/bugs.jsonl.gz`: expressions of CPython 3.11.7's standard
library in their statements, split by file; regenerate with `python -m
refold.examples.bugs.extract`), draws `--train-sites` and `--dev-sites` of each kind
(swapped arguments, wrong operator, wrong operand), and makes of each site two
examples: the code as written (correct) and with its bug seeded (buggy). It trains
detectors of the same sizes with the same budget (`examples.bugs.models`): a child-sum
TreeLSTM over the statement's tree with sibling positions, a BiLSTM over its tokens
and a bag of tokens (`--models` picks; `tree_lstm` is the TreeLSTM without positions).
The epoch with the best dev accuracy is kept. It prints the test accuracy per bug kind
and overall (every test site, `--test-sites` to cap), then runs the detector with the
best dev accuracy over the unmodified test modules and prints the `--top` spots it
finds most suspicious, with file and line. It writes `curves.png`,
`history_<model>.csv`, `spots_<model>.txt` and `results.json` to `--out` (default
`runs/bugs`).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Sequence

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from refold.examples.bugs.data import KINDS, SPLITS, Task, read_sites, sample  # noqa: E402
from refold.examples.bugs.extract import DEFAULT_PATH  # noqa: E402
from refold.examples.bugs.models import DEFAULT_DETECTORS, DETECTORS, detector  # noqa: E402


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m refold.examples.bugs", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=DEFAULT_PATH, help="sites written by .extract")
    p.add_argument("--train-sites", type=int, default=6000,
                   help="training sites drawn per kind (two examples each)")
    p.add_argument("--dev-sites", type=int, default=400, help="dev sites drawn per kind")
    p.add_argument("--test-sites", type=int, default=0,
                   help="test sites drawn per kind (0: all)")
    p.add_argument("--min-count", type=int, default=3,
                   help="tokens seen fewer times in training are read from their parts")
    p.add_argument("--models", nargs="+", default=list(DEFAULT_DETECTORS), choices=DETECTORS,
                   help="default: %(default)s (see examples.bugs.models)")
    p.add_argument("--embed", type=int, default=32)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--dropout", type=float, default=0.0,
                   help="fraction of token vectors and of the classified vector dropped "
                        "in training")
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.003)
    p.add_argument("--seed", type=int, default=0,
                   help="the weights' initialisation and the order of training examples "
                        "(the sites drawn stay the same)")
    p.add_argument("--top", type=int, default=20, help="suspicious spots to print")
    p.add_argument("--out", default="runs/bugs")
    p.add_argument("--no-plot", action="store_true", help="do not write curves.png")
    p.add_argument("--verbose", type=int, default=2, choices=(0, 1, 2))
    args = p.parse_args(argv)
    for name in ("train_sites", "dev_sites", "epochs", "embed", "hidden", "min_count"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.test_sites < 0 or args.top < 0:
        p.error("--test-sites and --top must be at least 0")
    return args


def accuracies(prob: np.ndarray, labels: np.ndarray, kinds: list[str]) -> dict[str, float]:
    """Accuracy (predicted buggy when `prob` > 0.5) per kind and over all (`"all"`).

    >>> kinds = ["swap", "swap", "operand", "operand"]
    >>> accuracies(np.array([.9, .2, .6, .6]), np.array([1, 0, 0, 1]), kinds)
    {'swap': 1.0, 'operand': 0.5, 'all': 0.75}
    """
    hit = (prob > 0.5) == (labels == 1)
    kinds_ = np.array(kinds)
    out = {k: float(np.mean(hit[kinds_ == k])) for k in KINDS if np.any(kinds_ == k)}
    out["all"] = float(np.mean(hit))
    return out


def format_table(rows: dict[str, dict[str, dict[str, float]]]) -> str:
    """Accuracy (%) by model: dev over all kinds, test per kind and over all.

    >>> print(format_table({"m": {"dev": {"all": .5},
    ...                           "test": {"swap": .5, "operator": 1, "operand": .75, "all": .7}}}))
    model           | dev all | test swap operator operand   all
    m               |    50.0 |      50.0    100.0    75.0  70.0
    """
    lines = [f"{'model':<16}| dev all | test swap operator operand   all"]
    for name, r in rows.items():
        t = r["test"]
        cells = [f"{100 * t[k]:4.1f}" if k in t else "   -" for k in KINDS]
        lines.append(f"{name:<16}|    {100 * r['dev']['all']:4.1f} |      {cells[0]}    "
                     f"{cells[1]:>5}    {cells[2]}  {100 * t['all']:4.1f}")
    return "\n".join(lines)


def spots(sites: list[dict], prob_correct_code: np.ndarray, top: int) -> list[dict]:
    """The `top` sites of unmodified code scored most likely buggy, one per place (the
    kinds that share it listed), highest first.

    >>> s = [{"file": "a.py", "line": 3, "col": 4, "kind": k, "code": "x < n"}
    ...      for k in ("operator", "operand")] + [{"file": "b.py", "line": 1, "col": 0,
    ...      "kind": "swap", "code": "f(a, b)"}]
    >>> [(x["file"], x["kinds"], x["score"]) for x in spots(s, np.array([.7, .7, .2]), 5)]
    [('a.py', ['operator', 'operand'], 0.7), ('b.py', ['swap'], 0.2)]
    """
    places: dict = {}
    for site, p in zip(sites, prob_correct_code):
        key = (site["file"], site["line"], site["col"])
        place = places.setdefault(key, {"file": site["file"], "line": site["line"],
                                        "code": site["code"], "kinds": [], "score": 0.0})
        place["kinds"].append(site["kind"])
        place["score"] = max(place["score"], round(float(p), 4))
    return sorted(places.values(), key=lambda x: (-x["score"], x["file"], x["line"]))[:top]


def format_spots(found: list[dict]) -> str:
    """One line per spot: rank, score, file:line, kinds, code."""
    return "\n".join(f"{k:2d}. {s['score']:.3f}  {s['file']}:{s['line']}  "
                     f"[{'/'.join(s['kinds'])}]  {s['code']}" for k, s in enumerate(found, 1))


def load(args: argparse.Namespace):
    """`(task, {split: sites}, {split: examples}, read report)`; a site's two examples
    are at `2 * i` (as written) and `2 * i + 1` (seeded)."""
    all_sites, report = read_sites(args.data)
    print(report)
    cap = {"train": args.train_sites, "dev": args.dev_sites, "test": args.test_sites or None}
    sites = {s: sample(all_sites, s, cap[s]) for s in SPLITS}
    for s in SPLITS:
        if not sites[s]:
            raise ValueError(f"{args.data}: no {s} sites")
    task = Task(sites["train"], min_count=args.min_count)
    data = {s: [x for site in sites[s] for x in task.pair(site)] for s in SPLITS}
    return task, sites, data, report


def train(kind: str, task: Task, data: dict, args: argparse.Namespace):
    """Trains one detector; returns (P(buggy) by split, history, best epoch, params,
    seconds)."""
    import keras

    from refold.compiler import Model
    from refold.examples.training import keep_best
    keras.utils.set_random_seed(args.seed)
    model = Model(detector(kind, len(task.vocabulary), args.embed, args.hidden, args.dropout),
                  seed=args.seed)
    model.compile(optimizer=keras.optimizers.Adam(args.lr), metrics=["accuracy"],
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    order = np.random.default_rng(args.seed).permutation(len(data["train"]))
    train_x = [data["train"][i] for i in order]
    train_y = np.array([x["label"] for x in train_x])
    dev_y = np.array([x["label"] for x in data["dev"]])
    best = keep_best("val_accuracy")
    start = time.perf_counter()
    history = model.fit(train_x, train_y, batch_size=args.batch_size, epochs=args.epochs,
                        validation_data=(data["dev"], dev_y),
                        callbacks=[best, keras.callbacks.CSVLogger(
                            os.path.join(args.out, f"history_{kind}.csv"))],
                        verbose=args.verbose)
    seconds = time.perf_counter() - start
    prob = {}
    for s in ("dev", "test"):
        logits = model.predict(data[s], batch_size=256, verbose=0)
        z = np.exp(logits - logits.max(axis=1, keepdims=True))
        prob[s] = z[:, 1] / z.sum(axis=1)
    return prob, history.history, best.best_epoch, model.count_params(), seconds


def main(argv: Sequence[str] | None = None) -> dict:
    """Runs the example; returns `{"rows", "histories", "spots", "scanned", "task",
    "seconds"}`."""
    args = parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    start = time.perf_counter()
    task, sites, data, report = load(args)
    print("; ".join(f"{s}: " + ", ".join(f"{sum(x['kind'] == k for x in sites[s])} {k}"
                                         for k in KINDS) for s in SPLITS)
          + f" sites (two examples each); {len(task.vocabulary)} tokens")
    kinds = {s: [site["kind"] for site in sites[s] for _ in range(2)] for s in SPLITS}
    labels = {s: np.array([x["label"] for x in data[s]]) for s in SPLITS}
    rows, histories, report_rows, found = {}, {}, {}, {}
    for kind in args.models:
        print(f"\n== {kind} ==")
        prob, history, best, params, seconds = train(kind, task, data, args)
        rows[kind] = {s: accuracies(prob[s], labels[s], kinds[s]) for s in ("dev", "test")}
        histories[kind] = history
        report_rows[kind] = {"params": params, "train_seconds": round(seconds, 1),
                             "best_epoch": None if best is None else best + 1}
        found[kind] = spots(sites["test"], prob["test"][0::2], args.top)
        with open(os.path.join(args.out, f"spots_{kind}.txt"), "w") as f:
            f.write(format_spots(found[kind]) + "\n")
        print(f"{kind}: {params} weights, trained in {seconds:.0f} s, kept epoch "
              f"{report_rows[kind]['best_epoch']} (best dev accuracy)")
    if not args.no_plot:
        from refold.examples.training import plot_curves
        plot_curves(histories, [("loss", "cross-entropy"), ("accuracy", "accuracy")],
                    os.path.join(args.out, "curves.png"))
    total = time.perf_counter() - start
    print("\naccuracy on correct and seeded code, half each (%; chance 50):")
    print(format_table(rows))
    scanned = max(rows, key=lambda k: rows[k]["dev"]["all"])
    places = len({(s["file"], s["line"], s["col"]) for s in sites["test"]})
    files = len({s["file"] for s in sites["test"]})
    if args.top:
        print(f"\nthe {len(found[scanned])} spots {scanned} (best on dev) finds most suspicious "
              f"in the unmodified test modules ({places} places in {files} files; P(buggy)):")
        print(format_spots(found[scanned]))
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"args": vars(args), "sizes": {s: len(data[s]) for s in SPLITS},
                   "vocabulary": len(task.vocabulary), "accuracy": rows,
                   "training": report_rows, "scanned_with": scanned, "spots": found,
                   "read": str(report), "seconds": round(total, 1)}, f, indent=2)
    print(f"\nwrote {args.out}/: " + ("curves.png, " if not args.no_plot else "")
          + f"history_*.csv, spots_*.txt, results.json; total {total:.0f} s")
    return {"rows": rows, "histories": histories, "spots": found, "scanned": scanned,
            "task": task, "seconds": total}


if __name__ == "__main__":
    main()
