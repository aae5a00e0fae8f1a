"""Hidden cases of Part 1 (lessons 001-010), declared once.

Each lesson's ``cases(rng)`` draws fresh inputs from the grader's generator;
the judge compares the learner's answers with the reference solutions on
exactly these inputs.  The cases span each contract: every dtype a docstring
admits, the degenerate sizes (1, square matrices), and every class of bad input.
"""

import numpy as np

from grading.spec import FLOAT32, Case, Corner, LessonSpec, MemoryBound, Raises, Refusal, any_entry, valid


def _sizes(rng, count, low=1, high=10):
    return [int(n) for n in rng.integers(low, high, size=count)]


def _normal(rng, shape, dtype=np.float64):
    return rng.standard_normal(shape).astype(dtype)


def _params(rng, d, h, m, dtype=np.float64):
    return {"W1": _normal(rng, (d, h), dtype), "b1": _normal(rng, h, dtype),
            "W2": _normal(rng, (h, m), dtype), "b2": _normal(rng, m, dtype)}


def _every_dtype(rng, shapes):
    """A linear layer's cases in every dtype its docstring admits: float64 three times, float32, float16, each
    with sizes n (rows), i (inputs), o (outputs) of 1 to 9 drawn anew. ``shapes(n, i, o)``: {argument: shape},
    drawn in that order."""
    cases = []
    for dtype in (np.float64, np.float64, np.float64, np.float32, np.float16):
        n, i, o = _sizes(rng, 3)
        cases.append(Case({name: _normal(rng, shape, dtype) for name, shape in shapes(n, i, o).items()},
                          f"{np.dtype(dtype).name}: the result keeps it"))
    return cases


# 001 make_synthetic_regression_batch ---------------------------------------

def batch_cases(rng):
    cases = [Case({"batch_size": b, "in_features": d, "out_features": m, "seed": int(rng.integers(0, 2**31))})
             for b, d, m in [_sizes(rng, 3, 1, 12) for _ in range(4)]]
    cases.append(Case({"batch_size": 1, "in_features": 1, "out_features": 1, "seed": 0}, "all sizes 1"))
    cases.append(Case({"batch_size": 5, "in_features": 4, "out_features": 4, "seed": 7}, "in_features = out_features"))
    good = {"batch_size": 4, "in_features": 3, "out_features": 2, "seed": 0}
    for name in ("batch_size", "in_features", "out_features"):
        cases.append(Raises({**good, name: 0}, ValueError, f"{name} is 0"))
    cases.append(Raises({**good, "in_features": -1}, ValueError, "in_features is negative"))
    cases.append(Raises({**good, "out_features": 2.5}, ValueError, "out_features is 2.5, not a whole number"))
    cases.append(Raises({**good, "batch_size": 3.0}, ValueError, "batch_size is 3.0, a float"))
    cases.append(Raises({**good, "in_features": True}, ValueError, "in_features is True, a bool"))
    b, d, m = (np.int64(n) for n in _sizes(rng, 3, 1, 12))
    cases.append(Case({"batch_size": b, "in_features": d, "out_features": m, "seed": int(rng.integers(0, 2**31))},
                      "NumPy integer sizes"))
    return cases


SIZES = ("batch_size", "in_features", "out_features")
BATCH_REFUSALS = (
    Refusal("a size is less than 1", ValueError, lambda a: min(a[name] for name in SIZES) < 1),
    Refusal("a size is not an int (a float, even 3.0, or a bool)", ValueError,
            lambda a: any(isinstance(a[name], (bool, np.bool_)) or not isinstance(a[name], (int, np.integer))
                          for name in SIZES)),
)


# 002 init_mlp_params --------------------------------------------------------

