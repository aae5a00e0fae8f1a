"""Hidden cases of Part 4 (lessons 019-024), declared once.

Each lesson's ``cases(rng)`` draws fresh inputs from the grader's generator;
the judge compares the learner's answers with the reference solutions on
exactly these inputs.  The cases span each contract: float64, float32 and
float16 inputs (an input that already has the target dtype must still be
copied), values beyond float16's range and below it, loss scales that are
powers of two (as the scaler's are) and one that is not, inf and NaN in one
gradient array only, and for the step: clean steps, the step at which the scale
grows, overflows in the backward pass (with a finite loss) and in the forward
pass, and every class of bad input.  The step's memory is measured on a large
batch (lesson 024's MemoryBound).
"""

import numpy as np

from grading.spec import Case, Corner, LessonSpec, MemoryBound, Raises, Refusal, any_entry, valid
from shared import mlp
from shared.memory import mixed_precision_memory_bound

HALF = {"rtol": 1e-3, "atol": 2.0**-24}     # float16 answers: one unit in the last place (normal or subnormal)
SINGLE = {"rtol": 1e-6, "atol": 0.0}        # float32 answers: a few units in the last place
# The step's float32 master weights: master - lr * g rounds lr * g to float32 before the subtraction (an error
# of |lr g| 2**-24), or, as well, computes it in float64 and rounds once; where the update nearly cancels the
# weight, that error is far larger than rtol * |result|, hence the atol (a float16 update errs by 1e-3 relative)
STEP = {"rtol": 1e-6, "atol": 1e-7}


def _normal(rng, shape, dtype=np.float64):
    return rng.standard_normal(shape).astype(dtype)


def _seed(rng):
    return int(rng.integers(0, 2**31))


def _params(rng, dtypes=(np.float64,), widths=None):
    """An MLP-shaped parameter dict (W1, b1, ...), each value of a dtype drawn from ``dtypes``,
    biases nonzero."""
    widths = widths or [int(n) for n in rng.integers(1, 6, size=int(rng.integers(3, 5)))]
    params = mlp.init_params(widths, seed=_seed(rng))
    return {key: (value + 0.5 * _normal(rng, value.shape) if key[0] == "b" else value)
            .astype(dtypes[int(rng.integers(0, len(dtypes)))]) for key, value in params.items()}


def _not_float(a):
    return any(not np.issubdtype(np.asarray(value).dtype, np.floating) for value in a["params"].values())


def _with_bad_value(rng, dtype):
    params = _params(rng)
    key = str(rng.choice(sorted(params)))
    params[key] = (10 * params[key]).astype(dtype)
    return params


NOT_FLOAT = Refusal("a value of params is not a float array", TypeError, _not_float)


def _bad_params(rng):
    return [Raises({"params": _with_bad_value(rng, np.int64)}, TypeError, "a value of params is an integer array"),
            Raises({"params": _with_bad_value(rng, np.bool_)}, TypeError, "a value of params is a boolean array"),
            Raises({"params": _with_bad_value(rng, np.uint8)}, TypeError,
                   "a value of params is an unsigned integer array")]


# 019 cast_to_half_precision ----------------------------------------------------

