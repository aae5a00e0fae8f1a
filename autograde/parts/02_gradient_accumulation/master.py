# %% [markdown] part_title="Gradient accumulation"
# # Part 2 · Gradient accumulation: a big batch in small pieces
#
# Activation memory grows with the batch: each example keeps its activations
# until the backward pass has used them. When the batch you want does not fit,
# **gradient accumulation** runs it as $k$ micro-batches, one after another,
# adds up their gradients and takes one optimizer step at the end. Only one
# micro-batch's activations are alive at a time.
#
# Done right, accumulation changes only *where* memory goes: the update is the
# full-batch update, to the last few bits. Done slightly wrong, it silently
# trains a different model, as a widely used trainer did until 2024.
#
# **Goals of this part**
#
# - split a batch into micro-batches, even when it does not divide evenly (011);
# - accumulate gradients without touching anyone else's arrays (012);
# - turn the accumulated sum into the full-batch mean gradient (013);
# - take one accumulated step equal to the full-batch step (014);
# - measure a step's peak memory for $k = 1, 2, 4, 8, 16$ against a prediction.
#
# The model is the course's MLP of any depth from `shared.mlp`:
# `mlp.loss_and_grads(X, Y, params)` returns a batch's mean-squared-error loss
# and the gradients of that *mean* loss, a dict shaped like `params`.
# Stuck? The solved notebook is `solutions/02_gradient_accumulation.ipynb`.

# %% tags=["setup"]
# Set-up (read-only): run this cell first.
import numpy as np
import matplotlib.pyplot as plt

from shared import mlp
from shared.checking import CheckFailure, call, check, check_call, check_equal, check_shape
from shared.checking import check_rules  # the rules for graded code (shared.policy)
from shared.checking import check_memory, check_raises, expect_error
from shared.memory import (accumulation_activation_bytes, format_bytes, format_measured, format_ratio,
                           measure_peak_memory)
from shared.mistakes import mistakes_of
from shared.notebook import setup_notebook
from shared.plotting import COLORS
from shared.progress import lesson_passed, show_progress

setup_notebook()

# %% tags=["nbval-ignore-output", "demo"]
# The panel is live: it updates as test cells pass or fail (nbval cannot compare a live output).
show_progress("02_gradient_accumulation")

# %% [markdown]
# ## 011 · Split into micro batches
#
# ### Intuition
#
# Accumulation first cuts the batch into $k$ pieces. When $k$ does not divide
# $B$, the fair split makes their sizes differ by at most one, and loses no example.
#
# ### Concepts
#
# - `X`: (B, features), `Y`: (B, outputs); micro-batch $j$ is a pair
#   `(X_j, Y_j)` of consecutive rows, in order.
# - **Sizes**: the first $B \bmod k$ micro-batches have $\lceil B/k \rceil$ rows,
#   the rest $\lfloor B/k \rfloor$, as `np.array_split` does.
# - Slices of a NumPy array are **views**: splitting costs no copy.
# - Raise `ValueError` if $k$ is not a positive integer, if $B < k$ (a micro-batch
#   would be empty), or if `X` and `Y` differ in length.
#
# ### Math
#
# With $B = qk + r$, $0 \le r < k$:
#
# $$n_j = \begin{cases} q + 1 & j < r \\ q & j \ge r \end{cases}, \qquad \sum_{j=0}^{k-1} n_j = B .$$
#
# For $B = 10$, $k = 4$: $n = (3, 3, 2, 2)$.
#
# ### Implementation

# %% tags=["solution"]
def split_into_micro_batches(X, Y, num_micro_batches):
    """Split a batch into consecutive micro-batches of near-equal size.

    Args:
        X: (B, features) array.
        Y: (B, outputs) array, the targets of X's rows.
        num_micro_batches: k, a positive int with k <= B.

    Returns:
        A list of k tuples ``(X_j, Y_j)``, in order; the first ``B % k`` have
        ``B // k + 1`` rows, the others ``B // k`` (views are fine; nothing is modified).

    Raises:
        ValueError: if k is not a positive integer, if len(X) != len(Y), or if B < k.
    """
    ### BEGIN SOLUTION
    if isinstance(num_micro_batches, bool) or int(num_micro_batches) != num_micro_batches \
            or num_micro_batches < 1:
        raise ValueError(f"num_micro_batches must be a positive integer, got {num_micro_batches!r}")
    if len(X) != len(Y):
        raise ValueError(f"X has {len(X)} rows but Y has {len(Y)}: they must describe the same examples")
    if len(X) < num_micro_batches:
        raise ValueError(f"cannot split a batch of {len(X)} examples into {num_micro_batches} "
                         f"non-empty micro-batches")
    k = int(num_micro_batches)
    return list(zip(np.array_split(X, k), np.array_split(Y, k)))
    ### END SOLUTION

