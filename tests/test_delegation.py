"""No callable of the helper package answers a lesson: a learner who only delegates to one scores 0.

The helper package ``shared`` is what the notebooks import, so everything in it is within a
learner's reach.  Some of its functions compute a lesson's answer on purpose (``@answers``, locked
while that lesson is graded: :mod:`shared.answers`); nothing else in it may.  For every lesson this
test builds, for every callable *reachable* from the package, the submission
``lambda *args, **kwargs: candidate(*args, **kwargs)`` and requires it to score 0 with the real cases
and judge, for run seeds 0 and 1.

Reachable means:

- every function, lambda and class at module level in every module under ``shared/`` (private names
  too), and every callable inside a module-level container (dicts, lists, tuples) or a module-level
  object of the helper's own classes (``MISTAKES``' :class:`~shared.checking.Mistake` objects);
- every method of those classes (functions, static and class methods, and properties' accessors);
- every :class:`~shared.checking.Mistake`'s ``compute`` in ``shared.mistakes.mistakes_of(function)``,
  for every lesson;
- whatever a callable above returns when called with no arguments, if that is callable (a factory
  whose defaults would build a right function), and again what that returns.

Every module under ``shared/`` is searched (the optional torch extra is a package of its own,
``torch_extra/``, which the kernel never has), ``progress``, ``notebook`` and ``plotting`` too: every
call runs in a forked child with ``MCT_GRADING=1`` (progress then writes nothing) and a scratch
progress file, without an IPython shell (``setup_notebook`` registers no hook), and a figure drawn
there dies with the child, so calling their functions has no side effect on this process or on the
course.

Grading some 460 candidates for 40 lessons would take hours, so each lesson is screened first, in
one forked child (restarted past a candidate that ends it): every candidate is called as the grading
harness calls the learner's function (on a copy of each ``Case``'s arguments, the measured ones
last, ``Raises`` cases left out, with a new ``Cluster(n)`` for a lesson on the grader's cluster, the lesson's helpers
locked, NumPy's warnings off, at most CALL_SECONDS a call), and its result, sent through the wire as
the kernel sends it, is compared with the reference's as the judge compares it.  Most candidates fail
the first case at once (a TypeError); one that gives another answer to any case would lose the
points on that case.  Only the others, and any that ran out of time or ended the child, are graded
with :func:`grading.judge.grade_in_process`: as they are, and behind the lesson's refusals of bad
input (the delegate raises each :class:`~grading.spec.Refusal`'s error itself, so that a helper that
computes every valid answer but forgets the refusals is caught too).  Neither may pass.
"""

from __future__ import annotations

import copy
import functools
import importlib
import inspect
import io
import json
import os
import pkgutil
import resource
import signal
import sys
import tempfile
import time
import types
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import shared
from course import built_lessons, tagged_lessons
from grading import harness, wire
from grading.judge import case_seed, grade_in_process, lesson_spec, reference_answer, reference_function
from grading.spec import Case, draw_cases
from shared import answers
from shared.checking import difference
from shared.cluster import Cluster
from shared.lessons import Lesson
from shared.mistakes import mistakes_of

RUN_SEEDS = (0, 1)
CALL_SECONDS = 2.0        # one call of one candidate in the screen; slower ones are graded in full
SCREEN_SECONDS = 240.0    # a lesson's whole screen (it takes a few seconds)
FACTORY_DEPTH = 2         # f(), and f()() when f() is callable
CHILD_MEMORY = 3 * 2**30  # bytes of address space the screen's child may add


# --------------------------------------------------------------------------
# What is reachable
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class Candidate:
    """A callable of the helper package, and how a learner reaches it."""

    where: str      # how it is reached: "shared.mistakes.part5._ring", "...MISTAKES['x'][1].compute", "f()"
    function: Any   # the callable (for a factory's product: the factory)
    calls: int = 0  # how many times ``function`` is called with no arguments to make the candidate

    def resolve(self) -> Any:
        target = self.function
        for _ in range(self.calls):
            target = target()
        return target

    def product(self, calls: int) -> Candidate:
        return Candidate(self.where + "()" * calls, self.function, calls)


