"""The learner's feedback page, opened as a learner opens it: a file, in a browser with no network.

`make grade` writes the page (the same nbgrader configuration as the instructor's `make feedback`);
Chromium opens it with every request off the machine refused.  The notebook is Part 1 with a mix of
right and wrong answers, and one lesson's score set by hand afterwards, as an instructor sets it in
formgrader.  In the browser:

- every formula of the notebook is drawn, as MathML laid out by the browser (not TeX left for a MathJax
  that never arrives), and the page asks the network for nothing;
- no element is wider than the window: long verdicts and printed lines wrap;
- the summary names every test cell by its lesson, with its score;
- none of the grader's own names or notes (``GradedFailure``, "needs a human look", ``[not run: …]``) is
  left: they read in plain words;
- the progress panel shows the XP of the page's grades, and the verdict of the lesson the instructor
  changed states the instructor's score.
"""

from __future__ import annotations

import os
import subprocess
import sys

import nbformat
import pytest

from lab_driver import ROOT, expected_math, load, screenshot

SLUG = "01_mlp_core"
STUDENT = "me"  # tools/grade.py's
# The learner's answers that are not the reference (the rest are): a catalogued mistake each, an error with a
# long message (a run of one character has no place to break), a cell that breaks the rules for graded code
# (it is not run, and its lesson gets no points), and a lesson not started.
ANSWERS = {
    "relu_forward": "def relu_forward(z):\n    return np.minimum(z, 0)\n",
    "mse_loss_and_grad": ("def mse_loss_and_grad(Y_hat, Y):\n    diff = Y_hat - Y\n"
                          "    return float(np.mean(diff ** 2)), -2.0 * diff / diff.size\n"),
    "linear_backward": ("def linear_backward(dZ, x, W):\n"
                        "    raise ValueError('the shapes do not agree: ' + 'dZ x W ' * 40 + 'x' * 300)\n"),
    "first_linear_backward": "import os\n\ndef first_linear_backward(dZ, x, W):\n    return os.getcwd()\n",
    "mlp_backward": ("def mlp_backward(*args):\n"
                     "    raise NotImplementedError(\"Not implemented yet: replace this line with your code.\")\n"),
}
# A scratch cell of the learner's, after the set-up: printed lines far wider than the window.
LONG_LINES = "print('a long line: ' + 'word ' * 200)\nprint('y' * 900)"
OVERRIDDEN, BY_HAND = "004", 2  # the lesson whose score the instructor sets in the gradebook, and to what
EXPECTED = {"001": 5, "002": 5, "003": 5, "004": BY_HAND, "005": 5, "006": 0, "007": 0, "008": 5, "009": 0, "010": 0}

_FORMULAS = """() => [...document.querySelectorAll('math')].map(m => {
  const box = m.getBoundingClientRect();
  return {display: getComputedStyle(m).display, width: box.width, height: box.height,
          block: m.getAttribute('display') === 'block'};
})"""

_LEFTOVER_TEX = """() => {
  const body = document.body.cloneNode(true);
  body.querySelectorAll('math, code, pre').forEach(e => e.remove());
  return (body.textContent.match(/\\$[^$\\n]{1,80}\\$/g) || []);
}"""

# Elements that reach past the window's right edge, or hide a line behind a horizontal scroll bar.
_TOO_WIDE = """() => {
  const width = document.documentElement.clientWidth;
  const wide = [...document.body.querySelectorAll('*')].filter(e =>
      e.getBoundingClientRect().right > width + 1 || e.scrollWidth > e.clientWidth + 1);
  return {width, page: document.documentElement.scrollWidth,
          wide: wide.slice(0, 5).map(e => `${e.tagName}.${e.className}: ${e.scrollWidth}px`)};
}"""


