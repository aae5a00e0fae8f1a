"""The technique is graded: a right answer computed the expensive way earns nothing.

Lessons 014, 015 and 017 are about saving memory. Each has a large hidden case
whose peak memory the grading kernel measures (tracemalloc); the judge compares
it with the lesson's own bound (grading.spec.MemoryBound). The reference stays
under the bound; each shortcut below gives the same numbers, breaks the bound,
and the verdict names it and shows measured and allowed bytes.
"""

from __future__ import annotations

import numpy as np
import pytest

from grading.judge import grade_in_process, reference_function
from shared import mlp
from shared.lessons import lesson as find_lesson

pytestmark = pytest.mark.part_2


def namespace(code: str) -> dict:
    return dict(reference_function(find_lesson(code)).__globals__)


def whole_batch_step(params, X, Y, num_micro_batches, learning_rate):
    """014 the expensive way: one forward and backward pass over the whole batch."""
    if isinstance(num_micro_batches, bool) or int(num_micro_batches) != num_micro_batches \
            or not 1 <= num_micro_batches <= len(X):
        raise ValueError("bad num_micro_batches")
    loss, grads = mlp.loss_and_grads(X, Y, params)
    return {key: params[key] - learning_rate * grads[key] for key in params}, loss


def store_everything_forward(X, params, segment_size):
    """015 the expensive way: keep every activation, pick the checkpoints at the end."""
    if segment_size < 1:
        raise ValueError("segment_size must be at least 1")
    layers = mlp.num_layers(params)
    kept, a = {0: X}, X
    for i in range(1, layers + 1):
        z = a @ params[f"W{i}"] + params[f"b{i}"]
        if i < layers:
            a = np.maximum(z, 0)
            kept[i] = a
            kept[-i] = z  # the pre-activations too, as a standard forward pass keeps them
    return z, {i: kept[i] for i in range(0, layers, segment_size)}


def recompute_everything_backward(d_out, params, checkpoints, segment_size):
    """017 the expensive way: recompute every segment first, then run the backward pass."""
    blocks = reference_function(find_lesson("016"))
    layers = mlp.num_layers(params)
    cache = {}
    for start in checkpoints:
        cache.update(blocks(checkpoints[start], params, start, min(start + segment_size, layers)))
    grads, delta = {}, d_out
    for i in range(layers, 0, -1):
        a_prev = cache[f"A{i - 1}"]
        grads[f"W{i}"], grads[f"b{i}"] = a_prev.T @ delta, delta.sum(axis=0)
        if i > 1:
            delta = (delta @ params[f"W{i}"].T) * (a_prev > 0)
    return {key: grads[key] for key in params}


SHORTCUTS = [
    ("014", "grad_accumulation_step", whole_batch_step, "only one micro-batch may be alive at a time"),
    ("015", "mlp_forward_checkpointed", store_everything_forward, "keep only each segment's input"),
    ("017", "mlp_backward_checkpointed", recompute_everything_backward, "recompute one segment at a time"),
]


@pytest.mark.parametrize("code, function, shortcut, named", SHORTCUTS, ids=[s[0] for s in SHORTCUTS])
def test_the_reference_keeps_the_bound_and_the_shortcut_scores_zero_named(code, function, shortcut, named):
    for seed in (0, 1):
        assert grade_in_process(code, namespace(code), seed).passed
    verdict = grade_in_process(code, {**namespace(code), function: shortcut}, 0)
    assert not verdict.passed
    assert "gives the right numbers but allocated" in verdict.message and named in verdict.message
    assert "MiB at its peak, and this lesson allows" in verdict.message
