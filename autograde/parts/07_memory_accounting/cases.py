"""Hidden cases of Part 7 (lessons 036-040), declared once.

The accounting lessons (036-038) are exact integer arithmetic: every dtype, every ZeRO
stage, worker counts that divide the parameters and ones that do not (each rank of an
uneven split), checkpointing and micro-batches, the ZeRO paper's own figures, and every
class of bad input.

039 reports bytes that tracemalloc measures in the grading kernel, compared with the
reference's measurement (made by the judge) within a few percent (``key_tolerances``), while
the counted bytes are compared exactly.

040 is graded on what it does, never on what it reports: it runs on a cluster the grader makes
(``OnCluster``; its ledger is compared with the reference's exactly), every worker's arrays at
the end (parameters, Adam's moments, master weights) are compared with the reference's (shapes,
dtypes, values), and three large cases measure its peak memory against a bound written from
036-038 (``MemoryBound``). So a loop that ignores a switch scores 0 whether the switch shows in
what the workers hold (data parallelism, ZeRO, mixed precision) or only in the memory
(checkpointing, accumulation, a full Adam state on every worker under ZeRO).
"""

from dataclasses import replace

import numpy as np

from grading.spec import EXACT, FLOAT32, Case, LessonSpec, MemoryBound, OnCluster, Raises, Refusal
from shared import mlp
from shared.memory import BYTES_PER_NUMBER, training_loop_allowed_bytes
from shared.training import TrainingConfig

DTYPES = ("float16", "float32", "float64", "mixed")
#: Measured bytes: the learner's kernel and the judge measure the same steps; a few percent and a few
#: KiB of Python objects apart at most, while a switch that is ignored costs far more.
MEASURED = {"rtol": 0.05, "atol": 4096}


def _seed(rng):
    return int(rng.integers(0, 2**31))


def _dtype(rng):
    return str(rng.choice(DTYPES))


def _known(dtype):
    return dtype == "mixed" or dtype in BYTES_PER_NUMBER


# 036 compute_param_memory_bytes and 037 compute_optimizer_memory_bytes ------------------

def _layout_args(rng, *, stage=None, workers=None, uneven=True):
    N = int(rng.integers(2, 9)) if workers is None else workers
    psi = int(rng.integers(N, 5000)) // N * N + (int(rng.integers(1, N)) if uneven and N > 1 else 0)
    return {"num_params": psi, "dtype": _dtype(rng), "zero_stage": int(rng.integers(0, 4)) if stage is None else stage,
            "num_workers": N, "rank": int(rng.integers(0, N))}


