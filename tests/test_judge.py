"""Grading v2's plumbing: the wire format between kernel and judge, and the judge on its own.

The wire (grading/wire.py) must give back exactly what was sent (type, dtype,
shape, tuple vs list, int dict keys, NaN and infinities) and refuse, with a
message that says what and where, anything else.  The judge
(grading/judge.py), through ``grade_in_process``, must grade a composite lesson
with the helper package's versions of the earlier functions, and refuse a
lesson's answer computed by the helper that answers it.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from grading import wire
from grading.course import landed_parts
from grading.judge import (QUICK_CASES, case_seed, drawn_cases, grade_cases, grade_in_process,
                           lesson_spec, lesson_specs, reference_function)
from grading.spec import Raises, draw_cases
from shared import lesson_blocks
from shared.lessons import lesson as find_lesson, lessons_of

# --------------------------------------------------------------------------
# The wire: round trips
# --------------------------------------------------------------------------

DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
          np.float16, np.float32, np.float64]


def round_trip(value):
    """Through JSON text, as the answers travel from the kernel to the judge."""
    text = wire.dumps(value)
    json.loads(text)  # strict JSON: no NaN or Infinity literals
    assert "NaN" not in text and "Infinity" not in text
    return wire.loads(text)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(), (0,), (5,), (0, 3), (2, 3), (2, 1, 4)])
def test_arrays_come_back_with_their_dtype_shape_and_values(dtype, shape):
    rng = np.random.default_rng(0)
    array = np.asarray(rng.standard_normal(shape) * 50).astype(dtype)
    back = round_trip(array)
    assert type(back) is np.ndarray
    assert back.dtype == array.dtype and back.shape == array.shape
    assert np.array_equal(back, array)
    assert back.flags.writeable and back.flags.c_contiguous and back.flags.owndata


def test_views_come_back_as_their_values():
    base = np.arange(24.0).reshape(4, 6)
    for view in (base.T, base[::2, 1::3], base[:, 2], np.broadcast_to(base[0], (3, 6))):
        back = round_trip(view)
        assert back.shape == view.shape and np.array_equal(back, view)


def test_nan_and_infinities_cross_in_arrays_and_as_floats():
    array = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e308, 5e-324])
    back = round_trip(array)
    assert np.array_equal(back, array, equal_nan=True)
    assert np.signbit(back[4])
    values = round_trip([float("nan"), float("inf"), float("-inf"), 1.5])
    assert math.isnan(values[0]) and values[1:] == [math.inf, -math.inf, 1.5]
    assert all(type(v) is float for v in values)
    assert math.isnan(round_trip(np.float32("nan")))


@pytest.mark.parametrize("scalar", [np.float64(1.25), np.float32(1.5), np.float16(-2.0), np.int64(-7),
                                    np.int32(3), np.uint8(255), np.bool_(True), np.bool_(False)],
                         ids=lambda s: type(s).__name__)
def test_numpy_scalars_keep_their_type(scalar):
    back = round_trip(scalar)
    assert type(back) is type(scalar) and back == scalar


@pytest.mark.parametrize("value", [None, True, False, 0, -3, 2**53, 2**60, -(2**70), 1.5, -0.0, "", "héllo"],
                         ids=repr)
def test_python_scalars_keep_their_type_and_value(value):
    back = round_trip(value)
    assert type(back) is type(value) and back == value


def test_tuples_and_lists_stay_what_they_were():
    value = (1, [2, (3, [4.0])], (), [], ([],))
    back = round_trip(value)
    assert back == value
    assert type(back) is tuple and type(back[1]) is list and type(back[1][1]) is tuple
    assert type(back[2]) is tuple and type(back[3]) is list and type(back[4][0]) is list


def test_dicts_keep_int_and_str_keys_and_their_order():
    checkpoints = {0: np.ones((2, 3)), 3: np.zeros((2, 3), dtype=np.float32)}
    back = round_trip(checkpoints)
    assert list(back) == [0, 3] and all(type(k) is int for k in back)
    assert back[3].dtype == np.float32
    mixed = round_trip({"b": 1, 2: "x", "a": {1: (None,)}})
    assert list(mixed) == ["b", 2, "a"] and mixed["a"] == {1: (None,)}
    assert round_trip({}) == {} and type(round_trip({"0": 1}).popitem()[0]) is str


def test_a_typical_answer_comes_back_whole():
    answer = ({"W1": np.ones((3, 2)), "b1": np.zeros(2)}, float("nan"), [np.float32(2.5), (1, 2)])
    back = round_trip(answer)
    assert type(back) is tuple and np.array_equal(back[0]["W1"], answer[0]["W1"])
    assert math.isnan(back[1]) and type(back[2][0]) is np.float32 and back[2][1] == (1, 2)


# --------------------------------------------------------------------------
# The wire: refusals
# --------------------------------------------------------------------------

class MyArray(np.ndarray):
    pass


class Thing:
    pass


@pytest.mark.parametrize("value, words", [
    (np.zeros(3).view(MyArray), ["MyArray", "grading compares only NumPy arrays"]),
    (np.ma.masked_array([1.0, 2.0]), ["MaskedArray"]),
    (np.ones((1, 1)).view(np.matrix), ["matrix"]),
    (Thing(), ["Thing"]),
    (object(), ["object"]),
    ({(0, 1): 1.0}, ["dict with a key of type tuple", "(0, 1)", "only str and int keys"]),
    ({1.5: 1.0}, ["key of type float"]),
    (np.array(["a", "b"]), ["dtype <U1", "only bool, int and float16/32/64 arrays"]),
    (np.array([1 + 2j]), ["dtype complex128"]),
    (np.array([None, 1.0], dtype=object), ["dtype object"]),
    ((x for x in range(3)), ["generator"]),
    ({1, 2}, ["set"]),
    (b"bytes", ["bytes"]),
    (np.complex128(1j), ["complex128"]),
], ids=lambda v: type(v).__name__ if not isinstance(v, list) else "")
def test_anything_else_is_refused_with_a_clear_message(value, words):
    with pytest.raises(wire.WireError) as info:
        wire.to_plain(value, "the result")
    message = str(info.value)
    assert message.startswith("the result ")
    for word in words:
        assert word in message, (word, message)


def test_a_refusal_says_where_the_value_is():
    with pytest.raises(wire.WireError, match=r"the result\[1\]\['grads'\]\[0\] is a .*Thing"):
        wire.to_plain((1, {"grads": [Thing()]}), "the result")
    with pytest.raises(wire.WireError, match=r"the result\[0\]\['W'\] is a .*MyArray"):
        wire.to_plain([{"W": np.ones(2).view(MyArray)}], "the result")


def test_too_deep_nesting_is_refused():
    value: list = []
    for _ in range(wire.MAX_DEPTH + 5):
        value = [value]
    with pytest.raises(wire.WireError, match="nested more than"):
        wire.to_plain(value)


@pytest.mark.parametrize("data", [
    {"$array": "AAAA", "dtype": "<f8", "shape": [3]},          # bytes do not match the shape
    {"$array": "AAAAAAAAAAA=", "dtype": "<U1", "shape": [1]},  # a dtype that may not cross
    {"$array": "AAAAAAAAAAA=", "dtype": "|O", "shape": [1]},
    {"$float": "1e3"},
    {"$scalar": [1, 2]},
    {"$items": [[[1], 2]]},                                    # a list as a dict key
    {"__class__": "os.system"},
    {},
    set(),
])
def test_malformed_data_from_a_kernel_is_refused(data):
    with pytest.raises(wire.WireError):
        wire.from_plain(data)


# --------------------------------------------------------------------------
# The judge, in process
# --------------------------------------------------------------------------

def reference_namespace(code):
    return dict(reference_function(find_lesson(code)).__globals__)


def test_every_part_declares_its_lessons_and_the_isolated_names_have_helper_versions():
    for slug in landed_parts():
        for code, spec in lesson_specs(slug).items():
            assert lesson_spec(code) is not None
            for name in spec.isolate:
                assert callable(getattr(lesson_blocks, name, None)), (code, name)


def test_a_composite_lesson_is_graded_with_the_helper_versions_of_earlier_functions():
    namespace = reference_namespace("005")
    namespace["linear_forward"] = lambda x, W, b: x @ W  # lesson 003 forgot the bias
    assert not grade_in_process("003", namespace).passed
    verdict = grade_in_process("005", namespace)  # mlp_forward calls linear_forward: the helper's is used
    assert verdict.passed, verdict.message


def test_a_lesson_answered_by_delegating_to_the_helper_earns_nothing():
    from shared import mlp
    namespace = reference_namespace("005")
    namespace["mlp_forward"] = lambda X, params: mlp.forward(X, params)
    verdict = grade_in_process("005", namespace)
    assert not verdict.passed
    assert "HelperNotAllowed" in verdict.message and "lesson 005" in verdict.message
    # the lock lives in the grading child only: here the helper still works
    X = np.ones((2, 3))
    params = mlp.init_params([3, 2, 1], seed=0)
    assert mlp.forward(X, params)[0].shape == (2, 1)


def test_a_stub_is_reported_as_not_started():
    namespace = reference_namespace("003")

    def linear_forward(x, W, b):
        raise NotImplementedError("replace this line with your code")
    namespace["linear_forward"] = linear_forward
    verdict = grade_in_process("003", namespace)
    assert not verdict.passed and "not started" in verdict.message


def test_what_the_learner_s_code_raised_is_quoted_and_never_acts_on_the_terminal_that_shows_it():
    """A message that would rewrite the grader's lines ("\\x1b[1A ✓ 003: 5/5") is shown, escaped: every
    character a terminal or a page acts on (ANSI escapes, carriage returns, bidirectional overrides)."""
    namespace = reference_namespace("003")

    def linear_forward(x, W, b):
        raise ValueError("\x1b[2K\r\x1b[1A✓ 003 · forged: 5/5\u202e")
    namespace["linear_forward"] = linear_forward
    verdict = grade_in_process("003", namespace)
    assert not verdict.passed and verdict.reason == "crash"
    assert "\\x1b[2K\\r\\x1b[1A✓ 003 · forged: 5/5\\u202e" in verdict.message, verdict.message
    assert all(c.isprintable() or c in "\n\t" for c in verdict.message)


def test_refusals_that_given_code_makes_leave_a_skeleton_not_started():
    """A skeleton may give its input checks before the first stub: refusals as the cases expect, and
    NotImplementedError everywhere else, are still "not started"; any other answer is judged as usual."""
    from grading.judge import judge_lesson, not_started
    cases = drawn_cases("039", case_seed(0, "039"))
    stub = {"kind": "raised", "error": "NotImplementedError", "message": "Not implemented yet"}

    def refused(case, error=None):
        return {"kind": "raised", "error": error or case.error.__name__, "message": "given check"}
    given = [refused(case) if isinstance(case, Raises) else stub for case in cases]
    assert not_started(cases, given) and not_started(cases, [stub] * len(cases))
    verdict = judge_lesson("039", cases, {"status": "answered", "answers": given})
    assert verdict.reason == "not started" and verdict.message.startswith("not started:")
    wrong_error = [refused(case, "TypeError") if isinstance(case, Raises) else stub for case in cases]
    assert not not_started(cases, wrong_error)
    assert judge_lesson("039", cases, {"status": "answered", "answers": wrong_error}).reason != "not started"
    assert not not_started([case for case in cases if isinstance(case, Raises)],
                           [answer for case, answer in zip(cases, given) if isinstance(case, Raises)])


@pytest.mark.parametrize("code", ["027", "028", "030", "035", "039", "040"])
def test_an_untouched_skeleton_whose_given_code_checks_the_input_is_not_started(code):
    """These lessons give the learner their input checks before the first stub: on the learner's copy as
    released, the refusals are right and every other case raises NotImplementedError, and the verdict is
    "not started", as for any stub (not a crash in the given code)."""
    import nbformat
    from course import student_path
    lesson = find_lesson(code)
    cell = next(c for c in nbformat.read(student_path(lesson.part.slug), as_version=4).cells
                if c.metadata.get("nbgrader", {}).get("grade_id") == lesson.solution_grade_id)
    namespace = reference_namespace(code)
    exec(cell.source, namespace)
    assert any(isinstance(case, Raises) for case in drawn_cases(code, case_seed(0, code)))
    verdict = grade_in_process(code, namespace)
    assert not verdict.passed and verdict.reason == "not started" and "not started" in verdict.message


def test_a_function_that_answers_one_valid_case_is_started():
    """Not started means NotImplementedError on every valid case; one valid case answered is an answer, graded."""
    code = "028"
    reference = reference_function(find_lesson(code))
    calls = [0]  # counted in the grading child

    def ring_all_reduce_mean(worker_arrays, cluster=None):
        result = reference(worker_arrays, cluster)  # refuses bad input, as given checks do
        calls[0] += 1
        if calls[0] == 1:
            return result
        raise NotImplementedError("replace this line with your code")
    namespace = reference_namespace(code)
    namespace["ring_all_reduce_mean"] = ring_all_reduce_mean
    cases = draw_cases(lesson_spec(code), case_seed(0, code))
    verdict = grade_cases(code, namespace, cases)
    assert not verdict.passed and verdict.reason != "not started"


def wrong_from_call(reference, k):
    """The reference, with every answer from its k-th call on (0, 1, ...) off by one."""
    calls = [0]  # counted in the grading child: each pass starts from 0

    def answer(*args, **kwargs):
        result = reference(*args, **kwargs)
        calls[0] += 1
        return result + 1.0 if calls[0] > k else result
    return answer


@pytest.mark.parametrize("k", [0, 1, QUICK_CASES + 1], ids=["first case", "second case", "past the first pass"])
def test_grading_in_two_passes_gives_the_verdict_of_one_pass_on_every_case(k):
    """grade_in_process grades the first QUICK_CASES cases, then every case: a function wrong on an
    early case gets the verdict (and its 'hidden case k of N') of one pass; one wrong on a later case
    passes the first pass and fails the second."""
    cases = draw_cases(lesson_spec("003"), case_seed(0, "003"))
    assert len(cases) > QUICK_CASES + 1 and not any(isinstance(case, Raises) for case in cases[:QUICK_CASES + 2])
    namespace = reference_namespace("003")
    namespace["linear_forward"] = wrong_from_call(namespace["linear_forward"], k)
    verdict = grade_in_process("003", namespace)
    assert verdict == grade_cases("003", namespace, cases)
    assert not verdict.passed and f"hidden case {k + 1} of {len(cases)}" in verdict.message


def test_an_answer_that_cannot_cross_the_wire_loses_the_points():
    namespace = reference_namespace("004")
    namespace["relu_forward"] = lambda z: np.maximum(z, 0).view(MyArray)
    verdict = grade_in_process("004", namespace)
    assert not verdict.passed and "cannot be graded" in verdict.message and "MyArray" in verdict.message


def test_long_doubles_are_refused_and_big_endian_arrays_cross_as_the_same_numbers():
    with pytest.raises(wire.WireError, match="float16/32/64"):
        wire.to_plain(np.zeros(2, dtype=np.longdouble), "the result")
    big = np.arange(4.0).astype(">f8")
    back = wire.loads(wire.dumps(big))
    assert back.dtype == np.float64 and np.array_equal(back, big)


def test_a_right_answer_that_aliases_an_input_loses_the_points_and_names_the_mistake():
    """A mistake with the right values can still be named: it hands back an input's memory."""
    namespace = reference_namespace("020")
    namespace["make_master_params"] = lambda params: {key: np.asarray(value, dtype=np.float32)
                                                      for key, value in params.items()}
    verdict = grade_in_process("020", namespace)
    assert not verdict.passed and "shares memory with `params`" in verdict.message
    assert "common mistake: the master aliases the model's parameters." in verdict.message