# %% [markdown]
# ### Tests

# %% tags=["tests"]
X = np.arange(20.0).reshape(10, 2)          # 10 examples, 2 features
Y = np.arange(10.0).reshape(10, 1)
pieces = call(split_into_micro_batches, X, Y, 4)
check(isinstance(pieces, list) and len(pieces) == 4,
      f"split_into_micro_batches(X, Y, 4) should return a list of 4 (X_j, Y_j) pairs, got {pieces!r:.80}")
check_call(split_into_micro_batches, {"X": X, "Y": Y, "num_micro_batches": 4},
           [(X[0:3], Y[0:3]), (X[3:6], Y[3:6]), (X[6:8], Y[6:8]), (X[8:10], Y[8:10])],
           mistakes=mistakes_of("split_into_micro_batches"))
check_call(split_into_micro_batches, {"X": X, "Y": Y, "num_micro_batches": 1}, [(X, Y)])
expect_error(split_into_micro_batches, [X[:3], Y[:3], 4], ["X", "Y", "num_micro_batches"], ValueError,
             "the batch (3 examples) is smaller than the number of micro-batches (4)")
expect_error(split_into_micro_batches, [X, Y, 0], ["X", "Y", "num_micro_batches"], ValueError,
             "num_micro_batches is 0")
expect_error(split_into_micro_batches, [X, Y[:9], 2], ["X", "Y", "num_micro_batches"], ValueError,
             "X has 10 rows and Y has 9")
expect_error(split_into_micro_batches, [X, Y, 2.5], ["X", "Y", "num_micro_batches"], ValueError,
             "num_micro_batches is 2.5, not a whole number")
# float32 data stays float32 (views or copies, never converted):
check_call(split_into_micro_batches, {"X": X[:5].astype(np.float32), "Y": Y[:5].astype(np.float32),
                                      "num_micro_batches": 2},
           [(X[:3].astype(np.float32), Y[:3].astype(np.float32)), (X[3:5].astype(np.float32), Y[3:5].astype(np.float32))],
           mistakes=mistakes_of("split_into_micro_batches"))
lesson_passed("011")

# %% [markdown]
# ### Common mistakes
#
# - **Dropping the remainder**: `B // k` rows per micro-batch silently loses
#   `B % k` examples.
# - **Piling the remainder into the last micro-batch**: sizes (2, 2, 2, 4) for
#   $B = 10$, $k = 4$. The largest micro-batch sets the peak memory, so split
#   as evenly as possible.
# - **Splitting along the feature axis** (`axis=1`): each "micro-batch" then has
#   every example but only some features.
#
# ### Checkpoint
#
# A split is a list of views, sizes differing by at most one. *Self-check:* for
# $B = 7$ and $k = 3$, what are the sizes, and how many bytes does the split
# itself allocate for the arrays' data?

# %% [markdown]
# ## 012 · Accumulate gradients
#
# ### Intuition
#
# Each micro-batch gives the gradient of its own **mean** loss. To rebuild the
# full batch's gradient we add *sums* over examples, so each micro-batch's
# gradient is first multiplied by its size $n_j$. The running total
# lives in an **accumulator** owned by the training loop, not by any micro-batch.
#
# ### Concepts
#
# - `accumulated`: dict of arrays (the running sum), or `None` before the first micro-batch.
# - `micro_grads`: dict of arrays, gradients of micro-batch $j$'s mean loss; `micro_batch_size` is $n_j$.
# - **Aliasing**: two names for one array, so writing through one changes the
#   other. Return new arrays and leave both inputs unchanged.
#
# ### Math
#
# With $g_j = \nabla \bar L_j$,
#
# $$S_j = S_{j-1} + n_j\, g_j, \qquad S_0 = 0, \qquad S_k = \sum_{j=1}^{k} n_j\, g_j = \sum_{i=1}^{B} \nabla \ell_i .$$
#
# ### Implementation

