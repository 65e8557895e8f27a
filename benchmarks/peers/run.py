"""Refold ÷ DyNet on the standard workloads, the parser and the char tagger, interleaved in one run.

For each (workload, mode, batch size B), every side runs one untimed pass, then
`--rounds` timed passes in turn (DyNet, Refold, Refold on one TensorFlow thread,
DyNet, ...) over the same items; a ratio is Refold's items/s over DyNet's in the
same round, and the table gives their median [min-max].

    python -m benchmarks.peers --quick
    python -m benchmarks.peers --peer none --workloads treelstm --batch-sizes 2
    python -m benchmarks.peers --workloads parser --batch-sizes 1,16,64
    python -m benchmarks.peers --jit --tf-threads default --batch-sizes 1,16

`--json FILE` also writes the results (and the run's machine, date, commit and load);
`python -m benchmarks.peers.picture FILE out.svg` draws them, Refold ÷ DyNet by batch
size, as the docs' benchmarks page opens with (from `benchmarks/results/peers.json`).

`--jit` adds a side "Refold jit": the same models, every call with `jit_compile=True`
(`compiler.feeding.xla_buckets`; its untimed pass compiles the buckets the items meet).
`--onednn` adds
a side "Refold oneDNN": a worker process whose TensorFlow runs with oneDNN's kernels
(`TF_ENABLE_ONEDNN_OPTS=1`, which TensorFlow leaves off by default on CPUs without
AVX-512), Refold's default threads.

Refold's default threads are TensorFlow's, except on a machine of at most two CPUs,
where `import refold` sets one intra-op thread (`refold.threads`); the run's header
and its JSON say which (`intra_op_threads`, 0 for TensorFlow's default).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

import numpy as np

from benchmarks.peers import protocol

DYNET_SETUP = "bash benchmarks/peers/dynet_setup.sh"  # run from the repository's root
DYNET_PYTHON = os.path.join(os.environ.get("PEERS_HOME", os.path.expanduser(
    "~/.cache/refold-peers")), "dynetvenv", "bin", "python")
WORKLOADS = {"treelstm": ("sst-synth TreeLSTM, loss at the root (variant R)", "trees/s"),
             "bilstm": ("bilstm tagger, loss at every word", "sentences/s"),
             "parser": ("examples.parser's BiLSTM arc-hybrid parser on its synthetic "
                        "treebank, loss at every oracle transition", "sentences/s"),
             "explore": ("examples.parser's parser trained with exploration (its own "
                         "predictions, wrong ones followed with probability 0.9, the "
                         "dynamic oracle's loss at every transition taken)", "sentences/s"),
             "chartagger": ("BiLSTM tagger with a char BiLSTM for rare words "
                            "(examples.tagger.chars' language), loss at every word",
                            "sentences/s")}
MODES = {"parser": ("train", "infer", "parse"), "explore": ("train",)}
"""Each workload's timed modes (train and infer unless said here); parse: greedy parsing."""
PARSER_SIZES = dict(embed=100, tag_embed=25, hidden=125, mlp=100)
"""Kiperwasser and Goldberg (2016)'s sizes, with one BiLSTM layer."""
EXPLORE = 0.9
"""The explore workload's probability of following a wrong prediction (both sides)."""
LABELS = {"dynet": "DyNet", "refold": "Refold", "refold-1t": "Refold 1t",
          "refold-depth": "Refold depth", "refold-jit": "Refold jit",
          "refold-onednn": "Refold oneDNN"}
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def make_data(workloads, n: int, seed: int = 0) -> dict:
    """`n` items of each workload (seeded), as the data file holds them."""
    from benchmarks.bilstm import sentence
    from benchmarks.workloads import CLASSES, sst_synth_tree
    rng = np.random.default_rng(seed)
    data = {}
    if "treelstm" in workloads:
        data["treelstm"] = {"trees": [sst_synth_tree(rng) for _ in range(n)],
                            "labels": rng.integers(0, CLASSES, n).tolist()}
    if "bilstm" in workloads:
        data["bilstm"] = {"sentences": [sentence(rng) for _ in range(n)]}
    if "parser" in workloads:
        from refold.examples.parser.model import Vocabulary, training_input
        from refold.examples.parser.synthetic import generate
        sentences = generate(n, rng)
        vocab = Vocabulary.from_sentences(sentences)
        data["parser"] = {
            "sentences": [training_input(s, vocab) for s in sentences],
            "vocab": {"words": vocab.words, "tags": vocab.tags},
            "sizes": {**PARSER_SIZES, "words": len(vocab.words), "tags": len(vocab.tags)}}
    if "explore" in workloads:
        from refold.examples.parser.exploration import exploration_input
        from refold.examples.parser.model import Vocabulary
        from refold.examples.parser.synthetic import generate
        sentences = generate(n, rng)
        vocab = Vocabulary.from_sentences(sentences)
        data["explore"] = {
            "sentences": [exploration_input(s, vocab, seed=k) for k, s in enumerate(sentences)],
            "vocab": {"words": vocab.words, "tags": vocab.tags}, "explore": EXPLORE,
            "sizes": {**PARSER_SIZES, "words": len(vocab.words), "tags": len(vocab.tags)}}
    if "chartagger" in workloads:
        from refold.examples.tagger.rare_words import dataset
        sentences, _, _, vocabulary = dataset(n, 0, rng)
        data["chartagger"] = {"sentences": sentences, "vocabulary": len(vocabulary)}
    return data