def test_float16_arrays_and_scalars_cross_the_wire_bit_for_bit():
    """Part 4 grades float16 answers: inf, NaN, subnormals and -0.0 come back exactly."""
    values = np.array([65504.0, -65504.0, np.inf, -np.inf, np.nan, 2.0**-24, -(2.0**-24), 2.0**-14, -0.0, 0.1],
                      dtype=np.float16)
    back = round_trip({"W1": values.reshape(2, 5), "scale": np.float16(2.0**-10)})
    assert back["W1"].dtype == np.float16 and back["W1"].tobytes() == values.tobytes()
    assert type(back["scale"]) is np.float16 and back["scale"] == np.float16(2.0**-10)


# --------------------------------------------------------------------------
# Collectives: every worker holds its own arrays (LessonSpec.workers_apart)
# --------------------------------------------------------------------------

def test_arrays_shared_between_workers_are_found_and_one_workers_own_views_are_not():
    from shared.checking import arrays_shared_between_workers
    buffer = np.arange(6.0)
    own_views = [{"W": buffer[:4].reshape(2, 2), "b": buffer[4:]}, {"W": np.ones((2, 2)), "b": np.ones(2)}]
    assert arrays_shared_between_workers(own_views) == []
    mean = np.ones(3)
    found = arrays_shared_between_workers([mean, mean.copy(), mean[1:]])
    assert found == ["the result[2] (worker 2) shares memory with the result[0] (worker 0)"]
    nested = [{"W": mean}, {"W": mean}]
    assert arrays_shared_between_workers(nested, "the replicas") == [
        "the replicas[1]['W'] (worker 1) shares memory with the replicas[0]['W'] (worker 0)"]
    assert arrays_shared_between_workers("not a list") == []