def _qualified(value: Any) -> str:
    module = getattr(value, "__module__", None)
    qualname = getattr(value, "__qualname__", None) or getattr(value, "__name__", None) or type(value).__qualname__
    return f"{module}.{qualname}" if isinstance(module, str) else str(qualname)


def _of_the_package(value: Any) -> bool:
    """Whether ``value`` (a function, class or object) was defined in the helper package."""
    if isinstance(value, functools.partial):
        return _of_the_package(value.func)
    module = getattr(value, "__module__", None) if isinstance(value, (type, types.FunctionType, types.MethodType)) \
        else getattr(type(value), "__module__", None)
    return isinstance(module, str) and (module == "shared" or module.startswith("shared."))


def package_modules() -> list[types.ModuleType]:
    """Every module under shared/ (subpackages too)."""
    names = ["shared"] + [info.name for info in pkgutil.walk_packages(shared.__path__, "shared.")]
    return [importlib.import_module(name) for name in names]


def _members_of_class(cls: type) -> list[tuple[str, Any]]:
    """The callables a class defines itself: methods, static and class methods, property accessors."""
    found = []
    for name, attribute in vars(cls).items():
        if isinstance(attribute, staticmethod):
            found.append((name, attribute.__func__))
        elif isinstance(attribute, classmethod):
            found.append((name, getattr(cls, name)))
        elif isinstance(attribute, property):
            found += [(f"{name}.{part}", getattr(attribute, part)) for part in ("fget", "fset", "fdel")
                      if getattr(attribute, part) is not None]
        elif isinstance(attribute, functools.cached_property):
            found.append((name, attribute.func))
        elif callable(attribute):
            found.append((name, attribute))
    return found


def _walk(value: Any, where: str, found: list[Candidate], seen: dict[int, Any]) -> None:
    """Add every callable of the package inside ``value`` (reached as ``where``) to ``found``; ``seen``
    holds what was walked (and keeps it alive, so that no id is reused)."""
    if id(value) in seen or isinstance(value, types.ModuleType):
        return
    seen[id(value)] = value
    if type(value) in (dict, types.MappingProxyType):
        for key, item in value.items():
            _walk(item, f"{where}[{key!r}]", found, seen)
    elif type(value) in (list, tuple, set, frozenset):
        for index, item in enumerate(value):
            _walk(item, f"{where}[{index}]", found, seen)
    elif isinstance(value, type):
        if _of_the_package(value):
            found.append(Candidate(where, value))
            for name, member in _members_of_class(value):
                _walk(member, f"{where}.{name}", found, seen)
    elif callable(value):
        if _of_the_package(value):
            found.append(Candidate(where, value))
    elif _of_the_package(value):  # an object of one of the package's classes: what it holds
        fields = getattr(value, "__dict__", None) or {
            name: getattr(value, name) for name in getattr(type(value), "__slots__", ()) if hasattr(value, name)}
        for name, item in fields.items():
            _walk(item, f"{where}.{name}", found, seen)


@functools.cache
def reachable() -> tuple[Candidate, ...]:
    """Every callable of the helper package (without calling anything), each object once."""
    found: list[Candidate] = []
    seen: dict[int, Any] = {}
    modules = package_modules()
    # Functions and classes first, then what public containers hold, then private ones: each object
    # is named where it is defined (part5._ring_correct, part1.MISTAKES[...], not via _CATALOGUE).
    for first in (lambda name, value: callable(value),
                  lambda name, value: not name.startswith("_"),
                  lambda name, value: True):
        for module in modules:
            for name, value in vars(module).items():
                if not (name.startswith("__") and name.endswith("__")) and first(name, value):
                    _walk(value, f"{module.__name__}.{name}", found, seen)
    for lesson in built_lessons():
        for index, mistake in enumerate(mistakes_of(lesson.function)):
            _walk(mistake.compute, f"mistakes_of({lesson.function!r})[{index}].compute ({mistake.name!r})",
                  found, seen)
    return tuple(found)


