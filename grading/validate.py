"""The course's validator: ``nbgrader validate`` and JupyterLab's Validate button give ``make grade``'s verdicts.

nbgrader's own validator runs the learner's copy of a notebook, whose test cells hold only the
visible tests: it says "Success!" for a hard-coded answer that the hidden cases give 0, and
fails a composite lesson when the learner's own earlier function is broken, where the grader
judges it with the reference versions of the earlier functions.  The course's validator asks
the grader instead: the notebook is copied into a private course and graded exactly as
``make grade`` grades one part (:mod:`grading.private_course`), and the judge's verdicts are
reported in nbgrader's own result format, so that the Validate button shows them:

- ``{}`` ("Success! Your notebook passes all the tests.") only when every lesson of the part
  gets full marks from the grader;
- otherwise ``{"failed": [...]}``: each lesson that loses its points with the judge's message,
  then, in one entry, the lessons not answered yet (their function still raises
  ``NotImplementedError``), then anything the grader could not do (a notebook it could not
  read or grade), each pointing to ``make grade``.

It is wired in two ways, both from this module:

- ``nbgrader validate``: the course's ``nbgrader_config.py`` at the root of the course calls
  :func:`use_course_validator` (nbgrader reads that file from the current folder);
- the Validate button: ``make lab`` loads this module as a Jupyter server extension in place
  of nbgrader's ``validate_assignment`` (same two addresses, same answers), whose handler
  grades in a worker thread so that the server keeps serving the learner's kernels meanwhile.

The graded XP is recorded as ``make grade`` records it, and only for the learner's own
notebook (``notebooks/NN_slug.ipynb`` of this course): validating a solved notebook or a
copy elsewhere records nothing.
"""

from __future__ import annotations

import html
import json
import shutil
import sys
import tempfile
import textwrap
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from nbgrader.validator import Validator

from grading.course import ROOT
from grading.private_course import (autograde, failure_reason, graded_notebook, grading_env, nbgrader,
                                    part_of_notebook, prepare, saved_as_another_part,
                                    release, submit, unsandboxed_reason, verdicts)
from shared.lessons import lesson as find_lesson, lessons_of
from shared.progress import record_graded

#: How the judge's verdict on a lesson whose function still raises NotImplementedError begins
#: (grading.judge.judge_lesson): such a lesson is "not answered yet", not a wrong answer.
NOT_STARTED = "not started:"
BUTTON_COLUMNS = 100  # characters of a line in the Validate button's dialog
MAKE_GRADE = "`make grade PART={number}` grades it the same way, prints why, and writes the feedback page"


# --------------------------------------------------------------------------
# Grading one notebook
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class LessonResult:
    """One lesson's verdict from the grader."""
    code: str
    passed: bool
    message: str

    @property
    def answered(self) -> bool:
        return self.passed or not self.message.startswith(NOT_STARTED)

    @property
    def heading(self) -> str:
        lesson = find_lesson(self.code)
        return f"{lesson.code} · {lesson.title}"


@dataclass
class Validation:
    """What the grader said about one notebook: its lessons' verdicts, or why it could not grade it."""
    notebook: Path
    slug: str | None = None
    lessons: list[LessonResult] = field(default_factory=list)
    problem: str | None = None          # why the notebook was not graded (then no lesson was)
    unsandboxed: str | None = None      # why it ran without the grading sandbox

    @property
    def success(self) -> bool:
        return self.problem is None and bool(self.lessons) and all(r.passed for r in self.lessons)

    @property
    def wrong(self) -> list[LessonResult]:
        return [r for r in self.lessons if r.answered and not r.passed]

    @property
    def unanswered(self) -> list[LessonResult]:
        return [r for r in self.lessons if not r.answered]

    @property
    def make_grade(self) -> str:
        if self.slug is None:
            return "`make grade` grades the notebooks of notebooks/, each as its part"
        return MAKE_GRADE.format(number=self.slug[:2])


def grade_notebook(path: str | Path) -> Validation:
    """Grade the notebook at ``path`` as ``make grade`` grades its part; the notebook itself is only read.

    Never raises for a bad notebook: what went wrong is the validation's ``problem``."""
    notebook = Path(path).resolve()
    validation = Validation(notebook)
    try:
        validation.slug = part_of_notebook(notebook)
    except ValueError as error:
        validation.problem = str(error)
        return validation
    named = saved_as_another_part(notebook, validation.slug)
    if named:
        validation.problem = named  # "Success!" for the lessons it holds would hide that it scores nothing there
        validation.slug = notebook.stem  # the part it is graded as (`make grade PART=..` grades this file so)
        return validation
    validation.unsandboxed = unsandboxed_reason()
    course = Path(tempfile.mkdtemp(prefix="mct-validate-"))  # one per validation: two may run at once
    try:
        _grade_in(course, validation)
    finally:
        shutil.rmtree(course, ignore_errors=True)
    if validation.lessons and notebook == ROOT / "notebooks" / f"{validation.slug}.ipynb":
        record_graded({r.code: r.passed for r in validation.lessons})  # as `make grade` records it
    return validation


