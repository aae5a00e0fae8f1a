"""`make grade`: a learner alone gets the real grade of their own notebooks.

Part 1 with most lessons solved, one left as the stub and one with a catalogued
mistake: tools/grade.py must print each lesson's result (the mistake by name),
write the feedback page, record the graded XP apart from the visible tests' XP,
and leave the learner's notebook untouched.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import nbformat

from course import ROOT, grade_id_of, make_submission, read, student_path

pytestmark = pytest.mark.slow


def test_make_grade_prints_each_lessons_real_result(tmp_path):
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    wrong = ("def linear_forward(x, W, b):\n"
             "    return x @ W  # forgot the bias\n")
    stub = next(c.source for c in read(student_path("01_mlp_core")).cells
                if grade_id_of(c) == "solution_008_relu_backward")
    submission = make_submission("01_mlp_core", {"linear_forward": wrong, "relu_backward": stub},
                                 default="reference")
    path = notebooks / "01_mlp_core.ipynb"
    nbformat.write(submission, path)
    before = path.read_bytes()
    progress = tmp_path / "progress.json"
    env = dict(os.environ, MCT_PROGRESS_FILE=str(progress))
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "grade.py"), "--part", "01",
                          "--notebooks", str(notebooks), "--course", str(tmp_path / "course")],
                         env=env, capture_output=True, text=True, timeout=300)
    out = run.stdout
    assert run.returncode == 0, run.stdout + run.stderr
    assert "✓ 001 · Make synthetic regression batch: 5/5" in out
    assert "✗ 003 · Linear forward: 0/5" in out and "the bias is missing" in out
    assert "✗ 008 · ReLU backward: 0/5" in out and "not started" in out
    assert "graded: 40/50 XP" in out
    assert (tmp_path / "course" / "feedback" / "me" / "01_mlp_core" / "01_mlp_core.html").is_file()
    graded = json.loads(progress.read_text())["graded"]
    assert graded["001"] is True and graded["003"] is False and graded["008"] is False
    assert path.read_bytes() == before, "grading must never change the learner's notebook"


def test_a_cell_that_breaks_the_rules_is_not_run_and_withholds_the_grade_outside_every_lesson(tmp_path):
    """By default (as an instructor grades) a cell that breaks the rules for graded code never runs: in
    a lesson's region it costs that lesson (tests/test_nbgrader_loop.py), outside every lesson it withholds
    the notebook's grade, every lesson saying why."""
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    ran = tmp_path / "the-cell-ran"
    breaking = (f"import os\nopen({str(ran)!r}, 'w').write('ran')  # never runs while grading\n\n"
                "def relu_forward(z):\n    return np.maximum(z, 0)\n")
    submission = make_submission("01_mlp_core", {"relu_forward": breaking}, default="reference")
    index = next(i for i, c in enumerate(submission.cells) if grade_id_of(c) == "setup")
    submission.cells.insert(index + 1, nbformat.v4.new_code_cell("import time\nstarted = time.time()"))
    nbformat.write(submission, notebooks / "01_mlp_core.ipynb")
    env = dict(os.environ, MCT_PROGRESS_FILE=str(tmp_path / "progress.json"))
    env.pop("MCT_RUN_BROKEN_CELLS", None)
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "grade.py"), "--part", "01",
                          "--notebooks", str(notebooks), "--course", str(tmp_path / "course")],
                         env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout
    assert "graded: 0/50 XP" in out and out.count("grade withheld") == 10, out
    assert "line 1: import time" in out and "outside every lesson, was not run" in out
    graded = read(tmp_path / "course" / "autograded" / "me" / "01_mlp_core" / "01_mlp_core.ipynb")
    not_run = [c for c in graded.cells if c.cell_type == "code" and c.outputs
               and "[not run:" in c.outputs[0].get("evalue", "")]
    assert len(not_run) == 2 and not ran.exists()  # the cell outside and the lesson's own