def _products(call) -> list[tuple[int, int]]:
    """``(index in reachable(), calls)`` of every callable that a reachable one returns when called with
    no arguments (``calls`` times, up to FACTORY_DEPTH); ``call(thunk)`` calls safely: ``(ok, value)``."""
    products = []
    for index, candidate in enumerate(reachable()):
        for calls in range(1, FACTORY_DEPTH + 1):
            ok, made = call(lambda: candidate.product(calls).resolve())
            if not (ok and callable(made)):
                break
            products.append((index, calls))
    return products


# --------------------------------------------------------------------------
# The screen: one forked child per lesson
# --------------------------------------------------------------------------

class _OutOfTime(BaseException):
    pass


def _alarm(signum, frame):
    raise _OutOfTime()


def _screen_cases(lesson: Lesson) -> dict[int, list[Case]]:
    """For each run seed, the lesson's Cases (its Raises cases left out), the measured ones (large on
    purpose) last: a candidate that gets any case wrong loses the points, whichever comes first."""
    spec = lesson_spec(lesson.code)
    return {seed: sorted((case for case in draw_cases(spec, case_seed(seed, lesson.code)) if isinstance(case, Case)),
                         key=lambda case: case.measure)
            for seed in RUN_SEEDS}


def _same_answer(function: Any, lesson: Lesson, case: Case, expected: Any) -> bool:
    """Whether ``function``, called as the harness calls the learner's function (a copy of the case's
    arguments, the grader's cluster, the lesson locked), gives an answer the judge takes as right."""
    spec = lesson_spec(lesson.code)
    workers = spec.on_cluster.count(case.args) if spec.on_cluster else None
    extra = {} if workers is None else {spec.on_cluster.arg: Cluster(workers)}
    answers.unlock()  # whatever an earlier candidate did to the lock is undone
    answers.lock(lesson.code)
    signal.setitimer(signal.ITIMER_REAL, CALL_SECONDS)
    try:
        with np.errstate(all="ignore"):
            result = function(*copy.deepcopy(list(case.args.values())), **extra)
    except _OutOfTime:
        raise
    except BaseException:
        return False
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    try:  # as the judge reads it from the kernel
        result = wire.from_plain(json.loads(json.dumps(wire.to_plain(result, "the result"))))
        return difference(result, expected, "x", **spec.tolerances(case)) is None
    except Exception:  # a result that the kernel cannot send or the judge cannot compare: no points
        return False


def _limited(thunk) -> tuple[bool, Any]:
    """``(True, thunk())``, or ``(False, None)`` when it raises or runs past CALL_SECONDS."""
    signal.setitimer(signal.ITIMER_REAL, CALL_SECONDS)
    try:
        return True, thunk()
    except BaseException:
        return False, None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _set_up_child(folder: str) -> None:
    """In a forked child that calls the package: its own process group, no output, ``MCT_GRADING=1``
    (progress writes nothing, and a scratch file in ``folder`` to be sure), at most CHILD_MEMORY more
    memory, and the alarm that stops a call past CALL_SECONDS."""
    os.setpgid(0, 0)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    sys.stdout = sys.stderr = io.StringIO()
    os.environ["MCT_GRADING"] = "1"
    os.environ["MCT_PROGRESS_FILE"] = os.path.join(folder, "progress.json")
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    try:
        with open("/proc/self/statm") as statm:
            wanted = int(statm.read().split()[0]) * resource.getpagesize() + CHILD_MEMORY
        if hard == resource.RLIM_INFINITY or wanted < hard:
            resource.setrlimit(resource.RLIMIT_AS, (wanted, hard))
    except (OSError, ValueError):
        pass
    signal.signal(signal.SIGALRM, _alarm)


