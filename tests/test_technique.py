"""The technique is graded: a right answer computed the expensive way earns nothing.

Lessons 014, 015, 017 and 029 are about saving memory. Each has a large hidden case
whose peak memory the grading kernel measures (tracemalloc); the judge compares
it with the lesson's own bound (grading.spec.MemoryBound). The reference stays
under the bound; each shortcut below gives the same numbers, breaks the bound,
and the verdict names it and shows measured and allowed bytes.  The shortcuts live in
the catalogue of plausible wrong answers (tests/catalogue.py), whose contract test
also requires the visible tests to catch them on a small case.
"""

from __future__ import annotations

import pytest

import catalogue
from grading.judge import grade_in_process, reference_function
from shared.lessons import lesson as find_lesson

pytestmark = pytest.mark.part_2


def namespace(code: str) -> dict:
    return dict(reference_function(find_lesson(code)).__globals__)


SHORTCUTS = [(code, *shortcut) for code, shortcut in catalogue.SHORTCUTS.items()]


@pytest.mark.parametrize("code, function, shortcut, named", SHORTCUTS, ids=[s[0] for s in SHORTCUTS])
def test_the_reference_keeps_the_bound_and_the_shortcut_scores_zero_named(code, function, shortcut, named):
    for seed in (0, 1):
        assert grade_in_process(code, namespace(code), seed).passed
    verdict = grade_in_process(code, {**namespace(code), function: shortcut}, 0)
    assert not verdict.passed
    assert "gives the right numbers but allocated" in verdict.message and named in verdict.message
    assert "MiB at its peak, and this lesson allows" in verdict.message
