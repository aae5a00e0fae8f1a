"""The instructor's workflow end to end: make release, autograde, feedback, grades, report, formgrader.

A scratch course directory (COURSE_DIR) holds a class of thirteen who handed in Part 1 with a mix
of what a real class hands in (tests/classroom.py: solved, untouched, half done, one to three
catalogued mistakes written out, a lesson that breaks the rules for graded code, a file that is no
notebook), and a fourteenth whose solved notebook came in late.  What each should score, which
mistakes the judge should name and which notebooks should be listed for a human come from what they
handed in (``classroom.MIXED_CLASS``), not from the tools under test.

The make targets run from another directory, with HOME pointing at a folder that would sabotage
grading if anything read it: bogus ``python3`` and ``mct-grading`` kernels, an nbgrader and an
nbconvert configuration (read by nbgrader itself, on the host), a user ``sitecustomize``, a
matplotlib configuration, and an IPython start-up script that would make every lesson fail if the
grading kernel (which gets a HOME of its own in the sandbox) ever ran it.  The grades must come out
exactly right anyway, and nothing from HOME may run.

The instructor's pages are then opened in the real browser (Debian's Chromium, skipped without it):
- the class report (``make report``) from its file, every request off the machine refused: both
  figures drawn, a row per lesson with the pass rate and the named mistakes counted as the class made
  them, the listed notebooks with their reasons;
- ``make formgrader``: a random token that no command line shows; the Nbgrader menu opens the
  formgrader; the gradebook lists every graded student with the score of ``grades.csv``, the listed
  one flagged and needing a manual grade, its reason in the comment box; a score typed into the page
  lands in ``grades.csv``.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from playwright.sync_api import expect

from classroom import MISTAKES, MIXED_CLASS, full_marks_expected, mixed_class
from course import ROOT, make_submission, submit, tool
from hostile import HOSTILE_MARKDOWN, LEARNER_MATH, MARK
from grading.course import BEGIN_SETTINGS, END_SETTINGS, landed_parts
from lab_driver import SCREENSHOTS, LabServer, free_port, screenshot
from shared.lessons import TOTAL_POINTS, lessons_of

instructor = tool("instructor")

pytestmark = pytest.mark.slow
PARTS = landed_parts()
SLUG = PARTS[0]  # every landed part is released; Part 1 is handed in (tests/test_nbgrader_loop.py grades them all)
LESSONS = lessons_of(SLUG)
SOLVED, UNTOUCHED, ALL_MISTAKES = "ada", "dennis", "ivan"  # three students of MIXED_CLASS
FLAGGED, NO_NOTEBOOK = "linus", "margaret"  # a lesson that breaks the rules; a file that is no notebook
HOSTILE = "ken"  # also wrote markdown with scripts in every form (tests/hostile.py): they must not run
STUDENTS = sorted([*MIXED_CLASS, "late"])
OWN_SETTING = 'c.LateSubmissionPlugin.penalty_method = "zero"  # the instructor\'s own'


def sabotaging_home(home):
    """A home folder whose Jupyter, IPython, Python and matplotlib files would break or fool grading.

    What runs on the host (a kernelspec, an nbgrader configuration, a user sitecustomize) touches
    ``marker``.  What would run in the grading kernel cannot leave a mark outside its sandbox, so it
    changes the grades instead: the IPython start-up script makes every lesson report "not defined".
    """
    marker = home / "sabotage-ran"
    touch = f"import pathlib; pathlib.Path({str(marker)!r}).touch()\n"
    for name in ("python3", "mct-grading"):
        kernel = home / ".local" / "share" / "jupyter" / "kernels" / name
        kernel.mkdir(parents=True)
        (kernel / "kernel.json").write_text(json.dumps({
            "argv": ["/bin/sh", "-c", f"touch {marker}; exit 1"], "display_name": "bogus", "language": "python"}))
    startup = home / ".ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00-sabotage.py").write_text(
        touch +
        "import numpy, shared.checking, grading.harness\n"
        "numpy.allclose = lambda *a, **k: True\n"
        "shared.checking.difference = lambda *a, **k: None\n"
        "grading.harness.collect_answers = lambda code, namespace: {\n"
        "    'lesson': code, 'status': 'not_defined', 'message': 'sabotaged by a start-up script in HOME'}\n")
    jupyter = home / ".jupyter"
    jupyter.mkdir()
    for name in ("nbgrader_config.py", "jupyter_nbconvert_config.py", "jupyter_config.py"):
        (jupyter / name).write_text(
            "c = get_config()\nc.Execute.timeout = 1\nc.CourseDirectory.root = '/nonexistent'\n"
            "c.Autograde.autograde_preprocessors = []\n" + touch)
    site = home / ".local" / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    site.mkdir(parents=True)
    (site / "usercustomize.py").write_text(touch)
    (site / "sabotage.pth").write_text(touch.replace("\n", "; ") + "\n")
    matplotlib = home / ".config" / "matplotlib"
    matplotlib.mkdir(parents=True)
    (matplotlib / "matplotlibrc").write_text("backend: no_such_backend\n")
    return marker


@pytest.fixture(scope="module")
def workflow(tmp_path_factory):
    base = tmp_path_factory.mktemp("instructor")
    course, home, elsewhere = base / "course", base / "home", base / "elsewhere"
    home.mkdir()
    elsewhere.mkdir()
    marker = sabotaging_home(home)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MCT_", "JUPYTER", "IPYTHON", "MPL", "LAB_TOKEN"))}
    env.update(HOME=str(home), MCT_CELL_TIMEOUT="20")

    def make(*args):
        # (-o: the environment is installed already; never reinstall it in the middle of the test)
        run = subprocess.run(["make", "-C", str(ROOT), "--no-print-directory", "-o", ".venv/.installed", *args,
                              f"COURSE_DIR={course}", "JOBS=2"], cwd=elsewhere, env=env, capture_output=True,
                             text=True)
        assert run.returncode == 0, f"make {' '.join(args)}:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
        return run.stdout

    runs = {"release": make("release")}
    # The instructor's own settings, below the course's block: a late submission scores 0 (nbgrader's plugin).
    with (course / "nbgrader_config.py").open("a") as config:
        config.write(f"{OWN_SETTING}\n")
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        gb.update_or_create_assignment(SLUG, duedate="2026-01-01 00:00:00 UTC")
    submit(course, "late", SLUG, make_submission(SLUG, default="reference"))
    (course / "submitted" / "late" / SLUG / "timestamp.txt").write_text("2026-01-02 00:00:00 UTC")
    for student, notebook in mixed_class(SLUG).items():
        if student == HOSTILE:  # markdown of every hostile form beside their work: scores unchanged, nothing runs
            notebook.cells += [nbformat.v4.new_markdown_cell(text) for text in [*HOSTILE_MARKDOWN, LEARNER_MATH]]
        submit(course, student, SLUG, notebook)
    runs["autograde"] = make("autograde")
    runs["feedback"] = make("feedback")
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:  # as `nbgrader db student import` would
        gb.update_or_create_student(SOLVED, first_name="Ada", last_name="Lovelace", email="ada@example.org")
    runs["grades"] = make("grades")
    runs["report"] = make("report")
    graded = [s for s in STUDENTS if s != NO_NOTEBOOK]
    stamp = {s: (course / "autograded" / s / SLUG / f"{SLUG}.ipynb").stat().st_mtime_ns for s in graded}
    runs["selected"] = make("autograde", f"STUDENTS={UNTOUCHED}", f"PART={int(SLUG[:2])}", "SEED=4242")
    restamp = {s: (course / "autograded" / s / SLUG / f"{SLUG}.ipynb").stat().st_mtime_ns for s in graded}
    with (course / "grades.csv").open() as handle:
        rows = {row["student"]: row for row in csv.DictReader(handle)}
    return {"course": course, "runs": runs, "rows": rows, "marker": marker, "elsewhere": elsewhere, "env": env,
            "config": (course / "nbgrader_config.py").read_text(),
            "regraded": {s for s in stamp if stamp[s] != restamp[s]}}


def read_grades(course: Path) -> dict[str, dict[str, str]]:
    with (course / "grades.csv").open() as handle:
        return {row["student"]: row for row in csv.DictReader(handle)}


def expected_points(student: str, lesson) -> int:
    """The lesson's points for what ``student`` handed in ("late" handed in the solved notebook: its lessons
    keep their points, and the late penalty takes them off the part's)."""
    kind, mistakes = MIXED_CLASS.get(student, ("solved", ()))
    return lesson.points if full_marks_expected(kind, mistakes, lesson) else 0


