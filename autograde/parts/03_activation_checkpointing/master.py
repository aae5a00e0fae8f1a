# %% [markdown] part_title="Activation checkpointing"
# # Part 3 · Activation checkpointing: store less, recompute the rest
#
# Gradient accumulation shrinks the batch, but one micro-batch through a deep
# network can still be too much: every layer keeps its activations until
# backward reaches it. **Activation checkpointing** (Chen et al., 2016) keeps
# only the inputs of *segments* of consecutive layers and recomputes each
# segment's activations from its checkpoint when backward needs them. One extra
# forward pass buys memory that grows like $\sqrt{L}$ instead of $L$.
#
# Recomputing the same operations on the same inputs gives the same bits, so
# the gradients are the standard ones. The tests allow a relative error of
# 1e-9, as `einsum` or `np.dot` may add in another order than `@`.
#
# **Goals of this part**
#
# - a forward pass that keeps only segment inputs (015);
# - recompute one segment's activations (016);
# - a backward pass segment by segment, with the standard gradients (017);
# - predict the memory with and without checkpointing (018), and measure it.
#
# The model is the course's MLP (`shared.mlp`): layers
# $1, \dots, L$, parameters `W1, b1, ..., WL, bL`, ReLU after every layer but
# the last. `mlp.forward(X, params)` returns `(out, cache)` with
# `cache = {"A0": X, "Z1": ..., "A1": ..., ..., "Z{L-1}": ..., "A{L-1}": ...}`;
# `mlp.backward(d_out, params, cache)` returns the gradients.
# Stuck? The solved notebook is `solutions/03_activation_checkpointing.ipynb`.

# %% tags=["setup"]
# Set-up (read-only): run this cell first.
import math

import numpy as np
import matplotlib.pyplot as plt

from shared import mlp
from shared.checking import CheckFailure, call, check, check_call, check_equal, check_shape
from shared.checking import check_rules  # the rules for graded code (shared.policy)
from shared.checking import check_memory, check_raises, expect_error
from shared.memory import format_bytes, format_measured, format_ratio, measure_peak_memory
from shared.mistakes import mistakes_of
from shared.notebook import setup_notebook
from shared.plotting import COLORS
from shared.progress import lesson_passed, show_progress

setup_notebook()

# %% tags=["nbval-ignore-output", "demo"]
# The panel is live: it updates as test cells pass or fail (nbval cannot compare a live output).
show_progress("03_activation_checkpointing")

# %% [markdown]
# ## 015 · MLP forward checkpointed
#
# ### Intuition
#
# Cut the $L$ layers into segments of $s$ consecutive layers. Going forward,
# remember only what enters each segment, the **checkpoints**; everything
# inside a segment can be freed once the next layer has used it.
#
# ### Concepts
#
# - Segment $j$ covers layers $js+1, \dots, \min((j+1)s, L)$; its input is
#   $A_{js}$, with $A_0 = X$.
# - `checkpoints`: a dict `{0: X, s: A_s, 2s: A_2s, ...}` keyed by layer index,
#   $\lceil L/s \rceil$ entries. No `Z` or other `A` is kept.
# - The output is exactly `mlp.forward(X, params)[0]`.
#
# ### Math
#
# $$Z_i = A_{i-1} W_i + b_i, \qquad A_i = \operatorname{relu}(Z_i) \;(i < L), \qquad \text{out} = Z_L,$$
#
# $$\text{checkpoints} = \{\, js : A_{js} \;\big|\; j = 0, 1, \dots, \lceil L/s \rceil - 1 \,\}.$$
#
# ### Implementation