def layout_cases(rng):
    cases = [Case({"num_params": int(rng.integers(1, 10**6)), "dtype": dtype, "zero_stage": 0, "num_workers": 1,
                   "rank": 0}, f"{dtype}, one worker") for dtype in DTYPES]
    for stage in range(4):
        args = _layout_args(rng, stage=stage)
        cases.append(Case(args, f"stage {stage}: {args['num_params']} parameters on {args['num_workers']} workers "
                                f"(N does not divide them), rank {args['rank']}"))
    N = int(rng.integers(3, 8))
    psi = N * int(rng.integers(2, 50)) + N - 1
    for rank in (0, N - 2, N - 1):  # the last of the longer shards, and the first of the shorter ones
        cases.append(Case({"num_params": psi, "dtype": _dtype(rng), "zero_stage": 3, "num_workers": N, "rank": rank},
                          f"{psi} parameters on {N} workers, stage 3, rank {rank}"))
    args = _layout_args(rng, uneven=False, stage=int(rng.integers(1, 4)))
    cases.append(Case(args, "N divides the parameters"))
    cases.append(Case({"num_params": 3, "dtype": "float32", "zero_stage": 2, "num_workers": 5, "rank": 4},
                      "more workers than parameters: worker 4 owns nothing"))
    cases.append(Case({"num_params": 1, "dtype": _dtype(rng), "zero_stage": 3, "num_workers": 1, "rank": 0},
                      "one parameter"))
    cases.append(Case({"num_params": 0, "dtype": _dtype(rng), "zero_stage": int(rng.integers(0, 4)),
                       "num_workers": 2, "rank": 1}, "no parameters at all"))
    stage = int(rng.integers(0, 4))
    cases.append(Case({"num_params": 7_500_000_000, "dtype": "mixed", "zero_stage": stage, "num_workers": 64,
                       "rank": int(rng.integers(0, 64))}, f"the ZeRO paper's 7.5 billion parameters, stage {stage}"))
    for stage in (1, 2, 3):  # mixed precision's 4 + 8 bytes split by stage, on every run
        args = {**_layout_args(rng, stage=stage), "dtype": "mixed"}
        cases.append(Case(args, f"mixed precision, stage {stage}: {args['num_params']} parameters on "
                                f"{args['num_workers']} workers (N does not divide them), rank {args['rank']}"))
    good = _layout_args(rng)
    bad = [({"dtype": "bfloat16"}, "the dtype is bfloat16 (unknown)"), ({"dtype": "int8"}, "the dtype is int8"),
           ({"num_params": -int(rng.integers(2, 100))}, "num_params is negative"), ({"num_params": -1}, "num_params is -1"),
           ({"zero_stage": 4}, "zero_stage is 4"), ({"zero_stage": -1}, "zero_stage is -1"),
           ({"num_workers": 0, "rank": 0}, "num_workers is 0"),
           ({"rank": good["num_workers"]}, "rank is num_workers"), ({"rank": -1}, "rank is -1")]
    cases += [Raises({**good, **change}, ValueError, why) for change, why in bad]
    return cases


LAYOUT_REFUSALS = (
    Refusal("an unknown dtype", ValueError, lambda a: not _known(a["dtype"])),
    Refusal("num_params < 0", ValueError, lambda a: a["num_params"] < 0),
    Refusal("zero_stage outside {0, 1, 2, 3}", ValueError, lambda a: a["zero_stage"] not in (0, 1, 2, 3)),
    Refusal("num_workers < 1", ValueError, lambda a: a["num_workers"] < 1),
    Refusal("rank outside [0, num_workers)", ValueError, lambda a: not 0 <= a["rank"] < a["num_workers"]),
)

# 038 compute_peak_activation_memory_bytes -------------------------------------------------