def shown_name(student: str) -> str:
    """How the formgrader names a student: "last, first" when the gradebook has the names."""
    return "Lovelace, Ada" if student == SOLVED else student


def test_the_instructor_s_own_settings_are_kept_and_a_late_submission_is_penalised(workflow):
    config = workflow["config"]
    assert OWN_SETTING in config and config.index(END_SETTINGS) < config.index(OWN_SETTING)
    assert config.count(BEGIN_SETTINGS) == 1  # the make runs rewrote the block, not the file
    late = workflow["rows"]["late"]
    assert float(late[f"part_{SLUG}"]) == 0 and float(late["total"]) == 0  # nbgrader's "zero" penalty
    assert (late[f"status_{SLUG}"], late[f"late_{SLUG}"]) == ("graded", "24")  # a day after the due date
    assert float(late[f"lesson_{LESSONS[0].code}"]) == LESSONS[0].points  # lessons: before the penalty
    assert float(workflow["rows"][SOLVED][f"part_{SLUG}"]) == 5 * len(LESSONS)


def test_release_puts_every_landed_part_in_the_course_directory(workflow):
    for slug in PARTS:
        release = workflow["course"] / "release" / slug
        assert sorted(p.name for p in release.iterdir()) == [f"{slug}.ipynb"]
    assert not list(workflow["elsewhere"].iterdir()), "nothing may land in the caller's directory"


def test_grades_csv_has_every_student_s_points_lesson_by_lesson(workflow):
    rows = workflow["rows"]
    assert sorted(rows) == STUDENTS
    assert list(rows[SOLVED])[:len(LESSONS) + 4] == \
        ["student", "first_name", "last_name", "email"] + [f"lesson_{l.code}" for l in LESSONS]
    assert (rows[SOLVED]["first_name"], rows[SOLVED]["email"]) == ("Ada", "ada@example.org")
    assert rows[UNTOUCHED]["first_name"] == rows[UNTOUCHED]["email"] == ""
    for student in set(MIXED_CLASS) - {FLAGGED, NO_NOTEBOOK}:
        points = {lesson.code: expected_points(student, lesson) for lesson in LESSONS}
        assert {code: float(rows[student][f"lesson_{code}"]) for code in points} == points, student
        assert float(rows[student][f"part_{SLUG}"]) == float(rows[student]["total"]) == sum(points.values())
        assert (rows[student][f"status_{SLUG}"], rows[student][f"late_{SLUG}"]) == ("graded", ""), student
    # Not final: blank, never 0 (an LMS would post a 0), and the status says why.
    flagged, ungradable = rows[FLAGGED], rows[NO_NOTEBOOK]
    assert (flagged[f"status_{SLUG}"], flagged[f"part_{SLUG}"], flagged["total"]) == ("needs review", "", "")
    assert flagged[f"lesson_{LESSONS[3].code}"] == "" and float(flagged[f"lesson_{LESSONS[0].code}"]) == 5
    assert (ungradable[f"status_{SLUG}"], ungradable[f"part_{SLUG}"], ungradable["total"]) == ("ungradable", "", "")
    assert all(ungradable[f"lesson_{lesson.code}"] == "" for lesson in LESSONS)
    assert {row["out_of"] for row in rows.values()} == {str(TOTAL_POINTS)}
    for slug in PARTS[1:]:  # not handed in: blank, not 0 (an LMS tells the two apart)
        assert rows[UNTOUCHED][f"part_{slug}"] == rows[SOLVED][f"part_{slug}"] == "", slug
        assert rows[SOLVED][f"status_{slug}"] == "not handed in", slug
        assert all(rows[SOLVED][f"lesson_{lesson.code}"] == "" for lesson in lessons_of(slug)), slug


