"""`nbgrader validate` and the Validate button tell the truth: `make grade`'s verdicts (grading/validate.py).

Two notebooks of Part 1 are validated:

- *right*: the reference solutions: "Success!";
- *mixed*: lesson 004 answers the visible tests' calls from a table (``hard_coded_answer``: its
  visible tests pass, the hidden cases get 0); lesson 003's linear_forward forgets the bias, so
  lesson 005 (a composite: its mlp_forward calls linear_forward), right in itself, fails its visible
  tests, where the grader judges it with the reference version of linear_forward; lesson 008 is the
  untouched stub; and lesson 002's test cell is deleted (the grader puts it back).  The grader's
  verdicts: 003 and 004 wrong with the judge's messages, 005 right, 008 not answered yet, 002 right.

Each way in is tested once: the validator in this process (*right*), the `nbgrader validate` command
in the course's root folder (*mixed*), and `make lab`'s server answering the Validate button's POST
(*mixed*), as the button sends it.
"""

from __future__ import annotations

import builtins
import io
import json
import os
import shutil
import subprocess
import threading
import time
from contextlib import redirect_stdout
from pathlib import Path

import nbformat
import pytest

from course import (BIN, ROOT, grade_id_of, hard_coded_answer, make_submission, read, student_path,
                    visible_test_answers)
from lab_driver import serving, start_make_lab

pytestmark = pytest.mark.slow
SLUG = "01_mlp_core"
NO_BIAS = "def linear_forward(x, W, b):\n    return x @ W  # forgot the bias\n"
BIAS_MISSING = "the bias is missing"  # the judge names this common mistake of lesson 003


def mixed_notebook() -> nbformat.NotebookNode:
    """Part 1 with 004 hard-coded, 003 without the bias, 008 untouched, 002's test cell deleted, the rest the reference."""
    relu_forward = hard_coded_answer("relu_forward", visible_test_answers(SLUG)["relu_forward"])
    stub = next(c.source for c in read(student_path(SLUG)).cells if grade_id_of(c) == "solution_008_relu_backward")
    notebook = make_submission(SLUG, {"linear_forward": NO_BIAS, "relu_forward": relu_forward, "relu_backward": stub},
                               default="reference")
    notebook.cells = [c for c in notebook.cells if grade_id_of(c) != "lesson_002_init_mlp_params"]
    return notebook


@pytest.fixture(scope="module")
def notebooks(tmp_path_factory):
    folder = tmp_path_factory.mktemp("validate")
    paths = {"right": folder / "right" / f"{SLUG}.ipynb", "mixed": folder / "mixed" / f"{SLUG}.ipynb"}
    for name, notebook in (("right", make_submission(SLUG, default="reference")), ("mixed", mixed_notebook())):
        paths[name].parent.mkdir()
        nbformat.write(notebook, paths[name])
    return paths


def visible_tests_error(path: Path, code: str) -> Exception | None:
    """Run the notebook's set-up, its solution cells and lesson ``code``'s (visible) test cell here; what it raised."""
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    for cell in read(path).cells:
        grade_id = grade_id_of(cell) or ""
        if grade_id == "setup" or grade_id.startswith("solution_"):
            exec(cell.source, namespace)
            namespace["lesson_passed"] = lambda *_: None  # nothing recorded
        elif grade_id.startswith(f"lesson_{code}_"):
            try:
                with redirect_stdout(io.StringIO()):
                    exec(cell.source, namespace)
            except Exception as error:
                return error
            return None
    raise AssertionError(f"no test cell of lesson {code}")


def test_the_visible_tests_pass_the_hard_coded_answer_and_fail_the_composite(notebooks):
    """The premise: nbgrader's own validator, which runs only the visible tests, gets both lessons wrong."""
    assert visible_tests_error(notebooks["mixed"], "004") is None
    assert "mlp_forward(X, params)[0] is wrong" in str(visible_tests_error(notebooks["mixed"], "005"))


