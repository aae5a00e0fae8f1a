"""Wrong answers a learner could plausibly write (beyond one-point mutants), and right
answers written another way, for the catalogue (``tests/catalogue.py``).

Each answer is registered where it is written, by the decorator above it, under its lesson's code:

- ``@wrong`` (``PLAUSIBLE[code]``) must lose the lesson's points, and may pass the visible tests
  only when it is wrong in values alone;
- ``@expensive`` (``EXPENSIVE[code]``) gives the right numbers at a memory cost the lesson does not
  allow (both test kinds must refuse it);
- ``@right`` (``RIGHT[code]``) must pass both the visible and the hidden tests (the tolerances accept
  another summation order, einsum, np.dot and loops);
- ``@named`` (``NAMED_MISTAKES[code]``) is a catalogued mistake written a learner's way: the grader
  must still name it.

Each function takes exactly the graded function's arguments. The lessons follow in order; a helper
stands before the first answer that calls it. ``source_of`` gives an answer's code as a learner
writes it in a notebook cell (``tests/adversarial.py`` does, with the helpers it calls).
"""

from __future__ import annotations

import inspect
import math
import textwrap
from typing import Callable

import numpy as np

from shared import mlp


#: lesson code -> [(what the answer does, the function)], in the order the answers are written below.
PLAUSIBLE: dict[str, list[tuple[str, Callable]]] = {}
EXPENSIVE: dict[str, list[tuple[str, Callable]]] = {}
RIGHT: dict[str, list[tuple[str, Callable]]] = {}
#: lesson code -> [(what the answer does, the function, the catalogued mistake the grader must name)]
NAMED_MISTAKES: dict[str, list[tuple[str, Callable, str]]] = {}


def _registrar(table: dict) -> Callable:
    """A decorator factory: ``@registrar(code, what, *more)`` appends ``(what, function, *more)`` to
    ``table[code]`` and leaves the function as it is."""
    def registrar(code: str, what: str, *more: str) -> Callable[[Callable], Callable]:
        def register(function: Callable) -> Callable:
            table.setdefault(code, []).append((what, function, *more))
            return function
        return register
    return registrar


wrong = _registrar(PLAUSIBLE)          # @wrong(code, what)
expensive = _registrar(EXPENSIVE)      # @expensive(code, what)
right = _registrar(RIGHT)              # @right(code, what)
named = _registrar(NAMED_MISTAKES)     # @named(code, what, the catalogued mistake's name)


def source_of(function: Callable) -> str:
    """The function's source as a learner writes it: dedented, without the decorator that registers it."""
    source = textwrap.dedent(inspect.getsource(function))
    return source[source.index("\ndef ") + 1:] if source.startswith("@") else source


# 001 make_synthetic_regression_batch --------------------------------------------------------------

def _positive_sizes(*sizes):
    for size in sizes:
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
            raise ValueError(f"bad size {size!r}")


@wrong("001", "W_true scaled by 1/d")
def batch_w_over_d(batch_size, in_features, out_features, seed):
    _positive_sizes(batch_size, in_features, out_features)
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((batch_size, in_features))
    W_true = rng.standard_normal((in_features, out_features)) / in_features  # 1/d, not 1/sqrt(d)
    return X, np.sin(X @ W_true)


@wrong("001", "float32 draws")
def batch_float32(batch_size, in_features, out_features, seed):
    _positive_sizes(batch_size, in_features, out_features)
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((batch_size, in_features), dtype=np.float32)
    W_true = rng.standard_normal((in_features, out_features), dtype=np.float32) / np.sqrt(in_features)
    return X, np.sin(X @ W_true)


@wrong("001", "the pair as a list")
def batch_as_list(batch_size, in_features, out_features, seed):
    """001 wrong: the pair returned as a list, not the tuple ``X, Y``."""
    _positive_sizes(batch_size, in_features, out_features)
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((batch_size, in_features))
    return [X, np.sin(X @ (rng.standard_normal((in_features, out_features)) / np.sqrt(in_features)))]


@wrong("001", "out_features = 0 accepted (a Y with no column)")
def batch_without_outputs_refused(batch_size, in_features, out_features, seed):
    """001 wrong: the batch's sizes refused below 1, but out_features only when negative: 0 gives a (b, 0) Y."""
    _positive_sizes(batch_size, in_features)
    if isinstance(out_features, bool) or not isinstance(out_features, (int, np.integer)) or out_features < 0:
        raise ValueError(f"bad out_features {out_features!r}")
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((batch_size, in_features))
    return X, np.sin(X @ (rng.standard_normal((in_features, out_features)) / np.sqrt(in_features)))


@right("001", "rng.normal and np.dot")
def batch_with_normal(batch_size, in_features, out_features, seed):
    _positive_sizes(batch_size, in_features, out_features)
    rng = np.random.default_rng(seed)
    X = rng.normal(0.0, 1.0, size=(batch_size, in_features))
    W_true = rng.normal(0.0, 1.0, size=(in_features, out_features)) / math.sqrt(in_features)
    return X, np.sin(np.dot(X, W_true))


# 002 init_mlp_params ------------------------------------------------------------------------------

@wrong("002", "the second layer's scale from the first layer's fan-in")
def init_second_fan_in_wrong(in_features, hidden, out_features, seed):
    rng = np.random.default_rng(seed)
    W1 = rng.standard_normal((in_features, hidden)) * np.sqrt(2.0 / in_features)
    W2 = rng.standard_normal((hidden, out_features)) * np.sqrt(2.0 / in_features)  # W1's fan-in again
    return {"W1": W1, "b1": np.zeros(hidden), "W2": W2, "b2": np.zeros(out_features)}


@wrong("002", "integer zero biases")
def init_int_biases(in_features, hidden, out_features, seed):
    rng = np.random.default_rng(seed)
    W1 = rng.standard_normal((in_features, hidden)) * np.sqrt(2.0 / in_features)
    W2 = rng.standard_normal((hidden, out_features)) * np.sqrt(2.0 / hidden)
    return {"W1": W1, "b1": np.zeros(hidden, dtype=int), "W2": W2, "b2": np.zeros(out_features, dtype=int)}


@right("002", "rng.normal with the scale")
def init_with_normal(in_features, hidden, out_features, seed):
    rng = np.random.default_rng(seed)
    W1 = rng.normal(0.0, math.sqrt(2 / in_features), size=(in_features, hidden))
    W2 = rng.normal(0.0, math.sqrt(2 / hidden), size=(hidden, out_features))
    return {"W1": W1, "b1": np.zeros(hidden), "W2": W2, "b2": np.zeros(out_features)}


# 003 linear_forward -------------------------------------------------------------------------------

@wrong("003", "the bias added as a column")
def linear_bias_as_column(x, W, b):
    return x @ W + b.reshape(-1, 1) if x.shape[0] == W.shape[1] else x @ W + b[:, None].T


@right("003", "einsum")
def linear_einsum(x, W, b):
    return np.einsum("bi,io->bo", x, W) + b


@right("003", "loops")
def linear_loops(x, W, b):
    out = np.empty((x.shape[0], W.shape[1]), dtype=np.result_type(x, W, b))
    for row in range(x.shape[0]):
        for col in range(W.shape[1]):
            out[row, col] = sum(x[row, i] * W[i, col] for i in range(W.shape[0])) + b[col]
    return out


# 004 relu_forward ---------------------------------------------------------------------------------

@wrong("004", "ReLU in place (z[z < 0] = 0)")
def relu_in_place(z):
    z[z < 0] = 0
    return z


@wrong("004", "np.maximum with np.float32(0): float16 in, float32 out")
def relu_with_a_float32_zero(z):
    """004 wrong: np.float32(0) is a typed scalar (NEP 50): a float16 z comes back float32."""
    return np.maximum(z, np.float32(0.0))


@wrong("004", "a floor of 1e-12 instead of 0")
def relu_with_a_floor(z):
    """004 wrong: a floor of 1e-12 instead of 0 (say, to keep a later log finite)."""
    return np.maximum(z, 1e-12)


_RELU_BUFFERS: dict = {}


@wrong("004", "one output buffer reused by every call")
def relu_reusing_a_buffer(z):
    """004 wrong: one output buffer per shape and dtype, reused by every call (each call overwrites the
    result the caller got from the one before)."""
    out = _RELU_BUFFERS.get((z.shape, z.dtype.str))
    if out is None:
        out = _RELU_BUFFERS[(z.shape, z.dtype.str)] = np.empty_like(z)
    return np.maximum(z, 0, out=out)


@wrong("004", "the input itself when nothing is negative")
def relu_input_when_nonnegative(z):
    """004 wrong: the input itself handed back when nothing in it is negative."""
    return z if not (z < 0).any() else np.maximum(z, 0)


@wrong("004", "(z + |z|) / 2: NaN for -inf, inf past float16's 32752")
def relu_abs(z):
    return (z + np.abs(z)) / 2


@wrong("004", "z * (z > 0): NaN for -inf (-inf * 0)")
def relu_mask(z):
    return z * (z > 0)


@wrong("004", "z.max() first (an empty array crashes)")
def relu_max_shortcut(z):
    """004 wrong: z.max() first, which an empty array cannot give."""
    return np.zeros_like(z) if z.max() <= 0 else np.maximum(z, 0)


@right("004", "np.where")
def relu_where(z):
    return np.where(z > 0, z, np.zeros_like(z))


@right("004", "np.clip")
def relu_clip(z):
    return np.clip(z, 0, None)


# 005 mlp_forward ----------------------------------------------------------------------------------

@wrong("005", "the cache without A0")
def mlp_forward_no_a0(X, params):
    Z1 = X @ params["W1"] + params["b1"]
    A1 = np.maximum(Z1, 0)
    return A1 @ params["W2"] + params["b2"], {"Z1": Z1, "A1": A1}


_REFILLED_CACHE: dict = {}


@wrong("005", "one module-level cache dict, filled again")
def mlp_forward_refilled_cache(X, params):
    """005 wrong: one module-level cache dict, cleared and filled again at every call."""
    Z1 = X @ params["W1"] + params["b1"]
    A1 = np.maximum(Z1, 0)
    _REFILLED_CACHE.clear()
    _REFILLED_CACHE.update({"A0": X, "Z1": Z1, "A1": A1})
    return A1 @ params["W2"] + params["b2"], _REFILLED_CACHE


_FORWARD_BUFFERS: dict = {}


@wrong("005", "Z1 and A1 in buffers kept between calls")
def mlp_forward_buffer_pool(X, params):
    """005 wrong: Z1 and A1 written into buffers kept between calls (one pair per shape and dtype)."""
    dtype = np.result_type(X, params["W1"])
    shape = (X.shape[0], params["W1"].shape[1])
    Z1, A1 = _FORWARD_BUFFERS.setdefault((shape, dtype.str), (np.empty(shape, dtype), np.empty(shape, dtype)))
    np.matmul(X, params["W1"], out=Z1)
    Z1 += params["b1"]
    np.maximum(Z1, 0, out=A1)
    return A1 @ params["W2"] + params["b2"], {"A0": X, "Z1": Z1, "A1": A1}


@right("005", "einsum")
def mlp_forward_einsum(X, params):
    Z1 = np.einsum("bi,ih->bh", X, params["W1"]) + params["b1"]
    A1 = np.maximum(Z1, 0)
    return np.einsum("bh,ho->bo", A1, params["W2"]) + params["b2"], {"A0": X, "Z1": Z1, "A1": A1}


# 006 mse_loss_and_grad ----------------------------------------------------------------------------

@wrong("006", "the loss left a NumPy scalar")
def mse_numpy_scalar(Y_hat, Y):
    diff = Y_hat - Y
    return np.mean(diff ** 2), 2 * diff / diff.size


@wrong("006", "the loss summed in float32")
def mse_loss_summed_in_float32(Y_hat, Y):
    """006 wrong: the squares summed in float32 (half the memory, seven digits)."""
    diff = Y_hat - Y
    return float(np.sum((diff ** 2).astype(np.float32)) / diff.size), 2.0 * diff / diff.size


@wrong("006", "2 / n rounded to float32")
def mse_grad_with_a_float32_scale(Y_hat, Y):
    """006 wrong: the factor 2 / n rounded to float32 before it multiplies the float64 difference."""
    diff = Y_hat - Y
    return float(np.mean(diff ** 2)), diff * np.float32(2.0 / diff.size)


@wrong("006", "the loss summed over outputs, averaged over rows")
def mse_sum_over_batch_rows(Y_hat, Y):
    diff = Y_hat - Y
    return float(np.mean(np.sum(diff ** 2, axis=1))), 2 * diff / len(diff)


@wrong("006", "np.nanmean hides a NaN prediction")
def mse_nanmean(Y_hat, Y):
    """006 wrong: np.nanmean, which hides a NaN prediction (a diverged model)."""
    diff = Y_hat - Y
    return float(np.nanmean(diff ** 2)), 2 * diff / diff.size


@right("006", "a Python loop for the loss")
def mse_loops(Y_hat, Y):
    total = 0.0
    for a, b in zip(Y_hat.ravel().tolist(), Y.ravel().tolist()):
        total += (a - b) ** 2
    diff = Y_hat - Y
    return total / diff.size, diff * (2 / diff.size)


# 007 linear_backward ------------------------------------------------------------------------------

@wrong("007", "dW averaged over the batch")
def linear_backward_mean_dw(dZ, x, W):
    return dZ @ W.T, x.T @ dZ / len(x), dZ.sum(axis=0)


@wrong("007", "db squeezed (shape () for one output)")
def linear_backward_squeezed_db(dZ, x, W):
    """007 wrong: db squeezed, shape () when fan_out is 1."""
    return dZ @ W.T, x.T @ dZ, np.squeeze(dZ.sum(axis=0, keepdims=True))


@wrong("007", "the gradients as a list")
def linear_backward_as_list(dZ, x, W):
    """007 wrong: the three gradients as a list, not a tuple."""
    return [dZ @ W.T, x.T @ dZ, dZ.sum(axis=0)]


@right("007", "einsum")
def linear_backward_einsum(dZ, x, W):
    return np.einsum("bo,io->bi", dZ, W), np.einsum("bi,bo->io", x, dZ), np.einsum("bo->o", dZ)


# 008 relu_backward --------------------------------------------------------------------------------

@wrong("008", "a boolean gradient")
def relu_backward_bool(dA, Z):
    return (dA * (Z > 0)) != 0


@wrong("008", "a float32 mask: float16 in, float32 out")
def relu_backward_float32_mask(dA, Z):
    """008 wrong: the mask made float32: a float16 dA comes back float32."""
    return dA * (Z > 0).astype(np.float32)


@wrong("008", "dA itself when every gate is open")
def relu_backward_input_when_open(dA, Z):
    """008 wrong: dA itself handed back when every gate is open."""
    return dA if (Z > 0).all() else dA * (Z > 0)


@wrong("008", "np.heaviside: Z's dtype leaks in")
def relu_backward_heaviside(dA, Z):
    """008 wrong: np.heaviside(Z, 0) is Z's dtype, so a float16 dA with a float64 Z comes back float64."""
    return dA * np.heaviside(Z, 0)


@wrong("008", "dA times the mask: NaN where a shut gate meets inf or NaN")
def relu_backward_times_mask(dA, Z):
    """008 wrong: dA * (Z > 0) is inf * 0 = NaN where a shut gate meets a non-finite gradient (0 is promised)."""
    return dA * (Z > 0)


@right("008", "np.where")
def relu_backward_where(dA, Z):
    return np.where(Z > 0, dA, 0.0).astype(dA.dtype)


# 009 first_linear_backward ------------------------------------------------------------------------