# %% tags=["solution"]
def accumulate_gradients(accumulated, micro_grads, micro_batch_size):
    """Add one micro-batch's gradients, weighted by its size, to the running sum.

    Args:
        accumulated: dict of arrays (the running sum so far), or None for the first micro-batch.
        micro_grads: dict of arrays with the same keys and shapes, the gradients of the
            micro-batch's *mean* loss.
        micro_batch_size: n_j, the number of examples in the micro-batch.

    Returns:
        A new dict ``{key: accumulated[key] + micro_batch_size * micro_grads[key]}`` (with
        ``accumulated`` taken as zeros when None). Neither input dict nor its arrays is
        modified, and no returned array shares memory with an input.
    """
    ### BEGIN SOLUTION
    if accumulated is None:
        return {key: micro_batch_size * grad for key, grad in micro_grads.items()}
    return {key: accumulated[key] + micro_batch_size * micro_grads[key] for key in accumulated}
    ### END SOLUTION

# %% [markdown]
# ### Tests

# %% tags=["tests"]
g1 = {"W": np.array([[1.0, 2.0]]), "b": np.array([0.5])}
g2 = {"W": np.array([[0.0, -1.0]]), "b": np.array([1.0])}
first = check_call(accumulate_gradients, {"accumulated": None, "micro_grads": g1, "micro_batch_size": 3},
                   {"W": np.array([[3.0, 6.0]]), "b": np.array([1.5])},
                   mistakes=mistakes_of("accumulate_gradients"))
# check_call also verifies that no input was changed in place:
check_call(accumulate_gradients, {"accumulated": first, "micro_grads": g2, "micro_batch_size": 2},
           {"W": np.array([[3.0, 4.0]]), "b": np.array([3.5])}, mistakes=mistakes_of("accumulate_gradients"))
again = call(accumulate_gradients, first, g2, 2)
check(again is not first and all(not np.shares_memory(again[k], first[k]) for k in first),
      "accumulate_gradients returned arrays that share memory with `accumulated`: build new arrays "
      "(accumulated[k] + n * g[k]) instead of adding in place")
# The first micro-batch of size 1: n * g equals g, but the result must still be new arrays.
single = call(accumulate_gradients, None, g1, 1)
check(all(not np.shares_memory(single[k], g1[k]) for k in g1),
      "with accumulated=None and micro_batch_size=1 you returned micro_grads' own arrays: return new ones "
      "(e.g. 1 * g), or the caller's gradients change when the sum grows")
# float32 gradients stay float32:
check_call(accumulate_gradients, {"accumulated": {"b": np.array([1.0], dtype=np.float32)},
                                  "micro_grads": {"b": np.array([0.5], dtype=np.float32)}, "micro_batch_size": 2},
           {"b": np.array([2.0], dtype=np.float32)}, mistakes=mistakes_of("accumulate_gradients"))
lesson_passed("012")

# %% [markdown]
# ### Common mistakes
#
# - **Accumulating into an aliased dict**: `accumulated[key] += n * g` changes the
#   caller's arrays, and the first micro-batch's gradients too if the accumulator
#   began as `micro_grads`. The tests check both inputs.
# - **Forgetting the weight**: adding `g` instead of `n * g` treats all
#   micro-batches as the same size.
# - **Overwriting**: returning only the newest micro-batch's contribution.
#
# ### Checkpoint
#
# The accumulator holds a *sum over examples*. *Self-check:* after micro-batches
# of sizes 3, 3, 2, 2, what multiple of the full-batch mean gradient does the
# accumulator hold?

# %% [markdown]
# ## 013 · Scale accumulated gradients
#
# ### Intuition
#
# The full-batch loss is the mean over all $B$ examples, so its gradient is the
# accumulated sum divided by $B$, the number of **examples**. Dividing by the
# number of micro-batches instead is the classic bug.
#
# ### Concepts
#
# - `accumulated`: the dict from lesson 012 after the last micro-batch.
# - `micro_batch_sizes`: the list $(n_1, \dots, n_k)$; their sum is $B$.
# - Return a new dict of new arrays (also when the total is 1); leave the accumulator unchanged.
#
# ### Math
#
# $$\nabla L = \frac{1}{B} \sum_{j=1}^{k} n_j\, g_j, \qquad B = \sum_{j=1}^{k} n_j .$$
#
# The "mean of means" $\frac1k \sum_j g_j$ equals this only when every $n_j = B/k$.
# For $n = (3, 1)$ it counts the second micro-batch's lone example three times
# as much as each example of the first.
#
# ### Implementation

