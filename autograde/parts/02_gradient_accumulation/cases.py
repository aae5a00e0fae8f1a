"""Hidden cases of Part 2 (lessons 011-014), declared once.

Each lesson's ``cases(rng)`` draws fresh inputs from the grader's generator;
the judge compares the learner's answers with the reference solutions on
exactly these inputs.  The cases span each contract: batches that k divides
and batches it does not, the extremes k = 1 and k = B, a first micro-batch
(``accumulated`` None) and a later one, float32 as well as float64
(011-013: each lesson that passes the learner's arrays on), and every class of
bad input.
"""

import numpy as np

from grading.inputs import even_and_extreme_splits
from grading.spec import FLOAT32, FLOAT64_REORDERED, Case, Corner, LessonSpec, MemoryBound, Raises, Refusal, valid
from shared.memory import accumulation_activation_bytes
from shared import mlp

SHAPES = {"W1": (3, 4), "b1": (4,), "W2": (4, 2), "b2": (2,)}


def _normal(rng, shape, dtype=np.float64):
    return rng.standard_normal(shape).astype(dtype)


def _grads(rng, dtype=np.float64):
    return {key: _normal(rng, shape, dtype) for key, shape in SHAPES.items()}


def _seed(rng):
    return int(rng.integers(0, 2**31))


# 011 split_into_micro_batches --------------------------------------------------

def split_cases(rng):
    def case(B, k, about, dtype=np.float64):
        return Case({"X": _normal(rng, (B, 3), dtype), "Y": _normal(rng, (B, 2), dtype),
                     "num_micro_batches": k}, about)

    cases = []
    for _ in range(3):
        k = int(rng.integers(2, 7))
        B = k * int(rng.integers(1, 4)) + int(rng.integers(1, k))
        # B % k != 0: the remainder rows go one each to the first micro-batches (not dropped, not piled last)
        cases.append(case(B, k, f"B = {B} is not a multiple of k = {k}"))
    cases += even_and_extreme_splits(rng, case, "k", "micro-batch")  # B a multiple of k, k = B, k = 1
    cases.append(case(1, 1, "a batch of one example"))
    cases.append(case(7, 3, "float32 inputs (keep their dtype)", np.float32))
    # Not declared: k = 3.0.  The reference accepts an integer-valued float, but the docstring asks for an int.
    bad = [(3, 4, "the batch (3 examples) is smaller than the number of micro-batches (4)"),
           (3, 0, "num_micro_batches is 0"), (3, -2, "num_micro_batches is negative"),
           (6, 2.5, "num_micro_batches is 2.5, not a whole number")]
    cases += [Raises({"X": _normal(rng, (B, 2)), "Y": _normal(rng, (B, 1)), "num_micro_batches": k},
                     ValueError, why) for B, k, why in bad]
    cases.append(Raises({"X": _normal(rng, (5, 2)), "Y": _normal(rng, (4, 1)), "num_micro_batches": 2},
                        ValueError, "X and Y have different lengths"))
    return cases


def _not_whole(k):
    return isinstance(k, bool) or not float(k).is_integer()


SPLIT_REFUSALS = (
    Refusal("num_micro_batches < 1", ValueError, lambda a: a["num_micro_batches"] < 1),
    Refusal("num_micro_batches is not a whole number", ValueError, lambda a: _not_whole(a["num_micro_batches"])),
    Refusal("X and Y have different lengths", ValueError, lambda a: len(a["X"]) != len(a["Y"])),
    Refusal("the batch is smaller than num_micro_batches", ValueError,
            lambda a: len(a["X"]) == len(a["Y"]) and 1 <= a["num_micro_batches"] and len(a["X"]) < a["num_micro_batches"]),
)


# 012 accumulate_gradients ------------------------------------------------------

