"""nbgrader's settings on the learner's side of the course: `nbgrader validate` asks the grader.

nbgrader reads this file when it runs in the course's root folder (as `make lab`'s JupyterLab
does, and `nbgrader validate notebooks/01_mlp_core.ipynb` typed there).  The grading settings
are the instructor's, in autograde/nbgrader_config.py; this file only makes `nbgrader validate`
grade the notebook as `make grade` does, hidden tests and all, instead of running its visible
tests (grading/validate.py).
"""

from grading.validate import use_course_validator

c = get_config()  # noqa: F821  (provided by traitlets when nbgrader loads this file)
use_course_validator()
