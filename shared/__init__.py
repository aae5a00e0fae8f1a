"""The course's helper package: the library the notebooks import.

- :mod:`shared.lessons`   the 7 parts and 40 lessons (names, grade ids, XP)
- :mod:`shared.checking`  comparisons whose failures explain themselves
- :mod:`shared.mistakes`  each lesson's common mistakes, recognised by name
- :mod:`shared.answers`   which helper functions answer which lesson (locked while it is graded)
- :mod:`shared.lesson_blocks`  the helper's versions of lesson functions that later lessons build on
- :mod:`shared.progress`  XP, the progress panel, ``make progress``
- :mod:`shared.mlp`, :mod:`shared.data`  the MLP of any depth and synthetic data
- :mod:`shared.memory`    peak bytes measured with tracemalloc
- :mod:`shared.plotting`  the course's plots
"""

from .checking import CheckFailure, Mistake, check, check_dtype, check_equal, check_shape
from .mistakes import mistakes_of
from .progress import lesson_passed, show_progress

__all__ = ["CheckFailure", "Mistake", "check", "check_dtype", "check_equal", "check_shape",
           "mistakes_of", "lesson_passed", "show_progress"]
