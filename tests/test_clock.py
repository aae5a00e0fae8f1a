"""The clock: each lesson's estimated minutes, what the notebooks say, and the time left.

- the stored minutes (shared/lesson_minutes.py) are what the model (shared/clock.py) computes
  from the current masters, so a rewritten lesson cannot keep an old estimate;
- the model's estimates of each walked text (docs/walkthrough.toml's ``[walked]`` and
  ``[walked_text.*]`` features) agree with the recorded walkthroughs within the tolerances they
  state (the second walk lesson by lesson: each stated minutes within 25 % of the walk); today's
  text is estimated by the same model, so a lesson rewritten since keeps an honest estimate
  without a new recording;
- every generated notebook says each lesson's minutes under its heading and the part's total
  in its opening, and the panel and ``make progress`` add up the minutes of the lessons not
  passed, read here from the notebooks' own lines (not from the code that sums them).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from dataclasses import replace
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
    """Six pages more of text in lesson 003 (2,700 words: about 7 minutes at 390 a minute) shows in its estimate
    and in no other lesson's, so the test above fails until `make build` stores it."""
    shutil.copytree(ROOT / "autograde" / "parts", tmp_path / "parts",
                    ignore=shutil.ignore_patterns("__pycache__", "cases.py"))
    master = tmp_path / "parts" / "01_mlp_core" / "master.py"
    text = master.read_text()
    padding = "".join("# " + "word " * 15 + "\n" for _ in range(180))  # 2,700 words
    head, sep, rest = text.partition("# ## 003 · Linear forward\n")
    master.write_text(head + sep + "#\n" + padding + rest)
    before, after = clock.course_features(), clock.course_features(tmp_path / "parts")
    assert after["003"].words == before["003"].words + 2700
    assert {code for code in before if after[code] != before[code]} == {"003"}
    assert clock.MODEL.minutes(after["003"]) - clock.MODEL.minutes(before["003"]) == pytest.approx(
        2700 / clock.MODEL.words_per_minute)
    assert clock.estimates(after)["003"] >= lesson("003").minutes + 5


def test_the_model_agrees_with_the_recorded_walkthrough_on_the_walked_text():
    """The first walk (the older text, the ``[walked]`` table): two spans that make the whole course, and four
    single lessons, each within its tolerance."""
    record = clock.walkthrough()
    recorded, tolerance = [item for item in record.recorded if not item.text], record.tolerance
    assert tolerance == {"span_fraction": 0.15, "lesson_minutes": 5, "course_fraction": 0.10,
                         "walked_lesson_fraction": 0.25}
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


def second_walk_disagreements(model: clock.Model) -> list[str]:
    """The lessons of the walks recorded lesson by lesson (a ``text`` of their own) whose minutes, as the clock
    states them (``model``'s estimate of the walked text, rounded to 5 minutes), are not within the stated
    fraction (25 %) of the walk's."""
    record = clock.walkthrough()
    fraction = record.tolerance["walked_lesson_fraction"]
    disagreements = []
    for item in record.recorded:
        if item.text:
            (code,) = item.codes
            stated = model.rounded(record.texts[item.text][code])
            if abs(stated - item.minutes) > fraction * item.minutes:
                disagreements.append(f"{code}: states {stated} min, walked {item.minutes:g} min")
    return disagreements


def test_the_second_walk_recorded_lesson_035_and_part_7_lesson_by_lesson_on_its_own_text():
    record = clock.walkthrough()
    second = [item for item in record.recorded if item.text]
    assert [item.codes for item in second] == [(code,) for code in ("035", "036", "037", "038", "039", "040")]
    assert {item.text for item in second} == {"caf856b"} and list(record.texts) == ["caf856b"]
    assert set(record.texts["caf856b"]) == {"035", "036", "037", "038", "039", "040"}
    assert record.tolerance["walked_lesson_fraction"] == 0.25


def test_every_lesson_of_the_second_walk_states_minutes_within_25_percent_of_the_walk():
    assert second_walk_disagreements(clock.MODEL) == []


@pytest.mark.parametrize("constant", ["words_per_minute", "minutes_per_line", "overhead", "code_words_per_minute"])
@pytest.mark.parametrize("factor", [0.5, 2.0])
def test_a_model_off_by_a_factor_of_two_disagrees_with_the_second_walk(constant, factor):
    """The check above can fail: any of the model's constants halved or doubled puts some lesson of the walk
    outside 25 %."""
    off = replace(clock.MODEL, **{constant: getattr(clock.MODEL, constant) * factor})
    assert second_walk_disagreements(off), (constant, factor)


