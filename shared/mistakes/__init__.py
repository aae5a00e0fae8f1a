"""Catalogue of the common mistakes of each lesson, recognised by recomputing them.

``mistakes_of("linear_backward")`` lists the :class:`~shared.checking.Mistake`
objects of a lesson; visible and hidden tests pass them to the checks, which
name a mistake when the learner's answer matches it.  Each lesson's "Common
mistakes" section describes the same mistakes in words.
"""

from __future__ import annotations

from ..checking import Mistake
from . import part1, part2, part3, part4, part5, part6, part7

_CATALOGUE: dict[str, tuple[Mistake, ...]] = {**part1.MISTAKES, **part2.MISTAKES, **part3.MISTAKES,
                                             **part4.MISTAKES, **part5.MISTAKES, **part6.MISTAKES,
                                             **part7.MISTAKES}


def mistakes_of(function: str) -> tuple[Mistake, ...]:
    """The known mistakes of the lesson whose graded function is ``function``."""
    return _CATALOGUE.get(function, ())


