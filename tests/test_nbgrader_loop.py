"""The whole nbgrader loop in a scratch course directory, for every landed part.

generate_assignment (with a gradebook), then autograde, per part:
(a) the reference, (b) the untouched stubs, (c) answers hard-coded for the
visible tests, (d) for each k, a submission making the k-th catalogued mistake
of every lesson that has one, (e) an endless loop in the part's first lesson;
and for Part 1 also four mistakes written as a learner would write them.
Then feedback.  Scores are read back from the gradebook, lesson by lesson.
"""

import html
import time

import nbformat
import pytest
from nbgrader.api import Gradebook

from course import (built_parts, hard_coded_answer, make_course, make_submission, nbgrader,
                    nbgrader_env, read, reference_code, replace_body, student_path, submit,
                    visible_test_answers)
from shared.lessons import lessons_of
from shared.mistakes import mistakes_of

pytestmark = pytest.mark.slow
PARTS = built_parts()
TIMEOUT = 6  # seconds per cell while autograding in this test (the course default is 30)

HAND_WRITTEN_MISTAKES = {  # Part 1: function -> (body with the mistake, the name the feedback must give)
    "mse_loss_and_grad": ("diff = Y_hat - Y\nreturn float(np.mean(diff ** 2)), 2.0 * diff",
                          "MSE gradient summed instead of averaged"),
    "linear_backward": ("return dZ @ W.T, dZ.T @ x, dZ.sum(axis=0)", "dW without the transpose"),
    "relu_backward": ("return dA * (dA > 0)", "ReLU mask taken from the wrong array"),
    "first_linear_backward": ("return X.T @ dZ1, dZ1", "bias gradient not summed over the batch"),
}


def with_body(slug, function, body):
    return replace_body(reference_code(slug, function), function, body)


def catalogued_mistake(function: str, k: int) -> str:
    """Solution code that behaves exactly like the lesson's k-th catalogued mistake."""
    return (f"def {function}(*args, **kwargs):\n"
            "    from shared.mistakes import mistakes_of\n"
            f"    return mistakes_of({function!r})[{k}].compute(*args, **kwargs)\n")


def submissions_for(slug):
    lessons = lessons_of(slug)
    answers = visible_test_answers(slug)
    first = lessons[0].function
    subs = {
        "reference": (make_submission(slug, default="reference"), {}),
        "stubs": (make_submission(slug, default="stub"), {l.code: None for l in lessons}),
        "hardcoded": (make_submission(slug, {f: hard_coded_answer(f, a) for f, a in answers.items()}),
                      {l.code: None for l in lessons}),
        "endless_loop": (make_submission(slug, {first: with_body(slug, first, "while True:\n    pass")},
                                         default="reference"), {lessons[0].code: "Timeout"}),
    }
    most = max(len(mistakes_of(l.function)) for l in lessons)
    for k in range(most):
        wrong = {l.function: catalogued_mistake(l.function, k) for l in lessons if len(mistakes_of(l.function)) > k}
        subs[f"mistakes_{k + 1}"] = (make_submission(slug, wrong, default="reference"),
                                     {l.code: mistakes_of(l.function)[k].name
                                      for l in lessons if l.function in wrong})
    if slug == "01_mlp_core":
        subs["hand_written_mistakes"] = (
            make_submission(slug, {f: with_body(slug, f, body) for f, (body, _) in HAND_WRITTEN_MISTAKES.items()},
                            default="reference"),
            {l.code: HAND_WRITTEN_MISTAKES[l.function][1] for l in lessons if l.function in HAND_WRITTEN_MISTAKES})
    return subs, answers


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    course = tmp_path_factory.mktemp("course")
    make_course(course, PARTS)
    return course