# %% tags=["solution"]
def mlp_forward_checkpointed(X, params, segment_size):
    """Forward pass that keeps only the input activation of each segment.

    Args:
        X: (batch, width) input.
        params: the helper MLP's dict "W1", "b1", ..., "WL", "bL".
        segment_size: s >= 1, the number of layers per segment (s >= L means one segment).

    Returns:
        (out, checkpoints): out (batch, out_features), equal to ``mlp.forward(X, params)[0]``;
        checkpoints a dict ``{i: A_i for i in range(0, L, s)}`` with ``A_0 = X``.

    Raises:
        ValueError: if segment_size < 1.
    """
    # Given · checking the input: bookkeeping, written for you (where the checkpoints go is the lesson).
    if segment_size < 1:
        raise ValueError(f"segment_size must be at least 1, got {segment_size}")
    ### BEGIN SOLUTION
    num_layers = mlp.num_layers(params)
    checkpoints = {}
    a = X
    for i in range(1, num_layers + 1):
        if (i - 1) % segment_size == 0:
            checkpoints[i - 1] = a
        z = a @ params[f"W{i}"] + params[f"b{i}"]
        if i < num_layers:
            a = np.maximum(z, 0)
    return z, checkpoints
    ### END SOLUTION

# %% [markdown]
# ### Tests

# %% tags=["tests"]
rng = np.random.default_rng(0)
params6 = mlp.init_params([4, 4, 4, 4, 4, 4, 2], seed=3)         # L = 6 layers of width 4
X6 = rng.standard_normal((5, 4))
out_std, cache_std = mlp.forward(X6, params6)
expected = {0: X6, 2: cache_std["A2"], 4: cache_std["A4"]}
# Close to the last bits (rtol 1e-9): einsum or np.dot may sum in another order than @.
check_call(mlp_forward_checkpointed, {"X": X6, "params": params6, "segment_size": 2},
           (out_std, expected), mistakes=mistakes_of("mlp_forward_checkpointed"), rtol=1e-9, atol=1e-12)
check_call(mlp_forward_checkpointed, {"X": X6, "params": params6, "segment_size": 4},
           (out_std, {0: X6, 4: cache_std["A4"]}), mistakes=mistakes_of("mlp_forward_checkpointed"),
           rtol=1e-9, atol=1e-12)
_, kept = call(mlp_forward_checkpointed, X6, params6, 6, returns=("out", "checkpoints"))
check(list(kept) == [0], f"with one segment only X is kept; got checkpoints at {sorted(kept)}")
for bad in (0, -1):
    check_raises(mlp_forward_checkpointed, {"X": X6, "params": params6, "segment_size": bad}, ValueError,
                 f"segment_size is {bad}")
# The point of the lesson: only the checkpoints are kept. 16 layers in segments of 2 keep 7 arrays
# besides X, in one segment none; allowed: those plus 4 arrays of working space, the (2048, 4) output
# twice (z, then z + b) and 64 KiB for small objects. Keeping every layer's A (15 arrays) is far beyond.
params_mem = mlp.init_params([16] * 16 + [4], seed=6)
X_mem = rng.standard_normal((2048, 16))
for s, stored in ((2, 7), (16, 0)):
    check_memory(mlp_forward_checkpointed, {"X": X_mem, "params": params_mem, "segment_size": s},
                 (stored + 4) * X_mem.nbytes + 2 * 2048 * 4 * 8 + 64 * 1024,
                 "the stored checkpoints plus four activation arrays of working space: keep only each "
                 "segment's input while you go forward (with one segment, only X)")
lesson_passed("015")

# %% [markdown]
# ### Common mistakes
#
# - **A checkpoint that keeps the hidden activations anyway**: storing every
#   $A_i$ gives back all the memory saved.
# - **Storing segment outputs instead of inputs**: backward recomputes a segment
#   *from its input*, so the first checkpoint is $A_0 = X$, not $A_s$.
# - **Storing $Z$ instead of $A$**: the next layer's input is $\operatorname{relu}(Z)$.
#
# ### Checkpoint
#
# Checkpoints are segment inputs, $\lceil L/s \rceil$ of them. *Self-check:* for
# $L = 10$ and $s = 3$, which layer indices are checkpointed, and how many layers
# does the last segment have?

