"""The instructor's pages in the real browser: the class report (``make report``) and the formgrader
(``make formgrader``), on a class of thirteen who handed in Part 1 (tests/classroom.py).

The class is released, graded and exported by the course's own tools in a scratch course directory; what
each student should score, which mistakes the judge should name and which notebooks should be flagged
come from what each student handed in (``classroom.MIXED_CLASS``), not from the tools under test.

- The report opens from its file with every request off the machine refused: both figures drawn, a row
  per lesson with the pass rate and the named mistakes counted as the class made them, the flagged
  notebooks with their reasons.
- ``make formgrader`` prints its address with a random token found on no process's command line; in
  JupyterLab the Nbgrader menu opens the formgrader; the gradebook lists every graded student with the
  score of ``grades.csv``, the flagged one flagged and needing a manual grade, its reason in the comment
  box; a score typed into the page lands in ``grades.csv``.
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lab_driver import ROOT, SCREENSHOTS, LabServer, free_port, screenshot

sys.path.insert(0, str(ROOT / "tests"))
from classroom import MISTAKES, MIXED_CLASS, full_marks_expected, mixed_class  # noqa: E402
from course import submit  # noqa: E402
from shared.lessons import lessons_of  # noqa: E402

SLUG = "01_mlp_core"
LESSONS = lessons_of(SLUG)
FLAGGED, BROKEN = "linus", "margaret"  # a lesson that breaks the rules; a file that is no notebook
OVERRIDE = ("lesson_004_relu_forward", 3)  # the manual score the test types into the formgrader


def instructor(course: Path, *args: str) -> str:
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "instructor.py"), "--course-dir", str(course),
                          "--parts", SLUG[:2], *args], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"instructor.py {' '.join(args)}:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    return run.stdout


def make(*args: str, env: dict[str, str] | None = None) -> str:
    run = subprocess.run(["make", "-C", str(ROOT), "--no-print-directory", "-o", ".venv/.installed", *args],
                         capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, f"make {' '.join(args)}:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    return run.stdout


def read_grades(course: Path) -> dict[str, dict[str, str]]:
    with (course / "grades.csv").open() as handle:
        return {row["student"]: row for row in csv.DictReader(handle)}


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory):
    course = tmp_path_factory.mktemp("instructor-pages") / "course"
    instructor(course, "release")
    for student, notebook in mixed_class(SLUG).items():
        submit(course, student, SLUG, notebook)
    instructor(course, "autograde", "--jobs", "2")
    make("grades", f"COURSE_DIR={course}")
    make("report", f"COURSE_DIR={course}")
    return course


# --------------------------------------------------------------------------------------------- the report

_ROWS = """(selector) => [...document.querySelectorAll(selector)].map(tr =>
  [...tr.querySelectorAll('td')].map(td => td.innerText.trim()))"""


def expected_passes(lesson) -> int:
    return sum(full_marks_expected(kind, mistakes, lesson) for kind, mistakes in MIXED_CLASS.values())


def expected_mistakes(lesson) -> dict[str, int]:
    count = sum(lesson.function in mistakes for _, mistakes in MIXED_CLASS.values())
    return {MISTAKES[lesson.function][1]: count} if count else {}


def test_the_class_report_draws_its_figures_and_counts_what_the_class_did(graded_class, page):
    asked = []

    def offline(route):
        asked.append(route.request.url)
        route.continue_() if route.request.url.startswith("file:") else route.abort()

    page.route("**/*", offline)
    page.goto((graded_class / "report" / "index.html").as_uri())
    page.wait_for_load_state("load")

    images = page.evaluate("() => [...document.images].map(i => ({src: i.src, width: i.naturalWidth}))")
    assert len(images) == 2 and all(image["width"] > 200 for image in images), images
    assert [url for url in asked if not url.startswith("file:")] == [], "the report asked the network"

    lessons = {cells[0]: cells for cells in page.evaluate(_ROWS, "#lesson-table tr") if cells}
    assert sorted(lessons) == [lesson.code for lesson in LESSONS]
    for lesson in LESSONS:
        code, _, handed_in, passed, rate, _, _, named = lessons[lesson.code]
        assert (int(handed_in), int(passed)) == (len(MIXED_CLASS), expected_passes(lesson)), lessons[lesson.code]
        assert rate == f"{100 * expected_passes(lesson) / len(MIXED_CLASS):.0f} %"
        shown = dict(re.findall(r"(.+?) ×(\d+)", named))
        assert {name.strip(): int(n) for name, n in shown.items()} == expected_mistakes(lesson), named

    flags = page.evaluate(_ROWS, "#flag-table tr")
    flagged = {row[0] for row in flags if row}
    assert flagged == {FLAGGED, BROKEN}, flags
    assert any(row and row[0] == FLAGGED and "eval" in row[3] for row in flags)
    assert any(row and row[0] == BROKEN and "autograding failed" in row[3] for row in flags)
    wide = page.evaluate("() => document.documentElement.scrollWidth > window.innerWidth")
    assert not wide, "the report is wider than the window"
    page.set_viewport_size({"width": 1280, "height": 2000})
    print(f"screenshot: {screenshot(page, 'instructor-report')}")
    # The report itself, kept where the screenshots are, to look at after the test.
    kept = SCREENSHOTS.parent / "class-report"
    shutil.copytree(graded_class / "report", kept, dirs_exist_ok=True)
    print(f"report: {kept / 'index.html'}")


# ----------------------------------------------------------------------------------------- the formgrader

_ADDRESS = re.compile(r"http://127\.0\.0\.1:(\d+)/lab\?token=([0-9a-f]+)")


def start_formgrader(course: Path, log: Path) -> LabServer:
    """``make formgrader`` in its own process group; its token read from the address it prints."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "MCT_", "LAB_TOKEN"))}
    server = LabServer(["make", "-C", str(ROOT), "--no-print-directory", "-o", ".venv/.installed", "formgrader",
                        f"COURSE_DIR={course}", f"FORMGRADER_ARGS=--no-browser --port {port}"],
                       env=env, cwd=ROOT, port=port, token="", log=log)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and server.process.poll() is None:
        found = _ADDRESS.search(log.read_text(errors="replace"))
        if found and int(found.group(1)) == port:
            server.token = found.group(2)
            return server
        time.sleep(0.3)
    server.stop()
    raise AssertionError(f"make formgrader printed no address:\n{log.read_text(errors='replace')[-3000:]}")


