# %% [markdown] part_title="Memory accounting and the full loop"
# # Part 7 · Memory accounting, and the whole loop
#
# Parts 2 to 6 each saved memory one way. This part predicts each saving **before**
# running anything, checks the predictions against tracemalloc, and then runs every
# technique together in one training loop.
#
# A worker's memory at the peak of a training step has four parts:
#
# $$\text{peak} \;=\; \underbrace{\text{parameters} + \text{gradients}}_{036}
# \;+\; \underbrace{\text{optimizer state}}_{037} \;+\; \underbrace{\text{activations}}_{038}.$$
#
# The first three are exact: elements times their dtype's bytes, divided among the
# workers as ZeRO's stage says. Activations depend on what the backward pass keeps,
# and it is their *peak* that counts, not their sum.
#
# **Goals of this part**
#
# - bytes of parameters and gradients, for any dtype and ZeRO stage (036);
# - bytes of Adam's state, master weights included: the ZeRO paper's figures (037);
# - peak bytes of activations, with checkpointing and micro-batches (038);
# - predicted against measured, technique by technique (039);
# - one training loop with every technique, each a switch (040).
#
# Stuck? The solved notebook is `solutions/07_memory_accounting.ipynb`.

# %% tags=["setup"]
# Set-up (read-only): run this cell first.
from dataclasses import replace

import numpy as np
import matplotlib.pyplot as plt

from shared import mlp
from shared.checking import Deferred, call, check, check_call, check_equal, check_memory, check_raises
from shared.checking import check_rules  # the rules for graded code (shared.policy)
from shared.cluster import Cluster
from shared.lesson_blocks import (all_gather_param_shards, estimate_checkpointing_memory_savings,
                                  local_shard_adam_update, ring_all_reduce_mean, shard_dataset_across_workers)
from shared.memory import (BYTES_PER_NUMBER, check_memory_arguments, format_bytes, format_measured, format_ratio,
                           measure_peak_memory, training_loop_allowed_bytes)
from shared.mistakes import mistakes_of
from shared.notebook import setup_notebook
from shared.plotting import COLORS
from shared.progress import lesson_passed, show_progress
from shared.training import (TrainingConfig, configurations_to_compare, measure_worker_memory, reduce_scatter_mean,
                             training_steps, worker_gradients)

setup_notebook()

# %% tags=["nbval-ignore-output", "demo"]
# The panel is live: it updates as test cells pass or fail (nbval cannot compare a live output).
show_progress("07_memory_accounting")

# %% [markdown]
# ## 036 · Compute param memory bytes
#
# ### Intuition
#
# $\Psi$ parameters of $b$ bytes each take $b\Psi$ bytes, and their gradients as many
# again. $b$ is the dtype's: 8 for float64, 4 for float32, 2 for float16. Mixed
# precision (Part 4) computes with a **float16** copy of the parameters and gets
# float16 gradients, so $b = 2$; its float32 master weights belong to the optimizer
# (lesson 037).
#
# ### Concepts
#
# - `num_params` is $\Psi$, `num_workers` $N$, `rank` $r$; `dtype` is `"float16"`, `"float32"`,
#   `"float64"` (bytes in `BYTES_PER_NUMBER`, from the set-up cell) or `"mixed"`.
# - `zero_stage`: 0 (plain data parallelism: everything on every worker), 1
#   (optimizer state sharded), 2 (and gradients), 3 (and parameters).
# - The shards are Part 6's `np.array_split` cuts: the first $\Psi \bmod N$ workers own one
#   element more. Count $n_r$ with the formula below; never split a vector of $\Psi$
#   numbers, which can reach billions.
# - Return Python ints of bytes; the given checks raise `ValueError`.
#
# ### Math
#
# Worker $r$ owns $n_r = \lfloor \Psi / N \rfloor + [\,r < \Psi \bmod N\,]$ elements. With $b$
# the bytes of the working dtype:
#
# $$\text{parameters}_r = \begin{cases} b\, n_r & \text{stage } 3 \\ b\,\Psi & \text{otherwise} \end{cases}
# \qquad \text{gradients}_r = \begin{cases} b\, n_r & \text{stage} \ge 2 \\ b\,\Psi & \text{otherwise.} \end{cases}$$
#
# For $\Psi = 10$, $N = 4$, stage 3 in float32: $n = (3, 3, 2, 2)$, so workers 0 and 1
# hold 12 bytes of parameters and 12 of gradients, workers 2 and 3 hold 8 of each.
#
# ### Implementation

# %% tags=["solution"]
def compute_param_memory_bytes(num_params, dtype, zero_stage=0, num_workers=1, rank=0):
    """Bytes of the parameters and of their gradients that worker ``rank`` holds.

    Args:
        num_params: Psi, the number of parameters (a Python int >= 0).
        dtype: "float16", "float32", "float64", or "mixed" (float16 parameters and gradients).
        zero_stage: 0, 1, 2 or 3 (stage 2 shards the gradients, stage 3 the parameters too).
        num_workers: N >= 1.
        rank: the worker, 0 <= rank < N; it owns shard ``rank`` of the flat vector as
            ``np.array_split`` cuts it: Psi // N elements, one more when rank < Psi % N. Count it
            with that formula: Psi reaches billions (7.5e9 in the ZeRO paper), far too many numbers
            to allocate just to split them.

    Returns:
        ``{"parameters": int, "gradients": int}``: bytes (Python ints).

    Raises:
        ValueError: for an unknown dtype, Psi < 0, a stage outside {0, 1, 2, 3}, N < 1, or a rank
            outside [0, N).
    """
    # Given · checking the input: bookkeeping, written for you (the bytes per worker are the lesson).
    check_memory_arguments(num_params, dtype, zero_stage, num_workers, rank)  # ValueError, naming the argument
    ### BEGIN SOLUTION
    size = 2 if dtype == "mixed" else BYTES_PER_NUMBER[dtype]
    owned = num_params // num_workers + (1 if rank < num_params % num_workers else 0)
    return {"parameters": size * (owned if zero_stage == 3 else num_params),
            "gradients": size * (owned if zero_stage >= 2 else num_params)}
    ### END SOLUTION

# %% [markdown]
# ### Tests

# %% tags=["tests"]
mistakes036 = mistakes_of("compute_param_memory_bytes")
check_call(compute_param_memory_bytes, {"num_params": 1000, "dtype": "float64"},
           {"parameters": 8000, "gradients": 8000}, mistakes=mistakes036)
check_call(compute_param_memory_bytes, {"num_params": 1000, "dtype": "float32"},
           {"parameters": 4000, "gradients": 4000}, mistakes=mistakes036)
check_call(compute_param_memory_bytes, {"num_params": 1000, "dtype": "float16"},
           {"parameters": 2000, "gradients": 2000}, mistakes=mistakes036)
# mixed precision: the float16 copy and float16 gradients (the float32 master weights are 037's)
check_call(compute_param_memory_bytes, {"num_params": 1000, "dtype": "mixed"},
           {"parameters": 2000, "gradients": 2000}, mistakes=mistakes036)
# stages 0 and 1 keep everything on every worker; stage 2 shards the gradients, stage 3 the parameters too
for stage, expected in ((0, {"parameters": 4000, "gradients": 4000}), (1, {"parameters": 4000, "gradients": 4000}),
                        (2, {"parameters": 4000, "gradients": 1000}), (3, {"parameters": 1000, "gradients": 1000})):
    check_call(compute_param_memory_bytes, {"num_params": 1000, "dtype": "float32", "zero_stage": stage,
                                            "num_workers": 4, "rank": 1}, expected, mistakes=mistakes036)
# 10 parameters on 4 workers: shards of 3, 3, 2, 2 (the first 10 % 4 = 2 workers own one more)
for rank, owned in enumerate((3, 3, 2, 2)):
    check_call(compute_param_memory_bytes, {"num_params": 10, "dtype": "float32", "zero_stage": 3,
                                            "num_workers": 4, "rank": rank},
               {"parameters": 4 * owned, "gradients": 4 * owned}, mistakes=mistakes036)
result = call(compute_param_memory_bytes, 10, "float64")
check(all(type(value) is int for value in result.values()), "byte counts are Python ints")
check_call(compute_param_memory_bytes, {"num_params": 0, "dtype": "float64"}, {"parameters": 0, "gradients": 0})
check_raises(compute_param_memory_bytes, {"num_params": 10, "dtype": "bfloat16"}, ValueError, "the dtype is unknown")
check_raises(compute_param_memory_bytes, {"num_params": -1, "dtype": "float32"}, ValueError, "num_params is negative")
check_raises(compute_param_memory_bytes, {"num_params": 10, "dtype": "float32", "zero_stage": 4}, ValueError,
             "zero_stage is 4")
check_raises(compute_param_memory_bytes, {"num_params": 10, "dtype": "float32", "zero_stage": 1, "num_workers": 0},
             ValueError, "num_workers is 0")
check_raises(compute_param_memory_bytes, {"num_params": 10, "dtype": "float32", "zero_stage": 1, "num_workers": 2,
                                          "rank": 2}, ValueError, "rank 2 is not one of 2 workers")
lesson_passed("036")

# %% [markdown]
# ### Common mistakes
#
# - **float32 bytes for float16 tensors**: mixed precision's working copy and its
#   gradients take 2 bytes a number, not 4.
# - **Every worker owns $\Psi // N$**: the first $\Psi \bmod N$ workers come out one
#   element short.
# - **Sharding at the wrong stage**: stage 2 shards the gradients only; stage 3 shards
#   the parameters too.
#
# ### Checkpoint
#
# Bytes are elements times the dtype's bytes; a shard has $n_r$ elements.
# *Self-check:* how many bytes of float16 gradients does worker 5 of 8 hold at
# stage 2 for $\Psi = 1{,}000{,}003$?

# %% [markdown]
# ## 037 · Compute optimizer memory bytes
#
# ### Intuition
#
# Adam keeps $m$ and $v$ (Part 6) in the parameters' dtype: $2b$ bytes per parameter.
# Mixed precision's optimizer also updates a **float32 master copy** of the weights
# (Part 4), with float32 moments: $4 + 4 + 4 = 12$ bytes per parameter. With the 2 + 2
# bytes of float16 parameters and gradients, that is the ZeRO paper's **16 bytes per
# parameter**, three quarters of them optimizer state. From stage 1 on, each worker
# keeps only its shard of that state, master weights included.
#
# ### Concepts
#
# - The arguments and `ValueError`s of 036; return a Python int, worker `rank`'s bytes of
#   optimizer state: $K$ per parameter whose state it keeps.
#
# ### Math
#
# $$\text{optimizer}_r = \begin{cases} K\, n_r & \text{stage} \ge 1 \\ K\,\Psi & \text{stage } 0 \end{cases}
# \qquad K = \begin{cases} 12 & \text{mixed} \\ 2b & \text{otherwise.} \end{cases}$$
#
# The ZeRO paper's example, $\Psi = 7.5 \times 10^9$ on $N = 64$ devices, with 036: baseline
# $16\Psi = 120$ GB; stage 1 $4\Psi + 12\Psi/64 = 31.40625$ GB; stage 2 $2\Psi + 14\Psi/64 = 16.640625$ GB;
# stage 3 $16\Psi/64 = 1.875$ GB. The figure below reproduces them to the byte.
#
# ### Implementation

