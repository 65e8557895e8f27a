"""The molecules example: random molecule-like graphs, their features, the weave model."""

import math

import numpy as np
import pytest

from refold.compiler import Compiler
from refold.examples.molecules import __main__ as molecules_main
from refold.examples.molecules.molecules import (
    ATOM_FEATURES,
    PAIR_FEATURES,
    VALENCE,
    Molecule,
    carbonyl_count,
    dataset,
    featurize,
    random_molecule,
)
from refold.examples.molecules.weave import inputs, weave_layer, weave_model


def _permuted(mol: Molecule, order) -> Molecule:
    where = {old: new for new, old in enumerate(order)}
    return Molecule([mol.atoms[i] for i in order],
                    [(where[a], where[b], o) for a, b, o in mol.bonds])


def test_random_molecules_are_connected_and_respect_valences():
    rng = np.random.default_rng(0)
    for _ in range(200):
        mol = random_molecule(rng)
        assert 1 <= len(mol.atoms) <= 14
        used = np.zeros(len(mol.atoms), int)
        for a, b, order in mol.bonds:
            used[a] += order
            used[b] += order
        assert all(used[i] <= VALENCE[e] for i, e in enumerate(mol.atoms))
        seen, stack = {0}, [0]
        nbrs = mol.neighbours()
        while stack:
            for b in nbrs[stack.pop()]:
                if b not in seen:
                    seen.add(b)
                    stack.append(b)
        assert len(seen) == len(mol.atoms)


def test_molecule_rejects_bonds_beyond_valence():
    with pytest.raises(ValueError, match="valence"):
        Molecule(["O", "C", "C"], [(0, 1, 2), (0, 2, 1)])


def test_carbonyl_count_needs_a_double_bond_to_oxygen():
    assert carbonyl_count(Molecule(["C", "O"], [(0, 1, 2)])) == 1
    assert carbonyl_count(Molecule(["C", "O"], [(0, 1, 1)])) == 0
    assert carbonyl_count(Molecule(["C", "S"], [(0, 1, 2)])) == 0
    assert carbonyl_count(Molecule(["O", "C", "C", "O"], [(0, 1, 2), (1, 2, 1), (2, 3, 2)])) == 2


def test_featurize_lists_each_pair_both_ways_with_the_same_features():
    rng = np.random.default_rng(1)
    for _ in range(50):
        mol = random_molecule(rng)
        feats = featurize(mol)
        table = {(i, p["j"]): p["features"] for i, a in enumerate(feats["atoms"])
                 for p in a["pairs"]}
        for (i, j), f in table.items():
            assert table[(j, i)] == f
            assert len(f) == PAIR_FEATURES and sum(f[2:]) == 1
        bonded = {(a, b) for a, b, _ in mol.bonds} | {(b, a) for a, b, _ in mol.bonds}
        assert {k for k, f in table.items() if f[2] == 1} == bonded
        assert all(len(a["features"]) == ATOM_FEATURES for a in feats["atoms"])


def test_weave_layer_keeps_pair_vectors_symmetric():
    mol = featurize(Molecule(["C", "O", "N", "C"], [(0, 1, 2), (0, 2, 1), (2, 3, 1)]))
    block = inputs(ATOM_FEATURES, PAIR_FEATURES) >> weave_layer(5) >> weave_layer(5, "w2")
    atoms, pairs, _ = block.eval(mol)
    assert len(atoms) == 4 and atoms[0].shape == (5,)
    vec = {(i, p["j"]): pairs[i][k] for i, a in enumerate(mol["atoms"])
           for k, p in enumerate(a["pairs"])}
    for (i, j), v in vec.items():
        np.testing.assert_allclose(v, vec[(j, i)], rtol=1e-5, atol=1e-6)


def test_weave_model_does_not_depend_on_atom_order():
    rng = np.random.default_rng(2)
    mols = [random_molecule(rng, min_atoms=6) for _ in range(3)]
    shuffled = [_permuted(m, rng.permutation(len(m.atoms))) for m in mols]
    model = Compiler(weave_model(ATOM_FEATURES, PAIR_FEATURES, units=6))
    out = model.run([featurize(m) for m in mols + shuffled])
    for a, b in zip(out[:3], out[3:]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    assert not np.allclose(out[0], out[1])


def test_dataset_is_reproducible():
    x1, y1, _ = dataset(30, np.random.default_rng(3))
    x2, y2, _ = dataset(30, np.random.default_rng(3))
    assert x1 == x2 and y1.tolist() == y2.tolist() and y1.dtype == np.float32


def test_main_learns_on_a_small_set(capsys):
    # one layer keeps tracing short; two-layer models are checked above
    out = molecules_main.main(["--train-size", "32", "--test-size", "8", "--epochs", "4",
                               "--batch-size", "8", "--units", "8", "--lr", "0.02",
                               "--layers", "1", "--max-distance", "1", "--verbose", "0"])
    losses = out["history"]["loss"]
    assert all(math.isfinite(v) for v in losses) and losses[-1] < 0.5 * losses[0]
    assert out["predictions"].shape == (8,)
    assert "mean absolute error" in capsys.readouterr().out
