"""Part 3's reference solutions: checkpointing stores less and changes nothing.

Checkpointed gradients are bitwise equal to the standard ones for every
segment size; recompute reproduces the forward's arrays exactly; the measured
activation memory agrees with lesson 018's prediction within 10%.
"""

import math
from types import SimpleNamespace

import numpy as np
import pytest

from grading.judge import reference_function
from shared import mlp
from shared.lessons import lessons_of
from shared.memory import measure_peak_memory, mlp_activation_bytes


def reference(slug):
    """The part's reference solutions (solutions/NN_slug.py), as the judge loads them."""
    return SimpleNamespace(**{lesson.function: reference_function(lesson) for lesson in lessons_of(slug)})


pytestmark = pytest.mark.part_3
REF = reference("03_activation_checkpointing")
NETWORKS = [(2, 3), (5, 4), (7, 3), (12, 2)]  # (layers, width)


def network(L, D, seed=0, batch=6, out=2):
    rng = np.random.default_rng(seed)
    params = mlp.init_params([D] * L + [out], seed=seed)
    return params, rng.standard_normal((batch, D)), rng.standard_normal((batch, out))


@pytest.mark.lesson_015
@pytest.mark.parametrize("L, D", NETWORKS)
def test_forward_keeps_only_segment_inputs_and_gives_the_same_output(L, D):
    params, X, _ = network(L, D)
    out, cache = mlp.forward(X, params)
    for s in range(1, L + 2):
        out_s, checkpoints = REF.mlp_forward_checkpointed(X, params, s)
        assert np.array_equal(out_s, out)
        assert sorted(checkpoints) == list(range(0, L, s))
        assert len(checkpoints) == math.ceil(L / s)
        assert checkpoints[0] is X
        for i, a in checkpoints.items():
            assert np.array_equal(a, cache[f"A{i}"])


@pytest.mark.lesson_016
@pytest.mark.parametrize("L, D", NETWORKS)
def test_recompute_reproduces_the_forward_bit_for_bit(L, D):
    params, X, _ = network(L, D, seed=1)
    _, cache = mlp.forward(X, params)
    for start in range(L):
        for end in range(start + 1, L + 1):
            recomputed = REF.recompute_block_activations(cache[f"A{start}"], params, start, end)
            expected = [f"A{start}"] + [f"{p}{i}" for i in range(start + 1, min(end, L - 1) + 1) for p in "ZA"]
            assert sorted(recomputed) == sorted(expected)
            assert all(np.array_equal(recomputed[k], cache[k]) for k in recomputed)


@pytest.mark.lesson_017
@pytest.mark.parametrize("L, D", NETWORKS)
def test_checkpointed_gradients_are_bitwise_the_standard_ones(L, D):
    params, X, Y = network(L, D, seed=2)
    out, cache = mlp.forward(X, params)
    _, d_out = mlp.mse_loss_and_grad(out, Y)
    standard = mlp.backward(d_out, params, cache)
    for s in range(1, L + 2):
        _, checkpoints = REF.mlp_forward_checkpointed(X, params, s)
        grads = REF.mlp_backward_checkpointed(d_out, params, checkpoints, s)
        assert grads.keys() == standard.keys()
        assert all(np.array_equal(grads[k], standard[k]) for k in standard), s


def counted_arrays(L, s):
    """An independent count: (batch, width) arrays alive at each moment of backward, maximised."""
    checkpoints = len(range(0, L, s)) - 1           # X is the caller's
    alive = []
    for start in range(0, L, s):
        hidden = [i for i in range(start + 1, min(start + s, L) + 1) if i < L]
        alive.append(checkpoints + 2 * len(hidden))
    return max(alive)


@pytest.mark.lesson_018
@pytest.mark.parametrize("L", [2, 3, 5, 8, 16, 33])
def test_estimate_counts_what_is_alive_at_the_peak(L):
    B, D = 7, 5
    for s in range(1, L + 2):
        estimate = REF.estimate_checkpointing_memory_savings(B, D, L, s)
        assert estimate["standard_bytes"] == mlp_activation_bytes(B, D, L)
        working = mlp_activation_bytes(B, D, L) - 2 * (L - 1) * B * D * 8
        assert estimate["checkpointed_bytes"] == counted_arrays(L, s) * B * D * 8 + working
        assert estimate["saved_fraction"] == pytest.approx(
            1 - estimate["checkpointed_bytes"] / estimate["standard_bytes"])
    with pytest.raises(ValueError):
        REF.estimate_checkpointing_memory_savings(B, D, L, 0)


def checkpointed_step(X, Y, params, s):
    out, checkpoints = REF.mlp_forward_checkpointed(X, params, s)
    _, d_out = mlp.mse_loss_and_grad(out, Y)
    return REF.mlp_backward_checkpointed(d_out, params, checkpoints, s)


def measured_activation_bytes(function, *args):
    measured = measure_peak_memory(function, *args)
    grads = measured.result if isinstance(measured.result, dict) else measured.result[1]
    return measured.peak_bytes - sum(g.nbytes for g in grads.values())


@pytest.mark.lesson_018
@pytest.mark.parametrize("L", [4, 8, 16])
def test_measured_memory_agrees_with_the_estimate_and_is_smallest_near_sqrt_L(L):
    B, D = 2048, 64
    params, X, Y = network(L, D, batch=B, out=1)
    standard = measured_activation_bytes(mlp.loss_and_grads, X, Y, params)
    predicted = REF.estimate_checkpointing_memory_savings(B, D, L, 1)["standard_bytes"]
    assert abs(standard / predicted - 1) < 0.10
    by_size = {}
    for s in range(1, L + 1):
        by_size[s] = measured_activation_bytes(checkpointed_step, X, Y, params, s)
        predicted = REF.estimate_checkpointing_memory_savings(B, D, L, s)["checkpointed_bytes"]
        assert abs(by_size[s] / predicted - 1) < 0.10, (s, by_size[s], predicted)
    best = min(by_size.values())
    near_sqrt = min(by_size[s] for s in {max(1, math.floor(math.sqrt(L))), math.ceil(math.sqrt(L))})
    assert near_sqrt <= best * 1.05
    assert best < standard