# %% [markdown]
# ## 016 · Recompute block activations
#
# ### Intuition
#
# When backward reaches a segment, it reruns the segment's forward pass from
# its checkpoint, this time keeping everything the segment's backward needs.
# Same operations, same inputs, same order: the same bits.
#
# ### Concepts
#
# - `checkpoint` is $A_{\text{start}}$; the segment covers layers
#   `start_layer + 1 ... end_layer`.
# - Return the segment's slice of the standard cache:
#   `{"A{start}": checkpoint, "Z{i}": ..., "A{i}": ...}` for hidden layers
#   $i = \text{start}+1, \dots, \min(\text{end}, L-1)$. The output layer $L$ is
#   not cached: its backward needs only $A_{L-1}$.
# - Repeat the forward's operations: `a @ W + b`, then `np.maximum(z, 0)`.
#
# ### Math
#
# For $i = \text{start}+1, \dots, \min(\text{end}, L-1)$:
#
# $$Z_i = A_{i-1} W_i + b_i, \qquad A_i = \max(Z_i, 0).$$
#
# ### Implementation

# %% tags=["solution"]
def recompute_block_activations(checkpoint, params, start_layer, end_layer):
    """Recompute the cache of one segment from its checkpoint.

    Args:
        checkpoint: (batch, width) activation A_start, the segment's input.
        params: the helper MLP's dict "W1", "b1", ..., "WL", "bL".
        start_layer: index of the checkpointed activation (the segment's layers start at start_layer + 1).
        end_layer: the segment's last layer (at most L).

    Returns:
        dict with "A{start_layer}" (the checkpoint itself) and, for each hidden layer
        i = start_layer + 1 ... min(end_layer, L - 1), "Z{i}" and "A{i}", equal to
        ``mlp.forward``'s cache entries (bit for bit with ``@``; the tests allow rtol 1e-9).
    """
    ### BEGIN SOLUTION
    last_hidden = min(end_layer, mlp.num_layers(params) - 1)
    cache = {f"A{start_layer}": checkpoint}
    a = checkpoint
    for i in range(start_layer + 1, last_hidden + 1):
        z = a @ params[f"W{i}"] + params[f"b{i}"]
        a = np.maximum(z, 0)
        cache[f"Z{i}"], cache[f"A{i}"] = z, a
    return cache
    ### END SOLUTION

# %% [markdown]
# ### Tests

# %% tags=["tests"]
rng = np.random.default_rng(1)
params5 = mlp.init_params([3, 3, 3, 3, 3, 2], seed=4)           # L = 5
_, cache5 = mlp.forward(rng.standard_normal((4, 3)), params5)
# The middle segment, layers 3 and 4, recomputed from A2:
check_call(recompute_block_activations,
           {"checkpoint": cache5["A2"], "params": params5, "start_layer": 2, "end_layer": 4},
           {key: cache5[key] for key in ("A2", "Z3", "A3", "Z4", "A4")},
           mistakes=mistakes_of("recompute_block_activations"), rtol=1e-9, atol=1e-12)
# The last segment, layers 4 and 5: layer 5 is the output and is not cached.
check_call(recompute_block_activations,
           {"checkpoint": cache5["A3"], "params": params5, "start_layer": 3, "end_layer": 5},
           {key: cache5[key] for key in ("A3", "Z4", "A4")},
           mistakes=mistakes_of("recompute_block_activations"), rtol=1e-9, atol=1e-12)
# The output layer alone (layer 5 from A4): nothing to recompute, but the cache still holds its checkpoint.
check_call(recompute_block_activations,
           {"checkpoint": cache5["A4"], "params": params5, "start_layer": 4, "end_layer": 5},
           {"A4": cache5["A4"]}, mistakes=mistakes_of("recompute_block_activations"), rtol=1e-9, atol=1e-12)
lesson_passed("016")

# %% [markdown]
# ### Common mistakes
#
# - **Recomputing with the wrong parameters**: an off-by-one index picks
#   $W_{i+1}$ for layer $i$; with equal widths the shapes even fit.
# - **Forgetting the ReLU**: the cache then holds $Z$ twice.
# - **Recomputing the output layer too**: backward does not need it; it only
#   costs memory.
#
# ### Checkpoint
#
# Recompute is the forward pass again, segment-sized. *Self-check:* why does
# recomputing give *bitwise* equal arrays here, and what could break that in a
# network with dropout?

