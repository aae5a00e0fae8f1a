"""Synthetic students for the instructor's tests: catalogued mistakes written out, and a mixed class.

The instructor's workflow (tests/test_instructor.py, with the class report and the formgrader in the
browser) grades a class of thirteen in Part 1 with a mix of what a real class hands in: full marks, untouched releases, half-finished work, one to three
catalogued mistakes, a lesson that breaks the rules for graded code (listed for a human look) and a file
that is no notebook (autograding fails, listed too).
"""

from __future__ import annotations

import nbformat

from course import make_submission
from shared.lessons import lessons_of

# Catalogued mistakes of Part 1 as a learner writes them (graded code keeps the rules: no import of the
# catalogue), with the name the judge gives each.
MISTAKES = {
    "relu_forward": ("def relu_forward(z):\n    return np.minimum(z, 0)\n", "kept the negative part (np.minimum)"),
    "mse_loss_and_grad": ("def mse_loss_and_grad(Y_hat, Y):\n    diff = Y_hat - Y\n"
                          "    return float(np.mean(diff ** 2)), -2.0 * diff / diff.size\n", "gradient sign flipped"),
    "relu_backward": ("def relu_backward(dA, Z):\n    return dA * (dA > 0)\n",
                      "ReLU mask taken from the wrong array (dA instead of Z)"),
}

# A lesson whose cell breaks the rules for graded code (eval): no points, listed for a human look.
RULES_BREAK = "def relu_forward(z):\n    return eval('np.maximum(z, 0)')\n"


def mistaken_lessons(slug):
    """The lessons of ``slug`` in which a student can make one of :data:`MISTAKES`."""
    return [lesson for lesson in lessons_of(slug) if lesson.function in MISTAKES]


def mistakes_submission(slug, functions=None):
    """The reference solutions of ``slug`` but for the catalogued mistakes of ``functions`` (default: all)."""
    chosen = [lesson.function for lesson in mistaken_lessons(slug) if functions is None or lesson.function in functions]
    return make_submission(slug, {function: MISTAKES[function][0] for function in chosen}, default="reference")


def half_done(slug):
    """The first half of the lessons solved, the rest left as released."""
    lessons = lessons_of(slug)
    notebook = make_submission(slug, default="reference")
    stubs = make_submission(slug, default="stub")
    late = {lesson.function for lesson in lessons[len(lessons) // 2:]}
    for cell, stub in zip(notebook.cells, stubs.cells):
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
        if cell.metadata.get("nbgrader", {}).get("solution") and grade_id.split("_", 2)[-1] in late:
            cell.source = stub.source
    return notebook


RELU, MSE, MASK = "relu_forward", "mse_loss_and_grad", "relu_backward"

# The mixed class of Part 1: {student: (what they handed in, the catalogued mistakes they made)}.
MIXED_CLASS = {
    "ada": ("solved", ()), "barbara": ("solved", ()), "claude": ("solved", ()),
    "dennis": ("untouched", ()),
    "edsger": ("mistakes", (RELU,)), "frances": ("mistakes", (MSE,)), "grace": ("mistakes", (MASK,)),
    "hedy": ("mistakes", (RELU, MSE)), "ivan": ("mistakes", (RELU, MSE, MASK)), "ken": ("mistakes", (RELU,)),
    "john": ("half done", ()),
    "linus": ("rules break", ()),  # lesson 004 calls eval: no points there, listed for a human look
    "margaret": ("no notebook", ()),  # cut short: not JSON, autograding fails, listed for a human look
}


def handed_in(kind: str, mistakes: tuple[str, ...], slug: str = "01_mlp_core"):
    """The notebook (or, for "no notebook", the text) a student of :data:`MIXED_CLASS` hands in."""
    if kind == "solved":
        return make_submission(slug, default="reference")
    if kind == "untouched":
        return make_submission(slug, default="stub")
    if kind == "mistakes":
        return mistakes_submission(slug, set(mistakes))
    if kind == "half done":
        return half_done(slug)
    if kind == "rules break":
        return make_submission(slug, {RELU: RULES_BREAK}, default="reference")
    if kind == "no notebook":
        return nbformat.writes(make_submission(slug, default="reference"))[:2000]
    raise ValueError(kind)


def full_marks_expected(kind: str, mistakes: tuple[str, ...], lesson) -> bool:
    """Whether a student of :data:`MIXED_CLASS` should get full marks in ``lesson`` (a composite lesson is
    judged with the reference versions of earlier functions, so an earlier mistake costs it nothing)."""
    lessons = lessons_of(lesson.part.slug)
    return {"solved": True, "untouched": False, "no notebook": False,
            "mistakes": lesson.function not in mistakes,
            "half done": lessons.index(lesson) < len(lessons) // 2,
            "rules break": lesson.function != RELU}[kind]


def mixed_class(slug: str = "01_mlp_core") -> dict:
    """{student: what they hand in} for the thirteen students of :data:`MIXED_CLASS`."""
    return {student: handed_in(kind, mistakes, slug) for student, (kind, mistakes) in MIXED_CLASS.items()}
