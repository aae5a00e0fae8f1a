# %% [markdown] part_title="ZeRO-style optimizer sharding"
# # Part 6 · ZeRO: every worker keeps a slice of the optimizer
#
# In Part 5 every worker holds a full replica of the parameters, their gradients
# and the optimizer's state. **Adam**'s state is two numbers per parameter; for
# mixed-precision training the ZeRO paper counts **16 bytes per parameter**, 12 of
# them optimizer state (an fp32 master copy, momentum and variance): 120 GB on
# every worker for a 7.5-billion-parameter model.
#
# ZeRO's first stage removes that redundancy. Adam's update is element-wise, so a
# worker needs the state of the parameters it updates and no other: cut the flat
# parameter vector into $N$ contiguous shards, and let worker $r$ own shard $r$.
# One training step becomes
#
# 1. **reduce-scatter** the gradients: worker $r$ receives the mean gradient of its shard;
# 2. a **local Adam update** of its shard of the parameters, with its shard of the state;
# 3. **all-gather** the updated shards: every worker has all the new parameters again.
#
# The result is *exactly* Adam on one worker, with $1/N$ of the state per worker,
# for the bytes of Part 5's ring all-reduce, which *was* a reduce-scatter followed
# by an all-gather.
#
# **Goals of this part**
#
# - Adam's state and its memory (031);
# - its $N$ contiguous shards of the flat parameter vector (032);
# - one worker's Adam update of its own shard (033);
# - the ring all-gather of the updated shards (034);
# - the whole ZeRO step, equal to plain Adam, with its traffic and memory (035);
# - the memory per worker for $N = 1, 2, 4, 8$ against the ZeRO paper's stages 1, 2 and 3.
#
# The workers run on Part 5's simulated cluster (`shared.cluster`), whose ledger
# counts every byte and message. Stuck? The solved notebook is
# `solutions/06_zero_sharding.ipynb`.

# %% tags=["setup"]
# Set-up (read-only): run this cell first.
import numpy as np
import matplotlib.pyplot as plt

from shared import mlp
from shared.checking import call, check, check_call, check_equal, check_memory, check_raises, check_workers_apart
from shared.checking import check_rules  # the rules for graded code (shared.policy)
from shared.checking import check_sends_on_given_cluster
from shared.cluster import Cluster
from shared.lesson_blocks import ring_all_reduce_mean  # lesson 028's ring, the helper's version
from shared.memory import (format_measured, measure_peak_memory, partitioned_state_allowed_bytes,
                           zero_step_allowed_bytes)
from shared.mistakes import mistakes_of
from shared.notebook import setup_notebook
from shared.plotting import COLORS, plot_worker_chunks
from shared.progress import lesson_passed, show_progress

setup_notebook()

# %% tags=["nbval-ignore-output", "demo"]
# The panel is live: it updates as test cells pass or fail (nbval cannot compare a live output).
show_progress("06_zero_sharding")

# %% [markdown]
# ## 031 · Init Adam state
#
# ### Intuition
#
# SGD moves each parameter against its gradient and forgets. Adam keeps, for every
# parameter, a running mean of the gradient (the *first moment* $m$) and of its
# square (the *second moment* $v$), and scales each step by $m / \sqrt{v}$. This
# **optimizer state** is twice the size of the parameters. Before the first step it
# is all zeros, and the step count is 0.
#
# ### Concepts
#
# - `params`: a dict of arrays (`W1, b1, ...`) of one float dtype; not modified.
# - Return `{"step": 0, "m": {...}, "v": {...}}`: `step` the Python int 0, `m` and `v`
#   new zero arrays with the keys, shapes and dtype of `params` (float32 stays
#   float32).
#
# ### Math
#
# Adam (Kingma and Ba) with gradient $g_t$ at step $t = 1, 2, \dots$, all operations element-wise:
#
# $$m_t = \beta_1 m_{t-1} + (1-\beta_1)\, g_t, \qquad v_t = \beta_2 v_{t-1} + (1-\beta_2)\, g_t^2,
# \qquad m_0 = v_0 = 0,$$
#
# $$\hat m_t = \frac{m_t}{1-\beta_1^{\,t}}, \qquad \hat v_t = \frac{v_t}{1-\beta_2^{\,t}}, \qquad
# \theta_t = \theta_{t-1} - \eta\, \frac{\hat m_t}{\sqrt{\hat v_t} + \epsilon}.$$
#
# The state between steps is $(t, m_t, v_t)$: $2\Psi S$ bytes for $\Psi$ parameters
# of $S$ bytes each.
#
# ### Implementation

# %% tags=["solution"]
def init_adam_state(params):
    """Adam's state before the first step.

    Args:
        params: dict of float arrays (the parameters); not modified.

    Returns:
        A dict ``{"step": 0, "m": {key: zeros}, "v": {key: zeros}}``: step the Python int 0,
        m and v new dicts of zero arrays with the keys, shapes and dtypes of params.
    """
    ### BEGIN SOLUTION
    return {"step": 0,
            "m": {key: np.zeros_like(value) for key, value in params.items()},
            "v": {key: np.zeros_like(value) for key, value in params.items()}}
    ### END SOLUTION

# %% [markdown]
# ### Tests

# %% tags=["tests"]
params = {"W1": np.array([[1.0, -2.0, 3.0], [0.5, 0.0, -1.0]]), "b1": np.zeros(3)}   # a fresh MLP's zero bias
zeros = {"W1": np.zeros((2, 3)), "b1": np.zeros(3)}
two_zeros = {"step": 0, "m": zeros, "v": {key: z.copy() for key, z in zeros.items()}}  # m and v: arrays of their own
check_call(init_adam_state, {"params": params}, two_zeros, mistakes=mistakes_of("init_adam_state"))
state = call(init_adam_state, params)
check(not any(np.shares_memory(state[moment][key], params[key]) for moment in ("m", "v") for key in params),
      "the moments must be new arrays, not the parameters' arrays (even where a parameter is all zeros, as "
      "b1 is: np.zeros_like(p) makes a new one)")
state_bytes = sum(array.nbytes for moment in ("m", "v") for array in state[moment].values())
check(state_bytes == 2 * sum(p.nbytes for p in params.values()),
      f"Adam's state should take twice the parameters' bytes ({2 * 72}), got {state_bytes}")
# float32 parameters: float32 moments (4 bytes a number)
params32 = {key: value.astype(np.float32) for key, value in params.items()}
zeros32 = {key: value.astype(np.float32) for key, value in zeros.items()}
two_zeros32 = {"step": 0, "m": zeros32, "v": {key: z.copy() for key, z in zeros32.items()}}
check_call(init_adam_state, {"params": params32}, two_zeros32, mistakes=mistakes_of("init_adam_state"))
lesson_passed("031")

# %% [markdown]
# ### Common mistakes
#
# - **Moments of dtype float64 for float32 parameters**: `np.zeros(p.shape)` is
#   always float64, twice the memory; `np.zeros_like(p)` keeps the dtype.
# - **The step counter starts at 1**: no step has been taken yet; the first update
#   makes it 1.
#
# ### Checkpoint
#
# Adam's state: a step count and two zero arrays per parameter, $2\times$ the
# parameters' memory. *Self-check:* for an MLP with $10^8$ float32 parameters, how
# many bytes do `m` and `v` take, and how many per worker if 8 data-parallel
# workers each hold a replica?

# %% [markdown]
# ## 032 · Partition optimizer state
#
# ### Intuition
#
# With $N$ workers, ZeRO gives each the state of $1/N$ of the parameters, ignoring
# tensor boundaries: all parameters form **one flat vector** (every tensor raveled,
# in the dict's order), cut into $N$ contiguous shards whose sizes differ by at most
# one element. Worker $r$ keeps `m` and `v` of shard $r$ only.
#
# PyTorch's `ZeroRedundancyOptimizer` instead gives whole tensors, largest first, to
# the rank with the smallest total so far: one large weight matrix makes its owner
# hold far more than $1/N$ (measured at the end of this notebook).
#
# ### Concepts
#
# - `state`: lesson 031's dict (any step, any values); `num_workers`: $N$.
# - The flat vector: `np.concatenate([a.ravel() for a in state["m"].values()])`
#   (the same for `v`); the shards: `np.array_split(flat, N)`.
# - Return a list of $N$ dicts, worker $r$'s at index $r$:
#   `{"step": state["step"], "m": shard r of flat m, "v": shard r of flat v}`,
#   1-D arrays of the state's dtype.
# - **Copy each slice.** A slice is a view and keeps its whole base array alive: a
#   worker that slices its shard from its own full copy keeps the full copy. The
#   shards together must keep the state once and share no memory with `state`; the
#   tests measure what your result keeps alive.
# - The given checks raise `ValueError` for $N < 1$, $N > \Psi$, or `m` and `v`
#   with different keys or shapes.
#
# ### Math
#
# With $\Psi$ elements, $q = \lfloor \Psi / N \rfloor$ and $\rho = \Psi \bmod N$, worker $r$ owns
#
# $$n_r = \begin{cases} q + 1 & r < \rho \\ q & r \ge \rho \end{cases}
# \qquad \text{elements, starting at } \; s_r = r\,q + \min(r, \rho),$$
#
# and holds $2\, n_r S$ bytes of state ($S$ bytes a number): $1/N$ of $2\Psi S$, to
# within one element. For $\Psi = 13$ and $N = 4$: shards of $4, 3, 3, 3$ elements
# starting at $0, 4, 7, 10$.
#
# ### Implementation

