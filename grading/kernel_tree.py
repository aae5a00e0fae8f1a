"""What a grading kernel can import: a tree of its own, built for the part it grades.

The sandbox shows the kernel no file of the course but this tree (and the
notebook): ``shared/`` and ``grading/`` as the kernel needs them, nothing else.

- ``shared/``: the helper library the notebooks compute with (:data:`LIBRARY`), each
  function that answers one of the graded part's lessons redacted
  (:mod:`grading.redact`: same name, signature and docstring, a body that refuses);
  the modules only the visible tests use (:data:`VISIBLE_ONLY`: the checking
  toolkit, the mistake catalogue, the progress panel, the plots) as *inert*
  stand-ins: their names exist, so the notebook's set-up cell imports them, but
  they compute nothing (visible tests and demonstrations do not run while
  grading).  The torch extra and the rules checker are not there at all.
- ``matplotlib/``: a stand-in for matplotlib itself.  Only the course's set-up
  cells import it and only its demonstrations draw, and neither graded code
  (the rules allow no matplotlib) nor grading needs a plot: importing the real
  one would cost every graded notebook about a second.
- ``grading/``: the kernel's side of grading (:data:`KERNEL_SIDE`: the harness, the
  wire, the meter, and the names they share with the grader, :mod:`grading.protocol`),
  nothing of the judge.

So no working answer of the part's lessons is in the kernel's reach: not in the
library (redacted), not in the mistake catalogue (absent), not in the reference
(never there).  ``tests/test_judge.py`` checks that every module a notebook imports
is in the tree, and ``tests/test_delegation.py`` that nothing in it answers a lesson.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import py_compile
import shutil
from pathlib import Path

from . import redact

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT / "shared"

#: The helper library: what notebooks and graded code compute with (copied, answers redacted).
LIBRARY = ("__init__", "lessons", "course_table", "lesson_minutes", "answers", "mlp", "data", "cluster", "dtypes", "memory",
           "lesson_blocks", "training", "where")
#: What only the visible tests and the learner's own view use: inert stand-ins while grading.
VISIBLE_ONLY = ("checking", "mistakes", "progress", "notebook", "plotting")
#: matplotlib while a notebook is graded: its modules the set-up cells import, and nothing in them.
MATPLOTLIB_STAND_IN = ("__init__", "pyplot")
MATPLOTLIB_SOURCE = '''"""matplotlib while a notebook is graded: nothing is drawn.

The course's plots are demonstrations, which grading does not run, and graded code may not
use matplotlib (the rules for graded code); the set-up cell's import still works.
"""


class NotWhileGrading(AttributeError):
    """matplotlib was used while a notebook is graded."""


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise NotWhileGrading(f"matplotlib: {name} is not available while a notebook is graded (nothing is drawn)")
'''
#: Functions of the stand-ins that the notebook's own cells call outside the visible tests:
#: they do nothing while grading (any other function refuses, saying why).
QUIET = {"notebook": ("setup_notebook",), "progress": ("show_progress",)}
#: The kernel's side of grading (the harness reads the protocol's names).
KERNEL_SIDE = ("harness", "wire", "meter", "protocol")


def _stand_in(module_name: str) -> str:
    """The source of an inert stand-in for ``shared.<module_name>``: every public name, no computation."""
    module = importlib.import_module(f"shared.{module_name}")
    lines = [f'"""shared.{module_name} while a notebook is graded: names only (the visible tests do not run)."""',
             "", "",
             "class NotWhileGrading(RuntimeError):",
             '    """A visible-test tool was called while a notebook is graded."""', "", ""]
    quiet = QUIET.get(module_name.split(".")[0], ())
    for name, value in sorted(vars(module).items()):
        if name.startswith("_") or inspect.ismodule(value):
            continue
        if callable(value) and not str(getattr(value, "__module__", "")).startswith("shared."):
            continue  # what the module imported for itself (typing, numpy): not its own names
        if inspect.isclass(value) and issubclass(value, BaseException):
            lines += [f"class {name}(AssertionError if {issubclass(value, AssertionError)} else Exception):",
                      "    pass", "", ""]
        elif inspect.isclass(value) or callable(value):
            body = ("    return None" if name in quiet else
                    f"    raise NotWhileGrading('shared.{module_name}.{name} is for the visible tests; it does "
                    f"nothing while a notebook is graded')")
            lines += [f"def {name}(*args, **kwargs):", body, "", ""]
        elif _plain_data(value):  # constants (a palette, a style): the set-up cells import some
            lines += [f"{name} = {value!r}", ""]
    return "\n".join(lines) + "\n"


def _plain_data(value) -> bool:
    """Whether ``value`` is a constant its own repr writes back (numbers, strings, and dicts, lists and
    tuples of them)."""
    try:
        return ast.literal_eval(repr(value)) == value
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False


def build(slug: str, folder: Path) -> Path:
    """Write the kernel's tree for grading part ``slug`` into ``folder`` (made); return it."""
    shared, grading = folder / "shared", folder / "grading"
    shared.mkdir(parents=True)
    grading.mkdir()
    redacted = redact.redacted_sources(slug)
    for name in LIBRARY:
        source = redacted.get(f"{name}.py") or (SHARED / f"{name}.py").read_text()
        (shared / f"{name}.py").write_text(source)
    for name in VISIBLE_ONLY:
        (shared / f"{name}.py").write_text(_stand_in(name))
    # a regular package (not a namespace one), so no other folder on the kernel's path adds modules to it
    (grading / "__init__.py").write_text('"""The kernel\'s side of grading (the harness, the wire, the meter, the '
                                         'protocol)."""\n')
    for name in KERNEL_SIDE:
        shutil.copy(ROOT / "grading" / f"{name}.py", grading / f"{name}.py")
    plots = folder / "matplotlib"
    plots.mkdir()
    for name in MATPLOTLIB_STAND_IN:
        (plots / f"{name}.py").write_text(MATPLOTLIB_SOURCE)
    _compile(folder)
    for path in [folder, *folder.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return folder


def _compile(folder: Path) -> None:
    """Byte-compile the tree once, here: the kernel may not write (``PYTHONDONTWRITEBYTECODE``, a
    read-only mount), so without these files every grading kernel, and every lesson's child, would
    compile each module it imports from its source again. (A compiled file is checked against its
    source's time and size, which the read-only mount keeps.)"""
    for path in sorted(folder.rglob("*.py")):
        py_compile.compile(str(path), doraise=True)
