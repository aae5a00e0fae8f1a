"""A multilayer perceptron of any depth, the model every part trains.

Parameters are a dict ``{"W1", "b1", ..., "WL", "bL"}``; ``W`` is (fan_in,
fan_out) so a layer is ``x @ W + b``.  Hidden layers use ReLU, the last layer is
linear.  Parts 2 to 7 build on these functions rather than on the learner's
Part 1 code, so a bug there does not block a later part.

Every function computes in the dtype of its inputs (Part 4 runs them in
float16): nothing is silently upcast.  Where half precision cannot hold the
intermediate result of a reduction, the sum is *accumulated* in float32 and the
result rounded back to float16 once, as mixed-precision hardware does: the bias
gradient (a sum over the batch) and the loss (a mean of squares).
"""

from __future__ import annotations

import numpy as np

from .answers import answers

Params = dict[str, np.ndarray]


def num_layers(params: Params) -> int:
    """L, the number of linear layers in ``params``."""
    layers = sum(1 for key in params if key.startswith("W"))
    expected = {f"{p}{i}" for i in range(1, layers + 1) for p in "Wb"}
    if set(params) != expected:
        raise ValueError(f"params must have keys W1..WL and b1..bL, got {sorted(params)}")
    return layers


@answers("002")
def init_params(layer_sizes: list[int], seed: int, dtype=np.float64) -> Params:
    """He-initialised parameters for layer sizes ``[in, h1, ..., out]``.

    W_i: (sizes[i-1], sizes[i]) with std sqrt(2 / fan_in), drawn in layer order
    from ``np.random.default_rng(seed)``; b_i: zeros (sizes[i],).
    For ``[in, hidden, out]`` this is exactly lesson 002's ``init_mlp_params``.
    """
    if len(layer_sizes) < 2:
        raise ValueError("layer_sizes needs at least an input and an output size")
    rng = np.random.default_rng(seed)
    params: Params = {}
    for i, (fan_in, fan_out) in enumerate(zip(layer_sizes[:-1], layer_sizes[1:]), start=1):
        params[f"W{i}"] = (rng.standard_normal((fan_in, fan_out)) * np.sqrt(2.0 / fan_in)).astype(dtype)
        params[f"b{i}"] = np.zeros(fan_out, dtype=dtype)
    return params


@answers("005")
def forward(X: np.ndarray, params: Params) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Forward pass; returns ``(out, cache)``.

    cache holds what backward needs: ``A0 = X`` and, for each hidden layer i,
    the pre-activation ``Z{i}`` and the activation ``A{i} = relu(Z{i})``.
    """
    layers = num_layers(params)
    cache = {"A0": X}
    a = X
    for i in range(1, layers):
        z = a @ params[f"W{i}"] + params[f"b{i}"]
        a = np.maximum(z, 0)
        cache[f"Z{i}"], cache[f"A{i}"] = z, a
    out = a @ params[f"W{layers}"] + params[f"b{layers}"]
    return out, cache


@answers("010", "017")
def backward(d_out: np.ndarray, params: Params, cache: dict[str, np.ndarray]) -> Params:
    """Gradients of the loss w.r.t. every parameter, given d(loss)/d(out) (batch, out)."""
    layers = num_layers(params)
    grads: Params = {}
    d = d_out
    for i in range(layers, 0, -1):
        a_prev = cache[f"A{i - 1}"]
        grads[f"W{i}"] = a_prev.T @ d
        grads[f"b{i}"] = _sum_over_batch(d)
        if i > 1:  # the input X needs no gradient
            d = (d @ params[f"W{i}"].T) * (cache[f"Z{i - 1}"] > 0)
    return {key: grads[key] for key in params}


def _sum_over_batch(d: np.ndarray) -> np.ndarray:
    """``d.sum(axis=0)`` in d's dtype; float16 rows are accumulated in float32.

    (NumPy adds float16 rows one by one in float16: 4096 rows of 0.1 sum to 256, not 409.5.
    Its float16 matrix products already accumulate in float32.)
    """
    if d.dtype == np.float16:
        return d.sum(axis=0, dtype=np.float32).astype(np.float16)
    return d.sum(axis=0)


@answers("006")
def mse_loss_and_grad(Y_hat: np.ndarray, Y: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean squared error over all entries, and its gradient w.r.t. ``Y_hat`` (in Y_hat's dtype).

    In float16 the mean and the gradient are computed in float32 and the gradient is rounded
    to float16 once: a sum of squares overflows half precision quickly, and the number of
    entries need not fit in it (65504 is its largest finite value).
    """
    diff = Y_hat - Y
    if diff.dtype == np.float16:
        wide = diff.astype(np.float32)
        return float(np.mean(wide ** 2)), (2.0 * wide / wide.size).astype(np.float16)
    return float(np.mean(diff ** 2)), 2.0 * diff / diff.size


def loss_and_grads(X: np.ndarray, Y: np.ndarray, params: Params) -> tuple[float, Params]:
    """One forward and backward pass: ``(loss, grads)``."""
    out, cache = forward(X, params)
    loss, d_out = mse_loss_and_grad(out, Y)
    return loss, backward(d_out, params, cache)


def sgd_update(params: Params, grads: Params, lr: float) -> Params:
    """A new parameter dict ``p - lr * g`` (inputs are not modified).

    Raises:
        ValueError: if ``grads`` does not have exactly the keys of ``params``, or a gradient's
            shape differs from its parameter's (the message names them): a silent partial
            update, or a broadcast one, would train the wrong model without a word.
    """
    check_grads_match(params, grads)
    return {key: params[key] - lr * grads[key] for key in params}


def check_grads_match(params: Params, grads: Params) -> None:
    """Raise ValueError unless ``grads`` has the keys of ``params`` and each gradient its parameter's shape."""
    missing = [key for key in params if key not in grads]
    extra = [key for key in grads if key not in params]
    if missing or extra:
        raise ValueError(f"the gradients do not match the parameters: missing {missing}, unexpected {extra}")
    for key, value in params.items():
        if np.shape(grads[key]) != np.shape(value):
            raise ValueError(f"grads[{key!r}] has shape {np.shape(grads[key])}, but params[{key!r}] "
                             f"has shape {np.shape(value)}")