@wrong("009", "dW1 averaged over the batch")
def first_backward_mean(dZ1, X, W1):
    return X.T @ dZ1 / len(X), dZ1.sum(axis=0)


@wrong("009", "db1 squeezed (shape () for one hidden unit)")
def first_backward_squeezed_db(dZ1, X, W1):
    """009 wrong: db1 squeezed, shape () with one hidden unit."""
    return X.T @ dZ1, dZ1.sum(axis=0, keepdims=True).squeeze()


@wrong("009", "db1 by a float64 vector of ones")
def first_backward_db_by_ones(dZ1, X, W1):
    """009 wrong: db1 as a float64 vector of ones times dZ1 (float32 in, float64 out)."""
    return X.T @ dZ1, np.ones(X.shape[0]) @ dZ1


@right("009", "np.dot")
def first_backward_dot(dZ1, X, W1):
    return np.dot(X.T, dZ1), np.sum(dZ1, axis=0)


# 010 mlp_backward ---------------------------------------------------------------------------------

@wrong("010", "the bias gradients left out")
def mlp_backward_missing_bias_keys(dY_hat, params, cache):
    dW2 = cache["A1"].T @ dY_hat
    dZ1 = (dY_hat @ params["W2"].T) * (cache["Z1"] > 0)
    return {"W1": cache["A0"].T @ dZ1, "W2": dW2}


_REFILLED_GRADS: dict = {}


@wrong("010", "one module-level gradient dict, filled again")
def mlp_backward_refilled_dict(dY_hat, params, cache):
    """010 wrong: one module-level gradient dict, filled again at every call."""
    dZ1 = (dY_hat @ params["W2"].T) * (cache["Z1"] > 0)
    _REFILLED_GRADS.update({"W1": cache["A0"].T @ dZ1, "b1": dZ1.sum(axis=0),
                            "W2": cache["A1"].T @ dY_hat, "b2": dY_hat.sum(axis=0)})
    return _REFILLED_GRADS


@right("010", "einsum")
def mlp_backward_einsum(dY_hat, params, cache):
    dW2 = np.einsum("bh,bo->ho", cache["A1"], dY_hat)
    dZ1 = np.einsum("bo,ho->bh", dY_hat, params["W2"]) * (cache["Z1"] > 0)
    return {"W1": np.einsum("bi,bh->ih", cache["A0"], dZ1), "b1": dZ1.sum(axis=0), "W2": dW2,
            "b2": dY_hat.sum(axis=0)}


# 011 split_into_micro_batches ---------------------------------------------------------------------

def _check_split(X, Y, k):
    if isinstance(k, bool) or int(k) != k or k < 1 or len(X) != len(Y) or len(X) < k:
        raise ValueError("bad split")


@wrong("011", "the micro-batches in reverse order")
def split_as_arrays(X, Y, num_micro_batches):
    _check_split(X, Y, num_micro_batches)
    return [(x, y) for x, y in zip(np.array_split(X, num_micro_batches), np.array_split(Y, num_micro_batches))][::-1]


@wrong("011", "each micro-batch a list")
def split_list_of_lists(X, Y, num_micro_batches):
    """011 wrong: each micro-batch a list ``[X_j, Y_j]``, not a tuple."""
    return [list(pair) for pair in split_loop(X, Y, num_micro_batches)]


@right("011", "a loop over sizes from divmod")
def split_loop(X, Y, num_micro_batches):
    _check_split(X, Y, num_micro_batches)
    k = int(num_micro_batches)
    base, extra = divmod(len(X), k)
    out, start = [], 0
    for j in range(k):
        stop = start + base + (1 if j < extra else 0)
        out.append((X[start:stop], Y[start:stop]))
        start = stop
    return out


# 012 accumulate_gradients -------------------------------------------------------------------------

@wrong("012", "a running mean instead of a weighted sum")
def accumulate_mean(accumulated, micro_grads, micro_batch_size):
    if accumulated is None:
        return {key: grad * 1.0 for key, grad in micro_grads.items()}
    return {key: (accumulated[key] + grad) / 2 for key, grad in micro_grads.items()}


_ACCUMULATOR: dict = {}


@wrong("012", "one module-level result dict")
def accumulate_into_module_dict(accumulated, micro_grads, micro_batch_size):
    """012 wrong: one module-level result dict (the previous result, passed back in, is cleared)."""
    base = {} if accumulated is None else dict(accumulated)
    _ACCUMULATOR.clear()
    for key, grad in micro_grads.items():
        _ACCUMULATOR[key] = micro_batch_size * grad if accumulated is None else base[key] + micro_batch_size * grad
    return _ACCUMULATOR


@right("012", "a loop with 0 as the start")
def accumulate_loop(accumulated, micro_grads, micro_batch_size):
    out = {}
    for key, grad in micro_grads.items():
        base = 0 if accumulated is None else accumulated[key]
        out[key] = base + grad * micro_batch_size
    return out


# 013 scale_accumulated_gradients ------------------------------------------------------------------

@wrong("013", "divided by max size times the count")
def scale_by_max(accumulated, micro_batch_sizes):
    sizes = list(micro_batch_sizes)
    if not sizes or min(sizes) < 1:
        raise ValueError("bad sizes")
    return {key: value / (max(sizes) * len(sizes)) for key, value in accumulated.items()}


@wrong("013", "divided by np.sum(sizes), a NumPy int64 (float32 gradients widened)")
def scale_by_np_sum(accumulated, micro_batch_sizes):
    """Divided by np.sum(sizes), a NumPy int64: float32 gradients come back float64."""
    sizes = list(micro_batch_sizes)
    if not sizes or min(sizes) < 1:
        raise ValueError("bad sizes")
    total = np.sum(sizes)
    return {key: value / total for key, value in accumulated.items()}


@wrong("013", "the division skipped when the total is 1 (the accumulator's own arrays)")
def scale_skipping_one(accumulated, micro_batch_sizes):
    """013 wrong: nothing to divide when the batch has one example, so the accumulator's arrays are handed back
    (a new dict, the same arrays: the caller's next accumulation changes the "result")."""
    sizes = list(micro_batch_sizes)
    if not sizes or min(sizes) < 1:
        raise ValueError("bad sizes")
    total = sum(sizes)
    if total == 1:
        return dict(accumulated)
    return {key: value / total for key, value in accumulated.items()}


@right("013", "a loop and a multiplication by 1/total")
def scale_loop(accumulated, micro_batch_sizes):
    sizes = list(micro_batch_sizes)
    if not sizes or min(sizes) < 1:
        raise ValueError("bad sizes")
    total = 0
    for n in sizes:
        total += n
    return {key: value * (1.0 / total) for key, value in accumulated.items()}


# 014 grad_accumulation_step -----------------------------------------------------------------------

def _accumulated_step(params, X, Y, num_micro_batches, learning_rate):
    """014 without the earlier lessons' functions: the updated parameters, and each micro-batch's
    ``(loss, rows)`` in order."""
    k = num_micro_batches
    if isinstance(k, bool) or int(k) != k or k < 1 or len(X) < k:
        raise ValueError("bad num_micro_batches")
    total = {key: np.zeros_like(value) for key, value in params.items()}
    losses = []
    for X_j, Y_j in zip(np.array_split(X, int(k)), np.array_split(Y, int(k))):
        loss, grads = mlp.loss_and_grads(X_j, Y_j, params)
        for key in total:
            total[key] += len(X_j) * grads[key]
        losses.append((loss, len(X_j)))
    return {key: params[key] - learning_rate * total[key] / len(X) for key in params}, losses


@wrong("014", "the last micro-batch's loss returned")
def step_last_loss(params, X, Y, num_micro_batches, learning_rate):
    new_params, losses = _accumulated_step(params, X, Y, num_micro_batches, learning_rate)
    return new_params, losses[-1][0]  # the last micro-batch's loss, not the batch's


@right("014", "without the earlier lessons' functions")
def step_without_helpers(params, X, Y, num_micro_batches, learning_rate):
    new_params, losses = _accumulated_step(params, X, Y, num_micro_batches, learning_rate)
    return new_params, sum(rows * loss for loss, rows in losses) / len(X)


# 015 mlp_forward_checkpointed ---------------------------------------------------------------------

@wrong("015", "segment_size 0 crashes with ZeroDivisionError")
def forward_checkpointed_division(X, params, segment_size):
    layers = mlp.num_layers(params)
    checkpoints, a = {}, X
    for i in range(1, layers + 1):
        if (i - 1) // segment_size * segment_size == i - 1:  # ZeroDivisionError for s = 0
            checkpoints[i - 1] = a
        z = a @ params[f"W{i}"] + params[f"b{i}"]
        a = np.maximum(z, 0)
    return z, checkpoints


_CHECKPOINT_POOL: dict = {}


@wrong("015", "the checkpoints in buffers kept between calls")
def forward_checkpointed_pooled(X, params, segment_size):
    """015 wrong: the checkpoints written into buffers kept between calls."""
    if segment_size < 1:
        raise ValueError("segment_size must be at least 1")
    num_layers = mlp.num_layers(params)
    checkpoints, a = {0: X}, X
    for i in range(1, num_layers + 1):
        z = a @ params[f"W{i}"] + params[f"b{i}"]
        if i < num_layers:
            if i % segment_size == 0:
                a = np.maximum(z, 0, out=_CHECKPOINT_POOL.setdefault((i, z.shape, z.dtype.str), np.empty_like(z)))
                checkpoints[i] = a
            else:
                a = np.maximum(z, 0)
    return z, checkpoints


def _layer(a, params, i):
    return np.einsum("bi,io->bo", a, params[f"W{i}"]) + params[f"b{i}"]


def _forward_keeping(X, params, segment_size, layer, keep):
    """015 written out: the forward pass through ``layer(a, params, i)`` (layer i's pre-activation),
    ``keep(a)`` stored as the checkpoint at the start of each segment of ``segment_size`` layers."""
    if segment_size < 1:
        raise ValueError("segment_size must be at least 1")
    layers = mlp.num_layers(params)
    checkpoints, a = {}, X
    for i in range(1, layers + 1):
        if (i - 1) % segment_size == 0:
            checkpoints[i - 1] = keep(a)
        z = layer(a, params, i)
        a = np.maximum(z, 0)
    return z, checkpoints


@expensive("015", "the checkpoints copied")
def forward_checkpointed_copies(X, params, segment_size):
    return _forward_keeping(X, params, segment_size, lambda a, p, i: a @ p[f"W{i}"] + p[f"b{i}"],
                            keep=lambda a: a.copy())


@expensive("015", "the whole forward pass when there is one segment")
def forward_whole_pass_for_one_segment(X, params, segment_size):
    """015 the expensive way: with one segment (s >= L), the helper's whole forward pass, which keeps every
    activation, and X as the only checkpoint."""
    if segment_size >= mlp.num_layers(params):
        return mlp.forward(X, params)[0], {0: X}
    return forward_checkpointed_einsum(X, params, segment_size)


@expensive("015", "every activation A kept, the checkpoints picked afterwards")
def forward_keeping_every_activation(X, params, segment_size):
    """015 the expensive way without the Z's: every layer's A kept in a list (each Z let go as soon as its A is
    made), the checkpoints picked from the list at the end.  Half of what the standard cache keeps, and still
    what checkpointing is meant to save: one array per layer where a checkpoint per segment is allowed."""
    if segment_size < 1:
        raise ValueError("segment_size must be at least 1")
    layers = mlp.num_layers(params)
    activations = [X]
    for i in range(1, layers + 1):
        z = activations[-1] @ params[f"W{i}"] + params[f"b{i}"]
        if i < layers:
            activations.append(np.maximum(z, 0))
    return z, {i: activations[i] for i in range(0, layers, segment_size)}


@right("015", "einsum")
def forward_checkpointed_einsum(X, params, segment_size):
    return _forward_keeping(X, params, segment_size, _layer, keep=lambda a: a)


# 016 recompute_block_activations ------------------------------------------------------------------

@wrong("016", "the cache without the pre-activations Z")
def recompute_no_z(checkpoint, params, start_layer, end_layer):
    last = min(end_layer, mlp.num_layers(params) - 1)
    cache, a = {f"A{start_layer}": checkpoint}, checkpoint
    for i in range(start_layer + 1, last + 1):
        a = np.maximum(a @ params[f"W{i}"] + params[f"b{i}"], 0)
        cache[f"A{i}"] = a
    return cache


@wrong("016", "nothing returned for a segment that is the output layer alone")
def recompute_nothing_for_output_segment(checkpoint, params, start_layer, end_layer):
    """016 wrong: a segment with no hidden layer to recompute returns an empty cache, without its checkpoint
    A_start (the output layer's backward needs it)."""
    last = min(end_layer, mlp.num_layers(params) - 1)
    if last <= start_layer:
        return {}
    cache, a = {f"A{start_layer}": checkpoint}, checkpoint
    for i in range(start_layer + 1, last + 1):
        z = a @ params[f"W{i}"] + params[f"b{i}"]
        a = np.maximum(z, 0)
        cache[f"Z{i}"], cache[f"A{i}"] = z, a
    return cache


_SEGMENT_POOL: dict = {}


@wrong("016", "Z and A in buffers kept between calls")
def recompute_pooled(checkpoint, params, start_layer, end_layer):
    """016 wrong: Z and A written into buffers kept between calls (one pair per layer, shape and dtype)."""
    last = min(end_layer, mlp.num_layers(params) - 1)
    cache, a = {f"A{start_layer}": checkpoint}, checkpoint
    for i in range(start_layer + 1, last + 1):
        W = params[f"W{i}"]
        shape, dtype = (a.shape[0], W.shape[1]), np.result_type(a, W)
        z, act = _SEGMENT_POOL.setdefault((i, shape, dtype.str), (np.empty(shape, dtype), np.empty(shape, dtype)))
        np.matmul(a, W, out=z)
        z += params[f"b{i}"]
        np.maximum(z, 0, out=act)
        cache[f"Z{i}"], cache[f"A{i}"] = z, act
        a = act
    return cache


@right("016", "einsum")
def recompute_einsum(checkpoint, params, start_layer, end_layer):
    last = min(end_layer, mlp.num_layers(params) - 1)
    cache, a = {f"A{start_layer}": checkpoint}, checkpoint
    for i in range(start_layer + 1, last + 1):
        z = _layer(a, params, i)
        a = np.maximum(z, 0)
        cache[f"Z{i}"], cache[f"A{i}"] = z, a
    return cache


# 017 mlp_backward_checkpointed --------------------------------------------------------------------

@wrong("017", "the bias gradients left out")
def backward_checkpointed_without_bias(d_out, params, checkpoints, segment_size):
    grads = backward_checkpointed_einsum(d_out, params, checkpoints, segment_size)
    return {key: value for key, value in grads.items() if key[0] == "W"}


@expensive("017", "each segment's cache kept while the next is recomputed")
def backward_checkpointed_segments_overlap(d_out, params, checkpoints, segment_size):
    """017 the expensive way: each segment's cache kept while the next is recomputed."""
    return backward_checkpointed_einsum(d_out, params, checkpoints, segment_size, overlap=True)


@expensive("017", "the whole forward recomputed from X keeping every A, then an ordinary backward")
def backward_whole_forward_every_activation(d_out, params, checkpoints, segment_size):
    """017 the expensive way: no checkpoint but the first is used; the whole forward pass is recomputed from
    checkpoints[0] = X keeping each layer's A (not its Z: the mask is read from A), then the ordinary backward
    runs over the list.  Every activation is alive at once, as without checkpointing."""
    layers = mlp.num_layers(params)
    activations = [checkpoints[0]]
    for i in range(1, layers):
        activations.append(np.maximum(activations[-1] @ params[f"W{i}"] + params[f"b{i}"], 0))
    grads, delta = {}, d_out
    for i in range(layers, 0, -1):
        a_prev = activations[i - 1]
        grads[f"W{i}"], grads[f"b{i}"] = a_prev.T @ delta, delta.sum(axis=0)
        if i > 1:
            delta = (delta @ params[f"W{i}"].T) * (a_prev > 0)
    return {key: grads[key] for key in params}


