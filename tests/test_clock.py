"""The clock: each lesson's estimated minutes, what the notebooks say, and the time left.

- the stored minutes (shared/lesson_minutes.py) are what the model (shared/clock.py) computes
  from the current masters, so a rewritten lesson cannot keep an old estimate;
- the model's estimates of the walked text (docs/walkthrough.toml's ``[walked]`` features) agree
  with the recorded walkthrough within the tolerances it states; today's text is estimated by
  the same model, so a lesson rewritten since keeps an honest estimate without a new recording;
- every generated notebook says each lesson's minutes under its heading and the part's total
  in its opening, and the panel and ``make progress`` add up the minutes of the lessons not
  passed, read here from the notebooks' own lines (not from the code that sums them).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from types import SimpleNamespace

import pytest

from course import ROOT, read, solved_path, source_path, student_path, tool
from grading.course import landed_parts
from shared import clock, lesson_minutes, progress
from shared.lessons import LESSONS, PARTS, lesson, lessons_of

LESSON_LINE = re.compile(r"^## (\d{3}) · [^\n]*\n\n\*About (\d+) minutes\.\*$", re.MULTILINE)
PART_LINE = re.compile(r"\A# Part [^\n]*\n\n\*(\d+) lessons, about ([^*]+)\.\*")
TIME = re.compile(r"about (?:(\d+) h)? ?(?:(\d+) min)? left")


def cell(kind: str, source: str) -> SimpleNamespace:
    """A notebook cell as the clock reads it."""
    return SimpleNamespace(cell_type=kind, source=source)


def minutes_of(text: str) -> list[int]:
    """Every "about 1 h 5 min left" of a text, in minutes."""
    return [int(hours or 0) * 60 + int(mins or 0) for hours, mins in TIME.findall(text)]


def notebook_minutes(slug: str) -> dict[str, int]:
    """Each lesson's minutes as the learner's notebook states them under its heading."""
    text = "\n".join(cell.source for cell in read(student_path(slug)).cells if cell.cell_type == "markdown")
    return {code: int(minutes) for code, minutes in LESSON_LINE.findall(text)}


# --------------------------------------------------------------------------
# one source of truth, and honest to the recording
# --------------------------------------------------------------------------

def test_the_stored_minutes_are_what_the_model_computes_from_the_current_masters():
    computed = clock.estimates(clock.course_features())
    assert list(computed) == [item.code for item in LESSONS]
    assert lesson_minutes.MINUTES == computed, "a lesson changed: run `make build`"
    assert all(item.minutes == computed[item.code] for item in LESSONS)
    assert all(minutes >= 5 and minutes % 5 == 0 for minutes in computed.values())


def test_a_rewritten_lesson_gets_a_new_estimate(tmp_path):
    """Three pages more of text in lesson 003 (1,350 words: 5 minutes at 270 a minute) shows in its estimate
    and in no other lesson's, so the test above fails until `make build` stores it."""
    shutil.copytree(ROOT / "autograde" / "parts", tmp_path / "parts",
                    ignore=shutil.ignore_patterns("__pycache__", "cases.py"))
    master = tmp_path / "parts" / "01_mlp_core" / "master.py"
    text = master.read_text()
    padding = "".join("# " + "word " * 15 + "\n" for _ in range(90))  # 1,350 words
    head, sep, rest = text.partition("# ## 003 · Linear forward\n")
    master.write_text(head + sep + "#\n" + padding + rest)
    before, after = clock.course_features(), clock.course_features(tmp_path / "parts")
    assert after["003"].words == before["003"].words + 1350
    assert {code for code in before if after[code] != before[code]} == {"003"}
    assert clock.MODEL.minutes(after["003"]) - clock.MODEL.minutes(before["003"]) == pytest.approx(
        1350 / clock.MODEL.words_per_minute)
    assert clock.estimates(after)["003"] >= lesson("003").minutes + 5


def test_the_model_agrees_with_the_recorded_walkthrough_on_the_walked_text():
    record = clock.walkthrough()
    recorded, tolerance = record.recorded, record.tolerance
    assert tolerance == {"span_fraction": 0.15, "lesson_minutes": 5, "course_fraction": 0.10}
    codes = [item.code for item in LESSONS]
    assert list(record.walked) == codes[:len(record.walked)]  # lessons written since are not in it
    minutes = clock.estimates(record.walked)
    spans = [item for item in recorded if len(item.codes) > 1]
    singles = [item for item in recorded if len(item.codes) == 1]
    assert len(spans) == 2 and len(singles) == 4
    for item in spans:
        estimate = sum(minutes[code] for code in item.codes)
        assert abs(estimate - item.minutes) <= tolerance["span_fraction"] * item.minutes, (item.what, estimate)
    for item in singles:
        estimate = minutes[item.codes[0]]
        assert abs(estimate - item.minutes) <= tolerance["lesson_minutes"], (item.what, estimate)
    # the two spans are the whole course, once each
    assert sorted(code for item in spans for code in item.codes) == sorted(minutes)
    course = sum(item.minutes for item in spans)
    assert abs(sum(minutes.values()) - course) <= tolerance["course_fraction"] * course


