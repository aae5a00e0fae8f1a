"""The rules for graded code, applied by the judge to a submitted notebook.

:mod:`shared.policy` says what graded code may use and reads one piece of code.
This module applies it to a whole notebook, in nbgrader's process, before the
notebook runs:

- every code cell the learner wrote or changed is checked (a cell whose source is
  one of the course's own cells, as the part's source notebook has them, is the
  course's and is not), as IPython reads it (``x?``, ``%timeit``, ``!ls``);
- *graded code* is each lesson's function and what it needs from the notebook: the
  cells that define the function, and, through the names its functions use as
  globals, every cell that defines one of those names (read from the code, with
  Python's own :mod:`symtable`);
- a cell that breaks the rules is not run at all (:mod:`grading.preprocessors`). If
  it is graded code of a lesson (the only definition of a name the lesson needs),
  that lesson gets no points, with the construct and its line, and the notebook is
  listed for a human.  Otherwise it is a *scratch cell* (``help(x)``, ``x?``,
  ``%timeit``, ``!ls``, a plot, ``import os`` to look around): it is skipped, the
  feedback says so in one line, and it never costs a point;
- but a cell that breaks them only in top-level statements that bind nothing a
  lesson needs from there (a lesson's own cell with a ``help(f)`` or ``%timeit``
  line beside the function) runs without those statements
  (:func:`shared.policy.scratch_lines`: what runs is checked again, as it runs),
  and says so in one line: such lines are scratch too.
"""

from __future__ import annotations

import json
import re
import symtable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from shared.lessons import lessons_of
from shared.policy import UNREADABLE, Break, ScratchLines, check_source, course_imports, describe, \
    ipython_to_python, scratch_lines, too_large

from .course import lesson_spec

ROOT = Path(__file__).resolve().parent.parent
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
    defines: frozenset[str] = frozenset()  # every name the course's own cells bind (its functions' stubs included)

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
    defines = frozenset().union(*(cell_names(text).defines for text in sources))
    return CourseCells(frozenset(sources), imports, frozenset(demos), defines)


@dataclass(frozen=True)
class CellBreak:
    """A cell that breaks the rules: its index, the lesson whose points it costs (None: a scratch cell, which
    costs nothing), the breaks, and the names it would have defined that the lesson needs."""

    index: int
    lesson: str | None
    breaks: tuple[Break, ...]
    needed: tuple[str, ...] = ()
    trimmed: bool = False  # only some lines of the cell break the rules: the rest ran (Findings.trimmed)

    def where(self) -> str:
        return f"cell {self.index + 1}" + (f" (graded code of lesson {self.lesson})" if self.lesson else " (scratch)")

    def message(self) -> str:
        return describe(list(self.breaks), f"cell {self.index + 1}")

    def lesson_message(self, function: str) -> str:
        """Why lesson ``self.lesson`` gets no points, naming what of it the cell defines."""
        what = (f"defines {function}" if function in self.needed else
                f"is the only cell that defines {', '.join(self.needed)}, which {function} needs")
        run = "those lines were not run" if self.trimmed else "it was not run"
        return f"{self.message()}; that cell {what}, so {run}, and the lesson gets no points"

    def scratch_note(self) -> str:
        """The one line a skipped scratch cell shows in the graded notebook and the feedback."""
        first = next((b for b in self.breaks if b.construct == "get_ipython"), self.breaks[0])
        return (f"Skipped while grading: it does not change your grade (it uses {first.construct}, line "
                f"{first.line}: {first.why}; only cells that keep the rules for graded code run while grading).\n")


@dataclass
class Findings:
    """Every cell of a notebook that breaks the rules: graded code of a lesson, or scratch."""

    cells: list[CellBreak] = field(default_factory=list)
    trimmed: dict[int, ScratchLines] = field(default_factory=dict)  # cell index -> what of it runs, and why

    @property
    def skipped(self) -> set[int]:
        """The cells not run at all (a trimmed cell runs, without its scratch lines)."""
        return {found.index for found in self.cells} - set(self.trimmed)

    def of_lesson(self, code: str) -> list[CellBreak]:
        return [found for found in self.cells if found.lesson == code]

    @property
    def scratch(self) -> list[CellBreak]:
        return [found for found in self.cells if found.lesson is None]

    def at(self, index: int) -> list[CellBreak]:
        return [found for found in self.cells if found.index == index]


@dataclass(frozen=True)
class CellNames:
    """What a cell binds in the notebook's namespace, and, for each function it defines, the names that
    function (with everything nested in it) reads as globals."""

    defines: frozenset[str]
    needs: dict[str, frozenset[str]]


def cell_names(source: str) -> CellNames:
    """Read from the code with :mod:`symtable` (Python's own answer to which name is whose); nothing of a cell
    that cannot be read (too deep, or too large: :func:`shared.policy.too_large`)."""
    if too_large(source):
        return CellNames(frozenset(), {})
    try:
        top = symtable.symtable(ipython_to_python(source), "<cell>", "exec")
    except UNREADABLE:
        return CellNames(frozenset(), {})
    defines = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported()}
    needs: dict[str, frozenset[str]] = {}
    for child in top.get_children():
        if child.get_type() == "function" or child.get_type() == "class":
            needs[child.get_name()] = frozenset(_globals_read(child))
    return CellNames(frozenset(defines), needs)


