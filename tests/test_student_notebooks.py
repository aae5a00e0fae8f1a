"""The learner's notebooks run, and every graded stub fails only with NotImplementedError.

Any other error (a NameError, say) would mean the student copy depends on
something only the solutions define.
"""

import pytest
from nbclient import NotebookClient

from course import ROOT, read, student_path
from grading.course import landed_parts

STUB_MESSAGE = "Not implemented yet: replace this line with your code."


@pytest.mark.slow
@pytest.mark.parametrize("slug", landed_parts())
def test_student_notebook_fails_only_with_not_implemented(slug):
    notebook = read(student_path(slug))
    NotebookClient(notebook, timeout=120, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute()
    graded = 0
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "code":
            continue
        errors = [o for o in cell.outputs if o.output_type == "error"]
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade"):
            graded += 1
            assert errors, f"test cell {meta['grade_id']} passed on the untouched stub"
        if meta.get("grade_id") == "setup" or meta.get("solution") or index < 3:
            assert not errors, f"cell {index} must run cleanly in the student copy: {errors}"
        for error in errors:
            assert error.ename == "NotImplementedError", (
                f"cell {index} ({meta.get('grade_id', 'demo')}) failed with {error.ename}: {error.evalue}")
            assert error.evalue == STUB_MESSAGE
    assert graded == sum(1 for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade"))
