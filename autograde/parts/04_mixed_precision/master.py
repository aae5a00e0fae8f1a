# %% [markdown] part_title="Mixed precision"
# # Part 4 · Mixed precision: half the bytes per number
#
# Parts 2 and 3 kept fewer activations alive; this part makes each of them
# smaller. A **float16** ("half precision") number takes 2 bytes where float32
# takes 4, so a float16 training step stores half the activation bytes (and on
# GPUs runs several times faster).
#
# The price is range and precision (table below): naive float16 training loses
# small gradients and updates, and overflows. Micikevicius et al. (2018, *Mixed
# Precision Training*) matched float32 with three techniques:
#
# 1. **float32 master weights** receive the updates; the float16 weights are
#    cast from them every step;
# 2. **loss scaling**: multiply the loss by a scale $S$ so that small gradients
#    stay inside float16's range; divide them by $S$ in float32, and skip any
#    step that overflowed;
# 3. **float32 accumulation**: long sums of float16 products are accumulated in
#    float32 and rounded once; NumPy's float16 matrix products, `shared.mlp` and
#    Part 7's `worker_gradients` do it for you.
#
# | | float16 | float32 |
# | --- | --- | --- |
# | bytes | 2 | 4 |
# | largest finite value | 65504 | $3.4 \cdot 10^{38}$ |
# | smallest normal value | $2^{-14} \approx 6.1 \cdot 10^{-5}$ | $2^{-126} \approx 1.2 \cdot 10^{-38}$ |
# | smallest subnormal value | $2^{-24} \approx 6.0 \cdot 10^{-8}$ | $2^{-149} \approx 1.4 \cdot 10^{-45}$ |
# | machine epsilon | $2^{-10} \approx 9.8 \cdot 10^{-4}$ | $2^{-23} \approx 1.2 \cdot 10^{-7}$ |
#
# **Goals of this part**
#
# - a float16 copy of the weights (019) and float32 master weights (020);
# - loss scaling (021), unscaling (022) and finding an overflow (023);
# - one training step with PyTorch's *dynamic* loss scaling (024);
# - measure what float16 loses, compare float32 and mixed-precision training,
#   and measure the activation memory.
#
# The model is the course's MLP (`shared.mlp`), which computes in the dtype of
# its inputs. NumPy computes float16 in software, so here half precision saves
# memory, not time. Stuck? The solved notebook is `solutions/04_mixed_precision.ipynb`.

# %% tags=["setup"]
# Set-up (read-only): run this cell first.
import numpy as np
import matplotlib.pyplot as plt

from shared import mlp
from shared.checking import CheckFailure, call, check, check_call, check_equal, check_shape
from shared.checking import check_rules  # the rules for graded code (shared.policy)
from shared.checking import expect_error
from shared.data import make_regression_batch
from shared.dtypes import check_loss_scale
from shared.memory import (format_bytes, format_measured, format_ratio, measure_peak_memory,
                           mixed_precision_activation_bytes, mixed_precision_memory_bound, mlp_activation_bytes)
from shared.mistakes import mistakes_of
from shared.notebook import setup_notebook
from shared.plotting import COLORS
from shared.progress import lesson_passed, show_progress

setup_notebook()

# %% tags=["nbval-ignore-output", "demo"]
# The panel is live: it updates as test cells pass or fail (nbval cannot compare a live output).
show_progress("04_mixed_precision")

# %% [markdown]
# ## float16 in a few numbers
#
# Each number below is rounded to the nearest float16: 0.1 keeps about three
# digits, 70000 becomes `inf`, and below $2^{-14}$ numbers are *subnormal*, with
# ever fewer significant bits, until they round to 0.

# %% tags=["demo"]
with np.errstate(over="ignore"):  # 70000 overflows to inf: that is the point
    for value in (1.0, 0.1, 1.0001, 65504.0, 70000.0, 6.1e-5, 3e-6, 6e-8, 1e-8):
        print(f"{value:>9g} -> float16 {float(np.float16(value))!r}")
print(f"1.0 + 1e-4 in float16: {np.float16(1.0) + np.float16(1e-4)} (the addition is lost)")

# %% [markdown]
# ## 019 · Cast to half precision
#
# ### Intuition
#
# The forward and backward passes run on a float16 copy of the weights, each
# number rounded to the nearest float16: beyond 65504 to `inf`, tiny ones to 0.
# The cast must not hide an `inf`: loss scaling relies on seeing it.
#
# ### Concepts
#
# - `params`: a dict of float arrays (float64, float32 or float16), e.g. `W1, b1, ...`.
#   Return a **new** dict with the same keys and float16 arrays.
# - The copy must own its memory: `x.astype(np.float16)` always copies, but
#   `np.asarray(x, np.float16)` and `x.astype(np.float16, copy=False)` hand back
#   `x` itself when it already is float16.
# - A non-float array (integers, booleans) raises `TypeError`, naming its key.
# - Overflow is not an error; `with np.errstate(over="ignore"):` silences
#   NumPy's warning about it.
#
# ### Math
#
# With $\operatorname{fl}_{16}(x)$ the float16 nearest to $x$ (ties to even):
#
# $$\operatorname{fl}_{16}(x) = \begin{cases}
#   \pm\infty & |x| \ge 65520 \\
#   x\,(1 + \delta),\ |\delta| \le 2^{-11} & 2^{-14} \le |x| < 65520 \\
#   \text{a multiple of } 2^{-24} & |x| < 2^{-14} \text{ (subnormal; 0 when } |x| \le 2^{-25})
# \end{cases}$$
#
# A half copy of $\Psi$ parameters takes $2\Psi$ bytes, half of float32's $4\Psi$.
#
# ### Implementation

# %% tags=["solution"]
def cast_to_half_precision(params):
    """The float16 copy of a parameter dict, which the forward and backward passes use.

    Args:
        params: dict of float arrays (float16, float32 or float64), e.g. "W1", "b1", ...; not modified.

    Returns:
        A new dict with the same keys; each value is ``params[key]`` rounded to float16, in a
        new array that owns its memory (also when the input already is float16). Values beyond
        float16's range become inf or -inf and tiny ones become 0: the cast only rounds.

    Raises:
        TypeError: if a value is not a float array (the message names its key and dtype).
    """
    ### BEGIN SOLUTION
    for key, value in params.items():
        if not np.issubdtype(value.dtype, np.floating):
            raise TypeError(f"params[{key!r}] has dtype {value.dtype}: only float arrays can be cast to float16")
    with np.errstate(over="ignore"):  # beyond 65504 becomes inf, as it should: the loss scaler looks for it
        return {key: value.astype(np.float16) for key, value in params.items()}
    ### END SOLUTION

