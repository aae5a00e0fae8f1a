"""The course's clock: how many minutes each lesson takes, estimated from its master.

One model, in one place.  A lesson's minutes are

- **reading**: the words of its markdown cells, and of the code it gives the learner to read in its
  graded cells (everything outside the solution regions: the signature, the docstring, the given
  bookkeeping and its comments), at ``words_per_minute``;
- **writing**: the non-blank lines of its reference solution (between ``### BEGIN SOLUTION``
  and ``### END SOLUTION``) at ``minutes_per_line`` for a solution of ten lines, a minute a
  line that grows with the solution's length as ``(lines / 10) ** (exponent - 1)`` (a long
  function has more places for a bug: in the recording, the lessons of 28 to 72 lines took
  about half a minute a line, the short ones far less);
- **overhead**: a fixed ``overhead`` for running the tests and reading what they say;

rounded to 5 minutes (at least 5).  A lesson's cells are those from its heading
``## 003 · ...`` to the next lesson's; the part's opening (before its first lesson) counts
for its first lesson, and the sections after its last lesson (the measurements, the
summary) for its last.  A section whose ``## `` heading says ``(optional`` is reading a learner
may skip: its words are not in the lesson's minutes, and the build writes its own reading time
under its heading instead.

The constants are fitted to a recorded walkthrough (``docs/walkthrough.toml``): learners'
minutes for Parts 1 to 3, Parts 4 to 7 and the four longest lessons, and the features of the
text they walked through (its ``[walked]`` table).  The fit is made on those features, not on
today's masters: a lesson rewritten since the recording keeps its recorded minutes, and its
estimate follows its new text through the model.  ``python -m shared.clock --calibrate``
searches the grid of :func:`calibrate` for the constants whose *rounded* estimates of the
walked text come closest to the recording (least squares of the relative errors), and prints
them; ``python -m shared.clock`` prints every lesson's features and minutes today, beside the
walked text's, and the comparison with the recording.  ``tests/test_clock.py`` holds the
model to the recording within its stated tolerances, and to nothing else: the course's total is
what the model says of today's text, never fitted to a budget.

The estimates are stored once, in ``shared/lesson_minutes.py``, which ``make build``
writes from the masters with this model (``Lesson.minutes`` reads it; a rewritten lesson
makes it stale, and ``tests/test_build.py`` says so); the build also writes each lesson's
minutes under its heading and each part's total in its opening.  The progress panel and
``make progress`` add up the minutes of the lessons not passed yet.
"""

from __future__ import annotations

import itertools
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MASTERS = ROOT / "autograde" / "parts"
WALKTHROUGH = ROOT / "docs" / "walkthrough.toml"
STEP = 5  # the clock shows whole multiples of 5 minutes

_HEADING = re.compile(r"^## (\d{3}) · ", re.MULTILINE)
_SECTION = re.compile(r"^## .*$", re.MULTILINE)
_OPTIONAL = "(optional"
_SOLUTION = re.compile(r"^[ \t]*### BEGIN SOLUTION[^\n]*\n(.*?)^[ \t]*### END SOLUTION", re.MULTILINE | re.DOTALL)
#: What the build writes under a lesson's heading and in a part's opening (a master must not hold it).
CLOCK_LINE = re.compile(r"^\*(About \d.*|\d+ lessons?, about .*|Optional, about .*)\*$", re.MULTILINE)


@dataclass(frozen=True)
class Features:
    """What the model reads of a lesson: the words of its text and the lines of its solution
    (``optional_words``: the words of its optional sections, which the minutes leave out;
    ``given_words``: the words of the code its graded cells give, outside the solution regions)."""
    words: int
    solution_lines: int
    optional_words: int = 0
    given_words: int = 0


