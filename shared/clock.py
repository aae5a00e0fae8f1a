"""The course's clock: how many minutes each lesson takes, estimated from its master.

One model, in one place.  A lesson's minutes are

- **reading**: at ``words_per_minute``, the words of its markdown cells and the docstrings of the
  helpers its given code names (the functions and classes the part's set-up cell imports from
  ``shared``, each read once per part: the learner reads ``help(worker_gradients)`` before calling
  it); at ``code_words_per_minute`` (code is read more slowly than prose), the code it gives the
  learner to read in its graded cells (everything outside the solution regions: the signature,
  the docstring, the given bookkeeping and its comments);
- **writing**: the non-blank lines of its reference solution (between ``### BEGIN SOLUTION``
  and ``### END SOLUTION``) at ``minutes_per_line`` for a solution of ten lines, a minute a
  line that may grow with the solution's length as ``(lines / 10) ** (exponent - 1)`` (a long
  function has more places for a bug; once the given code was priced apart, the fit found no
  such growth: ``exponent`` 1);
- **overhead**: a fixed ``overhead`` for running the tests and reading what they say;

rounded to 5 minutes (at least 5).  A lesson's cells are those from its heading
``## 003 · ...`` to the next lesson's; the part's opening (before its first lesson) counts
for its first lesson, and the sections after its last lesson (the measurements, the
summary) for its last.  A section whose ``## `` heading says ``(optional`` is reading a learner
may skip: its words are not in the lesson's minutes, and the build writes its own reading time
under its heading instead.

The constants are fitted to the recorded walkthroughs (``docs/walkthrough.toml``): learners'
minutes for Parts 1 to 3, Parts 4 to 7 and the four longest lessons on an older text (its
``[walked]`` table), and a course developer's estimates, lesson by lesson, from a later walk of
lesson 035 and Part 7 on a newer text (its ``[walked_text.<commit>]`` table).  Each recorded
figure names the text it was made on, and the fit reads that text's features, not today's
masters: a lesson rewritten since a recording keeps its recorded minutes, and its estimate
follows its new text through the model.  ``python -m shared.clock --calibrate``
searches the grid of :func:`calibrate` for the constants whose *rounded* estimates of the
walked texts come closest to the recording (least squares of the relative errors), and prints
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

import ast
import itertools
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

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
    ``given_words``: the words of the code its graded cells give, outside the solution regions;
    ``helper_words``: the words of the docstrings of the ``shared`` helpers that code names, first named here
    in its part)."""
    words: int
    solution_lines: int
    optional_words: int = 0
    given_words: int = 0
    helper_words: int = 0


@dataclass(frozen=True)
class Model:
    words_per_minute: float
    minutes_per_line: float  # for a solution of ten lines
    exponent: float          # writing time grows as lines ** exponent
    overhead: float          # minutes per lesson for running its tests
    code_words_per_minute: float | None = None  # the given code (None: as fast as the text)

    def reading(self, features: Features) -> float:
        """The text and the helpers' docstrings (prose) at one speed, the given code at another (a
        whitespace-separated token of code counts as a word)."""
        code_speed = self.code_words_per_minute or self.words_per_minute
        return (features.words + features.helper_words) / self.words_per_minute + features.given_words / code_speed

    def writing(self, features: Features) -> float:
        lines = features.solution_lines
        return self.minutes_per_line * lines * (lines / 10) ** (self.exponent - 1)

    def minutes(self, features: Features) -> float:
        """The unrounded estimate."""
        return self.reading(features) + self.writing(features) + self.overhead

    def rounded(self, features: Features) -> int:
        return rounded(self.minutes(features))


#: The calibrated constants (``python -m shared.clock --calibrate`` finds them again). The text's speed is fitted,
#: not assumed: the recording's learners read the markdown faster than a careful 200 words a minute (they skim
#: what they know), and the given code far slower.
MODEL = Model(words_per_minute=390, minutes_per_line=0.24, exponent=1.0, overhead=2.0, code_words_per_minute=60)


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


