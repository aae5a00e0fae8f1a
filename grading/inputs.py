"""Inputs that tell apart answers which agree in exact arithmetic.

A collective whose contract fixes the order of its additions (the ring's chunks,
ZeRO's reduce-scatter) is compared bit for bit.  That only grades the order on
inputs where another order gives other bits: :func:`order_revealing_vectors`
makes them.  In every chunk two workers hold ``+B`` and ``-B``, where ``B`` is so
large that one unit in its last place is more than every other number; adding
those two first (as the contract's order does) cancels them exactly and every
other worker's number survives, while an order that adds any other number to
``±B`` first loses that number.  On these inputs ``np.mean`` of the arrays,
``sum(worker_arrays)``, the reversed order and pairwise summation all give other
bits in at least one chunk (``tests/test_technique.py`` checks each).

The lessons that cut a batch into pieces (011's micro-batches, 025's workers) are graded on the
same sizes besides their uneven ones: :func:`even_and_extreme_splits`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

#: The cancelling magnitude per dtype: one ulp of B is 256 (float64) or 32 (float32).
BIG = {np.dtype(np.float64): 2.0 ** 60, np.dtype(np.float32): 2.0 ** 28}


def order_revealing_vectors(rng: np.random.Generator, num_workers: int, length: int,
                            first_two: Callable[[int], tuple[int, int]],
                            dtype=np.float64) -> list[np.ndarray]:
    """``num_workers`` 1-D arrays of ``length`` numbers whose mean, chunk by chunk
    (``np.array_split(vector, num_workers)``), comes out bit for bit only in the contract's order.

    ``first_two(c)``: the two workers whose numbers the contract adds first in chunk ``c``
    (for the ring all-reduce of lesson 028, ``(c, c + 1)``; for ZeRO's reduce-scatter of lesson 035,
    ``(c + 1, c + 2)``, modulo N).  They get ``+B`` and ``-B``; every other number is drawn from
    a normal distribution scaled by 10**U(-3, 3), so that the lost numbers are not round ones.
    """
    dtype = np.dtype(dtype)
    if num_workers < 3:
        raise ValueError("with fewer than 3 workers every order of the additions gives the same bits")
    vectors = rng.standard_normal((num_workers, length)) * 10.0 ** rng.uniform(-3, 3, (num_workers, length))
    bounds = np.cumsum([0] + [len(c) for c in np.array_split(np.empty(length), num_workers)])
    for chunk in range(num_workers):
        plus, minus = (rank % num_workers for rank in first_two(chunk))
        vectors[plus, bounds[chunk]:bounds[chunk + 1]] = BIG[dtype]
        vectors[minus, bounds[chunk]:bounds[chunk + 1]] = -BIG[dtype]
    return [vector.astype(dtype) for vector in vectors]


def even_and_extreme_splits(rng: np.random.Generator, case: Callable[[int, int, str], Any],
                            count: str, piece: str) -> list[Any]:
    """The cases of a batch of B examples cut into n pieces that are not uneven ones: B a multiple of n
    (2 <= n <= 4, B = 2n or 3n), n = B (one example a piece, B from 2 to 8) and n = 1 (the whole
    batch, B from 1 to 8).

    ``case(B, n, about)`` makes one case (and draws its arrays, in this order); ``count`` is the lesson's
    name for n (``"k"``, ``"N"``) and ``piece`` one piece (``"micro-batch"``, ``"worker"``), for the cases'
    descriptions.
    """
    n = int(rng.integers(2, 5))
    cases = [case(n * int(rng.integers(2, 4)), n, f"B a multiple of {count}")]
    B = int(rng.integers(2, 9))
    cases.append(case(B, B, f"{count} = B: one example per {piece}"))
    cases.append(case(int(rng.integers(1, 9)), 1, f"{count} = 1: the whole batch"))
    return cases
