"""Whether a graded notebook still waits for a human: the one rule that ``make review``, ``grades.csv``, the
class report and the feedback page share.

``make autograde`` flags a notebook that needs a human look in nbgrader's gradebook (formgrader's
"Flagged?") and marks the grades concerned *needs manual grade* (tools/instructor.py, ``record_flags``).  The
instructor then gives each of those lessons a score in the formgrader (nbgrader clears *needs manual grade*
as the score is saved), or clears the notebook's flag.  Either way the notebook no longer waits.
"""

from __future__ import annotations


def waiting_grades(notebook) -> list[str]:
    """The names (grade ids) of the grades of a gradebook ``SubmittedNotebook`` still waiting for a human
    ([] for a notebook not flagged, or for none)."""
    if notebook is None or not notebook.flagged:
        return []
    return [grade.name for grade in notebook.grades if grade.needs_manual_grade and grade.manual_score is None]


def looked_at(notebook) -> bool:
    """Whether a human has looked at a gradebook ``SubmittedNotebook`` and nothing of it waits any more: a score
    given by hand, or its flag cleared while grades were still marked for a manual grade.  A notebook no one
    flagged (`make grade`'s, a learner's own) has not been looked at."""
    if notebook is None or waiting_grades(notebook):
        return False
    by_hand = any(grade.manual_score is not None for grade in notebook.grades)
    cleared = not notebook.flagged and any(grade.needs_manual_grade for grade in notebook.grades)
    return by_hand or cleared


def review_is_over(db_url: str, assignment: str, notebook: str, student: str) -> bool:
    """Whether the gradebook at ``db_url`` says a human has looked at the notebook (:func:`looked_at`; False
    when it does not know the notebook)."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(db_url) as gb:
        try:
            return looked_at(gb.find_submission_notebook(notebook, assignment, student))
        except MissingEntry:
            return False
