"""What `block.eval` costs a node of a deep input, with a layer's op called eagerly
and traced (`refold.blocks.evaluation.traced_ops`).

A chain of the zoo's child-sum TreeLSTM cells (`tree_lstm.child_sum_cell`, hidden
16, input 8) `--nodes` deep, evaluated whole by `block.eval` as a user calls it:
each round once with every layer's op eager (the traces forgotten, the threshold
out of reach) and once as shipped (the traces forgotten too, so each traced round
pays its traces), in alternating order; then one traced evaluation of a `--deep`
chain.

    python -m benchmarks.deep_eval                       # 2,000 nodes, 3 rounds; 20,000 deep
    python -m benchmarks.deep_eval --nodes 200 --rounds 1 --deep 0
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time


def chain_block():
    import refold as td
    from refold.models import encoders, tree_lstm
    return encoders.tree_encoder(tree_lstm.child_sum_cell(16, 8),
                                 td.GetItem("x") >> td.Vector(8))


def chain(n: int) -> dict:
    node = {"x": [0.1] * 8, "children": []}
    for _ in range(n - 1):
        node = {"x": [0.1] * 8, "children": [node]}
    return node


def _eval_seconds(block, tree, limit: int) -> float:
    from refold.blocks.evaluation import traced_ops
    traced_ops.forget()
    before, traced_ops.CALLS_BEFORE_TRACING = traced_ops.CALLS_BEFORE_TRACING, limit
    try:
        start = time.perf_counter()
        block.eval(tree)
        return time.perf_counter() - start
    finally:
        traced_ops.CALLS_BEFORE_TRACING = before


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(prog="python -m benchmarks.deep_eval",
                                description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--deep", type=int, default=20_000, help="a traced chain this deep (0: none)")
    args = p.parse_args(argv)
    from refold.blocks.evaluation import traced_ops
    block, tree = chain_block(), chain(args.nodes)
    block.eval(chain(2))  # the layers built
    times: dict = {"eager": [], "traced": []}
    for _ in range(args.rounds):
        times["eager"].append(_eval_seconds(block, tree, 10 ** 12))
        times["traced"].append(_eval_seconds(block, tree, traced_ops.CALLS_BEFORE_TRACING))
    ratios = [e / t for e, t in zip(times["eager"], times["traced"])]
    out = {k: 1e3 * statistics.median(v) / args.nodes for k, v in times.items()}
    out["eager / traced"] = statistics.median(ratios)
    shown = sys.argv[1:] if argv is None else argv
    print(f"python -m benchmarks.deep_eval {' '.join(shown)}".rstrip())
    print("| nodes | eager ms/node | traced ms/node (its traces included) | eager ÷ traced |")
    print("|---|---|---|---|")
    print(f"| {args.nodes} | {out['eager']:.2f} | {out['traced']:.2f} | "
          f"{out['eager / traced']:.2f} [{min(ratios):.2f}-{max(ratios):.2f}] |")
    if args.deep:
        out["deep seconds"] = _eval_seconds(block, chain(args.deep),
                                            traced_ops.CALLS_BEFORE_TRACING)
        print(f"a {args.deep:,}-deep chain, traced: {out['deep seconds']:.1f} s")
    return out


if __name__ == "__main__":
    main()
