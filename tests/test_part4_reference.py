"""Part 4's reference solutions against independent facts and computations.

float16's range comes from the IEEE 754 binary16 format (max 65504, smallest
subnormal 2**-24, epsilon 2**-10); the cast is checked against Python's own
binary16 packing (``struct`` format ``"e"``); loss scaling, unscaling and the
non-finite check against plain Python arithmetic; the step against a float16
computation written out here, a model of PyTorch's GradScaler rules driven
through a scripted sequence of clean and overflowing steps, a float32 training
run, and its measured memory.
"""

from __future__ import annotations

import math
import struct
from types import SimpleNamespace

import numpy as np
import pytest

from grading.judge import reference_function
from shared import mlp
from shared.data import make_regression_batch
from shared.lessons import lessons_of
from shared.memory import measure_peak_memory, mixed_precision_activation_bytes, mixed_precision_memory_bound, \
    mlp_activation_bytes

pytestmark = pytest.mark.part_4
REF = SimpleNamespace(**{lesson.function: reference_function(lesson) for lesson in lessons_of("04_mixed_precision")})


def binary16(x: float) -> float:
    """The IEEE 754 half-precision number nearest to x (Python's struct), inf beyond the range."""
    try:
        return struct.unpack("<e", struct.pack("<e", x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


# --------------------------------------------------------------------------
# float16 facts
# --------------------------------------------------------------------------

def test_float16_facts():
    info = np.finfo(np.float16)
    assert float(info.max) == 65504.0 == binary16(65504.0)
    assert float(info.smallest_normal) == 2.0**-14
    assert float(info.smallest_subnormal) == 2.0**-24 == binary16(2.0**-24)
    assert float(info.eps) == 2.0**-10
    assert binary16(1e-8) == 0.0 and binary16(7e4) == math.inf
    assert binary16(65519.99) == 65504.0 and binary16(65520.0) == math.inf   # half a unit above max rounds to inf
    assert binary16(2.0**-25) == 0.0 and binary16(2.0**-25 * 1.001) == 2.0**-24  # ties to even at the bottom
    with np.errstate(over="ignore"):
        assert np.float16(2.0**16) == np.inf                                   # the default scale does not fit
    assert np.float16(1.0) + np.float16(1e-4) == np.float16(1.0)              # a lost update


# --------------------------------------------------------------------------
# 019, 020: the casts
# --------------------------------------------------------------------------

@pytest.mark.lesson_019
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
def test_cast_rounds_like_binary16_and_owns_its_memory(dtype):
    rng = np.random.default_rng(0)
    magnitudes = 2.0 ** rng.uniform(-30, 18, size=(40, 5))
    with np.errstate(over="ignore"):  # float16 inputs beyond 65504 are inf already
        values = (rng.choice([-1.0, 1.0], size=magnitudes.shape) * magnitudes).astype(dtype)
    params = {"W1": values, "b1": values[0].copy()}
    half = REF.cast_to_half_precision(params)
    assert list(half) == ["W1", "b1"]
    for key in params:
        assert half[key].dtype == np.float16 and half[key].flags.owndata
        assert not np.shares_memory(half[key], params[key])
        expected = [binary16(float(x)) for x in params[key].ravel()]
        assert half[key].ravel().astype(np.float64).tolist() == expected
    assert params["W1"].dtype == dtype  # the input is not touched


@pytest.mark.lesson_020
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
def test_master_params_are_float32_copies(dtype):
    params = {key: value.astype(dtype) for key, value in mlp.init_params([3, 4, 2], seed=1).items()}
    master = REF.make_master_params(params)
    for key, value in params.items():
        assert master[key].dtype == np.float32 and master[key].flags.owndata
        assert not np.shares_memory(master[key], value)
        assert np.array_equal(master[key], value.astype(np.float32))
        if dtype == np.float16:  # float16 -> float32 is exact
            assert np.array_equal(master[key].astype(np.float16), value)


@pytest.mark.lesson_019
@pytest.mark.lesson_020
@pytest.mark.parametrize("bad", [np.arange(3), np.array([True, False])])
def test_the_casts_refuse_non_float_arrays_and_name_the_key(bad):
    for function in (REF.cast_to_half_precision, REF.make_master_params):
        with pytest.raises(TypeError, match="'steps'"):
            function({"W1": np.ones((2, 2)), "steps": bad})


# --------------------------------------------------------------------------
# 021, 022, 023: scaling, unscaling, the check
# --------------------------------------------------------------------------

@pytest.mark.lesson_021
def test_scaling_is_the_product_rounded_once_to_float16():
    rng = np.random.default_rng(1)
    d_out = (rng.choice([-1.0, 1.0], size=(30, 3)) * 2.0 ** rng.uniform(-34, 2, size=(30, 3))).astype(np.float32)
    for scale in (65536.0, 2.0**10, 1000.0, 0.25):
        scaled_loss, scaled = REF.scale_loss(0.75, d_out, scale)
        assert type(scaled_loss) is float and scaled_loss == 0.75 * scale
        assert scaled.dtype == np.float16 and scaled.shape == d_out.shape
        expected = [binary16(float(x) * scale) for x in d_out.ravel()]  # float64 product: exact here
        assert scaled.ravel().astype(np.float64).tolist() == expected
    assert d_out.dtype == np.float32


@pytest.mark.lesson_021
def test_a_tiny_gradient_survives_float16_only_when_scaled():
    tiny = np.array([[1e-8]], dtype=np.float32)
    assert tiny.astype(np.float16)[0, 0] == 0
    _, scaled = REF.scale_loss(1.0, tiny, 2.0**16)
    assert scaled[0, 0] != 0
    assert REF.unscale_gradients({"g": scaled}, 2.0**16)["g"][0, 0] == pytest.approx(1e-8, rel=1e-3)


@pytest.mark.lesson_022
def test_unscaling_by_a_power_of_two_is_exact_in_float32():
    rng = np.random.default_rng(2)
    grads = {"W": (rng.standard_normal((5, 4)) * 2.0 ** rng.integers(-10, 15, size=(5, 4))).astype(np.float16),
             "b": np.array([np.inf, -np.inf, np.nan, 0.0], dtype=np.float16)}
    for k in (0, 5, 16, 24):
        unscaled = REF.unscale_gradients(grads, 2.0**k)
        assert all(value.dtype == np.float32 for value in unscaled.values())
        assert np.array_equal(unscaled["W"], np.ldexp(grads["W"].astype(np.float64), -k).astype(np.float32))
        assert np.array_equal(unscaled["b"], grads["b"].astype(np.float32), equal_nan=True)
    odd = REF.unscale_gradients(grads, 3000.0)["W"]
    assert np.allclose(odd, grads["W"].astype(np.float64) / 3000.0, rtol=2e-7, atol=0)


@pytest.mark.lesson_021
@pytest.mark.lesson_022
@pytest.mark.parametrize("scale", [0.0, -1.0, math.inf, -math.inf, math.nan])
def test_a_bad_scale_is_refused(scale):
    with pytest.raises(ValueError, match="loss_scale"):
        REF.scale_loss(1.0, np.ones((2, 1), dtype=np.float32), scale)
    with pytest.raises(ValueError, match="loss_scale"):
        REF.unscale_gradients({"W": np.ones(2, dtype=np.float16)}, scale)


@pytest.mark.lesson_023
def test_the_check_finds_any_non_finite_value_in_any_array():
    rng = np.random.default_rng(3)
    for trial in range(60):
        grads = {key: rng.standard_normal(shape).astype(rng.choice([np.float16, np.float32]))
                 for key, shape in (("W1", (3, 4)), ("b1", (4,)), ("W2", (4, 2)), ("b2", (2,)))}
        if trial % 3:
            key = str(rng.choice(list(grads)))
            grads[key].flat[int(rng.integers(grads[key].size))] = rng.choice([np.inf, -np.inf, np.nan])
        brute_force = any(not math.isfinite(float(x)) for value in grads.values() for x in value.ravel())
        answer = REF.has_non_finite_gradients(grads)
        assert type(answer) is bool and answer == brute_force


# --------------------------------------------------------------------------
# 024: the step
# --------------------------------------------------------------------------

def _network(seed=0, widths=(4, 6, 6, 2), batch=8):
    rng = np.random.default_rng(seed)
    master = {key: value.astype(np.float32) + np.float32(0.05) for key, value in mlp.init_params(list(widths), seed=seed).items()}
    return master, rng.standard_normal((batch, widths[0])).astype(np.float32), \
        rng.standard_normal((batch, widths[-1])).astype(np.float32)


@pytest.mark.lesson_024
def test_forward_and_backward_run_in_float16(monkeypatch):
    seen = []
    forward, backward = mlp.forward, mlp.backward

    def recording_forward(X, params):
        out, cache = forward(X, params)
        seen.append(("forward", X.dtype, {v.dtype for v in params.values()}, out.dtype, {v.dtype for v in cache.values()}))
        return out, cache

    def recording_backward(d_out, params, cache):
        grads = backward(d_out, params, cache)
        seen.append(("backward", d_out.dtype, {v.dtype for v in params.values()}, {v.dtype for v in grads.values()}))
        return grads

    monkeypatch.setattr(mlp, "forward", recording_forward)
    monkeypatch.setattr(mlp, "backward", recording_backward)
    master, X, Y = _network()
    new, _, skipped = REF.mixed_precision_step(master, X, Y, {"scale": 1024.0, "growth_tracker": 0}, 0.1, 5)
    half = np.dtype(np.float16)
    assert seen == [("forward", half, {half}, half, {half}), ("backward", half, {half}, {half})]
    assert not skipped and all(value.dtype == np.float32 for value in new.values())


@pytest.mark.lesson_024
def test_the_update_is_the_unscaled_float16_gradient_applied_to_the_float32_master():
    master, X, Y = _network(1)
    for scale in (1.0, 2.0**8, 2.0**12):
        new, state, skipped = REF.mixed_precision_step(master, X, Y, {"scale": scale, "growth_tracker": 0}, 0.1, 5)
        half = {key: value.astype(np.float16) for key, value in master.items()}
        out, cache = mlp.forward(X.astype(np.float16), half)
        _, d_out = mlp.mse_loss_and_grad(out.astype(np.float32), Y)
        grads16 = mlp.backward((d_out.astype(np.float64) * scale).astype(np.float16), half, cache)
        for key in master:
            expected = master[key] - np.float32(0.1) * (grads16[key].astype(np.float32) / np.float32(scale))
            assert np.array_equal(new[key], expected), (scale, key)
        assert not skipped and state == {"scale": scale, "growth_tracker": 1}
        # and it is the float32 step, up to float16 rounding
        _, grads32 = mlp.loss_and_grads(X, Y, master)
        for key in master:
            assert np.allclose(new[key], master[key] - 0.1 * grads32[key], rtol=0, atol=2e-3)


class GradScalerModel:
    """PyTorch's GradScaler update rule (torch/amp/grad_scaler.py, _amp_update_scale_), written out."""

    def __init__(self, scale=2.0**16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000):
        self.scale, self.tracker = scale, 0
        self.growth_factor, self.backoff_factor, self.growth_interval = growth_factor, backoff_factor, growth_interval

    def update(self, found_inf: bool) -> None:
        if found_inf:
            self.scale *= self.backoff_factor
            self.tracker = 0
        else:
            successful = self.tracker + 1
            if successful == self.growth_interval:
                self.scale *= self.growth_factor
                self.tracker = 0
            else:
                self.tracker = successful


@pytest.mark.lesson_024
def test_a_scripted_sequence_follows_the_grad_scaler_rules_step_by_step():
    master, X, Y = _network(2)
    overflowing = 1000 * Y + 1000 * np.sign(Y)   # the scaled gradients overflow float16, the loss stays finite
    script = "cc o ccc cc oo ccc c o c".replace(" ", "")
    model = GradScalerModel(scale=2.0**12, growth_interval=3)
    state = {"scale": 2.0**12, "growth_tracker": 0}
    for step, kind in enumerate(script):
        before = master
        master, state, skipped = REF.mixed_precision_step(master, X, overflowing if kind == "o" else Y, state, 0.05, 3)
        model.update(found_inf=kind == "o")
        assert skipped == (kind == "o"), step
        assert state == {"scale": model.scale, "growth_tracker": model.tracker}, step
        assert type(state["scale"]) is float and type(state["growth_tracker"]) is int
        unchanged = all(np.array_equal(master[key], before[key]) for key in master)
        assert unchanged == skipped, step
    assert state["scale"] == 2.0**12 * 2**2 / 2**4  # two growths, four backoffs


@pytest.mark.lesson_024
def test_one_overflow_halves_65536_and_leaves_the_master_bitwise_unchanged_and_a_finite_loss_is_no_excuse():
    master, X, Y = _network(3)
    Y = 1000 * Y + 1000 * np.sign(Y)
    half = {key: value.astype(np.float16) for key, value in master.items()}
    out, _ = mlp.forward(X.astype(np.float16), half)
    loss, _ = mlp.mse_loss_and_grad(out.astype(np.float32), Y)
    assert math.isfinite(loss * 2.0**16)   # only the gradients overflow
    new, state, skipped = REF.mixed_precision_step(master, X, Y, {"scale": 2.0**16, "growth_tracker": 1234}, 0.1)
    assert skipped and state == {"scale": 2.0**15, "growth_tracker": 0}
    assert all(np.array_equal(new[key], master[key]) for key in master)


@pytest.mark.lesson_024
def test_two_thousand_clean_steps_double_the_scale():
    master, X, Y = _network(4, widths=(2, 2, 1), batch=2)
    state = {"scale": 2.0**10, "growth_tracker": 0}
    for step in range(2000):
        master, state, skipped = REF.mixed_precision_step(master, X, Y, state, 1e-3)  # the default interval, 2000
        assert not skipped
        assert state["scale"] == (2.0**11 if step == 1999 else 2.0**10)
    assert state == {"scale": 2.0**11, "growth_tracker": 0}


@pytest.mark.lesson_024
def test_mixed_precision_training_ends_within_two_percent_of_float32():
    X, Y = (a.astype(np.float32) for a in make_regression_batch(128, 6, 1, seed=5))
    start = mlp.init_params([6, 12, 12, 1], seed=5)
    params32 = REF.make_master_params(start)
    master, state = REF.make_master_params(start), {"scale": 2.0**16, "growth_tracker": 0}
    for _ in range(150):
        params32 = mlp.sgd_update(params32, mlp.loss_and_grads(X, Y, params32)[1], 0.1)
        master, state, _ = REF.mixed_precision_step(master, X, Y, state, 0.1, 25)
    loss32 = mlp.loss_and_grads(X, Y, params32)[0]
    loss_mixed = mlp.loss_and_grads(X, Y, master)[0]
    assert abs(loss_mixed / loss32 - 1) < 0.02, (loss32, loss_mixed)


@pytest.mark.lesson_024
def test_the_step_refuses_bad_input():
    master, X, Y = _network(5)
    with pytest.raises(TypeError, match="float32"):
        REF.mixed_precision_step({k: v.astype(np.float64) for k, v in master.items()}, X, Y,
                                 {"scale": 1.0, "growth_tracker": 0}, 0.1)
    with pytest.raises(ValueError, match="growth_interval"):
        REF.mixed_precision_step(master, X, Y, {"scale": 1.0, "growth_tracker": 0}, 0.1, 0)
    for scale in (0.0, -2.0, math.inf, math.nan):
        with pytest.raises(ValueError):
            REF.mixed_precision_step(master, X, Y, {"scale": scale, "growth_tracker": 0}, 0.1)


def float32_step(master, X, Y, learning_rate):
    _, grads = mlp.loss_and_grads(X, Y, master)
    return {key: master[key] - learning_rate * grads[key] for key in master}


@pytest.mark.lesson_024
@pytest.mark.parametrize("layers", [4, 8])
def test_the_step_stores_about_half_the_activation_bytes_of_float32(layers):
    B, D = 8192, 8
    master = REF.make_master_params(mlp.init_params([D] * layers + [1], seed=layers))
    rng = np.random.default_rng(layers)
    X, Y = rng.standard_normal((B, D)).astype(np.float32), rng.standard_normal((B, 1)).astype(np.float32)
    peak16 = measure_peak_memory(REF.mixed_precision_step, master, X, Y, {"scale": 256.0, "growth_tracker": 0},
                                 0.01).peak_bytes
    peak32 = measure_peak_memory(float32_step, master, X, Y, 0.01).peak_bytes
    master_bytes = sum(value.nbytes for value in master.values())
    # the predictions leave out the (batch, 1) arrays of the loss and NumPy's float16 buffers: a few percent
    assert abs(peak16 / mixed_precision_activation_bytes(B, D, layers) - 1) < 0.20
    assert abs(peak32 / mlp_activation_bytes(B, D, layers, 4) - 1) < 0.10
    # about half, closer to it the more layers store activations (the boolean ReLU mask does not halve)
    assert peak16 / peak32 < (0.70 if layers == 4 else 0.60)
    bound = mixed_precision_memory_bound(B, D, layers, master_bytes)
    assert peak16 <= bound < peak32
