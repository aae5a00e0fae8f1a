"""The whole nbgrader loop, attacked: every adversarial submission of every landed part.

In a scratch course directory, tools/instructor.py releases every landed part,
autogrades every submission of tests/adversarial.py in parallel (as ``make
autograde JOBS=2`` does), writes the feedback and the grades CSV.  Then, lesson by
lesson: the score each adversary must get, and what its feedback must say; the
submissions that cannot be graded are listed for manual grading while all the
others are graded; the feedback holds neither hidden tests nor the reference;
nothing a cheat tried to write was written.  The table of kind, expected and
actual scores goes to build/adversarial-report.md.
"""

from __future__ import annotations

import contextlib
import hashlib
import html
import io
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook, MissingEntry

import adversarial
from course import ROOT, built_parts, read, student_path, submit
from shared.lessons import lessons_of

sys.path.insert(0, str(ROOT / "tools"))
import instructor  # noqa: E402

pytestmark = pytest.mark.slow
PARTS = built_parts()
TIMEOUT = 6  # seconds per cell while autograding in this test (the course default is 30)
JOBS = 2


@dataclass
class Suite:
    course: Path
    adversaries: list[adversarial.Adversary]
    scores: dict[tuple[str, str], dict[str, float | None]]  # (student, slug) -> lesson code -> score
    outputs: dict[tuple[str, str], dict[str, str]]  # (student, slug) -> lesson code -> test cell output text
    autograde_log: str
    feedback_status: int
    seconds: float
    before: dict[str, str]


