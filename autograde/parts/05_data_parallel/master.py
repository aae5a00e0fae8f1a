# %% [markdown] part_title="Data parallel"
# # Part 5 · Data parallel: many workers, one model, and the bill for talking
#
# Parts 2 and 3 made one worker's memory go further. **Data parallelism** adds
# workers: each of $N$ workers holds a full copy (a *replica*) of the model and
# computes gradients on its own slice of the batch; the workers then **average
# their gradients** with a collective called *all-reduce*, so that every replica
# takes the same step. Each worker's activation memory falls by about $N$; the
# price is sending the whole gradient every step.
#
# **Goals of this part**
#
# - deal a batch out to $N$ workers (025) and weight their gradients so that averaging gives the full-batch gradient (026);
# - all-reduce through one worker (027) and around a ring (028);
# - a data-parallel step equal to the full-batch step (029);
# - bucket gradients as PyTorch DDP does (030); measure traffic and time as $N$ and the bucket size grow.
#
# The workers run on a **simulated cluster** (`shared.cluster`, described
# below). The model is the course's MLP (`shared.mlp`):
# `mlp.loss_and_grads(X, Y, params)` gives a batch's mean squared error and its
# gradients. Stuck? The solved notebook is `solutions/05_data_parallel.ipynb`.

# %% tags=["setup"]
# Set-up (read-only): run this cell first.
import numpy as np
import matplotlib.pyplot as plt

from shared import mlp
from shared.checking import CheckFailure, call, check, check_call, check_equal, check_shape
from shared.checking import check_rules  # the rules for graded code (shared.policy)
from shared.checking import check_sends_on_given_cluster, check_workers_apart, expect_error
from shared.cluster import Cluster, check_worker_arrays
from shared.memory import (data_parallel_activation_bytes, data_parallel_step_allowed_bytes, format_bytes,
                           format_measured, format_ratio, measure_peak_memory)
from shared.mistakes import mistakes_of
from shared.notebook import setup_notebook
from shared.plotting import COLORS, plot_worker_chunks
from shared.progress import lesson_passed, show_progress

setup_notebook()

# %% tags=["nbval-ignore-output", "demo"]
# The panel is live: it updates as test cells pass or fail (nbval cannot compare a live output).
show_progress("05_data_parallel")

# %% [markdown]
# ## The simulated cluster
#
# `Cluster(N)` has $N$ workers, of rank $0, \dots, N-1$, in this one process;
# they exchange arrays only by messages. `cluster.send(src, dst, array)` sends
# an array; `cluster.receive(dst, src)` takes it. Messages travel in **rounds**:
# the sends inside one `with cluster.round():` block happen together, and a
# message can be received once its round is over. Each transfer copies the
# array: what a worker receives is its own.
#
# The **ledger** (`cluster.ledger`) records every message; its `summary()` gives
# bytes and messages sent and received per worker (lists indexed by rank) and
# the number of rounds. Time follows the **alpha-beta model**: a message of $n$
# bytes costs $\alpha + n\beta$ seconds, with latency $\alpha = 10\,\mu s$ and
# $\beta = 1$ ns per byte (a 1 GB/s link). A worker sends its messages of a
# round one after another, and receives likewise; a round lasts as long as its
# busiest link.
#
# **Every collective of the course returns one shape: `(results, traffic)`**, a
# list of the $N$ workers' results (worker $r$'s at index $r$) and the ledger's
# `summary()` of the cluster it ran on. So does each one you write (027, 028,
# 030) and each one later parts give or ask for (034's all-gather, 035's
# reduce-scatter): `results, traffic = collective(...)`, or
# `results, _ = ...` where the traffic does not matter.

# %% tags=["demo"]
tour = Cluster(3)
with tour.round():                                      # round 1: workers 1 and 2 send to worker 0
    tour.send(1, 0, np.array([1.0, 2.0]))
    tour.send(2, 0, np.array([3.0, 4.0]))
received = [tour.receive(0, 1), tour.receive(0, 2)]     # after the round, worker 0 takes both
print("worker 0 received", received)
print(tour.ledger.summary())
print(tour.ledger.table())
print(f"alpha-beta estimate: {tour.estimated_seconds() * 1e6:.3f} µs "
      f"(worker 0 receives 2 messages of 16 bytes: 2 × (10 µs + 16 ns))")

# %% [markdown]
# ## 025 · Shard dataset across workers
#
# ### Intuition
#
# The workers together cover the batch, each example exactly once. We deal the
# examples out like cards, as PyTorch's `DistributedSampler` does: worker $r$
# gets examples $r, r+N, r+2N, \dots$ (without its shuffling and padding).
#
# ### Concepts
#
# - `X`: (B, features), `Y`: (B, outputs). Worker $r$'s **shard** is
#   `(X[r::N], Y[r::N])`: views, so sharding copies nothing.
# - The first $B \bmod N$ workers get one example more. The result is a list
#   indexed by rank.
# - `ValueError` for $N < 1$, `X` and `Y` of different lengths, or more workers
#   than examples.
#
# ### Math
#
# $$\text{shard}_r = \{\, i \in \{0, \dots, B-1\} : i \bmod N = r \,\}, \qquad
# n_r = |\text{shard}_r| = \left\lceil \frac{B - r}{N} \right\rceil, \qquad \sum_{r=0}^{N-1} n_r = B .$$
#
# For $B = 10$, $N = 4$: worker 0 gets examples $\{0, 4, 8\}$, worker 1 $\{1, 5, 9\}$,
# worker 2 $\{2, 6\}$, worker 3 $\{3, 7\}$.
#
# ### Implementation

# %% tags=["solution"]
def shard_dataset_across_workers(X, Y, num_workers):
    """Deal the examples of a batch out to num_workers workers, like cards.

    Args:
        X: (B, features) array.
        Y: (B, outputs) array, the targets of X's rows.
        num_workers: N, an int with 1 <= N <= B.

    Returns:
        A list of N tuples ``(X_r, Y_r)`` indexed by rank r: the rows r, r + N, r + 2N, ...
        of X and Y (``X[r::N]``), so the first ``B % N`` shards have one row more
        (views are fine; nothing is modified).

    Raises:
        ValueError: if N < 1, if len(X) != len(Y), or if N > B.
    """
    ### BEGIN SOLUTION
    if num_workers < 1:
        raise ValueError(f"num_workers must be at least 1, got {num_workers}")
    if len(X) != len(Y):
        raise ValueError(f"X has {len(X)} rows but Y has {len(Y)}: they must describe the same examples")
    if num_workers > len(X):
        raise ValueError(f"{num_workers} workers for {len(X)} examples: some worker would get no data")
    return [(X[rank::num_workers], Y[rank::num_workers]) for rank in range(num_workers)]
    ### END SOLUTION

# %% [markdown]
# ### Tests

# %% tags=["tests"]
X = np.arange(20.0).reshape(10, 2)          # 10 examples, 2 features
Y = np.arange(10.0).reshape(10, 1)
shards = call(shard_dataset_across_workers, X, Y, 4)
check(isinstance(shards, list) and len(shards) == 4,
      f"shard_dataset_across_workers(X, Y, 4) should return a list of 4 (X_r, Y_r) pairs, got {shards!r:.80}")
# worker 0 gets examples 0, 4, 8; worker 1 gets 1, 5, 9; worker 2 gets 2, 6; worker 3 gets 3, 7
check_call(shard_dataset_across_workers, {"X": X, "Y": Y, "num_workers": 4},
           [(X[[0, 4, 8]], Y[[0, 4, 8]]), (X[[1, 5, 9]], Y[[1, 5, 9]]), (X[[2, 6]], Y[[2, 6]]),
            (X[[3, 7]], Y[[3, 7]])],
           mistakes=mistakes_of("shard_dataset_across_workers"))
check_call(shard_dataset_across_workers, {"X": X, "Y": Y, "num_workers": 1}, [(X, Y)])
expect_error(shard_dataset_across_workers, [X, Y, 0], ["X", "Y", "num_workers"], ValueError,
             "num_workers is 0")
expect_error(shard_dataset_across_workers, [X, Y[:9], 2], ["X", "Y", "num_workers"], ValueError,
             "X has 10 rows and Y has 9")
expect_error(shard_dataset_across_workers, [X[:3], Y[:3], 4], ["X", "Y", "num_workers"], ValueError,
             "there are more workers (4) than examples (3)")
# float32 data stays float32 (views or copies, never converted):
X32, Y32 = X[:5].astype(np.float32), Y[:5].astype(np.float32)
check_call(shard_dataset_across_workers, {"X": X32, "Y": Y32, "num_workers": 2},
           [(X32[[0, 2, 4]], Y32[[0, 2, 4]]), (X32[[1, 3]], Y32[[1, 3]])],
           mistakes=mistakes_of("shard_dataset_across_workers"))
lesson_passed("025")

# %% [markdown]
# ### Common mistakes
#
# - **Padding the shards by repeating examples**: `DistributedSampler`'s default
#   (`drop_last=False`) deals the first examples again to make every shard
#   $\lceil B/N \rceil$ long; they count twice in the gradient.
# - **Dropping the remainder** (`drop_last=True`): the last $B \bmod N$ examples
#   are never trained on.
# - **Contiguous blocks instead of dealing** (`np.array_split(X, N)`): every
#   example once, but the tests and later lessons' traffic follow the dealt shards.
#
# ### Checkpoint
#
# A shard is every $N$-th example; none is lost or repeated. *Self-check:* for
# $B = 7$ and $N = 3$, which examples does each worker get, and how many examples
# would `DistributedSampler` with padding hand out in all?

