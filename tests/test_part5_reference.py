"""Part 5's reference solutions: data parallelism changes where the work happens, and nothing else.

Checked against independent computations: sharding deals every example once; the
workers' weighted gradients average to the full-batch gradient; a data-parallel
step (and twenty of them) equals the full-batch step on one worker (float64,
rtol 1e-12), also when N does not divide the batch; the ring and naive
all-reduces compute the mean and their ledgers hold exactly the bytes, messages
and rounds of the formulas, for several N and payloads that N divides and does
not divide; bucketing keeps the bytes, cuts the messages and follows the rule;
the part summary's table is what the ledger says. (That 029's technique is
graded, a full-batch step scoring 0, named, is in tests/test_technique.py.)
"""

import re

import numpy as np
import pytest

from course import ROOT
from grading.judge import reference_function
from shared import mlp
from shared.cluster import DEFAULT_LATENCY, DEFAULT_SECONDS_PER_BYTE, Cluster
from shared.lessons import lesson as find_lesson, lessons_of

pytestmark = pytest.mark.part_5
REF = {lesson.function: reference_function(lesson) for lesson in lessons_of("05_data_parallel")}
shard, local, naive, ring, step, bucket = (REF[name] for name in (
    "shard_dataset_across_workers", "compute_local_gradients", "all_reduce_mean", "ring_all_reduce_mean",
    "data_parallel_train_step", "bucket_gradients"))
SPLITS = [(10, 4), (7, 3), (12, 4), (5, 5), (9, 1), (17, 6)]  # (B, N), most not dividing


def batch(B, seed=0, features=3, outputs=2):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((B, features)), rng.standard_normal((B, outputs))


@pytest.mark.lesson_025
@pytest.mark.parametrize("B, N", SPLITS)
def test_sharding_deals_every_example_exactly_once(B, N):
    X, Y = batch(B)
    index = np.arange(B, dtype=float)[:, None]
    shards = shard(index, Y, N)
    assert len(shards) == N
    dealt = sorted(int(i) for X_r, _ in shards for i in X_r[:, 0])
    assert dealt == list(range(B))
    sizes = [len(X_r) for X_r, _ in shards]
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)
    for r, (X_r, Y_r) in enumerate(shards):
        assert all(int(i) % N == r for i in X_r[:, 0]) and np.array_equal(Y_r, Y[r::N])


@pytest.mark.lesson_026
@pytest.mark.parametrize("B, N", SPLITS)
def test_the_mean_of_the_weighted_contributions_is_the_full_batch_loss_and_gradient(B, N):
    X, Y = batch(B, seed=1)
    params = mlp.init_params([3, 5, 4, 2], seed=B)
    loss, grads = mlp.loss_and_grads(X, Y, params)
    contributions = [local(params, X_r, Y_r, B, N) for X_r, Y_r in shard(X, Y, N)]
    assert sum(c[0] for c in contributions) / N == pytest.approx(loss, rel=1e-12)
    for key in params:
        np.testing.assert_allclose(sum(c[1][key] for c in contributions) / N, grads[key], rtol=1e-12, atol=1e-14)


def ring_bytes_sent(chunk_bytes):
    """Independent of the schedule's loop: in reduce-scatter worker r sends every chunk but (r + 1) % N,
    in all-gather every chunk but (r + 2) % N."""
    N, total = len(chunk_bytes), sum(chunk_bytes)
    return [2 * total - chunk_bytes[(r + 1) % N] - chunk_bytes[(r + 2) % N] for r in range(N)]


PAYLOADS = [(N, length) for N in (2, 3, 4, 5, 8, 16) for length in (N * 3, N * 3 + 1, N * 5 - 1)]


