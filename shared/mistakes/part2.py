"""Common mistakes of Part 2 (lessons 011-014), each a wrong version of the function.

Nothing here computes a lesson's right answer (``tests/test_delegation.py``): a
function that several mistakes share takes the mistake as a required argument,
which has no right value.
"""

from __future__ import annotations

import numpy as np

from .. import mlp
from ..checking import Mistake
from ._twists import check_mistake


def _split_drop_remainder(X, Y, k):
    size = len(X) // k
    return [(X[j * size:(j + 1) * size], Y[j * size:(j + 1) * size]) for j in range(k)]


def _split_remainder_last(X, Y, k):
    size = len(X) // k
    bounds = [j * size for j in range(k)] + [len(X)]
    return [(X[a:b], Y[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]


def _split_features(X, Y, k):
    return list(zip(np.array_split(X, k, axis=1), np.array_split(Y, k, axis=1)))


def _accumulate_in_place(accumulated, micro_grads, n):
    if accumulated is None:
        return {key: n * g for key, g in micro_grads.items()}
    for key in accumulated:
        accumulated[key] += n * micro_grads[key]
    return accumulated


def _accumulate_unweighted(accumulated, micro_grads, micro_batch_size):
    """accumulate_gradients that adds the micro-batch's mean gradients as they are (weight 1, not its size)."""
    if accumulated is None:
        return {key: 1 * g for key, g in micro_grads.items()}
    return {key: accumulated[key] + 1 * micro_grads[key] for key in accumulated}


def _step(params, X, Y, k, lr, mistake):
    """An accumulation step whose gradient and loss are combined wrong: ``mistake`` is "mean of means"
    or "sum of means" (the micro-batches' mean losses and gradients, averaged or summed unweighted)."""
    check_mistake(mistake, ("mean of means", "sum of means"))
    combine = _mean_of_means if mistake == "mean of means" else _sum_of_means
    pieces = list(zip(np.array_split(X, k), np.array_split(Y, k)))
    results = [mlp.loss_and_grads(Xj, Yj, params) for Xj, Yj in pieces]
    sizes = [len(Xj) for Xj, _ in pieces]
    loss, grads = combine([r[0] for r in results], [r[1] for r in results], sizes)
    return mlp.sgd_update(params, grads, lr), loss


def _mean_of_means(losses, grads, sizes):
    k = len(sizes)
    return sum(losses) / k, {key: sum(g[key] for g in grads) / k for key in grads[0]}


def _sum_of_means(losses, grads, sizes):
    return sum(losses), {key: sum(g[key] for g in grads) for key in grads[0]}


def _step_every_micro_batch(params, X, Y, k, lr):
    total = 0.0
    for Xj, Yj in zip(np.array_split(X, k), np.array_split(Y, k)):
        loss, grads = mlp.loss_and_grads(Xj, Yj, params)
        params = mlp.sgd_update(params, grads, lr)
        total += loss * len(Xj)
    return params, total / len(X)


MISTAKES = {
    "split_into_micro_batches": (
        Mistake("dropped the remainder",
                "With B = 10 and k = 3, equal chunks of 3 lose the tenth example; give the first B % k "
                "micro-batches one extra row (np.array_split does exactly this).",
                _split_drop_remainder),
        Mistake("remainder piled into the last micro-batch",
                "Spread the B % k extra rows over the first micro-batches, one each, so sizes differ by at most one.",
                _split_remainder_last),
        Mistake("split along the feature axis",
                "Micro-batches split the examples (axis 0), never the features.",
                _split_features),
    ),
    "accumulate_gradients": (
        Mistake("accumulating into an aliased dict",
                "Adding in place (+=) into `accumulated` changes the caller's arrays, and when the "
                "accumulator started as a learner's gradient dict, those gradients change too. "
                "Build new arrays: accumulated[k] + micro_batch_size * micro_grads[k].",
                _accumulate_in_place),
        Mistake("forgot to weight by the micro-batch size",
                "micro_grads is the gradient of the micro-batch's *mean* loss; multiply by its size "
                "to turn it into a sum over its examples.",
                _accumulate_unweighted),
        Mistake("overwrote instead of adding",
                "The accumulator keeps the sum over all micro-batches so far: add to it.",
                lambda acc, g, n: {key: n * v for key, v in g.items()}),
    ),
    "scale_accumulated_gradients": (
        Mistake("divided by the number of micro-batches",
                "The accumulator holds a sum over examples; divide by the number of examples, "
                "sum(micro_batch_sizes), not by how many micro-batches there were.",
                lambda acc, sizes: {key: v / len(sizes) for key, v in acc.items()}),
        Mistake("forgot to divide",
                "Without the division the gradient is a sum over the batch, B times too large.",
                lambda acc, sizes: {key: v.copy() for key, v in acc.items()}),
        Mistake("divided by the last micro-batch's size",
                "Divide by the total number of examples, sum(micro_batch_sizes).",
                lambda acc, sizes: {key: v / sizes[-1] for key, v in acc.items()}),
    ),
    "grad_accumulation_step": (
        Mistake("mean of micro-batch means with unequal micro-batches",
                "Averaging the k micro-batch means weights a small micro-batch's examples more; "
                "weight each micro-batch by its size and divide by the total (the 2024 "
                "gradient-accumulation loss bug).",
                lambda p, X, Y, k, lr: _step(p, X, Y, k, lr, "mean of means")),
        Mistake("forgot to divide by the number of micro-batches",
                "Summing k micro-batch mean gradients gives k times the full-batch gradient.",
                lambda p, X, Y, k, lr: _step(p, X, Y, k, lr, "sum of means")),
        Mistake("updated the parameters after every micro-batch",
                "Accumulation takes one optimizer step per batch, after the last micro-batch.",
                _step_every_micro_batch),
    ),
}
