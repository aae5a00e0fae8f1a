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


def passed_lessons() -> set[str]:
    """Codes ("003") of the lessons recorded as passed; an unreadable file counts as none."""
    path = progress_file()
    try:
        data = json.loads(path.read_text())
        return {str(code) for code in data.get("passed", []) if isinstance(code, str)}
    except (OSError, ValueError, AttributeError):
        return set()


def _write(passed: set[str]) -> None:
    path = progress_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    # Write-then-rename so that a crash never leaves half a file behind.
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as handle:
        json.dump({"passed": sorted(passed)}, handle, indent=1)
    os.replace(handle.name, path)


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
        cells = "".join(
            f"<tr><td>{'✅' if ok else '⬜'}</td><td>{i.code}</td>"
            f"<td><code>{html.escape(i.function)}</code></td><td>{i.points if ok else 0}/{i.points}</td></tr>"
            for i, ok in self._rows())
        return (f"<div class='mct-progress'><b>Part {self.part.number} · {html.escape(self.part.title)}"
                f"</b>: {earned}/{possible} XP &nbsp;·&nbsp; course: {xp(self.passed)}/{TOTAL_POINTS} XP"
                f"<table><tr><th></th><th>lesson</th><th>function</th><th>XP</th></tr>{cells}</table></div>")


def show_progress(part_key: int | str) -> ProgressPanel:
    """Display the progress panel of a part (return value is shown by Jupyter)."""
    return ProgressPanel(part_key)


def report() -> str:
    """The whole course's progress as text, one line per lesson."""
    passed = passed_lessons()
    lines = []
    for p in PARTS:
        lines.append(f"Part {p.number} · {p.title}")
        for item in lessons_of(p.number):
            mark = "passed" if item.code in passed else "  -   "
            lines.append(f"  {item.code} {mark}  {item.function}")
    lines.append(f"XP: {xp(passed)}/{TOTAL_POINTS}  ({len(passed & {i.code for i in LESSONS})}/{len(LESSONS)} lessons)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m shared.progress`` (what ``make progress`` runs)."""
    print(report())
    return 0


if __name__ == "__main__":
    sys.exit(main())
