"""The checking toolkit: every failure explains itself in the learner's terms."""

import numpy as np
import pytest

from shared.checking import (CheckFailure, Mistake, check_call, check_equal, difference,
                             recognise_mistake, scalar_difference)


def failure(fn, *args, **kwargs) -> str:
    with pytest.raises(CheckFailure) as info:
        fn(*args, **kwargs)
    return str(info.value)


E = np.arange(6.0).reshape(2, 3)


@pytest.mark.parametrize("actual, words", [
    (E.T, ["shape (3, 2)", "expected (2, 3)", "transposed"]),
    (E.astype(np.float32), ["dtype float32", "expected float64"]),
    (np.where(E > 4, np.nan, E), ["1 NaN", "finite"]),
    (np.where(E > 4, np.inf, E), ["1 infinite"]),
    (E + np.array([0, 0, 0.5]), ["wrong in 2 of 6", "largest error is 0.5", "index (0, 2)"]),
    (E.tolist(), ["should be a NumPy array", "list"]),
    (None, ["None", "return"]),
    (E.sum(axis=0), ["shape (3,)", "one axis is missing"]),
])
def test_array_differences_say_what_differs(actual, words):
    message = difference(actual, E, "dW")
    assert message is not None and message.startswith("dW")
    for word in words:
        assert word in message, (word, message)


def test_equal_values_within_tolerance_pass():
    assert difference(E + 1e-12, E, "x") is None
    assert difference(E.copy(), E, "x", exact=True) is None
    assert difference(E + 1e-12, E, "x", exact=True) is not None
    assert difference(np.array([np.nan]), np.array([np.nan]), "x") is None


def test_dict_and_tuple_differences_name_the_key_and_position():
    assert "missing the key(s) ['b1']" in difference({"W1": E}, {"W1": E, "b1": E}, "grads")
    assert "unexpected key(s) ['c']" in difference({"W1": E, "c": 1}, {"W1": E}, "grads")
    assert "grads['W1'] has shape" in difference({"W1": E.T}, {"W1": E}, "grads")
    assert "out[1]" in difference((E, 2.0), (E, 1.0), "out")
    assert "has 3 values, expected 2" in difference((E, 1.0, 2.0), (E, 1.0), "out")
    assert "should be a number" in difference((E, "x"), (E, 1.0), "out")


def test_a_recognised_mistake_is_named_with_its_hint():
    mistakes = [Mistake("forgot the bias", "add b", lambda x, b: x),
                Mistake("doubled", "do not double", lambda x, b: 2 * x + b)]
    x, b = np.ones(3), np.full(3, 2.0)
    message = failure(check_equal, x, x + b, "z", mistakes=mistakes, mistake_args=(x, b))
    assert "common mistake: forgot the bias. add b" in message
    assert "doubled" not in message


def test_a_mistake_that_gives_the_right_answer_is_not_named():
    # relu on a positive output cannot be told apart from no relu: never blame it.
    mistake = Mistake("relu on output", "", lambda x: np.maximum(x, 0))
    x = np.array([1.0, 2.0])
    assert recognise_mistake(x + 1, [mistake], (x,), expected=x) is None


def test_a_crashing_mistake_is_ignored():
    boom = Mistake("boom", "", lambda x: 1 / 0)
    assert recognise_mistake(np.ones(2), [boom], (np.ones(2),)) is None


def test_check_call_reports_mutation():
    def relu_in_place(z):
        z[z < 0] = 0
        return z
    z = np.array([-1.0, 2.0])
    message = failure(check_call, relu_in_place, {"z": z}, np.array([0.0, 2.0]))
    assert "changed its input `z` in place" in message
    assert z.tolist() == [-1.0, 2.0]  # the caller's array is untouched


