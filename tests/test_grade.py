"""`make grade`: a learner alone gets the real grade of their own notebooks.

One run of tools/grade.py on four parts, as a learner grades by default (breaking cells are not run):

- Part 1 with most lessons solved, one left as the stub, one with a catalogued mistake and one that
  crashes inside the course's helper (lesson 005 hands `params` to linear_forward): each lesson's result
  is printed (the mistake by name; the crash by the learner's cell, line and the helper's name, with no
  path of the grader or the sandbox), the feedback page written, the graded XP recorded apart from the
  visible tests' XP, and the learner's notebook left untouched;
- Part 2 with lesson 012's own function breaking the rules for graded code (its cell does not run, and 012
  gets no points), every kind of scratch cell a learner writes (help, ?, ??, %timeit, %%time, !ls, a plot,
  show_progress, a print, an import os) outside every lesson and inside lesson 011, such scratch lines in
  lesson 013's own cell, and %%time above 011's function: the other lessons keep full marks, each scratch cell
  that breaks the rules says in one line that it was skipped, and 011's and 013's cells that they ran without
  their scratch lines;
- Part 3 cut off mid-file: named as not graded, with nbgrader's reason; the others are graded and get their
  pages from the same nbgrader process;
- Part 4 without any cell's metadata: graded by its code, every lesson with full marks.
"""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys

import nbformat
import pytest

from course import (ROOT, grade_id_of, make_submission, read, reference_code, scratch_cells, student_path,
                    with_scratch_cells)
from grading.protocol import RUN_BROKEN_CELLS_ENV
from shared.lessons import lessons_of

pytestmark = pytest.mark.slow


# Lesson 005 as a learner slips: the whole dict where linear_forward wants W1, so the course's helper fails.
CRASHING_LINE = 'Z1 = linear_forward(X, params, params["b1"])'
CRASHING_005 = reference_code("01_mlp_core", "mlp_forward").replace('Z1 = linear_forward(X, params["W1"], params["b1"])',
                                                                   CRASHING_LINE)


# What a learner writes to look around in the cell of the function itself, below it (lesson 013's cell).
OWN_SCRATCH_LINES = ("\nhelp(scale_accumulated_gradients)\nscale_accumulated_gradients?\n"
                     "%timeit -n 1 -r 1 sum(range(3))\nimport os\nprint(sorted(os.listdir('.'))[:3])\n"
                     "plt.plot([1.0, 0.5])\nplt.show()\n"
                     "print('looked around')\n")


# A sum of a thousand terms (pasted, or generated): Python runs it, but reading it raised RecursionError out of the
# rules' checker, and the whole part could not be graded.
TOO_DEEP_CELL = "total = " + " + ".join(["1"] * 1000) + "\n"


