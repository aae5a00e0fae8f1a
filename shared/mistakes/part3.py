"""Common mistakes of Part 3 (lessons 015-018), each a wrong version of the function.

Nothing here computes a lesson's right answer (``tests/test_delegation.py``): a
function that several mistakes share takes the mistake as a required argument,
which has no right value, and the recompute that lesson 017's mistakes share with
the right answer is the helper's lesson 016 (``shared.lesson_blocks``), which
refuses to run while lesson 016 is graded.
"""

from __future__ import annotations

import math

import numpy as np

from .. import mlp
from ..checking import Mistake
from ..lesson_blocks import recompute_block_activations
from ._twists import check_mistake


def _forward_keeping(X, params, segment_size, mistake):
    """A forward pass that checkpoints the wrong activations: ``mistake`` is "every activation" (every
    layer's input) or "segment outputs" (A_s, A_2s, ... instead of A_0, A_s, ...)."""
    check_mistake(mistake, ("every activation", "segment outputs"))
    L = mlp.num_layers(params)
    checkpoints, a = {}, X
    for i in range(1, L + 1):
        z = a @ params[f"W{i}"] + params[f"b{i}"]
        if mistake == "every activation" or (i - 1 > 0 and (i - 1) % segment_size == 0):
            checkpoints[i - 1] = a
        if i < L:
            a = np.maximum(z, 0)
    return z, checkpoints


def _forward_z_checkpoints(X, params, segment_size):
    L = mlp.num_layers(params)
    checkpoints, a = {0: X}, X
    for i in range(1, L + 1):
        z = a @ params[f"W{i}"] + params[f"b{i}"]
        if i < L and i % segment_size == 0:
            checkpoints[i] = z
        if i < L:
            a = np.maximum(z, 0)
    return z, checkpoints


_RECOMPUTE_MISTAKES = ("the next layer's parameters", "no ReLU", "the output layer too")


def _recompute(checkpoint, params, start, end, mistake):
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


def _backward(d_out, params, checkpoints, segment_size, mistake):
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


def _estimate(B, W, L, s, b, mistake):
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
    "mlp_forward_checkpointed": (
        Mistake("a checkpoint that keeps the hidden activations anyway",
                "Keep only the input of each segment (layers 0, s, 2s, ...): storing every A_i "
                "saves nothing.",
                lambda X, p, s: _forward_keeping(X, p, s, "every activation")),
        Mistake("stored the segment outputs instead of their inputs",
                "Backward recomputes a segment from its *input*: checkpoint A_0 = X, A_s, A_2s, ...",
                lambda X, p, s: _forward_keeping(X, p, s, "segment outputs")),
        Mistake("stored the pre-activations Z instead of the activations A",
                "The next layer's input is A = relu(Z); store A so the recompute can start from it.",
                _forward_z_checkpoints),
    ),
    "recompute_block_activations": (
        Mistake("recompute with the wrong parameters",
                "Layer i uses W_i and b_i; an off-by-one index picks the next layer's weights.",
                lambda c, p, a, b: _recompute(c, p, a, b, "the next layer's parameters")),
        Mistake("recompute without the ReLU",
                "Recompute exactly what the forward pass did: A_i = relu(Z_i).",
                lambda c, p, a, b: _recompute(c, p, a, b, "no ReLU")),
        Mistake("recomputed the output layer too",
                "The last layer's output is not an activation that backward needs: stop at layer L - 1.",
                lambda c, p, a, b: _recompute(c, p, a, b, "the output layer too")),
    ),
    "mlp_backward_checkpointed": (
        Mistake("ReLU mask skipped at segment boundaries",
                "The gradient leaving a segment still passes the ReLU of the layer below it: "
                "multiply by (A_start > 0) there too.",
                lambda d, p, c, s: _backward(d, p, c, s, "no mask at the boundaries")),
        Mistake("recompute with the wrong input",
                "Each segment is recomputed from its own checkpoint, checkpoints[start], not from X.",
                lambda d, p, c, s: _backward(d, p, c, s, "recomputed from the input")),
    ),
    "estimate_checkpointing_memory_savings": (
        Mistake("counted the input X as stored activation memory",
                "X belongs to the caller and exists either way; count only what the step allocates.",
                lambda B, W, L, s, b=8: _estimate(B, W, L, s, b, "X counted")),
        Mistake("forgot the recomputed segment",
                "During backward one segment's activations are recomputed and alive: add 2 min(s, L-1) arrays.",
                lambda B, W, L, s, b=8: _estimate(B, W, L, s, b, "no recomputed segment")),
        Mistake("number of segments rounded down",
                "A last, shorter segment still needs its checkpoint: ceil(L / s) segments.",
                lambda B, W, L, s, b=8: _estimate(B, W, L, s, b, "segments rounded down")),
        Mistake("forgot the backward working set",
                "At the peak two more (batch, width) gradient arrays and a bool mask are alive.",
                lambda B, W, L, s, b=8: _estimate(B, W, L, s, b, "no working set")),
    ),
}