# %% tags=["solution"]
def partition_optimizer_state(state, num_workers):
    """Cut Adam's state into num_workers contiguous shards of the flat parameter vector.

    Args:
        state: dict ``{"step": int, "m": {key: array}, "v": {key: array}}`` (lesson 031);
            not modified.
        num_workers: N, an int with 1 <= N <= the number of elements of m.

    Returns:
        A list of N dicts, worker r's at index r: ``{"step": state["step"], "m": m_r, "v": v_r}``,
        with m_r (v_r) the r-th of ``np.array_split(flat, N)`` of the flat m (v) (every array
        raveled, in the dict's order, concatenated): 1-D arrays of the state's dtype that share
        no memory with the state, and all N shards together keep m and v once (copies of the
        slices; not views of a full copy per worker).

    Raises:
        ValueError: if N < 1, if N is larger than the number of elements, or if m and v
            differ in keys or shapes.
    """
    # Given · checking the input: bookkeeping, written for you (cutting the state into shards is the lesson).
    m, v = state["m"], state["v"]
    if m.keys() != v.keys() or any(m[key].shape != v[key].shape for key in m):
        raise ValueError("m and v must have the same keys and shapes (they describe the same parameters)")
    if num_workers < 1:
        raise ValueError(f"num_workers must be at least 1, got {num_workers}")
    total = sum(value.size for value in m.values())
    if num_workers > total:
        raise ValueError(f"{num_workers} workers for {total} elements: some worker would own nothing")
    ### BEGIN SOLUTION
    flat_m = np.concatenate([value.ravel() for value in m.values()])
    flat_v = np.concatenate([value.ravel() for value in v.values()])
    return [{"step": state["step"], "m": m_r.copy(), "v": v_r.copy()}
            for m_r, v_r in zip(np.array_split(flat_m, num_workers), np.array_split(flat_v, num_workers))]
    ### END SOLUTION

# %% [markdown]
# ### Tests

# %% tags=["tests"]
# 13 numbers in four tensors; m holds 0, 1, ..., 12 and v 100, ..., 112, so you can see where each goes.
shapes = {"W1": (2, 3), "b1": (3,), "W2": (3, 1), "b2": (1,)}
m13, v13, offset = {}, {}, 0
for key, shape in shapes.items():
    size = int(np.prod(shape))
    m13[key] = np.arange(offset, offset + size, dtype=float).reshape(shape)
    v13[key] = m13[key] + 100
    offset += size
state13 = {"step": 7, "m": m13, "v": v13}
# N = 4: 13 = 3 * 4 + 1, so worker 0 owns 4 elements (0-3: W1's first row and W1[1, 0]), the others 3.
shards = check_call(partition_optimizer_state, {"state": state13, "num_workers": 4},
                    [{"step": 7, "m": np.arange(lo, hi, dtype=float), "v": np.arange(lo, hi, dtype=float) + 100}
                     for lo, hi in ((0, 4), (4, 7), (7, 10), (10, 13))],
                    mistakes=mistakes_of("partition_optimizer_state"))
per_worker = [shard["m"].nbytes + shard["v"].nbytes for shard in shards]
check(per_worker == [64, 48, 48, 48],
      f"each worker should hold 2 x 8 bytes x (4, 3, 3, 3) numbers of state, [64, 48, 48, 48] bytes, "
      f"got {per_worker}")
check(not any(np.shares_memory(shard[moment], state13[moment][key])
              for shard in call(partition_optimizer_state, state13, 4) for moment in ("m", "v") for key in shapes),
      "a shard shares memory with the state you were given: each shard must be its own copy")
check_call(partition_optimizer_state, {"state": state13, "num_workers": 1},
           [{"step": 7, "m": np.arange(13.0), "v": np.arange(13.0) + 100}],
           mistakes=mistakes_of("partition_optimizer_state"))
check_call(partition_optimizer_state, {"state": state13, "num_workers": 13},
           [{"step": 7, "m": np.array([float(i)]), "v": np.array([i + 100.0])} for i in range(13)],
           mistakes=mistakes_of("partition_optimizer_state"))
# One 1-D tensor and one worker: the shard is still a new array, not the tensor itself
alone = {"step": 0, "m": {"b": np.array([1.0, 2.0])}, "v": {"b": np.array([3.0, 4.0])}}
only = call(partition_optimizer_state, alone, 1)[0]
check(not (np.shares_memory(only["m"], alone["m"]["b"]) or np.shares_memory(only["v"], alone["v"]["b"])),
      "with one worker and one 1-D tensor the shard must still be a copy, not the tensor itself")
# float32 state: float32 shards, 4 bytes a number
state32 = {"step": 2, "m": {k: a.astype(np.float32) for k, a in m13.items()},
           "v": {k: a.astype(np.float32) for k, a in v13.items()}}
check_call(partition_optimizer_state, {"state": state32, "num_workers": 2},
           [{"step": 2, "m": np.arange(0, 7, dtype=np.float32), "v": np.arange(100, 107, dtype=np.float32)},
            {"step": 2, "m": np.arange(7, 13, dtype=np.float32), "v": np.arange(107, 113, dtype=np.float32)}],
           mistakes=mistakes_of("partition_optimizer_state"))
# The point: the shards together keep the state once, whatever N (a view of a full copy keeps the copy).
big = init_adam_state(mlp.init_params([64, 256, 256, 8], seed=0))
check_memory(partition_optimizer_state, {"state": big, "num_workers": 8}, partitioned_state_allowed_bytes(big),
             "1.25 x the state's bytes: each worker keeps its own shard only", kind="kept")
check_raises(partition_optimizer_state, {"state": state13, "num_workers": 0}, ValueError, "num_workers is 0")
check_raises(partition_optimizer_state, {"state": state13, "num_workers": 14}, ValueError,
             "there are more workers (14) than elements (13)")
check_raises(partition_optimizer_state, {"state": {"step": 7, "m": m13, "v": {**v13, "b2": np.zeros(2)}},
                                         "num_workers": 2}, ValueError, "v's b2 has another shape than m's")
lesson_passed("032")

# %% [markdown]
# ### Common mistakes
#
# - **Each tensor cut into $N$ pieces**: the shards are not runs of the flat vector,
#   so lesson 035's reduce-scatter and all-gather do not line up with them.
# - **Whole tensors assigned greedily** (`ZeroRedundancyOptimizer`): unbalanced shards.
# - **The last worker takes the remainder**: sizes then differ by up to $N - 1$;
#   `np.array_split` gives the first $\Psi \bmod N$ workers one element more.
#
# ### Checkpoint
#
# One flat vector, $N$ contiguous shards, a copy each: $1/N$ of the state per
# worker. *Self-check:* for $\Psi = 10$ and $N = 4$, which elements does worker 2
# own, and how many bytes of float64 state does it hold?

# %% [markdown]
# ## 033 · Local shard Adam update
#
# ### Intuition
#
# Adam is element-wise: a parameter's new value depends only on its own gradient,
# $m$ and $v$, and the step count. So a worker can update its shard knowing nothing
# of the rest. The step count is the optimizer's: all shards take step $t + 1$ together.
#
# ### Concepts
#
# - `param_shard`, `grad_shard`: the worker's slice of the flat parameters and of
#   the (already averaged) gradient, of one shape (any shape works; for $N = 1$
#   this is plain Adam).
# - `state_shard`: `{"step": t, "m": ..., "v": ...}` (lesson 032), `m` and `v`
#   shaped like `param_shard`.
# - Return `(new_param_shard, {"step": t + 1, "m": new m, "v": new v})`: new arrays
#   of the inputs' dtype, in a new dict; the inputs are not modified.
# - The given checks raise `ValueError` for `learning_rate <= 0`, `beta1` or `beta2`
#   outside $[0, 1)$, or a gradient or moment not shaped like `param_shard`.
#
# ### Math
#
# With $t$ the state's step, the update is step $t + 1$:
#
# $$m' = \beta_1 m + (1-\beta_1)\, g, \qquad v' = \beta_2 v + (1-\beta_2)\, g^2,$$
#
# $$\theta' = \theta - \eta\, \frac{m' / (1-\beta_1^{\,t+1})}{\sqrt{v' / (1-\beta_2^{\,t+1})} + \epsilon}.$$
#
# **Why the bias correction.** $m$ starts at 0, so after the first step
# $m' = (1-\beta_1) g$, ten times too small for $\beta_1 = 0.9$ ($v'$ a thousand times
# for $\beta_2 = 0.999$). Dividing by $1 - \beta^{t+1}$ removes this bias: the first
# update is $\eta\, g / (|g| + \epsilon)$, about $\eta$ whatever the gradient's scale.
#
# ### Implementation