def test_nothing_in_the_home_folder_took_part(workflow):
    assert not workflow["marker"].exists(), "a kernel, startup script or configuration from HOME ran"


def test_autograde_lists_what_needs_manual_grading_and_keeps_it(workflow):
    listing = workflow["runs"]["autograde"].split("needs manual grading:", 1)[1]
    listed = {line.split()[0] for line in listing.splitlines() if line.startswith("  ")}
    assert listed == {FLAGGED, NO_NOTEBOOK}, listing
    with (workflow["course"] / "grading-flags.csv").open() as handle:  # every reason, as recorded
        rows = list(csv.DictReader(handle))
    assert {(r["student"], r["lesson"]) for r in rows} == {(FLAGGED, LESSONS[3].grade_id), (NO_NOTEBOOK, "")}
    assert any("eval" in r["reason"] for r in rows) and any("autograding failed" in r["reason"] for r in rows)
    with (workflow["course"] / "needs-manual-grading.csv").open() as handle:  # the open queue: one row a notebook
        queue = {row["student"]: row for row in csv.DictReader(handle)}
    assert sorted(queue) == sorted([FLAGGED, NO_NOTEBOOK])
    assert (queue[FLAGGED]["lessons"], queue[NO_NOTEBOOK]["status"]) == (LESSONS[3].code, "ungradable")


def test_the_logs_hold_no_checksum_warning_for_untouched_cells(workflow):
    """nbgrader warns of a changed checksum for every test cell of every notebook (hidden tests); the course
    names what a submission really changed instead (grading/tampering.py), so those warnings are gone."""
    logs = "".join(log.read_text() for log in (workflow["course"] / "logs").glob("autograde-*.log"))
    assert "Sanitizing" in logs and "Attribute 'checksum'" not in logs


def test_the_logs_hold_no_kernel_console_note(workflow):
    """ipykernel tells a console user, once per kernel, that Ctrl-C will not work: in a grading log, one line per
    notebook graded, about a terminal no one has.  The course's kernels are started with no parent handle."""
    logs = "".join(log.read_text() for log in (workflow["course"] / "logs").glob("autograde-*.log"))
    assert "Sanitizing" in logs and "Ctrl-C will not work" not in logs


def test_each_notebook_but_a_process_s_first_takes_the_kernel_launched_while_the_one_before_ran(workflow):
    """A notebook's kernel is launched while the notebook before it runs (grading/preprocessors/spare.py): in the
    class, every notebook but the first of each nbgrader process takes it, and none is launched after a process's
    last notebook (two may miss: one before a notebook that cannot be graded, or on a machine so busy that a
    notebook ran past SPARE_SECONDS).  A change that made every launch differ (an environment variable set per
    notebook, say) would only make grading slower: this is where it shows."""
    from grading.preprocessors.kernelmanager import GRADER_PEAK_LOG
    from grading.preprocessors.spare import LAUNCHED_LOG, TAKEN_LOG
    logs = [log.read_text() for log in (workflow["course"] / "logs").glob("autograde-*.log")]
    graded, launched, taken = (sum(log.count(line) for log in logs)
                               for line in (GRADER_PEAK_LOG, LAUNCHED_LOG, TAKEN_LOG))
    assert graded >= len(STUDENTS)
    assert taken >= graded - len(logs) - 2, f"{taken} of {graded} notebooks took a kernel launched ahead"
    assert launched - taken <= 2, f"{launched - taken} kernels were launched ahead for nothing"


def test_autograde_can_grade_selected_students(workflow):
    assert workflow["regraded"] == {UNTOUCHED}
    assert SOLVED not in workflow["runs"]["selected"].split("scores:")[0]


def test_each_notebook_s_run_seed_is_recorded_and_seed_grades_with_a_chosen_one(workflow):
    first = re.search(r"run seed (\d+) \(SEED=", workflow["runs"]["autograde"])
    assert first, workflow["runs"]["autograde"][:2000]
    assert "run seed 4242 (SEED=4242" in workflow["runs"]["selected"]  # PART=1 SEED=4242, one student
    with (workflow["course"] / "grading-seeds.csv").open() as handle:
        seeds = {(row["student"], row["part"]): row["seed"] for row in csv.DictReader(handle)}
    assert seeds == {(student, SLUG): "4242" if student == UNTOUCHED else first.group(1)
                     for student in STUDENTS if student != NO_NOTEBOOK}


def test_feedback_for_every_student_without_hidden_tests_or_reference(workflow):
    for student in STUDENTS:
        if student != NO_NOTEBOOK:
            folder = workflow["course"] / "feedback" / student / SLUG
            assert instructor.feedback_problems(folder, SLUG) == [], student
    # The file that is no notebook gets no page (its autograded notebook is a stand-in: grading/ungradable.py).
    assert not (workflow["course"] / "feedback" / NO_NOTEBOOK / SLUG).exists()
    assert f"no feedback for {NO_NOTEBOOK} {SLUG}: it was not graded" in workflow["runs"]["feedback"]
    page = (workflow["course"] / "feedback" / ALL_MISTAKES / SLUG / f"{SLUG}.html").read_text()
    assert "common mistake" in page and all(words in page for _, words in MISTAKES.values())


