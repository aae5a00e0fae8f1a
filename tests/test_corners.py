"""Cases by rule: every run draws every corner of every lesson's contract.

Each lesson's declaration names its contract's corners (``LessonSpec.corners``: special values in every
position, the default and extreme loss scales, size-one inputs where aliasing could hide, non-finite
gradients at shut gates) and implies more (``LessonSpec.all_corners``: a bad input under every refusal, the
measured case).  A wrong answer that fails only in a corner would score full on a run that does not draw it,
and a regrade could change a grade; so for every lesson and RUN_SEEDS run seeds, each corner must be among the
drawn cases.  The cases are drawn, never graded (a few seconds per lesson).
"""

from __future__ import annotations

import pytest

from course import built_lessons, tagged
from grading.judge import case_seed, drawn_cases, lesson_spec

RUN_SEEDS = range(50)

LESSONS = [pytest.param(lesson, id=lesson.grade_id, marks=tagged(lesson).marks) for lesson in built_lessons()]


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_corner_is_drawn_on_every_run_seed(lesson):
    corners = lesson_spec(lesson.code).all_corners()
    missing = []
    for seed in RUN_SEEDS:
        cases = drawn_cases(lesson.code, case_seed(seed, lesson.code))
        missing += [f"run seed {seed}: {corner.name}" for corner in corners if not corner.drawn_in(cases)]
    assert not missing, f"lesson {lesson.code}: corners not drawn:\n" + "\n".join(missing[:20])


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_lesson_names_a_corner(lesson):
    assert lesson_spec(lesson.code).all_corners(), f"lesson {lesson.code} names no corner of its contract"



def test_a_wrong_answer_that_fails_only_in_a_corner_scores_nothing_on_any_run_seed():
    """Issue 42's 021: products clipped to float16's range are wrong only where a product overflows. Before the
    overflow was a declared corner, some run seeds drew no such product and the clipped answer scored full on
    them (run seeds 2 and 36 of these 50): a regrade could change its grade. (013, 008 and 019's corner-only
    answers scored full on every seed: tests/test_contract.py holds them; make test-mutation grades every wrong
    answer of the catalogue on eight run seeds.)"""
    from catalogue import find_lesson, hidden_verdict
    from plausible import scale_loss_clipped
    lucky = [seed for seed in RUN_SEEDS if hidden_verdict(find_lesson("021"), scale_loss_clipped, seed).passed]
    assert not lucky, f"021's clipped products score full on run seeds {lucky}"
