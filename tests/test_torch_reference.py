"""The reference solutions against PyTorch, in this process: autograd, checkpoint, GradScaler, Adam.

Seeded random cases, float64 unless the lesson is about precision:

- Part 1: the two-layer MLP's forward (003-005), loss (006) and every gradient
  (007-010: dY_hat, dA1, dZ1, dW1, db1, dW2, db2) against torch autograd, with a
  ReLU input exactly 0 (where both take the derivative to be 0);
- Part 3: the checkpointed forward and backward (015-017) of MLPs of 3 to 6 layers,
  every segment size, against ``torch.utils.checkpoint`` (use_reentrant=False): the
  same output and gradients, and the same recomputation (each segment once);
- Part 4: ``mixed_precision_step`` (024) against ``torch.amp.GradScaler`` and SGD fed
  the same float16 gradients, overflowing ones included (a start scale too large, and
  batches that overflow float16): the same scaled loss (021), unscaled gradients (022),
  skipped steps (023), loss-scale and growth-tracker trajectory, for growth_interval
  1 and 3, GradScaler built with the lesson's growth_interval (and, built without
  arguments, GradScaler's default growth_interval is the lesson's, 2000);
- Part 6: ``zero_optimizer_step`` (035, and so 033) on 1 to 4 simulated workers against
  ``torch.optim.Adam`` on the mean gradient, step by step.

Without torch the module skips, saying how to install it (``make torch``).
"""

from types import SimpleNamespace

import numpy as np
import pytest

from torch_extra.real_cluster import MISSING_TORCH

torch = pytest.importorskip("torch", reason=MISSING_TORCH)
from torch.utils.checkpoint import checkpoint  # noqa: E402

from grading.judge import reference_function  # noqa: E402
from shared import mlp  # noqa: E402
from shared.lessons import lessons_of  # noqa: E402


def reference(slug):
    return SimpleNamespace(**{lesson.function: reference_function(lesson) for lesson in lessons_of(slug)})


def tensor(array, grad=False):
    return torch.tensor(array, requires_grad=grad)


def close(got, expected, rtol=1e-12, atol=1e-14, what=""):
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol, err_msg=what)


# --------------------------------------------------------------------------
# Part 1: forward, loss and every gradient against autograd
# --------------------------------------------------------------------------

MLP_CASES = [(1, 1, 1, 1), (4, 3, 5, 2), (8, 6, 7, 3), (16, 10, 20, 4)]  # (batch, in, hidden, out)


@pytest.mark.part_1
@pytest.mark.lesson_003
@pytest.mark.lesson_004
@pytest.mark.lesson_005
@pytest.mark.lesson_006
@pytest.mark.lesson_007
@pytest.mark.lesson_008
@pytest.mark.lesson_009
@pytest.mark.lesson_010
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("B, F, H, O", MLP_CASES)
def test_the_mlp_forward_loss_and_every_gradient_equal_autograd(B, F, H, O, seed):
    ref = reference("01_mlp_core")
    X, Y = ref.make_synthetic_regression_batch(B, F, O, seed)
    params = ref.init_mlp_params(F, H, O, seed + 100)
    params["b1"] = np.random.default_rng(seed).standard_normal(H)
    X[0] = 0.0
    params["b1"][0] = 0.0  # row 0, unit 0: the ReLU's input is exactly 0

    Y_hat, cache = ref.mlp_forward(X, params)
    loss, dY_hat = ref.mse_loss_and_grad(Y_hat, Y)
    dA1, dW2, db2 = ref.linear_backward(dY_hat, cache["A1"], params["W2"])
    dZ1 = ref.relu_backward(dA1, cache["Z1"])
    grads = ref.mlp_backward(dY_hat, params, cache)

    P = {key: tensor(value, grad=True) for key, value in params.items()}
    Z1 = tensor(X) @ P["W1"] + P["b1"]
    A1 = torch.relu(Z1)
    out = A1 @ P["W2"] + P["b2"]
    for intermediate in (Z1, A1, out):
        intermediate.retain_grad()
    torch_loss = torch.mean((out - tensor(Y)) ** 2)
    torch_loss.backward()

    assert cache["Z1"][0, 0] == 0.0 and Z1.grad[0, 0] == 0.0
    close(cache["Z1"], Z1.detach(), what="Z1 (003)")
    close(cache["A1"], A1.detach(), what="A1 (004)")
    close(Y_hat, out.detach(), what="Y_hat (005)")
    assert isinstance(loss, float) and loss == pytest.approx(torch_loss.item(), rel=1e-14)
    close(dY_hat, out.grad, what="dY_hat (006)")
    close(dA1, A1.grad, what="dA1 (007)")
    close(dZ1, Z1.grad, what="dZ1 (008)")
    close(dW2, P["W2"].grad, what="dW2 (007)")
    close(db2, P["b2"].grad, what="db2 (007)")
    for key in params:
        close(grads[key], P[key].grad, what=f"{key} (009, 010)")