# %% [markdown]
# ## 026 · Compute local gradients
#
# ### Intuition
#
# The all-reduce will average the workers' contributions. For that average to
# be the full batch's gradient, each contribution must be **weighted by the
# worker's share of the batch**. With equal shards the weight is 1 and the
# contribution is the shard's mean gradient, as in PyTorch DDP.
#
# ### Concepts
#
# - `mlp.loss_and_grads(X_shard, Y_shard, params)` gives the shard's *mean* loss
#   $\bar L_r$ and its gradients; the shard has $n_r$ examples, the batch $B$
#   (`global_batch_size`).
# - The **weight** is the shard's size relative to an average shard:
#   $w_r = n_r / (B/N) = N n_r / B$. Return $w_r \bar L_r$ (a Python float) and
#   $w_r \nabla \bar L_r$ (a new dict shaped like `params`).
# - `ValueError` for `X_shard` and `Y_shard` of different lengths, an empty
#   shard, or $N < 1$.
#
# ### Math
#
# With $\ell_i$ the loss of example $i$ and $\bar L_r = \frac{1}{n_r}\sum_{i \in r} \ell_i$,
#
# $$L = \frac{1}{B}\sum_{i=1}^{B} \ell_i = \sum_{r} \frac{n_r}{B}\, \bar L_r
#   = \frac{1}{N} \sum_{r} \underbrace{\frac{N n_r}{B}\, \bar L_r}_{\text{worker } r\text{'s contribution}},
# \qquad \nabla L = \frac{1}{N} \sum_{r} \frac{N n_r}{B}\, \nabla \bar L_r .$$
#
# For $B = 10$, $N = 4$ (shards of 3, 3, 2, 2) the weights are
# $(1.2, 1.2, 0.8, 0.8)$.
#
# ### Implementation

# %% tags=["solution"]
def compute_local_gradients(params, X_shard, Y_shard, global_batch_size, num_workers):
    """One worker's contribution to the data-parallel gradient: its shard's mean loss and
    gradients, weighted by the shard's size relative to an average shard.

    Args:
        params: dict of the helper MLP's parameters (see ``shared.mlp``); not modified.
        X_shard: (n_r, features) the worker's examples; Y_shard: (n_r, outputs) their targets.
        global_batch_size: B, the number of examples over all workers.
        num_workers: N.

    Returns:
        (loss, grads): ``w * mean_loss`` as a Python float and a new dict ``{key: w * mean_grad}``,
        with ``w = N * n_r / B`` and mean_loss, mean_grad from ``mlp.loss_and_grads`` on the shard.

    Raises:
        ValueError: if len(X_shard) != len(Y_shard), if the shard is empty, or if N < 1.
    """
    ### BEGIN SOLUTION
    if len(X_shard) != len(Y_shard):
        raise ValueError(f"X_shard has {len(X_shard)} rows but Y_shard has {len(Y_shard)}")
    if len(X_shard) == 0:
        raise ValueError("the shard is empty: every worker needs at least one example")
    if num_workers < 1:
        raise ValueError(f"num_workers must be at least 1, got {num_workers}")
    mean_loss, mean_grads = mlp.loss_and_grads(X_shard, Y_shard, params)
    weight = num_workers * len(X_shard) / global_batch_size
    return float(weight * mean_loss), {key: weight * grad for key, grad in mean_grads.items()}
    ### END SOLUTION

# %% [markdown]
# ### Tests

# %% tags=["tests"]
rng = np.random.default_rng(0)
p0 = mlp.init_params([3, 4, 2], seed=1)
X10, Y10 = rng.standard_normal((10, 3)), rng.standard_normal((10, 2))
# N = 4: worker 0 holds examples 0, 4, 8, three of the ten (an average shard has 2.5): weight 1.2
shard_loss, shard_grads = mlp.loss_and_grads(X10[0::4], Y10[0::4], p0)
check_call(compute_local_gradients, {"params": p0, "X_shard": X10[0::4], "Y_shard": Y10[0::4],
                                     "global_batch_size": 10, "num_workers": 4},
           (1.2 * shard_loss, {key: 1.2 * g for key, g in shard_grads.items()}),
           mistakes=mistakes_of("compute_local_gradients"), rtol=1e-12, atol=1e-14)
# The mean of the four workers' contributions is the full batch's loss and gradient:
contributions = [call(compute_local_gradients, p0, X10[r::4], Y10[r::4], 10, 4, returns=("loss", "grads"))
                 for r in range(4)]
full_loss, full_grads = mlp.loss_and_grads(X10, Y10, p0)
check_equal((sum(c[0] for c in contributions) / 4, {k: sum(c[1][k] for c in contributions) / 4 for k in p0}),
            (full_loss, full_grads), "the mean of the 4 workers' (loss, grads)", rtol=1e-12, atol=1e-14)
expect_error(compute_local_gradients, [p0, X10[:3], Y10[:1], 10, 4],
             ["params", "X_shard", "Y_shard", "global_batch_size", "num_workers"], ValueError,
             "X_shard has 3 rows and Y_shard has 1")
expect_error(compute_local_gradients, [p0, X10[:0], Y10[:0], 10, 4],
             ["params", "X_shard", "Y_shard", "global_batch_size", "num_workers"], ValueError,
             "the shard is empty")
expect_error(compute_local_gradients, [p0, X10[:3], Y10[:3], 10, 0],
             ["params", "X_shard", "Y_shard", "global_batch_size", "num_workers"], ValueError,
             "num_workers is 0")
lesson_passed("026")

# %% [markdown]
# ### Common mistakes
#
# - **The shard's mean, unweighted** (Part 2's "mean of means"): right only when
#   every shard has $B/N$ examples; otherwise the small shards' examples weigh more.
# - **Dividing twice**: weights $n_r/B$ suit an all-reduce that sums; this one
#   averages, so the step comes out $N$ times too small.
# - **Summing over the shard** ($n_r \nabla \bar L_r$) without dividing by $B$:
#   a gradient $B/N$ times too large.
#
# ### Checkpoint
#
# Contribution = shard mean × $N n_r / B$. *Self-check:* with $B = 7$, $N = 3$,
# what are the three weights, and what do they add up to?

# %% [markdown]
# ## 027 · All reduce mean
#
# ### Intuition
#
# An **all-reduce** starts with one array per worker and ends with every worker
# holding the same result, here the element-wise mean. The simplest way: every
# worker sends its array to worker 0 (the *root*), which averages and sends the
# mean back. It is correct, and a traffic jam: every byte passes through the
# root's link, twice.
#
# ### Concepts
#
# - `worker_arrays`: $N$ arrays of one shape and dtype, worker $r$'s at index
#   $r$. The result: $N$ arrays, each worker's **own** copy of the mean.
# - Round 1: each worker $r \ne 0$ sends its array to worker 0. The root adds
#   them to its own in rank order and divides by $N$. Round 2: it sends the mean
#   to each worker $r \ne 0$.
# - Return the results and `cluster.ledger.summary()`. The grader passes in its
#   own cluster and reads its ledger, byte for byte. Every message must be
#   received: a worker's result is what it received.
# - A 0-d array (one number per worker) is an array too, but arithmetic on 0-d
#   arrays gives NumPy scalars, which `send` refuses: make the mean an array
#   again with `np.asarray`.
#
# ### Math
#
# With $S$ bytes per array, the root receives and sends $N-1$ messages of $S$
# bytes; every other worker sends one and receives one:
#
# $$\text{root: } (N-1)S \text{ sent} + (N-1)S \text{ received} = 2(N-1)S, \qquad
# \text{time} \approx 2(N-1)(\alpha + S\beta).$$
#
# With 16 workers and a 1 GB gradient, 30 GB pass through the root's link every
# step.
#
# ### Implementation

# %% tags=["solution"]
def all_reduce_mean(worker_arrays, cluster=None):
    """The naive all-reduce: gather to worker 0, average there, send the mean back.

    Args:
        worker_arrays: list of N float arrays of one shape and dtype (worker r's at index r);
            not modified.
        cluster: the ``Cluster(N)`` to run on (a new one when None).

    Returns:
        (results, traffic): results a list of N new arrays (same shape and dtype, 0-d arrays
        included), each worker's own copy of the element-wise mean (worker r > 0's the array it received);
        traffic ``cluster.ledger.summary()`` after the two rounds (1: every worker r > 0 sends
        its array to worker 0; 2: worker 0 sends the mean to every worker r > 0). Every
        message sent is received.

    Raises:
        ValueError: if worker_arrays is empty or its arrays differ in shape or dtype.
    """
    # Given (bookkeeping, not the technique): the checks of the input, and the cluster.
    check_worker_arrays(worker_arrays)  # ValueError: no workers, or arrays of another shape or dtype
    num_workers = len(worker_arrays)
    if cluster is None:
        cluster = Cluster(num_workers)

    # Yours: the two rounds of the schedule (the docstring's), the mean at the root between them, the return value.
    ### BEGIN SOLUTION
    with cluster.round():
        for rank in range(1, num_workers):
            cluster.send(rank, 0, worker_arrays[rank])
    total = worker_arrays[0]
    for rank in range(1, num_workers):
        total = total + cluster.receive(0, rank)
    mean = np.asarray(total / num_workers)  # of 0-d arrays, total / N is a NumPy scalar: an array again
    with cluster.round():
        for rank in range(1, num_workers):
            cluster.send(0, rank, mean)
    results = [mean] + [cluster.receive(rank, 0) for rank in range(1, num_workers)]
    return results, cluster.ledger.summary()
    ### END SOLUTION

