"""Trains weave graph-convolution models on molecules, synthetic or real.

    python -m refold.examples.molecules [--epochs 8] [--train-size 2000] [--layers 2]

counts carbonyl groups in random molecule-like graphs: it prints Keras' per-epoch log
(mean squared error and mean absolute error), then the test mean absolute error and
exact-count accuracy (prediction rounded), against a model that always predicts the
training mean, and a few test predictions.

    python -m refold.examples.molecules --data solubility [--epochs 40]

predicts the aqueous solubility (logS) of the Huuskonen set (shipped, read through
RDKit: `pip install rdkit`, or the `molecules` extra) and prints test RMSE and MAE
against the training mean and a Morgan-fingerprint ridge regression
(`examples.molecules.solubility`); `--data qm9` the same for the HOMO-LUMO gap (eV)
of a shipped random subset of QM9 (`examples.molecules.qm9`); `--data FILE` reads other
SDF or SMILES-CSV files.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from refold.examples.molecules.molecules import ATOM_FEATURES, PAIR_FEATURES, dataset  # noqa: E402
from refold.examples.molecules.solubility import SHIPPED  # noqa: E402
from refold.examples.molecules.weave import weave_model  # noqa: E402


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m refold.examples.molecules", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="synthetic",
                   help="'synthetic' (random graphs, carbonyl counts), 'solubility' (the "
                        "shipped Huuskonen set), 'qm9' (the HOMO-LUMO gap of a shipped QM9 "
                        "subset), or a training file: .sdf or .csv with a 'smiles' column, "
                        "optionally .gz")
    p.add_argument("--test-data", default=None,
                   help="with --data FILE: the test file (default: a random fifth of FILE)")
    p.add_argument("--property", default=None,
                   help="with --data FILE: the property to predict (SDF field or CSV column)")
    p.add_argument("--train-size", type=int, default=None,
                   help="synthetic: molecules to draw (default 2000); real: use the first N "
                        "molecules of the training file (default all)")
    p.add_argument("--test-size", type=int, default=None,
                   help="synthetic: default 400; real: the first N test molecules")
    p.add_argument("--layers", type=int, default=2, help="weave layers")
    p.add_argument("--units", type=int, default=32)
    p.add_argument("--max-distance", type=int, default=2, choices=(1, 2),
                   help="model the atom pairs at most this many bonds apart")
    p.add_argument("--epochs", type=int, default=None, help="default 8 synthetic, 40 real")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=None,
                   help="Adam's learning rate; default 0.005 synthetic, 0.002 real")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="runs/molecules",
                   help="real data: folder for curves.png, history_weave.csv, results.json")
    p.add_argument("--no-plot", action="store_true", help="do not write curves.png")
    p.add_argument("--verbose", type=int, default=2, choices=(0, 1, 2))
    args = p.parse_args(argv)
    if args.layers < 1:
        p.error("--layers must be at least 1")
    real = args.data != "synthetic"
    for name, default in (("train_size", 2000), ("test_size", 400)):
        value = getattr(args, name)
        if value is not None and value <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive")
        if value is None and not real:
            setattr(args, name, default)
    if args.epochs is None:
        args.epochs = 40 if real else 8
    if args.lr is None:
        args.lr = 0.002 if real else 0.005
    if real and args.data not in SHIPPED:
        if not os.path.exists(args.data):
            p.error(f"--data: no file {args.data!r} (nor 'synthetic' or one of "
                    f"{sorted(SHIPPED)})")
        if args.property is None:
            p.error("--data FILE needs --property NAME")
    elif args.test_data is not None or args.property is not None:
        p.error("--test-data and --property go with --data FILE")
    return args


def main(argv: Sequence[str] | None = None) -> dict:
    """Runs the example; returns the history, test metrics and predictions (see
    `examples.molecules.solubility.run` for real data)."""
    import keras

    from refold.compiler import Model
    args = parse_args(argv)
    if args.data != "synthetic":
        from refold.examples.molecules.solubility import run
        return run(args)
    rng = np.random.default_rng(args.seed)
    train_x, train_y, _ = dataset(args.train_size, rng, args.max_distance)
    test_x, test_y, test_mols = dataset(args.test_size, rng, args.max_distance)
    atoms = sum(len(m["atoms"]) for m in train_x)
    pairs = sum(len(a["pairs"]) for m in train_x for a in m["atoms"])
    print(f"{len(train_x)} training molecules ({atoms / len(train_x):.1f} atoms, "
          f"{pairs / len(train_x):.1f} pairs each), {len(test_x)} test; carbonyl counts "
          f"{np.bincount(train_y.astype(int)).tolist()} (0, 1, 2, ...)")
    keras.utils.set_random_seed(args.seed)
    model = Model(weave_model(ATOM_FEATURES, PAIR_FEATURES, args.units, args.layers),
                  seed=args.seed)
    model.compile(optimizer=keras.optimizers.Adam(args.lr), loss="mse", metrics=["mae"])
    history = model.fit(train_x, train_y, batch_size=args.batch_size, epochs=args.epochs,
                        validation_data=(test_x, test_y), verbose=args.verbose)
    pred = model.predict(test_x, batch_size=128, verbose=0)[:, 0]
    mae = float(np.mean(np.abs(pred - test_y)))
    exact = float(np.mean(np.round(pred) == test_y))
    mean_mae = float(np.mean(np.abs(train_y.mean() - test_y)))
    mean_exact = float(np.mean(np.round(train_y.mean()) == test_y))
    print(f"\ntest: mean absolute error {mae:.3f}, exact count {100 * exact:.1f}%   "
          f"(always the training mean {train_y.mean():.2f}: {mean_mae:.3f}, "
          f"{100 * mean_exact:.1f}%)")
    for mol, p, y in list(zip(test_mols, pred, test_y))[:4]:
        bonds = " ".join(f"{mol.atoms[a]}{'=' if o == 2 else '-'}{mol.atoms[b]}"
                         for a, b, o in mol.bonds)
        print(f"  {bonds}: predicted {p:.2f}, true {int(y)}")
    return {"history": history.history, "mae": mae, "exact": exact,
            "baseline_mae": mean_mae, "predictions": pred}


if __name__ == "__main__":
    main()