@functools.cache
def factory_products() -> tuple[tuple[int, int], ...]:
    """:func:`_products`, found once for every lesson, in a forked child set up as the screen's are (a
    factory is called with the lock lifted, as a learner's module-level code is)."""
    reachable()  # found in this process: the child inherits the list
    with tempfile.TemporaryDirectory(prefix="mct-products-") as folder:
        out_path = os.path.join(folder, "products.json")
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: whatever happens, it ends here
            try:
                _set_up_child(folder)
                answers.unlock()
                with open(out_path, "w") as out:
                    json.dump(_products(_limited), out)
                os._exit(0)
            except BaseException:
                os._exit(70)
        how, status = harness._wait(pid, time.monotonic() + SCREEN_SECONDS)
        if (how, status) != ("exited", 0):
            pytest.fail(f"the child that calls every factory {how} ({status})")
        with open(out_path) as handle:
            return tuple((index, calls) for index, calls in json.load(handle))


def candidates_of_the_package() -> list[Candidate]:
    """Every candidate: the reachable callables, then the factories' products."""
    return list(reachable()) + [reachable()[index].product(calls) for index, calls in factory_products()]


def _screen_child(lesson: Lesson, screens: dict[int, list[Case]], start: int, out_path: str, at_path: str) -> None:
    """In the forked child: write to ``out_path`` a line ``[index, [seeds]]`` for each candidate from
    ``start`` on that gives the reference's answer to every Case of those run seeds (or runs out of time
    on one); each candidate's index goes to ``at_path`` before it is called (a child that dies names its
    candidate)."""
    _set_up_child(os.path.dirname(out_path))
    at = os.open(at_path, os.O_WRONLY)
    expected: dict[tuple[int, int], Any] = {}

    def reference(seed: int, index: int) -> Any:
        """The reference's answer to a case, computed once, unlocked, as the judge computes it."""
        if (seed, index) not in expected:
            answers.unlock()
            case = screens[seed][index]
            expected[seed, index] = reference_answer(lesson, lesson_spec(lesson.code), case)[0]
        return expected[seed, index]

    candidates = candidates_of_the_package()
    with open(out_path, "a") as out:
        for index in range(start, len(candidates)):
            os.pwrite(at, f"{index:>12d}".encode(), 0)
            survives = []
            for seed, cases in screens.items():
                try:
                    answers.unlock()
                    ok, function = _limited(candidates[index].resolve)
                    if ok and all(_same_answer(function, lesson, case, reference(seed, i))
                                  for i, case in enumerate(cases)):
                        survives.append(seed)
                except _OutOfTime:  # too slow to screen: graded in full
                    survives.append(seed)
            if survives:
                out.write(json.dumps([index, survives]) + "\n")
                out.flush()


def screen(lesson: Lesson) -> tuple[list[Candidate], dict[int, list[int]], list[str]]:
    """Every candidate (the factories' products after the reachable ones), for each run seed the
    indices of those that the screen cannot tell from the reference, and notes on children that died."""
    screens = _screen_cases(lesson)
    candidates = candidates_of_the_package()  # found once, in this process: the children inherit them
    survivors: dict[int, set[int]] = {seed: set() for seed in RUN_SEEDS}
    notes: list[str] = []
    start = 0
    with tempfile.TemporaryDirectory(prefix="mct-screen-") as folder:
        out_path, at_path = os.path.join(folder, "survivors.jsonl"), os.path.join(folder, "at")
        open(out_path, "w").close()
        while True:
            with open(at_path, "w") as handle:
                handle.write(f"{-1:>12d}")
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:  # the child: whatever happens, it ends here
                try:
                    _screen_child(lesson, screens, start, out_path, at_path)
                    os._exit(0)
                except BaseException:
                    os._exit(70)
            how, status = harness._wait(pid, time.monotonic() + SCREEN_SECONDS)  # the grading child's own wait
            with open(at_path) as handle:
                at = int(handle.read())
            if (how, status) == ("exited", 0):
                break
            how = {"timeout": "ran out of time", "killed": f"was killed by signal {status}"}.get(
                how, f"ended with status {status}")
            if at < 0:
                pytest.fail(f"lesson {lesson.code}: the screen's child {how} before it screened a candidate")
            notes.append(f"the screen's child {how} at candidate {at}: graded in full")
            for seed in RUN_SEEDS:
                survivors[seed].add(at)
            start = at + 1
        with open(out_path) as handle:
            lines = [json.loads(line) for line in handle if line.strip()]
    for index, seeds in lines:
        for seed in seeds:
            survivors[seed].add(index)
    return candidates, {seed: sorted(found) for seed, found in survivors.items()}, notes


