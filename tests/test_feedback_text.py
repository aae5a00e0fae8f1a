"""The feedback page in a learner's words (grading/feedback_text.py, grading.preprocessors.LearnerFeedback).

The grader's notes are taken from the grader itself (its preprocessors write them here as they do while
grading), so a note reworded there without its plain words here fails a test.  The autograded notebook
keeps the grader's words (the instructor's tools read them); only the page changes.
"""

from __future__ import annotations

import copy
import re
import sys

import nbformat
import pytest
from nbconvert.filters.strings import clean_html
from nbformat import NotebookNode

from course import ROOT, formgrader_page, make_submission, with_import_inside
from grading import feedback_text, judge, rules
from grading.preprocessors import JudgeLessons, LearnerFeedback, SandboxedExecute
from grading.preprocessors.judgelessons import _apply_rules, _refusal_output, verdict_output
from grading.preprocessors.sandboxedexecute import KERNEL_DIED, _not_run_again
from shared.lessons import lesson, lessons_of

sys.path.insert(0, str(ROOT / "tools"))
import instructor  # noqa: E402

SLUG = "01_mlp_core"
# What a learner never reads on the page: the grader's class names and its bookkeeping.
INTERNAL = ("GradedFailure", "RulesBroken", "KernelDied", "AnswersRefused", "human look", "[not run:",
            "answers refused", "os._exit", "sandbox")


def _texts(output: NotebookNode) -> str:
    """Everything of an output a page could show."""
    text = output.get("text", "")
    return "\n".join([output.get("ename", ""), output.get("evalue", ""), *output.get("traceback", []),
                      "".join(text) if isinstance(text, list) else text])


def _internal_words(output: NotebookNode) -> list[str]:
    return [word for word in INTERNAL if word in _texts(output)]


def _run_cell_when_dead(died_at: int) -> NotebookNode:
    """The output SandboxedExecute gives a cell after the one where the kernel died."""
    execute = SandboxedExecute()
    execute._died_at = died_at
    cell, _ = execute._run_cell(nbformat.v4.new_code_cell("x = 1"), {}, died_at + 3)
    return cell.outputs[0]


def _rules_output(scratch: bool = False) -> tuple[NotebookNode, str]:
    """The output SandboxedExecute gives a cell that breaks the rules for graded code (lesson 004's own
    cell, or a scratch cell of the learner's), and the break's words."""
    notebook = make_submission(SLUG, default="reference")
    if scratch:
        index = 3
        notebook.cells.insert(index, nbformat.v4.new_code_cell("import os\nprint(os.getcwd())"))
    else:
        index = next(i for i, c in enumerate(notebook.cells) if c.cell_type == "code"
                     and c.source.startswith(f"def {lesson('004').function}("))
        notebook.cells[index].source = with_import_inside(notebook.cells[index].source, lesson('004').function)[0]
    findings = rules.check_notebook(notebook.cells, SLUG)
    execute = SandboxedExecute()
    execute._mct = {"rules": findings}
    cell, _ = execute.preprocess_cell(notebook.cells[index], {"nbgrader": {"assignment": SLUG}}, index)
    return cell.outputs[0], findings.cells[0].message()


def test_a_skipped_scratch_cell_says_so_in_one_plain_line():
    """A scratch cell that breaks the rules is skipped while grading and costs nothing: its note is already
    in the learner's words (no grader's vocabulary, no instructor's look)."""
    note, _ = _rules_output(scratch=True)
    assert note.output_type == "stream" and note.text.startswith("Skipped while grading: it does not change your grade")
    assert _internal_words(note) == [] and note.text.count("\n") == 1, note.text
    assert feedback_text.plain_output(copy.deepcopy(note)).text == note.text