def test_a_right_notebook_is_a_success_and_its_graded_xp_is_recorded(notebooks, tmp_path, monkeypatch):
    """The learner's own notebook (notebooks/NN_slug.ipynb of the course: here a scratch course root)."""
    from grading import validate
    from shared.progress import graded_results

    monkeypatch.setenv("MCT_PROGRESS_FILE", str(tmp_path / "progress.json"))
    monkeypatch.setattr(validate, "ROOT", notebooks["right"].parent.parent)
    learner = notebooks["right"].parent.parent / "notebooks" / f"{SLUG}.ipynb"
    learner.parent.mkdir()
    shutil.copy(notebooks["right"], learner)
    before = learner.read_bytes()
    assert validate.CourseValidator().validate(str(learner)) == {}
    assert learner.read_bytes() == before, "validating must never change the notebook"
    assert set(graded_results().values()) == {True} and len(graded_results()) == 10


@pytest.fixture(scope="module")
def validated(notebooks):
    """`nbgrader validate` on the mixed notebook, typed in the course's root folder."""
    progress = notebooks["mixed"].parent / "progress.json"
    before = notebooks["mixed"].read_bytes()
    run = subprocess.run([str(BIN / "nbgrader"), "validate", str(notebooks["mixed"])], cwd=ROOT,
                         env=dict(os.environ, MCT_PROGRESS_FILE=str(progress)),
                         capture_output=True, text=True, timeout=300)
    return {"run": run, "out": run.stdout, "progress": progress,
            "unchanged": notebooks["mixed"].read_bytes() == before}


def test_nbgrader_validate_reports_the_graders_verdicts(validated):
    out = validated["out"]
    assert validated["run"].returncode == 0, out + validated["run"].stderr
    assert BIAS_MISSING in out.split("✗ 003 · Linear forward: 0/5", 1)[1].split("\n  ✗", 1)[0], out
    assert "hidden case" in out.split("✗ 004 · ReLU forward: 0/5", 1)[1].split("\n  ✓", 1)[0], out
    assert "✓ 005 · MLP forward: 5/5" in out  # the composite, judged with the reference linear_forward
    assert "✓ 002 · Init MLP params: 5/5" in out  # its deleted test cell was put back and graded
    assert "· 008 · ReLU backward: not answered yet" in out
    assert "VALIDATION FAILED: 2 lesson(s) you answered lose their points, 1 not answered yet" in out
    assert "Success" not in out and "make grade PART=01" in out


def test_nbgrader_validate_changes_nothing_and_records_nothing_for_a_copy(validated):
    """Only the learner's own notebooks/NN_slug.ipynb records graded XP, as `make grade` does."""
    assert validated["unchanged"]
    assert "graded" not in (json.loads(validated["progress"].read_text()) if validated["progress"].exists() else {})


def verdict_lines(out: str) -> list[str]:
    """The lessons' verdict headings of `nbgrader validate`'s report (what was right, wrong, not answered)."""
    return [line.strip() for line in out.splitlines() if line.startswith(("  ✓", "  ✗", "  ·"))]


