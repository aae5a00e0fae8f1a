"""Part 1's reference solutions against independent oracles.

Gradients are checked with central finite differences in float64 (relative
error < 1e-6); the two-layer functions are checked against the helper
package's MLP of any depth, which is written independently.
"""

from types import SimpleNamespace

import numpy as np
import pytest

from grading.judge import reference_function
from shared import data, mlp
from shared.lessons import lessons_of


def reference(slug):
    """The part's reference solutions (solutions/NN_slug.py), as the judge loads them."""
    return SimpleNamespace(**{lesson.function: reference_function(lesson) for lesson in lessons_of(slug)})


pytestmark = pytest.mark.part_1
REF = reference("01_mlp_core")
SEEDS = [0, 1, 2, 3, 4]


def relative_error(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return np.max(np.abs(a - b) / np.maximum(1e-8, np.abs(a) + np.abs(b)))


def numeric_gradient(f, x, eps=1e-6):
    """Central differences of the scalar function f at x (float64)."""
    grad = np.zeros_like(x)
    for index in np.ndindex(x.shape):
        step = np.zeros_like(x)
        step[index] = eps
        grad[index] = (f(x + step) - f(x - step)) / (2 * eps)
    return grad


def random_params(rng, d, h, m):
    return {"W1": rng.standard_normal((d, h)), "b1": rng.standard_normal(h),
            "W2": rng.standard_normal((h, m)), "b2": rng.standard_normal(m)}


@pytest.mark.lesson_001
@pytest.mark.parametrize("seed", SEEDS)
def test_batch_is_the_recipe_written_out(seed):
    """The reference (and shared.data's make_regression_batch, generated from it) against the recipe
    written out here: X, then W_true, from one generator."""
    X, Y = REF.make_synthetic_regression_batch(7, 4, 3, seed)
    rng = np.random.default_rng(seed)
    X2 = rng.standard_normal((7, 4))
    Y2 = np.sin(X2 @ (rng.standard_normal((4, 3)) / 2.0))
    assert np.array_equal(X, X2) and np.array_equal(Y, Y2)
    assert X.dtype == Y.dtype == np.float64 and np.all(np.abs(Y) <= 1)


@pytest.mark.lesson_001
def test_the_helper_batch_is_lesson_001s_function_generated_from_its_master():
    from shared import lesson_blocks
    assert data.make_regression_batch is lesson_blocks.make_synthetic_regression_batch


@pytest.mark.lesson_001
@pytest.mark.parametrize("bad", [0, -3, 2.5, 3.0, np.float64(3.0), True, np.bool_(True)])
@pytest.mark.parametrize("position", range(3))
def test_batch_rejects_bad_sizes(bad, position):
    sizes = [4, 3, 2]
    sizes[position] = bad
    with pytest.raises(ValueError, match="positive integer"):
        REF.make_synthetic_regression_batch(*sizes, 0)


@pytest.mark.lesson_001
def test_batch_takes_numpy_integer_sizes():
    X, Y = REF.make_synthetic_regression_batch(np.int32(4), np.int64(3), np.uint8(2), 0)
    assert np.array_equal(X, REF.make_synthetic_regression_batch(4, 3, 2, 0)[0]) and Y.shape == (4, 2)


@pytest.mark.lesson_002
@pytest.mark.parametrize("seed", SEEDS)
def test_init_matches_helper_and_he_scale(seed):
    params = REF.init_mlp_params(5, 6, 2, seed)
    helper = mlp.init_params([5, 6, 2], seed)
    assert params.keys() == helper.keys()
    for key in params:
        assert np.array_equal(params[key], helper[key]), key
    big = REF.init_mlp_params(500, 400, 1, seed)
    assert abs(big["W1"].std() / np.sqrt(2 / 500) - 1) < 0.01


@pytest.mark.lesson_003
@pytest.mark.lesson_004
@pytest.mark.lesson_005
@pytest.mark.parametrize("seed", SEEDS)
def test_forward_matches_helper_mlp(seed):
    rng = np.random.default_rng(seed)
    X, params = rng.standard_normal((6, 4)), random_params(rng, 4, 5, 3)
    out, cache = REF.mlp_forward(X, params)
    out2, cache2 = mlp.forward(X, params)
    np.testing.assert_allclose(out, out2, rtol=1e-13)
    assert cache.keys() == cache2.keys() == {"A0", "Z1", "A1"}
    # relu by its definition, entry by entry
    z = rng.standard_normal((3, 4))
    assert np.array_equal(REF.relu_forward(z), np.array([[v if v > 0 else 0.0 for v in row] for row in z]))


@pytest.mark.lesson_006
@pytest.mark.parametrize("seed", SEEDS)
def test_mse_gradient_is_the_finite_difference(seed):
    rng = np.random.default_rng(seed)
    Y_hat, Y = rng.standard_normal((5, 3)), rng.standard_normal((5, 3))
    loss, grad = REF.mse_loss_and_grad(Y_hat, Y)
    assert loss == pytest.approx(np.sum((Y_hat - Y) ** 2) / 15, rel=1e-14)
    numeric = numeric_gradient(lambda y: REF.mse_loss_and_grad(y, Y)[0], Y_hat)
    assert relative_error(grad, numeric) < 1e-6


@pytest.mark.lesson_007
@pytest.mark.parametrize("seed", SEEDS)
def test_linear_backward_is_the_finite_difference(seed):
    rng = np.random.default_rng(seed)
    x, W, b = rng.standard_normal((4, 3)), rng.standard_normal((3, 5)), rng.standard_normal(5)
    G = rng.standard_normal((4, 5))  # loss = sum(G * Z), so dL/dZ = G

    def loss(x_, W_, b_):
        return np.sum(G * REF.linear_forward(x_, W_, b_))

    dx, dW, db = REF.linear_backward(G, x, W)
    assert relative_error(dx, numeric_gradient(lambda v: loss(v, W, b), x)) < 1e-6
    assert relative_error(dW, numeric_gradient(lambda v: loss(x, v, b), W)) < 1e-6
    assert relative_error(db, numeric_gradient(lambda v: loss(x, W, v), b)) < 1e-6
    dW1, db1 = REF.first_linear_backward(G, x, W)
    assert np.array_equal(dW1, dW) and np.array_equal(db1, db)


@pytest.mark.lesson_008
@pytest.mark.parametrize("seed", SEEDS)
def test_relu_backward_is_the_finite_difference(seed):
    rng = np.random.default_rng(seed)
    Z = rng.standard_normal((4, 6))
    Z[np.abs(Z) < 1e-3] = 0.5  # keep away from the kink for finite differences
    G = rng.standard_normal((4, 6))
    numeric = numeric_gradient(lambda z: np.sum(G * REF.relu_forward(z)), Z)
    assert relative_error(REF.relu_backward(G, Z), numeric) < 1e-6
    # at exactly zero the course's convention is a zero gradient
    assert REF.relu_backward(np.ones(3), np.array([-1.0, 0.0, 1.0])).tolist() == [0.0, 0.0, 1.0]


@pytest.mark.lesson_010
@pytest.mark.parametrize("seed", SEEDS)
def test_mlp_backward_is_the_finite_difference(seed):
    rng = np.random.default_rng(seed)
    X, Y = rng.standard_normal((6, 3)), rng.standard_normal((6, 2))
    params = random_params(rng, 3, 5, 2)

    def loss_with(key, value):
        out, _ = REF.mlp_forward(X, {**params, key: value})
        return REF.mse_loss_and_grad(out, Y)[0]

    out, cache = REF.mlp_forward(X, params)
    grads = REF.mlp_backward(REF.mse_loss_and_grad(out, Y)[1], params, cache)
    assert grads.keys() == params.keys()
    for key in params:
        numeric = numeric_gradient(lambda v: loss_with(key, v), params[key])
        assert relative_error(grads[key], numeric) < 1e-6, key
    helper = mlp.backward(REF.mse_loss_and_grad(out, Y)[1], params, cache)
    for key in params:
        np.testing.assert_allclose(grads[key], helper[key], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("sizes", [[3, 4, 2], [3, 5, 4, 2], [2, 3, 3, 3, 1]])
def test_helper_mlp_of_any_depth_is_the_finite_difference(sizes):
    rng = np.random.default_rng(len(sizes))
    X, Y = rng.standard_normal((5, sizes[0])), rng.standard_normal((5, sizes[-1]))
    params = mlp.init_params(sizes, seed=3)
    params = {k: v + 0.1 * rng.standard_normal(v.shape) for k, v in params.items()}
    _, grads = mlp.loss_and_grads(X, Y, params)
    for key in params:
        numeric = numeric_gradient(
            lambda v: mlp.mse_loss_and_grad(mlp.forward(X, {**params, key: v})[0], Y)[0], params[key])
        assert relative_error(grads[key], numeric) < 1e-6, key


def test_reference_functions_do_not_mutate_inputs():
    rng = np.random.default_rng(9)
    X, Y = rng.standard_normal((4, 3)), rng.standard_normal((4, 2))
    params = random_params(rng, 3, 5, 2)
    before = {k: v.copy() for k, v in params.items()}, X.copy()
    out, cache = REF.mlp_forward(X, params)
    REF.mlp_backward(REF.mse_loss_and_grad(out, Y)[1], params, cache)
    REF.relu_forward(X)
    assert all(np.array_equal(before[0][k], params[k]) for k in params)
    assert np.array_equal(before[1], X)


def test_training_with_the_reference_lowers_the_loss():
    X, Y = REF.make_synthetic_regression_batch(128, 6, 2, 0)
    params = REF.init_mlp_params(6, 16, 2, 1)
    first = None
    for _ in range(200):
        out, cache = REF.mlp_forward(X, params)
        loss, d = REF.mse_loss_and_grad(out, Y)
        first = loss if first is None else first
        grads = REF.mlp_backward(d, params, cache)
        params = mlp.sgd_update(params, grads, 0.1)
    assert loss < 0.2 * first