@pytest.mark.part_5
def test_workers_sharing_one_array_lose_the_points_and_the_mistake_is_named():
    namespace = reference_namespace("028")
    ring = namespace["ring_all_reduce_mean"]

    def ring_all_reduce_mean(worker_arrays, cluster=None):
        results, traffic = ring(worker_arrays, cluster)
        return [results[0]] * len(results), traffic  # right values, right traffic, one array for all
    namespace["ring_all_reduce_mean"] = ring_all_reduce_mean
    verdict = grade_in_process("028", namespace)
    assert not verdict.passed
    assert "(worker 1) shares memory with the result[0][0] (worker 0)" in verdict.message
    assert "common mistake: workers sharing one array object." in verdict.message
    assert grade_in_process("030", reference_namespace("030")).passed  # one worker's views of its own buffer pass


@pytest.mark.part_5
def test_revealed_building_blocks_import_the_cluster_from_the_package():
    from grading import redact
    source = redact.revealed_blocks(("ring_all_reduce_mean",))
    assert "from shared.cluster import Cluster" in source and "from ." not in source
    blocks = {"__name__": "mct_building_blocks"}
    exec(compile(source, "<blocks>", "exec"), blocks)
    results, traffic = blocks["ring_all_reduce_mean"]([np.ones(4), 3 * np.ones(4)])
    assert np.array_equal(results[1], 2 * np.ones(4)) and traffic["rounds"] == 2


