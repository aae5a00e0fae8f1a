"""``make report``: the class at a glance, an HTML page an instructor opens in a browser.

    python tools/report.py [--course-dir DIR] [--parts 01,05] [--output FOLDER]

Read from the course directory after ``make autograde`` (nothing is graded here, and nothing is changed but
``needs-manual-grading.csv``, the review queue's file, written anew from the same state as ``make review``):

- the points from nbgrader's gradebook, as ``grades.csv`` has them (manual scores set in the formgrader and
  late penalties included);
- the judge's verdicts from the autograded notebooks, for the common mistakes it named in each lesson
  ("This is a common mistake: ...") and the lessons not started;
- the notebooks still waiting for a human, from the open review queue (``make review``: the reasons
  ``make autograde`` recorded, less what the instructor has graded or cleared in the formgrader since).

It writes ``COURSE/report/index.html`` with its figures beside it (PNG files drawn by matplotlib): the
score distribution of each part, each lesson's pass rate, the most common named mistakes of each lesson
with their counts, and the flagged notebooks with their reasons.  The page loads nothing from the network
and runs no script.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import statistics
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display

import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import instructor  # noqa: E402
from grading.course import landed_parts, source_notebook  # noqa: E402
from shared.checking import MISTAKE_SAYS  # noqa: E402
from shared.lessons import Lesson, lesson_of_grade_id, lessons_of  # noqa: E402
from shared.mistakes import mistakes_of  # noqa: E402

NOT_STARTED_SAYS = "not started: "
TOP_MISTAKES = 3  # the most common named mistakes listed per lesson


# --------------------------------------------------------------------------
# What the course directory says
# --------------------------------------------------------------------------

@dataclass
class LessonTally:
    """One lesson across the class: how many handed it in, passed it, did not start it, made which mistake."""
    lesson: Lesson
    handed_in: int = 0
    passed: int = 0
    not_started: int = 0
    mistakes: Counter = field(default_factory=Counter)

    @property
    def failed(self) -> int:
        """Handed in, started and short of full marks."""
        return self.handed_in - self.passed - self.not_started

    @property
    def pass_rate(self) -> float | None:
        return self.passed / self.handed_in if self.handed_in else None


@dataclass
class ClassReport:
    course: Path
    parts: list[str]
    students: list[str]
    part_points: dict[str, list[float]]  # {slug: the points of each student whose part is graded}
    not_final: dict[str, int]  # {slug: how many handed it in and wait for a human (or could not be graded)}
    lessons: dict[str, LessonTally]  # {lesson code: its tally}
    flags: list[dict[str, str]]  # the open review queue, one row per notebook (instructor.review_queue)


def verdict_texts(notebook: Path) -> dict[str, str]:
    """{lesson code: the text of its test cell's outputs} in an autograded notebook ({} if unreadable)."""
    try:
        cells = json.loads(notebook.read_text()).get("cells", [])
    except (OSError, ValueError):
        return {}
    texts = {}
    for cell in cells:
        lesson = lesson_of_grade_id(str(cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")))
        if lesson is None or cell.get("cell_type") != "code":
            continue
        parts = []
        for output in cell.get("outputs", []):
            parts.append(str(output.get("evalue", "")))
            text = output.get("text", "")
            parts.append("".join(text) if isinstance(text, list) else str(text))
        texts[lesson.code] = "\n".join(parts)
    return texts


def named_mistakes(lesson: Lesson, text: str) -> list[str]:
    """The catalogued mistakes of ``lesson`` the judge named in a verdict ``text`` (matched on the
    catalogue's names, so a learner's own output cannot invent one)."""
    return [m.name for m in mistakes_of(lesson.function) if f"{MISTAKE_SAYS}{m.name}." in text]


def class_report(course: Path, parts: list[str]) -> ClassReport:
    students = instructor.class_list(course)
    table = instructor.score_table(course, parts, students)
    part_points = {slug: [] for slug in parts}
    not_final = {slug: 0 for slug in parts}
    lessons = {lesson.code: LessonTally(lesson) for slug in parts for lesson in lessons_of(slug)}
    for student in students:
        for slug in parts:
            status = table[student][f"status_{slug}"]
            if status == instructor.NOT_HANDED_IN:
                continue
            if status == instructor.GRADED:
                part_points[slug].append(table[student][f"part_{slug}"])
            else:  # waiting for a human, or ungradable: its points are not final
                not_final[slug] += 1
            texts = verdict_texts(course / "autograded" / student / slug / f"{slug}.ipynb")
            for lesson in lessons_of(slug):
                tally = lessons[lesson.code]
                tally.handed_in += 1
                tally.passed += table[student][f"lesson_{lesson.code}"] == lesson.points
                text = texts.get(lesson.code, "")
                tally.not_started += NOT_STARTED_SAYS in text
                tally.mistakes.update(named_mistakes(lesson, text))
    return ClassReport(course, parts, students, part_points, not_final, lessons, instructor.review_queue(course, parts))


# --------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------

def save(figure, path: Path) -> Path:
    # No date or version in the file: the same class gives the same bytes.
    figure.savefig(path, dpi=110, bbox_inches="tight", metadata={"Software": None})
    plt.close(figure)
    return path


def score_distribution_figure(report: ClassReport, path: Path) -> Path:
    """One histogram per part: how many students scored each number of points (out of the part's)."""
    shown = [slug for slug in report.parts if report.part_points[slug]]
    columns = min(4, max(1, len(shown)))
    rows = max(1, -(-len(shown) // columns))
    figure, axes = plt.subplots(rows, columns, figsize=(3.2 * columns, 2.8 * rows), squeeze=False,
                                layout="constrained")
    for ax in axes.flat[len(shown):]:
        ax.set_visible(False)
    for ax, slug in zip(axes.flat, shown):
        possible = sum(lesson.points for lesson in lessons_of(slug))
        points = report.part_points[slug]
        step = lessons_of(slug)[0].points
        ax.hist(points, bins=[b - step / 2 for b in range(0, possible + 2 * step, step)], color="#4c72b0",
                edgecolor="white")
        ax.set_xlim(-step, possible + step)
        ax.set_title(f"Part {int(slug[:2])}: {len(points)} handed in", fontsize=10)
        ax.set_xlabel(f"points (of {possible})")
        ax.set_ylabel("students")
        ax.yaxis.get_major_locator().set_params(integer=True)
    figure.suptitle("Score distribution per part", fontsize=12)
    return save(figure, path)


def pass_rate_figure(report: ClassReport, path: Path) -> Path:
    """A bar per lesson handed in: the share of its submissions that earned full marks, coloured by part."""
    tallies = [t for t in report.lessons.values() if t.handed_in]
    figure, ax = plt.subplots(figsize=(max(4.0, 0.32 * len(tallies) + 1.5), 3.2), layout="constrained")
    colours = plt.get_cmap("tab10")
    ax.bar(range(len(tallies)), [100 * t.pass_rate for t in tallies],
           color=[colours(t.lesson.part.number - 1) for t in tallies])
    ax.set_xticks(range(len(tallies)), [t.lesson.code for t in tallies], rotation=90, fontsize=8)
    ax.set_ylim(0, 100)
    ax.set_ylabel("passed (%)")
    ax.set_title("Each lesson's pass rate (full marks)", fontsize=12)
    ax.grid(axis="y", alpha=0.3)
    return save(figure, path)


# --------------------------------------------------------------------------
# The page
# --------------------------------------------------------------------------

STYLE = """
body { font-family: system-ui, sans-serif; max-width: 64rem; margin: 2rem auto; padding: 0 1rem; color: #222; }
table { border-collapse: collapse; margin: 0.5rem 0 1.5rem; }
th, td { border-bottom: 1px solid #ddd; padding: 0.3rem 0.6rem; text-align: left; vertical-align: top; }
td.number { text-align: right; font-variant-numeric: tabular-nums; }
img { max-width: 100%; }
.reason { overflow-wrap: anywhere; }
"""


def row(*cells: str, numbers: tuple[int, ...] = ()) -> str:
    return "<tr>" + "".join(f'<td class="number">{c}</td>' if i in numbers else f"<td>{c}</td>"
                            for i, c in enumerate(cells)) + "</tr>"


def percent(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.0f} %"


def parts_table(report: ClassReport) -> str:
    rows = []
    for slug in report.parts:
        points = report.part_points[slug]
        possible = sum(lesson.points for lesson in lessons_of(slug))
        handed_in = str(len(points) + report.not_final[slug])
        if points:
            full = sum(p == possible for p in points)
            cells = (f"{statistics.mean(points):.1f}", f"{statistics.median(points):g}", str(full))
        else:
            cells = ("–", "–", "–")
        rows.append(row(html.escape(slug), str(possible), handed_in, str(report.not_final[slug]), *cells,
                        numbers=(1, 2, 3, 4, 5, 6)))
    return ('<table id="part-table"><tr><th>part</th><th>out of</th><th>handed in</th><th>not final</th><th>mean</th>'
            "<th>median</th><th>full marks</th></tr>" + "".join(rows) + "</table>"
            "<p>Mean, median and full marks are of the graded parts, after the late penalty; a part waiting for a "
            "human or that could not be graded is not final (blank in <code>grades.csv</code>).</p>")


def lessons_table(report: ClassReport) -> str:
    rows = []
    for tally in report.lessons.values():
        if not tally.handed_in:
            continue
        common = "<br>".join(f"{html.escape(name)} <b>×{count}</b>"
                             for name, count in tally.mistakes.most_common(TOP_MISTAKES)) or "–"
        rows.append(row(tally.lesson.code, html.escape(tally.lesson.title), str(tally.handed_in), str(tally.passed),
                        percent(tally.pass_rate), str(tally.not_started), str(tally.failed), common,
                        numbers=(2, 3, 4, 5, 6)))
    return ('<table id="lesson-table"><tr><th>lesson</th><th>title</th><th>handed in</th><th>passed</th><th>pass rate</th>'
            "<th>not started</th><th>failed</th><th>most common named mistakes</th></tr>" + "".join(rows) + "</table>")


def flags_table(report: ClassReport) -> str:
    if not report.flags:
        return "<p>No notebook needs a human look.</p>"
    rows = [row(html.escape(f["student"]), html.escape(f["part"]), html.escape(f["status"]),
                html.escape(", ".join(f["lessons"].split()) or "whole notebook"),
                f'<span class="reason">{html.escape(f["reasons"])}</span>') for f in report.flags]
    return ("<p>One row per notebook, as <code>make review</code> lists them. Each flagged one is marked “needs "
            "manual grading” in the formgrader (<code>make formgrader</code>), with the reason as the lesson's "
            "comment; a score given there to each listed lesson, or its flag cleared, takes it off this list.</p>"
            "<table id=\"flag-table\"><tr><th>student</th><th>part</th><th>status</th><th>lessons</th>"
            "<th>reasons</th></tr>" + "".join(rows) + "</table>")


def page(report: ClassReport, figures: dict[str, str]) -> str:
    handed_in = sum(len(points) for points in report.part_points.values())
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; img-src 'self'; style-src 'unsafe-inline'">
<title>Class report: {html.escape(report.course.name)}</title><style>{STYLE}</style></head>
<body>
<h1>Class report</h1>
<p>{len(report.students)} students, {handed_in} notebooks handed in, course directory
<code>{html.escape(str(report.course))}</code>. Points as in <code>grades.csv</code> (manual scores and late
penalties included).</p>
<h2 id="parts">Scores per part</h2>
{parts_table(report)}
<img src="{figures['scores']}" alt="Histograms of the points of each part">
<h2 id="lessons">Lessons</h2>
<img src="{figures['pass_rates']}" alt="Bar chart of each lesson's pass rate">
{lessons_table(report)}
<h2 id="flags">Notebooks that need a human look ({len(report.flags)})</h2>
{flags_table(report)}
</body></html>
"""


def write_report(course: Path, parts: list[str], folder: Path) -> Path:
    report = class_report(course, parts)
    folder.mkdir(parents=True, exist_ok=True)
    figures = {"scores": score_distribution_figure(report, folder / "score-distribution.png").name,
               "pass_rates": pass_rate_figure(report, folder / "pass-rates.png").name}
    index = folder / "index.html"
    index.write_text(page(report, figures))
    return index


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--course-dir", type=Path, default=None, help="the nbgrader course directory (default: autograde/)")
    parser.add_argument("--parts", default="", help="parts, by slug or number, comma-separated (default: every landed part)")
    parser.add_argument("--output", type=Path, default=None, help="the report's folder (default: COURSE/report)")
    args = parser.parse_args(argv)
    course = (args.course_dir or Path(os.environ.get("COURSE_DIR") or instructor.DEFAULT_COURSE)).resolve()
    wanted = [p for p in args.parts.replace(",", " ").split() if p]
    landed = landed_parts(built=source_notebook)
    parts = [slug for slug in landed if any(slug in instructor.part_slugs(p) for p in wanted)] or landed
    if not (course / "gradebook.db").is_file():
        print(f"no gradebook in {course}: run `make release` and `make autograde` first", file=sys.stderr)
        return 1
    index = write_report(course, parts, (args.output or course / "report").resolve())
    print(f"wrote {index} (open it in a browser)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
