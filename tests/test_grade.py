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