def copy_course_cells(notebook) -> None:
    """What JupyterLab's copy and paste does to a notebook (the copy keeps the cell's nbgrader metadata): lesson
    011's solution cell and 013's test cell copied, each pasted below itself, and 014's test cell given a
    grade_id the course does not have (as the cell's metadata editor allows)."""
    import copy
    for grade_id in ("solution_011_split_into_micro_batches", "lesson_013_scale_accumulated_gradients"):
        index = next(i for i, cell in enumerate(notebook.cells) if grade_id_of(cell) == grade_id)
        twin = copy.deepcopy(notebook.cells[index])
        twin.pop("id", None)
        notebook.cells.insert(index + 1, twin)
    renamed = next(cell for cell in notebook.cells if grade_id_of(cell) == "lesson_014_grad_accumulation_step")
    renamed.metadata["nbgrader"]["grade_id"] = "my_tests_014"


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("grade")
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    wrong = ("def linear_forward(x, W, b):\n"
             "    return x @ W  # forgot the bias\n")
    stub = next(c.source for c in read(student_path("01_mlp_core")).cells
                if grade_id_of(c) == "solution_008_relu_backward")
    first = make_submission("01_mlp_core", {"linear_forward": wrong, "relu_backward": stub, "mlp_forward": CRASHING_005},
                            default="reference")
    nbformat.write(first, notebooks / "01_mlp_core.ipynb")
    ran = tmp_path / "the-cell-ran"
    breaking = (f"import os\nopen({str(ran)!r}, 'w').write('ran')  # never runs while grading\n\n"
                "def accumulate_gradients(accumulated, micro_grads, micro_batch_size):\n    import os\n"
                "    return micro_grads\n")
    looking = reference_code("02_gradient_accumulation", "scale_accumulated_gradients") + OWN_SCRATCH_LINES
    timed = "%%time\n" + reference_code("02_gradient_accumulation", "split_into_micro_batches")  # timed, as people do
    answers = {"accumulate_gradients": breaking, "split_into_micro_batches": timed,
               "scale_accumulated_gradients": looking}
    second = make_submission("02_gradient_accumulation", answers, default="reference")
    with_scratch_cells(second, "split_into_micro_batches")
    copy_course_cells(second)
    second.cells.append(nbformat.v4.new_code_cell(TOO_DEEP_CELL))
    for entry in ([1, 2], {"grade_id": ["x"], "solution": True}):  # JupyterLab's metadata editor takes any JSON
        second.cells.append(nbformat.v4.new_code_cell("print('damaged metadata')", metadata={"nbgrader": entry}))
    nbformat.write(second, notebooks / "02_gradient_accumulation.ipynb")
    (notebooks / "03_activation_checkpointing.ipynb").write_text('{"cells": [')  # damaged: cut off mid-file
    stripped = make_submission("04_mixed_precision", default="reference")
    for cell in stripped.cells:  # what an editor that keeps no cell metadata hands in
        cell.metadata = {}
    nbformat.write(stripped, notebooks / "04_mixed_precision.ipynb")
    before = (notebooks / "01_mlp_core.ipynb").read_bytes()
    progress = tmp_path / "progress.json"
    env = dict(os.environ, MCT_PROGRESS_FILE=str(progress))
    env.pop(RUN_BROKEN_CELLS_ENV, None)
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "grade.py"), "--part", "01,02,03,04",
                          "--notebooks", str(notebooks), "--course", str(tmp_path / "course")],
                         env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    return {"out": run.stdout, "course": tmp_path / "course", "progress": progress, "ran": ran,
            "unchanged": (notebooks / "01_mlp_core.ipynb").read_bytes() == before}


def test_make_grade_prints_each_lessons_real_result(graded):
    out = graded["out"].split("Part 02_gradient_accumulation")[0]
    assert "✓ 001 · Make synthetic regression batch: 5/5" in out
    assert "✗ 003 · Linear forward: 0/5" in out and "the bias is missing" in out
    assert "✗ 008 · ReLU backward: 0/5" in out and "not started" in out
    assert "✗ 005 · MLP forward: 0/5" in out
    assert "graded: 80/120 XP in 4 part(s)" in graded["out"], graded["out"]
    assert (graded["course"] / "feedback" / "me" / "01_mlp_core" / "01_mlp_core.html").is_file()
    results = json.loads(graded["progress"].read_text())["graded"]
    assert results["001"] is True and results["003"] is False and results["005"] is False and results["008"] is False
    assert graded["unchanged"], "grading must never change the learner's notebook"


def test_a_damaged_notebook_is_named_and_the_others_are_graded_in_the_same_nbgrader_process(graded):
    """One nbgrader process releases the parts, grades them and writes their feedback pages (each process
    takes about two seconds to start): a notebook it cannot read (part 3, cut off mid-file) is named with
    the reason, gets no page, and costs the other parts nothing."""
    said = [line for line in graded["out"].splitlines() if line.startswith("Part 03_activation_checkpointing")]
    assert len(said) == 1 and "could not be graded (" in said[0] and "JSON" in said[0], said
    log = (graded["course"] / "nbgrader.log").read_text()
    assert all(f"[{app} |" in log for app in ("GenerateAssignmentApp", "AutogradeApp", "GenerateFeedbackApp")), log
    pages = graded["course"] / "feedback" / "me"
    assert sorted(page.name for page in pages.glob("*/*.html")) == ["01_mlp_core.html", "02_gradient_accumulation.html",
                                                                    "04_mixed_precision.html"]