@dataclass(frozen=True)
class Model:
    words_per_minute: float
    minutes_per_line: float  # for a solution of ten lines
    exponent: float          # writing time grows as lines ** exponent
    overhead: float          # minutes per lesson for running its tests

    def reading(self, features: Features) -> float:
        """The text and the given code, read at one speed (a whitespace-separated token of code counts as a word)."""
        return (features.words + features.given_words) / self.words_per_minute

    def writing(self, features: Features) -> float:
        lines = features.solution_lines
        return self.minutes_per_line * lines * (lines / 10) ** (self.exponent - 1)

    def minutes(self, features: Features) -> float:
        """The unrounded estimate."""
        return self.reading(features) + self.writing(features) + self.overhead

    def rounded(self, features: Features) -> int:
        return rounded(self.minutes(features))


#: The calibrated constants (``python -m shared.clock --calibrate`` finds them again).
MODEL = Model(words_per_minute=250, minutes_per_line=0.26, exponent=1.25, overhead=2.0)


def rounded(minutes: float) -> int:
    """To the nearest multiple of 5 minutes (halves up), at least 5."""
    return max(STEP, STEP * math.floor(minutes / STEP + 0.5))


# --------------------------------------------------------------------------
# features of the masters
# --------------------------------------------------------------------------

def _optional_headings(cells) -> list[int | None]:
    """For each cell, the index of the optional section's heading cell it belongs to, or None.

    A markdown cell is judged by its first ``## `` heading; a cell without one belongs to the section above."""
    owners: list[int | None] = []
    current: int | None = None
    for index, cell in enumerate(cells):
        section = _SECTION.search(cell.source) if cell.cell_type == "markdown" else None
        if section:
            current = index if _OPTIONAL in section.group(0) else None
        owners.append(current)
    return owners


def lesson_features(cells) -> dict[str, Features]:
    """Each lesson's features from a part's cells (objects with ``cell_type`` and ``source``), by code."""
    owner: str | None = None
    opening = Features(0, 0)
    counts: dict[str, Features] = {}
    for cell, optional in zip(cells, _optional_headings(cells)):
        if cell.cell_type == "markdown":
            match = _HEADING.search(cell.source)
            if match:
                owner = match.group(1)
                counts.setdefault(owner, Features(0, 0))
        words = len(cell.source.split()) if cell.cell_type == "markdown" else 0
        lines = sum(1 for block in _SOLUTION.findall(cell.source) for line in block.splitlines() if line.strip()) \
            if cell.cell_type == "code" else 0
        given = given_words(cell)
        skipped = optional is not None
        now = opening if owner is None else counts[owner]
        now = Features(now.words + (0 if skipped else words), now.solution_lines + lines,
                       now.optional_words + (words if skipped else 0), now.given_words + given)
        if owner is None:
            opening = now
        else:
            counts[owner] = now
    if counts:
        first = next(iter(counts))
        counts[first] = Features(counts[first].words + opening.words,
                                 counts[first].solution_lines + opening.solution_lines,
                                 counts[first].optional_words + opening.optional_words,
                                 counts[first].given_words + opening.given_words)
    return counts


def given_words(cell) -> int:
    """The words of the code a graded cell (tagged ``solution``) gives the learner to read: everything but its
    solution regions (which the learner writes), comments and docstrings included; 0 for any other cell."""
    if cell.cell_type != "code" or "solution" not in (getattr(cell, "metadata", None) or {}).get("tags", ()):
        return 0
    return len(_SOLUTION.sub("", cell.source).split())


def optional_sections(cells) -> dict[int, int]:
    """The words of each optional section, by the index of the cell that holds its heading."""
    sections: dict[int, int] = {}
    for cell, heading in zip(cells, _optional_headings(cells)):
        if heading is not None and cell.cell_type == "markdown":
            sections[heading] = sections.get(heading, 0) + len(cell.source.split())
    return sections


def read_master(master: Path):
    """A master's notebook (jupytext percent format)."""
    import jupytext  # only the build and the maintainer's tools read masters
    return jupytext.read(master, fmt="py:percent")


def course_features(masters: Path = MASTERS) -> dict[str, Features]:
    """Every lesson's features, from every part's master, by code."""
    features: dict[str, Features] = {}
    for master in sorted(masters.glob("[0-9][0-9]_*/master.py")):
        features.update(lesson_features(read_master(master).cells))
    return features