def _summary(values: list) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def measure(sides: dict, workload: str, mode: str, b: int, n: int, rounds: int) -> dict:
    """One untimed pass per side, then `rounds` interleaved timed passes."""
    request = {"op": mode, "workload": workload, "batch": b, "items": n}
    for side in sides.values():
        side.run(request)
    rates: dict = {name: [] for name in sides}
    for _ in range(rounds):
        for name, side in sides.items():
            rates[name].append(n / side.run(request)["seconds"])
    row = {"items": n, "rates": rates,
           "median": {name: statistics.median(r) for name, r in rates.items()}}
    if "dynet" in rates:
        row["ratio"] = {name: _summary([a / d for a, d in zip(r, rates["dynet"])])
                        for name, r in rates.items() if name != "dynet"}
    return row


def format_table(workload: str, rows: dict, names: list) -> str:
    """The markdown table of one workload: ratios, then every side's median items/s."""
    title, unit = WORKLOADS[workload]
    refolds = [n for n in names if n != "dynet"]
    header = ["B", "items"]
    modes = list(next(iter(rows.values())))
    if "dynet" in names:
        header += [f"{mode} {LABELS[n]} ÷ DyNet" for n in refolds for mode in modes]
    sides = " / ".join(LABELS[n] for n in names)
    header += [f"{mode} {sides}" for mode in modes]
    lines = [f"### {workload}: {title}; {unit}, median of rounds", "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for b, row in rows.items():
        cells = [str(b), str(row["train"]["items"])]
        if "dynet" in names:
            for n in refolds:
                for mode in modes:
                    r = row[mode]["ratio"][n]
                    cells.append(f"{r['median']:.2f} [{r['min']:.2f}-{r['max']:.2f}]")
        for mode in modes:
            cells.append(" / ".join(f"{row[mode]['median'][n]:.0f}" for n in names))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                              capture_output=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def _intra_op_threads() -> int:
    """TensorFlow's intra-op threads in this process (0: TensorFlow's default)."""
    import tensorflow as tf
    return tf.config.threading.get_intra_op_parallelism_threads()


def _threads_label() -> str:
    """How Refold's default sides ran: Refold's default threads, said in full."""
    n = _intra_op_threads()
    return ("TensorFlow's default threads" if n == 0 else
            f"TensorFlow's default inter-op threads and {n} intra-op thread"
            f"{'s' if n > 1 else ''} (Refold's default here)")


def machine() -> str:
    """The machine, for a run's header: the CPU, its cores, whether it has AVX-512,
    TensorFlow's version and whether oneDNN's kernels are on in this process
    (TensorFlow turns them on by default on some CPUs only; the ratios at small
    batches moved with them, BENCHMARKS.md, "A second machine")."""
    import tensorflow as tf
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
    except OSError:
        info = ""
    cpu = next((line.split(":", 1)[1].strip() for line in info.splitlines()
                if line.startswith("model name")), platform.processor() or "unknown CPU")
    avx512 = ", AVX-512" if " avx512f" in info else ", no AVX-512" if info else ""
    try:  # TensorFlow says so only in its log: this is what that log line reads
        from tensorflow.python.util import _pywrap_util_port
        onednn = "on" if _pywrap_util_port.IsMklEnabled() else "off"
    except (ImportError, AttributeError):
        onednn = "unknown"
    return (f"{cpu}, {os.cpu_count()} cores{avx512}; TensorFlow {tf.__version__}, "
            f"oneDNN {onednn}")


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="128 items (32 at B=1) instead of 256 (64 at B=1)")
    parser.add_argument("--batch-sizes", default="1,16,64,256")
    parser.add_argument("--workloads", default="treelstm,bilstm")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--items", type=int, help="items per pass (at least B)")
    parser.add_argument("--items-b1", type=int, help="items per pass at B=1")
    parser.add_argument("--peer", choices=["dynet", "none"], default="dynet")
    parser.add_argument("--tf-threads", default="default,1",
                        help="Refold variants: 'default' (Refold's default threads) and/or 1")
    parser.add_argument("--depth", action="store_true",
                        help="also Refold with the depth scheduler (default threads, in this "
                             "process); the others use agenda")
    parser.add_argument("--lr", type=float, default=0.1, help="plain SGD, both sides")
    parser.add_argument("--dynet-gates", choices=["fused", "split"], default="fused")
    parser.add_argument("--jit", action="store_true",
                        help="also Refold with jit_compile=True (XLA), default threads")
    parser.add_argument("--onednn", action="store_true",
                        help="also Refold with oneDNN's kernels (TF_ENABLE_ONEDNN_OPTS=1, a "
                             "worker process), default threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    argv = sys.argv[1:] if argv is None else list(argv)
    sizes = [int(b) for b in args.batch_sizes.split(",")]
    workloads = args.workloads.split(",")
    unknown = sorted(set(workloads) - set(WORKLOADS))
    if unknown:
        parser.error(f"unknown workloads {unknown}; choose from {sorted(WORKLOADS)}")
    threads = args.tf_threads.split(",")
    if not set(threads) <= {"default", "1"}:
        parser.error(f"--tf-threads takes 'default' and/or '1', got {args.tf_threads!r}")
    if args.peer == "dynet" and not os.path.exists(DYNET_PYTHON):
        print(f"DyNet's interpreter {DYNET_PYTHON} is missing: build it once with\n"
              f"    {DYNET_SETUP}\n(about 10 minutes), or run Refold alone with --peer none.",
              file=sys.stderr)
        raise SystemExit(2)
    items = args.items or (128 if args.quick else 256)
    items_b1 = args.items_b1 or (32 if args.quick else 64)

    def items_for(b: int) -> int:
        return items_b1 if b == 1 else max(items, b)

    load_before = os.getloadavg()
    started = datetime.datetime.now(datetime.timezone.utc)
    workers: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        data_path = os.path.join(tmp, "data.json")
        protocol.save_data(data_path, make_data(workloads, max(map(items_for, sizes)),
                                                args.seed))
        common = ["--data", data_path, "--lr", str(args.lr)]
        try:
            # subprocesses first: they start up while this process builds its models
            if args.peer == "dynet":
                workers["dynet"] = protocol.Worker("dynet", [
                    DYNET_PYTHON, os.path.join(HERE, "dynet_worker.py"), *common,
                    "--gates", args.dynet_gates])
            if "1" in threads:
                workers["refold-1t"] = protocol.Worker("refold-1t", [
                    sys.executable, "-m", "benchmarks.peers.refold_side", *common,
                    "--threads", "1", "--workloads", ",".join(workloads)])
            if args.onednn:
                workers["refold-onednn"] = protocol.Worker("refold-onednn", [
                    sys.executable, "-m", "benchmarks.peers.refold_side", *common,
                    "--workloads", ",".join(workloads)], env={"TF_ENABLE_ONEDNN_OPTS": "1"})
            if "default" in threads:
                from benchmarks.peers.refold_side import RefoldSide
                workers["refold"] = RefoldSide(protocol.load_data(data_path, tuples=True),
                                               workloads, args.lr)
            if args.depth:
                from benchmarks.peers.refold_side import RefoldSide
                workers["refold-depth"] = RefoldSide(
                    protocol.load_data(data_path, tuples=True), workloads, args.lr, "depth")
            if args.jit:
                from benchmarks.peers.refold_side import RefoldSide
                workers["refold-jit"] = RefoldSide(
                    protocol.load_data(data_path, tuples=True), workloads, args.lr,
                    jit_compile=True)
            order = [n for n in ("dynet", "refold", "refold-1t", "refold-depth", "refold-jit",
                                 "refold-onednn") if n in workers]
            sides = {n: workers[n] for n in order}
            results: dict = {}
            for w in workloads:
                results[w] = {}
                for b in sizes:
                    results[w][b] = {mode: measure(sides, w, mode, b, items_for(b),
                                                   args.rounds)
                                     for mode in MODES.get(w, ("train", "infer"))}
        finally:
            for worker in workers.values():
                worker.close()
    load_after = os.getloadavg()
    meta = {"date": started.strftime("%Y-%m-%d %H:%M UTC"),
            "load_before": load_before, "load_after": load_after,
            "load": [min(load_before[0], load_after[0]), max(load_before[0], load_after[0])],
            "command": "python -m benchmarks.peers " + " ".join(argv), "commit": _commit(),
            "machine": machine(),
            "sides": order, "rounds": args.rounds, "lr": args.lr,
            "workers": {n: getattr(w, "hello", {"system": "refold", "threads": "default",
                                                "intra_op_threads": _intra_op_threads(),
                                                "scheduler": getattr(w, "scheduler", "agenda"),
                                                "jit_compile": getattr(w, "jit_compile", False)})
                        for n, w in workers.items()}}
    print(f"{meta['command']}\n{meta['date']}, commit {meta['commit']}; load average "
          f"{' '.join(f'{x:.2f}' for x in load_before)} before, "
          f"{' '.join(f'{x:.2f}' for x in meta['load_after'])} after")
    print(f"machine: {meta['machine']}")
    default = _threads_label()
    print("sides: " + "; ".join(
        {"dynet": "DyNet 2.1.2, autobatch on, 1 thread",
         "refold": f"Refold, {default}",
         "refold-1t": "Refold, TensorFlow on 1 thread",
         "refold-depth": f"Refold, depth scheduler, {default}",
         "refold-jit": f"Refold, jit_compile=True (XLA), {default}",
         "refold-onednn": f"Refold, oneDNN's kernels (TF_ENABLE_ONEDNN_OPTS=1), {default}"}[n]
        for n in order))
    print("train = one Model.fit(epochs=1) call over the items / DyNet's minibatch loop; "
          "infer = one Model.predict call / a forward per minibatch; parse = greedy parsing, "
          "one batched scoring per round; ratio > 1: Refold faster")
    for w in workloads:
        print()
        print(format_table(w, results[w], order))
    out = {"meta": meta, "results": results}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return out
