"""This tree's speed against an earlier commit's, through whole public calls, interleaved.

    python -m benchmarks.before_after --workloads explore,parser --batch-sizes 16,64
    python -m benchmarks.before_after --base 9ff7fbd --workloads decoder,treelstm,bilstm
    python -m benchmarks.before_after --base 14cf31e --workloads usertree --batch-sizes 16,64
    python -m benchmarks.before_after --base a2aeedd --workloads treelstm --batch-sizes 16 \
        --modes train --items 512 --first

Each side is a worker process running one tree's code: the earlier commit's tree
(`--base`, exported with `git archive` into a temporary folder) and this one. Both
run the same requests on the same data (`benchmarks.peers.run.make_data`, seeded):
for each (workload, mode, batch size B) one untimed pass on each side, then
`--rounds` timed passes in turn (before, after, before, after, ...). A pass is what a
user calls: `Model.fit(epochs=1)` ("train"), `Model.predict` ("infer"),
`ParserModel.parse_tokens` ("parse"), each side's own
`benchmarks.peers.refold_side.RefoldSide`; for the decoder (`examples.decoder`'s
model as `benchmarks.decoding` builds it, untrained, `--steps` steps a string),
`Compiler.run` over the strings in batches of B, Python feeding the argmax back every
round ("rounds") or the device in one round ("device"); for "usertree" (the
TreeLSTM in Keras layers of the user's own over nested dicts, `UserTreeSide`, built
by this file with each side's code), `Model.fit(epochs=1)` and `Compiler.run` over
slices of B. The table gives after ÷ before in items/s per round: median
[min-max], > 1 when this tree is faster; "by CPU" the same ratio of each pass's
process CPU time (all threads), which other jobs on a shared machine move less than
wall time. With `--first` each timed pass is instead the first request of a new
worker process (after one untimed worker a side, which fills the tree's kernel
cache): what a user's first `fit` or `predict` costs, traces included.

A commit from before the `refold` namespace (its layers imported by their folders'
names, `import blocks as td`, as 14cf31e) runs with those names: each worker finds
its tree's layout (`layout`) and checks, after every request, that every module of
the project it imported came from its own tree, never from an installed `refold`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

BASE = "9ff7fbd"  # main before the rounds work (issue 38)
MODES = {"explore": ("train",), "parser": ("train", "infer", "parse"),
         "decoder": ("rounds", "device")}
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


# The top-level names of the project's modules, in either layout.
PROJECT = frozenset({"refold", "blocks", "compiler", "scheduler", "models", "examples",
                     "serving", "benchmarks"})


def layout(root: str) -> str:
    """The import prefix of the tree at `root`: "refold." for a tree with the
    namespace, "" for one whose layers are imported by their folders' names."""
    return "refold." if any(os.path.isfile(os.path.join(root, *where, "__init__.py"))
                            for where in (("src", "refold"), ("refold",))) else ""


def foreign_modules(root: str) -> list[str]:
    """The project's modules imported in this process from outside the tree at
    `root` (an installed `refold`, say): each side must run its own tree's code."""
    inside = os.path.abspath(root) + os.sep
    out = []
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] not in PROJECT:
            continue
        file = getattr(module, "__file__", None)
        paths = [file] if file else list(getattr(module, "__path__", []))
        if any(not os.path.abspath(f).startswith(inside) for f in paths):
            out.append(name)
    return sorted(out)


class DecoderSide:
    """The decoder example's greedy decoding in both variants (`benchmarks.decoding`)."""

    def __init__(self, steps: int, n: int):
        import importlib

        import numpy as np

        from benchmarks.decoding import blocks_for
        prefix = layout(sys.path[0])
        compiler_class = importlib.import_module(prefix + "compiler").Compiler
        reverse_task = importlib.import_module(prefix + "examples.decoder.decoder").reverse_task
        blocks = blocks_for(steps)
        self.compilers = {v: compiler_class.create(blocks[v]) for v in ("rounds", "device")}
        self.strings = reverse_task(np.random.default_rng(0), n)

    def run(self, request: dict) -> dict:
        b, n = request["batch"], request["items"]
        run = self.compilers[request["op"]].run
        start = time.perf_counter()
        for i in range(0, n, b):
            run(self.strings[i:i + b])
        return {"seconds": time.perf_counter() - start, "loss": None}