# --------------------------------------------------------------------------------------------- the report

_ROWS = """(selector) => [...document.querySelectorAll(selector)].map(tr =>
  [...tr.querySelectorAll('td')].map(td => td.innerText.trim()))"""


def expected_mistakes(lesson) -> dict[str, int]:
    count = sum(lesson.function in mistakes for _, mistakes in MIXED_CLASS.values())
    return {MISTAKES[lesson.function][1]: count} if count else {}


def test_the_class_report_draws_its_figures_and_counts_what_the_class_did(workflow, page):
    asked = []

    def offline(route):
        asked.append(route.request.url)
        route.continue_() if route.request.url.startswith("file:") else route.abort()

    page.route("**/*", offline)
    page.goto((workflow["course"] / "report" / "index.html").as_uri())
    page.wait_for_load_state("load")

    images = page.evaluate("() => [...document.images].map(i => ({src: i.src, width: i.naturalWidth}))")
    assert len(images) == 2 and all(image["width"] > 200 for image in images), images
    assert [url for url in asked if not url.startswith("file:")] == [], "the report asked the network"

    lessons = {cells[0]: cells for cells in page.evaluate(_ROWS, "#lesson-table tr") if cells}
    assert sorted(lessons) == [lesson.code for lesson in LESSONS]
    for lesson in LESSONS:
        _, _, handed_in, passed, rate, _, _, named = lessons[lesson.code]
        full = sum(expected_points(student, lesson) > 0 for student in STUDENTS)
        assert (int(handed_in), int(passed)) == (len(STUDENTS), full), lessons[lesson.code]
        assert rate == f"{100 * full / len(STUDENTS):.0f} %"
        shown = {name.strip(): int(n) for name, n in re.findall(r"(.+?) ×(\d+)", named)}
        assert shown == expected_mistakes(lesson), named

    flags = [row for row in page.evaluate(_ROWS, "#flag-table tr") if row]
    assert {row[0] for row in flags} == {FLAGGED, NO_NOTEBOOK}, flags
    assert any(row[0] == FLAGGED and row[3] == LESSONS[3].code and "eval" in row[4] for row in flags)
    assert any(row[0] == NO_NOTEBOOK and row[2] == "ungradable" and "autograding failed" in row[4] for row in flags)
    assert not page.evaluate("() => document.documentElement.scrollWidth > window.innerWidth"), "wider than the window"
    page.set_viewport_size({"width": 1280, "height": 2000})
    print(f"screenshot: {screenshot(page, 'instructor-report')}")
    kept = SCREENSHOTS.parent / "class-report"  # the report itself, to look at after the test
    shutil.copytree(workflow["course"] / "report", kept, dirs_exist_ok=True)
    print(f"report: {kept / 'index.html'}")


# ----------------------------------------------------------------------------------------- the formgrader

_ADDRESS = re.compile(r"http://127\.0\.0\.1:(\d+)/lab\?token=([0-9a-f]+)")


def start_formgrader(course: Path, env: dict[str, str], log: Path) -> LabServer:
    """``make formgrader`` in its own process group; its token read from the address it prints."""
    port = free_port()
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
def formgrader(workflow, browser, tmp_path_factory):
    server = start_formgrader(workflow["course"], workflow["env"],
                              tmp_path_factory.mktemp("formgrader") / "formgrader.log")
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


def log_in(page, formgrader) -> None:
    """Open JupyterLab with the token, as the instructor does: the login cookie it sets lets the
    formgrader's pages call its API (a formgrader page opened with the token does not set it)."""
    page.goto(f"{formgrader.base}/lab?token={formgrader.token}")
    page.wait_for_load_state("load")


_SUBMISSIONS = """() => [...document.querySelectorAll('tbody tr')].map(tr => ({
  student: tr.querySelector('a.name-shown') ? tr.querySelector('a.name-shown').textContent.trim() : '',
  link: tr.querySelector('a.name-shown') ? tr.querySelector('a.name-shown').getAttribute('href') : '',
  score: (tr.querySelector('.score') || {}).textContent,
  manual: !!(tr.querySelector('.needs-manual-grade') || {children: []}).children.length,
  flagged: !!(tr.querySelector('.flagged') || {children: []}).children.length}))"""


def submissions(page, formgrader) -> list[dict]:
    log_in(page, formgrader)
    page.goto(f"{formgrader.base}/formgrader/gradebook/{SLUG}/{SLUG}")
    page.wait_for_function("() => document.querySelectorAll('tbody tr a.name-shown').length > 0")
    return page.evaluate(_SUBMISSIONS)


# formgrade.js's start-up once a submission's page has loaded: it waits for MathJax's to end (the course's stand-in
# says at once that it has: grading/templates/formgrade/mathjax.html.j2), then puts the cursor in the box the
# address names and scrolls there.  A test that scrolled or typed before would see its scroll undone.
_SETTLED = "() => window.MathJax && MathJax.loaded === true && !$('html, body').is(':animated')"


def open_page(page, formgrader, link: str) -> None:
    """A submission's page in the formgrader, once nbgrader's own script has set it up."""
    page.goto(f"{formgrader.base}{link}")
    page.wait_for_function(_SETTLED)


def test_make_formgrader_draws_a_random_token_that_no_command_line_shows(formgrader):
    assert len(formgrader.token) >= 32
    assert not [line for line in command_lines() if formgrader.token in line]


