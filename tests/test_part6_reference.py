"""Part 6's reference solutions: sharding Adam's state changes who keeps what, and nothing else.

Checked against independent computations: plain Adam with bias correction,
written out here on whole dicts of parameters, never flattened; the shards of
032 tile the flat vector with sizes within one element, each worker holding
exactly its share of the bytes; the shard update is that plain Adam on a slice;
the all-gather's ledger holds exactly the bytes of the formula; and twenty and
more ZeRO steps give plain Adam's parameters (float64, rtol 1e-12) for N in
{1, 2, 3, 4, 8}, parameter counts that N divides and ones it does not, with
2(N-1)/N of the parameter bytes sent per worker per step (the ring all-reduce's
ledger, to the byte) and 1/N of the state kept per worker.  The part summary's
memory table is what the arrays say.  (That a step whose workers keep the full
moments scores 0, named, is in tests/test_technique.py.)
"""

import re

import numpy as np
import pytest

from course import ROOT
from grading.judge import reference_function
from shared import mlp
from shared.lesson_blocks import ring_all_reduce_mean
from shared.lessons import lesson as find_lesson, lessons_of
from shared.memory import measure_peak_memory, partitioned_state_allowed_bytes, zero_step_allowed_bytes

pytestmark = pytest.mark.part_6
REF = {lesson.function: reference_function(lesson) for lesson in lessons_of("06_zero_sharding")}
init, partition, update, gather, zero = (REF[name] for name in (
    "init_adam_state", "partition_optimizer_state", "local_shard_adam_update", "all_gather_param_shards",
    "zero_optimizer_step"))


def plain_adam(params, grads, state, lr, beta1=0.9, beta2=0.999, eps=1e-8):
    """Adam (Kingma and Ba) with bias correction, tensor by tensor, on one worker."""
    t = state["step"] + 1
    m = {k: beta1 * state["m"][k] + (1 - beta1) * grads[k] for k in params}
    v = {k: beta2 * state["v"][k] + (1 - beta2) * grads[k] * grads[k] for k in params}
    new = {k: params[k] - lr * (m[k] / (1 - beta1 ** t)) / (np.sqrt(v[k] / (1 - beta2 ** t)) + eps) for k in params}
    return new, {"step": t, "m": m, "v": v}


def random_state(params, seed, step=5):
    rng = np.random.default_rng(seed)
    return {"step": step, "m": {k: rng.standard_normal(p.shape) for k, p in params.items()},
            "v": {k: rng.random(p.shape) for k, p in params.items()}}


def flat(tensors):
    return np.concatenate([value.ravel() for value in tensors.values()])


WIDTHS = [[3, 4, 2], [5, 7, 3], [4, 6, 6, 1], [2, 2]]   # 26, 66, 79 and 6 parameters


@pytest.mark.lesson_031
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_fresh_state_is_zeros_shaped_like_the_parameters_twice_their_bytes(dtype):
    params = {k: v.astype(dtype) for k, v in mlp.init_params([4, 6, 3], seed=1).items()}
    state = init(params)
    assert state["step"] == 0 and type(state["step"]) is int
    for moment in ("m", "v"):
        assert list(state[moment]) == list(params)
        for key, value in params.items():
            array = state[moment][key]
            assert array.dtype == dtype and array.shape == value.shape and not array.any()
            assert not np.shares_memory(array, value)
    assert not any(np.shares_memory(state["m"][k], state["v"][k]) for k in params)
    assert sum(a.nbytes for moment in ("m", "v") for a in state[moment].values()) == \
        2 * sum(p.nbytes for p in params.values())