def accumulate_cases(rng):
    cases = [Case({"accumulated": None, "micro_grads": _grads(rng), "micro_batch_size": int(rng.integers(2, 9))},
                  "the first micro-batch (accumulated is None)")]
    for _ in range(3):
        cases.append(Case({"accumulated": _grads(rng), "micro_grads": _grads(rng),
                           "micro_batch_size": int(rng.integers(2, 9))}, "a later micro-batch"))
    # n = 1: returning micro_grads itself, or adding in place, gives the right numbers but shares memory
    cases.append(Case({"accumulated": None, "micro_grads": _grads(rng), "micro_batch_size": 1},
                      "the first micro-batch, of size 1 (the result must be new arrays)"))
    cases.append(Case({"accumulated": _grads(rng), "micro_grads": _grads(rng), "micro_batch_size": 1},
                      "a later micro-batch of size 1 (accumulated must not change)"))
    cases.append(Case({"accumulated": None, "micro_grads": _grads(rng, np.float32), "micro_batch_size": 3},
                      "float32 gradients, first micro-batch", **FLOAT32))
    cases.append(Case({"accumulated": _grads(rng, np.float32), "micro_grads": _grads(rng, np.float32),
                       "micro_batch_size": int(rng.integers(2, 9))}, "float32 gradients", **FLOAT32))
    return cases


# 013 scale_accumulated_gradients -----------------------------------------------

def scale_cases(rng):
    def accumulated():
        return {"W1": _normal(rng, (3, 2)), "b1": _normal(rng, 2)}

    cases = []
    for _ in range(3):
        sizes = [int(n) for n in rng.integers(1, 9, size=int(rng.integers(2, 6)))]
        # The last size tells each mistake apart, so that each is named as itself: not 1 (dividing by it would
        # look like no division), not the count (the division by len(sizes)), and not every other size
        # (unequal sizes tell the division by sum(sizes) from the one by len(sizes))
        telling = [n for n in range(2, 10) if n != len(sizes) and any(n != m for m in sizes[:-1])]
        if sizes[-1] not in telling:
            sizes[-1] = int(rng.choice(telling))
        cases.append(Case({"accumulated": accumulated(), "micro_batch_sizes": sizes}, "unequal sizes"))
    cases.append(Case({"accumulated": accumulated(), "micro_batch_sizes": [3, 3, 3]}, "equal sizes"))
    # a single size: dividing by len(sizes) = 1 leaves the sum undivided
    cases.append(Case({"accumulated": accumulated(), "micro_batch_sizes": [int(rng.integers(2, 9))]},
                      "a single micro-batch"))
    cases.append(Case({"accumulated": accumulated(), "micro_batch_sizes": (4, 1)}, "the sizes as a tuple"))
    # float32 sums stay float32: a division by a NumPy int64 (np.sum(sizes)) or a float64 total widens them
    sizes = [int(n) for n in rng.integers(1, 9, size=int(rng.integers(2, 5)))]
    cases.append(Case({"accumulated": {key: value.astype(np.float32) for key, value in accumulated().items()},
                       "micro_batch_sizes": sizes}, "float32 gradients (keep their dtype)"))
    # one micro-batch of one example: the total is 1, and an answer that skips the division hands back the
    # accumulator's own arrays (the result must be new arrays)
    cases.append(Case({"accumulated": accumulated(), "micro_batch_sizes": [1]},
                      "one micro-batch of one example: dividing by 1 still gives new arrays"))
    for sizes, why in (([], "micro_batch_sizes is empty"), ([2, 0], "a micro-batch size is 0"),
                       ([3, -1, 2], "a micro-batch size is negative")):
        cases.append(Raises({"accumulated": {"W": _normal(rng, 2)}, "micro_batch_sizes": sizes}, ValueError, why))
    return cases


SCALE_REFUSALS = (
    Refusal("micro_batch_sizes is empty", ValueError, lambda a: len(list(a["micro_batch_sizes"])) == 0),
    Refusal("a micro-batch size is less than 1", ValueError, lambda a: min(a["micro_batch_sizes"]) < 1),
)


STEP_REFUSALS = (
    Refusal("the batch is smaller than num_micro_batches", ValueError, lambda a: len(a["X"]) < a["num_micro_batches"]),
)


# 014 grad_accumulation_step ----------------------------------------------------