# %% [markdown]
# ### Tests

# %% tags=["tests"]
params = {"W1": np.array([[1.0, -2.5], [0.1, 7e4]]), "b1": np.array([1e-8, 3e-5])}          # float64
check_call(cast_to_half_precision, {"params": params},
           {"W1": np.array([[1.0, -2.5], [0.0999755859375, np.inf]], dtype=np.float16),   # 7e4 > 65504: inf
            "b1": np.array([0.0, 2.9981136322021484e-05], dtype=np.float16)},            # 1e-8 underflows to 0
           mistakes=mistakes_of("cast_to_half_precision"), exact=True)
params32 = {"W": np.array([[0.5, -3.0]], dtype=np.float32), "b": np.array([2.0**-20], dtype=np.float32)}
check_call(cast_to_half_precision, {"params": params32},
           {"W": np.array([[0.5, -3.0]], dtype=np.float16), "b": np.array([2.0**-20], dtype=np.float16)},
           mistakes=mistakes_of("cast_to_half_precision"), exact=True)
# One rounding, to the nearest float16: 1 + 2**-11 + 2**-40 lies just above the midpoint of 1 and 1 + 2**-10,
# so it rounds up (through float32 it would first land on the midpoint, then tie to even: down to 1.0).
check_call(cast_to_half_precision, {"params": {"w": np.array([1 + 2.0**-11 + 2.0**-40])}},
           {"w": np.array([1 + 2.0**-10], dtype=np.float16)}, mistakes=mistakes_of("cast_to_half_precision"),
           exact=True)
already_half = {"w": np.array([1.5, -0.25], dtype=np.float16)}
# An input that already is float16 must still be copied (np.asarray(x, np.float16) would hand back x itself):
check_call(cast_to_half_precision, {"params": already_half}, {"w": np.array([1.5, -0.25], dtype=np.float16)},
           mistakes=mistakes_of("cast_to_half_precision"), fresh=True)
expect_error(cast_to_half_precision, [{"W1": np.ones((2, 2)), "steps": np.array([3])}], ["params"], TypeError,
             "a value is an integer array")
expect_error(cast_to_half_precision, [{"W1": np.ones((2, 2)), "pixels": np.array([255], np.uint8)}], ["params"],
             TypeError, "a value is an unsigned integer array")
lesson_passed("019")

# %% [markdown]
# ### Common mistakes
#
# - **A half copy that aliases its input** (`np.asarray`): writing to the
#   "copy" of a float16 array changes the original.
# - **Clipping to the float16 range**: `np.clip(x, -65504, 65504)` hides the
#   overflow from the loss scaler, which looks for `inf` and NaN.
# - **Converting the caller's dict in place**: `params[key] = ...` replaces the
#   caller's full-precision arrays.
#
# ### Checkpoint
#
# The cast rounds every number to float16 and keeps `inf` as `inf`.
# *Self-check:* what are `np.float16(1e-8)` and `np.float16(70000.0)`, and how many
# bytes does the half copy of a model with 10 million parameters take?

# %% [markdown]
# ## 020 · Make master params
#
# ### Intuition
#
# In float16, $w + \Delta w$ often rounds back to $w$: with $w = 1$, an update
# of $10^{-4}$ is lost (the cell above shows it). So the weights that
# *accumulate* updates, the **master weights**, are kept in float32; the float16
# weights are cast from them every step and never updated.
#
# ### Concepts
#
# - `params`: a dict of arrays of any float dtype (float64 from `mlp.init_params`,
#   or float16).
# - Return a new dict of **float32** arrays, each owning its memory as in lesson 019.
# - Non-float arrays raise `TypeError`, naming the key.
#
# ### Math
#
# An update is lost when it is below half the spacing of float16 numbers on the
# side it moves toward. For $2^e \le |w| < 2^{e+1}$ the spacing is $2^{e-10}$,
# between $2^{-11}|w|$ and $2^{-10}|w|$, and half that just below $2^e$. So
#
# $$\operatorname{fl}_{16}(w - \eta g) = w \quad\text{whenever}\quad |\eta g| < 2^{-12}|w|,$$
#
# and for some $w$ already when $|\eta g| < 2^{-11}|w|$: an update is always lost
# once $|w| / |\eta g| > 4096$, and may be from 2048. In float32 these ratios are
# $2^{25} \approx 3.4 \cdot 10^{7}$ and $2^{24} \approx 1.7 \cdot 10^{7}$.
# Memory: $4\Psi$ bytes of master weights beside the $2\Psi$ of the half copy.
#
# ### Implementation

# %% tags=["solution"]
def make_master_params(params):
    """The float32 master copy of a parameter dict, which the optimizer updates.

    Args:
        params: dict of float arrays of any float dtype (float16, float32, float64); not modified.

    Returns:
        A new dict with the same keys; each value is ``params[key]`` as float32, in a new
        array that owns its memory (also when the input already is float32).

    Raises:
        TypeError: if a value is not a float array (the message names its key and dtype).
    """
    ### BEGIN SOLUTION
    for key, value in params.items():
        if not np.issubdtype(value.dtype, np.floating):
            raise TypeError(f"params[{key!r}] has dtype {value.dtype}: master weights are made from float arrays")
    return {key: value.astype(np.float32) for key, value in params.items()}
    ### END SOLUTION

# %% [markdown]
# ### Tests

# %% tags=["tests"]
half = {"W1": np.array([[0.0999755859375, -2.5]], dtype=np.float16), "b1": np.array([2.0**-24], dtype=np.float16)}
check_call(make_master_params, {"params": half},
           {"W1": np.array([[0.0999755859375, -2.5]], dtype=np.float32), "b1": np.array([2.0**-24], dtype=np.float32)},
           mistakes=mistakes_of("make_master_params"), exact=True)
full = {"W1": np.array([[0.1, 1 / 3]]), "b1": np.zeros(2)}                                   # float64
check_call(make_master_params, {"params": full},
           {"W1": np.array([[0.1, 1 / 3]], dtype=np.float32), "b1": np.zeros(2, dtype=np.float32)},
           mistakes=mistakes_of("make_master_params"), exact=True)
