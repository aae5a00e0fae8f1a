"""What a submission changed of the course's own cells: the test cells and the given cells, against the release.

nbgrader puts every such cell back from the gradebook before grading (``OverwriteCells``, and
``add_missing_cells`` for a deleted test cell), so the grade is right whatever the learner did to them; but
an edited, deleted or moved test cell is an attempt that an instructor wants to hear of.  nbgrader itself only
logs a checksum warning, and for more cells than were touched.  Here each changed cell is compared with the
release's own copy and named, with what changed:

- *deleted*: the release's cell (by its grade id) is not in the submission;
- *edited*: its source differs (the first line that differs is quoted, both ways), or its points;
- *moved*: it no longer follows the same course cell as in the release.

A cell the learner writes in (a solution cell) is the learner's own and never listed.  Nothing here reads the
learner's code as code: the two notebooks are compared as JSON.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

QUOTE_CHARS = 60  # of a changed line, in a report


@dataclass(frozen=True)
class Change:
    """One course cell the submission changed: its grade id, where it is (cell number from 1, or None when
    deleted), and what changed."""
    grade_id: str
    cell: int | None
    what: str

    def __str__(self) -> str:
        where = f"cell {self.cell}" if self.cell is not None else "no longer in the notebook"
        return f"the course's cell {self.grade_id} ({where}) {self.what} against the release"


def _course_cells(notebook: dict) -> list[tuple[int, str, dict]]:
    """(number from 1, grade id, cell) of each cell the course owns: a test cell or a locked (given) cell."""
    found = []
    for index, cell in enumerate(notebook.get("cells", []) if isinstance(notebook, dict) else []):
        meta = cell.get("metadata", {}).get("nbgrader", {}) if isinstance(cell, dict) else {}
        if not isinstance(meta, dict) or not isinstance(meta.get("grade_id"), str) or meta.get("solution"):
            continue
        if meta.get("locked") or meta.get("grade"):
            found.append((index + 1, meta["grade_id"], cell))
    return found


def _source(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def _quote(line: str) -> str:
    """A learner's line, cut, as a markdown code span: the feedback page renders a comment as markdown, where
    the line's own HTML or links would be live (a page the page check then withholds from its learner)."""
    line = line.strip()
    text = repr(line if len(line) <= QUOTE_CHARS else line[:QUOTE_CHARS] + "…")
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    return f"{fence} {text} {fence}"


def _edit(released: dict, submitted: dict) -> str | None:
    """How ``submitted`` differs from the release's ``released`` copy (None: it does not)."""
    if released.get("cell_type") != submitted.get("cell_type"):
        return f"edited (a {released.get('cell_type')} cell turned into a {submitted.get('cell_type')} cell)"
    before, after = _source(released), _source(submitted)
    if before.strip() != after.strip():
        old, new = before.strip().splitlines(), after.strip().splitlines()
        for number, (was, now) in enumerate(zip(old, new), start=1):
            if was.strip() != now.strip():
                return f"edited (line {number}: {_quote(was)} became {_quote(now)})"
        if len(new) > len(old):
            return f"edited (line {len(old) + 1} added: {_quote(new[len(old)])})"
        return f"edited (line {len(new) + 1} removed: {_quote(old[len(new)])})"
    points = [cell.get("metadata", {}).get("nbgrader", {}).get("points") for cell in (released, submitted)]
    if points[0] != points[1]:
        return f"edited (its points: {points[0]} became {points[1]})"
    return None


def changes(release: dict, submission: dict) -> list[Change]:
    """Every course cell of ``release`` that ``submission`` deleted, edited or moved, in the release's order."""
    released = _course_cells(release)
    submitted = {grade_id: (number, cell) for number, grade_id, cell in _course_cells(submission)}
    kept = [grade_id for _, grade_id, _ in _course_cells(submission) if grade_id in {g for _, g, _ in released}]
    before_in_release = {grade_id: previous for previous, grade_id in
                         zip([None, *[g for _, g, _ in released if g in submitted]], [g for _, g, _ in released
                                                                                       if g in submitted])}
    before_now = dict(zip(kept, [None, *kept]))
    found = []
    for _, grade_id, cell in released:
        if grade_id not in submitted:
            found.append(Change(grade_id, None, "was deleted"))
            continue
        number, theirs = submitted[grade_id]
        edit = _edit(cell, theirs)
        if edit:
            found.append(Change(grade_id, number, edit))
        if before_now.get(grade_id) != before_in_release.get(grade_id):
            after = before_now.get(grade_id)
            found.append(Change(grade_id, number, f"was moved (now after {after or 'nothing of the course'}, "
                                                  f"released after {before_in_release.get(grade_id) or 'nothing'})"))
    return found


def notebook_changes(release: Path, submission: Path) -> list[Change]:
    """:func:`changes` of two notebook files ([] when either cannot be read: grading says why)."""
    try:
        return changes(json.loads(release.read_text()), json.loads(submission.read_text()))
    except (OSError, ValueError):
        return []
