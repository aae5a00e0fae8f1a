"""A submission's changes to the course's own cells are named against the release (grading/tampering.py).

The release is Part 1's learner notebook as the course hands it out; each submission below changes one
thing of it, as a learner might (nothing is graded: the two notebooks are compared, in milliseconds).
"""

from __future__ import annotations

import copy
import json

import pytest

from course import student_path
from grading.tampering import changes

SLUG = "01_mlp_core"
TEST_CELL = "lesson_004_relu_forward"


@pytest.fixture(scope="module")
def release() -> dict:
    return json.loads(student_path(SLUG).read_text())


def index_of(notebook: dict, grade_id: str) -> int:
    return next(i for i, cell in enumerate(notebook["cells"])
                if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id)


def source_lines(cell: dict) -> list[str]:
    source = cell["source"]
    return ("".join(source) if isinstance(source, list) else source).splitlines()


def test_an_untouched_notebook_or_one_with_answers_written_changes_nothing(release):
    assert changes(release, copy.deepcopy(release)) == []
    answered = copy.deepcopy(release)
    solution = answered["cells"][index_of(answered, "solution_004_relu_forward")]
    solution["source"] = "def relu_forward(x):\n    return x * (x > 0)\n"
    solution["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "hi\n"}]
    assert changes(release, answered) == []


def test_an_edited_test_cell_is_named_with_the_line_that_changed(release):
    edited = copy.deepcopy(release)
    cell = edited["cells"][index_of(edited, TEST_CELL)]
    lines = source_lines(cell)
    lines[1] = "pass  # the test, gone"
    cell["source"] = "\n".join(lines)
    (change,) = changes(release, edited)
    assert (change.grade_id, change.cell) == (TEST_CELL, index_of(edited, TEST_CELL) + 1)
    assert change.what.startswith("edited (line 2: ") and "'pass  # the test, gone'" in change.what
    assert "against the release" in str(change)


def test_a_deleted_test_cell_is_named(release):
    deleted = copy.deepcopy(release)
    del deleted["cells"][index_of(deleted, TEST_CELL)]
    assert [(c.grade_id, c.cell, c.what) for c in changes(release, deleted)] == [(TEST_CELL, None, "was deleted")]


def test_a_test_cell_moved_below_the_next_lesson_is_named(release):
    moved = copy.deepcopy(release)
    cell = moved["cells"].pop(index_of(moved, TEST_CELL))
    moved["cells"].insert(index_of(moved, "lesson_005_mlp_forward") + 1, cell)
    found = changes(release, moved)
    assert TEST_CELL in {c.grade_id for c in found} and all("was moved" in c.what for c in found), found
    assert any(c.grade_id == TEST_CELL and "now after lesson_005_mlp_forward" in c.what for c in found), found


def test_a_given_cell_edited_is_named(release):
    given = next(cell for cell in release["cells"] if cell.get("metadata", {}).get("nbgrader", {}).get("locked")
                 and not cell["metadata"]["nbgrader"].get("grade"))
    grade_id = given["metadata"]["nbgrader"]["grade_id"]
    edited = copy.deepcopy(release)
    edited["cells"][index_of(edited, grade_id)]["source"] = "# mine now\n" + "\n".join(source_lines(given))
    (change,) = changes(release, edited)
    assert change.grade_id == grade_id and "edited" in change.what


def test_a_test_cell_turned_into_markdown_is_named(release):
    turned = copy.deepcopy(release)
    cell = turned["cells"][index_of(turned, TEST_CELL)]
    cell["cell_type"] = "markdown"
    cell.pop("outputs", None)
    cell.pop("execution_count", None)
    (change,) = changes(release, turned)
    assert change.what == "edited (a code cell turned into a markdown cell)"
