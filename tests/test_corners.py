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