# %% [markdown]
# ### Tests

# %% tags=["tests"]
arrays = [np.array([1.0, 2.0]), np.array([3.0, 6.0]), np.array([5.0, 1.0])]   # 3 workers, 16 bytes each
naive_traffic = {"bytes_sent": [32, 16, 16], "bytes_received": [32, 16, 16],
                 "messages_sent": [2, 1, 1], "messages_received": [2, 1, 1], "rounds": 2}
results, _ = check_call(all_reduce_mean, {"worker_arrays": arrays}, ([np.array([3.0, 3.0])] * 3, naive_traffic),
                        mistakes=mistakes_of("all_reduce_mean"))
check_workers_apart(results, "all_reduce_mean's results")
# float32: 4 bytes per number, and the mean stays float32
arrays32 = [np.full(5, float(r), dtype=np.float32) for r in range(4)]            # 4 workers, 20 bytes each
check_call(all_reduce_mean, {"worker_arrays": arrays32},
           ([np.full(5, 1.5, dtype=np.float32)] * 4,
            {"bytes_sent": [60, 20, 20, 20], "bytes_received": [60, 20, 20, 20],
             "messages_sent": [3, 1, 1, 1], "messages_received": [3, 1, 1, 1], "rounds": 2}),
           mistakes=mistakes_of("all_reduce_mean"))
# One worker: nothing to send, and the result is a new array, not the input itself
alone = [np.array([[1.0, 2.0]])]
check_call(all_reduce_mean, {"worker_arrays": alone},
           ([np.array([[1.0, 2.0]])], {"bytes_sent": [0], "bytes_received": [0], "messages_sent": [0],
                                      "messages_received": [0], "rounds": 0}))
one, _ = call(all_reduce_mean, alone, returns=("results", "traffic"))
check(not np.shares_memory(one[0], alone[0]), "with one worker the result must still be a new array, "
      "not worker_arrays[0] itself")
# 0-d arrays, one number per worker: the means are 0-d arrays too (of 0-d arrays, total / N is a NumPy scalar)
check_call(all_reduce_mean, {"worker_arrays": [np.array(1.0), np.array(4.0)]},
           ([np.array(2.5)] * 2, {"bytes_sent": [8, 8], "bytes_received": [8, 8], "messages_sent": [1, 1],
                                  "messages_received": [1, 1], "rounds": 2}), mistakes=mistakes_of("all_reduce_mean"))
check_call(all_reduce_mean, {"worker_arrays": [np.array(3.0, dtype=np.float32)]},
           ([np.array(3.0, dtype=np.float32)], {"bytes_sent": [0], "bytes_received": [0], "messages_sent": [0],
                                               "messages_received": [0], "rounds": 0}))
# On a cluster that you pass in, the traffic is recorded in its ledger
check_sends_on_given_cluster(all_reduce_mean, (arrays,), naive_traffic, "all_reduce_mean(arrays, cluster)",
                             "each worker's result comes from what it received (worker r > 0 keeps the mean "
                             "it received from worker 0)")
given = Cluster(3)
kept, _ = call(all_reduce_mean, arrays, given, returns=("results", "traffic"))
check(all(given.holds_received(rank, kept[rank]) for rank in (1, 2)),
      "worker r > 0's result must be the very array it received from worker 0 (cluster.receive's), not a copy "
      "it computed itself from the other workers' arrays")
expect_error(all_reduce_mean, [[]], ["worker_arrays"], ValueError, "worker_arrays is empty")
expect_error(all_reduce_mean, [[np.zeros(3), np.zeros(4)]], ["worker_arrays"], ValueError,
             "the workers' arrays have different shapes")
expect_error(all_reduce_mean, [[np.zeros(3), np.zeros(3, dtype=np.float32)]], ["worker_arrays"], ValueError,
             "the workers' arrays have different dtypes")
# every worker is checked, not only the last one: here worker 1 of 3 differs
expect_error(all_reduce_mean, [[np.zeros(3), np.zeros(3, dtype=np.float32), np.zeros(3)]], ["worker_arrays"], ValueError,
             "worker 1 of 3 has another dtype")
expect_error(all_reduce_mean, [[np.zeros((2, 3)), np.zeros((3, 2)), np.zeros((2, 3))]], ["worker_arrays"], ValueError,
             "worker 1 of 3 has another shape")
lesson_passed("027")

# %% [markdown]
# ### Common mistakes
#
# - **Sum instead of mean**: lesson 026's weights expect a mean; a sum makes
#   the step $N$ times too large.
# - **Forgetting the broadcast**: only the root has the mean; the replicas
#   drift apart.
# - **Workers sharing one array object**: `[mean] * N` gives every worker the
#   *same* array, so one worker's change changes everyone's. Each worker keeps
#   the copy it received.
# - **Leaving out the root's own array**: the root is a worker too.
#
# ### Checkpoint
#
# Gather, average, broadcast: 2 rounds, $2(N-1)S$ bytes through the root.
# *Self-check:* with $N = 8$ workers and a 100 MB gradient, how many bytes does
# the root send and receive per step, and how many does worker 5 send?

# %% [markdown]
# ## 028 · Ring all reduce mean
#
# ### Intuition
#
# Put the workers in a ring: worker $r$ sends only to its right neighbour
# $r+1$ and receives only from its left neighbour $r-1$ (modulo $N$). Cut every
# array into $N$ **chunks**. In each round every worker sends one chunk, so all
# links work at once and none carries more than a chunk.
#
# - **Reduce-scatter** ($N-1$ rounds): partial sums travel around the ring;
#   each receiver adds the incoming chunk to its copy. Worker $r$ then holds the
#   complete sum of chunk $r+1$ and divides it by $N$.
# - **All-gather** ($N-1$ rounds): the finished chunks travel around the ring;
#   each receiver replaces its copy. Every worker ends with the same mean, bit
#   for bit.
#
# ### Concepts
#
# - Chunks: `np.array_split(array.ravel(), N)` (the first $n \bmod N$ are one
#   number longer), given by the cell. They are views of the inputs: replace a
#   chunk by a new array (`chunk + received`), never add in place.
# - The schedule below is the contract: the tests compare each worker's bytes,
#   and with uneven chunks another schedule moves other bytes.
# - So is the order of the additions (floating-point addition is not
#   associative): chunk $c$'s sum starts with worker $c$'s numbers and adds each
#   next worker's as it travels. The tests compare **bit for bit**, on inputs
#   where `np.mean` or `sum(worker_arrays)` gives other bits. Each worker's
#   result must come from what it received.
#
# ### Math
#
# Reduce-scatter, steps $s = 0, \dots, N-2$: worker $r$ sends chunk $(r - s) \bmod N$
# to worker $(r+1) \bmod N$ and adds what it receives to its chunk
# $(r - 1 - s) \bmod N$, the index its left neighbour sent. Then worker $r$
# divides chunk $(r+1) \bmod N$ by $N$. All-gather, steps $s = 0, \dots, N-2$:
# worker $r$ sends chunk $(r + 1 - s) \bmod N$ to worker $(r+1) \bmod N$ and
# replaces its chunk $(r - s) \bmod N$ with what it receives.
#
# Every worker sends one chunk in each of the $2(N-1)$ rounds. When $N$ divides the
# array, a chunk is $S/N$ bytes and
#
# $$\text{sent per worker} = 2(N-1)\,\frac{S}{N} < 2S, \qquad
# \text{time} \approx 2(N-1)\,\alpha + 2\,\frac{N-1}{N}\, S\beta .$$
#
# This is the bandwidth lower bound for an all-reduce, paid for in latency:
# $2(N-1)$ rounds instead of 2.
#
# On the first visible test ($N = 3$, 7 numbers: chunks of 24, 16 and 16 bytes)
# worker 0 sends chunks 0, 2, 1 and 0: 80 bytes; workers 1 and 2 send 72 each.
# The figure below works $N = 3$ through, round by round ("2+0": worker 2's
# numbers plus worker 0's).

