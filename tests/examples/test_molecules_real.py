"""The molecules example on real data: RDKit reading, features, the fingerprint baseline,
and a tiny end-to-end run (no network: tiny files written here, or the shipped ones)."""

import gzip
import json
import math
import os

import numpy as np
import pytest
from rdkit import Chem

from refold.compiler import Compiler
from refold.examples.molecules import __main__ as molecules_main
from refold.examples.molecules import chem
from refold.examples.molecules.fingerprints import Ridge, fit_ridge_cv, morgan_counts
from refold.examples.molecules.solubility import SHIPPED
from refold.examples.molecules.weave import weave_model

SMILES = ["CCO", "c1ccccc1O", "CC(=O)Nc1ccc(O)cc1", "C[N+](C)(C)C", "ClC(Cl)Cl", "OC(=O)CCC(=O)O",
          "CCN(CC)CC", "c1ccncc1", "CCCCCCCC", "O=C1CCCCC1", "Brc1ccccc1", "CC#N"]


def _record(smiles: str, value) -> str:
    mol = Chem.MolFromSmiles(smiles)
    block = Chem.MolToMolBlock(mol)
    data = "" if value is None else f">  <SOL>\n{value}\n\n"
    return f"{block}{data}$$$$\n"


BROKEN = "broken\n  junk\n\n  2  1  0  0  0  0  0  0  0  0999 V2000\nnonsense\nM  END\n$$$$\n"


def _write_sdf(path, records) -> str:
    with gzip.open(path, "wt") if str(path).endswith(".gz") else open(path, "w") as f:
        f.write("".join(records))
    return str(path)


def test_sdf_reader_skips_and_counts_bad_records(tmp_path):
    path = _write_sdf(tmp_path / "m.sdf.gz", [
        _record("CCO", -0.5), BROKEN, _record("c1ccccc1", None), _record("CCC", "n/a"),
        _record("CCCl", 1.25)])
    mols, values, report = chem.read_molecules(path, "SOL")
    assert [Chem.MolToSmiles(m) for m in mols] == ["CCO", "CCCl"]
    assert values == [-0.5, 1.25]
    assert (report.records, report.skipped, report.first_skipped) == (5, 3, 2)
    assert "RDKit could not parse" in report.first_reason
    assert "3 skipped (the first: record 2" in str(report)