# %% tags=["solution"]
def local_shard_adam_update(param_shard, grad_shard, state_shard, learning_rate, beta1=0.9, beta2=0.999,
                            eps=1e-8):
    """One worker's Adam step on the shard of the parameters whose state it owns.

    Args:
        param_shard: float array (1-D in ZeRO), the worker's slice of the flat parameters.
        grad_shard: array of the same shape, the mean gradient of those parameters.
        state_shard: dict ``{"step": t, "m": array, "v": array}``, m and v shaped like param_shard.
        learning_rate: eta > 0; beta1, beta2: in [0, 1); eps: added to the square root.
        None of the inputs is modified.

    Returns:
        (new_param_shard, new_state_shard): ``param_shard - lr * m_hat / (sqrt(v_hat) + eps)``
        and the new dict ``{"step": t + 1, "m": m', "v": v'}``, with
        m' = beta1 m + (1 - beta1) g, v' = beta2 v + (1 - beta2) g**2,
        m_hat = m' / (1 - beta1**(t + 1)), v_hat = v' / (1 - beta2**(t + 1)); new arrays, same dtype.

    Raises:
        ValueError: if learning_rate <= 0, if beta1 or beta2 is outside [0, 1), or if grad_shard,
            m or v is not shaped like param_shard.
    """
    # Given · checking the input: bookkeeping, written for you (Adam's update on the shard is the lesson).
    if not learning_rate > 0:
        raise ValueError(f"learning_rate must be positive, got {learning_rate}")
    if not 0 <= beta1 < 1:
        raise ValueError(f"beta1 must be in [0, 1), got {beta1}")
    if not 0 <= beta2 < 1:
        raise ValueError(f"beta2 must be in [0, 1), got {beta2}")
    m, v = state_shard["m"], state_shard["v"]
    if grad_shard.shape != param_shard.shape:
        raise ValueError(f"grad_shard has shape {grad_shard.shape}, param_shard {param_shard.shape}")
    if m.shape != param_shard.shape or v.shape != param_shard.shape:
        raise ValueError(f"the state's m and v have shapes {m.shape} and {v.shape}, param_shard "
                         f"{param_shard.shape}: the state must be the state of these parameters")
    ### BEGIN SOLUTION
    step = state_shard["step"] + 1
    m = beta1 * m + (1 - beta1) * grad_shard
    v = beta2 * v + (1 - beta2) * grad_shard ** 2
    m_hat = m / (1 - beta1 ** step)
    v_hat = v / (1 - beta2 ** step)
    return param_shard - learning_rate * m_hat / (np.sqrt(v_hat) + eps), {"step": step, "m": m, "v": v}
    ### END SOLUTION

# %% [markdown]
# ### Tests

# %% tags=["tests"]
# The first step (t = 0 -> 1) with beta1 = 0.5, beta2 = 0.75 and eps = 0: m' = g / 2 = [1, -2],
# v' = g**2 / 4 = [1, 4]; corrected, m_hat = [2, -4] and v_hat = [4, 16]: each parameter moves by lr.
check_call(local_shard_adam_update,
           {"param_shard": np.array([1.0, 2.0]), "grad_shard": np.array([2.0, -4.0]),
            "state_shard": {"step": 0, "m": np.zeros(2), "v": np.zeros(2)},
            "learning_rate": 0.1, "beta1": 0.5, "beta2": 0.75, "eps": 0.0},
           (np.array([0.9, 2.1]), {"step": 1, "m": np.array([1.0, -2.0]), "v": np.array([1.0, 4.0])}),
           mistakes=mistakes_of("local_shard_adam_update"), rtol=1e-12, atol=1e-14)
# Any shape works (for N = 1 this is plain Adam on a whole tensor): the same first step on a 2 x 2 matrix.
check_call(local_shard_adam_update,
           {"param_shard": np.array([[1.0, 2.0], [3.0, 4.0]]), "grad_shard": np.array([[2.0, -4.0], [1.0, -1.0]]),
            "state_shard": {"step": 0, "m": np.zeros((2, 2)), "v": np.zeros((2, 2))},
            "learning_rate": 0.1, "beta1": 0.5, "beta2": 0.75, "eps": 0.0},
           (np.array([[0.9, 2.1], [2.9, 4.1]]),
            {"step": 1, "m": np.array([[1.0, -2.0], [0.5, -0.5]]), "v": np.array([[1.0, 4.0], [0.25, 0.25]])}),
           mistakes=mistakes_of("local_shard_adam_update"), rtol=1e-12, atol=1e-14)
# A later step (t = 2 -> 3) with the default betas and eps: the bias correction uses t + 1 = 3.
p3, g3 = np.array([0.5, -1.0, 2.0]), np.array([0.3, -0.2, 0.0])
s3 = {"step": 2, "m": np.array([0.1, 0.05, -0.2]), "v": np.array([0.01, 0.04, 0.09])}
check_call(local_shard_adam_update,
           {"param_shard": p3, "grad_shard": g3, "state_shard": s3, "learning_rate": 0.01, "beta1": 0.9,
            "beta2": 0.999, "eps": 1e-8},
           (np.array([0.49758551155868763, -1.0002525132461075, 2.001212670069115]),
            {"step": 3, "m": np.array([0.12, 0.025, -0.18]), "v": np.array([0.01008, 0.04, 0.08991])}),
           mistakes=mistakes_of("local_shard_adam_update"), rtol=1e-12, atol=1e-14)
# beta1 = beta2 = 0 are allowed: then m' = g and v' = g**2, and the step is lr * g / (|g| + eps). The new m
# equals the gradient, and is still a new array.
check_call(local_shard_adam_update, {"param_shard": p3, "grad_shard": g3, "state_shard": s3,
                                      "learning_rate": 0.01, "beta1": 0.0, "beta2": 0.0, "eps": 1e-8},
           (p3 - 0.01 * g3 / (np.abs(g3) + 1e-8), {"step": 3, "m": g3, "v": g3 ** 2}),
           mistakes=mistakes_of("local_shard_adam_update"), rtol=1e-12, atol=1e-14)
_, edge_state = call(local_shard_adam_update, p3, g3, s3, 0.01, 0.0, 0.0, 1e-8, returns=("param_shard", "state"))
check(not np.shares_memory(edge_state["m"], g3), "the new m must be a new array, even when it equals grad_shard")
# float32 in, float32 out
s3_32 = {"step": 2, "m": s3["m"].astype(np.float32), "v": s3["v"].astype(np.float32)}
check_call(local_shard_adam_update,
           {"param_shard": p3.astype(np.float32), "grad_shard": g3.astype(np.float32), "state_shard": s3_32,
            "learning_rate": 0.01, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8},
           (np.array([0.49758551, -1.0002525, 2.0012126], dtype=np.float32),
            {"step": 3, "m": np.array([0.12, 0.025, -0.18], dtype=np.float32),
             "v": np.array([0.01008, 0.04, 0.08991], dtype=np.float32)}),
           mistakes=mistakes_of("local_shard_adam_update"), rtol=1e-5, atol=1e-7)
good = {"param_shard": p3, "grad_shard": g3, "state_shard": s3, "learning_rate": 0.01, "beta1": 0.9,
        "beta2": 0.999, "eps": 1e-8}
check_raises(local_shard_adam_update, {**good, "learning_rate": 0.0}, ValueError, "the learning rate is 0")
check_raises(local_shard_adam_update, {**good, "beta1": 1.0}, ValueError, "beta1 is 1")
check_raises(local_shard_adam_update, {**good, "beta2": -0.5}, ValueError, "beta2 is negative")
check_raises(local_shard_adam_update, {**good, "grad_shard": g3[:2]}, ValueError,
             "grad_shard has 2 elements and param_shard 3")
check_raises(local_shard_adam_update, {**good, "state_shard": {**s3, "v": np.zeros(4)}}, ValueError,
             "the state's v has 4 elements and param_shard 3")
lesson_passed("033")

# %% [markdown]
# ### Common mistakes
#
# - **No bias correction**: $m$ and, worse, $v$ start far too small, so the early
#   updates are too large.
# - **Bias correction with the old step count**: use $t + 1$; with $t$ the first
#   update divides by $1 - \beta^0 = 0$.
# - **eps inside the square root**: $\sqrt{\hat v + \epsilon}$ is another optimizer.
# - **Updating the state in place**: `m *= beta1`, as `torch.optim.Adam` does,
#   changes the caller's state.
#
# ### Checkpoint
#
# Element-wise, so shard-local; one global step count; corrections by
# $1 - \beta^{t+1}$. *Self-check:* at the first step, with $g = 10^{-6}$ and
# $\eta = 10^{-3}$, by how much does the parameter move, with and without the bias
# correction ($\beta_2 = 0.999$, $\epsilon = 10^{-8}$)?

# %% [markdown]
# ## 034 · All gather param shards
#
# ### Intuition
#
# After the updates, worker $r$ holds the new values of its shard only, and every
# worker needs them all for the next forward pass. An **all-gather** hands every
# shard to every worker. On a ring it is the second half of lesson 028's all-reduce:
# in each of $N - 1$ rounds every worker passes one shard to its right neighbour,
# which keeps it and passes it on.
#
# ### Concepts
#
# - `param_shards`: $N$ 1-D arrays of one dtype, worker $r$'s at index $r$ (lengths
#   may differ).
# - Round $s = 0, \dots, N-2$: worker $r$ sends shard $(r - s) \bmod N$ to worker
#   $(r+1) \bmod N$, which keeps it.
# - Then each worker concatenates the $N$ shards **in rank order**, not arrival
#   order, into its own new 1-D array.
# - Return `(vectors, traffic)`: the $N$ vectors and `cluster.ledger.summary()`, run
#   on `cluster` when given (a new `Cluster(N)` otherwise); every message sent must
#   be received.
# - The given checks raise `ValueError` for no shards, shards of different dtypes,
#   or a shard that is not 1-D.
#
# ### Math
#
# With shards of $S_0, \dots, S_{N-1}$ bytes, $S = \sum_q S_q$, worker $r$ sends every
# shard but its right neighbour's and receives every shard but its own:
#
# $$\text{sent}_r = S - S_{(r+1) \bmod N}, \qquad \text{received}_r = S - S_r, \qquad
# \text{time} \approx (N-1)\,\alpha + \frac{N-1}{N}\, S\beta \;\; (\text{equal shards}).$$
#
# When $N$ divides the vector each worker sends $(N-1)S/N$: half a ring all-reduce.
#
# ### Implementation