def init_cases(rng):
    cases = [Case({"in_features": d, "hidden": h, "out_features": m, "seed": int(rng.integers(0, 2**31))})
             for d, h, m in [_sizes(rng, 3, 1, 16) for _ in range(4)]]
    # fan-ins that tell He (2/fan_in) from LeCun (1/fan_in), Xavier and the wrong fan
    cases.append(Case({"in_features": 9, "hidden": 3, "out_features": 5, "seed": 11}, "unequal widths"))
    cases.append(Case({"in_features": 1, "hidden": 1, "out_features": 1, "seed": 2}, "all widths 1"))
    return cases


# 003 linear_forward ---------------------------------------------------------

def linear_forward_cases(rng):
    cases = _every_dtype(rng, lambda n, i, o: {"x": (n, i), "W": (i, o), "b": o})
    n = int(rng.integers(2, 6))
    cases.append(Case({"x": _normal(rng, (n, n)), "W": _normal(rng, (n, n)), "b": _normal(rng, n)},
                      "square x and W"))
    cases.append(Case({"x": _normal(rng, (1, 1)), "W": _normal(rng, (1, 1)), "b": _normal(rng, 1)}, "1x1"))
    return cases


# 004 relu_forward -----------------------------------------------------------

def relu_forward_cases(rng):
    cases = []
    for ndim in (1, 2, 3, 2):
        shape = tuple(_sizes(rng, ndim, 1, 8))
        z = _normal(rng, shape)
        z[rng.random(shape) < 0.2] = 0.0
        cases.append(Case({"z": z}, f"{ndim}-d input with exact zeros"))
    cases.append(Case({"z": _normal(rng, (4, 3), np.float32)}, "float32: the result keeps it"))
    cases.append(Case({"z": _normal(rng, (3, 5), np.float16)}, "float16: the result keeps it"))
    cases.append(Case({"z": -np.abs(_normal(rng, (3, 2)))}, "all negative"))
    cases.append(Case({"z": np.abs(_normal(rng, (3, 4))) + 0.5}, "no negative entry: still a new array"))
    cases.append(Case({"z": np.zeros((0, 3))}, "an empty array (any shape, even one with no entry)"))
    cases.append(Case({"z": np.array([np.inf, -np.inf, -2.0, 3.0])}, "inf and -inf: max(z, 0) is inf and 0"))
    cases.append(Case({"z": np.array([60000.0, -60000.0, 33000.0, 0.5], dtype=np.float16)},
                      "float16 near its largest value, 65504: nothing may overflow on the way"))
    return cases


# 005 mlp_forward -------------------------------------------------------------

def mlp_forward_cases(rng):
    cases = []
    for _ in range(4):
        n, d, h, m = _sizes(rng, 4, 1, 9)
        cases.append(Case({"X": _normal(rng, (n, d)), "params": _params(rng, d, h, m)}))
    cases.append(Case({"X": _normal(rng, (3, 4)), "params": _params(rng, 4, 4, 4)}, "square layers"))
    return cases


# 006 mse_loss_and_grad -------------------------------------------------------

def mse_cases(rng):
    cases = []
    for _ in range(4):
        n, m = _sizes(rng, 2)
        cases.append(Case({"Y_hat": _normal(rng, (n, m)), "Y": _normal(rng, (n, m))}))
    cases.append(Case({"Y_hat": _normal(rng, (6, 2), np.float32), "Y": _normal(rng, (6, 2), np.float32)},
                      "float32 (the loss is still a Python float)", **FLOAT32))
    cases.append(Case({"Y_hat": _normal(rng, (1, 1)), "Y": _normal(rng, (1, 1))}, "a single entry"))
    Y_hat = _normal(rng, (4, 3))
    Y_hat[int(rng.integers(0, 4)), int(rng.integers(0, 3))] = np.nan
    cases.append(Case({"Y_hat": Y_hat, "Y": _normal(rng, (4, 3))},
                      "a NaN prediction: the mean over every entry is NaN (a diverged model must show)"))
    return cases


# 007 linear_backward ---------------------------------------------------------