def _submission():
    """The solved Part 1 with the answers of ANSWERS and the cell of LONG_LINES after the set-up."""
    notebook = nbformat.read(ROOT / "solutions" / f"{SLUG}.ipynb", as_version=4)
    for cell in notebook.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
        function = grade_id.split("_", 2)[2] if grade_id.startswith("solution_") else None
        if function in ANSWERS:
            cell.source = ANSWERS[function]
    setup = next(i for i, c in enumerate(notebook.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == "setup")
    notebook.cells.insert(setup + 1, nbformat.v4.new_code_cell(LONG_LINES))
    return notebook


def _set_score_by_hand(course, grade_id: str, score: float) -> None:
    """What an instructor does in formgrader: a lesson's manual score, in nbgrader's gradebook."""
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        gradebook.find_grade(grade_id, SLUG, SLUG, STUDENT).manual_score = score
        gradebook.db.commit()


@pytest.fixture(scope="module")
def feedback_page(tmp_path_factory):
    """The feedback page of the submission, made by `make grade` (tools/grade.py) in a scratch course, and
    made again by `nbgrader generate_feedback` once the instructor has set lesson OVERRIDDEN's score."""
    scratch = tmp_path_factory.mktemp("feedback")
    notebooks, course = scratch / "notebooks", scratch / "course"
    notebooks.mkdir()
    nbformat.write(_submission(), notebooks / f"{SLUG}.ipynb")
    env = dict(os.environ, MCT_PROGRESS_FILE=str(scratch / "progress.json"))
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "grade.py"), "--part", SLUG[:2],
                          "--notebooks", str(notebooks), "--course", str(course)],
                         env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    lesson = next(line for line in run.stdout.splitlines() if f" {OVERRIDDEN} · " in line)
    assert lesson.strip().startswith("✗") and lesson.endswith("0/5"), "the lesson to set by hand lost its points"
    _set_score_by_hand(course, f"lesson_{OVERRIDDEN}_relu_forward", BY_HAND)
    again = subprocess.run([sys.executable, "-m", "grading.nbgrader_cli", "generate_feedback", SLUG,
                            "--student", STUDENT, "--force"], cwd=course, capture_output=True, text=True,
                           env=dict(env, MCT_COURSE_DIR=str(course)), timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    return course / "feedback" / STUDENT / SLUG / f"{SLUG}.html"


@pytest.fixture
def offline(page):
    """The page with every request off the machine refused; the addresses it asked for."""
    asked = []

    def refuse(route):
        asked.append(route.request.url)
        if route.request.url.startswith("file:"):
            route.continue_()
        else:
            route.abort()

    page.route("**/*", refuse)
    page.asked = asked
    return page


def _open(page, path):
    page.goto(path.as_uri())
    page.wait_for_load_state("load")


def test_feedback_math_is_drawn_offline(feedback_page, offline):
    page = offline
    _open(page, feedback_page)
    formulas = page.evaluate(_FORMULAS)
    expected = sum(expected_math(load(ROOT / "notebooks" / f"{SLUG}.ipynb")).values())
    assert len(formulas) == expected > 20, f"{len(formulas)} formulas drawn, the notebook has {expected}"
    not_math = [f for f in formulas if "math" not in f["display"]]
    assert not not_math, f"the browser did not lay these out as MathML: {not_math[:3]}"
    empty = [f for f in formulas if f["width"] < 2 or f["height"] < 2]
    assert not empty, f"{len(empty)} formulas drawn with no size"
    assert any(f["block"] for f in formulas) and any(not f["block"] for f in formulas)
    assert page.evaluate(_LEFTOVER_TEX) == []
    assert [url for url in page.asked if not url.startswith("file:")] == [], "the page asked the network"

    page.locator("math[display=block]").nth(1).scroll_into_view_if_needed()
    print(f"screenshot: {screenshot(page, f'feedback-{SLUG}')}")


def test_long_lines_wrap_inside_the_window(feedback_page, offline):
    page = offline
    _open(page, feedback_page)
    long_output = page.locator("div.output_area pre", has_text="y" * 900)
    verdict = page.locator("div.output_error pre", has_text="x" * 300)
    assert long_output.count() == 1 and verdict.count() == 1, "the long lines to wrap are not on the page"
    layout = page.evaluate(_TOO_WIDE)
    assert layout["page"] <= layout["width"] and layout["wide"] == [], layout
    assert verdict.bounding_box()["height"] > 4 * 18, "the long verdict is not on several lines"
    verdict.scroll_into_view_if_needed()
    print(f"screenshot: {screenshot(page, f'feedback-{SLUG}-wrapped-verdict')}")


def test_the_summary_names_every_test_cell_by_its_lesson(feedback_page, offline):
    from shared.lessons import lessons_of
    page = offline
    _open(page, feedback_page)
    entries = page.locator("#toc li").all_inner_texts()
    assert entries == [f"Lesson {lesson.code} · {lesson.title} (Score: {EXPECTED[lesson.code]} / 5)"
                       for lesson in lessons_of(SLUG)]
    headings = page.locator("span.nbgrader-label", has_text=": tests").all_inner_texts()
    assert headings == [f"Lesson {lesson.code} · {lesson.title}: tests" for lesson in lessons_of(SLUG)]
    total = sum(EXPECTED.values())
    assert page.locator("h4").first.inner_text() == f"{SLUG} (Score: {total} / 50)"
    print(f"screenshot: {screenshot(page, f'feedback-{SLUG}-summary')}")


def test_the_grader_s_own_words_are_not_left_for_the_learner(feedback_page, offline):
    page = offline
    _open(page, feedback_page)
    text = page.locator("body").inner_text()
    for internal in ("GradedFailure", "needs a human look", "[not run:", "answers refused", "RulesBroken"):
        assert internal not in text, internal
        assert internal not in feedback_page.read_text(), f"{internal} is in the page's HTML"
    not_run = page.locator("div.output_error pre", has_text="Not run: cell")
    # The instructor has set a score by hand (OVERRIDDEN): the grader's promise of a look reads as done
    # (grading/review.py), where before it read "Your instructor will look at this notebook."
    assert not_run.count() == 1 and "Your instructor has looked at this notebook." in not_run.inner_text()
    assert "(your instructor has looked at this notebook)" in text  # lesson 009's verdict
    assert "will look at" not in text


def test_the_panel_and_the_verdicts_show_the_gradebook_s_scores(feedback_page, offline):
    page = offline
    _open(page, feedback_page)
    panel = page.locator("div.mct-progress")
    assert panel.count() == 1
    assert panel.locator("b").inner_text().startswith(
        f"Part 1 · MLP forward and backward core: {sum(EXPECTED.values())}/50 XP graded · about ")
    marks = panel.locator("div.mct-row:not(.mct-head) > span:first-child").all_inner_texts()
    assert marks == ["✓" if score == 5 else "✗" for score in EXPECTED.values()]
    xp = panel.locator("div.mct-row:not(.mct-head) > span:last-child").all_inner_texts()
    assert xp == [f"{score}/5" for score in EXPECTED.values()]
    colour = panel.locator("span.mct-pass").first.evaluate("e => getComputedStyle(e).color")
    assert colour == "rgb(26, 127, 55)", "the panel's stylesheet is missing"
    panel.scroll_into_view_if_needed()
    print(f"screenshot: {screenshot(page, f'feedback-{SLUG}-progress-panel')}")

    verdict = page.locator("div.output_error pre", has_text=f"Lesson {OVERRIDDEN} · ReLU forward")
    lines = verdict.inner_text().splitlines()
    assert lines[:2] == [f"Lesson {OVERRIDDEN} · ReLU forward: {BY_HAND}/5",
                         f"Your instructor set this lesson to {BY_HAND} / 5 (the automatic grade was 0 / 5)."]
    assert "This is a common mistake: kept the negative part (np.minimum)" in verdict.inner_text()
    verdict.scroll_into_view_if_needed()
    print(f"screenshot: {screenshot(page, f'feedback-{SLUG}-overridden-verdict')}")