def test_a_cell_run_without_its_scratch_lines_says_so_in_one_plain_line():
    """A lesson's cell with ``help(...)`` and ``%timeit`` lines of its own runs without them: the note that says so
    is in the learner's words too, and the feedback keeps it as it is."""
    from shared.policy import scratch_lines
    function = lesson("004").function
    cell = f"help({function})\ndef {function}(z):\n    return np.maximum(z, 0)\n%timeit {function}(1)\n"
    trimmed = scratch_lines(cell, course={"np": "numpy"})
    note = NotebookNode(output_type="stream", name="stdout", text=trimmed.note())
    assert note.text.startswith("Lines 1, 4 of this cell skipped while grading (line 1 uses help: ")
    assert _internal_words(note) == [] and note.text.count("\n") == 1, note.text
    assert feedback_text.plain_output(copy.deepcopy(note)).text == note.text


def _grader_notes() -> dict[str, NotebookNode]:
    """Each kind of note the grader writes into an autograded notebook, as it writes it."""
    failed = judge.Verdict("004", False, "the result of relu_forward is wrong in 4 of 4 entries")
    refused = JudgeLessons._judge("004", 7, "", {}, [(7, "004", "lesson 004's test cell sent more than one set of "
                                                               "answers")], {})
    moved = JudgeLessons._judge("003", 7, "004", {}, [], {})
    broken = rules.Findings([rules.CellBreak(5, "004", (rules.Break(1, "import os", "imports os"),))])
    return {"failed": verdict_output(failed), "refused": verdict_output(refused), "moved": verdict_output(moved),
            "lesson's rules": verdict_output(_apply_rules(failed, broken)),
            "kernel died": NotebookNode(output_type="error", ename="KernelDied", evalue=KERNEL_DIED,
                                        traceback=[KERNEL_DIED]),
            "after the kernel died": _run_cell_when_dead(28),
            "not run again": _not_run_again(nbformat.v4.new_code_cell("x = 1"), None)[-1],
            "cell's rules": _rules_output()[0],
            "refused elsewhere": _refusal_output("answers to lesson 004 came from a cell that is not its test cell")}


@pytest.mark.parametrize("kind", list(_grader_notes()))
def test_every_note_of_the_grader_reads_in_plain_words(kind):
    note = _grader_notes()[kind]
    assert _internal_words(note), f"the grader's {kind} note has no internal word: this test checks nothing"
    plain = feedback_text.plain_output(copy.deepcopy(note))
    assert _internal_words(plain) == [], _texts(plain)


def test_a_note_keeps_what_it_says():
    notes = _grader_notes()
    failed = feedback_text.plain_output(notes["failed"])
    assert failed.traceback == ["Lesson 004 · ReLU forward: 0/5",
                                "the result of relu_forward is wrong in 4 of 4 entries"]
    refused = feedback_text.plain_output(notes["refused"]).traceback[1]
    assert refused == ("Your answers were not accepted: lesson 004's test cell sent more than one set of answers; "
                       "no points (your instructor will look at this notebook)")
    rules_output, broken = _rules_output()
    assert broken in feedback_text.plain_output(rules_output).evalue
    assert "your instructor will look at this notebook" in feedback_text.plain_output(notes["kernel died"]).evalue
    again = feedback_text.plain_output(notes["not run again"]).evalue
    assert again == ("Your notebook's kernel stopped here (it crashed, was ended by the code, or went past the grading "
                     "limits on memory, processes or time): the notebook was graded again from its start without this "
                     "cell"), again  # it cost nothing but that cell: no instructor's look
    stopped_note = _not_run_again(nbformat.v4.new_code_cell("x = 1"), "it sent too much")[-1]
    stopped = feedback_text.plain_output(stopped_note).evalue
    assert stopped == "it sent too much: the kernel was stopped; the notebook was graded again from its start " \
                      "without this cell", stopped