def test_the_walked_table_is_what_the_clock_counts():
    """`python -m shared.clock --walked` writes the rows the walkthrough reads back, so recording a new
    walkthrough cannot mistype its text's features."""
    features = {"001": clock.Features(567, 9, given_words=64),
                "040": clock.Features(2396, 73, optional_words=794, given_words=661)}
    import tomllib
    assert {code: clock.Features(**item) for code, item in tomllib.loads(clock.walked_table(features)).items()} \
        == features


def test_the_walkthrough_holds_the_recorded_figures():
    figures = {(item.codes[0], item.codes[-1]): item.minutes for item in clock.walkthrough().recorded}
    assert figures == {("001", "018"): 115, ("019", "040"): 222, ("040", "040"): 45, ("035", "035"): 25,
                       ("039", "039"): 18, ("028", "028"): 15}


def test_the_longest_recorded_lessons_are_the_longest_estimates_of_the_walked_text():
    minutes = clock.estimates(clock.walkthrough().walked)
    others = [value for code, value in minutes.items() if code not in ("040", "035")]
    assert minutes["040"] > minutes["035"] > max(others)


def test_the_model_reads_text_and_solution_lines_of_each_lesson():
    cells = [
        cell("markdown", "# Part 9 · Opening\n\nnine words of the opening, and three more here"),
        cell("code", "import numpy as np"),
        cell("markdown", "## 101 · First\n\nfive words in this lesson"),
        cell("code", "def f(x):\n    ### BEGIN SOLUTION\n    y = x\n\n    return y\n    ### END SOLUTION\n"),
        cell("markdown", "## 102 · Second\n\nfour words here now"),
        cell("code", "def g(x):\n    ### BEGIN SOLUTION\n    return x\n    ### END SOLUTION\n# not a solution line\n"),
        cell("markdown", "## Part summary\n\nsix words after the last lesson"),
    ]
    features = clock.lesson_features(cells)
    # words are what whitespace separates, headings' included: the opening (5 + 9) counts for the first
    # lesson (4 + 5), the summary (3 + 6) for the last (4 + 4)
    assert features == {"101": clock.Features(14 + 9, 2), "102": clock.Features(8 + 9, 1)}
    model = clock.Model(words_per_minute=100, minutes_per_line=0.5, exponent=2.0, overhead=3.0)
    # 23 words at 100 a minute, 2 lines at 0.5 a line times 2/10, 3 minutes
    assert model.minutes(features["101"]) == pytest.approx(0.23 + 0.2 + 3.0)


def test_the_model_reads_the_code_a_graded_cell_gives():
    """The signature, docstring, given bookkeeping and comments of a graded cell are read: their words count,
    at the text's speed; the learner's regions count as lines to write, and other code cells not at all."""
    graded = SimpleNamespace(cell_type="code", metadata={"tags": ["solution"]},
                             source="def f(x):\n    \"\"\"Four words of docstring.\"\"\"\n"
                                    "    # Given · more\n    ### BEGIN SOLUTION\n    return x\n    ### END SOLUTION\n")
    cells = [cell("markdown", "## 101 · First\n\nfive words in this lesson"), graded,
             cell("code", "print('a demonstration is not given code to read')")]
    features = clock.lesson_features(cells)
    # def f(x): (2) + the docstring (4) + the comment (4): 10 given words; 1 line to write
    assert features == {"101": clock.Features(9, 1, given_words=10)}
    model = clock.Model(words_per_minute=100, minutes_per_line=0.5, exponent=1.0, overhead=0.0)
    assert model.minutes(features["101"]) == pytest.approx((9 + 10) / 100 + 0.5)


def test_given_code_of_the_walked_text_is_recorded_and_priced():
    """The walked text's given code is in its table (lesson 040 gave 661 words of it then), and today's
    estimate of 040 pays for what it gives now (more than 1,000 words: the loop's bookkeeping, plain Adam)."""
    walked, today = clock.walkthrough().walked, clock.course_features()
    assert walked["040"].given_words == 661 and today["040"].given_words > 1000
    assert clock.MODEL.reading(today["040"]) > clock.MODEL.reading(clock.Features(today["040"].words, 0))