class UserTreeSide:
    """The sst-synth TreeLSTM as the docs teach a user to write it: Keras layers of
    their own in `td.Function`s, over trees as nested dicts (`{"children": [left,
    right]}`, `{"word": i}`). "train" is one `Model.fit(epochs=1)`, "infer"
    `Compiler.run` over consecutive slices of B trees (the model's layers)."""

    def __init__(self, trees: list, labels: list, lr: float):
        import importlib

        import keras
        import numpy as np
        import tensorflow as tf

        prefix = layout(sys.path[0])
        td = importlib.import_module(prefix + "blocks")
        compiler = importlib.import_module(prefix + "compiler")
        hidden, embed, vocab = 150, 300, 16_000

        class Leaf(keras.layers.Layer):
            def __init__(self):
                super().__init__(name="leaf")
                self.gates = keras.layers.Dense(3 * hidden)  # i, o, u

            def call(self, x):
                i, o, u = tf.split(self.gates(x), 3, axis=1)
                c = tf.sigmoid(i) * tf.tanh(u)
                return tf.sigmoid(o) * tf.tanh(c), c

        class Node(keras.layers.Layer):
            def __init__(self):
                super().__init__(name="node")
                self.gates = keras.layers.Dense(5 * hidden)  # i, o, u, f_left, f_right

            def call(self, left, right):
                (h_l, c_l), (h_r, c_r) = left, right
                z = self.gates(tf.concat([h_l, h_r], axis=1))
                i, o, u, f_l, f_r = tf.split(z, 5, axis=1)
                c = tf.sigmoid(i) * tf.tanh(u) + tf.sigmoid(f_l) * c_l + tf.sigmoid(f_r) * c_r
                return tf.sigmoid(o) * tf.tanh(c), c

        def as_dict(t):
            return {"children": [as_dict(t[0]), as_dict(t[1])]} if isinstance(t, list) \
                else {"word": t}

        keras.utils.set_random_seed(0)
        state = td.TupleType(td.TensorType((hidden,)), td.TensorType((hidden,)))
        tree = td.ForwardDeclaration(td.PyObjectType(), state)
        leaf = td.GetItem("word") >> td.Scalar("int32") >> td.Embedding(vocab, embed) \
            >> td.Function(Leaf())
        node = td.GetItem("children") >> td.Record((tree(), tree())) >> td.Function(Node())
        tree.resolve_to(td.OneOf(lambda t: "word" in t, {True: leaf, False: node}))
        block = tree() >> td.GetItem(0) >> td.Function(keras.layers.Dense(5))
        self.model = compiler.Model(block)
        self.model.compile(optimizer=keras.optimizers.SGD(lr), loss=keras.losses.
                           SparseCategoricalCrossentropy(from_logits=True))
        self.compiler = compiler.Compiler.create(block)
        self.trees = [as_dict(t) for t in trees]
        self.labels = np.asarray(labels)

    def run(self, request: dict) -> dict:
        b, n = request["batch"], request["items"]
        x, y = self.trees[:n], self.labels[:n]
        start = time.perf_counter()
        loss = None
        if request["op"] == "train":
            loss = self.model.fit(x, y, batch_size=b, epochs=1, verbose=0,
                                  shuffle=False).history["loss"][-1]
        else:
            for i in range(0, n, b):
                self.compiler.run(x[i:i + b])
        return {"seconds": time.perf_counter() - start, "loss": loss}


