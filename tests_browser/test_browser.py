"""The learner's view, in a real browser: JupyterLab runs every notebook, all math renders, figures show.

Every notebook present is checked (``solutions/*.ipynb`` and ``notebooks/*.ipynb``),
so a part joins as soon as `make build` writes it. Run with `make test-browser`.
"""

from __future__ import annotations

import json
import time

import pytest

from lab_driver import (RESULTS, ROOT, STUB_MESSAGE, assert_math_renders, clear_outputs, count_images, expected_math,
                        hide_side_bar, load, open_notebook, outputs, rendered_outputs, run_all, screenshot,
                        scroll_to_cell, shut_down_kernel, start_make_lab)

SOLVED = sorted(ROOT.glob("solutions/*.ipynb"))
STUDENT = sorted(ROOT.glob("notebooks/*.ipynb"))
INSTRUCTOR_PANELS = ("create-assignment", "formgrader", "course-list", "assignment-list", "menu")
INSTRUCTOR_TITLES = ("Formgrader", "Course List", "Assignment List", "Create Assignment")


def _fresh_progress(server) -> None:
    """Each notebook starts from an empty progress record (the server's scratch file, never the learner's)."""
    server.progress_file.unlink(missing_ok=True)


def _most_math_cell(notebook: dict) -> int:
    """The markdown cell with the most math: where a screenshot shows a lesson at its best."""
    counts = expected_math(notebook)
    return max(counts, key=lambda index: (counts[index], -index)) if counts else 0


def _record(name: str, math: int, figures: int | None, started: float) -> None:
    RESULTS.append({"notebook": name, "math": math, "figures": figures, "seconds": time.monotonic() - started})


def _open_fresh(page, server, path) -> tuple[dict, str, float]:
    """Open the server's copy of a notebook of the course from an empty progress record: the notebook, its
    path in the server (as in the course), and when the opening started (the time _record reports counts it)."""
    notebook, relative = load(path), path.relative_to(ROOT).as_posix()
    _fresh_progress(server)
    started = time.monotonic()
    open_notebook(page, server, relative, notebook)
    return notebook, relative, started


@pytest.mark.parametrize("path", SOLVED, ids=lambda p: f"solutions/{p.name}")
def test_solved_notebook_runs_with_math_and_figures(path, course_lab, page):
    notebook, relative, started = _open_fresh(page, course_lab, path)
    clear_outputs(page)
    run_all(page)

    cells = outputs(page)
    not_run = [c.index for c in cells if not c.execution_count]
    assert not not_run, f"cells {not_run} did not run"
    errors = [f"cell {c.index}: {e['ename']}: {e['evalue']}" for c in cells for e in c.errors()]
    assert not errors, "error outputs:\n" + "\n".join(errors)
    shown = rendered_outputs(page)
    assert not shown["stderr"], "output on stderr:\n" + "\n".join(shown["stderr"])
    assert shown["progress_panels"] >= 1, "the progress panel did not render"

    figures = count_images(notebook)
    produced = sum("image/png" in o.get("data", {}) for c in cells for o in c.outputs)
    assert produced == figures, f"the run made {produced} figures, the solved notebook has {figures}"
    assert shown["images"] == figures and shown["images_loaded"] == figures, \
        f"{figures} figures expected, {shown['images']} shown, {shown['images_loaded']} loaded"

    report = assert_math_renders(page, notebook)
    assert report.expressions == report.expected > 0
    _record(relative, report.expressions, figures, started)

    hide_side_bar(page)
    scroll_to_cell(page, _most_math_cell(notebook))
    print(f"screenshot: {screenshot(page, f'solutions-{path.stem}')}")
    shut_down_kernel(page)


@pytest.mark.parametrize("path", STUDENT, ids=lambda p: f"notebooks/{p.name}")
def test_student_notebook_stops_at_the_first_stub(path, course_lab, page):
    notebook, relative, started = _open_fresh(page, course_lab, path)
    report = assert_math_renders(page, notebook)
    run_all(page)

    first_test = next(i for i, cell in enumerate(notebook["cells"])
                      if cell["metadata"].get("nbgrader", {}).get("grade"))
    cells = outputs(page)
    failed = [c for c in cells if c.errors()]
    assert failed, "Run All went through a notebook of stubs without an error"
    first = failed[0]
    assert first.index == first_test, f"the run stopped at cell {first.index}, not at the first test cell {first_test}"
    error = first.errors()[0]
    assert (error["ename"], error["evalue"]) == ("NotImplementedError", STUB_MESSAGE)
    ran_after = [c.index for c in cells if c.index > first.index and c.execution_count]
    assert not ran_after, f"cells {ran_after} ran after the first failing test"

    # The course shows one line that names the lesson not started, not a traceback.
    message = page.locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]',
                           has_text="Not started:")
    assert message.count() == 1 and "still raises NotImplementedError" in message.inner_text()
    assert "Traceback" not in message.inner_text()
    panel = page.locator(".jp-OutputArea-output .mct-progress")
    assert panel.count() == 1 and panel.is_visible() and "XP" in panel.inner_text()
    _record(relative, report.expressions, None, started)

    hide_side_bar(page)
    message.evaluate("box => box.scrollIntoView({block: 'end'})")  # the traceback's last line: the message
    assert message.is_visible()
    print(f"screenshot: {screenshot(page, f'notebooks-{path.stem}')}")
    shut_down_kernel(page)