@right("017", "einsum")
def backward_checkpointed_einsum(d_out, params, checkpoints, segment_size, overlap=False):
    """017 with einsum; with ``overlap``, the expensive way: without ``del cache`` the last segment's cache is
    alive while the next one is recomputed (two segments at the peak)."""
    layers = mlp.num_layers(params)
    grads, delta = {}, d_out
    for start in sorted(checkpoints, reverse=True):
        end = min(start + segment_size, layers)
        cache = recompute_einsum(checkpoints[start], params, start, end)
        for i in range(end, start, -1):
            a_prev = cache[f"A{i - 1}"]
            grads[f"W{i}"] = np.einsum("bi,bo->io", a_prev, delta)
            grads[f"b{i}"] = np.einsum("bo->o", delta)
            if i > 1:
                delta = np.einsum("bo,io->bi", delta, params[f"W{i}"]) * (a_prev > 0)
        if not overlap:
            del cache
    return {key: grads[key] for key in params}


# 018 estimate_checkpointing_memory_savings --------------------------------------------------------

def _estimate(batch_size, width, num_layers, segment_size, bytes_per_element, *, count_x=False, floor=False):
    for value in (batch_size, width, num_layers, segment_size, bytes_per_element):
        if value < 1:
            raise ValueError("arguments must be at least 1")
    array = batch_size * width * bytes_per_element
    working = 2 * array + batch_size * width
    standard = (2 * (num_layers - 1) + count_x) * array + working
    segments = num_layers // segment_size if floor else -(-num_layers // segment_size)
    checkpointed = (segments - 1 + count_x + 2 * min(segment_size, num_layers - 1)) * array + working
    return {"standard_bytes": standard, "checkpointed_bytes": checkpointed,
            "saved_fraction": 1 - checkpointed / standard}


@wrong("018", "saved_fraction as a percentage")
def estimate_saved_as_percent(batch_size, width, num_layers, segment_size, bytes_per_element=8):
    out = _estimate(batch_size, width, num_layers, segment_size, bytes_per_element)
    return {**out, "saved_fraction": 100 * out["saved_fraction"]}


@wrong("018", "bytes_per_element ignored (always 8)")
def estimate_bytes_per_element_ignored(batch_size, width, num_layers, segment_size, bytes_per_element=8):
    return _estimate(batch_size, width, num_layers, segment_size, 8)


@wrong("018", "saved_fraction the int 0")
def estimate_int_zero_saved(batch_size, width, num_layers, segment_size, bytes_per_element=8):
    """018 wrong: saved_fraction the int 0 (not 0.0) when one segment saves nothing."""
    result = estimate_integer_ceil(batch_size, width, num_layers, segment_size, bytes_per_element)
    return {**result, "saved_fraction": 0} if segment_size >= num_layers else result


@right("018", "integer ceiling division")
def estimate_integer_ceil(batch_size, width, num_layers, segment_size, bytes_per_element=8):
    return _estimate(batch_size, width, num_layers, segment_size, bytes_per_element)


# 019 cast_to_half_precision -----------------------------------------------------------------------

def _float_arrays_only(params, what):
    for key, value in params.items():
        if not np.issubdtype(value.dtype, np.floating):
            raise TypeError(f"params[{key!r}] has dtype {value.dtype}: {what}")


@wrong("019", "a .view(np.float16) of the bytes, not a conversion")
def half_by_view(params):
    """019 wrong: ``.view`` reinterprets the bytes (four float16 numbers per float64) instead of converting."""
    _float_arrays_only(params, "only float arrays can be cast to float16")
    return {key: value.view(np.float16).copy() for key, value in params.items()}


@wrong("019", "NaN weights made 0 (np.nan_to_num) before the cast")
def half_without_nan(params):
    """019 wrong: NaN weights turned into 0 before the cast (np.nan_to_num keeps inf, as it clips to the max)."""
    _float_arrays_only(params, "only float arrays can be cast to float16")
    return {key: np.nan_to_num(value, nan=0.0, posinf=np.inf, neginf=-np.inf).astype(np.float16)
            for key, value in params.items()}


@wrong("019", "np.float16(x): the input itself when it is float16")
def half_by_np_float16(params):
    """np.float16(x) for each tensor: a new array for float64 input, but the input itself when it is float16."""
    return {key: np.float16(value) for key, value in params.items()}


def _refuse_signed_ints(params):
    """The wrong check of 019 and 020: signed ints and booleans refused, unsigned ints let through."""
    for key, value in params.items():
        if value.dtype.kind in ("i", "b"):
            raise TypeError(f"params[{key!r}] has dtype {value.dtype}")


@wrong("019", "unsigned ints cast silently")
def half_refusing_signed_ints_only(params):
    """019 wrong: only dtype kinds 'i' and 'b' refused, so unsigned ints are cast silently."""
    _refuse_signed_ints(params)
    with np.errstate(over="ignore"):
        return {key: value.astype(np.float16) for key, value in params.items()}


@wrong("019", "cast through float32 first (rounds twice)")
def half_through_float32(params):
    """019 wrong: float64 values cast to float32, then to float16: a value just above a float16 midpoint first
    rounds onto the midpoint, then ties to even, the wrong neighbour."""
    _float_arrays_only(params, "only float arrays can be cast to float16")
    with np.errstate(over="ignore"):
        return {key: value.astype(np.float32).astype(np.float16) for key, value in params.items()}


@right("019", "np.array with the dtype")
def half_with_np_array(params):
    _float_arrays_only(params, "only float arrays can be cast to float16")
    with np.errstate(over="ignore"):
        return {key: np.array(value, dtype=np.float16) for key, value in params.items()}


@right("019", "np.empty float16 filled by assignment")
def half_into_empty(params):
    """A float16 array from np.empty, filled by assignment (the assignment rounds each value)."""
    _float_arrays_only(params, "only float arrays can be cast to float16")
    half = {}
    for key, value in params.items():
        out = np.empty(value.shape, dtype=np.float16)
        with np.errstate(over="ignore"):
            out[...] = value
        half[key] = out
    return half


@right("019", "np.copy, then astype(copy=False)")
def half_copy_then_cast(params):
    """Copy first (np.copy), then astype(copy=False): the copy is always new, the cast never aliases the input."""
    for key in params:
        if not np.issubdtype(params[key].dtype, np.floating):
            raise TypeError(f"params[{key!r}] has dtype {params[key].dtype}")
    out = {}
    with np.errstate(over="ignore"):
        for key in params:
            out[key] = np.copy(params[key]).astype(np.float16, copy=False)
    return out


# 020 make_master_params ---------------------------------------------------------------------------

@wrong("020", "a .view(np.float32) of the bytes, not a conversion")
def master_by_view(params):
    """020 wrong: ``.view`` reinterprets the bytes instead of converting them to float32."""
    _float_arrays_only(params, "master weights are made from float arrays")
    return {key: value.view(np.float32).copy() for key, value in params.items()}


@wrong("020", "np.float32(x): the input itself when it is float32")
def master_by_np_float32(params):
    """np.float32(x) for each tensor: the input itself when it is float32 already (an alias, not a copy)."""
    return {key: np.float32(value) for key, value in params.items()}


@wrong("020", "unsigned ints converted silently")
def master_refusing_signed_ints_only(params):
    """020 wrong: only dtype kinds 'i' and 'b' refused, so unsigned ints are converted silently."""
    _refuse_signed_ints(params)
    return {key: value.astype(np.float32) for key, value in params.items()}


@right("020", "np.array with the dtype")
def master_with_np_array(params):
    _float_arrays_only(params, "master weights are made from float arrays")
    return {key: np.array(value, dtype=np.float32) for key, value in params.items()}


@right("020", "np.empty float32 filled with np.copyto")
def master_with_copyto(params):
    """np.empty float32 arrays filled with np.copyto (a same-kind cast)."""
    _float_arrays_only(params, "master weights are made from float arrays")
    master = {key: np.empty(value.shape, dtype=np.float32) for key, value in params.items()}
    for key in master:
        np.copyto(master[key], params[key])
    return master


# 021 scale_loss -----------------------------------------------------------------------------------

def _positive_finite_scale(loss_scale):
    if not np.isfinite(loss_scale) or loss_scale <= 0:
        raise ValueError(f"loss_scale must be positive and finite, got {loss_scale}")


@wrong("021", "the scaled loss left a NumPy float32")
def scale_loss_numpy_float(loss, d_out, loss_scale):
    """021 wrong in form: the scaled loss left a NumPy float32 (the contract promises a Python float)."""
    _positive_finite_scale(loss_scale)
    with np.errstate(over="ignore"):
        scaled = (d_out.astype(np.float32) * np.float32(loss_scale)).astype(np.float16)
    return np.float32(loss) * np.float32(loss_scale), scaled


@wrong("021", "d_out scaled in its own float16")
def scale_in_the_inputs_dtype(loss, d_out, loss_scale):
    """021 wrong: d_out * S in d_out's own dtype: a float16 d_out overflows where float32's product would not."""
    _positive_finite_scale(loss_scale)
    with np.errstate(over="ignore", invalid="ignore"):
        return float(loss) * loss_scale, (d_out * loss_scale).astype(np.float16)


@wrong("021", "the loss rounded to float16 first")
def scale_loss_rounded_to_half(loss, d_out, loss_scale):
    """021 wrong: the loss rounded to float16 before it is scaled."""
    _positive_finite_scale(loss_scale)
    with np.errstate(over="ignore"):
        scaled = (d_out.astype(np.float32) * np.float32(loss_scale)).astype(np.float16)
    return float(np.float16(loss)) * loss_scale, scaled


@wrong("021", "products clipped to float16's range (no inf for the scaler to find)")
def scale_loss_clipped(loss, d_out, loss_scale):
    """021 wrong: the float32 products clipped to +-65504 before the cast: an overflow no longer shows as inf,
    so the step that should be skipped is taken."""
    _positive_finite_scale(loss_scale)
    scaled = np.clip(d_out.astype(np.float32) * np.float32(loss_scale), -65504, 65504).astype(np.float16)
    return float(loss) * loss_scale, scaled


@right("021", "the loss multiplied in float32 too")
def scale_loss_all_in_float32(loss, d_out, loss_scale):
    """The loss and d_out both multiplied in float32 (float64's loss * S within the lesson's rtol of 1e-6)."""
    _positive_finite_scale(loss_scale)
    scale32 = np.float32(loss_scale)
    with np.errstate(over="ignore"):
        scaled = (d_out.astype(np.float32) * scale32).astype(np.float16)
    return float(np.float32(loss) * scale32), scaled


@right("021", "np.multiply with dtype=np.float32")
def scale_loss_with_multiply_dtype(loss, d_out, loss_scale):
    _positive_finite_scale(loss_scale)
    with np.errstate(over="ignore"):
        scaled = np.multiply(d_out, loss_scale, dtype=np.float32).astype(np.float16)
    return float(loss) * float(loss_scale), scaled


@right("021", "a loop over the entries, each product a np.float32")
def scale_loss_loop(loss, d_out, loss_scale):
    """A loop over the entries, each product a np.float32, stored into a float16 array."""
    if not 0 < loss_scale < math.inf:  # NaN fails both comparisons
        raise ValueError(f"loss_scale must be positive and finite, got {loss_scale}")
    scale32 = np.float32(loss_scale)
    scaled = np.empty(d_out.shape, dtype=np.float16)
    with np.errstate(over="ignore"):
        for index in np.ndindex(d_out.shape):
            scaled[index] = np.float32(d_out[index]) * scale32
    return float(loss) * float(loss_scale), scaled


# 022 unscale_gradients ----------------------------------------------------------------------------

@wrong("022", "the caller's dict updated and handed back")
def unscale_into_callers_dict(grads, loss_scale):
    """022 wrong: the caller's dict updated (its arrays replaced) and handed back."""
    _positive_finite_scale(loss_scale)
    for key in list(grads):
        grads[key] = grads[key].astype(np.float32) / np.float32(loss_scale)
    return grads


@right("022", "np.divide with dtype=np.float32")
def unscale_with_divide_dtype(grads, loss_scale):
    _positive_finite_scale(loss_scale)
    return {key: np.divide(value, loss_scale, dtype=np.float32) for key, value in grads.items()}


@right("022", "divided in float64, the quotient rounded to float32")
def unscale_in_float64(grads, loss_scale):
    """Divided in float64 (the float16/float32 values are exact there), the quotient rounded to float32."""
    if not (math.isfinite(loss_scale) and loss_scale > 0):
        raise ValueError(f"loss_scale must be positive and finite, got {loss_scale}")
    unscaled = {}
    for key, value in grads.items():
        unscaled[key] = (value.astype(np.float64) / float(loss_scale)).astype(np.float32)
    return unscaled


@right("022", "multiplied by the float32 reciprocal (GradScaler's inv_scale)")
def unscale_by_reciprocal(grads, loss_scale):
    """Multiplied by the float32 reciprocal of S, as PyTorch's GradScaler unscales (inv_scale)."""
    if not (math.isfinite(loss_scale) and loss_scale > 0):
        raise ValueError(f"loss_scale must be positive and finite, got {loss_scale}")
    inv_scale = np.float32(1.0 / loss_scale)
    return {key: value.astype(np.float32) * inv_scale for key, value in grads.items()}


# 023 has_non_finite_gradients ---------------------------------------------------------------------

@wrong("023", "each array's sum checked (a finite sum can overflow)")
def non_finite_by_sums(grads):
    """023 wrong: each array's sum looked at (a sum of finite float16 values can overflow to inf)."""
    return any(not np.isfinite(value.sum()) for value in grads.values())


@wrong("023", "a NumPy bool from np.any")
def non_finite_numpy_bool(grads):
    """023 wrong in form: np.any hands back a NumPy bool (the contract promises a Python bool)."""
    return np.any([~np.isfinite(value).all() for value in grads.values()])


@wrong("023", "cast to float16 before the check")
def non_finite_in_half(grads):
    """023 wrong: the gradients cast to float16 first: a finite float32 value above 65504 counts as inf."""
    with np.errstate(over="ignore"):
        return any(not np.isfinite(value.astype(np.float16)).all() for value in grads.values())


@wrong("023", "|g| <= 65504 taken for finite")
def non_finite_beyond_half_max(grads):
    """023 wrong: |g| <= 65504 (float16's largest) taken for finite, in every dtype."""
    return not all(bool(np.all(np.abs(value) <= np.finfo(np.float16).max)) for value in grads.values())


@right("023", "not all(...) over the arrays")
def non_finite_with_all(grads):
    return not all(np.isfinite(value).all() for value in grads.values())


@right("023", "|g| <= finfo(dtype).max, a loop with an early return")
def non_finite_against_finfo(grads):
    """A loop with an early return: |g| <= finfo(dtype).max is False exactly for inf, -inf and NaN."""
    for value in grads.values():
        largest = np.finfo(value.dtype).max
        if not (np.abs(value) <= largest).all():
            return True
    return False


@right("023", "np.isnan and np.isinf separately")
def non_finite_isnan_or_isinf(grads):
    """np.isnan and np.isinf looked at separately, any() over each, a Python bool."""
    found = False
    for value in grads.values():
        found = found or bool(np.isnan(value).any()) or bool(np.isinf(value).any())
    return found


# 024 mixed_precision_step -------------------------------------------------------------------------

