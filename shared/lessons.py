"""The course's spine: its parts and lessons, one graded function each.

Everything that needs to know which lessons exist (progress, the build, the
structural tests, grading exports) reads this table: the lesson numbers, function
names and grade ids below.  The table itself is ``shared/course_table.py``, which
``make build`` writes from the masters (``tools/course_table.py``: a lesson is its
heading in its part's master), and each lesson's estimated minutes come from
``shared/lesson_minutes.py``, written the same way (the model is :mod:`shared.clock`).
"""

from __future__ import annotations

from dataclasses import dataclass

from .course_table import PARTS as _TABLE
from .course_table import POINTS_PER_LESSON
from .lesson_minutes import MINUTES as _MINUTES

_ACRONYMS = {"mlp": "MLP", "mse": "MSE", "relu": "ReLU", "adam": "Adam", "zero": "ZeRO"}


@dataclass(frozen=True)
class Part:
    number: int
    slug: str  # e.g. "01_mlp_core": notebook stem, master stem, nbgrader assignment
    title: str


@dataclass(frozen=True)
class Lesson:
    number: int  # 1, 2, ... through the course
    function: str  # the graded function, e.g. "linear_forward"
    part: Part

    @property
    def code(self) -> str:
        """Three-digit lesson number, e.g. ``"003"``."""
        return f"{self.number:03d}"

    @property
    def title(self) -> str:
        """Human title derived from the function name: ``linear_forward`` -> ``Linear forward``,
        ``init_mlp_params`` -> ``Init MLP params`` (acronyms keep their capitals)."""
        words = [_ACRONYMS.get(word, word) for word in self.function.split("_")]
        return " ".join([words[0][0].upper() + words[0][1:]] + words[1:])

    @property
    def heading(self) -> str:
        """The markdown heading that opens the lesson: ``## 003 · Linear forward``."""
        return f"## {self.code} · {self.title}"

    @property
    def grade_id(self) -> str:
        """nbgrader grade id of the lesson's test cell: ``lesson_003_linear_forward``."""
        return f"lesson_{self.code}_{self.function}"

    @property
    def solution_grade_id(self) -> str:
        """nbgrader grade id of the lesson's solution cell: ``solution_003_linear_forward``."""
        return f"solution_{self.code}_{self.function}"

    @property
    def points(self) -> int:
        return POINTS_PER_LESSON

    @property
    def minutes(self) -> int:
        """Estimated minutes to work through the lesson, a multiple of 5 (see :mod:`shared.clock`)."""
        return _MINUTES[self.code]


PARTS = tuple(Part(number, slug, title) for number, slug, title, _ in _TABLE)


def _build_lessons() -> tuple[Lesson, ...]:
    """The lessons in the table's order, numbered 1, 2, ... through the parts."""
    functions = [(part, function) for part, (*_, names) in zip(PARTS, _TABLE) for function in names]
    return tuple(Lesson(number, function, part) for number, (part, function) in enumerate(functions, 1))


LESSONS = _build_lessons()
TOTAL_POINTS = POINTS_PER_LESSON * len(LESSONS)


def part(key: int | str) -> Part:
    """Look a part up by number (1, 2, ...) or slug ("01_mlp_core")."""
    for p in PARTS:
        if key in (p.number, p.slug):
            return p
    raise KeyError(f"no part {key!r}; parts are {[p.slug for p in PARTS]}")


def lessons_of(key: int | str) -> tuple[Lesson, ...]:
    """The lessons of one part, in order."""
    p = part(key)
    return tuple(lesson for lesson in LESSONS if lesson.part == p)


def lesson(key: int | str) -> Lesson:
    """Look a lesson up by number (3 or "003"), function name or grade id."""
    for item in LESSONS:
        if key in (item.number, item.code, item.function, item.grade_id):
            return item
    raise KeyError(f"no lesson {key!r}")


def lesson_of_grade_id(grade_id: str) -> Lesson | None:
    """The lesson whose test or solution cell has this nbgrader grade id (None for other cells)."""
    for item in LESSONS:
        if grade_id in (item.grade_id, item.solution_grade_id):
            return item
    return None


def minutes_left(passed: set[str], lessons: tuple[Lesson, ...] = LESSONS) -> int:
    """The estimated minutes of the lessons (of ``lessons``) whose codes are not in ``passed``."""
    return sum(item.minutes for item in lessons if item.code not in passed)
