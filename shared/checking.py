"""The checking toolkit behind every visible and hidden test.

Each check raises :class:`CheckFailure` (an ``AssertionError``) whose message
says, in the learner's terms, what is wrong: which value, its shape or dtype,
which dict key, by how much, and, when a wrong answer matches a known mistake,
the mistake's name and a hint.

The NumPy functions used for comparing are bound when this module is imported
(in the notebook's locked set-up cell, before any learner code runs), so a
notebook that later rebinds ``np.allclose`` or ``np.isfinite`` cannot change
what these checks compute.
"""

from __future__ import annotations

import copy
import inspect as _inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import FunctionType as _FunctionType, MappingProxyType as _MappingProxyType
from typing import Any

import numpy as np

from .cluster import (arrays_held, arrays_shared_between_workers, arrays_shared_within, first_shared,  # noqa: F401
                      parts_held, parts_reused)
from .lesson_blocks import GRADED_WITH as _GRADED_WITH_TABLE
from .lessons import LESSONS as _LESSONS
from .where import describe_error as _describe_error

# Bound once, at import: see the module docstring.
_ndarray = np.ndarray
_asarray = np.asarray
_isfinite = np.isfinite
_isnan = np.isnan
_abs = np.abs
_argmax = np.argmax
_unravel_index = np.unravel_index
_array_equal = np.array_equal
_issubdtype = np.issubdtype
_floating = np.floating
_number = np.number
_errstate = np.errstate
_deepcopy = copy.deepcopy
_where = np.where
_inf = np.inf
_float64 = np.float64
_max = np.max
_float16, _float32 = np.dtype(np.float16), np.dtype(np.float32)
# What counts as a dict.  Concrete types, not the Mapping ABC: an isinstance check against an ABC
# can run code of any class that subclasses it (its __subclasshook__ or metaclass).
_MAPPINGS = (dict, _MappingProxyType)
# Each composite lesson's function -> the earlier lessons' functions the grader runs it with (the helper's versions),
# copied at import as the NumPy functions above, so that the notebook cannot change what check_rules skips.
_GRADED_WITH = _MappingProxyType({name: tuple(given) for name, given in _GRADED_WITH_TABLE.items()})

DEFAULT_RTOL = 1e-7
DEFAULT_ATOL = 1e-10


class CheckFailure(AssertionError):
    """A test found a wrong answer; the message explains it to the learner.

    In a notebook it is shown as its message alone (IPython's ``_render_traceback_``):
    no line of the course's own modules, and, when the learner's code crashed, where:
    the learner's cells and lines, and the course's helpers and NumPy by name only
    (``shared.where``, as the grader's verdict says it).
    """

    def _render_traceback_(self) -> list[str]:
        lines = [f"\x1b[0;31mTest failed:\x1b[0m {self}"]
        where = learner_lines(self.__cause__)
        if where:
            lines.append("Where, in your code:")
            lines += [f"  {line}" for line in where]
        return lines


def learner_lines(error: BaseException | None) -> list[str]:
    """Where ``error`` happened in the learner's code: their cells by lesson and line, what they called by name."""
    return _describe_error(error, {lesson.function: lesson.code for lesson in _LESSONS})


@dataclass(frozen=True)
class Mistake:
    """A common wrong answer, recognised by recomputing it.

    ``compute`` takes the same arguments as the graded function and returns what
    the mistaken version would return; when a learner's answer matches it, the
    failure message names the mistake and gives the hint.
    """

    name: str
    hint: str
    compute: Callable[..., Any]


# --------------------------------------------------------------------------
# Describing values
# --------------------------------------------------------------------------

def describe(value: Any) -> str:
    """A short description of a value: type, and shape and dtype for arrays."""
    if isinstance(value, _ndarray):
        return f"an array of shape {value.shape} and dtype {value.dtype}"
    if isinstance(value, (bool, np.bool_)):
        return f"the bool {value!r}"
    if isinstance(value, (int, float, np.number)):
        return f"the {type(value).__name__} {value!r}"
    if isinstance(value, _MAPPINGS):
        return f"a {type(value).__name__} with keys {sorted(map(str, value))}"
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of length {len(value)}"
    if value is None:
        return "None (did you forget a `return`?)"
    return f"a {type(value).__name__}"


def _whole(x: Any) -> bool:
    """An integer, or a float that holds one exactly (a count of bytes computed in floating point)."""
    if isinstance(x, (bool, np.bool_)):
        return False
    if isinstance(x, (int, np.integer)):
        return True
    return isinstance(x, (float, np.floating)) and float(x).is_integer() and abs(float(x)) < 2 ** 53


def _fmt(x: Any) -> str:
    """A number as a learner reads it: whole numbers in full with separators (1,070,630, never
    1.07063e+06), other floats to 6 significant digits."""
    if _whole(x):
        return f"{int(x):,}"
    if isinstance(x, float) or isinstance(x, np.floating):
        return f"{float(x):.6g}"
    return repr(x)


def _fmt_pair(actual: Any, expected: Any) -> tuple[str, str]:
    """Two numbers with enough digits to see that they differ (17 significant digits at most)."""
    if _whole(actual) and _whole(expected):
        return _fmt(actual), _fmt(expected)
    for digits in (6, 10, 17):
        mine, theirs = f"{float(actual):.{digits}g}", f"{float(expected):.{digits}g}"
        if mine != theirs:
            break
    return mine, theirs


# --------------------------------------------------------------------------
# Comparing values: each function returns None when equal, else a message
# --------------------------------------------------------------------------

