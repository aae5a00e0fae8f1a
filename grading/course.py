"""Where the course's files are, which parts have landed, each part's declared hidden tests and reference
solutions, and an nbgrader course directory's configuration.

Every tool that needs one of these asks here: the judge (the parts' declarations, ``cases.py``, and
reference solutions, ``solutions/NN_slug.py``, each loaded once by path), the instructor's tools (the
parts to release and grade), ``make grade`` and the Validate button (:mod:`grading.private_course`),
the build (its scratch course), the mutation tool and the tests.  A part has *landed* when its folder
in ``autograde/parts/`` has a master; the tools that need a part's built files ask for the landed parts
whose files are built.

An nbgrader course directory other than ``autograde/`` gets an ``nbgrader_config.py`` that loads the
course's own configuration (``autograde/nbgrader_config.py``) and names the directory as the course's
root, in a marked block: the instructor's own settings, below the block, are kept when it is
written again.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from shared.lessons import Lesson, lesson as find_lesson, lessons_of

from .protocol import COURSE_DIR_ENV
from .spec import LessonSpec

ROOT = Path(__file__).resolve().parent.parent
PARTS_DIR = ROOT / "autograde" / "parts"
SOURCE_DIR = ROOT / "autograde" / "source"
SOLUTIONS_DIR = ROOT / "solutions"
#: The course's nbgrader settings: the grading kernel, the judge's preprocessors, the feedback page.
NBGRADER_CONFIG = ROOT / "autograde" / "nbgrader_config.py"


def source_notebook(slug: str) -> Path:
    """Part ``slug``'s nbgrader source notebook (``autograde/source/<slug>/<slug>.ipynb``, built)."""
    return SOURCE_DIR / slug / f"{slug}.ipynb"


def reference_module(slug: str) -> Path:
    """Part ``slug``'s reference solutions as a module (``solutions/<slug>.py``, built)."""
    return SOLUTIONS_DIR / f"{slug}.py"


def landed_parts(built: Callable[[str], Path] | None = None) -> list[str]:
    """Slugs of the parts that have landed (a folder in autograde/parts/ with a master), in order.

    ``built``: only those whose built file ``built(slug)`` exists (:func:`source_notebook` for the
    tools that release a part, :func:`reference_module` for those that grade against it)."""
    slugs = [p.parent.name for p in sorted(PARTS_DIR.glob("[0-9][0-9]_*/master.py"))]
    return slugs if built is None else [slug for slug in slugs if built(slug).is_file()]


# The block's first line is how a course directory's file is recognised when it is written again: the
# directories set up so far have it in these words, so they stay (though grading/course.py writes it now).
BEGIN_SETTINGS = "# BEGIN the course's settings (written by tools/instructor.py: keep your own below END)"
END_SETTINGS = "# END the course's settings"


def with_course_settings(text: str, course: Path) -> str:
    """``text`` (a course directory's nbgrader_config.py, or "") with the block that loads the course's
    configuration at its top, written anew; everything else in it is the instructor's and is kept.
    Settings below the block (a late penalty, an exchange folder) override the course's."""
    # The directory is named (MCT_COURSE_DIR, unless the instructor's tools named it already) before the course's
    # configuration loads, so that it knows which course directory it serves: the default course's own settings,
    # autograde/instructor_config.py, are for autograde/ only.  (A configuration loaded by load_subconfig starts
    # from an empty one: the environment is what it shares with this file.)
    block = (f"{BEGIN_SETTINGS}\n"
             f"c = get_config()  # noqa: F821\n"
             f"__import__('os').environ.setdefault({COURSE_DIR_ENV!r}, {str(course.resolve())!r})\n"
             f"load_subconfig({str(NBGRADER_CONFIG)!r})  # noqa: F821\n"
             f"c.CourseDirectory.root = {str(course.resolve())!r}\n"
             f"{END_SETTINGS}\n")
    if BEGIN_SETTINGS in text and END_SETTINGS in text:
        before, rest = text.split(BEGIN_SETTINGS, 1)
        text = before + rest.split(END_SETTINGS, 1)[1].lstrip("\n")
    elif text.startswith("c = get_config()  # noqa: F821\n# Written by tools/instructor.py"):
        text = ""  # the file an earlier version wrote: all of it the course's
    own = text.strip("\n")
    return block + (f"\n{own}\n" if own else "")


def write_course_config(course: Path) -> None:
    """Give the nbgrader course directory ``course`` the course's configuration (:func:`with_course_settings`),
    keeping the instructor's own settings; the file is left untouched when it already says so."""
    path = course / "nbgrader_config.py"
    text = path.read_text() if path.is_file() else ""
    config = with_course_settings(text, course)
    if config != text:
        path.write_text(config)


# --------------------------------------------------------------------------
# Declarations and reference solutions, loaded by path
# --------------------------------------------------------------------------

_modules: dict[Path, ModuleType] = {}


def _load(path: Path, name: str) -> ModuleType:
    if path not in _modules:
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing (run `make build`?)")
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _modules[path] = module
    return _modules[path]


def lesson_specs(slug: str) -> dict[str, LessonSpec]:
    """The declared hidden tests of a part, by lesson code."""
    module = _load(PARTS_DIR / slug / "cases.py", f"_mct_cases_{slug}")
    specs = {spec.code: spec for spec in module.LESSONS}
    expected = {lesson.code for lesson in lessons_of(slug)}
    if set(specs) != expected:
        raise ValueError(f"{slug}/cases.py declares lessons {sorted(specs)}, expected {sorted(expected)}")
    return specs


def lesson_spec(code: str) -> LessonSpec:
    """Lesson ``code``'s declared hidden tests (its part's ``cases.py``)."""
    return lesson_specs(find_lesson(code).part.slug)[code]


def reference_function(lesson: Lesson) -> Any:
    """The reference solution of ``lesson`` (from the built ``solutions/NN_slug.py``)."""
    module = _load(reference_module(lesson.part.slug), f"_mct_reference_{lesson.part.slug}")
    return getattr(module, lesson.function)