def activation_cases(rng):
    cases = []
    for dtype in DTYPES:
        B, D, L = int(rng.integers(1, 200)), int(rng.integers(1, 130)), int(rng.integers(1, 9))
        cases.append(Case({"batch_size": B, "width": D, "num_layers": L, "dtype": dtype, "segment_size": None,
                           "num_micro_batches": 1}, f"{dtype}, no checkpointing, one micro-batch"))
    for _ in range(3):
        L = int(rng.integers(2, 17))
        s = int(rng.integers(1, L + 2))
        cases.append(Case({"batch_size": int(rng.integers(1, 300)), "width": int(rng.integers(1, 100)),
                           "num_layers": L, "dtype": _dtype(rng), "segment_size": s, "num_micro_batches": 1},
                          f"checkpointing {L} layers in segments of {s}"))
    for _ in range(3):
        B = int(rng.integers(10, 500))
        k = int(rng.integers(2, 10))
        B += 0 if B % k else 1  # k does not divide B: the micro-batches differ in size
        cases.append(Case({"batch_size": B, "width": int(rng.integers(1, 100)), "num_layers": int(rng.integers(1, 9)),
                           "dtype": _dtype(rng), "segment_size": None, "num_micro_batches": k},
                          f"{B} rows in {k} micro-batches"))
    B = int(rng.integers(5, 50))
    cases.append(Case({"batch_size": B, "width": 8, "num_layers": 4, "dtype": "float32", "segment_size": None,
                       "num_micro_batches": B}, "one row per micro-batch"))
    k, q = int(rng.integers(3, 10)), int(rng.integers(2, 40))
    cases.append(Case({"batch_size": k * q + 1, "width": int(rng.integers(1, 100)),
                       "num_layers": int(rng.integers(1, 9)), "dtype": _dtype(rng), "segment_size": None,
                       "num_micro_batches": k},
                      f"{k * q + 1} rows in {k} micro-batches: the largest holds {q + 1} (rounded up, "
                      f"not to the nearest)"))
    L = int(rng.integers(4, 17))
    cases.append(Case({"batch_size": int(rng.integers(50, 2000)), "width": int(rng.integers(8, 300)), "num_layers": L,
                       "dtype": "mixed", "segment_size": int(rng.integers(2, L)),
                       "num_micro_batches": int(rng.integers(2, 9))}, "everything at once, mixed precision"))
    good = {"batch_size": 12, "width": 8, "num_layers": 4, "dtype": "float32", "segment_size": 2,
            "num_micro_batches": 3}
    bad = [({"dtype": "float128"}, "the dtype is float128 (unknown)"), ({"batch_size": 0}, "batch_size is 0"),
           ({"width": -int(rng.integers(1, 9))}, "width is negative"), ({"num_layers": 0}, "num_layers is 0"),
           ({"segment_size": 0}, "segment_size is 0"), ({"num_micro_batches": 0}, "num_micro_batches is 0"),
           ({"num_micro_batches": 13}, "13 micro-batches for 12 rows")]
    cases += [Raises({**good, **change}, ValueError, why) for change, why in bad]
    return cases


ACTIVATION_EQUIVALENT = (
    ("swap the first two arguments of `estimate_checkpointing_memory_savings` | peak = "
     "estimate_checkpointing_memory_savings(largest, width",
     "018's bytes depend on the batch size and the width only through their product (B D b per array, B D per mask)"),
)

ACTIVATION_REFUSALS = (
    Refusal("an unknown dtype", ValueError, lambda a: not _known(a["dtype"])),
    Refusal("a size below 1 (batch_size, width, num_layers, segment_size)", ValueError,
            lambda a: min(a["batch_size"], a["width"], a["num_layers"]) < 1
            or (a["segment_size"] is not None and a["segment_size"] < 1)),
    Refusal("num_micro_batches outside [1, batch_size]", ValueError,
            lambda a: not 1 <= a["num_micro_batches"] <= a["batch_size"]),
)


# 039 compare_memory_with_and_without_optimizations ----------------------------------------

def _mlp(rng, width, layers, dtype=np.float64, out=2):
    params = mlp.init_params([width] * layers + [out], seed=_seed(rng))
    return {key: value.astype(dtype) for key, value in params.items()}


def _batch(rng, rows, width, dtype=np.float64, out=2):
    return rng.standard_normal((rows, width)).astype(dtype), rng.standard_normal((rows, out)).astype(dtype)