def array_difference(actual: Any, expected: np.ndarray, name: str, *,
                     rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL,
                     exact: bool = False, check_dtype: bool = True) -> str | None:
    """Why ``actual`` is not the array ``expected``, or None if it is (within tolerance)."""
    if not isinstance(actual, _ndarray):
        return f"{name} should be a NumPy array of shape {expected.shape}, but it is {describe(actual)}"
    if actual.shape != expected.shape:
        hint = ""
        if actual.shape == expected.shape[::-1] and len(expected.shape) == 2:
            hint = " (the shape is transposed: check the order of a matrix product, or a missing .T)"
        elif actual.size == expected.size:
            hint = " (same number of entries, different shape: a reshape or a transpose?)"
        elif actual.ndim == expected.ndim - 1:
            hint = " (one axis is missing: did you sum or average over an axis you should keep?)"
        elif actual.ndim == expected.ndim + 1:
            hint = " (one axis too many: is something broadcast against the wrong axis?)"
        return f"{name} has shape {actual.shape}, expected {expected.shape}{hint}"
    if check_dtype and actual.dtype != expected.dtype:
        return (f"{name} has dtype {actual.dtype}, expected {expected.dtype}"
                + (f" (the contract says which precision the result has: check each astype, each new array's "
                   f"dtype and each mixed operation on the way to {expected.dtype})"
                   if _issubdtype(expected.dtype, _floating) else ""))
    if actual.dtype == object:
        return f"{name} has dtype object, expected numbers of dtype {expected.dtype}"
    if _issubdtype(actual.dtype, _number) and _issubdtype(expected.dtype, _number) \
            and not _issubdtype(actual.dtype, np.bool_):
        return _numeric_difference(actual, expected, name, rtol=rtol, atol=atol, exact=exact)
    if not _array_equal(actual, expected):
        return f"{name} differs from the expected values"
    return None


def _numeric_difference(actual: np.ndarray, expected: np.ndarray, name: str, *,
                        rtol: float, atol: float, exact: bool) -> str | None:
    a = actual.astype(_float64)
    e = expected.astype(_float64)
    with _errstate(invalid="ignore", over="ignore"):
        unexpected = ~_isfinite(a) & _isfinite(e)
        if unexpected.any():
            n_nan = int(_isnan(a).sum())
            n_inf = int(unexpected.sum()) - n_nan
            what = " and ".join(p for p in (f"{n_nan} NaN" if n_nan else "",
                                            f"{n_inf} infinite" if n_inf else "") if p)
            return (f"{name} contains {what} value(s) out of {actual.size} where finite values "
                    f"are expected (a division by zero, an overflow, or an uninitialised np.empty?)")
        lost = _isfinite(a) & ~_isfinite(e)  # a NaN or inf the contract keeps, made finite (nan_to_num, a clip)
        if lost.any():
            index = tuple(int(i) for i in _unravel_index(int(_argmax(lost)), actual.shape))
            where = f" at index {index}" if index else ""
            return (f"{name} has {int(lost.sum())} finite value(s) where {'NaN' if _isnan(e[index]) else 'inf'} is "
                    f"expected{where} (you have {_fmt(actual[index])}): the contract keeps that value non-finite here "
                    f"(no nan_to_num, clip or replacement)")
        same = (a == e) | (_isnan(a) & _isnan(e))
        if not exact:  # a tolerance is relative to a finite value (rtol * inf would accept anything)
            same |= _isfinite(e) & (_abs(a - e) <= atol + rtol * _abs(e))
        wrong = ~same
        if not wrong.any():
            return None
        diff = _where(wrong, _abs(a - e), 0.0)
        diff = _where(_isnan(diff), _inf, diff)
    flat = int(_argmax(diff))
    index = tuple(int(i) for i in _unravel_index(flat, actual.shape))
    where = f" at index {index}" if index else ""
    bound = "exactly (bitwise)" if exact else f"within rtol={rtol:g}, atol={atol:g}"
    mine, theirs = _fmt_pair(actual[index], expected[index])
    return (f"{name} is wrong in {int(wrong.sum())} of {actual.size} entries ({bound}): "
            f"the largest error is {_fmt(diff[index])}{where}, "
            f"where you have {mine} and the expected value is {theirs}"
            + _precision_note(a, e, wrong, expected.dtype, "Every wrong entry is"))


#: Relative errors that rounding to a narrower float leaves (a few units in its last place): float16 keeps 11
#: significant bits, float32 24.
_FLOAT16_ROUNDING, _FLOAT32_ROUNDING = 2.0 ** -9, 2.0 ** -21


def _precision_note(actual: np.ndarray, expected: np.ndarray, wrong: np.ndarray, dtype: np.dtype,
                    subject: str) -> str:
    """A sentence naming the precision slip when every wrong entry is off by no more than a narrower float's
    rounding (the course's subject: a float16 intermediate, a float16 unscale, a float64 promotion), else ''.
    ``subject`` starts it: "Every wrong entry is" for an array, "The number is" for a scalar."""
    with _errstate(invalid="ignore", divide="ignore", over="ignore"):
        e = expected[wrong]
        if e.size == 0 or not _isfinite(e).all() or (e == 0).any():
            return ""
        relative = float(_max(_abs(actual[wrong] - e) / _abs(e)))
    if relative <= _FLOAT32_ROUNDING:  # finer than float16's rounding: float32's, or a summation order
        return (f". {subject} within float32's rounding of the expected one (relative error at most "
                f"{relative:.1e}): a float32 intermediate where the contract computes in float64"
                if dtype == _float64 else "")
    if dtype == _float16 and relative <= _FLOAT16_ROUNDING:
        return (f". {subject} off by a unit or two in float16's last place: the right value, rounded "
                "another way: through another precision first (a float32 or float64 intermediate, a value "
                "promoted to float64 by a float64 operand) or in another order")
    if dtype != _float16 and relative <= _FLOAT16_ROUNDING:
        return (f". {subject} within float16's rounding of the expected one (relative error at most "
                f"{relative:.1e}): a float16 intermediate where the contract computes in {dtype} (a cast, a "
                f"product or an unscale in float16), or a float16 value the contract rounds kept wider (promoted "
                f"to float64 by a float64 operand)")
    return ""