def test_check_call_turns_a_crash_into_a_message_with_the_inputs():
    def broken(x, W):
        return x @ W
    message = failure(check_call, broken, {"x": np.ones((2, 3)), "W": np.ones((2, 4))}, np.ones((2, 4)))
    assert "broken raised ValueError" in message
    assert "x=<float64 array (2, 3)>" in message and "W=<float64 array (2, 4)>" in message


def test_not_implemented_passes_through_unchanged():
    def stub(x):
        raise NotImplementedError("not yet")
    with pytest.raises(NotImplementedError):
        check_call(stub, {"x": 1.0}, 1.0)


def test_checks_survive_a_monkeypatched_numpy(monkeypatch):
    """A notebook that rebinds np.allclose and friends cannot make a wrong answer pass."""
    for name in ("allclose", "array_equal", "isclose", "isfinite", "abs", "all"):
        monkeypatch.setattr(np, name, lambda *a, **k: True)
    monkeypatch.setattr(np.testing, "assert_allclose", lambda *a, **k: None)
    assert difference(E + 1, E, "x") is not None
    assert difference(np.full(2, np.nan), np.zeros(2), "x") is not None


def test_a_crash_that_a_mistake_reproduces_is_named():
    mistake = Mistake("multiplied by W.T", "use x @ W", lambda x, W: x @ W.T)
    def learner(x, W):
        return x @ W.T
    message = failure(check_call, learner, {"x": np.ones((2, 3)), "W": np.ones((3, 4))}, np.full((2, 4), 3.0),
                      mistakes=[mistake])
    assert "raised ValueError" in message and "common mistake: multiplied by W.T" in message


@pytest.mark.parametrize("actual", [3.0, np.float64(3.0), np.int64(3), np.array(3)])
def test_an_int_must_be_a_python_int(actual):
    assert "should be a Python int" in difference(actual, 3, "n")


@pytest.mark.parametrize("actual", [np.float32(1.25), np.array(1.25)])
def test_a_float_must_be_a_python_float(actual):
    assert "should be a Python float" in difference(actual, 1.25, "loss")


def test_a_value_difference_shows_enough_digits_to_see_it():
    message = difference(np.array([0.1 + 1e-13]), np.array([0.1]), "x", rtol=1e-15, atol=0.0)
    mine, theirs = message.split("where you have ")[1].split(" and the expected value is ")
    assert mine != theirs


def test_a_tolerance_never_accepts_a_finite_value_for_an_infinite_one():
    """rtol * inf is inf: an expected inf (a float16 overflow, say) must be matched by inf itself."""
    expected = np.array([1.0, np.inf, -np.inf], dtype=np.float16)
    assert difference(expected.copy(), expected, "x", rtol=1e-3, atol=1e-8) is None
    clipped = np.array([1.0, 65504.0, -np.inf], dtype=np.float16)
    message = difference(clipped, expected, "x", rtol=1e-3, atol=1e-8)
    assert "1 finite value(s) where inf is expected at index (1,)" in message and "65,504" in message
    assert difference(np.array([1.0, -np.inf, np.inf]), expected.astype(np.float64), "x", rtol=1.0) is not None
    assert difference(1e308, float("inf"), "x", rtol=1e-3) is not None
    assert difference(float("inf"), float("inf"), "x", rtol=1e-3) is None
    assert difference(float("nan"), float("nan"), "x") is None


def test_check_call_with_fresh_refuses_a_result_that_shares_memory_with_an_input():
    def lazy(x):
        return x

    with pytest.raises(CheckFailure, match="shares memory with its input `x`"):
        check_call(lazy, {"x": np.ones(3)}, np.ones(3), fresh=True)
    check_call(lazy, {"x": np.ones(3)}, np.ones(3))  # allowed unless asked


