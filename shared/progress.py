"""Progress, XP and time left: which lessons pass, shown in each notebook and in the terminal.

A lesson's state is the latest result of its test cell: passed when the cell
ran to its last line, ``lesson_passed("003")``; failed when the cell raised
(``record_failure``, called by the notebook's set-up hook), so a lesson that
later fails turns from ✓ back to ✗.  The panel at the top of a notebook is
updated in place as test cells run.  Progress is stored in a small JSON file
(``.progress.json`` at the course root, or ``$MCT_PROGRESS_FILE``).  It is the
learner's own record and is never read by grading; while nbgrader grades
(``MCT_GRADING=1``) nothing is written.  Beside the XP, the panel and the report show the
time left: the estimated minutes (:mod:`shared.clock`) of the lessons not passed yet.
"""

from __future__ import annotations

import html
import json
import os
import sys
import tempfile
from pathlib import Path

from .clock import format_minutes, time_left
from .lessons import LESSONS, PARTS, TOTAL_POINTS, lesson as _lesson, lessons_of, minutes_left, part as _part

# The environment variables read here.  Their one definition is grading/protocol.py, but this package never
# imports from grading/ (the learner's kernel imports it): tests/test_protocol.py holds these copies equal to it.
PROGRESS_FILE_ENV = "MCT_PROGRESS_FILE"
GRADING_ENV = "MCT_GRADING"


def progress_file() -> Path:
    configured = os.environ.get(PROGRESS_FILE_ENV)
    if configured:
        return Path(configured)
    return Path(__file__).resolve().parent.parent / ".progress.json"


def grading() -> bool:
    """True when ``MCT_GRADING=1``: progress then writes nothing.

    The grading kernel's launcher sets it (``grading.sandbox.kernel_env``), but a kernel that grades
    imports an inert stand-in of this module (``grading/kernel_tree.py``), where this function never
    runs.  Where this module does run, the variable is set by code that calls lessons' functions outside
    a notebook and must not touch the learner's record (``tests/test_delegation.py``'s children)."""
    return os.environ.get(GRADING_ENV) == "1"