# --------------------------------------------------------------------------
# Part 3: checkpointing against torch.utils.checkpoint
# --------------------------------------------------------------------------

@pytest.mark.part_3
@pytest.mark.lesson_015
@pytest.mark.lesson_016
@pytest.mark.lesson_017
@pytest.mark.parametrize("L", [3, 5, 6])
def test_checkpointed_backward_equals_torch_checkpoint(L, monkeypatch):
    ref = reference("03_activation_checkpointing")
    namespace = ref.mlp_backward_checkpointed.__globals__  # the reference module's, where 017 finds 016
    width, rng = 5, np.random.default_rng(L)
    params = mlp.init_params([width] * L + [2], seed=L)
    X, Y = rng.standard_normal((7, width)), rng.standard_normal((7, 2))

    recomputed = []
    recompute = namespace["recompute_block_activations"]

    def counting(checkpoint_, p, start, end):
        recomputed.append(start)
        return recompute(checkpoint_, p, start, end)
    monkeypatch.setitem(namespace, "recompute_block_activations", counting)

    for s in range(1, L + 1):
        out, checkpoints = ref.mlp_forward_checkpointed(X, params, s)
        _, d_out = mlp.mse_loss_and_grad(out, Y)
        recomputed.clear()
        grads = ref.mlp_backward_checkpointed(d_out, params, checkpoints, s)

        P = {key: tensor(value, grad=True) for key, value in params.items()}
        calls = {}

        def segment(a, start):
            calls[start] = calls.get(start, 0) + 1
            for i in range(start + 1, min(start + s, L) + 1):
                a = a @ P[f"W{i}"] + P[f"b{i}"]
                if i < L:
                    a = torch.relu(a)
            return a

        a = tensor(X)
        for start in range(0, L, s):
            a = checkpoint(segment, a, start, use_reentrant=False)
        torch.mean((a - tensor(Y)) ** 2).backward()

        close(out, a.detach(), what=f"output, segment size {s}")
        for key in params:
            close(grads[key], P[key].grad, what=f"{key}, segment size {s}")
        # The same technique: the segments start at the same layers, and each one is recomputed
        # once in the backward pass (torch runs it twice: forward, then recomputation).
        assert sorted(checkpoints) == sorted(calls) == list(range(0, L, s))
        assert all(count == 2 for count in calls.values()), calls
        assert sorted(recomputed) == sorted(calls), (recomputed, s)


# --------------------------------------------------------------------------
# Part 4: the loss scale against torch.amp.GradScaler
# --------------------------------------------------------------------------

def overflowing(X):
    """A batch whose float16 forward pass overflows (a value beyond 65504)."""
    X = X.copy()
    X[0, 0] = 1e5
    return X


