"""Exported models for the serving tests: made once per session."""

from __future__ import annotations

import keras
import numpy as np

from refold.compiler import Model
from refold.examples.calculator.calculator import dataset

CALCULATOR = "refold.examples.calculator.calculator:expression_classifier"


def expressions(n: int, seed: int = 0) -> list:
    """`n` random arithmetic expressions (the calculator example's inputs)."""
    return dataset(n, np.random.default_rng(seed), max_depth=4)[0]


def calculator_model(state: int = 8, seed: int = 0) -> Model:
    """The calculator's classifier, saved as its factory call (no code in the export)."""
    keras.utils.set_random_seed(seed)
    return Model.from_factory(CALCULATOR, {"state": state})


def export_calculator(path, state: int = 8) -> Model:
    model = calculator_model(state)
    model.export(str(path), verbose=False)
    return model