# %% tags=["solution"]
def all_gather_param_shards(param_shards, cluster=None):
    """The ring all-gather: every worker ends with all the shards, concatenated in rank order.

    Args:
        param_shards: list of N 1-D arrays of one dtype (worker r's shard at index r); not modified.
        cluster: the ``Cluster(N)`` to run on (a new one when None).

    Returns:
        (vectors, traffic): vectors a list of N new 1-D arrays, worker r's own
        ``np.concatenate(param_shards)`` (the shards in rank order 0..N-1, as it received them); traffic
        ``cluster.ledger.summary()`` (every message received). Rounds s = 0..N-2: worker r sends shard
        (r - s) % N to worker (r + 1) % N, which keeps it.

    Raises:
        ValueError: if param_shards is empty, if the shards differ in dtype, or if a shard is not 1-D.
    """
    # Given · checking the input and the cluster: bookkeeping, written for you (the ring's rounds are the lesson).
    if len(param_shards) == 0:
        raise ValueError("param_shards is empty: an all-gather needs at least one worker")
    dtype = param_shards[0].dtype
    for rank, shard in enumerate(param_shards):
        if shard.ndim != 1:
            raise ValueError(f"worker {rank}'s shard has shape {shard.shape}: shards are 1-D slices of the flat vector")
        if shard.dtype != dtype:
            raise ValueError(f"worker {rank}'s shard is {shard.dtype}, worker 0's is {dtype}")
    n = len(param_shards)
    if cluster is None:
        cluster = Cluster(n)
    ### BEGIN SOLUTION
    held = [{rank: param_shards[rank]} for rank in range(n)]  # what each worker has: shard index -> array
    for step in range(n - 1):
        with cluster.round():
            for rank in range(n):
                cluster.send(rank, (rank + 1) % n, held[rank][(rank - step) % n])
        for rank in range(n):
            held[rank][(rank - 1 - step) % n] = cluster.receive(rank, (rank - 1) % n)
    vectors = [np.concatenate([held[rank][index] for index in range(n)]) for rank in range(n)]
    return vectors, cluster.ledger.summary()
    ### END SOLUTION

# %% [markdown]
# ### Tests

# %% tags=["tests"]
# 3 workers, shards of 3, 2 and 2 numbers (24, 16 and 16 bytes). Worker 0 sends its own shard, then shard 2
# (received from worker 2): 40 bytes; worker 1 sends shards 1 and 0: 40; worker 2 shards 2 and 1: 32.
shards3 = [np.array([0.0, 1.0, 2.0]), np.array([3.0, 4.0]), np.array([5.0, 6.0])]
gather_traffic = {"bytes_sent": [40, 40, 32], "bytes_received": [32, 40, 40], "messages_sent": [2, 2, 2],
                  "messages_received": [2, 2, 2], "rounds": 2}
vectors, _ = check_call(all_gather_param_shards, {"param_shards": shards3},
                        ([np.arange(7.0)] * 3, gather_traffic), mistakes=mistakes_of("all_gather_param_shards"))
check_workers_apart(vectors, "all_gather_param_shards' vectors")
# 4 float32 shards of 2 numbers (8 bytes): every worker sends 3 of the 4 shards, (N - 1) / N of the vector
shards32 = [np.array([2.0 * r, 2.0 * r + 1], dtype=np.float32) for r in range(4)]
check_call(all_gather_param_shards, {"param_shards": shards32},
           ([np.arange(8, dtype=np.float32)] * 4,
            {"bytes_sent": [24] * 4, "bytes_received": [24] * 4, "messages_sent": [3] * 4,
             "messages_received": [3] * 4, "rounds": 3}),
           mistakes=mistakes_of("all_gather_param_shards"))
# One worker: nothing to send, and the vector is a new array, not the shard itself
alone = [np.array([1.0, 2.0])]
check_call(all_gather_param_shards, {"param_shards": alone},
           ([np.array([1.0, 2.0])], {"bytes_sent": [0], "bytes_received": [0], "messages_sent": [0],
                                    "messages_received": [0], "rounds": 0}))
one, _ = call(all_gather_param_shards, alone, returns=("vectors", "traffic"))
check(not np.shares_memory(one[0], alone[0]), "with one worker the vector must still be a new array")
check_sends_on_given_cluster(all_gather_param_shards, (shards3,), gather_traffic,
                             "all_gather_param_shards(param_shards, cluster)",
                             "each worker's vector is made of the shards it received")
check_raises(all_gather_param_shards, {"param_shards": []}, ValueError, "param_shards is empty")
check_raises(all_gather_param_shards, {"param_shards": [np.zeros(2), np.zeros(2, dtype=np.float32)]}, ValueError,
             "the shards have different dtypes")
check_raises(all_gather_param_shards, {"param_shards": [np.zeros(2), np.zeros((2, 1))]}, ValueError,
             "worker 1's shard is 2-D")
# every shard is checked, not only the last one: here shard 1 of 3 differs
check_raises(all_gather_param_shards, {"param_shards": [np.zeros(2), np.zeros(2, dtype=np.float32), np.zeros(2)]},
             ValueError, "shard 1 of 3 has another dtype")
lesson_passed("034")

# %% [markdown]
# ### Common mistakes
#
# - **Concatenating in arrival order**: worker $r$ receives shards $r-1, r-2, \dots$;
#   appended as they come, they scramble every vector but worker 0's.
# - **Gathering to worker 0 and broadcasting**: the right vectors, with lesson 027's
#   naive traffic through one link.
# - **Workers sharing one array object**: each worker builds its own vector.
#
# ### Checkpoint
#
# $N - 1$ rounds, one shard per worker per round, $(N-1)/N$ of the vector sent
# per worker. *Self-check:* for $N = 4$ and shards of 3, 3, 2 and 2 float64 numbers,
# how many bytes does each worker send and receive?

# %% [markdown]
# ## 035 · ZeRO optimizer step
#
# ### Intuition
#
# The whole step of ZeRO stage 1 (Rajbhandari et al., *ZeRO: Memory Optimizations
# Toward Training Trillion Parameter Models*, SC 2020), which shards the optimizer
# state only. Every worker holds the same parameters and its own (weighted, lesson
# 026) gradient, and must end with the parameters Adam gives on the mean gradient:
#
# 1. **Reduce-scatter** (`reduce_scatter_mean`): lesson 028's first half, arranged so
#    that worker $r$ ends with the complete sum of *its own* shard $r$ of the flat
#    gradient; it divides by $N$.
# 2. **Local update**: your `local_shard_adam_update` on worker $r$'s shards of the
#    parameters, the mean gradient and the state.
# 3. **All-gather**: your `all_gather_param_shards` of the new shards.
#
# ### Concepts
#
# - `params`: the parameters every worker holds (the replicas are identical);
#   `worker_grads`: $N$ dicts shaped like `params`; `worker_states`: lesson 032's
#   $N$ state shards.
# - The flat order and the cut are lesson 032's; the cell gives this bookkeeping as code.
# - The order of the additions is the contract: chunk $r$'s sum is built as it
#   travels, worker $r+1$'s numbers, $+$ worker $r+2$'s, ..., $+$ worker $r$'s. On the
#   tests' gradients any other order (`np.mean` of the workers' gradients) loses
#   whole numbers.
# - Return `(worker_params, worker_states, traffic)`: $N$ dicts of new parameters
#   (each worker's own, cut from its gathered vector), the $N$ new state shards, and
#   the ledger's summary after both collectives (on `cluster` when given; every
#   message received).
# - `ValueError` comes from the given checks and from `local_shard_adam_update`.
# - **Memory**: each worker keeps its parameters and its state shard, nothing more;
#   the tests measure it.
#
# ### Math
#
# With $S$ the parameters' bytes and $S_r$ shard $r$'s, worker $r$ sends every chunk
# but its own in the reduce-scatter and every shard but its right neighbour's in the
# all-gather:
#
# $$\text{sent}_r = (S - S_r) + (S - S_{(r+1) \bmod N}) = 2\,\frac{N-1}{N}\, S
# \quad \text{when } N \text{ divides the vector,}$$
#
# exactly lesson 028's ring all-reduce: stage 1 costs no extra communication.
# (Stage 3 also shards the parameters and gathers them before the forward *and* the
# backward pass: $3\frac{N-1}{N}S$.) Memory per worker, with Adam's $2S$ of state:
#
# $$\underbrace{S}_{\text{parameters}} + \underbrace{S}_{\text{gradients}} + \underbrace{2S/N}_{\text{state}}
# \quad \text{instead of} \quad 4S.$$
#
# The cell below prints the schedule for $N = 3$ and the first test's 7 float64
# parameters (shards of 3, 2 and 2), and draws what each chunk holds after each
# round. The reduce-scatter's indices are lesson 028's shifted by one, so that worker
# $r$ finishes chunk $r$, its own shard. Workers 0, 1 and 2 send 72, 80 and 72 bytes,
# and keep $m$ and $v$ of their shard only (48, 32 and 32 bytes) instead of all 112.