def serve(argv) -> None:
    """A worker: answers the runner's requests with the code of the tree it runs in."""
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--workloads", required=True)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--lr", type=float, default=0.1)
    args = p.parse_args(argv)
    from benchmarks.peers import protocol
    reply = protocol.claim_stdout()
    data = protocol.load_data(args.data, tuples=True)
    workloads = args.workloads.split(",")
    sides = {}
    peers = [w for w in workloads if w not in ("decoder", "usertree")]
    if peers:
        from benchmarks.peers.refold_side import RefoldSide
        side = RefoldSide(data, peers, args.lr)
        sides.update({w: side for w in peers})
    if "decoder" in workloads:
        sides["decoder"] = DecoderSide(args.steps, data["decoder_items"])
    if "usertree" in workloads:
        sides["usertree"] = UserTreeSide(**data["usertree"], lr=args.lr)
    root = sys.path[0]

    def run(request: dict) -> dict:
        cpu = time.process_time()
        answer = sides[request["workload"]].run(request)
        answer["cpu"] = time.process_time() - cpu  # this process's, all its threads
        foreign = foreign_modules(root)
        if foreign:
            raise RuntimeError(f"modules from outside {root}: {', '.join(foreign[:5])}")
        return answer

    protocol.serve(run, reply, {"root": root, "layout": layout(root) or "folders"})


