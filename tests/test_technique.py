"""The technique is graded: a right answer computed the expensive way earns nothing.

Lessons 014, 015, 017, 024 and 029 are about saving memory. Each has a large hidden case
whose peak memory the grading kernel measures (tracemalloc); the judge compares
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
from grading.judge import grade_in_process, reference_function
from shared.lessons import lesson as find_lesson


def namespace(code: str) -> dict:
    return dict(reference_function(find_lesson(code)).__globals__)


def _shortcut(code, function, shortcut, named):
    lesson = find_lesson(code)
    return pytest.param(code, function, shortcut, named, id=code,
                        marks=[getattr(pytest.mark, f"lesson_{code}"), getattr(pytest.mark, f"part_{lesson.part.number}")])


SHORTCUTS = [_shortcut(code, *shortcut) for code, shortcut in catalogue.SHORTCUTS.items()]


@pytest.mark.parametrize("code, function, shortcut, named", SHORTCUTS)
def test_the_reference_keeps_the_bound_and_the_shortcut_scores_zero_named(code, function, shortcut, named):
    for seed in (0, 1):
        assert grade_in_process(code, namespace(code), seed).passed
    verdict = grade_in_process(code, {**namespace(code), function: shortcut}, 0)
    assert not verdict.passed
    assert "gives the right numbers but allocated" in verdict.message and named in verdict.message
    assert "MiB at its peak, and this lesson allows" in verdict.message