def estimates(features: dict[str, Features], model: Model = MODEL) -> dict[str, int]:
    """Each lesson's rounded minutes."""
    return {code: model.rounded(item) for code, item in features.items()}


# --------------------------------------------------------------------------
# what the notebooks and the panel say
# --------------------------------------------------------------------------

def format_minutes(minutes: int) -> str:
    """``55 min``, ``1 h 5 min``, ``2 h``."""
    hours, rest = divmod(int(minutes), 60)
    if not hours:
        return f"{rest} min"
    return f"{hours} h" + (f" {rest} min" if rest else "")


def time_left(minutes: int) -> str:
    """``about 55 min left``, or ``nothing left`` once every lesson has passed."""
    return f"about {format_minutes(minutes)} left" if minutes else "nothing left"


def lesson_line(minutes: int) -> str:
    """The line under a lesson's heading: ``*About 15 minutes.*``."""
    return f"*About {minutes} minutes.*" if minutes < 60 else f"*About {format_minutes(minutes)}.*"


def optional_line(words: int) -> str:
    """The line under an optional section's heading: ``*Optional, about 5 minutes: not in the clock.*``."""
    minutes = rounded(MODEL.reading(Features(words, 0)))
    return f"*Optional, about {minutes} minutes: not in the clock.*"


def with_optional_line(markdown: str, words: int) -> str:
    """An optional section's heading cell with :func:`optional_line` under the heading."""
    heading = _SECTION.search(markdown)  # a cell is judged by its first section heading, as everywhere here
    return f"{markdown[:heading.end()]}\n\n{optional_line(words)}{markdown[heading.end():]}"


def part_line(lessons: int, minutes: int) -> str:
    """The line in a part's opening: ``*6 lessons, about 1 h 10 min.*``."""
    return f"*{lessons} lesson{'s' if lessons != 1 else ''}, about {format_minutes(minutes)}.*"


def minutes_module(minutes: dict[str, int]) -> str:
    """The text of ``shared/lesson_minutes.py``, the one stored copy of the estimates."""
    rows = "".join(f'    "{code}": {value},\n' for code, value in sorted(minutes.items()))
    return ('"""Each lesson\'s estimated minutes (``Lesson.minutes``), by the model of :mod:`shared.clock`.\n\n'
            "GENERATED by `make build` from the masters (autograde/parts/*/master.py): do not edit by hand.\n"
            '"""\n\n'
            f"MINUTES = {{\n{rows}}}\n")


# --------------------------------------------------------------------------
# the recording, and the calibration
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class Recorded:
    what: str
    codes: tuple[str, ...]
    minutes: float


@dataclass(frozen=True)
class Walkthrough:
    """``docs/walkthrough.toml``: the recorded figures, the tolerances, and the walked text's features."""
    recorded: list[Recorded]
    tolerance: dict
    walked: dict[str, Features]


def walkthrough(path: Path = WALKTHROUGH) -> Walkthrough:
    """The recording of ``docs/walkthrough.toml``."""
    import tomllib
    data = tomllib.loads(path.read_text())
    recorded = [Recorded(item["what"], tuple(f"{n:03d}" for n in range(int(item["first"]), int(item["last"]) + 1)),
                         float(item["minutes"]))
                for item in data["recorded"]]
    walked = {code: Features(int(item["words"]), int(item["solution_lines"]), int(item.get("optional_words", 0)),
                             int(item.get("given_words", 0)))
              for code, item in data["walked"].items()}
    return Walkthrough(recorded, data["tolerance"], walked)


def walked_table(features: dict[str, Features]) -> str:
    """The ``[walked]`` table's rows for ``features`` (to record a new walkthrough's text)."""
    return "".join(f'"{code}" = {{ words = {item.words}, solution_lines = {item.solution_lines}'
                   + (f", optional_words = {item.optional_words}" if item.optional_words else "")
                   + (f", given_words = {item.given_words}" if item.given_words else "") + " }\n"
                   for code, item in features.items())


