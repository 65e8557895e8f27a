"""`benchmarks.ablations` times every variant of each section.

Structure and the code's own properties at tiny sizes, never a timing: speed is measured
by running the benchmarks (BENCHMARKS.md).
"""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import ablations
from tests.benchmarks.tables import rate, table


@pytest.mark.parametrize("section, header, n_rows, n_times", [
    ("rowlists", "| engine | train | infer |", 3, 6),  # 2 layouts and hand-batched, 2 modes
    ("conds", "| launches outside the loop | train |", 3, 6),  # 3 variants x 2 modes
    ("cells", "| cut | engine train |", 3, 12),  # 3 cuts x engine/hand x 2 modes
    ("bidirectional", "| B | CellPair train / infer |", 1, 6),  # 1 size; 3 encoders x 2
    ("weightgrads", "| workload | B |", 2, 4),  # 1 size x 2 workloads x 2 variants
    ("fit_weightgrads", "| workload | B |", 2, 4),  # likewise, through Model.fit
])
def test_ablations_time_every_variant(section, header, n_rows, n_times, capsys):
    if section == "bidirectional":
        out = ablations.bidirectional([2], 1)[2]
    elif section in ("weightgrads", "fit_weightgrads"):
        out = (ablations.weightgrads([2], 1, instances=1) if section == "weightgrads"
               else ablations.fit_weightgrads([2], 1, instances=1, items=4))
        out = {f"{k} {v}": out[k][v] for k in out for v in ("once", "every")}
    elif section == "conds":  # one engine per variant, one 5-leaf shape: a cheap trace
        out = ablations.conds(2, 1, instances=1, leaves=5)
    else:
        out = getattr(ablations, section)(2, 1, leaves=5)
    assert len(out) == n_times and all(rate(ms) for ms in out.values())
    assert len(table(capsys.readouterr().out, header)) == n_rows


def test_ablations_gate_cuts_agree():
    """Every gate cut of the `cells` ablation gives the same gates and the same gradient."""
    import tensorflow as tf
    z = tf.constant(np.random.default_rng(0).normal(size=(3, 12)), tf.float32)
    weights = tf.constant(np.random.default_rng(1).normal(size=(3, 12)), tf.float32)
    want_gates, want_grad = None, None
    for name, cut in ablations.gate_cuts().items():
        with tf.GradientTape() as tape:
            tape.watch(z)
            gates = cut(z, 4)
            # the last gate unused: its gradient must come back as zeros
            loss = tf.reduce_sum(tf.concat(gates[:3], 1) * weights[:, :9])
        grad = tape.gradient(loss, z).numpy()
        gates = np.concatenate([np.asarray(g) for g in gates], 1)
        if want_gates is None:
            want_gates, want_grad = gates, grad
        np.testing.assert_array_equal(gates, want_gates, err_msg=name)
        np.testing.assert_allclose(grad, want_grad, err_msg=name)
    np.testing.assert_array_equal(want_gates, z.numpy())

