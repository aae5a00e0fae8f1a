"""The learner's own functions, read from their notebooks: what ``make train-distributed FROM=notebooks`` runs.

A notebook is run here as the learner runs it from the top, but only the cells that make its
functions: its read-only set-up cell (the imports), the learner's Implementation cells (the
nbgrader solution cells), and, from any other cell but the visible test cells, the ``import``,
``def`` and ``class`` statements (a helper that the learner wrote in a cell of their own).  The
demos and the visible test cells are not run: they compute, plot and check, and nothing here
needs what they leave behind.  IPython's magics and shell lines (``%timeit``, ``!ls``) are left out.

Each cell is compiled under a name of its own that no file has, with its text kept in
:mod:`linecache`, as IPython keeps a cell's: so a traceback shows the learner's line, and
:func:`shared.checking.check_rules` reads the whole cell that defines a function, as the visible
test cells do.  :func:`problems` says, before anything trains, what stops a lesson from running:
a notebook or function that is missing, a cell that breaks the rules for graded code (in the test
cells' words), or a lesson whose stub still raises ``NotImplementedError``.  It checks the
lesson's function and every function of the notebook that it calls (lesson 029 calls the
learner's 025, 026 and 028; 035 its own ``reduce_scatter_mean``, 033 and 034; Part 7's 040 the
helper's versions that its set-up cell imports).
"""

from __future__ import annotations

import ast
import linecache
import os
import re
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared.lessons import LESSONS, Lesson, lesson_of_grade_id

#: How a cell's name looks in tracebacks and in linecache (no file has such a name).
CELL_NAME = "<{notebook}, cell {index}>"
_MAGIC = re.compile(r"^\s*[%!]")
_FUNCTIONS = {lesson.function: lesson for lesson in LESSONS}
# The statements run from a cell that is neither the set-up cell nor an Implementation cell.
_DEFINITIONS = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)

_loaded: dict[Any, dict[str, Any]] = {}  # Notebook -> its namespace, made once per process


class NotebookProblem(Exception):
    """What stops a lesson of a notebook from running; the message is for the learner."""


@dataclass(frozen=True)
class Cell:
    """A code cell of a notebook: where it is, what it is, and its code."""

    index: int  # its position among all the notebook's cells, from 0
    kind: str  # "setup", "solution", "test" or "other"
    source: str


def notebook_path(folder: Path, lesson: Lesson) -> Path:
    """The learner's notebook that holds ``lesson``: ``folder/NN_slug.ipynb``."""
    return Path(folder) / f"{lesson.part.slug}.ipynb"


def display_path(path: Path) -> str:
    """``path`` as the learner knows it: relative to the current folder when it is inside it."""
    path = Path(path).resolve()
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def code_cells(path: Path) -> list[Cell]:
    """The notebook's code cells, each with its kind (read with nbformat, any version 4 notebook)."""
    import nbformat

    try:
        notebook = nbformat.read(str(path), as_version=4)
    except FileNotFoundError:
        raise NotebookProblem(f"there is no notebook at {display_path(path)}") from None
    except Exception as error:  # noqa: BLE001 - a notebook that is no notebook: say so, in one line
        raise NotebookProblem(f"{display_path(path)} could not be read as a notebook: {error}") from None
    cells = []
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "code":
            continue
        grading = cell.metadata.get("nbgrader", {})
        grade_id = grading.get("grade_id") or ""
        if grade_id == "setup":
            kind = "setup"
        elif grading.get("solution"):
            kind = "solution"
        elif grading.get("grade") or lesson_of_grade_id(grade_id) is not None:
            kind = "test"
        else:
            kind = "other"
        cells.append(Cell(index, kind, cell.source))
    return cells


def without_magics(source: str) -> str:
    """The cell's Python: IPython's line magics and shell lines blanked (line numbers stay), a cell magic's cell
    emptied."""
    if source.lstrip().startswith("%%"):
        return ""
    return "\n".join("" if _MAGIC.match(line) else line for line in source.split("\n"))


def what_runs(cell: Cell, tree: ast.Module) -> ast.Module | None:
    """The part of a cell that runs: the set-up and Implementation cells whole, another cell's imports and
    definitions only, a visible test cell nothing."""
    if cell.kind in ("setup", "solution"):
        return tree
    if cell.kind == "test":
        return None
    kept = [statement for statement in tree.body if isinstance(statement, _DEFINITIONS)]
    return ast.Module(body=kept, type_ignores=[]) if kept else None


@dataclass(frozen=True)
class Notebook:
    """A learner's notebook as read once: its path and its code cells. Picklable: the worker processes run
    the very cells that the launching process read and checked, not the file as it may be by then."""

    path: str
    cells: tuple[Cell, ...]

    @property
    def name(self) -> str:
        return display_path(Path(self.path))

    def namespace(self) -> dict[str, Any]:
        """The namespace the notebook's function-making cells leave (see the module's docstring), made once
        per process.

        Raises:
            NotebookProblem: an Implementation or set-up cell that does not compile or raises when run
                (named by its cell).
        """
        if self not in _loaded:
            _loaded[self] = _run_cells(self)
        return _loaded[self]


def read(path: Path) -> Notebook:
    """The notebook at ``path``, read (:class:`NotebookProblem` if there is none, or it is no notebook)."""
    path = Path(path).resolve()
    return Notebook(str(path), tuple(code_cells(path)))


