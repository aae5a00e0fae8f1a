"""The visible tests state the whole contract; the hidden tests grade nothing else but values.

For every lesson of every landed part:

- the declared refusals (``LessonSpec.refuses``) and the hidden Raises cases agree:
  every Raises case falls under a refusal with its error, every refusal has a
  Raises case, no valid case falls under a refusal, and the reference raises;
- each entry of the catalogue (``tests/catalogue.py``) keeps the notebook's promise:
  a contract entry (built from the declaration) or a memory shortcut fails the
  visible tests; any wrong answer loses the hidden points, and one that passes the
  visible tests loses them for its values only; a right answer written another way
  passes both.
"""

from __future__ import annotations

import copy

import pytest

from catalogue import SEEDS, _drawn, catalogue, outcome
from course import built_lessons, tagged, tagged_lessons
from grading.judge import lesson_spec, reference_function
from grading.spec import Case, Raises

LESSONS = tagged_lessons()


@pytest.mark.parametrize("lesson", LESSONS)
def test_refusals_and_raises_cases_agree(lesson):
    spec = lesson_spec(lesson.code)
    reference = reference_function(lesson)
    cases = _drawn(lesson)
    raises = [case for case in cases if isinstance(case, Raises)]
    assert bool(raises) == bool(spec.refuses), "a lesson with Raises cases declares its refusals, and only then"
    for case in raises:
        assert any(r.error is case.error and r.covers(case.args) for r in spec.refuses), \
            f"no refusal covers the Raises case '{case.about}'"
        with pytest.raises(case.error):
            reference(**copy.deepcopy(case.args))
    for refusal in spec.refuses:
        assert any(refusal.covers(case.args) for case in raises), f"refusal '{refusal.rule}' has no hidden case"
    for case in cases:
        if isinstance(case, Case):
            assert not any(r.covers(case.args) for r in spec.refuses), \
                f"the valid case '{case.about}' falls under a refusal"


# (A catalogued mistake is graded once, in tests/test_mistakes.py, which checks this promise with its name.)
ENTRIES = [pytest.param(entry, id=f"{lesson.grade_id}-{entry.kind}-{entry.name}", marks=tagged(lesson).marks)
           for lesson in built_lessons() for entry in catalogue(lesson) if entry.kind != "mistake"]


@pytest.mark.parametrize("entry", ENTRIES)
def test_the_catalogue_entry_keeps_the_notebooks_promise(entry):
    result = outcome(entry)
    assert result.problem is None, (f"{entry.kind} '{entry.name}': {result.problem}\n"
                                    f"  visible: {result.visible or 'passed'}\n  hidden: {result.verdict.message}")


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_memory_lesson_has_a_shortcut_in_the_catalogue(lesson):
    if lesson_spec(lesson.code).memory is not None:
        assert any(e.kind == "shortcut" for e in catalogue(lesson))


def test_the_catalogue_draws_cases_of_several_seeds():
    assert len(SEEDS) >= 3
