"""Common mistakes of Part 5 (lessons 025-030), each a wrong version of the function.

The collectives run on the simulated cluster like the real ones, so a mistake's
traffic (what the ledger records) is part of its answer, as it is of the lesson's.

Nothing here computes a lesson's right answer (``tests/test_delegation.py``): a
function that several mistakes share takes the mistake as a required argument,
which has no right value; what a mistake shares with a right answer comes from the
helper's versions of other lessons (``shared.lesson_blocks``: lesson 011's split,
lesson 028's ring all-reduce), which refuse to run while their own lesson is graded;
and lesson 028's mistake "gathered everything to one worker", which *is* lesson
027's naive all-reduce, is marked as answering lesson 027 (:mod:`shared.answers`),
so it refuses to run while lesson 027 is graded.
"""

from __future__ import annotations

import numpy as np

from .. import mlp
from ..answers import answers
from ..checking import Mistake
from ..cluster import Cluster
from ..lesson_blocks import ring_all_reduce_mean, split_into_micro_batches
from ._rings import all_gather_rounds, reduce_scatter_rounds
from ._twists import check_mistake


# 025 shard_dataset_across_workers ------------------------------------------------

def _shard_padded(X, Y, N):
    """DistributedSampler with drop_last=False: the first examples are dealt a second time."""
    total = -(-len(X) // N) * N
    indices = (list(range(len(X))) * 2)[:total]
    return [(X[indices[r::N]], Y[indices[r::N]]) for r in range(N)]


def _shard_drop_remainder(X, Y, N):
    """DistributedSampler with drop_last=True: the last B % N examples are never dealt."""
    total = len(X) // N * N
    return [(X[r:total:N], Y[r:total:N]) for r in range(N)]


def _shard_contiguous(X, Y, N):
    """Consecutive blocks (np.array_split): the helper's lesson 011, which refuses while 011 is graded."""
    return split_into_micro_batches(X, Y, N)


# 026 compute_local_gradients -----------------------------------------------------

#: The wrong weights of a shard's mean, ``weight(n_r, B, N)`` (the right one is N * n_r / B).
_LOCAL_WEIGHTS = {"unweighted": lambda n, B, N: 1.0, "divided twice": lambda n, B, N: n / B,
                  "summed": lambda n, B, N: float(n)}


def _local(mistake):
    """compute_local_gradients with the shard's mean weighted wrong: ``mistake``, a key of _LOCAL_WEIGHTS."""
    check_mistake(mistake, tuple(_LOCAL_WEIGHTS))
    weight = _LOCAL_WEIGHTS[mistake]

    def local(params, X_shard, Y_shard, B, N):
        loss, grads = mlp.loss_and_grads(X_shard, Y_shard, params)
        w = weight(len(X_shard), B, N)
        return float(w * loss), {key: w * g for key, g in grads.items()}
    return local


# 027 all_reduce_mean and 028 ring_all_reduce_mean --------------------------------

def _gather(worker_arrays, cluster):
    """Round 1 of the naive all-reduce: everyone's array at worker 0, as the root adds them up."""
    with cluster.round():
        for r in range(1, len(worker_arrays)):
            cluster.send(r, 0, worker_arrays[r])
    return [worker_arrays[0]] + [cluster.receive(0, r) for r in range(1, len(worker_arrays))]


def _broadcast(value, cluster):
    with cluster.round():
        for r in range(1, cluster.num_workers):
            cluster.send(0, r, value)
    return [value] + [cluster.receive(r, 0) for r in range(1, cluster.num_workers)]


def _sum_at_root(gathered):
    """The root's sum of the gathered arrays, in rank order."""
    total = gathered[0]
    for array in gathered[1:]:
        total = total + array
    return total


_NAIVE_MISTAKES = ("sum", "no broadcast", "shared", "without the root")


def _naive(mistake):
    """A naive all-reduce (gather to worker 0, combine there, broadcast) with ``mistake`` made, one of
    _NAIVE_MISTAKES: the sum not divided, no broadcast, one array object for every worker, or the
    root's own array left out of the sum."""
    check_mistake(mistake, _NAIVE_MISTAKES)

    def all_reduce(worker_arrays, cluster=None):
        cluster = cluster or Cluster(len(worker_arrays))
        gathered = _gather(worker_arrays, cluster)
        total = _sum_at_root(gathered)
        if mistake == "sum":
            value = total
        elif mistake == "without the root":
            value = (total - gathered[0]) / len(worker_arrays)
        else:
            value = total / len(worker_arrays)
        if mistake == "no broadcast":
            results = [value] + [a.copy() for a in worker_arrays[1:]]
        elif mistake == "shared":
            _broadcast(value, cluster)
            results = [value] * len(worker_arrays)
        else:
            results = _broadcast(value, cluster)
        return results, cluster.ledger.summary()
    return all_reduce


@answers("027")
def _through_one_worker(worker_arrays, cluster=None):
    """Lesson 028's mistake "gathered everything to one worker": lesson 027's naive all-reduce (without its
    refusals), the right numbers and the wrong traffic for 028.  It answers lesson 027, so it refuses to
    run while 027 is graded."""
    cluster = cluster or Cluster(len(worker_arrays))
    total = _sum_at_root(_gather(worker_arrays, cluster))
    return _broadcast(total / len(worker_arrays), cluster), cluster.ledger.summary()


_RING_MISTAKES = ("off by one", "no all-gather", "sum", "shared")


def _ring(mistake):
    """The ring all-reduce of lesson 028 with ``mistake`` made, one of _RING_MISTAKES: the reduce-scatter
    adding to the chunk it sent, the all-gather phase skipped, the chunks not divided by N, or one array
    object for every worker."""
    check_mistake(mistake, _RING_MISTAKES)

    def ring(worker_arrays, cluster=None):
        n = len(worker_arrays)
        shape = worker_arrays[0].shape
        cluster = cluster or Cluster(n)
        chunks = [np.array_split(a.reshape(-1).copy(), n) for a in worker_arrays]
        reduce_scatter_rounds(chunks, cluster, owner=1, add_to_sent=mistake == "off by one")
        if mistake != "sum":
            for r in range(n):
                chunks[r][(r + 1) % n] = chunks[r][(r + 1) % n] / n
        if mistake != "no all-gather":
            all_gather_rounds(chunks, cluster, owner=1)
        results = [np.concatenate(chunks[r]).reshape(shape) for r in range(n)]
        if mistake == "shared":
            results = [results[0]] * n
        return results, cluster.ledger.summary()
    return ring


# 029 data_parallel_train_step ----------------------------------------------------

def _weighted_mean(grads, sizes, B):
    N = len(sizes)
    mean = {key: sum(n * g[key] for n, g in zip(sizes, grads)) / B for key in grads[0]}
    return [mean] * N


def _unweighted_mean(grads, sizes, B):
    N = len(sizes)
    mean = {key: sum(g[key] for g in grads) / N for key in grads[0]}
    return [mean] * N


def _no_all_reduce(grads, sizes, B):
    N = len(sizes)
    return [{key: N * n / B * g[key] for key in g} for n, g in zip(sizes, grads)]


def _summed(grads, sizes, B):
    N = len(sizes)
    total = {key: sum(N * n / B * g[key] for n, g in zip(sizes, grads)) for key in grads[0]}
    return [total] * N


#: How each mistake turns the workers' mean gradients into each worker's gradient: ``combine(grads, sizes, B)``.
_DP_COMBINE = {"unweighted": _unweighted_mean, "no all-reduce": _no_all_reduce, "summed": _summed,
               "shared": _weighted_mean}


def _dp_step(mistake):
    """A data-parallel step with ``mistake`` made, a key of _DP_COMBINE: the workers' gradients averaged
    unweighted, not all-reduced, summed, or the new parameters one dict object for every worker.

    Its numbers are computed directly; on the ``cluster`` it is given (the grader's), every mistake
    but "no all-reduce" sends what the lesson's step sends (a ring all-reduce per tensor, with the
    helper's lesson 028), so that the grader tells it by what it gets wrong, not by its traffic."""
    check_mistake(mistake, tuple(_DP_COMBINE))
    combine = _DP_COMBINE[mistake]

    def step(params, X, Y, num_workers, learning_rate, cluster=None):
        N = num_workers
        shards = [(X[r::N], Y[r::N]) for r in range(N)]
        results = [mlp.loss_and_grads(Xr, Yr, params) for Xr, Yr in shards]
        sizes = [len(Xr) for Xr, _ in shards]
        if cluster is not None and mistake != "no all-reduce":
            for key in params:
                ring_all_reduce_mean([grads[key] for _, grads in results], cluster)
        per_worker = combine([g for _, g in results], sizes, len(X))
        loss = float(sum(n * loss for n, (loss, _) in zip(sizes, results)) / len(X))
        replicas = [{key: params[key] - learning_rate * grads[key] for key in params} for grads in per_worker]
        if mistake == "shared":
            replicas = [replicas[0]] * N
        return replicas, loss
    return step


# 030 bucket_gradients ------------------------------------------------------------

def _fill(keys, sizes, cap):
    buckets, current, size = [], [], 0
    for key in keys:
        if current and size + sizes[key] > cap:
            buckets.append(current)
            current, size = [], 0
        current.append(key)
        size += sizes[key]
    return buckets + ([current] if current else [])


def _forward_order(first, cap):
    return _fill(list(first), {k: v.nbytes for k, v in first.items()}, cap)


def _count_numbers(first, cap):
    return _fill(list(reversed(list(first))), {k: v.size for k, v in first.items()}, cap)


def _overflow(first, cap):
    """PyTorch's rule: add the tensor, then close the bucket once it has reached the cap."""
    buckets, current, size = [], [], 0
    for key in reversed(list(first)):
        current.append(key)
        size += first[key].nbytes
        if size >= cap:
            buckets.append(current)
            current, size = [], 0
    return buckets + ([current] if current else [])


def _per_tensor(first, cap):
    return [[key] for key in reversed(list(first))]


#: How each mistake chooses the buckets: ``assign(first worker's grads, cap)``.
_BUCKETS = {"forward order": _forward_order, "overflow": _overflow, "numbers": _count_numbers,
            "per tensor": _per_tensor}


def _bucketed(mistake):
    """bucket_gradients with the buckets chosen wrong: ``mistake``, a key of _BUCKETS; each bucket
    all-reduced with the helper's lesson 028 (which refuses while 028 is graded)."""
    check_mistake(mistake, tuple(_BUCKETS))
    assign = _BUCKETS[mistake]

    def bucket_gradients(worker_grads, cap, cluster=None):
        first = worker_grads[0]
        cluster = cluster or Cluster(len(worker_grads))
        buckets = assign(first, cap)
        averaged = [{} for _ in worker_grads]
        for bucket in buckets:
            buffers = [np.concatenate([g[key].ravel() for key in bucket]) for g in worker_grads]
            reduced, _ = ring_all_reduce_mean(buffers, cluster)
            for r, buffer in enumerate(reduced):
                offset = 0
                for key in bucket:
                    averaged[r][key] = buffer[offset:offset + first[key].size].reshape(first[key].shape)
                    offset += first[key].size
        return [{key: a[key] for key in first} for a in averaged], buckets, cluster.ledger.summary()
    return bucket_gradients


SHARED_HINT = ("`[result] * N` puts one array object in every worker's slot, so a change by one worker "
               "changes them all; each worker keeps the copy it received.")

MISTAKES = {
    "shard_dataset_across_workers": (
        Mistake("padded the shards by repeating examples",
                "DistributedSampler's default (drop_last=False) deals the first examples a second time so "
                "that all shards are equally long; those examples then count twice. Deal every example once: "
                "X[r::N].",
                _shard_padded),
        Mistake("dropped the remainder",
                "The last B % N examples are never trained on (drop_last=True); the first B % N workers take "
                "one example more instead: X[r::N].",
                _shard_drop_remainder),
        Mistake("contiguous blocks instead of dealing",
                "np.array_split gives worker r a block of consecutive rows; here examples are dealt like "
                "cards: worker r gets rows r, r + N, r + 2N, ... (X[r::N]).",
                _shard_contiguous),
    ),
    "compute_local_gradients": (
        Mistake("the shard's mean gradient, unweighted",
                "The all-reduce averages the N contributions; a shard with more examples than B / N must "
                "count for more. Multiply the shard's mean by N * n_r / B.",
                _local("unweighted")),
        Mistake("divided twice (in the loss and in the all-reduce)",
                "n_r / B is the shard's share of the sum; the all-reduce divides by N once more, so the "
                "step is N times too small. The weight is N * n_r / B.",
                _local("divided twice")),
        Mistake("summed over the shard without dividing by the batch size",
                "n_r times the mean is the sum over the shard; divide by B / N (an average shard) as well: "
                "the weight is N * n_r / B.",
                _local("summed")),
    ),
    "all_reduce_mean": (
        Mistake("sum instead of mean",
                "The all-reduce of the gradients is a mean: divide the sum by the number of workers N.",
                _naive("sum")),
        Mistake("forgot the broadcast",
                "After averaging, the root sends the mean to every other worker (round 2); otherwise only "
                "worker 0 has it.",
                _naive("no broadcast")),
        Mistake("workers sharing one array object", SHARED_HINT,
                _naive("shared")),
        Mistake("left out the root's own array",
                "Worker 0 is a worker too: add the arrays it received to its own before dividing by N.",
                _naive("without the root")),
    ),
    "ring_all_reduce_mean": (
        Mistake("gathered everything to one worker",
                "That is the naive all-reduce of lesson 027 with the right numbers and the wrong traffic: in a "
                "ring every worker sends one chunk to its right neighbour in each of 2(N - 1) rounds.",
                _through_one_worker),
        Mistake("a chunk-index off-by-one",
                "In reduce-scatter step s the receiver r adds the chunk its left neighbour sent, index "
                "(r - 1 - s) % N, not the index (r - s) % N that it sent itself.",
                _ring("off by one")),
        Mistake("skipped the all-gather phase",
                "After the reduce-scatter each worker holds one finished chunk and N - 1 partial sums; N - 1 "
                "more rounds pass the finished chunks around the ring.",
                _ring("no all-gather")),
        Mistake("sum instead of mean",
                "Divide each finished chunk by N (once, by the worker that owns it after the reduce-scatter).",
                _ring("sum")),
        Mistake("workers sharing one array object", SHARED_HINT, _ring("shared")),
    ),
    "data_parallel_train_step": (
        Mistake("averaged the workers' mean gradients unweighted",
                "With shards of different sizes the mean of the shards' means is not the full batch's "
                "gradient; compute_local_gradients weights each by N * n_r / B.",
                _dp_step("unweighted")),
        Mistake("no all-reduce: each worker stepped with its own gradient",
                "The workers must average their gradients (ring_all_reduce_mean) before the update, or the "
                "replicas drift apart.",
                _dp_step("no all-reduce")),
        Mistake("summed the workers' gradients",
                "The contributions are averaged, not summed: a sum makes the step N times too large.",
                _dp_step("summed")),
        Mistake("workers sharing one array object",
                "One dict of new parameters in every worker's slot: each worker updates its own replica, "
                "from the averaged gradient it received.",
                _dp_step("shared")),
    ),
    "bucket_gradients": (
        Mistake("buckets in forward order",
                "Backward produces the last layer's gradients first, so buckets are filled from the last "
                "parameter to the first (reversed(list(grads))).",
                _bucketed("forward order")),
        Mistake("let a bucket overflow the cap",
                "Close the bucket *before* a tensor would take it over the cap; only a single tensor larger "
                "than the cap may make a bucket exceed it.",
                _bucketed("overflow")),
        Mistake("counted numbers instead of bytes",
                "The cap is in bytes: compare with nbytes (size * itemsize), not size.",
                _bucketed("numbers")),
        Mistake("one all-reduce per tensor (no bucketing)",
                "Pack consecutive tensors into one buffer up to the cap and all-reduce each buffer once: "
                "the same bytes in far fewer messages.",
                _bucketed("per tensor")),
    ),
}
