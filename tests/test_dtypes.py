"""The dtypes module: the bytes of one number, and the input checks it gives lessons: the loss scale's (021 and 022)
and the memory lessons' (036 and 037)."""

import numpy as np
import pytest

from shared.dtypes import BYTES_PER_NUMBER, check_loss_scale, check_memory_arguments


def test_the_bytes_of_one_number():
    assert BYTES_PER_NUMBER == {"float16": 2, "float32": 4, "float64": 8}


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "mixed"])
def test_arguments_in_range_pass(dtype):
    check_memory_arguments(0, dtype, 0, 1, 0)
    check_memory_arguments(7_500_000_000, dtype, 3, 64, 63)


@pytest.mark.parametrize("arguments, message", [
    ((10, "bfloat16", 0, 1, 0), "unknown dtype 'bfloat16'"),
    ((-1, "float32", 0, 1, 0), "num_params must be at least 0, got -1"),
    ((10, "float32", 4, 1, 0), "zero_stage must be 0, 1, 2 or 3, got 4"),
    ((10, "float32", 1, 0, 0), "num_workers must be at least 1, got 0"),
    ((10, "float32", 1, 4, 4), r"rank must be in \[0, 4\), got 4"),
    ((10, "float32", 1, 4, -1), r"rank must be in \[0, 4\), got -1"),
])
def test_an_argument_out_of_range_is_named(arguments, message):
    with pytest.raises(ValueError, match=message):
        check_memory_arguments(*arguments)


@pytest.mark.parametrize("scale", [2.0 ** 16, 1, 1e-30, np.float16(1024.0), np.float32(0.5)])
def test_a_positive_finite_loss_scale_passes(scale):
    check_loss_scale(scale)


@pytest.mark.parametrize("scale, message", [
    (np.inf, "loss_scale must be finite, got inf"),
    (np.nan, "loss_scale must be finite, got nan"),
    (-np.inf, "loss_scale must be finite, got -inf"),
    (0.0, "loss_scale must be positive, got 0.0"),
    (-1024.0, "loss_scale must be positive, got -1024.0"),
])
def test_a_loss_scale_that_is_not_positive_and_finite_is_refused(scale, message):
    with pytest.raises(ValueError, match=message):
        check_loss_scale(scale)
