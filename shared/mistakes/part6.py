"""Common mistakes of Part 6 (lessons 031-035), each a wrong version of the function.

The collectives run on the simulated cluster like the real ones, so a mistake's
traffic (what the ledger records) is part of its answer, as it is of the lesson's.

Nothing here computes a lesson's right answer (``tests/test_delegation.py``): a
function that several mistakes share takes the mistake as a required argument,
which has no right value, and what lesson 035's mistakes share with the right
answer is the helper's lessons 028 (the ring all-reduce, which one mistake uses in place of the
reduce-scatter), 033 (Adam on a shard) and 034 (the all-gather) in ``shared.lesson_blocks``, which
refuse to run while their own lesson is graded.  The reduce-scatter and lesson 034's mistakes' all-gather
run the catalogue's own rounds (``_rings``): the helper's ``reduce_scatter_mean`` answers lesson 035
itself, and one mistake forgets the division, so the reduce-scatter here leaves the sums.
"""

from __future__ import annotations

import numpy as np

from ..checking import Mistake
from ..cluster import Cluster
from ..lesson_blocks import all_gather_param_shards, local_shard_adam_update, ring_all_reduce_mean
from ._rings import all_gather_rounds, reduce_scatter_rounds
from ._twists import check_mistake


def _flat(tensors):
    """The tensors of a dict as one flat vector, in the dict's order."""
    return np.concatenate([value.ravel() for value in tensors.values()])


def _unflat(vector, like):
    out, offset = {}, 0
    for key, value in like.items():
        out[key] = vector[offset:offset + value.size].reshape(value.shape)
        offset += value.size
    return out


# 031 init_adam_state ---------------------------------------------------------------

def _init_float64(params):
    return {"step": 0, "m": {key: np.zeros(value.shape) for key, value in params.items()},
            "v": {key: np.zeros(value.shape) for key, value in params.items()}}


def _init_step_one(params):
    return {"step": 1, "m": {key: np.zeros_like(value) for key, value in params.items()},
            "v": {key: np.zeros_like(value) for key, value in params.items()}}


# 032 partition_optimizer_state -----------------------------------------------------

def _per_tensor(tensors, N):
    """Every tensor cut into N pieces; worker r gets piece r of each one."""
    cut = [np.array_split(value.ravel(), N) for value in tensors.values()]
    return [np.concatenate([pieces[r] for pieces in cut]) for r in range(N)]


def _greedy_owners(tensors, N):
    """PyTorch's ZeroRedundancyOptimizer: tensors by size, largest first, each to the rank with the
    smallest total so far (the lowest such rank on a tie)."""
    totals, owner = [0] * N, {}
    for key in sorted(tensors, key=lambda k: -tensors[k].size):  # a stable sort keeps ties in order
        rank = totals.index(min(totals))
        owner[key] = rank
        totals[rank] += tensors[key].size
    return owner


def _whole_tensors(tensors, N):
    owner = _greedy_owners(tensors, N)
    dtype = next(iter(tensors.values())).dtype
    return [np.concatenate([tensors[key].ravel() for key in tensors if owner[key] == r] + [np.zeros(0, dtype)])
            for r in range(N)]


def _remainder_last(tensors, N):
    flat = _flat(tensors)
    size = flat.size // N
    return [flat[r * size:(r + 1) * size].copy() if r < N - 1 else flat[r * size:].copy() for r in range(N)]


#: How each mistake cuts the state: ``pieces(tensors, N)[r]`` is worker r's piece of m (and of v).
_PIECES = {"per tensor": _per_tensor, "whole tensors": _whole_tensors, "remainder last": _remainder_last}


def _partition(mistake):
    """partition_optimizer_state with the state cut wrong: ``mistake``, a key of _PIECES."""
    check_mistake(mistake, tuple(_PIECES))
    pieces = _PIECES[mistake]

    def partition(state, num_workers):
        m_shards, v_shards = pieces(state["m"], num_workers), pieces(state["v"], num_workers)
        return [{"step": state["step"], "m": m, "v": v} for m, v in zip(m_shards, v_shards)]
    return partition


# 033 local_shard_adam_update -------------------------------------------------------

_ADAM_MISTAKES = ("no bias correction", "the old step count", "eps inside the root")


def _adam(mistake):
    """The shard update with ``mistake`` made, one of _ADAM_MISTAKES: no bias correction, the bias
    corrected with the old step count t - 1 (t the new one), or eps under the square root."""
    check_mistake(mistake, _ADAM_MISTAKES)

    def update(param_shard, grad_shard, state_shard, learning_rate, beta1=0.9, beta2=0.999, eps=1e-8):
        step = state_shard["step"] + 1
        m = beta1 * state_shard["m"] + (1 - beta1) * grad_shard
        v = beta2 * state_shard["v"] + (1 - beta2) * grad_shard ** 2
        if mistake == "no bias correction":
            m_hat, v_hat = m, v
        else:
            t = step - 1 if mistake == "the old step count" else step
            m_hat, v_hat = m / (1 - beta1 ** t), v / (1 - beta2 ** t)
        denominator = np.sqrt(v_hat + eps) if mistake == "eps inside the root" else np.sqrt(v_hat) + eps
        return param_shard - learning_rate * m_hat / denominator, {"step": step, "m": m, "v": v}
    return update


