"""The whole nbgrader loop in a scratch course directory, for Part 1.

generate_assignment (with a gradebook), then autograde five submissions:
(a) the reference, (b) the untouched stubs, (c) answers hard-coded for the
visible tests, (d) four named mistakes at once, (e) an endless loop in one
lesson; then feedback.  Scores are read back from the gradebook per lesson.
"""

import time

import pytest
from nbgrader.api import Gradebook

from course import (hard_coded_answer, make_course, make_submission, nbgrader, nbgrader_env, read,
                    reference_code, replace_body, student_path, submit, visible_test_answers)
from shared.lessons import lessons_of

pytestmark = [pytest.mark.slow, pytest.mark.part_1]
SLUG = "01_mlp_core"
LESSONS = lessons_of(SLUG)
TIMEOUT = 6  # seconds per cell while autograding in this test (the course default is 30)

MISTAKES = {  # function -> (body with the mistake, the name the feedback must give)
    "mse_loss_and_grad": ("diff = Y_hat - Y\nreturn float(np.mean(diff ** 2)), 2.0 * diff",
                          "MSE gradient summed instead of averaged"),
    "linear_backward": ("return dZ @ W.T, dZ.T @ x, dZ.sum(axis=0)", "dW without the transpose"),
    "relu_backward": ("return dA * (dA > 0)", "ReLU mask taken from the wrong array"),
    "first_linear_backward": ("return X.T @ dZ1, dZ1", "bias gradient not summed over the batch"),
}


def with_body(function, body):
    return replace_body(reference_code(SLUG, function), function, body)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    course = tmp_path_factory.mktemp("course")
    make_course(course, [SLUG])
    env = nbgrader_env(course, MCT_CELL_TIMEOUT=str(TIMEOUT))
    nbgrader(course, "generate_assignment", SLUG, "--force", env=env)

    answers = visible_test_answers(SLUG)
    submissions = {
        "a_reference": make_submission(SLUG, default="reference"),
        "b_stubs": make_submission(SLUG, default="stub"),
        "c_hardcoded": make_submission(SLUG, {f: hard_coded_answer(f, answers[f]) for f in answers}),
        "d_mistakes": make_submission(SLUG, {f: with_body(f, body) for f, (body, _) in MISTAKES.items()},
                                      default="reference"),
        "e_endless_loop": make_submission(
            SLUG, {"make_synthetic_regression_batch":
                   with_body("make_synthetic_regression_batch", "while True:\n    pass")},
            default="reference"),
    }
    for student, notebook in submissions.items():
        submit(course, student, SLUG, notebook)
    started = time.perf_counter()
    run = nbgrader(course, "autograde", SLUG, env=env, check=False)
    seconds = time.perf_counter() - started
    nbgrader(course, "generate_feedback", SLUG, env=env)
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        scores = {student: {lesson.code: gradebook.find_grade(lesson.grade_id, SLUG, SLUG, student).score
                            for lesson in LESSONS}
                  for student in submissions}
        totals = {student: gradebook.find_submission(SLUG, student).score for student in submissions}
    print(f"\nautograde of {len(submissions)} Part 1 submissions: {seconds:.1f} s")
    for student, total in totals.items():
        print(f"  {student:16s} {total:4.0f}/50  " + " ".join(f"{c}:{s:.0f}" for c, s in scores[student].items()))
    return {"course": course, "run": run, "scores": scores, "totals": totals, "answers": answers,
            "submissions": submissions}


def feedback_html(graded, student):
    return (graded["course"] / "feedback" / student / SLUG / f"{SLUG}.html").read_text()


def test_autograde_exits_cleanly(graded):
    assert graded["run"].returncode == 0, graded["run"].stderr[-3000:]


def test_a_reference_gets_full_marks(graded):
    assert graded["totals"]["a_reference"] == 50


def test_b_untouched_stubs_get_zero(graded):
    assert graded["totals"]["b_stubs"] == 0


def test_c_hard_coded_answers_pass_the_visible_tests_but_lose_every_hidden_point(graded, tmp_path,
                                                                                 monkeypatch):
    from nbgrader.validator import Validator
    import nbformat
    monkeypatch.setenv("MCT_PROGRESS_FILE", str(tmp_path / "progress.json"))
    path = tmp_path / f"{SLUG}.ipynb"
    nbformat.write(graded["submissions"]["c_hardcoded"], path)
    # nbgrader validate runs the learner's copy: only the visible tests.
    assert Validator().validate(str(path)) == {}, "the cheat should fool the visible tests"
    assert graded["totals"]["c_hardcoded"] == 0


def test_d_each_named_mistake_loses_its_lesson_and_is_named_in_the_feedback(graded):
    scores = graded["scores"]["d_mistakes"]
    wrong = {lesson.code for lesson in LESSONS if lesson.function in MISTAKES}
    assert {code for code, score in scores.items() if score == 0} == wrong
    assert graded["totals"]["d_mistakes"] == 50 - 5 * len(MISTAKES)
    html = feedback_html(graded, "d_mistakes")
    for _, name in MISTAKES.values():
        assert f"common mistake: {name}" in html, name


def test_e_an_endless_loop_times_out_and_the_rest_is_graded(graded):
    scores = graded["scores"]["e_endless_loop"]
    assert scores["001"] == 0
    assert graded["totals"]["e_endless_loop"] == 45
    assert "CellTimeoutError" in feedback_html(graded, "e_endless_loop") or \
        "KeyboardInterrupt" in feedback_html(graded, "e_endless_loop")


def test_feedback_holds_neither_hidden_tests_nor_the_reference(graded):
    for student in graded["totals"]:
        folder = graded["course"] / "feedback" / student / SLUG
        assert sorted(p.name for p in folder.iterdir()) == [f"{SLUG}.html"]
        html = feedback_html(graded, student)
        for secret in ("BEGIN HIDDEN TESTS", "check_matches_reference", "_ref.", "isolate_lesson"):
            assert secret not in html, (student, secret)


def test_release_holds_only_the_student_notebook(graded):
    release = graded["course"] / "release" / SLUG
    assert sorted(p.name for p in release.iterdir()) == [f"{SLUG}.ipynb"]
    released, committed = read(release / f"{SLUG}.ipynb"), read(student_path(SLUG))
    assert [(c.source, c.metadata) for c in released.cells] == [(c.source, c.metadata) for c in committed.cells]