single = {"W1": np.array([[0.5, 0.25]], dtype=np.float32)}
# float32 weights must still be copied: a master that is the model's own arrays is no master
# (np.asarray(x, np.float32) would hand back x itself):
check_call(make_master_params, {"params": single}, {"W1": np.array([[0.5, 0.25]], dtype=np.float32)},
           mistakes=mistakes_of("make_master_params"), fresh=True)
expect_error(make_master_params, [{"W1": np.ones((1, 2)), "mask": np.array([True, False])}], ["params"], TypeError,
             "a value is a boolean array")
expect_error(make_master_params, [{"W1": np.ones((1, 2)), "pixels": np.array([255], np.uint8)}], ["params"],
             TypeError, "a value is an unsigned integer array")
lesson_passed("020")

# %% [markdown]
# ### Common mistakes
#
# - **Master weights kept in the model's precision**: float16 weights copied
#   without casting round small updates away again.
# - **A master that aliases the model's parameters**: `np.asarray(x, np.float32)`
#   on float32 weights returns the same arrays.
# - **Master weights in float64**: twice the memory of the float32 master.
#
# ### Checkpoint
#
# One float32 master copy receives every update; the float16 weights are cast
# from it.
# *Self-check:* with $w = 0.5$ in float16, what is the smallest update
# $|\Delta w|$ that changes it?

# %% [markdown]
# ## 021 · Scale loss
#
# ### Intuition
#
# Gradients of a mean loss carry a $1/n$, and the backward pass multiplies them
# by more small numbers; many fall below $2^{-24}$ and become 0 in float16.
# Multiply the loss by a scale $S$ first: by the chain rule every
# gradient is multiplied by $S$ too, lifting the small ones into range.
#
# ### Concepts
#
# - The backward pass starts from `d_out` $= \partial L / \partial\,\text{out}$,
#   so scaling $L$ by $S$ means scaling `d_out` by $S$.
# - `loss` (a float) and `d_out` (batch, outputs) come in **float32**. Multiply
#   `d_out` in float32, then cast the product to float16 for the backward pass: in
#   float16, $2^{16} = 65536$ is itself `inf`, and a gradient cast *before*
#   scaling has already underflowed.
# - The scaled loss is `float(loss) * float(S)`, a Python float computed in float64,
#   even when `loss` or $S$ is a NumPy float (a NumPy float16 $S$ would round
#   `loss * S` to float16).
# - Products beyond 65504 become `inf`: no error, the step will be skipped.
# - The given `check_loss_scale` refuses a `loss_scale` that is not positive and
#   finite (`ValueError`).
#
# ### Math
#
# $$L_S = S\,L, \qquad \frac{\partial L_S}{\partial \theta} = S\,\frac{\partial L}{\partial \theta}, \qquad
# \tilde d_{\text{out}} = \operatorname{fl}_{16}\!\left(S \cdot d_{\text{out}}\right),$$
#
# where $\tilde d_{\text{out}}$ is the `scaled_d_out` returned. With $S = 2^{16}$,
# a gradient of $2^{-30}$, which float16 rounds to 0, becomes $2^{-14}$, float16's
# smallest normal number.
#
# ### Implementation

# %% tags=["solution"]
def scale_loss(loss, d_out, loss_scale):
    """Scale the loss, and so the gradient the backward pass starts from, by the loss scale.

    Args:
        loss: the batch's loss, a float (computed in float32).
        d_out: (batch, outputs) float32 array (float16 is accepted too): the gradient of the
            loss w.r.t. the network's output.
        loss_scale: S, a positive finite number (a Python or NumPy float), e.g. 65536.0 = 2**16.

    Returns:
        (scaled_loss, scaled_d_out): ``loss * S`` as a Python float (computed in float64, whatever the
        types of loss and S), and ``d_out * S`` computed in float32 and returned as a new float16 array
        (products beyond 65504 become inf).

    Raises:
        ValueError: if loss_scale is not finite, or not positive.
    """
    # Given · checking the input: bookkeeping, written for you (the scaling is the lesson).
    check_loss_scale(loss_scale)  # ValueError: S not finite, or not positive
    ### BEGIN SOLUTION
    with np.errstate(over="ignore"):  # an overflow becomes inf, which the scaler detects later
        scaled_d_out = (d_out.astype(np.float32) * np.float32(loss_scale)).astype(np.float16)
    return float(loss) * float(loss_scale), scaled_d_out
    ### END SOLUTION

# %% [markdown]
# ### Tests

# %% tags=["tests"]
d_out = np.array([[2.0**-30], [2.0**-20], [-0.25], [3.0]], dtype=np.float32)
check_call(scale_loss, {"loss": 0.5, "d_out": d_out, "loss_scale": 65536.0},
           (32768.0, np.array([[2.0**-14], [2.0**-4], [-16384.0], [np.inf]], dtype=np.float16)),  # 3 * 2**16 > 65504
           mistakes=mistakes_of("scale_loss"), exact=True)
check_call(scale_loss, {"loss": 0.125, "d_out": np.array([[0.5, -2.0**-22]], dtype=np.float16), "loss_scale": 8.0},
           (1.0, np.array([[4.0, -2.0**-19]], dtype=np.float16)), mistakes=mistakes_of("scale_loss"), exact=True)
check_call(scale_loss, {"loss": np.float32(0.25), "d_out": d_out[:2], "loss_scale": 4.0},   # the loss as a NumPy float32
           (1.0, np.array([[2.0**-28], [2.0**-18]], dtype=np.float16)), mistakes=mistakes_of("scale_loss"), exact=True)
# S as a NumPy float: the scaled loss is still a Python float, computed in float64
check_call(scale_loss, {"loss": 1.2345678901234567, "d_out": d_out[:1], "loss_scale": np.float16(1024.0)},
           (1264.1975194864197, np.array([[2.0**-20]], dtype=np.float16)), mistakes=mistakes_of("scale_loss"),
           rtol=1e-6, atol=0.0)
for bad, why in ((0.0, "loss_scale is 0"), (-1024.0, "loss_scale is negative"),
                 (np.inf, "loss_scale is infinite"), (np.nan, "loss_scale is NaN")):
    expect_error(scale_loss, [0.5, d_out, bad], ["loss", "d_out", "loss_scale"], ValueError, why)
lesson_passed("021")

