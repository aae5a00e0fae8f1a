"""``SanitizeSubmission``: the autograded notebook, which the formgrader shows, runs nothing in a browser."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import nbformat
from nbformat import NotebookNode
from nbgrader.preprocessors import NbGraderPreprocessor

from .. import inert
from ..protocol import COURSE_DIR_ENV
from .base import part_slug
from .kernelmanager import GRADER_PEAK_LOG, peak_resident_bytes


def released_markdown(resources: dict[str, Any]) -> set[str]:
    """The sources of the markdown cells of the notebook the learner was given (the course's text), or
    none when it cannot be read (then every markdown cell is escaped: safe, only plainer)."""
    notebook = str(resources.get("nbgrader", {}).get("notebook", ""))
    slug = part_slug(resources)
    course = os.environ.get(COURSE_DIR_ENV)
    if not (course and slug and notebook) or "/" in slug + notebook:
        return set()
    path = Path(course) / "release" / slug / f"{notebook}.ipynb"
    try:
        released = nbformat.read(path, as_version=4)
    except (OSError, ValueError):
        return set()
    return {cell.source for cell in released.cells if cell.cell_type == "markdown"}


class SanitizeSubmission(NbGraderPreprocessor):
    """The autograded notebook made inert before nbgrader writes it (the formgrader renders that file,
    as live HTML, inside the instructor's logged-in JupyterLab).

    The course's one policy for showing a submission (:func:`grading.inert.make_inert`, the same as the
    feedback page's): markdown the learner wrote is shown as text, outputs keep only plain text and PNG
    or JPEG images with whole-number sizes, no value lands in an HTML attribute unchecked.  A markdown
    cell identical to one of the released notebook's is the course's own text and keeps its math and
    formatting untouched.  Runs last, after the grades are saved: it changes nothing that is graded.
    """

    def preprocess(self, nb: NotebookNode, resources: dict[str, Any]):
        # (last of a notebook's grading: the grader's peak so far, for the instructor's log and the tests)
        self.log.info("%s: %d MiB", GRADER_PEAK_LOG, peak_resident_bytes() // 2**20)
        return inert.make_inert(nb, released_markdown(resources)), resources
