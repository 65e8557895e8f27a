"""What checking the expansion cache against each input's content costs `Model.fit`.

The cache (`refold.compiler.graphs.expansion_cache`) finds an input's expanded graph by the
input object and checks a fingerprint of its whole content at every look-up (none
for nested tuples, which cannot change), so an input changed in place is expanded
again. A cached `fit` looks up every input once an epoch. This times whole
`Model.fit` calls (3 epochs over a list of inputs, expanded and cached by a first
call) with the check and with the look-up
by identity alone (the cache before the check existed), in alternating order, on
both standard workloads at the given batch sizes; and, with less noise, the
fingerprints of the inputs against expanding them afresh.

    python -m benchmarks.expansion_cache                 # 256 inputs, 5 rounds, B=16,64
    python -m benchmarks.expansion_cache --quick         # 64 inputs, 2 rounds, B=16
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time

import numpy as np

WORKLOADS = ("treelstm", "bilstm")


def workload(name: str, n: int):
    """`(model factory, inputs, labels)` of a standard workload."""
    from benchmarks.common import compiled_model, sst_synth_data
    if name == "treelstm":
        from benchmarks.workloads import TreeLSTMModel
        trees, y = sst_synth_data(n)
        return lambda: compiled_model(TreeLSTMModel().block), trees, y
    from benchmarks.bilstm import sentence
    from benchmarks.peers.refold_side import tagger_models
    rng = np.random.default_rng(0)
    sentences = [sentence(rng) for _ in range(n)]

    def make():
        import keras
        model = tagger_models("agenda")[0]  # its loss is a td.Metric at every word
        model.compile(optimizer=keras.optimizers.SGD(0.01))
        return model

    return make, sentences, None


@contextlib.contextmanager
def identity_only():
    """The cache's look-up by identity alone, as before the content check."""
    from refold.compiler.graphs import expansion_cache
    real = expansion_cache.ExpansionCache.get

    def get(self, x):
        hit = self._entries.get(id(x))
        return hit[2] if hit is not None and hit[0] is x else None

    expansion_cache.ExpansionCache.get = get
    try:
        yield
    finally:
        expansion_cache.ExpansionCache.get = real


def time_fit(model, xs, y, batch: int) -> float:
    start = time.perf_counter()
    model.fit(xs, y, batch_size=batch, epochs=3, verbose=0, shuffle=False)
    return time.perf_counter() - start


def measure(name: str, n: int, batches: list[int], rounds: int) -> dict:
    from refold.compiler.graphs.expansion import expand_all
    from refold.compiler.graphs.expansion_cache import fingerprint
    make, xs, y = workload(name, n)
    model = make()
    model.fit(xs, y, batch_size=batches[0], epochs=1, verbose=0)  # traced, cached
    out = {}
    for b in batches:
        checked, plain = [], []
        time_fit(model, xs, y, b)
        for r in range(rounds):
            for with_check in ((True, False) if r % 2 == 0 else (False, True)):
                if with_check:
                    checked.append(time_fit(model, xs, y, b))
                else:
                    with identity_only():
                        plain.append(time_fit(model, xs, y, b))
        out[f"fit B={b}"] = statistics.median(c / p for c, p in zip(checked, plain))
    prints, expands = [], []
    for _ in range(rounds):
        start = time.perf_counter()
        for x in xs:
            fingerprint(x)
        prints.append(time.perf_counter() - start)
        start = time.perf_counter()
        expand_all(model.program, xs)
        expands.append(time.perf_counter() - start)
    out["fingerprint us/input"] = 1e6 * min(prints) / n
    out["expand us/input"] = 1e6 * min(expands) / n
    return out


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--inputs", type=int, default=256)
    p.add_argument("--batch-sizes", default="16,64")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--quick", action="store_true", help="64 inputs, 2 rounds, B=16")
    args = p.parse_args(argv)
    if args.quick:
        args.inputs, args.rounds, args.batch_sizes = 64, 2, "16"
    batches = [int(b) for b in args.batch_sizes.split(",")]
    results = {w: measure(w, args.inputs, batches, args.rounds)
               for w in args.workloads.split(",")}
    columns = [f"fit B={b}" for b in batches] + ["fingerprint us/input", "expand us/input"]
    print("| workload | " + " | ".join(
        c.replace("fit ", "fit checked ÷ identity ") for c in columns) + " |")
    print("|---|" + "---|" * len(columns))
    for w, row in results.items():
        print(f"| {w} | " + " | ".join(
            f"{row[c]:.3f}" if c.startswith("fit") else f"{row[c]:.1f}" for c in columns)
            + " |")
    return results


if __name__ == "__main__":
    main()