def test_the_nbgrader_menu_opens_the_formgrader_in_jupyterlab(formgrader, page):
    log_in(page, formgrader)
    page.get_by_text("Nbgrader", exact=True).first.click()
    page.get_by_text("Formgrader", exact=True).first.click()
    page.frame_locator("iframe").first.get_by_text("Manage Assignments").first.wait_for()
    print(f"screenshot: {screenshot(page, 'instructor-formgrader-lab')}")


def test_the_instructor_s_jupyterlab_offers_no_grading_kernel_and_warns_of_no_exchange(formgrader, page):
    """The Launcher offers the course's kernel alone (the sandboxed grading kernel is nbgrader's, loaded into the
    server with the course's configuration); the formgrader has an exchange folder, so no page warns that it
    is missing and the server logs nothing CRITICAL."""
    status, body = formgrader.request("api/kernelspecs")
    assert status == 200 and sorted(json.loads(body)["kernelspecs"]) == ["python3"], body
    log_in(page, formgrader)
    page.locator('[data-command="launcher:create"]').first.click()  # the file browser's "New Launcher"
    cards = page.locator(".jp-LauncherCard")
    cards.first.wait_for()
    labels = cards.all_inner_texts()
    assert any("Python 3 (course)" in label for label in labels), labels
    assert not any("grading" in label for label in labels), labels
    page.goto(f"{formgrader.base}/formgrader/manage_assignments")
    page.get_by_text(SLUG).first.wait_for()
    assert page.locator("#warning-exchange").count() == 0
    assert "CRITICAL" not in formgrader.log.read_text(errors="replace")


def test_the_gradebook_lists_the_class_and_shows_the_flagged_notebook_with_its_reason(workflow, formgrader, page):
    shown = {row["student"]: row for row in submissions(page, formgrader)}
    # Every submission, the one that is no notebook too (grading/ungradable.py: flagged, scored nothing)
    assert sorted(shown) == sorted(shown_name(student) for student in STUDENTS), shown
    rows = {student: shown[shown_name(student)] for student in STUDENTS}
    for student in STUDENTS:
        # (formgrader shows the points before nbgrader's late penalty; grades.csv the part's after it)
        points = 0 if student == NO_NOTEBOOK else sum(expected_points(student, lesson) for lesson in LESSONS)
        assert float(rows[student]["score"].split(" / ")[0]) == points, (student, rows[student])
        listed = student in (FLAGGED, NO_NOTEBOOK)
        assert (rows[student]["manual"], rows[student]["flagged"]) == (listed, listed), rows[student]
    print(f"screenshot: {screenshot(page, 'instructor-formgrader-gradebook')}")

    open_page(page, formgrader, rows[FLAGGED]["link"])
    comment = page.locator(f"#{LESSONS[3].solution_grade_id}-comment")
    # The formgrader's scripts fill the placeholder and the class after the page has loaded: wait for them.
    expect(comment).to_have_attribute("placeholder", re.compile(r"Needs a human look: .*eval"))
    expect(page.locator(f"#{LESSONS[3].grade_id}")).to_have_class(re.compile(r"\bneeds_manual_grade\b"))
    comment.scroll_into_view_if_needed()
    print(f"screenshot: {screenshot(page, 'instructor-formgrader-flag')}")


def test_the_formgrader_opens_a_notebook_that_could_not_be_graded_on_its_reason(workflow, formgrader, page):
    """The submission that is no notebook is listed (above) and opens on why it could not be graded, while
    grades.csv leaves its part blank (test_grades_csv_has_every_student_s_points_lesson_by_lesson)."""
    link = {row["student"]: row["link"] for row in submissions(page, formgrader)}[shown_name(NO_NOTEBOOK)]
    open_page(page, formgrader, link)
    page.get_by_text("This submission could not be graded").first.wait_for()
    text = page.locator("body").inner_text()
    with (workflow["course"] / "grading-flags.csv").open() as handle:
        reason = next(row["reason"] for row in csv.DictReader(handle) if row["student"] == NO_NOTEBOOK)
    assert " ".join(reason.split()) in " ".join(text.split()), (reason, text)  # (the page's spaces, not the file's)
    assert f"submitted/{NO_NOTEBOOK}/{SLUG}/{SLUG}.ipynb" in text, text
    assert read_grades(workflow["course"])[NO_NOTEBOOK][f"status_{SLUG}"] == "ungradable"
    print(f"screenshot: {screenshot(page, 'instructor-formgrader-ungradable')}")


_OVERFLOWING = """() => [...document.querySelectorAll('div.output_subarea pre, div.input_area pre')]
  .filter(pre => pre.scrollWidth > pre.clientWidth + 1).map(pre => pre.innerText.slice(0, 80))"""


def test_the_formgrader_shows_a_failed_lesson_s_verdict_whole_line_by_line_in_the_feedback_page_s_words(
        workflow, formgrader, page):
    """A lesson the student got wrong: its verdict reads as on the learner's feedback page (one wording,
    grading/feedback_text.py), each line of it on a line of its own, and no line of the page runs off its box."""
    from grading import feedback_text
    lesson = next(lesson for lesson in LESSONS if expected_points(ALL_MISTAKES, lesson) == 0)
    graded = nbformat.read(workflow["course"] / "autograded" / ALL_MISTAKES / SLUG / f"{SLUG}.ipynb", as_version=4)
    cell = next(cell for cell in graded.cells if feedback_text.lesson_of_test_cell(cell) == lesson)
    verdict = feedback_text.plain_output(cell.outputs[0])  # what the learner's page says of it
    assert verdict.output_type == "error" and len(verdict.traceback) >= 2, verdict
    link = {row["student"]: row["link"] for row in submissions(page, formgrader)}[shown_name(ALL_MISTAKES)]
    open_page(page, formgrader, link)
    shown = page.locator(f"div.cell:has(#{lesson.grade_id}) div.output_error pre")
    shown.wait_for()
    lines = [line for line in shown.inner_text().splitlines() if line.strip()]
    assert lines == [line for text in verdict.traceback for line in text.splitlines() if line.strip()], lines
    assert "GradedFailure" not in page.locator("body").inner_text()
    assert page.evaluate(_OVERFLOWING) == []
    assert not page.evaluate("() => document.documentElement.scrollWidth > window.innerWidth"), "wider than the window"
    shown.scroll_into_view_if_needed()
    print(f"screenshot: {screenshot(page, 'instructor-formgrader-verdict')}")