def _adam_in_place(param_shard, grad_shard, state_shard, learning_rate, beta1=0.9, beta2=0.999, eps=1e-8):
    """The moments and the step updated in the state itself, as torch.optim.Adam does."""
    state_shard["step"] += 1
    step, m, v = state_shard["step"], state_shard["m"], state_shard["v"]
    m *= beta1
    m += (1 - beta1) * grad_shard
    v *= beta2
    v += (1 - beta2) * grad_shard ** 2
    update = learning_rate * (m / (1 - beta1 ** step)) / (np.sqrt(v / (1 - beta2 ** step)) + eps)
    return param_shard - update, {"step": step, "m": m, "v": v}


# 034 all_gather_param_shards -------------------------------------------------------

def _ring_gather(shards, cluster):
    """The ring all-gather's rounds; returns what each worker holds, ``{rank: shard}``, in arrival order."""
    held = [{r: shards[r]} for r in range(len(shards))]
    all_gather_rounds(held, cluster, owner=0)
    return held


def _gather(mistake):
    """The ring all-gather with ``mistake`` made: "arrival order" (each worker's vector concatenated as the
    shards arrived: its own first, then from r - 1, r - 2, ...) or "shared" (one array object for every
    worker)."""
    check_mistake(mistake, ("arrival order", "shared"))

    def all_gather(param_shards, cluster=None):
        n = len(param_shards)
        cluster = cluster or Cluster(n)
        held = _ring_gather(param_shards, cluster)
        if mistake == "shared":
            vectors = [np.concatenate([mine[q] for q in range(n)]) for mine in held]
            vectors = [vectors[0]] * n
        else:
            vectors = [np.concatenate(list(mine.values())) for mine in held]
        return vectors, cluster.ledger.summary()
    return all_gather


def _gather_at_root(param_shards, cluster=None):
    """Everyone sends its shard to worker 0, which sends the whole vector back to everyone."""
    n = len(param_shards)
    cluster = cluster or Cluster(n)
    with cluster.round():
        for r in range(1, n):
            cluster.send(r, 0, param_shards[r])
    whole = np.concatenate([param_shards[0]] + [cluster.receive(0, r) for r in range(1, n)])
    with cluster.round():
        for r in range(1, n):
            cluster.send(0, r, whole)
    return [whole] + [cluster.receive(r, 0) for r in range(1, n)], cluster.ledger.summary()


# 035 zero_optimizer_step -----------------------------------------------------------

def ring_reduce_scatter_sums(flat_grads, cluster):
    """The ring reduce-scatter that leaves worker r with the *sum* of chunk r (``np.array_split``) over the
    workers (the catalogue's expensive 035 builds on it too)."""
    n = len(flat_grads)
    chunks = [np.array_split(flat, n) for flat in flat_grads]
    reduce_scatter_rounds(chunks, cluster, owner=0)
    return [chunks[r][r] for r in range(n)]


_ZERO_MISTAKES = ("all-reduced", "counter per worker", "summed")


def _zero(mistake):
    """The ZeRO step with ``mistake`` made, one of _ZERO_MISTAKES: the gradients all-reduced instead of
    reduce-scattered, the step counter advanced once per worker, or the gradients summed, not averaged.
    Each worker's Adam and the parameters' all-gather are the helper's lessons 033 and 034."""
    check_mistake(mistake, _ZERO_MISTAKES)

    def step(params, worker_grads, worker_states, learning_rate, beta1=0.9, beta2=0.999, eps=1e-8, cluster=None):
        n = len(worker_grads)
        cluster = cluster or Cluster(n)
        flat_grads = [_flat(grads) for grads in worker_grads]
        if mistake == "all-reduced":  # lesson 028's ring all-reduce, then each worker keeps its chunk of the mean
            means, _ = ring_all_reduce_mean(flat_grads, cluster)
            means = [np.array_split(mean, n)[r] for r, mean in enumerate(means)]
        else:
            sums = ring_reduce_scatter_sums(flat_grads, cluster)
            means = sums if mistake == "summed" else [total / n for total in sums]
        flat_params = np.array_split(_flat(params), n)
        shards, states = [], []
        for r in range(n):
            state = worker_states[r]
            if mistake == "counter per worker":  # one counter, advanced for every worker's update
                state = {**state, "step": state["step"] + r}
            shard, new_state = local_shard_adam_update(flat_params[r], means[r], state, learning_rate, beta1, beta2, eps)
            shards.append(shard)
            states.append(new_state)
        vectors, traffic = all_gather_param_shards(shards, cluster)
        return [_unflat(vector, params) for vector in vectors], states, traffic
    return step


