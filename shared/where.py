"""Where a learner's function failed, in the learner's words: their cell and line, never a course file.

A learner's function that raises is reported in two places: by the visible tests
(``shared.checking.CheckFailure``) and by the grader (``grading.harness`` sends these
lines, and the judge shows them under "where:" in the verdict, which the feedback page
and the formgrader show).  Both describe the traceback here, so both say the same:

- a frame of the learner's own code, a notebook cell, is named as the learner sees it:
  the lesson whose function the cell defines, the line within the cell and its text
  ("lesson 035's cell, line 97, in zero_optimizer_step: mean_grads = ...");
- a frame outside it gets a short name only: "in the course's helper
  local_shard_adam_update", "inside NumPy", "inside Python's copy module"; a run of
  frames of one kind is one line, named after the function the learner's line called.

No file path is ever part of it.  The grader's paths are those of the sandbox and of the
course's own modules: they say nothing to a learner, and they are not the learner's to see.

How a cell is recognised: IPython's kernel (ipykernel) compiles each cell under the file
name ``<tmp>/ipykernel_<pid>/<hash of the cell's code>.py`` (a terminal IPython under
``<ipython-input-N-...>``), the same in the learner's kernel and in the grading kernel,
and keeps the cell's lines in ``linecache``, where this module reads them.

This module is in the grading kernel's tree (``grading.kernel_tree.LIBRARY``), so it
imports nothing of the course: which function is which lesson's is passed in.
"""

from __future__ import annotations

import linecache
import re
from collections.abc import Mapping
from types import FrameType, TracebackType

#: The module name of the building blocks the grader reveals for a composite lesson
#: (``grading.harness``): the course's versions of earlier lessons' functions.
BUILDING_BLOCKS_MODULE = "mct_building_blocks"

#: A notebook cell's file name, as ipykernel or a terminal IPython compiles it.
_CELL_FILE = re.compile(r"(^|[/\\])ipykernel_\d+[/\\]\d+\.py$|^<ipython-input-")
#: A function a cell defines at its top level.
_TOP_LEVEL_DEF = re.compile(r"^(?:async\s+)?def\s+([A-Za-z_]\w*)\s*\(", re.MULTILINE)

MAX_LINES = 6      # lines of a description: a deep recursion keeps its first and last
LINE_TEXT = 120    # characters of a line's text


def is_cell(filename: str) -> bool:
    """Whether ``filename`` is that of a notebook cell (see the module docstring)."""
    return bool(_CELL_FILE.search(filename))


def describe_error(error: BaseException | None, lesson_of: Mapping[str, str]) -> list[str]:
    """Where ``error`` happened, one line per place, outermost first (empty when it has no traceback).

    ``lesson_of``: lesson code by function name (``{"zero_optimizer_step": "035"}``), to name a
    cell by the lesson whose function it defines.  The machinery that called the learner's
    function (the grader, the visible tests' toolkit) is left out."""
    if error is None or error.__traceback__ is None:
        return []
    frames = _frames(error.__traceback__)
    while frames and _kind(frames[0][0]) in ("grader", "checks"):
        frames.pop(0)  # the caller of the learner's function, not a place in it
    return _shortened(_described(frames, lesson_of))


def _frames(traceback: TracebackType | None) -> list[tuple[FrameType, int]]:
    found = []
    while traceback is not None:
        found.append((traceback.tb_frame, traceback.tb_lineno))
        traceback = traceback.tb_next
    return found


def _module(frame: FrameType) -> str:
    name = frame.f_globals.get("__name__")
    return name if type(name) is str else ""


def _kind(frame: FrameType) -> str:
    """What a frame is: the learner's "cell", the "course"'s helpers, "numpy", "python" (its own
    modules), or the machinery that called the learner's function ("grader", "checks")."""
    if is_cell(frame.f_code.co_filename):
        return "cell"
    module = _module(frame)
    if module == "shared.checking":
        return "checks"
    if module.split(".")[0] == "shared" or module == BUILDING_BLOCKS_MODULE:
        return "course"
    if module.split(".")[0] == "numpy":
        return "numpy"
    if module.split(".")[0] == "grading":
        return "grader"
    return "python"


def _described(frames: list[tuple[FrameType, int]], lesson_of: Mapping[str, str]) -> list[str]:
    lines: list[str] = []
    run: list[FrameType] = []  # consecutive frames outside the learner's cells, of one kind
    for frame, line_number in frames + [(None, 0)]:  # a last None closes the last run
        kind = _kind(frame) if frame is not None else None
        if run and kind != _kind(run[0]):
            lines.append(_outside(run))
            run = []
        if kind == "cell":
            lines.append(_in_cell(frame, line_number, lesson_of))
        elif kind not in (None, "grader", "checks"):
            run.append(frame)
    return lines


def _in_cell(frame: FrameType, line_number: int, lesson_of: Mapping[str, str]) -> str:
    filename = frame.f_code.co_filename
    text = linecache.getline(filename, line_number).strip()
    if len(text) > LINE_TEXT:
        text = text[:LINE_TEXT - 3] + "..."
    function = frame.f_code.co_name
    inside = f", in {function}" if not function.startswith("<") else ""
    return f"{_cell_name(filename, lesson_of)}, line {line_number}{inside}: {text}"


def _cell_name(filename: str, lesson_of: Mapping[str, str]) -> str:
    """The cell as the learner knows it: by the lesson whose function it defines, else by its own."""
    defined = _TOP_LEVEL_DEF.findall("".join(linecache.getlines(filename)))
    for function in defined:
        if function in lesson_of:
            return f"lesson {lesson_of[function]}'s cell"
    return f"your cell that defines {defined[0]}" if defined else "one of your cells"


def _outside(run: list[FrameType]) -> str:
    kind = _kind(run[0])
    if kind == "course":
        return f"in the course's helper {_helper_called(run)}"
    if kind == "numpy":
        return "inside NumPy"
    return f"inside Python's {_module(run[0]).split('.')[0] or 'own'} module"


def _helper_called(run: list[FrameType]) -> str:
    """The course's function the learner's code called: the first public one of the run (the lock
    of ``shared.answers`` wraps a helper in a function of its own, named after the helper here)."""
    names = [_helper_name(frame) for frame in run]
    return next((name for name in names if not name.startswith("_")), names[0])


def _helper_name(frame: FrameType) -> str:
    if _module(frame) == "shared.answers":  # the lock's wrapper: the helper it guards
        name = getattr(frame.f_locals.get("function"), "__name__", None)
        if type(name) is str:
            return name
    return frame.f_code.co_name


def _shortened(lines: list[str]) -> list[str]:
    """At most MAX_LINES: the first (the learner's function) and the last, nearest the error."""
    if len(lines) <= MAX_LINES:
        return lines
    left_out = len(lines) - MAX_LINES + 1
    return [lines[0], f"... {left_out} more calls ...", *lines[-(MAX_LINES - 2):]]
