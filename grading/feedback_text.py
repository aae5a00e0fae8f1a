"""What a learner reads on a feedback page: the grader's notes in plain words, the scores as the gradebook has them.

The autograded notebook keeps the grader's own texts (``GradedFailure: …``, ``[not run: the kernel died at
cell 29]``, ``(this notebook needs a human look)``): the instructor's tools read them there
(``tools/instructor.py`` lists every output that asks for a human look).  The feedback page is the
learner's, so the feedback step (``grading.preprocessors.LearnerFeedback``) rewrites them there only:

- :func:`plain_words` turns the grader's notes into sentences a learner reads, without the names of
  the grader's exception classes or its bookkeeping (the formgrader's view of a submission words them so too,
  through the filter of that name in grading/templates/formgrade/course.html.j2: one wording for both);
- :func:`verdict_outputs` gives a lesson's verdict the score the gradebook holds, so a score the
  instructor set by hand in formgrader is the one the verdict states;
- :func:`progress_panel` is the notebook's progress panel drawn from the grades of the page, not from the
  learner's progress file (which grading never reads: there the panel says 0 XP);
- :func:`lesson_label` names a test cell by its lesson, for the page's summary and the cells' headings.

Nothing here changes a score: the page shows the gradebook's.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from typing import Any

from nbformat import NotebookNode
from nbgrader.utils import determine_grade

from shared.clock import time_left
from shared.lessons import Lesson, lesson_of_grade_id, lessons_of, minutes_left, part as find_part

INSTRUCTOR_WILL_LOOK = "your instructor will look at this notebook"

# The grader's notes and what a learner reads instead, in order (a longer note before any note it contains).
# Each pattern is one the grader writes (grading/preprocessors/); tests/test_feedback_text.py holds them to it.
_PLAIN_WORDS: tuple[tuple[re.Pattern, str], ...] = tuple((re.compile(pattern), words) for pattern, words in (
    # The first line of a lesson's failed verdict names the grader's exception class.
    (r"(?m)^GradedFailure: ", ""),
    # Graded code that breaks the rules for graded code (CheckRules) is not run.
    (r"(?s)^not run: (.*?) \(this notebook needs a human look\)",
     rf"Not run: \1. {INSTRUCTOR_WILL_LOOK.capitalize()}."),
    # Where the kernel died (SandboxedExecute): the machinery's causes in the words of what a learner did.
    (r"the grading kernel died here \(os\._exit, a crash, or one of the sandbox's limits on memory, "
     r"processes or time\)",
     "Your notebook's kernel stopped here (it crashed, was ended by the code, or went past the grading limits on "
     "memory, processes or time)"),
    (r"answers refused: ", "Your answers were not accepted: "),
    (r"\((?:this notebook needs a human look|listed for a human look)\)", f"({INSTRUCTOR_WILL_LOOK})"),
    (r"this notebook needs a human look", INSTRUCTOR_WILL_LOOK),
    # The automatic comment tools/instructor.py gives a flagged lesson's answer cell.
    (r"(?m)^Needs a human look: ", "Your instructor will look at this: "),
))
# Once the instructor has looked (grading/review.py: nothing of the notebook waits for a human any more), the page
# says so instead of promising it.
INSTRUCTOR_HAS_LOOKED = "your instructor has looked at this notebook"
_AFTER_REVIEW = ((INSTRUCTOR_WILL_LOOK, INSTRUCTOR_HAS_LOOKED),
                 (INSTRUCTOR_WILL_LOOK.capitalize(), INSTRUCTOR_HAS_LOOKED.capitalize()),
                 ("Your instructor will look at this: ", "Your instructor looked at this: "))


def after_review(value: Any) -> Any:
    """``value`` (a cell's output, or any of its parts) with every promise of a human look turned into its
    having happened."""
    if isinstance(value, str):
        for promise, done in _AFTER_REVIEW:
            value = value.replace(promise, done)
        return value
    if isinstance(value, list):
        return [after_review(item) for item in value]
    if isinstance(value, dict):
        return type(value)({key: after_review(item) for key, item in value.items()})
    return value


# The cells after the one where the kernel died (SandboxedExecute): the number there is nbclient's index, from 0.
_KERNEL_DIED_AT = re.compile(r"\[not run: the kernel died at cell (\d+)\]")


def cell_number(index: int) -> str:
    """A cell as a learner counts them, from 1 (the grader's notes count from 0)."""
    return f"cell {index + 1}"


def plain_words(text: str, where: Callable[[int], str] = cell_number) -> str:
    """``text`` with every note of the grader's in plain words (see ``_PLAIN_WORDS``).

    ``where(index)`` names the cell at nbclient's ``index`` for a learner: the cell where a kernel died."""
    text = _KERNEL_DIED_AT.sub(
        lambda died: f"Not run: your notebook's kernel stopped (it crashed, or ran out of memory or time) at "
                     f"{where(int(died.group(1)))}, so this cell did not run.", text)
    for pattern, words in _PLAIN_WORDS:
        text = pattern.sub(words, text)
    return text


# Names of the grader's error outputs (never shown by nbconvert's template, which shows the traceback only),
# replaced all the same: nothing of the grader's vocabulary is left on the page.
_ERROR_NAMES = {"GradedFailure": "Not passed", "RulesBroken": "Not run", "KernelDied": "Kernel stopped",
                "AnswersRefused": "Answers not accepted"}


def plain_output(output: NotebookNode, where: Callable[[int], str] = cell_number) -> NotebookNode:
    """One output of a cell, with the grader's notes in plain words (text, error message and traceback)."""
    if output.get("output_type") == "stream":
        output["text"] = plain_words(_joined(output.get("text", "")), where)
    elif output.get("output_type") == "error":
        output["ename"] = _ERROR_NAMES.get(output.get("ename"), output.get("ename", ""))
        output["evalue"] = plain_words(output.get("evalue", ""), where)
        output["traceback"] = [plain_words(line, where) for line in output.get("traceback", [])]
    return output


def _joined(text: str | list[str]) -> str:
    return "".join(text) if isinstance(text, list) else text


# --------------------------------------------------------------------------
# lessons by name, scores as the gradebook has them
# --------------------------------------------------------------------------

def lesson_of_test_cell(cell: NotebookNode) -> Lesson | None:
    """The lesson whose graded test cell ``cell`` is (None for any other cell)."""
    meta = cell.get("metadata", {}).get("nbgrader", {})
    lesson = lesson_of_grade_id(str(meta.get("grade_id", "")))
    if cell.get("cell_type") == "code" and meta.get("grade") and lesson and meta.get("grade_id") == lesson.grade_id:
        return lesson
    return None


def lesson_label(grade_id: Any) -> str:
    """``Lesson 003 · Linear forward`` for the grade id of a lesson's test or answer cell, else ``""``."""
    lesson = lesson_of_grade_id(str(grade_id))
    return f"Lesson {lesson.code} · {lesson.title}" if lesson else ""


def points(value: Any) -> str:
    """A score as a learner writes it: ``5``, ``2.5``; ``–`` for none."""
    if value is None:
        return "–"
    try:
        return f"{float(value):g}"
    except (TypeError, ValueError):
        return "–"


def automatic_score(cell: NotebookNode) -> float | None:
    """The score autograding gave this test cell: nbgrader's own rule (an error output scores 0)."""
    score, _ = determine_grade(cell)
    return score


def set_by_instructor(cell: NotebookNode) -> bool:
    """Whether the gradebook's score of this test cell (GetGrades put it in the cell) is not autograding's."""
    score = cell.metadata.nbgrader.get("score")
    automatic = automatic_score(cell)
    return score is not None and automatic is not None and float(score) != float(automatic)


def verdict_outputs(cell: NotebookNode, lesson: Lesson) -> list[NotebookNode]:
    """The outputs of a lesson's test cell: its verdict in plain words, with the score the gradebook holds.

    When the instructor set the lesson's score by hand, the verdict says so, with the automatic grade, and
    keeps the judge's message: a failed lesson's first line states the instructor's score, and a note
    follows it; a passed lesson's line (the judge's "graded 5/5") is followed by the note."""
    outputs = [plain_output(output) for output in cell.get("outputs", [])]
    if not set_by_instructor(cell):
        return outputs
    meta = cell.metadata.nbgrader
    note = (f"Your instructor set this lesson to {points(meta.score)} / {points(meta.points)} "
            f"(the automatic grade was {points(automatic_score(cell))} / {points(meta.points)}).")
    for output in outputs:
        if output.get("output_type") == "error" and output.get("traceback"):
            headline = f"Lesson {lesson.code} · {lesson.title}: {points(meta.score)}/{points(meta.points)}"
            output["traceback"] = [headline, note, *output["traceback"][1:]]
            return outputs
    return outputs + [NotebookNode(output_type="stream", name="stdout", text=note + "\n")]


# --------------------------------------------------------------------------
# the progress panel, from the grades of the page
# --------------------------------------------------------------------------

def is_progress_panel(source: str, slug: str) -> bool:
    """Whether a code cell is the course's progress panel of part ``slug``, as released (``show_progress``)."""
    from grading.rules import course_cells  # (the course's own cells, read from the part's source notebook)
    return f'show_progress("{slug}")' in source and course_cells(slug).is_demo(source)


def progress_panel(slug: str, scores: dict[str, tuple[Any, Any]]) -> NotebookNode:
    """The progress panel of part ``slug`` (shared/progress.py draws it in JupyterLab) from the page's grades.

    ``scores``: lesson code -> (score, out of), as the gradebook has them.  A lesson is ticked when it has all
    its points; the time left counts the lessons that have not."""
    part, lessons = find_part(slug), lessons_of(slug)
    rows = [(lesson, *scores.get(lesson.code, (None, lesson.points))) for lesson in lessons]
    full = {lesson.code for lesson, score, out_of in rows if _passed(score, out_of)}
    earned = sum(float(score) for _, score, _ in rows if score is not None)
    head = (f"Part {part.number} · {part.title}: {points(earned)}/{sum(lesson.points for lesson in lessons)} XP "
            f"graded · {time_left(minutes_left(full, lessons))}")
    data = {"text/html": _panel_html(head, rows), "text/plain": _panel_text(head, rows)}
    return NotebookNode(output_type="display_data", metadata=NotebookNode(), data=NotebookNode(data))


_Row = tuple[Lesson, Any, Any]  # a lesson, its score (None: none), out of


def _panel_text(head: str, rows: list[_Row]) -> str:
    """The panel as text (shared.progress.ProgressPanel's repr), for a reader without HTML."""
    marks = {True: "✓", False: "✗", None: " "}
    return "\n".join([head] + [f"  [{marks[_passed(score, out_of)]}] {lesson.code} {lesson.function}  "
                               f"{points(score)}/{points(out_of)}" for lesson, score, out_of in rows])


def _panel_html(head: str, rows: list[_Row]) -> str:
    """The panel as HTML: rows of ``<div>``s and ``<span>``s, laid out as a table by the page's stylesheet
    (course.html.j2), with ``class`` attributes only.  nbconvert's sanitizer (bleach) keeps those; it keeps no
    ``<th>``, and writes out as text the ``<tbody>`` it adds to a ``<table>``."""
    body = "".join(f'<div class="mct-row">{_mark(_passed(score, out_of))}<span>{lesson.code}</span>'
                   f"<span><code>{html.escape(lesson.function)}</code></span>"
                   f"<span>{points(score)}/{points(out_of)}</span></div>" for lesson, score, out_of in rows)
    return (f'<div class="mct-progress"><b>{html.escape(head)}</b><div class="mct-rows">'
            f'<div class="mct-row mct-head"><span></span><span>lesson</span><span>function</span><span>XP</span>'
            f"</div>{body}</div></div>")


def _passed(score: Any, out_of: Any) -> bool | None:
    """All the lesson's points (True), fewer (False), or no score (None)."""
    return None if score is None else float(score) >= float(out_of)


def _mark(passed: bool | None) -> str:
    """The panel's mark of a lesson: ✓ all its points, ✗ fewer, · no score."""
    if passed is None:
        return '<span class="mct-none">·</span>'
    return '<span class="mct-pass">✓</span>' if passed else '<span class="mct-fail">✗</span>'