# %% tags=["demo"]
# One ZeRO-1 step on N = 3 workers and 7 float64 parameters (shards of 3, 2 and 2), from the schedule alone (no
# cluster): what each worker's chunks hold after each round ("2+0": worker 2's gradient numbers plus worker 0's),
# and the bytes each worker holds and sends.
zero_n, zero_sizes = 3, [len(c) for c in np.array_split(np.arange(7.0), 3)]
zero_bytes = [8 * size for size in zero_sizes]                 # the shards' bytes: 24, 16, 16
scatter_sends = [[(r - 1 - s) % zero_n for r in range(zero_n)] for s in range(zero_n - 1)]
gather_sends = [[(r - s) % zero_n for r in range(zero_n)] for s in range(zero_n - 1)]
holds = [[str(r)] * zero_n for r in range(zero_n)]           # holds[r][c]: what worker r's chunk c sums
zero_frames = [("gradients", [row[:] for row in holds], scatter_sends[0])]
for s, sends in enumerate(scatter_sends):
    sent = [holds[r][sends[r]] for r in range(zero_n)]        # every worker sends at once, then receives
    for r in range(zero_n):
        holds[r][sends[(r - 1) % zero_n]] = f"{sent[(r - 1) % zero_n]}+{r}"
    if s == zero_n - 2:                                       # worker r finished chunk r: it divides it by N
        for r in range(zero_n):
            holds[r][r] = f"({holds[r][r]})/{zero_n}"
    zero_frames.append((f"after reduce-scatter {s + 1}" + (f", then ÷ {zero_n}" if s == zero_n - 2 else ""),
                        [row[:] for row in holds], scatter_sends[s + 1] if s + 1 < zero_n - 1 else None))
assert all(holds[r][r].startswith(f"({(r + 1) % zero_n}+") for r in range(zero_n))   # ring order: from worker r+1
shards = [["old"] * zero_n for _ in range(zero_n)]           # each worker's parameter shards
for r in range(zero_n):
    shards[r][r] = "new"
zero_frames.append(("parameters, after local Adam", [row[:] for row in shards], gather_sends[0]))
for s, sends in enumerate(gather_sends):
    for r in range(zero_n):
        shards[r][sends[(r - 1) % zero_n]] = "new"
    zero_frames.append((f"after all-gather {s + 1}", [row[:] for row in shards],
                        gather_sends[s + 1] if s + 1 < zero_n - 1 else None))
assert all(row == ["new"] * zero_n for row in shards)

scatter_sent = [sum(zero_bytes[sends[r]] for sends in scatter_sends) for r in range(zero_n)]
gather_sent = [sum(zero_bytes[sends[r]] for sends in gather_sends) for r in range(zero_n)]
param_bytes = sum(zero_bytes)
print(f"{'round':<18}" + "".join(f"{f'worker {r} sends':>22}" for r in range(zero_n)))
for name, schedule in (("reduce-scatter", scatter_sends), ("all-gather", gather_sends)):
    for s, sends in enumerate(schedule):
        what = "chunk" if name == "reduce-scatter" else "shard"
        print(f"{f'{name} {s + 1}':<18}" + "".join(f"{f'{what} {c} -> worker {(r + 1) % zero_n}':>22}"
                                                 for r, c in enumerate(sends)))
print(f"bytes sent per worker: reduce-scatter {scatter_sent} + all-gather {gather_sent} = "
      f"{[a + b for a, b in zip(scatter_sent, gather_sent)]}")
print(f"bytes held per worker: parameters {param_bytes}, gradient {param_bytes}, m and v of its shard "
      f"{[2 * b for b in zero_bytes]} (data parallel: m and v in full, {2 * param_bytes}, on every worker)")

fig, (left, right) = plt.subplots(1, 2, figsize=(11.5, 4.6), gridspec_kw={"width_ratios": [2.6, 1]})
plot_worker_chunks(left, zero_frames, worker_titles=[f"worker {r}, shard {r}" for r in range(zero_n)], left_margin=5.2)
left.set_title("Outlined: what each worker sends next, to its right neighbour", fontsize=9.5)

ranks = np.arange(zero_n)
state_bytes = [2 * b for b in zero_bytes]
right.bar(ranks, [param_bytes] * zero_n, color=COLORS["baseline"], label="parameters")
right.bar(ranks, [param_bytes] * zero_n, bottom=param_bytes, color=COLORS["estimated"], label="gradient")
right.bar(ranks, state_bytes, bottom=2 * param_bytes, color=COLORS["measured"], label="m and v, its shard")
right.axhline(4 * param_bytes, color="black", linestyle=":", linewidth=1, label="data parallel: m and v in full")
for r in range(zero_n):
    right.text(r, 2 * param_bytes + state_bytes[r] + 4, f"sends {scatter_sent[r] + gather_sent[r]}", ha="center",
               fontsize=8)
right.set_xticks(ranks, [f"worker {r}" for r in ranks])
right.set_ylabel("bytes held after the step")
right.set_ylim(0, 4 * param_bytes + 20)
right.legend(fontsize=7.5, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2)
right.grid(False)
right.set_title("7 float64 parameters, N = 3", fontsize=9.5)
fig.suptitle("One ZeRO-1 step: reduce-scatter the gradient, Adam on your shard, all-gather the parameters",
             fontsize=10.5)
plt.show()

# %% [markdown]
# ### Implementation
#
# The cell gives the bookkeeping as code. Comments name the three steps: replace
# each `raise NotImplementedError(...)` line with that step's code, in order. Step 1,
# the reduce-scatter, is a function of its own, `reduce_scatter_mean`, which the step
# calls (Part 7's loop calls it too).

# %% tags=["solution"]
def reduce_scatter_mean(worker_vectors, cluster):
    """The ring reduce-scatter, the first half of ZeRO's step: worker r ends with the mean of chunk r.

    Args:
        worker_vectors: list of N 1-D float arrays of one length and dtype (worker r's at index r), cut
            into chunks by ``np.array_split(vector, N)``; not modified.
        cluster: the ``Cluster(N)`` to run on (the step's own).

    Returns:
        (means, traffic), the shape of every collective (Part 5): means a list of N new arrays, worker
        r's the sum of chunk r over all workers divided by N; traffic ``cluster.ledger.summary()``.
        Rounds s = 0..N-2: worker r sends chunk (r - 1 - s) % N of its running sums to worker
        (r + 1) % N, which adds it to its own chunk of that index (a new array); every message is received.
    """
    # Given · each worker's vector cut into N chunks: chunks[r][c] is chunk c of worker r's vector (views of its
    #         input: replace a chunk by a new array, never add to it in place).
    n = len(worker_vectors)
    chunks = [np.array_split(vector, n) for vector in worker_vectors]
    # Step 1 · Reduce-scatter, rounds s = 0..N-2. In one `with cluster.round():` every worker r sends
    #          chunks[r][(r - 1 - s) % N] to worker (r + 1) % N. After the round every worker r receives from
    #          (r - 1) % N and adds it to its chunk (r - 2 - s) % N, the index its left neighbour sent: a new
    #          array, never in place. Worker r ends with the sum of chunk r, its own shard.
    ### BEGIN SOLUTION
    for step in range(n - 1):
        with cluster.round():
            for rank in range(n):
                cluster.send(rank, (rank + 1) % n, chunks[rank][(rank - 1 - step) % n])
        for rank in range(n):
            index = (rank - 2 - step) % n  # the chunk that the left neighbour sent
            chunks[rank][index] = chunks[rank][index] + cluster.receive(rank, (rank - 1) % n)
    ### END SOLUTION
    # Given · each worker's mean: the sum of its own chunk divided by N, and the traffic.
    return [chunks[rank][rank] / n for rank in range(n)], cluster.ledger.summary()


