"""The lesson functions that later lessons build on, as the helper package's own versions.

A composite lesson (005 ``mlp_forward``, 010 ``mlp_backward``, 014
``grad_accumulation_step``, 017 ``mlp_backward_checkpointed``) calls functions
of earlier lessons.  While it is graded, those names in the notebook are bound
to the versions below, so a bug in ``linear_backward`` costs lesson 007 and not
lesson 010 as well.  Each one answers its own lesson and is locked while that
lesson is graded (see :mod:`shared.answers`).
"""

from __future__ import annotations

import numpy as np

from . import mlp
from .answers import answers


@answers("003")
def linear_forward(x, W, b):
    return x @ W + b


@answers("004")
def relu_forward(z):
    return np.maximum(z, 0)


@answers("006")
def mse_loss_and_grad(Y_hat, Y):
    diff = Y_hat - Y
    return float(np.mean(diff ** 2)), 2.0 * diff / diff.size


@answers("005")
def mlp_forward(X, params):
    Z1 = X @ params["W1"] + params["b1"]
    A1 = np.maximum(Z1, 0)
    Y_hat = A1 @ params["W2"] + params["b2"]
    return Y_hat, {"A0": X, "Z1": Z1, "A1": A1}


@answers("007")
def linear_backward(dZ, x, W):
    return dZ @ W.T, x.T @ dZ, dZ.sum(axis=0)


@answers("008")
def relu_backward(dA, Z):
    return dA * (Z > 0)


@answers("009")
def first_linear_backward(dZ1, X, W1):
    return X.T @ dZ1, dZ1.sum(axis=0)


@answers("011")
def split_into_micro_batches(X, Y, num_micro_batches):
    if isinstance(num_micro_batches, bool) or int(num_micro_batches) != num_micro_batches \
            or num_micro_batches < 1:
        raise ValueError(f"num_micro_batches must be a positive integer, got {num_micro_batches!r}")
    if len(X) != len(Y):
        raise ValueError(f"X has {len(X)} rows but Y has {len(Y)}")
    if len(X) < num_micro_batches:
        raise ValueError(f"cannot split {len(X)} examples into {num_micro_batches} micro-batches")
    k = int(num_micro_batches)
    return list(zip(np.array_split(X, k), np.array_split(Y, k)))


@answers("012")
def accumulate_gradients(accumulated, micro_grads, micro_batch_size):
    if accumulated is None:
        return {key: micro_batch_size * grad for key, grad in micro_grads.items()}
    return {key: accumulated[key] + micro_batch_size * micro_grads[key] for key in accumulated}


@answers("013")
def scale_accumulated_gradients(accumulated, micro_batch_sizes):
    sizes = list(micro_batch_sizes)
    if not sizes or min(sizes) < 1:
        raise ValueError(f"micro_batch_sizes must be positive sizes, got {sizes!r}")
    return {key: value / sum(sizes) for key, value in accumulated.items()}


@answers("015")
def mlp_forward_checkpointed(X, params, segment_size):
    if segment_size < 1:
        raise ValueError(f"segment_size must be at least 1, got {segment_size}")
    layers = mlp.num_layers(params)
    checkpoints, a = {}, X
    for i in range(1, layers + 1):
        if (i - 1) % segment_size == 0:
            checkpoints[i - 1] = a
        z = a @ params[f"W{i}"] + params[f"b{i}"]
        if i < layers:
            a = np.maximum(z, 0)
    return z, checkpoints


@answers("016")
def recompute_block_activations(checkpoint, params, start_layer, end_layer):
    last_hidden = min(end_layer, mlp.num_layers(params) - 1)
    cache, a = {f"A{start_layer}": checkpoint}, checkpoint
    for i in range(start_layer + 1, last_hidden + 1):
        z = a @ params[f"W{i}"] + params[f"b{i}"]
        a = np.maximum(z, 0)
        cache[f"Z{i}"], cache[f"A{i}"] = z, a
    return cache