def _grade_in(course: Path, validation: Validation) -> None:
    """Release, submit and autograde the notebook in the private course ``course`` (one nbgrader process)."""
    slug = validation.slug
    prepare(course, [slug])
    submit(course, slug, validation.notebook)
    run = nbgrader(course, release(slug), autograde(slug), env=grading_env(course, validation.unsandboxed))
    graded = graded_notebook(course, slug)
    if not graded.is_file():
        why = failure_reason(run.stdout + run.stderr, slug)
        validation.problem = f"the grader could not grade this notebook ({why})"
        return
    validation.lessons = [LessonResult(code, passed, message) for code, passed, message in verdicts(graded)]
    missing = {lesson.code for lesson in lessons_of(slug)} - {r.code for r in validation.lessons}
    if missing:  # nbgrader puts a deleted test cell back: every lesson should have its verdict
        validation.problem = f"the grader gave no verdict for lesson(s) {', '.join(sorted(missing))}"


# --------------------------------------------------------------------------
# The verdicts as nbgrader's validator reports them
# --------------------------------------------------------------------------

def _failed(source: str, text: str) -> dict[str, str]:
    """One entry of nbgrader's ``failed`` list.

    The button shows ``error`` as HTML in a box that does not wrap lines: the text is escaped (a
    message may quote the learner's output) and wrapped to the box's width."""
    wrapped = "\n".join(textwrap.fill(line, BUTTON_COLUMNS, subsequent_indent="    ", break_long_words=False,
                                       replace_whitespace=False) for line in text.splitlines())
    return {"source": source, "error": html.escape(wrapped), "raw_error": text}


def nbgrader_results(validation: Validation) -> dict[str, list[dict[str, str]]]:
    """The validation in the format of nbgrader's ``Validator.validate``: ``{}`` for success, else ``failed``."""
    if validation.success:
        return {}
    failed = []
    if validation.problem:
        failed.append(_failed("The notebook was not graded", f"{validation.problem}."))
    for result in validation.wrong:
        failed.append(_failed(f"Lesson {result.heading}: 0/{find_lesson(result.code).points}, graded with the "
                              f"hidden tests", result.message))
    if validation.unanswered:
        names = ", ".join(r.heading for r in validation.unanswered)
        right = len(validation.lessons) - len(validation.wrong) - len(validation.unanswered)
        failed.append(_failed(f"Not answered yet: {names}",
                              f"These lessons' functions still raise NotImplementedError: no points until you "
                              f"answer them. Of the lessons you have answered, {right} of "
                              f"{right + len(validation.wrong)} get full marks from the grader."))
    failed[-1] = _failed(failed[-1]["source"], failed[-1]["raw_error"] + _how_checked(validation))
    return {"failed": failed}


def _how_checked(validation: Validation) -> str:
    """What was checked, said where the learner reads the failures."""
    text = (f"\n\n(Checked by the grader, as `make grade` checks: the hidden tests on fresh random cases, judged "
            f"against the reference solutions. {validation.make_grade}.)") if validation.slug \
        else f"\n{validation.make_grade}."
    if validation.unsandboxed:
        text += f"\n(Graded WITHOUT the grading sandbox: {validation.unsandboxed}.)"
    return text


def report(validation: Validation) -> str:
    """The validation as ``nbgrader validate`` prints it: every lesson's verdict, then the outcome."""
    lines = []
    if validation.problem:
        lines.append(f"The grader did not grade {validation.notebook}: {validation.problem}.")
    if validation.lessons:
        lines.append(f"{validation.notebook.name}: part {validation.slug}, graded as `make grade` grades it "
                     f"(the hidden tests on fresh random cases, judged against the reference solutions):")
    for result in validation.lessons:
        points = find_lesson(result.code).points
        if result.passed:
            lines.append(f"  ✓ {result.heading}: {points}/{points}")
        elif result.answered:
            lines.append(f"  ✗ {result.heading}: 0/{points}\n      " + result.message.replace("\n", "\n      "))
        else:
            lines.append(f"  · {result.heading}: not answered yet")
    if validation.unsandboxed:
        lines.append(f"NOTE: graded WITHOUT the grading sandbox ({validation.unsandboxed})")
    if validation.success:
        lines.append("Success! Your notebook passes all the tests: the hidden ones, as the grader judges them.")
    elif not validation.problem:
        lines.append(f"VALIDATION FAILED: {len(validation.wrong)} lesson(s) you answered lose their points, "
                     f"{len(validation.unanswered)} not answered yet. {validation.make_grade}.")
    else:
        lines.append(f"VALIDATION FAILED. {validation.make_grade}.")
    return "\n".join(lines) + "\n"


