"""The weave model on real molecules: aqueous solubility (logS) of the Huuskonen set.

    python -m refold.examples.molecules --data solubility

reads the shipped SDF files (`examples/molecules/data`, see `SOURCE.md` there) through
RDKit, holds out a tenth of the training molecules for validation (the epoch with the
lowest validation RMSE is kept), and reports test RMSE and MAE of three predictors:

* the training mean (the floor any model must beat);
* Morgan count fingerprints (radius 2, 2,048 buckets) with ridge regression, the
  penalty picked by 5-fold cross-validation on the training molecules;
* the weave model (`examples.molecules.weave`) on RDKit atom and pair features
  (`examples.molecules.chem`), trained on the standardised property with mean squared
  error.

    python -m refold.examples.molecules --data qm9

does the same for the HOMO-LUMO gap (eV) of a fixed random subset of QM9, 4,000
training and 1,000 test molecules (`examples.molecules.qm9`, shipped as SMILES).

`--data TRAIN [--test-data TEST] --property NAME` runs on other files (SDF, or CSV with
a `smiles` column); without `--test-data` a fifth of TRAIN, drawn at random, is the
test set. `--train-size N` and `--test-size N` keep the first N molecules of the
training file and of the test set.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from refold.examples.molecules import chem
from refold.examples.molecules.fingerprints import fit_ridge_cv, morgan_counts

__all__ = ["SHIPPED", "TARGETS", "load_splits", "errors", "format_table", "run"]

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
SHIPPED = {"solubility": (os.path.join(DATA, "solubility.train.sdf.gz"),
                          os.path.join(DATA, "solubility.test.sdf.gz"), "SOL"),
           "qm9": (os.path.join(DATA, "qm9.train.csv.gz"),
                   os.path.join(DATA, "qm9.test.csv.gz"), "gap_eV")}
TARGETS = {"solubility": "logS", "qm9": "HOMO-LUMO gap (eV)"}
"""What each shipped set's property is, for the printed text and the plot."""