# %% [markdown]
# ## 017 · MLP backward checkpointed
#
# ### Intuition
#
# Backward visits segments last to first. For each it recomputes the segment's
# cache from its checkpoint, runs the ordinary backward through the segment,
# and lets the cache go before moving down. Only the checkpoints and *one*
# segment's activations are alive at a time.
#
# ### Concepts
#
# - Layer $i$'s gradients need only its input $A_{i-1}$; no gradient is passed
#   below layer 1.
# - Read the ReLU mask from $A_{i-1}$ itself: $A > 0$ exactly where $Z > 0$.
#   This matters at a segment's first layer, whose $Z_{\text{start}}$ belongs to
#   the segment below, while $A_{\text{start}}$ is the checkpoint in hand.
#
# ### Math
#
# For segments $j = \lceil L/s \rceil - 1, \dots, 0$, with start $= js$ and
# end $= \min(\text{start} + s, L)$, and $i = \text{end}, \dots, \text{start}+1$:
#
# $$\frac{\partial L}{\partial W_i} = A_{i-1}^{\top}\delta_i, \qquad
# \frac{\partial L}{\partial b_i} = \mathbf 1^{\top}\delta_i, \qquad
# \delta_{i-1} = \left(\delta_i W_i^{\top}\right) \odot \mathbb{1}[A_{i-1} > 0], \qquad \delta_L = \frac{\partial L}{\partial\, \text{out}} .$$
#
# ### Implementation

# %% tags=["solution"]
def mlp_backward_checkpointed(d_out, params, checkpoints, segment_size):
    """Gradients of all parameters, recomputing each segment's activations from its checkpoint.

    Args:
        d_out: (batch, out_features) gradient of the loss w.r.t. the output.
        params: the helper MLP's dict "W1", "b1", ..., "WL", "bL".
        checkpoints: dict {start_layer: A_start} from ``mlp_forward_checkpointed``.
        segment_size: s, the same segment size as in the forward pass.

    Returns:
        grads: dict with the same keys and shapes as params, equal to
        ``mlp.backward(d_out, params, cache)`` for the standard cache.
    Use your ``recompute_block_activations``.
    """
    ### BEGIN SOLUTION
    num_layers = mlp.num_layers(params)
    grads = {}
    delta = d_out
    for start in sorted(checkpoints, reverse=True):
        end = min(start + segment_size, num_layers)
        cache = recompute_block_activations(checkpoints[start], params, start, end)
        for i in range(end, start, -1):
            a_prev = cache[f"A{i - 1}"]
            grads[f"W{i}"] = a_prev.T @ delta
            grads[f"b{i}"] = delta.sum(axis=0)
            if i > 1:
                delta = (delta @ params[f"W{i}"].T) * (a_prev > 0)
        del cache  # this segment's activations can go before the next one is recomputed
    return {key: grads[key] for key in params}
    ### END SOLUTION

# %% [markdown]
# ### Tests

# %% tags=["tests"]
rng = np.random.default_rng(2)
params7 = mlp.init_params([5, 5, 5, 5, 5, 5, 5, 3], seed=5)       # L = 7 layers
X7, Y7 = rng.standard_normal((6, 5)), rng.standard_normal((6, 3))
out7, cache7 = mlp.forward(X7, params7)
loss7, d_out7 = mlp.mse_loss_and_grad(out7, Y7)
standard = mlp.backward(d_out7, params7, cache7)
for s in (1, 2, 3, 7):
    _, ck = call(mlp_forward_checkpointed, X7, params7, s, returns=("out", "checkpoints"))
    check_call(mlp_backward_checkpointed, {"d_out": d_out7, "params": params7, "checkpoints": ck,
                                           "segment_size": s},
               standard, mistakes=mistakes_of("mlp_backward_checkpointed"), rtol=1e-9, atol=1e-12)
# The point of the lesson: one recomputed segment alive at a time. 16 layers in segments of s:
# allowed 2 x s recomputed arrays plus 5 of working space, plus the gradients (twice the parameters).
# All 15 activations alive at once (the whole network recomputed before going backward) is far beyond.
# Narrow (width 16), so that the gradients' allowance stays small next to one activation array.
params_mem = mlp.init_params([16] * 16 + [4], seed=6)
X_mem = rng.standard_normal((2048, 16))
for s in (2, 3):  # segments of 2 and of 3: a segment kept past its use shows at 3 beyond doubt
    _, ck_mem = mlp_forward_checkpointed(X_mem, params_mem, s)
    allowed = (2 * s + 5) * X_mem.nbytes + 2 * sum(v.nbytes for v in params_mem.values())
    check_memory(mlp_backward_checkpointed, {"d_out": rng.standard_normal((2048, 4)), "params": params_mem,
                                             "checkpoints": ck_mem, "segment_size": s},
                 allowed, "one recomputed segment plus five activation arrays of working space, plus the "
                          "gradients: recompute a segment, use it, and let it go before the next one")