def type_score(page, formgrader, student: str, lesson, points: int) -> None:
    """Type ``points`` for ``lesson`` in ``student``'s notebook in the formgrader's Manual Grading, as an instructor does."""
    link = {row["student"]: row["link"] for row in submissions(page, formgrader)}[shown_name(student)]
    open_page(page, formgrader, link)
    score = page.locator(f"#{lesson.grade_id}")
    # The formgrader's scripts bind the input's "change" only once its grade has loaded, and then give it the
    # automatic score as placeholder: a score typed before that is never saved (seen once in a fresh clone).
    expect(score).to_have_attribute("placeholder", re.compile(r"\S"))
    with page.expect_response(lambda response: "/api/grade/" in response.url and response.request.method == "PUT"):
        score.fill(str(points))
        score.press("Tab")  # formgrader saves on "change"


def review_listing(workflow) -> str:
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "instructor.py"), "--course-dir",
                          str(workflow["course"]), "review"], capture_output=True, text=True, env=workflow["env"])
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_a_score_for_the_flagged_lesson_in_the_formgrader_empties_its_row_of_make_review(workflow, formgrader, page):
    listed = review_listing(workflow)
    assert f"  {FLAGGED} {SLUG}: needs review, lesson(s) {LESSONS[3].code}" in listed, listed
    type_score(page, formgrader, FLAGGED, LESSONS[3], 4)
    listed = review_listing(workflow)
    assert f"  {FLAGGED} " not in listed and f"  {NO_NOTEBOOK} {SLUG}: ungradable" in listed, listed
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "instructor.py"), "--course-dir",
                          str(workflow["course"]), "grades"], capture_output=True, text=True, env=workflow["env"])
    assert run.returncode == 0, run.stderr
    row = read_grades(workflow["course"])[FLAGGED]
    assert (row[f"status_{SLUG}"], row[f"lesson_{LESSONS[3].code}"]) == ("graded", "4")
    assert float(row[f"part_{SLUG}"]) == sum(expected_points(FLAGGED, lesson) for lesson in LESSONS) + 4


def test_a_score_set_in_the_formgrader_lands_in_grades_csv(workflow, formgrader, page):
    student, lesson, points = "edsger", LESSONS[3], 3  # edsger made lesson 004's catalogued mistake: 0 of 5
    course = workflow["course"]
    before = read_grades(course)[student]
    assert before[f"lesson_{lesson.code}"] == "0"
    type_score(page, formgrader, student, lesson, points)
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "instructor.py"), "--course-dir", str(course),
                          "grades"], capture_output=True, text=True, env=workflow["env"])
    assert run.returncode == 0, run.stderr
    after = read_grades(course)[student]
    assert after[f"lesson_{lesson.code}"] == str(points)
    assert float(after[f"part_{SLUG}"]) == float(before[f"part_{SLUG}"]) + points
    assert float(after["total"]) == float(before["total"]) + points
    assert not workflow["marker"].exists(), "the formgrader ran something from the sabotaging HOME"


# What ran of a page's scripts: MCTXSS() (every hostile form calls it) counts, and so do dialogs.
_COUNT_CALLS = f"window.{MARK} = () => {{ window.__mctRan = (window.__mctRan || 0) + 1; }};"


def open_submission(page, formgrader, link: str) -> int:
    """Open a submission in the formgrader (its own scripts loaded and run); how many hostile scripts ran."""
    dialogs = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.add_init_script(_COUNT_CALLS)
    page.goto(f"{formgrader.base}{link}")
    page.wait_for_load_state("load")
    page.wait_for_timeout(2000)  # an image's onerror, a timer: let them have their chance
    return page.evaluate("() => window.__mctRan || 0") + len(dialogs)


def formgrader_works(page) -> None:
    """The formgrader's own scripts ran on the page: they gave the first lesson's score box its placeholder."""
    expect(page.locator(f"#{LESSONS[0].grade_id}")).to_have_attribute("placeholder", re.compile(r"\S"))


def server_counts(formgrader) -> dict[str, int]:
    """Kernels, terminals and sessions the server holds, through its REST API."""
    counts = {}
    for what in ("kernels", "terminals", "sessions"):
        status, body = formgrader.request(f"api/{what}")
        assert status == 200, what
        counts[what] = len(json.loads(body))
    return counts


def test_no_script_of_a_hostile_submission_runs_in_the_formgrader(workflow, formgrader, page):
    """Through `make autograde`: the hostile student keeps the scores of their work, and opening their
    submission runs nothing of theirs, opens no terminal and starts no kernel."""
    assert [float(workflow["rows"][HOSTILE][f"lesson_{lesson.code}"]) for lesson in LESSONS] == \
        [expected_points(HOSTILE, lesson) for lesson in LESSONS]
    link = {row["student"]: row["link"] for row in submissions(page, formgrader)}[shown_name(HOSTILE)]
    before = server_counts(formgrader)
    assert open_submission(page, formgrader, link) == 0
    formgrader_works(page)
    page.get_by_text("[link]", exact=False).first.wait_for()  # the learner's text is there, as text
    assert server_counts(formgrader) == before


