"""What `block.eval` costs on deep and large inputs: a layer's op called eagerly or
traced (`refold.blocks.evaluation.traced_ops`), and calls made one node at a time or
deferred and run in batches (`refold.blocks.evaluation.deferred`).

The zoo's child-sum TreeLSTM cells (`tree_lstm.child_sum_cell`, hidden 16, input 8),
evaluated whole by `block.eval` as a user calls it. First a chain `--nodes` deep, op
by op, each round once with every layer's op eager (the traces forgotten, the
threshold out of reach) and once traced (the traces forgotten too, so each traced
round pays its traces), in alternating order. Then, `--rounds` times each in
alternating order (medians shown), op by op against as shipped (deferred after
`EAGER_OPS` calls): a chain `--deep` deep and a random tree of `--tree` nodes (each
node's parent among the 40 before it, so it is deep and bushy at once).

    python -m benchmarks.deep_eval      # 2,000 nodes, 3 rounds; 20,000 deep; 100,000 nodes
    python -m benchmarks.deep_eval --nodes 200 --rounds 1 --deep 0 --tree 0
"""

from __future__ import annotations

import argparse
import random
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


def random_tree(n: int, seed: int = 0) -> dict:
    """`n` nodes; each node's parent is one of the 40 made before it."""
    rng = random.Random(seed)
    nodes = [{"x": [rng.random() for _ in range(8)], "children": []}]
    for i in range(1, n):
        node = {"x": [rng.random() for _ in range(8)], "children": []}
        nodes[max(0, i - 1 - rng.randrange(40))]["children"].append(node)
        nodes.append(node)
    return nodes[0]


def _eval_seconds(block, tree, limit: int, defer_after: int = 10 ** 12) -> float:
    from refold.blocks.evaluation import deferred, traced_ops
    traced_ops.forget()
    before, traced_ops.CALLS_BEFORE_TRACING = traced_ops.CALLS_BEFORE_TRACING, limit
    try:
        with deferred.deferring_after(defer_after):
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
    p.add_argument("--deep", type=int, default=20_000, help="a chain this deep (0: none)")
    p.add_argument("--tree", type=int, default=100_000, help="a tree of this many nodes (0: none)")
    args = p.parse_args(argv)
    from refold.blocks.evaluation import deferred, traced_ops
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
    print("| chain, op by op | eager ms/node | traced ms/node (its traces included) "
          "| eager ÷ traced |")
    print("|---|---|---|---|")
    print(f"| {args.nodes} deep | {out['eager']:.2f} | {out['traced']:.2f} | "
          f"{out['eager / traced']:.2f} [{min(ratios):.2f}-{max(ratios):.2f}] |")
    large = [(f"chain {args.deep:,} deep", chain(args.deep)) if args.deep else None,
             (f"tree of {args.tree:,} nodes", random_tree(args.tree)) if args.tree else None]
    large = [x for x in large if x is not None]
    if large:
        print("| input | op by op, s | as shipped (deferred), s | op by op ÷ shipped |")
        print("|---|---|---|---|")
    limit = traced_ops.CALLS_BEFORE_TRACING
    for name, x in large:
        pairs = [(_eval_seconds(block, x, limit),
                  _eval_seconds(block, x, limit, deferred.EAGER_OPS)) for _ in range(args.rounds)]
        one_by_one, shipped = (statistics.median(p[i] for p in pairs) for i in (0, 1))
        ratios = [a / b for a, b in pairs]
        out[f"{name}: op by op s"], out[f"{name}: shipped s"] = one_by_one, shipped
        print(f"| {name} | {one_by_one:.1f} | {shipped:.1f} | {statistics.median(ratios):.2f} "
              f"[{min(ratios):.2f}-{max(ratios):.2f}] |")
    return out


if __name__ == "__main__":
    main()
