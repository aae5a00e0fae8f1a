"""The rules for graded code, applied by the judge to a submitted notebook.

:mod:`shared.policy` says what graded code may use and reads one piece of code.
This module applies it to a whole notebook, in nbgrader's process, before the
notebook runs:

- every code cell the learner wrote or changed is checked (a cell whose source is
  one of the course's own cells, as the part's source notebook has them, is the
  course's and is not);
- each cell is placed in a lesson's region (from the lesson's ``## 005 · ...``
  heading to the next ``##`` heading; a lesson's solution and test cells are its
  own wherever they are) or outside every lesson;
- a cell that breaks the rules is not run at all (:mod:`grading.preprocessors`);
  inside a lesson's region it costs that lesson its points, with the construct
  and its line; outside every lesson it withholds the notebook's grade and lists
  the notebook for a human.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from shared.lessons import lesson_of_grade_id
from shared.policy import Break, check_source, course_imports, describe

ROOT = Path(__file__).resolve().parent.parent
_LESSON_HEADING = re.compile(r"^##\s+(\d{3})\s+·", re.MULTILINE)
_ANY_HEADING = re.compile(r"^##\s", re.MULTILINE)
_HIDDEN_REGION = re.compile(r"^### BEGIN HIDDEN TESTS\n.*?^### END HIDDEN TESTS\n?", re.MULTILINE | re.DOTALL)


# What nbgrader puts above a cell it adds back (OverwriteCells.add_missing_cells): not the learner's.
_ADDED_BACK = re.compile(r"\A# This cell \(id:[^)\n]*\) was missing from the submission\. It was added back by "
                         r"nbgrader\.\n\n")


def _normal(source: str) -> str:
    source = _ADDED_BACK.sub("", source)
    return "\n".join(line.rstrip() for line in source.strip().splitlines())


@dataclass(frozen=True)
class CourseCells:
    """What the part's own code cells are: their sources, the names they import (and from where), and
    the sources of its demonstrations (cells tagged ``demo`` in the master: nothing graded depends on
    them, the build checks, so they are not run while grading)."""

    sources: frozenset[str]
    imports: dict[str, str]
    demos: frozenset[str] = frozenset()

    def is_demo(self, source: str) -> bool:
        return _normal(source) in self.demos


@lru_cache(maxsize=None)
def course_cells(slug: str) -> CourseCells:
    """The part's own code cells, from its source notebook (the course's cells and reference solutions),
    with the test cells also as the learner's copy has them (without the hidden region)."""
    notebook = json.loads((ROOT / "autograde" / "source" / slug / f"{slug}.ipynb").read_text())
    sources, imports, demos = set(), {}, set()
    for cell in notebook["cells"]:
        if cell.get("cell_type") != "code":
            continue
        text = "".join(cell.get("source", ""))
        sources.update({_normal(text), _normal(_HIDDEN_REGION.sub("", text))})  # as graded, and as released
        if not cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
            imports.update(course_imports(text))
        if "demo" in cell.get("metadata", {}).get("tags", []):
            demos.add(_normal(text))
    return CourseCells(frozenset(sources), imports, frozenset(demos))


@dataclass(frozen=True)
class CellBreak:
    """A cell that breaks the rules: its index, the lesson whose region holds it (None: outside), the breaks."""

    index: int
    lesson: str | None
    breaks: tuple[Break, ...]

    def where(self) -> str:
        return f"cell {self.index + 1}" + (f" (lesson {self.lesson})" if self.lesson else " (outside every lesson)")

    def message(self) -> str:
        return describe(list(self.breaks), f"cell {self.index + 1}")


@dataclass
class Findings:
    """Every cell of a notebook that breaks the rules."""

    cells: list[CellBreak] = field(default_factory=list)

    @property
    def skipped(self) -> set[int]:
        return {found.index for found in self.cells}

    def of_lesson(self, code: str) -> list[CellBreak]:
        return [found for found in self.cells if found.lesson == code]

    @property
    def outside(self) -> list[CellBreak]:
        return [found for found in self.cells if found.lesson is None]


def regions(cells: list[Any]) -> list[str | None]:
    """For each cell, the lesson whose region holds it (``"005"``), or None outside every lesson."""
    found: list[str | None] = []
    current: str | None = None
    for cell in cells:
        if cell.get("cell_type") == "markdown":
            text = "".join(cell.get("source", ""))
            lesson = _LESSON_HEADING.search(text)
            if lesson:
                current = lesson.group(1)
            elif _ANY_HEADING.search(text):
                current = None
        grade_id = str(cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", ""))
        own = lesson_of_grade_id(grade_id)
        found.append(own.code if own is not None else current)
    return found


def check_notebook(cells: list[Any], slug: str) -> Findings:
    """Every code cell of ``cells`` (a submitted notebook of part ``slug``) that breaks the rules."""
    course = course_cells(slug)
    findings = Findings()
    for index, (cell, lesson) in enumerate(zip(cells, regions(cells))):
        if cell.get("cell_type") != "code":
            continue
        source = "".join(cell.get("source", ""))
        if _normal(source) in course.sources:
            continue
        breaks = check_source(source, course=course.imports)
        if breaks:
            findings.cells.append(CellBreak(index, lesson, tuple(breaks)))
    return findings
