"""The technique is graded: a right answer computed the expensive way earns nothing.

Lessons 009 (no input gradient), 014, 015, 017, 024 and 029 are about saving memory, 032 and 035 about what each
worker keeps. Each has a large hidden case whose memory the grading kernel measures
(tracemalloc: the peak, or what the result keeps alive); the judge compares
it with the lesson's own bound (grading.spec.MemoryBound). The reference stays
under the bound; each shortcut gives the same numbers (for 024: within float16
rounding), breaks the bound, and the verdict names it and shows measured and
allowed bytes.  The shortcuts live in the catalogue of plausible wrong answers
(tests/catalogue.py), whose contract test also requires the visible tests to catch
them on a small case.  Every other expensive way of the catalogue (tests/plausible.py) scores 0 for its memory
too, and the measured cases of 015 and 017 are deep enough that an answer keeping every activation at once (even
without the Z's) needs well over the bound, not just over it.

Lesson 040's loop is graded on what it does (the ledger of the grader's cluster, what every
worker holds at the end, its measured peak on three cases): a loop that ignores any one switch
scores 0 and the verdict says why, and the reference keeps its bound with room to spare.
"""

from __future__ import annotations

import pytest

import catalogue
from course import tagged
from grading.judge import grade_in_process, lesson_spec, reference_function
from grading.protocol import Reason
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


# Every other expensive way of the catalogue (tests/plausible.py, @expensive) loses the points for its memory too,
# and its verdict says so with the lesson's shortcut (040's are graded switch by switch below).
EXPENSIVE = [pytest.param(code, what, function, id=f"{code}-{what}", marks=tagged(find_lesson(code)).marks)
             for code, entries in catalogue.EXPENSIVE.items() if code != "040" for what, function in entries]


@pytest.mark.parametrize("code, what, function", EXPENSIVE)
def test_each_expensive_way_scores_zero_for_its_memory(code, what, function):
    verdict = grade_in_process(code, {**namespace(code), find_lesson(code).function: function}, 0)
    assert not verdict.passed and verdict.points == 0, what
    assert verdict.reason == Reason.MEMORY, (what, verdict.message)
    assert lesson_spec(code).memory.shortcut in verdict.message, (what, verdict.message)


def _no_checkpointing():
    """lesson -> the catalogue's answers that checkpoint in name only: every activation alive at once."""
    import plausible
    return {"015": (catalogue.store_everything_forward, plausible.forward_keeping_every_activation),
            "017": (catalogue.recompute_everything_backward, plausible.backward_whole_forward_every_activation)}


#: The most of its bound the reference may use on a measured case: 015's bound is the reference's own working set
#: (four arrays and 64 KiB; measured 0.89 and 0.94 of it), 017's has room to spare (measured 0.68 and 0.74).
REFERENCE_AT_MOST = {"015": 1.0, "017": 0.8}


@pytest.mark.parametrize("code", [tagged(find_lesson(code), code) for code in ("015", "017")])
def test_no_real_checkpointing_needs_far_more_than_the_bound(code):
    """The measured cases of 015 and 017 are deep enough (16 layers) that keeping every activation fails
    clearly: even keeping only the A's, not the Z's, needs at least 1.4 times the bound (measured: 1.5 to 7).
    With 8 layers, 017's whole forward recomputed from X keeping each A, then an ordinary backward, peaked at
    0.92 of its bound and earned the points."""
    import copy

    from grading.judge import case_seed
    from grading.meter import Meter
    from grading.spec import Case, draw_cases
    spec, reference = lesson_spec(code), reference_function(find_lesson(code))

    def peak(function, args):
        args = copy.deepcopy(args)
        with Meter() as meter:  # the grading kernel's meter
            function(**args)
        return meter.peak_bytes
    for seed in (0, 1):
        for case in draw_cases(spec, case_seed(seed, code)):
            if not (isinstance(case, Case) and case.measure):
                continue
            allowed = spec.memory.allowed(case.args)
            assert peak(reference, case.args) <= REFERENCE_AT_MOST[code] * allowed, case.about
            for wasteful in _no_checkpointing()[code]:
                assert peak(wasteful, case.args) >= 1.4 * allowed, (wasteful.__name__, case.about)


# Part 7: lesson 040's loop is graded on what it does, never on what it reports: the ledger of the cluster the
# grader passes in, every worker's arrays at the end (shapes, dtypes, values), and its peak memory, measured on
# three large cases. A loop that ignores any one switch scores 0, and the verdict says what went wrong: the
# mistake it names, or the measured and allowed bytes on the case of the switch it ignored.

