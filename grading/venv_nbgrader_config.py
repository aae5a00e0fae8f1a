"""nbgrader's settings for every folder: `nbgrader validate` asks the course's grader wherever it is typed.

``make venv`` copies this file to ``.venv/etc/jupyter/nbgrader_config.py``, a folder that the
environment's nbgrader reads its configuration from whatever the current folder is.  Without it,
`nbgrader validate` typed in ``autograde/``, in another course directory or in any other folder
would use nbgrader's own validator, which runs only the visible tests in an ordinary kernel (and
fails an honest notebook whose imports the folder cannot resolve).  With it, every folder gives the
verdicts of ``make grade`` (grading/validate.py), as the course's root folder does.
"""

from grading.validate import use_course_validator

use_course_validator()