def fingerprints(*folders: Path) -> dict[str, str]:
    """sha256 of every file under the folders (what a cheat could have tried to change)."""
    found = {}
    for folder in folders:
        for path in sorted(folder.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                found[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


@contextlib.contextmanager
def environment(**values: str):
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def cell_texts(notebook_path: Path) -> dict[str, str]:
    """lesson code -> everything the lesson's test cell printed or raised."""
    if not notebook_path.is_file():
        return {}
    texts = {}
    for cell in json.loads(notebook_path.read_text())["cells"]:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")
        if not grade_id.startswith("lesson_") or cell.get("cell_type") != "code":
            continue
        parts = []
        for output in cell.get("outputs", []):
            parts.append("".join(output.get("text", "")) if output.get("output_type") == "stream" else
                         f"{output.get('ename', '')}: {output.get('evalue', '')}")
        texts[grade_id.split("_")[1]] = "\n".join(parts)
    return texts


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    course = tmp_path_factory.mktemp("course")
    # The reference the kernels grade with is a private copy: had a cheat got through, it would
    # have spoilt only this copy (and the test below would say so).
    solutions = course / "reference-solutions"
    solutions.mkdir()
    for path in (ROOT / "solutions").glob("*.py"):
        shutil.copy(path, solutions / path.name)
    adversaries = [a for i, slug in enumerate(PARTS) for a in adversarial.adversaries(slug, first_part=i == 0)]
    before = fingerprints(ROOT / "solutions", ROOT / "shared", ROOT / "autograde" / "masters", solutions)
    with environment(MCT_CELL_TIMEOUT=str(TIMEOUT), MCT_SOLUTIONS_DIR=str(solutions)):
        assert instructor.release(course, PARTS) == 0
        for adversary in adversaries:
            submit(course, adversary.student, adversary.slug, adversary.notebook)
            for name, target in (adversary.links or {}).items():
                (course / "submitted" / adversary.student / adversary.slug / name).symlink_to(target)
        started = time.perf_counter()
        log = io.StringIO()
        with contextlib.redirect_stdout(log):
            assert instructor.autograde(course, PARTS, None, JOBS) == 0
        seconds = time.perf_counter() - started
        with contextlib.redirect_stdout(io.StringIO()):
            feedback_status = instructor.feedback(course, PARTS, None, JOBS)
            assert instructor.grades(course, PARTS, None) == 0
    scores, outputs = {}, {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        for adversary in adversaries:
            key = (adversary.student, adversary.slug)
            row = {}
            for lesson in lessons_of(adversary.slug):
                try:
                    row[lesson.code] = gradebook.find_grade(lesson.grade_id, adversary.slug, adversary.slug,
                                                            adversary.student).score
                except MissingEntry:
                    row[lesson.code] = None
            scores[key] = row
            outputs[key] = cell_texts(course / "autograded" / adversary.student / adversary.slug
                                      / f"{adversary.slug}.ipynb")
    result = Suite(course, adversaries, scores, outputs, log.getvalue(), feedback_status, seconds, before)
    write_report(result)
    return result


def write_report(suite: Suite) -> None:
    lines = ["# Adversarial submissions graded through nbgrader", "",
             f"{len(suite.adversaries)} submissions of {len(PARTS)} part(s), autograded in {suite.seconds:.0f} s "
             f"with {JOBS} jobs (tests/test_nbgrader_loop.py; kinds in tests/adversarial.py). Scores are "
             "listed lesson by lesson; `-` means not graded (the submission failed).", "",
             "| part | kind | expected | actual | ok | what |", "| --- | --- | --- | --- | --- | --- |"]
    for adversary in suite.adversaries:
        actual = suite.scores[(adversary.student, adversary.slug)]
        expected = {code: e.score for code, e in adversary.expected.items()}
        shown_expected = " ".join(f"{expected[c]:g}" for c in expected)
        shown_actual = " ".join("-" if actual[c] is None else f"{actual[c]:g}" for c in expected)
        ok = all((actual[c] or 0) == expected[c] for c in expected)
        lines.append(f"| {adversary.slug} | {adversary.kind} | {shown_expected} | {shown_actual} | "
                     f"{'yes' if ok else '**NO**'} | {adversary.description} |")
    lines += ["", "Cheats per lesson (cheats_a, cheats_b):", ""]
    for adversary in suite.adversaries:
        if adversary.kind.startswith("cheats_"):
            lines.append(f"- {adversary.slug} {adversary.kind}: "
                         + ", ".join(f"{c} {e.note}" for c, e in adversary.expected.items()))
    (ROOT / "build").mkdir(exist_ok=True)
    (ROOT / "build" / "adversarial-report.md").write_text("\n".join(lines) + "\n")
    print("\n" + "\n".join(lines))


def by_kind(suite: Suite, *kinds: str):
    return [a for a in suite.adversaries if a.kind in kinds or not kinds]


# --------------------------------------------------------------------------

@pytest.mark.parametrize("slug", PARTS)
def test_release_holds_only_the_student_notebook(suite, slug):
    release = suite.course / "release" / slug
    assert sorted(p.name for p in release.iterdir()) == [f"{slug}.ipynb"]
    released, committed = read(release / f"{slug}.ipynb"), read(student_path(slug))
    assert [(c.source, c.metadata) for c in released.cells] == [(c.source, c.metadata) for c in committed.cells]


def test_every_adversary_gets_exactly_its_expected_scores(suite):
    wrong = []
    for adversary in suite.adversaries:
        actual = suite.scores[(adversary.student, adversary.slug)]
        for code, expect in adversary.expected.items():
            if (actual[code] or 0) != expect.score:
                wrong.append(f"{adversary.slug} {adversary.kind} lesson {code} {expect.note}: "
                             f"expected {expect.score}, got {actual[code]}\n"
                             f"    {suite.outputs[(adversary.student, adversary.slug)].get(code, '')[-300:]}")
    assert not wrong, "\n".join(wrong)


def test_feedback_says_why_each_lesson_lost_its_points(suite):
    missing = []
    for adversary in suite.adversaries:
        if adversary.fails:
            continue
        key = (adversary.student, adversary.slug)
        page = html.unescape((suite.course / "feedback" / adversary.student / adversary.slug
                              / f"{adversary.slug}.html").read_text())
        for code, expect in adversary.expected.items():
            text = suite.outputs[key].get(code, "")
            for words in expect.says:
                if words not in text:
                    missing.append(f"{adversary.slug} {adversary.kind} lesson {code}: no {words!r} in {text[-300:]!r}")
            first_error = next((line for line in text.splitlines() if ": " in line and "Error" in line), "")
            if first_error and first_error.split(": ", 1)[1][:60] not in page:
                missing.append(f"{adversary.slug} {adversary.kind} lesson {code}: feedback lacks {first_error!r}")
    assert not missing, "\n".join(missing)


def test_broken_submissions_are_listed_for_manual_grading_and_the_others_graded(suite):
    listing = suite.autograde_log.split("needs manual grading:", 1)[1]
    for adversary in by_kind(suite, "swallows_interrupt", "corrupt_notebook", "linked_secrets"):
        assert f"{adversary.student} {adversary.slug}: autograding failed" in listing
    graded = [a for a in suite.adversaries if not a.fails]
    assert all((suite.course / "autograded" / a.student / a.slug / f"{a.slug}.ipynb").is_file() for a in graded)


def test_feedback_holds_neither_hidden_tests_nor_the_reference(suite):
    assert suite.feedback_status == 0
    for adversary in suite.adversaries:
        if adversary.fails:
            continue
        folder = suite.course / "feedback" / adversary.student / adversary.slug
        assert instructor.feedback_problems(folder, adversary.slug) == [], adversary.kind


def test_no_cheat_changed_the_course_the_reference_or_the_gradebook(suite):
    after = fingerprints(ROOT / "solutions", ROOT / "shared", ROOT / "autograde" / "masters",
                         suite.course / "reference-solutions")
    changed = sorted(path for path in set(suite.before) | set(after) if suite.before.get(path) != after.get(path))
    assert not changed
    assert not list(suite.course.rglob("cheat-was-here"))
    import sqlite3
    with contextlib.closing(sqlite3.connect(suite.course / "gradebook.db")) as db:
        assert db.execute("SELECT count(*) FROM grade WHERE manual_score IS NOT NULL").fetchone() == (0,)
        assert db.execute("SELECT count(*) FROM grade WHERE extra_credit IS NOT NULL AND extra_credit != 0"
                          ).fetchone() == (0,)


def test_the_grades_csv_has_one_row_per_student_and_lesson_columns(suite):
    import csv
    with (suite.course / "grades.csv").open() as handle:
        rows = {row["student"]: row for row in csv.DictReader(handle)}
    assert set(rows) == {a.student for a in suite.adversaries}
    reference = rows["reference"]
    assert float(reference["total"]) == sum(5 * len(lessons_of(slug)) for slug in PARTS)
    assert reference["out_of"] == "200"


def test_hard_coded_answers_pass_the_visible_tests(suite, tmp_path, monkeypatch):
    """nbgrader validate runs the learner's copy, so only the visible tests: the cheat fools them."""
    from nbgrader.validator import Validator
    monkeypatch.setenv("MCT_PROGRESS_FILE", str(tmp_path / "progress.json"))
    for adversary in by_kind(suite, "hardcoded"):
        path = tmp_path / f"{adversary.slug}.ipynb"
        nbformat.write(adversary.notebook, path)
        assert Validator().validate(str(path)) == {}, adversary.slug


def test_the_grading_guard_reads_no_global_name_at_run_time():
    """The hook may use only what it bound when it was created: the notebook can rebind any
    module global or builtin (shared.guard's docstring)."""
    import dis
    from shared import guard
    for factory in (guard._make_hook, guard.make_sanitizer, guard._make_fingerprint):
        used = {(code.co_name, instruction.argval)
                for code in guard._code_tree(factory.__code__) if code is not factory.__code__
                for instruction in dis.get_instructions(code)
                if instruction.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
        assert used == set(), factory.__name__
