"""Property-based layer (Hypothesis): the declared input space, explored beyond the seeds graded.

Each lesson's declaration (``autograde/parts/NN_slug/cases.py``) is a distribution
over inputs: shapes, sizes, dtypes, edge cases and bad input.  Hypothesis draws
from it (a case of the declaration for a drawn seed, in float64 or, where the
lesson admits it, float32) and checks

- on the reference: it refuses exactly what the refusals say, with their error;
  it changes no input; it answers the same twice; float32 in never gives float64 out;
  and the judge accepts its answer;
- on every catalogued wrong answer (named mistakes and plausible ones): Hypothesis
  finds a drawn case on which it differs from the reference, so the declared
  cases can tell it apart, not just the few seeds a grading run uses.

Runs are derandomized (the same examples every time) and kept small.
"""

from __future__ import annotations

import copy
import functools

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, find, given, settings, strategies as st
from hypothesis.errors import NoSuchExample

from catalogue import _map, catalogue
from shared.checking import arrays_in
from shared.cluster import parts_held
from course import built_lessons, tagged, tagged_lessons
from grading.judge import _cluster_workers, lesson_spec, reference_answer, reference_function
from grading.spec import Case, Raises, draw_cases
from shared.checking import difference, parts_shared_problem
from shared.cluster import Cluster, arrays_shared_within

# Generation only (no shrinking: the first telling case is enough), the same examples every run.
SETTINGS = settings(max_examples=25, deadline=None, database=None, derandomize=True, phases=[Phase.generate],
                    suppress_health_check=list(HealthCheck))
SEEDS = st.integers(min_value=0, max_value=2**32 - 1)


def admits_float32(lesson) -> bool:
    return any(a.dtype == np.float32 for case in draw_cases(lesson_spec(lesson.code), 0)
               if isinstance(case, Case) for a in arrays_in(case.args))


def as_float32(args):
    return _map(args, lambda v: v.astype(np.float32) if isinstance(v, np.ndarray) and v.dtype == np.float64 else v)


@functools.lru_cache(maxsize=64)
def _cases(code: str, seed: int):
    return draw_cases(lesson_spec(code), seed)


def drawn_case(lesson, seed: int, index: int, narrow: bool):
    cases = _cases(lesson.code, seed)
    case = cases[index % len(cases)]
    if narrow and isinstance(case, Case) and not case.measure:
        return Case(as_float32(case.args), case.about, rtol=1e-4, atol=1e-5)
    return case


def answer(function, args):
    with np.errstate(all="ignore"):
        return function(**copy.deepcopy(args))


@pytest.mark.parametrize("lesson", tagged_lessons())
def test_the_reference_keeps_its_contract_on_drawn_cases(lesson):
    spec = lesson_spec(lesson.code)
    reference = reference_function(lesson)
    narrow_ok = admits_float32(lesson)

    @SETTINGS
    @given(seed=SEEDS, index=st.integers(0, 99), narrow=st.booleans())
    def check(seed, index, narrow):
        case = drawn_case(lesson, seed, index, narrow and narrow_ok)
        if isinstance(case, Raises):
            assert any(r.error is case.error and r.covers(case.args) for r in spec.refuses)
            with pytest.raises(case.error):
                answer(reference, case.args)
            return
        if case.measure:
            return  # large memory cases: graded on bytes elsewhere (tests/test_technique.py)
        assert not any(r.covers(case.args) for r in spec.refuses)
        before = copy.deepcopy(case.args)
        with np.errstate(all="ignore"):
            first = reference(**case.args)
        assert difference(case.args, before, "the inputs", exact=True) is None, "the reference changed an input"
        assert difference(answer(reference, case.args), first, "a second answer", exact=True,
                          key_tolerances=spec.key_tolerances) is None  # measured bytes: within their tolerance
        floats_in = [a.dtype for a in arrays_in(case.args) if a.dtype.kind == "f"]
        if floats_in and all(d == np.float32 for d in floats_in):
            widened = [a.dtype for a in arrays_in(first) if a.dtype == np.float64]
            assert not widened, f"float32 inputs gave float64 results ({case.about})"

    check()


def _mistake_params():
    params = []
    for lesson in built_lessons():
        for entry in catalogue(lesson):
            if entry.kind in ("mistake", "plausible"):
                params.append(pytest.param(lesson, entry, id=f"{lesson.grade_id}-{entry.name}",
                                           marks=tagged(lesson).marks))
    return params


@pytest.mark.parametrize("lesson, entry", _mistake_params())
def test_hypothesis_finds_a_case_that_tells_the_wrong_answer_apart(lesson, entry):
    """Hypothesis draws run seeds; every case a seed draws is tried (a wrong answer that only one
    kind of case reveals, an overflow say, is found whichever index that case has)."""
    spec = lesson_spec(lesson.code)

    def tells_apart_on(case) -> bool:
        if isinstance(case, Case) and case.measure:
            return False  # the large memory cases are for bytes, and slow to answer here
        given = copy.deepcopy(case.args)
        workers = _cluster_workers(spec, case)  # a lesson on a cluster: the grader's, and its ledger
        cluster = Cluster(workers) if workers is not None else None
        try:
            with np.errstate(all="ignore"):
                wrong = entry.function(**given, **({spec.on_cluster.arg: cluster} if cluster else {}))
        except Exception as error:  # noqa: BLE001 (crashing where the reference answers tells it apart)
            return not (isinstance(case, Raises) and isinstance(error, case.error))
        if isinstance(case, Raises):
            return True
        if cluster is None:  # a second call on the same inputs must give new arrays (not a reused buffer)
            try:
                with np.errstate(all="ignore"):
                    again = entry.function(**copy.deepcopy(case.args))
            except Exception:  # noqa: BLE001 (the first call answered: a second that crashes tells it apart)
                return True
            if any(np.shares_memory(a, b) for a in arrays_in(again) for b in arrays_in(wrong) if a.size and b.size):
                return True
            if any(x is y for _, x in parts_held(again) for _, y in parts_held(wrong) if type(x) is not np.ndarray):
                return True  # the same dict or list handed out by both calls (one filled again at every call)
        if difference(given, case.args, "the inputs", exact=True) is not None:
            return True  # it changed an input in place
        if spec.fresh_result and any(np.shares_memory(a, b) for a in arrays_in(wrong) for b in arrays_in(given)
                                     if a.size and b.size):
            return True  # its result holds an input's memory where the contract asks for new arrays
        with np.errstate(all="ignore"):
            right, sent = reference_answer(lesson, spec, case)
        if difference(wrong, right, "x", **spec.tolerances(case)) is not None:
            return True
        if parts_shared_problem(arrays_shared_within(wrong), right) is not None:
            return True  # two parts of its result are one array where the reference's are two
        return cluster is not None and (cluster.ledger.summary(), cluster.unreceived()) != (sent["traffic"],
                                                                                           sent["unreceived"])

    def tells_apart(seed) -> bool:
        return any(tells_apart_on(drawn_case(lesson, seed, index, False))
                   for index in range(len(_cases(lesson.code, seed))))

    try:
        find(SEEDS, tells_apart, settings=SETTINGS)
    except NoSuchExample:
        pytest.fail(f"in the cases of {SETTINGS.max_examples} drawn seeds nothing tells '{entry.name}' "
                    f"from the reference")
