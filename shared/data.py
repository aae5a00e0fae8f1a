"""Synthetic data: a seeded regression batch that every part can share.

``make_regression_batch(batch_size, in_features, out_features, seed)`` is lesson 001's
``make_synthetic_regression_batch``, generated from its master into :mod:`shared.lesson_blocks`
(so a learner's own batch and the helper's are the same numbers for the same seed, by
construction): ``X`` (batch_size, in_features) float64, standard normal; ``Y``
(batch_size, out_features) float64, ``sin(X @ W_true)`` with ``W_true`` drawn right after ``X``
from the same ``np.random.default_rng(seed)`` and divided by ``sqrt(in_features)``.  Like every
function that answers a lesson, it refuses to run while lesson 001 is graded.
"""

from __future__ import annotations

from .lesson_blocks import make_synthetic_regression_batch as make_regression_batch

__all__ = ["make_regression_batch"]