# %% [markdown]
# ### Common mistakes
#
# - **Scaling in float16**: every product is `inf` (NaN where `d_out` is 0);
#   with a smaller scale, gradients that underflowed in the cast stay 0.
# - **Scaling the loss but not its gradient**: the gradients start from `d_out`,
#   so they do not change.
# - **Dividing by the scale**: that is unscaling, after the backward pass.
# - **Keeping the scaled gradient in float32**: the backward pass then runs in
#   float32 and saves no memory.
#
# ### Checkpoint
#
# Scaling multiplies the gradient the backward pass starts from by $S$, computed
# in float32, handed over in float16.
# *Self-check:* with $S = 2^{16}$, which float32 gradients still underflow to 0,
# and which now overflow to `inf`?

# %% [markdown]
# ## 022 · Unscale gradients
#
# ### Intuition
#
# The gradients of the scaled backward pass carry the factor $S$. Divide it out
# before anything uses them, in float32: the true gradients may be too small for
# float16, and $S = 65536$ does not fit in it.
#
# ### Concepts
#
# - `grads`: a dict of float16 (or float32) arrays, the gradients of the scaled
#   loss; `loss_scale`: their $S$.
# - Return a new dict of **float32** arrays: each `grads[key]` cast to float32,
#   then divided by $S$.
# - `inf` and NaN stay as they are: lesson 023 finds them.
# - The same given check refuses a `loss_scale` that is not positive and finite.
#
# ### Math
#
# $$g = \frac{\operatorname{fl}_{32}(g_S)}{S}.$$
#
# Dividing by a power of two only changes the exponent, so it is exact in
# float32 (unless the quotient falls below float32's normal range), and a scale
# that starts as a power of two stays one: the scaler of lesson 024 only halves
# and doubles it. Any other $S$ rounds each quotient.
#
# ### Implementation

# %% tags=["solution"]
def unscale_gradients(grads, loss_scale):
    """Divide the loss scale out of the gradients, in float32.

    Args:
        grads: dict of float16 arrays (float32 is accepted too), the gradients of the scaled loss.
        loss_scale: S, the positive finite number the loss was scaled by.

    Returns:
        A new dict with the same keys: ``grads[key]`` as float32, divided by S (inf and NaN stay
        as they are). ``grads`` is not modified.

    Raises:
        ValueError: if loss_scale is not finite, or not positive.
    """
    # Given · checking the input, as in 021: bookkeeping, written for you (the unscaling is the lesson).
    check_loss_scale(loss_scale)  # ValueError: S not finite, or not positive
    ### BEGIN SOLUTION
    return {key: value.astype(np.float32) / np.float32(loss_scale) for key, value in grads.items()}
    ### END SOLUTION

# %% [markdown]
# ### Tests

# %% tags=["tests"]
scaled_grads = {"W": np.array([[16384.0, -0.5], [np.inf, 0.0]], dtype=np.float16),
                "b": np.array([2.0, np.nan], dtype=np.float16)}
check_call(unscale_gradients, {"grads": scaled_grads, "loss_scale": 65536.0},
           {"W": np.array([[0.25, -2.0**-17], [np.inf, 0.0]], dtype=np.float32),
            "b": np.array([2.0**-15, np.nan], dtype=np.float32)},
           mistakes=mistakes_of("unscale_gradients"), exact=True)
check_call(unscale_gradients, {"grads": {"W": np.array([3.0, -1e-3], dtype=np.float32)}, "loss_scale": 1024.0},
           {"W": np.array([3.0 / 1024, -1e-3 / 1024], dtype=np.float32)}, mistakes=mistakes_of("unscale_gradients"),
           rtol=1e-6, atol=0)
for bad, why in ((0.0, "loss_scale is 0"), (-2.0, "loss_scale is negative"),
                 (np.inf, "loss_scale is infinite"), (np.nan, "loss_scale is NaN")):
    expect_error(unscale_gradients, [scaled_grads, bad], ["grads", "loss_scale"], ValueError, why)
lesson_passed("022")

# %% [markdown]
# ### Common mistakes
#
# - **Unscaling in float16**: `g / np.float16(65536.0)` divides by `inf`; with a
#   smaller scale the quotients underflow to 0.
# - **Multiplying by the scale** instead of dividing: the gradients are then
#   $S^2$ times too large.
# - **Casting without unscaling**: the update is then $S$ times too large.
#
# ### Checkpoint
#
# Unscale in float32, before any check or update.
# *Self-check:* why is dividing by $2^{16}$ exact in float32, and when would it not be?

# %% [markdown]
# ## 023 · Has non finite gradients
#
# ### Intuition
#
# With too large a scale, a gradient overflows to `inf` (and `inf - inf` or
# `0 * inf` give NaN). One update with it would ruin the master weights for good,
# so first check every value of every gradient array.
#
# ### Concepts
#
# - `grads`: a dict of float16 or float32 arrays, e.g. the unscaled gradients.
# - Return `True` if any value of any array is `inf`, `-inf` or NaN, else `False`
#   (a Python `bool`).
# - `np.isfinite(x)` is `False` for all three; `np.isnan` misses `inf`, and
#   `np.isinf` misses NaN.
# - Look at the values, not at a sum: in float16, four finite values of 60000
#   sum to `inf`, and a check of `np.sum(g)` would skip a good step.
#
# ### Math
#
# $$\text{found inf} = \bigvee_{k \in \text{keys}}\ \bigvee_{i}\ \neg\operatorname{isfinite}\left(g_{k,i}\right),$$
#
# where $g_{k,i}$ is the $i$-th value of array $k$ and $\vee$ is "or".
#
# ### Implementation

# %% tags=["solution"]
def has_non_finite_gradients(grads):
    """Whether any gradient value is inf, -inf or NaN.

    Args:
        grads: dict of float arrays (float16 or float32); not modified.

    Returns:
        True if any value of any array in ``grads`` is not finite, else False (a Python bool).
    """
    ### BEGIN SOLUTION
    return any(not np.isfinite(value).all() for value in grads.values())
    ### END SOLUTION

# %% [markdown]
# ### Tests

# %% tags=["tests"]
finite = {"W1": np.ones((2, 2), dtype=np.float16), "b1": np.zeros(2, dtype=np.float16)}
check_call(has_non_finite_gradients, {"grads": finite}, False, mistakes=mistakes_of("has_non_finite_gradients"))
inf_in_bias = {"W1": np.ones((2, 2), dtype=np.float32), "b1": np.array([0.0, np.inf], dtype=np.float32)}
check_call(has_non_finite_gradients, {"grads": inf_in_bias}, True, mistakes=mistakes_of("has_non_finite_gradients"))
nan_only = {"W1": np.array([[np.nan, 1.0]], dtype=np.float16), "b1": np.zeros(1, dtype=np.float16)}
check_call(has_non_finite_gradients, {"grads": nan_only}, True, mistakes=mistakes_of("has_non_finite_gradients"))
minus_inf = {"W1": np.array([[-np.inf, 1.0]], dtype=np.float16), "b1": np.zeros(1, dtype=np.float16)}
check_call(has_non_finite_gradients, {"grads": minus_inf}, True, mistakes=mistakes_of("has_non_finite_gradients"))
# Every value is finite, though their sum (240000) overflows float16: look at the values, not a sum.
large = {"W1": np.full((2, 2), 60000.0, dtype=np.float16), "b1": np.zeros(2, dtype=np.float16)}
check_call(has_non_finite_gradients, {"grads": large}, False, mistakes=mistakes_of("has_non_finite_gradients"))
lesson_passed("023")