class CourseValidator(Validator):
    """nbgrader's validator, but the verdicts are the grader's (see the module's docstring).

    ``--invert`` (an instructor's check that the release's stubs fail) is nbgrader's own."""

    def validate(self, filename: str) -> dict[str, list[dict[str, str]]]:
        if self.invert:
            return super().validate(filename)
        self.log.info("Grading '%s' as `make grade` would", filename)
        return nbgrader_results(grade_notebook(filename))

    def validate_and_print(self, filename: str) -> None:
        if self.invert:
            return super().validate_and_print(filename)
        self.stream.write(report(grade_notebook(filename)))


def use_course_validator() -> None:
    """Make ``nbgrader validate`` (and nbgrader's own validate handler, if loaded) use :class:`CourseValidator`.

    nbgrader 0.9 has no setting for the validator's class: ``ValidateApp.start`` and the handler
    each look up the name ``Validator`` in their own module when they validate, and that name is
    what this changes.  Called from the course's nbgrader_config.py."""
    from nbgrader.apps import validateapp
    validateapp.Validator = CourseValidator
    handlers = sys.modules.get("nbgrader.server_extensions.validate_assignment.handlers")
    if handlers is not None:
        handlers.Validator = CourseValidator


# --------------------------------------------------------------------------
# The Validate button: a Jupyter server extension in place of nbgrader's validate_assignment
# --------------------------------------------------------------------------

def _handlers():
    """The two handlers of the Validate button (imported here: only a Jupyter server needs tornado's)."""
    from nbgrader.server_extensions.validate_assignment.handlers import (NbGraderVersionHandler,
                                                                        ValidateAssignmentHandler)
    from tornado import web
    from tornado.ioloop import IOLoop

    class CourseValidateHandler(ValidateAssignmentHandler):
        """POST /assignments/validate (path=...): the grader's verdicts on one notebook, as nbgrader's handler answers.

        Grading takes seconds: it runs in a worker thread, and the server goes on serving meanwhile."""

        @web.authenticated
        async def post(self):
            path = self.get_argument("path", None)
            if path is None:
                body = self.get_json_body()
                path = body.get("path") if isinstance(body, dict) else None
            if not isinstance(path, str) or not path:
                raise web.HTTPError(400, "which notebook? give its path as `path`")
            target = self.notebook_path(path)
            answer = await IOLoop.current().run_in_executor(None, self.validate_file, target)
            self.finish(json.dumps(answer))

        def notebook_path(self, path: str) -> Path:
            """The notebook's file, which must be under the server's root (as nbgrader's handler requires)."""
            root = Path(self.root_dir).resolve()
            target = (root / path).resolve()
            if not target.is_relative_to(root):
                raise web.HTTPError(403, "Access denied: path outside allowed directory")
            return target

        def validate_file(self, target: Path) -> dict:
            """nbgrader's answer: success with the validator's results, or no success with why it failed."""
            try:
                return {"success": True, "value": nbgrader_results(grade_notebook(target))}
            except Exception:  # a bug of the grader's own: said, never a dead server
                self.log.error(traceback.format_exc())
                return {"success": False, "value": f"The course's validator failed: {traceback.format_exc()}\n"
                                                   f"`make grade` in a terminal grades your notebooks."}

    return [(r"/assignments/validate", CourseValidateHandler), (r"/nbgrader_version", NbGraderVersionHandler)]


def _jupyter_server_extension_points():
    return [{"module": "grading.validate"}]


def _load_jupyter_server_extension(server_app):
    """Serve the Validate button's two addresses (run by ``make lab`` instead of nbgrader's validate_assignment)."""
    from jupyter_server.utils import url_path_join

    web_app = server_app.web_app
    web_app.settings["root_dir"] = server_app.root_dir
    base_url = web_app.settings["base_url"]
    web_app.add_handlers(".*$", [(url_path_join(base_url, pattern), handler) for pattern, handler in _handlers()])
    server_app.log.info("The Validate button grades with the course's grader (grading.validate)")