def compare_cases(rng):
    cases = []
    for dtype, about in ((np.float64, "float64"), (np.float32, "float32")):
        width, layers = int(rng.integers(12, 21)), int(rng.integers(3, 5))
        N, k = int(rng.integers(2, 4)), int(rng.integers(2, 4))
        rows = int(rng.integers(8, 16)) * N + int(rng.integers(1, N))  # N does not divide the batch
        config = TrainingConfig(num_workers=N, num_micro_batches=k, segment_size=int(rng.integers(1, layers)),
                                mixed_precision=True, zero_stage=1)
        X, Y = _batch(rng, rows, width, dtype)
        cases.append(Case({"params": _mlp(rng, width, layers, dtype), "X": X, "Y": Y, "config": config},
                          f"{about} parameters, every technique: {N} workers, {k} micro-batches, {rows} rows"))
    width = int(rng.integers(12, 21))
    X, Y = _batch(rng, 36, width)
    config = TrainingConfig(num_workers=3, num_micro_batches=2, segment_size=None, mixed_precision=False, zero_stage=0)
    cases.append(Case({"params": _mlp(rng, width, 4), "X": X, "Y": Y, "config": config},
                      "some techniques off: no checkpointing, no mixed precision, no ZeRO"))
    X, Y = _batch(rng, 24, 16)
    cases.append(Case({"params": _mlp(rng, 16, 2), "X": X, "Y": Y, "config": TrainingConfig()},
                      "every technique off: six rows alike"))
    X, Y = _batch(rng, 7, 16)
    cases.append(Case({"params": _mlp(rng, 16, 3), "X": X, "Y": Y,
                       "config": TrainingConfig(num_workers=2, num_micro_batches=3, segment_size=1)},
                      "7 rows on 2 workers in 3 micro-batches: the smallest worker's 3 rows, one each"))
    X, Y = _batch(rng, 3, 16)
    cases.append(Case({"params": _mlp(rng, 16, 3), "X": X, "Y": Y,
                       "config": TrainingConfig(num_workers=3, zero_stage=1)}, "as many workers as rows (3)"))
    good = {"params": _mlp(rng, 8, 3), "X": _batch(rng, 12, 8)[0], "Y": _batch(rng, 12, 8)[1],
            "config": TrainingConfig(num_workers=2, num_micro_batches=2, segment_size=2)}
    bad = [({"params": {**good["params"], "W2": np.ones((6, 8)), "W1": np.ones((8, 6)), "b1": np.zeros(6)}},
            "a hidden layer is 6 wide and X 8"),
           ({"params": {**good["params"], "W2": np.ones((8, 6)), "b2": np.zeros(6), "W3": np.ones((6, 2))}},
            "the last layer's input is 6 wide and X 8"),
           ({"config": replace(good["config"], num_workers=13)}, "13 workers for 12 examples"),
           ({"config": replace(good["config"], num_workers=5, num_micro_batches=3)},
            "3 micro-batches and the smallest of 5 workers has 2 examples")]
    cases += [Raises({**good, **change}, ValueError, why) for change, why in bad]
    return cases


def _widths_differ(a):
    width = a["X"].shape[1]
    return any(value.shape[0] != width for key, value in a["params"].items() if key.startswith("W"))


def _too_many_workers(a):
    return a["config"].num_workers > len(a["X"])


def _micro_batches_do_not_fit(a):
    return not _too_many_workers(a) and a["config"].num_micro_batches > len(a["X"]) // a["config"].num_workers


FLOOR = ("k is an int: k > B // N and k > B / N hold together (k > floor(x) exactly when k > x), and an "
         "unchecked B < N leaves B // N = 0 < k")
NO_SHARD = "with N > B the smallest worker has B // N = 0 rows, and the micro-batch check refuses it with ValueError"
SAME_BYTES = "036's parameters and gradients take the same bytes at stages 0 and 1, the only ones a TrainingConfig allows"
COMPARE_EQUIVALENT = (
    ('drop the `raise` | raise ValueError(f"{N} workers for {len(X)} examples: some worker would get no data")',
     NO_SHARD),
    ("`//` -> `/` | if k > len(X) // N:", FLOOR),
    ("constant 1 + 1 | for i in range(1, layers + 1)):",
     "the first layer's input is X's width in any MLP that can run on X (else X @ W1 fails with ValueError)"),
    ("key 'parameters' -> 'gradients' | entry = {\"configuration\": name, \"parameters\": memory[\"parameters\"],",
     SAME_BYTES),
    ("key 'gradients' -> 'parameters' | \"gradients\": memory[\"gradients\"] * (1 + running_sum),", SAME_BYTES),
)

