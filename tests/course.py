"""Helpers shared by the tests: where things are, and how to make submissions.

A *submission* is the learner's release notebook with some solution cells
filled in: with the reference code, with a known mistake, with a cheat, or left
as the untouched stub.

The project's packages (``shared``, ``grading``) are importable as installed
(``pip install -e``) and from the root folder that pytest puts on ``sys.path``
for the root ``conftest.py``; the command-line tools in ``tools/`` are loaded by
path with :func:`tool`, so no test changes ``sys.path``.
"""

from __future__ import annotations

import atexit
import copy
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

import nbformat

from grading.course import landed_parts
from grading.protocol import COURSE_DIR_ENV
from shared.lessons import LESSONS, Lesson, lessons_of

ROOT = Path(__file__).resolve().parent.parent
SOLUTION_MARKERS = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[^\n]*\n?", re.MULTILINE)
BIN = Path(sys.executable).parent


def master_headings() -> dict[str, list[str]]:
    """Each part's lesson codes as its master's text writes them (``# ## 003 · ...``), by slug: read here
    as plain text, apart from the build's reading of the masters (tools/course_table.py)."""
    return {master.parent.name: re.findall(r"^# ## (\d{3}) · ", master.read_text(), re.MULTILINE)
            for master in sorted((ROOT / "autograde" / "parts").glob("[0-9][0-9]_*/master.py"))}