def scalar_difference(actual: Any, expected: float, name: str, *,
                      rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL) -> str | None:
    """Why ``actual`` is not the number ``expected``, or None."""
    if isinstance(actual, _ndarray) and actual.shape == ():
        actual = actual[()]
    if isinstance(actual, _ndarray):
        return f"{name} should be a single number, but it is {describe(actual)}"
    if isinstance(actual, (bool, np.bool_)) or not isinstance(actual, (int, float, np.number)):
        return f"{name} should be a number, but it is {describe(actual)}"
    actual_f = float(actual)
    if math.isnan(actual_f) and math.isnan(expected):
        return None
    if math.isnan(actual_f):
        return f"{name} is NaN, expected {_fmt(expected)}"
    if math.isinf(actual_f) and not math.isinf(expected):
        return f"{name} is infinite, expected {_fmt(expected)}"
    if not math.isfinite(expected) and actual_f != expected:  # a tolerance times inf would accept anything
        return f"{name} is {_fmt(actual_f)}, expected {_fmt(expected)}"
    if abs(actual_f - expected) <= atol + rtol * abs(expected) or actual_f == expected:
        return None
    mine, theirs = _fmt_pair(actual, expected)
    return f"{name} is {mine}, expected {theirs} (off by {_fmt(actual_f - expected)})" + _scalar_precision_note(
        actual_f, expected)


def _scalar_precision_note(actual: float, expected: Any) -> str:
    """The precision slip a wrong float is within, as for an array's entries (a loss summed from a float16
    intermediate: 006); none for a whole number expected (a count of bytes is not rounded, it is wrong)."""
    dtype = _asarray(expected).dtype
    if not _issubdtype(dtype, _floating):
        return ""
    return _precision_note(_asarray([actual], dtype=_float64), _asarray([float(expected)], dtype=_float64),
                           _asarray([True]), dtype, "The number is")


def difference(actual: Any, expected: Any, name: str, **tolerances: Any) -> str | None:
    """Compare any nesting of arrays, numbers, tuples and dicts; explain the first difference.

    ``key_tolerances`` (optional, ``{dict key: {"rtol": ..., "atol": ..., "exact": ...}}``) sets
    other tolerances for the values under a dict key, at any depth: e.g. bytes measured with
    tracemalloc compared within a few percent, or counted bytes compared exactly
    (``{"rtol": 0, "atol": 0}``), beside values compared with the default tolerances.  An int key
    stands for a position in a returned tuple (a float64 number beside a float16 array).
    """
    by_key = tolerances.pop("key_tolerances", None) or {}
    if isinstance(expected, _MAPPINGS) or isinstance(expected, (tuple, list)):
        return _nested_difference(actual, expected, name, by_key, tolerances)
    return _leaf_difference(actual, expected, name, **tolerances)


def _nested_difference(actual: Any, expected: Any, name: str, by_key: Mapping[Any, Mapping[str, Any]],
                       tolerances: dict[str, Any]) -> str | None:
    def inner(a: Any, e: Any, where: str, key: Any = None) -> str | None:
        own = tolerances
        if by_key and type(key) in (str, int) and key in by_key:
            own = {**tolerances, **by_key[key]}
        return difference(a, e, where, key_tolerances=by_key, **own) if by_key else difference(a, e, where, **own)
    if isinstance(expected, _MAPPINGS):
        if not isinstance(actual, _MAPPINGS):
            return f"{name} should be a dict with keys {sorted(expected)}, but it is {describe(actual)}"
        missing = [k for k in expected if k not in actual]
        extra = [k for k in actual if k not in expected]
        if missing or extra:
            parts = []
            if missing:
                parts.append(f"is missing the key(s) {missing}")
            if extra:
                parts.append(f"has unexpected key(s) {extra}")
            return f"{name} " + " and ".join(parts) + f" (expected exactly {list(expected)})"
        for key in expected:
            message = inner(actual[key], expected[key], f"{name}[{key!r}]", key if type(key) is str else None)
            if message:
                return message
        return None
    if not isinstance(actual, (tuple, list)):
        return (f"{name} should be a {type(expected).__name__} of {len(expected)} values, "
                f"but it is {describe(actual)}")
    if type(expected) in (tuple, list) and type(actual) is not type(expected):
        return (f"{name} should be a {type(expected).__name__} of {len(expected)} values, but it is "
                f"{describe(actual)}" + (": return the values separated by commas, `return a, b`"
                                         if type(expected) is tuple else ""))
    if len(actual) != len(expected):
        return f"{name} has {len(actual)} values, expected {len(expected)}"
    for i, (a, e) in enumerate(zip(actual, expected)):
        message = inner(a, e, f"{name}[{i}]", i if type(expected) is tuple else None)
        if message:
            return message
    return None


