"""A learner's own notebooks graded as the instructor grades them, in a private nbgrader course.

``make grade`` (tools/grade.py) and the course's validator (:mod:`grading.validate`: ``nbgrader
validate`` and JupyterLab's Validate button) both grade this way: the part's source notebook is
released into a private course directory, the learner's notebook is *copied* in as the
submission of a student called ``me`` (the notebook itself is never changed), and nbgrader
autogrades it with the course's own configuration (``autograde/nbgrader_config.py``): the
notebook runs in the sandboxed kernel, and the judge, in nbgrader's process, compares its
answers with the reference solutions on freshly drawn hidden cases.  Each lesson's verdict is
then read back from the autograded notebook, where the judge put it in the lesson's test cell.

nbgrader runs in a child process (its applications are singletons and its configuration
changes the process's environment), started by :mod:`grading.nbgrader_cli`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat

from grading import nbgrader_cli
from grading.course import landed_parts, source_notebook, write_course_config
from grading.protocol import COURSE_DIR_ENV, SANDBOX_ENV, printable
from grading.sandbox import bwrap_path, preflight, sandbox_wanted
from shared.lessons import lesson_of_grade_id

BIN = Path(sys.executable).parent
STUDENT = "me"


def unsandboxed_reason() -> str | None:
    """Why a learner's notebook would run WITHOUT the grading sandbox here, or None when it runs in it.

    A learner's own grade goes on without it (their own notebook on their own machine), and says so."""
    if not sandbox_wanted():
        return f"{SANDBOX_ENV}=off"
    if bwrap_path() is None:
        return "bubblewrap is not installed"
    problem = preflight()
    return f"the sandbox cannot run here: {problem}" if problem else None


def grading_env(course: Path, unsandboxed: str | None) -> dict[str, str]:
    """The environment of the nbgrader process that grades in ``course``.

    Nothing of the caller's Jupyter or IPython set-up (a JupyterLab server's own variables, say) reaches it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "IPYTHON", "PYTHONPATH"))}
    env.update({"PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}", COURSE_DIR_ENV: str(course)})
    if unsandboxed:
        env[SANDBOX_ENV] = "off"
    return env


def nbgrader(course: Path, *each: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    """The nbgrader commands ``each`` (an argv each), one after the other in one process (it takes seconds to start)."""
    return subprocess.run(nbgrader_cli.commands(*each), cwd=course, env=env, capture_output=True, text=True)


def prepare(course: Path, parts: list[str]) -> None:
    """An empty private course at ``course`` holding the source notebooks of ``parts`` and the course's configuration."""
    if course.exists():
        shutil.rmtree(course)
    for slug in parts:
        target = course / "source" / slug
        target.mkdir(parents=True)
        shutil.copy(source_notebook(slug), target)
    write_course_config(course)


def submit(course: Path, slug: str, notebook: Path) -> None:
    """A copy of ``notebook`` as the learner's submission of part ``slug``."""
    submitted = course / "submitted" / STUDENT / slug
    submitted.mkdir(parents=True)
    shutil.copy(notebook, submitted / f"{slug}.ipynb")


def release(slug: str) -> list[str]:
    """The nbgrader command that releases part ``slug`` in the private course."""
    return ["generate_assignment", slug, "--force"]


def autograde(slug: str) -> list[str]:
    """The nbgrader command that grades the learner's submission of part ``slug``."""
    return ["autograde", slug, "--student", STUDENT, "--force"]


def feedback(slug: str) -> list[str]:
    """The nbgrader command that writes the feedback page of the learner's graded part ``slug`` (an error in
    nbgrader's log, and nothing else, where the part could not be graded)."""
    return ["generate_feedback", slug, "--student", STUDENT, "--force"]


def released_notebook(course: Path, slug: str) -> Path:
    """Where nbgrader writes the released (student) copy of part ``slug``."""
    return course / "release" / slug / f"{slug}.ipynb"


def graded_notebook(course: Path, slug: str) -> Path:
    """Where nbgrader writes the graded copy of part ``slug`` (absent when it could not grade it)."""
    return course / "autograded" / STUDENT / slug / f"{slug}.ipynb"


def verdicts(graded: Path) -> list[tuple[str, bool, str]]:
    """(lesson code, passed, message) of every test cell of an autograded notebook (each message as
    :func:`grading.protocol.printable` shows it: a terminal prints it)."""
    results = []
    for cell in nbformat.read(graded, as_version=4).cells:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")
        lesson = lesson_of_grade_id(grade_id)
        if lesson is None or grade_id != lesson.grade_id:
            continue
        outputs = cell.get("outputs", [])
        error = next((o for o in outputs if o.get("output_type") == "error"), None)
        if error is None:
            text = "".join(o.get("text", "") for o in outputs).strip()
            results.append((lesson.code, True, printable(text)))
        else:
            results.append((lesson.code, False, printable(error.get("evalue", ""))))
    return results


def failure_reason(log: str, slug: str) -> str:
    """The telling line of why nbgrader could not grade the learner's submission of part ``slug``."""
    return nbgrader_cli.failure_reason(log, STUDENT, slug)


def part_of_notebook(path: Path) -> str:
    """The slug of the course part that the notebook at ``path`` is a copy of, from its lessons' test cells.

    Raises ValueError, saying why, for a file that is not a notebook of one of the course's parts."""
    try:
        text = path.read_text(encoding="utf-8")
        notebook = json.loads(text)
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"the notebook could not be read: {error}") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"the file is not a notebook: it is not valid JSON ({error})") from None
    if isinstance(notebook, dict) and isinstance(notebook.get("nbformat"), int) and notebook["nbformat"] < 4:
        try:  # an older format (cells in "worksheets"), which the grader converts as it reads it
            notebook = nbformat.reads(text, as_version=4)
        except Exception:  # nbformat says it is not a notebook after all: so is it said below
            pass
    cells = notebook.get("cells") if isinstance(notebook, dict) else None
    if not isinstance(cells, list):
        raise ValueError("the file is not a notebook: it has no list of cells")
    parts = set()
    for cell in cells:
        metadata = cell.get("metadata") if isinstance(cell, dict) else None
        nbgrader_meta = metadata.get("nbgrader") if isinstance(metadata, dict) else None
        grade_id = nbgrader_meta.get("grade_id") if isinstance(nbgrader_meta, dict) else None
        lesson = lesson_of_grade_id(grade_id) if isinstance(grade_id, str) else None
        if lesson is not None:
            parts.add(lesson.part.slug)
    if len(parts) != 1:
        found = "no lesson's cells" if not parts else f"the lessons of several parts ({', '.join(sorted(parts))})"
        raise ValueError(f"this is not one of the course's notebooks: it holds {found}; the grader "
                         f"checks the notebooks of notebooks/ only")
    return parts.pop()


def saved_as_another_part(path: Path, slug: str) -> str | None:
    """Why the notebook at ``path``, which holds part ``slug``'s lessons, is named as another part's (an
    instructor grades a file by its name: ``01_mlp_core.ipynb`` as part 01, whatever it holds), or None."""
    named = next((part for part in landed_parts() if path.name == f"{part}.ipynb"), None)
    if named is None or named == slug:
        return None
    return (f"{path.name} holds the lessons of part {slug}, not of part {named}: handed in under this name it is "
            f"graded as part {named} and scores nothing there (save part {slug}'s work as {slug}.ipynb)")