def test_a_test_cell_waits_for_its_lessons_hidden_cases_whatever_the_cells_own_limit():
    """A test cell answers the lesson's hidden cases first, under the lesson's time limit (60 s for 040):
    its cell timeout adds that limit to the per-cell one, so a slow answer is stopped by the harness
    (which names the lesson's limit), not by the cell's timeout; every other cell keeps the per-cell one."""
    from nbformat.v4 import new_code_cell

    from grading.preprocessors import SandboxedExecute

    execute = SandboxedExecute(timeout=30)
    for slug in landed_parts():
        for lesson in lessons_of(slug):
            limit = lesson_spec(lesson.code).time_limit
            test_cell = new_code_cell(metadata={"nbgrader": {"grade_id": lesson.grade_id, "grade": True}})
            solution_cell = new_code_cell(metadata={"nbgrader": {"grade_id": lesson.solution_grade_id}})
            assert execute._get_timeout(test_cell) >= 30 + limit, lesson.code
            assert execute._get_timeout(solution_cell) == 30
    assert execute._get_timeout(new_code_cell()) == 30
    loop_cell = new_code_cell(metadata={"nbgrader": {"grade_id": "lesson_040_full_distributed_training_loop"}})
    assert execute._get_timeout(loop_cell) >= 90


# --------------------------------------------------------------------------
# Every call returns new arrays and containers, in every lesson
# --------------------------------------------------------------------------