def _leaf_difference(actual: Any, expected: Any, name: str, **tolerances: Any) -> str | None:
    if isinstance(expected, _ndarray):
        return array_difference(actual, expected, name, **tolerances)
    if isinstance(expected, (bool, np.bool_)):
        if not isinstance(actual, (bool, np.bool_)):
            return f"{name} should be True or False, but it is {describe(actual)}"
        if type(expected) is bool and type(actual) is not bool:
            return f"{name} should be a Python bool, but it is {describe(actual)}: convert it with bool(...)"
        return None if bool(actual) == bool(expected) else f"{name} is {actual}, expected {expected}"
    if isinstance(expected, (int, float, np.number)):
        if type(expected) is float and isinstance(actual, (np.generic, _ndarray)) and not isinstance(actual, float):
            return (f"{name} should be a Python float, but it is {describe(actual)}: "
                    f"convert it with float(...)")
        if type(expected) is float and type(actual) in (int, bool):
            return (f"{name} should be a Python float, but it is {describe(actual)}: a ratio or a mean is a "
                    f"float even when it is a whole number (write 0.0, or convert it with float(...))")
        if type(expected) is int and (isinstance(actual, (np.generic, _ndarray, float))):
            return f"{name} should be a Python int, but it is {describe(actual)}: convert it with int(...)"
        scalar_tol = {k: v for k, v in tolerances.items() if k in ("rtol", "atol")}
        return scalar_difference(actual, float(expected), name, **scalar_tol)
    if actual != expected:
        return f"{name} is {actual!r}, expected {expected!r}"
    return None


# --------------------------------------------------------------------------
# Checks: raise CheckFailure with the explanation
# --------------------------------------------------------------------------

#: How a message names a recognised mistake (tools/report.py counts the mistakes named in verdicts by it).
MISTAKE_SAYS = "This is a common mistake: "


def with_mistake(message: str, mistake: Mistake | None) -> str:
    """``message``, followed (when ``mistake`` is not None) by a line that names the mistake and gives its hint."""
    return message if mistake is None else f"{message}\n  {MISTAKE_SAYS}{mistake.name}. {mistake.hint}"


def check_equal(actual: Any, expected: Any, name: str, *, mistakes: Sequence[Mistake] = (),
                mistake_args: tuple = (), mistake_view: Callable[[Any], Any] | None = None,
                context: str = "", **tolerances: Any) -> None:
    """Raise CheckFailure unless ``actual`` matches ``expected``; name a matching mistake.

    A mistake matches when ``mistake.compute(*mistake_args)`` equals ``actual``;
    ``mistake_view`` picks the part to compare when ``actual`` is only a piece of
    the function's result (e.g. ``lambda params: params["W1"][0]``).
    """
    message = difference(actual, expected, name, **tolerances)
    if message is None:
        return
    recognised = recognise_mistake(actual, mistakes, mistake_args, view=mistake_view,
                                   expected=expected, **tolerances)
    message = with_mistake(message, recognised)
    if context:
        message += f"\n  ({context})"
    raise CheckFailure(message)


def recognise_mistake(actual: Any, mistakes: Sequence[Mistake], args: tuple, *,
                      view: Callable[[Any], Any] | None = None, expected: Any = None,
                      **tolerances: Any) -> Mistake | None:
    """The first mistake whose recomputed answer matches ``actual``, if any.

    A mistake that gives the right answer on these inputs (``expected``) cannot
    be told apart from a correct solution, so it is never named.
    """
    for mistake in mistakes:
        try:
            with _errstate(all="ignore"):
                wrong = mistake.compute(*_deepcopy(args))
                if view is not None:
                    wrong = view(wrong)
        except Exception:  # a mistake that cannot apply to these inputs just does not match
            continue
        if expected is not None and difference(wrong, expected, "x", **tolerances) is None:
            continue
        if difference(actual, wrong, "x", **tolerances) is None:
            return mistake
    return None


def recognise_crashing_mistake(error_name: str, message: str, mistakes: Sequence[Mistake], args: tuple, *,
                               cut: int | None = None) -> Mistake | None:
    """The first mistake that crashes the same way on ``args``: it raises an exception whose class is named
    ``error_name`` and whose message is ``message`` (compared on its first ``cut`` characters, all when None).

    E.g. ``x @ W.T`` with a non-square ``W`` raises the same shape error as the
    mistaken function would, so the failure can name the mistake.  The class is
    compared by name because the grader knows only the name that crossed from
    the kernel (with the message cut to ``grading.protocol.MESSAGE_CUT``).
    """
    for mistake in mistakes:
        try:
            with _errstate(all="ignore"):
                mistake.compute(*_deepcopy(args))
        except Exception as other:
            if type(other).__name__ == error_name and str(other)[:cut] == message:
                return mistake
    return None


def recognise_mutating_mistake(mutated: Sequence[Any], mistakes: Sequence[Mistake],
                               args: tuple) -> Mistake | None:
    """The first mistake that, run on fresh copies of ``args``, changes them exactly as the
    learner's call changed ``mutated`` (e.g. accumulating with ``+=`` into an input dict)."""
    for mistake in mistakes:
        copies = _deepcopy(args)
        try:
            with _errstate(all="ignore"):
                mistake.compute(*copies)
        except Exception:
            continue
        changed_alike = all(difference(new, mine, "x", exact=True) is None
                            for new, mine in zip(copies, mutated))
        changed_at_all = any(difference(new, old, "x", exact=True) is not None
                             for new, old in zip(copies, args))
        if changed_alike and changed_at_all:
            return mistake
    return None


def shared_arrays(result: Any, args: Sequence[Any]) -> bool:
    """Whether an array inside ``result`` shares memory with an array inside ``args``."""
    inputs = arrays_in(list(args))
    return any(first_shared(a, inputs) is not None for a in arrays_in(result))


def recognise_aliasing_mistake(mistakes: Sequence[Mistake], args: tuple, *, expected: Any,
                               **tolerances: Any) -> Mistake | None:
    """The first mistake that gives the right answer on ``args`` but hands back memory of an input
    (e.g. ``np.asarray(x, np.float32)``, which returns ``x`` itself when it already is float32):
    the mistake to name when a learner's right answer shares memory with an input."""
    for mistake in mistakes:
        copies = _deepcopy(args)
        try:
            with _errstate(all="ignore"):
                wrong = mistake.compute(*copies)
        except Exception:
            continue
        if difference(wrong, expected, "x", **tolerances) is None and shared_arrays(wrong, copies):
            return mistake
    return None