def _load() -> dict:
    try:
        data = json.loads(progress_file().read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _store(data: dict) -> None:
    path = progress_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    # Write-then-rename so that a crash never leaves half a file behind.
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as handle:
        json.dump(data, handle, indent=1)
    os.replace(handle.name, path)


def visible_results() -> dict[str, bool]:
    """The latest result of each lesson's visible tests, by code ("003")."""
    results = _load().get("visible", {})
    return {str(k): v for k, v in results.items() if isinstance(v, bool)} if isinstance(results, dict) else {}


def passed_lessons() -> set[str]:
    """Codes of the lessons whose visible tests passed the last time they ran."""
    return {code for code, ok in visible_results().items() if ok}


def _record_visible(code: str, ok: bool) -> None:
    if grading():
        return
    data = _load()
    data["visible"] = {**visible_results(), code: ok}
    data.pop("passed", None)  # the format before results were kept per run
    try:
        _store(data)
    except OSError as error:  # a read-only course folder must not fail a test
        print(f"(progress not saved: {error})")
    _refresh_panels()


def record_failure(key: int | str) -> None:
    """The lesson's test cell failed: its state is ✗ until it passes again."""
    _record_visible(_lesson(key).code, False)


def graded_results() -> dict[str, bool]:
    """The latest result of ``make grade`` per lesson code (True: the lesson earned its points)."""
    graded = _load().get("graded", {})
    return {str(k): v for k, v in graded.items() if isinstance(v, bool)} if isinstance(graded, dict) else {}


def record_graded(results: dict[str, bool]) -> None:
    """Keep the results of ``make grade`` (the hidden tests, judged outside the notebook)."""
    data = _load()
    data["graded"] = {**graded_results(), **results}
    _store(data)




def xp(codes: set[str] | None = None) -> int:
    codes = passed_lessons() if codes is None else codes
    return sum(item.points for item in LESSONS if item.code in codes)


def lesson_passed(key: int | str) -> None:
    """Record a lesson as passed and say so; the last line of every test cell."""
    item = _lesson(key)
    _record_visible(item.code, True)
    passed = passed_lessons() | {item.code}
    part_lessons = lessons_of(item.part.number)
    part_xp = sum(x.points for x in part_lessons if x.code in passed)
    print(f"✓ Lesson {item.code} · {item.title}: all tests passed, +{item.points} XP "
          f"(Part {item.part.number}: {part_xp}/{len(part_lessons) * item.points} XP)")


class ProgressPanel:
    """The panel at the top of a notebook: the part's lessons, ticks, XP and time left."""

    def __init__(self, part_key: int | str):
        self.part = _part(part_key)
        self.results = visible_results()
        self.passed = {code for code, ok in self.results.items() if ok}

    def _rows(self):
        for item in lessons_of(self.part.number):
            yield item, item.code in self.passed

    def _part_xp(self) -> tuple[int, int]:
        rows = list(self._rows())
        return sum(i.points for i, ok in rows if ok), sum(i.points for i, _ in rows)

    def _time_left(self) -> tuple[str, str]:
        """The part's and the course's time left, as text."""
        return (time_left(minutes_left(self.passed, lessons_of(self.part.number))),
                time_left(minutes_left(self.passed)))

    def __repr__(self) -> str:
        earned, possible = self._part_xp()
        part_left, course_left = self._time_left()
        lines = [f"Part {self.part.number} · {self.part.title}: {earned}/{possible} XP · {part_left} "
                 f"(course: {xp(self.passed)}/{TOTAL_POINTS} XP, {course_left})"]
        marks = {True: "✓", False: "✗", None: " "}
        lines += [f"  [{marks[self.results.get(i.code)]}] {i.code} {i.function}" for i, _ in self._rows()]
        return "\n".join(lines)

    def _mark(self, item) -> str:
        """✓ passed, ✗ failed the last time, · not run yet (plain characters: no emoji font needed)."""
        result = self.results.get(item.code)
        if result is None:
            return "<span style='color:#888'>·</span>"
        return "<span style='color:#1a7f37'>✓</span>" if result else "<span style='color:#cf222e'>✗</span>"

    def _repr_html_(self) -> str:
        earned, possible = self._part_xp()
        graded = {k: v for k, v in graded_results().items() if k in {i.code for i in lessons_of(self.part.number)}}
        grade_cell = (lambda i: f"<td>{'graded ✓' if graded.get(i.code) else ('graded ✗' if i.code in graded else '')}"
                                f"</td>") if graded else (lambda i: "")
        cells = "".join(
            f"<tr><td>{self._mark(i)}</td><td>{i.code}</td>"
            f"<td><code>{html.escape(i.function)}</code></td><td>{i.points if ok else 0}/{i.points}</td>"
            f"{grade_cell(i)}</tr>"
            for i, ok in self._rows())
        graded_head = "<th>make grade</th>" if graded else ""
        part_left, course_left = self._time_left()
        return (f"<div class='mct-progress'><b>Part {self.part.number} · {html.escape(self.part.title)}"
                f"</b>: {earned}/{possible} XP · {part_left} &nbsp;·&nbsp; course: {xp(self.passed)}/{TOTAL_POINTS}"
                f" XP, {course_left}"
                f"<table><tr><th></th><th>lesson</th><th>function</th><th>XP</th>{graded_head}</tr>{cells}"
                f"</table></div>")


_panels: dict[str, str] = {}  # display id -> part slug, of the panels shown in this kernel


def show_progress(part_key: int | str) -> None:
    """Display the progress panel of a part; it is updated in place as test cells pass or fail."""
    panel = ProgressPanel(part_key)
    try:
        from IPython.display import display
    except ImportError:
        print(repr(panel))
        return
    display_id = f"mct-progress-{panel.part.slug}"
    _panels[display_id] = panel.part.slug
    display(panel, display_id=display_id)


def _refresh_panels() -> None:
    if not _panels:
        return
    from IPython.display import update_display
    for display_id, slug in _panels.items():
        update_display(ProgressPanel(slug), display_id=display_id)


def report() -> str:
    """The whole course's progress as text, one line per lesson, and the time left per part and in all."""
    visible = visible_results()
    passed = {code for code, ok in visible.items() if ok}
    graded = graded_results()
    lines = ["lesson  visible tests  graded (make grade)  estimate  function"]
    for p in PARTS:
        part_lessons = lessons_of(p.number)
        lines.append(f"Part {p.number} · {p.title}: {time_left(minutes_left(passed, part_lessons))} "
                     f"(of {format_minutes(sum(item.minutes for item in part_lessons))})")
        for item in part_lessons:
            mark = {True: "passed", False: "failed"}.get(visible.get(item.code), "  -   ")
            grade = {True: "earned ", False: "0 pts  "}.get(graded.get(item.code), "   -   ")
            lines.append(f"  {item.code}  {mark}         {grade}               {item.minutes:2d} min    {item.function}")
    earned = {code for code, ok in graded.items() if ok}
    left = minutes_left(passed)
    lines.append(f"time left in all: {f'about {format_minutes(left)}' if left else 'nothing'} "
                 f"(of {format_minutes(sum(item.minutes for item in LESSONS))}): the lessons still to do")
    lines.append(f"XP from the visible tests: {xp(passed)}/{TOTAL_POINTS}  "
                 f"({len(passed & {i.code for i in LESSONS})}/{len(LESSONS)} lessons)")
    lines.append(f"graded XP (make grade):    {xp(earned)}/{TOTAL_POINTS}"
                 + ("" if graded else "  (not graded yet: run `make grade`)"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m shared.progress`` (what ``make progress`` runs)."""
    print(report())
    return 0


if __name__ == "__main__":
    sys.exit(main())
