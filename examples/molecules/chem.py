"""Real molecules through RDKit: reading SDF and SMILES files, and weave features.

`read_molecules(path, prop)` reads an SDF file (`.sdf`, `.sdf.gz`) or a CSV file with
a `smiles` column (`.csv`, `.csv.gz`) and returns the molecules, their property values
and a `ReadReport`. A record RDKit cannot parse (a bad SMILES, a broken molfile block)
or whose property is missing or not a finite number is skipped and counted, and the
report names the first such record (1-based), so one odd molecule neither stops a run
nor passes silently.

`featurize(mol)` turns an RDKit molecule (heavy atoms only; hydrogens are an atom
feature) into the weave model's input, the format of `molecules.featurize`: per atom
its features and the pairs `(i, j)` with `j` at most `max_distance` bonds away.

>>> from rdkit import Chem
>>> m = featurize(Chem.MolFromSmiles("CC(=O)O"))            # acetic acid
>>> len(m["atoms"]), len(m["atoms"][0]["features"]) == ATOM_FEATURES
(4, True)
>>> [p["j"] for p in m["atoms"][1]["pairs"]]                # the carbonyl carbon
[0, 2, 3]
>>> pair = m["atoms"][1]["pairs"][1]["features"]            # C=O of the acid group
>>> [PAIR_NAMES[k] for k, v in enumerate(pair) if v]
['double', 'distance 1', 'conjugated']
"""

from __future__ import annotations

import csv
import gzip
import math

from refold.examples.read_report import ReadReport

__all__ = ["ELEMENTS", "ATOM_FEATURES", "PAIR_FEATURES", "PAIR_NAMES", "ReadReport",
           "read_molecules", "parse_smiles", "featurize"]

ELEMENTS = ("C", "N", "O", "S", "F", "Cl", "Br", "I", "P")
"""The elements with a feature of their own; any other is "other element"."""
_HYBRIDIZATIONS = ("SP", "SP2", "SP3")
_ATOM_NAMES = ([f"element {e}" for e in ELEMENTS] + ["other element"]
               + [f"degree {d}" for d in range(6)]
               + ["charge -1", "charge 0", "charge +1"]
               + [f"{h} hydrogens" for h in range(5)]
               + ["aromatic", "in ring"] + [f"hybridization {h}" for h in _HYBRIDIZATIONS])
ATOM_FEATURES = len(_ATOM_NAMES)
"""Element (10), heavy-atom degree 0-5 (6), formal charge -1/0/+1 (3, clipped), attached
hydrogens 0-4 (5), aromatic, in a ring, hybridization sp/sp2/sp3 (3): one-hot groups."""
PAIR_NAMES = ("single", "double", "triple", "aromatic", "distance 1", "distance 2",
              "same ring", "conjugated")
PAIR_FEATURES = len(PAIR_NAMES)
"""Bond type (none for atoms two bonds apart), graph distance, both atoms in one ring,
conjugated bond."""


def _open_text(path: str):
    return gzip.open(path, "rt") if path.endswith(".gz") else open(path)


def _value(raw, prop: str) -> tuple[float | None, str | None]:
    if raw is None or str(raw).strip() == "":
        return None, f"no {prop!r} value"
    try:
        value = float(raw)
    except ValueError:
        return None, f"{prop!r} is not a number: {str(raw)[:40]!r}"
    if not math.isfinite(value):
        return None, f"{prop!r} is not finite: {raw!r}"
    return value, None


