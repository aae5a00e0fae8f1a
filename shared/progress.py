"""Progress and XP: which lessons pass, shown in each notebook and in the terminal.

A lesson counts as passed when its test cell runs to the end: the cell's last
line is ``lesson_passed("003")``.  Progress is stored in a small JSON file
(``.progress.json`` at the course root, or ``$MCT_PROGRESS_FILE``).  It is the
learner's own record and is never read by grading; while nbgrader grades
(``MCT_GRADING=1``) nothing is written.
"""

from __future__ import annotations

import html
import json
import os
import sys
import tempfile
from pathlib import Path

from .lessons import LESSONS, PARTS, TOTAL_POINTS, lesson as _lesson, lessons_of, part as _part



def progress_file() -> Path:
    configured = os.environ.get("MCT_PROGRESS_FILE")
    if configured:
        return Path(configured)
    return Path(__file__).resolve().parent.parent / ".progress.json"


def grading() -> bool:
    """True while nbgrader is grading (set by autograde/nbgrader_config.py)."""
    return os.environ.get("MCT_GRADING") == "1"


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


def passed_lessons() -> set[str]:
    """Codes ("003") of the lessons whose visible tests passed; an unreadable file counts as none."""
    passed = _load().get("passed", [])
    return {code for code in passed if isinstance(code, str)} if isinstance(passed, list) else set()


def graded_results() -> dict[str, bool]:
    """The latest result of ``make grade`` per lesson code (True: the lesson earned its points)."""
    graded = _load().get("graded", {})
    return {str(k): v for k, v in graded.items() if isinstance(v, bool)} if isinstance(graded, dict) else {}


def record_graded(results: dict[str, bool]) -> None:
    """Keep the results of ``make grade`` (the hidden tests, judged outside the notebook)."""
    data = _load()
    data["graded"] = {**graded_results(), **results}
    _store(data)


def _write(passed: set[str]) -> None:
    data = _load()
    data["passed"] = sorted(passed)
    _store(data)


def xp(codes: set[str] | None = None) -> int:
    codes = passed_lessons() if codes is None else codes
    return sum(item.points for item in LESSONS if item.code in codes)


def lesson_passed(key: int | str) -> None:
    """Record a lesson as passed and say so; the last line of every test cell."""
    item = _lesson(key)
    passed = passed_lessons()
    if not grading():
        try:
            _write(passed | {item.code})
            passed = passed | {item.code}
        except OSError as error:  # a read-only course folder must not fail a passing test
            print(f"(progress not saved: {error})")
    part_lessons = lessons_of(item.part.number)
    part_xp = sum(x.points for x in part_lessons if x.code in passed)
    print(f"✓ Lesson {item.code} · {item.title}: all tests passed, +{item.points} XP "
          f"(Part {item.part.number}: {part_xp}/{len(part_lessons) * item.points} XP)")


class ProgressPanel:
    """The panel at the top of a notebook: the part's lessons, ticks and XP."""

    def __init__(self, part_key: int | str):
        self.part = _part(part_key)
        self.passed = passed_lessons()

    def _rows(self):
        for item in lessons_of(self.part.number):
            yield item, item.code in self.passed

    def _part_xp(self) -> tuple[int, int]:
        rows = list(self._rows())
        return sum(i.points for i, ok in rows if ok), sum(i.points for i, _ in rows)

    def __repr__(self) -> str:
        earned, possible = self._part_xp()
        lines = [f"Part {self.part.number} · {self.part.title}: {earned}/{possible} XP "
                 f"(course: {xp(self.passed)}/{TOTAL_POINTS} XP)"]
        lines += [f"  [{'x' if ok else ' '}] {i.code} {i.function}" for i, ok in self._rows()]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        earned, possible = self._part_xp()
        graded = {k: v for k, v in graded_results().items() if k in {i.code for i in lessons_of(self.part.number)}}
        grade_cell = (lambda i: f"<td>{'graded ✓' if graded.get(i.code) else ('graded ✗' if i.code in graded else '')}"
                                f"</td>") if graded else (lambda i: "")
        cells = "".join(
            f"<tr><td>{'✅' if ok else '⬜'}</td><td>{i.code}</td>"
            f"<td><code>{html.escape(i.function)}</code></td><td>{i.points if ok else 0}/{i.points}</td>"
            f"{grade_cell(i)}</tr>"
            for i, ok in self._rows())
        graded_head = "<th>make grade</th>" if graded else ""
        return (f"<div class='mct-progress'><b>Part {self.part.number} · {html.escape(self.part.title)}"
                f"</b>: {earned}/{possible} XP &nbsp;·&nbsp; course: {xp(self.passed)}/{TOTAL_POINTS} XP"
                f"<table><tr><th></th><th>lesson</th><th>function</th><th>XP</th>{graded_head}</tr>{cells}"
                f"</table></div>")


def show_progress(part_key: int | str) -> ProgressPanel:
    """Display the progress panel of a part (return value is shown by Jupyter)."""
    return ProgressPanel(part_key)


def report() -> str:
    """The whole course's progress as text, one line per lesson."""
    passed = passed_lessons()
    graded = graded_results()
    lines = ["lesson  visible tests  graded (make grade)  function"]
    for p in PARTS:
        lines.append(f"Part {p.number} · {p.title}")
        for item in lessons_of(p.number):
            mark = "passed" if item.code in passed else "  -   "
            grade = {True: "earned ", False: "0 pts  "}.get(graded.get(item.code), "   -   ")
            lines.append(f"  {item.code}  {mark}         {grade}              {item.function}")
    earned = {code for code, ok in graded.items() if ok}
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