def compared(minutes: dict[str, int], recorded: list[Recorded]) -> list[tuple[Recorded, int]]:
    """Each recorded figure beside the estimates' sum over the same lessons."""
    return [(item, sum(minutes[code] for code in item.codes)) for item in recorded]


def misfit(minutes: dict[str, int], recorded: list[Recorded]) -> float:
    """What the calibration minimises: the sum of squared relative errors against the recording."""
    return sum(((estimate - item.minutes) / item.minutes) ** 2 for item, estimate in compared(minutes, recorded))


GRID = {
    "words_per_minute": range(100, 401, 10),
    "minutes_per_line": [n / 100 for n in range(2, 61, 2)],
    "exponent": (1.0, 1.25, 1.5, 1.75, 2.0),
    "overhead": [n / 4 for n in range(0, 25)],
}


def best_fits(features: dict[str, Features], recorded: list[Recorded], grid: dict = GRID) -> tuple[list[Model], float]:
    """Every model of the grid whose rounded estimates fit the recording best (in grid order), and their misfit:
    the fits the recording cannot tell apart."""
    fits: list[Model] = []
    best = math.inf
    for values in itertools.product(*grid.values()):
        model = Model(**dict(zip(grid, values)))
        score = misfit(estimates(features, model), recorded)
        if score < best - 1e-12:
            fits, best = [model], score
        elif score <= best + 1e-12:
            fits.append(model)
    return fits, best


def calibrate(features: dict[str, Features], recorded: list[Recorded], grid: dict = GRID) -> tuple[Model, float]:
    """The model of the grid whose rounded estimates fit the recording best (the first of equals, in grid order)."""
    fits, score = best_fits(features, recorded, grid)
    return fits[0], score


def main(argv: list[str] | None = None) -> int:
    """``python -m shared.clock [--calibrate | --walked]``: the estimates, and how the model fits the recording."""
    argv = sys.argv[1:] if argv is None else argv
    features = course_features()
    if "--walked" in argv:
        print(walked_table(features), end="")
        return 0
    record = walkthrough()
    minutes, walked = estimates(features), estimates(record.walked)
    print(f"model: {MODEL}")
    print("lesson  words  given words  solution lines  reading  writing  overhead  estimate  (walked text)")
    for code, item in features.items():
        print(f"  {code}  {item.words:5d}  {item.given_words:11d}  {item.solution_lines:14d}  {MODEL.reading(item):7.1f}  "
              f"{MODEL.writing(item):7.1f}  {MODEL.overhead:8.2f}  {minutes[code]:4d} min  "
              + (f"({walked[code]} min)" if code in walked else "(written since)"))
    optional = sum(item.optional_words for item in features.values())
    if optional:
        print(f"optional sections (not in the minutes): {optional} words, {optional_line(optional)}")
    print(f"course today: {format_minutes(sum(minutes.values()))} ({sum(minutes.values())} min, unrounded "
          f"{sum(MODEL.minutes(item) for item in features.values()):.1f}); "
          f"the walked text: {format_minutes(sum(walked.values()))}")
    for item, estimate in compared(walked, record.recorded):
        print(f"recorded {item.what}: {item.minutes:g} min, the model on the walked text {estimate} min "
              f"({(estimate - item.minutes) / item.minutes:+.0%}); today {sum(minutes[c] for c in item.codes)} min")
    print(f"misfit (sum of squared relative errors): {misfit(walked, record.recorded):.4f}")
    if "--calibrate" in argv:
        equals, score = best_fits(record.walked, record.recorded)
        print(f"best model on the grid: {equals[0]}, misfit {score:.4f}; {len(equals)} models fit as well "
              f"(the 5-minute rounding hides their differences)"
              + (", MODEL among them" if MODEL in equals else ", MODEL NOT among them: calibrate again"))
        for other in equals:
            print(f"  {other}: today {format_minutes(sum(estimates(features, other).values()))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