def read_molecules(path: str, prop: str):
    """`(molecules, values, report)` from an SDF or a CSV-of-SMILES file.

    Args:
        path: an `.sdf` file (property `prop` in each record's data fields) or a `.csv`
            file with columns `smiles` and `prop`; either may be gzipped (`.gz`).
        prop: the property to read (a float per molecule, e.g. `"SOL"`).
    """
    from rdkit import RDLogger
    name = path[:-3] if path.endswith(".gz") else path
    if not name.endswith((".sdf", ".csv")):
        raise ValueError(f"{path}: expected an .sdf or .csv file (optionally .gz)")
    report = ReadReport(path)
    mols, values = [], []
    RDLogger.DisableLog("rdApp.*")  # bad records are counted in the report instead
    try:
        for number, mol, raw, reason in (_sdf_records(path, prop) if name.endswith(".sdf")
                                         else _csv_records(path, prop)):
            report.records += 1
            if mol is None:
                report.skip(number, reason)
                continue
            value, why = _value(raw, prop)
            if why is not None:
                report.skip(number, why)
                continue
            mols.append(mol)
            values.append(value)
    finally:
        RDLogger.EnableLog("rdApp.*")
    return mols, values, report


def _sdf_records(path: str, prop: str):
    from rdkit import Chem
    with (gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")) as f:
        for number, mol in enumerate(Chem.ForwardSDMolSupplier(f), start=1):
            if mol is None:
                yield number, None, None, "RDKit could not parse the molecule"
            else:
                yield number, mol, mol.GetProp(prop) if mol.HasProp(prop) else None, None


def _csv_records(path: str, prop: str):
    with _open_text(path) as f:
        reader = csv.DictReader(f)
        missing = [c for c in ("smiles", prop) if c not in (reader.fieldnames or ())]
        if missing:
            raise ValueError(f"{path}: no column {missing[0]!r} (columns: {reader.fieldnames})")
        for number, row in enumerate(reader, start=1):
            mol = parse_smiles(row["smiles"] or "")
            yield (number, mol, row[prop],
                   None if mol is not None else f"RDKit could not parse {row['smiles']!r}")


def parse_smiles(smiles: str):
    """An RDKit molecule, or None if `smiles` is empty or RDKit cannot parse it."""
    from rdkit import Chem
    if not smiles.strip():
        return None
    return Chem.MolFromSmiles(smiles)


def _one_hot(index: int, size: int) -> list[float]:
    out = [0.0] * size
    out[index] = 1.0
    return out


def _atom_features(atom) -> list[float]:
    symbol = atom.GetSymbol()
    element = ELEMENTS.index(symbol) if symbol in ELEMENTS else len(ELEMENTS)
    hybrid = str(atom.GetHybridization())
    return (_one_hot(element, len(ELEMENTS) + 1)
            + _one_hot(min(atom.GetDegree(), 5), 6)
            + _one_hot(max(-1, min(atom.GetFormalCharge(), 1)) + 1, 3)
            + _one_hot(min(atom.GetTotalNumHs(), 4), 5)
            + [float(atom.GetIsAromatic()), float(atom.IsInRing())]
            + [float(hybrid == h) for h in _HYBRIDIZATIONS])


_BOND_TYPES = ("SINGLE", "DOUBLE", "TRIPLE", "AROMATIC")


def featurize(mol, max_distance: int = 2) -> dict:
    """The weave model's input for an RDKit molecule (see the module docstring)."""
    from rdkit import Chem
    if max_distance not in (1, 2):
        raise ValueError(f"max_distance must be 1 or 2, got {max_distance!r}")
    distance = Chem.GetDistanceMatrix(mol)
    rings = mol.GetRingInfo().AtomRings()
    atoms = []
    for atom in mol.GetAtoms():
        i = atom.GetIdx()
        pairs = []
        for j in range(mol.GetNumAtoms()):
            d = distance[i, j]
            if j == i or d > max_distance:
                continue
            bond = mol.GetBondBetweenAtoms(i, j)
            kind = str(bond.GetBondType()) if bond is not None else None
            features = [float(kind == t) for t in _BOND_TYPES] + [
                float(d == 1), float(d == 2),
                float(any(i in r and j in r for r in rings)),
                float(bond is not None and bond.GetIsConjugated())]
            pairs.append({"j": j, "features": features})
        atoms.append({"features": _atom_features(atom), "pairs": pairs})
    return {"atoms": atoms}