# %% [markdown]
# ### Common mistakes
#
# - **Checking only one array** (the first, or only the weights): an overflow
#   elsewhere goes through.
# - **Checking only for NaN**: an overflow first shows up as `inf`.
# - **Checking only for `inf`**: NaN (from `inf - inf`) goes through.
#
# ### Checkpoint
#
# `np.isfinite` over every array.
# *Self-check:* why is checking the loss alone not enough, even though an
# overflowing backward pass started from it?

# %% [markdown]
# ## 024 · Mixed precision step
#
# ### Intuition
#
# No single loss scale suits a whole run: too small and gradients underflow, too
# large and they overflow. PyTorch's `GradScaler` starts high ($2^{16}$); when a
# step overflows it **skips** the step and **halves** the scale; after
# `growth_interval` clean steps in a row (PyTorch's default: 2000) it
# **doubles** it.
#
# ### Concepts
#
# - `master_params`: float32 master weights (020); `X`, `Y`: the batch, any
#   float dtype; `scaler_state`: `{"scale": float, "growth_tracker": int}`, the
#   scale and the clean steps since it last changed. The new scale is a Python
#   float, even when the old one is a NumPy float.
# - The step, in order:
#   1. `half = cast_to_half_precision(master_params)`;
#   2. the forward pass in float16: `out, cache = mlp.forward(X.astype(np.float16), half)`;
#   3. the loss and its gradient in float32: `loss, d_out = mlp.mse_loss_and_grad(out.astype(np.float32), Y.astype(np.float32))`;
#   4. `scale_loss(loss, d_out, scale)` gives the float16 `scaled_d_out`;
#   5. the backward pass in float16: `mlp.backward(scaled_d_out, half, cache)`;
#   6. `unscale_gradients(...)` into float32;
#   7. if `has_non_finite_gradients(...)`, **skip**: keep the master weights
#      exactly as they are (you may return `master_params` itself), halve the
#      scale, reset the tracker to 0;
#   8. otherwise update the master weights, `master - learning_rate * g` in
#      float32, and count the clean step; when the count reaches
#      `growth_interval`, double the scale and reset the count to 0.
# - Overflow in float16 is expected: wrap steps 1 to 5 in
#   `with np.errstate(over="ignore", invalid="ignore"):`.
# - The given code refuses master weights that are not float32 (`TypeError`) and
#   `growth_interval < 1` (`ValueError`); `scale_loss` refuses a bad scale.
#
# ### Math
#
# $$\theta_{16} = \operatorname{fl}_{16}(\theta_{32}), \qquad
# g = \frac{\operatorname{fl}_{32}\!\left(\nabla_{\theta_{16}}\, S L\right)}{S}, \qquad
# \theta_{32}' = \begin{cases} \theta_{32} & \text{if } g \text{ is not finite (skipped)} \\
#                               \theta_{32} - \eta\, g & \text{otherwise,} \end{cases}$$
#
# $$(S', t') = \begin{cases} (S/2,\ 0) & \text{skipped} \\ (2S,\ 0) & \text{not skipped and } t + 1 = N \\
#                             (S,\ t + 1) & \text{otherwise,} \end{cases}$$
#
# with $t$ the growth tracker and $N$ the growth interval.
#
# ### Implementation

# %% tags=["solution"]
def mixed_precision_step(master_params, X, Y, scaler_state, learning_rate, growth_interval=2000):
    """One SGD step: float16 forward and backward passes, float32 master weights, dynamic loss scaling.

    Args:
        master_params: dict of float32 arrays, the master weights of the helper MLP; not modified.
        X: (batch, features) inputs; Y: (batch, outputs) targets (float32, or any float dtype:
            X is cast to float16 for the forward pass, Y to float32 for the loss).
        scaler_state: dict {"scale": float (a Python or NumPy float), "growth_tracker": int}; not modified.
        learning_rate: float.
        growth_interval: N >= 1, the number of clean steps in a row after which the scale doubles.

    Returns:
        (new_master_params, new_scaler_state, skipped):
        - new_master_params: dict of float32 arrays, ``master - learning_rate * g`` with g the
          unscaled gradients; when the step is skipped, the master weights bit for bit unchanged;
        - new_scaler_state: dict {"scale": a Python float, "growth_tracker": int} after the GradScaler rules;
        - skipped: True when a gradient was inf or NaN (and the step skipped), else False.
    Use your ``cast_to_half_precision``, ``scale_loss``, ``unscale_gradients`` and
    ``has_non_finite_gradients`` with ``mlp.forward``, ``mlp.mse_loss_and_grad`` and ``mlp.backward``.

    Raises:
        TypeError: if a master weight is not float32.
        ValueError: if growth_interval < 1, or the scale is not positive and finite.
    """
    # Given · checking the input: bookkeeping, written for you (the step and its loss scaling are the lesson;
    #         scale_loss, your 022, refuses a scale that is not positive and finite).
    for key, value in master_params.items():
        if value.dtype != np.float32:
            raise TypeError(f"master_params[{key!r}] has dtype {value.dtype}: master weights are float32 "
                            f"(make them with make_master_params)")
    if growth_interval < 1:
        raise ValueError(f"growth_interval must be at least 1, got {growth_interval}")
    ### BEGIN SOLUTION
    scale = float(scaler_state["scale"])  # a NumPy scale, too, comes back as a Python float
    with np.errstate(over="ignore", invalid="ignore"):  # overflow in float16 is expected: the scaler handles it
        half = cast_to_half_precision(master_params)
        out, cache = mlp.forward(X.astype(np.float16), half)
        loss, d_out = mlp.mse_loss_and_grad(out.astype(np.float32), Y.astype(np.float32))
        _, scaled_d_out = scale_loss(loss, d_out, scale)
        half_grads = mlp.backward(scaled_d_out, half, cache)
    grads = unscale_gradients(half_grads, scale)
    if has_non_finite_gradients(grads):
        return master_params, {"scale": scale * 0.5, "growth_tracker": 0}, True  # skipped: nothing changes
    new_master = {key: master_params[key] - learning_rate * grads[key] for key in master_params}
    tracker = scaler_state["growth_tracker"] + 1
    if tracker == growth_interval:
        scale, tracker = scale * 2.0, 0
    return new_master, {"scale": scale, "growth_tracker": tracker}, False
    ### END SOLUTION