COMPARE_REFUSALS = (
    Refusal("a layer's input is not as wide as X", ValueError, _widths_differ),
    Refusal("more workers than examples", ValueError, _too_many_workers),
    Refusal("more micro-batches than the smallest worker's examples", ValueError, _micro_batches_do_not_fit),
)


# 040 full_distributed_training_loop ---------------------------------------------------------

F16 = {"rtol": 2e-3, "atol": 1e-5}  # mixed precision: float16 passes may round in another order


def _parameter_count(width, layers, out=2):
    return (layers - 1) * (width * width + width) + width * out + out


def _zero_width(rng, N, layers, divides):
    """A width (6 to 17) whose MLP's parameter count N divides, or does not divide."""
    start = int(rng.integers(6, 12))
    return next(w for w in range(start, start + 6) if (_parameter_count(w, layers) % N == 0) == divides)


#: The measured cases: large batches and small models (the activations dominate the peak) for
#: checkpointing and accumulation, a large model on 8 workers for ZeRO (the state dominates).
MEASURED_CHECKPOINTING = {"width": 24, "layers": 32, "rows": 4096, "workers": 2, "segment_size": 4}
MEASURED_ACCUMULATION = {"width": 32, "layers": 4, "rows": 16384, "workers": 2, "micro_batches": 4}
MEASURED_ZERO = {"width": 128, "layers": 4, "rows": 64, "workers": 8}