def _checked_scale(master_params, scaler_state, growth_interval):
    """024's refusals (float32 master weights, an interval of at least 1, a positive finite scale);
    returns the scale."""
    for key, value in master_params.items():
        if value.dtype != np.float32:
            raise TypeError(f"master_params[{key!r}] has dtype {value.dtype}: master weights are float32")
    if growth_interval < 1:
        raise ValueError(f"growth_interval must be at least 1, got {growth_interval}")
    scale = float(scaler_state["scale"])
    if not np.isfinite(scale) or scale <= 0:
        raise ValueError(f"the scale must be positive and finite, got {scale}")
    return scale


def _unscaled_in_float32(g, scale):
    return g.astype(np.float32) / np.float32(scale)


def _scaled_in_float32(d_out, scale):
    return (d_out.astype(np.float32) * np.float32(scale)).astype(np.float16)


def _mixed_step_inline(master_params, X, Y, scaler_state, learning_rate, growth_interval, grows_when,
                       checked=lambda grads: list(grads), unscale=None, scale_up=None):
    """024 without the earlier lessons' functions; ``grows_when(tracker, interval)`` decides growth,
    ``checked(grads)`` names the gradients looked at for inf and NaN (all of them, rightly),
    ``unscale(g, scale)`` gives a float16 gradient unscaled as float32 (None: in float32, rightly), and
    ``scale_up(d_out, scale)`` the loss gradient times S as float16 (None: multiplied in float32, rightly)."""
    unscale = unscale or _unscaled_in_float32  # named in the body, so that a written-out answer carries it
    scale_up = scale_up or _scaled_in_float32
    scale = _checked_scale(master_params, scaler_state, growth_interval)
    with np.errstate(over="ignore", invalid="ignore"):
        half = {key: value.astype(np.float16) for key, value in master_params.items()}
        out, cache = mlp.forward(X.astype(np.float16), half)
        _, d_out = mlp.mse_loss_and_grad(out.astype(np.float32), Y.astype(np.float32))
        scaled = scale_up(d_out, scale)
        grads = {key: unscale(g, scale) for key, g in mlp.backward(scaled, half, cache).items()}
    if not all(np.isfinite(grads[key]).all() for key in checked(grads)):
        return master_params, {"scale": scale * 0.5, "growth_tracker": 0}, True
    tracker = scaler_state["growth_tracker"] + 1
    if grows_when(tracker, growth_interval):
        scale, tracker = scale * 2.0, 0
    return ({key: master_params[key] - learning_rate * grads[key] for key in master_params},
            {"scale": scale, "growth_tracker": tracker}, False)


@wrong("024", "the scale grows one clean step late (tracker > interval)")
def mixed_step_grows_one_step_late(master_params, X, Y, scaler_state, learning_rate, growth_interval=2000):
    """024 wrong: the scale doubles only when the tracker passes the interval (one clean step late)."""
    return _mixed_step_inline(master_params, X, Y, scaler_state, learning_rate, growth_interval,
                              lambda tracker, interval: tracker > interval)


@wrong("024", "only the first layer's gradients checked for inf")
def mixed_step_first_layer_checked(master_params, X, Y, scaler_state, learning_rate, growth_interval=2000):
    """024 wrong: only the first layer's gradients looked at for inf and NaN."""
    return _mixed_step_inline(master_params, X, Y, scaler_state, learning_rate, growth_interval,
                              lambda tracker, interval: tracker == interval, lambda grads: ["W1", "b1"])


@wrong("024", "only the last layer's gradients checked for inf")
def mixed_step_last_layer_checked(master_params, X, Y, scaler_state, learning_rate, growth_interval=2000):
    """024 wrong: only the last layer's gradients looked at for inf and NaN (where an overflow starts)."""
    return _mixed_step_inline(master_params, X, Y, scaler_state, learning_rate, growth_interval,
                              lambda tracker, interval: tracker == interval, lambda grads: list(grads)[-2:])


@wrong("024", "only the weights' gradients checked")
def mixed_step_weights_checked(master_params, X, Y, scaler_state, learning_rate, growth_interval=2000):
    """024 wrong: only the weights' gradients looked at for inf and NaN (a bias gradient, a sum over the
    batch, can overflow alone)."""
    return _mixed_step_inline(master_params, X, Y, scaler_state, learning_rate, growth_interval,
                              lambda tracker, interval: tracker == interval,
                              lambda grads: [key for key in grads if key.startswith("W")])


@wrong("024", "the gradients unscaled in float16, then cast to float32")
def mixed_step_unscaled_in_half(master_params, X, Y, scaler_state, learning_rate, growth_interval=2000):
    """024 wrong: g / S in float16 (S as np.float16): a few units of float16's last place off while S < 65504,
    and every gradient 0 at 2**16, GradScaler's default start, where S itself is inf in float16."""
    return _mixed_step_inline(master_params, X, Y, scaler_state, learning_rate, growth_interval,
                              lambda tracker, interval: tracker == interval,
                              unscale=lambda g, scale: (g / np.float16(scale)).astype(np.float32))


@wrong("024", "the loss gradient scaled in float16 (S = 2**16 is inf there)")
def mixed_step_scaled_in_half(master_params, X, Y, scaler_state, learning_rate, growth_interval=2000):
    """024 wrong: d_out cast to float16 first, then multiplied by S in float16: right while S < 65504, but at
    2**16, GradScaler's default start, S itself is inf and every step is skipped."""
    return _mixed_step_inline(master_params, X, Y, scaler_state, learning_rate, growth_interval,
                              lambda tracker, interval: tracker == interval,
                              scale_up=lambda d_out, scale: d_out.astype(np.float16) * np.float16(scale))


@right("024", "without the earlier lessons' functions")
def mixed_step_without_helpers(master_params, X, Y, scaler_state, learning_rate, growth_interval=2000):
    return _mixed_step_inline(master_params, X, Y, scaler_state, learning_rate, growth_interval,
                              lambda tracker, interval: tracker == interval)


@right("024", "unscaled by the float32 reciprocal, checked key by key")
def mixed_step_reciprocal_unscale(master_params, X, Y, scaler_state, learning_rate, growth_interval=2000):
    """GradScaler's way written out (no earlier lesson's function): unscaled by the float32 reciprocal 1/S,
    checked key by key with an early return, the scale grown when the clean steps reach the interval."""
    scale = _checked_scale(master_params, scaler_state, growth_interval)
    with np.errstate(over="ignore", invalid="ignore"):
        half = {key: value.astype(np.float16) for key, value in master_params.items()}
        out, cache = mlp.forward(X.astype(np.float16), half)
        _, d_out = mlp.mse_loss_and_grad(out.astype(np.float32), Y.astype(np.float32))
        scaled = (np.float32(scale) * d_out).astype(np.float16)
        half_grads = mlp.backward(scaled, half, cache)
    del out, cache, scaled
    inv_scale = np.float32(1.0 / scale)
    grads = {}
    for key, g in half_grads.items():
        grads[key] = g.astype(np.float32) * inv_scale
        if not np.isfinite(grads[key]).all():
            return master_params, {"scale": scale / 2, "growth_tracker": 0}, True
    new_master = {key: master_params[key] - np.float32(learning_rate) * grads[key] for key in master_params}
    clean_steps = scaler_state["growth_tracker"] + 1
    if clean_steps < growth_interval:
        return new_master, {"scale": scale, "growth_tracker": clean_steps}, False
    return new_master, {"scale": scale * 2, "growth_tracker": 0}, False


@right("024", "the update computed in float64, rounded once to float32")
def mixed_step_update_in_float64(master_params, X, Y, scaler_state, learning_rate, growth_interval=2000):
    """The update computed in float64 and rounded to float32 once (the master stays float32); the overflow
    looked for in one pass over every unscaled gradient."""
    if any(value.dtype != np.float32 for value in master_params.values()):
        raise TypeError("the master weights must be float32")
    if not growth_interval >= 1:
        raise ValueError(f"growth_interval must be at least 1, got {growth_interval}")
    scale = float(scaler_state["scale"])
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"the scale must be positive and finite, got {scale}")
    with np.errstate(over="ignore", invalid="ignore"):
        half = {key: np.array(value, dtype=np.float16) for key, value in master_params.items()}
        out, cache = mlp.forward(np.array(X, dtype=np.float16), half)
        _, d_out = mlp.mse_loss_and_grad(np.array(out, dtype=np.float32), np.array(Y, dtype=np.float32))
        scaled_d_out = np.multiply(d_out, scale, dtype=np.float32).astype(np.float16)
        half_grads = mlp.backward(scaled_d_out, half, cache)
        grads = {key: np.divide(g, scale, dtype=np.float32) for key, g in half_grads.items()}
    if not all(np.isfinite(g).all() for g in grads.values()):
        return master_params, {"scale": 0.5 * scale, "growth_tracker": 0}, True
    new_master = {key: (value.astype(np.float64) - learning_rate * grads[key].astype(np.float64)).astype(np.float32)
                  for key, value in master_params.items()}
    tracker = scaler_state["growth_tracker"] + 1
    grown = tracker == growth_interval
    return new_master, {"scale": 2.0 * scale if grown else scale, "growth_tracker": 0 if grown else tracker}, False


# 025 shard_dataset_across_workers -----------------------------------------------------------------

def _check_workers(X, Y, N):
    if N < 1 or len(X) != len(Y) or N > len(X):
        raise ValueError("bad shards")


@wrong("025", "the shards dealt to the ranks in reverse order")
def shard_reversed_ranks(X, Y, num_workers):
    _check_workers(X, Y, num_workers)
    return [(X[r::num_workers], Y[r::num_workers]) for r in reversed(range(num_workers))]


@wrong("025", "shards copied into np.zeros buffers (float64 whatever X's dtype)")
def shard_into_zeros(X, Y, num_workers):
    """Each shard's rows copied into np.zeros buffers (float64, whatever X's dtype)."""
    N = num_workers
    if N < 1 or len(X) != len(Y) or N > len(X):
        raise ValueError("bad input")
    shards = []
    for r in range(N):
        rows = list(range(r, len(X), N))
        Xr, Yr = np.zeros((len(rows), X.shape[1])), np.zeros((len(rows), Y.shape[1]))
        for i, row in enumerate(rows):
            Xr[i], Yr[i] = X[row], Y[row]
        shards.append((Xr, Yr))
    return shards


@wrong("025", "each shard a list")
def shard_as_lists(X, Y, num_workers):
    """025 wrong: each shard a list ``[X_r, Y_r]``, not a tuple."""
    if num_workers < 1 or len(X) != len(Y) or num_workers > len(X):
        raise ValueError(f"cannot shard {len(X)} examples across {num_workers} workers")
    return [[X[r::num_workers], Y[r::num_workers]] for r in range(num_workers)]


@right("025", "a boolean mask of index % N")
def shard_by_index_mask(X, Y, num_workers):
    _check_workers(X, Y, num_workers)
    index = np.arange(len(X))
    return [(X[index % num_workers == r], Y[index % num_workers == r]) for r in range(num_workers)]


@right("025", "rows dealt one by one into lists, np.stack")
def shard_dealt_row_by_row(X, Y, num_workers):
    """The rows dealt one by one like cards into per-worker lists, stacked at the end."""
    if num_workers < 1 or len(X) != len(Y) or num_workers > len(X):
        raise ValueError(f"cannot deal {len(X)} examples (and {len(Y)} targets) to {num_workers} workers")
    hands = [([], []) for _ in range(num_workers)]
    for i in range(len(X)):
        rows, targets = hands[i % num_workers]
        rows.append(X[i])
        targets.append(Y[i])
    return [(np.stack(rows), np.stack(targets)) for rows, targets in hands]


@right("025", "np.take of np.arange(r, B, N)")
def shard_with_take(X, Y, num_workers):
    """np.take of the index runs range(r, B, N) (copies, not views)."""
    if not 1 <= num_workers <= len(X) or len(X) != len(Y):
        raise ValueError(f"cannot deal {len(X)} examples (and {len(Y)} targets) to {num_workers} workers")
    shards = []
    for r in range(num_workers):
        rows = np.arange(r, len(X), num_workers)
        shards.append((np.take(X, rows, axis=0), np.take(Y, rows, axis=0)))
    return shards


# 026 compute_local_gradients ----------------------------------------------------------------------

def _check_shard(X_shard, Y_shard, num_workers):
    if len(X_shard) != len(Y_shard) or len(X_shard) == 0 or num_workers < 1:
        raise ValueError("bad shard")