def _zero_full_moments(params, worker_grads, worker_states, learning_rate, beta1=0.9, beta2=0.999, eps=1e-8,
                       cluster=None):
    """Data-parallel Adam: the mean gradient reaches every worker (reduce-scatter, then all-gather of the
    gradient: the same ledger as ZeRO), and every worker updates all the parameters with the full moments
    (the helper's lessons 034 and 033)."""
    n = len(worker_grads)
    cluster = cluster or Cluster(n)
    sums = ring_reduce_scatter_sums([_flat(grads) for grads in worker_grads], cluster)
    mean_grads, traffic = all_gather_param_shards([total / n for total in sums], cluster)
    full = {"step": worker_states[0]["step"], "m": np.concatenate([s["m"] for s in worker_states]),
            "v": np.concatenate([s["v"] for s in worker_states])}
    worker_params, states = [], []
    for r in range(n):
        vector, state = local_shard_adam_update(_flat(params), mean_grads[r], full, learning_rate, beta1, beta2, eps)
        worker_params.append(_unflat(vector, params))
        states.append(state)
    return worker_params, states, traffic


MISTAKES = {
    "init_adam_state": (
        Mistake("moments of dtype float64 for float32 parameters",
                "np.zeros(shape) is float64 whatever the parameters are; np.zeros_like(p) keeps p's dtype "
                "(and the state then costs what the lesson says: twice the parameters' bytes).",
                _init_float64),
        Mistake("the step counter starts at 1",
                "No step has been taken yet: step is 0, and the first update makes it 1, the t of the "
                "first bias correction.",
                _init_step_one),
    ),
    "partition_optimizer_state": (
        Mistake("each tensor cut into N pieces",
                "ZeRO cuts the parameters as one flat vector (every tensor raveled, in the dict's order, one "
                "after another) into N contiguous shards: worker r owns one run of consecutive elements, "
                "not a piece of every tensor.",
                _partition("per tensor")),
        Mistake("whole tensors assigned greedily (ZeroRedundancyOptimizer)",
                "That is PyTorch's ZeroRedundancyOptimizer, which never cuts a tensor and so can be far from "
                "balanced; here the flat vector is cut so that shard sizes differ by at most one element "
                "(np.array_split).",
                _partition("whole tensors")),
        Mistake("the last worker takes the remainder",
                "Shards of size len // N with the rest on the last worker differ by up to N - 1 elements; "
                "np.array_split gives the first len % N workers one element more.",
                _partition("remainder last")),
    ),
    "local_shard_adam_update": (
        Mistake("no bias correction",
                "m and v start at 0, so early on they are too small by the factors 1 - beta1**t and "
                "1 - beta2**t: divide by them (t the new step count) before the update.",
                _adam("no bias correction")),
        Mistake("bias correction with the old step count",
                "Advance the step first: the update that turns step t into t + 1 corrects with t + 1 (the "
                "first update with t = 1; with t = 0 the correction divides by zero).",
                _adam("the old step count")),
        Mistake("eps inside the square root",
                "Adam adds eps to the square root of v_hat: sqrt(v_hat) + eps, not sqrt(v_hat + eps).",
                _adam("eps inside the root")),
        Mistake("updated the state in place",
                "torch.optim.Adam updates exp_avg and exp_avg_sq in place; here the state you are given must "
                "not change: compute new arrays (m = beta1 * m + ...) and a new dict with the new step.",
                _adam_in_place),
    ),
    "all_gather_param_shards": (
        Mistake("concatenated in arrival order",
                "Each worker receives the shards from r - 1, r - 2, ...; the vector is the shards in rank "
                "order 0, 1, ..., N - 1, whoever sent them when.",
                _gather("arrival order")),
        Mistake("gathered to worker 0 and broadcast",
                "Through one worker, worker 0 receives and sends everything; in the ring each worker sends "
                "one shard to its right neighbour in each of N - 1 rounds.",
                _gather_at_root),
        Mistake("workers sharing one array object",
                "`[vector] * N` puts one array in every worker's slot; each worker concatenates its own.",
                _gather("shared")),
    ),
    "zero_optimizer_step": (
        Mistake("all-reduced the gradients (1.5 x the traffic)",
                "Each worker needs the mean gradient of its own shard only: a reduce-scatter (N - 1 rounds) "
                "gives exactly that; a whole all-reduce and then the parameters' all-gather send 1.5 times "
                "the bytes (DeepSpeed's first ZeRO-1 code did this).",
                _zero("all-reduced")),
        Mistake("every worker kept the full moments (no saving)",
                "That is data-parallel Adam: every worker updates all the parameters and keeps m and v for "
                "all of them. Worker r keeps the moments of its shard only, and updates that shard only.",
                _zero_full_moments),
        Mistake("a step counter advanced once per worker",
                "The step count is the optimizer's, not the shards': every worker corrects with the same "
                "t + 1 (its own state's step plus one), however many workers there are.",
                _zero("counter per worker")),
        Mistake("the gradients summed, not averaged",
                "The reduce-scatter gives each worker the sum of its shard over the N workers; the step "
                "uses their mean: divide by N.",
                _zero("summed")),
    ),
}
