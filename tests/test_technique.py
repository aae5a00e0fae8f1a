"""The technique is graded: a right answer computed the expensive way earns nothing.

Lessons 014, 015, 017, 024 and 029 are about saving memory, 032 and 035 about what each
worker keeps. Each has a large hidden case whose memory the grading kernel measures
(tracemalloc: the peak, or what the result keeps alive); the judge compares
it with the lesson's own bound (grading.spec.MemoryBound). The reference stays
under the bound; each shortcut gives the same numbers (for 024: within float16
rounding), breaks the bound, and the verdict names it and shows measured and
allowed bytes.  The shortcuts live in the catalogue of plausible wrong answers
(tests/catalogue.py), whose contract test also requires the visible tests to catch
them on a small case.
"""

from __future__ import annotations

import pytest

import catalogue
from course import tagged
from grading.judge import grade_in_process, lesson_spec, reference_function
from shared.lessons import lesson as find_lesson


def namespace(code: str) -> dict:
    return dict(reference_function(find_lesson(code)).__globals__)


# Each case carries its lesson's and part's markers (``-m part_6`` runs 032 and 035).
SHORTCUTS = [pytest.param(code, *shortcut, id=code, marks=tagged(find_lesson(code)).marks)
             for code, shortcut in catalogue.SHORTCUTS.items()]


@pytest.mark.parametrize("code, function, shortcut, named", SHORTCUTS)
def test_the_reference_keeps_the_bound_and_the_shortcut_scores_zero_named(code, function, shortcut, named):
    for seed in (0, 1):
        assert grade_in_process(code, namespace(code), seed).passed
    verdict = grade_in_process(code, {**namespace(code), function: shortcut}, 0)
    assert not verdict.passed
    assert named in verdict.message
    if lesson_spec(code).memory.kind == "kept":  # what the result keeps alive (032, 035)
        assert "gives the right numbers but its result keeps" in verdict.message
        assert "MiB alive after the call, and this lesson allows" in verdict.message
    else:
        assert "gives the right numbers but allocated" in verdict.message
        assert "MiB at its peak, and this lesson allows" in verdict.message


# Part 7: lesson 040's loop is graded on what each switch does to the memory and the traffic it reports
# (tracemalloc's bytes within a few percent of the reference's, counted bytes and the ledger exactly):
# a loop that ignores a switch scores 0, and the verdict names the switch and shows where it differs.
LOOP_SWITCHES = [
    ("the loop ignores data parallelism (num_workers)", "['memory'] has 1 values"),
    ("the loop ignores ZeRO (zero_stage)", "['optimizer']"),
    ("the loop ignores checkpointing (segment_size)", "['activations']"),
    ("the loop ignores gradient accumulation (num_micro_batches)", "['activations']"),
    ("the loop ignores mixed precision", "dtype float64, expected float32"),
]


@pytest.mark.parametrize("name, where", [pytest.param(*switch, id=switch[0], marks=tagged(find_lesson("040")).marks)
                                         for switch in LOOP_SWITCHES])
def test_a_loop_that_ignores_a_switch_scores_zero_named(name, where):
    from shared.mistakes import mistakes_of
    mistake = next(m for m in mistakes_of("full_distributed_training_loop") if m.name == name)
    verdict = grade_in_process("040", {**namespace("040"), "full_distributed_training_loop": mistake.compute}, 0)
    assert not verdict.passed
    assert f"common mistake: {name}." in verdict.message
    assert where in verdict.message.splitlines()[0]
