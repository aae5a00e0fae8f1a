"""The review queue (`make review`) and the statuses of grades.csv, read from the gradebook's state.

A scratch course holds a gradebook written here with nbgrader's own API, as `make autograde` leaves one
(seconds: nothing is graded), and one notebook of each kind a class hands in:

- *ada*: every lesson right, on time;
- *linus*: lesson 004 flagged (a cell that breaks the rules), its grade waiting for a manual score;
- *grace*: flagged as a whole (a cell outside every lesson), every grade waiting;
- *margaret*: a file that is no notebook: autograding failed, nothing in autograded/;
- *late*: every lesson right, handed in 36 hours after the due date.

The instructor then does what the formgrader's Manual Grading does: a score for linus's lesson 004 (nbgrader's
grade API sets the score and clears "needs manual grade": ``grade_put`` below does the same) and grace's flag
cleared.  The browser test in tests/test_instructor.py does the first through the formgrader's page itself.
"""

from __future__ import annotations

import csv
import os
import shutil
from pathlib import Path

import pytest

from course import BIN, tool
from shared.lessons import TOTAL_POINTS, lessons_of

instructor = tool("instructor")

SLUG = "01_mlp_core"
LESSONS = lessons_of(SLUG)
FULL = sum(lesson.points for lesson in LESSONS)
RULES = "cell 20 breaks the rules: eval (runs code from a string)"
OUTSIDE = "cell 31 breaks the rules outside every lesson: the notebook's grade is withheld"
NOT_JSON = "autograding failed: NotJSONError: Notebook does not appear to be JSON"


def grade_put(grade, manual_score):
    """What the formgrader's grade API does with a score typed in Manual Grading (nbgrader's GradeHandler.put)."""
    grade.manual_score = manual_score
    grade.needs_manual_grade = grade.manual_score is None and grade.auto_score is None


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory):
    """The course as `make autograde` leaves it (made once: a new gradebook costs seconds)."""
    from nbgrader.api import Gradebook

    course = tmp_path_factory.mktemp("review") / "course"
    course.mkdir()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PATH", f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")  # nbgrader runs `alembic` from PATH
        Gradebook(f"sqlite:///{course / 'gradebook.db'}").close()
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        gb.update_or_create_assignment(SLUG, duedate="2026-01-01 00:00:00 UTC")
        gb.update_or_create_notebook(SLUG, SLUG)
        for lesson in LESSONS:
            gb.update_or_create_grade_cell(lesson.grade_id, SLUG, SLUG, max_score=lesson.points, cell_type="code")
            gb.update_or_create_solution_cell(lesson.solution_grade_id, SLUG, SLUG)
        for student in ("ada", "linus", "grace", "margaret", "late"):
            gb.update_or_create_student(student)
            (course / "submitted" / student / SLUG).mkdir(parents=True)
            stamp = "2026-01-02 12:00:00 UTC" if student == "late" else "2025-12-31 00:00:00 UTC"
            gb.add_submission(SLUG, student, timestamp=stamp)
            if student == "margaret":  # nbgrader could not read it: no grade came, no autograded notebook
                continue
            (course / "autograded" / student / SLUG).mkdir(parents=True)
            (course / "autograded" / student / SLUG / f"{SLUG}.ipynb").write_text("{}")
            for lesson in LESSONS:
                grade = gb.find_grade(lesson.grade_id, SLUG, SLUG, student)
                flagged = student == "grace" or (student == "linus" and lesson is LESSONS[3])
                grade.auto_score = 0 if flagged else lesson.points
                grade.needs_manual_grade = flagged
            gb.find_submission_notebook(SLUG, SLUG, student).flagged = student in ("linus", "grace")
        gb.db.commit()
    write_reasons(course, [("linus", LESSONS[3].grade_id, RULES), ("grace", "", OUTSIDE), ("margaret", "", NOT_JSON)])
    return course


@pytest.fixture
def course(graded_class, tmp_path):
    """A copy of the graded class for one test to change."""
    return Path(shutil.copytree(graded_class, tmp_path / "course"))