@pytest.mark.part_4
@pytest.mark.lesson_021
@pytest.mark.lesson_022
@pytest.mark.lesson_023
@pytest.mark.lesson_024
@pytest.mark.parametrize("growth_interval, steps", [(1, 24), (3, 30)])
def test_the_loss_scale_follows_torch_grad_scaler(growth_interval, steps):
    ref = reference("04_mixed_precision")
    rng = np.random.default_rng(growth_interval)
    master = ref.make_master_params(mlp.init_params([4, 16, 16, 2], seed=growth_interval))
    X0, Y0 = rng.standard_normal((8, 4)), rng.standard_normal((8, 2))
    poisoned = set(rng.choice(np.arange(4, steps), size=4, replace=False).tolist())
    start_scale = 2.0**24  # too large: the first steps overflow until the scale has backed off enough
    state = {"scale": start_scale, "growth_tracker": 0}
    learning_rate = 0.01

    P = {key: torch.tensor(value) for key, value in master.items()}  # float32, like the master weights
    optimizer = torch.optim.SGD(list(P.values()), lr=learning_rate)
    scaler = torch.amp.GradScaler("cpu", init_scale=start_scale, growth_factor=2.0, backoff_factor=0.5,
                                  growth_interval=growth_interval)
    trajectory = []
    for step in range(steps):
        X = overflowing(X0) if step in poisoned else X0
        # The float16 gradients of the scaled loss, as 024's step computes them (019, 021, helper MLP).
        with np.errstate(over="ignore", invalid="ignore"):
            half = ref.cast_to_half_precision(master)
            out, cache = mlp.forward(X.astype(np.float16), half)
            loss, d_out = mlp.mse_loss_and_grad(out.astype(np.float32), Y0.astype(np.float32))
            scaled_loss, scaled_d_out = ref.scale_loss(loss, d_out, state["scale"])
            half_grads = mlp.backward(scaled_d_out, half, cache)
        new_master, new_state, skipped = ref.mixed_precision_step(master, X, Y0, state, learning_rate,
                                                                  growth_interval=growth_interval)

        # GradScaler, fed the same gradients: scale, unscale_, step (skipped on inf/NaN), update.
        torch_scaled_loss = scaler.scale(torch.tensor(loss, dtype=torch.float64)).item()
        assert torch_scaled_loss == scaled_loss or np.isnan(torch_scaled_loss) and np.isnan(scaled_loss)  # 021
        for key, p in P.items():
            p.grad = torch.from_numpy(half_grads[key].astype(np.float32))
        before = {key: p.detach().clone() for key, p in P.items()}
        scaler.unscale_(optimizer)
        unscaled = ref.unscale_gradients(half_grads, state["scale"])
        for key, p in P.items():
            assert np.array_equal(unscaled[key], p.grad.numpy(), equal_nan=True), (step, key)  # 022
        assert ref.has_non_finite_gradients(unscaled) == skipped  # 023
        scaler.step(optimizer)
        scaler.update()
        torch_skipped = all(torch.equal(before[key], p.detach()) for key, p in P.items())

        assert skipped == torch_skipped, step
        assert new_state["scale"] == scaler.get_scale(), step
        assert new_state["growth_tracker"] == scaler.state_dict()["_growth_tracker"], step
        for key, p in P.items():
            close(new_master[key], p.detach().numpy(), rtol=1e-6, atol=1e-7, what=f"{key}, step {step}")
            with torch.no_grad():
                p.copy_(torch.from_numpy(new_master[key]))  # the next step starts from the same weights
        trajectory.append((new_state["scale"], skipped))
        master, state = new_master, new_state

    scales = [start_scale] + [scale for scale, _ in trajectory]
    # Every rule was exercised: a skipped step halves the scale, a clean run of growth_interval doubles it.
    assert any(skipped for _, skipped in trajectory) and not all(skipped for _, skipped in trajectory)
    assert any(later == 2 * earlier for earlier, later in zip(scales, scales[1:]))
    assert all(trajectory[step][1] for step in poisoned)


@pytest.mark.part_4
@pytest.mark.lesson_024
def test_the_lesson_s_default_growth_interval_is_grad_scaler_s():
    """Built without arguments, GradScaler grows the scale after the lesson's default number of clean
    steps (the trajectory test above passes the lesson's growth_interval to GradScaler explicitly)."""
    import inspect
    step = reference("04_mixed_precision").mixed_precision_step
    default = inspect.signature(step).parameters["growth_interval"].default
    scaler = torch.amp.GradScaler("cpu")
    assert default == scaler.get_growth_interval() == 2000
    assert (scaler.get_growth_factor(), scaler.get_backoff_factor()) == (2.0, 0.5)


# --------------------------------------------------------------------------
# Part 6: ZeRO's sharded Adam against torch.optim.Adam
# --------------------------------------------------------------------------

@pytest.mark.part_6
@pytest.mark.lesson_033
@pytest.mark.lesson_035
@pytest.mark.parametrize("N", [1, 2, 3, 4])
def test_the_zero_step_equals_torch_adam(N):
    ref = reference("06_zero_sharding")
    rng = np.random.default_rng(N)
    params = mlp.init_params([5, 7, 3], seed=N)  # 68 elements: 3 and 4 workers do not divide them
    states = ref.partition_optimizer_state(ref.init_adam_state(params), N)
    learning_rate, betas, eps = 0.01, (0.9, 0.999), 1e-8
    P = {key: torch.tensor(value, requires_grad=True) for key, value in params.items()}
    adam = torch.optim.Adam(list(P.values()), lr=learning_rate, betas=betas, eps=eps)
    for step in range(10):
        worker_grads = [{key: rng.standard_normal(value.shape) * (step + 1) for key, value in params.items()}
                        for _ in range(N)]
        worker_params, states, _ = ref.zero_optimizer_step(params, worker_grads, states, learning_rate,
                                                           *betas, eps)
        for key, p in P.items():
            p.grad = torch.from_numpy(sum(grads[key] for grads in worker_grads) / N)
        adam.step()
        for rank in range(N):
            for key, p in P.items():
                close(worker_params[rank][key], p.detach().numpy(), rtol=1e-12, atol=1e-15,
                      what=f"{key}, step {step}, worker {rank}")
        params = worker_params[0]
