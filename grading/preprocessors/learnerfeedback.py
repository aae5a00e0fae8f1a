"""``LearnerFeedback``: the feedback page in the learner's words, with the gradebook's scores."""

from __future__ import annotations

from typing import Any

from nbformat import NotebookNode
from nbgrader.preprocessors import NbGraderPreprocessor

from shared.lessons import lessons_of

from .. import feedback_text
from ..review import review_is_over
from .base import part_slug


class LearnerFeedback(NbGraderPreprocessor):
    """The feedback page in the learner's words, with the gradebook's scores (after SanitizeFeedback).

    The autograded notebook keeps the grader's notes as the instructor's tools read them; here, for the page
    only (grading/feedback_text.py): every note in plain words, each lesson's verdict with the score the
    gradebook holds (one the instructor set by hand included), and the progress panel drawn from those
    scores.  It runs after SanitizeFeedback, which would drop the panel's HTML: that HTML is the grader's
    own, made from the lesson table and numbers, never from the notebook.
    """

    def preprocess(self, nb: NotebookNode, resources: dict[str, Any]):
        slug = part_slug(resources)
        where = self._cell_namer(nb, slug)
        scores = {}
        for cell in nb.cells:
            lesson = feedback_text.lesson_of_test_cell(cell)
            if lesson is not None:
                cell.outputs = feedback_text.verdict_outputs(cell, lesson)
                scores[lesson.code] = (cell.metadata.nbgrader.get("score"), cell.metadata.nbgrader.get("points"))
            elif cell.cell_type == "code":
                cell.outputs = [feedback_text.plain_output(output, where) for output in cell.get("outputs", [])]
            comment = cell.get("metadata", {}).get("nbgrader", {}).get("comment")
            if isinstance(comment, str):
                cell.metadata.nbgrader["comment"] = feedback_text.plain_words(comment, where)
        panel = next((cell for cell in nb.cells if slug and cell.cell_type == "code"
                      and feedback_text.is_progress_panel(cell.source, slug)), None)
        if panel is not None and scores:
            panel.outputs = [feedback_text.progress_panel(slug, scores)]
        if self._review_is_over(resources):
            for cell in nb.cells:
                if cell.cell_type == "code":
                    cell.outputs = [feedback_text.after_review(output) for output in cell.get("outputs", [])]
                comment = cell.get("metadata", {}).get("nbgrader", {}).get("comment")
                if isinstance(comment, str):
                    cell.metadata.nbgrader["comment"] = feedback_text.after_review(comment)
        return nb, resources

    @staticmethod
    def _review_is_over(resources: dict[str, Any]) -> bool:
        """Whether the gradebook has nothing of this notebook waiting for a human (grading/review.py): then the
        page says the instructor has looked, where the grader's notes promised it."""
        about = resources.get("nbgrader", {})
        if not all(about.get(key) for key in ("db_url", "assignment", "notebook", "student")):
            return False
        return review_is_over(about["db_url"], about["assignment"], about["notebook"], about["student"])

    @staticmethod
    def _cell_namer(nb: NotebookNode, slug: str):
        """Names a cell (by nbclient's index) as a learner finds it: its number from 1 and the lesson whose
        region holds it (from the lesson's ``## 005 ·`` heading to the next ``##`` heading)."""
        by_heading = {lesson.heading: lesson for lesson in lessons_of(slug)} if slug else {}
        lessons, current = [], None
        for cell in nb.cells:
            if cell.cell_type == "markdown" and cell.source.startswith("## "):
                current = by_heading.get(cell.source.splitlines()[0].rstrip())
            lessons.append(current)

        def where(index: int) -> str:
            lesson = lessons[index] if 0 <= index < len(lessons) else None
            return feedback_text.cell_number(index) + (f" (lesson {lesson.code} · {lesson.title})" if lesson else "")
        return where