def check(condition: Any, message: str) -> None:
    """Raise CheckFailure(message) unless ``condition`` is true (a named replacement for assert)."""
    if not condition:
        raise CheckFailure(message)


def check_shape(value: Any, shape: tuple, name: str, hint: str = "") -> None:
    if not isinstance(value, _ndarray):
        raise CheckFailure(f"{name} should be a NumPy array of shape {shape}, but it is {describe(value)}")
    if value.shape != tuple(shape):
        raise CheckFailure(f"{name} has shape {value.shape}, expected {tuple(shape)}" + (f": {hint}" if hint else ""))


def check_dtype(value: Any, dtype: Any, name: str) -> None:
    if not isinstance(value, _ndarray):
        raise CheckFailure(f"{name} should be a NumPy array, but it is {describe(value)}")
    if value.dtype != np.dtype(dtype):
        raise CheckFailure(f"{name} has dtype {value.dtype}, expected {np.dtype(dtype)}")


WORKERS_APART_HINT = ("every worker must hold its own arrays: one array object in every worker's slot "
                      "(e.g. [mean] * N) means that a change made by one worker changes them all. Give each "
                      "worker its own copy (the array it received, or mean.copy()).")


def check_workers_apart(per_worker: Any, name: str) -> None:
    """Raise CheckFailure if arrays of different workers in ``per_worker`` (a list by rank) share memory."""
    found = arrays_shared_between_workers(per_worker, name)
    if found:
        raise CheckFailure(workers_apart_message(found[0]))


def check_sends_on_given_cluster(function: Callable[..., Any], args: Sequence[Any], traffic: dict, shown: str,
                                 received: str) -> None:
    """Call ``function(*args, cluster)`` with a new ``Cluster(N)`` (N from ``traffic``) and check that the
    messages went over that cluster: its ledger's summary is ``traffic`` and every message sent was received.

    The grader passes its own cluster and reads the ledger, so a function that makes a cluster of its own
    whatever it is given sends nothing the grader can see.  ``shown``: the call as the message writes it
    (``"ring_all_reduce_mean(arrays, cluster)"``); ``received``: what each worker's result is made of.
    """
    from .cluster import Cluster  # here, not at the top: the cluster's API is shared.cluster's to show
    given = Cluster(len(traffic["bytes_sent"]))
    call(function, *args, given)
    check(given.ledger.summary() == traffic, f"{shown} should send its messages on `cluster` (the grader passes "
          f"one in and reads its ledger); its ledger shows {given.ledger.summary()}")
    check(given.unreceived() == 0, f"{given.unreceived()} message(s) were sent and never received: {received}")


def workers_apart_message(shared: str) -> str:
    """What to tell a learner whose workers share an array (``shared``: a line of
    :func:`shared.cluster.arrays_shared_between_workers`)."""
    return f"{shared}: {WORKERS_APART_HINT}"


# --------------------------------------------------------------------------
# Calling the learner's function safely
# --------------------------------------------------------------------------

def snapshot(args: Sequence[Any]) -> list[Any]:
    """Deep copies of the arguments, to detect mutation afterwards."""
    return [_deepcopy(a) for a in args]


def check_not_mutated(before: Sequence[Any], after: Sequence[Any], names: Sequence[str],
                      function: str) -> None:
    """Raise CheckFailure if any argument changed during the call."""
    for name, old, new in zip(names, before, after):
        if difference(new, old, name, exact=True) is not None:
            raise CheckFailure(mutation_message(function, name, old))


def mutation_message(function: str, name: str, value: Any) -> str:
    """What to tell a learner whose ``function`` changed its input ``name`` (``value`` as it was given),
    with the way to avoid it for that kind of value."""
    if isinstance(value, _MAPPINGS):
        how = (f"build a new dict ({{key: ... for key in {name}}}) instead of assigning into the caller's "
               f"({name}[key] = ...), and new arrays instead of += on its arrays")
    elif isinstance(value, (list, tuple)):
        how = "build a new list instead of appending to, or assigning into, the caller's"
    else:
        how = "work on a copy (x = x + y instead of x += y, np.where(z < 0, 0, z) instead of z[z < 0] = 0)"
    return (f"{function} changed its input `{name}` in place. Functions in this course must not mutate "
            f"their inputs: {how}.")


def describe_args(names: Sequence[str], args: Sequence[Any]) -> str:
    return ", ".join(f"{n}={_short(a)}" for n, a in zip(names, args))