def delegating_to(candidate: Candidate, lesson: Lesson, *, refusing: bool = False):
    """The learner's function that only calls ``candidate``: ``lambda *args, **kwargs: candidate(*args,
    **kwargs)``.  With ``refusing``, it first raises the lesson's errors for bad input itself (each
    :class:`~grading.spec.Refusal` of its declaration), so that a candidate that computes the right
    answer of every valid input but forgets the lesson's refusals is caught too.  A factory's product
    is made in the grading child, when first called, with the lock lifted as it is for the learner's
    module-level code."""
    made: list[Any] = [candidate.function] if candidate.calls == 0 else []
    refusals = lesson_spec(lesson.code).refuses if refusing else ()
    signature = inspect.signature(reference_function(lesson))

    def target():
        if not made:
            answers.unlock()
            try:
                made.append(candidate.resolve())
            finally:
                answers.lock(lesson.code)
        return made[0]

    def delegate(*args, **kwargs):
        if refusals:
            named = dict(signature.bind(*args, **kwargs).arguments)
            for refusal in refusals:
                if refusal.covers(named):
                    raise refusal.error(refusal.rule)
        return target()(*args, **kwargs)
    return delegate


# --------------------------------------------------------------------------
# The tests
# --------------------------------------------------------------------------

def describe(candidate: Candidate) -> str:
    """``module.qualname`` of a candidate (``()`` for each call of a factory), and where it was found."""
    name = _qualified(candidate.function) + "()" * candidate.calls
    return name if name == candidate.where else f"{name} (reached as {candidate.where})"


def test_the_search_reaches_the_package():
    """The search finds what it must: private helpers, classes and their methods, every mistake."""
    found = {candidate.where for candidate in reachable()}
    assert {"shared.mlp.forward", "shared.mlp._sum_over_batch", "shared.cluster.Cluster",
            "shared.cluster.Cluster.send", "shared.cluster.TrafficLedger.bytes_sent.fget",
            "shared.training._forward_backward", "shared.answers.HelperNotAllowed",
            "shared.mistakes.mistakes_of"} <= found
    functions = {id(candidate.function) for candidate in reachable()}
    for lesson in built_lessons():
        for mistake in mistakes_of(lesson.function):
            assert id(mistake.compute) in functions, f"lesson {lesson.code}: {mistake.name}"


@pytest.mark.parametrize("lesson", tagged_lessons())
def test_delegating_to_the_helper_package_scores_zero(lesson):
    candidates, survivors, notes = screen(lesson)
    passed = []
    for seed in RUN_SEEDS:
        for index in survivors[seed]:
            candidate = candidates[index]
            # Behind the refusals first: the plain delegate answers every valid case the same way, so it
            # can pass only if this one does.
            if not grade_in_process(lesson.code, {lesson.function: delegating_to(candidate, lesson, refusing=True)},
                                    seed).passed:
                continue
            plain = grade_in_process(lesson.code, {lesson.function: delegating_to(candidate, lesson)}, seed).passed
            passed.append(f"run seed {seed}: {describe(candidate)}"
                          + ("" if plain else " (behind the lesson's refusals of bad input)"))
    assert not passed, (f"lesson {lesson.code} {lesson.function}: a submission that only delegates to one of these "
                        f"callables of the helper package passes its hidden cases:\n  " + "\n  ".join(passed)
                        + "".join(f"\n  ({note})" for note in notes))
