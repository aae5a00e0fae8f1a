"""Common mistakes of Part 3 (lessons 015-018), each a wrong version of the function.

Nothing here computes a lesson's right answer (``tests/test_delegation.py``): a
function that several mistakes share takes the mistake as a required keyword
argument, which has no right value (``_twists.twisted`` makes one catalogue entry
per mistake of it), and the recompute that lesson 017's mistakes share with
the right answer is the helper's lesson 016 (``shared.lesson_blocks``), which
refuses to run while lesson 016 is graded.
"""

from __future__ import annotations

import math

import numpy as np

from .. import mlp
from ..lesson_blocks import recompute_block_activations
from ._twists import check_mistake, twisted


_FORWARD_MISTAKES = ("every activation", "segment outputs", "pre-activations")


def _forward(X, params, segment_size, *, mistake):
    """A forward pass that checkpoints the wrong arrays: ``mistake`` is "every activation" (every
    layer's input), "segment outputs" (A_s, A_2s, ... instead of A_0, A_s, ...) or "pre-activations"
    (A_0 = X, then Z_s, Z_2s, ... instead of A_s, A_2s, ...)."""
    check_mistake(mistake, _FORWARD_MISTAKES)
    L = mlp.num_layers(params)
    checkpoints, a = ({0: X} if mistake == "pre-activations" else {}), X
    for i in range(1, L + 1):
        z = a @ params[f"W{i}"] + params[f"b{i}"]
        if mistake == "every activation" or (mistake == "segment outputs" and i - 1 > 0
                                             and (i - 1) % segment_size == 0):
            checkpoints[i - 1] = a  # layer i's input
        elif mistake == "pre-activations" and i < L and i % segment_size == 0:
            checkpoints[i] = z      # the next segment's input before its ReLU
        if i < L:
            a = np.maximum(z, 0)
    return z, checkpoints


_RECOMPUTE_MISTAKES = ("the next layer's parameters", "no ReLU", "the output layer too")


def _recompute(checkpoint, params, start, end, *, mistake):
    """recompute_block_activations with ``mistake`` made, one of _RECOMPUTE_MISTAKES."""
    check_mistake(mistake, _RECOMPUTE_MISTAKES)
    L = mlp.num_layers(params)
    shift = 1 if mistake == "the next layer's parameters" else 0
    cache, a = {f"A{start}": checkpoint}, checkpoint
    last = min(end, L) if mistake == "the output layer too" else min(end, L - 1)
    for i in range(start + 1, last + 1):
        z = a @ params[f"W{min(i + shift, L)}"] + params[f"b{min(i + shift, L)}"]
        a = z if mistake == "no ReLU" else np.maximum(z, 0)
        cache[f"Z{i}"], cache[f"A{i}"] = z, a
    return cache


def _backward(d_out, params, checkpoints, segment_size, *, mistake):
    """mlp_backward_checkpointed with ``mistake`` made: "no mask at the boundaries" or "recomputed from the
    input" (every segment from checkpoints[0]); each segment recomputed by the helper's lesson 016."""
    check_mistake(mistake, ("no mask at the boundaries", "recomputed from the input"))
    L = mlp.num_layers(params)
    grads, d = {}, d_out
    for start in sorted(checkpoints, reverse=True):
        end = min(start + segment_size, L)
        source = checkpoints[0] if mistake == "recomputed from the input" else checkpoints[start]
        cache = recompute_block_activations(source, params, start, end)
        for i in range(end, start, -1):
            a_prev = cache[f"A{i - 1}"]
            grads[f"W{i}"] = a_prev.T @ d
            grads[f"b{i}"] = d.sum(axis=0)
            if i > 1:
                d = d @ params[f"W{i}"].T
                if mistake != "no mask at the boundaries" or i - 1 != start:
                    d = d * (a_prev > 0)
    return {key: grads[key] for key in params}


_ESTIMATE_MISTAKES = ("X counted", "no recomputed segment", "segments rounded down", "no working set")


def _estimate(B, W, L, s, b=8, *, mistake):
    """estimate_checkpointing_memory_savings with ``mistake`` made, one of _ESTIMATE_MISTAKES."""
    check_mistake(mistake, _ESTIMATE_MISTAKES)
    stored_x = mistake == "X counted"
    array = B * W * b
    n_segments = L // s if mistake == "segments rounded down" else math.ceil(L / s)
    standard = 2 * (L - 1) + (1 if stored_x else 0)
    recomputed = 0 if mistake == "no recomputed segment" else 2 * min(s, L - 1)
    checkpointed = n_segments - (0 if stored_x else 1) + recomputed
    extra = 0 if mistake == "no working set" else 2 * array + B * W
    standard_bytes = standard * array + extra
    checkpointed_bytes = checkpointed * array + extra
    return {"standard_bytes": standard_bytes, "checkpointed_bytes": checkpointed_bytes,
            "saved_fraction": 1 - checkpointed_bytes / standard_bytes}


MISTAKES = {
    "mlp_forward_checkpointed": twisted(_forward, {
        "every activation": (
            "a checkpoint that keeps the hidden activations anyway",
            "Keep only the input of each segment (layers 0, s, 2s, ...): storing every A_i saves nothing."),
        "segment outputs": (
            "stored the segment outputs instead of their inputs",
            "Backward recomputes a segment from its *input*: checkpoint A_0 = X, A_s, A_2s, ..."),
        "pre-activations": (
            "stored the pre-activations Z instead of the activations A",
            "The next layer's input is A = relu(Z); store A so the recompute can start from it."),
    }),
    "recompute_block_activations": twisted(_recompute, {
        "the next layer's parameters": (
            "recompute with the wrong parameters",
            "Layer i uses W_i and b_i; an off-by-one index picks the next layer's weights."),
        "no ReLU": (
            "recompute without the ReLU",
            "Recompute exactly what the forward pass did: A_i = relu(Z_i)."),
        "the output layer too": (
            "recomputed the output layer too",
            "The last layer's output is not an activation that backward needs: stop at layer L - 1."),
    }),
    "mlp_backward_checkpointed": twisted(_backward, {
        "no mask at the boundaries": (
            "ReLU mask skipped at segment boundaries",
            "The gradient leaving a segment still passes the ReLU of the layer below it: "
            "multiply by (A_start > 0) there too."),
        "recomputed from the input": (
            "recompute with the wrong input",
            "Each segment is recomputed from its own checkpoint, checkpoints[start], not from X."),
    }),
    "estimate_checkpointing_memory_savings": twisted(_estimate, {
        "X counted": (
            "counted the input X as stored activation memory",
            "X belongs to the caller and exists either way; count only what the step allocates."),
        "no recomputed segment": (
            "forgot the recomputed segment",
            "During backward one segment's activations are recomputed and alive: add 2 min(s, L-1) arrays."),
        "segments rounded down": (
            "number of segments rounded down",
            "A last, shorter segment still needs its checkpoint: ceil(L / s) segments."),
        "no working set": (
            "forgot the backward working set",
            "At the peak two more (batch, width) gradient arrays and a bool mask are alive."),
    }),
}