def loop_cases(rng):
    def case(config, about, width=None, layers=None, rows=None, dtype=np.float64, **extra):
        width = int(rng.integers(6, 11)) if width is None else width
        layers = int(rng.integers(3, 5)) if layers is None else layers
        rows = int(rng.integers(12, 24)) if rows is None else rows
        X, Y = _batch(rng, rows, width, dtype)
        return Case({"params": _mlp(rng, width, layers, dtype), "X": X, "Y": Y, "config": config}, about, **extra)

    steps = 2
    lr = float(rng.uniform(1e-3, 1e-2))
    plain = TrainingConfig(steps=steps, learning_rate=lr)
    N = int(rng.integers(2, 4))
    Z = int(rng.integers(2, 5))
    even, uneven = _zero_width(rng, Z, 3, True), _zero_width(rng, 3, 3, False)
    cases = [case(plain, "every switch off: plain Adam on one worker"),
             case(replace(plain, num_workers=N), f"data parallel on {N} workers (uneven shards)",
                  rows=int(rng.integers(4, 8)) * N + 1),
             case(replace(plain, num_micro_batches=int(rng.integers(2, 5))), "gradient accumulation", width=16,
                  rows=int(rng.integers(60, 90))),
             case(replace(plain, steps=1, segment_size=2), "checkpointing 6 layers in segments of 2, one step",
                  width=16, layers=6, rows=int(rng.integers(60, 90)))]
    # Memory, measured, one step (the peak is the first step's): a loop that ignores the case's switch needs 1.5
    # to 4 x the bound. Before every float16
    # case: there a loop that ignores accumulation or checkpointing also rounds otherwise, and the judge would
    # see the values first, not the memory
    c = MEASURED_CHECKPOINTING
    cases.append(case(replace(plain, steps=1, num_workers=c["workers"], segment_size=c["segment_size"]),
                      f"memory measured, checkpointing: {c['layers']} layers {c['width']} wide in segments of "
                      f"{c['segment_size']}, {c['rows']:,} examples on {c['workers']} workers",
                      width=c["width"], layers=c["layers"], rows=c["rows"], measure=True))
    c = MEASURED_ACCUMULATION
    cases.append(case(replace(plain, steps=1, num_workers=c["workers"], num_micro_batches=c["micro_batches"]),
                      f"memory measured, gradient accumulation: {c['rows']:,} examples on {c['workers']} workers in "
                      f"{c['micro_batches']} micro-batches each ({c['layers']} layers {c['width']} wide)",
                      width=c["width"], layers=c["layers"], rows=c["rows"], measure=True))
    c = MEASURED_ZERO
    cases.append(case(replace(plain, steps=1, num_workers=c["workers"], zero_stage=1, mixed_precision=True,
                              loss_scale=2.0 ** 8),
                      f"memory measured, ZeRO: {_parameter_count(c['width'], c['layers']):,} parameters in mixed "
                      f"precision on {c['workers']} workers", width=c["width"], layers=c["layers"], rows=c["rows"],
                      measure=True, **F16))
    cases += [case(replace(plain, mixed_precision=True, loss_scale=1024), "mixed precision, the scale given as an int",
                   **F16),
              case(replace(plain, num_workers=Z, zero_stage=1),
                   f"ZeRO on {Z} workers, which divide the {_parameter_count(even, 3):,} parameters", width=even,
                   layers=3, rows=4 * Z + 1),
              case(replace(plain, num_workers=3, zero_stage=1),
                   f"ZeRO on 3 workers, which do not divide the {_parameter_count(uneven, 3):,} parameters",
                   width=uneven, layers=3, rows=13),
              case(replace(plain, num_workers=2, zero_stage=1), "no cluster given: a new Cluster(N) of its own",
                   rows=int(rng.integers(8, 14)), own_cluster=True),
              case(replace(plain, num_workers=2, num_micro_batches=2, segment_size=2, mixed_precision=True,
                           zero_stage=1, loss_scale=2.0 ** 8), "every switch on", width=12, layers=5, rows=42, **F16),
              case(replace(plain, num_workers=2), "as many workers as examples (2)", rows=2),
              case(replace(plain, num_workers=2, num_micro_batches=3), "7 examples on 2 workers in 3 micro-batches "
                   "(the smallest worker's 3 examples, one each)", rows=7),
              case(replace(plain, num_workers=2, mixed_precision=True, loss_scale=2.0 ** 40),
                   "a loss scale of 2**40: every step skipped, the scale halved each time", **F16),
              case(replace(plain, steps=3, mixed_precision=True, zero_stage=1, num_workers=2, loss_scale=4.0,
                           growth_interval=1), "growth_interval 1: the scale doubles after every clean step", **F16),
              case(replace(plain, num_workers=3, zero_stage=1, num_micro_batches=2), "float32 parameters, ZeRO",
                   dtype=np.float32, **FLOAT32)]
    # Accumulation at a scale where the running sum of 32-row micro-batches, 32 * 2**12 * g, overflows float16
    # while the mean, 2**12 * g, fits (targets three times larger than usual, gradients around 1): summed in
    # float32 no step is skipped, summed in float16 the first one is (checked on 30 draws)
    width = int(rng.integers(6, 11))
    X, Y = _batch(rng, 64, width)
    cases.append(Case({"params": _mlp(rng, width, 3), "X": X, "Y": 3 * Y,
                       "config": replace(plain, mixed_precision=True, num_micro_batches=2, loss_scale=2.0 ** 12)},
                      "mixed precision, 2 micro-batches of 32 rows at a scale of 2**12: the running sum of the "
                      "float16 gradients overflows float16, not float32", **F16))
    tiny_X, tiny_Y = _batch(rng, 6, 1, out=1)
    cases.append(Case({"params": {"W1": np.array([[0.5]]), "b1": np.zeros(1)}, "X": tiny_X, "Y": tiny_Y,
                       "config": replace(plain, num_workers=2, zero_stage=1)},
                      "ZeRO with as many workers as parameters (2): one each"))
    fixed = mlp.init_params([8, 8, 8, 2], seed=5)  # fixed data: at this scale float16 overflows now and then
    fixed_X = np.random.default_rng(0).standard_normal((24, 8))
    cases.append(Case({"params": fixed, "X": fixed_X, "Y": _fixed_targets(),
                       "config": TrainingConfig(steps=6, mixed_precision=True, loss_scale=2.0 ** 17,
                                                growth_interval=2)},
                      "a scale of 2**17, growth_interval 2: steps skipped, then the scale doubles again", **F16))
    cases.append(_skip_after_a_clean_step())
    params = _mlp(rng, 4, 2)
    X, Y = _batch(rng, 12, 4)
    good = {"params": params, "X": X, "Y": Y, "config": plain}
    tiny = {"W1": np.ones((1, 1)), "b1": np.zeros(1)}
    bad = [({"Y": Y[:10]}, "X has 12 rows and Y 10"),
           ({"config": replace(plain, num_workers=13)}, "13 workers for 12 examples"),
           ({"config": replace(plain, num_workers=5, num_micro_batches=3)},
            "3 micro-batches and the smallest of 5 workers has 2 examples"),
           ({"config": replace(plain, num_micro_batches=13)}, "13 micro-batches for 12 examples on one worker"),
           ({"params": tiny, "X": X[:, :1], "Y": Y[:, :1], "config": replace(plain, num_workers=3, zero_stage=1)},
            "ZeRO with 3 workers for 2 parameters")]
    cases += [Raises({**good, **change}, ValueError, why) for change, why in bad]
    return cases