# %% tags=["demo"]
# The ring for N = 3, from the schedule alone (no cluster, no arrays): the chunk each worker sends in each
# round, and what each of its chunks holds afterwards ("2+0": worker 2's numbers of that chunk plus worker 0's).
ring_n = 3
ring_rounds = [("reduce-scatter", s, [(r - s) % ring_n for r in range(ring_n)]) for s in range(ring_n - 1)]
ring_rounds += [("all-gather", s, [(r + 1 - s) % ring_n for r in range(ring_n)]) for s in range(ring_n - 1)]
ring_holds = [[str(r)] * ring_n for r in range(ring_n)]      # ring_holds[r][c]: what worker r's chunk c sums
ring_frames = [("start", [row[:] for row in ring_holds])]
for phase, s, sends in ring_rounds:
    sent = [ring_holds[r][sends[r]] for r in range(ring_n)]  # every worker sends at once, then receives
    for r in range(ring_n):
        left = (r - 1) % ring_n
        ring_holds[r][sends[left]] = f"{sent[left]}+{r}" if phase == "reduce-scatter" else sent[left]
    if phase == "reduce-scatter" and s == ring_n - 2:          # worker r owns chunk r + 1: it divides it by N
        for r in range(ring_n):
            ring_holds[r][(r + 1) % ring_n] = f"({ring_holds[r][(r + 1) % ring_n]})/{ring_n}"
    divided = f", then ÷ {ring_n}" if phase == "reduce-scatter" and s == ring_n - 2 else ""
    ring_frames.append((f"after {phase} {s + 1}{divided}", [row[:] for row in ring_holds]))
# Every worker ends with every chunk's mean, added in the ring's order (chunk c starts at worker c).
assert all(ring_holds[r] == ring_holds[0] for r in range(ring_n))
assert all(ring_holds[0][c].startswith(f"({c}+") for c in range(ring_n))

print(f"{'round':<18}" + "".join(f"{f'worker {r} sends':>22}" for r in range(ring_n)))
for phase, s, sends in ring_rounds:
    print(f"{f'{phase} {s + 1}':<18}" + "".join(f"{f'chunk {c} -> worker {(r + 1) % ring_n}':>22}"
                                              for r, c in enumerate(sends)))
chunk_bytes_7 = [8 * len(c) for c in np.array_split(np.arange(7.0), ring_n)]
sent_bytes_7 = [sum(chunk_bytes_7[sends[r]] for _, _, sends in ring_rounds) for r in range(ring_n)]
print(f"7 float64 numbers: chunk bytes {chunk_bytes_7}, bytes sent per worker {sent_bytes_7}")

fig, ax = plt.subplots(figsize=(10, 4.2))
# Each frame with the chunks sent in the round after it, outlined (none after the last round).
plot_worker_chunks(ax, [(title, holds, ring_rounds[row][2] if row < len(ring_rounds) else None)
                        for row, (title, holds) in enumerate(ring_frames)],
                   worker_titles=[f"worker {r}: chunks 0, 1, 2" for r in range(ring_n)], left_margin=4.4)
ax.set_title("Ring all-reduce, N = 3: what each chunk holds; outlined, the chunk each worker sends\n"
             "in the next round (to its right neighbour); darker, more workers' numbers added", fontsize=9.5)
plt.show()

# %% [markdown]
# ### Implementation
#
# The cell gives the bookkeeping (checks, cluster, chunks). Replace each
# `raise NotImplementedError(...)` with the code of the step named above it.

# %% tags=["solution"]
def ring_all_reduce_mean(worker_arrays, cluster=None):
    """The ring all-reduce: reduce-scatter then all-gather over N chunks, neighbour to neighbour.

    Args:
        worker_arrays: list of N float arrays of one shape and dtype (worker r's at index r);
            not modified.
        cluster: the ``Cluster(N)`` to run on (a new one when None).

    Returns:
        (results, traffic): results a list of N new arrays (same shape and dtype), each worker's
        own copy of the element-wise mean, bitwise equal on all workers and bit for bit the sum in the
        ring's order divided by N; traffic ``cluster.ledger.summary()`` (every message received).
        Chunks: ``np.array_split(array.ravel(), N)``.
        Reduce-scatter step s = 0..N-2: worker r sends chunk (r - s) % N to worker (r + 1) % N,
        which adds it to its own; then worker r divides chunk (r + 1) % N by N. All-gather step
        s = 0..N-2: worker r sends chunk (r + 1 - s) % N to worker (r + 1) % N, which replaces its own.

    Raises:
        ValueError: if worker_arrays is empty or its arrays differ in shape or dtype.
    """
    # Given (bookkeeping, not the technique): the checks of the input (lesson 027's), the cluster, and each
    # worker's flat array cut into N chunks: chunks[r][c] is chunk c of worker r's array (views of its input:
    # replace a chunk by a new array, never add to it in place).
    check_worker_arrays(worker_arrays)  # ValueError: no workers, or arrays of another shape or dtype
    n, shape = len(worker_arrays), worker_arrays[0].shape
    if cluster is None:
        cluster = Cluster(n)
    chunks = [np.array_split(array.ravel(), n) for array in worker_arrays]

    # Step 1 · Reduce-scatter, rounds s = 0..N-2. In one `with cluster.round():` every worker r sends
    #          chunks[r][(r - s) % N] to worker (r + 1) % N. After the round every worker r receives from
    #          (r - 1) % N and adds it to its own chunk (r - 1 - s) % N, the index its left neighbour sent.
    ### BEGIN SOLUTION
    for step in range(n - 1):
        with cluster.round():
            for rank in range(n):
                cluster.send(rank, (rank + 1) % n, chunks[rank][(rank - step) % n])
        for rank in range(n):
            index = (rank - 1 - step) % n  # the chunk that the left neighbour sent
            chunks[rank][index] = chunks[rank][index] + cluster.receive(rank, (rank - 1) % n)
    ### END SOLUTION
    # Step 2 · Worker r now holds the whole sum of chunk (r + 1) % N, its own: it divides it by N.
    ### BEGIN SOLUTION
    for rank in range(n):
        owned = (rank + 1) % n
        chunks[rank][owned] = chunks[rank][owned] / n
    ### END SOLUTION
    # Step 3 · All-gather, rounds s = 0..N-2: every worker r sends chunks[r][(r + 1 - s) % N] to worker
    #          (r + 1) % N; after the round every worker r replaces its chunk (r - s) % N with what it received.
    ### BEGIN SOLUTION
    for step in range(n - 1):
        with cluster.round():
            for rank in range(n):
                cluster.send(rank, (rank + 1) % n, chunks[rank][(rank + 1 - step) % n])
        for rank in range(n):
            chunks[rank][(rank - step) % n] = cluster.receive(rank, (rank - 1) % n)
    ### END SOLUTION
    # Step 4 · Return (results, cluster.ledger.summary()): worker r's result is its N chunks joined
    #          (np.concatenate) and reshaped to the input's shape.
    ### BEGIN SOLUTION
    results = [np.concatenate(chunks[rank]).reshape(shape) for rank in range(n)]
    return results, cluster.ledger.summary()
    ### END SOLUTION

# %% [markdown]
# ### Tests

# %% tags=["tests"]
# 3 workers, 7 numbers each: chunks of 3, 2 and 2 numbers (24, 16 and 16 bytes).
arrays = [np.arange(7.0) * (r + 1) for r in range(3)]
# Worker 0 sends chunks 0, 2 (reduce-scatter), then 1, 0 (all-gather): 24 + 16 + 16 + 24 = 80 bytes;
# workers 1 and 2 send 72 each, and each worker receives what its left neighbour sent.
ring_traffic = {"bytes_sent": [80, 72, 72], "bytes_received": [72, 80, 72],
                "messages_sent": [4, 4, 4], "messages_received": [4, 4, 4], "rounds": 4}
results, _ = check_call(ring_all_reduce_mean, {"worker_arrays": arrays},
                        ([np.arange(7.0) * 2] * 3, ring_traffic),
                        mistakes=mistakes_of("ring_all_reduce_mean"), rtol=1e-12, atol=1e-14)
check(all(np.array_equal(results[0], other) for other in results),
      "after the all-reduce every worker must hold bitwise the same result: divide each finished chunk "
      "once, by its owner, and let the all-gather copy it")
check_workers_apart(results, "ring_all_reduce_mean's results")
# 4 workers, 8 numbers (64 bytes) each: every worker sends 2 (N - 1) / N = 1.5 times 64 bytes
rng = np.random.default_rng(4)
arrays4 = [rng.standard_normal((2, 4)) for _ in range(4)]
check_call(ring_all_reduce_mean, {"worker_arrays": arrays4}, ([sum(arrays4) / 4] * 4,
           {"bytes_sent": [96] * 4, "bytes_received": [96] * 4, "messages_sent": [6] * 4,
            "messages_received": [6] * 4, "rounds": 6}),
           mistakes=mistakes_of("ring_all_reduce_mean"), rtol=1e-12, atol=1e-14)
# float32 stays float32 (and counts 4 bytes per number); one worker sends nothing
arrays32 = [np.full(4, 2.0 * r, dtype=np.float32) for r in range(2)]
check_call(ring_all_reduce_mean, {"worker_arrays": arrays32}, ([np.full(4, 1.0, dtype=np.float32)] * 2,
           {"bytes_sent": [16, 16], "bytes_received": [16, 16], "messages_sent": [2, 2],
            "messages_received": [2, 2], "rounds": 2}), mistakes=mistakes_of("ring_all_reduce_mean"))
alone = [np.array([3.0, 4.0])]
check_call(ring_all_reduce_mean, {"worker_arrays": alone},
           ([np.array([3.0, 4.0])], {"bytes_sent": [0], "bytes_received": [0], "messages_sent": [0],
                                    "messages_received": [0], "rounds": 0}))