def test_a_dead_kernel_is_named_as_a_learner_counts_cells_with_its_lesson():
    plain = feedback_text.plain_output(_run_cell_when_dead(28))
    assert plain.text.startswith("Not run: your notebook's kernel stopped (it crashed, or ran out of memory or time) "
                                 "at cell 29, so this cell did not run."), plain.text
    notebook = make_submission(SLUG, default="reference")
    where = LearnerFeedback._cell_namer(notebook, SLUG)
    index = next(i for i, cell in enumerate(notebook.cells) if cell.cell_type == "markdown"
                 and cell.source.startswith(lesson("007").heading)) + 1
    assert where(index) == f"cell {index + 1} (lesson 007 · Linear backward)"
    assert where(0) == "cell 1"


def test_an_instructor_s_comment_keeps_its_words_and_loses_only_the_grader_s():
    comment = "Needs a human look: cell 5: answers refused: two sets (this notebook needs a human look)\nWell done!"
    assert feedback_text.plain_words(comment) == ("Your instructor will look at this: cell 5: Your answers were not "
                                                  "accepted: two sets (your instructor will look at this notebook)"
                                                  "\nWell done!")
    assert feedback_text.plain_words("A human look at np.maximum, please.") == "A human look at np.maximum, please."


# --------------------------------------------------------------------------
# a verdict with the gradebook's score
# --------------------------------------------------------------------------

def _test_cell(code: str, passed: bool, score: float) -> NotebookNode:
    """A lesson's autograded test cell as GetGrades leaves it: the verdict, and the gradebook's score."""
    item = lesson(code)
    cell = nbformat.v4.new_code_cell("check(...)")
    cell.metadata.nbgrader = NotebookNode(grade=True, solution=False, grade_id=item.grade_id, points=5.0, score=score)
    cell.outputs = [verdict_output(judge.Verdict(code, passed, "8 hidden cases right" if passed else "wrong values"))]
    return cell


def test_a_verdict_states_the_score_the_instructor_set():
    cell = _test_cell("004", False, 2.0)
    [verdict] = feedback_text.verdict_outputs(cell, lesson("004"))
    assert verdict.traceback == ["Lesson 004 · ReLU forward: 2/5",
                                 "Your instructor set this lesson to 2 / 5 (the automatic grade was 0 / 5).",
                                 "wrong values"]
    passed = _test_cell("003", True, 3.5)
    outputs = feedback_text.verdict_outputs(passed, lesson("003"))
    assert [o.text for o in outputs] == ["✓ Lesson 003 · Linear forward: graded 5/5 (8 hidden cases right)\n",
                                         "Your instructor set this lesson to 3.5 / 5 "
                                         "(the automatic grade was 5 / 5).\n"]


def test_a_verdict_the_instructor_left_alone_says_only_the_judge_s_words():
    for code, passed, score in (("004", False, 0.0), ("003", True, 5.0)):
        cell = _test_cell(code, passed, score)
        outputs = feedback_text.verdict_outputs(copy.deepcopy(cell), lesson(code))
        assert len(outputs) == 1 and "instructor" not in _texts(outputs[0])
        assert _texts(outputs[0]) == _texts(feedback_text.plain_output(cell.outputs[0]))


# --------------------------------------------------------------------------
# the progress panel
# --------------------------------------------------------------------------

SCORES = {item.code: (5.0 if index % 3 else 0.0, 5.0) for index, item in enumerate(lessons_of(SLUG))}


def test_the_progress_panel_counts_the_grades_of_the_page():
    scores = {**SCORES, "004": (2.0, 5.0)}  # 004: set by hand, not all its points
    panel = feedback_text.progress_panel(SLUG, scores)
    lines = panel.data["text/plain"].splitlines()
    earned = sum(score for score, _ in scores.values())
    assert lines[0].startswith(f"Part 1 · MLP forward and backward core: {earned:g}/50 XP graded · about ")
    assert lines[1:] == [f"  [{'✓' if score == 5 else '✗'}] {code} {lesson(code).function}  {score:g}/5"
                         for code, (score, _) in scores.items()]
    assert panel.data["text/html"].count('class="mct-pass"') == sum(score == 5 for score, _ in scores.values())
    assert panel.data["text/html"].count('class="mct-fail"') == sum(score < 5 for score, _ in scores.values())
    everything = feedback_text.progress_panel(SLUG, {code: (5.0, 5.0) for code in SCORES})
    assert "50/50 XP graded · nothing left" in everything.data["text/plain"]


