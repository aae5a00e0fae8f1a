"""Common mistakes of Part 3 (lessons 015-018), each a wrong version of the function."""

from __future__ import annotations

import math

import numpy as np

from .. import mlp
from ..checking import Mistake


def _forward_keeping(X, params, segment_size, *, keep):
    """A forward pass whose 'checkpoints' are chosen by ``keep(i, a, segment_size, L)``."""
    L = mlp.num_layers(params)
    checkpoints, a = {}, X
    for i in range(1, L + 1):
        z = a @ params[f"W{i}"] + params[f"b{i}"]
        kept = keep(i - 1, a, segment_size, L)
        if kept is not None:
            checkpoints[i - 1] = kept
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


def _recompute(checkpoint, params, start, end, *, relu=True, shift=0, include_output=False):
    L = mlp.num_layers(params)
    cache, a = {f"A{start}": checkpoint}, checkpoint
    last = min(end, L) if include_output else min(end, L - 1)
    for i in range(start + 1, last + 1):
        z = a @ params[f"W{min(i + shift, L)}"] + params[f"b{min(i + shift, L)}"]
        a = np.maximum(z, 0) if relu else z
        cache[f"Z{i}"], cache[f"A{i}"] = z, a
    return cache


def _backward(d_out, params, checkpoints, segment_size, *, boundary_mask=True, from_input=False):
    L = mlp.num_layers(params)
    grads, d = {}, d_out
    for start in sorted(checkpoints, reverse=True):
        end = min(start + segment_size, L)
        source = checkpoints[0] if from_input else checkpoints[start]
        cache = _recompute(source, params, start, end)
        for i in range(end, start, -1):
            a_prev = cache[f"A{i - 1}"]
            grads[f"W{i}"] = a_prev.T @ d
            grads[f"b{i}"] = d.sum(axis=0)
            if i > 1:
                d = d @ params[f"W{i}"].T
                if boundary_mask or i - 1 != start:
                    d = d * (a_prev > 0)
    return {key: grads[key] for key in params}


def _estimate(B, W, L, s, b=8, *, stored_x=False, recompute=True, segments=None, working=True):
    array = B * W * b
    n_segments = segments(L, s) if segments else math.ceil(L / s)
    standard = 2 * (L - 1) + (1 if stored_x else 0)
    checkpointed = n_segments - (0 if stored_x else 1) + (2 * min(s, L - 1) if recompute else 0)
    extra = 2 * array + B * W if working else 0
    standard_bytes = standard * array + extra
    checkpointed_bytes = checkpointed * array + extra
    return {"standard_bytes": standard_bytes, "checkpointed_bytes": checkpointed_bytes,
            "saved_fraction": 1 - checkpointed_bytes / standard_bytes}


MISTAKES = {
    "mlp_forward_checkpointed": (
        Mistake("a checkpoint that keeps the hidden activations anyway",
                "Keep only the input of each segment (layers 0, s, 2s, ...): storing every A_i "
                "saves nothing.",
                lambda X, p, s: _forward_keeping(X, p, s, keep=lambda i, a, s_, L: a)),
        Mistake("stored the segment outputs instead of their inputs",
                "Backward recomputes a segment from its *input*: checkpoint A_0 = X, A_s, A_2s, ...",
                lambda X, p, s: _forward_keeping(
                    X, p, s, keep=lambda i, a, s_, L: a if i > 0 and i % s_ == 0 else None)),
        Mistake("stored the pre-activations Z instead of the activations A",
                "The next layer's input is A = relu(Z); store A so the recompute can start from it.",
                _forward_z_checkpoints),
    ),
    "recompute_block_activations": (
        Mistake("recompute with the wrong parameters",
                "Layer i uses W_i and b_i; an off-by-one index picks the next layer's weights.",
                lambda c, p, a, b: _recompute(c, p, a, b, shift=1)),
        Mistake("recompute without the ReLU",
                "Recompute exactly what the forward pass did: A_i = relu(Z_i).",
                lambda c, p, a, b: _recompute(c, p, a, b, relu=False)),
        Mistake("recomputed the output layer too",
                "The last layer's output is not an activation that backward needs: stop at layer L - 1.",
                lambda c, p, a, b: _recompute(c, p, a, b, include_output=True)),
    ),
    "mlp_backward_checkpointed": (
        Mistake("ReLU mask skipped at segment boundaries",
                "The gradient leaving a segment still passes the ReLU of the layer below it: "
                "multiply by (A_start > 0) there too.",
                lambda d, p, c, s: _backward(d, p, c, s, boundary_mask=False)),
        Mistake("recompute with the wrong input",
                "Each segment is recomputed from its own checkpoint, checkpoints[start], not from X.",
                lambda d, p, c, s: _backward(d, p, c, s, from_input=True)),
    ),
    "estimate_checkpointing_memory_savings": (
        Mistake("counted the input X as stored activation memory",
                "X belongs to the caller and exists either way; count only what the step allocates.",
                lambda B, W, L, s, b=8: _estimate(B, W, L, s, b, stored_x=True)),
        Mistake("forgot the recomputed segment",
                "During backward one segment's activations are recomputed and alive: add 2 min(s, L-1) arrays.",
                lambda B, W, L, s, b=8: _estimate(B, W, L, s, b, recompute=False)),
        Mistake("number of segments rounded down",
                "A last, shorter segment still needs its checkpoint: ceil(L / s) segments.",
                lambda B, W, L, s, b=8: _estimate(B, W, L, s, b, segments=lambda L_, s_: L_ // s_)),
        Mistake("forgot the backward working set",
                "At the peak two more (batch, width) gradient arrays and a bool mask are alive.",
                lambda B, W, L, s, b=8: _estimate(B, W, L, s, b, working=False)),
    ),
}