def _fixed_targets():
    rng = np.random.default_rng(0)
    rng.standard_normal((24, 8))
    return rng.standard_normal((24, 2))


def _skip_after_a_clean_step():
    """Fixed data whose gradients grow at the second step (a learning rate of 0.1 moves the weights far):
    step 0 is clean, step 1 overflows at 2**14 and is skipped, three clean steps follow and the scale doubles
    at step 5. A scaler that does not reset its count of clean steps on a skip doubles two steps early."""
    rng = np.random.default_rng(9)
    width = int(rng.integers(6, 11))
    params = mlp.init_params([width] * 3 + [2], seed=int(rng.integers(2**31)))
    X, Y = rng.standard_normal((16, width)), rng.standard_normal((16, 2))
    config = TrainingConfig(steps=6, learning_rate=0.1, mixed_precision=True, loss_scale=2.0 ** 14, growth_interval=3)
    return Case({"params": params, "X": X, "Y": Y, "config": config},
                "a skip right after a clean step, growth_interval 3: the count of clean steps starts again", **F16)


def _loop_too_many_workers(a):
    return len(a["X"]) == len(a["Y"]) and _too_many_workers(a)


def _loop_micro_batches(a):
    return len(a["X"]) == len(a["Y"]) and _micro_batches_do_not_fit(a)


def _zero_without_elements(a):
    size = sum(value.size for value in a["params"].values())
    return (len(a["X"]) == len(a["Y"]) and not _too_many_workers(a) and not _micro_batches_do_not_fit(a)
            and a["config"].zero_stage and a["config"].num_workers > size)


def _loop_workers(a):
    """The grader's cluster: config.num_workers workers, when that many can share the examples."""
    N = a["config"].num_workers
    return N if 1 <= N <= len(a["X"]) else None


LOOP_REFUSALS = (
    Refusal("X and Y of different lengths", ValueError, lambda a: len(a["X"]) != len(a["Y"])),
    Refusal("more workers than examples", ValueError, _loop_too_many_workers),
    Refusal("more micro-batches than the smallest worker's examples", ValueError, _loop_micro_batches),
    Refusal("ZeRO with more workers than parameters", ValueError, _zero_without_elements),
)

LOOP_MEMORY = MemoryBound(
    lambda a: training_loop_allowed_bytes(a["params"], a["X"], a["config"]),
    rule="1.5 x (twice every worker's parameters, gradients and optimizer state (036, 037), the flat "
         "parameters, and worker 0's activations (038)), plus 64 KiB",
    shortcut="pass segment_size and num_micro_batches on to worker_gradients (a loop that ignores checkpointing or "
             "gradient accumulation gives the same numbers with every layer's, or the whole shard's, activations "
             "at once), and with ZeRO let each worker keep Adam's state of its own shard only (not the whole "
             "vector's, sliced at the end)")

