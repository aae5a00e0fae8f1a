"""Every catalogued mistake is a real mistake, and the hidden checks name it.

For each lesson of each landed part: at least two named mistakes; each one
differs from the reference on random inputs (so it costs points); and when a
"learner" makes exactly that mistake, the hidden-test check fails with the
mistake's name in its message.
"""

import numpy as np
import pytest

from course import built_lessons, tagged
from shared.checking import CheckFailure, difference
from shared.grading import check_matches_reference, reference
from shared.mistakes import mistakes_of


def part1_args(function: str, rng: np.random.Generator) -> dict:
    """Random arguments for a Part 1 function, shaped so that every mistake can show."""
    n, d, h, m = 5, 4, 3, 2  # distinct sizes: a transpose always changes the shape
    params = {"W1": rng.standard_normal((d, h)), "b1": rng.standard_normal(h),
              "W2": rng.standard_normal((h, m)), "b2": rng.standard_normal(m)}
    Z = rng.standard_normal((n, h))
    Z[0, 0] = 0.0
    if function == "make_synthetic_regression_batch":
        return {"batch_size": n, "in_features": d, "out_features": m, "seed": 3}
    if function == "init_mlp_params":
        return {"in_features": d, "hidden": h, "out_features": m, "seed": 3}
    if function == "linear_forward":
        return {"x": rng.standard_normal((n, d)), "W": rng.standard_normal((d, d)), "b": rng.standard_normal(d)}
    if function == "relu_forward":
        return {"z": Z}
    if function == "mlp_forward":
        params["b2"] = params["b2"] - 3.0  # negative outputs make a stray ReLU visible
        return {"X": rng.standard_normal((n, d)), "params": params}
    if function == "mse_loss_and_grad":
        return {"Y_hat": rng.standard_normal((n, m)), "Y": rng.standard_normal((n, m))}
    if function == "linear_backward":
        return {"dZ": rng.standard_normal((n, d)), "x": rng.standard_normal((n, d)),
                "W": rng.standard_normal((d, d))}
    if function == "relu_backward":
        return {"dA": rng.standard_normal((n, h)), "Z": Z}
    if function == "first_linear_backward":
        return {"dZ1": rng.standard_normal((n, h)), "X": rng.standard_normal((n, d)),
                "W1": rng.standard_normal((d, h))}
    if function == "mlp_backward":
        X = rng.standard_normal((n, d))
        _, cache = reference("01_mlp_core").mlp_forward(X, params)
        return {"dY_hat": rng.standard_normal((n, m)), "params": params, "cache": cache}
    raise KeyError(function)


def part2_args(function: str, rng: np.random.Generator) -> dict:
    """Part 2: a batch that does not divide evenly, so mean-of-means mistakes show."""
    from shared import mlp
    shapes = {"W1": (3, 4), "b1": (4,), "W2": (4, 2), "b2": (2,)}
    grads = {k: rng.standard_normal(s) for k, s in shapes.items()}
    if function == "split_into_micro_batches":
        return {"X": rng.standard_normal((10, 3)), "Y": rng.standard_normal((10, 2)), "num_micro_batches": 4}
    if function == "accumulate_gradients":
        return {"accumulated": {k: rng.standard_normal(s) for k, s in shapes.items()},
                "micro_grads": grads, "micro_batch_size": 3}
    if function == "scale_accumulated_gradients":
        return {"accumulated": grads, "micro_batch_sizes": [3, 3, 2, 2]}
    if function == "grad_accumulation_step":
        return {"params": mlp.init_params([3, 4, 2], seed=1), "X": rng.standard_normal((10, 3)),
                "Y": rng.standard_normal((10, 2)), "num_micro_batches": 4, "learning_rate": 0.1}
    raise KeyError(function)


def part3_args(function: str, rng: np.random.Generator) -> dict:
    """Part 3: 7 layers of width 4 in segments of 3 (the last segment is shorter)."""
    from shared import mlp
    params = mlp.init_params([4] * 7 + [2], seed=2)
    X = rng.standard_normal((5, 4))
    if function == "mlp_forward_checkpointed":
        return {"X": X, "params": params, "segment_size": 3}
    if function == "recompute_block_activations":
        _, cache = mlp.forward(X, params)
        return {"checkpoint": cache["A3"], "params": params, "start_layer": 3, "end_layer": 7}
    if function == "mlp_backward_checkpointed":
        _, checkpoints = reference("03_activation_checkpointing").mlp_forward_checkpointed(X, params, 3)
        return {"d_out": rng.standard_normal((5, 2)), "params": params, "checkpoints": checkpoints,
                "segment_size": 3}
    if function == "estimate_checkpointing_memory_savings":
        return {"batch_size": 32, "width": 16, "num_layers": 10, "segment_size": 3}
    raise KeyError(function)


ARGS = {1: part1_args, 2: part2_args, 3: part3_args}
CASES = [tagged(lesson, lesson, mistake) for lesson in built_lessons()
         for mistake in mistakes_of(lesson.function)]
LESSONS = [tagged(lesson) for lesson in built_lessons()]


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_lesson_has_at_least_two_named_mistakes(lesson):
    assert len(mistakes_of(lesson.function)) >= 2


@pytest.mark.parametrize("lesson, mistake", CASES)
def test_mistake_is_wrong_and_named_by_the_hidden_check(lesson, mistake):
    ref = reference(lesson.part.slug)
    args = ARGS[lesson.part.number](lesson.function, np.random.default_rng(lesson.number))
    wrong = mistake.compute(*args.values())
    right = getattr(ref, lesson.function)(*args.values())
    assert difference(wrong, right, "x") is not None, f"'{mistake.name}' gives the right answer"

    def learner(*call_args):
        return mistake.compute(*call_args)
    learner.__name__ = lesson.function

    with pytest.raises(CheckFailure) as info:
        check_matches_reference(learner, getattr(ref, lesson.function), args, lesson=lesson.code)
    assert f"common mistake: {mistake.name}" in str(info.value)


@pytest.mark.parametrize("lesson", LESSONS)
def test_reference_passes_its_own_hidden_check(lesson):
    ref = reference(lesson.part.slug)
    args = ARGS[lesson.part.number](lesson.function, np.random.default_rng(lesson.number))
    check_matches_reference(getattr(ref, lesson.function), getattr(ref, lesson.function), args,
                            lesson=lesson.code)
