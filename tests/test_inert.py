"""A hostile submission is inert in the formgrader and in its feedback page (grading/inert.py).

The autograded notebook is what nbgrader's formgrader renders, as live HTML, inside the instructor's
logged-in JupyterLab.  Here a released notebook gets every kind of hostile content a learner can put in
a notebook file (markdown HTML and script in the forms the sanitizers' own test suites use, event
attributes on images, HTML/JS/SVG outputs, widget views and widget state, forged tags and ids), goes
through ``SanitizeSubmission`` and is rendered by the formgrader's own exporter and template, as the course
configures them (tests/course.py's ``formgrader_page``); the page
must carry no tag or attribute that the same page of the untouched release does not carry (the
allow-list check of the feedback pages, tools/instructor.py's ``active_html``).  The course's own
markdown (lesson text with math) is kept as it is.  A few seconds, no kernel.
"""

from __future__ import annotations

import copy
import html
from html.parser import HTMLParser

import nbformat
import pytest
from nbformat import NotebookNode

from course import ROOT, formgrader_page, read, tool
from hostile import MARK, PNG, hostile
from grading import inert
from grading.course import landed_parts
from grading.preprocessors import SanitizeFeedback, SanitizeSubmission
from grading.protocol import COURSE_DIR_ENV

instructor = tool("instructor")
SLUG = landed_parts()[0]


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """A course folder holding the released notebook (what SanitizeSubmission compares markdown with)."""
    folder = tmp_path_factory.mktemp("course")
    (folder / "release" / SLUG).mkdir(parents=True)
    nbformat.write(read(ROOT / "notebooks" / f"{SLUG}.ipynb"), folder / "release" / SLUG / f"{SLUG}.ipynb")
    return folder


def sanitized(nb: NotebookNode, course, monkeypatch) -> NotebookNode:
    monkeypatch.setenv(COURSE_DIR_ENV, str(course))
    resources = {"nbgrader": {"assignment": SLUG, "notebook": SLUG}}
    return SanitizeSubmission().preprocess(copy.deepcopy(nb), resources)[0]


def test_a_hostile_submission_is_inert_in_the_formgrader(course, monkeypatch):
    release = read(ROOT / "notebooks" / f"{SLUG}.ipynb")
    baseline_page = formgrader_page(sanitized(release, course, monkeypatch))
    baseline = set(instructor.active_html(baseline_page))
    unsanitized = hostile(release)
    unsanitized.cells[-1]["id"] = "plain"  # (nbconvert refuses to render a forged id at all)
    raw = formgrader_page(unsanitized, course=False)  # (the course's markdown filter refuses it outright)
    assert set(instructor.active_html(raw)) - baseline, "the check sees the hostile forms when nothing is done"
    assert live_marks(raw), "and so does the mark's"
    page = formgrader_page(sanitized(hostile(release), course, monkeypatch))
    assert sorted(set(instructor.active_html(page)) - baseline) == []
    assert live_marks(page) == [], "a script of the notebook's is live in the page"
    assert page.count("<script") == baseline_page.count("<script")


class _Live(HTMLParser):
    """Where the mark is live in a page: in a tag's name or attribute, or in a script or style element."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found, self.inside = [], []

    def handle_starttag(self, tag, attrs):
        self.inside.append(tag)
        self.found += [f"<{tag} {name}={value!r}>" for name, value in attrs if MARK.lower() in f"{name}{value}".lower()]

    def handle_endtag(self, tag):
        if tag in self.inside:
            del self.inside[self.inside.index(tag):]

    def handle_data(self, data):
        if MARK in data and self.inside and self.inside[-1] in ("script", "style", "svg", "math", "iframe"):
            self.found.append(f"<{self.inside[-1]}>{data[:60]}")


def live_marks(page: str) -> list[str]:
    parser = _Live()
    parser.feed(page)
    return parser.found


def test_the_course_text_is_kept_and_the_learner_s_is_shown_as_text(course, monkeypatch):
    release = read(ROOT / "notebooks" / f"{SLUG}.ipynb")
    nb = sanitized(hostile(release), course, monkeypatch)
    course_text = [c.source for c in release.cells if c.cell_type == "markdown"]
    kept = [c.source for c in nb.cells if c.cell_type == "markdown" and c.source in course_text]
    assert len(kept) == len(course_text) - 1  # all but the one the learner edited, math and all
    assert any("$$" in text for text in kept)
    edited = next(c for c in nb.cells if c.cell_type == "markdown")
    assert edited.source.endswith(f"&lt;img src=x onerror={MARK}()>")
    page = html.unescape(formgrader_page(nb))
    assert f"<img src=x onerror={MARK}()>" in page  # shown, as text, for the instructor to read


def test_outputs_keep_only_text_and_images_with_whole_number_sizes(course, monkeypatch):
    nb = sanitized(hostile(read(ROOT / "notebooks" / f"{SLUG}.ipynb")), course, monkeypatch)
    outputs = nb.cells[-1].outputs
    assert {mime for output in outputs for mime in output.data} <= set(inert.SHOWN_MIME)
    assert [dict(o.metadata) for o in outputs if "image/png" in o.data][-3:] == [{}, {}, {}]
    assert outputs[0].data == {"text/plain": "html"}
    assert outputs[1].data == {"text/plain": inert.NOT_SHOWN}
    assert outputs[6].data == {"text/plain": inert.NOT_SHOWN}  # image data that is not base64
    assert outputs[7].data == {"image/jpeg": PNG}
    assert nb.cells[-1].metadata.tags == ["plain"]
    assert set(nb.metadata) <= set(inert.NOTEBOOK_METADATA)


def test_the_feedback_page_and_the_formgrader_share_one_policy(course, monkeypatch):
    """Feedback applies the same definition (every markdown cell escaped there: its math is the course's MathML)."""
    nb = hostile(read(ROOT / "notebooks" / f"{SLUG}.ipynb"))
    feedback = SanitizeFeedback().preprocess(copy.deepcopy(nb), {})[0]
    assert feedback == inert.make_inert(copy.deepcopy(nb))
    submission = sanitized(nb, course, monkeypatch)
    assert [c.get("outputs") for c in feedback.cells] == [c.get("outputs") for c in submission.cells]