# %% tags=["solution"]
def compute_optimizer_memory_bytes(num_params, dtype, zero_stage=0, num_workers=1, rank=0):
    """Bytes of Adam's state that worker ``rank`` holds (with mixed precision's master weights).

    Args:
        num_params, dtype, zero_stage, num_workers, rank: as in compute_param_memory_bytes.

    Returns:
        A Python int: K bytes per parameter, K = 2 * (the dtype's bytes) for m and v, or 12 for
        "mixed" (float32 master weights, m and v), for all Psi parameters at stage 0 and for the
        worker's n_r = Psi // N + (rank < Psi % N) at stages 1 to 3.

    Raises:
        ValueError: as compute_param_memory_bytes.
    """
    # Given · checking the input, as in 036: bookkeeping, written for you (the optimizer's bytes are the lesson).
    check_memory_arguments(num_params, dtype, zero_stage, num_workers, rank)  # ValueError, naming the argument
    ### BEGIN SOLUTION
    per_param = 12 if dtype == "mixed" else 2 * BYTES_PER_NUMBER[dtype]
    owned = num_params // num_workers + (1 if rank < num_params % num_workers else 0)
    return per_param * (owned if zero_stage >= 1 else num_params)
    ### END SOLUTION

# %% [markdown]
# ### Tests

# %% tags=["tests"]
mistakes037 = mistakes_of("compute_optimizer_memory_bytes")
check_call(compute_optimizer_memory_bytes, {"num_params": 1000, "dtype": "float64"}, 16000, mistakes=mistakes037)
check_call(compute_optimizer_memory_bytes, {"num_params": 1000, "dtype": "float32"}, 8000, mistakes=mistakes037)
check_call(compute_optimizer_memory_bytes, {"num_params": 1000, "dtype": "float16"}, 4000, mistakes=mistakes037)
# mixed precision: float32 master weights, m and v, 12 bytes a parameter
check_call(compute_optimizer_memory_bytes, {"num_params": 1000, "dtype": "mixed"}, 12000, mistakes=mistakes037)
# stages 1, 2 and 3 all shard the state; 10 parameters on 4 workers own 3, 3, 2, 2
for stage in (1, 2, 3):
    check_call(compute_optimizer_memory_bytes, {"num_params": 1000, "dtype": "mixed", "zero_stage": stage,
                                                "num_workers": 8, "rank": 7}, 1500, mistakes=mistakes037)
for rank, owned in enumerate((3, 3, 2, 2)):
    check_call(compute_optimizer_memory_bytes, {"num_params": 10, "dtype": "float64", "zero_stage": 1,
                                                "num_workers": 4, "rank": rank}, 16 * owned, mistakes=mistakes037)
check_call(compute_optimizer_memory_bytes, {"num_params": 10, "dtype": "float64", "zero_stage": 0,
                                            "num_workers": 4, "rank": 3}, 160, mistakes=mistakes037)
check(type(call(compute_optimizer_memory_bytes, 10, "float32")) is int, "the byte count is a Python int")
# The ZeRO paper's figures (Fig. 1): 7.5 billion parameters, mixed precision, 64 devices, to the byte
paper = {}
for stage in range(4):
    memory = call(compute_param_memory_bytes, 7_500_000_000, "mixed", stage, 64)
    paper[stage] = memory["parameters"] + memory["gradients"] + call(compute_optimizer_memory_bytes, 7_500_000_000,
                                                                     "mixed", stage, 64)
check(paper == {0: 120_000_000_000, 1: 31_406_250_000, 2: 16_640_625_000, 3: 1_875_000_000},
      f"the ZeRO paper's 120 / 31.40625 / 16.640625 / 1.875 GB per device, got {paper}")
check_raises(compute_optimizer_memory_bytes, {"num_params": 10, "dtype": "int8"}, ValueError, "the dtype is unknown")
check_raises(compute_optimizer_memory_bytes, {"num_params": -5, "dtype": "mixed"}, ValueError, "num_params is negative")
check_raises(compute_optimizer_memory_bytes, {"num_params": 10, "dtype": "mixed", "zero_stage": -1}, ValueError,
             "zero_stage is -1")
check_raises(compute_optimizer_memory_bytes, {"num_params": 10, "dtype": "mixed", "zero_stage": 1, "num_workers": 0},
             ValueError, "num_workers is 0")
check_raises(compute_optimizer_memory_bytes, {"num_params": 10, "dtype": "mixed", "zero_stage": 1, "num_workers": 4,
                                              "rank": -1}, ValueError, "rank is -1")
lesson_passed("037")

# %% [markdown]
# ### Common mistakes
#
# - **Forgetting the master copy**: mixed precision's optimizer holds float32 master
#   weights beside $m$ and $v$: 12 bytes a parameter, not 8.
# - **float32 bytes for float16 tensors**: float16 Adam keeps float16 moments, 4 bytes a parameter.
# - **Not dividing by $N$ under ZeRO**: from stage 1 on, $K n_r$, not $K\Psi$.
#
# ### Checkpoint
#
# $K\Psi$ bytes without ZeRO, $K n_r$ with it. *Self-check:* why does stage 1 save at
# most 4x in mixed precision, whatever $N$?

# %% [markdown]
# The ZeRO paper's figure from your two functions: bytes per device on 1 to 64 devices,
# against one of the paper's 32 GB GPUs.

# %% tags=["demo"]
psi_paper = 7_500_000_000
device_counts = [1, 4, 8, 16, 64]
per_device = {stage: [sum(compute_param_memory_bytes(psi_paper, "mixed", stage, N).values())
                      + compute_optimizer_memory_bytes(psi_paper, "mixed", stage, N) for N in device_counts]
              for stage in range(4)}
for stage, name in enumerate(("data parallel", "stage 1 (P_os)", "stage 2 (P_os+g)", "stage 3 (P_os+g+p)")):
    print(f"{name:>20}: {per_device[stage][-1]:>15,} bytes on each of 64 devices "
          f"({per_device[stage][-1] / 1e9:.3f} GB)")
fig, ax = plt.subplots()
for stage, color in zip(range(4), (COLORS["baseline"], COLORS["measured"], COLORS["estimated"], COLORS["learner"])):
    ax.bar(np.arange(len(device_counts)) + (stage - 1.5) * 0.2, [b / 1e9 for b in per_device[stage]], 0.2,
           color=color, label=("data parallel", "stage 1", "stage 2", "stage 3")[stage])
ax.axhline(32, color="black", linestyle=":", linewidth=1, label="32 GB")
ax.set_xticks(range(len(device_counts)), [f"N = {N}" for N in device_counts])
ax.set_ylabel("GB per device")
ax.set_title("7.5 billion parameters, mixed precision with Adam")
ax.legend(fontsize=8, ncol=3)
plt.show()

# %% [markdown]
# ## 038 · Compute peak activation memory bytes
#
# ### Intuition
#
# Activations are what the forward pass leaves for the backward pass. In the course's
# MLP (`shared.mlp`) each hidden layer keeps its pre-activation $Z_i$ (the ReLU's
# backward needs its sign) and its output $A_i$ (the next layer needs it for
# $dW = A^\top dZ$). The backward pass also needs working space: the gradient it
# carries, the next one, and the ReLU's mask $Z > 0$, a **bool** array (one byte per
# element). Lesson 018 counted exactly this, with and without checkpointing.
#
# Micro-batches run one after another, so only the largest one's activations are alive
# at the peak; mixed precision makes every activation float16 and adds a float16 copy
# of the input batch.
#
# ### Concepts
#
# - $B$ is `batch_size` (one worker's rows per step), $D$ `width` (the input's and every
#   hidden layer's), $L$ `num_layers`, $s$ `segment_size` (lesson 015's segments; `None`: no
#   checkpointing), $k$ `num_micro_batches`; `dtype` as in 036.
# - Call `estimate_checkpointing_memory_savings(batch_size, width, num_layers, segment_size,
#   bytes_per_element)` (lesson 018, imported in the set-up cell): its `"checkpointed_bytes"`
#   is the peak for one (micro-)batch.
# - Return a Python int. Raise `ValueError` for an unknown dtype or $k$ outside $[1, B]$;
#   018's helper refuses sizes below 1.
#
# ### Math
#
# With $B' = \lceil B / k \rceil$ the largest micro-batch's rows, $a = B' D b$ the bytes of
# one activation array and $s = L$ without checkpointing:
#
# $$\text{peak} = \Big(\big\lceil L/s \big\rceil - 1 + 2\min(s, L - 1)\Big)\, a \;+\; 2a \;+\; B'D
# \;\;\big(+\; 2B'D \text{ in mixed precision}\big).$$
#
# Without checkpointing the first term is $2(L-1)\,a$: every hidden layer's $Z$ and $A$.
#
# ### Implementation