_FORMULAS = """() => [...document.querySelectorAll('math')].map(m => {
  const box = m.getBoundingClientRect();
  return {display: getComputedStyle(m).display, width: box.width, height: box.height,
          block: m.getAttribute('display') === 'block'};
})"""


def test_the_formgrader_draws_the_math_as_mathml_and_asks_nothing_off_the_machine(workflow, formgrader, page):
    """nbgrader's page of a submission loaded MathJax from cdnjs into the instructor's logged-in session (offline, no
    math, and formgrade.js stopped short of binding its keys).  The course's draws every formula of the notebook, the
    course's and the learner's, as MathML laid out by the browser, asks nothing of any address but the server's,
    and nbgrader's own script runs to its end: its keys are bound, and the box the address names gets the cursor
    (grading/templates/formgrade/mathjax.html.j2)."""
    from test_feedback_math import _formulas
    asked, errors = [], []

    def on_the_server(route):
        if route.request.url.startswith(f"{formgrader.base}/"):
            route.continue_()
        else:
            asked.append(route.request.url)
            route.abort()

    page.route("**/*", on_the_server)
    page.on("pageerror", lambda error: errors.append(str(error)))
    link = {row["student"]: row["link"] for row in submissions(page, formgrader)}[shown_name(HOSTILE)]
    page.goto(f"{formgrader.base}{link}")
    page.wait_for_load_state("load")
    assert asked == [], "the page asked for something off the machine"
    assert errors == [], "nbgrader's scripts failed on the page"  # (without MathJax: "MathJax is not defined")
    page.wait_for_function(_SETTLED)
    graded = nbformat.read(workflow["course"] / "autograded" / HOSTILE / SLUG / f"{SLUG}.ipynb", as_version=4)
    expected = sum(_formulas(cell.source) for cell in graded.cells if cell.cell_type == "markdown")
    formulas = page.evaluate(_FORMULAS)
    assert len(formulas) == expected > 20, f"{len(formulas)} formulas drawn, the notebook has {expected}"
    assert [f for f in formulas if "math" not in f["display"]] == [], "the browser did not lay these out as MathML"
    assert [f for f in formulas if f["width"] < 2 or f["height"] < 2] == [], "formulas drawn with no size"
    assert any(f["block"] for f in formulas) and any(not f["block"] for f in formulas)
    learner = page.locator("div.text_cell_render", has_text=f"evil.example/{MARK}.png")  # LEARNER_MATH
    assert (learner.locator("math").count(), learner.locator("math[display=block] mtable").count()) == (5, 1)
    text = learner.inner_text()
    assert f"https://evil.example/{MARK}.png" in text and f"<img src=x onerror={MARK}()>" in text  # as text
    assert asked == [] and errors == []
    assert page.evaluate("() => formgrader.loaded && !!formgrader.keyboard_manager")
    assert page.evaluate("() => document.activeElement.classList.contains('tabbable')")
    learner.scroll_into_view_if_needed()
    print(f"screenshot: {screenshot(page, 'instructor-formgrader-math')}")


def test_the_formgrader_s_policy_stops_event_handlers_that_reach_its_page(workflow, formgrader, page):
    """The second wall, alone: an autograded notebook written without the first (not sanitized) still runs no
    event handler of its own in the formgrader, and nbgrader's own pages keep working (the score test)."""
    course = workflow["course"]
    graded = course / "autograded" / UNTOUCHED / SLUG / f"{SLUG}.ipynb"
    kept = graded.read_bytes()
    notebook = nbformat.reads(kept.decode(), as_version=4)
    notebook.cells += [nbformat.v4.new_markdown_cell(f"<img src=x onerror={MARK}()> <svg onload={MARK}()></svg>"),
                       nbformat.v4.new_markdown_cell(f"<details open ontoggle={MARK}()>x</details>")]
    try:
        nbformat.write(notebook, graded)
        link = {row["student"]: row["link"] for row in submissions(page, formgrader)}[shown_name(UNTOUCHED)]
        with page.expect_response(lambda response: "/formgrader/submissions/" in response.url) as response:
            ran = open_submission(page, formgrader, link)
        assert "script-src-attr" in response.value.headers.get("content-security-policy", "")
        assert ran == 0
        formgrader_works(page)
    finally:
        graded.write_bytes(kept)


# ----------------------------------------------------------------------------------------- the planner

def test_split_cuts_runs_of_near_equal_weight_in_order():
    assert instructor.split(["a", "b", "c", "d", "e"], [1] * 5, 2) == [["a", "b", "c"], ["d", "e"]]
    assert instructor.split(["a", "b", "c"], [4, 1, 1], 2) == [["a"], ["b", "c"]]
    assert instructor.split(["a"], [1], 4) == [["a"]]
    assert instructor.split([], [], 2) == []


def test_a_flag_s_reason_is_its_first_line_cut_after_a_whole_sentence():
    rules = "cell 20 breaks the rules: eval (runs code from a string). " + "Graded code may import numpy, " * 12
    assert instructor.short_reason(rules) == "cell 20 breaks the rules: eval (runs code from a string)."
    assert instructor.short_reason("the kernel died at cell 3\ntraceback ...") == "the kernel died at cell 3"
    long_word = "x" * 500
    assert instructor.short_reason(long_word) == "x" * instructor.REASON_CHARS + "…"
    # The grader's note on a cell it did not run: no bracket left open when the note is cut, no bookkeeping.
    not_run = "[not run: cell 20 breaks the rules: eval " + "and more " * 40 + "] (this notebook needs a human look)"
    assert instructor.short_reason(not_run).startswith("not run: cell 20 breaks the rules: eval and more")
    assert "[" not in instructor.short_reason(not_run) and "]" not in instructor.short_reason(not_run)
    assert instructor.short_reason("[not run: the kernel died at cell 31] (this notebook needs a human look)") == \
        "not run: the kernel died at cell 31"
    # A reason printed in the instructor's terminal and CSV file: what would act on a terminal is shown escaped,
    # and a carriage return does not cut the line early.
    assert instructor.short_reason("cell 3 raised \x1b[2K\rok\u202e (this notebook needs a human look)") == \
        "cell 3 raised \\x1b[2K\\rok\\u202e"


