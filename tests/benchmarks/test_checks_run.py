"""`benchmarks.checks` runs at a tiny size, and its switch really turns the checks off
(and back on): what it compares is the checks, nothing else."""

from __future__ import annotations

import math

import pytest

import refold as td
from benchmarks import checks


def test_the_switch_turns_strict_conversion_and_cycle_checks_off_and_on():
    from refold.blocks.control import _ForwardDeclarationRef
    tracked = _ForwardDeclarationRef.evaluate
    tree = td.ForwardDeclaration(td.PyObjectType(), td.TensorType(()))
    tree.resolve_to(td.OneOf(lambda t: isinstance(t, list),
                             {False: td.Scalar(), True: td.GetItem(0) >> tree()}))
    with pytest.raises(td.InputError, match="expected a TensorType"):
        td.Scalar().eval("3.5")
    with checks.unchecked():
        assert float(td.Scalar().eval("3.5")) == 3.5
        assert _ForwardDeclarationRef.evaluate is not tracked
        assert float(tree().eval([["2"]])) == 2.0  # recursion still works, unchecked
    with pytest.raises(td.InputError, match="expected a TensorType"):
        td.Scalar().eval("3.5")
    assert _ForwardDeclarationRef.evaluate is tracked


def test_checks_benchmark_runs(capsys):
    out = checks.main(["--trees", "8", "--batch", "4", "--rounds", "1"])
    names = [f"{w} {v}" for w in ("fit", "expand") for v in ("checked", "unchecked")]
    assert sorted(out["rates"]) == sorted(names)
    assert all(len(out["rates"][k]) == 1 and math.isfinite(out["median"][k])
               and out["median"][k] > 0 for k in names)
    assert math.isfinite(out["cost_from_expansion"])
    assert "expansion: the checks add" in capsys.readouterr().out