@pytest.mark.lesson_032
@pytest.mark.parametrize("widths", WIDTHS)
@pytest.mark.parametrize("N", [1, 2, 3, 4, 5, 8])
def test_the_shards_tile_the_flat_vector_each_worker_holding_its_share(widths, N):
    params = mlp.init_params(widths, seed=2)
    state = random_state(params, seed=N)
    psi = sum(p.size for p in params.values())
    if N > psi:
        with pytest.raises(ValueError):
            partition(state, N)
        return
    shards = partition(state, N)
    assert len(shards) == N
    for moment in ("m", "v"):
        assert np.array_equal(np.concatenate([s[moment] for s in shards]), flat(state[moment]))
    sizes = [len(s["m"]) for s in shards]
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True) and sum(sizes) == psi
    total_bytes = 2 * 8 * psi
    for r, shard in enumerate(shards):
        assert shard["step"] == 5
        held = shard["m"].nbytes + shard["v"].nbytes
        assert held == 2 * 8 * sizes[r]
        assert abs(held - total_bytes / N) <= 2 * 8                  # 1/N of the state, to one element
        for other in shards[:r]:
            assert not np.shares_memory(shard["m"], other["m"]) and not np.shares_memory(shard["v"], other["v"])
        assert not any(np.shares_memory(shard[moment], a) for moment in ("m", "v") for a in state[moment].values())


@pytest.mark.lesson_032
@pytest.mark.parametrize("N", [1, 2, 4, 8])
def test_the_shards_keep_the_state_once_whatever_n(N):
    state = random_state(mlp.init_params([128, 256, 128], seed=3), seed=0)   # 1 MB of m and v
    state_bytes = 2 * sum(a.nbytes for a in state["m"].values())
    measured = measure_peak_memory(partition, state, N)
    assert abs(measured.retained_bytes - state_bytes) < 0.01 * state_bytes
    assert measured.retained_bytes <= partitioned_state_allowed_bytes(state)