def test_the_progress_panel_survives_nbconvert_s_sanitizer_and_the_page_check_whole():
    html = feedback_text.progress_panel(SLUG, SCORES).data["text/html"]
    assert clean_html(html) == html
    assert instructor.active_html(f"<body>{html}</body>") == []


def _graded_release() -> tuple[NotebookNode, dict]:
    """Part 1's reference answers with verdicts, as GetGrades leaves it for the page; 004 set to 2 by hand."""
    notebook = make_submission(SLUG, default="reference")
    for cell in notebook.cells:
        item = feedback_text.lesson_of_test_cell(cell)
        if item is not None:
            passed = SCORES[item.code][0] == 5.0
            score = 2.0 if item.code == "004" else SCORES[item.code][0]
            cell.metadata.nbgrader.update(score=score, points=5.0)
            cell.outputs = [verdict_output(judge.Verdict(item.code, passed, "x" if not passed else "right"))]
    return notebook, {"nbgrader": {"assignment": SLUG, "notebook": SLUG}}


def test_the_page_s_panel_is_drawn_from_the_grades_in_place_of_the_notebook_s():
    notebook, resources = _graded_release()
    [panel_cell] = [c for c in notebook.cells if c.cell_type == "code" and "show_progress(" in c.source
                    and "import" not in c.source]
    panel_cell.outputs = [nbformat.v4.new_output("display_data", data={"text/plain": "Part 1 · …: 0/50 XP"})]
    LearnerFeedback().preprocess(notebook, resources)
    [panel] = panel_cell.outputs
    expected = sum(score for code, (score, _) in SCORES.items() if code != "004") + 2
    assert panel.data["text/plain"].startswith(f"Part 1 · MLP forward and backward core: {expected:g}/50 XP graded")
    verdict = next(c for c in notebook.cells if feedback_text.lesson_of_test_cell(c) == lesson("004")).outputs[0]
    assert verdict.traceback[:2] == ["Lesson 004 · ReLU forward: 2/5",
                                     "Your instructor set this lesson to 2 / 5 (the automatic grade was 0 / 5)."]


def test_a_changed_panel_cell_is_the_learner_s_and_is_left_alone():
    notebook, resources = _graded_release()
    panel_cell = next(c for c in notebook.cells
                      if c.cell_type == "code" and re.search(r"^show_progress", c.source, re.M))
    panel_cell.source += "\nprint('mine')"
    mine = [nbformat.v4.new_output("stream", name="stdout", text="mine\n")]
    panel_cell.outputs = copy.deepcopy(mine)
    LearnerFeedback().preprocess(notebook, resources)
    assert panel_cell.outputs == mine


# --------------------------------------------------------------------------
# the page: lessons named, long lines wrapped
# --------------------------------------------------------------------------

def _page(notebook: NotebookNode, resources: dict) -> str:
    """The feedback page as `nbgrader generate_feedback` writes it with the course's configuration."""
    from pathlib import Path

    import nbgrader
    from traitlets.config import Config

    from grading import feedback_math
    from grading.feedback_page import FeedbackExporter
    config = Config()
    config.HTMLExporter.template_name = "feedback"
    formgrader = Path(nbgrader.__file__).parent / "server_extensions" / "formgrader"
    config.HTMLExporter.extra_template_basedirs = [str(feedback_math.TEMPLATES), str(formgrader / "templates")]
    # (as nbgrader's GenerateFeedback sets it: where the page's bootstrap.min.css is)
    config.HTMLExporter.extra_template_paths = [str(formgrader / "static" / "node_modules" / "bootstrap" / "dist"
                                                    / "css")]
    config.HTMLExporter.filters = {"markdown2html": "grading.feedback_math.markdown2html"}
    config.HTMLExporter.sanitize_html = True
    config.FeedbackExporter.template_file = "course.html.j2"
    resources["nbgrader"].update(score=27.0, max_score=50.0, late_penalty=0)
    page, _ = FeedbackExporter(config=config).from_notebook_node(notebook, resources)
    return page