one, _ = call(ring_all_reduce_mean, alone, returns=("results", "traffic"))
check(not np.shares_memory(one[0], alone[0]), "with one worker the result must still be a new array, "
      "not worker_arrays[0] itself")
check_sends_on_given_cluster(ring_all_reduce_mean, (arrays,), ring_traffic, "ring_all_reduce_mean(arrays, cluster)",
                             "each worker's result comes from what it received")
# Bit for bit in the ring's order: B = 2**60 swallows any small number added to it, so only the ring's order
# (chunk c: worker c's number, + worker c+1's, + worker c+2's) keeps the small ones. In rank order (np.mean of
# the arrays), chunks 1 and 2 would lose them: [1, 0, 0] instead of [1, 1/3, 2/3].
B = 2.0 ** 60
ordered = [np.array([B, 1.0, -B]), np.array([-B, B, 2.0]), np.array([3.0, -B, B])]
in_ring_order, _ = call(ring_all_reduce_mean, ordered, returns=("results", "traffic"))
check_equal(in_ring_order, [np.array([1.0, 1 / 3, 2 / 3])] * 3,
            "the results for B = 2**60 (chunk c added in the ring's order, starting at worker c)", exact=True)
expect_error(ring_all_reduce_mean, [[]], ["worker_arrays"], ValueError, "worker_arrays is empty")
expect_error(ring_all_reduce_mean, [[np.zeros(3), np.zeros(4)]], ["worker_arrays"], ValueError,
             "the workers' arrays have different shapes")
expect_error(ring_all_reduce_mean, [[np.zeros(3), np.zeros(3, dtype=np.float32)]], ["worker_arrays"],
             ValueError, "the workers' arrays have different dtypes")
# every worker is checked, not only the last one: here worker 1 of 3 differs
expect_error(ring_all_reduce_mean, [[np.zeros(3), np.zeros(3, dtype=np.float32), np.zeros(3)]], ["worker_arrays"], ValueError,
             "worker 1 of 3 has another dtype")
expect_error(ring_all_reduce_mean, [[np.zeros((2, 3)), np.zeros((3, 2)), np.zeros((2, 3))]], ["worker_arrays"], ValueError,
             "worker 1 of 3 has another shape")
lesson_passed("028")

# %% [markdown]
# ### Common mistakes
#
# - **Gathering everything to one worker** and calling it a ring: right numbers,
#   naive traffic; the tests grade each worker's bytes.
# - **A chunk-index off-by-one**: the receiver adds the chunk its *left
#   neighbour* sent, index $(r - 1 - s) \bmod N$, not the index it sent itself.
#   With equal chunks the shapes fit and the sums are silently wrong.
# - **Skipping the all-gather**: each worker holds one finished chunk and $N-1$
#   partial sums.
# - **Sum instead of mean**, and **workers sharing one array object**, as in
#   lesson 027.
#
# ### Checkpoint
#
# $2(N-1)$ rounds, one chunk per worker per round, $2(N-1)S/N$ bytes sent per
# worker. *Self-check:* for $N = 4$, which chunk does worker 2 send in each of
# the six rounds, and which chunk does it own after the reduce-scatter?

# %% [markdown]
# ## 029 · Data parallel train step
#
# ### Intuition
#
# All workers start from the same parameters; each
# computes its weighted contribution on its shard; the workers all-reduce the
# gradients; each applies the same SGD update to its replica. The replicas stay
# identical, and the step is the full-batch step.
#
# ### Concepts
#
# - One ring all-reduce **per parameter tensor**, in the dict's order, all on one
#   cluster (the docstring names your helpers).
# - Worker $r$'s new replica is built from the arrays *it* received: no two
#   workers share an array.
# - The simulated workers run one after another, so the step's peak activation
#   memory is one shard's: about $1/N$ of the full batch's.
#
# ### Math
#
# $$\theta'_r = \theta - \eta\, \frac{1}{N} \sum_{q=0}^{N-1} \frac{N n_q}{B}\, \nabla \bar L_q
#   = \theta - \eta\, \nabla L \quad \text{for every worker } r,
# \qquad \text{loss} = \frac{1}{N} \sum_{q} \frac{N n_q}{B}\, \bar L_q = L .$$
#
# Only the order of the additions differs from the full-batch step: in float64
# the two agree to about $10^{-15}$.
#
# ### Implementation

# %% tags=["solution"]
def data_parallel_train_step(params, X, Y, num_workers, learning_rate, cluster=None):
    """One data-parallel SGD step on the batch (X, Y) with num_workers simulated workers.

    Args:
        params: dict of the helper MLP's parameters, every worker's starting replica; not modified.
        X: (B, features) inputs; Y: (B, outputs) targets.
        num_workers: N, 1 <= N <= B.
        learning_rate: float.
        cluster: the ``Cluster(N)`` to run the all-reduces on (a new one when None).

    Returns:
        (worker_params, loss): a list of N new dicts, worker r's replica
        ``params - learning_rate * grad`` at index r (grad the gradient of the full batch's mean
        loss, all-reduced tensor by tensor, in the dict's order, with ``ring_all_reduce_mean`` on
        ``cluster``; no array shared between workers), and the full batch's mean loss as a Python float.
    Use your ``shard_dataset_across_workers``, ``compute_local_gradients`` and ``ring_all_reduce_mean``.

    Raises:
        ValueError: as shard_dataset_across_workers (N < 1, N > B).
    """
    ### BEGIN SOLUTION
    shards = shard_dataset_across_workers(X, Y, num_workers)
    if cluster is None:
        cluster = Cluster(num_workers)
    losses, local_grads = [], []
    for X_shard, Y_shard in shards:  # each worker on its own shard, one after another
        loss, grads = compute_local_gradients(params, X_shard, Y_shard, len(X), num_workers)
        losses.append(loss)
        local_grads.append(grads)
    worker_params = [{} for _ in range(num_workers)]
    for key in params:
        averaged, _ = ring_all_reduce_mean([grads[key] for grads in local_grads], cluster)
        for rank in range(num_workers):
            worker_params[rank][key] = params[key] - learning_rate * averaged[rank]
    return worker_params, float(sum(losses) / num_workers)
    ### END SOLUTION

# %% [markdown]
# ### Tests

# %% tags=["tests"]
rng = np.random.default_rng(3)
p0 = mlp.init_params([3, 5, 2], seed=2)
X10, Y10 = rng.standard_normal((10, 3)), rng.standard_normal((10, 2))
full_loss, full_grads = mlp.loss_and_grads(X10, Y10, p0)
full_step = mlp.sgd_update(p0, full_grads, 0.1)
# 10 examples on 4 workers (shards of 3, 3, 2, 2): every replica takes the full-batch step
replicas, _ = check_call(data_parallel_train_step, {"params": p0, "X": X10, "Y": Y10, "num_workers": 4,
                                                    "learning_rate": 0.1},
                         ([full_step] * 4, full_loss), mistakes=mistakes_of("data_parallel_train_step"),
                         rtol=1e-12, atol=1e-14)
check(all(np.array_equal(replicas[0][key], other[key]) for other in replicas for key in p0),
      "the workers' replicas differ: after the all-reduce every worker applies the same update")
check_workers_apart(replicas, "data_parallel_train_step's worker_params")
# The all-reduces run on the cluster it is given: one ring per tensor (W1, b1, W2, b2: 15, 5, 10 and 2 numbers)
given = Cluster(4)
call(data_parallel_train_step, p0, X10, Y10, 4, 0.1, given)
check(given.ledger.summary() == {"bytes_sent": [384, 408, 384, 360], "bytes_received": [360, 384, 408, 384],
                                 "messages_sent": [24] * 4, "messages_received": [24] * 4, "rounds": 24},
      f"data_parallel_train_step(..., cluster) should all-reduce each tensor with ring_all_reduce_mean on "
      f"`cluster` (the grader passes one in and reads its ledger); its ledger shows {given.ledger.summary()}")
check(given.unreceived() == 0, f"{given.unreceived()} message(s) on the cluster were never received")
check_call(data_parallel_train_step, {"params": p0, "X": X10, "Y": Y10, "num_workers": 1, "learning_rate": 0.1},
           ([full_step], full_loss), mistakes=mistakes_of("data_parallel_train_step"), rtol=1e-12, atol=1e-14)
# The technique: each worker computes on its own shard only, about 1/N of the full batch's activations.
B_m, D_m, L_m, N_m = 2048, 32, 3, 4
params_m = mlp.init_params([D_m] * L_m + [2], seed=0)
X_m, Y_m = rng.standard_normal((B_m, D_m)), rng.standard_normal((B_m, 2))
peak = measure_peak_memory(data_parallel_train_step, params_m, X_m, Y_m, N_m, 0.1).peak_bytes
allowed = data_parallel_step_allowed_bytes(params_m, X_m, N_m)
check(peak <= allowed,
      f"data_parallel_train_step allocated {format_bytes(peak)} at its peak on a batch of {B_m} with {N_m} "
      f"workers, and at most {format_bytes(allowed)} is allowed (1.5 x one shard's activations plus four "
      f"parameter-sized dicts per worker): each worker computes on its own shard only; a forward and backward "
      f"pass over the whole batch on one worker costs N times the activation memory")
expect_error(data_parallel_train_step, [p0, X10, Y10, 0, 0.1], ["params", "X", "Y", "num_workers", "learning_rate"],
             ValueError, "num_workers is 0")
