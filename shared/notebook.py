"""What a notebook's read-only set-up cell calls."""

from __future__ import annotations

import re

from .lessons import LESSONS
from .plotting import use_course_style
from .progress import record_failure

_TEST_CELL = re.compile(r'^lesson_passed\("(\d{3})"\)\s*$', re.MULTILINE)
_FUNCTIONS = {lesson.function: lesson for lesson in LESSONS}


def setup_notebook() -> None:
    """The course's plot style, and two IPython hooks for the learner:

    - a test cell that fails records its lesson as failed (the progress panel
      turns ✓ into ✗ until the tests pass again);
    - a test cell run before its implementation cell says which cell to run,
      instead of a bare NameError.
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
    shell.set_custom_exc((NameError,), _explain_missing_function)


def _record_failed_test_cell(result) -> None:
    if result.success:
        return
    match = _TEST_CELL.search(getattr(result.info, "raw_cell", "") or "")
    if match:
        record_failure(match.group(1))


def _explain_missing_function(shell, etype, value, tb, tb_offset=None):
    name = getattr(value, "name", None)
    lesson = _FUNCTIONS.get(name)
    if lesson is None:
        return shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
    print(f"\x1b[0;31mNameError:\x1b[0m `{name}` is not defined yet: run the Implementation cell of lesson "
          f"{lesson.code} · {lesson.title} (the cell with `def {name}`) first, then this cell again.")
    return None