def _short(value: Any) -> str:
    if isinstance(value, _ndarray):
        return f"<{value.dtype} array {value.shape}>"
    if isinstance(value, _MAPPINGS):
        return "{" + ", ".join(f"{k!r}: {_short(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (tuple, list)) and len(value) <= 6:
        inner = ", ".join(_short(v) for v in value)
        return f"({inner})" if isinstance(value, tuple) else f"[{inner}]"
    return repr(value)


def check_call(function: Callable[..., Any], args: Mapping[str, Any], expected: Any, *,
               mistakes: Sequence[Mistake] = (), output: str | None = None, fresh: bool = False,
               again: bool = True, **tolerances: Any) -> Any:
    """Call the learner's function on ``args`` (name -> value) and check its answer.

    Checks, in this order: the call does not crash (``NotImplementedError``
    passes through), no argument is modified in place, the result equals
    ``expected`` (a wrong result that matches one of ``mistakes`` is named), and
    no two places of the result are one array where ``expected``'s are two.
    With ``fresh=True``, no array of the result may share memory with an argument.  Unless ``again=False``,
    a second call on copies of the arguments may hand out no array, dict or list of the first result
    (a buffer or dict filled again at every call), as the grader checks in every lesson.
    Returns the learner's result.
    """
    names, values = list(args), list(args.values())
    label = _label(function)
    given = snapshot(values)
    try:
        result = call_learner(function, given, names)
    except CheckFailure as failure:
        crash = failure.__cause__
        recognised = None if crash is None else recognise_crashing_mistake(
            type(crash).__name__, str(crash), mistakes, tuple(snapshot(values)))
        if recognised is None:
            raise
        raise CheckFailure(with_mistake(str(failure), recognised)) from failure.__cause__
    if type(expected) is Deferred:  # e.g. the reference's answer, computed only now (see Deferred)
        expected = expected.compute()
    try:
        check_not_mutated(values, given, names, label)
    except CheckFailure as failure:
        recognised = recognise_mutating_mistake(given, mistakes, tuple(snapshot(values)))
        if recognised is None:
            raise
        raise CheckFailure(with_mistake(str(failure), recognised)) from None
    check_equal(result, expected, output or f"{label}({', '.join(names)})", mistakes=mistakes,
                mistake_args=tuple(snapshot(values)), **tolerances)
    problem = parts_shared_problem(arrays_shared_within(result), expected)
    if problem:
        raise CheckFailure(problem)
    if fresh:
        check_fresh(result, given, names, label)
    if again:
        second = call_learner(function, snapshot(values), names)
        reused = parts_reused(second, parts_held(result, "the first call's result"), "the second call's result")
        if reused:
            raise CheckFailure(f"{label}: {reuse_message(reused[0])}")
    return result


def parts_shared_problem(shared: Sequence[str], expected: Any) -> str | None:
    """Why two places of a result hold one array in memory where ``expected`` keeps them apart (``shared``:
    :func:`shared.cluster.arrays_shared_within` of the result), or None."""
    allowed = set(arrays_shared_within(expected))
    found = [line for line in shared if line not in allowed]
    if not found:
        return None
    return (f"{found[0]}: two parts of the result are one array in memory, so changing one changes the "
            f"other; give each its own array (its own np.zeros_like, or a .copy())")


def arrays_in(value: Any) -> list:
    """Every ndarray in a nest of dicts, lists and tuples (:func:`shared.cluster.arrays_held`)."""
    return [array for _, array in arrays_held(value)]


def check_fresh(result: Any, args: Sequence[Any], names: Sequence[str], label: str) -> None:
    """No array of ``result`` shares memory with an argument (the result must be new arrays)."""
    for name, arg in zip(names, args):
        for given in arrays_in(arg):
            if first_shared(given, arrays_in(result)) is not None:
                raise CheckFailure(alias_message(f"the result of {label} shares memory with its input `{name}`"))


def alias_message(shared: str) -> str:
    """What to tell a learner whose result shares memory with an input (``shared`` says which array with which:
    "the result['W1'] shares memory with `params`")."""
    return (f"{shared}: return new arrays (e.g. x + 0 or x.copy()), so that changing the result can never "
            f"change the caller's data")


def reuse_message(reused: str) -> str:
    """What to tell a learner whose result holds what an earlier call returned (``reused`` says which part:
    "the result['Z1'] shares memory with the result of case 1['Z1']")."""
    return (f"{reused}: every call must return new arrays and dicts; a buffer or dict kept between calls and "
            f"filled again is changed under the caller who holds the earlier result")


class Deferred:
    """An expected value computed only after the learner's function has returned.

    ``check_call(function, args, Deferred(compute))`` calls ``compute()`` once the
    call is over, so that while the learner's code runs, the expected answer
    exists nowhere it could be read from (not even in a caller's frame).
    """

    __slots__ = ("compute",)

    def __init__(self, compute: Callable[[], Any]):
        self.compute = compute


def _label(function: Any) -> str:
    """The function's name for messages (a string whatever the object says its name is)."""
    name = getattr(function, "__name__", None)
    return name if type(name) is str else "your function"


def call(function: Callable[..., Any], *args: Any, returns: Sequence[str] | None = None,
         **kwargs: Any) -> Any:
    """Call the learner's function in a visible test, with readable failures.

    A crash becomes a message that shows the inputs; with ``returns`` (the names
    of the values the function must return, e.g. ``("X", "Y")``) a result that
    is not a tuple of that many values is reported before anyone unpacks it.
    """
    names = argument_names(function, len(args))
    result = call_learner(function, list(args), names, kwargs)
    if returns is not None:
        label = _label(function)
        expected = f"({', '.join(returns)})"
        if not isinstance(result, (tuple, list)):
            raise CheckFailure(f"{label} should return {len(returns)} values {expected}, "
                               f"but it returned {describe(result)}")
        if len(result) != len(returns):
            raise CheckFailure(f"{label} should return {len(returns)} values {expected}, "
                               f"but it returned {len(result)}")
    return result


def argument_names(function: Any, count: int) -> list[str]:
    """The names of the first ``count`` parameters of ``function`` (``arg0``... if it has none)."""
    try:
        names = [p.name for p in _inspect.signature(function).parameters.values()
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        names = []
    return (names + [f"arg{i}" for i in range(len(names), count)])[:count]


def call_learner(function: Callable[..., Any], args: Sequence[Any], names: Sequence[str],
                 kwargs: Mapping[str, Any] | None = None) -> Any:
    """Call the learner's function; turn a crash into a message that shows the inputs.

    ``NotImplementedError`` passes through unchanged: it means "not done yet",
    which is what an untouched stub should report.
    """
    kwargs = dict(kwargs or {})
    label = _label(function)
    if not callable(function):
        raise CheckFailure(f"{label} should be a function, but it is {describe(function)}")
    shown = describe_args([*names, *kwargs], [*args, *kwargs.values()])
    try:
        return function(*args, **kwargs)
    except NotImplementedError:
        raise
    except CheckFailure:
        raise
    except RecursionError as error:
        raise CheckFailure(f"{label} recursed without end when called with {shown}") from error
    except Exception as error:  # any crash in learner code becomes a readable failure
        raise CheckFailure(f"{label} raised {type(error).__name__}: {error}\n"
                           f"  when called with {shown}") from error


def expect_error(function: Callable[..., Any], args: Sequence[Any], names: Sequence[str],
                 error: type[BaseException], about: str) -> None:
    """The learner's function must reject bad input with ``error`` (e.g. ValueError)."""
    label = _label(function)
    try:
        function(*snapshot(args))
    except NotImplementedError:
        raise
    except error:
        return
    except Exception as other:
        raise CheckFailure(f"{label} should raise {error.__name__} when {about}, but it raised "
                           f"{type(other).__name__}: {other}") from other
    raise CheckFailure(f"{label} should raise {error.__name__} when {about} "
                       f"(called with {describe_args(names, args)}), but it returned normally")


def check_raises(function: Callable[..., Any], args: Mapping[str, Any], error: type[BaseException],
                 about: str) -> None:
    """``expect_error`` with the arguments by name: ``check_raises(f, {"k": 0}, ValueError, "k is 0")``."""
    expect_error(function, list(args.values()), list(args), error, about)


def check_memory(function: Callable[..., Any], args: Mapping[str, Any], allowed_bytes: int, rule: str, *,
                 kind: str = "peak") -> Any:
    """The call's memory (tracemalloc, see ``shared.memory``) must stay within ``allowed_bytes``.

    ``kind="peak"`` bounds the most the call allocates at once; ``kind="kept"`` bounds what is
    still allocated once it has returned: what its result keeps alive (a view keeps its whole
    base array).  ``rule`` says in words what the bound is; the message gives measured and
    allowed bytes.  Returns the call's result.
    """
    from .memory import measure_peak_memory
    names, values = list(args), snapshot(list(args.values()))
    label = _label(function)
    measured = measure_peak_memory(lambda: call_learner(function, values, names))
    used = measured.retained_bytes if kind == "kept" else measured.peak_bytes
    if used > allowed_bytes:
        raise CheckFailure(memory_message(label, used, allowed_bytes, rule, kind=kind))
    return measured.result


def memory_message(label: str, measured: int, allowed: int, rule: str, *, kind: str = "peak",
                   right_numbers: bool = False) -> str:
    """What to tell a learner whose function ``label`` used ``measured`` bytes where the lesson allows ``allowed``
    (``rule`` says the bound in words): at its peak (``kind="peak"``), or kept alive by its result once the call
    has returned (``kind="kept"``).  ``right_numbers``: the answer is known to be right (the grader's case)."""
    from .memory import format_bytes
    if kind == "kept":
        whose = f"{label} gives the right numbers but its" if right_numbers else f"{label}'s"
        what = f"{whose} result keeps {format_bytes(measured)} alive after the call"
    else:
        who = f"{label} gives the right numbers but" if right_numbers else label
        what = f"{who} allocated {format_bytes(measured)} at its peak"
    return f"{what}, and this lesson allows {format_bytes(allowed)} ({rule})"


# --------------------------------------------------------------------------
# The rules for graded code (shared.policy), as the visible tests apply them
# --------------------------------------------------------------------------

def _defining_source(function: Any) -> tuple[str, str] | None:
    """(source, where) of the code that defines ``function``: the whole notebook cell it was defined in
    (IPython keeps each cell's text in linecache under a name that is no file), else its own source."""
    import linecache
    import os
    code = getattr(function, "__code__", None)
    if code is None:
        return None
    name = getattr(function, "__name__", "the function")
    filename = code.co_filename
    if filename in linecache.cache and not os.path.exists(filename):
        lines = linecache.getlines(filename)
        if lines:
            return "".join(lines), f"the cell that defines {name}"
    import ast
    import textwrap

    from .policy import UNREADABLE
    try:
        source = textwrap.dedent(_inspect.getsource(function))
        ast.parse(source)
    except (OSError, TypeError, *UNREADABLE):  # no source (made by exec), a lambda inside an expression, too deep
        return None
    return source, name


def _names_from_modules(namespace: Mapping[str, Any], own: str | None) -> dict[str, str]:
    """{name: dotted path} for the notebook's names bound to modules or to what other modules define
    (what the learner defined, beside the function, is theirs: module ``own``)."""
    found = {}
    for name, value in namespace.items():
        if _inspect.ismodule(value):
            found[name] = value.__name__
        elif callable(value) and isinstance(getattr(value, "__module__", None), str):
            qualname = getattr(value, "__qualname__", None)
            if value.__module__ not in ("__main__", "builtins", own) and isinstance(qualname, str) \
                    and "<" not in qualname:
                found[name] = f"{value.__module__}.{qualname}"
    return found


def _notebook_functions_used(function: Any, given: frozenset[str] = frozenset()) -> tuple[list[Any], list[str]]:
    """The functions of the notebook that ``function`` calls (as globals), and theirs, in order: graded code
    is a lesson's function and what it needs from the notebook; and the names among ``given`` that they call,
    which are not followed (the grader binds those names to the helper's versions, as ``needed_names`` of
    ``grading/rules.py`` skips them)."""
    found, skipped, frontier = [], [], [function]
    while frontier:
        current = frontier.pop(0)
        if any(current is seen for seen in found):
            continue
        found.append(current)
        code, namespace = getattr(current, "__code__", None), getattr(current, "__globals__", {})
        names: set[str] = set()
        codes = [code] if code is not None else []
        while codes:
            one = codes.pop()
            names.update(one.co_names)
            codes.extend(c for c in one.co_consts if hasattr(c, "co_names"))
        for name in sorted(names):
            value = namespace.get(name)
            if isinstance(value, _FunctionType) and value.__module__ == getattr(function, "__module__", None):
                if name in given:
                    if name not in skipped:
                        skipped.append(name)
                else:
                    frontier.append(value)
    return found, skipped


def _graded_with(function: Any) -> frozenset[str]:
    """The earlier lessons' functions that the grader runs ``function``'s lesson with (the helper's versions): by
    the function's name, or by the lesson's name the notebook binds it to (``mlp_forward = my_forward``)."""
    names = {getattr(function, "__name__", None)}
    names |= {name for name, value in getattr(function, "__globals__", {}).items()
              if value is function and name in _GRADED_WITH}
    return frozenset(given for name in names if name in _GRADED_WITH for given in _GRADED_WITH[name])


def _rules_broken(function: Any, given: frozenset[str]) -> tuple[tuple[list[Any], str] | None, list[str]]:
    """((the breaks, where) of the first cell of ``function``'s graded code that breaks the rules, or None; the
    names of ``given`` that its graded code calls)."""
    from . import policy
    used, skipped = _notebook_functions_used(function, given)
    for one in used:
        found = _defining_source(one)
        if found is None:
            continue
        source, where = found
        course = _names_from_modules(getattr(one, "__globals__", {}), getattr(one, "__module__", None))
        breaks = policy.check_source(source, course=course)
        if breaks and not _only_scratch_lines(source, course, used):
            return (breaks, where), skipped
    namespace = getattr(function, "__globals__", {})
    course = _names_from_modules(namespace, getattr(function, "__module__", None))
    for name, source in _cells_binding_values(used, namespace):
        breaks = policy.check_source(source, course=course)
        if breaks and not _only_scratch_lines(source, course, used):
            return (breaks, f"the cell that defines {name}"), skipped
    return None, skipped


def _globals_read(used: list[Any]) -> set[str]:
    """The names the functions ``used`` (and the code nested in them) read as globals."""
    import dis
    names: set[str] = set()
    codes = [one.__code__ for one in used if hasattr(one, "__code__")]
    while codes:
        code = codes.pop()
        names.update(op.argval for op in dis.get_instructions(code) if op.opname == "LOAD_GLOBAL")
        codes.extend(c for c in code.co_consts if hasattr(c, "co_names"))
    return names


def _cells_binding_values(used: list[Any], namespace: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(name, the source of the last cell that bound it) for each value of the notebook (not a function of its own,
    not a module) that the functions ``used`` read as globals (``SCALE = ...`` in a cell of its own): graded code
    too, as the grader reads it (``needed_names`` of grading/rules.py).  Read from IPython's input history; none
    where there is no such history."""
    from . import policy
    history = namespace.get("_ih")
    if not isinstance(history, list):
        return []
    found = []
    for name in sorted(_globals_read(used)):
        if name not in namespace or isinstance(namespace[name], _FunctionType) or _inspect.ismodule(namespace[name]):
            continue
        for source in reversed(history):
            if isinstance(source, str) and name in policy.names_bound(source):
                found.append((name, source))
                break
    return found


def _only_scratch_lines(source: str, course: Mapping[str, str], used: list[Any]) -> bool:
    """Whether the cell ``source`` breaks the rules only in top-level statements that the grader leaves out (a
    ``help(f)`` or ``%timeit`` line beside the function: :func:`shared.policy.scratch_lines`), and those bind
    nothing that the graded functions ``used`` are or read as globals."""
    from . import policy
    trimmed = policy.scratch_lines(source, course=course)
    if trimmed is None:
        return False
    return not trimmed.binds & ({getattr(one, "__name__", None) for one in used} | _globals_read(used))


def check_rules(function: Any, *, graded_with: Sequence[str] | None = None) -> None:
    """The code that defines ``function`` keeps the rules for graded code (:mod:`shared.policy`): the cell
    that defines it, the cell of every function of the notebook it calls, and the cell that last bound each value
    of the notebook they read as a global (``SCALE = ...``, from IPython's input history).

    The judge reads every cell the same way while grading; graded code that breaks them is not run there,
    and its lesson gets no points.  So the learner hears of it here, first.  (A scratch cell of the learner's,
    ``help(x)`` or a plot, is not graded code: it is skipped while grading and costs nothing.)

    A composite lesson is graded with the helper's versions of the earlier lessons' functions it calls
    (``graded_with``; by default its ``LessonSpec.isolate``, from ``shared.lesson_blocks.GRADED_WITH``), so their
    cells cost their own lessons, not this one: they are not held against it here either, as the grader does not
    (``grading/rules.py``, ``needed_names``); a cell of theirs that breaks the rules is printed as a note, so that
    the learner still hears of it.  ``graded_with=()`` checks everything the function calls (a run that uses the
    learner's own earlier functions: ``make train-distributed FROM=notebooks``).
    """
    from . import policy
    given = _graded_with(function) if graded_with is None else frozenset(graded_with)
    broken, skipped = _rules_broken(function, given)
    if broken is not None:
        raise CheckFailure(policy.describe(*broken))
    said: set[str] = set()
    namespace = getattr(function, "__globals__", {})
    owners = {lesson.function: lesson.code for lesson in _LESSONS}
    for name in skipped:
        earlier = namespace.get(name)
        found, _ = _rules_broken(earlier, _graded_with(earlier))
        if found is None or found[1] in said:
            continue
        breaks, where = found
        said.add(where)
        what = "; ".join(f"line {b.line}: {b.construct}" for b in breaks[:3]) + ("; ..." if len(breaks) > 3 else "")
        whose = f"lesson {owners[name]} only (its tests say why)" if name in owners else "its own lesson only"
        print(f"Note: {where} breaks the course's rules for graded code ({what}): that costs {whose}; this lesson "
              f"is graded with the course's own {name}, so this check passes.")