@pytest.fixture(scope="module", params=PARTS)
def graded(request, course):
    """Autograde every kind of submission for one part; {student: per-lesson scores, ...}."""
    slug = request.param
    env = nbgrader_env(course, MCT_CELL_TIMEOUT=str(TIMEOUT))
    nbgrader(course, "generate_assignment", slug, "--force", env=env)
    submissions, answers = submissions_for(slug)
    for student, (notebook, _) in submissions.items():
        submit(course, student, slug, notebook)
    started = time.perf_counter()
    run = nbgrader(course, "autograde", slug, env=env, check=False)
    seconds = time.perf_counter() - started
    nbgrader(course, "generate_feedback", slug, env=env)
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        scores = {student: {lesson.code: gradebook.find_grade(lesson.grade_id, slug, slug, student).score
                            for lesson in lessons_of(slug)}
                  for student in submissions}
    possible = 5 * len(lessons_of(slug))
    print(f"\n{slug}: autograde of {len(submissions)} submissions took {seconds:.1f} s "
          f"({seconds / len(submissions):.1f} s each)")
    for student, per_lesson in scores.items():
        print(f"  {student:22s} {sum(per_lesson.values()):4.0f}/{possible}  "
              + " ".join(f"{c}:{s:.0f}" for c, s in per_lesson.items()))
    return {"slug": slug, "course": course, "run": run, "scores": scores, "submissions": submissions}


def feedback_html(graded, student):
    """The feedback page's text, HTML entities decoded (``&gt;`` -> ``>``)."""
    slug = graded["slug"]
    return html.unescape((graded["course"] / "feedback" / student / slug / f"{slug}.html").read_text())


def test_autograde_exits_cleanly(graded):
    assert graded["run"].returncode == 0, graded["run"].stderr[-3000:]


def test_reference_gets_full_marks(graded):
    assert all(score == 5 for score in graded["scores"]["reference"].values())


def test_untouched_stubs_get_zero(graded):
    assert all(score == 0 for score in graded["scores"]["stubs"].values())


def test_hard_coded_answers_pass_the_visible_tests_but_lose_every_hidden_point(graded, tmp_path,
                                                                               monkeypatch):
    from nbgrader.validator import Validator
    monkeypatch.setenv("MCT_PROGRESS_FILE", str(tmp_path / "progress.json"))
    path = tmp_path / f"{graded['slug']}.ipynb"
    nbformat.write(graded["submissions"]["hardcoded"][0], path)
    # nbgrader validate runs the learner's copy: only the visible tests.
    assert Validator().validate(str(path)) == {}, "the cheat should fool the visible tests"
    assert all(score == 0 for score in graded["scores"]["hardcoded"].values())


def test_each_named_mistake_loses_exactly_its_lesson_and_is_named_in_the_feedback(graded):
    for student, (_, named) in graded["submissions"].items():
        if "mistakes" not in student:
            continue
        scores = graded["scores"][student]
        assert {code for code, score in scores.items() if score == 0} == set(named), student
        html = feedback_html(graded, student)
        for code, name in named.items():
            assert f"common mistake: {name}" in html, (student, code, name)


def test_an_endless_loop_times_out_and_the_rest_is_graded(graded):
    scores = graded["scores"]["endless_loop"]
    (looping,) = graded["submissions"]["endless_loop"][1]
    assert scores[looping] == 0
    assert all(score == 5 for code, score in scores.items() if code != looping)
    html = feedback_html(graded, "endless_loop")
    assert "CellTimeoutError" in html or "KeyboardInterrupt" in html


def test_feedback_holds_neither_hidden_tests_nor_the_reference(graded):
    slug = graded["slug"]
    for student in graded["submissions"]:
        folder = graded["course"] / "feedback" / student / slug
        assert sorted(p.name for p in folder.iterdir()) == [f"{slug}.html"]
        html = feedback_html(graded, student)
        for secret in ("BEGIN HIDDEN TESTS", "check_matches_reference", "_ref.", "isolate_lesson"):
            assert secret not in html, (student, secret)


def test_release_holds_only_the_student_notebook(graded):
    slug = graded["slug"]
    release = graded["course"] / "release" / slug
    assert sorted(p.name for p in release.iterdir()) == [f"{slug}.ipynb"]
    released, committed = read(release / f"{slug}.ipynb"), read(student_path(slug))
    assert [(c.source, c.metadata) for c in released.cells] == [(c.source, c.metadata) for c in committed.cells]
