"""Synthetic data: a seeded regression batch that every part can share.

The recipe is the one lesson 001 teaches, so that a learner's own batch and the
helper's batch are the same numbers for the same seed.
"""

from __future__ import annotations

import numpy as np

from .answers import answers


@answers("001")
def make_regression_batch(batch_size: int, in_features: int, out_features: int,
                          seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A seeded regression batch ``(X, Y)``.

    X: (batch_size, in_features) float64, standard normal.
    Y: (batch_size, out_features) float64, ``sin(X @ W_true)`` with
       ``W_true = standard_normal((in_features, out_features)) / sqrt(in_features)``
       drawn right after X from the same ``np.random.default_rng(seed)``.
    """
    for name, value in (("batch_size", batch_size), ("in_features", in_features),
                        ("out_features", out_features)):
        if int(value) != value or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((batch_size, in_features))
    W_true = rng.standard_normal((in_features, out_features)) / np.sqrt(in_features)
    return X, np.sin(X @ W_true)
