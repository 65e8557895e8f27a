"""What the input checks cost `Model.fit`: strict conversion of every input value and
the cycle check of recursive inputs, against the same `fit` with both switched off.

The sst-synth TreeLSTM at batch 64 (`benchmarks.workloads`), one `Model` built with
`cache=False`, so that every `fit` call expands (and so checks) every tree again:
the worst case (with the default cache a tree is checked once, then only its graph
is used). Each round times one `fit` call of one epoch, wall clock, with the checks
and without, in alternating order; the checks are switched off by replacing the
strict conversion with `np.asarray(value, dtype)` and the recursion step with one
that does not track the objects on its path. Since the checks run only while
inputs are expanded, each round also times expanding the trees alone, which
gives their cost with less noise than whole `fit` calls. The labels check and the non-finite
step guard stay on in both (the guard's cost is in BENCHMARKS.md: 0.2% of a step).

    python -m benchmarks.checks               # 640 trees, 5 rounds
    python -m benchmarks.checks --quick       # 128 trees, 2 rounds
"""

from __future__ import annotations

import contextlib
import json
import time

import numpy as np

from benchmarks.common import compiled_model, fit_arguments, sst_synth_data
from benchmarks.workloads import TreeLSTMModel


@contextlib.contextmanager
def unchecked():
    """Strict input conversion and cycle tracking replaced by unchecked versions."""
    import refold.blocks.evaluation.contexts
    import refold.blocks.inputs
    from refold.blocks.control import _ForwardDeclarationRef

    def lenient(x, ttype, allow_nonfinite=False):
        return np.asarray(x, ttype.numpy_dtype)

    def untracked(self, ctx, x):
        return self._decl._target.eval_in(ctx, x)

    saved = (refold.blocks.inputs.to_array, refold.blocks.evaluation.contexts.to_array,
             _ForwardDeclarationRef.evaluate)
    refold.blocks.inputs.to_array = refold.blocks.evaluation.contexts.to_array = lenient
    _ForwardDeclarationRef.evaluate = untracked
    try:
        yield
    finally:
        (refold.blocks.inputs.to_array, refold.blocks.evaluation.contexts.to_array,
         _ForwardDeclarationRef.evaluate) = saved


def main(argv=None) -> dict:
    args = fit_arguments(
        argv, __doc__.splitlines()[0], trees=640, rounds=5, quick=(128, 2),
        extra=lambda p: p.add_argument("--json", help="also write the results to this file"))

    from refold.compiler.graphs.expansion import expand_all

    trees, labels = sst_synth_data(args.trees)
    model = compiled_model(TreeLSTMModel(seed=0).block, cache=False)

    def fit_rate() -> float:
        start = time.perf_counter()
        model.fit(trees, labels, batch_size=args.batch, epochs=1, verbose=0, shuffle=False)
        return len(trees) / (time.perf_counter() - start)

    def expand_rate() -> float:  # where the checks run: expanding the inputs
        start = time.perf_counter()
        expand_all(model.program, trees)
        return len(trees) / (time.perf_counter() - start)

    fit_rate()  # warm-up: tracing
    with unchecked():
        fit_rate()
    rates: dict[str, list[float]] = {
        f"{what} {variant}": [] for what in ("fit", "expand")
        for variant in ("checked", "unchecked")}
    for r in range(args.rounds):
        for variant in (("checked", "unchecked") if r % 2 == 0 else ("unchecked", "checked")):
            with unchecked() if variant == "unchecked" else contextlib.nullcontext():
                rates[f"fit {variant}"].append(fit_rate())
                rates[f"expand {variant}"].append(expand_rate())
    median = {k: float(np.median(v)) for k, v in rates.items()}
    fit_s = 1.0 / median["fit checked"]  # seconds per tree, checked
    extra_s = 1.0 / median["expand checked"] - 1.0 / median["expand unchecked"]
    result = {"trees": args.trees, "batch": args.batch, "rounds": args.rounds,
              "rates": rates, "median": median,
              "cost": 1.0 - median["fit checked"] / median["fit unchecked"],
              "cost_from_expansion": extra_s / fit_s}
    print(f"fit, batch {args.batch}, cache=False (every tree expanded and checked per "
          f"call), {args.trees} trees, {args.rounds} rounds, trees/s:")
    for k in rates:
        print(f"  {k:<18} median {median[k]:8.1f}   "
              + " ".join(f"{x:.1f}" for x in rates[k]))
    print(f"  fit: the checks cost {100 * result['cost']:.1f}% of its throughput (whole "
          "calls, noisy)")
    print(f"  expansion: the checks add {1e6 * extra_s:.0f} us per tree, "
          f"{100 * result['cost_from_expansion']:.2f}% of a checked fit's time per tree")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