def test_nbgrader_validate_gives_the_same_verdicts_in_the_course_directory(validated, notebooks):
    """Typed in autograde/ (the course directory the README names), not only in the repository's root."""
    run = subprocess.run([str(BIN / "nbgrader"), "validate", str(notebooks["mixed"])], cwd=ROOT / "autograde",
                         env=dict(os.environ, MCT_PROGRESS_FILE=str(validated["progress"])),
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "NameError" not in run.stdout + run.stderr
    assert verdict_lines(run.stdout) == verdict_lines(validated["out"]) and len(verdict_lines(run.stdout)) == 10


def course_directory(tmp_path: Path) -> Path:
    """A COURSE_DIR as the instructor's tools set one up: its nbgrader_config.py loads the course's."""
    from grading.course import write_course_config

    course = tmp_path / "course"
    course.mkdir()
    write_course_config(course)
    return course


@pytest.mark.parametrize("where", ["autograde", "course directory", "any folder"])
def test_nbgrader_validate_asks_the_grader_wherever_it_is_typed(tmp_path, where):
    """A notebook of no lesson: nbgrader's own validator would run its one cell and say "Success!"; the course's
    says at once that it is not a notebook of the course (seconds: nothing is graded)."""
    notebook = tmp_path / "plain.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")]), notebook)
    folder = {"autograde": ROOT / "autograde", "course directory": course_directory(tmp_path),
              "any folder": tmp_path}[where]
    run = subprocess.run([str(BIN / "nbgrader"), "validate", str(notebook)], cwd=folder,
                         capture_output=True, text=True, timeout=120)
    assert "this is not one of the course's notebooks" in run.stdout, \
        f"(is .venv/etc/jupyter/nbgrader_config.py there? `make venv` writes it)\n{run.stdout}\n{run.stderr[-2000:]}"
    assert "Success" not in run.stdout