# %% [markdown]
# ### Tests

# %% tags=["tests"]
rng = np.random.default_rng(4)
master4 = {key: value.astype(np.float32) + np.float32(0.1) for key, value in mlp.init_params([3, 4, 2], seed=7).items()}
X4, Y4 = rng.standard_normal((6, 3)).astype(np.float32), rng.standard_normal((6, 2)).astype(np.float32)


def expected_master(master, X, Y, scale, learning_rate):
    """A clean step's master weights, in plain NumPy: float16 passes, float32 update."""
    half = {key: value.astype(np.float16) for key, value in master.items()}
    out, cache = mlp.forward(X.astype(np.float16), half)
    _, d_out = mlp.mse_loss_and_grad(out.astype(np.float32), Y)
    grads16 = mlp.backward((d_out * np.float32(scale)).astype(np.float16), half, cache)
    return {key: master[key] - learning_rate * (grads16[key].astype(np.float32) / np.float32(scale)) for key in master}


steps = mistakes_of("mixed_precision_step")
# a clean step: the master weights move, the tracker counts it
check_call(mixed_precision_step, {"master_params": master4, "X": X4, "Y": Y4, "scaler_state": {"scale": 1024.0,
           "growth_tracker": 0}, "learning_rate": 0.1, "growth_interval": 3},
           (expected_master(master4, X4, Y4, 1024.0, 0.1), {"scale": 1024.0, "growth_tracker": 1}, False),
           mistakes=steps, rtol=1e-6, atol=1e-9)
# data in float64: the step casts X to float16 (and Y to float32) all the same
check_call(mixed_precision_step, {"master_params": master4, "X": X4.astype(np.float64), "Y": Y4.astype(np.float64),
           "scaler_state": {"scale": 1024.0, "growth_tracker": 0}, "learning_rate": 0.1, "growth_interval": 3},
           (expected_master(master4, X4, Y4, 1024.0, 0.1), {"scale": 1024.0, "growth_tracker": 1}, False),
           mistakes=steps, rtol=1e-6, atol=1e-9)
# the third clean step in a row with growth_interval 3: the scale doubles, the tracker restarts
check_call(mixed_precision_step, {"master_params": master4, "X": X4, "Y": Y4, "scaler_state": {"scale": 1024.0,
           "growth_tracker": 2}, "learning_rate": 0.1, "growth_interval": 3},
           (expected_master(master4, X4, Y4, 1024.0, 0.1), {"scale": 2048.0, "growth_tracker": 0}, False),
           mistakes=steps, rtol=1e-6, atol=1e-9)
# S = 2**16, GradScaler's default start (65536 is itself inf in float16: multiply and unscale in float32), with
# targets near the output, so that no scaled gradient overflows: a clean step
out4 = mlp.forward(X4.astype(np.float16), {key: value.astype(np.float16) for key, value in master4.items()})[0]
Y_near = out4.astype(np.float32) + np.float32(1e-3) * Y4
check_call(mixed_precision_step, {"master_params": master4, "X": X4, "Y": Y_near, "scaler_state": {"scale": 65536.0,
           "growth_tracker": 0}, "learning_rate": 0.1, "growth_interval": 3},
           (expected_master(master4, X4, Y_near, 65536.0, 0.1), {"scale": 65536.0, "growth_tracker": 1}, False),
           mistakes=steps, rtol=1e-6, atol=1e-9)
# targets 1000 times larger: the scaled gradients overflow float16 (the loss stays finite) -> skipped
check_call(mixed_precision_step, {"master_params": master4, "X": X4, "Y": 1000 * Y4, "scaler_state": {"scale": 1024.0,
           "growth_tracker": 2}, "learning_rate": 0.1, "growth_interval": 3},
           (master4, {"scale": 512.0, "growth_tracker": 0}, True), mistakes=steps, exact=True)
# the scale as a NumPy float32: the new scale is a Python float, after a clean step and after a skipped one
check_call(mixed_precision_step, {"master_params": master4, "X": X4, "Y": Y4, "scaler_state": {
           "scale": np.float32(1024.0), "growth_tracker": 2}, "learning_rate": 0.1, "growth_interval": 3},
           (expected_master(master4, X4, Y4, 1024.0, 0.1), {"scale": 2048.0, "growth_tracker": 0}, False),
           mistakes=steps, rtol=1e-6, atol=1e-9)
check_call(mixed_precision_step, {"master_params": master4, "X": X4, "Y": 1000 * Y4, "scaler_state": {
           "scale": np.float32(1024.0), "growth_tracker": 2}, "learning_rate": 0.1, "growth_interval": 3},
           (master4, {"scale": 512.0, "growth_tracker": 0}, True), mistakes=steps, exact=True)
state = {"scale": 1024.0, "growth_tracker": 0}
for bad, why in (({"scale": 0.0, "growth_tracker": 0}, "the scale is 0"),
                 ({"scale": -8.0, "growth_tracker": 0}, "the scale is negative"),
                 ({"scale": np.inf, "growth_tracker": 0}, "the scale is infinite"),
                 ({"scale": np.nan, "growth_tracker": 0}, "the scale is NaN")):
    expect_error(mixed_precision_step, [master4, X4, Y4, bad, 0.1, 3],
                 ["master_params", "X", "Y", "scaler_state", "learning_rate", "growth_interval"], ValueError, why)
expect_error(mixed_precision_step, [master4, X4, Y4, state, 0.1, 0],
             ["master_params", "X", "Y", "scaler_state", "learning_rate", "growth_interval"], ValueError,
             "growth_interval is 0")
expect_error(mixed_precision_step, [mlp.init_params([3, 4, 2], seed=7), X4, Y4, state, 0.1, 3],
             ["master_params", "X", "Y", "scaler_state", "learning_rate", "growth_interval"], TypeError,
             "the master weights are float64, not float32")