def export(commit: str, into: str) -> str:
    """The tree of `commit` written into the folder `into`; returns `into`."""
    os.makedirs(into, exist_ok=True)
    archive = subprocess.run(["git", "archive", commit], cwd=ROOT, check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", into], input=archive, check=True)
    return into


def _commit(ref: str) -> str:
    return subprocess.run(["git", "rev-parse", "--short", ref], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout.strip()


def _work_tree() -> str:
    """What the "after" side runs: HEAD's commit, and whether files differ from it."""
    changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                             cwd=ROOT, check=True, capture_output=True, text=True).stdout
    return f"{_commit('HEAD')}" + (" with uncommitted changes" if changed.strip() else
                                   " (the work tree has no changes)")


def _worker(name: str, root: str, common: list, workloads: str | None = None):
    """A worker running the tree at `root` whatever is installed (`benchmarks.checkout`)."""
    if workloads is not None:
        common = [*common[:2], "--workloads", workloads, *common[4:]]
    return _protocol_worker(name, [sys.executable, os.path.join(HERE, "checkout.py"), root,
                                  os.path.abspath(__file__), *common])


def _protocol_worker(name: str, command: list):
    from benchmarks.peers import protocol
    return protocol.Worker(name, command, env={"PYTHONPATH": ""})



def _summary(items: int, seconds: dict, cpu: dict) -> dict:
    """Median items/s per side, after ÷ before by wall and by CPU: (median, min, max)."""
    rates = {name: [items / s for s in times] for name, times in seconds.items()}
    ratios = [a / o for a, o in zip(rates["after"], rates["before"])]
    cpu_ratios = [o / a for a, o in zip(cpu["after"], cpu["before"])]
    row = {name: statistics.median(r) for name, r in rates.items()}
    row["ratio"] = (statistics.median(ratios), min(ratios), max(ratios))
    row["cpu ratio"] = (statistics.median(cpu_ratios), min(cpu_ratios), max(cpu_ratios))
    return row


def _passes(sides: dict, request: dict, rounds: int) -> dict:
    """One untimed pass on each side's worker, then `rounds` timed passes in turn."""
    for side in sides.values():
        side.run(request)
    seconds: dict = {name: [] for name in sides}
    cpu: dict = {name: [] for name in sides}
    for _ in range(rounds):
        for name, side in sides.items():
            answer = side.run(request)
            seconds[name].append(answer["seconds"])
            cpu[name].append(answer["cpu"])
    return _summary(request["items"], seconds, cpu)


def _first_passes(roots: dict, common: list, request: dict, rounds: int) -> dict:
    """The first pass of a fresh process (`--first`): per round and side a new worker
    whose first request is timed (its traces, its first plans), after one untimed
    worker per side, which fills each tree's kernel cache."""
    seconds: dict = {name: [] for name in roots}
    cpu: dict = {name: [] for name in roots}
    for timed in [False] + [True] * rounds:
        for name, root in roots.items():
            side = _worker(name, root, common, request["workload"])
            try:
                answer = side.run(request)
            finally:
                side.close()
            if timed:
                seconds[name].append(answer["seconds"])
                cpu[name].append(answer["cpu"])
    return _summary(request["items"], seconds, cpu)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(prog="python -m benchmarks.before_after",
                                description=__doc__.splitlines()[0])
    p.add_argument("--base", default=BASE, help="the earlier commit")
    p.add_argument("--workloads", default="explore,parser")
    p.add_argument("--batch-sizes", default="16,64")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--items", type=int, default=128, help="items per pass (at least B)")
    p.add_argument("--items-b1", type=int, default=32, help="items per pass at B=1")
    p.add_argument("--steps", type=int, default=8, help="decoding steps a string")
    p.add_argument("--modes", help="only these modes (e.g. train,parse); default all")
    p.add_argument("--first", action="store_true",
                   help="time the first pass of a fresh process (each round a new worker)")
    args = p.parse_args(argv)
    only = None if args.modes is None else set(args.modes.split(","))
    from benchmarks.peers import protocol
    from benchmarks.peers.run import make_data
    workloads = args.workloads.split(",")
    sizes = [int(b) for b in args.batch_sizes.split(",")]

    def items_for(b: int) -> int:
        return args.items_b1 if b == 1 else max(args.items, b)

    n = max(map(items_for, sizes))
    load_before = os.getloadavg()
    rows: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        data = make_data([w for w in workloads if w not in ("decoder", "usertree")], n)
        data["decoder_items"] = n
        if "usertree" in workloads:  # the sst-synth trees, as nested lists
            data["usertree"] = make_data(["treelstm"], n)["treelstm"]
        path = os.path.join(tmp, "data.json")
        protocol.save_data(path, data)
        old = export(args.base, os.path.join(tmp, "before") + os.sep)
        if not os.path.isfile(os.path.join(old, "benchmarks", "peers", "refold_side.py")):
            raise SystemExit(f"{args.base} has no benchmarks/peers/refold_side.py: its "
                             "models cannot be built the same way")
        common = ["--data", path, "--workloads", args.workloads, "--steps", str(args.steps)]
        roots = {"before": old.rstrip(os.sep), "after": ROOT}
        requests = [{"op": mode, "workload": w, "batch": b, "items": items_for(b)}
                    for w in workloads for b in sizes for mode in MODES.get(w, ("train", "infer"))
                    if only is None or mode in only]
        sides = {}
        try:
            if not args.first:  # one worker a side serves every request
                sides = {name: _worker(name, root, common) for name, root in roots.items()}
            for request in requests:
                key = (request["workload"], request["op"], request["batch"])
                rows[key] = (_first_passes(roots, common, request, args.rounds) if args.first
                             else _passes(sides, request, args.rounds))
        finally:
            for side in sides.values():
                side.close()
    print(f"python -m benchmarks.before_after {' '.join(argv or sys.argv[1:])}")
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; before: {_commit(args.base)}, "
          f"after: {_work_tree()}; load average "
          f"{' '.join(f'{x:.2f}' for x in load_before)} before, "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} after")
    print("| workload | mode | B | before items/s | after items/s | after ÷ before | by CPU |")
    print("|---|---|---|---|---|---|---|")
    for (w, mode, b), r in rows.items():
        shown = [f"{m:.2f} [{lo:.2f}-{hi:.2f}]" for m, lo, hi in (r["ratio"], r["cpu ratio"])]
        print(f"| {w} | {mode} | {b} | {r['before']:.0f} | {r['after']:.0f} | "
              f"{shown[0]} | {shown[1]} |")
    return rows


if __name__ == "__worker__":
    serve(sys.argv[1:])
elif __name__ == "__main__":
    main()