def test_a_learner_s_crash_is_shown_at_their_line_and_never_at_the_grader_s_files(graded):
    """The verdict (make grade's output and the feedback page) names the learner's cell by its lesson, the
    line within the cell and its text, then the course's helper that failed, by name; no path of the
    grader, the course's modules or the sandbox (the kernel's cells are /tmp/ipykernel_N/M.py files there)."""
    from test_where import assert_no_path

    number = CRASHING_005.splitlines().index(f"    {CRASHING_LINE}") + 1
    where = (f"lesson 005's cell, line {number}, in mlp_forward: {CRASHING_LINE}\n"
             f"{' ' * 10}in the course's helper linear_forward\n")
    out = graded["out"].split("✗ 005 · MLP forward: 0/5")[1].split("✓ 006")[0]
    assert "mlp_forward raised" in out and where in out, out
    assert_no_path(out)
    page = html.unescape((graded["course"] / "feedback" / "me" / "01_mlp_core" / "01_mlp_core.html").read_text())
    assert f"lesson 005's cell, line {number}, in mlp_forward: {CRASHING_LINE}" in page
    assert "in the course's helper linear_forward" in page
    assert not any(sign in page for sign in ("ipykernel_", "site-packages", "/grading/", "/shared/", "/mct/"))


def test_graded_code_that_breaks_the_rules_is_not_run_and_scratch_cells_cost_nothing(graded):
    """By default (as an instructor grades) a cell that breaks the rules for graded code never runs: lesson
    012's own cell costs lesson 012; the scratch cells (tests/course.py: scratch_cells) cost nothing, and each
    one that breaks the rules says in one line that it was skipped."""
    out = graded["out"].split("Part 02_gradient_accumulation")[1]
    assert "grade withheld" not in out, out
    assert "✗ 012 · Accumulate gradients: 0/5" in out and "line 1: import os" in out, out
    for lesson in ("011 · Split into micro batches", "013 · Scale accumulated gradients", "014 · Grad accumulation step"):
        assert f"✓ {lesson}: 5/5" in out, out
    notebook = read(graded["course"] / "autograded" / "me" / "02_gradient_accumulation" / "02_gradient_accumulation.ipynb")
    outputs = {c.source: c.outputs for c in notebook.cells if c.cell_type == "code"}
    skipped = [source for source in scratch_cells("split_into_micro_batches")
               if any("Skipped while grading: it does not change your grade" in o.get("text", "") for o in outputs[source])]
    assert set(skipped) >= {"help(split_into_micro_batches)", "split_into_micro_batches?", "!ls"}, skipped
    assert not any("Skipped while grading" in o.get("text", "") for o in outputs["print(split_into_micro_batches)"])
    not_run = [c for c in notebook.cells if c.cell_type == "code" and c.outputs and "not run:" in c.outputs[0].get("evalue", "")]
    assert len(not_run) == 1 and not graded["ran"].exists()  # lesson 012's own cell
    own = next(c for c in notebook.cells if grade_id_of(c) == "solution_013_scale_accumulated_gradients")
    assert own.source.endswith(OWN_SCRATCH_LINES)  # the learner's cell as they wrote it
    shown = [o.get("text", "") for o in own.outputs]
    assert shown[0].startswith("Lines ") and "of this cell skipped while grading" in shown[0], shown
    assert "it does not change your grade; the rest of the cell ran" in shown[0], shown
    assert shown[1:] == ["looked around\n"], shown  # the print that keeps the rules ran; help, %timeit, os did not
    timed = next(c for c in notebook.cells if grade_id_of(c) == "solution_011_split_into_micro_batches")
    assert timed.outputs[0]["text"].startswith("Line 1 of this cell skipped while grading (line 1 uses %%time")
    damaged = [c for c in notebook.cells if c.source == "print('damaged metadata')"]  # ordinary cells, that ran
    assert len(damaged) == 2 and all(c.outputs[0]["text"] == "damaged metadata\n" for c in damaged)
    deep = next(c for c in notebook.cells if c.source == TOO_DEEP_CELL)
    assert "Skipped while grading" in deep.outputs[0]["text"] and "nested too deeply" in deep.outputs[0]["text"]