def test_check_memory_bounds_the_peak_or_what_the_result_keeps():
    from shared.checking import check_memory
    from grading.spec import MemoryBound

    def slice_of_a_big_array(n):
        return np.ones(10 * n)[:n]          # a view: the whole 10n-number array stays alive

    def copy_of_a_slice(n):
        return np.ones(10 * n)[:n].copy()   # 10n numbers at the peak, n kept

    n, itemsize = 100_000, 8
    kept_allowed = 2 * n * itemsize
    assert check_memory(copy_of_a_slice, {"n": n}, kept_allowed, "n numbers", kind="kept").shape == (n,)
    with pytest.raises(CheckFailure, match="result keeps 7.6 MiB alive after the call"):
        check_memory(slice_of_a_big_array, {"n": n}, kept_allowed, "n numbers", kind="kept")
    with pytest.raises(CheckFailure, match="at its peak"):
        check_memory(copy_of_a_slice, {"n": n}, kept_allowed, "n numbers")
    with pytest.raises(ValueError):
        MemoryBound(lambda args: 0, "rule", "shortcut", kind="retained")


def test_key_tolerances_compare_measured_bytes_loosely_and_counted_bytes_exactly():
    """Part 7's answers hold both: bytes tracemalloc measured (within a few percent) and bytes counted or
    sent (exactly), under keys of their own, at any depth, beside values with the default tolerances."""
    from shared.checking import difference
    expected = {"loss": [0.5, 0.25], "memory": [{"parameters": 1000, "activations": 100_000}]}
    keys = {"activations": {"rtol": 0.05, "atol": 0}, "parameters": {"rtol": 0.0, "atol": 0.0}}
    close = {"loss": [0.5, 0.25], "memory": [{"parameters": 1000, "activations": 103_000}]}
    assert difference(close, expected, "h", key_tolerances=keys) is None
    assert "activations" in difference(close, expected, "h")  # without them, the default rtol 1e-7
    off_by_one = {"loss": [0.5, 0.25], "memory": [{"parameters": 1001, "activations": 100_000}]}
    assert "['parameters'] is 1,001, expected 1,000" in difference(off_by_one, expected, "h", key_tolerances=keys,
                                                                  rtol=0.01)
    far = {"loss": [0.5, 0.25], "memory": [{"parameters": 1000, "activations": 120_000}]}
    assert "['activations'] is 120,000" in difference(far, expected, "h", key_tolerances=keys)
    assert "['loss'][1]" in difference({**close, "loss": [0.5, 0.26]}, expected, "h", key_tolerances=keys)


def test_a_list_is_not_the_promised_tuple_nor_an_int_the_promised_float():
    from shared.checking import difference
    pair = (np.zeros(2), np.ones(2))
    said = difference([np.zeros(2), np.ones(2)], pair, "the result")
    assert said.startswith("the result should be a tuple of 2 values, but it is a list") and "return a, b" in said
    assert "should be a list" in difference(tuple(pair), list(pair), "the result")
    assert difference(pair, pair, "the result") is None
    said = difference({"saved_fraction": 0}, {"saved_fraction": 0.0}, "the result")
    assert "the result['saved_fraction'] should be a Python float, but it is the int 0" in said
    assert difference({"saved_fraction": 0.0}, {"saved_fraction": 0.0}, "the result") is None
    assert "Python float" in difference(True, 1.0, "x")


# --------------------------------------------------------------------------
# a collective sends on the cluster it is given (the visible tests of 027, 028, 034, 035)
# --------------------------------------------------------------------------

def _send_to_worker_0(arrays, cluster=None):
    """Every worker r > 0 sends its array to worker 0 on ``cluster`` (or on a cluster of its own)."""
    from shared.cluster import Cluster
    cluster = cluster if cluster is not None else Cluster(len(arrays))
    with cluster.round():
        for rank in range(1, len(arrays)):
            cluster.send(rank, 0, arrays[rank])
    return [cluster.receive(0, rank) for rank in range(1, len(arrays))]


TO_WORKER_0 = {"bytes_sent": [0, 16, 16], "bytes_received": [32, 0, 0], "messages_sent": [0, 1, 1],
               "messages_received": [2, 0, 0], "rounds": 1}


