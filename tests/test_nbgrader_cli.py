"""Several nbgrader commands in one process (grading/nbgrader_cli.py): each as its own process would run it.

The instructor's tools grade a small class's parts one after the other in one nbgrader process, each part
with its own selection of students.  An option of one command must not reach the next: traitlets keeps
every application as a singleton, and a subcommand left behind would come back with its options.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from grading import nbgrader_cli


def test_commands_are_split_at_then():
    argv = nbgrader_cli.commands(["autograde", "p1", "--student", "a"], ["generate_feedback", "p2"])
    assert argv[:3] == [sys.executable, "-m", "grading.nbgrader_cli"]
    assert nbgrader_cli.split_commands(argv[3:]) == [["autograde", "p1", "--student", "a"], ["generate_feedback", "p2"]]
    assert nbgrader_cli.split_commands(["autograde", "p1"]) == [["autograde", "p1"]]


@pytest.mark.slow
def test_an_option_of_one_command_does_not_reach_the_next(tmp_path):
    # Nothing to grade: each command says which submissions it looked for, and fails (exit 1), and the
    # process goes on to the next command all the same.
    (tmp_path / "nbgrader_config.py").write_text("c = get_config()  # noqa: F821\n")
    run = subprocess.run(nbgrader_cli.commands(["autograde", "p1", "--student", "alice"], ["autograde", "p2"],
                                               ["autograde", "p3", "--CourseDirectory.student_id_exclude=bob"]),
                         cwd=tmp_path, capture_output=True, text=True)
    looked_for = [line.split("matched by ", 1)[1] for line in (run.stdout + run.stderr).splitlines()
                  if "No notebooks were matched by" in line]
    assert looked_for == [f"'{tmp_path / 'submitted' / 'alice' / 'p1'}'", f"'{tmp_path / 'submitted' / '*' / 'p2'}'",
                          f"'{tmp_path / 'submitted' / '*' / 'p3'}'"], run.stdout + run.stderr
    assert run.returncode == 1


def test_the_failure_reason_is_the_telling_line_of_that_student_s_traceback():
    log = "\n".join([
        "[AutogradeApp | ERROR] There was an error processing assignment: /c/submitted/ann/01_mlp_core",
        "Traceback (most recent call last):",
        "RuntimeError: something downstream",
        "nbclient.exceptions.DeadKernelError: Kernel died",
        "[AutogradeApp | ERROR] There was an error processing assignment: /c/submitted/bob/01_mlp_core",
        "Traceback (most recent call last):",
        "nbformat.reader.NotJSONError: Notebook does not appear to be JSON",
        "[AutogradeApp | INFO] Autograding done",
    ])
    assert nbgrader_cli.failure_reason(log, "ann", "01_mlp_core") == "nbclient.exceptions.DeadKernelError: Kernel died"
    assert nbgrader_cli.failure_reason(log, "bob", "01_mlp_core").startswith("nbformat.reader.NotJSONError")
    assert nbgrader_cli.failure_reason("no error at all\nlast line") == "last line"
