"""Common mistakes of Part 4 (lessons 019-024), each a wrong version of the function.

Nothing here computes a lesson's right answer (``tests/test_delegation.py``): the
mixed-precision step that lesson 024's mistakes share takes the mistake as a
required keyword argument, which has no right value (``_twists.twisted`` makes one
catalogue entry per mistake of it).
"""

from __future__ import annotations

import numpy as np

from .. import mlp
from ..checking import Mistake
from ._twists import check_mistake, twisted

HALF_MAX = 65504.0  # the largest finite float16


# 019 cast_to_half_precision ----------------------------------------------------

def _cast_aliasing(params):
    # np.asarray hands back the array itself when it already has the dtype asked for
    return {key: np.asarray(value, dtype=np.float16) for key, value in params.items()}


def _cast_clipped(params):
    return {key: np.clip(value, -HALF_MAX, HALF_MAX).astype(np.float16) for key, value in params.items()}


def _cast_in_place(params):
    for key in params:
        params[key] = params[key].astype(np.float16)
    return params


# 020 make_master_params --------------------------------------------------------

def _master_aliasing(params):
    return {key: np.asarray(value, dtype=np.float32) for key, value in params.items()}


# 024 mixed_precision_step ------------------------------------------------------

_STEP_MISTAKES = ("updated the half weights", "not unscaled", "checked the loss only", "not skipped",
                  "no backoff", "no growth")


def _step(master_params, X, Y, scaler_state, learning_rate, growth_interval=2000, *, mistake):
    """A mixed-precision step with one of its parts done wrong: ``mistake``, one of _STEP_MISTAKES."""
    check_mistake(mistake, _STEP_MISTAKES)
    update_half, unscale = mistake == "updated the half weights", mistake != "not unscaled"
    check = "loss" if mistake == "checked the loss only" else "grads"
    skip, backoff, grow = mistake != "not skipped", mistake != "no backoff", mistake != "no growth"
    scale = scaler_state["scale"]
    with np.errstate(over="ignore", invalid="ignore"):
        half = {key: value.astype(np.float16) for key, value in master_params.items()}
        out, cache = mlp.forward(X.astype(np.float16), half)
        loss, d_out = mlp.mse_loss_and_grad(out.astype(np.float32), Y.astype(np.float32))
        scaled_loss = float(loss) * scale
        scaled = (d_out.astype(np.float32) * np.float32(scale)).astype(np.float16)
        half_grads = mlp.backward(scaled, half, cache)
        grads = {key: value.astype(np.float32) / np.float32(scale) if unscale else value.astype(np.float32)
                 for key, value in half_grads.items()}
        if check == "grads":
            found_inf = any(not np.isfinite(value).all() for value in grads.values())
        else:  # only the loss
            found_inf = not np.isfinite(scaled_loss)
        if found_inf:
            state = {"scale": scale * 0.5 if backoff else scale, "growth_tracker": 0}
            if skip:
                return {key: value.copy() for key, value in master_params.items()}, state, True
        if update_half:
            new = {key: (half[key] - (learning_rate * grads[key]).astype(np.float16)).astype(np.float32)
                   for key in master_params}
        else:
            new = {key: master_params[key] - learning_rate * grads[key] for key in master_params}
    if found_inf:  # not skipped: the update went in anyway
        return new, state, True
    tracker = scaler_state["growth_tracker"] + 1
    if tracker == growth_interval:
        scale, tracker = (scale * 2.0 if grow else scale), 0
    return new, {"scale": scale, "growth_tracker": tracker}, False


