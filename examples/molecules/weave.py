"""Weave graph convolutions (Kearnes et al., 2016) as blocks, over molecule-like graphs.

A molecule is a dict: ``{"atoms": [atom, ...]}``, each atom a dict
``{"features": [...], "pairs": [{"j": j, "features": [...]}, ...]}`` listing the
ordered pairs ``(i, j)`` it starts (see `examples.molecules.molecules.featurize`).

A weave layer updates atoms from pairs and pairs from atoms, both from the layer's
inputs (``A`` atom vectors, ``P`` pair vectors, ``[u, v]`` concatenation)::

    A_i' = relu(W_a [relu(W_aa A_i), sum_j relu(W_pa P_ij)])
    P_ij' = relu(W_p [relu(W_pp P_ij), relu(W_ap [A_i, A_j]) + relu(W_ap [A_j, A_i])])

so two layers let an atom see the atoms two pairs away. Everything is blocks: the
pairs of atom ``i`` are a sequence nested in atom ``i``'s item, so its sum needs no
gather; ``A_j`` is picked from the atoms with `td.Nth` and the index ``j`` from the
input. The engine batches each layer across all atoms (or pairs) of all molecules.

>>> mol = {"atoms": [{"features": [1.0, 0.0], "pairs": [{"j": 1, "features": [1.0]}]},
...                  {"features": [0.0, 1.0], "pairs": [{"j": 0, "features": [1.0]}]}]}
>>> atoms, pairs = (inputs(2, 1) >> weave_layer(3) >> td.GetItem(slice(0, 2))).eval(mol)
>>> len(atoms), atoms[0].shape, [len(p) for p in pairs], pairs[0][0].shape
(2, (3,), [1, 1], (3,))
>>> weave_model(2, 1, units=4).eval(mol).shape  # one prediction per molecule
(1,)
"""

from __future__ import annotations

import refold as td

__all__ = ["inputs", "weave_layer", "weave_model"]


def inputs(atom_features: int, pair_features: int) -> td.Block:
    """`molecule -> (A, P, J)`: atom vectors `Seq(float32[atom_features])`, each atom's
    pair vectors `Seq(Seq(float32[pair_features]))`, and the same pairs with their
    other atom's index `j` (`Seq(Seq((Py, float32[...])))`), which every layer reads.
    """
    pair = td.AllOf(td.GetItem("j"), td.GetItem("features") >> td.Vector(pair_features))
    atoms = td.GetItem("atoms")
    c = td.Composition(name="inputs")
    with c.scope():
        a = (atoms >> td.Map(td.GetItem("features") >> td.Vector(atom_features))).reads(
            c.input)
        j = (td.GetItem("atoms") >> td.Map(td.GetItem("pairs") >> td.Map(pair))).reads(c.input)
        p = td.Map(td.Map(td.GetItem(1))).reads(j)
        c.output.reads(a, p, j)
    return c


def weave_layer(units: int, name: str = "weave") -> td.Block:
    """`(A, P, J) -> (A', P', J)` with atom and pair vectors of size `units`."""
    import tensorflow as tf
    fc = {k: td.FC(units, name=f"{name}_{k}") for k in ("aa", "pa", "a", "ap", "pp", "p")}

    # (A_i, A_j, P_ij) -> P_ij'
    atoms_both_ways = td.AllOf(
        td.Slice(stop=2) >> td.Concat() >> fc["ap"],
        td.AllOf(td.GetItem(1), td.GetItem(0)) >> td.Concat() >> fc["ap"],
    ) >> td.Function(tf.add, name=f"{name}_symmetric")
    pair_update = td.AllOf(td.GetItem(2) >> fc["pp"], atoms_both_ways) \
        >> td.Concat() >> fc["p"]

    # (A_all, A_i, P_i, J_i) -> (A_i', P_i')
    atom = td.Composition(name=f"{name}_atom")
    with atom.scope():
        a_all, a_i = atom.input[0], atom.input[1]
        p_i, j_i = atom.input[2], atom.input[3]
        pick_j = td.AllOf(td.GetItem(0), td.GetItem(1) >> td.GetItem(0)) >> td.Nth()
        a_j = (td.Zip() >> td.Map(pick_j)).reads(td.Broadcast().reads(a_all), j_i)
        new_pairs = (td.Zip() >> td.Map(pair_update)).reads(
            td.Broadcast().reads(a_i), a_j, p_i)
        from_pairs = (td.Map(fc["pa"]) >> td.Sum()).reads(p_i)
        new_atom = (td.Concat() >> fc["a"]).reads(td.Function(fc["aa"]).reads(a_i),
                                                  from_pairs)
        atom.output.reads(new_atom, new_pairs)

    layer = td.Composition(name=name)
    with layer.scope():
        a, p, j = layer.input[0], layer.input[1], layer.input[2]
        updated = (td.Zip() >> td.Map(atom)).reads(td.Broadcast().reads(a), a, p, j)
        layer.output.reads(td.Map(td.GetItem(0)).reads(updated),
                           td.Map(td.GetItem(1)).reads(updated), j)
    return layer


def weave_model(atom_features: int, pair_features: int, units: int = 32, layers: int = 2,
                outputs: int = 1) -> td.Block:
    """`molecule -> float32[outputs]`: `layers` weave layers, then the readout (a sum
    over atoms of a per-atom layer), a hidden layer and a linear output."""
    model = inputs(atom_features, pair_features)
    for k in range(layers):
        model = model >> weave_layer(units, name=f"weave{k + 1}")
    readout = td.GetItem(0) >> td.Map(td.FC(units, name="readout")) >> td.Sum()
    return model >> readout >> td.FC(units, name="hidden") \
        >> td.FC(outputs, activation=None, name="output")