# Given · the step, which calls reduce_scatter_mean (step 1, above): its bookkeeping is written for you, steps 2
#         and 3 are yours.
def zero_optimizer_step(params, worker_grads, worker_states, learning_rate, beta1=0.9, beta2=0.999, eps=1e-8,
                        cluster=None):
    """One ZeRO (stage 1) Adam step on N simulated workers: reduce-scatter, local update, all-gather.

    Args:
        params: dict of float arrays, the parameters every worker holds; not modified.
        worker_grads: list of N dicts with the keys and shapes of params (worker r's gradient at
            index r); the step uses their mean. Not modified.
        worker_states: list of N state shards (lesson 032), worker r's at index r: m and v of
            shard r of ``np.array_split(flat, N)`` (flat: every array of params raveled, in the
            dict's order). Not modified.
        learning_rate, beta1, beta2, eps: as in local_shard_adam_update.
        cluster: the ``Cluster(N)`` to run on (a new one when None).

    Returns:
        (worker_params, worker_states, traffic): a list of N dicts, worker r's new parameters (keys,
        shapes and dtype of params; each worker's own arrays); the N new state shards; and
        ``cluster.ledger.summary()``. The ring reduce-scatter (``reduce_scatter_mean``, its schedule
        above) of the flat gradients leaves worker r the mean of chunk r; worker r updates its shard
        with ``local_shard_adam_update``, and ``all_gather_param_shards`` gathers the new shards on the
        same cluster.
    Use your ``reduce_scatter_mean``, ``local_shard_adam_update`` and ``all_gather_param_shards``.

    Raises:
        ValueError: if worker_grads is empty, if there are more workers than parameter elements, if
            a worker's gradients differ from params in keys or shapes, if worker_states is not N
            shards of these parameters, or as local_shard_adam_update (learning rate, betas).
    """
    # Given (bookkeeping, not the technique): the checks of the input, the cluster, the flat vectors cut as the
    # state is (lesson 032), and as_params. flat_grads[r]: worker r's flat gradient; param_shards[r]: shard r of
    # the flat parameters; as_params(vector): a flat vector cut back into a dict of params' keys and shapes (views
    # of the vector).
    n = len(worker_grads)
    if n < 1:
        raise ValueError("worker_grads is empty: a step needs at least one worker")
    total = sum(value.size for value in params.values())
    if n > total:
        raise ValueError(f"{n} workers for {total} parameter elements: some worker would own nothing")
    for rank, grads in enumerate(worker_grads):
        if grads.keys() != params.keys() or any(grads[key].shape != params[key].shape for key in params):
            raise ValueError(f"worker {rank}'s gradients differ from the parameters in keys or shapes")
    if len(worker_states) != n:
        raise ValueError(f"{len(worker_states)} state shards for {n} workers")
    if cluster is None:
        cluster = Cluster(n)
    flat_grads = [np.concatenate([grads[key].ravel() for key in params]) for grads in worker_grads]
    param_shards = np.array_split(np.concatenate([value.ravel() for value in params.values()]), n)

    def as_params(vector):
        mine, offset = {}, 0
        for key, value in params.items():
            mine[key] = vector[offset:offset + value.size].reshape(value.shape)
            offset += value.size
        return mine

    mean_grads, _ = reduce_scatter_mean(flat_grads, cluster)  # step 1: worker r's mean of its own shard
    # Step 2 · Local update: worker r runs local_shard_adam_update on param_shards[r], its mean gradient
    #          mean_grads[r] and worker_states[r] (with learning_rate, beta1, beta2, eps), and keeps what it
    #          returns: its new shard and its new state.
    ### BEGIN SOLUTION
    new_shards, new_states = [], []
    for rank in range(n):  # each worker updates its own shard, with its own state
        shard, state = local_shard_adam_update(param_shards[rank], mean_grads[rank], worker_states[rank],
                                               learning_rate, beta1, beta2, eps)
        new_shards.append(shard)
        new_states.append(state)
    ### END SOLUTION
    # Step 3 · All-gather the new shards with all_gather_param_shards on the same cluster. Return
    #          ([as_params(vector) for each worker's vector], the new states, the traffic the all-gather returns:
    #          the ledger of the whole step, as both collectives ran on one cluster).
    ### BEGIN SOLUTION
    vectors, traffic = all_gather_param_shards(new_shards, cluster)
    return [as_params(vector) for vector in vectors], new_states, traffic
    ### END SOLUTION

# %% [markdown]
# ### Tests

# %% tags=["tests"]
def zero_states(params, N, dtype=np.float64):
    """The N state shards before the first step (as lesson 032 cuts them), written out here."""
    sizes = [len(c) for c in np.array_split(np.zeros(sum(v.size for v in params.values())), N)]
    return [{"step": 0, "m": np.zeros(n, dtype), "v": np.zeros(n, dtype)} for n in sizes]


# 7 parameters on 3 workers (shards of 3, 2 and 2), the first step, beta1 = 0.5, beta2 = 0.75, eps = 0.
p7 = {"W": np.array([[1.0, 2.0], [3.0, 4.0]]), "b": np.array([0.5, -0.5, 0.0])}
g7 = [{"W": np.array([[3.0, 0.0], [-3.0, 6.0]]), "b": np.array([1.0, 2.0, -6.0])},
      {"W": np.array([[0.0, 3.0], [-6.0, 0.0]]), "b": np.array([2.0, -1.0, 3.0])},
      {"W": np.array([[3.0, -6.0], [0.0, 3.0]]), "b": np.array([0.0, 2.0, 0.0])}]
# The mean gradient, flat: [2, -1, -3, 3, 1, 1, -1]. At the first step Adam moves each parameter by lr
# against the sign of its gradient; worker r keeps m = g / 2 and v = g**2 / 4 of its shard.
z7 = zero_states(p7, 3)
new7 = {"W": np.array([[0.9, 2.1], [3.1, 3.9]]), "b": np.array([0.4, -0.6, 0.1])}
states7 = [{"step": 1, "m": np.array([1.0, -0.5, -1.5]), "v": np.array([1.0, 0.25, 2.25])},
           {"step": 1, "m": np.array([1.5, 0.5]), "v": np.array([2.25, 0.25])},
           {"step": 1, "m": np.array([0.5, -0.5]), "v": np.array([0.25, 0.25])}]
# Reduce-scatter: worker r sends every chunk but its own (chunk bytes 24, 16, 16); all-gather: every shard
# but its right neighbour's. Worker 0: 32 + 40, worker 1: 40 + 40, worker 2: 40 + 32.
zero_traffic = {"bytes_sent": [72, 80, 72], "bytes_received": [72, 72, 80], "messages_sent": [4, 4, 4],
                "messages_received": [4, 4, 4], "rounds": 4}
args7 = {"params": p7, "worker_grads": g7, "worker_states": z7, "learning_rate": 0.1, "beta1": 0.5,
         "beta2": 0.75, "eps": 0.0}
replicas, _, _ = check_call(zero_optimizer_step, args7, ([new7] * 3, states7, zero_traffic),
                            mistakes=mistakes_of("zero_optimizer_step"), rtol=1e-12, atol=1e-14)
check_workers_apart(replicas, "zero_optimizer_step's worker_params")
check_sends_on_given_cluster(zero_optimizer_step, (p7, g7, z7, 0.1, 0.5, 0.75, 0.0), zero_traffic,
                             "zero_optimizer_step(..., cluster)",
                             "each worker's shard of the mean gradient comes from what it received")
# In the ring's order: B = 2**60 swallows any small number added to it. Chunk c's sum starts with
# worker c+1's number, then worker c+2's: here +B and -B, which cancel, and the small one survives. In rank
# order (np.mean of the gradients) chunks 0 and 1 would lose it. The first moments (m = g / 2) show the mean.
B = 2.0 ** 60
g_order = [{"w": np.array([1.0, -B, B])}, {"w": np.array([B, 2.0, -B])}, {"w": np.array([-B, B, 3.0])}]
_, states_order, _ = call(zero_optimizer_step, {"w": np.zeros(3)}, g_order, zero_states({"w": np.zeros(3)}, 3),
                          0.1, 0.5, returns=("worker_params", "worker_states", "traffic"))
check_equal([state["m"] for state in states_order], [np.array([1 / 6]), np.array([1 / 3]), np.array([0.5])],
            "the first moments for B = 2**60 (the mean gradient added in the ring's order, halved)")
# float32: float32 parameters and states, 4 bytes a number
p7_32 = {key: value.astype(np.float32) for key, value in p7.items()}
g7_32 = [{key: value.astype(np.float32) for key, value in g.items()} for g in g7]
z7_32 = zero_states(p7, 3, np.float32)
check_call(zero_optimizer_step, {**args7, "params": p7_32, "worker_grads": g7_32, "worker_states": z7_32},
           ([{key: value.astype(np.float32) for key, value in new7.items()}] * 3,
            [{"step": 1, "m": s["m"].astype(np.float32), "v": s["v"].astype(np.float32)} for s in states7],
            {**zero_traffic, "bytes_sent": [36, 40, 36], "bytes_received": [36, 36, 40]}),
           mistakes=mistakes_of("zero_optimizer_step"), rtol=1e-6, atol=1e-7)
# 8 numbers (64 bytes) on 4 workers: every worker sends 2 (N - 1) / N = 1.5 x 64 bytes, like the ring
# all-reduce of lesson 028 (here the helper's) on the same gradients.
rng = np.random.default_rng(6)
p8 = {"W": rng.standard_normal((2, 3)), "b": rng.standard_normal(2)}
g8 = [{key: rng.standard_normal(value.shape) for key, value in p8.items()} for _ in range(4)]
_, _, traffic8 = call(zero_optimizer_step, p8, g8, zero_states(p8, 4), 1e-3,
                      returns=("worker_params", "worker_states", "traffic"))
_, ring8 = ring_all_reduce_mean([np.concatenate([g["W"].ravel(), g["b"]]) for g in g8])
check(traffic8 == ring8 and traffic8["bytes_sent"] == [96] * 4,
      f"with 8 numbers on 4 workers each worker should send 96 bytes in 6 rounds, as the ring all-reduce does "
      f"({ring8}); your ledger: {traffic8}")
# Sharded equals unsharded: 20 steps give the same parameters on 1, 2, 3 and 4 workers (worker r's
# gradient is cos(step + p) + (r - (N - 1) / 2) sin(step + p): their mean does not depend on N).
runs = {}
for N in (1, 2, 3, 4):
    p, states = p7, zero_states(p7, N)
    for step in range(20):
        grads = [{key: np.cos(step + value) + (r - (N - 1) / 2) * np.sin(step + value) for key, value in p.items()}
                 for r in range(N)]
        replicas, states, _ = call(zero_optimizer_step, p, grads, states, 0.01,
                                   returns=("worker_params", "worker_states", "traffic"))
        p = replicas[N - 1]
    runs[N] = p
for N in (2, 3, 4):
    check_equal(runs[N], runs[1], f"the parameters after 20 steps on {N} workers (compared with 1 worker)",
                rtol=1e-12, atol=1e-14)