def _refilling_forward(X, params):
    """005 with one module-level cache dict, filled again at every call (right values at each call)."""
    cache = _refilling_forward.cache
    Z1 = X @ params["W1"] + params["b1"]
    A1 = np.maximum(Z1, 0)
    cache.clear()
    cache.update({"A0": X, "Z1": Z1, "A1": A1})
    return A1 @ params["W2"] + params["b2"], cache


_refilling_forward.cache = {}


def _pooled_recompute(checkpoint, params, start_layer, end_layer):
    """016 writing into buffers kept between calls (one pair per layer and shape)."""
    last = min(end_layer, len(params) // 2 - 1)
    cache, a = {f"A{start_layer}": checkpoint}, checkpoint
    for i in range(start_layer + 1, last + 1):
        shape = (a.shape[0], params[f"W{i}"].shape[1])
        key = (i, shape, np.result_type(a, params[f"W{i}"]).str)
        if key not in _pooled_recompute.pool:
            _pooled_recompute.pool[key] = (np.empty(shape, key[2]), np.empty(shape, key[2]))
        z, act = _pooled_recompute.pool[key]
        np.matmul(a, params[f"W{i}"], out=z)
        z += params[f"b{i}"]
        np.maximum(z, 0, out=act)
        cache[f"Z{i}"], cache[f"A{i}"] = z, act
        a = act
    return cache


_pooled_recompute.pool = {}


@pytest.mark.parametrize("code, name, function, said", [
    ("005", "mlp_forward", _refilling_forward, "is the same dict object as case 1's result[1]"),
    ("016", "recompute_block_activations", _pooled_recompute, "shares memory with case 1's result"),
])
def test_a_result_that_an_earlier_call_handed_out_loses_the_points(code, name, function, said):
    """Where a result may hold an input (fresh_result off), it may still never hold an earlier call's result."""
    assert not lesson_spec(code).fresh_result
    namespace = reference_namespace(code)
    namespace[name] = function
    for seed in (0, 1, 2):
        verdict = grade_in_process(code, namespace, seed)
        assert not verdict.passed and verdict.reason == "alias", verdict.message
        assert said in verdict.message and "every call must return new arrays and dicts" in verdict.message


def test_the_verdict_names_a_precision_slip():
    """A cast through float32 (019) rounds twice: the verdict says the values are right but rounded another way."""
    from catalogue import find_lesson, hidden_verdict
    from plausible import half_through_float32
    verdict = hidden_verdict(find_lesson("019"), half_through_float32, 0)
    assert not verdict.passed
    assert "float16's last place" in verdict.message and "through another precision first" in verdict.message


def test_the_verdict_names_a_float16_intermediate_in_a_lesson_s_number():
    """Issue 42's example: 006 with a float16 intermediate gives a loss off by float16's rounding; the verdict
    says so (not only "is 1.05946, expected 1.05921")."""
    from catalogue import find_lesson, hidden_verdict

    def mse_loss_and_grad(Y_hat, Y):
        diff = (Y_hat - Y).astype(np.float16).astype(Y_hat.dtype)  # a float16 intermediate
        return float(np.mean(diff ** 2)), 2.0 * diff / diff.size
    verdict = hidden_verdict(find_lesson("006"), mse_loss_and_grad, 0)
    assert not verdict.passed and verdict.reason == "value"
    assert "within float16's rounding" in verdict.message and "a float16 intermediate" in verdict.message, verdict.message


def test_a_function_not_defined_because_its_cell_is_below_its_test_cell_is_told_so():
    """A test cell whose Implementation cell was moved (or pasted) below it: the verdict names both cells and
    what to do, not only "not defined" (which sends the learner looking for a cell that is there)."""
    import nbformat
    from grading.preprocessors.judgelessons import _solution_missing
    lesson = find_lesson("003")
    test = nbformat.v4.new_code_cell("", metadata={"nbgrader": {"grade_id": lesson.grade_id, "grade": True}})
    solution = nbformat.v4.new_code_cell("", metadata={"nbgrader": {"grade_id": lesson.solution_grade_id}})
    not_defined = {"status": "not_defined"}
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# 003"), test, solution])
    verdict = _solution_missing(lesson, 1, not_defined, nb, set())
    assert verdict is not None and not verdict.passed
    assert "its Implementation cell is below it (cell 3); move it back above its test cell" in verdict.message
    assert _solution_missing(lesson, 1, {"status": "answered"}, nb, set()) is None
    nb.cells[1], nb.cells[2] = solution, test
    assert _solution_missing(lesson, 2, not_defined, nb, set()) is None  # above it: "not defined" has another cause
    stopped = _solution_missing(lesson, 2, not_defined, nb, {1})  # it stopped the kernel: not run again
    assert stopped is not None and "its Implementation cell (cell 2) stopped the grading kernel" in stopped.message