# %% tags=["solution"]
def scale_accumulated_gradients(accumulated, micro_batch_sizes):
    """Turn the accumulated sum into the gradient of the full batch's mean loss.

    Args:
        accumulated: dict of arrays, sum over micro-batches of n_j * g_j (lesson 012).
        micro_batch_sizes: sequence of the positive ints n_j.

    Returns:
        A new dict ``{key: accumulated[key] / sum(micro_batch_sizes)}`` of new arrays (also when the
        sum is 1); ``accumulated`` is not modified.

    Raises:
        ValueError: if micro_batch_sizes is empty or holds a size < 1.
    """
    ### BEGIN SOLUTION
    sizes = list(micro_batch_sizes)
    if not sizes or min(sizes) < 1:
        raise ValueError(f"micro_batch_sizes must be positive sizes, got {sizes!r}")
    total = sum(sizes)
    return {key: value / total for key, value in accumulated.items()}
    ### END SOLUTION

# %% [markdown]
# ### Tests

# %% tags=["tests"]
acc = {"W": np.array([[6.0, -3.0]]), "b": np.array([12.0])}
check_call(scale_accumulated_gradients, {"accumulated": acc, "micro_batch_sizes": [3, 1]},
           {"W": np.array([[1.5, -0.75]]), "b": np.array([3.0])},
           mistakes=mistakes_of("scale_accumulated_gradients"))
check_call(scale_accumulated_gradients, {"accumulated": acc, "micro_batch_sizes": [2, 2, 2]},
           {"W": np.array([[1.0, -0.5]]), "b": np.array([2.0])},
           mistakes=mistakes_of("scale_accumulated_gradients"))
# float32 sums stay float32 (divide by a Python int, not by a NumPy int64 such as np.sum(sizes)):
acc32 = {key: value.astype(np.float32) for key, value in acc.items()}
check_call(scale_accumulated_gradients, {"accumulated": acc32, "micro_batch_sizes": [3, 1]},
           {"W": np.array([[1.5, -0.75]], dtype=np.float32), "b": np.array([3.0], dtype=np.float32)},
           mistakes=mistakes_of("scale_accumulated_gradients"))
# One micro-batch of one example: dividing by 1 changes no number, but the result is still new arrays
# (the accumulator's own arrays would change with the next accumulation):
check_call(scale_accumulated_gradients, {"accumulated": acc, "micro_batch_sizes": [1]}, acc, fresh=True)
expect_error(scale_accumulated_gradients, [acc, []], ["accumulated", "micro_batch_sizes"], ValueError,
             "micro_batch_sizes is empty")
for sizes in ([2, 0], [3, -1, 2]):
    check_raises(scale_accumulated_gradients, {"accumulated": acc, "micro_batch_sizes": sizes}, ValueError,
                 f"a micro-batch size is less than 1 ({sizes})")
lesson_passed("013")

# %% [markdown]
# ### Common mistakes
#
# - **Dividing by the number of micro-batches** (`/ len(micro_batch_sizes)`): the
#   mean of means. In October 2024 a widely used trainer was found doing exactly
#   this; the fix divides the summed loss by the global count of examples
#   (there, tokens).
# - **Forgetting to divide**: the result is $B$ times the gradient, so the
#   learning rate's meaning changes with the batch size.
# - **Dividing by one micro-batch's size** instead of the total.
#
# ### Checkpoint
#
# Divide a sum over examples by the number of examples. *Self-check:* with
# micro-batches of sizes 3 and 1 whose mean gradients are $g_1$ and $g_2$,
# write the correct full-batch gradient and the mean-of-means one.

