"""The learner's feedback page, opened as a learner opens it: a file, in a browser with no network.

`make grade` writes the page (the same nbgrader configuration as the instructor's `make feedback`);
Chromium opens it with every request off the machine refused.  Every formula of the notebook is
drawn, as MathML laid out by the browser (not TeX left for a MathJax that never arrives), and the
page asks the network for nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from lab_driver import ROOT, expected_math, load, screenshot

SLUG = "01_mlp_core"

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


@pytest.fixture(scope="module")
def feedback_page(tmp_path_factory):
    """The feedback page of the solved Part 1, made by `make grade` (tools/grade.py) in a scratch course."""
    scratch = tmp_path_factory.mktemp("feedback")
    notebooks = scratch / "notebooks"
    notebooks.mkdir()
    shutil.copy(ROOT / "solutions" / f"{SLUG}.ipynb", notebooks)
    env = dict(os.environ, MCT_PROGRESS_FILE=str(scratch / "progress.json"))
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "grade.py"), "--part", SLUG[:2],
                          "--notebooks", str(notebooks), "--course", str(scratch / "course")],
                         env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    return scratch / "course" / "feedback" / "me" / SLUG / f"{SLUG}.html"


def test_feedback_math_is_drawn_offline(feedback_page, page):
    asked = []

    def offline(route):
        asked.append(route.request.url)
        if route.request.url.startswith("file:"):
            route.continue_()
        else:
            route.abort()

    page.route("**/*", offline)
    page.goto(feedback_page.as_uri())
    page.wait_for_load_state("load")

    formulas = page.evaluate(_FORMULAS)
    expected = sum(expected_math(load(ROOT / "notebooks" / f"{SLUG}.ipynb")).values())
    assert len(formulas) == expected > 20, f"{len(formulas)} formulas drawn, the notebook has {expected}"
    not_math = [f for f in formulas if "math" not in f["display"]]
    assert not not_math, f"the browser did not lay these out as MathML: {not_math[:3]}"
    empty = [f for f in formulas if f["width"] < 2 or f["height"] < 2]
    assert not empty, f"{len(empty)} formulas drawn with no size"
    assert any(f["block"] for f in formulas) and any(not f["block"] for f in formulas)
    assert page.evaluate(_LEFTOVER_TEX) == []
    assert [url for url in asked if not url.startswith("file:")] == [], "the page asked the network"

    page.locator("math[display=block]").nth(1).scroll_into_view_if_needed()
    print(f"screenshot: {screenshot(page, f'feedback-{SLUG}')}")