def test_a_lesson_flagged_in_its_solution_and_its_test_cell_is_one_row_with_the_verdict_s_reason():
    task = instructor.Task(["01_mlp_core"], ["linus"], [("linus", "01_mlp_core")])
    task.flags[("linus", "01_mlp_core")] = [
        instructor.Flag("solution_004_relu_forward", "[not run: cell 20 breaks the rules] (this notebook needs a human look)"),
        instructor.Flag("lesson_004_relu_forward", "cell 20 breaks the rules; lesson 004 gets no points (listed for a human look)"),
        instructor.Flag("cell 31", "[not run: the kernel died at cell 31]")]
    task.problems[("margaret", "01_mlp_core")] = "NotJSONError: Notebook does not appear to be JSON"
    rows = instructor.flag_rows([task])
    assert sorted((row["student"], row["lesson"], row["reason"][:20]) for row in rows) == [
        ("linus", "", "[not run: the kernel"), ("linus", "lesson_004_relu_forward", "cell 20 breaks the r"),
        ("margaret", "", "autograding failed: ")]


def _shape(tasks):
    return [(task.slugs, len(task.students), len(task.notebooks)) for task in tasks]


def test_a_small_class_is_graded_in_one_run_per_job_with_every_part():
    parts = [f"0{n}" for n in range(1, 8)]
    four = {slug: ["s1", "s2", "s3", "s4"] for slug in parts}
    assert _shape(instructor.plan(four, 1)) == [(parts, 4, 28)]
    assert _shape(instructor.plan(four, 2)) == [(parts, 2, 14), (parts, 2, 14)]
    six = {slug: [f"s{k}" for k in range(6)] for slug in parts}  # 42 notebooks: two runs of 21, not four
    assert _shape(instructor.plan(six, 2)) == [(parts, 3, 21), (parts, 3, 21)]


@pytest.mark.parametrize("jobs", [1, 2, 3])
@pytest.mark.parametrize("per_run", [instructor.NOTEBOOKS_PER_RUN, instructor.PAGES_PER_RUN])
def test_a_large_class_is_cut_by_part_then_by_students_into_runs_of_at_most_per_run(jobs, per_run):
    parts = [f"0{n}" for n in range(1, 8)]
    tasks = instructor.plan({slug: [f"s{k:03d}" for k in range(200)] for slug in parts}, jobs, per_run)
    assert all(len(task.notebooks) <= per_run + len(task.slugs) for task in tasks)  # (a student's parts are whole)
    graded = sorted(pair for task in tasks for pair in task.notebooks)
    assert graded == sorted((f"s{k:03d}", slug) for slug in parts for k in range(200))  # each once
    if per_run * jobs <= 200:  # a part's students fill every job's runs: each run grades one part, as many
        assert all(len(task.slugs) == 1 for task in tasks)
        assert max(len(t.notebooks) for t in tasks) - min(len(t.notebooks) for t in tasks) <= 1
    loads = [0] * jobs  # the runs as the jobs take them (largest first, each on the first free job)
    for task in tasks:
        loads[loads.index(min(loads))] += len(task.notebooks)
    assert max(loads) - min(loads) <= max(len(task.notebooks) for task in tasks) // 2 + 1
    # every job gets as many runs: none grades the last one alone
    assert len(tasks) % jobs == 0 and len(tasks) < 2 * jobs * math.ceil(1400 / per_run / jobs)


def test_runs_start_largest_first_and_hold_only_what_was_handed_in():
    handed_in = {"01": [f"x{k:02d}" for k in range(28)], "02": ["a", "b", "c"], "03": ["a"], "04": []}
    tasks = instructor.plan(handed_in, 2)
    sizes = [len(task.notebooks) for task in tasks]
    assert sizes == sorted(sizes, reverse=True) and len(tasks) >= 2
    assert sorted(pair for task in tasks for pair in task.notebooks) == \
        sorted((student, slug) for slug, students in handed_in.items() for student in students)
    for task in tasks:
        assert {slug for _, slug in task.notebooks} == set(task.slugs)
        assert {student for student, _ in task.notebooks} == set(task.students)
    assert instructor.plan({"01": [], "02": []}, 2) == []


def test_one_student_s_parts_are_cut_between_the_jobs():
    parts = [f"0{n}" for n in range(1, 8)]
    alone = {slug: ["late"] for slug in parts}
    tasks = instructor.plan(alone, 2)
    assert len(tasks) == 2 and sorted(slug for task in tasks for slug in task.slugs) == parts
    # three students of Part 1 and a fourth who handed in every part: no job grades all ten notebooks
    lumpy = {slug: (["a", "b", "c", "d"] if slug == "01" else ["d"]) for slug in parts}
    tasks = instructor.plan(lumpy, 2)
    assert len(tasks) >= 2 and max(len(task.notebooks) for task in tasks) <= 6
    assert sorted(pair for task in tasks for pair in task.notebooks) == \
        sorted((student, slug) for slug, students in lumpy.items() for student in students)
    assert _shape(instructor.plan(alone, 1)) == [(parts, 1, 7)]
