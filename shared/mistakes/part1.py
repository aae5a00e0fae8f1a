"""Common mistakes of Part 1 (lessons 001-010), each a wrong version of the function.

Every ``compute`` takes exactly the graded function's arguments and returns
exactly what the mistaken function would return.

Nothing here computes a lesson's right answer (``tests/test_delegation.py``): a
function that several mistakes share takes the mistake as a required keyword
argument, which has no right value (``_twists.twisted`` makes one catalogue entry
per mistake of it), and what a mistake shares with the right answer comes
from the helper's versions of the *earlier* lessons (``shared.lesson_blocks``),
which refuse to run while their own lesson is graded.
"""

from __future__ import annotations

import numpy as np

from ..checking import Mistake
from ..lesson_blocks import first_linear_backward, linear_backward, linear_forward, relu_backward, relu_forward
from ._twists import check_mistake, twisted


# 001 make_synthetic_regression_batch --------------------------------------

_BATCH_MISTAKES = ("W_true first", "no sine", "W_true unscaled", "legacy generator", "uniform draws")


def _batch(batch_size, in_features, out_features, seed, *, mistake):
    """make_synthetic_regression_batch with ``mistake`` made, one of _BATCH_MISTAKES."""
    check_mistake(mistake, _BATCH_MISTAKES)
    rng = np.random.RandomState(seed) if mistake == "legacy generator" else np.random.default_rng(seed)
    draw = rng.random if mistake == "uniform draws" else rng.standard_normal

    def draw_W_true():
        W_true = draw((in_features, out_features))
        return W_true if mistake == "W_true unscaled" else W_true / np.sqrt(in_features)

    if mistake == "W_true first":  # the same draws in the other order: other numbers
        W_true = draw_W_true()
        X = draw((batch_size, in_features))
    else:
        X = draw((batch_size, in_features))
        W_true = draw_W_true()
    return X, (X @ W_true if mistake == "no sine" else np.sin(X @ W_true))


# 002 init_mlp_params ------------------------------------------------------

_INIT_MISTAKES = ("LeCun scale", "variance as std", "fan_out", "transposed", "reseeded")


def _init(in_features, hidden, out_features, seed, *, mistake):
    """init_mlp_params with ``mistake`` made, one of _INIT_MISTAKES."""
    check_mistake(mistake, _INIT_MISTAKES)
    scale = {"LeCun scale": lambda fan_in, fan_out: np.sqrt(1.0 / fan_in),
             "variance as std": lambda fan_in, fan_out: 2.0 / fan_in,
             "fan_out": lambda fan_in, fan_out: np.sqrt(2.0 / fan_out)}.get(mistake, _he)
    rng = np.random.default_rng(seed)
    params = {}
    for i, (fan_in, fan_out) in enumerate(((in_features, hidden), (hidden, out_features)), start=1):
        if mistake == "reseeded":
            rng = np.random.default_rng(seed)
        shape = (fan_out, fan_in) if mistake == "transposed" else (fan_in, fan_out)
        params[f"W{i}"] = rng.standard_normal(shape) * scale(fan_in, fan_out)
        params[f"b{i}"] = np.zeros(fan_out)
    return params


def _he(fan_in, fan_out):
    return np.sqrt(2.0 / fan_in)


# 003-010 ------------------------------------------------------------------

def _relu_backward_from_dA(dA, Z):
    return dA * (dA > 0)


_BACKWARD_MISTAKES = ("no ReLU backward", "dW2 from Z1", "bias gradients not summed")


def _mlp_backward(dY_hat, params, cache, *, mistake):
    """mlp_backward with ``mistake`` made, one of _BACKWARD_MISTAKES, on the helper's lessons 007-009."""
    check_mistake(mistake, _BACKWARD_MISTAKES)
    w2_input = cache["Z1"] if mistake == "dW2 from Z1" else cache["A1"]
    dA1, dW2, db2 = linear_backward(dY_hat, w2_input, params["W2"])
    dZ1 = dA1 if mistake == "no ReLU backward" else relu_backward(dA1, cache["Z1"])
    dW1, db1 = first_linear_backward(dZ1, cache["A0"], params["W1"])
    if mistake == "bias gradients not summed":
        db1, db2 = dZ1, dY_hat
    return {"W1": dW1, "b1": db1, "W2": dW2, "b2": db2}


_FORWARD_MISTAKES = ("ReLU on the output", "no hidden ReLU", "Z1 and A1 swapped")