def step_cases(rng):
    def case(B, k, hidden, about):
        return Case({"params": mlp.init_params([3] + hidden + [2], seed=_seed(rng)),
                     "X": _normal(rng, (B, 3)), "Y": _normal(rng, (B, 2)),
                     "num_micro_batches": k, "learning_rate": 0.05}, about)

    def hidden(low=1, high=4):
        return [int(n) for n in rng.integers(1, 6, size=int(rng.integers(low, high)))]

    cases = []
    for _ in range(3):
        k = int(rng.integers(2, 6))
        B = k * int(rng.integers(1, 4)) + int(rng.integers(1, k))
        # unequal micro-batches tell size-weighting from a mean of the k micro-batch means
        cases.append(case(B, k, hidden(), f"B = {B} is not a multiple of k = {k}"))
    cases.append(case(8, 4, hidden(), "equal micro-batches"))
    cases.append(case(int(rng.integers(2, 10)), 1, hidden(), "k = 1: the plain full-batch step"))
    B = int(rng.integers(2, 8))
    cases.append(case(B, B, hidden(), "k = B: one example per micro-batch"))
    cases.append(case(int(rng.integers(5, 12)), 3, hidden(4, 6), "a deeper MLP (4-5 hidden layers)"))
    cases.append(Raises({"params": mlp.init_params([2, 3, 1], 0), "X": _normal(rng, (2, 2)),
                         "Y": _normal(rng, (2, 1)), "num_micro_batches": 3, "learning_rate": 0.1},
                        ValueError, "the batch (2 examples) is smaller than the number of micro-batches (3)"))
    # large enough that the activations of one micro-batch and of the whole batch differ by megabytes
    B, D, L, k = 1024, 128, 4, 8
    cases.append(Case({"params": mlp.init_params([D] * L + [4], seed=_seed(rng)), "X": _normal(rng, (B, D)),
                       "Y": _normal(rng, (B, 4)), "num_micro_batches": k, "learning_rate": 0.05},
                      f"memory measured: B = {B}, width {D}, {L} layers, k = {k}", measure=True))
    return cases


def step_memory_allowed(args):
    """1.5 x the activations of the largest micro-batch (shared.memory's prediction), plus four
    parameter-sized dicts (the running sum, one micro-batch's gradients, the scaled mean, the result)."""
    params, X, k = args["params"], args["X"], args["num_micro_batches"]
    width, layers = X.shape[1], sum(1 for key in params if key[0] == "W")
    param_bytes = sum(value.nbytes for value in params.values())
    return int(1.5 * accumulation_activation_bytes(len(X), width, layers, k)) + 4 * param_bytes


STEP_MEMORY = MemoryBound(
    step_memory_allowed,
    rule="1.5 x one micro-batch's activations, plus four parameter-sized dicts",
    shortcut="only one micro-batch may be alive at a time: run the forward and backward pass of each "
             "micro-batch in turn and accumulate, instead of computing on the whole batch at once")


LESSONS = (
    LessonSpec("011", split_cases, refuses=SPLIT_REFUSALS, fresh_result=False,  # the micro-batches may be views of X and Y
               equivalent_mutants=(
        *((f"{mutation} | or num_micro_batches < 1:",
           "only num_micro_batches = 0 is let through, and np.array_split then raises the same ValueError")
          for mutation in ("constant 1 - 1", "constant 1 -> 0")),
        ("`int(x)` -> `x` | k = int(num_micro_batches)",
         "once validated, num_micro_batches is a whole number, and np.array_split splits alike for 3 and 3.0"))),
    LessonSpec("012", accumulate_cases, corners=(
        Corner("the first micro-batch, of size 1 (aliasing could hide)", lambda case: valid(case) and case.args[
            "accumulated"] is None and case.args["micro_batch_size"] == 1),
        Corner("a later micro-batch of size 1", lambda case: valid(case) and case.args["accumulated"] is not None
               and case.args["micro_batch_size"] == 1))),
    LessonSpec("013", scale_cases, refuses=SCALE_REFUSALS, corners=(
        Corner("one micro-batch of one example", lambda case: valid(case) and list(case.args["micro_batch_sizes"]) == [1]),
        Corner("a single micro-batch", lambda case: valid(case) and len(case.args["micro_batch_sizes"]) == 1
               and case.args["micro_batch_sizes"][0] > 1)), equivalent_mutants=(
        ("`list(x)` -> `x` | sizes = list(micro_batch_sizes)",
         "the contract takes a sequence of sizes, which min() and sum() can both read as it is "
         "(only a one-shot iterator, which the docstring does not allow, would differ)"),)),
    LessonSpec("014", step_cases, **FLOAT64_REORDERED, memory=STEP_MEMORY, refuses=STEP_REFUSALS,
               isolate=("split_into_micro_batches", "accumulate_gradients", "scale_accumulated_gradients"),
               equivalent_mutants=(
        ("`float(x)` -> `x` | return new_params, float(loss_sum / sum(sizes))",
         "the quotient is already a Python float (or a float64 NumPy scalar, which is one)"),)),
)
