"""`make test` passes in a clone where a learner has worked: tests check the committed files.

A learner fills in answers and runs cells in notebooks/: those working copies are theirs.
The freshness check compares a fresh build with the notebook *as committed*, and reports
the committed version when that one is stale; the learner's copy is never judged.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import nbformat

from course import ROOT, committed_student_notebook, tool

build = tool("build")


def _clone(tmp_path: Path) -> Path:
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", "--local", str(ROOT), str(clone)], check=True)
    return clone


def _work_on(notebook_path: Path) -> None:
    notebook = nbformat.read(notebook_path, as_version=4)
    for cell in notebook.cells:
        if cell.metadata.get("nbgrader", {}).get("solution"):
            cell.source = cell.source.replace(
                'raise NotImplementedError("Not implemented yet: replace this line with your code.")', "return 42")
        if cell.cell_type == "code":
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="my run\n")]
            cell.execution_count = 1
    nbformat.write(notebook, notebook_path)


def test_freshness_checks_a_worked_notebook_as_committed(tmp_path, monkeypatch):
    clone = _clone(tmp_path)
    rel = Path("notebooks") / "01_mlp_core.ipynb"
    committed = (clone / rel).read_text()
    _work_on(clone / rel)
    assert build.holds_learner_work(clone / rel)
    monkeypatch.setattr(build, "ROOT", clone)
    assert build.stale_files({rel: committed}) == [], "the learner's working copy was judged"
    problems = build.stale_files({rel: committed.replace("Linear forward", "Linear forwards", 1)})
    assert problems and "committed version is stale" in problems[0]


def test_tests_read_the_committed_student_notebook_when_the_learner_has_worked(tmp_path, monkeypatch):
    """Where the working copy holds a learner's work, the tests use the committed notebook."""
    import course
    clone = _clone(tmp_path)
    _work_on(clone / "notebooks" / "01_mlp_core.ipynb")
    monkeypatch.setattr(course, "ROOT", clone)
    monkeypatch.setattr(build, "ROOT", clone)
    used = course.student_path("01_mlp_core")
    assert used != clone / "notebooks" / "01_mlp_core.ipynb"
    assert not build.holds_learner_work(used)
    assert used.read_text() == committed_student_notebook("01_mlp_core").read_text()
