"""Jobs that `tests/compiler/test_saving.py` runs in fresh processes:
`python -m tests.compiler.saving_jobs JOB DIR`.

- `models DIR`: every example's model and every zoo block (`models`), built,
  compiled, saved to `DIR/N.keras`, with their inputs and predictions
  (`DIR/cases.pkl`); `load DIR` loads each file in this process and writes its
  predictions to `DIR/loaded.pkl`.
- `backup DIR [KILL_EPOCH KILL_BATCH]`: `fit` with `BackupAndRestore(DIR/backup)`;
  with a kill point, writes `DIR/reached` there and waits to be killed; at the end
  writes the weights to `DIR/weights.npz`.
- `continue DIR`: loads `DIR/model.keras` and fits epochs 1-2 more, weights to
  `DIR/continued.npz`.
"""

from __future__ import annotations

import os
import pickle
import sys
import time

import keras
import numpy as np

import refold as td
from refold.compiler import Model, load_model

SCCE = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def quickstart_block():
    """The README's quick-start model."""
    tree = td.ForwardDeclaration(td.PyObjectType(), td.TensorType((8,)))
    leaf = td.Scalar() >> td.Function(lambda x: x[:, None]) >> td.FC(8)
    pair = td.Record((tree(), tree())) >> td.Concat() >> td.FC(8)
    tree.resolve_to(td.OneOf(lambda t: isinstance(t, tuple), {False: leaf, True: pair}))
    return tree() >> td.FC(2, activation=None)


def trees(n: int, seed: int):
    """Random trees of numbers (the quick start's inputs) and their labels (sum > 0)."""
    rng = np.random.default_rng(seed)

    def tree(depth):
        if depth == 0 or rng.random() < 0.3:
            return float(np.round(rng.normal(), 2))
        return (tree(depth - 1), tree(depth - 1))

    def total(t):
        return sum(map(total, t)) if isinstance(t, tuple) else t

    xs = [tree(4) for _ in range(n)]
    return xs, np.array([int(total(t) > 0) for t in xs])


def quickstart_model(seed: int = 0) -> Model:
    keras.utils.set_random_seed(seed)
    model = Model(quickstart_block(), seed=seed)
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss=SCCE, metrics=["accuracy"])
    return model


def example_cases() -> dict:
    """name -> (block, inputs, labels or None): every example's model, small."""
    from refold.examples import quickstart
    from refold.examples.calculator import calculator
    from refold.examples.molecules import molecules, weave
    from refold.examples.sentiment import synthetic
    from refold.examples.sentiment.model import SentimentModel, prepare
    from refold.examples.sentiment.treebank import Vocabulary
    from refold.examples.tagger import tagger
    rng = np.random.default_rng(0)
    xs, ys = trees(6, seed=1)
    cases = {"README quick start": (quickstart_block(), xs, ys)}
    exprs = [quickstart.random_tree(rng) for _ in range(4)]
    cases["quickstart"] = (quickstart.expression_model(), exprs, None)
    cx, cy = calculator.dataset(6, rng, max_depth=3)
    cases["calculator"] = (calculator.expression_classifier(6), cx, cy)
    mx, my, _ = molecules.dataset(4, rng)
    cases["molecules"] = (weave.weave_model(molecules.ATOM_FEATURES, molecules.PAIR_FEATURES,
                                            units=6, layers=1), mx, my[:, None])
    sentences = synthetic.generate(5, rng)
    vocab = Vocabulary.from_trees(sentences)
    data = prepare(sentences, vocab)
    for encoder in ("tree_lstm", "bag_of_words"):
        sentiment = SentimentModel(encoder, len(vocab), embed=4, hidden=5)
        cases[f"sentiment {encoder}"] = (sentiment.train_block, data, None)
        cases[f"sentiment {encoder} logits"] = (sentiment.logits_block, data, None)
    tx, _ = tagger.dataset(4, rng)
    for bi in (True, False):
        cases[f"tagger bidirectional={bi}"] = (tagger.tagger_model(4, 5, bidirectional=bi),
                                               tx, None)
    return cases


def zoo_cases() -> dict:
    from tests.models.zoo import ZOO, ZOO_INPUTS
    return {f"zoo {name}": (build(), ZOO_INPUTS[name], None) for name, build in ZOO.items()}


def build_models(out: str) -> None:
    """Saves every case's model (compiled, as a user saves it) with its predictions.
    Not trained: continuing training after loading is tested on one model
    (`continue`), and a training step per model would double the time."""
    keras.utils.set_random_seed(0)
    saved = {}
    for name, (block, xs, ys) in {**example_cases(), **zoo_cases()}.items():
        model = Model(block)
        if ys is not None:
            loss = "mse" if ys.dtype.kind == "f" else SCCE
            model.compile(optimizer=keras.optimizers.Adam(0.01), loss=loss)
        elif any(n.endswith("loss") for n in model.program.metric_names):
            model.compile(optimizer=keras.optimizers.Adam(0.01))
        path = os.path.join(out, f"{len(saved)}.keras")
        model.save(path)
        saved[name] = (path, xs, model.predict(xs, verbose=0))
    with open(os.path.join(out, "cases.pkl"), "wb") as f:
        pickle.dump(saved, f)


def load_models(out: str) -> None:
    with open(os.path.join(out, "cases.pkl"), "rb") as f:
        saved = pickle.load(f)
    got = {name: load_model(path, safe_mode=False).predict(xs, verbose=0)
           for name, (path, xs, _) in saved.items()}
    with open(os.path.join(out, "loaded.pkl"), "wb") as f:
        pickle.dump(got, f)


class _WaitToBeKilled(keras.callbacks.Callback):
    """At (epoch, batch): says so in a file, then waits for the signal."""

    def __init__(self, epoch: int, batch: int, marker: str):
        super().__init__()
        self.at, self.marker, self.epoch = (epoch, batch), marker, None

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if (self.epoch, batch) == self.at:
            with open(self.marker, "w") as f:
                f.write(f"{self.epoch} {batch}")
            time.sleep(600)


def backup(out: str, kill_at: tuple | None = None) -> None:
    xs, ys = trees(48, seed=2)
    model = quickstart_model(seed=3)
    callbacks = [keras.callbacks.BackupAndRestore(os.path.join(out, "backup"))]
    if kill_at is not None:
        callbacks.append(_WaitToBeKilled(*kill_at, os.path.join(out, "reached")))
    model.fit(xs, ys, batch_size=8, epochs=4, verbose=0, callbacks=callbacks)
    np.savez(os.path.join(out, "weights.npz"), *model.get_weights())


def continue_fit(out: str) -> None:
    xs, ys = trees(48, seed=2)
    model = load_model(os.path.join(out, "model.keras"), safe_mode=False)
    model.fit(xs, ys, batch_size=8, epochs=3, initial_epoch=1, verbose=0)
    np.savez(os.path.join(out, "continued.npz"), *model.get_weights())


def main(argv: list[str]) -> None:
    job, out, *rest = argv
    if job == "models":
        build_models(out)
    elif job == "load":
        load_models(out)
    elif job == "backup":
        backup(out, tuple(map(int, rest)) if rest else None)
    elif job == "continue":
        continue_fit(out)
    else:
        raise SystemExit(f"unknown job {job!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
