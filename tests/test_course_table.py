"""The course's table of parts and lessons is read from the masters (tools/course_table.py).

- the stored table (shared/course_table.py, written by ``make build``) is what the masters say, and
  ``shared.lessons`` serves exactly it;
- a lesson appended to a part's master (heading, solution cell) joins the table with its number and
  function, and nothing else has to be edited for the table to know it;
- masters that do not make a course stop the build with a message that says what is wrong: a gap or a
  repeat in the lesson numbers, a heading whose function no solution cell defines, a part without its
  title, parts numbered with a gap.
"""

from __future__ import annotations

import re
import shutil

import pytest

from course import ROOT, master_headings, tool
from shared import course_table as stored
from shared.lessons import LESSONS, PARTS, lessons_of

table = tool("course_table")

NEXT, LAST = f"{len(LESSONS) + 1:03d}", LESSONS[-1].code  # a lesson appended after the course's last
NEW_LESSON = f'''
# %% [markdown]
# ## {NEXT} · Overlap all gather
#
# A throwaway lesson, appended to the last part.

# %% tags=["solution"]
def overlap_all_gather(shards):
    ### BEGIN SOLUTION
    return list(shards)
    ### END SOLUTION
'''


@pytest.fixture
def masters(tmp_path):
    """A copy of every part's master, to change."""
    copy = tmp_path / "parts"
    for master in sorted((ROOT / "autograde" / "parts").glob("[0-9][0-9]_*/master.py")):
        (copy / master.parent.name).mkdir(parents=True)
        shutil.copy(master, copy / master.parent.name / "master.py")
    return copy


def last_master(masters):
    return sorted(masters.glob("*/master.py"))[-1]


def test_the_stored_table_is_what_the_masters_say_and_what_the_lessons_serve():
    rows = table.course_rows()
    assert stored.PARTS == tuple((r.number, r.slug, r.title, r.functions) for r in rows), "run `make build`"
    assert [(p.number, p.slug, p.title) for p in PARTS] == [(r.number, r.slug, r.title) for r in rows]
    assert [item.function for item in LESSONS] == [name for r in rows for name in r.functions]
    assert [item.code for item in LESSONS] == [code for codes in master_headings().values() for code in codes]


@pytest.mark.parametrize("title, function", [("Linear forward", "linear_forward"), ("Init MLP params", "init_mlp_params"),
                                             ("MSE loss and grad", "mse_loss_and_grad"),
                                             ("ZeRO optimizer step", "zero_optimizer_step")])
def test_a_lesson_title_names_its_function(title, function):
    assert table.function_of(title) == function
    assert next(item for item in LESSONS if item.function == function).title == title


def test_a_lesson_appended_to_a_master_joins_the_table(masters, tmp_path):
    master = last_master(masters)
    master.write_text(master.read_text() + NEW_LESSON)
    rows = table.course_rows(masters)
    assert rows[-1].functions[-1] == "overlap_all_gather"
    assert sum(len(r.functions) for r in rows) == len(LESSONS) + 1
    written = tmp_path / "course_table.py"
    assert table.refresh(written, masters) and not table.refresh(written, masters)  # written once, then fresh
    namespace: dict = {}
    exec(written.read_text(), namespace)  # noqa: S102 (the table just written)
    assert namespace["PARTS"][-1][3][-1] == "overlap_all_gather"


def test_a_lesson_appended_to_a_master_changes_the_readme_s_size_and_its_parts_range(masters):
    readme = (ROOT / "README.md").read_text()
    assert table.readme_text(readme, table.course_rows()) == readme, "run `make build`"
    master = last_master(masters)
    master.write_text(master.read_text() + NEW_LESSON)
    rows = table.course_rows(masters)
    written = table.readme_text(readme, rows)
    lessons, last = len(LESSONS) + 1, PARTS[-1]
    sentence = (f"{table.number_words(len(PARTS)).capitalize()} notebooks, {table.number_words(lessons)} lessons, "
                f"one\ngraded function per lesson, {table.POINTS_PER_LESSON} XP each, {table.POINTS_PER_LESSON * lessons} XP in all.")
    assert sentence in written and sentence not in readme
    first = lessons_of(last.number)[0].code
    assert re.search(rf"^\| {last.number} \| `notebooks/{last.slug}\.ipynb`.*\| {first}–{lessons:03d} \|", written,
                     re.MULTILINE)
    changed = [(old, new) for old, new in zip(readme.splitlines(), written.splitlines()) if old != new]
    assert len(changed) == 3 and len(written.splitlines()) == len(readme.splitlines()), changed  # nothing else


@pytest.mark.parametrize("n, words", [(0, "zero"), (7, "seven"), (19, "nineteen"), (40, "forty"), (41, "forty-one"),
                                      (99, "ninety-nine"), (200, "200")])
def test_numbers_are_written_in_words(n, words):
    assert table.number_words(n) == words


def test_a_readme_without_its_size_markers_is_refused():
    with pytest.raises(table.TableError, match="course-size sentence"):
        table.readme_text("Seven notebooks, forty lessons.", table.course_rows())


@pytest.mark.parametrize("text", ["<b>", "</b> x <b>", "<b> x", "x </b>"])
def test_markers_missing_or_out_of_order_are_refused(text):
    with pytest.raises(table.TableError, match="README.md has no span between <b> and </b>"):
        table.between_markers(text, "<b>", "</b>", "y", "span")


def test_only_what_stands_between_the_first_markers_is_written():
    assert table.between_markers("a <b>old</b> c <b>keep</b>", "<b>", "</b>", "new", "span") == \
        "a <b>new</b> c <b>keep</b>"


@pytest.mark.parametrize("change, message", [
    (lambda text: text + NEW_LESSON.replace(NEXT, f"{int(NEXT) + 1:03d}"), f"lesson {int(NEXT) + 1:03d} is out of order"),
    (lambda text: text + NEW_LESSON.replace(NEXT, LAST), f"lesson {LAST} is out of order"),
    (lambda text: text + NEW_LESSON.replace("def overlap_all_gather", "def overlap"),
     "no solution cell defines overlap_all_gather"),
    (lambda text: text.replace(' part_title="', ' other="', 1), "the master's first cell names the part"),
], ids=["a gap", "a repeat", "a title without its function", "a part without its title"])
def test_masters_that_make_no_course_are_refused_saying_why(masters, change, message):
    master = last_master(masters)
    master.write_text(change(master.read_text()))
    with pytest.raises(table.TableError, match=message):
        table.course_rows(masters)


def test_parts_numbered_with_a_gap_are_refused(masters):
    last = last_master(masters).parent
    last.rename(last.with_name("09" + last.name[2:]))
    with pytest.raises(table.TableError, match="parts are numbered"):
        table.course_rows(masters)