def test_copied_and_renamed_course_cells_are_ordinary_cells_and_cost_nothing(graded):
    """Part 2 holds a copy of lesson 011's solution cell and of 013's test cell, each with the original's
    nbgrader metadata (as copy and paste leaves it), and 014's test cell under a grade_id the course does not
    have: the part is graded (nbgrader itself ended with a KeyError), the copies run as ordinary cells, 014's
    test cell is put back, and every lesson keeps its points."""
    out = graded["out"].split("Part 02_gradient_accumulation")[1].split("Part 03_activation_checkpointing")[0]
    assert "could not be graded" not in out, out
    for lesson in ("011 · Split into micro batches", "013 · Scale accumulated gradients",
                   "014 · Grad accumulation step"):
        assert f"✓ {lesson}: 5/5" in out, out
    part = "02_gradient_accumulation"
    notebook = read(graded["course"] / "autograded" / "me" / part / f"{part}.ipynb")
    ids = [grade_id_of(cell) for cell in notebook.cells if grade_id_of(cell)]
    assert len(ids) == len(set(ids)) and "lesson_014_grad_accumulation_step" in ids and "my_tests_014" not in ids


def test_a_notebook_stripped_of_its_cell_metadata_is_graded_by_its_code(graded):
    """Part 4 handed in without any cell's metadata (no grade_id anywhere): each test cell is put back below the
    cell that defines its lesson's function, read from the code, so every lesson keeps its points."""
    out = graded["out"].split("Part 04_mixed_precision")[1]
    assert out.count(": 5/5") == 6 and "could not be graded" not in out, out
    part = "04_mixed_precision"
    notebook = read(graded["course"] / "autograded" / "me" / part / f"{part}.ipynb")
    tests = [index for index, cell in enumerate(notebook.cells) if (grade_id_of(cell) or "").startswith("lesson_")]
    defines = [next(i for i, cell in enumerate(notebook.cells) if cell.source.startswith(f"def {lesson.function}("))
               for lesson in lessons_of(part)]
    assert [test - 1 for test in tests] == defines, (tests, defines)  # each right below its function's cell


def test_one_part_saved_under_another_part_s_name_is_said_so(tmp_path, capsys):
    """make grade grades a file by its name, as an instructor does; when it holds another part's lessons the
    learner reads why it scores nothing, before the verdicts."""
    import shutil
    sys.path.insert(0, str(ROOT / "tools"))
    import grade
    from course import solved_path
    misnamed = tmp_path / "01_mlp_core.ipynb"
    shutil.copy(solved_path("02_gradient_accumulation"), misnamed)
    grade.print_if_another_part(misnamed, "01_mlp_core")
    assert "NOTE, part 01_mlp_core: 01_mlp_core.ipynb holds the lessons of part 02_gradient_accumulation" in \
        capsys.readouterr().out
    grade.print_if_another_part(solved_path("01_mlp_core"), "01_mlp_core")
    assert capsys.readouterr().out == ""


# A cell past the sandbox's memory (given 1.25 GiB below, as tests/test_nbgrader_loop.py gives it): the kernel dies.
# (A lesson's function cannot stop it so: its test cell calls it under a lower limit, and it raises MemoryError.)
PAST_MEMORY = "hog = np.ones(3 * 2**27)  # 3 GiB"


def insert_below(notebook, grade_id: str, source: str) -> int:
    """Insert a code cell of ``source`` below the cell ``grade_id``; its index."""
    index = next(i for i, cell in enumerate(notebook.cells) if grade_id_of(cell) == grade_id) + 1
    notebook.cells.insert(index, nbformat.v4.new_code_cell(source))
    return index