lesson_passed("017")

# %% [markdown]
# ### Common mistakes
#
# - **Skipping the ReLU mask at segment boundaries**: the first layer's mask
#   comes from the checkpoint $A_{\text{start}}$; without it, gradient flows
#   through switched-off units.
# - **Recomputing with the wrong input**: each segment starts from *its own*
#   checkpoint, not from $X$.
# - **Visiting segments front to back**: backward needs the gradient from the
#   segment above.
#
# ### Checkpoint
#
# Checkpointed backward = recompute + ordinary backward, one segment at a time.
# *Self-check:* how many forward passes through layer 1
# does a checkpointed training step run, and how many through layer $L$?

# %% [markdown]
# ## 018 · Estimate checkpointing memory savings
#
# ### Intuition
#
# Before paying for recomputation, predict what it buys: count the
# (batch, width) arrays alive at the backward peak, with and without
# checkpointing. With $s \approx \sqrt{L}$ both the checkpoints and one
# segment's activations are $O(\sqrt{L})$.
#
# ### Concepts
#
# One (batch, width) array costs $a = B \cdot D \cdot b$ bytes ($b$ bytes per
# element, 8 for float64). At the backward peak:
#
# - **standard**: $Z_i$ and $A_i$ of each hidden layer, $2(L-1)$ arrays (the
#   input $X$ is the caller's and not counted);
# - **checkpointed**: the $\lceil L/s \rceil - 1$ checkpoints other than $X$, plus one
#   recomputed segment, at most $2\min(s, L-1)$ arrays;
# - **both**: a working set of two gradient arrays and one boolean ReLU mask ($B \cdot D$ bytes).
#
# ### Math
#
# $$M_{\text{std}} = \bigl(2(L-1) + 2\bigr)a + BD, \qquad
# M_{\text{ckpt}} = \bigl(\lceil L/s\rceil - 1 + 2\min(s, L-1) + 2\bigr)a + BD,$$
#
# $$\text{saved fraction} = 1 - \frac{M_{\text{ckpt}}}{M_{\text{std}}}.$$
#
# For $L = 16$, $s = 4$: $32a$ against $13a$ (plus the mask), a saving of about 60%.
#
# ### Implementation

# %% tags=["solution"]
def estimate_checkpointing_memory_savings(batch_size, width, num_layers, segment_size,
                                          bytes_per_element=8):
    """Predicted activation memory at the backward peak, with and without checkpointing.

    Args:
        batch_size: B; width: D (all layers' inputs have width D); num_layers: L;
        segment_size: s >= 1 (s >= L means no checkpointing); bytes_per_element: b.

    Returns:
        dict with "standard_bytes" (int), "checkpointed_bytes" (int) and
        "saved_fraction" (float, 1 - checkpointed / standard), per the formulas above.

    Raises:
        ValueError: if any argument is smaller than 1.
    """
    # Given · checking the input: bookkeeping, written for you (the two bills are the lesson).
    for name, value in (("batch_size", batch_size), ("width", width), ("num_layers", num_layers),
                        ("segment_size", segment_size), ("bytes_per_element", bytes_per_element)):
        if value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")
    ### BEGIN SOLUTION
    array = batch_size * width * bytes_per_element
    working = 2 * array + batch_size * width
    standard = 2 * (num_layers - 1) * array + working
    checkpoints = math.ceil(num_layers / segment_size) - 1
    recomputed = 2 * min(segment_size, num_layers - 1)
    checkpointed = (checkpoints + recomputed) * array + working
    return {"standard_bytes": int(standard), "checkpointed_bytes": int(checkpointed),
            "saved_fraction": 1 - checkpointed / standard}
    ### END SOLUTION