def tool(name: str) -> ModuleType:
    """The module ``tools/<name>.py`` (loaded once by path: tools/ is not a package)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # before running it: dataclasses look their module up
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    return sys.modules[name]


def built_lessons() -> list[Lesson]:
    return [lesson for slug in landed_parts() for lesson in lessons_of(slug)]


def tagged(lesson: Lesson, *values):
    """A pytest parameter carrying the lesson's and its part's markers (``-m lesson_007``)."""
    import pytest
    return pytest.param(*(values or (lesson,)), id=lesson.grade_id,
                        marks=[getattr(pytest.mark, f"lesson_{lesson.code}"),
                               getattr(pytest.mark, f"part_{lesson.part.number}")])


def tagged_lessons() -> list:
    """Every lesson of the landed parts as a pytest parameter with its markers: the ``lesson`` of a test
    run once per lesson."""
    return [tagged(lesson) for lesson in built_lessons()]


def source_path(slug: str) -> Path:
    return ROOT / "autograde" / "source" / slug / f"{slug}.ipynb"


def student_path(slug: str) -> Path:
    """The learner's copy as generated: the working copy, or the committed version when a learner
    has worked in it (`make test` must pass in a clone where a learner has worked)."""
    working = ROOT / "notebooks" / f"{slug}.ipynb"
    if tool("build").holds_learner_work(working):
        return committed_student_notebook(slug)
    return working


def committed_student_notebook(slug: str) -> Path:
    """notebooks/<slug>.ipynb as the last commit holds it, written to a scratch file."""
    import tempfile
    text = tool("build").committed_text(Path("notebooks") / f"{slug}.ipynb")
    if text is None:
        return ROOT / "notebooks" / f"{slug}.ipynb"
    target = Path(tempfile.gettempdir()) / f"mct-committed-{os.getpid()}" / f"{slug}.ipynb"
    if not target.parent.is_dir():
        target.parent.mkdir()
        atexit.register(shutil.rmtree, target.parent, True)  # this process's scratch copies go with it
    if not target.exists() or target.read_text() != text:
        target.write_text(text)
    return target


def solved_path(slug: str) -> Path:
    return ROOT / "solutions" / f"{slug}.ipynb"


def read(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


def grade_id_of(cell) -> str | None:
    return cell.metadata.get("nbgrader", {}).get("grade_id")


def reference_solutions(slug: str) -> dict[str, str]:
    """{solution grade_id: the reference code of that cell, without markers}."""
    return {grade_id_of(cell): SOLUTION_MARKERS.sub("", cell.source)
            for cell in read(source_path(slug)).cells
            if cell.metadata.get("nbgrader", {}).get("solution")}


def solution_grade_id(lesson: Lesson) -> str:
    return f"solution_{lesson.code}_{lesson.function}"


def make_submission(slug: str, answers: Mapping[str, str] | None = None, *,
                    default: str = "stub") -> nbformat.NotebookNode:
    """The release notebook with solution cells replaced.

    ``answers`` maps a lesson's function name to the code of its solution cell;
    other lessons get the reference code (``default="reference"``) or stay as
    the untouched stub (``default="stub"``).
    """
    answers = dict(answers or {})
    reference = reference_solutions(slug)
    notebook = copy.deepcopy(read(student_path(slug)))
    for cell in notebook.cells:
        gid = grade_id_of(cell)
        if not (gid and cell.metadata["nbgrader"].get("solution")):
            continue
        function = gid.split("_", 2)[2]
        if function in answers:
            cell.source = answers.pop(function)
        elif default == "reference":
            cell.source = reference[gid]
    if answers:
        raise KeyError(f"no solution cell for {sorted(answers)}")
    return notebook


def scratch_cells(function: str) -> list[str]:
    """What a learner writes while working, around lesson function ``function`` (of a notebook whose set-up cell
    imports numpy as np, plt and show_progress): none of it is graded code, so none of it may cost a point."""
    return [f"help({function})", f"{function}?", f"{function}??", "%timeit -n 1 -r 1 sum(range(10))",
            "%%time\ntotal = sum(range(10))", "!ls", "plt.plot([1.0, 0.5, 0.25])\nplt.title('loss')\nplt.show()",
            "show_progress()", f"print({function})", "import os\nprint(sorted(os.listdir('.'))[:3])"]


def with_scratch_cells(notebook: nbformat.NotebookNode, function: str) -> nbformat.NotebookNode:
    """``notebook`` with :func:`scratch_cells` twice: right after the set-up cell (outside every lesson) and
    right after the solution cell of ``function`` (inside its lesson)."""
    setup = next(i for i, c in enumerate(notebook.cells) if grade_id_of(c) == "setup")
    solution = next(i for i, c in enumerate(notebook.cells) if grade_id_of(c) == f"solution_{part_lesson(function).code}_{function}")
    for index in (solution, setup):  # the later place first: inserting there leaves the earlier index as it was
        for offset, source in enumerate(scratch_cells(function)):
            notebook.cells.insert(index + 1 + offset, nbformat.v4.new_code_cell(source))
    return notebook


def reference_code(slug: str, function: str) -> str:
    return reference_solutions(slug)[f"solution_{part_lesson(function).code}_{function}"]


def with_import_inside(code: str, function: str, statement: str = "import os  # to look around") -> tuple[str, int]:
    """(``code`` with ``statement`` (one line or more) first in ``function``'s body, its first line's number): code
    that breaks the rules inside the function itself, which no leaving out of scratch lines can cure (an
    ``import os`` at the top of the cell is a scratch line, left out while grading)."""
    import ast
    definition = next(node for node in ast.walk(ast.parse(code))
                      if isinstance(node, ast.FunctionDef) and node.name == function)
    first = definition.body[0]
    lines = code.splitlines(keepends=True)
    lines[first.lineno - 1:first.lineno - 1] = [" " * first.col_offset + line + "\n" for line in statement.splitlines()]
    return "".join(lines), first.lineno


def part_lesson(function: str) -> Lesson:
    return next(lesson for lesson in LESSONS if lesson.function == function)


# --------------------------------------------------------------------------
# nbgrader in a scratch course directory
# --------------------------------------------------------------------------

def nbgrader_env(course: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env[COURSE_DIR_ENV] = str(course)
    env.update(extra)
    return env


def nbgrader(course: Path, *args: str, env: dict[str, str] | None = None,
             check: bool = True) -> subprocess.CompletedProcess:
    run = subprocess.run([str(BIN / "nbgrader"), *args], cwd=course,
                         env=env or nbgrader_env(course), capture_output=True, text=True)
    if check and run.returncode != 0:
        raise AssertionError(f"nbgrader {' '.join(args)} failed ({run.returncode}):\n"
                             f"{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
    return run


def submit(course: Path, student: str, slug: str, notebook: nbformat.NotebookNode | str) -> None:
    folder = course / "submitted" / student / slug
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{slug}.ipynb"
    if isinstance(notebook, str):
        target.write_text(notebook)
    else:
        nbformat.write(notebook, target)


# --------------------------------------------------------------------------
# A cheat: answers hard-coded for exactly the inputs the visible tests use
# --------------------------------------------------------------------------

def visible_test_answers(slug: str) -> dict[str, dict[str, object]]:
    """Run the part's visible tests with the reference solutions and record every call.

    Returns {function: {fingerprint of the call's arguments: the answer}}: all a
    cheater who reads the visible tests could hard-code.
    """
    import builtins
    import copy as copy_module
    import io
    from contextlib import redirect_stdout

    student = read(student_path(slug))
    reference = reference_solutions(slug)
    recorded: dict[str, dict[str, object]] = {}
    namespace: dict[str, object] = {"__name__": "__main__", "__builtins__": builtins}
    for cell in student.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade_id") == "setup":
            exec(cell.source, namespace)
            namespace["lesson_passed"] = lambda *_: None  # record answers, not progress
        elif meta.get("solution"):
            exec(reference[meta["grade_id"]], namespace)
            function = meta["grade_id"].split("_", 2)[2]
            namespace[function] = _recorder(namespace[function], recorded.setdefault(function, {}),
                                            copy_module.deepcopy)
        elif meta.get("grade"):
            with redirect_stdout(io.StringIO()):
                exec(cell.source, namespace)
    return recorded


FINGERPRINT_CODE = """
def _fingerprint(value):
    import numpy
    def canon(v):
        if isinstance(v, numpy.ndarray):  # cheap to make (it runs inside measured calls too)
            return ("array", v.dtype.str, v.shape, v.ravel()[:8].tolist(), repr(v.sum()) if v.size else "")
        if isinstance(v, dict):
            return ("dict", tuple((k, canon(v[k])) for k in v))
        if isinstance(v, (tuple, list)):
            return ("list" if isinstance(v, list) else "tuple", tuple(canon(x) for x in v))
        return ("value", repr(v))
    return repr(canon(value))
"""
_fingerprint_namespace: dict = {}
exec(FINGERPRINT_CODE, _fingerprint_namespace)


def call_fingerprint(args: tuple, kwargs: dict) -> str:
    """A fingerprint of a call's arguments from their values (dtype, shape, numbers), in plain code."""
    return _fingerprint_namespace["_fingerprint"]((args, sorted(kwargs.items())))


class RecordedError:
    """A call that raised: the cheat raises the same exception type with the same message."""

    def __init__(self, error: Exception):
        self.type, self.message = type(error), str(error)


def _recorder(function, store, deepcopy):
    def recording(*args, **kwargs):
        key = call_fingerprint(args, kwargs)
        try:
            result = function(*args, **kwargs)
        except Exception as error:
            store[key] = RecordedError(error)
            raise
        store[key] = deepcopy(result)
        return result
    recording.__name__ = function.__name__
    return recording


def literal(value: object) -> str:
    """Python source that rebuilds ``value`` (arrays, NumPy scalars, numbers, containers, configurations)."""
    import math
    import numpy as np
    if isinstance(value, np.ndarray):
        return f"np.array({literal(value.tolist())}, dtype={value.dtype.str!r}).reshape({value.shape!r})"
    if isinstance(value, np.generic):
        return f"np.{value.dtype.name}({literal(value.item())})"
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{literal(k)}: {literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(literal(v) for v in value) + "]"
    if isinstance(value, tuple):
        return "(" + "".join(f"{literal(v)}, " for v in value) + ")"
    if type(value).__name__ == "TrainingConfig":
        from dataclasses import fields
        return "TrainingConfig(" + ", ".join(f"{f.name}={literal(getattr(value, f.name))}" for f in fields(value)) + ")"
    return repr(value)


#: Longer answers are not hard-coded (init_mlp_params' visible statistics test draws megabytes): the cheat
#: then answers that call with a stale answer, and fails that one visible test.
HARD_CODED_LIMIT = 100_000


def too_long_to_hard_code(answers: dict[str, object]) -> bool:
    """Whether some of a function's recorded answers are longer than the cheat hard-codes."""
    return any(not isinstance(a, RecordedError) and len(literal(a)) > HARD_CODED_LIMIT for a in answers.values())


def hard_coded_answer(function: str, answers: dict[str, object]) -> str:
    """Solution-cell code, in plain code that keeps the rules for graded code, that returns the recorded
    answer for a seen call (by its arguments' values), else the first one (stale)."""
    entries = []
    for key, answer in answers.items():
        if isinstance(answer, RecordedError):
            entries.append(f"    {key!r}: ({answer.type.__name__}, {answer.message!r}),")
        elif len(text := literal(answer)) <= HARD_CODED_LIMIT:
            entries.append(f"    {key!r}: (None, {text}),")
    return (
        "import copy as _copy\nimport numpy as np\n"
        + FINGERPRINT_CODE +
        f"_ANSWERS_{function} = {{\n" + "\n".join(entries) + "\n}\n\n"
        f"def {function}(*args, **kwargs):\n"
        "    key = _fingerprint((args, sorted(kwargs.items())))\n"
        f"    raises, answer = _ANSWERS_{function}.get(key, next(iter(_ANSWERS_{function}.values())))\n"
        "    if raises is not None:\n"
        "        raise raises(answer)\n"
        "    return _copy.deepcopy(answer)\n")


def formgrader_page(notebook: nbformat.NotebookNode, slug: str | None = None, course: bool = True,
                    people: dict[str, str] | None = None) -> str:
    """An autograded notebook as nbgrader's formgrader shows it with the course's configuration: its exporter and its
    formgrade template (as nbgrader's FormgradeExtension sets them), with the course's template, filters and
    sanitizer (autograde/nbgrader_config.py); ``course=False``: nbgrader's own template and nbconvert's filters.
    ``people``: the student's id and names as the gradebook gives them (its resources)."""
    import nbgrader
    from nbconvert.exporters import HTMLExporter
    from traitlets.config import Config

    from grading import feedback_math
    slug = slug or landed_parts()[0]
    config = Config()
    config.HTMLExporter.template_name = "formgrade"
    formgrader = Path(nbgrader.__file__).parent / "server_extensions" / "formgrader"
    # (the course's template folder comes first, as in autograde/nbgrader_config.py; nbgrader's alone, as its
    # FormgradeExtension sets it, for nbgrader's own page: its MathJax loader, say)
    config.HTMLExporter.extra_template_basedirs = [*([str(feedback_math.TEMPLATES)] if course else []),
                                                   str(formgrader / "templates")]
    if course:
        config.HTMLExporter.filters = {"markdown2html": "grading.feedback_math.markdown2html",
                                       "plain_words": "grading.feedback_text.plain_words"}
        config.HTMLExporter.sanitize_html = True
        config.HTMLExporter.template_file = "course.html.j2"
        config.HTMLExporter.preprocessors = ["grading.preprocessors.escapepeople.EscapePeople"]
    resources = {"assignment_id": slug, "notebook_id": slug, "submission_id": "abc", "index": 0, "total": 1,
                 "base_url": "", "student": "s", "last_name": "L", "first_name": "F", "notebook_path": "/x.ipynb",
                 **(people or {})}
    page, _ = HTMLExporter(config=config).from_notebook_node(notebook, resources=resources)
    return page