def test_a_cell_that_stops_the_kernel_costs_only_what_it_does(tmp_path):
    """Part 1: a scratch cell past the sandbox's memory, and one that prints 40 MB (one message past the
    grader's limit: ZeroMQ cuts the connection, and nothing after it arrived): the notebook is graded again
    without each, so they cost nothing, and nothing waits for a human; each shows why it was not run again.  Part 2:
    three such scratch cells: the notebook runs at most three times, so the lesson after the third loses its
    points, and its verdict names that cell."""
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    first = make_submission("01_mlp_core", default="reference")
    scratch = insert_below(first, "lesson_002_init_mlp_params", "print('before')\n" + PAST_MEMORY)
    printed = insert_below(first, "lesson_005_mlp_forward", "print('x' * 40_000_000)  # one message past 32 MiB")
    nbformat.write(first, notebooks / "01_mlp_core.ipynb")
    second = make_submission("02_gradient_accumulation", default="reference")
    for lesson in ("lesson_011_split_into_micro_batches", "lesson_012_accumulate_gradients",
                   "lesson_013_scale_accumulated_gradients"):
        third = insert_below(second, lesson, PAST_MEMORY)
    nbformat.write(second, notebooks / "02_gradient_accumulation.ipynb")
    env = dict(os.environ, MCT_PROGRESS_FILE=str(tmp_path / "progress.json"), MCT_KERNEL_MEMORY=str(5 * 2**28))
    env.pop(RUN_BROKEN_CELLS_ENV, None)
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "grade.py"), "--part", "01,02",
                          "--notebooks", str(notebooks), "--course", str(tmp_path / "course")],
                         env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    one, two = run.stdout.split("Part 02_gradient_accumulation")
    assert one.count(": 5/5") == 10 and "human look" not in one, one
    graded = read(tmp_path / "course" / "autograded" / "me" / "01_mlp_core" / "01_mlp_core.ipynb")
    shown = [output.get("text", output.get("evalue", "")) for output in graded.cells[scratch].outputs]
    assert shown[0] == "before\n" and shown[-1].endswith("graded again from its start without this cell"), shown
    cut = graded.cells[printed].outputs[-1].evalue  # ZeroMQ dropped the connection: all after it was lost before
    assert "a message of more than 33,554,432 bytes" in cut and cut.endswith("without this cell"), cut
    assert two.count(": 5/5") == 3 and "✗ 014 · Grad accumulation step: 0/5" in two, two
    assert f"stopped at cell {third + 1} (a cell of your own, not a lesson's)" in two, two
    assert "graded: 65/70 XP in 2 part(s)" in run.stdout, run.stdout


def test_the_feedback_page_draws_its_math_itself_and_loads_nothing(graded):
    """Learners read feedback offline: every formula of the notebook is MathML in the page, and the page
    has no script and fetches nothing (nbgrader's template loaded MathJax from a CDN)."""
    from test_feedback_math import _formulas

    page = (graded["course"] / "feedback" / "me" / "01_mlp_core" / "01_mlp_core.html").read_text()
    formulas = sum(_formulas(c.source) for c in read(student_path("01_mlp_core")).cells if c.cell_type == "markdown")
    assert page.count("<math") == formulas > 20
    assert "<script" not in page and "<link" not in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page), "the page loads something from the network"


def test_a_release_that_fails_is_the_course_s_error_said_on_stderr(tmp_path, capsys):
    """If the course's own notebook cannot be released (here: its source made unreadable), nothing is graded and
    ``make grade`` fails, showing what nbgrader said while releasing (not the grading errors that follow)."""
    from course import tool
    from grading.private_course import grading_env, prepare, unsandboxed_reason
    grade = tool("grade")
    slug = "03_activation_checkpointing"
    course = tmp_path / "course"
    prepare(course, [slug])
    (course / "source" / slug / f"{slug}.ipynb").write_text("{cut off")
    assert grade.grade_parts(course, {slug: ROOT / "notebooks" / f"{slug}.ipynb"},
                             grading_env(course, unsandboxed_reason())) is None
    said = capsys.readouterr()
    assert "could not be released" in said.err and "GenerateAssignmentApp" in said.err and "Autograde" not in said.err
    assert "Part 03" not in said.out