# The point: after the step each worker keeps its parameters and its shard of the state, nothing more.
p_mem = mlp.init_params([64, 128, 128, 8], seed=1)
g_mem = [{key: rng.standard_normal(value.shape) for key, value in p_mem.items()} for _ in range(4)]
check_memory(zero_optimizer_step, {"params": p_mem, "worker_grads": g_mem,
                                   "worker_states": zero_states(p_mem, 4),
                                   "learning_rate": 1e-3},
             zero_step_allowed_bytes(p_mem, 4), "1.25 x (N + 2) x the parameters' bytes: each of the N workers "
             "keeps its parameters and its shard of m and v, the shards together one m and one v", kind="kept")
check_raises(zero_optimizer_step, {**args7, "worker_grads": [], "worker_states": []}, ValueError,
             "there are no workers")
check_raises(zero_optimizer_step, {**args7, "worker_grads": g7 * 3, "worker_states": z7 * 3}, ValueError,
             "there are more workers (9) than parameter elements (7)")
check_raises(zero_optimizer_step, {**args7, "worker_grads": [g7[0], g7[1], {"W": g7[2]["W"]}]}, ValueError,
             "worker 2's gradients have no b")
check_raises(zero_optimizer_step, {**args7, "worker_states": z7[:2]}, ValueError, "there are 2 state shards for 3 workers")
check_raises(zero_optimizer_step, {**args7, "worker_states": z7[::-1]}, ValueError,
             "the state shards are in the wrong order (worker 0's has 2 elements, its shard 3)")
check_raises(zero_optimizer_step, {**args7, "learning_rate": -0.1}, ValueError, "the learning rate is negative")
check_raises(zero_optimizer_step, {**args7, "beta1": -0.1}, ValueError, "beta1 is negative")
check_raises(zero_optimizer_step, {**args7, "beta2": 1.0}, ValueError, "beta2 is 1")
lesson_passed("035")

# %% [markdown]
# ### Common mistakes
#
# - **All-reducing the gradients**: a whole ring all-reduce before the all-gather
#   costs $3(N-1)/N$ of the bytes instead of $2(N-1)/N$; each worker needs only its
#   shard's mean, a reduce-scatter.
# - **Every worker keeping the full moments**: the right numbers with data
#   parallelism's memory; the tests check the states you return and what your
#   result keeps alive.
# - **A step counter advanced once per worker**: every shard corrects with the same $t + 1$.
# - **Summing instead of averaging** the gradients: Adam nearly ignores the
#   gradient's scale, but not quite ($\epsilon$), and $m$ and $v$ are $N$ and $N^2$
#   times off.
#
# ### Checkpoint
#
# Reduce-scatter, update your shard, all-gather: Adam exactly, $1/N$ of the state
# per worker, the all-reduce's bytes. *Self-check:* with 8 workers and a 1 GB float32
# gradient, how many bytes does each worker send per step, and how much Adam state
# does each keep?

# %% [markdown]
# ## Measured: sharded Adam is Adam
#
# Adam for 25 steps on an MLP and a batch of 96 examples, dealt to $N$ workers as in
# Part 5 (gradients weighted by $N n_r / B$). $N = 1$ is your `local_shard_adam_update`
# on the whole flat vector: plain Adam. The parameter count, 1,739, is odd and not a
# multiple of 3, so no $N > 1$ here divides it.

# %% tags=["demo"]
rng = np.random.default_rng(2)
X_d, Y_d = rng.standard_normal((96, 16)), rng.standard_normal((96, 3))
params0 = mlp.init_params([16, 40, 24, 3], seed=3)
keys = list(params0)
psi = sum(value.size for value in params0.values())


def flat(tensors):
    return np.concatenate([tensors[key].ravel() for key in keys])


def worker_gradients(params, N):
    """Each worker's gradient on its dealt shard, weighted so that their mean is the full batch's."""
    grads, losses = [], []
    for r in range(N):
        loss, g = mlp.loss_and_grads(X_d[r::N], Y_d[r::N], params)
        weight = N * len(X_d[r::N]) / len(X_d)
        grads.append({key: weight * value for key, value in g.items()})
        losses.append(weight * loss)
    return grads, sum(losses) / N


def unflat(vector):
    out, offset = {}, 0
    for key in keys:
        out[key] = vector[offset:offset + params0[key].size].reshape(params0[key].shape)
        offset += params0[key].size
    return out


steps, lr = 25, 1e-2
# Plain Adam on one worker: the whole flat vector is one shard.
theta, state1, plain_losses = flat(params0), {"step": 0, "m": np.zeros(psi), "v": np.zeros(psi)}, []
for _ in range(steps):
    loss, g = mlp.loss_and_grads(X_d, Y_d, unflat(theta))
    theta, state1 = local_shard_adam_update(theta, flat(g), state1, lr)
    plain_losses.append(loss)
curves, gaps = {}, {}
for N in (2, 3, 4, 8):
    params, states, losses = params0, partition_optimizer_state(init_adam_state(params0), N), []
    for _ in range(steps):
        grads, loss = worker_gradients(params, N)
        replicas, states, traffic = zero_optimizer_step(params, grads, states, lr)
        params = replicas[0]
        losses.append(loss)
    assert all(np.array_equal(flat(replica), flat(params)) for replica in replicas)  # bitwise the same replicas
    curves[N] = losses
    gaps[N] = float(np.max(np.abs(flat(params) - theta)) / np.max(np.abs(theta)))
print(f"{psi:,} parameters, {steps} Adam steps; the largest difference from plain Adam on one worker, "
      f"relative to the largest parameter:")
for N, gap in gaps.items():
    sizes = sorted({len(c) for c in np.array_split(np.zeros(psi), N)}, reverse=True)
    print(f"  N = {N}: {'below 1e-13' if gap < 1e-13 else f'{gap:.1e}'}  (shards of {' or '.join(map(str, sizes))} "
          f"elements)")
assert max(gaps.values()) < 1e-12

fig, ax = plt.subplots()
ax.plot(plain_losses, "-", color=COLORS["reference"], linewidth=4, alpha=0.5, label="plain Adam, 1 worker")
for N, style in zip((2, 3, 4, 8), ("--", ":", "-.", "--")):
    ax.plot(curves[N], style, label=f"ZeRO, {N} workers")
ax.set_yscale("log")
ax.set_xlabel("step")
ax.set_ylabel("loss")
ax.set_title("Adam, sharded or not: one curve")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## Measured: memory per worker
#
# The MLP below has $\Psi = 98{,}880$ float64 parameters, $S = 791{,}040$ bytes. For
# $N = 1, 2, 4, 8$, each worker's bytes are read off its arrays: its parameters,
# gradient and shard of Adam's state from your `partition_optimizer_state`.
# Tracemalloc measures what all the shards together keep ($2S$ for every $N$).
#
# The ZeRO paper's stage 1 ($P_{os}$) shards the optimizer state, as here; stage 2
# ($P_{os+g}$) the gradients too; stage 3 ($P_{os+g+p}$) the parameters too, gathered
# layer by layer when needed. In float64 with Adam, $K = 16$ bytes of state per
# parameter beside 8 + 8 for the parameter and its gradient:
#
# $$\text{DP: } (8 + 8 + K)\Psi, \qquad \text{stage 1: } 16\Psi + \frac{K\Psi}{N}, \qquad
# \text{stage 2: } 8\Psi + \frac{(8 + K)\Psi}{N}, \qquad \text{stage 3: } \frac{(16 + K)\Psi}{N}.$$

# %% tags=["demo"]
params_m = mlp.init_params([64, 256, 256, 64], seed=0)
S = sum(value.nbytes for value in params_m.values())
psi_m = S // 8
K = 16  # bytes of Adam state per float64 parameter: m and v


def stage_bytes(stage, N, psi, param_bytes=8, grad_bytes=8, state_bytes=K):
    """The ZeRO paper's bytes per device for stage 0 (plain data parallel) to 3."""
    p, g, s = param_bytes * psi, grad_bytes * psi, state_bytes * psi
    return {0: p + g + s, 1: p + g + s / N, 2: p + (g + s) / N, 3: (p + g + s) / N}[stage]


state_m = init_adam_state(params_m)
rows = []
for N in (1, 2, 4, 8):
    measured = measure_peak_memory(partition_optimizer_state, state_m, N)
    shards = measured.result
    worker0 = {"parameters": S, "gradients": S, "state": shards[0]["m"].nbytes + shards[0]["v"].nbytes}
    assert all(s["m"].nbytes + s["v"].nbytes == worker0["state"] for s in shards)  # N divides 98,880
    assert abs(measured.retained_bytes - 2 * S) < 0.01 * 2 * S   # the shards keep the state once
    rows.append((N, worker0, measured.retained_bytes))
print(f"Psi = {psi_m:,} parameters, S = {S:,} bytes; bytes per worker, measured from the arrays (stage 1), "
      f"and the formulas:")
print(f"{'N':>3} {'parameters':>11} {'gradients':>10} {'state':>10} {'total':>10} {'stage 1':>10} {'stage 2':>10} "
      f"{'stage 3':>10} {'all shards (tracemalloc)':>25}")
for N, w, kept in rows:
    total = sum(w.values())
    assert total == stage_bytes(1, N, psi_m)
    formulas = "".join(f"{int(stage_bytes(stage, N, psi_m)):>11,}" for stage in (1, 2, 3))
    print(f"{N:>3} {w['parameters']:>11,} {w['gradients']:>10,} {w['state']:>10,} {total:>10,}{formulas} "
          f"{format_measured(kept):>25}")