@pytest.mark.lesson_033
@pytest.mark.parametrize("step", [0, 1, 7, 1000])
@pytest.mark.parametrize("betas", [(0.9, 0.999), (0.5, 0.75), (0.0, 0.0)])
def test_the_shard_update_is_plain_adam_on_a_slice(step, betas):
    params = mlp.init_params([5, 7, 3], seed=4)
    rng = np.random.default_rng(step)
    grads = {k: rng.standard_normal(p.shape) for k, p in params.items()}
    state = random_state(params, seed=step, step=step)
    expected, expected_state = plain_adam(params, grads, state, 0.01, *betas)
    lo, hi = 11, 40  # a slice that starts inside W1 and ends inside W2
    new, new_state = update(flat(params)[lo:hi], flat(grads)[lo:hi],
                            {"step": step, "m": flat(state["m"])[lo:hi], "v": flat(state["v"])[lo:hi]}, 0.01, *betas)
    assert new_state["step"] == step + 1
    np.testing.assert_allclose(new, flat(expected)[lo:hi], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(new_state["m"], flat(expected_state["m"])[lo:hi], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(new_state["v"], flat(expected_state["v"])[lo:hi], rtol=1e-12, atol=1e-14)


@pytest.mark.lesson_033
def test_the_first_step_moves_each_parameter_by_about_the_learning_rate():
    g = np.array([1e-6, -3.0, 250.0])
    new, _ = update(np.zeros(3), g, {"step": 0, "m": np.zeros(3), "v": np.zeros(3)}, 1e-3)
    np.testing.assert_allclose(new, -1e-3 * g / (np.abs(g) + 1e-8), rtol=1e-12)
    assert np.all(np.abs(new) <= 1e-3)
    new32, state32 = update(np.zeros(3, np.float32), g.astype(np.float32),
                            {"step": 0, "m": np.zeros(3, np.float32), "v": np.zeros(3, np.float32)}, 1e-3)
    assert new32.dtype == state32["m"].dtype == state32["v"].dtype == np.float32


def gather_bytes(shard_bytes):
    """Independent of the schedule's loop: worker r sends every shard but its right neighbour's and
    receives every shard but its own."""
    N, total = len(shard_bytes), sum(shard_bytes)
    return [total - shard_bytes[(r + 1) % N] for r in range(N)], [total - shard_bytes[r] for r in range(N)]


@pytest.mark.lesson_034
@pytest.mark.parametrize("N, length", [(N, length) for N in (1, 2, 3, 5, 8, 16) for length in (N * 3, N * 3 + 1, N * 5 - 1)])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_all_gather_hands_every_worker_the_vector_and_its_ledger_holds_the_formula(N, length, dtype):
    vector = np.random.default_rng(length).standard_normal(length).astype(dtype)
    shards = [np.array(c) for c in np.array_split(vector, N)]
    vectors, traffic = gather(shards)
    for r, mine in enumerate(vectors):
        assert mine.dtype == dtype and np.array_equal(mine, vector)
        assert not any(np.shares_memory(mine, other) for other in shards + vectors[:r])
    sent, received = gather_bytes([s.nbytes for s in shards])
    assert traffic == {"bytes_sent": sent, "bytes_received": received, "messages_sent": [N - 1] * N,
                       "messages_received": [N - 1] * N, "rounds": N - 1}
    if length % N == 0:
        assert sent == [(N - 1) * vector.nbytes // N] * N


def zero_ledger(param_bytes_per_shard):
    """Independent of the loops: in the reduce-scatter worker r sends every chunk but its own and receives every
    chunk but its left neighbour's; in the all-gather as in gather_bytes."""
    N, total = len(param_bytes_per_shard), sum(param_bytes_per_shard)
    b = param_bytes_per_shard
    return {"bytes_sent": [2 * total - b[r] - b[(r + 1) % N] for r in range(N)],
            "bytes_received": [2 * total - b[(r - 1) % N] - b[r] for r in range(N)],
            "messages_sent": [2 * (N - 1)] * N, "messages_received": [2 * (N - 1)] * N, "rounds": 2 * (N - 1)}


@pytest.mark.lesson_035
@pytest.mark.parametrize("widths", [[5, 7, 3], [4, 6, 6, 1], [3, 4, 2]])   # 66, 79 and 26 parameters
@pytest.mark.parametrize("N", [1, 2, 3, 4, 8])
def test_twenty_five_zero_steps_are_plain_adam_with_the_all_reduces_traffic(widths, N):
    params0 = mlp.init_params(widths, seed=6)
    psi = sum(p.size for p in params0.values())
    rng = np.random.default_rng(N)
    single, single_state = params0, {"step": 0, "m": {k: np.zeros_like(p) for k, p in params0.items()},
                                     "v": {k: np.zeros_like(p) for k, p in params0.items()}}
    replica, states = params0, partition(init(params0), N)
    shard_bytes = [8 * len(c) for c in np.array_split(np.zeros(psi), N)]
    for _ in range(25):
        worker_grads = [{k: rng.standard_normal(p.shape) for k, p in params0.items()} for _ in range(N)]
        mean = {k: sum(g[k] for g in worker_grads) / N for k in params0}
        single, single_state = plain_adam(single, mean, single_state, 0.01)
        replicas, states, traffic = zero(replica, worker_grads, states, 0.01)
        assert traffic == zero_ledger(shard_bytes)
        if psi % N == 0:
            assert traffic["bytes_sent"] == [2 * (N - 1) * 8 * psi // N] * N
            _, ring = ring_all_reduce_mean([flat(g) for g in worker_grads])
            assert traffic == ring                                   # ZeRO-1 costs what data parallelism costs
        for r, mine in enumerate(replicas):
            assert list(mine) == list(params0)
            for key in params0:
                assert np.array_equal(mine[key], replicas[0][key])   # bitwise the same replicas
                assert not any(np.shares_memory(mine[key], other[key]) for other in replicas[:r])
        assert [s["m"].nbytes + s["v"].nbytes for s in states] == [2 * b for b in shard_bytes]  # 1/N of the state
        assert all(s["step"] == single_state["step"] for s in states)
        replica = replicas[-1]
    for key in params0:
        np.testing.assert_allclose(replica[key], single[key], rtol=1e-12, atol=1e-14)
    for moment in ("m", "v"):
        np.testing.assert_allclose(np.concatenate([s[moment] for s in states]), flat(single_state[moment]),
                                   rtol=1e-12, atol=1e-14)


@pytest.mark.lesson_035
def test_a_trained_mlp_comes_out_the_same_on_one_or_many_workers():
    rng = np.random.default_rng(9)
    X, Y = rng.standard_normal((45, 6)), rng.standard_normal((45, 2))
    params0 = mlp.init_params([6, 11, 7, 2], seed=8)     # 175 parameters: 2, 4 and 8 do not divide it
    single, single_state = params0, init(params0)
    for _ in range(20):
        _, grads = mlp.loss_and_grads(X, Y, single)
        single, single_state = plain_adam(single, grads, single_state, 3e-3)
    for N in (2, 4, 8):
        replica, states = params0, partition(init(params0), N)
        for _ in range(20):
            worker_grads = []
            for r in range(N):
                _, g = mlp.loss_and_grads(X[r::N], Y[r::N], replica)
                worker_grads.append({k: N * len(X[r::N]) / len(X) * v for k, v in g.items()})
            replicas, states, _ = zero(replica, worker_grads, states, 3e-3)
            replica = replicas[0]
        for key in params0:
            np.testing.assert_allclose(replica[key], single[key], rtol=1e-10, atol=1e-12)


@pytest.mark.lesson_035
@pytest.mark.parametrize("N", [2, 4, 8])
def test_after_the_step_each_worker_keeps_its_parameters_and_its_shard_of_the_state(N):
    params = mlp.init_params([64, 96, 64], seed=1)
    P = sum(p.nbytes for p in params.values())
    rng = np.random.default_rng(N)
    grads = [{k: rng.standard_normal(p.shape) for k, p in params.items()} for _ in range(N)]
    measured = measure_peak_memory(zero, params, grads, partition(init(params), N), 1e-3)
    assert abs(measured.retained_bytes - (N + 2) * P) < 0.02 * (N + 2) * P
    assert measured.retained_bytes <= zero_step_allowed_bytes(params, N)


@pytest.mark.lesson_035
def test_one_worker_sends_nothing_and_new_arrays_come_back():
    params = mlp.init_params([3, 2], seed=0)
    grads = [{k: np.ones_like(p) for k, p in params.items()}]
    replicas, states, traffic = zero(params, grads, partition(init(params), 1), 0.1)
    assert traffic == {"bytes_sent": [0], "bytes_received": [0], "messages_sent": [0], "messages_received": [0],
                       "rounds": 0}
    assert not any(np.shares_memory(replicas[0][k], params[k]) for k in params)
    np.testing.assert_allclose(replicas[0]["W1"], params["W1"] - 0.1 / (1 + 1e-8), rtol=1e-12)


def test_the_part_summary_memory_table_is_what_the_arrays_say():
    master = (ROOT / "autograde" / "parts" / "06_zero_sharding" / "master.py").read_text()
    rows = re.findall(r"^# \| (\d) \| ([\d,]+) \| ([\d,]+) \| ([\d,]+) \| ([\d,]+) \| ([\d,]+) \| ([\d,]+) \| ([\d,]+) \|$",
                      master, re.MULTILINE)
    assert [int(row[0]) for row in rows] == [1, 2, 4, 8]
    params = mlp.init_params([64, 256, 256, 64], seed=0)
    S = sum(p.nbytes for p in params.values())
    state = init(params)
    for row in rows:
        N, parameters, gradients, kept, total, stage1, stage2, stage3 = (int(x.replace(",", "")) for x in row)
        shards = partition(state, N)
        assert parameters == gradients == S
        assert kept == shards[0]["m"].nbytes + shards[0]["v"].nbytes == 2 * S // N
        assert total == stage1 == 2 * S + 2 * S // N
        assert stage2 == S + 3 * S // N and stage3 == 4 * S // N


def test_the_zero_papers_figures():
    """Reference A.3: 7.5 billion parameters on 64 devices with 16 bytes per parameter (K = 12)."""
    psi, N, K = 7.5e9, 64, 12
    assert (4 + K) * psi == 120e9
    assert 4 * psi + K * psi / N == 31.40625e9
    assert 2 * psi + (2 + K) * psi / N == 16.640625e9
    assert (4 + K) * psi / N == 1.875e9
    master = (ROOT / "autograde" / "parts" / "06_zero_sharding" / "master.py").read_text()
    assert "assert paper == {0: 120e9, 1: 31.40625e9, 2: 16.640625e9, 3: 1.875e9}" in master


def test_every_lesson_of_the_part_is_in_the_reference():
    assert [find_lesson(name).code for name in REF] == ["031", "032", "033", "034", "035"]