expect_error(data_parallel_train_step, [p0, X10[:3], Y10[:3], 4, 0.1],
             ["params", "X", "Y", "num_workers", "learning_rate"], ValueError,
             "there are more workers (4) than examples (3)")
lesson_passed("029")

# %% [markdown]
# ### Common mistakes
#
# - **Computing the full batch on one worker** and handing every worker the
#   result: right numbers, wrong memory; the tests measure the peak.
# - **Averaging the workers' mean gradients unweighted**: wrong whenever the
#   shards differ in size (10 examples on 4 workers).
# - **No all-reduce**: each worker steps with its own gradient; the replicas
#   drift apart.
# - **Summing instead of averaging** the contributions: a step $N$ times too large.
# - **Workers sharing one array object**: one dict of new parameters in every
#   worker's slot.
#
# ### Checkpoint
#
# Shard, compute locally, all-reduce, update every replica. *Self-check:* with
# 8 workers and 12 parameter tensors, how many ring all-reduces and how many
# communication rounds does one step take?

# %% [markdown]
# ## 030 · Bucket gradients
#
# ### Intuition
#
# Lesson 029 runs one all-reduce per tensor, each paying $2(N-1)$ latencies
# however small the tensor. PyTorch's DistributedDataParallel packs gradients
# into **buckets** of up to 25 MiB, one all-reduce per bucket, filled in
# *reverse* parameter order: backward produces the last layer's gradients
# first, so the first bucket is ready early and its all-reduce overlaps with
# the rest of backward. (This lesson's rule differs from PyTorch's: PyTorch adds
# a tensor first and closes the bucket once it reaches the cap, so its buckets
# can exceed the cap; here a bucket is closed before a tensor would take it over.
# PyTorch also cuts its first buckets in forward order, reverses the list, and
# after the first iteration rebuilds them in the order the gradients became ready.)
#
# ### Concepts
#
# - `worker_grads`: $N$ dicts with the same keys (in parameter order) and
#   shapes, one dtype; `bucket_cap_bytes`: the cap, in bytes (`nbytes`).
# - **The bucket rule**: walk the keys from last to first; a tensor joins the
#   current bucket unless that would take it over the cap; then the bucket is
#   closed and the tensor starts a new one. A tensor larger than the cap gets a
#   bucket of its own.
# - Return `(averaged, buckets, traffic)`: $N$ dicts with the original keys in
#   the original order, each worker's own; the buckets as lists of keys; the
#   ledger's `summary()` (all buckets on one cluster, `cluster` when given).
# - `ValueError` for a cap $\le 0$, no workers, or gradients that differ in
#   keys or shapes.
#
# ### Math
#
# With $K$ buckets of $S_1, \dots, S_K$ bytes ($\sum_k S_k = S$), one after another:
#
# $$\text{time} \approx \sum_{k=1}^{K} \Bigl( 2(N-1)\alpha + 2\frac{N-1}{N} S_k \beta \Bigr)
#   = 2(N-1)K\alpha + 2\frac{N-1}{N} S\beta .$$
#
# The bytes do not depend on the bucketing; the messages, $2(N-1)K$ per worker,
# do.
#
# ### Implementation
#
# The cell gives the input checks, the cluster and `all_reduce(bucket)`: one
# `ring_all_reduce_mean` on the bucket's tensors flattened into one buffer, cut
# back into tensors. The two steps below it are yours.

# %% tags=["solution"]
def bucket_gradients(worker_grads, bucket_cap_bytes, cluster=None):
    """All-reduce (mean) the workers' gradients in DDP-style buckets, one ring all-reduce per bucket.

    Args:
        worker_grads: list of N dicts (worker r's at index r) with the same keys, in parameter
            order, and shapes; float arrays of one dtype. Not modified.
        bucket_cap_bytes: the most bytes (``nbytes``) a bucket may hold, unless a single tensor is larger.
        cluster: the ``Cluster(N)`` to run on (a new one when None).

    Returns:
        (averaged, buckets, traffic): averaged a list of N new dicts with the same keys, in the same
        order, worker r's own mean gradients at index r; buckets a list of lists of keys, filled from
        the last key to the first, a bucket closed when the next tensor would take it over the cap;
        traffic ``cluster.ledger.summary()`` after one ``ring_all_reduce_mean`` per bucket (on the
        tensors of the bucket, raveled and concatenated in the bucket's order).
    Use your ``ring_all_reduce_mean``.

    Raises:
        ValueError: if bucket_cap_bytes <= 0, if worker_grads is empty, or if the workers'
            gradients differ in keys or shapes.
    """
    # Given (bookkeeping, not the technique): the checks of the input, the cluster, and all_reduce(bucket),
    # which runs one ring_all_reduce_mean on the bucket's tensors (each worker's raveled and concatenated in the
    # bucket's order) and returns, for each worker, a dict of the bucket's mean tensors (cut back to their shapes).
    if bucket_cap_bytes <= 0:
        raise ValueError(f"bucket_cap_bytes must be positive, got {bucket_cap_bytes}")
    if len(worker_grads) == 0:
        raise ValueError("worker_grads is empty: bucketing needs at least one worker")
    first = worker_grads[0]
    for rank, grads in enumerate(worker_grads):
        if grads.keys() != first.keys() or any(grads[key].shape != first[key].shape for key in first):
            raise ValueError(f"worker {rank}'s gradients differ from worker 0's in keys or shapes")
    if cluster is None:
        cluster = Cluster(len(worker_grads))

    def all_reduce(bucket):
        buffers = [np.concatenate([grads[key].ravel() for key in bucket]) for grads in worker_grads]
        reduced, _ = ring_all_reduce_mean(buffers, cluster)
        means = []
        for buffer in reduced:
            mine, offset = {}, 0
            for key in bucket:
                mine[key] = buffer[offset:offset + first[key].size].reshape(first[key].shape)
                offset += first[key].size
            means.append(mine)
        return means

    # Step 1 · The buckets, as lists of keys: walk the keys of `first` from the last to the first; a tensor
    #          joins the current bucket unless its nbytes would take the bucket over bucket_cap_bytes, in which
    #          case the bucket is closed and the tensor starts a new one (alone, when it is larger than the cap).
    ### BEGIN SOLUTION
    buckets, current, size = [], [], 0
    for key in reversed(list(first)):
        if current and size + first[key].nbytes > bucket_cap_bytes:
            buckets.append(current)
            current, size = [], 0
        current.append(key)
        size += first[key].nbytes
    if current:
        buckets.append(current)
    ### END SOLUTION
    # Step 2 · One all_reduce per bucket, in the buckets' order, each worker collecting its mean tensors.
    #          Return (averaged, buckets, cluster.ledger.summary()): averaged[r] is worker r's dict of means, its
    #          keys in the order of `first`.
    ### BEGIN SOLUTION
    averaged = [{} for _ in worker_grads]
    for bucket in buckets:
        for mine, means in zip(averaged, all_reduce(bucket)):
            mine.update(means)
    return [{key: mine[key] for key in first} for mine in averaged], buckets, cluster.ledger.summary()
    ### END SOLUTION

# %% [markdown]
# ### Tests

# %% tags=["tests"]
shapes = {"W1": (3, 4), "b1": (4,), "W2": (4, 2), "b2": (2,)}     # float64: 96, 32, 64 and 16 bytes
rng = np.random.default_rng(5)
two = [{key: rng.standard_normal(shape) for key, shape in shapes.items()} for _ in range(2)]
mean = {key: (two[0][key] + two[1][key]) / 2 for key in shapes}
# Cap 80 bytes, from the last key: b2 + W2 = 80 bytes; b1 would make 112, so a new bucket; W1 (96 bytes,
# more than the cap) alone. With 2 workers each worker sends each bucket's bytes once: 80 + 32 + 96.
bucketed, _, _ = check_call(bucket_gradients, {"worker_grads": two, "bucket_cap_bytes": 80},
                            ([mean, mean], [["b2", "W2"], ["b1"], ["W1"]],
                             {"bytes_sent": [208, 208], "bytes_received": [208, 208], "messages_sent": [6, 6],
                              "messages_received": [6, 6], "rounds": 6}),
                            mistakes=mistakes_of("bucket_gradients"), rtol=1e-12, atol=1e-14)
check(all(list(grads) == list(shapes) for grads in bucketed),
      f"each worker's averaged gradients should keep the keys' order {list(shapes)}, got {list(bucketed[0])}")
check_workers_apart(bucketed, "bucket_gradients' averaged gradients")
# float32 counts 4 bytes a number: b2 + W2 + b1 = 56 bytes fit under 80, W1 (48) does not
two32 = [{key: value.astype(np.float32) for key, value in grads.items()} for grads in two]
_, buckets32, _ = call(bucket_gradients, two32, 80, returns=("averaged", "buckets", "traffic"))
check(buckets32 == [["b2", "W2", "b1"], ["W1"]],
      f"with float32 gradients and a cap of 80 bytes the buckets should be [['b2', 'W2', 'b1'], ['W1']], "
      f"got {buckets32}: measure tensors in bytes (nbytes), not in numbers")
