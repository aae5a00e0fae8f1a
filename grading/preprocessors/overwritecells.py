"""``CourseOverwriteCells``: nbgrader's ``OverwriteCells`` without its checksum warnings.

nbgrader puts every test and given cell back from the gradebook before grading, and warns "Attribute
'checksum' for cell ... has changed!" for each cell whose checksum differs from the gradebook's.  With hidden
tests, the gradebook's checksum is the source notebook's and the learner's copy holds the release's: every test
cell of every notebook differs, touched or not, so the warning says nothing.  What a submission really changed
of the course's cells is named by the instructor's tool against the release (grading/tampering.py); here the
checksum goes to the debug log, and every other change (a cell's type, points, grade or solution flag) is
warned of as nbgrader does.
"""

from __future__ import annotations

from typing import Any

from nbgrader.preprocessors import OverwriteCells


class CourseOverwriteCells(OverwriteCells):
    def report_change(self, name: str, attr: str, old: Any, new: Any) -> None:
        if attr == "checksum":
            self.log.debug("checksum of cell %s differs from the gradebook's (the release's own): %s, %s", name, old, new)
            return
        super().report_change(name, attr, old, new)
