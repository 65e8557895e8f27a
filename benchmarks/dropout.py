"""Dropout: what the engine costs without it against the code before it, and with it.

    python -m benchmarks.dropout --base DIR [--rounds 9] [--batch-sizes 16,64]
    python -m benchmarks.dropout --only cost

- `base` (needs `--base DIR`, another checkout of Refold, e.g. `git archive` of the
  commit before dropout): whole `Model.fit(epochs=1, shuffle=False)` calls of the
  sst-synth TreeLSTM (loss at the root) and of the bilstm tagger (loss at every word),
  no dropout, 128 items per call at batch 16 and 256 at 64 (`benchmarks.ablations`'
  `_fits`, SGD), by this checkout and by DIR's, each in a worker process of its own
  that builds its models and traces them first; the calls alternate between the two
  workers round after round (one runs while the other waits). The ratio column is
  the median of per-round ratios, this ÷ base (1.00: no change).
- `cost`: in this process, the same workloads without dropout and with it, calls
  interleaved (`benchmarks.ablations._rounds`): the TreeLSTM with input dropout at
  the leaves (0.2), dropout on every cell's candidate update (0.25) and an input keep
  probability of 0.8 on the logits' `FC`; the tagger with `dropout` and
  `recurrent_dropout` of 0.25 in both LSTMs. `fit` draws the masks; `predict` runs in
  inference mode, where the random ops only carry their keys. Ratios: with ÷ without.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import textwrap

import numpy as np

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_WORKER = textwrap.dedent("""
    import json, os, sys, time
    sys.path.insert(0, os.getcwd())
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from benchmarks.ablations import _fit_items, _fits
    fits = {}
    batch_sizes, items = json.loads(sys.argv[1])
    for b in batch_sizes:
        n, trees, labels, sentences = _fit_items(b, items)
        for work, (model, fit) in _fits(b, trees, labels, sentences).items():
            fit()  # traces
            fits[f"{work} {b}"] = (fit, n)
    import refold
    print(json.dumps({"ready": refold.__file__}), flush=True)
    for line in sys.stdin:
        fit, n = fits[json.loads(line)]
        start = time.perf_counter()
        fit()
        print(json.dumps((time.perf_counter() - start) * 1e3 / n), flush=True)
""")


class _Worker:
    """A process of its own running `Model.fit` calls of the checkout at `root`."""

    def __init__(self, root: str, batch_sizes: list, items: int | None = None):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _WORKER, json.dumps([batch_sizes, items])], cwd=root,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        ready = json.loads(self.proc.stdout.readline())
        self.imports = ready["ready"]

    def call(self, key: str) -> float:
        self.proc.stdin.write(json.dumps(key) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


def base(base_root: str, batch_sizes: list, rounds: int, items: int | None = None) -> dict:
    """ms per item of whole fit calls by this checkout and by `base_root`'s, no dropout."""
    sides = {"this": _Worker(HERE, batch_sizes, items),
             "base": _Worker(base_root, batch_sizes, items)}
    for name, w in sides.items():
        print(f"{name}: imports {w.imports}", flush=True)
    keys = [f"{work} {b}" for b in batch_sizes for work in ("TreeLSTM", "tagger")]
    times = {(s, k): [] for s in sides for k in keys}
    for r in range(rounds):
        order = list(sides) if r % 2 == 0 else list(sides)[::-1]
        for k in keys:
            for s in order:
                times[(s, k)].append(sides[s].call(k))
    for w in sides.values():
        w.close()
    print(f"\n## no dropout: this checkout against {base_root}, ms per item of whole "
          f"Model.fit calls (median of {rounds})")
    print("| workload | B | this | base | this ÷ base (median [min-max] of rounds) |")
    print("|---|---|---|---|---|")
    out = {}
    for k in keys:
        work, b = k.rsplit(" ", 1)
        a, z = np.array(times[("this", k)]), np.array(times[("base", k)])
        ratio = a / z
        print(f"| {work} | {b} | {np.median(a):.3f} | {np.median(z):.3f} | "
              f"{np.median(ratio):.3f} [{ratio.min():.2f}-{ratio.max():.2f}] |", flush=True)
        out[k] = {"this": float(np.median(a)), "base": float(np.median(z)),
                  "ratio": float(np.median(ratio))}
    return out