# memory: the forward and backward passes really run in float16
B_check, D_check, L_check = 4096, 16, 4
master_check = {key: value.astype(np.float32) for key, value in mlp.init_params([D_check] * L_check + [1], seed=0).items()}
X_check = rng.standard_normal((B_check, D_check)).astype(np.float32)
Y_check = rng.standard_normal((B_check, 1)).astype(np.float32)
measured = measure_peak_memory(mixed_precision_step, master_check, X_check, Y_check, state, 0.01, 2000)
allowed = mixed_precision_memory_bound(B_check, D_check, L_check, sum(v.nbytes for v in master_check.values()))
check(measured.peak_bytes <= allowed,
      f"mixed_precision_step allocated {format_bytes(measured.peak_bytes)} at its peak (batch {B_check}, width "
      f"{D_check}, {L_check} layers), more than the {format_bytes(allowed)} allowed: about half of a float32 step's "
      f"activations, plus a margin. Do the forward and backward passes run in float16 (the half copy of the "
      f"weights, X cast to float16, the scaled gradient in float16)?")
lesson_passed("024")

# %% [markdown]
# ### Common mistakes
#
# - **Updating the float16 weights instead of the master**: they round small
#   updates away, and are remade every step.
# - **Not unscaling before the update** (or unscaling after it): the update is
#   then $S$ times too large.
# - **Checking only the loss for non-finite values**: the loss can be finite
#   while a gradient overflowed.
# - **Not skipping the step on overflow**: one update with `inf` or NaN ruins the
#   master weights.
# - **Never backing off (or never growing) the scale**: every following step
#   overflows too, or the scale only falls and small gradients underflow again.
#
# ### Checkpoint
#
# A mixed-precision step: cast, float16 passes, unscale in float32, check, update
# the master (or skip), adjust the scale.
# *Self-check:* starting from $2^{16}$ with `growth_interval` 2000, the first three
# steps overflow and every later step is clean. What is the scale after step 2003,
# and after step 4003?

# %% [markdown]
# ## Training: float32 and mixed precision side by side
#
# The same MLP (8 inputs, two hidden layers of 16), data (256 examples of lesson
# 001's regression task), learning rate and start, trained for 300 full-batch SGD
# steps in float32 and with your `mixed_precision_step` (from the scale $2^{16}$,
# growth interval 50). The plot shows the float32 loss before each step (for
# mixed precision, of the master weights).

# %% tags=["demo"]
B_train, D_in, hidden, steps, lr, interval = 256, 8, 16, 300, 0.1, 50
X_train, Y_train = (a.astype(np.float32) for a in make_regression_batch(B_train, D_in, 1, seed=0))
start = mlp.init_params([D_in, hidden, hidden, 1], seed=0)


def float32_loss(params, X, Y):
    return mlp.mse_loss_and_grad(mlp.forward(X, params)[0], Y)[0]


params32, losses32 = {key: value.astype(np.float32) for key, value in start.items()}, []
for step in range(steps):
    loss, grads = mlp.loss_and_grads(X_train, Y_train, params32)
    losses32.append(loss)
    params32 = mlp.sgd_update(params32, grads, lr)
losses32.append(float32_loss(params32, X_train, Y_train))

master, scaler = make_master_params(start), {"scale": 2.0**16, "growth_tracker": 0}
losses_mixed, scales, skipped_steps = [], [scaler["scale"]], []
for step in range(steps):
    losses_mixed.append(float32_loss(master, X_train, Y_train))
    master, scaler, skipped = mixed_precision_step(master, X_train, Y_train, scaler, lr, interval)
    scales.append(scaler["scale"])
    if skipped:
        skipped_steps.append(step)
losses_mixed.append(float32_loss(master, X_train, Y_train))

final32, final_mixed = losses32[-1], losses_mixed[-1]
print(f"final loss after {steps} steps: float32 {final32:.5f}, mixed precision {final_mixed:.5f} "
      f"({(final_mixed / final32 - 1):+.2%})")
print(f"skipped steps: {skipped_steps}; the scale went from 2**16 to 2**{int(np.log2(scaler['scale']))}")

fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
left.plot(losses32, color=COLORS["baseline"], label="float32")
left.plot(losses_mixed, color=COLORS["learner"], linestyle="--", label="mixed precision")
left.set_yscale("log")
left.set_xlabel("step")
left.set_ylabel("loss (float32)")
left.set_title("Same data, same start")
left.legend()
right.step(range(len(scales)), np.log2(scales), where="post", color=COLORS["learner"])
right.plot(skipped_steps, [np.log2(scales[s]) for s in skipped_steps], "x", color="red", label="skipped step")
right.set_xlabel("step")
right.set_ylabel("log2(scale)")
right.set_title(f"The loss scale (growth interval {interval})")
right.legend()
plt.show()

# %% [markdown]
# ## Measured: what float16 does to real gradients
#
# Below, each nonzero gradient value of the trained float32 model on a fresh
# batch of 4096 examples (weight and bias gradients, and mostly the *activation
# gradients* between layers) is cast to float16 as it is, and scaled by $2^{16}$
# first; the histogram sets the magnitudes against float16's range.

# %% tags=["demo"]
X_big, Y_big = (a.astype(np.float32) for a in make_regression_batch(4096, D_in, 1, seed=1))
out, cache = mlp.forward(X_big, params32)
_, delta = mlp.mse_loss_and_grad(out, Y_big)
gradient_values = [delta.ravel()]
for i in range(mlp.num_layers(params32), 0, -1):       # the backward pass, keeping every gradient
    gradient_values += [(cache[f"A{i - 1}"].T @ delta).ravel(), delta.sum(axis=0)]
    if i > 1:
        delta = (delta @ params32[f"W{i}"].T) * (cache[f"Z{i - 1}"] > 0)
        gradient_values.append(delta.ravel())
values = np.concatenate(gradient_values)
values = values[values != 0]

print(f"{values.size} nonzero gradient values, from {np.abs(values).min():.1e} to {np.abs(values).max():.1e}")
print(f"{'cast to float16':<16} {'become 0':>16} {'subnormal':>16} {'overflow to inf':>16}")
for label, scale in (("as they are", 1.0), ("scaled by 2**16", 2.0**16)):
    with np.errstate(over="ignore"):
        half_values = (values * np.float32(scale)).astype(np.float16)
    counts = [int(np.sum(half_values == 0)), int(np.sum((half_values != 0) & (np.abs(half_values) < 2.0**-14))),
              int(np.sum(np.isinf(half_values)))]
    print(f"{label:<16} " + " ".join(f"{f'{n} ({n / values.size:.2%})':>16}" for n in counts))

