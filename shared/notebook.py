"""What a notebook's read-only set-up cell calls."""

from __future__ import annotations

import re

from .lessons import LESSONS
from .plotting import use_course_style
from .progress import record_failure

_TEST_CELL = re.compile(r'^lesson_passed\("(\d{3})"\)\s*$', re.MULTILINE)
_FUNCTIONS = {lesson.function: lesson for lesson in LESSONS}


def setup_notebook() -> None:
    """The course's plot style, and IPython hooks for the learner:

    - a test cell that fails records its lesson as failed (the progress panel
      turns ✓ into ✗ until the tests pass again);
    - a test cell run before its implementation cell says which cell to run,
      instead of a bare NameError;
    - a test cell of a lesson whose stub is untouched says the lesson is not
      started, instead of a NotImplementedError traceback.
    """
    use_course_style()
    try:
        from IPython import get_ipython
    except ImportError:  # running outside IPython
        return
    shell = get_ipython()
    if shell is None:
        return
    shell.events.register("post_run_cell", _record_failed_test_cell)
    shell.set_custom_exc((NameError, NotImplementedError), _explain)


def _record_failed_test_cell(result) -> None:
    if result.success:
        return
    match = _TEST_CELL.search(getattr(result.info, "raw_cell", "") or "")
    if match:
        record_failure(match.group(1))


def _explain(shell, etype, value, tb, tb_offset=None):
    """Show the error as the course's one-line explanation when there is one.

    It stays an error (the cell's output is still an ``error`` that nbgrader and
    nbclient see, with the exception's own name and value); only the traceback
    lines shown are replaced.
    """
    if issubclass(etype, NotImplementedError):
        message = _not_started(tb)
    else:
        message = _missing_function(value)
    if message is not None:
        try:
            value._render_traceback_ = lambda: [message]
        except AttributeError:  # an exception object that takes no attributes: the plain traceback
            pass
    return shell.showtraceback((etype, value, tb), tb_offset=tb_offset)


def _not_started(tb) -> str | None:
    """An untouched stub: which lesson is not started.  The innermost frame is the stub: in the lesson's
    function, or in a function of the same cell that the lesson's function called (lesson 035's
    ``reduce_scatter_mean``, its step 1)."""
    frames = []
    while tb is not None:
        frames.append(tb)
        tb = tb.tb_next
    if not frames:
        return None
    last, lesson = frames[-1], None
    for frame in reversed(frames):  # the innermost lesson function written in the stub's cell
        code = frame.tb_frame.f_code
        if code.co_filename == last.tb_frame.f_code.co_filename and code.co_name in _FUNCTIONS:
            lesson = _FUNCTIONS[code.co_name]
            break
    if lesson is None:
        return None
    where = f"the Implementation cell of lesson {lesson.code} · {lesson.title}"
    step, steps = _stub_step(last.tb_frame.f_code, last.tb_lineno)
    if steps > 1:  # a skeleton: one stub per step
        return (f"\x1b[0;33m{'Not started' if step == 1 else 'Not finished'}:\x1b[0m `{lesson.function}` still "
                f"raises NotImplementedError in step {step} of {steps}. Replace that step's "
                f"`raise NotImplementedError(...)` line (and those of the later steps) in {where} with your code, "
                f"run that cell, then this one.")
    return (f"\x1b[0;33mNot started:\x1b[0m `{lesson.function}` still raises NotImplementedError. Replace that "
            f"line in {where} with your code, run that cell, then this one.")


_STEP_COMMENT = re.compile(r"^\s*# Step (\d+)\b")


def _stub_step(code, lineno: int) -> tuple[int, int]:
    """(the step whose stub raised, the number of steps) in a skeleton, a cell whose comments
    ``# Step 1 · ...``, ``# Step 2 · ...`` name its steps (IPython keeps each cell's source; a step may stand in
    a function of the cell that the lesson's function calls); (1, 1) for a cell without them, or whose source
    cannot be read."""
    import linecache
    steps = [(number, int(match.group(1))) for number, line in enumerate(linecache.getlines(code.co_filename), 1)
             if (match := _STEP_COMMENT.match(line))]
    above = [number for line, number in steps if line < lineno]
    if len(steps) < 2 or not above:
        return 1, 1
    return above[-1], max(number for _, number in steps)


def _missing_function(value) -> str | None:
    name = getattr(value, "name", None)
    lesson = _FUNCTIONS.get(name)
    if lesson is None:
        return None
    return (f"\x1b[0;31mNameError:\x1b[0m `{name}` is not defined yet: run the Implementation cell of lesson "
            f"{lesson.code} · {lesson.title} (the cell with `def {name}`) first, then this cell again.")