check_call(bucket_gradients, {"worker_grads": two32, "bucket_cap_bytes": 80},
           ([{k: v.astype(np.float32) for k, v in mean.items()}] * 2, [["b2", "W2", "b1"], ["W1"]],
            {"bytes_sent": [104, 104], "bytes_received": [104, 104], "messages_sent": [4, 4],
             "messages_received": [4, 4], "rounds": 4}),
           mistakes=mistakes_of("bucket_gradients"), rtol=1e-6, atol=1e-7)
# One worker: the mean is its own gradients, as new arrays
check_call(bucket_gradients, {"worker_grads": two[:1], "bucket_cap_bytes": 80},
           ([two[0]], [["b2", "W2"], ["b1"], ["W1"]],
            {"bytes_sent": [0], "bytes_received": [0], "messages_sent": [0], "messages_received": [0], "rounds": 0}),
           mistakes=mistakes_of("bucket_gradients"))
alone, _, _ = call(bucket_gradients, two[:1], 80, returns=("averaged", "buckets", "traffic"))
check(not any(np.shares_memory(alone[0][key], two[0][key]) for key in shapes),
      "with one worker the averaged gradients must still be new arrays, not the inputs themselves")
given = Cluster(2)
call(bucket_gradients, two, 80, given)
check(given.ledger.rounds == 6 and given.unreceived() == 0,
      f"bucket_gradients(worker_grads, cap, cluster) should run its all-reduces on `cluster` (the grader passes "
      f"one in and reads its ledger), every message received; its ledger shows {given.ledger.rounds} rounds and "
      f"{given.unreceived()} message(s) unreceived")
# One bucket, averaged by your ring bit for bit: with B = 2**60, averaging in rank order (np.mean) loses the
# small numbers that the ring's order keeps (lesson 028's example, as one gradient of 3 numbers)
B = 2.0 ** 60
ordered = [{"b": np.array([B, 1.0, -B])}, {"b": np.array([-B, B, 2.0])}, {"b": np.array([3.0, -B, B])}]
one_bucket, _, _ = call(bucket_gradients, ordered, 80, returns=("averaged", "buckets", "traffic"))
check_equal(one_bucket, [{"b": np.array([1.0, 1 / 3, 2 / 3])}] * 3,
            "the averaged gradients for B = 2**60 (each bucket all-reduced by ring_all_reduce_mean)", exact=True)
expect_error(bucket_gradients, [two, 0], ["worker_grads", "bucket_cap_bytes"], ValueError, "the cap is 0")
expect_error(bucket_gradients, [[], 80], ["worker_grads", "bucket_cap_bytes"], ValueError, "worker_grads is empty")
expect_error(bucket_gradients, [[two[0], {"W1": two[1]["W1"]}], 80], ["worker_grads", "bucket_cap_bytes"],
             ValueError, "worker 1 has other keys than worker 0")
expect_error(bucket_gradients, [[two[0], {**two[1], "b1": np.zeros(5)}], 80], ["worker_grads", "bucket_cap_bytes"],
             ValueError, "worker 1's b1 has another shape than worker 0's")
# every worker is checked, not only the last one: here worker 1 of 3 differs
expect_error(bucket_gradients, [[two[0], {**two[1], "b0": np.zeros(5)}, two[1]], 80],
             ["worker_grads", "bucket_cap_bytes"], ValueError, "worker 1 of 3 has a key more")
expect_error(bucket_gradients, [[two[0], {**two[1], "W1": two[1]["W1"].T}, two[1]], 80],
             ["worker_grads", "bucket_cap_bytes"], ValueError, "worker 1 of 3's W1 is (4, 3), worker 0's (3, 4)")
lesson_passed("030")

# %% [markdown]
# ### Common mistakes
#
# - **Buckets in forward order**: the gradients backward produces *last* land
#   in the first bucket, so no all-reduce starts until backward is over.
# - **Letting a bucket overflow the cap**: adding the tensor, then closing the
#   bucket (PyTorch's rule); here only a single tensor may exceed the cap.
# - **Counting numbers instead of bytes**: `size` counts elements, `nbytes`
#   bytes; a float32 tensor has half the bytes of a float64 one.
# - **No bucketing**: one all-reduce per tensor, right but with many more
#   messages (lesson 029's cost).
#
# ### Checkpoint
#
# Reverse order, a byte cap, one collective per bucket. *Self-check:* for the 4
# tensors above in float64 and a cap of 200 bytes, what are the buckets, and how
# many messages does each of 3 workers send?

# %% [markdown]
# ## Measured: the ledger as the cluster grows
#
# Both all-reduces on $S = 1$ MiB ($2^{17}$ float64 numbers) per worker, for
# $N = 2, 4, 8, 16$: the ledger beside the formulas of lessons 027 and 028. The
# root's traffic grows with $N$; a ring worker's approaches $2S$.