def test_the_model_fits_both_walks_as_well_as_the_grid_allows():
    """``python -m shared.clock --calibrate`` on both walks finds MODEL among the best fits of its grid."""
    record = clock.walkthrough()
    equals, _ = clock.best_fits(record.walked, record.recorded, texts=record.texts)
    assert clock.MODEL in equals


def test_the_walked_table_is_what_the_clock_counts():
    """`python -m shared.clock --walked` writes the rows the walkthrough reads back, so recording a new
    walkthrough cannot mistype its text's features."""
    features = {"001": clock.Features(567, 9, given_words=64),
                "040": clock.Features(2396, 73, optional_words=794, given_words=661, helper_words=956)}
    import tomllib
    assert {code: clock.Features(**item) for code, item in tomllib.loads(clock.walked_table(features)).items()} \
        == features


def test_the_walkthrough_holds_the_recorded_figures():
    figures = {(item.codes[0], item.codes[-1], item.text): item.minutes for item in clock.walkthrough().recorded}
    assert figures == {("001", "018", ""): 115, ("019", "040", ""): 222, ("040", "040", ""): 45,
                       ("035", "035", ""): 25, ("039", "039", ""): 18, ("028", "028", ""): 15,
                       # the second walk, 2026-12-04, on the text of commit caf856b
                       ("035", "035", "caf856b"): 30, ("036", "036", "caf856b"): 6, ("037", "037", "caf856b"): 5,
                       ("038", "038", "caf856b"): 8, ("039", "039", "caf856b"): 15, ("040", "040", "caf856b"): 45}


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
    """The signature, docstring, given bookkeeping and comments of a graded cell are read: their words count
    (at the text's speed when the model has no speed for code); the learner's regions count as lines to write,
    and other code cells not at all."""
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


def test_given_code_is_read_at_its_own_speed():
    """With ``code_words_per_minute`` the given code is read at that speed and the text at the text's."""
    features = clock.Features(words=390, solution_lines=0, given_words=60, helper_words=390)
    model = clock.Model(words_per_minute=390, minutes_per_line=0.0, exponent=1.0, overhead=0.0,
                        code_words_per_minute=60)
    assert model.reading(features) == pytest.approx(1 + 1 + 1)
    assert replace(model, code_words_per_minute=None).reading(features) == pytest.approx((390 + 60 + 390) / 390)


def test_the_model_reads_the_docstrings_of_the_helpers_the_given_code_names_once_a_part():
    """A helper that the set-up cell imports from ``shared`` and a graded cell's given code names costs its
    docstring's words, in the first lesson of the part that names it; a name only the solution uses, a
    function the notebook defines, or a name imported from elsewhere costs nothing; a re-export is followed."""
    modules = {
        "shared.training": 'from .blocks import gather\n\ndef step(x):\n    """Four words of docstring."""\n',
        "shared.blocks": 'def gather(x):\n    """Two words."""\n\ndef hidden(x):\n    """Nine words no lesson names, '
                         'so none is read."""\n',
    }

    def graded(source):
        return SimpleNamespace(cell_type="code", metadata={"tags": ["solution"]}, source=source)

    cells = [
        cell("code", "from shared.training import step, gather\nfrom shared.blocks import hidden\nimport numpy as np"),
        cell("markdown", "## 101 · First"),
        graded("def f(x):\n    y = step(x)  # given\n    ### BEGIN SOLUTION\n    return hidden(y)\n"
               "    ### END SOLUTION\n"),
        cell("markdown", "## 102 · Second"),
        graded("def g(x):\n    return gather(step(np.asarray(x)))\n"),
    ]
    features = clock.lesson_features(cells, modules.__getitem__)
    assert features["101"].helper_words == 4  # step; hidden is the solution's, not given code
    assert features["102"].helper_words == 2  # gather (through the re-export); step was read in 101
    assert clock.helper_docstring_words("shared.training", "gather", modules.__getitem__) == 2
    assert clock.helper_docstring_words("shared.training", "nothing", modules.__getitem__) == 0


def test_todays_part_7_reads_the_helpers_it_calls():
    """Lesson 040's given code calls worker_gradients and builds on TrainingConfig (first read in 039): their
    docstrings are in the estimates of today's text."""
    today = clock.course_features()
    worker_gradients = clock.helper_docstring_words("shared.training", "worker_gradients")
    config = clock.helper_docstring_words("shared.training", "TrainingConfig")
    assert worker_gradients > 50 and config > 50
    assert today["040"].helper_words >= worker_gradients and today["039"].helper_words >= config


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
    without = replace(features, optional_words=0)
    assert lesson("040").minutes == clock.MODEL.rounded(without)
    assert clock.MODEL.minutes(without) == clock.MODEL.minutes(features)


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