@wrong("026", "the average shard rounded down (B // N)")
def local_integer_average_shard(params, X_shard, Y_shard, global_batch_size, num_workers):
    _check_shard(X_shard, Y_shard, num_workers)
    loss, grads = mlp.loss_and_grads(X_shard, Y_shard, params)
    weight = len(X_shard) / (global_batch_size // num_workers)  # B // N: the average shard, rounded down
    return float(weight * loss), {key: weight * g for key, g in grads.items()}


@right("026", "the weight applied to the output gradient before backward")
def local_scaled_before_backward(params, X_shard, Y_shard, global_batch_size, num_workers):
    _check_shard(X_shard, Y_shard, num_workers)
    out, cache = mlp.forward(X_shard, params)
    weight = num_workers * len(X_shard) / global_batch_size
    diff = out - Y_shard
    loss = weight * float(np.sum(diff ** 2)) / diff.size
    return loss, mlp.backward(weight * 2.0 * diff / diff.size, params, cache)


@right("026", "one example at a time, the sums times N / B")
def local_one_example_at_a_time(params, X_shard, Y_shard, global_batch_size, num_workers):
    """One example at a time: each example's mean loss and gradients summed, the sums times N / B."""
    if len(X_shard) != len(Y_shard) or len(X_shard) == 0 or num_workers < 1:
        raise ValueError("the shard must be non-empty, X_shard and Y_shard of one length, N >= 1")
    loss_sum, grad_sums = 0.0, {key: np.zeros_like(value) for key, value in params.items()}
    for i in range(len(X_shard)):
        loss, grads = mlp.loss_and_grads(X_shard[i:i + 1], Y_shard[i:i + 1], params)
        loss_sum += loss
        for key in grad_sums:
            grad_sums[key] += grads[key]
    factor = num_workers / global_batch_size
    return float(loss_sum * factor), {key: total * factor for key, total in grad_sums.items()}


# 027 all_reduce_mean ------------------------------------------------------------------------------

def _check_arrays(worker_arrays):
    if not worker_arrays or len({(a.shape, a.dtype) for a in worker_arrays}) > 1:
        raise ValueError("bad worker arrays")


def _everyone_sends_to_everyone(cluster, arrays):
    """One round in which every worker r sends ``arrays[r]`` to every other worker."""
    with cluster.round():
        for src in range(len(arrays)):
            for dst in range(len(arrays)):
                if src != dst:
                    cluster.send(src, dst, arrays[src])


@wrong("027", "everyone sends to everyone (right numbers, N(N - 1) messages)")
def all_to_all_mean(worker_arrays, cluster=None):
    """Everyone sends to everyone, and every worker averages: the right numbers, N(N - 1) messages."""
    from shared.cluster import Cluster
    _check_arrays(worker_arrays)
    N = len(worker_arrays)
    cluster = cluster or Cluster(N)
    _everyone_sends_to_everyone(cluster, worker_arrays)
    results = []
    for dst in range(N):
        total = worker_arrays[dst]
        for src in range(N):
            if src != dst:
                total = total + cluster.receive(dst, src)
        results.append(np.asarray(total / N))  # of 0-d arrays, total / N is a NumPy scalar
    return results, cluster.ledger.summary()


def _stacked_mean_at_the_root(worker_arrays, cluster):
    """027's two rounds, the mean at the root as np.mean of the stacked arrays (in worker 0's dtype)."""
    from shared.cluster import Cluster
    N = len(worker_arrays)
    cluster = cluster or Cluster(N)
    with cluster.round():
        for r in range(1, N):
            cluster.send(r, 0, worker_arrays[r])
    mean = np.mean(np.stack([worker_arrays[0]] + [cluster.receive(0, r) for r in range(1, N)]), axis=0)
    mean = np.asarray(mean).astype(worker_arrays[0].dtype)  # of 0-d arrays, np.mean gives a NumPy scalar
    with cluster.round():
        for r in range(1, N):
            cluster.send(0, r, mean)
    return [mean] + [cluster.receive(r, 0) for r in range(1, N)], cluster.ledger.summary()


@wrong("027", "the dtype of the last worker only compared with worker 0's")
def all_reduce_dtype_checked_against_last(worker_arrays, cluster=None):
    """The naive all-reduce (np.mean at the root); shapes checked for every worker, the dtype only of the
    last against worker 0's."""
    if len(worker_arrays) == 0 or len({a.shape for a in worker_arrays}) > 1 \
            or worker_arrays[-1].dtype != worker_arrays[0].dtype:
        raise ValueError("bad")
    return _stacked_mean_at_the_root(worker_arrays, cluster)


@right("027", "np.mean of the stacked arrays at the root")
def naive_mean_with_stack(worker_arrays, cluster=None):
    _check_arrays(worker_arrays)
    return _stacked_mean_at_the_root(worker_arrays, cluster)


@right("027", "the root sums in place on a copy of its own array")
def naive_mean_in_place(worker_arrays, cluster=None):
    """The root receives everything first, then adds in rank order in place on a copy of its own array
    and divides in place; the broadcast sent from the last rank down."""
    from shared.cluster import Cluster
    if not worker_arrays:
        raise ValueError("no workers")
    for array in worker_arrays:
        if array.shape != worker_arrays[0].shape or array.dtype != worker_arrays[0].dtype:
            raise ValueError("the workers' arrays differ in shape or dtype")
    n = len(worker_arrays)
    if cluster is None:
        cluster = Cluster(n)
    with cluster.round():
        for rank in range(n - 1, 0, -1):
            cluster.send(rank, 0, worker_arrays[rank])
    received = {rank: cluster.receive(0, rank) for rank in range(n - 1, 0, -1)}
    mean = worker_arrays[0].copy()
    for rank in range(1, n):
        mean += received[rank]
    mean /= n
    with cluster.round():
        for rank in range(n - 1, 0, -1):
            cluster.send(0, rank, mean)
    results = [mean] + [cluster.receive(rank, 0) for rank in range(1, n)]
    return results, cluster.ledger.summary()


@right("027", "the root accumulates in float64, the mean cast back before the broadcast")
def naive_mean_wide_accumulator(worker_arrays, cluster=None):
    """The root accumulates in float64 (np.add with dtype), in rank order; the mean is cast back to the
    arrays' dtype before it is broadcast (the same bytes on the wire)."""
    from shared.cluster import Cluster
    _check_arrays(worker_arrays)
    n, dtype = len(worker_arrays), worker_arrays[0].dtype
    cluster = Cluster(n) if cluster is None else cluster
    with cluster.round():
        for r in range(1, n):
            cluster.send(r, 0, worker_arrays[r])
    total = worker_arrays[0].astype(np.float64)
    for r in range(1, n):
        total = np.add(total, cluster.receive(0, r), dtype=np.float64)
    mean = np.asarray(total / n).astype(dtype)  # of 0-d arrays, total / n is a NumPy scalar
    with cluster.round():
        for r in range(1, n):
            cluster.send(0, r, mean)
    return [mean] + [cluster.receive(r, 0) for r in range(1, n)], cluster.ledger.summary()


# 028 ring_all_reduce_mean -------------------------------------------------------------------------

def _ring(worker_arrays, cluster, right, check=True):
    """A ring all-reduce on chunk bounds from divmod; ``right`` False sends to the left neighbour.
    ``check`` False: the caller has checked the input its own way."""
    from shared.cluster import Cluster
    if check:
        _check_arrays(worker_arrays)
    N = len(worker_arrays)
    cluster = cluster or Cluster(N)
    flat = [a.reshape(-1) for a in worker_arrays]
    q, extra = divmod(flat[0].size, N)
    bounds = np.cumsum([0] + [q + (1 if c < extra else 0) for c in range(N)])
    chunks = [[f[bounds[c]:bounds[c + 1]] for c in range(N)] for f in flat]
    step_to = 1 if right else -1
    for phase in ("reduce", "gather"):
        for s in range(N - 1):
            sent = {}
            with cluster.round():
                for r in range(N):
                    c = (r - step_to * s) % N if phase == "reduce" else (r + step_to * (1 - s)) % N
                    sent[(r + step_to) % N] = c
                    cluster.send(r, (r + step_to) % N, chunks[r][c])
            for r in range(N):
                c = sent[r]
                received = cluster.receive(r, (r - step_to) % N)
                chunks[r][c] = chunks[r][c] + received if phase == "reduce" else received
        if phase == "reduce":
            for r in range(N):
                owned = (r + step_to) % N
                chunks[r][owned] = chunks[r][owned] / N
    shape = worker_arrays[0].shape
    return [np.concatenate(chunks[r]).reshape(shape) for r in range(N)], cluster.ledger.summary()


@wrong("028", "the ring turning the other way (to the left neighbour)")
def ring_to_the_left(worker_arrays, cluster=None):
    return _ring(worker_arrays, cluster, right=False)


@wrong("028", "the dtype of the last worker only compared with worker 0's")
def ring_dtype_checked_against_last(worker_arrays, cluster=None):
    """Shapes checked for every worker, the dtype only of the last against worker 0's."""
    if len(worker_arrays) == 0 or len({a.shape for a in worker_arrays}) > 1 \
            or worker_arrays[-1].dtype != worker_arrays[0].dtype:
        raise ValueError("bad")
    return _ring(worker_arrays, cluster, right=True, check=False)


@right("028", "chunk bounds from divmod, no np.array_split")
def ring_with_divmod_bounds(worker_arrays, cluster=None):
    return _ring(worker_arrays, cluster, right=True)


@right("028", "one flat buffer per worker, chunk slices updated in place")
def ring_in_flat_buffers(worker_arrays, cluster=None):
    """Each worker keeps one flat copy of its array and updates chunk slices of it in place (+=, /=, =);
    the chunk bounds from the sizes q + (c < rho)."""
    from shared.cluster import Cluster
    _check_arrays(worker_arrays)
    n, shape = len(worker_arrays), worker_arrays[0].shape
    if cluster is None:
        cluster = Cluster(n)
    buffers = [np.array(a, copy=True).reshape(-1) for a in worker_arrays]
    q, rho = divmod(buffers[0].size, n)
    starts = [c * q + min(c, rho) for c in range(n + 1)]

    def chunk(c):
        return slice(starts[c], starts[c + 1])

    for s in range(n - 1):  # reduce-scatter
        with cluster.round():
            for r in range(n):
                cluster.send(r, (r + 1) % n, buffers[r][chunk((r - s) % n)])
        for r in range(n):
            buffers[r][chunk((r - 1 - s) % n)] += cluster.receive(r, (r - 1) % n)
    for r in range(n):
        buffers[r][chunk((r + 1) % n)] /= n
    for s in range(n - 1):  # all-gather
        with cluster.round():
            for r in range(n):
                cluster.send(r, (r + 1) % n, buffers[r][chunk((r + 1 - s) % n)])
        for r in range(n):
            buffers[r][chunk((r - s) % n)] = cluster.receive(r, (r - 1) % n)
    return [b.reshape(shape) for b in buffers], cluster.ledger.summary()


# 029 data_parallel_train_step ---------------------------------------------------------------------

def _dp_check(X, num_workers):
    if num_workers < 1 or num_workers > len(X):
        raise ValueError("bad num_workers")


@wrong("029", "worker 0's loss returned")
def dp_step_worker_zero_loss(params, X, Y, num_workers, learning_rate, cluster=None):
    _dp_check(X, num_workers)
    replicas, _ = dp_step_by_hand(params, X, Y, num_workers, learning_rate, cluster)
    return replicas, mlp.loss_and_grads(X[0::num_workers], Y[0::num_workers], params)[0]


@wrong("029", "weighted gradients averaged in a loop, no all-reduce on the cluster")
def dp_step_without_helpers(params, X, Y, num_workers, learning_rate, cluster=None):
    """Wrong since grading v3: weighted local gradients and a plain average, one worker at a time, and
    no all-reduce on the cluster (the step's traffic is measured on the cluster the grader passes)."""
    _dp_check(X, num_workers)
    N, B = num_workers, len(X)
    total, loss_total = {key: 0.0 for key in params}, 0.0
    for r in range(N):
        loss, grads = mlp.loss_and_grads(X[r::N], Y[r::N], params)
        weight = N * len(X[r::N]) / B
        loss_total += weight * loss
        total = {key: total[key] + weight * grads[key] for key in params}
    return [{key: params[key] - learning_rate * total[key] / N for key in params} for _ in range(N)], loss_total / N


@right("029", "the local gradients written out in loops, the helper's ring on the cluster")
def dp_step_by_hand(params, X, Y, num_workers, learning_rate, cluster=None):
    """Right: the shards dealt, the weighted local gradients written out in loops, then the helper's ring
    all-reduce of each tensor on the cluster."""
    from shared.cluster import Cluster
    from shared.lesson_blocks import ring_all_reduce_mean
    _dp_check(X, num_workers)
    N, B = num_workers, len(X)
    cluster = Cluster(N) if cluster is None else cluster
    contributions, loss_total = [], 0.0
    for r in range(N):
        loss, grads = mlp.loss_and_grads(X[r::N], Y[r::N], params)
        weight = N * len(X[r::N]) / B
        contributions.append({key: weight * grad for key, grad in grads.items()})
        loss_total += weight * loss
    replicas = [{} for _ in range(N)]
    for key in params:
        averaged, _ = ring_all_reduce_mean([c[key] for c in contributions], cluster)
        for r in range(N):
            replicas[r][key] = params[key] - learning_rate * averaged[r]
    return replicas, float(loss_total / N)


@right("029", "the learner's own ring, the loss as sum(n_r L_r) / B, replicas updated in place")
def dp_step_own_ring_in_place(params, X, Y, num_workers, learning_rate, cluster=None):
    """The learner's own ring (028, flat buffers) per tensor; the loss as sum(n_r L_r) / B; each replica
    updated in place on the array its worker received."""
    from shared.cluster import Cluster
    if num_workers < 1 or num_workers > len(X):
        raise ValueError(f"{num_workers} workers for {len(X)} examples")
    N, B = num_workers, len(X)
    if cluster is None:
        cluster = Cluster(N)
    contributions, weighted_loss = [], 0.0
    for r in range(N):
        X_r, Y_r = X[r::N], Y[r::N]
        loss, grads = mlp.loss_and_grads(X_r, Y_r, params)
        weighted_loss += len(X_r) * loss
        weight = N * len(X_r) / B
        contributions.append({key: weight * g for key, g in grads.items()})
    replicas = [dict() for _ in range(N)]
    for key in params:
        averaged, _ = ring_in_flat_buffers([c[key] for c in contributions], cluster)
        for r in range(N):
            mine = averaged[r]
            mine *= -learning_rate
            mine += params[key]
            replicas[r][key] = mine
    return replicas, float(weighted_loss / B)


# 030 bucket_gradients -----------------------------------------------------------------------------

def _bucket_check(worker_grads, cap):
    if cap <= 0 or not worker_grads:
        raise ValueError("bad buckets")
    first = worker_grads[0]
    if any(g.keys() != first.keys() or any(g[k].shape != first[k].shape for k in first) for g in worker_grads):
        raise ValueError("bad buckets")


def _buckets_by_cumsum(first, cap):
    keys = list(first)[::-1]
    buckets, start = [], 0
    while start < len(keys):
        sizes = np.cumsum([first[k].nbytes for k in keys[start:]])
        fit = max(1, int(np.searchsorted(sizes, cap, side="right")))
        buckets.append(keys[start:start + fit])
        start += fit
    return buckets


def _bucket_with(worker_grads, cap, cluster, order, check=None):
    """030 on the helper's ring: the buckets cut by the cumulative sizes, listed as ``order(buckets)``;
    ``check(worker_grads, cap)`` refuses bad input (``_bucket_check`` when None)."""
    from shared.cluster import Cluster
    from shared.lesson_blocks import ring_all_reduce_mean
    (check or _bucket_check)(worker_grads, cap)
    first = worker_grads[0]
    cluster = cluster or Cluster(len(worker_grads))
    buckets = _buckets_by_cumsum(first, cap)
    averaged = [{} for _ in worker_grads]
    for bucket in order(buckets):
        reduced, _ = ring_all_reduce_mean([np.concatenate([g[k].ravel() for k in bucket]) for g in worker_grads],
                                          cluster)
        for r, buffer in enumerate(reduced):
            pieces = np.split(buffer, np.cumsum([first[k].size for k in bucket])[:-1])
            for k, piece in zip(bucket, pieces):
                averaged[r][k] = piece.reshape(first[k].shape)
    return [{k: a[k] for k in first} for a in averaged], order(buckets), cluster.ledger.summary()


@wrong("030", "the buckets listed from the last filled to the first")
def buckets_listed_last_first(worker_grads, bucket_cap_bytes, cluster=None):
    return _bucket_with(worker_grads, bucket_cap_bytes, cluster, lambda buckets: buckets[::-1])


@wrong("030", "only the last worker's keys and shapes compared with worker 0's")
def buckets_checked_against_last(worker_grads, bucket_cap_bytes, cluster=None):
    """Only the last worker's keys and shapes compared with worker 0's."""
    def checked_against_last(worker_grads, cap):
        if cap <= 0 or not worker_grads:
            raise ValueError("bad")
        first, last = worker_grads[0], worker_grads[-1]
        if first.keys() != last.keys() or any(first[k].shape != last[k].shape for k in first):
            raise ValueError("bad")
    return _bucket_with(worker_grads, bucket_cap_bytes, cluster, lambda buckets: buckets, check=checked_against_last)


@wrong("030", "each bucket a tuple")
def buckets_as_tuples(worker_grads, bucket_cap_bytes, cluster=None):
    """030 wrong: each bucket a tuple of keys, not a list."""
    return _bucket_with(worker_grads, bucket_cap_bytes, cluster, lambda buckets: [tuple(b) for b in buckets])


@right("030", "buckets cut where the cumulative size passes the cap")
def buckets_by_cumsum(worker_grads, bucket_cap_bytes, cluster=None):
    return _bucket_with(worker_grads, bucket_cap_bytes, cluster, lambda buckets: buckets)


@right("030", "buckets by a while loop, the learner's own ring, np.split")
def buckets_with_own_ring(worker_grads, bucket_cap_bytes, cluster=None):
    """Buckets filled by a while loop over the reversed keys (itemsize x size bytes), each all-reduced by
    the learner's own ring (028), cut back with np.split."""
    from shared.cluster import Cluster
    if bucket_cap_bytes <= 0 or len(worker_grads) == 0:
        raise ValueError("a positive cap and at least one worker")
    first = worker_grads[0]
    for grads in worker_grads:
        if set(grads) != set(first) or any(grads[k].shape != first[k].shape for k in first):
            raise ValueError("the workers' gradients differ in keys or shapes")
    if cluster is None:
        cluster = Cluster(len(worker_grads))
    keys = list(first)[::-1]
    buckets, i = [], 0
    while i < len(keys):
        bucket = [keys[i]]
        size = first[keys[i]].size * first[keys[i]].itemsize
        i += 1
        while i < len(keys) and size + first[keys[i]].size * first[keys[i]].itemsize <= bucket_cap_bytes:
            size += first[keys[i]].size * first[keys[i]].itemsize
            bucket.append(keys[i])
            i += 1
        buckets.append(bucket)
    pieces = [{} for _ in worker_grads]
    for bucket in buckets:
        reduced, _ = ring_in_flat_buffers([np.concatenate([g[k].ravel() for k in bucket]) for g in worker_grads],
                                          cluster)
        cuts = list(np.cumsum([first[k].size for k in bucket])[:-1])
        for r, buffer in enumerate(reduced):
            for k, part in zip(bucket, np.split(buffer, cuts)):
                pieces[r][k] = part.reshape(first[k].shape)
    averaged = [{k: mine[k] for k in first} for mine in pieces]
    return averaged, buckets, cluster.ledger.summary()


# 031 init_adam_state ------------------------------------------------------------------------------

@wrong("031", "params * 0.0: NaN where a parameter is inf or NaN")
def init_times_zero(params):
    return {"step": 0, "m": {k: v * 0.0 for k, v in params.items()}, "v": {k: 0.0 * v for k, v in params.items()}}


@wrong("031", "the state without its step")
def init_without_step(params):
    return {"m": {k: np.zeros_like(v) for k, v in params.items()}, "v": {k: np.zeros_like(v) for k, v in params.items()}}


@wrong("031", "m and v as flat vectors")
def init_flat_moments(params):
    size = sum(v.size for v in params.values())
    dtype = next(iter(params.values())).dtype
    return {"step": 0, "m": np.zeros(size, dtype), "v": np.zeros(size, dtype)}


@wrong("031", "m and v one dict of arrays")
def init_moments_one_dict(params):
    """031 wrong: m and v are the same dict of zero arrays (an update of one is an update of the other)."""
    zeros = {key: np.zeros_like(value) for key, value in params.items()}
    return {"step": 0, "m": zeros, "v": zeros}


@right("031", "np.zeros with the dtype, np.full")
def init_zeros_with_dtype(params):
    return {"step": 0, "m": {k: np.zeros(v.shape, dtype=v.dtype) for k, v in params.items()},
            "v": {k: np.full(v.shape, 0, dtype=v.dtype) for k, v in params.items()}}


@right("031", "np.empty filled with 0")
def init_empty_then_filled(params):
    """Right: np.empty arrays of the parameters' shapes and dtypes, filled with 0."""
    state = {"step": 0, "m": {}, "v": {}}
    for moment in ("m", "v"):
        for key, value in params.items():
            array = np.empty(value.shape, dtype=value.dtype)
            array.fill(0)
            state[moment][key] = array
    return state


# 032 partition_optimizer_state --------------------------------------------------------------------

def _check_state(state, num_workers):
    m, v = state["m"], state["v"]
    if m.keys() != v.keys() or any(m[k].shape != v[k].shape for k in m) or not \
            1 <= num_workers <= sum(a.size for a in m.values()):
        raise ValueError("bad partition")


@wrong("032", "the flat vector in sorted key order")
def partition_sorted_keys(state, num_workers):
    """The flat vector in sorted key order (W1, W2, ..., b1, b2, ...) instead of the dict's order."""
    _check_state(state, num_workers)
    keys = sorted(state["m"])
    flat = {moment: np.concatenate([state[moment][k].ravel() for k in keys]) for moment in ("m", "v")}
    return [{"step": state["step"], "m": m.copy(), "v": v.copy()}
            for m, v in zip(np.array_split(flat["m"], num_workers), np.array_split(flat["v"], num_workers))]


@wrong("032", "the shards' step reset to 0")
def partition_step_reset(state, num_workers):
    _check_state(state, num_workers)
    flat = {moment: np.concatenate([a.ravel() for a in state[moment].values()]) for moment in ("m", "v")}
    return [{"step": 0, "m": m.copy(), "v": v.copy()}
            for m, v in zip(np.array_split(flat["m"], num_workers), np.array_split(flat["v"], num_workers))]


@right("032", "views of one flat vector per moment")
def partition_views_of_one_flat(state, num_workers):
    """Views of one new flat vector per moment: the shards together keep the state once (no copy per shard)."""
    _check_state(state, num_workers)
    flat = {moment: np.concatenate([a.ravel() for a in state[moment].values()]) for moment in ("m", "v")}
    return [{"step": state["step"], "m": m, "v": v}
            for m, v in zip(np.array_split(flat["m"], num_workers), np.array_split(flat["v"], num_workers))]


@right("032", "bounds from divmod, np.array copies")
def partition_divmod_loop(state, num_workers):
    _check_state(state, num_workers)
    flat_m = np.concatenate([a.reshape(-1) for a in state["m"].values()])
    flat_v = np.concatenate([a.reshape(-1) for a in state["v"].values()])
    q, extra = divmod(flat_m.size, num_workers)
    shards, start = [], 0
    for r in range(num_workers):
        stop = start + q + (1 if r < extra else 0)
        shards.append({"step": state["step"], "m": np.array(flat_m[start:stop]), "v": np.array(flat_v[start:stop])})
        start = stop
    return shards


# 033 local_shard_adam_update ----------------------------------------------------------------------

def _check_update(param_shard, grad_shard, state_shard, learning_rate, beta1, beta2):
    if learning_rate <= 0 or not 0 <= beta1 < 1 or not 0 <= beta2 < 1 or grad_shard.shape != param_shard.shape \
            or state_shard["m"].shape != param_shard.shape or state_shard["v"].shape != param_shard.shape:
        raise ValueError("bad update")


@wrong("033", "eps added before v's bias correction (the paper's 'efficient' form)")
def adam_eps_before_correction(param_shard, grad_shard, state_shard, learning_rate, beta1=0.9, beta2=0.999,
                               eps=1e-8):
    """The Adam paper's "efficient" ordering: eps added to sqrt(v) before the bias correction of v."""
    _check_update(param_shard, grad_shard, state_shard, learning_rate, beta1, beta2)
    t = state_shard["step"] + 1
    m = beta1 * state_shard["m"] + (1 - beta1) * grad_shard
    v = beta2 * state_shard["v"] + (1 - beta2) * grad_shard ** 2
    step_size = learning_rate * np.sqrt(1 - beta2 ** t) / (1 - beta1 ** t)
    return param_shard - step_size * m / (np.sqrt(v) + eps), {"step": t, "m": m, "v": v}


@wrong("033", "the step count not advanced in the new state")
def adam_step_not_advanced(param_shard, grad_shard, state_shard, learning_rate, beta1=0.9, beta2=0.999, eps=1e-8):
    _check_update(param_shard, grad_shard, state_shard, learning_rate, beta1, beta2)
    t = state_shard["step"] + 1
    m = beta1 * state_shard["m"] + (1 - beta1) * grad_shard
    v = beta2 * state_shard["v"] + (1 - beta2) * grad_shard ** 2
    new = param_shard - learning_rate * (m / (1 - beta1 ** t)) / (np.sqrt(v / (1 - beta2 ** t)) + eps)
    return new, {"step": state_shard["step"], "m": m, "v": v}


@right("033", "torch.optim.Adam's arithmetic, on copies")
def adam_pytorch_style(param_shard, grad_shard, state_shard, learning_rate, beta1=0.9, beta2=0.999, eps=1e-8):
    """torch.optim.Adam's arithmetic (step size lr / bias_correction1, denominator sqrt(v) / sqrt(bc2) + eps),
    on copies."""
    import math
    _check_update(param_shard, grad_shard, state_shard, learning_rate, beta1, beta2)
    t = state_shard["step"] + 1
    m = state_shard["m"].copy()
    v = state_shard["v"].copy()
    m *= beta1
    m += (1 - beta1) * grad_shard
    v *= beta2
    v += (1 - beta2) * grad_shard * grad_shard
    denominator = np.sqrt(v) / math.sqrt(1 - beta2 ** t) + eps
    return param_shard - (learning_rate / (1 - beta1 ** t)) * (m / denominator), {"step": t, "m": m, "v": v}


@right("033", "a loop over elements")
def adam_loop(param_shard, grad_shard, state_shard, learning_rate, beta1=0.9, beta2=0.999, eps=1e-8):
    _check_update(param_shard, grad_shard, state_shard, learning_rate, beta1, beta2)
    t = state_shard["step"] + 1
    new, m, v = np.empty_like(param_shard), np.empty_like(param_shard), np.empty_like(param_shard)
    for i in np.ndindex(param_shard.shape):
        m[i] = beta1 * state_shard["m"][i] + (1 - beta1) * grad_shard[i]
        v[i] = beta2 * state_shard["v"][i] + (1 - beta2) * grad_shard[i] * grad_shard[i]
        new[i] = param_shard[i] - learning_rate * (m[i] / (1 - beta1 ** t)) / (np.sqrt(v[i] / (1 - beta2 ** t)) + eps)
    return new, {"step": t, "m": m, "v": v}


# 034 all_gather_param_shards ----------------------------------------------------------------------

def _check_shards(param_shards):
    if not param_shards or len({s.dtype for s in param_shards}) > 1 or any(s.ndim != 1 for s in param_shards):
        raise ValueError("bad shards")


def _ring_all_gather(shards, cluster, towards):
    """The ring all-gather's N - 1 rounds: each worker r passes on the shard it received last to worker
    r + towards (1: the right neighbour, -1: the left). Returns each worker's list of N slots, shard q
    in slot q."""
    n = len(shards)
    held = [[shards[r] if q == r else None for q in range(n)] for r in range(n)]
    for step in range(n - 1):
        with cluster.round():
            for r in range(n):
                cluster.send(r, (r + towards) % n, held[r][(r - towards * step) % n])
        for r in range(n):
            held[r][(r - towards * (step + 1)) % n] = cluster.receive(r, (r - towards) % n)
    return held


@wrong("034", "the ring turning the other way (to the left neighbour)")
def gather_to_the_left(param_shards, cluster=None):
    """The ring turning the other way: worker r sends to r - 1."""
    from shared.cluster import Cluster
    _check_shards(param_shards)
    cluster = cluster or Cluster(len(param_shards))
    held = _ring_all_gather(param_shards, cluster, towards=-1)
    return [np.concatenate(mine) for mine in held], cluster.ledger.summary()


@wrong("034", "everyone sends its shard to everyone in one round")
def gather_all_to_all(param_shards, cluster=None):
    """Every worker sends its shard to every other in one round: the right vectors, other traffic."""
    from shared.cluster import Cluster
    _check_shards(param_shards)
    cluster = cluster or Cluster(len(param_shards))
    _everyone_sends_to_everyone(cluster, param_shards)
    vectors, n = [], len(param_shards)
    for dst in range(n):
        pieces = [param_shards[dst].copy() if src == dst else cluster.receive(dst, src) for src in range(n)]
        vectors.append(np.concatenate(pieces))
    return vectors, cluster.ledger.summary()


@wrong("034", "the dtype of the last shard only compared with worker 0's")
def gather_dtype_checked_against_last(param_shards, cluster=None):
    """Every shard checked to be 1-D, the dtype only of the last against worker 0's."""
    from shared.cluster import Cluster
    if not param_shards or any(s.ndim != 1 for s in param_shards) or param_shards[-1].dtype != param_shards[0].dtype:
        raise ValueError("bad")
    cluster = cluster or Cluster(len(param_shards))
    held = _ring_all_gather(param_shards, cluster, towards=1)
    return [np.concatenate(mine) for mine in held], cluster.ledger.summary()


@right("034", "a list of N slots per worker")
def gather_slots(param_shards, cluster=None):
    """The ring, each worker filling a list of N slots as the shards arrive."""
    from shared.cluster import Cluster
    _check_shards(param_shards)
    cluster = cluster or Cluster(len(param_shards))
    slots = _ring_all_gather(param_shards, cluster, towards=1)
    return [np.concatenate(mine) for mine in slots], cluster.ledger.summary()


@right("034", "each worker's whole vector preallocated, shards written at their offsets")
def gather_into_preallocated(param_shards, cluster=None):
    """Each worker allocates its whole vector up front and writes every shard at its offset; it forwards
    slices of that vector."""
    from shared.cluster import Cluster
    if len(param_shards) == 0:
        raise ValueError("no shards")
    for shard in param_shards:
        if shard.ndim != 1:
            raise ValueError(f"a shard of shape {shard.shape} is not 1-D")
        if shard.dtype != param_shards[0].dtype:
            raise ValueError("the shards differ in dtype")
    n = len(param_shards)
    if cluster is None:
        cluster = Cluster(n)
    offsets = [0]
    for shard in param_shards:
        offsets.append(offsets[-1] + len(shard))
    vectors = []
    for r in range(n):
        vector = np.empty(offsets[-1], dtype=param_shards[0].dtype)
        vector[offsets[r]:offsets[r + 1]] = param_shards[r]
        vectors.append(vector)
    for s in range(n - 1):
        with cluster.round():
            for r in range(n):
                q = (r - s) % n
                cluster.send(r, (r + 1) % n, vectors[r][offsets[q]:offsets[q + 1]])
        for r in range(n):
            q = (r - 1 - s) % n
            vectors[r][offsets[q]:offsets[q + 1]] = cluster.receive(r, (r - 1) % n)
    return vectors, cluster.ledger.summary()


# 035 zero_optimizer_step --------------------------------------------------------------------------

def _ring_reduce_scatter(chunks, cluster):
    """The ring reduce-scatter's N - 1 rounds on each worker's list of N chunks (``chunks[r][c]``), summed
    in place: afterwards worker r holds the whole sum of chunk r in ``chunks[r][r]``."""
    n = len(chunks)
    for s in range(n - 1):
        with cluster.round():
            for r in range(n):
                cluster.send(r, (r + 1) % n, chunks[r][(r - 1 - s) % n])
        for r in range(n):
            c = (r - 2 - s) % n
            chunks[r][c] = chunks[r][c] + cluster.receive(r, (r - 1) % n)


def _zero_inline(params, worker_grads, worker_states, learning_rate, beta1, beta2, eps, cluster, *, local=False,
                 order=None):
    """The ZeRO step without the earlier lessons' functions: ring reduce-scatter, PyTorch-style Adam, ring
    all-gather.  ``local``: each worker steps with its own gradient (no reduce-scatter, no traffic for it);
    ``order``: the order in which the vector is cut back into tensors."""
    from shared.cluster import Cluster
    n, total = len(worker_grads), sum(value.size for value in params.values())
    if not 1 <= n <= total or len(worker_states) != n or any(
            g.keys() != params.keys() or any(g[k].shape != params[k].shape for k in params) for g in worker_grads):
        raise ValueError("bad step")
    cluster = cluster or Cluster(n)
    keys = list(params)
    chunks = [np.array_split(np.concatenate([g[k].reshape(-1) for k in keys]), n) for g in worker_grads]
    if local:
        means = [chunks[r][r] for r in range(n)]
    else:
        _ring_reduce_scatter(chunks, cluster)
        means = [chunks[r][r] / n for r in range(n)]
    flat = np.array_split(np.concatenate([params[k].reshape(-1) for k in keys]), n)
    shards, states = [], []
    for r in range(n):
        shard, state = adam_pytorch_style(flat[r], means[r], worker_states[r], learning_rate, beta1, beta2, eps)
        shards.append(shard)
        states.append(state)
    vectors, traffic = gather_slots(shards, cluster)
    sizes = {k: params[k].size for k in keys}
    cut = order(keys) if order else keys
    worker_params = []
    for vector in vectors:
        pieces = np.split(vector, np.cumsum([sizes[k] for k in cut])[:-1])
        mine = {k: piece.reshape(params[k].shape) for k, piece in zip(cut, pieces)}
        worker_params.append({k: mine[k] for k in keys})
    return worker_params, states, traffic


@wrong("035", "each worker steps with its own gradient (no reduce-scatter)")
def zero_own_gradient(params, worker_grads, worker_states, learning_rate, beta1=0.9, beta2=0.999, eps=1e-8,
                      cluster=None):
    return _zero_inline(params, worker_grads, worker_states, learning_rate, beta1, beta2, eps, cluster, local=True)


@wrong("035", "the vector cut back into tensors in reverse key order")
def zero_cut_in_reverse(params, worker_grads, worker_states, learning_rate, beta1=0.9, beta2=0.999, eps=1e-8,
                        cluster=None):
    return _zero_inline(params, worker_grads, worker_states, learning_rate, beta1, beta2, eps, cluster,
                        order=lambda keys: keys[::-1])


@right("035", "without the earlier lessons' functions (PyTorch-style Adam inline)")
def zero_without_helpers(params, worker_grads, worker_states, learning_rate, beta1=0.9, beta2=0.999, eps=1e-8,
                         cluster=None):
    return _zero_inline(params, worker_grads, worker_states, learning_rate, beta1, beta2, eps, cluster)


@right("035", "flat reduce-scatter buffers, the helper's Adam, the learner's own all-gather")
def zero_flat_buffers_own_gather(params, worker_grads, worker_states, learning_rate, beta1=0.9, beta2=0.999,
                                 eps=1e-8, cluster=None):
    """The reduce-scatter in one flat buffer per worker (chunk slices updated in place), the helper's
    local_shard_adam_update, the learner's own all-gather (034, preallocated vectors), np.split to cut."""
    from shared.cluster import Cluster
    from shared.lesson_blocks import local_shard_adam_update
    n = len(worker_grads)
    total = sum(value.size for value in params.values())
    if n == 0 or n > total:
        raise ValueError(f"{n} workers for {total} parameter elements")
    for grads in worker_grads:
        if grads.keys() != params.keys() or any(grads[k].shape != params[k].shape for k in params):
            raise ValueError("a worker's gradients differ from the parameters in keys or shapes")
    if len(worker_states) != n:
        raise ValueError(f"{len(worker_states)} state shards for {n} workers")
    if cluster is None:
        cluster = Cluster(n)
    q, rho = divmod(total, n)
    starts = [c * q + min(c, rho) for c in range(n + 1)]
    buffers = [np.concatenate([g[k].ravel() for k in params]) for g in worker_grads]
    for s in range(n - 1):
        with cluster.round():
            for r in range(n):
                c = (r - 1 - s) % n
                cluster.send(r, (r + 1) % n, buffers[r][starts[c]:starts[c + 1]])
        for r in range(n):
            c = (r - 2 - s) % n
            buffers[r][starts[c]:starts[c + 1]] += cluster.receive(r, (r - 1) % n)
    flat_params = np.concatenate([value.ravel() for value in params.values()])
    new_shards, new_states = [], []
    for r in range(n):
        mean = buffers[r][starts[r]:starts[r + 1]] / n
        shard, state = local_shard_adam_update(flat_params[starts[r]:starts[r + 1]], mean, worker_states[r],
                                               learning_rate, beta1, beta2, eps)
        new_shards.append(shard)
        new_states.append(state)
    del buffers
    vectors, traffic = gather_into_preallocated(new_shards, cluster)
    cuts = list(np.cumsum([value.size for value in params.values()])[:-1])
    worker_params = []
    for vector in vectors:
        parts = np.split(vector, cuts)
        worker_params.append({k: part.reshape(params[k].shape) for k, part in zip(params, parts)})
    return worker_params, new_states, traffic


@right("035", "adam inline, the bias corrections folded into the step size and eps")
def zero_adam_step_size_folded(params, worker_grads, worker_states, learning_rate, beta1=0.9, beta2=0.999,
                               eps=1e-8, cluster=None):
    """Adam inline with the bias corrections folded into the step size, lr sqrt(1 - b2^t) / (1 - b1^t), and
    eps sqrt(1 - b2^t) beside sqrt(v) (the contract's formula, rearranged exactly); the reduce-scatter on
    np.array_split chunks; the helper's all-gather."""
    from shared.cluster import Cluster
    from shared.lesson_blocks import all_gather_param_shards
    if not learning_rate > 0 or not 0 <= beta1 < 1 or not 0 <= beta2 < 1:
        raise ValueError("learning_rate > 0 and beta1, beta2 in [0, 1)")
    n = len(worker_grads)
    sizes = [value.size for value in params.values()]
    if not 1 <= n <= sum(sizes):
        raise ValueError(f"{n} workers for {sum(sizes)} parameter elements")
    if any(g.keys() != params.keys() or any(g[k].shape != params[k].shape for k in params) for g in worker_grads):
        raise ValueError("a worker's gradients differ from the parameters in keys or shapes")
    shards = np.array_split(np.concatenate([value.ravel() for value in params.values()]), n)
    if len(worker_states) != n or any(state["m"].shape != shard.shape or state["v"].shape != shard.shape
                                      for state, shard in zip(worker_states, shards)):
        raise ValueError("worker_states must be the N state shards of these parameters")
    if cluster is None:
        cluster = Cluster(n)
    chunks = [np.array_split(np.concatenate([g[k].ravel() for k in params]), n) for g in worker_grads]
    _ring_reduce_scatter(chunks, cluster)
    new_shards, new_states = [], []
    for r in range(n):
        g = chunks[r][r] / n
        t = worker_states[r]["step"] + 1
        m = beta1 * worker_states[r]["m"] + (1 - beta1) * g
        v = beta2 * worker_states[r]["v"] + (1 - beta2) * (g * g)
        root_c2 = math.sqrt(1 - beta2 ** t)
        step_size = learning_rate * root_c2 / (1 - beta1 ** t)
        new_shards.append(shards[r] - step_size * m / (np.sqrt(v) + eps * root_c2))
        new_states.append({"step": t, "m": m, "v": v})
    del chunks
    vectors, traffic = all_gather_param_shards(new_shards, cluster)
    worker_params = []
    for vector in vectors:
        mine, start = {}, 0
        for key, value in params.items():
            mine[key] = vector[start:start + value.size].reshape(value.shape)
            start += value.size
        worker_params.append(mine)
    return worker_params, new_states, traffic


# 036 compute_param_memory_bytes -------------------------------------------------------------------

def _layout_checks(num_params, dtype, zero_stage, num_workers, rank):
    if dtype not in ("float16", "float32", "float64", "mixed") or num_params < 0 or zero_stage not in (0, 1, 2, 3) \
            or num_workers < 1 or not 0 <= rank < num_workers:
        raise ValueError("bad layout")


@wrong("036", "every worker counted with the longest shard")
def params_ceil_shards(num_params, dtype, zero_stage=0, num_workers=1, rank=0):
    """Every worker counted with the longest shard, ceil(Psi / N)."""
    _layout_checks(num_params, dtype, zero_stage, num_workers, rank)
    size = 2 if dtype == "mixed" else int(dtype[5:]) // 8
    owned = -(-num_params // num_workers)
    return {"parameters": size * (owned if zero_stage == 3 else num_params),
            "gradients": size * (owned if zero_stage >= 2 else num_params)}


@right("036", "n_r as len(range(rank, Psi, N)), the dtype's itemsize")
def params_range_length(num_params, dtype, zero_stage=0, num_workers=1, rank=0):
    """n_r as len(range(rank, Psi, N)): as many elements as the contiguous shard, and the dtype's itemsize."""
    _layout_checks(num_params, dtype, zero_stage, num_workers, rank)
    size = np.dtype("float16" if dtype == "mixed" else dtype).itemsize
    owned = len(range(rank, num_params, num_workers))
    return {"parameters": size * owned if zero_stage == 3 else size * num_params,
            "gradients": size * owned if zero_stage >= 2 else size * num_params}


@right("036", "n_r as the difference of the start offsets")
def params_start_offsets(num_params, dtype, zero_stage=0, num_workers=1, rank=0):
    """n_r as the difference of the shard's start offsets s_(r+1) - s_r, s_r = r q + min(r, rho)."""
    sizes = {"float16": 2, "float32": 4, "float64": 8, "mixed": 2}
    if dtype not in sizes:
        raise ValueError(f"unknown dtype {dtype!r}")
    if num_params < 0 or zero_stage not in (0, 1, 2, 3) or num_workers < 1 or not 0 <= rank < num_workers:
        raise ValueError("num_params >= 0, zero_stage in 0..3, num_workers >= 1 and 0 <= rank < num_workers")
    q, rho = divmod(num_params, num_workers)
    owned = ((rank + 1) * q + min(rank + 1, rho)) - (rank * q + min(rank, rho))
    b = sizes[dtype]
    parameters = b * num_params
    gradients = b * num_params
    if zero_stage >= 2:
        gradients = b * owned
    if zero_stage == 3:
        parameters = b * owned
    return {"parameters": parameters, "gradients": gradients}


@right("036", "n_r as ceil((Psi - r) / N) by floor division")
def params_strided_count(num_params, dtype, zero_stage=0, num_workers=1, rank=0):
    """n_r as ceil((Psi - r) / N) by floor division of negatives (lesson 025's count of a dealt shard, the
    same number as the contiguous shard's); the bytes from np.dtype(...).itemsize."""
    if dtype not in ("float16", "float32", "float64", "mixed"):
        raise ValueError(f"unknown dtype {dtype!r}")
    if num_params < 0:
        raise ValueError("num_params must be at least 0")
    if zero_stage not in range(4):
        raise ValueError("zero_stage must be 0, 1, 2 or 3")
    if num_workers < 1 or rank < 0 or rank >= num_workers:
        raise ValueError("rank must be in [0, num_workers), num_workers >= 1")
    b = np.dtype(np.float16 if dtype == "mixed" else dtype).itemsize
    owned = -((rank - num_params) // num_workers)
    return {"parameters": b * (owned if zero_stage > 2 else num_params),
            "gradients": b * (owned if zero_stage > 1 else num_params)}


# 037 compute_optimizer_memory_bytes ---------------------------------------------------------------

@wrong("037", "the paper's 16 bytes counted as the optimizer's")
def optimizer_sixteen_for_mixed(num_params, dtype, zero_stage=0, num_workers=1, rank=0):
    """The ZeRO paper's 16 bytes counted as the optimizer's (parameters and gradients twice over)."""
    _layout_checks(num_params, dtype, zero_stage, num_workers, rank)
    per = 16 if dtype == "mixed" else 2 * (int(dtype[5:]) // 8)
    owned = num_params // num_workers + (rank < num_params % num_workers)
    return per * (owned if zero_stage else num_params)


@wrong("037", "mixed: the master weights not sharded")
def optimizer_master_unsharded(num_params, dtype, zero_stage=0, num_workers=1, rank=0):
    """037 wrong: in mixed precision the float32 master weights kept whole at stages 1-3 (only m and v sharded)."""
    _layout_checks(num_params, dtype, zero_stage, num_workers, rank)
    owned = num_params // num_workers + (rank < num_params % num_workers)
    if dtype == "mixed":
        return 12 * num_params if zero_stage == 0 else 4 * num_params + 8 * owned
    return 2 * (int(dtype[5:]) // 8) * (owned if zero_stage else num_params)


@right("037", "np.dtype(...).itemsize, n_r from range()")
def optimizer_itemsize(num_params, dtype, zero_stage=0, num_workers=1, rank=0):
    _layout_checks(num_params, dtype, zero_stage, num_workers, rank)
    per = 3 * np.dtype(np.float32).itemsize if dtype == "mixed" else 2 * np.dtype(dtype).itemsize
    return per * (len(range(rank, num_params, num_workers)) if zero_stage >= 1 else num_params)


@right("037", "the state listed tensor by tensor, n_r from divmod")
def optimizer_states_listed(num_params, dtype, zero_stage=0, num_workers=1, rank=0):
    """The state listed tensor by tensor (master, m, v in float32 for mixed; m and v otherwise), summed;
    n_r from divmod."""
    itemsize = {"float16": 2, "float32": 4, "float64": 8}
    if dtype != "mixed" and dtype not in itemsize:
        raise ValueError(f"unknown dtype {dtype!r}")
    if num_params < 0 or zero_stage not in (0, 1, 2, 3) or num_workers < 1 or not 0 <= rank < num_workers:
        raise ValueError("num_params >= 0, zero_stage in 0..3, num_workers >= 1 and 0 <= rank < num_workers")
    state = ["float32", "float32", "float32"] if dtype == "mixed" else [dtype, dtype]
    per_param = sum(itemsize[name] for name in state)
    if zero_stage == 0:
        return per_param * num_params
    q, rho = divmod(num_params, num_workers)
    return per_param * (q + int(rank < rho))


# 038 compute_peak_activation_memory_bytes ---------------------------------------------------------

def _activation_checks(batch_size, width, num_layers, dtype, segment_size, num_micro_batches):
    if dtype not in ("float16", "float32", "float64", "mixed") or min(batch_size, width, num_layers) < 1 \
            or (segment_size is not None and segment_size < 1) or not 1 <= num_micro_batches <= batch_size:
        raise ValueError("bad sizes")


def _activation_bytes(rows, width, num_layers, dtype, segment_size):
    """038's peak for a micro-batch of ``rows`` rows (its wrong answers get the rows wrong, nothing else)."""
    b = 2 if dtype == "mixed" else int(dtype[5:]) // 8
    s = num_layers if segment_size is None else segment_size
    stored = -(-num_layers // s) - 1 + 2 * min(s, num_layers - 1)
    return (stored + 2) * rows * width * b + rows * width + (2 * rows * width if dtype == "mixed" else 0)


@wrong("038", "the micro-batch as B // k rows")
def activations_floor_micro_batch(batch_size, width, num_layers, dtype, segment_size=None, num_micro_batches=1):
    """The micro-batch as B // k rows (the smallest, not the largest)."""
    _activation_checks(batch_size, width, num_layers, dtype, segment_size, num_micro_batches)
    return _activation_bytes(batch_size // num_micro_batches, width, num_layers, dtype, segment_size)


@wrong("038", "the micro-batch rounded to the nearest")
def activations_rounded_micro_batch(batch_size, width, num_layers, dtype, segment_size=None, num_micro_batches=1):
    """038 wrong: the micro-batch as round(B / k) rows (the nearest, not the largest)."""
    _activation_checks(batch_size, width, num_layers, dtype, segment_size, num_micro_batches)
    return _activation_bytes(round(batch_size / num_micro_batches), width, num_layers, dtype, segment_size)


@right("038", "018's formula written out with math.ceil")
def activations_written_out(batch_size, width, num_layers, dtype, segment_size=None, num_micro_batches=1):
    """018's formula written out, without the helper (math.ceil for the segments and the largest micro-batch)."""
    import math
    _activation_checks(batch_size, width, num_layers, dtype, segment_size, num_micro_batches)
    rows = math.ceil(batch_size / num_micro_batches)
    b = {"float16": 2, "float32": 4, "float64": 8, "mixed": 2}[dtype]
    s = num_layers if segment_size is None else segment_size
    arrays = math.ceil(num_layers / s) - 1 + 2 * min(s, num_layers - 1) + 2
    return arrays * rows * width * b + rows * width * (3 if dtype == "mixed" else 1)


@right("038", "the arrays at the peak counted one by one")
def activations_array_by_array(batch_size, width, num_layers, dtype, segment_size=None, num_micro_batches=1):
    """The arrays alive at the peak counted one by one (checkpoints, a segment's Z and A, two gradients, the
    bool mask, mixed precision's float16 X), for ceil(B / k) rows from integer division."""
    if dtype not in ("float16", "float32", "float64", "mixed"):
        raise ValueError(f"unknown dtype {dtype!r}")
    if batch_size < 1 or width < 1 or num_layers < 1 or (segment_size is not None and segment_size < 1):
        raise ValueError("sizes must be at least 1")
    if num_micro_batches < 1 or num_micro_batches > batch_size:
        raise ValueError(f"{num_micro_batches} micro-batches for {batch_size} rows")
    rows = (batch_size + num_micro_batches - 1) // num_micro_batches
    b = np.dtype("float16" if dtype == "mixed" else dtype).itemsize
    one_array = rows * width * b
    segment = num_layers if segment_size is None else segment_size
    checkpoints = (num_layers + segment - 1) // segment - 1       # the inputs of every segment but the first
    segment_arrays = 2 * min(segment, num_layers - 1)             # Z and A of the hidden layers of one segment
    gradients = 2                                                 # the gradient carried and the next one
    peak = (checkpoints + segment_arrays + gradients) * one_array
    peak += rows * width * np.dtype(np.bool_).itemsize             # the ReLU mask Z > 0
    if dtype == "mixed":
        peak += rows * width * np.dtype(np.float16).itemsize       # the float16 copy of the inputs
    return int(peak)


# 039 compare_memory_with_and_without_optimizations ------------------------------------------------

def _compare_written_out(params, X, Y, config, rows_of):
    """039 written out as a bill per row (the four amounts, their sum, the measurement), each row's
    activations for ``rows_of(X, N)`` examples."""
    from shared.lesson_blocks import (compute_optimizer_memory_bytes, compute_param_memory_bytes,
                                      compute_peak_activation_memory_bytes)
    from shared.training import configurations_to_compare, measure_worker_memory
    layers, width = sum(1 for key in params if key.startswith("W")), X.shape[1]
    if any(value.shape[0] != width for key, value in params.items() if key.startswith("W")):
        raise ValueError("a layer's input is not as wide as X")
    if config.num_workers > len(X) or config.num_micro_batches > len(X) // config.num_workers:
        raise ValueError("the configuration does not fit the batch")
    count = sum(value.size for value in params.values())

    def bill(name, row):
        dtype = "mixed" if row.mixed_precision else params["W1"].dtype.name
        held = compute_param_memory_bytes(count, dtype, row.zero_stage, row.num_workers)
        amounts = {"parameters": held["parameters"],
                   "gradients": held["gradients"] * (1 + (row.num_micro_batches > 1) * (1 + row.mixed_precision)),
                   "optimizer": compute_optimizer_memory_bytes(count, dtype, row.zero_stage, row.num_workers),
                   "activations": compute_peak_activation_memory_bytes(rows_of(X, row.num_workers), width, layers,
                                                                       dtype, row.segment_size, row.num_micro_batches)}
        return {"configuration": name, **amounts, "predicted": sum(amounts.values()),
                "measured": measure_worker_memory(params, X, Y, row)}

    return [bill(name, row) for name, row in configurations_to_compare(config)]


@wrong("039", "the last worker's rows")
def compare_last_workers_rows(params, X, Y, config):
    """The last worker's rows counted instead of worker 0's (wrong when N does not divide B)."""
    return _compare_written_out(params, X, Y, config, lambda X, N: len(X[N - 1::N]))


@right("039", "the busiest worker's rows by ceiling division")
def compare_rows_by_ceil(params, X, Y, config):
    """Worker 0's rows counted as the busiest worker's, by ceiling division (right: dealt like cards,
    worker 0 holds ceil(B / N) of B examples)."""
    return _compare_written_out(params, X, Y, config, lambda X, N: -(-len(X) // N))


@right("039", "bytes per number and worker 0's share counted by hand")
def compare_by_bytes_per_number(params, X, Y, config):
    """Right: parameters, gradients and Adam's state counted from bytes per number and worker 0's share
    (np.array_split's first piece holds ceil(Psi / N)), each row's configuration made with TrainingConfig."""
    from shared.training import TrainingConfig, measure_worker_memory
    from shared.lesson_blocks import compute_peak_activation_memory_bytes
    layers, width = sum(1 for key in params if key.startswith("W")), X.shape[1]
    N, k = config.num_workers, config.num_micro_batches
    if any(params[f"W{i}"].shape[0] != width for i in range(1, layers + 1)) or N > len(X) or k > len(X) // N:
        raise ValueError("the configuration does not fit the batch or the MLP")
    psi = sum(value.size for value in params.values())
    own_bytes = params["W1"].dtype.itemsize
    rows = {"none": TrainingConfig(), "accumulation": TrainingConfig(num_micro_batches=k),
            "checkpointing": TrainingConfig(segment_size=config.segment_size),
            "mixed precision": TrainingConfig(mixed_precision=config.mixed_precision),
            "ZeRO": TrainingConfig(num_workers=N, zero_stage=config.zero_stage), "all together": config}
    table = []
    for name, row in rows.items():
        per_number = 2 if row.mixed_precision else own_bytes          # the passes' numbers
        state_per_number = 12 if row.mixed_precision else 2 * own_bytes  # m and v (and the float32 master)
        share = -(-psi // row.num_workers) if row.zero_stage else psi   # worker 0's piece of the state
        running_sum = 0 if row.num_micro_batches == 1 else (4 if row.mixed_precision else own_bytes)
        entry = {"configuration": name, "parameters": psi * per_number,
                 "gradients": psi * (per_number + running_sum), "optimizer": share * state_per_number,
                 "activations": compute_peak_activation_memory_bytes(
                     -(-len(X) // row.num_workers), width, layers, "mixed" if row.mixed_precision
                     else params["W1"].dtype.name, row.segment_size, row.num_micro_batches)}
        entry["predicted"] = sum(entry[key] for key in ("parameters", "gradients", "optimizer", "activations"))
        entry["measured"] = measure_worker_memory(params, X, Y, row)
        table.append(entry)
    return table


# 040 full_distributed_training_loop ---------------------------------------------------------------

def _summed_by_hand(params, X, Y, num_micro_batches, segment_size, loss_scale, *, in_float32):
    """One worker's loss and gradients with the learner's own accumulation: each micro-batch's gradients
    from ``worker_gradients`` on its rows alone, summed in float32 (right) or in their own dtype (float16
    in mixed precision: wrong, n_j * S * g_j overflows), the mean in the gradients' dtype."""
    from shared.training import worker_gradients
    total, loss = {}, 0.0
    for X_j, Y_j in zip(np.array_split(X, num_micro_batches), np.array_split(Y, num_micro_batches)):
        loss_j, grads_j, _ = worker_gradients(params, X_j, Y_j, 1, segment_size, loss_scale)
        dtype = grads_j["W1"].dtype
        with np.errstate(over="ignore", invalid="ignore"):
            for key, grad in grads_j.items():
                weighted = len(X_j) * (grad.astype(np.float32) if in_float32 and dtype == np.float16 else grad)
                total[key] = total[key] + weighted if key in total else weighted
        loss += len(X_j) * loss_j
    with np.errstate(over="ignore", invalid="ignore"):
        return loss / len(X), {key: (value / len(X)).astype(dtype) for key, value in total.items()}, 0


def _loop_written_out(params, X, Y, config, cluster=None, *, scale_after=False, checkpointing=True,
                      accumulation=True, full_state=False, unscale=1, skip_updates_state=False,
                      own_accumulation=None):
    """Lesson 040's loop written out on the helper's blocks (each worker's rows sliced with X[r::N], the steps
    counted with range; the defaults give the right loop), with the ways a learner could get it wrong that
    the catalogue needs:
    ``scale_after`` records the scale each step leaves behind; without ``checkpointing`` or ``accumulation``
    the passes ignore segment_size or num_micro_batches (the same numbers, more activations); with
    ``full_state`` every worker keeps Adam's state (and master weights) of the whole vector under ZeRO,
    gets the whole mean gradient by all-gathering the reduce-scatter's shards (the same messages as the
    parameters' all-gather) and hands back copies of its shard (the same numbers, N times the state)."""
    from shared.cluster import Cluster
    from shared.training import reduce_scatter_mean
    from shared.lesson_blocks import all_gather_param_shards, local_shard_adam_update, ring_all_reduce_mean
    from shared.training import worker_gradients
    N, mixed, zero = config.num_workers, config.mixed_precision, config.zero_stage == 1
    k = config.num_micro_batches if accumulation else 1
    segment = config.segment_size if checkpointing else None
    keys, size = list(params), sum(value.size for value in params.values())
    if len(X) != len(Y) or N > len(X) or config.num_micro_batches > len(X) // N or (zero and N > size):
        raise ValueError("the configuration does not fit the data")
    cluster = Cluster(N) if cluster is None else cluster
    flat = np.concatenate([params[key].ravel() for key in keys])
    bounds = np.cumsum([0] + [len(part) for part in np.array_split(flat, N)])
    owned = [(bounds[r], bounds[r + 1]) if zero else (0, size) for r in range(N)]
    held = [owned[r] if not full_state else (0, size) for r in range(N)]
    dtype = np.float32 if mixed else flat.dtype
    vectors = [flat.astype(np.float16) if mixed else flat + 0 for _ in range(N)]
    masters = [flat[lo:hi].astype(np.float32) for lo, hi in held] if mixed else None
    states = [{"step": 0, "m": np.zeros(hi - lo, dtype), "v": np.zeros(hi - lo, dtype)} for lo, hi in held]

    def tensors(vector):
        sizes = np.cumsum([0] + [params[key].size for key in keys])
        return {key: vector[sizes[i]:sizes[i + 1]].reshape(params[key].shape) for i, key in enumerate(keys)}

    scale, clean = float(config.loss_scale) if mixed else 1.0, 0
    history = {"loss": [], "skipped": [], "loss_scale": []}
    for _ in range(config.steps):
        flat_grads, loss = [], 0.0
        for r in range(N):
            X_r, Y_r = X[r::N], Y[r::N]
            if own_accumulation is None:
                loss_r, grads, _ = worker_gradients(tensors(vectors[r]), X_r, Y_r, k, segment, scale if mixed else None)
            else:
                loss_r, grads, _ = _summed_by_hand(tensors(vectors[r]), X_r, Y_r, k, segment, scale if mixed else None,
                                                   in_float32=own_accumulation == "float32")
            weight = N * len(X_r) / len(X)
            flat_grads.append(np.concatenate([weight * grads[key].ravel() for key in keys]))
            loss += weight * loss_r / N
        with np.errstate(over="ignore", invalid="ignore"):
            if zero:
                means, _ = reduce_scatter_mean(flat_grads, cluster)
                if full_state:
                    means, _ = all_gather_param_shards(means, cluster)
            else:
                means, _ = ring_all_reduce_mean(flat_grads, cluster)
            results = []
            for r in range(N):
                grad = means[r].astype(np.float32) if mixed else means[r]
                for _ in range(unscale if mixed else 0):
                    grad = grad / np.float32(scale)
                lo, hi = held[r]
                results.append(local_shard_adam_update(masters[r] if mixed else vectors[r][lo:hi], grad, states[r],
                                                       config.learning_rate, config.beta1, config.beta2, config.eps))
            new = [updated.astype(np.float16) if mixed else updated for updated, _ in results]
            if zero and not full_state:
                new, _ = all_gather_param_shards(new, cluster)
            skipped = bool(mixed and not all(np.isfinite(vector).all() for vector in new))
        history["loss"].append(float(loss))
        history["skipped"].append(skipped)
        used = scale
        if skipped:
            scale, clean = scale / 2, 0
            if skip_updates_state:  # Adam's moments and the master weights take the non-finite step
                states = [state for _, state in results]
                masters = [updated for updated, _ in results] if mixed else masters
        else:
            vectors, states = new, [state for _, state in results]
            if mixed:
                masters = [updated for updated, _ in results]
                clean += 1
                if clean == config.growth_interval:
                    scale, clean = scale * 2, 0
        history["loss_scale"].append(float(scale if scale_after else used))

    def mine(array, r):  # worker r's own part of what it holds
        lo, hi = owned[r]
        return array[lo:hi].copy() if full_state and zero else array
    workers = [{"parameters": vectors[r], "m": mine(states[r]["m"], r), "v": mine(states[r]["v"], r)}
               for r in range(N)]
    if mixed:
        for r in range(N):
            workers[r]["master"] = mine(masters[r], r)
    final = (np.concatenate(masters) if zero and not full_state else masters[0]) if mixed else vectors[0]
    return {key: value.copy() for key, value in tensors(final).items()}, history, workers


@wrong("040", "the scale after each step recorded")
def loop_scale_after_the_step(params, X, Y, config, cluster=None):
    """The loss scale each step leaves behind recorded, not the one it used."""
    return _loop_written_out(params, X, Y, config, cluster, scale_after=True)


@wrong("040", "the micro-batches' float16 gradients summed in float16")
def loop_summing_micro_batches_in_float16(params, X, Y, config, cluster=None):
    """A learner's own accumulation: each micro-batch's float16 gradients from worker_gradients(k=1),
    summed in float16 (n_j * S * g_j overflows where the mean does not)."""
    return _loop_written_out(params, X, Y, config, cluster, own_accumulation="float16")


@expensive("040", "checkpointing ignored (segment_size not passed on)")
def loop_without_checkpointing(params, X, Y, config, cluster=None):
    """segment_size not passed on: the same numbers, every layer's activations at once."""
    return _loop_written_out(params, X, Y, config, cluster, checkpointing=False)


@expensive("040", "accumulation ignored (num_micro_batches not passed on)")
def loop_without_accumulation(params, X, Y, config, cluster=None):
    """num_micro_batches not passed on: the same numbers (to rounding), the whole shard's activations at once."""
    return _loop_written_out(params, X, Y, config, cluster, accumulation=False)


@expensive("040", "ZeRO's whole state kept on every worker, its shard handed back")
def loop_full_state_on_every_worker(params, X, Y, config, cluster=None):
    """ZeRO's numbers and messages, but every worker keeps Adam's state of the whole vector."""
    return _loop_written_out(params, X, Y, config, cluster, full_state=True)


@right("040", "written out: each worker's rows as X[r::N], the steps with range")
def loop_written_out(params, X, Y, config, cluster=None):
    """Right: each worker's rows sliced with X[r::N], the steps counted with range, the final parameters copied."""
    return _loop_written_out(params, X, Y, config, cluster)


@right("040", "its own micro-batch loop, the gradients summed in float32")
def loop_summing_micro_batches_in_float32(params, X, Y, config, cluster=None):
    """Right: the learner's own accumulation, each micro-batch's gradients from worker_gradients(k=1) summed in
    float32 and the mean rounded to float16 once."""
    return _loop_written_out(params, X, Y, config, cluster, own_accumulation="float32")


@named("040", "written out, not unscaled", "the gradients not unscaled")
def loop_not_unscaled(params, X, Y, config, cluster=None):
    """A learner's own loop that hands Adam the scaled gradients (no unscaling)."""
    return _loop_written_out(params, X, Y, config, cluster, unscale=0)


@named("040", "written out, unscaled twice", "the gradients unscaled twice")
def loop_unscaled_twice(params, X, Y, config, cluster=None):
    """A learner's own loop that divides the loss scale out twice."""
    return _loop_written_out(params, X, Y, config, cluster, unscale=2)


@named("040", "written out, a skipped step's state kept",
       "a skipped step still updates the master weights and moments")
def loop_skip_updates_the_state(params, X, Y, config, cluster=None):
    """A learner's own loop that keeps Adam's moments and master weights of a skipped step."""
    return _loop_written_out(params, X, Y, config, cluster, skip_updates_state=True)