fig, ax = plt.subplots(figsize=(8, 3.6))
bins = np.arange(-40, 20.5, 0.5)
ax.hist(np.log2(np.abs(values)), bins=bins, color=COLORS["baseline"], label="gradients (float32)")
ax.hist(np.log2(np.abs(values)) + 16, bins=bins, color=COLORS["learner"], alpha=0.5, label="scaled by 2**16")
ax.axvspan(-40, -25, color="red", alpha=0.12, label="float16: becomes 0")
ax.axvspan(-25, -14, color="orange", alpha=0.12, label="float16: subnormal")
ax.axvline(np.log2(65504), color="red", linestyle=":", label="float16 max 65504")
ax.set_yscale("log")
ax.set_xlabel("log2 |gradient|")
ax.set_ylabel("values (log scale)")
ax.set_title("Gradient magnitudes against float16's range")
ax.legend(fontsize=8, loc="upper left")
plt.show()

# %% [markdown]
# ## An overflow, injected: the scaler at work
#
# Mixed-precision training as above, from the scale $2^{10}$ with a growth
# interval of 4 steps. At steps 8 and 9 the targets are 1000 times larger, and
# the scaled gradients overflow float16. Watch the scale and the master weights
# of the skipped steps.

# %% tags=["demo"]
master, scaler = make_master_params(start), {"scale": 2.0**10, "growth_tracker": 0}
trajectory = [scaler["scale"]]
table = [f"{'step':>4} {'scale used':>10} {'skipped':>7} {'master weights':>17}   scale after, tracker after"]
for step in range(20):
    targets = 1000 * Y_train if step in (8, 9) else Y_train
    before = master
    master, scaler, skipped = mixed_precision_step(master, X_train, targets, scaler, lr, 4)
    trajectory.append(scaler["scale"])
    same = all(np.array_equal(master[key], before[key]) for key in master)
    table.append(f"{step:>4} {trajectory[-2]:>10g} {str(skipped):>7} {'bitwise unchanged' if same else 'updated':>17}"
                 f"   {scaler['scale']:g}, {scaler['growth_tracker']}")
print("\n".join(table))

fig, ax = plt.subplots()
ax.step(range(len(trajectory)), np.log2(trajectory), where="post", color=COLORS["learner"],
        label="log2(scale used at the step)")
ax.axvspan(8, 10, color="red", alpha=0.12, label="corrupted batches (skipped)")
ax.set_xticks(range(0, 21, 2))
ax.set_xlabel("step")
ax.set_ylabel("log2(scale)")
ax.set_title("Back off on overflow, grow after 4 clean steps")
ax.legend()
plt.show()

# %% [markdown]
# ## Measured: activation memory in half precision
#
# One training step of a narrow MLP on a large batch (16384 examples, width 8,
# 8 layers): your `mixed_precision_step` against the same step in float32,
# measured with `measure_peak_memory`. The prediction counts the activations
# alive at the backward peak (as in Parts 2 and 3), a boolean ReLU mask and, for
# mixed precision, the float16 copy of X. The weights are tiny, so the peak is
# almost all activations.

# %% tags=["demo"]
B_mem, D_mem, L_mem = 16384, 8, 8
rng = np.random.default_rng(0)
master_mem = make_master_params(mlp.init_params([D_mem] * L_mem + [1], seed=0))
X_mem = rng.standard_normal((B_mem, D_mem)).astype(np.float32)
Y_mem = rng.standard_normal((B_mem, 1)).astype(np.float32)


def float32_step(master_params, X, Y, learning_rate):
    """The same SGD step, computed in float32: no half copy, no scaling."""
    _, grads = mlp.loss_and_grads(X, Y, master_params)
    return {key: master_params[key] - learning_rate * grads[key] for key in master_params}


peak32 = measure_peak_memory(float32_step, master_mem, X_mem, Y_mem, 0.01).peak_bytes
peak16 = measure_peak_memory(mixed_precision_step, master_mem, X_mem, Y_mem,
                             {"scale": 1024.0, "growth_tracker": 0}, 0.01).peak_bytes
predicted32 = mlp_activation_bytes(B_mem, D_mem, L_mem, bytes_per_element=4)
predicted16 = mixed_precision_activation_bytes(B_mem, D_mem, L_mem)
print(f"{'step':<16} {'measured peak':>14} {'predicted':>10} {'ratio':>6}")
print(f"{'float32':<16} {format_measured(peak32):>14} {format_bytes(predicted32):>10} {format_ratio(peak32, predicted32):>6}")
print(f"{'mixed precision':<16} {format_measured(peak16):>14} {format_bytes(predicted16):>10} "
      f"{format_ratio(peak16, predicted16):>6}")
print(f"mixed precision / float32, measured: {format_ratio(peak16, peak32)}")


def mib(n_bytes):
    """Bytes in MiB, rounded as printed (measurements vary by a few bytes between runs)."""
    return round(n_bytes / 2**20, 1)


fig, ax = plt.subplots()
ax.bar(["float32", "mixed precision"], [mib(peak32), mib(peak16)], color=[COLORS["baseline"], COLORS["measured"]],
       label="measured peak")
ax.plot(["float32", "mixed precision"], [mib(predicted32), mib(predicted16)], "s", color=COLORS["estimated"],
        label="predicted activations")
ax.set_ylabel("MiB")
ax.set_title(f"One training step: batch {B_mem}, width {D_mem}, {L_mem} layers")
ax.legend()
plt.show()

# %% [markdown]
# ## Part summary
#
# - **Half the bytes.** One step of an 8-layer MLP on 16384 examples peaks at
#   about 0.55 of the float32 step's memory (about 4.5 MiB against 8.3 MiB): the
#   stored activations halve; the boolean ReLU mask and the float16 copy of X do not.
# - **What scaling saves.** Cast to float16 as they are, 95 of the 63539 nonzero
#   gradient values (0.15%) become 0 and 38966 (61.3%) subnormal, losing
#   significant bits. Scaled by $2^{16}$ first, none become 0, 7 are subnormal,
#   and 4 overflow, which a step would skip.
# - **The same training.** Final loss after 300 steps: 0.02153 in float32, 0.02159
#   in mixed precision (+0.28%). Only the first step was skipped, at the scale
#   $2^{16}$; the scale then grew to $2^{20}$.
# - Parts 2 to 4 shrank one worker's memory. Part 5 spreads the batch over several
#   workers: data parallelism.
