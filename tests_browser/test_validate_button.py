"""The Validate button in the learner's JupyterLab (`make lab`) shows the grader's verdicts, in a real browser.

Two copies of the solved Part 1, under the course's build/ folder (the server's root is the course):
the solved notebook itself, and the same with linear_forward forgetting the bias.  The button
(nbgrader's lab extension, answered by grading/validate.py) says "Success!" for the first; for the
second it names lesson 003 with the judge's message, and not lesson 005, a composite whose visible
tests fail with the learner's linear_forward but which the grader judges with the reference one.
"""

from __future__ import annotations

import os
import shutil

import nbformat
import pytest

from lab_driver import ROOT, SCREENSHOTS, LabServer, serving, start_make_lab

SLUG = "01_mlp_core"
NO_BIAS = "def linear_forward(x, W, b):\n    return x @ W  # forgot the bias\n"


def _copies(folder) -> dict[str, str]:
    """The solved notebook and its copy without the bias, under ``folder``; their paths from the server's root."""
    solved = nbformat.read(ROOT / "solutions" / f"{SLUG}.ipynb", as_version=4)
    paths = {"right": folder / "right" / f"{SLUG}.ipynb", "no-bias": folder / "no-bias" / f"{SLUG}.ipynb"}
    paths["right"].parent.mkdir(parents=True)
    nbformat.write(solved, paths["right"])
    for cell in solved.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "solution_003_linear_forward":
            cell.source = NO_BIAS
    paths["no-bias"].parent.mkdir(parents=True)
    nbformat.write(solved, paths["no-bias"])
    return {name: path.relative_to(ROOT).as_posix() for name, path in paths.items()}


def _validate(page, server: LabServer, path: str) -> tuple[str, str]:
    """Open ``path``, press Validate, wait for the dialog; its text and its kind (success or error).

    The dialog's screenshot goes to build/browser-screenshots/validate-<folder>.png."""
    page.goto(server.url(f"lab/tree/{path}", reset=""))  # reset: no notebook of an earlier page reopened
    page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .validate-button").click()
    message = page.locator("#validation-message")
    message.wait_for(timeout=300_000)  # the grader grades the part: seconds, more on a busy machine
    dialog = page.locator(".jp-Dialog")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=SCREENSHOTS / f"validate-{path.split('/')[-2]}.png")
    kind = "success" if "nbgrader-SuccessDialog" in (dialog.get_attribute("class") or "") else "error"
    return message.inner_text(), kind


@pytest.fixture
def make_lab(tmp_path):
    """`make lab` as the learner starts it, for the browser to press its Validate button."""
    with serving(start_make_lab(tmp_path, token="mct-validate-button")) as server:
        yield server


def test_the_validate_button_shows_the_graders_verdicts(make_lab, browser):
    folder = ROOT / "build" / f"test-validate-button-{os.getpid()}"
    try:
        paths = _copies(folder)
        for name, expected_kind in (("right", "success"), ("no-bias", "error")):
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            page = context.new_page()
            page.set_default_timeout(60_000)
            try:
                text, kind = _validate(page, make_lab, paths[name])
            finally:
                context.close()
            assert kind == expected_kind, (name, text, make_lab.log_tail())
            if name == "right":
                assert "Success! Your notebook passes all the tests." in text
            else:
                assert "Lesson 003 · Linear forward: 0/5" in text and "the bias is missing" in text, text
                assert "Lesson 005" not in text and "Success" not in text, text
                assert "make grade PART=01" in text
    finally:
        shutil.rmtree(folder, ignore_errors=True)