# %% [markdown]
# ## 014 · Grad accumulation step
#
# ### Intuition
#
# Now the whole step: split, run forward and backward on each micro-batch in
# turn, accumulate, scale, update once. Peak activation memory is the largest
# micro-batch's; the update is the full batch's.
#
# ### Concepts
#
# - `params`: the helper MLP's dict (`W1, b1, ..., WL, bL`); `X`, `Y`: the whole batch.
# - `mlp.loss_and_grads(X_j, Y_j, params)`: micro-batch $j$'s mean loss and gradients.
# - Plain SGD: `new = params - learning_rate * grads`, as new arrays.
#
# ### Math
#
# $$L = \sum_{j=1}^{k} \frac{n_j}{B}\, \bar L_j, \qquad
# \nabla L = \frac{1}{B}\sum_{j=1}^{k} n_j\, \nabla \bar L_j, \qquad
# \theta' = \theta - \eta\, \nabla L .$$
#
# In exact arithmetic this is the full-batch step; in float64 the two agree to
# about $10^{-15}$ relative error, since only the order of the additions differs.
#
# ### Implementation

# %% tags=["solution"]
def grad_accumulation_step(params, X, Y, num_micro_batches, learning_rate):
    """One SGD step on the batch (X, Y), computed in num_micro_batches micro-batches.

    Args:
        params: dict of the helper MLP's parameters (see ``shared.mlp``); not modified.
        X: (B, features) inputs; Y: (B, outputs) targets.
        num_micro_batches: k, 1 <= k <= B.
        learning_rate: float.

    Returns:
        (new_params, loss): a new dict ``params - learning_rate * grad`` where grad is the
        gradient of the full batch's mean loss, and that loss as a Python float.
    Use your ``split_into_micro_batches``, ``accumulate_gradients`` and
    ``scale_accumulated_gradients`` with ``mlp.loss_and_grads``.

    Raises:
        ValueError: as split_into_micro_batches (e.g. B < k).
    """
    ### BEGIN SOLUTION
    accumulated, sizes, loss_sum = None, [], 0.0
    for X_j, Y_j in split_into_micro_batches(X, Y, num_micro_batches):
        loss_j, grads_j = mlp.loss_and_grads(X_j, Y_j, params)
        accumulated = accumulate_gradients(accumulated, grads_j, len(X_j))
        sizes.append(len(X_j))
        loss_sum += len(X_j) * loss_j
    grads = scale_accumulated_gradients(accumulated, sizes)
    new_params = {key: params[key] - learning_rate * grads[key] for key in params}
    return new_params, float(loss_sum / sum(sizes))
    ### END SOLUTION

# %% [markdown]
# ### Tests

# %% tags=["tests"]
rng = np.random.default_rng(0)
p0 = mlp.init_params([3, 5, 2], seed=1)
X10, Y10 = rng.standard_normal((10, 3)), rng.standard_normal((10, 2))
full_loss, full_grads = mlp.loss_and_grads(X10, Y10, p0)
full_step = mlp.sgd_update(p0, full_grads, 0.1)
# 10 examples in 4 micro-batches (3, 3, 2, 2) must give the full-batch step:
check_call(grad_accumulation_step, {"params": p0, "X": X10, "Y": Y10, "num_micro_batches": 4,
                                    "learning_rate": 0.1},
           (full_step, full_loss), mistakes=mistakes_of("grad_accumulation_step"), rtol=1e-12, atol=1e-14)
# k = 1 is the plain step:
check_call(grad_accumulation_step, {"params": p0, "X": X10, "Y": Y10, "num_micro_batches": 1,
                                    "learning_rate": 0.1},
           (full_step, full_loss), mistakes=mistakes_of("grad_accumulation_step"), rtol=1e-12, atol=1e-14)
check_raises(grad_accumulation_step, {"params": p0, "X": X10[:2], "Y": Y10[:2], "num_micro_batches": 3,
                                      "learning_rate": 0.1},
             ValueError, "the batch (2 examples) is smaller than num_micro_batches (3)")
# The point of the lesson: only one micro-batch's activations are alive at a time.
p_mem = mlp.init_params([64, 64, 64, 64, 4], seed=2)
X_mem, Y_mem = rng.standard_normal((512, 64)), rng.standard_normal((512, 4))
allowed = int(1.5 * accumulation_activation_bytes(512, 64, 4, 8)) + 4 * sum(v.nbytes for v in p_mem.values())
check_memory(grad_accumulation_step, {"params": p_mem, "X": X_mem, "Y": Y_mem, "num_micro_batches": 8,
                                      "learning_rate": 0.05},
             allowed, "1.5 x one micro-batch's activations, plus four parameter-sized dicts: run the micro-batches "
                      "one after another, never the whole batch at once")
