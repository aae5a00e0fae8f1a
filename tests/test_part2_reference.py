"""Part 2's reference solutions against independent oracles, and the memory they save.

Accumulation must give the full-batch step (float64, rtol 1e-12), also for
batches that do not divide evenly; the measured activation memory of a step
must agree with the prediction within 10%.
"""

from types import SimpleNamespace

import numpy as np
import pytest

from grading.judge import reference_function
from shared import mlp
from shared.lessons import lessons_of
from shared.memory import accumulation_activation_bytes, measure_peak_memory


def reference(slug):
    """The part's reference solutions (solutions/NN_slug.py), as the judge loads them."""
    return SimpleNamespace(**{lesson.function: reference_function(lesson) for lesson in lessons_of(slug)})


pytestmark = pytest.mark.part_2
REF = reference("02_gradient_accumulation")
CASES = [(10, 4), (10, 3), (7, 7), (12, 4), (5, 1), (9, 2), (16, 5)]


@pytest.mark.lesson_011
@pytest.mark.parametrize("B, k", CASES)
def test_split_sizes_order_and_views(B, k):
    X, Y = np.arange(B * 3.0).reshape(B, 3), np.arange(B * 2.0).reshape(B, 2)
    pieces = REF.split_into_micro_batches(X, Y, k)
    sizes = [len(Xj) for Xj, _ in pieces]
    assert sizes == [B // k + 1] * (B % k) + [B // k] * (k - B % k)
    assert np.array_equal(np.concatenate([Xj for Xj, _ in pieces]), X)
    assert np.array_equal(np.concatenate([Yj for _, Yj in pieces]), Y)
    assert all(np.shares_memory(Xj, X) for Xj, _ in pieces)  # views, no copies


@pytest.mark.lesson_011
@pytest.mark.parametrize("X_rows, Y_rows, k, words", [
    (3, 3, 4, "cannot split a batch of 3 examples into 4"),
    (5, 5, 0, "positive integer"), (5, 5, -1, "positive integer"), (5, 5, 2.5, "positive integer"),
    (5, 4, 2, "X has 5 rows but Y has 4"),
])
def test_split_rejects_bad_requests_with_a_clear_message(X_rows, Y_rows, k, words):
    with pytest.raises(ValueError, match=words):
        REF.split_into_micro_batches(np.zeros((X_rows, 2)), np.zeros((Y_rows, 1)), k)


@pytest.mark.lesson_012
def test_accumulate_is_a_weighted_sum_without_aliasing():
    rng = np.random.default_rng(0)
    grads = [{"W": rng.standard_normal((3, 2)), "b": rng.standard_normal(2)} for _ in range(3)]
    sizes = [4, 1, 2]
    copies = [{k: v.copy() for k, v in g.items()} for g in grads]
    acc = None
    for g, n in zip(grads, sizes):
        previous = acc
        acc = REF.accumulate_gradients(acc, g, n)
        assert all(not np.shares_memory(acc[k], g[k]) for k in g)
        assert previous is None or all(not np.shares_memory(acc[k], previous[k]) for k in g)
    for key in ("W", "b"):
        np.testing.assert_allclose(acc[key], sum(n * g[key] for g, n in zip(grads, sizes)), rtol=1e-14)
    assert all(np.array_equal(g[k], c[k]) for g, c in zip(grads, copies) for k in g)


@pytest.mark.lesson_013
def test_scale_divides_by_the_number_of_examples():
    acc = {"W": np.array([6.0, 3.0])}
    assert REF.scale_accumulated_gradients(acc, [3, 1])["W"].tolist() == [1.5, 0.75]
    with pytest.raises(ValueError):
        REF.scale_accumulated_gradients(acc, [])
    with pytest.raises(ValueError):
        REF.scale_accumulated_gradients(acc, [2, 0])


def full_batch_step(params, X, Y, lr):
    loss, grads = mlp.loss_and_grads(X, Y, params)
    return mlp.sgd_update(params, grads, lr), loss


@pytest.mark.lesson_014
@pytest.mark.parametrize("B, k", CASES)
@pytest.mark.parametrize("sizes", [[4, 5, 2], [3, 6, 6, 6, 1]])
def test_accumulated_step_equals_the_full_batch_step(B, k, sizes):
    rng = np.random.default_rng(B * 10 + k)
    params = mlp.init_params(sizes, seed=k)
    X, Y = rng.standard_normal((B, sizes[0])), rng.standard_normal((B, sizes[-1]))
    new, loss = REF.grad_accumulation_step(params, X, Y, k, 0.1)
    full, full_loss = full_batch_step(params, X, Y, 0.1)
    assert loss == pytest.approx(full_loss, rel=1e-12)
    for key in params:
        np.testing.assert_allclose(new[key], full[key], rtol=1e-12, atol=0)
        # the update itself (not only the new parameters) matches too
        np.testing.assert_allclose(params[key] - new[key], params[key] - full[key], rtol=1e-9, atol=1e-16)


@pytest.mark.lesson_014
def test_mean_of_means_is_right_only_for_equal_micro_batches():
    """REFERENCE F22: (1/k) sum of micro-means equals the full mean only if every n_j = B/k."""
    rng = np.random.default_rng(1)
    params = mlp.init_params([3, 4, 2], seed=0)
    for B, k, equal in ((12, 4, True), (10, 4, False)):
        X, Y = rng.standard_normal((B, 3)), rng.standard_normal((B, 2))
        pieces = REF.split_into_micro_batches(X, Y, k)
        mean_of_means = {key: sum(mlp.loss_and_grads(Xj, Yj, params)[1][key] for Xj, Yj in pieces) / k
                         for key in params}
        _, full = mlp.loss_and_grads(X, Y, params)
        same = all(np.allclose(mean_of_means[key], full[key], rtol=1e-12) for key in params)
        assert same == equal


@pytest.mark.lesson_014
def test_accumulation_does_not_mutate_params():
    params = mlp.init_params([2, 3, 1], seed=0)
    before = {k: v.copy() for k, v in params.items()}
    REF.grad_accumulation_step(params, np.ones((5, 2)), np.ones((5, 1)), 2, 0.1)
    assert all(np.array_equal(before[k], params[k]) for k in params)


@pytest.mark.lesson_014
def test_measured_activation_memory_agrees_with_the_prediction():
    """(peak_k - C) agrees with A(ceil(B/k)) within 10%, and falls monotonically with k."""
    B, D, L = 4096, 64, 6
    rng = np.random.default_rng(0)
    params = mlp.init_params([D] * L + [1], seed=0)
    X, Y = rng.standard_normal((B, D)), rng.standard_normal((B, 1))
    C = measure_peak_memory(REF.grad_accumulation_step, params, X[:1], Y[:1], 1, 0.1).peak_bytes
    activations = []
    for k in (1, 2, 4, 8, 16):
        peak = measure_peak_memory(REF.grad_accumulation_step, params, X, Y, k, 0.1).peak_bytes
        predicted = accumulation_activation_bytes(B, D, L, k)
        assert abs((peak - C) / predicted - 1) < 0.10, (k, peak - C, predicted)
        activations.append(peak - C)
    assert activations == sorted(activations, reverse=True)
