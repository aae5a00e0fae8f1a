"""The whole grading loop, attacked: every adversarial submission of every landed part.

In a scratch course directory, tools/instructor.py releases every landed part,
autogrades every submission of tests/adversarial.py (two nbgrader runs at a
time, as ``make autograde JOBS=2``: many students per run, so honest students
are graded right after attackers, in the same nbgrader process), grades a fork
bomb beside an honest student in a second run, writes the feedback and the
grades CSV.  Then: every lesson's score is the expected one, each verdict says
why, broken submissions are listed for manual grading and the others graded,
feedback pages hold no hidden test, no reference and no active HTML and stay
small, and the repository is byte-identical with nothing written outside the
sandbox.  The table of kind, student, expected and actual scores goes to
build/adversarial-report.md.

The notebooks run with MCT_CELL_TIMEOUT=6 and MCT_NOTEBOOK_SECONDS=40 (the course
defaults are 30 and 600) to keep the test short, and with MCT_RUN_BROKEN_CELLS=1:
a cell that breaks the rules for graded code still costs its lesson (or withholds
the notebook's grade), but it runs, so that the sandbox and the judge meet every
attack (by default it would not run at all; tests/test_grade.py grades that way).
Known holes (adversarial.HOLES) are checked by test_known_hole_is_closed, expected
to fail until fixed.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import html
import io
import json
import os
import secrets
import re
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook, MissingEntry

import adversarial
from adversarial import HOLES, MARKER, NEIGHBOURS, RUN_SEED, Adversary
from course import ROOT, read, student_path, submit, tool
from grading.course import landed_parts
from grading import protocol, ungradable
from grading.feedback_text import plain_words
from shared.lessons import TOTAL_POINTS, lessons_of
from shared.mistakes import mistakes_of

pytestmark = pytest.mark.slow
instructor = tool("instructor")
PARTS = landed_parts()
JOBS = 2
CELL_TIMEOUT = 6  # seconds per cell while autograding in this test
NOTEBOOK_SECONDS = 40  # seconds per notebook (the sandbox kills the kernel after that)
PAGE_LIMIT = 2 * 2**20  # bytes of a feedback page
KERNEL_MEMORY = 5 * 2**28  # each sandbox's memory in all (the course's default is 6 GiB): host_reach holds 1.6 GB
FINGERPRINTED = [ROOT / "solutions", ROOT / "shared", ROOT / "grading", ROOT / "autograde" / "parts",
                 ROOT / "autograde" / "source", ROOT / "tools"]


@dataclass
class Suite:
    course: Path
    token: str
    adversaries: list[Adversary]
    scores: dict[tuple[str, str], dict[str, float | None]]  # (student, slug) -> lesson code -> score
    verdicts: dict[tuple[str, str], dict[str, str]]  # (student, slug) -> lesson code -> the test cell's output
    others: dict[tuple[str, str], str]  # (student, slug) -> every other output of the graded notebook
    listing: dict[tuple[str, str], list[str]]  # (student, slug) -> its lines under "needs manual grading"
    logs: dict[str, str]
    refused: dict[tuple[str, str], str]  # (student, slug) -> why the feedback tool withheld the page
    seconds: dict[str, float] = field(default_factory=dict)
    before: dict[str, str] = field(default_factory=dict)
    after: dict[str, str] = field(default_factory=dict)

    def graded(self, adversary: Adversary) -> Path:
        return self.course / "autograded" / adversary.student / adversary.slug / f"{adversary.slug}.ipynb"

    def was_graded(self, adversary: Adversary) -> bool:
        """Whether nbgrader graded it (a notebook that could not be graded has a stand-in: grading/ungradable.py)."""
        return self.graded(adversary).is_file() and not ungradable.is_stand_in(self.graded(adversary))

    def page(self, adversary: Adversary) -> Path:
        return self.course / "feedback" / adversary.student / adversary.slug / f"{adversary.slug}.html"


def fingerprints(folders: list[Path]) -> dict[str, str]:
    """sha256 of every file under the folders (Python's byte-code caches aside)."""
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


def _text(output: dict) -> str:
    if output.get("output_type") == "stream":
        text = output.get("text", "")
    elif output.get("output_type") == "error":
        text = f"{output.get('ename', '')}: {output.get('evalue', '')}"
    else:
        text = output.get("data", {}).get("text/plain", "")
    return "".join(text) if isinstance(text, list) else text


def notebook_texts(path: Path) -> tuple[dict[str, str], str]:
    """(lesson code -> what its test cell shows, everything the other cells show)."""
    if not path.is_file():
        return {}, ""
    verdicts, others = {}, []
    for cell in json.loads(path.read_text())["cells"]:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")
        texts = "\n".join(_text(output) for output in cell.get("outputs", []))
        if grade_id.startswith("lesson_") and cell.get("cell_type") == "code":
            verdicts[grade_id.split("_")[1]] = texts
        else:
            others.append(texts)
    return verdicts, "\n".join(others)


def manual_listing(*logs: str) -> dict[tuple[str, str], list[str]]:
    found: dict[tuple[str, str], list[str]] = {}
    for log in logs:
        for line in log.split("needs manual grading:", 1)[-1].splitlines():
            words = line.strip().split(" ", 2)
            if len(words) == 3 and words[1].rstrip(":") in PARTS:
                found.setdefault((words[0], words[1].rstrip(":")), []).append(words[2])
    return found


def refusals(log: str) -> dict[tuple[str, str], str]:
    return {(m.group(1), m.group(2)): m.group(3)
            for m in re.finditer(r"feedback for (\S+) (\S+) FAILED: (.*)", log)}


def run(step: str, seconds: dict[str, float], function, *args) -> tuple[int, str]:
    started = time.perf_counter()
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        status = function(*args)
    seconds[step] = seconds.get(step, 0.0) + time.perf_counter() - started
    return status, out.getvalue()


def check_batches(course: Path) -> None:
    """The attackers of the runtime folder and of the configuration are each followed, in the same
    nbgrader run, by an honest student (nbgrader grades a part's students in sorted order)."""
    handed_in = {slug: sorted(p.parent.name for p in (course / "submitted").glob(f"*/{slug}")
                              if not any(q.is_symlink() for q in p.iterdir())) for slug in PARTS}
    tasks = instructor.plan(handed_in, JOBS)
    for attacker, honest in (("zx-config-writer", "zz-honest-1"), ("zy-runtime-chmod", "zz-honest-2")):
        task = next(t for t in tasks if (attacker, PARTS[0]) in t.notebooks)
        assert (honest, PARTS[0]) in task.notebooks and honest > attacker, (attacker, [t.notebooks for t in tasks])


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    if instructor.sandbox_wanted() and instructor.bwrap_path() is None:
        pytest.skip(instructor.missing_sandbox_message())
    course = tmp_path_factory.mktemp("course")
    token = secrets.token_hex(4)
    ctx = adversarial.Context(course, token)
    seconds: dict[str, float] = {}
    started = time.perf_counter()
    # every part's reference once more with its demonstrations run (the build checks them statically too)
    everyone = [a for i, slug in enumerate(PARTS) for a in adversarial.adversaries(slug, ctx, first_part=i == 0)]
    seconds["building the submissions"] = time.perf_counter() - started
    main = [a for a in everyone if not a.neighbour and not a.demos and not a.scratch]
    # the honest student with scratch cells, graded as an instructor grades (MCT_RUN_BROKEN_CELLS unset): a run of its own
    scratch = [a for a in everyone if a.scratch]
    # the fork bomb and its neighbours, and the solved notebooks with their demonstrations run: a second run
    neighbours = [a for a in everyone if a.neighbour or a.demos]
    before = fingerprints(FINGERPRINTED)
    logs = {}
    with environment(**{protocol.CELL_TIMEOUT_ENV: str(CELL_TIMEOUT),
                        protocol.NOTEBOOK_SECONDS_ENV: str(NOTEBOOK_SECONDS),
                        protocol.RUN_SEED_ENV: str(RUN_SEED),
                        protocol.SANDBOX_ENV: os.environ.get(protocol.SANDBOX_ENV, "on"),
                        protocol.RUN_BROKEN_CELLS_ENV: "1", protocol.KERNEL_MEMORY_ENV: str(KERNEL_MEMORY)}):
        status, logs["release"] = run("release", seconds, instructor.release, course, PARTS)
        assert status == 0, logs["release"]
        for group in (main, neighbours, scratch):
            for adversary in group:
                submit(course, adversary.student, adversary.slug, adversary.notebook)
                folder = course / "submitted" / adversary.student / adversary.slug
                for name, target in adversary.links.items():
                    (folder / name).symlink_to(target)
                for name, text in adversary.files.items():
                    (folder / name).parent.mkdir(parents=True, exist_ok=True)
                    (folder / name).write_text(text)
            if group is main:
                check_batches(course)
                status, logs["autograde"] = run("autograde", seconds, instructor.autograde, course, PARTS, None, JOBS)
            elif group is scratch:
                with environment(**{protocol.RUN_BROKEN_CELLS_ENV: "0"}):
                    status, logs["scratch"] = run("autograde of scratch cells, as an instructor grades", seconds,
                                                  instructor.autograde, course, PARTS[:1], ["with-scratch"], JOBS)
            else:  # as `make autograde STUDENTS=...`, the course's demonstration cells run this time
                with environment(**{protocol.RUN_DEMOS_ENV: "1"}):
                    status, logs["neighbours"] = run("autograde beside a fork bomb, with the demonstrations", seconds,
                                                     instructor.autograde, course, PARTS,
                                                     [*NEIGHBOURS, "with-demos"], JOBS)
            assert status == 0, logs.get("scratch") or logs.get("neighbours") or logs["autograde"]
        # Feedback for every kind of student of the first part (the reference once); of the other parts,
        # for the attacks (one nbgrader run each: the pages of the other kinds hold nothing the first
        # part's do not).
        copies = {"zz-honest-1", "zz-honest-2", "with-demos", NEIGHBOURS[0], NEIGHBOURS[2]}
        first = sorted({a.student for a in everyone if a.slug == PARTS[0]} - copies)
        status, logs["feedback"] = run("feedback", seconds, instructor.feedback, course, PARTS[:1], first, JOBS)
        if PARTS[1:]:
            _, more = run("feedback", seconds, instructor.feedback, course, PARTS[1:], ["attacks"], JOBS)
            logs["feedback"] += more
        status, logs["grades"] = run("grades", seconds, instructor.grades, course, PARTS, None)
        assert status == 0, logs["grades"]
    after = fingerprints(FINGERPRINTED)
    scores, verdicts, others = {}, {}, {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        for adversary in everyone:
            key = (adversary.student, adversary.slug)
            row = {}
            for lesson in lessons_of(adversary.slug):
                try:
                    row[lesson.code] = gradebook.find_grade(lesson.grade_id, adversary.slug, adversary.slug,
                                                            adversary.student).score
                except MissingEntry:
                    row[lesson.code] = None
            scores[key] = row
    result = Suite(course, token, everyone, scores, verdicts, others,
                   manual_listing(logs["autograde"], logs["neighbours"], logs["scratch"]), logs, refusals(logs["feedback"]),
                   seconds, before, after)
    for adversary in everyone:
        key = (adversary.student, adversary.slug)
        verdicts[key], others[key] = notebook_texts(result.graded(adversary))
    write_report(result)
    return result


# --------------------------------------------------------------------------
# The report
# --------------------------------------------------------------------------

def row_status(suite: Suite, adversary: Adversary) -> str:
    actual = suite.scores[(adversary.student, adversary.slug)]
    wrong = [c for c, e in adversary.expected.items() if (actual[c] or 0) != e.score]
    if not wrong:
        return "yes"
    holes = {adversary.expected[c].hole for c in wrong}
    return f"**HOLE** ({', '.join(sorted(holes))})" if "" not in holes else "**NO**"


def write_report(suite: Suite) -> None:
    total = sum(suite.seconds.values())
    lines = ["# Adversarial submissions graded through the instructor workflow", "",
             f"{len(suite.adversaries)} submissions of {len(PARTS)} part(s), graded by tools/instructor.py with "
             f"{JOBS} jobs, MCT_CELL_TIMEOUT={CELL_TIMEOUT}, MCT_NOTEBOOK_SECONDS={NOTEBOOK_SECONDS}, "
             f"MCT_RUN_SEED={RUN_SEED} (tests/test_nbgrader_loop.py; kinds in tests/adversarial.py).", "",
             "Timings: " + ", ".join(f"{step} {s:.0f} s" for step, s in suite.seconds.items())
             + f"; {total:.0f} s in all.", "",
             "Scores lesson by lesson (`-`: not graded). ok: **HOLE** marks a known hole (below).", "",
             "| part | kind | student | expected | actual | ok | flagged for a human | what |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for adversary in suite.adversaries:
        key = (adversary.student, adversary.slug)
        actual = suite.scores[key]
        expected = " ".join(f"{e.score:g}" for e in adversary.expected.values())
        shown = " ".join("-" if actual[c] is None else f"{actual[c]:g}" for c in adversary.expected)
        flags = "; ".join(suite.listing.get(key, []))[:160].replace("|", "/") or "-"
        lines.append(f"| {adversary.slug[:2]} | {adversary.kind} | {adversary.student} | {expected} | {shown} | "
                     f"{row_status(suite, adversary)} | {flags} | {adversary.description.replace('|', '/')} |")
    lines += ["", "## Attacks per lesson", ""]
    for adversary in suite.adversaries:
        if adversary.kind.startswith("attacks"):
            lines.append(f"- {adversary.slug} {adversary.student}: "
                         + "; ".join(f"{c} {e.note}" for c, e in adversary.expected.items()))
    lines += ["", "## Known holes (attacks that work today)", ""]
    for hole in HOLES:
        lines.append(f"- **{hole.id}** ({hole.student}, {hole.slug}, lessons "
                     f"{', '.join(hole.codes) if hole.codes else 'all'}): {hole.finding}")
    lines += ["", "## Feedback pages withheld by tools/instructor.py", ""]
    lines += [f"- {slug} {student}: {why[:300]}" for (student, slug), why in sorted(suite.refused.items())] or ["- none"]
    lines += ["", "## What the attacks could write inside their sandbox (all of it gone afterwards)", ""]
    for adversary in suite.adversaries:
        text = suite.others.get((adversary.student, adversary.slug), "")
        for line in text.splitlines():
            if line.startswith(("ADV-WRITES:", "ADV-CONFIG-WRITTEN:")):
                lines.append(f"- {adversary.slug} {adversary.student}: {line[:600]}")
    (ROOT / "build").mkdir(exist_ok=True)
    (ROOT / "build" / "adversarial-report.md").write_text("\n".join(lines) + "\n")
    print("\n" + "\n".join(lines))


# --------------------------------------------------------------------------

def by_student(suite: Suite, student: str, slug: str = PARTS[0]) -> Adversary:
    return next(a for a in suite.adversaries if a.student == student and a.slug == slug)


@pytest.mark.parametrize("slug", PARTS)
def test_release_holds_only_the_student_notebook(suite, slug):
    release = suite.course / "release" / slug
    assert sorted(p.name for p in release.iterdir()) == [f"{slug}.ipynb"]
    released, committed = read(release / f"{slug}.ipynb"), read(student_path(slug))
    assert [(c.source, c.metadata) for c in released.cells] == [(c.source, c.metadata) for c in committed.cells]


def test_every_lesson_gets_exactly_its_expected_score(suite):
    wrong = []
    for adversary in suite.adversaries:
        key = (adversary.student, adversary.slug)
        for code, expect in adversary.expected.items():
            actual = suite.scores[key][code]
            if expect.hole:
                continue
            if (actual or 0) != expect.score:
                wrong.append(f"{adversary.slug} {adversary.student} lesson {code} ({expect.note}): expected "
                             f"{expect.score:g}, got {actual}\n    {suite.verdicts[key].get(code, '')[:400]}")
            elif actual is None and not (adversary.fails or adversary.may_fail):
                wrong.append(f"{adversary.slug} {adversary.student} lesson {code}: not graded")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("hole", [pytest.param(h, id=h.id, marks=pytest.mark.xfail(strict=h.strict, reason=h.finding))
                                  for h in HOLES] or [pytest.param(None, marks=pytest.mark.skip(reason="no known hole"))])
def test_known_hole_is_closed(suite, hole):
    """Each known hole: its rows get the score they should (fails today; see adversarial.HOLES)."""
    adversary = by_student(suite, hole.student, hole.slug)
    if hole.page:
        assert (adversary.student, adversary.slug) not in suite.refused, suite.refused[(adversary.student, adversary.slug)]
        return
    actual = suite.scores[(adversary.student, adversary.slug)]
    codes = list(adversary.expected) if hole.codes is None else hole.codes
    assert {c: actual[c] for c in codes} == {c: adversary.expected[c].score for c in codes}, \
        suite.verdicts[(adversary.student, adversary.slug)] or suite.listing.get((adversary.student, adversary.slug))


def test_in_process_grading_agrees_with_the_grading_loop(suite):
    """Submissions of plain code: grade_in_process (same seed) and nbgrader give the same points."""
    differ = []
    for adversary in suite.adversaries:
        for code, verdict in adversary.in_process.items():
            actual = suite.scores[(adversary.student, adversary.slug)][code]
            if actual != verdict.points:
                differ.append(f"{adversary.slug} {adversary.student} {code}: in-process {verdict.points} "
                              f"({verdict.message[:200]}), nbgrader {actual}")
    assert not differ, "\n".join(differ)


def test_the_demonstrations_change_no_verdict(suite):
    """Grading skips the course's demonstration cells: every part's solved notebook graded with them run
    gets, lesson by lesson, the verdict it gets without them (the same run seed, the same cases)."""
    for slug in PARTS:
        without, with_demos = suite.verdicts[("reference", slug)], suite.verdicts[("with-demos", slug)]
        assert without and with_demos == without, slug
        assert all(suite.scores[(student, slug)][lesson.code] == lesson.points
                   for lesson in lessons_of(slug) for student in ("reference", "with-demos")), slug


def test_each_verdict_says_why_and_the_feedback_shows_it(suite):
    missing = []
    for adversary in suite.adversaries:
        key = (adversary.student, adversary.slug)
        if not suite.was_graded(adversary):
            continue
        page = html.unescape(suite.page(adversary).read_text()) if suite.page(adversary).is_file() else None
        for code, expect in adversary.expected.items():
            text = suite.verdicts[key].get(code, "")
            if expect.hole:
                continue
            for words in expect.says:
                if words not in text:
                    missing.append(f"{adversary.slug} {adversary.student} lesson {code}: no {words!r} in {text[:300]!r}")
            if expect.score == 0 and not text.startswith("GradedFailure: "):
                missing.append(f"{adversary.slug} {adversary.student} lesson {code}: no verdict: {text[:200]!r}")
            first = plain_words(text.split("\n", 1)[0])[:60]  # as the page words it (grading/feedback_text.py)
            if page is not None and first and first not in page:
                missing.append(f"{adversary.slug} {adversary.student} lesson {code}: feedback lacks {first!r}")
    assert not missing, "\n".join(missing)


def test_broken_submissions_are_listed_and_all_others_graded(suite):
    problems = []
    for adversary in suite.adversaries:
        key = (adversary.student, adversary.slug)
        listed = " ".join(suite.listing.get(key, []))
        for words in adversary.flagged:
            if words not in listed:
                problems.append(f"{adversary.student} {adversary.slug}: the manual-grading list lacks {words!r}: {listed!r}")
        holes = any(e.hole for e in adversary.expected.values())
        if adversary.fails and suite.was_graded(adversary):
            problems.append(f"{adversary.student} {adversary.slug} should not have been graded")
        elif not (adversary.fails or adversary.may_fail or holes) and not suite.was_graded(adversary):
            problems.append(f"{adversary.student} {adversary.slug} was not graded: {listed!r}")
        elif adversary.may_fail and not suite.was_graded(adversary) and "autograding failed" not in listed:
            problems.append(f"{adversary.student} {adversary.slug}: neither graded nor listed")
    assert not problems, "\n".join(problems)


def test_every_flag_is_kept_in_the_gradebook_and_beside_the_grades(suite):
    """What the listing names is also in nbgrader's gradebook (formgrader's "needs manual grade") and in
    needs-manual-grading.csv, across both grading runs; an honest notebook is in neither."""
    with (suite.course / instructor.FLAGS_FILE).open() as handle:
        reasons: dict[tuple[str, str], list[str]] = {}
        for row in csv.DictReader(handle):
            reasons.setdefault((row["student"], row["part"]), []).append(row["reasons"])  # one row a notebook
    problems = []
    with Gradebook(f"sqlite:///{suite.course / 'gradebook.db'}") as gradebook:
        for adversary in suite.adversaries:
            key = (adversary.student, adversary.slug)
            try:
                notebooks = gradebook.find_submission(adversary.slug, adversary.student).notebooks
                marked = any(g.needs_manual_grade for nb in notebooks for g in nb.grades)
                flag_shown = any(nb.flagged for nb in notebooks)  # formgrader's "Flagged?"
            except MissingEntry:
                marked = flag_shown = None  # not graded at all
            if adversary.flagged:
                if not any(words in " ".join(reasons.get(key, [])) for words in adversary.flagged):
                    problems.append(f"{key}: {adversary.flagged} not in {instructor.FLAGS_FILE}: {reasons.get(key)}")
                if marked is False or flag_shown is False:
                    problems.append(f"{key}: listed, but in the gradebook needs manual grade={marked}, "
                                    f"flagged={flag_shown}")
            if adversary.kind in ("reference", "with-demos", "with-scratch") and (key in reasons or marked or flag_shown):
                problems.append(f"{key}: an honest notebook flagged: {reasons.get(key)}")
    assert not problems, "\n".join(problems)


def test_forged_answers_sent_twice_score_nothing_and_are_flagged(suite):
    forgers = [a for a in suite.adversaries if any("forged_twice" in e.note for e in a.expected.values())]
    assert forgers
    for adversary in forgers:
        assert suite.listing.get((adversary.student, adversary.slug)), adversary.student


def test_feedback_pages_hold_no_secret_and_no_active_html_and_stay_small(suite):
    """Every page written passes the tool's own check and stays small; the tool withholds only the
    pages it withholds by design (a folder with other files) and the known false alarm (HOLES)."""
    page_holes = {(h.student, h.slug) for h in HOLES if h.page}
    withheld = {(a.student, a.slug): a.feedback_refused for a in suite.adversaries if a.feedback_refused}
    assert set(suite.refused) - page_holes == set(withheld), suite.logs["feedback"]
    for key, words in withheld.items():
        assert words in suite.refused[key], suite.refused[key]
    pages = [a for a in suite.adversaries if suite.page(a).is_file()]
    assert {a.kind for a in pages} >= {"attacks_a", "flood", "stubs", "reference", "mistakes", "attacks"}
    for adversary in pages:
        assert instructor.feedback_problems(suite.page(adversary).parent, adversary.slug) == [], adversary.student
        # the page shows the learner's own code (the hard-coded cheat's is megabytes of literals) and small outputs
        source = sum(len(c.source) for c in adversary.notebook.cells) if not isinstance(adversary.notebook, str) else 0
        assert suite.page(adversary).stat().st_size < PAGE_LIMIT + 3 * source, (adversary.student, adversary.slug)
    page = suite.page(by_student(suite, "attacks-a")).read_text()
    assert "&lt;script&gt;document.title" in page, "the markdown's HTML is shown as text"


def test_every_autograded_notebook_is_inert_where_the_formgrader_shows_it(suite):
    """What the formgrader renders: outputs only in grading/inert.py's forms, and no markdown a learner wrote
    with a live tag (the course's own text is kept as released)."""
    from grading import inert
    problems = []
    for adversary in suite.adversaries:
        graded = suite.graded(adversary)
        if not graded.is_file():  # (a stand-in too is rendered by the formgrader: it is checked as well)
            continue
        notebook = read(graded)
        released = {c.source for c in read(suite.course / "release" / adversary.slug / f"{adversary.slug}.ipynb").cells
                    if c.cell_type == "markdown"}
        for index, cell in enumerate(notebook.cells):
            mimes = {mime for output in cell.get("outputs", []) for mime in output.get("data", {})}
            if not mimes <= set(inert.SHOWN_MIME):
                problems.append(f"{adversary.student} cell {index}: {sorted(mimes - set(inert.SHOWN_MIME))}")
            if cell.cell_type == "markdown" and cell.source not in released and "<" in cell.source:
                problems.append(f"{adversary.student} cell {index}: markdown with a live tag {cell.source[:60]!r}")
    assert not problems, "\n".join(problems[:20])
    assert by_student(suite, "hostile-markdown").expected  # (the hostile forms were among them)


def test_a_flood_of_messages_stops_the_kernel_and_is_listed_with_its_reason(suite):
    """comm_flood: a message split into frames past the cap of one message, then widget messages: the kernel is
    stopped in that cell, which says why, and the reason is kept beside the grades."""
    adversary = by_student(suite, "comm-flood")
    said = [output.get("evalue", "") for cell in read(suite.graded(adversary)).cells for output in cell.get("outputs", [])
            if output.get("ename") == "KernelDied"]
    assert len(said) == 1 and "sent a message of more than 33,554,432 bytes" in said[0], said
    with (suite.course / instructor.REASONS_FILE).open() as handle:
        reasons = [row["reason"] for row in csv.DictReader(handle) if row["student"] == adversary.student]
    assert any("the kernel was stopped" in reason for reason in reasons), reasons


GRADER_PEAK_BYTES = 400 * 2**20  # each nbgrader process that grades, hostile notebooks and all


def test_the_grader_s_peak_memory_stays_bounded(suite):
    """Every nbgrader process of the class's grading runs logs its own peak resident memory (VmHWM) at the end of
    each notebook's grading (grading/preprocessors/sanitizesubmission.py): none passed the bound, floods and comm
    messages included."""
    from grading.preprocessors.kernelmanager import GRADER_PEAK_LOG
    found = re.findall(re.escape(GRADER_PEAK_LOG) + r": (\d+) MiB",
                       "\n".join(p.read_text(errors="replace") for p in (suite.course / "logs").glob("autograde-*.log")))
    assert len(found) >= len([a for a in suite.adversaries if suite.was_graded(a)]), "one after each notebook"
    peak = max(int(mib) for mib in found)
    print(f"the grader's peak resident memory: {peak} MiB")
    assert peak * 2**20 < GRADER_PEAK_BYTES


def test_the_repository_is_byte_identical_and_nothing_was_written_outside(suite):
    changed = sorted(p for p in set(suite.before) | set(suite.after) if suite.before.get(p) != suite.after.get(p))
    assert not changed, changed
    left = [p for p in suite.course.rglob(f"*{MARKER}*")]
    for folder in (Path("/tmp"), Path("/var/tmp"), Path("/dev/shm"), ROOT):
        if folder.is_dir():
            left += [p for p in folder.glob(f"*{MARKER}*")]
    for folder in FINGERPRINTED:
        left += [p for p in folder.rglob(f"*{MARKER}*")]
    assert not left, left
    with contextlib.closing(sqlite3.connect(suite.course / "gradebook.db")) as db:
        assert db.execute("SELECT count(*) FROM grade WHERE manual_score IS NOT NULL").fetchone() == (0,)


def test_a_notebook_reaches_nothing_of_the_host_around_its_kernel(suite):
    """zw-host-reach (tests/adversarial.py): what it read, wrote and held stayed in its sandbox."""
    reach = by_student(suite, "zw-host-reach")
    text = suite.others[(reach.student, reach.slug)]
    assert "ADV-READ: []" in text, text[:2000]
    disk = re.search(r"ADV-DISK: stopped after (\d+) MiB", text)
    assert disk and int(disk.group(1)) <= 256, text[:2000]  # its /tmp (MCT_KERNEL_TMP), nothing of the host's
    memory = re.search(r"ADV-MEMORY: children holding 380 MiB at once: (\d) of 4 ; killed by the limit: (\d)", text)
    assert memory, text[:2000]
    if "cgroup" in suite.logs["autograde"]:  # the whole sandbox's limit (a control group) bounds them together
        assert int(memory.group(1)) < 4, text[:2000]
    left = [*Path("/tmp").glob(f"*-{suite.token}"), *ROOT.glob(f"*-{suite.token}"),
            *(p for p in suite.course.rglob(f"*-{suite.token}") if "decoys-" not in str(p))]
    assert not left, left
    honest = [suite.scores[(student, PARTS[0])] for student in ("zz-honest-1", "zz-honest-2", "reference")]
    assert all(score == 5 for row in honest for score in row.values()), honest


def test_configuration_written_by_a_kernel_changes_nothing(suite):
    writer = by_student(suite, "zx-config-writer")
    assert "ADV-CONFIG-WRITTEN:" in suite.others[(writer.student, writer.slug)]
    honest = suite.scores[("zz-honest-1", PARTS[0])]
    assert all(score == 5 for score in honest.values()), honest


def test_the_grades_csv_has_one_row_per_student_and_lesson_columns(suite):
    with (suite.course / "grades.csv").open() as handle:
        rows = {row["student"]: row for row in csv.DictReader(handle)}
    assert set(rows) == {a.student for a in suite.adversaries}
    assert float(rows["reference"]["total"]) == sum(5 * len(lessons_of(slug)) for slug in PARTS)
    assert float(rows["stubs"]["total"]) == 0
    assert {row["out_of"] for row in rows.values()} == {str(TOTAL_POINTS)}


def test_hard_coded_answers_pass_nbgrader_s_own_validator(suite, tmp_path, monkeypatch):
    """nbgrader's own validator runs the learner's copy, so only the visible tests: the cheat fools it (but
    where an answer is megabytes, not hard-coded), and scores 0 on the hidden cases (above).  The course's
    validator (`nbgrader validate`, the Validate button) asks the grader instead: tests/test_validate.py."""
    from nbgrader.validator import Validator
    monkeypatch.setenv("MCT_PROGRESS_FILE", str(tmp_path / "progress.json"))
    from course import too_long_to_hard_code, visible_test_answers
    adversary = by_student(suite, "hardcoded")
    path = tmp_path / f"{adversary.slug}.ipynb"
    nbformat.write(adversary.notebook, path)
    too_long = {f for f, answers in visible_test_answers(adversary.slug).items() if too_long_to_hard_code(answers)}
    results = Validator().validate(str(path))
    assert set(results) <= {"failed"}, results
    failed = {cell["source"].split("check_rules(", 1)[1].split(")", 1)[0] for cell in results.get("failed", [])}
    assert failed <= too_long, (failed, too_long)  # only a call whose answer is megabytes fails


@pytest.mark.parametrize("slug", PARTS)
def test_every_catalogued_mistake_is_named_by_the_judge(slug):
    """Each mistake of each lesson, graded in-process: 0 points, and the verdict names it."""
    from grading.judge import grade_in_process
    unnamed = []
    for lesson in lessons_of(slug):
        for k, mistake in enumerate(mistakes_of(lesson.function)):
            verdict = grade_in_process(lesson.code, {lesson.function: mistake.compute}, RUN_SEED)
            if verdict.passed or f"common mistake: {mistake.name}" not in verdict.message:
                unnamed.append(f"{lesson.code} mistake {k} ({mistake.name}): {verdict.message[:200]}")
    assert not unnamed, "\n".join(unnamed)
