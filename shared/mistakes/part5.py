"""Common mistakes of Part 5 (lessons 025-030), each a wrong version of the function.

The collectives run on the simulated cluster like the real ones, so a mistake's
traffic (what the ledger records) is part of its answer, as it is of the lesson's.
"""

from __future__ import annotations

import numpy as np

from .. import mlp
from ..checking import Mistake
from ..cluster import Cluster


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
    return list(zip(np.array_split(X, N), np.array_split(Y, N)))


# 026 compute_local_gradients -----------------------------------------------------

def _local(weight):
    """compute_local_gradients with the shard's mean scaled by ``weight(n_r, B, N)``."""
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


def _naive(combine, *, broadcast=True, shared=False):
    """A naive all-reduce whose root computes ``combine(received arrays, N)``."""
    def all_reduce(worker_arrays, cluster=None):
        cluster = cluster or Cluster(len(worker_arrays))
        gathered = _gather(worker_arrays, cluster)
        total = gathered[0]
        for array in gathered[1:]:
            total = total + array
        value = combine(total, gathered, len(worker_arrays))
        if not broadcast:
            results = [value] + [a.copy() for a in worker_arrays[1:]]
        elif shared:
            _broadcast(value, cluster)
            results = [value] * len(worker_arrays)
        else:
            results = _broadcast(value, cluster)
        return results, cluster.ledger.summary()
    return all_reduce


def _ring(*, divide=True, all_gather=True, off_by_one=False, shared=False):
    """The ring all-reduce of lesson 028, with one thing done wrong."""
    def ring(worker_arrays, cluster=None):
        n = len(worker_arrays)
        shape = worker_arrays[0].shape
        cluster = cluster or Cluster(n)
        chunks = [np.array_split(a.reshape(-1).copy(), n) for a in worker_arrays]
        for step in range(n - 1):
            with cluster.round():
                for r in range(n):
                    cluster.send(r, (r + 1) % n, chunks[r][(r - step) % n])
            for r in range(n):
                index = (r - step) % n if off_by_one else (r - 1 - step) % n
                chunks[r][index] = chunks[r][index] + cluster.receive(r, (r - 1) % n)
        if divide:
            for r in range(n):
                chunks[r][(r + 1) % n] = chunks[r][(r + 1) % n] / n
        if all_gather:
            for step in range(n - 1):
                with cluster.round():
                    for r in range(n):
                        cluster.send(r, (r + 1) % n, chunks[r][(r + 1 - step) % n])
                for r in range(n):
                    chunks[r][(r - step) % n] = cluster.receive(r, (r - 1) % n)
        results = [np.concatenate(chunks[r]).reshape(shape) for r in range(n)]
        if shared:
            results = [results[0]] * n
        return results, cluster.ledger.summary()
    return ring


_ring_correct = _ring()


# 029 data_parallel_train_step ----------------------------------------------------

def _dp_step(params, X, Y, N, lr, *, combine, shared=False):
    """A data-parallel step whose workers' gradients ``combine(grads_list, sizes, B)`` gives
    each worker's gradient (a list of N dicts)."""
    shards = [(X[r::N], Y[r::N]) for r in range(N)]
    results = [mlp.loss_and_grads(Xr, Yr, params) for Xr, Yr in shards]
    sizes = [len(Xr) for Xr, _ in shards]
    per_worker = combine([g for _, g in results], sizes, len(X))
    loss = float(sum(n * loss for n, (loss, _) in zip(sizes, results)) / len(X))
    replicas = [{key: params[key] - lr * grads[key] for key in params} for grads in per_worker]
    if shared:
        replicas = [replicas[0]] * N
    return replicas, loss


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


# 030 bucket_gradients ------------------------------------------------------------

