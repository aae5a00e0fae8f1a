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


@pytest.mark.slow
def test_a_composite_lesson_s_visible_tests_say_what_the_grader_says_of_an_earlier_lesson_s_cell(tmp_path,
                                                                                                monkeypatch):
    """An `import os` in lesson 004's function costs lesson 004 only: the grader grades lesson 005 with the helper's
    relu_forward.  In the learner's kernel, 004's test cell fails with the rules message (in the grader's words,
    the list of allowed modules left to the README), and 005's passes, with a note that names the cell."""
    from course import make_submission, reference_code, with_import_inside
    from grading import rules
    from shared.policy import RULES_POINTER

    monkeypatch.setenv("MCT_PROGRESS_FILE", str(tmp_path / "progress.json"))  # the kernel's; nothing recorded here
    slug = "01_mlp_core"
    broken, line = with_import_inside(reference_code(slug, "relu_forward"), "relu_forward")
    notebook = make_submission(slug, {"relu_forward": broken}, default="reference")
    findings = rules.check_notebook(notebook.cells, slug)
    assert [f.lesson for f in findings.cells] == ["004"]  # the grader: 004 gets no points, 005 is not touched
    NotebookClient(notebook, timeout=120, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute()
    outputs = {cell.metadata["nbgrader"]["grade_id"]: cell.outputs for cell in notebook.cells
               if cell.metadata.get("nbgrader", {}).get("grade_id", "").startswith("lesson_")}
    errors = {grade_id: [o for o in found if o.output_type == "error"] for grade_id, found in outputs.items()}
    assert [grade_id for grade_id, found in errors.items() if found] == ["lesson_004_relu_forward"], errors
    said = errors["lesson_004_relu_forward"][0].evalue
    assert said == (f"the cell that defines relu_forward breaks the course's rules for graded code: line {line}: "
                    f"import os (not a module graded code may use). {RULES_POINTER}")
    assert said.split(" breaks ", 1)[1] == findings.cells[0].message().split(" breaks ", 1)[1]
    printed = "".join(o.get("text", "") for o in outputs["lesson_005_mlp_forward"] if o.output_type == "stream")
    assert printed.startswith("Note: the cell that defines relu_forward breaks the course's rules for graded code "
                              f"(line {line}: import os): that costs lesson 004 only"), printed
    assert "✓ Lesson 005 · MLP forward: all tests passed" in printed