# The three ways TeX goes wrong in a notebook, each appended to its own markdown cell.
BREAKAGES = {
    "unbalanced braces": (r"Broken: $\frac{1}{$ here.", "left in the rendered text"),
    "undefined macro": (r"Broken: $\notamacro{x}$ here.", r"undefined macro \notamacro"),
    "TeX error": (r"Broken: $\left( x$ here.", r"TeX error: Extra \left or missing \right"),
}


@pytest.mark.skipif(not SOLVED, reason="no solved notebook to break")
def test_broken_tex_is_caught(course_lab, page):
    """The math check is not vacuous: a copy with broken TeX is reported, cell by cell, and only there."""
    notebook = load(SOLVED[0])
    targets = sorted(expected_math(notebook))[:len(BREAKAGES)]
    for index, (text, _) in zip(targets, BREAKAGES.values()):
        source = "".join(notebook["cells"][index]["source"])
        notebook["cells"][index]["source"] = f"{source}\n\n{text}\n"
    broken = course_lab.root / "broken" / SOLVED[0].name
    broken.parent.mkdir(exist_ok=True)
    broken.write_text(json.dumps(notebook, indent=1))

    open_notebook(page, course_lab, f"broken/{broken.name}", notebook)
    with pytest.raises(AssertionError) as failure:  # the very assertion the real notebooks go through
        assert_math_renders(page, notebook)
    problems = str(failure.value).splitlines()[1:]
    for index, (kind, (_, expected)) in zip(targets, BREAKAGES.items()):
        named = [p for p in problems if p.startswith(f"markdown cell {index}:")]
        assert any(expected in p for p in named), f"{kind} in cell {index} not reported: {problems}"
    reported = {int(p.split(":")[0].split()[-1]) for p in problems if p.startswith("markdown cell ")}
    assert reported == set(targets), f"problems outside the broken cells: {problems}"
    print("the broken copy is reported:\n" + "\n".join(problems))
    shut_down_kernel(page)


def test_make_lab_shows_the_notebook_without_instructor_panels(browser, page, tmp_path):
    """`make lab` as the learner starts it: the first notebook opens, no nbgrader instructor panel anywhere."""
    # Opening a notebook makes JupyterLab save a first checkpoint of it when it has none:
    # a checkpoint this test caused is removed again, the learner's own is left as it was.
    checkpoints = ROOT / "notebooks" / ".ipynb_checkpoints"
    checkpoint = checkpoints / "01_mlp_core-checkpoint.ipynb"
    had_checkpoints, had_checkpoint = checkpoints.exists(), checkpoint.exists()
    watched = [ROOT / "notebooks" / "01_mlp_core.ipynb", ROOT / ".progress.json", checkpoint]
    before = {path: path.read_bytes() if path.exists() else None for path in watched}
    notebook = load(watched[0])
    # Scratch settings (no autosave: the learner's notebook is opened, never written) and progress file.
    server = start_make_lab(tmp_path, token="mct-make-lab")
    try:
        server.wait_until_ready()
        started = time.monotonic()
        open_notebook(page, server, "notebooks/01_mlp_core.ipynb", notebook, reset=False)
        statusbar = page.locator("#jp-main-statusbar").inner_text()
        assert "Python 3 (course)" in statusbar, f"not the course's kernel: {statusbar!r}"
        report = assert_math_renders(page, notebook)

        config = json.loads(page.locator("#jupyter-config-data").text_content())
        disabled = config.get("disabledExtensions", [])
        for panel in INSTRUCTOR_PANELS:
            assert f"@jupyter/nbgrader:{panel}" in disabled, f"{panel} is not disabled: {disabled}"

        menus = page.locator(".lm-MenuBar-content > .lm-MenuBar-item").all_inner_texts()
        assert "Nbgrader" not in menus, f"an (empty) Nbgrader menu is in the menu bar: {menus}"
        labels = []
        for item in page.locator(".lm-MenuBar-content > .lm-MenuBar-item").all():
            name = item.inner_text()
            item.click()
            page.wait_for_function("""name => { const open = document.querySelector('.lm-MenuBar-item.lm-mod-active');
                return !!open && open.innerText === name && !!document.querySelector('.lm-Menu'); }""", arg=name)
            labels += page.locator(".lm-Menu .lm-Menu-item:not(.lm-mod-hidden) .lm-Menu-itemLabel").all_inner_texts()
            page.keyboard.press("Escape")
            page.wait_for_selector(".lm-Menu", state="detached")
        assert any("Restart Kernel" in label for label in labels), f"menus not read: {labels}"
        tabs = page.locator(".lm-TabBar-tab").evaluate_all("tabs => tabs.map(t => t.title + ' ' + t.innerText)")
        text = page.locator("body").inner_text()
        for title in INSTRUCTOR_TITLES:
            assert not any(title.lower() in label.lower() for label in labels), f"menu item {title!r}"
            assert not any(title.lower() in tab.lower() for tab in tabs), f"side bar {title!r}"
            assert title not in text, f"{title!r} on the page"
        assert "Jupyter news" not in text, "JupyterLab asks about its news"
        widgets = page.locator(".nbgrader-CreateAssignmentWidget, .nbgrader-CellWidget, .nbgrader-formgrader, "
                               ".nbgrader-course-list, .nbgrader-assignment-list")
        assert widgets.count() == 0, "an nbgrader instructor widget is on the page"
        assert server.status("formgrader") != 200, "the formgrader server extension answers"
        _record("make lab: notebooks/01_mlp_core.ipynb (opened)", report.expressions, None, started)
        print(f"screenshot: {screenshot(page, 'make-lab-01_mlp_core')}")
    finally:
        server.stop()
        if not had_checkpoint:
            checkpoint.unlink(missing_ok=True)
        if not had_checkpoints and checkpoints.is_dir() and not any(checkpoints.iterdir()):
            checkpoints.rmdir()
    for path, content in before.items():
        now = path.read_bytes() if path.exists() else None
        assert now == content, f"{path.relative_to(ROOT)} changed while the browser test looked at it"