fig, ax = plt.subplots(figsize=(7.2, 3.8))
workers = np.arange(4)
ax.bar(workers - 0.3, [S / 2**20] * 4, 0.2, color=COLORS["baseline"], label="parameters")
ax.bar(workers - 0.3, [S / 2**20] * 4, 0.2, bottom=[S / 2**20] * 4, color=COLORS["estimated"], label="gradients")
ax.bar(workers - 0.3, [w["state"] / 2**20 for _, w, _ in rows], 0.2, bottom=[2 * S / 2**20] * 4,
       color=COLORS["measured"], label="Adam state (measured, stage 1)")
for shift, stage, style in ((-0.1, 0, "DP"), (0.1, 2, "stage 2"), (0.3, 3, "stage 3")):
    ax.bar(workers + shift, [stage_bytes(stage, N, psi_m) / 2**20 for N in (1, 2, 4, 8)], 0.2, fill=False,
           hatch={"DP": "", "stage 2": "//", "stage 3": ".."}[style], label=f"{style} (formula)")
ax.set_xticks(workers, ["N = 1", "N = 2", "N = 4", "N = 8"])
ax.set_ylabel("MiB per worker")
ax.set_ylim(0, 4.4)
ax.set_title(f"Memory per worker, {psi_m:,} float64 parameters with Adam")
ax.legend(fontsize=7, ncol=2)
plt.show()

# %% [markdown]
# The same formulas with the paper's mixed precision (2 + 2 bytes of fp16
# parameters and gradients, $K = 12$), for its example of $\Psi = 7.5$ billion
# parameters on $N_d = 64$ devices. Against the paper's 32 GB GPUs: on 4 devices only stage 3
# fits, on 8 stage 2 as well, and on 64 stage 1 too.

# %% tags=["demo"]
psi_paper, devices = 7.5e9, 64
paper = {stage: stage_bytes(stage, devices, psi_paper, param_bytes=2, grad_bytes=2, state_bytes=12)
         for stage in range(4)}
assert paper == {0: 120e9, 1: 31.40625e9, 2: 16.640625e9, 3: 1.875e9}  # the paper's 120, 31.4, 16.6 and 1.9 GB
for stage, name in enumerate(("data parallel", "stage 1 (P_os)", "stage 2 (P_os+g)", "stage 3 (P_os+g+p)")):
    print(f"{name:>20}: {paper[stage] / 1e9:8.3f} GB per device  ({paper[0] / paper[stage]:5.1f} x less)")
for stage, limit in ((1, 4), (2, 8)):
    print(f"stage {stage} saves at most {limit}x however large N: {16 // limit} of the 16 bytes per parameter "
          f"stay on every device")
print("stage 3 saves N x: nothing stays whole")

fig, ax = plt.subplots()
device_counts = [1, 2, 4, 8, 64]
names = ("data parallel", "stage 1", "stage 2", "stage 3")
for stage, (name, color) in enumerate(zip(names, (COLORS["baseline"], COLORS["measured"], COLORS["estimated"],
                                                  COLORS["learner"]))):
    ax.bar(np.arange(len(device_counts)) + (stage - 1.5) * 0.2,
           [stage_bytes(stage, N, psi_paper, param_bytes=2, grad_bytes=2, state_bytes=12) / 1e9 for N in device_counts],
           0.2, color=color, label=name)
ax.axhline(32, color="black", linestyle=":", linewidth=1, label="32 GB (the paper's V100)")
ax.set_xticks(range(len(device_counts)), [f"N = {N}" for N in device_counts])
ax.set_ylabel("GB per device")
ax.set_title("7.5 billion parameters, 16 bytes each (ZeRO paper's accounting)")
ax.set_ylim(0, 165)
ax.legend(fontsize=8, ncol=3, loc="upper center")
plt.show()

# %% [markdown]
# ## Measured: whole tensors or a flat vector
#
# How balanced are the shards? For a deeper MLP with one wide layer, the Adam state
# each of 4 workers holds, cut ZeRO's way (lesson 032) and `ZeroRedundancyOptimizer`'s
# (whole tensors, greedily). The busiest worker sets the memory each machine needs.

# %% tags=["demo"]
params_z = mlp.init_params([32, 512, 64, 64, 64, 8], seed=0)
N_z = 4
flat_sizes = [len(shard["m"]) for shard in partition_optimizer_state(init_adam_state(params_z), N_z)]
totals = [0] * N_z
for key in sorted(params_z, key=lambda k: -params_z[k].size):     # PyTorch's greedy assignment
    totals[totals.index(min(totals))] += params_z[key].size
print("tensor sizes:", {key: value.size for key, value in params_z.items()})
print(f"flat vector (ZeRO):                     elements per worker {flat_sizes}, busiest {max(flat_sizes):,}")
print(f"whole tensors (ZeroRedundancyOptimizer): elements per worker {totals}, busiest {max(totals):,} "
      f"({max(totals) / max(flat_sizes):.2f} x ZeRO's)")

fig, ax = plt.subplots()
ax.bar(np.arange(N_z) - 0.2, [16 * n / 2**10 for n in flat_sizes], 0.4, color=COLORS["measured"],
       label="flat vector (ZeRO)")
ax.bar(np.arange(N_z) + 0.2, [16 * n / 2**10 for n in totals], 0.4, color=COLORS["baseline"],
       label="whole tensors (ZeroRedundancyOptimizer)")
ax.set_xticks(range(N_z), [f"worker {r}" for r in range(N_z)])
ax.set_ylabel("Adam state (KiB, float64)")
ax.set_title("Adam state per worker, 4 workers")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## Measured: the bill in the ledger
#
# One ZeRO step against lesson 028's ring all-reduce (the helper's) on the same
# gradients, for $N = 2, 4, 8, 16$ and the 98,880 parameters above; then the traffic
# per worker against $N$, beside stage 3's $3\frac{N-1}{N}S$.

# %% tags=["demo"]
rows_t = []
for N in (2, 4, 8, 16):
    rng = np.random.default_rng(N)
    grads = [{key: rng.standard_normal(value.shape) for key, value in params_m.items()} for _ in range(N)]
    states = partition_optimizer_state(init_adam_state(params_m), N)
    _, _, zero = zero_optimizer_step(params_m, grads, states, 1e-3)
    _, ring = ring_all_reduce_mean([np.concatenate([g[key].ravel() for key in params_m]) for g in grads])
    assert zero == ring and set(zero["bytes_sent"]) == {2 * (N - 1) * S // N}
    rows_t.append((N, zero["bytes_sent"][0], zero["rounds"]))
print(f"S = {S:,} bytes of parameters (and of gradients)")
print(f"{'N':>3} {'ZeRO sent/worker':>17} {'= 2(N-1)S/N':>12} {'rounds':>7} {'ring all-reduce':>16}")
for N, sent, rounds in rows_t:
    print(f"{N:>3} {sent:>17,} {2 * (N - 1) * S // N:>12,} {rounds:>7} {'the same':>16}")

N_fine = np.arange(2, 17)
fig, ax = plt.subplots()
ax.plot(N_fine, 2 * (N_fine - 1) / N_fine * S / 2**20, "-", color=COLORS["measured"],
        label="stages 1-2 = DP all-reduce: 2(N-1)S/N")
ax.plot([r[0] for r in rows_t], [r[1] / 2**20 for r in rows_t], "o", color=COLORS["measured"], label="ledger")
ax.plot(N_fine, 3 * (N_fine - 1) / N_fine * S / 2**20, "--", color=COLORS["baseline"], label="stage 3: 3(N-1)S/N")
ax.set_xlabel("workers N")
ax.set_ylabel("MiB sent per worker per step")
ax.set_title("Traffic per worker: ZeRO stage 1 costs what data parallelism costs")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## Part summary
#
# - Each worker keeps and updates Adam's state for $1/N$ of the parameters
#   (contiguous shards of one flat vector), and the result is plain Adam: after 25 steps on 2, 3, 4 and 8
#   workers, within $10^{-13}$ of the largest parameter, with 1,739 parameters that
#   none of these $N$ divides.
# - A reduce-scatter and an all-gather send $2(N-1)S/N$ bytes per worker: the ring
#   all-reduce's bytes and rounds.
# - Bytes per worker for $\Psi = 98{,}880$ float64 parameters, measured from the
#   arrays, beside the formulas of stages 1 to 3; all shards together keep $2S$ for
#   every $N$:
#
# | $N$ | parameters | gradients | state | total | stage 1 | stage 2 | stage 3 |
# | --- | --- | --- | --- | --- | --- | --- | --- |
# | 1 | 791,040 | 791,040 | 1,582,080 | 3,164,160 | 3,164,160 | 3,164,160 | 3,164,160 |
# | 2 | 791,040 | 791,040 | 791,040 | 2,373,120 | 2,373,120 | 1,977,600 | 1,582,080 |
# | 4 | 791,040 | 791,040 | 395,520 | 1,977,600 | 1,977,600 | 1,384,320 | 791,040 |
# | 8 | 791,040 | 791,040 | 197,760 | 1,779,840 | 1,779,840 | 1,087,680 | 395,520 |
#
# - In float64 the state is half a worker's memory, so stage 1 saves at most 2x; with
#   the paper's 16 bytes per parameter, 12 of them state, up to 4x: 120 GB become
#   31.4 GB per device for 7.5 billion parameters on 64 devices (16.6 GB with stage 2,
#   1.9 GB with stage 3).
# - Flat shards are balanced to one element; whole tensors are not. Part 7 counts
#   all of a training step's memory and puts the techniques together.