def write_reasons(course: Path, rows: list[tuple[str, str, str]]) -> None:
    """COURSE/grading-flags.csv as `make autograde` records it."""
    with (course / "grading-flags.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["student", "part", "lesson", "reason"])
        writer.writerows((student, SLUG, lesson, reason) for student, lesson, reason in rows)


def grades_csv(course: Path) -> dict[str, dict[str, str]]:
    assert instructor.main(["--course-dir", str(course), "grades"]) == 0
    with (course / "grades.csv").open() as handle:
        return {row["student"]: row for row in csv.DictReader(handle)}


def queue_file(course: Path) -> list[dict[str, str]]:
    with (course / "needs-manual-grading.csv").open() as handle:
        return list(csv.DictReader(handle))


def test_the_queue_has_one_row_per_notebook_waiting_for_a_human(course, capsys):
    assert instructor.main(["--course-dir", str(course), "review"]) == 0
    out = capsys.readouterr().out
    assert "review queue: 3 notebook(s) wait for a human" in out
    rows = {row["student"]: row for row in queue_file(course)}
    assert sorted(rows) == ["grace", "linus", "margaret"]
    assert (rows["linus"]["status"], rows["linus"]["lessons"], rows["linus"]["reasons"]) == ("needs review", "004", RULES)
    assert rows["grace"]["lessons"].split() == [lesson.code for lesson in LESSONS]
    assert (rows["margaret"]["status"], rows["margaret"]["lessons"]) == ("ungradable", "")
    assert NOT_JSON in rows["margaret"]["reasons"] and "linus 01_mlp_core: needs review, lesson(s) 004" in out


def test_a_manual_score_or_a_cleared_flag_empties_the_queue(course, capsys):
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        grade_put(gb.find_grade(LESSONS[3].grade_id, SLUG, SLUG, "linus"), 3)
        gb.find_submission_notebook(SLUG, SLUG, "grace").flagged = False  # cleared in the formgrader
        gb.db.commit()
    assert instructor.main(["--course-dir", str(course), "review"]) == 0
    assert [row["student"] for row in queue_file(course)] == ["margaret"]  # ungradable: until graded again
    assert "review queue: 1 notebook(s)" in capsys.readouterr().out
    rows = grades_csv(course)
    assert (rows["linus"][f"status_{SLUG}"], rows["linus"][f"part_{SLUG}"]) == ("graded", str(FULL - 5 + 3))
    assert rows["linus"][f"lesson_{LESSONS[3].code}"] == "3"
    assert (rows["grace"][f"status_{SLUG}"], rows["grace"][f"part_{SLUG}"]) == ("graded", "0")

    write_reasons(course, [])  # margaret's notebook graded again, a full-marks one this time
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for lesson in LESSONS:
            gb.find_grade(lesson.grade_id, SLUG, SLUG, "margaret").auto_score = lesson.points
            gb.find_grade(lesson.grade_id, SLUG, SLUG, "margaret").needs_manual_grade = False
        gb.db.commit()
    (course / "autograded" / "margaret" / SLUG).mkdir(parents=True)
    (course / "autograded" / "margaret" / SLUG / f"{SLUG}.ipynb").write_text("{}")
    assert instructor.main(["--course-dir", str(course), "review"]) == 0
    assert queue_file(course) == [] and "review queue: empty" in capsys.readouterr().out


def test_grades_csv_leaves_what_is_not_final_blank_and_says_why(course):
    rows = grades_csv(course)
    part, status, late = f"part_{SLUG}", f"status_{SLUG}", f"late_{SLUG}"
    assert (rows["ada"][part], rows["ada"][status], rows["ada"][late], rows["ada"]["total"]) == \
        (str(FULL), "graded", "", str(FULL))
    linus = rows["linus"]  # the flagged lesson and its part are pending: blank, never 0
    assert (linus[part], linus[status], linus["total"]) == ("", "needs review", "")
    assert linus[f"lesson_{LESSONS[3].code}"] == "" and linus[f"lesson_{LESSONS[0].code}"] == str(LESSONS[0].points)
    margaret = rows["margaret"]
    assert (margaret[part], margaret[status], margaret["total"]) == ("", "ungradable", "")
    assert all(margaret[f"lesson_{lesson.code}"] == "" for lesson in LESSONS)
    assert (rows["late"][late], rows["late"][status]) == ("36", "graded")
    other = "02_gradient_accumulation"
    assert (rows["ada"][f"status_{other}"], rows["ada"][f"part_{other}"]) == ("not handed in", "")
    assert {row["out_of"] for row in rows.values()} == {str(TOTAL_POINTS)}


def test_the_report_lists_the_same_queue_and_counts_what_is_not_final(course):
    from nbgrader.api import Gradebook

    report = tool("report")
    before = report.class_report(course, [SLUG])
    assert [row["student"] for row in before.flags] == ["grace", "linus", "margaret"]
    assert before.not_final[SLUG] == 3 and sorted(before.part_points[SLUG]) == [FULL, FULL]  # ada, late
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        grade_put(gb.find_grade(LESSONS[3].grade_id, SLUG, SLUG, "linus"), 3)
        gb.db.commit()
    after = report.class_report(course, [SLUG])
    assert [row["student"] for row in after.flags] == ["grace", "margaret"]
    assert after.not_final[SLUG] == 2 and sorted(after.part_points[SLUG]) == [FULL - 2, FULL, FULL]


def test_the_feedback_page_says_the_instructor_has_looked_once_nothing_waits(course):
    """The same state reaches the learner's page (grading.preprocessors.LearnerFeedback): the grader's promise
    of a human look holds while the lesson waits, and turns into its having happened once it has a score."""
    import nbformat
    from nbgrader.api import Gradebook

    from course import make_submission
    from grading.preprocessors import LearnerFeedback

    def page_text() -> str:
        notebook = make_submission(SLUG, default="reference")
        cell = next(c for c in notebook.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade_id")
                    == LESSONS[3].grade_id)
        cell.metadata.nbgrader.update(score=0.0, points=5.0)
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"{RULES}; lesson 004 gets no points "
                                                                               f"(listed for a human look)\n")]
        resources = {"nbgrader": {"assignment": SLUG, "notebook": SLUG, "student": "linus",
                                  "db_url": f"sqlite:///{course / 'gradebook.db'}"}}
        LearnerFeedback().preprocess(notebook, resources)
        return cell.outputs[0]["text"]

    assert "(your instructor will look at this notebook)" in page_text()
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:  # as `make grade` leaves it: nobody flagged it
        gb.find_submission_notebook(SLUG, SLUG, "linus").flagged = False
        gb.find_grade(LESSONS[3].grade_id, SLUG, SLUG, "linus").needs_manual_grade = False
        gb.db.commit()
    assert "(your instructor will look at this notebook)" in page_text()
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        grade_put(gb.find_grade(LESSONS[3].grade_id, SLUG, SLUG, "linus"), 3)
        gb.db.commit()
    assert "(your instructor has looked at this notebook)" in page_text()


