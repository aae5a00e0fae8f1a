"""``SanitizeFeedback``: nothing from a notebook runs in the browser of whoever opens its feedback page."""

from __future__ import annotations

from typing import Any

from nbformat import NotebookNode
from nbgrader.preprocessors import NbGraderPreprocessor

from .. import inert


class SanitizeFeedback(NbGraderPreprocessor):
    """Nothing from a notebook runs in the browser of whoever opens its feedback page.

    The course's one policy for showing a submission (:func:`grading.inert.make_inert`, the same as for
    the formgrader's view): raw HTML in markdown cells is shown as text (``<`` escaped), and so are links
    and images (a link target, however encoded, is never a live URL); outputs keep only their plain-text
    and PNG or JPEG forms; no value from the notebook lands in an HTML attribute unchecked.  Every
    markdown cell is escaped here, the course's too: the page's math is MathML written by the course
    (:mod:`grading.feedback_math`), which reads the escaped text.
    """

    def preprocess(self, nb: NotebookNode, resources: dict[str, Any]):
        return inert.make_inert(nb), resources
