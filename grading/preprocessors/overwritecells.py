"""``CourseOverwriteCells``: nbgrader's ``OverwriteCells`` without its checksum warnings.

nbgrader puts every test and given cell back from the gradebook before grading, and warns "Attribute
'checksum' for cell ... has changed!" for each cell whose checksum differs from the gradebook's.  With hidden
tests, the gradebook's checksum is the source notebook's and the learner's copy holds the release's: every test
cell of every notebook differs, touched or not, so the warning says nothing.  What a submission really changed
of the course's cells is named by the instructor's tool against the release (grading/tampering.py); here the
checksum goes to the debug log, and every other change (a cell's type, points, grade or solution flag) is
warned of as nbgrader does.

And a submission whose course cells were copied, renamed or stripped of their metadata is graded, not lost to a
KeyError inside nbgrader: JupyterLab's copy and paste keeps a cell's nbgrader metadata, so a learner who copies a
graded or test cell hands in its grade_id twice.  nbgrader keeps the first (``DeduplicateIds``) and empties the
copies' metadata, and drops the grade_id of a cell the gradebook does not know, but then reads
``metadata.nbgrader.grade_id`` of every cell that has an ``nbgrader`` entry (``add_missing_task_cells``), and
puts a missing test cell after the course's cell before it only if that one is still there
(``add_missing_grade_cells``).  Here such a cell becomes an ordinary cell of the learner's (its ``nbgrader``
entry goes), and a missing test cell goes after the nearest earlier course cell the submission still has, or, when
its lesson's Implementation cell lost its metadata too (a notebook stripped of all of it), after the learner's cell
that defines the lesson's function, read from the code: its function is defined when its test cell runs.

``ReadableCellMetadata`` runs first of all: JupyterLab's metadata editor takes any JSON, and an ``nbgrader`` entry
that is not a mapping (``[1, 2]``), or whose ``grade_id`` is not a string, raised out of nbgrader's own
preprocessors (``DeduplicateIds``, ``utils.is_grade``): the whole part could not be graded.  Such a cell becomes an
ordinary cell of the learner's, as here.
"""

from __future__ import annotations

from typing import Any

from nbformat import NotebookNode
from nbgrader.preprocessors import NbGraderPreprocessor, OverwriteCells

from shared.lessons import lessons_of

from ..rules import cell_names
from .base import part_slug


class CourseOverwriteCells(OverwriteCells):
    def report_change(self, name: str, attr: str, old: Any, new: Any) -> None:
        if attr == "checksum":
            self.log.debug("checksum of cell %s differs from the gradebook's (the release's own): %s, %s", name, old, new)
            return
        super().report_change(name, attr, old, new)

    def preprocess_cell(self, cell: NotebookNode, resources: dict[str, Any], cell_index: int):
        cell, resources = super().preprocess_cell(cell, resources, cell_index)
        entry = cell.metadata.get("nbgrader")
        if "nbgrader" in cell.metadata and not (isinstance(entry, dict) and entry.get("grade_id")):
            self.log.warning("cell %d is graded as an ordinary cell: its nbgrader metadata names no cell of the "
                             "course (a copy of one, or a grade_id the gradebook does not have)", cell_index + 1)
            del cell.metadata["nbgrader"]
        return cell, resources

    def add_missing_grade_cells(self, nb: NotebookNode, resources: dict[str, Any]):
        """Every test cell of the course the submission lacks, put back in the course's order after the nearest
        earlier course cell it still has (at the top when it has none), or after the cell there that defines its
        lesson's function when the lesson's Implementation cell is not among them."""
        source = self.gradebook.find_notebook(self.notebook_id, self.assignment_id)
        order = [cell.name for cell in source.source_cells]
        by_name = {cell.name: cell for cell in source.source_cells}
        points = {cell.name: cell.max_score for cell in source.grade_cells}
        solutions = {cell.name for cell in source.solution_cells}
        lessons = {lesson.grade_id: lesson for lesson in lessons_of(part_slug(resources))}
        for position, name in enumerate(order):
            if name not in points:
                continue
            present = {cell.metadata["nbgrader"]["grade_id"]: index for index, cell in enumerate(nb.cells)
                       if cell.metadata.get("nbgrader", {}).get("grade_id")}
            if name in present:
                continue
            self.log.warning("Missing grade cell %s encountered, adding to notebook", name)
            before = next((present[earlier] for earlier in reversed(order[:position]) if earlier in present), -1)
            lesson = lessons.get(name)
            if lesson is not None and lesson.solution_grade_id not in present:
                before = _defining_cell(nb, lesson.function, before)
            nb.cells.insert(before + 1, self.missing_cell_transform(by_name[name], points[name],
                                                                     is_solution=name in solutions))
        return nb, resources


def _defining_cell(nb: NotebookNode, function: str, after: int) -> int:
    """The last code cell below cell ``after`` and above the next course cell that defines ``function`` at its top
    level (read with :func:`grading.rules.cell_names`), or ``after`` when there is none."""
    found = after
    for index in range(after + 1, len(nb.cells)):
        cell = nb.cells[index]
        if cell.metadata.get("nbgrader", {}).get("grade_id"):
            break  # a course cell of a later lesson: what stands below it is no longer this lesson's
        if cell.cell_type == "code" and function in cell_names("".join(cell.source)).defines:
            found = index
    return found


class ReadableCellMetadata(NbGraderPreprocessor):
    """Every cell's ``nbgrader`` entry one that nbgrader can read (a mapping whose ``grade_id``, if any, is a
    string), else none: the cell is graded as an ordinary cell of the learner's (the log says which)."""

    def preprocess(self, nb: NotebookNode, resources: dict[str, Any]):
        for index, cell in enumerate(nb.cells):
            entry = cell.metadata.get("nbgrader")
            if "nbgrader" in cell.metadata and not (isinstance(entry, dict)
                                                    and isinstance(entry.get("grade_id", ""), str)):
                self.log.warning("cell %d is graded as an ordinary cell: its nbgrader metadata is not what the "
                                 "course wrote (%s)", index + 1, type(entry).__name__)
                del cell.metadata["nbgrader"]
        return nb, resources