# %% [markdown]
# ### Tests

# %% tags=["tests"]
a = 4 * 3 * 8                                            # one (4, 3) float64 array: 96 bytes
check_call(estimate_checkpointing_memory_savings,
           {"batch_size": 4, "width": 3, "num_layers": 16, "segment_size": 4},
           {"standard_bytes": 32 * a + 12, "checkpointed_bytes": 13 * a + 12,
            "saved_fraction": 1 - (13 * a + 12) / (32 * a + 12)},
           mistakes=mistakes_of("estimate_checkpointing_memory_savings"))
check_call(estimate_checkpointing_memory_savings,           # L = 10, s = 3: segments 3+3+3+1
           {"batch_size": 4, "width": 3, "num_layers": 10, "segment_size": 3},
           {"standard_bytes": 20 * a + 12, "checkpointed_bytes": 11 * a + 12,
            "saved_fraction": 1 - (11 * a + 12) / (20 * a + 12)},
           mistakes=mistakes_of("estimate_checkpointing_memory_savings"))
no_ckpt = call(estimate_checkpointing_memory_savings, 4, 3, 5, 5)
check(no_ckpt["checkpointed_bytes"] == no_ckpt["standard_bytes"],
      "one segment (s >= L) stores the same as no checkpointing: the two estimates should be equal")
check(type(no_ckpt["saved_fraction"]) is float,
      f"saved_fraction is a float even when nothing is saved (0.0), got {no_ckpt['saved_fraction']!r}")
good = {"batch_size": 4, "width": 3, "num_layers": 10, "segment_size": 3, "bytes_per_element": 8}
for name in good:
    check_raises(estimate_checkpointing_memory_savings, {**good, name: 0}, ValueError, f"{name} is 0")
lesson_passed("018")

# %% [markdown]
# ### Common mistakes
#
# - **Counting the input $X$**: it exists either way.
# - **Forgetting the recomputed segment**: during backward one segment's $Z$s
#   and $A$s are alive again.
# - **Rounding the number of segments down**: $L // s$ forgets the last, shorter
#   segment and its checkpoint.
# - **Leaving out the working set**: small next to $2(L-1)$ arrays, but not next
#   to the $\approx 2\sqrt{L}$ of a checkpointed step.
#
# ### Checkpoint
#
# Memory is counted in (batch, width) arrays alive at the peak. *Self-check:*
# minimise $\lceil L/s\rceil - 1 + 2s$ over $s$ for $L = 16$; which $s$ give the
# smallest value, and how does it compare with $\sqrt{L}$?

# %% [markdown]
# ## Measured: standard vs checkpointed, and a depth sweep
#
# Your functions make a checkpointed training step.
# `measure_peak_memory` (tracemalloc) measures its peak; subtracting the
# gradients leaves the activation memory lesson 018 predicts. First a
# 16-layer MLP with every segment size, then 4 to 32 layers with
# $s = \operatorname{round}(\sqrt{L})$.

# %% tags=["demo"]
def checkpointed_step(X, Y, params, segment_size):
    out, checkpoints = mlp_forward_checkpointed(X, params, segment_size)
    loss, d_out = mlp.mse_loss_and_grad(out, Y)
    return loss, mlp_backward_checkpointed(d_out, params, checkpoints, segment_size)


def activation_peak(X, Y, params, segment_size=None):
    """Measured peak bytes of one training step minus the gradients it returns, and the gradients."""
    if segment_size is None:
        measured = measure_peak_memory(mlp.loss_and_grads, X, Y, params)
    else:
        measured = measure_peak_memory(checkpointed_step, X, Y, params, segment_size)
    grads = measured.result[1]
    return measured.peak_bytes - sum(g.nbytes for g in grads.values()), grads


B_mem, D_mem, L_mem = 2048, 64, 16
rng = np.random.default_rng(0)
X_mem, Y_mem = rng.standard_normal((B_mem, D_mem)), rng.standard_normal((B_mem, 1))
params16 = mlp.init_params([D_mem] * L_mem + [1], seed=0)