def load_splits(args: argparse.Namespace) -> dict:
    """`{"train"|"valid"|"test": (molecules, property array)}`, and the read reports."""
    if args.data in SHIPPED:
        train_path, test_path, prop = SHIPPED[args.data]
    else:
        train_path, test_path, prop = args.data, args.test_data, args.property
    rng = np.random.default_rng(args.seed)
    mols, values, report = chem.read_molecules(train_path, prop)
    mols, values = mols[:args.train_size], values[:args.train_size]
    reports = [report]
    if test_path is None:
        order = rng.permutation(len(mols))
        cut = len(mols) // 5
        test = ([mols[i] for i in order[:cut]], [values[i] for i in order[:cut]])
        mols, values = [mols[i] for i in order[cut:]], [values[i] for i in order[cut:]]
    else:
        test_mols, test_values, test_report = chem.read_molecules(test_path, prop)
        test = (test_mols, test_values)
        reports.append(test_report)
    test = (test[0][:args.test_size], test[1][:args.test_size])
    order = rng.permutation(len(mols))
    cut = max(1, len(mols) // 10)
    splits = {"train": ([mols[i] for i in order[cut:]], [values[i] for i in order[cut:]]),
              "valid": ([mols[i] for i in order[:cut]], [values[i] for i in order[:cut]]),
              "test": test}
    for name, (m, _) in splits.items():
        if not m:
            raise ValueError(f"{name} split is empty: " + "; ".join(map(str, reports)))
    return {k: (m, np.asarray(v, np.float32)) for k, (m, v) in splits.items()}, reports


def errors(pred: np.ndarray, true: np.ndarray) -> dict[str, float]:
    """`{"rmse": ..., "mae": ...}`.

    >>> errors(np.array([1.0, 2.0]), np.array([1.0, 4.0]))
    {'rmse': 1.4142135623730951, 'mae': 1.0}
    """
    diff = np.asarray(pred, np.float64) - np.asarray(true, np.float64)
    return {"rmse": float(np.sqrt(np.mean(diff ** 2))), "mae": float(np.mean(np.abs(diff)))}


def format_table(rows: dict[str, dict[str, dict[str, float]]]) -> str:
    """Validation and test RMSE and MAE by predictor, as a text table.

    >>> print(format_table({"mean": {"valid": {"rmse": 2.0, "mae": 1.5},
    ...                              "test": {"rmse": 2.1, "mae": 1.6}}}))
    predictor                | valid RMSE   MAE | test RMSE   MAE
    mean                     |       2.000 1.500 |     2.100 1.600
    """
    lines = [f"{'predictor':<25}| valid RMSE   MAE | test RMSE   MAE"]
    for name, by_split in rows.items():
        v, t = by_split["valid"], by_split["test"]
        lines.append(f"{name:<25}|       {v['rmse']:.3f} {v['mae']:.3f} |     "
                     f"{t['rmse']:.3f} {t['mae']:.3f}")
    return "\n".join(lines)


def _train_weave(x: dict, y: dict, args: argparse.Namespace):
    import keras

    from refold.compiler import Model
    from refold.examples.molecules.weave import weave_model
    from refold.examples.training import keep_best
    mean, std = float(y["train"].mean()), float(y["train"].std())
    scaled = {k: (v - mean) / std for k, v in y.items()}
    keras.utils.set_random_seed(args.seed)
    model = Model(weave_model(chem.ATOM_FEATURES, chem.PAIR_FEATURES, args.units,
                              args.layers), seed=args.seed)
    model.compile(optimizer=keras.optimizers.Adam(args.lr), loss="mse",
                  metrics=[keras.metrics.RootMeanSquaredError(name="rmse")])
    best = keep_best("val_rmse", mode="min")
    callbacks = [best, keras.callbacks.CSVLogger(os.path.join(args.out, "history_weave.csv"))]
    history = model.fit(x["train"], scaled["train"], batch_size=args.batch_size,
                        epochs=args.epochs, validation_data=(x["valid"], scaled["valid"]),
                        callbacks=callbacks, verbose=args.verbose)
    predict = {k: model.predict(v, batch_size=128, verbose=0)[:, 0] * std + mean
               for k, v in x.items()}
    return predict, history.history, best.best_epoch


def run(args: argparse.Namespace) -> dict:
    """Runs the real-data comparison; returns the table's rows, the weave model's
    history and the read reports."""
    os.makedirs(args.out, exist_ok=True)
    target = TARGETS.get(args.data, args.property)
    start = time.perf_counter()
    splits, reports = load_splits(args)
    for report in reports:
        print(report)
    y = {k: v for k, (_, v) in splits.items()}
    atoms = np.mean([m.GetNumAtoms() for m in splits["train"][0]])
    print(f"{len(y['train'])} training, {len(y['valid'])} validation, {len(y['test'])} test "
          f"molecules ({atoms:.1f} heavy atoms each); training {target} "
          f"{y['train'].mean():.2f} +- {y['train'].std():.2f}")
    rows = {"training mean": {k: errors(np.full_like(v, y["train"].mean()), v)
                              for k, v in y.items() if k != "train"}}

    fps = {k: morgan_counts(m) for k, (m, _) in splits.items()}
    ridge, alpha = fit_ridge_cv(fps["train"], y["train"], seed=args.seed)
    rows["Morgan + ridge"] = {k: errors(ridge.predict(fps[k]), y[k]) for k in ("valid", "test")}

    x = {k: [chem.featurize(m, args.max_distance) for m in mols]
         for k, (mols, _) in splits.items()}
    predict, history, best = _train_weave(x, y, args)
    rows["weave"] = {k: errors(predict[k], y[k]) for k in ("valid", "test")}
    seconds = time.perf_counter() - start

    if not args.no_plot:
        from refold.examples.training import plot_curves
        plot_curves({"weave": history}, [("loss", f"MSE (standardised {target})"),
                                         ("rmse", f"RMSE (standardised {target})")],
                    os.path.join(args.out, "curves.png"), kept={"weave": best})
    print(f"\n{target}, {args.data}: ridge alpha {alpha:g} (5-fold CV); weave kept epoch "
          f"{best + 1 if best is not None else '-'} of {args.epochs} (lowest validation RMSE)")
    print(format_table(rows))
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"args": vars(args), "errors": rows, "ridge_alpha": alpha,
                   "weave_best_epoch": None if best is None else best + 1,
                   "reports": [str(r) for r in reports], "seconds": round(seconds, 1)},
                  f, indent=2)
    print(f"\nwrote {args.out}/: " + ("curves.png, " if not args.no_plot else "")
          + f"history_weave.csv, results.json; total {seconds:.0f} s")
    return {"rows": rows, "history": history, "reports": reports,
            "predictions": predict["test"]}
