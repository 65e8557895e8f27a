"""Trains the calculator model to predict the sign of random arithmetic expressions.

    python -m refold.examples.calculator [--epochs 10] [--train-size 6000] [--max-depth 5]

Prints Keras' per-epoch log (validation on a dev set; early stopping keeps the best
epoch), then the test accuracy overall, by expression depth and against always
guessing the most frequent sign, and a few test predictions.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from refold.examples.calculator.calculator import (  # noqa: E402
    CLASSES,
    dataset,
    depth,
    expression_classifier,
    majority_accuracy,
    to_infix,
)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m refold.examples.calculator", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--train-size", type=int, default=6000)
    p.add_argument("--dev-size", type=int, default=500,
                   help="validation expressions (early stopping keeps the best epoch)")
    p.add_argument("--test-size", type=int, default=1000)
    p.add_argument("--max-depth", type=int, default=5)
    p.add_argument("--state", type=int, default=32, help="size of an expression's code")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.005)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--verbose", type=int, default=2, choices=(0, 1, 2))
    args = p.parse_args(argv)
    if args.max_depth < 1:
        p.error("--max-depth must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> dict:
    """Runs the example; returns the Keras history, test accuracies and predictions."""
    import keras

    from refold.compiler import Model
    args = parse_args(argv)
    rng = np.random.default_rng(args.seed)
    train_x, train_y = dataset(args.train_size, rng, args.max_depth)
    dev_x, dev_y = dataset(args.dev_size, rng, args.max_depth)
    test_x, test_y = dataset(args.test_size, rng, args.max_depth)
    counts = np.bincount(train_y, minlength=3)
    print(f"{len(train_x)} training expressions of depth <= {args.max_depth} ("
          + ", ".join(f"{n} {c}" for n, c in zip(counts, CLASSES))
          + f"), {len(dev_x)} dev, {len(test_x)} test")

    keras.utils.set_random_seed(args.seed)
    model = Model(expression_classifier(args.state), seed=args.seed)
    model.compile(optimizer=keras.optimizers.Adam(args.lr),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    stop = keras.callbacks.EarlyStopping(monitor="val_accuracy", patience=3,
                                         restore_best_weights=True)
    history = model.fit(train_x, train_y, batch_size=args.batch_size, epochs=args.epochs,
                        validation_data=(dev_x, dev_y), callbacks=[stop],
                        verbose=args.verbose)
    logits = model.predict(test_x, batch_size=256, verbose=0)
    pred = logits.argmax(axis=1)
    accuracy = float(np.mean(pred == test_y))
    depths = np.array([depth(e) for e in test_x])
    by_depth = {int(d): float(np.mean(pred[depths == d] == test_y[depths == d]))
                for d in np.unique(depths)}
    majority = majority_accuracy(train_y, test_y)
    guess = CLASSES[np.bincount(train_y, minlength=3).argmax()]
    kept = stop.best_epoch + 1   # early stopping restored its weights
    print(f"\nkept epoch {kept} of {len(history.history['loss'])} (best dev accuracy)")
    print(f"test accuracy {100 * accuracy:.1f}% (always '{guess}': {100 * majority:.1f}%)")
    print("by depth: " + ", ".join(f"{d}: {100 * a:.1f}% ({int(np.sum(depths == d))})"
                                   for d, a in by_depth.items()))
    shortest = sorted(range(len(test_x)), key=lambda i: len(to_infix(test_x[i])))
    picks = [i for i in shortest if depth(test_x[i]) >= 2][:5]  # short enough to read
    for e, p, y in ((test_x[i], pred[i], test_y[i]) for i in picks):
        print(f"  {to_infix(e)}  ->  {CLASSES[p]}" + ("" if p == y else
                                                        f"  (wrong: {CLASSES[y]})"))
    return {"history": history.history, "accuracy": accuracy, "by_depth": by_depth,
            "majority": majority, "logits": logits, "kept_epoch": kept}


if __name__ == "__main__":
    main()