def _dropout_tree_lstm():
    """The sst-synth TreeLSTM (`benchmarks.workloads.TreeLSTMModel`'s sizes) with dropout."""
    import keras

    import refold as td
    from benchmarks.workloads import CLASSES, EMBED, HIDDEN, VOCAB
    from refold.models import tree_lstm
    keras.utils.set_random_seed(0)
    leaf_cell = tree_lstm.leaf_cell(HIDDEN, EMBED, name="leaf_cell", dropout=0.2,
                                    recurrent_dropout=0.25)
    cell = tree_lstm.binary_cell(HIDDEN, name="binary_cell", recurrent_dropout=0.25)
    tree = td.ForwardDeclaration(td.PyObjectType(), tree_lstm.state_type(HIDDEN))
    leaf = td.Scalar("int32") >> td.Embedding(VOCAB, EMBED, name="embedding") >> leaf_cell
    node = td.Record((tree(), tree())) >> cell
    tree.resolve_to(td.OneOf(lambda t: isinstance(t, tuple), {False: leaf, True: node}))
    return tree() >> td.GetItem(0) >> td.FC(CLASSES, activation=None, name="logits",
                                            input_keep_prob=0.8)


def _dropout_tagger():
    """The bilstm tagger (`benchmarks.bilstm.TaggerModel`'s sizes) with dropout."""
    import keras

    import refold as td
    from benchmarks.bilstm import EMBED, HIDDEN, TAGS, VOCAB
    from refold.models import encoders, heads, rnn_cells
    keras.utils.set_random_seed(0)
    cells = [rnn_cells.LSTMCell(HIDDEN, input_size=EMBED, name=n, dropout=0.25,
                                recurrent_dropout=0.25) for n in ("forward", "backward")]
    words = td.GetItem("words") >> td.Map(
        td.Scalar("int32") >> td.Embedding(VOCAB, EMBED, name="embedding"))
    return heads.tagger(words >> encoders.bidirectional(*cells), TAGS, tags="tags")


def cost(batch_sizes: list, rounds: int, items: int | None = None) -> dict:
    """ms per item of whole fit and predict calls, without dropout and with it."""
    import functools

    import keras

    from benchmarks.ablations import _fit_items, _fits, _rounds
    from refold.compiler import Model
    print(f"\n## the cost of dropout: ms per item of whole Model.fit / Model.predict calls "
          f"(median of {rounds})")
    print("| workload | B | call | without | with | with ÷ without (median of rounds) |")
    print("|---|---|---|---|---|---|")
    out = {}
    for b in batch_sizes:
        n, trees, labels, sentences = _fit_items(b, items)
        plain = _fits(b, trees, labels, sentences)
        fns = {}
        for work, block, data in (("TreeLSTM", _dropout_tree_lstm(), (trees, labels)),
                                  ("tagger", _dropout_tagger(), (sentences,))):
            model = Model(block)
            loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
            model.compile(optimizer=keras.optimizers.SGD(0.01),
                          loss=loss if work == "TreeLSTM" else None)
            fit = functools.partial(model.fit, *data, batch_size=b, epochs=1, verbose=0,
                                    shuffle=False)
            base_model, base_fit = plain[work]
            x = data[0]
            fns[(work, "fit", "without")] = base_fit
            fns[(work, "fit", "with")] = fit
            for name, m in (("without", base_model), ("with", model)):
                fns[(work, "predict", name)] = functools.partial(
                    m.predict, x, batch_size=b, verbose=0)
        raw = _rounds(fns, rounds)
        for work in ("TreeLSTM", "tagger"):
            for call in ("fit", "predict"):
                a = np.array(raw[(work, call, "without")]) / n
                z = np.array(raw[(work, call, "with")]) / n
                ratio = z / a
                print(f"| {work} | {b} | {call} | {np.median(a):.3f} | {np.median(z):.3f} | "
                      f"{np.median(ratio):.3f} [{ratio.min():.2f}-{ratio.max():.2f}] |",
                      flush=True)
                out[f"{work} {b} {call}"] = {"without": float(np.median(a)),
                                             "with": float(np.median(z)),
                                             "ratio": float(np.median(ratio))}
    return out


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(prog="python -m benchmarks.dropout", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", help="another checkout of Refold to compare against (no dropout)")
    p.add_argument("--only", default=None, help="base or cost (default: both; base needs "
                                                "--base)")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--batch-sizes", default="16,64")
    p.add_argument("--items", type=int, default=None,
                   help="items per call (default 128 at batch 16, 256 at 64)")
    p.add_argument("--json", default=None, help="also write the figures here")
    args = p.parse_args(argv)
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    only = {args.only} if args.only else {"base", "cost"}
    if "base" in only and not args.base:
        if args.only == "base":
            p.error("--only base needs --base DIR")
        only.discard("base")
    print(f"# benchmarks.dropout, {datetime.datetime.now():%Y-%m-%d %H:%M}, "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.2f}", flush=True)
    out = {}
    if "base" in only:
        out["base"] = base(os.path.abspath(args.base), batch_sizes, args.rounds, args.items)
    if "cost" in only:
        out["cost"] = cost(batch_sizes, args.rounds, args.items)
    print(f"\nload at the end {os.getloadavg()[0]:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    return out


if __name__ == "__main__":
    main()