def _mlp_forward(X, params, *, mistake):
    """mlp_forward with ``mistake`` made, one of _FORWARD_MISTAKES, on the helper's lessons 003-004."""
    check_mistake(mistake, _FORWARD_MISTAKES)
    Z1 = linear_forward(X, params["W1"], params["b1"])
    A1 = Z1 if mistake == "no hidden ReLU" else relu_forward(Z1)
    Y_hat = linear_forward(A1, params["W2"], params["b2"])
    if mistake == "ReLU on the output":
        Y_hat = relu_forward(Y_hat)
    cache = {"A0": X, "Z1": A1, "A1": Z1} if mistake == "Z1 and A1 swapped" else {"A0": X, "Z1": Z1, "A1": A1}
    return Y_hat, cache


MISTAKES = {
    "make_synthetic_regression_batch": twisted(_batch, {
        "W_true first": (
            "W_true drawn before X",
            "Draw X first, then W_true, from the same generator: the order of draws decides the numbers."),
        "no sine": (
            "the sine is missing",
            "The targets are Y = sin(X @ W_true), a non-linear function the MLP has to learn."),
        "W_true unscaled": (
            "W_true not scaled by 1/sqrt(in_features)",
            "Divide W_true by np.sqrt(in_features) so X @ W_true has unit variance."),
        "legacy generator": (
            "the legacy global random generator",
            "Use rng = np.random.default_rng(seed), not np.random.seed / np.random.RandomState."),
        "uniform draws": (
            "uniform instead of normal draws",
            "rng.random draws from [0, 1); use rng.standard_normal."),
    }),
    "init_mlp_params": twisted(_init, {
        "LeCun scale": (
            "LeCun/Xavier scale sqrt(1/fan_in) instead of He's sqrt(2/fan_in)",
            "ReLU zeroes half of its inputs, so He initialisation doubles the variance: std = sqrt(2 / fan_in)."),
        "variance as std": (
            "2/fan_in used as the standard deviation",
            "2 / fan_in is the variance; the standard deviation is its square root, np.sqrt(2 / fan_in)."),
        "fan_out": (
            "scaled by fan_out instead of fan_in",
            "The variance is set by how many inputs feed each unit: std = sqrt(2 / fan_in)."),
        "transposed": (
            "W stored as (fan_out, fan_in)",
            "In this course W has shape (fan_in, fan_out), so that a layer is x @ W + b."),
        "reseeded": (
            "a new generator for each layer",
            "Create one rng = np.random.default_rng(seed) and draw W1 then W2 from it; "
            "re-seeding makes the layers' weights share the same random numbers."),
    }),
    "linear_forward": (
        Mistake("the bias is missing", "A linear layer is x @ W + b: add the bias.",
                lambda x, W, b: x @ W),
        Mistake("multiplied by W.T", "W has shape (fan_in, fan_out) already: use x @ W.",
                lambda x, W, b: x @ W.T + b),
        Mistake("bias subtracted", "The layer adds the bias: x @ W + b.",
                lambda x, W, b: x @ W - b),
    ),
    "relu_forward": (
        Mistake("returned the mask (z > 0) instead of the values",
                "ReLU returns max(z, 0) itself, not whether z is positive.",
                lambda z: z > 0),
        Mistake("np.max instead of np.maximum",
                "np.max(z, 0) reduces over axis 0; np.maximum(z, 0) compares element by element.",
                lambda z: np.max(z, 0)),
        Mistake("kept the negative part (np.minimum)",
                "ReLU keeps positive values and zeroes the negative ones: np.maximum(z, 0).",
                lambda z: np.minimum(z, 0)),
    ),
    "mlp_forward": twisted(_mlp_forward, {
        "ReLU on the output": (
            "ReLU applied to the output layer too",
            "The last layer is linear: regression outputs can be negative."),
        "no hidden ReLU": (
            "the hidden ReLU is missing",
            "Apply relu_forward to Z1: without it two linear layers collapse into one."),
        "Z1 and A1 swapped": (
            "Z1 and A1 swapped in the cache",
            "cache['Z1'] is the pre-activation X @ W1 + b1; cache['A1'] is relu(Z1)."),
    }),
    "mse_loss_and_grad": (
        Mistake("MSE gradient summed instead of averaged",
                "The loss divides by the number of entries, so its gradient does too: 2 (Y_hat - Y) / Y.size.",
                lambda Yh, Y: (float(np.mean((Yh - Y) ** 2)), 2.0 * (Yh - Y))),
        Mistake("the factor 2 is missing from the gradient",
                "d/dy (y - t)^2 = 2 (y - t).",
                lambda Yh, Y: (float(np.mean((Yh - Y) ** 2)), (Yh - Y) / Yh.size)),
        Mistake("averaged over the batch only",
                "Average over every entry (batch x outputs), i.e. divide by Y.size, not len(Y).",
                lambda Yh, Y: (float(np.sum((Yh - Y) ** 2) / len(Y)), 2.0 * (Yh - Y) / len(Y))),
        Mistake("gradient sign flipped",
                "The gradient points from the target to the prediction: 2 (Y_hat - Y) / Y.size.",
                lambda Yh, Y: (float(np.mean((Yh - Y) ** 2)), 2.0 * (Y - Yh) / Yh.size)),
    ),
    "linear_backward": (
        Mistake("dW without the transpose",
                "dW = x.T @ dZ has W's shape (fan_in, fan_out); dZ.T @ x gives its transpose.",
                lambda dZ, x, W: (dZ @ W.T, dZ.T @ x, dZ.sum(axis=0))),
        Mistake("bias gradient not summed over the batch",
                "b is added to every row, so its gradient sums dZ over the batch axis: dZ.sum(axis=0).",
                lambda dZ, x, W: (dZ @ W.T, x.T @ dZ, dZ)),
        Mistake("bias gradient averaged instead of summed",
                "The loss's 1/N is already inside dZ; sum over the batch, do not average again.",
                lambda dZ, x, W: (dZ @ W.T, x.T @ dZ, dZ.mean(axis=0))),
        Mistake("dx computed with W instead of W.T",
                "dx = dZ @ W.T maps (batch, fan_out) back to (batch, fan_in).",
                lambda dZ, x, W: (dZ @ W, x.T @ dZ, dZ.sum(axis=0))),
    ),
    "relu_backward": (
        Mistake("ReLU mask taken from the wrong array (dA instead of Z)",
                "The gate is open where the forward input Z was positive: np.where(Z > 0, dA, 0.0).",
                _relu_backward_from_dA),
        Mistake("returned the mask alone",
                "Pass the upstream gradient where the gate is open: np.where(Z > 0, dA, 0.0).",
                lambda dA, Z: (Z > 0).astype(dA.dtype)),
        Mistake("gradient 1 at Z == 0 (used >= instead of >)",
                "This course takes ReLU's derivative at exactly 0 to be 0, as NumPy's and PyTorch's ReLU do: use Z > 0.",
                lambda dA, Z: dA * (Z >= 0)),
        Mistake("multiplied by Z instead of the mask",
                "ReLU's derivative is 0 or 1, not Z itself: np.where(Z > 0, dA, 0.0).",
                lambda dA, Z: dA * Z),
        Mistake("multiplied dA by the mask: NaN where a shut gate meets inf or NaN",
                "A shut gate passes 0, whatever dA holds there, but inf * 0 and NaN * 0 are NaN: select, do not "
                "multiply: np.where(Z > 0, dA, 0.0).",
                lambda dA, Z: dA * (Z > 0)),
    ),
    "first_linear_backward": (
        Mistake("also computed dX",
                "The first layer's input is data: nobody needs its gradient, so return only (dW1, db1) "
                "and save a (batch, in_features) array.",
                lambda dZ1, X, W1: (X.T @ dZ1, dZ1.sum(axis=0), dZ1 @ W1.T)),
        Mistake("dW without the transpose",
                "dW1 = X.T @ dZ1 has W1's shape (in_features, hidden).",
                lambda dZ1, X, W1: (dZ1.T @ X, dZ1.sum(axis=0))),
        Mistake("bias gradient not summed over the batch",
                "db1 = dZ1.sum(axis=0).",
                lambda dZ1, X, W1: (X.T @ dZ1, dZ1)),
        Mistake("returned (db1, dW1) instead of (dW1, db1)",
                "Return the weight gradient first, then the bias gradient: (X.T @ dZ1, dZ1.sum(axis=0)).",
                lambda dZ1, X, W1: (dZ1.sum(axis=0), X.T @ dZ1)),
    ),
    "mlp_backward": twisted(_mlp_backward, {
        "no ReLU backward": (
            "skipped the ReLU backward",
            "Between the layers, pass dA1 through relu_backward with cache['Z1'] before the first layer."),
        "dW2 from Z1": (
            "dW2 computed from Z1 instead of A1",
            "The second layer's input is the activation A1 = relu(Z1): dW2 = A1.T @ dY_hat."),
        "bias gradients not summed": (
            "bias gradients not summed over the batch",
            "db = dZ.sum(axis=0) for both layers."),
    }),
}
