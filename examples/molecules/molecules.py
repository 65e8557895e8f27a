"""Random molecule-like graphs, their features for the weave model, and a property.

A molecule is a list of atom types (``"C"``, ``"N"``, ``"O"``, ``"S"``) and bonds
``(a, b, order)`` (order 1 or 2) that respect each element's valence (C 4, N 3, O 2,
S 2). It grows as a random tree (each new atom bonds to an earlier atom with a free
valence, sometimes with a double bond), then may close a ring.

The property to learn is the number of carbonyl groups, carbon atoms with a double
bond to an oxygen: it needs both the atom types at the two ends of a bond and the
bond's order, so a model must pass information atom -> pair -> atom (two weave
layers), and it cannot be read off the atom counts.

>>> mol = Molecule(["C", "O", "C", "O"], [(0, 1, 2), (0, 2, 1), (2, 3, 1)])
>>> carbonyl_count(mol)
1
>>> m = featurize(mol)
>>> len(m["atoms"]), len(m["atoms"][0]["features"]), m["atoms"][0]["pairs"][0]
(4, 9, {'j': 1, 'features': [0.0, 1.0, 1.0, 0.0]})
>>> m = featurize(mol, max_distance=1)
>>> [len(a["pairs"]) for a in m["atoms"]]
[2, 1, 2, 1]
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

__all__ = ["ELEMENTS", "VALENCE", "Molecule", "random_molecule", "carbonyl_count",
           "featurize", "dataset", "ATOM_FEATURES", "PAIR_FEATURES"]

ELEMENTS = ("C", "N", "O", "S")
VALENCE = {"C": 4, "N": 3, "O": 2, "S": 2}
_FREQUENCY = (0.55, 0.15, 0.22, 0.08)
MAX_DEGREE = 4
ATOM_FEATURES = len(ELEMENTS) + MAX_DEGREE + 1
"""Element one-hot, then degree one-hot (0-4)."""
PAIR_FEATURES = 4
"""Bond order one-hot (single, double), then graph distance one-hot (1, 2)."""


@dataclass
class Molecule:
    atoms: list[str]
    bonds: list[tuple[int, int, int]]

    def __post_init__(self):
        used = [0] * len(self.atoms)
        for a, b, order in self.bonds:
            if a == b or order not in (1, 2):
                raise ValueError(f"bad bond {(a, b, order)}")
            used[a] += order
            used[b] += order
        for i, (element, n) in enumerate(zip(self.atoms, used)):
            if n > VALENCE[element]:
                raise ValueError(f"atom {i} ({element}) has {n} bonds, more than its "
                                 f"valence {VALENCE[element]}")

    def neighbours(self) -> list[dict[int, int]]:
        """For each atom, `{neighbour: bond order}`."""
        out: list[dict[int, int]] = [{} for _ in self.atoms]
        for a, b, order in self.bonds:
            out[a][b] = out[b][a] = order
        return out


def random_molecule(rng: np.random.Generator, min_atoms: int = 5,
                    max_atoms: int = 14) -> Molecule:
    """A random valence-respecting molecule-like graph."""
    n = int(rng.integers(min_atoms, max_atoms + 1))
    atoms = [ELEMENTS[int(rng.choice(len(ELEMENTS), p=_FREQUENCY))]]
    free = [VALENCE[atoms[0]]]
    bonds: list[tuple[int, int, int]] = []
    while len(atoms) < n:
        element = ELEMENTS[int(rng.choice(len(ELEMENTS), p=_FREQUENCY))]
        hosts = [i for i, f in enumerate(free) if f > 0]
        if not hosts:
            break
        host = hosts[int(rng.integers(len(hosts)))]
        order = 2 if (free[host] >= 2 and VALENCE[element] >= 2
                      and rng.random() < 0.5) else 1
        atoms.append(element)
        free.append(VALENCE[element] - order)
        free[host] -= order
        bonds.append((host, len(atoms) - 1, order))
    if rng.random() < 0.3:  # close a ring
        linked = {(a, b) for a, b, _ in bonds} | {(b, a) for a, b, _ in bonds}
        options = [(a, b) for a in range(len(atoms)) for b in range(a + 1, len(atoms))
                   if free[a] and free[b] and (a, b) not in linked]
        if options:
            a, b = options[int(rng.integers(len(options)))]
            bonds.append((a, b, 1))
    return Molecule(atoms, bonds)


def carbonyl_count(mol: Molecule) -> int:
    """The number of carbon atoms with a double bond to an oxygen atom."""
    return sum(1 for i, nbrs in enumerate(mol.neighbours()) if mol.atoms[i] == "C"
               and any(order == 2 and mol.atoms[j] == "O" for j, order in nbrs.items()))


def _distances(mol: Molecule, source: int, limit: int) -> dict[int, int]:
    nbrs = mol.neighbours()
    dist = {source: 0}
    queue = deque([source])
    while queue:
        a = queue.popleft()
        if dist[a] == limit:
            continue
        for b in nbrs[a]:
            if b not in dist:
                dist[b] = dist[a] + 1
                queue.append(b)
    return dist


def featurize(mol: Molecule, max_distance: int = 2) -> dict:
    """The weave model's input: atom features and, per atom `i`, the pairs `(i, j)`
    with `j` at most `max_distance` bonds away (1 or 2)."""
    if max_distance not in (1, 2):
        raise ValueError(f"max_distance must be 1 or 2, got {max_distance!r}")
    nbrs = mol.neighbours()
    atoms = []
    for i, element in enumerate(mol.atoms):
        features = [0.0] * ATOM_FEATURES
        features[ELEMENTS.index(element)] = 1.0
        features[len(ELEMENTS) + min(len(nbrs[i]), MAX_DEGREE)] = 1.0
        pairs = []
        for j, d in sorted(_distances(mol, i, max_distance).items()):
            if j == i:
                continue
            order = nbrs[i].get(j, 0)
            pairs.append({"j": j, "features": [float(order == 1), float(order == 2),
                                               float(d == 1), float(d == 2)]})
        atoms.append({"features": features, "pairs": pairs})
    return {"atoms": atoms}


def dataset(n: int, rng: np.random.Generator, max_distance: int = 2):
    """`n` featurized random molecules and their carbonyl counts (float32)."""
    mols = [random_molecule(rng) for _ in range(n)]
    return ([featurize(m, max_distance) for m in mols],
            np.array([carbonyl_count(m) for m in mols], np.float32), mols)