def linear_backward_cases(rng):
    cases = _every_dtype(rng, lambda n, i, o: {"dZ": (n, o), "x": (n, i), "W": (i, o)})
    n = int(rng.integers(2, 6))
    cases.append(Case({"dZ": _normal(rng, (n, n)), "x": _normal(rng, (n, n)), "W": _normal(rng, (n, n))},
                      "square W (a missing transpose keeps the shape)"))
    n, i = _sizes(rng, 2, 2, 8)
    cases.append(Case({"dZ": _normal(rng, (n, 1)), "x": _normal(rng, (n, i)), "W": _normal(rng, (i, 1))},
                      "one output feature: db has shape (1,)"))
    return cases


# 008 relu_backward -----------------------------------------------------------

def relu_backward_cases(rng):
    cases = []
    for _ in range(4):
        shape = tuple(_sizes(rng, 2, 1, 8))
        Z = _normal(rng, shape)
        Z[rng.random(shape) < 0.25] = 0.0
        cases.append(Case({"dA": _normal(rng, shape), "Z": Z}, "Z with exact zeros"))
    shape = (3, 4)
    cases.append(Case({"dA": -np.abs(_normal(rng, shape)), "Z": _normal(rng, shape)},
                      "negative upstream gradients (a mask from dA goes wrong)"))
    for dtype in (np.float32, np.float16):
        cases.append(Case({"dA": _normal(rng, shape, dtype), "Z": _normal(rng, shape, dtype)},
                          f"{np.dtype(dtype).name}: the result keeps it"))
    for dtype in (np.float32, np.float16):
        cases.append(Case({"dA": _normal(rng, shape, dtype), "Z": _normal(rng, shape)},
                          f"dA {np.dtype(dtype).name}, Z float64: the result keeps dA's dtype"))
    cases.append(Case({"dA": _normal(rng, shape), "Z": np.abs(_normal(rng, shape)) + 0.5},
                      "every gate open: the result equals dA, and is still a new array"))
    shape = tuple(_sizes(rng, 2, 2, 6))
    Z, dA = _normal(rng, shape), _normal(rng, shape)
    Z.flat[0], Z.flat[-1] = -abs(Z.flat[0]), -abs(Z.flat[-1])   # two shut gates ...
    dA.flat[0], dA.flat[-1] = rng.choice([np.inf, -np.inf]), np.nan  # ... meeting non-finite gradients
    Z.flat[1] = 0.0  # and a finite gradient at Z == 0 (shut too), which tells `Z >= 0` apart from this slip
    cases.append(Case({"dA": dA, "Z": Z}, "inf and NaN in dA where the gate is shut: the result there is 0"))
    return cases


# 009 first_linear_backward ---------------------------------------------------

def first_linear_backward_cases(rng):
    cases = []
    for _ in range(4):
        n, d, h = _sizes(rng, 3)
        cases.append(Case({"dZ1": _normal(rng, (n, h)), "X": _normal(rng, (n, d)), "W1": _normal(rng, (d, h))}))
    n = int(rng.integers(2, 6))
    cases.append(Case({"dZ1": _normal(rng, (n, n)), "X": _normal(rng, (n, n)), "W1": _normal(rng, (n, n))},
                      "square matrices"))
    n, d, h = _sizes(rng, 3, 2, 8)
    cases.append(Case({"dZ1": _normal(rng, (n, h), np.float32), "X": _normal(rng, (n, d), np.float32),
                       "W1": _normal(rng, (d, h), np.float32)}, "float32: the result keeps it", **FLOAT32))
    cases.append(Case({"dZ1": _normal(rng, (n, 1)), "X": _normal(rng, (n, d)), "W1": _normal(rng, (d, 1))},
                      "one hidden unit: db1 has shape (1,)"))
    # the lesson's point, measured: a long batch, so that dX = dZ1 @ W1.T (batch, in_features) is megabytes
    n, d, h = MEMORY_BATCH, MEMORY_IN, int(rng.integers(2, 6))
    cases.append(Case({"dZ1": _normal(rng, (n, h)), "X": _normal(rng, (n, d)), "W1": _normal(rng, (d, h))},
                      f"memory measured: batch {n}, in_features {d}, hidden {h}", measure=True))
    return cases