def test_an_optional_section_is_counted_apart_from_the_lessons_minutes():
    """The words from a heading that says "(optional" to the next heading are the learner's to skip: not in
    the lesson's minutes, but counted, and the build states their reading time under that heading."""
    cells = [
        cell("markdown", "## 101 · First\n\nfive words in this lesson"),
        cell("code", "def f(x):\n    ### BEGIN SOLUTION\n    return x\n    ### END SOLUTION\n"),
        cell("markdown", "## Going further (optional)\n\nseven words here"),
        cell("code", "print('a code cell in between')"),
        cell("markdown", "and four words more"),
        cell("markdown", "## Part summary\n\nsix words after the last lesson"),
    ]
    features = clock.lesson_features(cells)
    assert features == {"101": clock.Features(9 + 9, 1, optional_words=7 + 4)}
    assert clock.optional_sections(cells) == {2: 11}
    line = clock.optional_line(11)
    assert clock.CLOCK_LINE.fullmatch(line) and line.startswith("*Optional, about 5 minutes")
    assert clock.with_optional_line(cells[2].source, 11) == f"## Going further (optional)\n\n{line}\n\nseven words here"
    assert clock.optional_line(20 * clock.MODEL.words_per_minute) == "*Optional, about 20 minutes: not in the clock.*"


@pytest.mark.parametrize("slug", landed_parts())
def test_every_optional_section_states_its_reading_time_and_no_lesson_counts_it(slug):
    """An optional section of a generated notebook states its own minutes, from the master's words."""
    master = clock.read_master(ROOT / "autograde" / "parts" / slug / "master.py")
    sections = clock.optional_sections(master.cells)
    assert sum(sections.values()) == sum(item.optional_words for item in clock.lesson_features(master.cells).values())
    for path in (source_path(slug), student_path(slug), solved_path(slug)):
        stated = re.findall(r"^## [^\n]*\(optional[^\n]*\n\n(\*Optional, about \d+ minutes[^\n]*)$",
                            "\n".join(c.source for c in read(path).cells if c.cell_type == "markdown"), re.MULTILINE)
        assert stated == [clock.optional_line(words) for words in sections.values()]


def test_lesson_040s_optional_section_is_not_in_its_minutes():
    features = clock.course_features()["040"]
    assert features.optional_words > 500  # "Beyond the simulator": the real processes of the torch extra
    assert lesson("040").minutes == clock.MODEL.rounded(clock.Features(features.words, features.solution_lines,
                                                                       given_words=features.given_words))


@pytest.mark.parametrize("minutes, shown", [(0.0, 5), (2.4, 5), (7.49, 5), (7.5, 10), (12.6, 15), (44.9, 45),
                                            (47.5, 50)])
def test_estimates_are_rounded_to_five_minutes(minutes, shown):
    assert clock.rounded(minutes) == shown


@pytest.mark.parametrize("minutes, text", [(5, "5 min"), (55, "55 min"), (60, "1 h"), (65, "1 h 5 min"),
                                           (345, "5 h 45 min")])
def test_minutes_are_written_in_hours_and_minutes(minutes, text):
    assert clock.format_minutes(minutes) == text
    assert minutes_of(f"about {text} left") == [minutes]


def test_calibration_finds_the_constants_that_made_a_recording():
    """A recording made by a known model on the grid is fitted exactly, and the search prefers it to its
    neighbours (the real recording's fit: `python -m shared.clock --calibrate`)."""
    features = {f"{n:03d}": clock.Features(words=150 * n, solution_lines=3 * n) for n in range(1, 13)}
    known = clock.Model(words_per_minute=200, minutes_per_line=0.3, exponent=1.5, overhead=2.0)
    minutes = clock.estimates(features, known)
    recorded = [clock.Recorded("first half", tuple(f"{n:03d}" for n in range(1, 7)),
                               sum(minutes[f"{n:03d}"] for n in range(1, 7))),
                clock.Recorded("second half", tuple(f"{n:03d}" for n in range(7, 13)),
                               sum(minutes[f"{n:03d}"] for n in range(7, 13)))]
    recorded += [clock.Recorded(f"lesson {code}", (code,), minutes[code]) for code in ("010", "011", "012")]
    grid = {"words_per_minute": (100, 200, 400), "minutes_per_line": (0.1, 0.3, 0.9), "exponent": (1.0, 1.5, 2.0),
            "overhead": (0.0, 2.0, 6.0)}
    model, score = clock.calibrate(features, recorded, grid)
    assert score == 0 and clock.misfit(clock.estimates(features, model), recorded) == 0
    assert clock.misfit(clock.estimates(features, clock.Model(100, 0.3, 1.5, 2.0)), recorded) > 0