@pytest.mark.parametrize("content, says", [
    ("{not json", "not valid JSON"),
    ('{"cells": "none"}', "no list of cells"),
    (json.dumps(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")])), "no lesson's cells"),
])
def test_a_file_that_is_not_a_course_notebook_is_said_so(tmp_path, content, says):
    from grading.validate import grade_notebook, nbgrader_results, report

    path = tmp_path / "broken.ipynb"
    path.write_text(content)
    validation = grade_notebook(path)
    assert says in validation.problem
    assert says in nbgrader_results(validation)["failed"][0]["raw_error"]
    assert "VALIDATION FAILED" in report(validation)


def test_one_part_saved_under_another_part_s_name_is_said_so_and_is_no_success(tmp_path):
    """Part 2's solved notebook saved as 01_mlp_core.ipynb: an instructor grades it as part 01, where it scores
    nothing, so Validate says that instead of "Success!" for the lessons of part 02 it holds; a copy under a
    name of no part (an attempt of one's own) is validated as the part it holds."""
    import shutil
    from course import solved_path
    from grading.validate import grade_notebook, report

    misnamed = tmp_path / "01_mlp_core.ipynb"
    shutil.copy(solved_path("02_gradient_accumulation"), misnamed)
    validation = grade_notebook(misnamed)
    assert "holds the lessons of part 02_gradient_accumulation, not of part 01_mlp_core" in validation.problem
    assert "Success" not in report(validation) and "VALIDATION FAILED" in report(validation)
    assert "make grade PART=01" in report(validation)  # what grades this file: as part 01
    from grading.private_course import saved_as_another_part
    assert saved_as_another_part(tmp_path / "my-attempt.ipynb", "02_gradient_accumulation") is None
    assert saved_as_another_part(tmp_path / "02_gradient_accumulation.ipynb", "02_gradient_accumulation") is None


def test_a_notebook_of_nbformat_3_is_read_as_the_grader_reads_it(tmp_path):
    """The grader converts an nbformat 3 notebook (its cells in "worksheets") as it reads it: so does Validate."""
    from course import solved_path
    from grading.private_course import part_of_notebook
    old = tmp_path / "01_mlp_core.ipynb"
    old.write_text(nbformat.writes(nbformat.convert(nbformat.read(solved_path("01_mlp_core"), 4), 3), version=3))
    assert "worksheets" in json.loads(old.read_text())
    assert part_of_notebook(old) == "01_mlp_core"


def test_a_failure_is_html_escaped_for_the_button():
    """The button shows ``error`` as HTML: a message quoting the learner's output shows as text."""
    from grading.validate import LessonResult, Validation, nbgrader_results

    validation = Validation(Path("x.ipynb"), SLUG, [LessonResult("003", False, "printed <img src=x onerror=alert(1)>")])
    (failed,) = nbgrader_results(validation)["failed"]
    assert "<img" not in failed["error"] and "&lt;img" in failed["error"]


def test_without_the_sandbox_the_verdicts_say_so():
    """Graded in an ordinary kernel (bubblewrap missing): the failures and the printed report say what was checked."""
    from grading.validate import LessonResult, Validation, nbgrader_results, report

    validation = Validation(Path("x.ipynb"), SLUG, [LessonResult("003", False, "wrong")],
                            unsandboxed="bubblewrap is not installed")
    shown = nbgrader_results(validation)["failed"][-1]["raw_error"]
    assert "WITHOUT the grading sandbox: bubblewrap is not installed" in shown
    assert "NOTE: graded WITHOUT the grading sandbox (bubblewrap is not installed)" in report(validation)


def test_the_courses_nbgrader_config_points_nbgrader_at_the_course_validator(monkeypatch):
    """The root nbgrader_config.py, as nbgrader reads it: `nbgrader validate` and nbgrader's own validate handler
    (a JupyterLab started without `make lab`) both use the course's validator."""
    from nbgrader.apps import validateapp
    from nbgrader.server_extensions.validate_assignment import handlers
    from traitlets.config import Config

    from grading.validate import CourseValidator
    for module in (validateapp, handlers):
        monkeypatch.setattr(module, "Validator", module.Validator)  # put back after the test
    exec(compile((ROOT / "nbgrader_config.py").read_text(), "nbgrader_config.py", "exec"), {"get_config": Config})
    assert validateapp.Validator is CourseValidator and handlers.Validator is CourseValidator


# ---------------------------------------------------------------- the Validate button, through `make lab`

@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """`make lab` as the learner starts it, answering HTTP as the Validate button asks it."""
    with serving(start_make_lab(tmp_path_factory.mktemp("lab"), token="mct-validate-test")) as server:
        yield server


def test_the_validate_button_gets_the_graders_verdicts(lab, notebooks):
    """The button's POST (``path`` in the query, as its toolbar button sends it) to `make lab`'s server;
    the server keeps answering while the notebook is graded."""
    folder = Path(ROOT / "build" / f"test-validate-{os.getpid()}")  # the notebook must be under the server's root
    folder.mkdir(parents=True, exist_ok=True)
    try:
        shutil.copy(notebooks["mixed"], folder / f"{SLUG}.ipynb")
        answer: dict = {}
        path = (folder / f"{SLUG}.ipynb").relative_to(ROOT).as_posix()
        post = threading.Thread(target=lambda: answer.update(
            zip(("status", "body"), lab.request(f"assignments/validate?path={path}", data=b""))))
        post.start()
        time.sleep(2)
        started = time.monotonic()
        assert lab.request("api/status", timeout=10)[0] == 200 and post.is_alive()
        assert time.monotonic() - started < 3, "the server must not wait for the grading"
        post.join(timeout=300)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert answer["status"] == 200
    reply = json.loads(answer["body"])
    assert reply["success"] is True
    failed = reply["value"]["failed"]
    assert [entry["source"].split(":")[0] for entry in failed] == ["Lesson 003 · Linear forward",
                                                                   "Lesson 004 · ReLU forward", "Not answered yet"]
    assert BIAS_MISSING in failed[0]["error"] and "hidden case" in failed[1]["error"]
    assert "008 · ReLU backward" in failed[2]["source"]
    assert "make grade PART=01" in failed[-1]["raw_error"]


def test_the_validate_buttons_server_refuses_bad_requests_and_answers_its_version_check(lab):
    from nbgrader import __version__

    assert json.loads(lab.request(f"nbgrader_version?version={__version__}")[1]) == {"success": True}
    assert lab.request("assignments/validate?path=../outside.ipynb", data=b"")[0] == 403
    assert lab.request("assignments/validate", data=b"{not json")[0] == 400
    status, body = lab.request("assignments/validate", data=json.dumps({"path": "README.md"}).encode())
    assert status == 200 and "not valid JSON" in json.loads(body)["value"]["failed"][0]["raw_error"]