def lesson_features(cells, read_module: Callable[[str], str] | None = None) -> dict[str, Features]:
    """Each lesson's features from a part's cells (objects with ``cell_type`` and ``source``), by code.

    ``read_module`` gives the source of a ``shared`` module by its dotted name (today's files by default), where
    the helpers' docstrings are read."""
    helpers = shared_imports(cells)
    read_module = read_module or read_shared_module
    seen: set[str] = set()  # the helpers already read in this part: a docstring is read once
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
        named = [name for name in named_helpers(cell, helpers) if name not in seen]
        seen.update(named)
        helper = sum(helper_docstring_words(helpers[name], name, read_module) for name in named)
        skipped = optional is not None
        now = opening if owner is None else counts[owner]
        now = Features(now.words + (0 if skipped else words), now.solution_lines + lines,
                       now.optional_words + (words if skipped else 0), now.given_words + given,
                       now.helper_words + helper)
        if owner is None:
            opening = now
        else:
            counts[owner] = now
    if counts:
        first = next(iter(counts))
        counts[first] = Features(counts[first].words + opening.words,
                                 counts[first].solution_lines + opening.solution_lines,
                                 counts[first].optional_words + opening.optional_words,
                                 counts[first].given_words + opening.given_words,
                                 counts[first].helper_words + opening.helper_words)
    return counts


def shared_imports(cells) -> dict[str, str]:
    """The names a part's code cells import from the helper package (``from shared.training import
    worker_gradients``), each with its module's dotted name."""
    names: dict[str, str] = {}
    for cell in cells:
        if cell.cell_type != "code":
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:  # a magic or a shell escape: not an import of ours
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("shared."):
                names.update({alias.asname or alias.name: node.module for alias in node.names})
    return names


def named_helpers(cell, helpers: dict[str, str]) -> list[str]:
    """The imported helpers that a graded cell's given code names, in the order it first names them: to call
    them, the learner reads their docstrings."""
    if cell.cell_type != "code" or "solution" not in (getattr(cell, "metadata", None) or {}).get("tags", ()):
        return []
    names = re.findall(r"[A-Za-z_]\w*", _SOLUTION.sub("", cell.source))
    return [name for name in dict.fromkeys(names) if name in helpers]


def read_shared_module(module: str) -> str:
    """Today's source of a module of the helper package, by its dotted name (``shared.training``)."""
    return (ROOT / (module.replace(".", "/") + ".py")).read_text()


def helper_docstring_words(module: str, name: str, read_module: Callable[[str], str] = read_shared_module) -> int:
    """The words of the docstring of function or class ``name`` of ``module``, following one re-export (``from
    .lesson_blocks import reduce_scatter_mean``) to where it is defined; 0 for anything else (a constant)."""
    tree = ast.parse(read_module(module))
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            return len((ast.get_docstring(node) or "").split())
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module \
                and any(alias.name == name and alias.asname is None for alias in node.names):
            return helper_docstring_words(f"shared.{node.module}", name, read_module)
    return 0


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
    """One recorded figure: the minutes of lessons ``codes`` on the walked text ``text`` (``""``: the ``[walked]``
    table's; else the commit named by a ``[walked_text.<commit>]`` table)."""
    what: str
    codes: tuple[str, ...]
    minutes: float
    text: str = ""


@dataclass(frozen=True)
class Walkthrough:
    """``docs/walkthrough.toml``: the recorded figures, the tolerances, and the walked texts' features."""
    recorded: list[Recorded]
    tolerance: dict
    walked: dict[str, Features]
    texts: dict[str, dict[str, Features]] = field(default_factory=dict)

    def features_of(self, item: Recorded) -> dict[str, Features]:
        """The features of the text ``item`` was recorded on."""
        return self.texts[item.text] if item.text else self.walked


