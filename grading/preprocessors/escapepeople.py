"""``EscapePeople``: the names and paths that nbgrader's formgrader page writes raw are escaped first.

nbgrader's view of a submission (``formgrade/formgrade_macros.html.j2``) writes the student's id, first and last
name and the notebook's path into the page as they are, and ``make formgrader``'s page runs inline ``<script>``
(nbgrader's own pages need it: :mod:`grading.formgrader_csp`).  A student id is a folder's name under
``submitted/`` and a name is whatever a roster gave the gradebook: ``<script>...`` in either ran in the
instructor's logged-in session (it opened a terminal).  The formgrader hands those values to its exporter as
``resources``; this preprocessor, which runs before the exporter's template, makes every such string HTML text
(``html.escape``: ``<`` becomes ``&lt;``, quotes ``&quot;``), which is what each stands for in the page, in an
element's text and in an attribute alike.
"""

from __future__ import annotations

import html
from typing import Any

from nbconvert.preprocessors import Preprocessor

#: The resources that nbgrader's formgrader fills with values from the gradebook and the course's folders.
FROM_THE_GRADEBOOK = ("student", "first_name", "last_name", "notebook_path", "assignment_id", "notebook_id",
                      "submission_id", "filename")


class EscapePeople(Preprocessor):
    def preprocess(self, nb, resources: dict[str, Any]):
        for key in FROM_THE_GRADEBOOK:
            if isinstance(resources.get(key), str):
                resources[key] = html.escape(resources[key], quote=True)
        return nb, resources