#: 009's measured case: dX would be 4096 x 64 float64 numbers, 2 MiB; dW1 and db1 are a few KiB.
MEMORY_BATCH, MEMORY_IN = 4096, 64


def first_backward_memory_allowed(args):
    """Four times the two gradients' bytes, plus 64 KiB of room (NumPy's small temporaries)."""
    (batch, d), h = args["X"].shape, args["dZ1"].shape[1]
    return 4 * (d * h + h) * args["X"].itemsize + 64 * 1024


FIRST_BACKWARD_MEMORY = MemoryBound(
    first_backward_memory_allowed,
    rule="four times the bytes of dW1 and db1, plus 64 KiB: no (batch, in_features) array",
    shortcut="compute only dW1 and db1: dX = dZ1 @ W1.T is a (batch, in_features) array that nothing upstream "
             "uses, the waste this lesson removes")


# 010 mlp_backward -------------------------------------------------------------

def mlp_backward_cases(rng):
    from shared import lesson_blocks  # the helper's forward pass makes a valid cache
    cases = []
    for n, d, h, m in [_sizes(rng, 4, 1, 9) for _ in range(4)] + [[4, 3, 3, 3]]:
        params = _params(rng, d, h, m)
        _, cache = lesson_blocks.mlp_forward(_normal(rng, (n, d)), params)
        cases.append(Case({"dY_hat": _normal(rng, (n, m)), "params": params, "cache": cache}))
    return cases


# The corners every run draws (tests/test_corners.py) ---------------------------

def _arg_dtype(name, dtype):
    return Corner(f"{name} {np.dtype(dtype).name}",
                  lambda case: valid(case) and np.asarray(case.args[name]).dtype == dtype)


def _all_sizes_one(names):
    return Corner("every size 1", lambda case: valid(case) and all(case.args[name] == 1 for name in names))


def _square(*names):
    return Corner("square matrices (a missing transpose keeps the shape)", lambda case: valid(case) and all(
        len(set(np.shape(case.args[name]))) == 1 for name in names))


INIT_CORNERS = (_all_sizes_one(("in_features", "hidden", "out_features")),
                Corner("unequal widths", lambda case: valid(case) and len(
                    {case.args["in_features"], case.args["hidden"], case.args["out_features"]}) == 3))
LINEAR_CORNERS = (_arg_dtype("x", np.float32), _arg_dtype("x", np.float16),
                  Corner("1x1", lambda case: valid(case) and case.args["W"].shape == (1, 1)))
RELU_CORNERS = (
    Corner("exact zeros", lambda case: valid(case) and bool(np.any(case.args["z"] == 0))),
    Corner("inf and -inf", lambda case: valid(case) and any_entry(case.args["z"], np.isposinf)
           and any_entry(case.args["z"], np.isneginf)),
    Corner("float16 near its largest value", lambda case: valid(case) and case.args["z"].dtype == np.float16
           and any_entry(case.args["z"], lambda z: np.abs(z) > 30000)),
    Corner("an empty array", lambda case: valid(case) and case.args["z"].size == 0),
    Corner("no negative entry (still a new array)", lambda case: valid(case) and case.args["z"].size > 0
           and bool(np.all(case.args["z"] > 0))),
)
MLP_FORWARD_CORNERS = (Corner("square layers", lambda case: valid(case) and len(
    {case.args["params"]["W1"].shape[0], case.args["params"]["W1"].shape[1], case.args["params"]["W2"].shape[1]}) == 1),)