measured_standard, standard16 = activation_peak(X_mem, Y_mem, params16)
sizes = [1, 2, 3, 4, 6, 8, 16]
measured, predicted = [], []
for s in sizes:
    peak_s, grads_s = activation_peak(X_mem, Y_mem, params16, s)
    assert all(np.array_equal(grads_s[k], standard16[k]) for k in standard16), "gradients differ"
    measured.append(peak_s)
    predicted.append(estimate_checkpointing_memory_savings(B_mem, D_mem, L_mem, s)["checkpointed_bytes"])
predicted_standard = estimate_checkpointing_memory_savings(B_mem, D_mem, L_mem, 1)["standard_bytes"]
print(f"L = {L_mem}, B = {B_mem}, D = {D_mem}; gradients bitwise equal to the standard ones for every s")
print(f"{'':>12} {'measured':>10} {'predicted':>10} {'ratio':>6}")
print(f"{'standard':>12} {format_measured(measured_standard):>10} {format_bytes(predicted_standard):>10} "
      f"{format_ratio(measured_standard, predicted_standard):>6}")
for s, m, p in zip(sizes, measured, predicted):
    print(f"{'s = ' + str(s):>12} {format_measured(m):>10} {format_bytes(p):>10} {format_ratio(m, p):>6}")

# %% tags=["demo"]
depths = [4, 8, 16, 32]
sweep = []
for L in depths:
    params_L = mlp.init_params([D_mem] * L + [1], seed=L)
    s = round(math.sqrt(L))
    estimate = estimate_checkpointing_memory_savings(B_mem, D_mem, L, s)
    sweep.append((L, s, activation_peak(X_mem, Y_mem, params_L)[0], estimate["standard_bytes"],
                  activation_peak(X_mem, Y_mem, params_L, s)[0], estimate["checkpointed_bytes"]))
print(f"{'L':>3} {'s':>2} {'standard: measured':>19} {'predicted':>10} {'checkpointed: measured':>23} {'predicted':>10}")
for L, s, ms, ps, mc, pc in sweep:
    print(f"{L:>3} {s:>2} {format_measured(ms):>19} {format_bytes(ps):>10} {format_measured(mc):>23} {format_bytes(pc):>10}")


def mib(n_bytes):
    """Bytes in MiB, rounded as printed (measurements vary by a few bytes between runs)."""
    return round(n_bytes / 2**20, 1)


fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
left.plot(sizes, [mib(m) for m in measured], "o-", color=COLORS["measured"], label="measured")
left.plot(sizes, [mib(p) for p in predicted], "s--", color=COLORS["estimated"], label="predicted (018)")
left.axhline(mib(measured_standard), color=COLORS["baseline"], linestyle=":", label="standard, measured")
left.set_xlabel("segment size s")
left.set_ylabel("activation memory (MiB)")
left.set_title(f"L = {L_mem}: memory vs segment size")
left.legend()
right.plot(depths, [mib(row[2]) for row in sweep], "o-", color=COLORS["baseline"], label="standard, measured")
right.plot(depths, [mib(row[3]) for row in sweep], "x:", color=COLORS["baseline"], label="standard, predicted")
right.plot(depths, [mib(row[4]) for row in sweep], "o-", color=COLORS["measured"], label="s = round(sqrt(L)), measured")
right.plot(depths, [mib(row[5]) for row in sweep], "s--", color=COLORS["estimated"], label="s = round(sqrt(L)), predicted")
right.set_xlabel("layers L")
right.set_ylabel("activation memory (MiB)")
right.set_title("Depth sweep: O(L) vs O(sqrt L)")
right.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## Part summary
#
# - Checkpointing keeps segment inputs and recomputes segment activations:
#   about $\lceil L/s\rceil + 2s$ arrays instead of $2L$, smallest near
#   $s \approx \sqrt{L}$, for one extra forward pass (about a third more compute,
#   since backward costs about twice a forward).
# - The gradients are bitwise the standard ones.
# - Lesson 018's prediction matches the measured peak closely because it counts
#   every array alive, including the backward working set.
# - Accumulation (Part 2) and checkpointing compose: micro-batches shrink $B$,
#   checkpoints shrink the per-example cost. Part 4 halves the bytes per number.