def test_a_collective_on_the_cluster_it_is_given_passes():
    from shared.checking import check_sends_on_given_cluster
    check_sends_on_given_cluster(_send_to_worker_0, ([np.zeros(2)] * 3,), TO_WORKER_0, "send(arrays, cluster)",
                                 "worker 0 holds what it received")


def test_a_collective_on_a_cluster_of_its_own_or_with_unread_messages_fails_saying_so():
    from shared.checking import check_sends_on_given_cluster
    from shared.cluster import Cluster

    def own_cluster(arrays, cluster=None):
        return _send_to_worker_0(arrays, Cluster(len(arrays)))

    def unread(arrays, cluster):
        with cluster.round():
            for rank in range(1, len(arrays)):
                cluster.send(rank, 0, arrays[rank])
        return []

    arrays = ([np.zeros(2)] * 3,)
    with pytest.raises(CheckFailure, match=r"send\(arrays, cluster\) should send its messages on `cluster` "
                                           r"\(the grader passes one in and reads its ledger\); its ledger shows"):
        check_sends_on_given_cluster(own_cluster, arrays, TO_WORKER_0, "send(arrays, cluster)", "...")
    with pytest.raises(CheckFailure, match="2 message\\(s\\) were sent and never received: worker 0 holds what"):
        check_sends_on_given_cluster(unread, arrays, TO_WORKER_0, "send(arrays, cluster)",
                                     "worker 0 holds what it received")


# Precision named: a result that is the right one in another precision says so (the course's subject).
_X = np.random.default_rng(3).standard_normal(64)
_MIDPOINTS = np.array([1 + 2.0**-11 + 2.0**-40, -(4 + 2.0**-9 + 2.0**-38)])   # just above float16 midpoints


@pytest.mark.parametrize("actual, expected, tolerances, words", [
    (_X.astype(np.float16).astype(np.float64), _X, {"rtol": 1e-12}, ["within float16's rounding",
                                                                     "a float16 intermediate", "float64"]),
    (_X.astype(np.float16).astype(np.float32), _X.astype(np.float32), {"rtol": 1e-6}, ["within float16's rounding",
                                                                                      "unscale in float16"]),
    (_X.astype(np.float32).astype(np.float64), _X, {"rtol": 1e-12}, ["within float32's rounding",
                                                                     "a float32 intermediate"]),
    (_MIDPOINTS.astype(np.float32).astype(np.float16), _MIDPOINTS.astype(np.float16), {"exact": True},
     ["a unit or two in float16's last place", "through another precision first"]),
])
def test_a_result_right_in_another_precision_is_named(actual, expected, tolerances, words):
    message = difference(actual, expected, "dW", atol=0.0, **tolerances)
    for word in words:
        assert word in message, message


def test_a_wrong_value_is_not_called_a_precision_slip():
    for wrong in (_X * 1.01, _X + 0.5, _X[::-1].copy()):
        message = difference(wrong, _X, "dW", rtol=1e-12, atol=0.0)
        assert "wrong in" in message and "rounding" not in message and "last place" not in message, message


def test_a_number_right_in_another_precision_is_named():
    """A scalar too (006's loss, summed from a float16 intermediate); a whole number expected is never called
    a rounding slip (a count of bytes is not rounded: it is wrong)."""
    loss = float(np.mean(_X ** 2))
    message = scalar_difference(float(np.float16(loss)), loss, "the loss", rtol=1e-12, atol=0.0)
    assert "The number is within float16's rounding" in message and "a float16 intermediate" in message, message
    message = scalar_difference(loss * (1 + 2.0**-23), loss, "the loss", rtol=1e-12, atol=0.0)
    assert "within float32's rounding" in message and "a float32 intermediate" in message, message
    message = scalar_difference(1001, 1000, "the bytes", rtol=0.0, atol=0.0)
    assert message is not None and "rounding" not in message and "last place" not in message, message