SPLIT = ("split_into_micro_batches (lesson 011, in worker_gradients) refuses a worker with fewer examples than "
         "micro-batches with ValueError itself, before any step")
SAME_ON_EVERY_WORKER = "after the collective every worker holds the same vector (and without ZeRO the same state)"
LOOP_EQUIVALENT = (
    ("`list(x)` -> `x` | keys, size = list(params)", "keys is only iterated, and a dict iterates over its keys"),
    ('drop the `raise` | raise ValueError(f"X has {len(X)} rows but Y has {len(Y)}")',
     "shard_dataset_across_workers (lesson 025) refuses X and Y of different lengths with ValueError itself"),
    ('drop the `raise` | raise ValueError(f"{N} workers for {len(X)} examples: some worker would get no data")',
     NO_SHARD),
    ("`//` -> `/` | if k > len(X) // N:", FLOOR),
    ("drop the right operand of `//` | if k > len(X) // N:", SPLIT),
    ('drop the `raise` | raise ValueError(f"{k} micro-batches do not fit', SPLIT),
    ("`copy(` -> `view(` | working = [flat.astype(np.float16) if mixed else flat.copy()",
     "flat is the loop's own concatenation, and no worker writes into its vector: each step makes new ones"),
    ("`all(` -> `any(` | skipped = mixed and not all(", SAME_ON_EVERY_WORKER),
    ("constant 0 - 1 | final = np.concatenate(master) if mixed and config.zero_stage else (master[0]",
     SAME_ON_EVERY_WORKER),
    ("`float(x)` -> `x` | history[\"loss_scale\"].append(float(scale))",
     "the scale is a float unless a TrainingConfig was given an int, and the judge takes an int equal to the "
     "expected float as that float"),
)

LOOP_KEYS = {"skipped": EXACT, "loss_scale": EXACT}
COMPARE_KEYS = {"parameters": EXACT, "gradients": EXACT, "optimizer": EXACT,
                "activations": EXACT, "predicted": EXACT, "measured": MEASURED}

#: The building blocks 040 uses, from Parts 3 to 6 (worker_gradients in shared.training calls 015 and 017's,
#: and 017's calls 016's: revealed together, a block finds the blocks it calls).
LOOP_BLOCKS = ("shard_dataset_across_workers", "ring_all_reduce_mean", "local_shard_adam_update",
               "all_gather_param_shards", "mlp_forward_checkpointed", "recompute_block_activations",
               "mlp_backward_checkpointed")

LESSONS = (
    LessonSpec("036", layout_cases, **EXACT, exact=True, refuses=LAYOUT_REFUSALS),
    LessonSpec("037", layout_cases, **EXACT, exact=True, refuses=LAYOUT_REFUSALS),
    LessonSpec("038", activation_cases, **EXACT, exact=True, refuses=ACTIVATION_REFUSALS,
               isolate=("estimate_checkpointing_memory_savings",), equivalent_mutants=ACTIVATION_EQUIVALENT),
    LessonSpec("039", compare_cases, refuses=COMPARE_REFUSALS, key_tolerances=COMPARE_KEYS, time_limit=40.0,
               equivalent_mutants=COMPARE_EQUIVALENT, measured_reference=True,
               isolate=("compute_param_memory_bytes", "compute_optimizer_memory_bytes",
                        "compute_peak_activation_memory_bytes", "estimate_checkpointing_memory_savings")),
    LessonSpec("040", loop_cases, rtol=1e-9, atol=1e-12, refuses=LOOP_REFUSALS, key_tolerances=LOOP_KEYS,
               memory=LOOP_MEMORY, on_cluster=OnCluster(_loop_workers), time_limit=60.0, isolate=LOOP_BLOCKS,
               equivalent_mutants=LOOP_EQUIVALENT),
)
