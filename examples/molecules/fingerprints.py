"""The fingerprint baseline: Morgan (ECFP-like) count fingerprints and ridge regression.

A molecule becomes the counts of its atom environments up to `radius` bonds, hashed
into `size` buckets (RDKit's Morgan generator); ridge regression, solved in closed
form with NumPy, maps them to the property. The ridge penalty is picked by k-fold
cross-validation on the training set, so the test set plays no part.

>>> from rdkit import Chem
>>> x = morgan_counts([Chem.MolFromSmiles(s) for s in ("CCO", "CCCO", "CCCCO", "OCCO")])
>>> x.shape, x.dtype
((4, 2048), dtype('float32'))
>>> y = np.array([0.0, -0.5, -1.0, 0.5])
>>> bool(np.allclose(Ridge(alpha=1e-3).fit(x, y).predict(x), y, atol=0.05))  # fits
True
>>> bool(np.allclose(Ridge(alpha=1e3).fit(x, y).predict(x), y.mean(), atol=0.05))  # shrunk
True
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["morgan_counts", "Ridge", "fit_ridge_cv"]


def morgan_counts(mols: Sequence, radius: int = 2, size: int = 2048) -> np.ndarray:
    """`[len(mols), size]` float32 Morgan count fingerprints."""
    from rdkit.Chem import rdFingerprintGenerator
    generator = rdFingerprintGenerator.GetMorganGenerator(radius=radius, fpSize=size)
    out = np.zeros((len(mols), size), np.float32)
    for i, mol in enumerate(mols):
        out[i] = generator.GetCountFingerprintAsNumPy(mol)
    return out


class Ridge:
    """Least squares with an L2 penalty `alpha * |w|^2` on the weights (not the bias);
    features are `log1p` counts, centred on the training mean."""

    def __init__(self, alpha: float = 1.0):
        self.alpha = alpha

    def fit(self, x: np.ndarray, y: np.ndarray) -> Ridge:
        [fitted] = _fit_path(x, y, [self.alpha])
        self.x_mean, self.y_mean, self.w = fitted.x_mean, fitted.y_mean, fitted.w
        return self

    def predict(self, x: np.ndarray) -> np.ndarray:
        return (np.log1p(np.asarray(x, np.float64)) - self.x_mean) @ self.w + self.y_mean


def _fit_path(x: np.ndarray, y: np.ndarray, alphas) -> list[Ridge]:
    """One ridge model per penalty in `alphas`, from one eigendecomposition: of the
    n x n Gram matrix (the dual form) when there are fewer molecules than features,
    else of the features' d x d one, so a penalty costs a few products only."""
    x = np.log1p(np.asarray(x, np.float64))
    y = np.asarray(y, np.float64)
    x_mean, y_mean = x.mean(axis=0), y.mean()
    xc, yc = x - x_mean, y - y_mean
    dual = len(xc) <= xc.shape[1]
    values, vectors = np.linalg.eigh(xc @ xc.T if dual else xc.T @ xc)
    projected = vectors.T @ (yc if dual else xc.T @ yc)
    out = []
    for alpha in alphas:
        coef = vectors @ (projected / (values + alpha))
        model = Ridge(alpha)
        model.x_mean, model.y_mean, model.w = x_mean, y_mean, xc.T @ coef if dual else coef
        out.append(model)
    return out


def fit_ridge_cv(x: np.ndarray, y: np.ndarray, alphas=(0.1, 0.3, 1, 3, 10, 30, 100),
                 folds: int = 5, seed: int = 0) -> tuple[Ridge, float]:
    """The ridge model refit on all of `(x, y)` with the `alpha` of the lowest k-fold
    cross-validated squared error; returns it and that alpha."""
    order = np.random.default_rng(seed).permutation(len(y))
    parts = np.array_split(order, folds)
    errors = np.zeros(len(alphas))
    for k, held in enumerate(parts):
        rest = np.concatenate([p for m, p in enumerate(parts) if m != k])
        for a, model in enumerate(_fit_path(x[rest], y[rest], alphas)):
            errors[a] += float(np.sum((model.predict(x[held]) - y[held]) ** 2))
    best = float(alphas[int(np.argmin(errors))])
    return Ridge(best).fit(x, y), best