def _features(item: dict) -> Features:
    return Features(int(item["words"]), int(item["solution_lines"]), int(item.get("optional_words", 0)),
                    int(item.get("given_words", 0)), int(item.get("helper_words", 0)))


def walkthrough(path: Path = WALKTHROUGH) -> Walkthrough:
    """The recording of ``docs/walkthrough.toml``."""
    import tomllib
    data = tomllib.loads(path.read_text())
    recorded = [Recorded(item["what"], tuple(f"{n:03d}" for n in range(int(item["first"]), int(item["last"]) + 1)),
                         float(item["minutes"]), item.get("text", ""))
                for item in data["recorded"]]
    walked = {code: _features(item) for code, item in data["walked"].items()}
    texts = {text: {code: _features(item) for code, item in table.items()}
             for text, table in data.get("walked_text", {}).items()}
    return Walkthrough(recorded, data["tolerance"], walked, texts)


def walked_table(features: dict[str, Features]) -> str:
    """The ``[walked]`` table's rows for ``features`` (to record a new walkthrough's text)."""
    return "".join(f'"{code}" = {{ words = {item.words}, solution_lines = {item.solution_lines}'
                   + (f", optional_words = {item.optional_words}" if item.optional_words else "")
                   + (f", given_words = {item.given_words}" if item.given_words else "")
                   + (f", helper_words = {item.helper_words}" if item.helper_words else "") + " }\n"
                   for code, item in features.items())


def compared(minutes: dict[str, int], recorded: list[Recorded],
             texts: dict[str, dict[str, int]] | None = None) -> list[tuple[Recorded, int]]:
    """Each recorded figure beside the estimates' sum over the same lessons (``minutes`` of the default text, or
    ``texts[item.text]`` for a figure recorded on another text)."""
    return [(item, sum((texts[item.text] if item.text else minutes)[code] for code in item.codes))
            for item in recorded]


def misfit(minutes: dict[str, int], recorded: list[Recorded],
           texts: dict[str, dict[str, int]] | None = None) -> float:
    """What the calibration minimises: the sum of squared relative errors against the recording."""
    return sum(((estimate - item.minutes) / item.minutes) ** 2
               for item, estimate in compared(minutes, recorded, texts))


def walk_estimates(record: Walkthrough, model: Model = MODEL) -> list[tuple[Recorded, int]]:
    """Each recorded figure beside the model's rounded estimate of the text it was recorded on."""
    return compared(estimates(record.walked, model), record.recorded,
                    {text: estimates(table, model) for text, table in record.texts.items()})


GRID = {
    "words_per_minute": range(100, 401, 10),
    "minutes_per_line": [n / 100 for n in range(2, 61, 2)],
    "exponent": (1.0, 1.25, 1.5, 1.75, 2.0),
    "overhead": [n / 4 for n in range(0, 25)],
    "code_words_per_minute": (40, 50, 60, 70, 80, 90, 100, 120, 140, 160, 200, 250),
}


def _grid_scores(features: dict[str, Features], recorded: list[Recorded], grid: dict,
                 texts: dict[str, dict[str, Features]]) -> tuple[np.ndarray, np.ndarray]:
    """Every model of the grid (rows in ``itertools.product`` order, one column per field of the grid) and its
    misfit, computed for all models at once (the grid holds about a million)."""
    import numpy as np
    values = np.array(list(itertools.product(*grid.values())), dtype=float)
    column = {name: values[:, index:index + 1] for index, name in enumerate(grid)}
    default = Model(1.0, 0.0, 1.0, 0.0)
    wpm = column["words_per_minute"]
    code_wpm = column.get("code_words_per_minute", wpm)
    exponent = column.get("exponent", np.full_like(wpm, default.exponent))
    pairs = sorted({(item.text, code) for item in recorded for code in item.codes})
    table = {text: texts[text] if text else features for text, _ in pairs}
    words, helpers, given, lines = (np.array([[getattr(table[text][code], name) for text, code in pairs]], float)
                                    for name in ("words", "helper_words", "given_words", "solution_lines"))
    scores = np.zeros(len(values))
    for chunk in range(0, len(values), 50_000):
        rows = slice(chunk, chunk + 50_000)
        minutes = ((words + helpers) / wpm[rows] + given / code_wpm[rows]) \
            + column["minutes_per_line"][rows] * lines * (lines / 10) ** (exponent[rows] - 1) + column["overhead"][rows]
        shown = np.maximum(STEP, STEP * np.floor(minutes / STEP + 0.5))
        for item in recorded:
            estimate = sum(shown[:, pairs.index((item.text, code))] for code in item.codes)
            scores[rows] += ((estimate - item.minutes) / item.minutes) ** 2
    return values, scores