# --------------------------------------------------------------------------
# what the notebooks say
# --------------------------------------------------------------------------

@pytest.mark.parametrize("slug", landed_parts())
def test_every_notebook_states_each_lessons_minutes_and_the_parts_total(slug):
    stated = notebook_minutes(slug)
    assert stated == {item.code: item.minutes for item in lessons_of(slug)}
    for path in (source_path(slug), student_path(slug), solved_path(slug)):
        opening = read(path).cells[0].source
        match = PART_LINE.match(opening)
        assert match, opening[:200]
        assert int(match.group(1)) == len(stated)
        assert minutes_of(f"about {match.group(2)} left") == [sum(stated.values())]


@pytest.mark.parametrize("slug", landed_parts())
def test_no_master_writes_the_clock_by_hand(slug):
    master = (ROOT / "autograde" / "parts" / slug / "master.py").read_text()
    assert not re.search(r"\*About \d+ minutes|lessons, about|\*Optional, about", master)


def test_a_master_that_writes_the_clock_by_hand_stops_the_build(tmp_path):
    build = tool("build")
    master = tmp_path / "99_demo.py"
    master.write_text('# %% [markdown]\n# ## 003 · Linear forward\n#\n# *About 20 minutes.*\n\n'
                      '# %% tags=["solution"]\ndef linear_forward(x, W, b):\n    return x @ W + b\n')
    with pytest.raises(build.BuildError, match="is the build's to write"):
        build.source_notebook(master)


# --------------------------------------------------------------------------
# time left: the panel and `make progress`
# --------------------------------------------------------------------------

def test_the_panel_shows_the_minutes_of_the_lessons_not_passed(progress_file):
    stated = {code: minutes for slug in landed_parts() for code, minutes in notebook_minutes(slug).items()}
    assert len(stated) == len(LESSONS)
    for code in ("025", "026", "028", "003"):
        progress.lesson_passed(code)
    progress.record_failure("003")  # failed since: not passed
    part_left = sum(stated[code] for code in ("027", "029", "030"))
    course_left = sum(stated.values()) - stated["025"] - stated["026"] - stated["028"]
    panel = progress.ProgressPanel("05_data_parallel")
    text = repr(panel).splitlines()[0]
    assert text.startswith("Part 5 · Data parallel: 15/30 XP · about ")
    assert minutes_of(text) == [part_left, course_left]
    assert f"(course: 15/{5 * len(LESSONS)} XP, about " in text
    assert minutes_of(panel._repr_html_()) == [part_left, course_left]


def test_a_part_with_every_lesson_passed_has_nothing_left(progress_file):
    for item in lessons_of("02_gradient_accumulation"):
        progress.lesson_passed(item.code)
    panel = repr(progress.ProgressPanel("02_gradient_accumulation")).splitlines()[0]
    assert "20/20 XP · nothing left" in panel
    stated = {code: minutes for slug in landed_parts() for code, minutes in notebook_minutes(slug).items()}
    assert minutes_of(panel) == [sum(stated.values()) - sum(notebook_minutes("02_gradient_accumulation").values())]


def test_make_progress_prints_each_parts_time_left_and_the_total(progress_file):
    progress.lesson_passed("040")
    out = subprocess.run([sys.executable, "-m", "shared.progress"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    stated = {slug: notebook_minutes(slug) for slug in landed_parts()}
    for part in PARTS:
        line = next(line for line in lines if line.startswith(f"Part {part.number} · "))
        left = sum(m for code, m in stated[part.slug].items() if code != "040")
        total = re.search(r"\(of ([^)]+)\)", line).group(1)
        assert minutes_of(line) == [left] and minutes_of(f"about {total} left") == [sum(stated[part.slug].values())]
    course = sum(sum(item.values()) for item in stated.values())
    total_line = next(line for line in lines if line.startswith("time left in all: "))
    left, of = re.match(r"time left in all: about (.+) \(of (.+)\)", total_line).groups()
    assert minutes_of(f"about {left} left") == [course - stated["07_memory_accounting"]["040"]]
    assert minutes_of(f"about {of} left") == [course]
    row = next(line for line in lines if line.startswith("  040"))
    assert "passed" in row and f"{stated['07_memory_accounting']['040']} min" in row


def test_the_readme_quotes_the_clock_of_todays_text():
    # The README states the course's total twice in words; they drift when a lesson changes (as they did once).
    total = sum(lesson_minutes.MINUTES.values())
    readme = (ROOT / "README.md").read_text()
    assert f"(about {clock.format_minutes(total)} in all)" in readme
    assert f"Today's text: {clock.format_minutes(total)} ({total} minutes)" in readme
