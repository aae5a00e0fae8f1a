"""The technique is graded: a right answer computed the expensive way earns nothing.

Lessons 014, 015, 017, 024 and 029 are about saving memory, 032 and 035 about what each
worker keeps. Each has a large hidden case whose memory the grading kernel measures
(tracemalloc: the peak, or what the result keeps alive); the judge compares
it with the lesson's own bound (grading.spec.MemoryBound). The reference stays
under the bound; each shortcut gives the same numbers (for 024: within float16
rounding), breaks the bound, and the verdict names it and shows measured and
allowed bytes.  The shortcuts live in the catalogue of plausible wrong answers
(tests/catalogue.py), whose contract test also requires the visible tests to catch
them on a small case.
"""

from __future__ import annotations

import pytest

import catalogue
from course import tagged
from grading.judge import grade_in_process, lesson_spec, reference_function
from shared.lessons import lesson as find_lesson


def namespace(code: str) -> dict:
    return dict(reference_function(find_lesson(code)).__globals__)


# Each case carries its lesson's and part's markers (``-m part_6`` runs 032 and 035).
SHORTCUTS = [pytest.param(code, *shortcut, id=code, marks=tagged(find_lesson(code)).marks)
             for code, shortcut in catalogue.SHORTCUTS.items()]


@pytest.mark.parametrize("code, function, shortcut, named", SHORTCUTS)
def test_the_reference_keeps_the_bound_and_the_shortcut_scores_zero_named(code, function, shortcut, named):
    for seed in (0, 1):
        assert grade_in_process(code, namespace(code), seed).passed
    verdict = grade_in_process(code, {**namespace(code), function: shortcut}, 0)
    assert not verdict.passed
    assert named in verdict.message
    if lesson_spec(code).memory.kind == "kept":  # what the result keeps alive (032, 035)
        assert "gives the right numbers but its result keeps" in verdict.message
        assert "MiB alive after the call, and this lesson allows" in verdict.message
    else:
        assert "gives the right numbers but allocated" in verdict.message
        assert "MiB at its peak, and this lesson allows" in verdict.message