# %% tags=["demo"]
S_numbers = 2**17                                        # 1 MiB of float64 per worker
S_bytes = 8 * S_numbers
worker_counts = [2, 4, 8, 16]
rows = []
for N in worker_counts:
    rng = np.random.default_rng(N)
    payload = [rng.standard_normal(S_numbers) for _ in range(N)]
    naive_cluster, ring_cluster = Cluster(N), Cluster(N)
    naive_results, naive = all_reduce_mean(payload, naive_cluster)
    ring_results, ring = ring_all_reduce_mean(payload, ring_cluster)
    assert np.allclose(naive_results[0], ring_results[0], rtol=1e-12, atol=1e-14)
    assert naive["bytes_sent"][0] == naive["bytes_received"][0] == (N - 1) * S_bytes          # the formulas,
    assert set(naive["bytes_sent"][1:]) == set(naive["bytes_received"][1:]) == {S_bytes}     # exactly
    assert set(ring["bytes_sent"]) == set(ring["bytes_received"]) == {2 * (N - 1) * S_bytes // N}
    rows.append((N, naive["bytes_sent"][0], naive["bytes_sent"][1], ring["bytes_sent"][0],
                 naive_cluster.estimated_seconds(), ring_cluster.estimated_seconds()))


def mib_text(n_bytes):
    """Exact MiB, as few digits as needed."""
    return f"{n_bytes / 2**20:g} MiB"


print("bytes sent per worker (each also receives as many), from the ledger; S = 1 MiB:")
print(f"{'N':>3} {'naive root':>11} {'= (N-1)S':>10} {'naive other':>12} {'ring worker':>12} {'= 2(N-1)S/N':>12}"
      f" {'naive time':>11} {'ring time':>10}")
for N, root, other, ring_sent, t_naive, t_ring in rows:
    print(f"{N:>3} {root:>11,} {mib_text((N - 1) * S_bytes):>10} {other:>12,} {ring_sent:>12,} "
          f"{mib_text(2 * (N - 1) * S_bytes / N):>12} {t_naive * 1e3:>8.2f} ms {t_ring * 1e3:>7.2f} ms")

fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
N_fine = np.arange(2, 17)
left.plot(N_fine, (N_fine - 1) * S_bytes / 2**20, "-", color=COLORS["baseline"], label="naive root: (N-1)S")
left.plot(worker_counts, [row[1] / 2**20 for row in rows], "o", color=COLORS["baseline"], label="naive root, ledger")
left.plot(N_fine, 2 * (N_fine - 1) / N_fine * S_bytes / 2**20, "-", color=COLORS["measured"],
          label="ring worker: 2(N-1)S/N")
left.plot(worker_counts, [row[3] / 2**20 for row in rows], "s", color=COLORS["measured"], label="ring worker, ledger")
left.plot(worker_counts, [row[2] / 2**20 for row in rows], "x:", color=COLORS["estimated"],
          label="naive, any other worker: S")
left.set_xlabel("workers N")
left.set_ylabel("MiB sent per step (= received)")
left.set_title("Traffic per worker, S = 1 MiB")
left.legend(fontsize=8)
right.plot(worker_counts, [row[4] * 1e3 for row in rows], "o-", color=COLORS["baseline"], label="naive")
right.plot(worker_counts, [row[5] * 1e3 for row in rows], "s-", color=COLORS["measured"], label="ring")
right.set_xlabel("workers N")
right.set_ylabel("estimated ms (alpha-beta)")
right.set_title("Time: alpha = 10 µs, beta = 1 ns/byte")
right.legend()
plt.show()

# %% [markdown]
# ## The ring schedule
#
# The chunk each worker sends in each round for $N = 4$ (colour: the chunk;
# arrow: the receiver). Below, a run with uneven chunks (10 numbers: 3, 3, 2
# and 2) is checked against this schedule, message by message.

# %% tags=["demo"]
N_ring = 4
schedule = [[(r - s) % N_ring for r in range(N_ring)] for s in range(N_ring - 1)]
schedule += [[(r + 1 - s) % N_ring for r in range(N_ring)] for s in range(N_ring - 1)]
labels = [f"reduce-scatter {s + 1}" for s in range(N_ring - 1)] + [f"all-gather {s + 1}" for s in range(N_ring - 1)]

fig, ax = plt.subplots(figsize=(6.4, 3.8))
ax.imshow(schedule, cmap="tab10", vmin=0, vmax=9, alpha=0.45, aspect="auto")
for s, row in enumerate(schedule):
    for r, chunk in enumerate(row):
        ax.text(r, s, f"chunk {chunk}\n→ w{(r + 1) % N_ring}", ha="center", va="center", fontsize=8)
ax.axhline(N_ring - 1.5, color="black", linewidth=1)
ax.set_xticks(range(N_ring), [f"worker {r}" for r in range(N_ring)])
ax.set_yticks(range(len(labels)), labels)
ax.grid(False)
ax.set_title("Ring all-reduce, N = 4: the chunk each worker sends")
plt.show()

run = Cluster(N_ring)
ring_all_reduce_mean([np.arange(10.0) * (r + 1) for r in range(N_ring)], run)
chunk_bytes = [8 * len(c) for c in np.array_split(np.arange(10.0), N_ring)]
checked = 0
for message in run.ledger.messages:
    assert message.dst == (message.src + 1) % N_ring
    assert message.nbytes == chunk_bytes[schedule[message.round][message.src]]
    checked += 1
print(f"the ledger agrees with the schedule: {checked} messages in {run.ledger.rounds} rounds, "
      f"chunk bytes {chunk_bytes}")
print(run.ledger.table())

# %% [markdown]
# ## Measured: time against bucket size
#
# The gradients of a 32-layer MLP of width 64 (64 tensors, about 1 MiB) on
# $N = 8$ workers, with bucket caps from 16 KiB to 2 MiB.
#
# - **Communication alone** (all-reduces back to back) falls as the buckets
#   grow (fewer latencies, the same bytes) and levels off at
#   $2\frac{N-1}{N}S\beta$.
# - **A step with overlap**, a simple model of DDP: backward produces gradients
#   from the last layer to the first at 4 ns per byte; a bucket's all-reduce
#   starts once its last gradient exists and the previous one is done. Small
#   buckets drown in latency; one big bucket waits for all of backward. The best
#   cap is in between.

# %% tags=["demo"]
N_b, width, depth = 8, 64, 32
params_b = mlp.init_params([width] * depth + [width], seed=0)
rng = np.random.default_rng(0)
grads_b = [{key: rng.standard_normal(value.shape) for key, value in params_b.items()} for _ in range(N_b)]
total_bytes = sum(value.nbytes for value in params_b.values())
compute_per_byte = 4e-9                                   # backward: 4 ns per byte of gradient produced
caps = [2**k for k in range(14, 22)]
comm_ms, step_ms, messages = [], [], []
for cap in caps:
    cluster_b = Cluster(N_b)
    _, buckets_b, traffic_b = bucket_gradients(grads_b, cap, cluster_b)
    assert set(traffic_b["bytes_sent"]) == {2 * (N_b - 1) * total_bytes // N_b}   # the bytes never change
    rounds = cluster_b.ledger.round_seconds(cluster_b.latency, cluster_b.seconds_per_byte)
    produced, finished = 0.0, 0.0
    for k, bucket in enumerate(buckets_b):
        produced += compute_per_byte * sum(params_b[key].nbytes for key in bucket)   # backward reaches it
        bucket_time = sum(rounds[k * 2 * (N_b - 1):(k + 1) * 2 * (N_b - 1)])
        finished = max(finished, produced) + bucket_time
    comm_ms.append(sum(rounds) * 1e3)
    step_ms.append(finished * 1e3)
    messages.append(traffic_b["messages_sent"][0])
backward_ms = compute_per_byte * total_bytes * 1e3
best = caps[int(np.argmin(step_ms))]
print(f"{len(params_b)} tensors, {format_bytes(total_bytes)}; backward alone {backward_ms:.2f} ms")
print(f"{'cap':>9} {'buckets':>8} {'messages/worker':>16} {'communication':>14} {'step with overlap':>18}")
for cap, m, c, t in zip(caps, messages, comm_ms, step_ms):
    print(f"{format_bytes(cap):>9} {m // (2 * (N_b - 1)):>8} {m:>16} {c:>11.2f} ms {t:>15.2f} ms")
print(f"best cap in this model: {format_bytes(best)}")

fig, ax = plt.subplots()
ax.plot(caps, comm_ms, "o-", color=COLORS["estimated"], label="communication alone (ledger)")
ax.plot(caps, step_ms, "s-", color=COLORS["measured"], label="step, all-reduce overlapping backward")
ax.axhline(backward_ms, color=COLORS["baseline"], linestyle=":", label="backward alone")
ax.set_xscale("log", base=2)
ax.set_xlabel("bucket cap (bytes)")
ax.set_ylabel("estimated ms")
ax.set_title(f"Bucketing: N = {N_b}, {len(params_b)} tensors, alpha = 10 µs, beta = 1 ns/byte")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## Measured: data-parallel training, memory and loss
#
# Your `data_parallel_train_step` for $N = 1, 2, 4, 8$ on a batch of 8192
# examples. The peak memory (tracemalloc) minus a constant part $C$ (measured
# with one example per worker) is one worker's activations, predicted from a
# shard of $\lceil B/N \rceil$ examples. Then twenty steps with 1 and with 4
# workers: the losses are the same curve.

# %% tags=["demo"]
B_d, D_d, L_d = 8192, 32, 4
rng = np.random.default_rng(1)
params_d = mlp.init_params([D_d] * L_d + [1], seed=1)
X_d, Y_d = rng.standard_normal((B_d, D_d)), rng.standard_normal((B_d, 1))
rows = []
for N in [1, 2, 4, 8]:
    C_d = measure_peak_memory(data_parallel_train_step, params_d, X_d[:N], Y_d[:N], N, 0.05).peak_bytes
    peak_d = measure_peak_memory(data_parallel_train_step, params_d, X_d, Y_d, N, 0.05).peak_bytes
    rows.append((N, peak_d - C_d, data_parallel_activation_bytes(B_d, D_d, L_d, N)))
print(f"B = {B_d}, D = {D_d}, L = {L_d}")
print(f"{'N':>3} {'shard':>6} {'measured peak - C':>18} {'predicted':>10} {'ratio':>6}")
for N, measured_d, predicted_d in rows:
    print(f"{N:>3} {-(-B_d // N):>6} {format_measured(measured_d):>18} {format_bytes(predicted_d):>10} "
          f"{format_ratio(measured_d, predicted_d):>6}")

X_t, Y_t = rng.standard_normal((64, 8)), rng.standard_normal((64, 2))
curves = {}
for N in [1, 4]:
    replica, losses = mlp.init_params([8, 16, 16, 2], seed=2), []
    for step in range(20):
        replicas_t, loss_t = data_parallel_train_step(replica, X_t, Y_t, N, 0.05)
        replica = replicas_t[0]
        losses.append(loss_t)
    curves[N] = losses
gap = max(abs(a - b) / abs(b) for a, b in zip(curves[4], curves[1]))
print(f"20 steps on 64 examples: largest relative difference between the 1-worker and 4-worker losses: "
      f"{'below 1e-12' if gap < 1e-12 else f'{gap:.1e}'}")


def mib(n_bytes):
    """Bytes in MiB, rounded as printed (measurements vary by a few bytes between runs)."""
    return round(n_bytes / 2**20, 1)


fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
left.plot([r[0] for r in rows], [mib(r[1]) for r in rows], "o-", color=COLORS["measured"], label="measured (peak - C)")
left.plot([r[0] for r in rows], [mib(r[2]) for r in rows], "s--", color=COLORS["estimated"],
          label="predicted: one shard's activations")
left.set_xscale("log", base=2)
left.set_xticks([1, 2, 4, 8], ["1", "2", "4", "8"])
left.set_xlabel("workers N")
left.set_ylabel("activation memory per worker (MiB)")
left.set_title("Memory per worker falls as 1/N")
left.legend(fontsize=8)
right.plot(curves[1], "-", color=COLORS["reference"], linewidth=4, alpha=0.5, label="1 worker")
right.plot(curves[4], "--", color=COLORS["learner"], label="4 workers")
right.set_yscale("log")
right.set_xlabel("step")
right.set_ylabel("loss")
right.set_title("The same training, on 1 or 4 workers")
right.legend()
plt.show()

# %% [markdown]
# ## Part summary
#
# - Weighted by $N n_r / B$ and averaged, the workers' gradients are the
#   full-batch gradient to about $10^{-15}$, even for unequal shards. Each worker
#   holds a full replica but only about $1/N$ of the activations.
# - The all-reduce is the bill: bytes sent per worker (as many are received),
#   from the ledger, for $S = 1$ MiB. The ring's is the bandwidth lower bound,
#   paid for with $2(N-1)$ latencies:
#
# | $N$ | naive root, sent (= received) | $(N-1)S$ | ring worker, sent (= received) | $2(N-1)S/N$ |
# | --- | --- | --- | --- | --- |
# | 2 | 1,048,576 B | 1 MiB | 1,048,576 B | 1 MiB |
# | 4 | 3,145,728 B | 3 MiB | 1,572,864 B | 1.5 MiB |
# | 8 | 7,340,032 B | 7 MiB | 1,835,008 B | 1.75 MiB |
# | 16 | 15,728,640 B | 15 MiB | 1,966,080 B | 1.875 MiB |
#
# - Bucketing keeps the bytes and cuts the messages; reverse order overlaps the
#   all-reduces with backward; the cap trades latency against waiting.
# - Every worker still holds the whole model, its gradients and its optimizer
#   state. Part 6 shards those (ZeRO) with the same cluster and collectives.