def test_the_page_names_every_test_cell_by_its_lesson_and_wraps_long_lines():
    notebook, resources = _graded_release()
    LearnerFeedback().preprocess(notebook, resources)
    page = _page(notebook, resources)
    summary = page[page.index('<div id="toc">'):page.index("</ol>")]
    entries = re.findall(r"<li>(.*?)</li>", summary)
    assert entries == [f'<a href="#{item.grade_id}">Lesson {item.code} · {item.title}</a> (Score: '
                       f'{2 if item.code == "004" else SCORES[item.code][0]:g} / 5)' for item in lessons_of(SLUG)]
    assert "Test cell" not in page and "Grade cell" not in page
    assert page.count(": tests</span>") == len(lessons_of(SLUG))
    assert "(Score: 27 / 50)" in page
    head = page[:page.index("</head>")]
    assert re.search(r"div\.output_area pre[^{]*\{[^}]*white-space: pre-wrap;[^}]*overflow-wrap: anywhere", head)
    assert instructor.active_html(page) == []


# --------------------------------------------------------------------------
# the formgrader's view: the same words, a verdict line by line
# --------------------------------------------------------------------------

_OUTPUT_TEXT = re.compile(r'<div class="output_subarea output_[^"]*">\s*<pre>(.*?)</pre>', re.S)


def _shown_outputs(page: str) -> list[str]:
    """The text of every text output of a page, as a reader sees it (tags dropped, entities read)."""
    import html
    return [html.unescape(re.sub(r"<[^>]+>", "", text)) for text in _OUTPUT_TEXT.findall(page)]


def test_the_formgrader_shows_each_note_of_the_grader_in_the_feedback_page_s_words_line_by_line():
    """The instructor's view of a submission and the learner's page word the grader's notes alike (one wording:
    feedback_text.plain_words), and a verdict of several long lines is shown whole, each line on its own."""
    notes = _grader_notes()
    long_line = "for z = " + ", ".join(f"{x / 8:.3f}" for x in range(60)) + " you returned the same values"
    notes["failed on several lines"] = verdict_output(judge.Verdict(
        "004", False, f"the result of relu_forward is wrong in 4 of 4 entries\n{long_line}\nexpected 0 where z < 0"))
    notebook = make_submission(SLUG, default="reference")
    shown = []
    for note in notes.values():  # each note the output of a cell of its own
        notebook.cells.append(nbformat.v4.new_code_cell("x = 1", outputs=[copy.deepcopy(note)]))
        words = feedback_text.plain_output(copy.deepcopy(note))  # what the learner's page shows of it
        shown.append("\n".join(words.traceback) if note.output_type == "error" else words.text)
    page = formgrader_page(notebook)
    outputs = _shown_outputs(page)
    assert [text.strip("\n") for text in outputs[-len(notes):]] == [text.strip("\n") for text in shown]
    several = outputs[-1].strip("\n").split("\n")
    assert several == ["Lesson 004 · ReLU forward: 0/5", "the result of relu_forward is wrong in 4 of 4 entries",
                       long_line, "expected 0 where z < 0"]
    assert not [word for word in INTERNAL if any(word in text for text in outputs)]
    head = page[:page.index("</head>")]  # long lines wrap, as on the feedback page
    assert re.search(r"div\.output_area pre[^{]*\{[^}]*white-space: pre-wrap;[^}]*overflow-wrap: anywhere", head)
