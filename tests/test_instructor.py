"""The instructor's workflow end to end: make release, autograde, feedback, grades.

A scratch course directory (COURSE_DIR) holds three synthetic students for every
landed part: one perfect, one who handed in the release untouched, one with a
catalogued mistake, written out, in three lessons.  The make targets run from another
directory, with HOME pointing at a folder that would sabotage grading if anything
read it: bogus ``python3`` and ``mct-grading`` kernels, an nbgrader and an nbconvert
configuration (read by nbgrader itself, on the host), a user ``sitecustomize``, a
matplotlib configuration, and an IPython start-up script that would make every lesson
fail if the grading kernel (which gets a HOME of its own in the sandbox) ever ran it.
The grades must come out exactly right anyway, and nothing from HOME may run.
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys

import pytest

from classroom import MISTAKES, mistaken_lessons, mistakes_submission
from course import ROOT, built_parts, make_submission, submit, tool
from shared.lessons import lessons_of

instructor = tool("instructor")

pytestmark = pytest.mark.slow
PARTS = built_parts()
# Every landed part is released; one is graded here (tests/test_nbgrader_loop.py grades them all).
SUBMITTED = PARTS[:1]


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
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MCT_", "JUPYTER", "IPYTHON", "MPL"))}
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
        gb.update_or_create_assignment(SUBMITTED[0], duedate="2026-01-01 00:00:00 UTC")
    for slug in SUBMITTED:
        submit(course, "late", slug, make_submission(slug, default="reference"))
        (course / "submitted" / "late" / slug / "timestamp.txt").write_text("2026-01-02 00:00:00 UTC")
        submit(course, "perfect", slug, make_submission(slug, default="reference"))
        submit(course, "empty", slug, make_submission(slug, default="stub"))
        submit(course, "mistakes", slug, mistakes_submission(slug))
    runs["autograde"] = make("autograde")
    runs["feedback"] = make("feedback")
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:  # as `nbgrader db student import` would
        gb.update_or_create_student("perfect", first_name="Ada", last_name="Lovelace", email="ada@example.org")
    runs["grades"] = make("grades")
    stamp = {s: (course / "autograded" / s / PARTS[0] / f"{PARTS[0]}.ipynb").stat().st_mtime_ns
             for s in ("perfect", "empty", "mistakes")}
    runs["selected"] = make("autograde", "STUDENTS=empty", f"PART={int(SUBMITTED[0][:2])}", "SEED=4242")
    restamp = {s: (course / "autograded" / s / PARTS[0] / f"{PARTS[0]}.ipynb").stat().st_mtime_ns
               for s in ("perfect", "empty", "mistakes")}
    with (course / "grades.csv").open() as handle:
        rows = {row["student"]: row for row in csv.DictReader(handle)}
    return {"course": course, "runs": runs, "rows": rows, "marker": marker, "elsewhere": elsewhere,
            "config": (course / "nbgrader_config.py").read_text(),
            "regraded": {s for s in stamp if stamp[s] != restamp[s]}}


OWN_SETTING = 'c.LateSubmissionPlugin.penalty_method = "zero"  # the instructor\'s own'


def test_the_instructor_s_own_settings_are_kept_and_a_late_submission_is_penalised(workflow):
    config = workflow["config"]
    assert OWN_SETTING in config and config.index(instructor.END_SETTINGS) < config.index(OWN_SETTING)
    assert config.count(instructor.BEGIN_SETTINGS) == 1  # five make runs rewrote the block, not the file
    late = workflow["rows"]["late"]
    assert float(late[f"part_{SUBMITTED[0]}"]) == 0 and float(late["total"]) == 0  # nbgrader's "zero" penalty
    assert float(workflow["rows"]["perfect"][f"part_{SUBMITTED[0]}"]) == 5 * len(lessons_of(SUBMITTED[0]))


def test_release_puts_every_landed_part_in_the_course_directory(workflow):
    for slug in PARTS:
        release = workflow["course"] / "release" / slug
        assert sorted(p.name for p in release.iterdir()) == [f"{slug}.ipynb"]
    assert not list(workflow["elsewhere"].iterdir()), "nothing may land in the caller's directory"


def test_grades_csv_has_the_right_totals(workflow):
    rows = workflow["rows"]
    assert set(rows) == {"perfect", "empty", "mistakes", "late"}
    lessons = [lesson for slug in SUBMITTED for lesson in lessons_of(slug)]
    assert list(rows["perfect"])[:len(lessons) + 4] == \
        ["student", "first_name", "last_name", "email"] + [f"lesson_{l.code}" for l in lessons]
    assert (rows["perfect"]["first_name"], rows["perfect"]["email"]) == ("Ada", "ada@example.org")
    assert rows["empty"]["first_name"] == rows["empty"]["email"] == ""
    full = 5.0 * len(lessons)
    assert float(rows["perfect"]["total"]) == full
    assert float(rows["empty"]["total"]) == 0
    lost = {lesson.code for slug in SUBMITTED for lesson in mistaken_lessons(slug)}
    assert lost, "the mistakes student must make some mistake"
    for lesson in lessons:
        assert float(rows["mistakes"][f"lesson_{lesson.code}"]) == (0 if lesson.code in lost else 5), lesson.code
    assert float(rows["mistakes"]["total"]) == full - 5 * len(lost)
    for slug in SUBMITTED:
        assert float(rows["perfect"][f"part_{slug}"]) == 5 * len(lessons_of(slug))
    assert {row["out_of"] for row in rows.values()} == {"200"}
    for slug in PARTS[len(SUBMITTED):]:  # not handed in: blank, not 0 (an LMS tells the two apart)
        assert rows["empty"][f"part_{slug}"] == rows["perfect"][f"part_{slug}"] == "", slug
        assert all(rows["perfect"][f"lesson_{lesson.code}"] == "" for lesson in lessons_of(slug)), slug


def test_nothing_in_the_home_folder_took_part(workflow):
    assert not workflow["marker"].exists(), "a kernel, startup script or configuration from HOME ran"


def test_autograde_lists_what_needs_manual_grading(workflow):
    assert "needs manual grading: nothing" in workflow["runs"]["autograde"]


def test_autograde_can_grade_selected_students(workflow):
    assert workflow["regraded"] == {"empty"}
    assert "perfect" not in workflow["runs"]["selected"].split("scores:")[0]


def test_each_notebook_s_run_seed_is_recorded_and_seed_grades_with_a_chosen_one(workflow):
    first = re.search(r"run seed (\d+) \(SEED=", workflow["runs"]["autograde"])
    assert first, workflow["runs"]["autograde"][:2000]
    assert "run seed 4242 (SEED=4242" in workflow["runs"]["selected"]  # PART=1 SEED=4242, one student
    with (workflow["course"] / "grading-seeds.csv").open() as handle:
        seeds = {(row["student"], row["part"]): row["seed"] for row in csv.DictReader(handle)}
    slug = SUBMITTED[0]
    assert seeds == {("perfect", slug): first.group(1), ("mistakes", slug): first.group(1),
                     ("late", slug): first.group(1), ("empty", slug): "4242"}


def test_feedback_for_every_student_without_hidden_tests_or_reference(workflow):
    for student in ("perfect", "empty", "mistakes"):
        for slug in SUBMITTED:
            folder = workflow["course"] / "feedback" / student / slug
            assert instructor.feedback_problems(folder, slug) == [], (student, slug)
    page = (workflow["course"] / "feedback" / "mistakes" / SUBMITTED[0] / f"{SUBMITTED[0]}.html").read_text()
    first = mistaken_lessons(SUBMITTED[0])[0]
    assert "common mistake" in page and MISTAKES[first.function][1] in page


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


def test_a_large_class_is_cut_by_part_then_by_students_into_runs_of_about_thirty():
    parts = [f"0{n}" for n in range(1, 8)]
    tasks = instructor.plan({slug: [f"s{k:03d}" for k in range(200)] for slug in parts}, 2)
    assert all(len(task.slugs) == 1 and len(task.notebooks) <= instructor.NOTEBOOKS_PER_RUN for task in tasks)
    graded = sorted(pair for task in tasks for pair in task.notebooks)
    assert graded == sorted((f"s{k:03d}", slug) for slug in parts for k in range(200))  # each once
    assert max(len(t.notebooks) for t in tasks) - min(len(t.notebooks) for t in tasks) <= 1


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
