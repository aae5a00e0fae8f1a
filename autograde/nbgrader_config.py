"""nbgrader configuration of the course (the instructor's side).

Grading depends neither on the current directory nor on the learner's home:
the course directory is this folder (or $MCT_COURSE_DIR), and the reference
solutions are found through this file's location (or $MCT_SOLUTIONS_DIR).
"""

import os
import sys
from pathlib import Path

c = get_config()  # noqa: F821  (provided by traitlets when nbgrader loads this file)

HERE = Path(__file__).resolve().parent
COURSE_ROOT = Path(__file__).resolve().parent.parent

c.CourseDirectory.root = os.environ.get("MCT_COURSE_DIR", str(HERE))
c.CourseDirectory.course_id = "memory-constrained-trainer"

# What the learner's copy shows in place of a solution.
c.ClearSolutions.code_stub = {
    "python": '# YOUR CODE HERE\nraise NotImplementedError("Not implemented yet: replace this line with your code.")'
}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# Per-cell time limit while autograding, in seconds.  A cell that runs longer
# (an endless loop) is interrupted and fails; the rest of the notebook still runs.
c.Execute.timeout = int(os.environ.get("MCT_CELL_TIMEOUT", "30"))
c.Execute.interrupt_on_timeout = True
c.Execute.allow_errors = True

# A deleted test cell is put back from the gradebook and graded, not scored None.
c.OverwriteCells.add_missing_cells = True

# Feedback must not show hidden tests (nbgrader#917, #1363).
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "nbgrader.preprocessors.ClearHiddenTests",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
]

# Kernels started by nbgrader inherit these: progress is not written while
# grading, failures print only their message, and hidden tests find the
# reference solutions outside the course directory.
os.environ["MCT_GRADING"] = "1"
os.environ.setdefault("MCT_SOLUTIONS_DIR", str(COURSE_ROOT / "solutions"))
# The "python3" kernel is this environment's own, not one a user's home may define.
os.environ["JUPYTER_PATH"] = os.pathsep.join(
    p for p in (str(Path(sys.prefix) / "share" / "jupyter"), os.environ.get("JUPYTER_PATH", "")) if p)
