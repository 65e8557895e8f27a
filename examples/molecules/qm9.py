"""A fixed random subset of QM9 with its HOMO-LUMO gap, and the script that makes it.

QM9 (Ramakrishnan, Dral, Rupp and von Lilienfeld, Scientific Data 1, 140022, 2014) holds
130,831 small organic molecules (up to nine heavy atoms of C, N, O and F) with properties
computed by density functional theory (B3LYP/6-31G(2df,p)). The example predicts the
HOMO-LUMO gap, the energy between the highest occupied and the lowest unoccupied
molecular orbital, in electronvolts (QM9 gives hartree; 1 Ha = 27.211386 eV), a standard
QM9 target that depends on the whole conjugated system rather than on counting groups.

The shipped files (`data/qm9.train.csv.gz`, `data/qm9.test.csv.gz`; columns `index`,
`smiles`, `gap_eV`) hold `TRAIN` + `TEST` molecules drawn at random (seed `SEED`) from
the `qm9pack` package's tables, so that the example needs neither the 104 MB package nor a
network (see `data/SOURCE.md`). They are regenerated, byte for byte, by

    pip install -e ".[qm9]"            # qm9pack
    python -m refold.examples.molecules.qm9   # writes examples/molecules/data/qm9.*.csv.gz

>>> round(HARTREE_EV * 0.5048, 3)     # methane's gap, 0.5048 Ha
13.736
"""

from __future__ import annotations

import argparse
import csv
import gzip
import importlib.metadata
import io
import os
import sys
from collections.abc import Sequence

import numpy as np

__all__ = ["HARTREE_EV", "TRAIN", "TEST", "SEED", "COLUMNS", "qm9pack_tables",
           "read_tables", "draw", "write_split", "main"]

HARTREE_EV = 27.211386
TRAIN, TEST, SEED = 4000, 1000, 0
COLUMNS = ("index", "smiles", "gap_eV")
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def qm9pack_tables() -> list[str]:
    """The installed paths of qm9pack's three tables (`qm9_part1.csv` ...), in order."""
    try:
        files = importlib.metadata.files("qm9pack") or []
    except importlib.metadata.PackageNotFoundError:
        raise ModuleNotFoundError("regenerating the QM9 subset needs the 'qm9pack' "
                                  "package: pip install -e \".[qm9]\"") from None
    parts = sorted(str(f.locate()) for f in files
                   if os.path.basename(str(f)).startswith("qm9_part") and str(f).endswith(".csv"))
    if not parts:
        raise FileNotFoundError("qm9pack is installed without its data/qm9_part*.csv tables")
    return parts


def read_tables(paths: Sequence[str]) -> list[tuple[int, str, float]]:
    """`(QM9 index, SMILES, gap in eV)` of every row of qm9pack-format tables (columns
    `Index`, `SMILES`, `HOMO_LUMO_gap_au`, among others), sorted by index."""
    csv.field_size_limit(sys.maxsize)  # a row's coordinates and frequencies are long
    rows = []
    for path in paths:
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                rows.append((int(row["Index"]), row["SMILES"],
                             HARTREE_EV * float(row["HOMO_LUMO_gap_au"])))
    return sorted(rows)


def draw(rows: Sequence[tuple], train: int = TRAIN, test: int = TEST, seed: int = SEED
         ) -> tuple[list, list]:
    """(train, test): `train + test` distinct rows drawn at random, each part sorted."""
    if train + test > len(rows):
        raise ValueError(f"asked for {train} + {test} molecules of {len(rows)}")
    order = np.random.default_rng(seed).permutation(len(rows))
    return (sorted(rows[i] for i in order[:train]),
            sorted(rows[i] for i in order[train:train + test]))


def write_split(path: str, rows: Sequence[tuple]) -> None:
    """Rows as gzipped CSV (`COLUMNS`), the gap to 4 decimals (QM9 gives 4 digits in
    hartree), with no timestamp so the bytes depend on the rows alone."""
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(COLUMNS)
    for index, smiles, gap in rows:
        writer.writerow((index, smiles, f"{gap:.4f}"))
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0,
                                                filename="") as f:
        f.write(text.getvalue().encode())


def main(argv: Sequence[str] | None = None) -> dict[str, str]:
    p = argparse.ArgumentParser(prog="python -m refold.examples.molecules.qm9",
                                description="Writes the QM9 subset from qm9pack's tables.")
    p.add_argument("--out", default=DATA)
    p.add_argument("--train", type=int, default=TRAIN)
    p.add_argument("--test", type=int, default=TEST)
    p.add_argument("--seed", type=int, default=SEED)
    p.add_argument("--tables", nargs="*", default=None,
                   help="qm9pack-format CSV tables (default: the installed qm9pack's)")
    args = p.parse_args(argv)
    rows = read_tables(args.tables or qm9pack_tables())
    parts = dict(zip(("train", "test"), draw(rows, args.train, args.test, args.seed)))
    os.makedirs(args.out, exist_ok=True)
    paths = {}
    for name, part in parts.items():
        paths[name] = os.path.join(args.out, f"qm9.{name}.csv.gz")
        write_split(paths[name], part)
        print(f"{paths[name]}: {len(part)} of {len(rows)} molecules")
    return paths


if __name__ == "__main__":
    main()