def _out_of_range(rng, shape, dtype):
    """Values in float16's range, with some beyond 65504 and some below 2**-25 (and some subnormal)."""
    values = _normal(rng, shape)
    flat = values.reshape(-1)
    n = flat.size
    picks = rng.permutation(n)
    flat[picks[: max(1, n // 4)]] *= 1e5                      # -> +-inf
    flat[picks[max(1, n // 4): max(2, n // 2)]] *= 1e-9         # -> 0
    flat[picks[max(2, n // 2): max(3, 3 * n // 4)]] *= 1e-6     # -> subnormal
    return values.astype(dtype)


def _just_above_midpoints(rng, shape):
    """float64 values just above the midpoint of two neighbouring float16 numbers, the lower one even: rounded
    once (round-to-nearest) they go up; through float32 they first land on the midpoint, a tie, and then go
    down to the even neighbour (double rounding)."""
    bits = (rng.integers(0x0400, 0x7800, size=shape) & ~1).astype(np.uint16)   # normal float16, even last bit
    low = bits.view(np.float16).astype(np.float64) * rng.choice([-1.0, 1.0], size=shape)
    midpoint = low + np.sign(low) * np.spacing(np.abs(low).astype(np.float16)).astype(np.float64) / 2
    return midpoint * (1 + 2.0**-30)


def cast_cases(rng):
    cases = [Case({"params": _params(rng)}, "float64 parameters, values in float16's range")]
    shapes = {"W1": (3, 4), "b1": (4,), "W2": (4, 2), "b2": (2,)}
    cases.append(Case({"params": {key: _out_of_range(rng, shape, np.float32) for key, shape in shapes.items()}},
                      "float32 values beyond 65504 (inf), below 2**-25 (0) and subnormal"))
    # an input that already is float16: np.asarray or astype(copy=False) would hand it back itself
    cases.append(Case({"params": _params(rng, (np.float16,))}, "float16 parameters: the copy must be new arrays"))
    cases.append(Case({"params": _params(rng, (np.float16, np.float32, np.float64))}, "mixed float dtypes"))
    cases.append(Case({"params": {"W1": _out_of_range(rng, (5, 3), np.float64), "b1": np.zeros(0)}},
                      "float64 values out of range, and an empty array"))
    special = {key: _normal(rng, shape) for key, shape in shapes.items()}
    for key, value in zip(special, (np.nan, np.inf, -np.inf, np.nan)):
        special[key].flat[int(rng.integers(0, special[key].size))] = value
    cases.append(Case({"params": special}, "NaN, inf and -inf entries: a cast keeps them NaN, inf and -inf"))
    cases.append(Case({"params": {"W1": _just_above_midpoints(rng, (4, 3)), "b1": _normal(rng, (3,))}},
                      "float64 values just above a float16 midpoint: round once, to nearest (through float32 "
                      "they round twice, to the wrong neighbour)"))
    return cases + _bad_params(rng)


# 020 make_master_params --------------------------------------------------------

def master_cases(rng):
    return [
        Case({"params": _params(rng, (np.float16,))}, "float16 parameters (a half-precision model)"),
        Case({"params": _params(rng)}, "float64 parameters (from mlp.init_params)"),
        # float32 input: np.asarray(x, np.float32) would hand back x itself
        Case({"params": _params(rng, (np.float32,))}, "float32 parameters: the master must be new arrays"),
        Case({"params": _params(rng, (np.float16, np.float32, np.float64))}, "mixed float dtypes"),
        Case({"params": _params(rng, (np.float64,), [int(rng.integers(2, 7)) for _ in range(5)])},
             "a deeper MLP in float64"),
    ] + _bad_params(rng)


# 021 scale_loss ----------------------------------------------------------------

def _power_of_two(rng, low, high):
    return float(2.0 ** int(rng.integers(low, high + 1)))


def _small_gradients(rng, shape, dtype=np.float32):
    """A loss gradient with entries from 2**-34 to 2**-2: many would underflow in float16 unscaled."""
    signs = rng.choice([-1.0, 1.0], size=shape)
    return (signs * 2.0 ** rng.uniform(-34, -2, size=shape)).astype(dtype)


def _loss(rng):
    """A loss as the text has it: computed in float32 (given as a Python float)."""
    return float(np.float32(rng.uniform(0.01, 3.0)))


def _overflowing(rng, d_out, scale):
    """``d_out`` with one entry whose product with ``scale`` is beyond float16's range (2**17 to 2**20): every run
    has a product that must become inf, so an answer that clips or saturates it loses on every seed."""
    d_out = d_out.copy()
    d_out.flat[int(rng.integers(0, d_out.size))] = rng.choice([-1.0, 1.0]) * 2.0 ** rng.uniform(17, 20) / scale
    return d_out


def scale_cases(rng):
    def case(d_out, scale, about, loss=None):
        return Case({"loss": _loss(rng) if loss is None else loss, "d_out": d_out, "loss_scale": scale},
                    about, **HALF)

    def shape():
        return (int(rng.integers(2, 9)), int(rng.integers(1, 4)))

    cases = [case(_small_gradients(rng, shape()), 65536.0, "S = 2**16 (beyond float16's 65504), small gradients")]
    cases.append(case(_small_gradients(rng, shape()), _power_of_two(rng, 4, 20), "S a random power of two"))
    big, scale = _small_gradients(rng, shape()) * np.float32(2.0**16), _power_of_two(rng, 12, 18)
    cases.append(case(_overflowing(rng, big, scale), scale, "large gradients: some products overflow to inf"))
    cases.append(case(_small_gradients(rng, shape()), _power_of_two(rng, 8, 16),
                      "the loss as a NumPy float32 (return a Python float)", loss=np.float32(_loss(rng))))
    cases.append(case(_small_gradients(rng, shape(), np.float16), _power_of_two(rng, 2, 10),
                      "d_out already float16"))
    cases.append(case(_small_gradients(rng, shape()), float(rng.uniform(100.0, 5000.0)),
                      "S not a power of two"))
    cases.append(case(_small_gradients(rng, shape()), _power_of_two(rng, -4, -1), "S below 1 (after many backoffs)"))
    cases.append(case(_small_gradients(rng, shape(), np.float16), 65536.0,
                      "d_out already float16 and S = 2**16, beyond float16's range: the product is float32's"))
    cases.append(case(_small_gradients(rng, shape()), np.float16(_power_of_two(rng, 4, 15)),
                      "S a NumPy float16 (return loss * S as a Python float, computed in float64)"))
    cases.append(case(_small_gradients(rng, shape()), np.float32(rng.uniform(100.0, 5000.0)),
                      "S a NumPy float32, not a power of two (return loss * S as a Python float)"))
    d_out = _small_gradients(rng, (3, 2))
    for bad, why in ((0.0, "loss_scale is 0"), (-_power_of_two(rng, 0, 16), "loss_scale is negative"),
                     (np.inf, "loss_scale is infinite"), (np.nan, "loss_scale is NaN")):
        cases.append(Raises({"loss": 0.5, "d_out": d_out, "loss_scale": bad}, ValueError, why))
    return cases


def _scale_refusals(name, scale):
    return (Refusal(f"{name} is not finite", ValueError, lambda a: not np.isfinite(scale(a))),
            Refusal(f"{name} <= 0", ValueError, lambda a: scale(a) <= 0))


# 022 unscale_gradients ---------------------------------------------------------

def _scaled_gradients(rng, dtype=np.float16, special=False):
    """Gradients of a scaled loss (float16 by default), optionally with inf and NaN entries."""
    grads = {}
    for key, shape in (("W1", (3, int(rng.integers(2, 5)))), ("b1", (int(rng.integers(2, 5)),)),
                       ("W2", (2, 2)), ("b2", (2,))):
        signs = rng.choice([-1.0, 1.0], size=shape)
        grads[key] = signs * 2.0 ** rng.uniform(-20, 15, size=shape)
    if special:
        grads["W2"][0, 0], grads["b1"][-1] = np.inf, np.nan
    return {key: value.astype(dtype) for key, value in grads.items()}


def unscale_cases(rng):
    cases = [Case({"grads": _scaled_gradients(rng), "loss_scale": 65536.0}, "S = 2**16", **SINGLE),
             Case({"grads": _scaled_gradients(rng), "loss_scale": _power_of_two(rng, 3, 24)},
                  "S a random power of two", **SINGLE),
             Case({"grads": _scaled_gradients(rng, special=True), "loss_scale": _power_of_two(rng, 8, 16)},
                  "inf and NaN entries (they stay inf and NaN)", **SINGLE),
             Case({"grads": _scaled_gradients(rng), "loss_scale": float(rng.uniform(100.0, 5000.0))},
                  "S not a power of two", **SINGLE),
             Case({"grads": _scaled_gradients(rng, np.float32), "loss_scale": _power_of_two(rng, 8, 16)},
                  "float32 gradients", **SINGLE),
             Case({"grads": _scaled_gradients(rng), "loss_scale": _power_of_two(rng, -4, -1)},
                  "S below 1 (after many backoffs)", **SINGLE)]
    grads = _scaled_gradients(rng)
    for bad, why in ((0.0, "loss_scale is 0"), (-_power_of_two(rng, 0, 16), "loss_scale is negative"),
                     (np.inf, "loss_scale is infinite"), (np.nan, "loss_scale is NaN")):
        cases.append(Raises({"grads": grads, "loss_scale": bad}, ValueError, why))
    return cases


# 023 has_non_finite_gradients --------------------------------------------------

def finite_cases(rng):
    def grads(dtype, where=None, value=np.inf):
        """Finite gradients, with ``value`` at one random entry of array ``where`` (an index into the keys)."""
        found = {key: _normal(rng, shape, dtype) for key, shape in
                 (("W1", (3, 4)), ("b1", (4,)), ("W2", (4, 2)), ("b2", (2,)))}
        if where is not None:
            key = list(found)[where]
            found[key].flat[int(rng.integers(0, found[key].size))] = value
        return found

    later = lambda: int(rng.integers(1, 4))  # noqa: E731  (an array after the first)
    # The order matters for naming: each mistake first fails on a case that tells it from the others.
    return [
        Case({"grads": {**grads(np.float16), "W2": rng.uniform(2e4, 6e4, (4, 2)).astype(np.float16)}},
             "all finite (float16), W2's values so large that their sum overflows float16"),
        Case({"grads": grads(np.float16, 0, np.nan)}, "a NaN in the first array only"),
        Case({"grads": grads(np.float32, 0, np.inf)}, "an inf in the first array only"),
        Case({"grads": grads(np.float16, later(), np.nan)}, "a NaN in a later array only"),
        Case({"grads": grads(np.float32, later(), -np.inf)}, "a -inf in a later array only"),
        Case({"grads": grads(np.float32, 3, np.inf)}, "an inf in the last bias only"),
        Case({"grads": grads(np.float32)}, "all finite (float32)"),
        Case({"grads": {**grads(np.float32), "W1": rng.uniform(7e4, 1e6, (3, 4)).astype(np.float32)}},
             "all finite (float32), W1's values beyond float16's 65504: finite is the array's own dtype"),
    ]


# 024 mixed_precision_step ------------------------------------------------------

# The memory case: a float32 step stores about 5 MiB, the float16 one 2.5 MiB.  Narrow and long, because
# NumPy's float16 matrix products run in software: their cost grows with batch * width**2, the bytes with
# batch * width.
MEMORY_BATCH, MEMORY_WIDTH, MEMORY_LAYERS = 16384, 8, 4
# float16 rounding noise on the memory case (a step computed in float32 gives the same numbers within it,
# so that such a step is judged by its memory); every other case is compared tightly (STEP).
MEMORY_CASE_TOLERANCE = {"rtol": 1e-3, "atol": 2e-4}

ARG_NAMES = ("master_params", "X", "Y", "scaler_state", "learning_rate", "growth_interval")


def _master(rng, widths):
    return _params(rng, (np.float32,), widths)


def _step(master, X, Y, scale, tracker, interval, learning_rate=None):
    return dict(zip(ARG_NAMES, (master, X, Y, {"scale": scale, "growth_tracker": tracker},
                                0.05 if learning_rate is None else learning_rate, interval)))


def _overflowing_keys(master, X, Y, scale) -> set[str]:
    """The keys whose scaled float16 gradients hold inf or NaN in a step of 024 on these inputs."""
    from shared.lesson_blocks import scale_loss
    with np.errstate(over="ignore", invalid="ignore"):
        half = {key: value.astype(np.float16) for key, value in master.items()}
        out, cache = mlp.forward(X.astype(np.float16), half)
        loss, d_out = mlp.mse_loss_and_grad(out.astype(np.float32), Y.astype(np.float32))
        grads = mlp.backward(scale_loss(loss, d_out, scale)[1], half, cache)
    return {key for key, value in grads.items() if not np.isfinite(value).all()} if np.isfinite(loss) else {"loss"}


def _confined_overflow(rng, layer: str):
    """(master, X, Y, scale): a finite loss whose scaled gradients overflow float16 in one layer only, the first
    or the last (a check of some layers' gradients misses it).  The first: large inputs, a tiny first weight
    matrix; the last: large hidden activations, a tiny last weight matrix.  Drawn until the overflow is confined."""
    for _ in range(100):
        widths = [int(rng.integers(2, 5)), int(rng.integers(3, 6)), int(rng.integers(3, 6)), int(rng.integers(1, 3))]
        master = _master(rng, widths)
        batch = int(rng.integers(6, 10))
        X, Y = _normal(rng, (batch, widths[0]), np.float32), _normal(rng, (batch, widths[-1]), np.float32)
        if layer == "first":
            X = (X * 1e3).astype(np.float32)
            master["W1"] = (master["W1"] * 1e-4).astype(np.float32)
            scale, wanted = _power_of_two(rng, 10, 12), {"W1"}
        elif layer == "bias":  # tiny weights and biases, targets far away: every weight gradient is tiny, but
            #                    the last bias's gradient sums the scaled loss gradient over the whole batch
            master = {key: (value * (1e-3 if key[0] == "W" else 0.0)).astype(np.float32)
                      for key, value in master.items()}
            Y = np.full_like(Y, -float(rng.uniform(1.0, 2.0)))
            scale, wanted = 65536.0, {"b3"}
        else:
            master["W2"] = (master["W2"] * 30).astype(np.float32)
            master["W3"] = (master["W3"] * 1e-4).astype(np.float32)
            scale, wanted = _power_of_two(rng, 14, 16), {"W3", "b3"}
        found = _overflowing_keys(master, X, Y, scale)
        if found and found <= wanted:
            return master, X, Y, scale
    raise AssertionError(f"no draw confines the overflow to the {layer} layer")


def _clean_at(rng, scale, network):
    """(master, X, Y): a step whose scaled float16 gradients stay finite at ``scale`` (2**16, GradScaler's
    default start, or 2**24): targets close to the float16 forward pass's output, moved closer until no
    gradient overflows.  In float16, 2**16 is itself inf: a step that multiplies by S in float16 skips it."""
    for _ in range(100):
        master, X, Y = network()
        half = {key: value.astype(np.float16) for key, value in master.items()}
        out = mlp.forward(X.astype(np.float16), half)[0].astype(np.float32)
        noise = _normal(rng, Y.shape, np.float32)
        for distance in 2.0 ** -np.arange(0, 30, 2):
            Y = (out + np.float32(distance) * noise).astype(np.float32)
            if not np.array_equal(Y, out) and not _overflowing_keys(master, X, Y, scale):
                return master, X, Y
    raise AssertionError(f"no draw gives a clean step at the scale {scale}")


def step_cases(rng):
    def network(widths=None):
        widths = widths or [int(rng.integers(2, 6))] + [int(rng.integers(2, 6))] * int(rng.integers(1, 3)) \
            + [int(rng.integers(1, 4))]
        batch = int(rng.integers(4, 12))
        return (_master(rng, widths), _normal(rng, (batch, widths[0]), np.float32),
                _normal(rng, (batch, widths[-1]), np.float32))

    def clean(about, *, tracker=None, interval=None, widths=None, data=np.float32, **tolerances):
        master, X, Y = network(widths)
        interval = interval or int(rng.integers(3, 10))
        tracker = int(rng.integers(0, interval - 1)) if tracker is None else tracker
        return Case(_step(master, X.astype(data), Y.astype(data), _power_of_two(rng, 6, 12), tracker, interval),
                    about, **(tolerances or STEP))

    def overflow(about, *, tracker=None, forward=False):
        interval = int(rng.integers(3, 10))
        tracker = int(rng.integers(1, interval - 1)) if tracker is None else tracker
        scale = _power_of_two(rng, 11, 16)
        for _ in range(100):
            master, X, Y = network()
            if not forward:  # targets a thousand times larger: the scaled loss gradient overflows, the loss is finite
                Y = (1000 * Y + np.sign(Y) * 1000).astype(np.float32)
                break
            # an input beyond 65504: inf from the first layer on, and a non-finite loss (drawn again where the
            # ReLUs happen to shut every inf out, and only the first layer's gradient would show it)
            X[int(rng.integers(0, len(X))), 0] = 1e5
            if _overflowing_keys(master, X, Y, scale) == {"loss"}:
                break
        return Case(_step(master, X, Y, scale, tracker, interval), about, **STEP)

    def confined(about, layer):
        master, X, Y, scale = _confined_overflow(rng, layer)
        interval = int(rng.integers(3, 10))
        return Case(_step(master, X, Y, scale, int(rng.integers(0, interval - 1)), interval), about, **STEP)

    def clean_at(about, scale):
        master, X, Y = _clean_at(rng, scale, network)
        interval = int(rng.integers(3, 10))
        return Case(_step(master, X, Y, scale, int(rng.integers(0, interval - 1)), interval), about, **STEP)

    def numpy_scale(case):
        case.args["scaler_state"]["scale"] = np.float32(case.args["scaler_state"]["scale"])
        return case

    widths = [MEMORY_WIDTH] * MEMORY_LAYERS + [1]
    memory = Case(_step(_master(rng, widths), _normal(rng, (MEMORY_BATCH, MEMORY_WIDTH), np.float32),
                        _normal(rng, (MEMORY_BATCH, 1), np.float32), _power_of_two(rng, 6, 10),
                        int(rng.integers(0, 5)), 2000, 0.01),
                  f"memory measured: batch {MEMORY_BATCH}, width {MEMORY_WIDTH}, {MEMORY_LAYERS} layers",
                  measure=True, **MEMORY_CASE_TOLERANCE)
    # The order matters for naming: each mistake first fails on a case that tells it from the others.
    cases = [memory,
             clean("a clean step"),
             clean("the clean step that completes growth_interval: the scale doubles", tracker=-1),
             clean("growth_interval 1: the scale doubles after every clean step", tracker=0, interval=1),
             overflow("the scaled gradients overflow float16 (the loss is finite): skipped"),
             overflow("an overflow when the tracker is one step from growing: reset, not grown", tracker=-1),
             overflow("the forward pass overflows (an input beyond 65504): skipped", forward=True),
             confined("only the first layer's weight gradient overflows: skipped", "first"),
             confined("only the last layer's gradients overflow: skipped", "last"),
             confined("only the last bias's gradient overflows (a sum over the batch): skipped", "bias"),
             clean("X and Y in float64 (cast them)", data=np.float64),
             clean("a deeper MLP with unequal widths", widths=[int(n) for n in rng.integers(2, 7, size=6)]),
             clean_at("a clean step at S = 2**16, GradScaler's default start (inf in float16)", 2.0**16),
             clean_at("a clean step at S = 2**24, after many growths (S itself is inf in float16)", 2.0**24),
             numpy_scale(clean("the scale a NumPy float32, the clean step that doubles it (a Python float back)",
                               tracker=-1)),
             numpy_scale(overflow("the scale a NumPy float32, a skipped step (half of it, a Python float, back)"))]
    for case in cases:  # tracker=-1 stands for "one step from the growth interval"
        state = case.args["scaler_state"]
        if state["growth_tracker"] < 0:
            state["growth_tracker"] = case.args["growth_interval"] - 1
    master, X, Y = network()
    for scale, why in ((0.0, "the scale is 0"), (-_power_of_two(rng, 0, 16), "the scale is negative"),
                       (np.inf, "the scale is infinite"), (np.nan, "the scale is NaN")):
        cases.append(Raises(_step(master, X, Y, scale, 0, 5), ValueError, why))
    cases.append(Raises(_step(master, X, Y, 1024.0, 0, 0), ValueError, "growth_interval is 0"))
    cases.append(Raises(_step(master, X, Y, 1024.0, 0, -int(rng.integers(1, 5))), ValueError,
                        "growth_interval is negative"))
    for dtype in (np.float64, np.float16):
        wrong = {key: value.astype(dtype) for key, value in master.items()}
        cases.append(Raises(_step(wrong, X, Y, 1024.0, 0, 5), TypeError,
                            f"the master weights are {np.dtype(dtype).name}, not float32"))
    return cases


def _master_bytes(args):
    return sum(value.nbytes for value in args["master_params"].values())


STEP_MEMORY = MemoryBound(
    lambda args: mixed_precision_memory_bound(len(args["X"]), args["X"].shape[1],
                                              sum(1 for key in args["master_params"] if key[0] == "W"),
                                              _master_bytes(args)),
    rule="half of a float32 step's activations, plus five float16 (batch, width) arrays and four times the "
         "master weights' bytes",
    shortcut="run the forward and backward passes in float16 (the half copy of the weights, X cast to "
             "float16, the scaled loss gradient in float16); a step that computes in float32 stores twice "
             "the activation bytes")

STEP_REFUSALS = (
    *_scale_refusals("the scale", lambda a: a["scaler_state"]["scale"]),
    Refusal("growth_interval < 1", ValueError, lambda a: a["growth_interval"] < 1),
    Refusal("a master weight is not float32", TypeError,
            lambda a: any(np.asarray(value).dtype != np.float32 for value in a["master_params"].values())),
)


# The corners every run draws (tests/test_corners.py) ---------------------------

def _params_entry(predicate):
    return lambda case: valid(case) and any_entry(case.args["params"], predicate)


def _of_dtype(name, dtype):
    return lambda case: valid(case) and any(np.asarray(value).dtype == dtype for value in case.args[name].values())


def _rounds_twice(x):
    """Entries whose float16 rounding differs from the rounding through float32 (float64 values only)."""
    return (x.dtype == np.float64) & (x.astype(np.float16) != x.astype(np.float32).astype(np.float16)) & np.isfinite(x)


CAST_CORNERS = (
    Corner("a value beyond 65504 (inf)", _params_entry(lambda x: np.isfinite(x) & (np.abs(x) > 65520))),
    Corner("a value that rounds to 0", _params_entry(lambda x: (x != 0) & (np.abs(x) <= 2.0**-25))),
    Corner("a subnormal result", _params_entry(lambda x: (np.abs(x) > 2.0**-25) & (np.abs(x) < 2.0**-14))),
    Corner("NaN, inf and -inf entries", lambda case: valid(case) and all(
        any_entry(case.args["params"], test) for test in (np.isnan, np.isposinf, np.isneginf))),
    Corner("a value just above a float16 midpoint (double rounding)", _params_entry(_rounds_twice)),
    Corner("an input that already is float16", _of_dtype("params", np.float16)),
    Corner("an empty array", lambda case: valid(case) and any(np.asarray(v).size == 0
                                                              for v in case.args["params"].values())),
)


def _scale_is(test):
    return lambda case: valid(case) and test(case.args["loss_scale"])


def _overflows(case):
    with np.errstate(over="ignore"):
        product = case.args["d_out"].astype(np.float32) * np.float32(case.args["loss_scale"])
    return valid(case) and bool(np.any(np.abs(product) > 65520))


SCALE_CORNERS = (
    Corner("S = 2**16, GradScaler's default start", _scale_is(lambda s: s == 2.0**16)),
    Corner("S below 1", _scale_is(lambda s: s < 1)),
    Corner("S not a power of two", _scale_is(lambda s: not float(np.log2(s)).is_integer())),
    Corner("a product beyond float16's range (inf)", _overflows),
    Corner("d_out already float16", lambda case: valid(case) and case.args["d_out"].dtype == np.float16),
    Corner("the loss a NumPy float32", lambda case: valid(case) and type(case.args["loss"]) is np.float32),
)

UNSCALE_CORNERS = (
    Corner("S = 2**16", _scale_is(lambda s: s == 2.0**16)),
    Corner("S below 1", _scale_is(lambda s: s < 1)),
    Corner("S not a power of two", _scale_is(lambda s: not float(np.log2(s)).is_integer())),
    Corner("inf and NaN entries", lambda case: valid(case) and any_entry(case.args["grads"], np.isinf)
           and any_entry(case.args["grads"], np.isnan)),
)


def _non_finite_in(position):
    """A single non-finite entry, in the first array or a later one."""
    def holds(case):
        arrays = list(case.args["grads"].values())
        bad = [i for i, a in enumerate(arrays) if not np.isfinite(a).all()]
        return valid(case) and len(bad) == 1 and (bad[0] == 0) == (position == "first")
    return holds


FINITE_CORNERS = (
    Corner("a non-finite entry in the first array only", _non_finite_in("first")),
    Corner("a non-finite entry in a later array only", _non_finite_in("later")),
    Corner("all finite, with a float16 sum that overflows", lambda case: valid(case) and all(
        np.isfinite(a).all() for a in case.args["grads"].values()) and any(
        a.dtype == np.float16 and not np.isfinite(a.sum()) for a in case.args["grads"].values())),
    Corner("all finite float32 beyond float16's range", lambda case: valid(case) and all(
        a.dtype == np.float32 and np.isfinite(a).all() for a in case.args["grads"].values()) and any_entry(
        case.args["grads"], lambda x: np.abs(x) > 65504)),
)


def _step_overflow(case):
    """The keys whose scaled float16 gradients overflow in the step of this case ({"loss"}: the forward pass)."""
    args = case.args
    return _overflowing_keys(args["master_params"], args["X"], args["Y"], args["scaler_state"]["scale"])


def _clean_step_at(scale):
    return lambda case: (valid(case) and not case.measure and case.args["scaler_state"]["scale"] == scale
                         and not _step_overflow(case))


def _overflow_in(wanted):
    return lambda case: valid(case) and not case.measure and wanted(_step_overflow(case))


STEP_CORNERS = (
    Corner("a clean step at S = 2**16", _clean_step_at(2.0**16)),
    Corner("a clean step at S = 2**24", _clean_step_at(2.0**24)),
    Corner("the clean step that grows the scale", lambda case: valid(case) and not _step_overflow(case) and (
        case.args["scaler_state"]["growth_tracker"] == case.args["growth_interval"] - 1)),
    Corner("an overflow in the forward pass", _overflow_in(lambda keys: keys == {"loss"})),
    Corner("an overflow in the first layer only", _overflow_in(lambda keys: keys == {"W1"})),
    Corner("an overflow in the last layer only", _overflow_in(lambda keys: keys and "loss" not in keys and all(
        key[1:] == max(k[1:] for k in keys) for key in keys) and "W1" not in keys)),
    Corner("an overflow in the last bias only", _overflow_in(lambda keys: len(keys) == 1 and next(iter(keys))[0] == "b")),
)


LESSONS = (
    LessonSpec("019", cast_cases, exact=True, refuses=(NOT_FLOAT,), corners=CAST_CORNERS),  # one rounding to nearest: bit for bit
    LessonSpec("020", master_cases, exact=True, refuses=(NOT_FLOAT,)),
    LessonSpec("021", scale_cases, **HALF, refuses=_scale_refusals("loss_scale", lambda a: a["loss_scale"]),
               corners=SCALE_CORNERS,
               # loss * S: the docstring computes it in float64; float32 is as right (one more rounding)
               key_tolerances={0: {"rtol": 1e-6, "atol": 0.0}}),
    LessonSpec("022", unscale_cases, **SINGLE, refuses=_scale_refusals("loss_scale", lambda a: a["loss_scale"]),
               corners=UNSCALE_CORNERS),
    LessonSpec("023", finite_cases, corners=FINITE_CORNERS),
    LessonSpec("024", step_cases, **STEP, memory=STEP_MEMORY, refuses=STEP_REFUSALS, corners=STEP_CORNERS,
               fresh_result=False,  # a skipped step may hand back the master weights themselves, unchanged
               isolate=("cast_to_half_precision", "scale_loss", "unscale_gradients", "has_non_finite_gradients")),
)