@pytest.mark.lesson_027
@pytest.mark.lesson_028
@pytest.mark.parametrize("N, length", PAYLOADS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_both_all_reduces_compute_the_mean_and_their_ledgers_hold_the_formulas(N, length, dtype):
    rng = np.random.default_rng(N * 100 + length)
    arrays = [rng.standard_normal(length).astype(dtype) for _ in range(N)]
    S = arrays[0].nbytes
    expected = np.mean(np.stack(arrays).astype(np.float64), axis=0)
    tolerance = {"rtol": 1e-12, "atol": 1e-14} if dtype == np.float64 else {"rtol": 1e-5, "atol": 1e-6}

    results, traffic = ring(arrays)
    for r, result in enumerate(results):
        assert result.dtype == dtype and result.shape == (length,)
        np.testing.assert_allclose(result, expected, **tolerance)
        assert np.array_equal(result, results[0])                      # bitwise the same on every worker
        assert not any(np.shares_memory(result, other) for other in arrays + results[:r])
    chunk_bytes = [chunk.nbytes for chunk in np.array_split(arrays[0], N)]
    assert traffic["bytes_sent"] == ring_bytes_sent(chunk_bytes)
    assert traffic["bytes_received"] == [traffic["bytes_sent"][(r - 1) % N] for r in range(N)]
    assert sum(traffic["bytes_sent"]) == 2 * (N - 1) * S                 # every chunk moves N - 1 times a phase
    assert traffic["messages_sent"] == traffic["messages_received"] == [2 * (N - 1)] * N
    assert traffic["rounds"] == 2 * (N - 1)
    if length % N == 0:
        assert traffic["bytes_sent"] == [2 * (N - 1) * S // N] * N      # the bandwidth lower bound

    naive_results, naive_traffic = naive(arrays)
    for result in naive_results:
        assert result.dtype == dtype
        np.testing.assert_allclose(result, expected, **tolerance)
    assert naive_traffic == {"bytes_sent": [(N - 1) * S] + [S] * (N - 1),
                             "bytes_received": [(N - 1) * S] + [S] * (N - 1),
                             "messages_sent": [N - 1] + [1] * (N - 1),
                             "messages_received": [N - 1] + [1] * (N - 1), "rounds": 2}


@pytest.mark.lesson_027
@pytest.mark.lesson_028
@pytest.mark.parametrize("N", [2, 4, 8, 16])
def test_the_alpha_beta_times_are_those_of_the_cost_models(N):
    S_numbers = 64 * N
    S = 8 * S_numbers
    arrays = [np.ones(S_numbers) for _ in range(N)]
    on_naive, on_ring = Cluster(N), Cluster(N)
    naive(arrays, on_naive)
    ring(arrays, on_ring)
    alpha, beta = DEFAULT_LATENCY, DEFAULT_SECONDS_PER_BYTE
    assert on_naive.estimated_seconds() == pytest.approx(2 * (N - 1) * (alpha + S * beta), rel=1e-12)
    assert on_ring.estimated_seconds() == pytest.approx(2 * (N - 1) * alpha + 2 * (N - 1) / N * S * beta, rel=1e-12)
    assert on_naive.unreceived() == on_ring.unreceived() == 0


@pytest.mark.lesson_028
def test_the_ring_keeps_any_shape_and_one_worker_sends_nothing():
    rng = np.random.default_rng(2)
    arrays = [rng.standard_normal((3, 5)) for _ in range(4)]
    results, _ = ring(arrays)
    np.testing.assert_allclose(results[2], sum(arrays) / 4, rtol=1e-12, atol=1e-14)
    assert results[2].shape == (3, 5)
    alone = [rng.standard_normal(6)]
    results, traffic = ring(alone)
    assert np.array_equal(results[0], alone[0]) and not np.shares_memory(results[0], alone[0])
    assert traffic == {"bytes_sent": [0], "bytes_received": [0], "messages_sent": [0], "messages_received": [0],
                       "rounds": 0}


def full_batch_step(params, X, Y, learning_rate):
    loss, grads = mlp.loss_and_grads(X, Y, params)
    return mlp.sgd_update(params, grads, learning_rate), loss


@pytest.mark.lesson_029
@pytest.mark.parametrize("B, N", SPLITS)
def test_a_data_parallel_step_is_the_full_batch_step_on_one_worker(B, N):
    X, Y = batch(B, seed=3)
    params = mlp.init_params([3, 6, 5, 2], seed=7)
    expected, expected_loss = full_batch_step(params, X, Y, 0.1)
    replicas, loss = step(params, X, Y, N, 0.1)
    assert type(loss) is float and loss == pytest.approx(expected_loss, rel=1e-12)
    assert len(replicas) == N
    for r, replica in enumerate(replicas):
        assert list(replica) == list(params)
        for key in params:
            np.testing.assert_allclose(replica[key], expected[key], rtol=1e-12, atol=1e-14)
            assert np.array_equal(replica[key], replicas[0][key])
            assert all(not np.shares_memory(replica[key], other[key]) for other in replicas[:r])


@pytest.mark.lesson_029
def test_twenty_data_parallel_steps_train_the_same_model_as_one_worker():
    X, Y = batch(37, seed=4, features=4)
    single = replica = mlp.init_params([4, 8, 8, 2], seed=5)
    for _ in range(20):
        single, single_loss = full_batch_step(single, X, Y, 0.05)
        replicas, loss = step(replica, X, Y, 5, 0.05)   # 37 examples on 5 workers: shards of 8 and 7
        replica = replicas[3]
        assert loss == pytest.approx(single_loss, rel=1e-12)
    for key in single:
        np.testing.assert_allclose(replica[key], single[key], rtol=1e-11, atol=1e-13)


def grads_of(shapes, N, seed, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return [{key: rng.standard_normal(shape).astype(dtype) for key, shape in shapes.items()} for _ in range(N)]


SHAPES = {"W1": (6, 8), "b1": (8,), "W2": (8, 8), "b2": (8,), "W3": (8, 3), "b3": (3,)}


@pytest.mark.lesson_030
@pytest.mark.parametrize("cap", [1, 24, 64, 200, 384, 600, 10**6])
@pytest.mark.parametrize("N", [2, 3, 5])
def test_buckets_follow_the_rule_keep_the_bytes_and_cut_the_messages(cap, N):
    worker_grads = grads_of(SHAPES, N, seed=cap + N)
    averaged, buckets, traffic = bucket(worker_grads, cap)
    nbytes = {key: value.nbytes for key, value in worker_grads[0].items()}
    assert [key for b in buckets for key in b] == list(reversed(list(SHAPES)))      # reverse order, each once
    for i, b in enumerate(buckets):
        size = sum(nbytes[key] for key in b)
        assert size <= cap or len(b) == 1                                           # over the cap only alone
        if i + 1 < len(buckets):
            assert size + nbytes[buckets[i + 1][0]] > cap                           # closed only when full
    S = sum(nbytes.values())
    assert sum(traffic["bytes_sent"]) == 2 * (N - 1) * S                              # the bytes never change
    assert traffic["messages_sent"] == [2 * (N - 1) * len(buckets)] * N               # one collective a bucket
    assert traffic["rounds"] == 2 * (N - 1) * len(buckets)
    per_tensor = {key: ring([g[key] for g in worker_grads])[0] for key in SHAPES}
    for r, mine in enumerate(averaged):
        assert list(mine) == list(SHAPES)
        for key in SHAPES:
            # not bitwise: chunk boundaries change the order of the additions
            np.testing.assert_allclose(mine[key], per_tensor[key][r], rtol=1e-12, atol=1e-14)
            np.testing.assert_allclose(mine[key], sum(g[key] for g in worker_grads) / N, rtol=1e-12, atol=1e-14)
            assert not any(np.shares_memory(mine[key], other[key]) for other in averaged[:r])
            assert not any(np.shares_memory(mine[key], g[key]) for g in worker_grads)


@pytest.mark.lesson_030
def test_float32_buckets_are_measured_in_bytes():
    worker_grads = grads_of(SHAPES, 2, seed=1, dtype=np.float32)
    averaged, buckets, _ = bucket(worker_grads, 128)   # float64 would give [["b3"], ["W3"], ...]
    assert buckets == [["b3", "W3"], ["b2"], ["W2"], ["b1"], ["W1"]]
    assert averaged[1]["W2"].dtype == np.float32


def test_the_part_summary_table_is_what_the_ledger_says():
    master = (ROOT / "autograde" / "parts" / "05_data_parallel" / "master.py").read_text()
    rows = re.findall(r"^# \| (\d+) \| ([\d,]+) B \| ([\d.]+) MiB \| ([\d,]+) B \| ([\d.]+) MiB \|$", master, re.MULTILINE)
    assert [int(row[0]) for row in rows] == [2, 4, 8, 16]
    S = 2**20
    for N, root, root_mib, ring_sent, ring_mib in rows:
        N = int(N)
        arrays = [np.zeros(S // 8) for _ in range(N)]
        naive_traffic, ring_traffic = naive(arrays)[1], ring(arrays)[1]
        assert int(root.replace(",", "")) == naive_traffic["bytes_sent"][0] == naive_traffic["bytes_received"][0]
        assert float(root_mib) * S == (N - 1) * S
        assert int(ring_sent.replace(",", "")) == ring_traffic["bytes_sent"][0] == ring_traffic["bytes_received"][0]
        assert float(ring_mib) * S == 2 * (N - 1) * S / N


def test_every_lesson_of_the_part_is_in_the_reference():
    assert [find_lesson(name).code for name in REF] == ["025", "026", "027", "028", "029", "030"]