def _loop_mistake(name):
    from shared.mistakes import mistakes_of
    return next(m for m in mistakes_of("full_distributed_training_loop") if m.name == name).compute


def _ignoring_zero_where(divides):
    """The loop that ignores ZeRO on the cases where N divides the parameter count (or does not), the
    reference's answer elsewhere: either way it loses the points."""
    ignoring, reference = _loop_mistake("the loop ignores ZeRO (zero_stage)"), reference_function(find_lesson("040"))

    def loop(params, X, Y, config, cluster=None):
        size = sum(value.size for value in params.values())
        chosen = ignoring if config.zero_stage and (size % config.num_workers == 0) == divides else reference
        return chosen(params, X, Y, config, cluster)
    return loop


def _loop_switches():
    """switch -> (a loop that ignores it, words the verdict must contain)."""
    import plausible
    ignores = "This is a common mistake: the loop ignores"
    memory = "gives the right numbers but allocated"
    return {
        "data parallelism": (_loop_mistake("the loop ignores data parallelism (num_workers)"),
                             ["has 1 values, expected", f"{ignores} data parallelism (num_workers)."]),
        "ZeRO, N divides the parameters": (_ignoring_zero_where(True), [f"{ignores} ZeRO (zero_stage)."]),
        "ZeRO, N does not divide them": (_ignoring_zero_where(False), [f"{ignores} ZeRO (zero_stage)."]),
        "checkpointing": (plausible.loop_without_checkpointing, [memory, "memory measured, checkpointing"]),
        "accumulation": (plausible.loop_without_accumulation, [memory, "memory measured, gradient accumulation"]),
        "ZeRO's state whole on every worker": (plausible.loop_full_state_on_every_worker,
                                               [memory, "memory measured, ZeRO"]),
        "mixed precision": (_loop_mistake("the loop ignores mixed precision"),
                            ["dtype float64, expected float32", f"{ignores} mixed precision."]),
    }


LOOP_SWITCHES = ["data parallelism", "ZeRO, N divides the parameters", "ZeRO, N does not divide them", "checkpointing",
                 "accumulation", "ZeRO's state whole on every worker", "mixed precision"]


@pytest.mark.parametrize("switch", [pytest.param(switch, id=switch, marks=tagged(find_lesson("040")).marks)
                                    for switch in LOOP_SWITCHES])
def test_a_loop_that_ignores_a_switch_scores_zero_and_the_verdict_says_why(switch):
    loop, said = _loop_switches()[switch]
    verdict = grade_in_process("040", {**namespace("040"), "full_distributed_training_loop": loop}, 0)
    assert not verdict.passed and verdict.points == 0
    for words in said:
        assert words in verdict.message, (words, verdict.message)
    if said[0].startswith("gives the right numbers"):  # the memory: measured and allowed bytes, the rule
        assert verdict.reason == Reason.MEMORY and "MiB at its peak, and this lesson allows" in verdict.message
    else:  # what the workers hold: their number, the moments' shapes, the dtypes
        assert verdict.reason == Reason.FORM


@pytest.mark.lesson_040
@pytest.mark.part_7
def test_040s_reference_keeps_its_bound_with_room_to_spare():
    """On every measured case of several run seeds, the reference's peak is at most 0.8 of the bound, and each
    loop that ignores the case's switch needs at least 1.5 times the bound (measured: 1.9 to 2.5)."""
    import copy

    import plausible
    from grading.judge import case_seed
    from grading.spec import Case, draw_cases
    from shared.cluster import Cluster
    from shared.memory import measure_peak_memory
    spec, reference = lesson_spec("040"), reference_function(find_lesson("040"))
    wasteful = {"checkpointing": plausible.loop_without_checkpointing,
                "gradient accumulation": plausible.loop_without_accumulation,
                "ZeRO": plausible.loop_full_state_on_every_worker}
    reference(**copy.deepcopy(draw_cases(spec, 0)[0].args))  # once before measuring: the progress bar's import
    for seed in (0, 1):
        for case in draw_cases(spec, case_seed(seed, "040")):
            if not (isinstance(case, Case) and case.measure):
                continue
            allowed = spec.memory.allowed(case.args)

            def peak(function):
                args = copy.deepcopy(case.args)
                return measure_peak_memory(function, **args, cluster=Cluster(args["config"].num_workers)).peak_bytes
            assert peak(reference) <= 0.8 * allowed, case.about
            switch = next(name for name in wasteful if f"memory measured, {name}:" in case.about)
            assert peak(wasteful[switch]) >= 1.5 * allowed, case.about