lesson_passed("014")

# %% [markdown]
# ### Common mistakes
#
# - **Mean of micro-batch means**: averaging the $k$ micro-batch gradients and
#   losses, the 2024 bug of lesson 013. The tests' uneven splits catch it.
# - **Forgetting to divide**: summing the $k$ micro-batch means makes the
#   gradient, and the step, about $k$ times too large.
# - **Stepping after every micro-batch**: $k$ small-batch SGD steps, a different
#   algorithm from one large-batch step.
#
# ### Checkpoint
#
# An accumulated step is the full-batch step, computed in pieces. *Self-check:*
# which arrays must stay alive from the first micro-batch to the last, and
# which are freed after each one?

# %% [markdown]
# ## Measured: the peak memory of a step, for k = 1 … 16
#
# **Prediction.** A step's memory is a constant part $C$ (gradients,
# accumulator, update; about the size of the parameters) plus one
# micro-batch's activations. For the helper MLP with $L$ layers of width $D$, a
# micro-batch of $b$ examples holds at its backward peak $2(L-1)$ stored arrays
# ($Z_i$ and $A_i$ per hidden layer), two working gradient arrays and a boolean
# ReLU mask:
#
# $$A(b) = \bigl(2(L-1) + 2\bigr)\, b D \cdot 8 \text{ bytes} + bD \text{ bytes}, \qquad
# \text{peak}_k \approx C + A\!\left(\lceil B/k \rceil\right).$$
#
# **Measurement.** `measure_peak_memory` runs your `grad_accumulation_step`
# under `tracemalloc`, which sees every NumPy allocation; $C$ is measured on a
# batch of one example.

# %% tags=["demo"]
B_mem, D_mem, L_mem = 8192, 64, 8
rng = np.random.default_rng(0)
params_mem = mlp.init_params([D_mem] * L_mem + [1], seed=0)
X_mem, Y_mem = rng.standard_normal((B_mem, D_mem)), rng.standard_normal((B_mem, 1))

C_mem = measure_peak_memory(grad_accumulation_step, params_mem, X_mem[:1], Y_mem[:1], 1, 0.1).peak_bytes
ks = [1, 2, 4, 8, 16]
measured, predicted = [], []
for k in ks:
    peak = measure_peak_memory(grad_accumulation_step, params_mem, X_mem, Y_mem, k, 0.1).peak_bytes
    measured.append(peak - C_mem)
    predicted.append(accumulation_activation_bytes(B_mem, D_mem, L_mem, k))
print(f"B = {B_mem}, D = {D_mem}, L = {L_mem};  C = {format_measured(C_mem)}")
print(f"{'k':>3} {'micro-batch':>11} {'measured peak - C':>18} {'predicted A':>12} {'ratio':>6}")
for k, m, p in zip(ks, measured, predicted):
    print(f"{k:>3} {-(-B_mem // k):>11} {format_measured(m):>18} {format_bytes(p):>12} {format_ratio(m, p):>6}")


def mib(n_bytes):
    """Bytes in MiB, rounded as printed (measurements vary by a few bytes between runs)."""
    return round(n_bytes / 2**20, 1)


fig, ax = plt.subplots()
ax.plot(ks, [mib(m) for m in measured], "o-", color=COLORS["measured"], label="measured (peak - C)")
ax.plot(ks, [mib(p) for p in predicted], "s--", color=COLORS["estimated"], label="predicted A(ceil(B/k))")
ax.set_xscale("log", base=2)
ax.set_xticks(ks, [str(k) for k in ks])
ax.set_xlabel("micro-batches k")
ax.set_ylabel("activation memory (MiB)")
ax.set_title("Gradient accumulation: activation memory falls as 1/k")
ax.legend()
plt.show()

# %% [markdown]
# ## Part summary
#
# - Accumulation trades time for memory: $k$ micro-batches in sequence divide
#   activation memory by about $k$ (measured above) and give the full-batch update.
# - Sum over examples, divide by the number of examples; never average
#   micro-batch means, never alias the accumulator.
# - Accumulation cannot shrink the memory of a *single example's* path through
#   a deep network. Part 3 attacks that: store less, recompute the rest.
