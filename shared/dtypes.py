"""The floating-point dtypes the course uses, the bytes of one number of each, and two input checks
that lessons give: mixed precision's loss scale (lessons 021 and 022) and the memory lessons'
arguments (036 and 037).

A leaf of the helper package: the helper versions of those lessons (:mod:`shared.lesson_blocks`)
and :mod:`shared.memory` both read it; Part 4's notebook imports the loss scale's check from it,
Part 7's the rest from :mod:`shared.memory`.
"""

import numpy as np

#: Bytes of one number of each floating-point dtype the course uses (lessons 036-038 name them so;
#: "mixed" precision is their mix: float16 passes, float32 master weights and optimizer state).
BYTES_PER_NUMBER = {"float16": 2, "float32": 4, "float64": 8}


def check_memory_arguments(num_params: int, dtype: str, zero_stage: int, num_workers: int, rank: int) -> None:
    """The arguments of lessons 036 and 037: Psi >= 0 parameters of a known dtype (or "mixed"), a ZeRO
    stage in {0, 1, 2, 3}, N >= 1 workers and a rank in [0, N).

    Raises:
        ValueError: naming the argument that is out of range.
    """
    if dtype != "mixed" and dtype not in BYTES_PER_NUMBER:
        raise ValueError(f"unknown dtype {dtype!r}: use one of {sorted(BYTES_PER_NUMBER)} or 'mixed'")
    if num_params < 0:
        raise ValueError(f"num_params must be at least 0, got {num_params}")
    if zero_stage not in (0, 1, 2, 3):
        raise ValueError(f"zero_stage must be 0, 1, 2 or 3, got {zero_stage}")
    if num_workers < 1:
        raise ValueError(f"num_workers must be at least 1, got {num_workers}")
    if not 0 <= rank < num_workers:
        raise ValueError(f"rank must be in [0, {num_workers}), got {rank}")


def check_loss_scale(loss_scale: float) -> None:
    """The loss scale S of lessons 021 and 022: a positive finite number (a Python or NumPy float), such as 2.0**16.

    Raises:
        ValueError: if S is not finite (inf or NaN), or not positive.
    """
    if not np.isfinite(loss_scale):
        raise ValueError(f"loss_scale must be finite, got {loss_scale}")
    if loss_scale <= 0:
        raise ValueError(f"loss_scale must be positive, got {loss_scale}")