def test_a_failing_test_shows_only_its_message_and_the_panel_turns_a_tick_into_a_cross(course_lab, page):
    """Lesson 003 passes, then is broken and tested again: the panel shows ✗ for it (updated in
    place, without re-running the panel cell), and the failure's output has the course's message
    and no line of the course's helper modules."""
    student = load(ROOT / "notebooks" / "01_mlp_core.ipynb")
    solved = load(ROOT / "solutions" / "01_mlp_core.ipynb")

    def cell(notebook, grade_id):
        return next(c for c in notebook["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == grade_id)

    setup, panel = student["cells"][1], student["cells"][2]
    tests = cell(student, "lesson_003_linear_forward")
    wrong = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
             "source": "def linear_forward(x, W, b):\n    return x @ W  # the bias forgotten\n"}
    notebook = dict(student, cells=[setup, panel, cell(solved, "solution_003_linear_forward"), tests, wrong,
                                    json.loads(json.dumps(tests))])
    for item in notebook["cells"]:
        item.pop("id", None)
        if item["cell_type"] == "code":
            item["outputs"], item["execution_count"] = [], None
    path = course_lab.root / "scratch" / "progress-demo.ipynb"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(notebook, indent=1))
    _fresh_progress(course_lab)

    open_notebook(page, course_lab, "scratch/progress-demo.ipynb", notebook)
    run_all(page)
    cells = outputs(page)
    assert [c.index for c in cells if c.errors()] == [5], "only the second run of lesson 003's tests fails"
    failure = cells[-1].errors()[0]
    text = "\n".join([failure["ename"], failure["evalue"], *failure["traceback"]])
    assert "Test failed" in text and "the bias is missing" in text, text
    for internal in ("shared/", "checking.py", "site-packages", "grading/"):
        assert internal not in text, f"the failure shows the course's internals ({internal!r}):\n{text}"
    row = page.locator(".jp-OutputArea-output .mct-progress tr", has_text="linear_forward")
    assert "✗" in row.inner_text(), f"the panel still shows {row.inner_text()!r} for lesson 003"
    hide_side_bar(page)
    scroll_to_cell(page, 5, block="end")
    print(f"screenshot: {screenshot(page, 'progress-turns-to-a-cross')}")
    shut_down_kernel(page)


def test_make_lab_uses_a_random_token_and_no_jupytext(tmp_path):
    """`make lab` without LAB_TOKEN: the server refuses a request without the token it made up,
    and jupytext's server extension is not loaded."""
    server = start_make_lab(tmp_path)  # no LAB_TOKEN
    try:
        deadline = time.monotonic() + 90
        while "http://127.0.0.1" not in server.log_tail(200) and time.monotonic() < deadline:
            time.sleep(0.5)
        log = server.log_tail(400)
        assert "token=" in log, f"no token in the URL the server printed:\n{log}"
        assert server.first_answer("api/sessions") == 403, "the server answers without a token"
        loaded = [line for line in log.splitlines()
                  if "jupytext" in line.lower() and "extension was successfully" in line]
        assert not loaded, f"jupytext's server extension is loaded: {loaded}"
    finally:
        server.stop()