def best_fits(features: dict[str, Features], recorded: list[Recorded], grid: dict = GRID,
              texts: dict[str, dict[str, Features]] | None = None) -> tuple[list[Model], float]:
    """Every model of the grid whose rounded estimates fit the recording best (in grid order), and their misfit:
    the fits the recording cannot tell apart. ``texts``: the features of the other walked texts, by name."""
    values, scores = _grid_scores(features, recorded, grid, texts or {})
    best = float(scores.min())
    fits = [Model(**{name: (int(value) if float(value).is_integer() and name.endswith("per_minute") else float(value))
                     for name, value in zip(grid, row)})
            for row in values[scores <= best + 1e-12]]
    return fits, best


def calibrate(features: dict[str, Features], recorded: list[Recorded], grid: dict = GRID,
              texts: dict[str, dict[str, Features]] | None = None) -> tuple[Model, float]:
    """The model of the grid whose rounded estimates fit the recording best (the first of equals, in grid order)."""
    fits, score = best_fits(features, recorded, grid, texts)
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
    print("lesson  words  helper words  given words  solution lines  reading  writing  overhead  estimate  (walked)")
    for code, item in features.items():
        on_walks = [f"{walked[code]} min"] if code in walked else []
        on_walks += [f"{estimates(table)[code]} min on {text}" for text, table in record.texts.items() if code in table]
        print(f"  {code}  {item.words:5d}  {item.helper_words:12d}  {item.given_words:11d}  {item.solution_lines:14d}  "
              f"{MODEL.reading(item):7.1f}  {MODEL.writing(item):7.1f}  {MODEL.overhead:8.2f}  {minutes[code]:4d} min  "
              + (f"({', '.join(on_walks)})" if on_walks else "(written since)"))
    optional = sum(item.optional_words for item in features.values())
    if optional:
        print(f"optional sections (not in the minutes): {optional} words, {optional_line(optional)}")
    print(f"course today: {format_minutes(sum(minutes.values()))} ({sum(minutes.values())} min, unrounded "
          f"{sum(MODEL.minutes(item) for item in features.values()):.1f}); "
          f"the older walked text: {format_minutes(sum(walked.values()))}")
    for item, estimate in walk_estimates(record):
        print(f"recorded {item.what}{f' (on {item.text})' if item.text else ''}: {item.minutes:g} min, the model on "
              f"the walked text {estimate} min ({(estimate - item.minutes) / item.minutes:+.0%}); today "
              f"{sum(minutes[c] for c in item.codes)} min")
    print(f"misfit (sum of squared relative errors): "
          f"{sum(((e - i.minutes) / i.minutes) ** 2 for i, e in walk_estimates(record)):.4f}")
    if "--calibrate" in argv:
        equals, score = best_fits(record.walked, record.recorded, texts=record.texts)
        print(f"best model on the grid: {equals[0]}, misfit {score:.4f}; {len(equals)} models fit as well "
              f"(the 5-minute rounding hides their differences)"
              + (", MODEL among them" if MODEL in equals else ", MODEL NOT among them: calibrate again"))
        for other in equals:
            print(f"  {other}: today {format_minutes(sum(estimates(features, other).values()))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
