"""Mutation score: the hidden tests catch at least 90 % of small bugs in every reference solution.

tools/mutation.py makes one-point mutants of each landed part's reference solutions
(``+`` for ``-``, a dropped ``.T``, ``axis=0`` for ``axis=1``, a flipped comparison,
...) and grades each one with :func:`grading.judge.grade_in_process`: the lesson's
declared cases (one run seed), the grading harness and the judge, as in real
grading.  Equivalent mutants (``equivalent_mutants`` of each ``LessonSpec``, each
with its reason) are left out.  The report is written to build/mutation-report.md.
About 500 mutants at ~50 ms each, in two processes.
"""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest

from course import ROOT
from grading.course import landed_parts
from grading.judge import lesson_specs
from shared.lessons import lesson as find_lesson, part


def _load_tool():
    """tools/mutation.py, loaded by its path (tools/ is not a package)."""
    name = "mct_mutation_tool"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / "mutation.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # before running it: dataclasses and the worker pool look it up
        spec.loader.exec_module(module)
    return sys.modules[name]


mutation = _load_tool()

THRESHOLD = 0.90
RUN_SEED = 0
PARTS = landed_parts()


def _part(slug):
    """``slug`` as a parameter carrying its part's marker (``-m part_2``)."""
    return pytest.param(slug, id=slug, marks=getattr(pytest.mark, f"part_{part(slug).number}"))


PART_PARAMS = [_part(slug) for slug in PARTS]

#: Mutants that survive but are *not* equivalent: holes in the hidden tests that are known and
#: have an owner, by part, as "MUTATION | LINE" (the report's notation) -> what has to change.
#: An entry whose mutant is killed again makes the test fail: remove it then.
KNOWN_HOLES: dict[str, dict[str, str]] = {}


class _Scores(dict):
    """Each part's score, computed when a test first asks for it (``-m part_2`` grades Part 2 only)."""

    def __missing__(self, slug):
        self[slug] = mutation.mutate_part(slug, run_seed=RUN_SEED, workers=min(2, os.cpu_count() or 1))
        return self[slug]


@pytest.fixture(scope="module")
def scores():
    computed = _Scores()
    yield computed
    if set(computed) == set(PARTS):  # the whole run: the same report as `make mutation`
        (ROOT / "build").mkdir(exist_ok=True)
        (ROOT / "build" / "mutation-report.md").write_text(
            mutation.report([computed[slug] for slug in PARTS], RUN_SEED))


def _survivors(score) -> list[str]:
    return [f"  {r.code} {r.mutant.function} line {r.mutant.line}: {mutation.mutant_key(r.mutant)}"
            for r in score.holes()]


@pytest.mark.mutation
@pytest.mark.parametrize("slug", PART_PARAMS)
def test_the_reference_passes_its_own_hidden_tests(scores, slug):
    broken = {code: verdict.message for code, verdict in scores[slug].reference_ok.items() if not verdict.passed}
    assert not broken


@pytest.mark.mutation
@pytest.mark.parametrize("slug", PART_PARAMS)
def test_hidden_tests_kill_at_least_90_percent_of_the_mutants(scores, slug):
    score = scores[slug]
    survivors = _survivors(score)
    print(f"\n{slug}: {score.killed}/{len(score.counted())} non-equivalent mutants killed ({score.rate:.1%})"
          + ("; survivors:\n" + "\n".join(survivors) if survivors else ""))
    assert len(score.results) >= 4 * len(score.reference_ok), "suspiciously few mutants"
    assert score.rate >= THRESHOLD, f"{score.rate:.1%} killed; survivors:\n" + "\n".join(survivors)


@pytest.mark.mutation
@pytest.mark.parametrize("slug", PART_PARAMS)
def test_every_survivor_is_equivalent_or_a_known_hole(scores, slug):
    holes = {mutation.mutant_key(r.mutant) for r in scores[slug].holes()}
    known = KNOWN_HOLES.get(slug, {})
    assert sorted(holes - set(known)) == [], "new survivors: declare them equivalent (with the reason) or " \
                                             "add a hidden case that kills them"
    assert sorted(set(known) - holes) == [], "these known holes are closed now: remove them from KNOWN_HOLES"
    if holes:
        pytest.xfail("known holes: " + "; ".join(f"{key} ({known[key]})" for key in sorted(holes)))


@pytest.mark.mutation
@pytest.mark.parametrize("slug", PART_PARAMS)
def test_every_declared_equivalent_mutant_still_exists(scores, slug):
    """An entry of equivalent_mutants that matches no mutant is stale (its line was edited): look again."""
    assert scores[slug].stale == []


def test_every_equivalent_entry_names_a_mutation_a_line_and_a_reason():
    for slug in PARTS:
        for code, spec in lesson_specs(slug).items():
            for key, why in spec.equivalent_mutants:
                description, fragment = mutation.split_key(key)
                assert description and fragment and why.strip(), (code, key)


def test_a_mutant_that_loops_forever_is_killed_by_the_time_limit():
    lesson = find_lesson("003")
    looping = f"def {lesson.function}(*args, **kwargs):\n    while True:\n        pass\n"
    passed, message = mutation.grade_mutant(lesson.code, lesson.function, looping, time_limit=0.5)
    assert not passed and "did not finish" in message


def test_a_mutant_that_cannot_be_defined_is_killed():
    lesson = find_lesson("003")
    passed, message = mutation.grade_mutant(lesson.code, lesson.function, "def linear_forward(x, W, b):\n"
                                            "    return undefined_name\n" "raise ImportError('boom')\n")
    assert not passed and "ImportError: boom" in message


def test_the_unmutated_reference_survives_and_a_real_bug_is_killed():
    lesson = find_lesson("007")
    source = mutation.function_source(lesson)
    passed, message = mutation.grade_mutant(lesson.code, lesson.function, source)
    assert passed, message
    passed, message = mutation.grade_mutant(lesson.code, lesson.function, source.replace("W.T", "W"))
    assert not passed and "linear_backward" in message


def test_an_equivalent_entry_names_one_mutation_on_one_line():
    mutant = mutation.Mutant("mlp_backward_checkpointed", 0, "constant 1 - 1", 96, "if i > 1:", "")
    assert mutation.matches("constant 1 - 1 | if i > 1:", mutant)
    assert mutation.matches("constant 1 - 1 | i > 1", mutant)  # a fragment of the line is enough
    assert not mutation.matches("constant 1 -> 0 | if i > 1:", mutant)  # another mutation, same line
    assert not mutation.matches("constant 1 - 1 | if i > 2:", mutant)  # the line was edited: stale
    assert not mutation.matches("constant 1 - 1", mutant)  # no line: matches nothing
    assert mutation.mutant_key(mutant) == "constant 1 - 1 | if i > 1:"