# ------------------------------------------------------------------ a notebook that could not be graded

def formgrader_lists(course: Path) -> list[str]:
    """The students the formgrader's page of the part lists (nbgrader's own API behind that page)."""
    from nbgrader.apps.api import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    api = NbGraderAPI(coursedir=CourseDirectory(root=str(course)))
    return sorted(row["student"] for row in api.get_notebook_submissions(SLUG, SLUG))


def test_a_notebook_that_could_not_be_graded_is_listed_in_the_formgrader_with_its_reason_and_no_score(course):
    """margaret's file is no notebook: `make autograde` records it (grading/ungradable.py), so that the formgrader
    lists her beside the others, flagged, and opening it says why; grades.csv still leaves her part blank."""
    from nbgrader.api import Gradebook

    from course import formgrader_page
    from grading import ungradable

    assert formgrader_lists(course) == ["ada", "grace", "late", "linus"]  # as nbgrader leaves it: margaret missing
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        assert ungradable.record(gb, course, "margaret", SLUG, NOT_JSON + ": '<img src=x onerror=alert(1)>'")
    assert formgrader_lists(course) == ["ada", "grace", "late", "linus", "margaret"]
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        notebook = gb.find_submission_notebook(SLUG, SLUG, "margaret")
        assert notebook.flagged and all(grade.needs_manual_grade for grade in notebook.grades)
    import nbformat
    page = formgrader_page(nbformat.read(course / "autograded" / "margaret" / SLUG / f"{SLUG}.ipynb", as_version=4))
    assert "This submission could not be graded" in page and NOT_JSON in page
    assert f"submitted/margaret/{SLUG}/{SLUG}.ipynb" in page
    assert instructor.active_html(page) == instructor.active_html(formgrader_page(nbformat.v4.new_notebook()))
    margaret = grades_csv(course)["margaret"]
    assert (margaret[f"status_{SLUG}"], margaret[f"part_{SLUG}"], margaret["total"]) == ("ungradable", "", "")
    assert all(margaret[f"lesson_{lesson.code}"] == "" for lesson in LESSONS)
    assert [(row["student"], row["status"]) for row in queue_file(course) if row["student"] == "margaret"] == \
        [("margaret", "ungradable")]


def test_a_failed_grading_of_a_new_file_drops_the_scores_of_the_last_one(course):
    """ada hands in again a file that cannot be read: her earlier scores do not stand in grades.csv."""
    from nbgrader.api import Gradebook

    from grading import ungradable

    assert grades_csv(course)["ada"][f"status_{SLUG}"] == "graded"
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        assert ungradable.record(gb, course, "ada", SLUG, NOT_JSON)
    ada = grades_csv(course)["ada"]
    assert (ada[f"status_{SLUG}"], ada[f"part_{SLUG}"], ada[f"lesson_{LESSONS[0].code}"]) == ("ungradable", "", "")
    assert "ada" in formgrader_lists(course)
