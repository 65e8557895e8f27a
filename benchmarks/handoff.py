"""The cost of a step outside the traced step: this tree's `Model.fit` and
`Model.predict` against those of an earlier commit's step functions, interleaved.

Whole calls are timed, as a user pays for them: `Model.fit(epochs=1)` and
`Model.predict` over the same sst-synth trees (TreeLSTM, loss at the root) or
sentences (BiLSTM tagger, a loss at every word), per step. The earlier path runs in
the same process on the same model: `compiler/steps.py` of `--base` (read with
`git show`) gives the train and predict functions, and its predict goes through
Keras' predict loop over the feeder's `tf.data` range, as it did there. The traced
step is the same in both, so the difference is the hand-off: Keras' loop, the
feeder, converting the batch to tensors, calling the traced function, collecting
outputs. Rounds alternate old, new, old, new; the ratio is old ÷ new per round,
then the median, of wall time and (in parentheses) of the process's CPU time, which
other jobs on a shared machine disturb less.

    python -m benchmarks.handoff                          # B = 1 and 16
    python -m benchmarks.handoff --batch-sizes 1 --rounds 9 --workloads treelstm
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

BASE = "52bcfdc"  # main before the hand-off work (issue 14)
# modules the old steps.py imports that compiler/'s split by concern moved
MOVED = {"refold.compiler.pipeline": "refold.compiler.feeding.lists",
         "refold.compiler.handoff": "refold.compiler.feeding.handoff"}


def old_steps(base: str):
    """`compiler/steps.py` of commit `base` (before compiler/ was split by concern),
    imported as a module of its own: its imports of the layers, from before they moved
    under `refold`, moved there too, and those of modules that moved since."""
    text = subprocess.run(["git", "show", f"{base}:compiler/steps.py"], check=True,
                          capture_output=True, text=True).stdout
    text = re.sub(r"^(\s*)(from|import) (blocks|compiler|scheduler|models)\b",
                  r"\1\2 refold.\3", text, flags=re.M)
    for old, new in MOVED.items():
        text = re.sub(rf"^(\s*)from {re.escape(old)} import", rf"\1from {new} import", text,
                      flags=re.M)
    path = tempfile.NamedTemporaryFile("w", suffix="_steps.py", delete=False)
    path.write(text)
    path.close()
    spec = importlib.util.spec_from_file_location("old_steps", path.name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Workload:
    """One model, its data and its four timed calls (old and new fit and predict)."""

    def __init__(self, name: str, n: int, old):
        import keras

        from benchmarks.workloads import CLASSES, TreeLSTMModel, sst_synth_tree
        from refold.compiler import Model
        rng = np.random.default_rng(0)
        if name == "treelstm":
            self.x = [sst_synth_tree(rng) for _ in range(n)]
            self.y = rng.integers(0, CLASSES, n).astype(np.int32)
            self.train = self.infer = Model(TreeLSTMModel(seed=0).block)
            self.train.compile(optimizer=keras.optimizers.SGD(0.01),
                               loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        else:
            from benchmarks.bilstm import sentence
            from benchmarks.peers.refold_side import tagger_models
            self.x = [sentence(rng) for _ in range(n)]
            self.y = None
            self.train, self.infer = tagger_models()
            self.train.compile(optimizer=keras.optimizers.SGD(0.01))
        self.old = old

    def _old_functions(self, model):
        """The train and predict functions of the old step module on `model`."""
        feed = model.feed
        train = self.old.StepFunction(model.train_step, lambda: feed.of_role("train"),
                                      lambda: False, lambda: feed.epoch)
        predict = self.old.StepFunction(model.predict_step, lambda: feed.of_role("predict"),
                                        lambda: False)
        return (lambda it: train.on_iterator(it, 1)), predict.on_data

    def calls(self, b: int) -> dict:
        import keras
        fit = lambda m: m.fit(self.x, self.y, batch_size=b, epochs=1, verbose=0,  # noqa: E731
                              shuffle=False)
        old_train, _ = self._old_functions(self.train)
        _, old_predict = self._old_functions(self.infer)
        new_train = self.train.make_train_function(force=True)
        new_predict = self.infer.make_predict_function(force=True)

        def fit_old():
            self.train.train_function = old_train
            fit(self.train)

        def fit_new():
            self.train.train_function = new_train
            fit(self.train)

        def predict_old():
            m = self.infer
            if m.output_type_id is None:  # Compiler.run per slice, as it ran there
                return old_run(m.compiler, self.x, b)
            m.predict_function = old_predict
            data = m.feed.lists(self.x, None, None, b, False, "predict", with_labels=False,
                                raise_errors=True).dataset()
            return keras.Model.predict(m, data, verbose=0)

        def predict_new():
            self.infer.predict_function = new_predict
            return self.infer.predict(self.x, batch_size=b, verbose=0)
        return {"fit old": fit_old, "fit new": fit_new,
                "predict old": predict_old, "predict new": predict_new}


def old_run(compiler, inputs: list, b: int) -> list:
    """`Model.predict` of a block whose output is not one tensor per input, as it ran
    before: `Compiler.run` on each slice, calling the `tf.function` on the arrays."""
    results = []
    for start in range(0, len(inputs), b):
        plan = compiler.plan(inputs[start:start + b])
        outputs = compiler._function()(plan.feed.arrays)
        results.extend(compiler.results(plan, [o.numpy() for o in outputs]))
    return results


def measure(w: Workload, b: int, rounds: int) -> dict:
    steps = -(-len(w.x) // b)
    calls = w.calls(b)
    for fn in calls.values():  # trace and expand
        fn()
        fn()
    times: dict = {k: [] for k in calls}
    cpu: dict = {k: [] for k in calls}
    for _ in range(rounds):
        for k, fn in calls.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            fn()
            times[k].append((time.perf_counter() - start) / steps * 1e3)
            cpu[k].append(time.process_time() - start_cpu)
    out = {k: float(np.median(v)) for k, v in times.items()}
    for what in ("fit", "predict"):
        ratio = np.array(times[f"{what} old"]) / np.array(times[f"{what} new"])
        out[f"{what} old/new"] = float(np.median(ratio))
        ratio = np.array(cpu[f"{what} old"]) / np.array(cpu[f"{what} new"])
        out[f"{what} old/new cpu"] = float(np.median(ratio))
    return out


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-sizes", default="1,16")
    parser.add_argument("--workloads", default="treelstm,bilstm")
    parser.add_argument("--items", type=int, default=64, help="trees or sentences per call")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--base", default=BASE, help="the commit whose steps.py is 'old'")
    args = parser.parse_args(argv)
    old = old_steps(args.base)
    results = {}
    print("| workload | B | fit old | fit new | old/new (cpu) | predict old | predict new | "
          "old/new (cpu) |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.workloads.split(","):
        w = Workload(name, args.items, old)
        for b in (int(s) for s in args.batch_sizes.split(",")):
            r = results[(name, b)] = measure(w, b, args.rounds)
            print(f"| {name} | {b} | {r['fit old']:.2f} | {r['fit new']:.2f} | "
                  f"{r['fit old/new']:.2f} ({r['fit old/new cpu']:.2f}) | "
                  f"{r['predict old']:.2f} | {r['predict new']:.2f} | "
                  f"{r['predict old/new']:.2f} ({r['predict old/new cpu']:.2f}) |", flush=True)
    print("ms per step, wall clock (median of rounds); old/new: the median of per-round "
          "ratios of wall time (of this process's CPU time)", file=sys.stderr)
    return results


if __name__ == "__main__":
    main()