def _globals_read(table: symtable.SymbolTable) -> set[str]:
    found = {s.get_name() for s in table.get_symbols() if s.is_global() and s.is_referenced()}
    for child in table.get_children():
        found |= _globals_read(child)
    return found


def needed_names(function: str, names: dict[int, CellNames], given: frozenset[str] = frozenset()) -> set[str]:
    """Every notebook name lesson function ``function`` needs: itself, and, through the functions of the
    notebook it calls, every name they read as globals; but the names ``given`` (the earlier lessons' functions
    that the grader binds to the helper's versions while this lesson is graded: its spec's ``isolate``).

    Linear in the notebook: each name's cells are looked up in an index (a walk of every cell for every name
    was cells x names, for every broken cell of a notebook of thousands)."""
    reads: dict[str, set[str]] = {}  # name -> the globals read by the functions of that name, in any cell
    for cell in names.values():
        for name in cell.defines:
            reads.setdefault(name, set()).update(cell.needs.get(name, ()))
    needed, frontier = set(), [function]
    while frontier:
        name = frontier.pop()
        if name in needed or name in given:
            continue
        needed.add(name)
        frontier.extend(reads.get(name, ()))
    return needed


def check_notebook(cells: list[Any], slug: str) -> Findings:
    """Every code cell of ``cells`` (a submitted notebook of part ``slug``) that breaks the rules: graded code
    of a lesson (it costs that lesson), or scratch (it is skipped and costs nothing); and every cell that runs
    without its scratch lines (``Findings.trimmed``: a ``help(f)`` or ``%timeit`` line beside a function, left
    out; such lines cost a lesson only where it needs a name that only they bind)."""
    course = course_cells(slug)
    learner: dict[int, str] = {}
    for index, cell in enumerate(cells):
        if cell.get("cell_type") == "code":
            source = "".join(cell.get("source", ""))
            if _normal(source) not in course.sources:
                learner[index] = source
    imports = {**course.imports, **_learner_imports(learner.values(), course.imports)}
    broken = {index: tuple(found) for index, source in learner.items()
              if (found := check_source(source, course=imports))}
    trimmed = {index: lines for index in broken if (lines := scratch_lines(learner[index], course=imports))}
    names = {index: cell_names(source) for index, source in learner.items()}  # (a trimmed cell's: all it binds)
    lessons = [(lesson, frozenset(lesson_spec(lesson.code).isolate)) for lesson in lessons_of(slug)]
    functions = {lesson.function for lesson, _ in lessons}
    # Names the lesson still finds if a broken cell is skipped: the course's own cells bind them, or a learner's
    # cell that keeps the rules does (a lesson's function stub is the course's, so it is not one), or what runs of
    # a trimmed cell does.
    kept = (course.defines - functions).union(*(names[i].defines for i in names if i not in broken),
                                              *(cell_names(lines.source).defines for lines in trimmed.values()))
    needs = [needed_names(lesson.function, names, given) for lesson, given in lessons]  # once a lesson, not a cell
    findings = Findings(trimmed=trimmed)
    for index in sorted(broken):
        own = [_is_own_cell(cells[index], lesson) for lesson, _ in lessons]
        if index in trimmed:  # it runs without its scratch lines: they cost a lesson only if it needs what they bind
            lost = trimmed[index].binds
            findings.cells.extend(
                CellBreak(index, lesson.code, trimmed[index].breaks, only_here, trimmed=True)
                for (lesson, _), needed, mine in zip(lessons, needs, own)
                if (only_here := _costs(lesson, needed, lost, kept, mine and lesson.function in lost)))
            continue
        costs = [CellBreak(index, lesson.code, broken[index], only_here)
                 for (lesson, _), needed, mine in zip(lessons, needs, own)
                 if (only_here := _costs(lesson, needed, names[index].defines, kept, mine))]
        findings.cells.extend(costs or [CellBreak(index, None, broken[index])])
    return findings


def _is_own_cell(cell: Any, lesson) -> bool:
    """Whether ``cell`` is ``lesson``'s Implementation cell (by its nbgrader id)."""
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == lesson.solution_grade_id


def _costs(lesson, needed: set[str], lost: frozenset[str], kept: frozenset[str], own_cell: bool) -> tuple[str, ...]:
    """The names of ``lost`` (what code that breaks the rules would have bound, had it run) that ``lesson`` needs
    (``needed``: :func:`needed_names`) and no code that runs binds: the lesson gets no points for them; and its
    function when ``own_cell`` (the lesson's own cell, not run, whatever reading finds in it)."""
    needed = needed & lost
    only_here = {name for name in needed if name not in kept} | ({lesson.function} if own_cell else set())
    return tuple(sorted(only_here))


def _learner_imports(sources: Any, course: dict[str, str]) -> dict[str, str]:
    """Names the learner's own cells import once and only by import (``import math`` in a cell of theirs):
    another cell of the notebook may use them as the course's imports are used."""
    found: dict[str, set[str]] = {}
    for source in sources:
        if too_large(source):
            continue
        for name, path in course_imports(ipython_to_python(source)).items():
            found.setdefault(name, set()).add(path)
    return {name: paths.pop() for name, paths in found.items() if len(paths) == 1 and name not in course}