def _run_cells(notebook: Notebook) -> dict[str, Any]:
    os.environ.setdefault("MPLBACKEND", "Agg")  # the set-up cell imports pyplot; nothing is shown here
    # A fresh module stands for the notebook's __main__: its functions' __module__ is "__main__", as in
    # the notebook, which is how shared.checking.check_rules tells the learner's names from the course's.
    namespace = types.ModuleType("__main__").__dict__
    for cell in notebook.cells:
        name = CELL_NAME.format(notebook=Path(notebook.path).name, index=cell.index)
        source = without_magics(cell.source)
        try:
            tree = ast.parse(source, name)
        except SyntaxError as error:
            if cell.kind in ("setup", "solution"):
                raise NotebookProblem(f"cell {cell.index} of {notebook.name} is not valid Python: "
                                      f"{error.msg} (line {error.lineno})") from None
            continue  # the learner's own scratch cell: it makes no function that could run here
        runs = what_runs(cell, tree)
        if runs is None:
            continue
        linecache.cache[name] = (len(source), None, source.splitlines(keepends=True), name)
        if cell.kind in ("setup", "solution"):
            try:
                # The learner's own notebook, on their own machine: its cells run as in the notebook.
                exec(compile(runs, name, "exec"), namespace)  # noqa: S102
            except Exception as error:  # noqa: BLE001 - any error of the learner's cell is named, with its cell
                raise NotebookProblem(f"cell {cell.index} of {notebook.name} raised {type(error).__name__}: "
                                      f"{error}") from None
            continue
        for statement in runs.body:  # one by one: a definition that needs the cell's other lines is left out
            try:
                exec(compile(ast.Module(body=[statement], type_ignores=[]), name, "exec"), namespace)  # noqa: S102
            except Exception:  # noqa: BLE001, S112 - a demo's definition that needs what the demo computes
                continue
    return namespace


def function(notebook: Notebook, lesson: Lesson) -> Callable[..., Any]:
    """The learner's function of ``lesson`` from ``notebook`` (what a worker calls)."""
    found = notebook.namespace().get(lesson.function)
    if not callable(found):
        raise NotebookProblem(f"{notebook.name} defines no function {lesson.function} "
                              f"(lesson {lesson.code} · {lesson.title})")
    return found


def called_functions(found: Callable[..., Any]) -> list[types.FunctionType]:
    """``found`` and every function of its notebook that it calls, directly or not, in the order met: the
    notebook's own functions (made by one of its cells), not the course's."""
    seen: dict[int, types.FunctionType] = {}
    todo = [found]
    while todo:
        item = todo.pop(0)
        if not isinstance(item, types.FunctionType) or id(item) in seen or not _made_by_a_cell(item):
            continue
        seen[id(item)] = item
        todo += [item.__globals__[name] for name in _global_names(item.__code__) if name in item.__globals__]
    return list(seen.values())


def _made_by_a_cell(item: types.FunctionType) -> bool:
    return item.__code__.co_filename.startswith("<") and ", cell " in item.__code__.co_filename


def _global_names(code: types.CodeType) -> list[str]:
    """The names a code object (and the functions and comprehensions inside it) may look up as globals."""
    names = list(code.co_names)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names += _global_names(constant)
    return names


def stub_raise_line(item: types.FunctionType) -> int | None:
    """The line of the first ``raise NotImplementedError`` in the function's own code (the untouched
    stub of a lesson, or a step of its skeleton), or None."""
    lines = linecache.getlines(item.__code__.co_filename)
    try:
        tree = ast.parse("".join(lines))
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == item.__name__ \
                and node.lineno == item.__code__.co_firstlineno:
            for inner in ast.walk(node):
                if isinstance(inner, ast.Raise) and inner.exc is not None:
                    raised = inner.exc.func if isinstance(inner.exc, ast.Call) else inner.exc
                    if isinstance(raised, ast.Name) and raised.id == "NotImplementedError":
                        return inner.lineno
    return None


def _cell_of(item: types.FunctionType) -> str:
    """", of lesson 035's Implementation cell," for a function made by a lesson's cell (as 035's
    ``reduce_scatter_mean``, a step of that lesson), else ""."""
    for name, value in item.__globals__.items():
        if name in _FUNCTIONS and isinstance(value, types.FunctionType) \
                and value.__code__.co_filename == item.__code__.co_filename:
            return f" (of lesson {_FUNCTIONS[name].code}'s Implementation cell)"
    return ""


def problems(notebook: Notebook, lesson: Lesson) -> list[str]:
    """What stops the learner's ``lesson`` from running on real processes, in words (empty: nothing).

    Runs the notebook's function-making cells, then checks the function and every function of the notebook that it
    calls: the rules for graded code (:func:`shared.checking.check_rules`, the visible test cells'
    message), and that no lesson among them is a stub still.
    """
    from shared.checking import CheckFailure, check_rules

    try:
        found = function(notebook, lesson)
    except NotebookProblem as problem:
        return [str(problem)]
    where = notebook.name
    found_problems = []
    for item in called_functions(found):
        called = "" if item is found else f", which your {lesson.function} calls"
        try:
            # graded_with=(): this run calls the learner's own earlier functions, not the helper's versions
            check_rules(item, graded_with=())
        except CheckFailure as failure:
            # The message names the cell that breaks the rules; a check of a function may also read the cells
            # of the functions it calls, so the same message is said once.
            said = f"{where}: {failure}"
            if said not in found_problems:
                found_problems.append(said)
            continue
        line = stub_raise_line(item)
        if line is not None:
            owner = _FUNCTIONS.get(item.__name__)
            which = f"lesson {owner.code} · {owner.title}" if owner else f"your {item.__name__}{_cell_of(item)}"
            found_problems.append(f"{which} is not answered yet in {where}{called}: {item.__name__} still raises "
                                  f"NotImplementedError (line {line} of its cell: replace the stub's "
                                  f"`raise NotImplementedError(...)` lines with your code)")
    return found_problems