@pytest.fixture(scope="module")
def formgrader(graded_class, tmp_path_factory):
    server = start_formgrader(graded_class, tmp_path_factory.mktemp("formgrader") / "formgrader.log")
    yield server
    server.stop()


def command_lines() -> list[str]:
    lines = []
    for entry in Path("/proc").iterdir():
        try:
            lines.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            continue
    return lines


def test_make_formgrader_draws_a_random_token_that_no_command_line_shows(formgrader):
    assert len(formgrader.token) >= 32
    assert not [line for line in command_lines() if formgrader.token in line]


def test_the_nbgrader_menu_opens_the_formgrader_in_jupyterlab(formgrader, page):
    log_in(page, formgrader)
    page.get_by_text("Nbgrader", exact=True).first.click()
    page.get_by_text("Formgrader", exact=True).first.click()
    frame = page.frame_locator("iframe").first
    frame.get_by_text("Manage Assignments").first.wait_for()
    print(f"screenshot: {screenshot(page, 'instructor-formgrader-lab')}")


_SUBMISSIONS = """() => [...document.querySelectorAll('tbody tr')].map(tr => ({
  student: tr.querySelector('a.name-shown') ? tr.querySelector('a.name-shown').textContent.trim() : '',
  link: tr.querySelector('a.name-shown') ? tr.querySelector('a.name-shown').getAttribute('href') : '',
  score: (tr.querySelector('.score') || {}).textContent,
  manual: !!(tr.querySelector('.needs-manual-grade') || {children: []}).children.length,
  flagged: !!(tr.querySelector('.flagged') || {children: []}).children.length}))"""


def log_in(page, formgrader) -> None:
    """Open JupyterLab with the token, as the instructor does: the login cookie it sets lets the
    formgrader's pages call its API (a formgrader page opened with the token does not set it)."""
    page.goto(f"{formgrader.base}/lab?token={formgrader.token}")
    page.wait_for_load_state("load")


def submissions(page, formgrader) -> list[dict]:
    log_in(page, formgrader)
    page.goto(f"{formgrader.base}/formgrader/gradebook/{SLUG}/{SLUG}")
    page.wait_for_function("() => document.querySelectorAll('tbody tr a.name-shown').length > 0")
    return page.evaluate(_SUBMISSIONS)


def test_the_gradebook_lists_the_class_and_shows_the_flagged_notebook_with_its_reason(graded_class, formgrader,
                                                                                    page):
    rows = {row["student"]: row for row in submissions(page, formgrader)}
    graded = sorted(set(MIXED_CLASS) - {BROKEN})  # a file that is no notebook has no notebook to show
    assert sorted(rows) == graded, rows
    csv_rows = read_grades(graded_class)
    for student in graded:
        assert rows[student]["score"].split(" / ")[0] == csv_rows[student][f"part_{SLUG}"], (student, rows[student])
        assert (rows[student]["manual"], rows[student]["flagged"]) == ((student == FLAGGED),) * 2, rows[student]
    print(f"screenshot: {screenshot(page, 'instructor-formgrader-gradebook')}")

    page.goto(f"{formgrader.base}{rows[FLAGGED]['link']}")
    comment = page.locator("#solution_004_relu_forward-comment")
    comment.wait_for()
    assert "Needs a human look" in comment.get_attribute("placeholder")
    assert "eval" in comment.get_attribute("placeholder")
    assert "needs_manual_grade" in page.locator(f"#{OVERRIDE[0]}").get_attribute("class")
    comment.scroll_into_view_if_needed()
    print(f"screenshot: {screenshot(page, 'instructor-formgrader-flag')}")


def test_a_score_set_in_the_formgrader_lands_in_grades_csv(graded_class, formgrader, page):
    student = "edsger"  # made the catalogued mistake of lesson 004: 0 of 5 there
    before = read_grades(graded_class)[student]
    assert before[f"lesson_{LESSONS[3].code}"] == "0"
    link = {row["student"]: row["link"] for row in submissions(page, formgrader)}[student]
    page.goto(f"{formgrader.base}{link}")
    grade_id, points = OVERRIDE
    score = page.locator(f"#{grade_id}")
    score.wait_for()
    with page.expect_response(lambda response: "/api/grade/" in response.url and response.request.method == "PUT"):
        score.fill(str(points))
        score.press("Tab")  # formgrader saves on "change"
    make("grades", f"COURSE_DIR={graded_class}")
    after = read_grades(graded_class)[student]
    assert after[f"lesson_{LESSONS[3].code}"] == str(points)
    assert float(after[f"part_{SLUG}"]) == float(before[f"part_{SLUG}"]) + points
    assert float(after["total"]) == float(before["total"]) + points
