"""`benchmarks.deep_eval` times `block.eval` eager and traced on a deep chain, and op by
op against deferred on a deeper chain and a large tree."""

import math

from benchmarks import deep_eval
from refold.blocks.evaluation import traced_ops


def test_the_deep_eval_benchmark_runs_and_leaves_the_threshold_as_it_was(capsys):
    limit = traced_ops.CALLS_BEFORE_TRACING
    out = deep_eval.main(["--nodes", "60", "--rounds", "1", "--deep", "300", "--tree", "400"])
    assert traced_ops.CALLS_BEFORE_TRACING == limit
    assert all(math.isfinite(v) and v > 0 for v in out.values())
    shown = capsys.readouterr().out
    assert "| 60 deep |" in shown and "| tree of 400 nodes |" in shown
    assert len(out) == 3 + 4