def test_csv_reader_skips_bad_smiles_and_values(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("smiles,logS\nCCO,-0.5\nC1CC,0.1\nCCN,nan\n,1.0\nc1ccccc1,-1.5\n")
    mols, values, report = chem.read_molecules(str(path), "logS")
    assert values == [-0.5, -1.5] and len(mols) == 2
    assert (report.records, report.skipped, report.first_skipped) == (5, 3, 2)
    assert "'C1CC'" in report.first_reason


def test_reader_names_a_missing_column_and_a_bad_suffix(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("smi,logS\nCCO,1\n")
    with pytest.raises(ValueError, match="no column 'smiles'"):
        chem.read_molecules(str(path), "logS")
    with pytest.raises(ValueError, match=r"\.sdf or \.csv"):
        chem.read_molecules(str(tmp_path / "m.mol2"), "logS")


def test_the_shipped_solubility_files_read_whole():
    train, test, prop = SHIPPED["solubility"]
    for path, n in ((train, 1025), (test, 257)):
        mols, values, report = chem.read_molecules(path, prop)
        assert (len(mols), report.skipped) == (n, 0)
        assert -12 < min(values) < max(values) < 2  # logS


def test_features_follow_the_molecule():
    mol = Chem.MolFromSmiles("C[N+](C)(C)Cc1ccccc1")  # a charged, aromatic molecule
    feats = chem.featurize(mol)
    assert len(feats["atoms"]) == mol.GetNumAtoms()
    for atom, f in zip(mol.GetAtoms(), feats["atoms"]):
        x = f["features"]
        assert len(x) == chem.ATOM_FEATURES
        assert sum(x[:10]) == sum(x[10:16]) == sum(x[16:19]) == sum(x[19:24]) == 1
        assert x[24] == float(atom.GetIsAromatic())
    assert feats["atoms"][1]["features"][18] == 1.0  # N+: charge +1
    table = {(i, p["j"]): p["features"] for i, a in enumerate(feats["atoms"])
             for p in a["pairs"]}
    for (i, j), f in table.items():
        assert table[(j, i)] == f and len(f) == chem.PAIR_FEATURES
        bond = mol.GetBondBetweenAtoms(i, j)
        assert f[4] == float(bond is not None)  # distance 1 iff bonded
        if bond is not None and bond.GetIsAromatic():
            assert f[3] == 1.0 and f[6] == 1.0   # aromatic, same ring
    assert all(len(a["pairs"]) == 1 for a in chem.featurize(Chem.MolFromSmiles("CC"))["atoms"])


def test_weave_on_real_features_does_not_depend_on_atom_order():
    mols = [Chem.MolFromSmiles(s) for s in ("CC(=O)Nc1ccc(O)cc1", "OC(=O)CCC(=O)O")]
    rng = np.random.default_rng(0)
    shuffled = [Chem.RenumberAtoms(m, rng.permutation(m.GetNumAtoms()).tolist()) for m in mols]
    model = Compiler(weave_model(chem.ATOM_FEATURES, chem.PAIR_FEATURES, units=6))
    out = model.run([chem.featurize(m) for m in mols + shuffled])
    np.testing.assert_allclose(out[:2], out[2:], rtol=1e-4, atol=1e-5)
    assert not np.allclose(out[0], out[1])


def test_ridge_on_fingerprints_learns_and_cv_picks_a_penalty():
    mols = [Chem.MolFromSmiles(s) for s in SMILES * 3]
    y = np.array([m.GetNumAtoms() + 0.5 * sum(a.GetSymbol() == "O" for a in m.GetAtoms())
                  for m in mols], np.float64)
    x = morgan_counts(mols)
    model, alpha = fit_ridge_cv(x, y, alphas=(0.01, 1000.0), folds=3)
    assert alpha == 0.01
    assert np.sqrt(np.mean((model.predict(x) - y) ** 2)) < 0.1 * y.std()
    assert np.allclose(Ridge(1e6).fit(x, y).predict(x), y.mean(), atol=0.05 * y.std())


def test_main_runs_end_to_end_on_tiny_files(tmp_path, capsys):
    values = [-0.3 * Chem.MolFromSmiles(s).GetNumAtoms() for s in SMILES]
    train = _write_sdf(tmp_path / "train.sdf", [_record(s, v) for s, v in
                                                zip(SMILES * 2, values * 2)] + [BROKEN])
    test = _write_sdf(tmp_path / "test.sdf", [_record(s, v) for s, v in
                                              zip(SMILES[:4], values[:4])])
    out_dir = tmp_path / "out"
    out = molecules_main.main(["--data", train, "--test-data", test, "--property", "SOL",
                               "--epochs", "3", "--units", "8", "--layers", "1",
                               "--max-distance", "1", "--batch-size", "8", "--lr", "0.02",
                               "--out", str(out_dir), "--verbose", "0"])
    printed = capsys.readouterr().out
    assert "24 of 25 records read, 1 skipped (the first: record 25" in printed
    assert "Morgan + ridge" in printed and "weave" in printed
    assert set(out["rows"]) == {"training mean", "Morgan + ridge", "weave"}
    assert all(math.isfinite(v) for v in out["history"]["loss"])
    assert out["history"]["loss"][-1] < out["history"]["loss"][0]
    assert out["predictions"].shape == (4,)
    assert sorted(os.listdir(out_dir)) == ["curves.png", "history_weave.csv", "results.json"]
    saved = json.loads((out_dir / "results.json").read_text())
    assert saved["errors"]["weave"]["test"] == out["rows"]["weave"]["test"]


def test_main_refuses_a_missing_file_or_property(tmp_path):
    with pytest.raises(SystemExit):
        molecules_main.parse_args(["--data", str(tmp_path / "none.sdf"), "--property", "P"])
    path = _write_sdf(tmp_path / "a.sdf", [_record("CCO", 1.0)])
    with pytest.raises(SystemExit):
        molecules_main.parse_args(["--data", path])
    with pytest.raises(SystemExit):
        molecules_main.parse_args(["--property", "SOL"])  # only with --data FILE


# --- the ridge baseline's solver --------------------------------------------------------

@pytest.mark.parametrize("n, d", [(30, 50), (80, 20)])  # the dual and the primal form
def test_ridge_is_the_closed_form_solution_in_either_form(n, d):
    rng = np.random.default_rng(n)
    x, y = rng.integers(0, 4, size=(n, d)), rng.normal(size=n)
    model = Ridge(0.7).fit(x, y)
    xc = np.log1p(x) - np.log1p(x).mean(axis=0)
    want = np.linalg.solve(xc.T @ xc + 0.7 * np.eye(d), xc.T @ (y - y.mean()))
    np.testing.assert_allclose(model.w, want, atol=1e-10)
    np.testing.assert_allclose(model.predict(x[:3]), np.log1p(x[:3]) @ want
                               + y.mean() - np.log1p(x).mean(axis=0) @ want, atol=1e-10)


# --- QM9 ---------------------------------------------------------------------------------

def test_the_shipped_qm9_subset_reads_whole_in_disjoint_splits():
    from refold.examples.molecules import qm9
    train, test, prop = SHIPPED["qm9"]
    read = {}
    for path, n in ((train, qm9.TRAIN), (test, qm9.TEST)):
        mols, values, report = chem.read_molecules(path, prop)
        assert (len(mols), report.skipped) == (n, 0)
        assert 1 < min(values) < max(values) < 20  # HOMO-LUMO gaps in eV
        assert max(m.GetNumAtoms() for m in mols) <= 9  # QM9: up to nine heavy atoms
        with gzip.open(path, "rt") as f:
            read[path] = {int(line.split(",")[0]) for line in f.readlines()[1:]}
        assert len(read[path]) == n
    assert not read[train] & read[test]


def _qm9pack_table(path, rows) -> str:
    header = "XYZ_file,Index,SMILES,InChi,N_atoms,HOMO_au,LUMO_au,HOMO_LUMO_gap_au\n"
    with open(path, "w") as f:
        f.write(header + "".join(f'"m{i}.xyz",{i},"{s}","InChI=x",3,-0.2,0.1,{g}\n'
                                 for i, s, g in rows))
    return str(path)


def test_the_qm9_subset_is_regenerated_from_qm9pack_tables(tmp_path):
    from refold.examples.molecules import qm9
    rows = [(i, SMILES[i % len(SMILES)], 0.2 + 0.01 * i) for i in range(1, 21)]
    rows[4] = (5, "C1CC", 0.25)  # a SMILES RDKit cannot parse
    tables = [_qm9pack_table(tmp_path / "qm9_part2.csv", rows[10:]),
              _qm9pack_table(tmp_path / "qm9_part1.csv", rows[:10])]
    args = ["--tables", *tables, "--train", "12", "--test", "6", "--seed", "3"]
    paths = qm9.main([*args, "--out", str(tmp_path / "a")])
    again = qm9.main([*args, "--out", str(tmp_path / "b")])
    for name in ("train", "test"):  # the same bytes every time
        with open(paths[name], "rb") as f, open(again[name], "rb") as g:
            assert f.read() == g.read()
    split = {}
    for name, path in paths.items():
        with gzip.open(path, "rt") as f:
            lines = f.read().splitlines()
        assert lines[0] == "index,smiles,gap_eV"
        split[name] = [line.split(",") for line in lines[1:]]
        indices = [int(r[0]) for r in split[name]]
        assert indices == sorted(indices)
        for index, smiles, gap in split[name]:  # hartree to eV, to 4 decimals
            assert smiles == rows[int(index) - 1][1]
            assert gap == f"{(0.2 + 0.01 * int(index)) * qm9.HARTREE_EV:.4f}"
    assert (len(split["train"]), len(split["test"])) == (12, 6)
    assert not {r[0] for r in split["train"]} & {r[0] for r in split["test"]}
    with pytest.raises(ValueError, match="asked for 15 \\+ 6 molecules of 20"):
        qm9.draw(rows, 15, 6)


def test_main_runs_on_the_shipped_qm9_subset_without_network(tmp_path, capsys):
    out = molecules_main.main(["--data", "qm9", "--train-size", "60", "--test-size", "20",
                               "--epochs", "2", "--units", "8", "--layers", "1",
                               "--max-distance", "1", "--batch-size", "16", "--lr", "0.02",
                               "--out", str(tmp_path), "--no-plot", "--verbose", "0"])
    printed = capsys.readouterr().out
    assert "qm9.train.csv.gz: 4000 of 4000 records read" in printed
    assert "54 training, 6 validation, 20 test molecules" in printed
    assert "training HOMO-LUMO gap (eV)" in printed and "Morgan + ridge" in printed
    assert set(out["rows"]) == {"training mean", "Morgan + ridge", "weave"}
    assert all(math.isfinite(v) for v in out["history"]["loss"])
    assert out["predictions"].shape == (20,)


def test_bad_smiles_in_a_qm9_style_file_are_skipped_and_counted(tmp_path, capsys):
    from refold.examples.molecules import qm9
    rows = [(i, s, 5.0 + 0.1 * i) for i, s in enumerate(SMILES * 2, 1)]
    rows[2] = (3, "C1CC", 7.0)
    rows[7] = (8, "not a molecule", 6.0)
    path = str(tmp_path / "gaps.csv.gz")
    qm9.write_split(path, rows)
    out = molecules_main.main(["--data", path, "--property", "gap_eV", "--epochs", "1",
                               "--units", "8", "--layers", "1", "--max-distance", "1",
                               "--out", str(tmp_path / "out"), "--no-plot", "--verbose", "0"])
    printed = capsys.readouterr().out
    assert "22 of 24 records read, 2 skipped (the first: record 3, RDKit could not parse " \
           "'C1CC')" in printed
    assert len(out["predictions"]) == 22 // 5


def test_size_options_are_positive_and_default_to_all_real_molecules():
    args = molecules_main.parse_args(["--data", "qm9"])
    assert (args.train_size, args.test_size) == (None, None)
    assert molecules_main.parse_args([]).train_size == 2000
    with pytest.raises(SystemExit):
        molecules_main.parse_args(["--data", "qm9", "--train-size", "0"])