MISTAKES = {
    "cast_to_half_precision": (
        Mistake("the half copy aliases an input that already is float16",
                "np.asarray(x, np.float16) and x.astype(np.float16, copy=False) hand back x itself when it "
                "already is float16; the half copy must own its memory (x.astype(np.float16) always copies).",
                _cast_aliasing),
        Mistake("clipped to the float16 range",
                "A value beyond 65504 must become inf: the loss scaler detects overflow by looking for inf "
                "and NaN, and clipping hides it.",
                _cast_clipped),
        Mistake("converted the caller's dict in place",
                "Build a new dict: params[key] = ... replaces the caller's arrays, and the float32 master "
                "copy is gone.",
                _cast_in_place),
    ),
    "make_master_params": (
        Mistake("master weights kept in the model's precision",
                "The master copy is float32 whatever the model's dtype: from float16 weights, small "
                "updates would be rounded away.",
                lambda params: {key: value.copy() for key, value in params.items()}),
        Mistake("the master aliases the model's parameters",
                "np.asarray(x, np.float32) hands back x itself when it already is float32: the master and "
                "the model then share their memory. Use x.astype(np.float32), which always copies.",
                _master_aliasing),
        Mistake("master weights in float64",
                "Master weights are float32 (4 bytes each, as mixed-precision training keeps them); float64 "
                "doubles their memory and is not what the update expects.",
                lambda params: {key: value.astype(np.float64) for key, value in params.items()}),
    ),
    "scale_loss": (
        Mistake("scaled in float16",
                "Multiply in float32, then cast the product to float16: 65536 = 2**16 is beyond float16's "
                "largest value 65504, and a gradient cast to float16 before scaling has already underflowed.",
                lambda loss, d_out, s: (float(loss) * s, d_out.astype(np.float16) * np.float16(s))),
        Mistake("scaled the loss but not its gradient",
                "The backward pass starts from d_out: scaling the loss by S scales d_out by S (chain rule).",
                lambda loss, d_out, s: (float(loss) * s, d_out.astype(np.float16))),
        Mistake("divided by the scale",
                "Scaling multiplies by S (to lift small gradients into float16's range); dividing comes "
                "later, in unscale_gradients.",
                lambda loss, d_out, s: (float(loss) / s, (d_out.astype(np.float32) / np.float32(s)).astype(np.float16))),
        Mistake("kept the scaled gradient in float32",
                "Return it as float16: the backward pass runs in half precision, starting from this array.",
                lambda loss, d_out, s: (float(loss) * s, d_out.astype(np.float32) * np.float32(s))),
    ),
    "unscale_gradients": (
        Mistake("unscaled in float16",
                "Cast to float32 first, then divide: g / S in float16 underflows (and float16 cannot even "
                "hold S = 65536).",
                lambda grads, s: {key: value / np.float16(s) for key, value in grads.items()}),
        Mistake("multiplied by the scale instead of dividing",
                "The gradients arrive multiplied by S; unscaling divides by S.",
                lambda grads, s: {key: value.astype(np.float32) * np.float32(s) for key, value in grads.items()}),
        Mistake("cast to float32 but did not unscale",
                "Casting keeps the factor S in: divide by loss_scale too.",
                lambda grads, s: {key: value.astype(np.float32) for key, value in grads.items()}),
    ),
    "has_non_finite_gradients": (
        Mistake("checked only the first gradient array",
                "Any array can overflow: look at every value of every gradient in the dict.",
                lambda grads: bool(not np.isfinite(next(iter(grads.values()))).all())),
        Mistake("checked only for NaN",
                "An overflow gives inf (and only later, maybe, NaN): np.isfinite catches both.",
                lambda grads: bool(any(np.isnan(value).any() for value in grads.values()))),
        Mistake("checked only for inf",
                "inf - inf and 0 * inf give NaN, which np.isinf misses: np.isfinite catches both.",
                lambda grads: bool(any(np.isinf(value).any() for value in grads.values()))),
    ),
    "mixed_precision_step": twisted(_step, {
        "updated the half weights": (
            "updated the float16 weights instead of the master",
            "Apply the update to the float32 master weights (master - lr * g) and re-cast the half "
            "copy from them next step; the float16 copy rounds small updates away."),
        "not unscaled": (
            "updated with gradients that were not unscaled",
            "Unscale (divide by the scale, in float32) before checking and updating: the half-precision "
            "gradients are S times too large."),
        "checked the loss only": (
            "checked only the loss for non-finite values",
            "The loss can be finite while a gradient overflowed in the backward pass: check every "
            "unscaled gradient array."),
        "not skipped": (
            "did not skip the step on overflow",
            "When a gradient is inf or NaN, leave the master weights exactly as they are (the update "
            "would write inf or NaN into them) and only back the scale off."),
        "no backoff": (
            "never backed off the scale",
            "On overflow, halve the scale (and reset the growth tracker): with the same scale the next "
            "step overflows again."),
        "no growth": (
            "never grew the scale",
            "After growth_interval clean steps in a row, double the scale (and reset the tracker to 0)."),
    }),
}