def _bucketed(assign):
    """bucket_gradients with the buckets chosen by ``assign(first worker's grads, cap)``."""
    def bucket_gradients(worker_grads, cap, cluster=None):
        first = worker_grads[0]
        cluster = cluster or Cluster(len(worker_grads))
        buckets = assign(first, cap)
        averaged = [{} for _ in worker_grads]
        for bucket in buckets:
            buffers = [np.concatenate([g[key].ravel() for key in bucket]) for g in worker_grads]
            reduced, _ = _ring_correct(buffers, cluster)
            for r, buffer in enumerate(reduced):
                offset = 0
                for key in bucket:
                    averaged[r][key] = buffer[offset:offset + first[key].size].reshape(first[key].shape)
                    offset += first[key].size
        return [{key: a[key] for key in first} for a in averaged], buckets, cluster.ledger.summary()
    return bucket_gradients


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
                _local(lambda n, B, N: 1.0)),
        Mistake("divided twice (in the loss and in the all-reduce)",
                "n_r / B is the shard's share of the sum; the all-reduce divides by N once more, so the "
                "step is N times too small. The weight is N * n_r / B.",
                _local(lambda n, B, N: n / B)),
        Mistake("summed over the shard without dividing by the batch size",
                "n_r times the mean is the sum over the shard; divide by B / N (an average shard) as well: "
                "the weight is N * n_r / B.",
                _local(lambda n, B, N: float(n))),
    ),
    "all_reduce_mean": (
        Mistake("sum instead of mean",
                "The all-reduce of the gradients is a mean: divide the sum by the number of workers N.",
                _naive(lambda total, gathered, N: total)),
        Mistake("forgot the broadcast",
                "After averaging, the root sends the mean to every other worker (round 2); otherwise only "
                "worker 0 has it.",
                _naive(lambda total, gathered, N: total / N, broadcast=False)),
        Mistake("workers sharing one array object", SHARED_HINT,
                _naive(lambda total, gathered, N: total / N, shared=True)),
        Mistake("left out the root's own array",
                "Worker 0 is a worker too: add the arrays it received to its own before dividing by N.",
                _naive(lambda total, gathered, N: (total - gathered[0]) / N)),
    ),
    "ring_all_reduce_mean": (
        Mistake("gathered everything to one worker",
                "That is the naive all-reduce of lesson 027 with the right numbers and the wrong traffic: in a "
                "ring every worker sends one chunk to its right neighbour in each of 2(N - 1) rounds.",
                _naive(lambda total, gathered, N: total / N)),
        Mistake("a chunk-index off-by-one",
                "In reduce-scatter step s the receiver r adds the chunk its left neighbour sent, index "
                "(r - 1 - s) % N, not the index (r - s) % N that it sent itself.",
                _ring(off_by_one=True)),
        Mistake("skipped the all-gather phase",
                "After the reduce-scatter each worker holds one finished chunk and N - 1 partial sums; N - 1 "
                "more rounds pass the finished chunks around the ring.",
                _ring(all_gather=False)),
        Mistake("sum instead of mean",
                "Divide each finished chunk by N (once, by the worker that owns it after the reduce-scatter).",
                _ring(divide=False)),
        Mistake("workers sharing one array object", SHARED_HINT, _ring(shared=True)),
    ),
    "data_parallel_train_step": (
        Mistake("averaged the workers' mean gradients unweighted",
                "With shards of different sizes the mean of the shards' means is not the full batch's "
                "gradient; compute_local_gradients weights each by N * n_r / B.",
                lambda p, X, Y, N, lr: _dp_step(p, X, Y, N, lr, combine=_unweighted_mean)),
        Mistake("no all-reduce: each worker stepped with its own gradient",
                "The workers must average their gradients (ring_all_reduce_mean) before the update, or the "
                "replicas drift apart.",
                lambda p, X, Y, N, lr: _dp_step(p, X, Y, N, lr, combine=_no_all_reduce)),
        Mistake("summed the workers' gradients",
                "The contributions are averaged, not summed: a sum makes the step N times too large.",
                lambda p, X, Y, N, lr: _dp_step(p, X, Y, N, lr, combine=_summed)),
        Mistake("workers sharing one array object",
                "One dict of new parameters in every worker's slot: each worker updates its own replica, "
                "from the averaged gradient it received.",
                lambda p, X, Y, N, lr: _dp_step(p, X, Y, N, lr, combine=_weighted_mean, shared=True)),
    ),
    "bucket_gradients": (
        Mistake("buckets in forward order",
                "Backward produces the last layer's gradients first, so buckets are filled from the last "
                "parameter to the first (reversed(list(grads))).",
                _bucketed(_forward_order)),
        Mistake("let a bucket overflow the cap",
                "Close the bucket *before* a tensor would take it over the cap; only a single tensor larger "
                "than the cap may make a bucket exceed it.",
                _bucketed(_overflow)),
        Mistake("counted numbers instead of bytes",
                "The cap is in bytes: compare with nbytes (size * itemsize), not size.",
                _bucketed(_count_numbers)),
        Mistake("one all-reduce per tensor (no bucketing)",
                "Pack consecutive tensors into one buffer up to the cap and all-reduce each buffer once: "
                "the same bytes in far fewer messages.",
                _bucketed(_per_tensor)),
    ),
}
