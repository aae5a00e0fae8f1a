"""A submission that could not be graded is still listed in the formgrader, with the reason, and scores nothing.

nbgrader's formgrader lists a part's submissions from the gradebook, but only those whose autograded notebook is
on the disk (``NbGraderAPI._filter_existing_notebooks``).  A notebook nbgrader could not grade (not JSON, refused
unread by :mod:`grading.submission_limits`, a submission holding links, a run that failed) leaves none, so the
instructor's page for the part listed every submission but that one.  ``make autograde`` therefore records it
(``tools/instructor.py``, after the nbgrader runs, one writer at a time):

- in the gradebook, as nbgrader's own API keeps a submission: the student's submission of the part, whose
  lessons have **no automatic score** (``auto_score`` None: the last grading gave none; a score from an earlier
  grading of another file is not kept), each grade marked *needs manual grade* and the notebook flagged, so the
  formgrader ticks both;
- in ``autograded/<student>/<part>/<part>.ipynb``, a **stand-in notebook** the formgrader shows when the
  instructor opens the submission: one cell saying that it could not be graded, why, and where the file handed in
  is.  It holds nothing of the learner's but the reason's words, shown as text (:func:`grading.inert.make_inert`).

A lesson with no automatic score is what makes a part *ungradable* in ``grades.csv`` (its cells blank, never 0)
and in ``make review``, until ``make autograde`` grades the notebook; then nbgrader writes the real autograded
notebook and every automatic score over these.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat import NotebookNode

from . import inert

#: The stand-in notebook's heading (tools/instructor.py and the tests know a stand-in by it).
HEADING = "## This submission could not be graded"


def stand_in(student: str, slug: str, reason: str) -> NotebookNode:
    """The notebook the formgrader shows in place of ``student``'s part ``slug``, which could not be graded."""
    text = (f"{HEADING}\n\n"
            f"> {' '.join(reason.split())}\n\n"
            f"Nothing of it can be shown here, and none of its lessons has a score: `grades.csv` leaves them "
            f"blank and gives the part the status *ungradable*, and `make review` lists it.\n\n"
            f"The file handed in is `submitted/{student}/{slug}/{slug}.ipynb` in the course directory.  Once it can "
            f"be read, `make autograde STUDENTS={student} PART={slug[:2]}` grades it.")
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(text)], metadata={
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"}})
    return inert.make_inert(notebook)  # the reason may quote the file handed in: its words are shown as text


def record(gb, course: Path, student: str, slug: str, reason: str) -> bool:
    """Record ``student``'s part ``slug`` as not graded, for ``reason``, in the gradebook ``gb`` (nbgrader's
    ``Gradebook``) and in the course's autograded folder (see above).  False when the gradebook cannot hold it
    (the part was never released into it): nothing is written then."""
    from nbgrader.api import InvalidEntry, MissingEntry
    try:
        submission = gb.update_or_create_submission(slug, student)
    except (MissingEntry, InvalidEntry):
        return False
    for notebook in submission.notebooks:
        for grade in notebook.grades:
            grade.auto_score = None  # the last grading gave none (an earlier file's score does not stand)
            grade.needs_manual_grade = True
        for comment in notebook.comments:
            comment.auto_comment = None  # the reasons of this grading are written next (record_flags)
        notebook.flagged = True
    gb.db.commit()
    folder = course / "autograded" / student / slug
    folder.mkdir(parents=True, exist_ok=True)
    for notebook in submission.notebooks:
        nbformat.write(stand_in(student, slug, reason), folder / f"{notebook.name}.ipynb")
    return True


def is_ungradable(grades) -> bool:
    """Whether a part's gradebook ``grades`` (its lessons') say it was not graded: a lesson with no automatic score.

    Autograding gives every lesson's test cell one (nbgrader's ``determine_grade`` scores a code cell); only a
    grading that failed (:func:`record`), or none, leaves it None."""
    return any(grade.auto_score is None for grade in grades)


def is_stand_in(path: Path) -> bool:
    """Whether the autograded notebook at ``path`` is the stand-in of a submission that could not be graded."""
    try:
        notebook = nbformat.read(path, as_version=4)
    except (OSError, ValueError):
        return False
    return len(notebook.cells) == 1 and notebook.cells[0].source.startswith(HEADING)
