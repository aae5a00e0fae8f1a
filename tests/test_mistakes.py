"""Every catalogued mistake costs the lesson's points, and the grader names it.

For each lesson of each landed part and each mistake of ``mistakes_of(function)``,
a "learner" whose function is exactly that mistake (every other function is the
reference's) is graded as a submission would be: :func:`grading.judge.grade_in_process`
draws the lesson's declared cases for a run seed, answers them in a forked child
through the grading harness, and judges the answers against the reference.  The
verdict must fail and its message must name the mistake, on one run seed here
(tests/test_seeds.py, in `make test-mutation`, requires both on eight); the reference itself must pass.

A mistake that gives exactly the same answer as another, earlier catalogued
mistake on the first case it fails cannot be told from that one (the judge names
the first match).  Such a case is not silently accepted: it must be listed in
``AMBIGUOUS`` with the reason, and it is then reported as an expected failure.
"""

from __future__ import annotations

import copy
import re

import numpy as np
import pytest

from catalogue import Entry, Outcome, namespace_with, visible_failure
from course import built_lessons, tagged, tagged_lessons
from plausible import NAMED_MISTAKES
from grading.judge import case_seed, grade_in_process, lesson_spec, reference_function
from grading.spec import Case, draw_cases
from shared.checking import difference
from shared.mistakes import mistakes_of

# One run seed here; tests/test_seeds.py (in `make test-mutation`) grades every mistake on eight and requires
# a 0 and its name on each, which keeps this file within `make test`'s ten minutes.
RUN_SEEDS = (0,)

#: (lesson code, mistake name) -> why the grader cannot always name it on the first case it fails.
#: Each entry is a known weakness of the lesson's cases, to be fixed there, not here.
AMBIGUOUS: dict[tuple[str, str], str] = {}


def _answer(function, case):
    with np.errstate(all="ignore"):
        return function(*copy.deepcopy(list(case.args.values())))


def ambiguity(lesson, mistake, run_seed: int, message: str) -> str | None:
    """When the first failing case cannot tell ``mistake`` from another, earlier catalogued one
    that the message names: a description of that case; else None."""
    found = re.search(r"hidden case (\d+) of", message)
    if not found:
        return None
    case = draw_cases(lesson_spec(lesson.code), case_seed(run_seed, lesson.code))[int(found.group(1)) - 1]
    if not isinstance(case, Case):
        return None
    tolerances = lesson_spec(lesson.code).tolerances(case)
    try:
        mine = _answer(mistake.compute, case)
    except Exception:
        return None
    for other in mistakes_of(lesson.function):
        if other is mistake:
            return None  # only a mistake listed before this one is named in its place
        if f"common mistake: {other.name}." not in message:
            continue
        try:
            theirs = _answer(other.compute, case)
        except Exception:
            continue
        if difference(mine, theirs, "x", **tolerances) is None:
            return (f"on the first failing case (run seed {run_seed}, {case.about or 'no description'}) "
                    f"'{mistake.name}' gives the same answer as '{other.name}', which is named")
    return None


def _param(lesson, mistake, seed):
    """A parameter with the lesson's markers (``-m lesson_013``) and an id that names the mistake."""
    name = re.sub(r"[^a-z0-9]+", "_", mistake.name.lower()).strip("_")
    return pytest.param(lesson, mistake, seed, id=f"{lesson.grade_id}-{name}-seed{seed}",
                        marks=tagged(lesson).marks)


LESSONS = tagged_lessons()
MISTAKES = [_param(lesson, mistake, seed) for lesson in built_lessons()
            for mistake in mistakes_of(lesson.function) for seed in RUN_SEEDS]


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_lesson_has_at_least_two_named_mistakes(lesson):
    assert len(mistakes_of(lesson.function)) >= 2


@pytest.mark.parametrize("lesson", LESSONS)
def test_the_reference_passes_its_own_hidden_cases(lesson):
    reference = reference_function(lesson)
    for seed in RUN_SEEDS:
        verdict = grade_in_process(lesson.code, namespace_with(lesson, reference), seed)
        assert verdict.passed, f"run seed {seed}: {verdict.message}"


@pytest.mark.parametrize("lesson, mistake, seed", MISTAKES)
def test_a_mistake_loses_the_points_and_is_named(lesson, mistake, seed):
    verdict = grade_in_process(lesson.code, namespace_with(lesson, mistake.compute), seed)
    assert not verdict.passed, f"'{mistake.name}' passes the hidden cases of run seed {seed}"
    assert verdict.points == 0
    # the catalogue's promise (tests/test_contract.py checks it for every other kind of entry): a mistake that
    # passes the visible tests is wrong in values alone
    visible = visible_failure(lesson, mistake.compute)
    promise = Outcome(Entry(lesson.code, mistake.name, "mistake", mistake.compute), visible, verdict).problem
    assert promise is None, f"'{mistake.name}': {promise}"
    if f"common mistake: {mistake.name}." in verdict.message:
        return
    why = ambiguity(lesson, mistake, seed, verdict.message)
    known = AMBIGUOUS.get((lesson.code, mistake.name))
    if why is not None and known is not None:
        pytest.xfail(f"{why}: {known}")
    assert why is None, (f"{why}; list it in AMBIGUOUS with the reason (or, better, change the lesson's "
                         f"cases so that the first failing case tells them apart)")
    pytest.fail(f"the verdict does not name '{mistake.name}':\n{verdict.message}")


def test_every_ambiguous_entry_is_a_catalogued_mistake():
    names = {(lesson.code, mistake.name) for lesson in built_lessons() for mistake in mistakes_of(lesson.function)}
    assert set(AMBIGUOUS) <= names


NAMED = [pytest.param(code, function, name, id=f"{code}-{description}")
         for code, entries in NAMED_MISTAKES.items() for description, function, name in entries]


@pytest.mark.parametrize("code, function, name", NAMED)
def test_a_catalogued_mistake_written_a_learners_way_is_named(code, function, name):
    """Not only the catalogue's own copy: a learner's loop with the same flaw hears the mistake's name."""
    from shared.lessons import lesson as find_lesson
    verdict = grade_in_process(code, namespace_with(find_lesson(code), function), RUN_SEEDS[0])
    assert not verdict.passed and f"common mistake: {name}." in verdict.message, verdict.message