# %% tags=["solution"]
def compute_peak_activation_memory_bytes(batch_size, width, num_layers, dtype, segment_size=None,
                                         num_micro_batches=1):
    """Peak activation bytes of one worker's forward and backward passes through the helper MLP.

    Args:
        batch_size: B >= 1, the rows the worker processes per step.
        width: D >= 1, the input's and every hidden layer's width; num_layers: L >= 1.
        dtype: "float16", "float32", "float64", or "mixed" (float16 activations, plus the
            float16 copy of the input).
        segment_size: None (no checkpointing) or s >= 1, the layers per checkpointed segment.
        num_micro_batches: k, 1 <= k <= B; only the largest micro-batch, ceil(B / k) rows, is
            alive at the peak.
    Use ``estimate_checkpointing_memory_savings`` (lesson 018): its "checkpointed_bytes".

    Returns:
        The peak bytes, a Python int.

    Raises:
        ValueError: for an unknown dtype, a size below 1, or k outside [1, B].
    """
    ### BEGIN SOLUTION
    if dtype != "mixed" and dtype not in BYTES_PER_NUMBER:
        raise ValueError(f"unknown dtype {dtype!r}: use one of {sorted(BYTES_PER_NUMBER)} or 'mixed'")
    if not 1 <= num_micro_batches <= batch_size:
        raise ValueError(f"{num_micro_batches} micro-batches do not fit a batch of {batch_size} rows")
    largest = -(-batch_size // num_micro_batches)
    size = 2 if dtype == "mixed" else BYTES_PER_NUMBER[dtype]
    segment = num_layers if segment_size is None else segment_size
    peak = estimate_checkpointing_memory_savings(largest, width, num_layers, segment, size)["checkpointed_bytes"]
    if dtype == "mixed":
        peak += largest * width * 2  # the float16 copy of the micro-batch's inputs
    return peak
    ### END SOLUTION

# %% [markdown]
# ### Tests

# %% tags=["tests"]
mistakes038 = mistakes_of("compute_peak_activation_memory_bytes")
# B = 4, D = 8, L = 3, float64: a = 256 bytes; Z1, A1, Z2, A2 (4a), 2a of working space, a 32-byte mask
check_call(compute_peak_activation_memory_bytes, {"batch_size": 4, "width": 8, "num_layers": 3, "dtype": "float64"},
           1568, mistakes=mistakes038)
check_call(compute_peak_activation_memory_bytes, {"batch_size": 4, "width": 8, "num_layers": 3, "dtype": "float32"},
           800, mistakes=mistakes038)
check_call(compute_peak_activation_memory_bytes, {"batch_size": 4, "width": 8, "num_layers": 3, "dtype": "float16"},
           416, mistakes=mistakes038)
# mixed: float16 activations and the float16 copy of the input (64 bytes)
check_call(compute_peak_activation_memory_bytes, {"batch_size": 4, "width": 8, "num_layers": 3, "dtype": "mixed"},
           480, mistakes=mistakes038)
# 10 rows in 4 micro-batches (3, 3, 2, 2): the peak is the largest one's, 3 rows (not the sum of four)
check_call(compute_peak_activation_memory_bytes, {"batch_size": 10, "width": 8, "num_layers": 3, "dtype": "float64",
                                                  "segment_size": None, "num_micro_batches": 4}, 1176, mistakes=mistakes038)
# checkpointing L = 6 layers in segments of 2: 2 checkpoints and one segment's 4 arrays, not all 10
check_call(compute_peak_activation_memory_bytes, {"batch_size": 4, "width": 8, "num_layers": 6, "dtype": "float64",
                                                  "segment_size": 2}, 2080, mistakes=mistakes038)
check_call(compute_peak_activation_memory_bytes, {"batch_size": 4, "width": 8, "num_layers": 6, "dtype": "float64"},
           3104, mistakes=mistakes038)
# all at once: 8 rows in 2 micro-batches, segments of 2, mixed precision
check_call(compute_peak_activation_memory_bytes, {"batch_size": 8, "width": 8, "num_layers": 6, "dtype": "mixed",
                                                  "segment_size": 2, "num_micro_batches": 2}, 608,
           mistakes=mistakes038)
check(type(call(compute_peak_activation_memory_bytes, 4, 8, 3, "float64")) is int, "the byte count is a Python int")
check_raises(compute_peak_activation_memory_bytes, {"batch_size": 4, "width": 8, "num_layers": 3, "dtype": "float8"},
             ValueError, "the dtype is unknown")
check_raises(compute_peak_activation_memory_bytes, {"batch_size": 4, "width": -8, "num_layers": 3, "dtype": "float32"},
             ValueError, "width is negative")
check_raises(compute_peak_activation_memory_bytes, {"batch_size": 4, "width": 8, "num_layers": 3, "dtype": "float32",
                                                    "segment_size": 0}, ValueError, "segment_size is 0")
check_raises(compute_peak_activation_memory_bytes, {"batch_size": 4, "width": 8, "num_layers": 3, "dtype": "float32",
                                                    "segment_size": None, "num_micro_batches": 5}, ValueError,
             "5 micro-batches do not fit 4 rows")
check_raises(compute_peak_activation_memory_bytes, {"batch_size": 4, "width": 8, "num_layers": 3, "dtype": "float32",
                                                    "segment_size": None, "num_micro_batches": 0}, ValueError, "num_micro_batches is 0")
lesson_passed("038")

# %% [markdown]
# ### Common mistakes
#
# - **The sum instead of the peak**: $k$ micro-batches run one after another; adding up
#   their activations counts the whole batch again.
# - **Every layer's activations at once under checkpointing**: only one input per
#   segment is kept, and one segment is recomputed at a time.
# - **float32 bytes for float16 activations**, or forgetting the float16 copy of the input.
#
# ### Checkpoint
#
# Stored arrays plus working space, for the largest micro-batch only.
# *Self-check:* for $L = 16$, which segment size gives the smallest peak?

# %% [markdown]
# ## 039 · Compare memory with and without optimizations
#
# ### Intuition
#
# Now one worker's whole bill, technique by technique, with proof: for each
# configuration, the predicted bytes (036 + 037 + 038) beside what tracemalloc measures
# during the worker's step. Accumulation adds a term: at the backward peak a worker
# holds the running sum of the gradients **and** the micro-batch's own. In mixed
# precision the running sum is float32 (float16 would overflow: see the end of the
# part), twice the float16 gradients' bytes.
#
# ### Concepts
#
# - `config`: a `TrainingConfig` (from `shared.training`) with the techniques to compare
#   switched on. The six rows are made for you: `"none"`, each technique alone
#   (`"accumulation"`, `"checkpointing"`, `"mixed precision"`, `"ZeRO"`) and `"all together"`
#   (`config` itself).
# - Each row predicts worker 0, the busiest, whose rows are `X[0::N]`; its dtype is the
#   parameters' or `"mixed"`.
# - `"measured"`: `measure_worker_memory(params, X, Y, row_config)`, the peak tracemalloc sees
#   during worker 0's step. The prediction leaves out NumPy's temporaries: below 256 KiB,
#   `a @ W + b` makes one more array, so on small models the measurement runs higher.
# - Return the docstring's six dicts, bytes as Python ints; the given checks raise `ValueError`.
#
# ### Math
#
# $$\text{predicted} = \text{parameters} + (1 + [k > 1]\,c)\,\text{gradients}_{036} + \text{optimizer}_{037}
# + \text{activations}_{038}(|X_0|, D, L), \qquad |X_0| = \lceil B/N \rceil,$$
#
# with $c = 2$ in mixed precision (the running sum in float32) and $c = 1$ otherwise.
#
# **Worked example: the first visible test's `"all together"` row.** 850 float64 parameters
# (4 layers 16 wide), 64 examples; 2 workers, 2 micro-batches, segments of 2, mixed precision,
# ZeRO stage 1. Worker 0 keeps the state of 425 parameters and gets 32 rows; its largest
# micro-batch has 16.
#
# | term | worker 0 holds | bytes |
# | --- | --- | --- |
# | parameters | the float16 copy of all 850 | $850 \cdot 2 = 1{,}700$ |
# | gradients | float16 gradients and the float32 running sum | $850 \cdot (2 + 4) = 5{,}100$ |
# | optimizer | float32 master weights, $m$ and $v$ of its 425 | $425 \cdot 12 = 5{,}100$ |
# | activations | 16 rows, $a = 16 \cdot 16 \cdot 2 = 512$ | $(2 - 1 + 2 \cdot 2)\,a + 2a + 16 \cdot 16 + 2 \cdot 16 \cdot 16 = 4{,}352$ |
# | predicted | the sum | $16{,}252$ |
#
# Every other row is the same arithmetic with one switch on. The cell below prints this
# row term by term.

# %% tags=["demo"]
# The "all together" row of the first visible test, term by term, by the formulas of 036, 037 and 038 (this lesson's
# function is not called): 850 float64 parameters, 64 examples 16 wide, 2 workers, 2 micro-batches, segments of 2,
# mixed precision, ZeRO stage 1.
row_params = mlp.init_params([16, 16, 16, 16, 2], seed=0)
row_n, row_k, row_s, row_layers, row_width = 2, 2, 2, 4, 16
row_psi = sum(value.size for value in row_params.values())                         # 850 parameters
row_owned = len(np.array_split(np.arange(row_psi), row_n)[0])                      # worker 0's shard: 425
row_rows = len(np.arange(64)[0::row_n])                                            # worker 0's examples, X[0::N]: 32
row_micro = -(-row_rows // row_k)                                                  # its largest micro-batch: 16
row_a = row_micro * row_width * 2                                                      # one float16 activation array
row_terms = {
    "parameters": (2 * row_psi, f"{row_psi} x 2 (036: float16, all of them at stage 1)"),
    "gradients": (2 * row_psi + 4 * row_psi, f"{2 * row_psi:,} (036, float16) + {row_psi} x 4 = {4 * row_psi:,} "
                                             f"(the float32 running sum, k = {row_k})"),
    "optimizer": (12 * row_owned, f"{row_owned} x 12 (037: float32 master weights, m and v of its shard)"),
    "activations": ((-(-row_layers // row_s) - 1 + 2 * min(row_s, row_layers - 1)) * row_a + 2 * row_a
                    + row_micro * row_width + 2 * row_micro * row_width,
                    f"(2 - 1 + 2 x 2) x {row_a} + 2 x {row_a} + {row_micro * row_width} + 2 x {row_micro * row_width} "
                    f"(038: {row_micro} rows of {row_width}, float16, segments of {row_s})"),
}
assert row_terms["activations"][0] == estimate_checkpointing_memory_savings(
    row_micro, row_width, row_layers, row_s, 2)["checkpointed_bytes"] + 2 * row_micro * row_width  # as 038 counts
for name, (value, how) in row_terms.items():
    print(f"{name:>11} {value:>7,} = {how}")
print(f"{'predicted':>11} {sum(value for value, _ in row_terms.values()):>7,} = the sum of the four")

# %% [markdown]
# ### Implementation
#
# The input checks, the six rows and the loop over them, `for name, row in rows:`, are given.
# Replace each `raise NotImplementedError(...)` with the code of the step above it: steps 1
# and 2 are the loop's body, step 3 the `return` after it.

# %% tags=["solution"]
def compare_memory_with_and_without_optimizations(params, X, Y, config):
    """Predicted and measured bytes of worker 0's step for each technique alone and all together.

    Args:
        params: the helper MLP's parameters (float32 or float64; each layer's input as wide as X).
        X: (B, D) inputs; Y: (B, outputs) targets; config: a TrainingConfig (the techniques).
    Use your ``compute_param_memory_bytes``, ``compute_optimizer_memory_bytes`` and
    ``compute_peak_activation_memory_bytes``, and ``measure_worker_memory``.

    Returns:
        A list of six dicts, for "none", "accumulation", "checkpointing", "mixed precision", "ZeRO"
        and "all together" in this order: ``{"configuration": name, "parameters": int,
        "gradients": int (036's; with k > 1 twice, three times in mixed precision), "optimizer": int,
        "activations": int,
        "predicted": int (the sum of the four), "measured": int}``.

    Raises:
        ValueError: if a layer's input is not as wide as X, if N > B, or if k is larger than the
            smallest worker's number of rows (B // N).
    """
    # Given · checking the input, and the six rows to compare: bookkeeping, written for you (each row's bill,
    #         below, is the lesson). configurations_to_compare(config) gives the rows as (name, TrainingConfig):
    #         "none" is TrainingConfig(), each technique alone takes config's value of its fields (ZeRO:
    #         num_workers and zero_stage), "all together" is config.
    layers = mlp.num_layers(params)
    width = X.shape[1]
    if any(params[f"W{i}"].shape[0] != width for i in range(1, layers + 1)):
        raise ValueError(f"every layer's input must be {width} wide, as X is, for the activation accounting")
    N, k = config.num_workers, config.num_micro_batches
    if N > len(X):
        raise ValueError(f"{N} workers for {len(X)} examples: some worker would get no data")
    if k > len(X) // N:
        raise ValueError(f"{k} micro-batches do not fit the smallest worker's {len(X) // N} examples")
    rows = configurations_to_compare(config)
    num_params = sum(value.size for value in params.values())
    table = []
    for name, row in rows:  # steps 1 and 2 are the loop's body
        # Step 1 · The row's dtype ("mixed" in mixed precision, else the parameters' dtype name); for num_params
        #          parameters, the row's stage and workers, worker 0: "parameters" (036), "gradients" (036's,
        #          times 1 + c with k > 1: c = 2 in mixed precision, else 1), "optimizer" (037); "activations"
        #          (038) of worker 0's rows X[0::N], width, layers, the row's segment size and k. One dict per
        #          row, with "configuration": name.
        ### BEGIN SOLUTION
        dtype = "mixed" if row.mixed_precision else params["W1"].dtype.name
        memory = compute_param_memory_bytes(num_params, dtype, row.zero_stage, row.num_workers)
        running_sum = 0 if row.num_micro_batches == 1 else (2 if row.mixed_precision else 1)  # float32: 2 x float16
        entry = {"configuration": name, "parameters": memory["parameters"],
                 "gradients": memory["gradients"] * (1 + running_sum),
                 "optimizer": compute_optimizer_memory_bytes(num_params, dtype, row.zero_stage, row.num_workers),
                 "activations": compute_peak_activation_memory_bytes(len(X[0::row.num_workers]), width, layers, dtype,
                                                                     row.segment_size, row.num_micro_batches)}
        ### END SOLUTION
        # Step 2 · "predicted", the sum of the four; "measured", measure_worker_memory(params, X, Y, row); append
        #          the dict to table.
        ### BEGIN SOLUTION
        entry["predicted"] = entry["parameters"] + entry["gradients"] + entry["optimizer"] + entry["activations"]
        entry["measured"] = measure_worker_memory(params, X, Y, row)
        table.append(entry)
        ### END SOLUTION
    # Step 3 · After the loop, return table.
    ### BEGIN SOLUTION
    return table
    ### END SOLUTION

# %% [markdown]
# ### Tests

# %% tags=["tests"]
# A 4-layer MLP 16 wide (850 float64 parameters: 6,800 bytes), 64 examples; all techniques: 2 workers,
# 2 micro-batches, segments of 2, mixed precision, ZeRO stage 1. The predictions are exact.
params_v = mlp.init_params([16, 16, 16, 16, 2], seed=0)
rng = np.random.default_rng(0)
X_v, Y_v = rng.standard_normal((64, 16)), rng.standard_normal((64, 2))
all_on = TrainingConfig(num_workers=2, num_micro_batches=2, segment_size=2, mixed_precision=True, zero_stage=1)
predicted_v = [("none", 6800, 6800, 13600, 66560), ("accumulation", 6800, 13600, 13600, 33280),
               ("checkpointing", 6800, 6800, 13600, 58368), ("mixed precision", 1700, 1700, 10200, 19456),
               ("ZeRO", 6800, 6800, 6800, 33280), ("all together", 1700, 5100, 5100, 4352)]
row_configs = [TrainingConfig(), TrainingConfig(num_micro_batches=2), TrainingConfig(segment_size=2),
               TrainingConfig(mixed_precision=True), TrainingConfig(num_workers=2, zero_stage=1), all_on]
# "measured" is what measure_worker_memory(params, X, Y, row_config) measures: within 5 % of it here
check_call(compare_memory_with_and_without_optimizations, {"params": params_v, "X": X_v, "Y": Y_v, "config": all_on},
           Deferred(lambda: [{"configuration": name, "parameters": p, "gradients": g, "optimizer": o, "activations": a,
                              "predicted": p + g + o + a, "measured": measure_worker_memory(params_v, X_v, Y_v, c)}
                             for (name, p, g, o, a), c in zip(predicted_v, row_configs)]),
           mistakes=mistakes_of("compare_memory_with_and_without_optimizations"), rtol=0, atol=0,
           key_tolerances={"measured": {"rtol": 0.05, "atol": 4096}})
# float32 parameters, every technique off: six rows alike, 4 bytes a number
params32 = {key: value.astype(np.float32) for key, value in params_v.items()}
check_call(compare_memory_with_and_without_optimizations,
           {"params": params32, "X": X_v.astype(np.float32), "Y": Y_v.astype(np.float32), "config": TrainingConfig()},
           Deferred(lambda: [{"configuration": name, "parameters": 3400, "gradients": 3400, "optimizer": 6800,
                              "activations": 33792, "predicted": 47392,
                              "measured": measure_worker_memory(params32, X_v.astype(np.float32),
                                                                Y_v.astype(np.float32), TrainingConfig())}
                             for name, *_ in predicted_v]),
           mistakes=mistakes_of("compare_memory_with_and_without_optimizations"), rtol=0, atol=0,
           key_tolerances={"measured": {"rtol": 0.05, "atol": 4096}})
check_raises(compare_memory_with_and_without_optimizations,
             {"params": mlp.init_params([16, 8, 2], seed=0), "X": X_v, "Y": Y_v, "config": all_on}, ValueError,
             "a hidden layer is 8 wide and X 16")
check_raises(compare_memory_with_and_without_optimizations,
             {"params": params_v, "X": X_v[:3], "Y": Y_v[:3], "config": replace(all_on, num_workers=4)}, ValueError,
             "there are 4 workers for 3 examples")
check_raises(compare_memory_with_and_without_optimizations,
             {"params": params_v, "X": X_v[:5], "Y": Y_v[:5], "config": replace(all_on, num_micro_batches=3)},
             ValueError, "3 micro-batches do not fit worker 1's 2 examples")
lesson_passed("039")

# %% [markdown]
# ### Common mistakes
#
# - **The sum instead of the peak** in a row: every micro-batch's (or worker's) activations
#   added up, where a worker holds one micro-batch's at a time.
# - **One gradient buffer with accumulation**: the running sum and the micro-batch's
#   gradients are both alive at the peak.
# - **The running sum counted in float16**: in mixed precision it is float32, 4 bytes a parameter.
# - **Measuring another configuration** than the row predicts (e.g. every row with `config`).
#
# ### Checkpoint
#
# Each technique removes its own term, and the prediction matches the measurement to a few
# percent; the "ZeRO" row runs on $N$ data-parallel workers, so worker 0 also gets only
# $\lceil B/N \rceil$ examples and its activations fall about $N$-fold beside ZeRO's own saving,
# the optimizer term. *Self-check:* in the table below, which technique saves the most on its
# own, and why is ZeRO's own saving (its optimizer term) less than the optimizer's whole state?

# %% [markdown]
# The table for a wider MLP, 4 layers 128 wide (400,416 bytes of float64 parameters), on
# 1,024 examples with 4 workers, 4 micro-batches, segments of 2, mixed precision and ZeRO
# stage 1.

# %% tags=["demo"]
params_t = mlp.init_params([128, 128, 128, 128, 4], seed=0)
rng = np.random.default_rng(1)
X_t, Y_t = rng.standard_normal((1024, 128)), rng.standard_normal((1024, 4))
config_t = TrainingConfig(num_workers=4, num_micro_batches=4, segment_size=2, mixed_precision=True, zero_stage=1)
table_t = compare_memory_with_and_without_optimizations(params_t, X_t, Y_t, config_t)
print(f"{'configuration':>16} {'parameters':>11} {'gradients':>10} {'optimizer':>10} {'activations':>12} "
      f"{'predicted':>10} {'measured':>10} {'measured/predicted':>19}")
for row in table_t:
    print(f"{row['configuration']:>16} {row['parameters']:>11,} {row['gradients']:>10,} {row['optimizer']:>10,} "
          f"{row['activations']:>12,} {row['predicted']:>10,} {format_measured(row['measured']):>10} "
          f"{format_ratio(row['measured'], row['predicted']):>19}")
assert all(abs(row["measured"] / row["predicted"] - 1) < 0.10 for row in table_t)

fig, ax = plt.subplots(figsize=(7.2, 3.8))
bottom = np.zeros(len(table_t))
for kind, color in zip(("parameters", "gradients", "optimizer", "activations"),
                       (COLORS["baseline"], COLORS["estimated"], COLORS["reference"], COLORS["measured"])):
    heights = np.array([row[kind] for row in table_t]) / 2**20
    ax.bar(range(len(table_t)), heights, bottom=bottom, color=color, label=kind)
    bottom += heights
ax.plot(range(len(table_t)), [row["measured"] / 2**20 for row in table_t], "D", color="black",
        label="measured (tracemalloc)")
ax.set_xticks(range(len(table_t)), [row["configuration"] for row in table_t], fontsize=8)
ax.set_ylabel("MiB, worker 0")
ax.set_title("One worker's memory at the peak of a step")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## 040 · Full distributed training loop
#
# ### Intuition
#
# One loop runs every technique on the simulated cluster, each a switch of one
# `TrainingConfig`. Each step, every worker computes its examples' gradient
# (`worker_gradients`: micro-batches, checkpointing and loss scaling, Parts 2 to 4); the
# workers average them (Part 5's ring all-reduce, or ZeRO's reduce-scatter, Part 6); each
# updates what it owns with Adam (033); with ZeRO they all-gather the new shards (034). With
# every switch off the loop is plain Adam on one worker, bit for bit. The grader reads the
# ledger of the cluster it passes in, compares what every worker holds at the end with the
# reference's, and measures the loop's peak.
#
# ### Concepts
#
# - **What each worker holds** (set up for you): its parameters as one flat vector `working[r]`
#   (float16 in mixed precision; `as_dict` turns a vector into a dict of views); the slice it
#   owns, `own[r] = (lo, hi)` (everything, or with ZeRO `np.array_split(flat, N)[r]`); Adam's
#   state of that slice, `states[r]`; in mixed precision, the slice's float32 master weights
#   `master[r]`, which Adam updates with float32 `m` and `v`.
# - **Weights.** Worker $r$ has $n_r$ of the $B$ examples: its mean gradient counts $N n_r / B$
#   in the average (026), its loss $n_r / B$ in the step's loss.
# - **Dynamic loss scaling.** An inf or NaN gradient makes the new parameters NaN (Adam divides
#   inf by inf); every worker sees this in its new vector and skips the step: nothing changes,
#   the scale halves. After `growth_interval` clean steps in a row it doubles. Without mixed
#   precision the scale is 1.0 and no step is skipped.
# - **Sum, then divide.** The ring all-reduce (and ZeRO's reduce-scatter) adds the workers'
#   float16 gradients, each $S$ times too large, and divides by $N$ only at the end; the weight
#   $N n_r / B$, above 1 for a worker with more rows, is applied in float16 too. So the sum can
#   overflow where each worker's gradient fits: a step that one worker with the whole batch would
#   take is skipped, and the scale settles up to about $N$ times lower than on one worker.
#   PyTorch's DDP divides before the all-reduce to avoid this, and risks underflow of small
#   gradients instead.
# - **The history**: `"loss"` holds the batch's mean loss before each step, `"loss_scale"` the
#   scale each step used. The given checks raise `ValueError`; a `TrainingConfig` refuses bad
#   fields itself.
#
# ### Math
#
# Per step and worker, the traffic is the ring all-reduce's, with or without ZeRO:
# $2\frac{N-1}{N} S$ for $S$ bytes of gradients when $N$ divides them (float16 in mixed
# precision). The simulated workers run one after another, so the loop's peak is what all $N$
# hold plus one worker's activations, within
#
# $$\text{allowed} = 1.5\,\Big(2 \sum_{r=0}^{N-1} \big(P_r + G_r + O_r\big) + \Psi\, b
#   + A\Big) + 64\ \text{KiB},$$
#
# with $P_r, G_r$ (036) and $O_r$ (037) worker $r$'s bytes, $\Psi b$ the flat copy of the
# parameters, and $A$ (038) the activations of worker 0's $\lceil B / N \rceil$ rows. Arrays
# count twice (the collectives' copies, the new state beside the old), plus half again to
# spare (`training_loop_allowed_bytes`).
#
# **Worked example: one step on $N = 2$ workers with ZeRO and mixed precision**, the tests'
# MLP: $\Psi = 234$ in shards of 117, 16 examples per worker (each weight $N n_r / B$ is 1).
# The cell below shows what each worker holds after each step of the skeleton and what it
# sends: 468 bytes a step, $2\frac{N-1}{N} S$ for $S = 468$ bytes of float16 gradients. Each
# keeps 468 bytes of float16 parameters and 1404 of float32 master weights, $m$ and $v$ (2808
# without ZeRO).

# %% tags=["demo"]
# One step of the loop on N = 2 workers, ZeRO and mixed precision on, for the tests' MLP (234 parameters, shards of
# 117), from the schedule alone (the loop itself is not called): the arrays each worker holds at each step of the
# skeleton below (dtype[elements]), and what it sends. The collectives alone, run on a Cluster(2) with float16
# vectors of zeros, give the bytes that the ledger counts.
from matplotlib.colors import to_rgba

loop_n, loop_size = 2, sum(value.size for value in mlp.init_params([8, 8, 8, 8, 2], seed=1).values())
loop_owned = [len(shard) for shard in np.array_split(np.arange(loop_size), loop_n)]       # 117 and 117
f16, f32 = 2, 4                                                                           # bytes per number
loop_points = [  # (step of the skeleton, worker r's arrays [(name, dtype, elements)], what worker r sends or None)
    ("set-up (given)", lambda r: [("parameters", "f16", loop_size), ("master", "f32", loop_owned[r]),
                              ("m", "f32", loop_owned[r]), ("v", "f32", loop_owned[r])], None),
    ("1 · gradient", lambda r: [("grad × scale", "f16", loop_size)], None),
    ("2 · reduce-scatter", lambda r: [(f"chunk {r} mean", "f16", loop_owned[r])],
     lambda r: (f"chunk {(r - 1) % loop_n}", f16 * loop_owned[(r - 1) % loop_n])),
    ("3 · unscale, Adam", lambda r: [("mean ÷ scale", "f32", loop_owned[r]), ("new master", "f32", loop_owned[r]),
                                     ("new m", "f32", loop_owned[r]), ("new v", "f32", loop_owned[r])], None),
    ("4 · cast, all-gather", lambda r: [(f"new shard {r}", "f16", loop_owned[r]),
                                        ("new parameters", "f16", loop_size)],
     lambda r: (f"shard {r}", f16 * loop_owned[r])),
    ("5 · all finite: keep", lambda r: [("parameters", "f16", loop_size), ("master", "f32", loop_owned[r]),
                                        ("m", "f32", loop_owned[r]), ("v", "f32", loop_owned[r])], None),
]
for name, held, sends in loop_points:
    for r in range(loop_n):
        arrays = ", ".join(f"{a} {d}[{n}]" for a, d, n in held(r))
        sent = f"; sends {sends(r)[0]} to worker {(r + 1) % loop_n}: {sends(r)[1]} bytes" if sends else ""
        print(f"{name if r == 0 else '':<22}worker {r}: {arrays}{sent}")

zero_cluster, ring_cluster = Cluster(loop_n), Cluster(loop_n)
zeros = [np.zeros(loop_size, np.float16) for _ in range(loop_n)]
all_gather_param_shards(reduce_scatter_mean(zeros, zero_cluster)[0], zero_cluster)
ring_all_reduce_mean(zeros, ring_cluster)
zero_sent, ring_sent = zero_cluster.ledger.summary()["bytes_sent"], ring_cluster.ledger.summary()["bytes_sent"]
print(f"bytes sent per worker and step: reduce-scatter + all-gather {zero_sent} (3 steps: "
      f"{[3 * b for b in zero_sent]}); without ZeRO the ring all-reduce sends the same, {ring_sent}")
kept_zero = [f16 * loop_size + 3 * f32 * owned for owned in loop_owned]
kept_full = [f16 * loop_size + 3 * f32 * loop_size] * loop_n
print(f"bytes kept per worker after the step: parameters {f16 * loop_size} + master weights, m and v "
      f"{[3 * f32 * owned for owned in loop_owned]} = {kept_zero}; without ZeRO {f16 * loop_size} + "
      f"{[3 * f32 * loop_size] * loop_n} = {kept_full}")

fig, (left, right) = plt.subplots(1, 2, figsize=(14, 4.8), gridspec_kw={"width_ratios": [3.8, 1]})
wide, pitch = 2.2, 2.35
for column, (name, held, sends) in enumerate(loop_points):
    for r in range(loop_n):
        y = -2.6 * r
        left.add_patch(plt.Rectangle((column * pitch, y - 0.8), wide, 1.6, edgecolor="black", lw=0.5,
                                     facecolor=to_rgba(COLORS["measured"] if sends else COLORS["learner"],
                                                       0.35 if sends else 0.12)))
        left.text(column * pitch + wide / 2, y, "\n".join(f"{a} {d}[{n}]" for a, d, n in held(r)), ha="center",
                  va="center", fontsize=6.5, linespacing=1.2)
        if sends:
            what, count = sends(r)
            start, end = (y - 0.8, y - 1.8) if r == 0 else (y + 0.8, y + 1.8)
            x = column * pitch + (0.55 if r == 0 else 1.45)
            left.annotate("", xy=(x, end), xytext=(x, start), arrowprops={"arrowstyle": "->", "lw": 1.2})
            left.text(x + (-0.08 if r == 0 else 0.08), (start + end) / 2, f"{what}\n{count} B",
                      ha="right" if r == 0 else "left", va="center", fontsize=7)
    left.text(column * pitch + wide / 2, 0.95, name.replace(", ", ",\n"), ha="center", va="bottom", fontsize=9)
for r in range(loop_n):
    left.text(-0.15, -2.6 * r, f"worker {r}", ha="right", va="center", fontsize=9)
left.set_xlim(-1.0, len(loop_points) * pitch)
left.set_ylim(-3.6, 1.8)
left.axis("off")
left.set_title("Green: a collective on the cluster; an arrow: what a worker sends, and its bytes", fontsize=9)
ranks = np.arange(loop_n)
for offset, label, owned in ((-0.2, "ZeRO", loop_owned), (0.2, "no ZeRO", [loop_size] * loop_n)):
    bottom = np.zeros(loop_n)
    for part, (bytes_of, color) in enumerate(((lambda o: f16 * loop_size, COLORS["baseline"]),
                                              (lambda o: f32 * o, COLORS["reference"]),
                                              (lambda o: 2 * f32 * o, COLORS["measured"]))):
        heights = np.array([bytes_of(o) for o in owned])
        right.bar(ranks + offset, heights, width=0.38, bottom=bottom, color=color,
                  label=("parameters f16", "master f32", "m and v f32")[part] if offset < 0 else None)
        bottom += heights
    for r in range(loop_n):
        right.text(r + offset, bottom[r] + 40, label, ha="center", fontsize=7)
right.set_xticks(ranks, [f"worker {r}" for r in ranks])
right.set_ylabel("bytes kept after the step")
right.set_ylim(0, 1.25 * max(kept_full))
right.legend(fontsize=7.5, loc="upper left")
right.grid(False)
right.set_title(f"{loop_size} parameters, N = {loop_n}", fontsize=9.5)
fig.suptitle(f"One step of the loop, ZeRO and mixed precision on: each worker sends {zero_sent[0]} bytes a step",
             fontsize=10.5)
plt.show()

# %% [markdown]
# ### Implementation
#
# As in 039, replace each `raise NotImplementedError(...)` with the code of the step above it,
# where it stands (steps 1 to 5 inside the loop over the training steps). Everything under
# `# Given` is written for you, `plain_adam` at the top of the cell too: plain Adam on one
# worker, which the tests and the measurement after them compare the loop with.

# %% tags=["solution"]
# Given · plain Adam on one worker, tensor by tensor: the yardstick, not the lesson. With every switch off the loop
#         must equal it bit for bit; the tests below and the measurement after them compare the loop with it.
def plain_adam(params, X, Y, steps, lr, beta1=0.9, beta2=0.999, eps=1e-8):
    """Plain Adam on one worker, full batch, tensor by tensor.

    Args:
        params: the helper MLP's parameters (float32 or float64); not modified.
        X: (B, D) inputs and Y: (B, outputs) targets, in the parameters' dtype.
        steps: how many steps; lr, beta1, beta2, eps: Adam's hyperparameters.

    Returns:
        (final_params, losses, m, v): the final parameters, the loss before each step (a list of floats),
        and Adam's moments m and v after the last step; the arrays dicts shaped like params, in its dtype.
    """
    p = dict(params)
    m = {key: np.zeros_like(value) for key, value in p.items()}
    v = {key: np.zeros_like(value) for key, value in p.items()}
    losses = []
    for t in range(1, steps + 1):
        loss, g = mlp.loss_and_grads(X, Y, p)
        losses.append(loss)
        m = {key: beta1 * m[key] + (1 - beta1) * g[key] for key in p}
        v = {key: beta2 * v[key] + (1 - beta2) * g[key] ** 2 for key in p}
        p = {key: p[key] - lr * (m[key] / (1 - beta1 ** t)) / (np.sqrt(v[key] / (1 - beta2 ** t)) + eps) for key in p}
    return p, losses, m, v


def full_distributed_training_loop(params, X, Y, config, cluster=None):
    """Train the helper MLP with Adam on config.num_workers simulated workers, every technique switchable.

    Args:
        params: the helper MLP's parameters (float32 or float64); not modified.
        X: (B, D) inputs and Y: (B, outputs) targets, in the parameters' dtype.
        config: a TrainingConfig.
        cluster: the ``Cluster(N)`` to run every collective on (a new one when None).
    Use ``shard_dataset_across_workers``, ``worker_gradients``, ``ring_all_reduce_mean`` or
    ``reduce_scatter_mean``, ``local_shard_adam_update`` and ``all_gather_param_shards`` on
    ``cluster``, and ``training_steps(config)`` for the steps (a progress bar when config.progress_bar).

    Returns:
        (final_params, history, workers): the final master weights (a dict shaped like params;
        float32 in mixed precision), ``{"loss": [float], "skipped": [bool], "loss_scale": [float]}``
        and a list of N dicts, worker r's ``{"parameters": its flat vector (float16 in mixed
        precision), "m": ..., "v": ...}`` (Adam's moments of what it owns: its shard
        ``np.array_split(flat, N)[r]`` with ZeRO, else everything; float32 in mixed precision),
        with ``"master"`` (the float32 master weights of what it owns) in mixed precision.

    Raises:
        ValueError: if len(X) != len(Y), if N > B, if k > B // N, or with ZeRO if N is larger than
            the number of parameters.
    """
    # Given · the checks of the input and the workers' set-up: bookkeeping, written for you (the loop's steps are
    #         the lesson). What each worker holds (working[r], own[r], states[r], master[r]): see Concepts.
    N, k, mixed = config.num_workers, config.num_micro_batches, config.mixed_precision
    keys, size = list(params), sum(value.size for value in params.values())
    if len(X) != len(Y):
        raise ValueError(f"X has {len(X)} rows but Y has {len(Y)}")
    if N > len(X):
        raise ValueError(f"{N} workers for {len(X)} examples: some worker would get no data")
    if k > len(X) // N:
        raise ValueError(f"{k} micro-batches do not fit the smallest worker's {len(X) // N} examples")
    if config.zero_stage and N > size:
        raise ValueError(f"ZeRO with {N} workers for {size} parameters: some worker would own nothing")
    if cluster is None:
        cluster = Cluster(N)
    shards = shard_dataset_across_workers(X, Y, N)  # worker r's examples, X[r::N] and Y[r::N] (025)
    flat = np.concatenate([params[key].ravel() for key in keys])
    own = [(0, size)] * N  # what each worker updates: everything, or with ZeRO its shard
    if config.zero_stage:
        cuts = np.cumsum([0] + [len(c) for c in np.array_split(flat, N)])
        own = [(cuts[r], cuts[r + 1]) for r in range(N)]
    working = [flat.astype(np.float16) if mixed else flat.copy() for _ in range(N)]
    master = [flat[lo:hi].astype(np.float32) for lo, hi in own] if mixed else None
    states = [{"step": 0, "m": np.zeros(hi - lo, np.float32 if mixed else flat.dtype),
               "v": np.zeros(hi - lo, np.float32 if mixed else flat.dtype)} for lo, hi in own]

    def as_dict(vector):  # a flat vector cut back into a dict shaped like params (views of the vector, no copy)
        out, offset = {}, 0
        for key in keys:
            out[key] = vector[offset:offset + params[key].size].reshape(params[key].shape)
            offset += params[key].size
        return out

    scale, clean = config.loss_scale if mixed else 1.0, 0  # the loss scale, and the clean steps in a row
    history = {"loss": [], "skipped": [], "loss_scale": []}
    for step in training_steps(config):
        # Given · a float16 overflow is the loss scaler's business (step 5), not a warning; the workers compute
        #         one after another, so one worker's activations are alive at a time.
        with np.errstate(over="ignore", invalid="ignore"):
            flat_grads, loss = [], 0.0
            for r, (X_r, Y_r) in enumerate(shards):
                # Step 1 · Worker r's gradient: worker_gradients(as_dict(working[r]), X_r, Y_r, k, config.segment_size,
                #          the scale in mixed precision else None). Append its flat gradient (every array raveled,
                #          in the order of keys) times the worker's weight N n_r / B (026) to flat_grads; add
                #          its loss, weighted n_r / B, to the step's loss.
                ### BEGIN SOLUTION
                loss_r, grads, _ = worker_gradients(as_dict(working[r]), X_r, Y_r, k, config.segment_size,
                                                    scale if mixed else None)
                weight = N * len(X_r) / len(X)
                flat_grads.append(np.concatenate([weight * grads[key].ravel() for key in keys]))
                loss += weight * loss_r / N
                ### END SOLUTION
            # Step 2 · Average flat_grads on cluster into reduced (one vector per worker): with ZeRO
            #          reduce_scatter_mean (worker r gets the mean of its shard), else ring_all_reduce_mean
            #          (every worker gets the whole mean).
            ### BEGIN SOLUTION
            if config.zero_stage:
                reduced, _ = reduce_scatter_mean(flat_grads, cluster)
            else:
                reduced, _ = ring_all_reduce_mean(flat_grads, cluster)
            ### END SOLUTION
            # Given · each worker's update, (new shard, new state), kept beside the old: a skipped step changes nothing.
            updates = []
            for r in range(N):
                # Step 3 · Worker r unscales its mean gradient (mixed: as float32, divided by np.float32(scale)) and
                #          appends local_shard_adam_update of what it owns (its master weights in mixed precision,
                #          else working[r][lo:hi]), states[r] and config's learning rate, beta1, beta2, eps.
                ### BEGIN SOLUTION
                grad = reduced[r].astype(np.float32) / np.float32(scale) if mixed else reduced[r]
                mine = master[r] if mixed else working[r][own[r][0]:own[r][1]]
                updates.append(local_shard_adam_update(mine, grad, states[r], config.learning_rate, config.beta1,
                                                       config.beta2, config.eps))
                ### END SOLUTION
            # Step 4 · new, the workers' new vectors: the new shards (cast to float16 in mixed precision), with ZeRO
            #          all-gathered with all_gather_param_shards on cluster. skipped, a Python bool: in mixed
            #          precision, a new vector holds an inf or a NaN (every worker sees the same).
            ### BEGIN SOLUTION
            new = [shard.astype(np.float16) if mixed else shard for shard, _ in updates]
            if config.zero_stage:
                new, _ = all_gather_param_shards(new, cluster)
            skipped = mixed and not all(np.isfinite(vector).all() for vector in new)  # every worker sees the same
            ### END SOLUTION
        # Given · the history of the step: its loss, whether it was skipped, the scale it used.
        history["loss"].append(loss)
        history["skipped"].append(skipped)
        history["loss_scale"].append(float(scale))
        # Step 5 · Skipped: the scale halves, the clean count restarts, nothing else changes (continue). Otherwise
        #          working becomes new, and states (in mixed precision master too) the updates' new states (and
        #          shards); in mixed precision, after config.growth_interval clean steps in a row the scale doubles
        #          and the count restarts.
        ### BEGIN SOLUTION
        if skipped:  # nothing changes; the scale halves
            scale, clean = scale / 2, 0
            continue
        working = new
        states = [state for _, state in updates]
        if mixed:
            master = [shard for shard, _ in updates]
            clean += 1
            if clean == config.growth_interval:
                scale, clean = scale * 2, 0
        ### END SOLUTION
    # Given · what each worker holds at the end: its flat parameters, Adam's m and v, and its master weights.
    workers = [{"parameters": working[r], "m": states[r]["m"], "v": states[r]["v"]} for r in range(N)]
    if mixed:
        for r in range(N):
            workers[r]["master"] = master[r]
    # Step 6 · The final parameters, as_dict of the master weights (with ZeRO the workers' master shards joined in
    #          rank order; without, worker 0's), or without mixed precision of worker 0's vector. Return
    #          (final_params, history, workers).
    ### BEGIN SOLUTION
    final = np.concatenate(master) if mixed and config.zero_stage else (master[0] if mixed else working[0])
    return as_dict(final), history, workers
    ### END SOLUTION

# %% [markdown]
# ### Tests

# %% tags=["tests"]
mistakes040 = mistakes_of("full_distributed_training_loop")
params_l = mlp.init_params([8, 8, 8, 8, 2], seed=1)                  # 4 layers 8 wide: 234 parameters
rng = np.random.default_rng(2)
X_l, Y_l = rng.standard_normal((32, 8)), rng.standard_normal((32, 2))


def flat(tensors):
    return np.concatenate([value.ravel() for value in tensors.values()])


def layout(workers):
    """What each worker holds, as the grader compares it first: {key: (shape, dtype)} per worker."""
    check(isinstance(workers, list) and all(isinstance(worker, dict) for worker in workers)
          and all(isinstance(value, np.ndarray) for worker in workers for value in worker.values()),
          f"workers is a list of one dict of arrays per worker, got {workers!r:.200}")
    return [{key: (value.shape, value.dtype.name) for key, value in worker.items()} for worker in workers]


# Every switch off: plain Adam on one worker (plain_adam, given in the cell above), bit for bit; one worker holds all
plain_p, plain_losses, plain_m, plain_v = plain_adam(params_l, X_l, Y_l, 3, 1e-2)
off = TrainingConfig(steps=3, learning_rate=1e-2)
given_l = {"params": {key: value.copy() for key, value in params_l.items()}, "X": X_l.copy(), "Y": Y_l.copy()}
final_l, history_l, workers_l = call(full_distributed_training_loop, params_l, X_l, Y_l, off,
                                     returns=("final_params", "history", "workers"))
check_equal({"params": params_l, "X": X_l, "Y": Y_l}, given_l, "the inputs after the loop (it must not change them)",
            exact=True)
check(isinstance(history_l, dict) and list(history_l) == ["loss", "skipped", "loss_scale"],
      f"history is a dict with the keys loss, skipped and loss_scale, got {history_l!r:.200}")
check_equal(final_l, plain_p, "the final parameters with every switch off (plain Adam)", exact=True)
check_equal(history_l["loss"], plain_losses, "the losses with every switch off (plain Adam)", exact=True)
check(history_l["skipped"] == [False] * 3 and history_l["loss_scale"] == [1.0] * 3,
      f"without mixed precision no step is skipped and the scale is 1.0, got {history_l['skipped']} and "
      f"{history_l['loss_scale']}")
check(all(type(flag) is bool for flag in history_l["skipped"]),
      f"history['skipped'] holds Python bools (True or False), got the types "
      f"{[type(flag).__name__ for flag in history_l['skipped']]}: convert with bool(...)")
layout(workers_l)
check_equal(workers_l, [{"parameters": flat(plain_p), "m": flat(plain_m), "v": flat(plain_v)}],
            "what the one worker holds at the end: its flat parameters and Adam's m and v of all 234, float64",
            exact=True)
# Every switch on, on a cluster passed in: 2 workers (16 examples each), 2 micro-batches, segments of 2, mixed
# precision, ZeRO. The grader passes its own cluster and reads its ledger.
on = TrainingConfig(steps=3, learning_rate=1e-2, num_workers=2, num_micro_batches=2, segment_size=2,
                    mixed_precision=True, zero_stage=1, loss_scale=1024.0)
given = Cluster(2)
final_on, history_on, workers_on = call(full_distributed_training_loop, params_l, X_l, Y_l, on, given,
                                        returns=("final_params", "history", "workers"))
check(all(value.dtype == np.float32 for value in final_on.values()), "in mixed precision the master weights are float32")
check(abs(history_on["loss"][-1] / plain_losses[-1] - 1) < 0.01,
      f"with every switch on the loss should follow plain Adam's within 1 %, got {history_on['loss']} and {plain_losses}")
# Reduce-scatter of 234 float16 numbers (117 each: 234 bytes a chunk) and all-gather: 468 bytes per worker per step
check_equal(given.ledger.summary(), {"bytes_sent": [1404, 1404], "bytes_received": [1404, 1404],
                                     "messages_sent": [6, 6], "messages_received": [6, 6], "rounds": 6},
            "the ledger of the cluster it was given (3 ZeRO steps on 2 workers: every collective on `cluster`)")
check(given.unreceived() == 0, f"{given.unreceived()} message(s) were sent and never received: each worker's "
      f"shard of the mean gradient, and the others' shards of the parameters, come from what it received")
# ZeRO in mixed precision: float16 parameters (all 234), float32 master weights, m and v of the worker's 117
check_equal(layout(workers_on), [{"parameters": ((234,), "float16"), "m": ((117,), "float32"),
                                  "v": ((117,), "float32"), "master": ((117,), "float32")}] * 2,
            "what each worker holds (shapes and dtypes) with ZeRO in mixed precision")
check_equal(np.concatenate([worker["master"] for worker in workers_on]), flat(final_on),
            "the workers' master shards, in rank order (the final parameters)", exact=True)
check(all(np.array_equal(worker["parameters"], flat(final_on).astype(np.float16)) for worker in workers_on),
      "after the all-gather every worker holds the float16 copy of all the master weights")
# ZeRO off in mixed precision: every worker holds the master weights, m and v of all 234 parameters
_, _, workers_mixed = call(full_distributed_training_loop, params_l, X_l, Y_l,
                           replace(off, num_workers=2, mixed_precision=True, loss_scale=1024.0),
                           returns=("final_params", "history", "workers"))
check_equal(layout(workers_mixed), [{"parameters": ((234,), "float16"), "m": ((234,), "float32"),
                                     "v": ((234,), "float32"), "master": ((234,), "float32")}] * 2,
            "what each worker holds (shapes and dtypes) in mixed precision without ZeRO")
# ZeRO without mixed precision, 234 parameters on 4 workers: shards of 59, 59, 58, 58 (np.array_split), float64
_, _, workers_zero = call(full_distributed_training_loop, params_l, X_l, Y_l, replace(off, num_workers=4, zero_stage=1),
                          returns=("final_params", "history", "workers"))
check_equal(layout(workers_zero), [{"parameters": ((234,), "float64"), "m": ((n,), "float64"), "v": ((n,), "float64")}
                                   for n in (59, 59, 58, 58)], "what each worker holds (shapes and dtypes) with ZeRO")
# Dynamic loss scaling: a scale of 2**40 overflows float16 at once; the step is skipped, the scale halves,
# and nothing else changes (the master weights, m and v stay as they were)
huge = replace(off, steps=2, mixed_precision=True, loss_scale=2.0 ** 40)
final_h, history_h, workers_h = call(full_distributed_training_loop, params_l, X_l, Y_l, huge,
                                     returns=("final_params", "history", "workers"))
check(history_h["skipped"] == [True, True] and history_h["loss_scale"] == [2.0 ** 40, 2.0 ** 39],
      f"a scale of 2**40 should skip both steps and halve the scale, got {history_h['skipped']} and "
      f"{history_h['loss_scale']}")
check_equal(final_h, {key: value.astype(np.float32) for key, value in params_l.items()},
            "the master weights after two skipped steps", exact=True)
check_equal(workers_h, [{"parameters": flat(params_l).astype(np.float16), "m": np.zeros(234, np.float32),
                         "v": np.zeros(234, np.float32), "master": flat(params_l).astype(np.float32)}],
            "what the worker holds after two skipped steps (as at the start)", exact=True)
check(not any(np.shares_memory(final_h[key], params_l[key]) for key in params_l)
      and not any(np.shares_memory(final_l[key], params_l[key]) for key in params_l),
      "the final parameters must be new arrays, not the input's (also when every step was skipped)")
grow = replace(off, steps=3, mixed_precision=True, loss_scale=8.0, growth_interval=2)
check(call(full_distributed_training_loop, params_l, X_l, Y_l, grow, returns=("p", "h", "w"))[1]["loss_scale"]
      == [8.0, 8.0, 16.0], "after growth_interval = 2 clean steps the scale doubles: [8, 8, 16]")
# The memory, measured: the simulated workers compute one after another, so the loop's peak is every worker's
# arrays and one worker's activations at a time. Each switch keeps it within training_loop_allowed_bytes.
for switch, widths, rows, config in (
        ("checkpointing", [16] * 32 + [2], 1024, TrainingConfig(steps=1, num_workers=2, segment_size=4)),
        ("accumulation", [16] * 4 + [2], 2048, TrainingConfig(steps=1, num_workers=2, num_micro_batches=4)),
        ("ZeRO", [64] * 4 + [2], 32, TrainingConfig(steps=1, num_workers=8, zero_stage=1, mixed_precision=True,
                                                    loss_scale=256.0))):
    params_m = mlp.init_params(widths, seed=3)
    X_m, Y_m = rng.standard_normal((rows, widths[0])), rng.standard_normal((rows, 2))
    check_memory(full_distributed_training_loop, {"params": params_m, "X": X_m, "Y": Y_m, "config": config},
                 training_loop_allowed_bytes(params_m, X_m, config),
                 f"{switch} on: 1.5 x (twice every worker's parameters, gradients and optimizer state (036, 037), "
                 f"the flat parameters, and worker 0's activations (038)), plus 64 KiB; a loop that ignores "
                 f"{switch} needs more")
check_raises(full_distributed_training_loop, {"params": params_l, "X": X_l, "Y": Y_l[:30], "config": off}, ValueError,
             "X has 32 rows and Y 30")
check_raises(full_distributed_training_loop, {"params": params_l, "X": X_l[:3], "Y": Y_l[:3],
                                              "config": replace(off, num_workers=4)}, ValueError,
             "there are 4 workers for 3 examples")
check_raises(full_distributed_training_loop, {"params": params_l, "X": X_l[:9], "Y": Y_l[:9],
                                              "config": replace(off, num_workers=2, num_micro_batches=5)}, ValueError,
             "5 micro-batches do not fit worker 1's 4 examples")
check_raises(full_distributed_training_loop, {"params": {"W1": np.ones((1, 1)), "b1": np.zeros(1)}, "X": X_l[:, :1],
                                              "Y": Y_l[:, :1], "config": replace(off, num_workers=3, zero_stage=1)},
             ValueError, "ZeRO with 3 workers for 2 parameters")
# A TrainingConfig refuses a bad field itself, when it is made (before any loop starts)
def make_config(field, value):
    return TrainingConfig(**{field: value})


check_raises(make_config, {"field": "zero_stage", "value": 2}, ValueError, "zero_stage is 2 (the loop simulates 1)")
check_raises(make_config, {"field": "num_workers", "value": 0}, ValueError, "num_workers is 0")
check_raises(make_config, {"field": "segment_size", "value": 0}, ValueError, "segment_size is 0")
check_raises(make_config, {"field": "num_micro_batches", "value": 1.5}, TypeError, "num_micro_batches is 1.5")
lesson_passed("040")

# %% [markdown]
# ### Common mistakes
#
# - **A switch that does nothing**: ignoring data parallelism, ZeRO or mixed precision shows in
#   what the workers return (one worker; `m` and `v` too long; float64, no master weights).
#   Ignoring checkpointing or accumulation, or keeping the whole state under ZeRO but
#   returning shards, shows only in the measured peak.
# - **Averaging the workers' gradients unweighted**: with unequal shards a worker's mean
#   gradient counts $n_r / B$ of the batch, not $1 / N$ (026's weight $N n_r / B$).
# - **Unscaling twice, or not at all**: divide the scale out once, in float32. Adam's update
#   barely notices (it divides $m$ by $\sqrt{v}$), but the moments, also graded, do.
# - **A skipped step that still changes something**: the master weights, moments, step count
#   and parameters stay as they were; only the scale halves.
#
# ### Checkpoint
#
# Off, the switches vanish (plain Adam, bit for bit); on, they change what each worker holds
# and the loop's peak, as 036-038 predict. *Self-check:* which switch changes the traffic,
# which what each worker holds at the end, and which only the peak?
#
# *Optional, with PyTorch (`make torch`):* `make train-distributed FROM=notebooks` runs your
# 029, 035 and this loop on real processes, one per worker, and shows whether each worker ends
# with the reference's parameters and sends the ledger's bytes, or where it first differs.

# %% [markdown]
# ## Measured: every technique together
#
# An MLP of 4 layers 32 wide (3,300 float64 parameters) trains for 20 steps on 256 examples,
# first with every switch off (one worker, float64), then with every switch on (4 workers,
# 2 micro-batches, segments of 2, mixed precision with a loss scale of $2^8$, ZeRO stage 1).

# %% tags=["demo"]
params_f = mlp.init_params([32, 32, 32, 32, 4], seed=0)
rng = np.random.default_rng(3)
X_f, Y_f = rng.standard_normal((256, 32)), rng.standard_normal((256, 4))
steps_f = 20
off_f = TrainingConfig(steps=steps_f, learning_rate=1e-3)
on_f = TrainingConfig(steps=steps_f, learning_rate=1e-3, num_workers=4, num_micro_batches=2, segment_size=2,
                      mixed_precision=True, zero_stage=1, loss_scale=2.0 ** 8, progress_bar=True)
plain_f, plain_curve, _, _ = plain_adam(params_f, X_f, Y_f, steps_f, 1e-3)  # 040's yardstick
cluster_off, cluster_on = Cluster(1), Cluster(4)
final_off, history_off, workers_off = full_distributed_training_loop(params_f, X_f, Y_f, off_f, cluster_off)
final_on_f, history_on_f, workers_on_f = full_distributed_training_loop(params_f, X_f, Y_f, on_f, cluster_on)
assert all(np.array_equal(final_off[key], plain_f[key]) for key in plain_f) and history_off["loss"] == plain_curve
gap = max(abs(a / b - 1) for a, b in zip(history_on_f["loss"], plain_curve))
print(f"final loss, plain Adam on one worker:   {plain_curve[-1]:.6f}")
print(f"final loss, every switch off:           {history_off['loss'][-1]:.6f}  (bit for bit the same run)")
print(f"final loss, every switch on:            {history_on_f['loss'][-1]:.6f}  "
      f"(largest relative gap over the {steps_f} steps: {gap:.1e}; tolerance 1e-2)")
print(f"steps skipped by the loss scaler: {sum(history_on_f['skipped'])}; final scale {history_on_f['loss_scale'][-1]:g}")
assert gap < 1e-2
traffic_on = cluster_on.ledger.summary()
print(f"traffic, every switch on (the ledger of the cluster it was given): {traffic_on['bytes_sent']} bytes sent "
      f"per worker in {traffic_on['rounds']} rounds ({steps_f} steps); every switch off: "
      f"{cluster_off.ledger.summary()['bytes_sent']}")
num_params = sum(value.size for value in params_f.values())
for name, config, workers in (("every switch off", off_f, workers_off), ("every switch on", on_f, workers_on_f)):
    dtype, N = ("mixed" if config.mixed_precision else "float64"), config.num_workers
    for r, worker in enumerate(workers):
        held = {key: value.nbytes for key, value in worker.items()}
        counted = (compute_param_memory_bytes(num_params, dtype, config.zero_stage, N, r)["parameters"]
                   + compute_optimizer_memory_bytes(num_params, dtype, config.zero_stage, N, r))
        print(f"{name:>17}, worker {r} holds: parameters {held['parameters']:>6,}  master {held.get('master', 0):>5,}  "
              f"m {held['m']:>6,}  v {held['v']:>6,}  total {sum(held.values()):>6,} (036 + 037: {counted:,})")
# The peak of one step of each loop (all its workers, one after another), measured as the grader measures it
for name, config in (("every switch off", off_f), ("every switch on", on_f)):
    one_step, N = replace(config, steps=1, progress_bar=False), config.num_workers
    peak = measure_peak_memory(full_distributed_training_loop, params_f, X_f, Y_f, one_step).peak_bytes
    allowed = training_loop_allowed_bytes(params_f, X_f, one_step)
    activations = compute_peak_activation_memory_bytes(len(X_f[0::N]), 32, 4, "mixed" if config.mixed_precision
                                                       else "float64", config.segment_size, config.num_micro_batches)
    print(f"{name:>17}: one step's peak {format_measured(peak)}, bound {format_bytes(allowed)} (038: "
          f"{activations:,} bytes of activations for worker 0's {len(X_f[0::N])} rows)")

fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
left.plot(plain_curve, color=COLORS["reference"], linewidth=4, alpha=0.5, label="plain Adam")
left.plot(history_off["loss"], "--", color=COLORS["baseline"], label="every switch off")
left.plot(history_on_f["loss"], ":", color=COLORS["measured"], label="every switch on")
left.set_xlabel("step")
left.set_ylabel("loss")
left.set_title("Loss")
left.legend(fontsize=8)
kinds = ("parameters", "master", "m", "v")
runs = [("off", workers_off[0])] + [(f"on, w{r}", worker) for r, worker in enumerate(workers_on_f)]
bottom = np.zeros(len(runs))
for kind, color in zip(kinds, (COLORS["baseline"], COLORS["estimated"], COLORS["reference"], COLORS["measured"])):
    heights = np.array([worker[kind].nbytes if kind in worker else 0 for _, worker in runs]) / 2**10
    right.bar(range(len(runs)), heights, bottom=bottom, color=color, label=kind)
    bottom += heights
right.set_xticks(range(len(runs)), [name for name, _ in runs], fontsize=8)
right.set_ylabel("KiB per worker")
right.set_title("What each worker holds at the end")
right.legend(fontsize=8)
plt.show()

# %% [markdown]
# Each worker holds exactly 036 + 037 for its rank: all off, 79,200 bytes (24 a parameter);
# all on, 16,500 on each of the 4 (6,600 bytes of float16 parameters, 12 bytes for each of
# its 825), a fifth as much. The on-run's traffic is the
# ring's, $2 \cdot \frac{3}{4}$ of the 6,600 bytes of float16 gradients per worker and step:
# 198,000 bytes over the 20 steps. One step's peak is about two thirds of its bound in both
# runs; the bound leaves room for NumPy's temporaries on small arrays (039).

# %% [markdown]
# ## Measured: why the running sum of the gradients is float32
#
# In mixed precision each micro-batch's gradients leave the backward pass in float16, $S$
# times too large, and accumulation (012) adds $n_j \cdot S g_j$ to a running sum: with
# micro-batches of 256 rows and $S = 2^8$, $2^{16}$ times the gradient, past float16's 65504.
# Their mean, $S g$, fits. So `worker_gradients` sums in float32 and rounds the mean to
# float16 once. Below, worker 0 of 2 (1,024 rows in 4 micro-batches of 256) sums both ways;
# then the all-on loop runs 10 steps beside the all-off run.

# %% tags=["demo"]
params_a = mlp.init_params([32, 32, 32, 32, 4], seed=0)
rng = np.random.default_rng(3)
X_a, Y_a = rng.standard_normal((2048, 32)), rng.standard_normal((2048, 4))
scale_a = 2.0 ** 8
half_a = {key: value.astype(np.float16) for key, value in params_a.items()}
sum16, sum32 = {}, {}
for X_j, Y_j in zip(np.array_split(X_a[0::2], 4), np.array_split(Y_a[0::2], 4)):  # worker 0's micro-batches
    _, g_j, _ = worker_gradients(half_a, X_j, Y_j, 1, 2, scale_a)  # float16, times the scale
    with np.errstate(over="ignore", invalid="ignore"):
        for key, grad in g_j.items():
            sum16[key] = sum16.get(key, 0) + len(X_j) * grad                    # float16 running sum
            sum32[key] = sum32.get(key, 0) + len(X_j) * grad.astype(np.float32)  # float32 running sum
num_a = sum(value.size for value in params_a.values())
overflowed = sum(int((~np.isfinite(value)).sum()) for value in sum16.values())
largest = max(float(np.abs(value).max()) for value in sum32.values())
mean16 = {key: (value / 1024).astype(np.float16) for key, value in sum32.items()}
print(f"running sum in float16: {overflowed:,} of {num_a:,} entries overflowed to inf (the step would be skipped)")
print(f"running sum in float32: largest |entry| {largest:,.0f} (float16 stops at 65,504); its mean rounded to "
      f"float16 once: {sum(int(np.isfinite(value).all()) for value in mean16.values())} of {len(mean16)} arrays "
      f"finite, largest |entry| {max(float(np.abs(value).max()) for value in mean16.values()):,.1f}")

off_a = TrainingConfig(steps=10, learning_rate=1e-3)
on_a = TrainingConfig(steps=10, learning_rate=1e-3, num_workers=2, num_micro_batches=4, segment_size=2,
                      mixed_precision=True, zero_stage=1, loss_scale=scale_a)
_, history_off_a, _ = full_distributed_training_loop(params_a, X_a, Y_a, off_a)
_, history_on_a, _ = full_distributed_training_loop(params_a, X_a, Y_a, on_a)
print(f"all-on loop, 2 workers x 4 micro-batches of 256 rows, scale 2**8: {sum(history_on_a['skipped'])} of 10 steps "
      f"skipped; final loss {history_on_a['loss'][-1]:.6f} beside the all-off run's {history_off_a['loss'][-1]:.6f} "
      f"({history_on_a['loss'][-1] / history_off_a['loss'][-1] - 1:+.1e})")

# %% [markdown]
# Summed in float16, 64 of the 3,300 entries overflow: the loss scaler would skip the step
# and halve the scale until $n_j S g_j$ fits, losing more small gradients. Summed in float32
# the mean fits; the all-on loop skips no step and ends within two parts in $10^4$ of the
# all-off run. The cost, 4 bytes a parameter instead of 2, is in 039's table.

# %% [markdown]
# ## Beyond the simulator: the same training on real processes (optional, ungraded)
#
# The course can also run this part's workers for real: one operating-system process per
# worker, each computing with the course's reference functions, while PyTorch's
# `torch.distributed` (the gloo backend, over TCP on this machine only) carries their messages on
# the rings of lessons 028, 034 and 035. PyTorch is an optional extra that nothing in this
# notebook needs. In a terminal, at the root of the course:
#
# ```bash
# make torch                          # once: installs PyTorch (CPU build) into .venv
# make train-distributed WORKERS=4    # TECHNIQUE=full-loop runs lesson 040's loop only
# ```
#
# It trains with lesson 029's data-parallel step, lesson 035's ZeRO step and lesson 040's loop
# with every switch on, each on 4 real processes and on the simulated cluster. On the course's
# machine it printed:
#
# ```text
# 4 worker processes (torch 2.13.0+cpu, gloo over TCP on 127.0.0.1), computing with the course's reference functions
# model: MLP [8, 30, 30, 3] (1,293 parameters, 10,344 bytes in float64); batch 30, shards of 8, 8, 7, 7 rows; 20 steps
#
# data parallel: lesson 029's step: shard (025), local gradients (026), ring all-reduce of each tensor (028's
#   schedule), SGD with learning rate 0.05
#   loss 1.653244 -> 0.388183 (simulated: 1.653244 -> 0.388183)
#   final float64 parameters, every worker vs the simulated run: largest difference 0 (relative 0), equal bit for bit
#   worker   bytes sent  ledger says  messages sent  ledger says  written to its sockets (OS count)
#        0      310,240      310,240            720          720           413,920 (+144 B/message)
#        1      310,880      310,880            720          720           414,560 (+144 B/message)
#        2      310,400      310,400            720          720           414,080 (+144 B/message)
#        3      309,760      309,760            720          720           413,440 (+144 B/message)
#   rounds: 720 (ledger: 720); traffic as the ledger predicts, worker for worker; training 1.32 s (slowest worker)
#
# ZeRO: lesson 035's step: local gradients (025, 026), ring reduce-scatter, Adam on the worker's own shard (033,
#   learning rate 0.01), all-gather (034)
#   loss 1.653244 -> 0.419118 (simulated: 1.653244 -> 0.419118)
#   final float64 parameters, every worker vs the simulated run: largest difference 0 (relative 0), equal bit for bit
#   worker   bytes sent  ledger says  messages sent  ledger says  written to its sockets (OS count)
#        0      310,240      310,240            120          120           327,520 (+144 B/message)
#        1      310,400      310,400            120          120           327,680 (+144 B/message)
#        2      310,400      310,400            120          120           327,680 (+144 B/message)
#        3      310,240      310,240            120          120           327,520 (+144 B/message)
#   rounds: 120 (ledger: 120); traffic as the ledger predicts, worker for worker; training 0.34 s (slowest worker)
#
# full loop: lesson 040's step on its one batch: shard (025), worker_gradients (2 micro-batches, checkpointed segments
#   of 2 layers, float16 with a loss scale of 65536 at first, doubled after 5 clean steps) weighted (026), ring
#   reduce-scatter (035), Adam on the worker's shard of the float32 master weights (033, learning rate 0.01),
#   all-gather (034)
#   loss 1.653311 -> 0.083043 (simulated: 1.653311 -> 0.083043)
#   loss scaler: steps 0-2 skipped (3 of 20); scale 65536 (step 0), 32768 (1), 16384 (2), 8192 (3-7), 16384 (8-12),
#     32768 (13-17), 65536 (18-19); every worker as simulated
#   final float32 parameters, every worker vs the simulated run: largest difference 0 (relative 0), equal bit for bit
#   worker   bytes sent  ledger says  messages sent  ledger says  written to its sockets (OS count)
#        0       77,560       77,560            120          120            94,840 (+144 B/message)
#        1       77,600       77,600            120          120            94,880 (+144 B/message)
#        2       77,600       77,600            120          120            94,880 (+144 B/message)
#        3       77,560       77,560            120          120            94,840 (+144 B/message)
#   rounds: 120 (ledger: 120); traffic as the ledger predicts, worker for worker; training 0.39 s (slowest worker)
#
# (OS count: what the operating system saw the process write during the training, payload and gloo's headers)
# ```
#
# Every process ends with the simulated run's parameters, bit for bit, float16 passes and loss
# scaling included: the same arithmetic, with the bytes travelling through sockets. Each sends
# what the ledger predicts, worker for worker (040's loop a quarter of 035's bytes: float16, not
# float64), and the operating system sees gloo's header added to every message. The loop starts
# from `TrainingConfig`'s default scale, which overflows float16 here, so its first steps are
# skipped while the scale halves: each process decides on its own, from the vector it holds after
# the all-gather, as the simulation did.

# %% [markdown]
# ## Part summary
#
# - A worker's peak is parameters + gradients + optimizer state + activations. The first
#   three are exact counts (036, 037), and the ZeRO paper's figures come out to the byte.
# - Activations are predicted from what the backward pass keeps (038), within 10 % of
#   tracemalloc in every row of 039's table: all together, worker 0 needs 689,836 bytes
#   where plain training needs 10,121,344, a fifteenth.
# - The loop (040) with every switch off is plain Adam, bit for bit (final loss 1.091608);
#   with every switch on its losses follow within 4.7e-4 over 20 steps (final 1.091524).
# - Micro-batches and checkpointing shrink the activations, float16 everything, ZeRO the
#   optimizer state; the traffic is the ring all-reduce's either way.
