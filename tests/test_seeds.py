"""A verdict never depends on the run's seed: every catalogued wrong answer scores 0 on every one of many seeds.

Each grading run draws its own cases (the run seed); a wrong answer that a lucky draw lets through would
score 5 in one run and 0 in the next for the same notebook.  The hidden cases are declared so that every
category that tells a wrong answer apart (a NaN, an overflow in each layer, a second call, the narrowest
dtype, ...) is drawn on every seed; this test grades every named mistake, plausible wrong answer and
expensive shortcut of the catalogue (tests/catalogue.py) on SEEDS run seeds and requires 0 on all of them,
and a catalogued mistake named by its verdict on all of them (tests/test_mistakes.py checks the naming on one
run seed within `make test`).  Slow (about three minutes of two cores): `make test-mutation` runs it, and CI.
"""

from __future__ import annotations

import pytest

from catalogue import catalogue, hidden_verdict
from course import built_lessons, tagged
from test_mistakes import AMBIGUOUS

pytestmark = pytest.mark.mutation

SEEDS = range(8)
WRONG = ("mistake", "plausible", "shortcut")


@pytest.mark.parametrize("lesson", [pytest.param(lesson, id=lesson.grade_id, marks=tagged(lesson).marks)
                                    for lesson in built_lessons()])
def test_every_wrong_answer_scores_nothing_on_every_seed(lesson):
    lucky, unnamed = [], []
    for entry in catalogue(lesson):
        if entry.kind not in WRONG:
            continue
        verdicts = {seed: hidden_verdict(lesson, entry.function, seed, name_mistakes=True) for seed in SEEDS}
        passed = [seed for seed, verdict in verdicts.items() if verdict.passed]
        if passed:
            lucky.append(f"{entry.kind} '{entry.name}' passes on run seeds {passed} of {len(SEEDS)}")
        if entry.kind == "mistake" and (lesson.code, entry.name) not in AMBIGUOUS:
            silent = [seed for seed, verdict in verdicts.items()
                      if not verdict.passed and f"common mistake: {entry.name}." not in verdict.message]
            if silent:
                unnamed.append(f"mistake '{entry.name}' is not named on run seeds {silent} of {len(SEEDS)}")
    assert not lucky + unnamed, "\n".join(lucky + unnamed)