MSE_CORNERS = (Corner("a single entry", lambda case: valid(case) and case.args["Y"].size == 1),
               Corner("a NaN prediction", lambda case: valid(case) and any_entry(case.args["Y_hat"], np.isnan)),
               _arg_dtype("Y_hat", np.float32))
LINEAR_BACKWARD_CORNERS = (_arg_dtype("dZ", np.float32), _arg_dtype("dZ", np.float16), _square("dZ", "x", "W"),
                           Corner("one output feature", lambda case: valid(case) and case.args["dZ"].shape[1] == 1))
RELU_BACKWARD_CORNERS = (
    Corner("exact zeros in Z", lambda case: valid(case) and bool(np.any(case.args["Z"] == 0))),
    Corner("inf or NaN in dA at a shut gate", lambda case: valid(case) and bool(np.any(
        ~np.isfinite(case.args["dA"]) & ~(case.args["Z"] > 0)))),
    Corner("every gate open", lambda case: valid(case) and bool(np.all(case.args["Z"] > 0))),
    Corner("dA float16, Z float64", lambda case: valid(case) and case.args["dA"].dtype == np.float16
           and case.args["Z"].dtype == np.float64),
)
FIRST_BACKWARD_CORNERS = (_arg_dtype("X", np.float32), _square("dZ1", "X", "W1"),
                          Corner("one hidden unit", lambda case: valid(case) and case.args["dZ1"].shape[1] == 1))
MLP_BACKWARD_CORNERS = (Corner("square layers", lambda case: valid(case) and len(
    {case.args["params"]["W1"].shape[0], case.args["params"]["W1"].shape[1],
     case.args["params"]["W2"].shape[1]}) == 1),)


LESSONS = (
    LessonSpec("001", batch_cases, atol=1e-12, refuses=BATCH_REFUSALS,
               corners=(_all_sizes_one(SIZES),)),
    LessonSpec("002", init_cases, corners=INIT_CORNERS),
    LessonSpec("003", linear_forward_cases, corners=LINEAR_CORNERS),
    LessonSpec("004", relu_forward_cases, exact=True, corners=RELU_CORNERS, equivalent_mutants=(  # max(z, 0) rounds nothing
        ("swap the first two arguments of `maximum` | return np.maximum(z, 0)",
         "np.maximum is symmetric in its two arguments (and keeps the array's dtype either way)"),)),
    LessonSpec("005", mlp_forward_cases, corners=MLP_FORWARD_CORNERS, isolate=("linear_forward", "relu_forward"), fresh_result=False),
    LessonSpec("006", mse_cases, corners=MSE_CORNERS),
    LessonSpec("007", linear_backward_cases, corners=LINEAR_BACKWARD_CORNERS),
    LessonSpec("008", relu_backward_cases, exact=True, corners=RELU_BACKWARD_CORNERS),  # a mask rounds nothing
    LessonSpec("009", first_linear_backward_cases, memory=FIRST_BACKWARD_MEMORY, corners=FIRST_BACKWARD_CORNERS),
    LessonSpec("010", mlp_backward_cases, corners=MLP_BACKWARD_CORNERS, isolate=("linear_forward", "relu_forward", "mse_loss_and_grad",
                                                   "mlp_forward", "linear_backward", "relu_backward",
                                                   "first_linear_backward"),
               equivalent_mutants=(
        ("key 'Z1' -> 'A1' | dZ1 = relu_backward(dA1, cache[\"Z1\"])",
         "A1 = relu(Z1) is positive exactly where Z1 is, so both give relu_backward the same mask "
         "(for every cache that mlp_forward makes, which is the function's contract)"),
        *((f"key 'W1' -> {other!r} | dW1, db1 = first_linear_backward(dZ1, cache[\"A0\"], params[\"W1\"])",
           "first_linear_backward does not use its third argument (it is there so that its signature "
           "matches linear_backward's)") for other in ("W2", "b1", "b2")))),
)
