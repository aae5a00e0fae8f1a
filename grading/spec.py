"""How a lesson's hidden tests are declared: data, not code in the notebook.

Each part has one declarations module (``autograde/parts/NN_slug/cases.py``)
with one :class:`LessonSpec` per lesson.  Everything that needs a lesson's
cases reads them from there: the build (which writes the test cell's hidden
region), the judge (which regenerates the cases itself at grading time), the
mistake tests, the mutation tool and the adversarial suite.

A spec's ``cases(rng)`` draws the lesson's cases from a NumPy generator that
the grader seeds; it must use nothing but ``rng``, NumPy and the helper
package, so that the same seed always gives the same cases.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from shared.checking import DEFAULT_ATOL


@dataclass(frozen=True)
class Case:
    """Call the function with ``args`` (argument name -> value); the answer must equal the reference's.

    ``about`` says what the case is for ("a square W"), shown when it fails;
    ``rtol``, ``atol``, ``exact`` override the lesson's tolerances for this case;
    ``measure``: the call's memory is measured (tracemalloc, in the grading kernel: its
    peak, and what its result keeps) and must stay within the lesson's :class:`MemoryBound`.
    ``own_cluster``: for a lesson on a cluster (:class:`OnCluster`), this case passes none: the
    function must make its own, as when the notebook calls it (its traffic is not measured).
    """

    args: dict[str, Any]
    about: str = ""
    rtol: float | None = None
    atol: float | None = None
    exact: bool | None = None
    measure: bool = False
    own_cluster: bool = False


@dataclass(frozen=True)
class MemoryBound:
    """The technique, graded: the most bytes a measured call may allocate at its peak, or keep.

    ``allowed(args)`` gives the bound in bytes for a case's arguments (the lesson's own
    prediction times a stated margin); ``rule`` says in words what the bound is, and
    ``shortcut`` names the way to the right numbers that breaks it.  ``kind`` says what is
    bounded: ``"peak"``, the most memory the call allocates at once (a lesson that saves
    working memory), or ``"kept"``, the memory still allocated when the call has returned,
    i.e. what its result keeps alive (a lesson about what each worker holds, such as a
    shard of the optimizer's state: a view of a full copy keeps the full copy).
    """

    allowed: Callable[[dict[str, Any]], int]
    rule: str
    shortcut: str
    kind: str = "peak"

    def __post_init__(self) -> None:
        if self.kind not in ("peak", "kept"):
            raise ValueError(f"MemoryBound.kind is 'peak' or 'kept', got {self.kind!r}")


@dataclass(frozen=True)
class OnCluster:
    """The lesson runs on a simulated cluster that the grader makes: its traffic is measured, not reported.

    The harness creates ``Cluster(workers(args))`` and passes it as the argument named ``arg``;
    after the call it reads the cluster's ledger (bytes and messages per worker, rounds) and how
    many delivered messages nobody received.  The judge runs the reference the same way and
    compares both exactly: a collective that computes without sending, sends on a cluster of its
    own or computes from every worker's input while its messages go unreceived scores 0.
    ``workers(args)`` gives None when the arguments name no valid worker count (a bad-input
    case): the function then gets no cluster.  ``results_received``: the contract says which
    workers keep, as their result, the very array they received (lesson 027: every worker but
    the root); the harness reports, per worker, whether its result holds memory it received, and
    the judge compares that with the reference's, so a worker that computes its own copy from the
    other workers' inputs is caught even where the numbers agree bit for bit.
    """

    workers: Callable[[dict[str, Any]], int | None]
    arg: str = "cluster"
    results_received: bool = False

    def count(self, args: dict[str, Any]) -> int | None:
        """How many workers the case's cluster has (None: no cluster for this case)."""
        try:
            n = self.workers(args)
        except Exception:
            return None
        return int(n) if isinstance(n, (int, np.integer)) and n >= 1 else None


@dataclass(frozen=True)
class Raises:
    """Call the function with ``args``; it must raise ``error`` (the contract's bad input)."""

    args: dict[str, Any]
    error: type[BaseException]
    about: str  # e.g. "a size is 0"


@dataclass(frozen=True)
class Refusal:
    """One rule of the contract's bad input: when ``applies(args)`` the function must raise ``error``.

    ``rule`` says it in words ("segment_size < 1").  Every :class:`Raises` case of the
    lesson must fall under a refusal with its error, and every refusal must have a hidden
    case and a visible example: the contract tests build, for each refusal, a function
    that forgets it, and the lesson's visible tests must catch that function.
    """

    rule: str
    error: type[BaseException]
    applies: Callable[[dict[str, Any]], bool]

    def covers(self, args: dict[str, Any]) -> bool:
        """Whether ``args`` fall under the rule (a predicate that cannot decide says no)."""
        try:
            return bool(self.applies(args))
        except Exception:
            return False


@dataclass(frozen=True)
class Corner:
    """A corner of the contract that every grading run must draw (a special value, an extreme loss scale, a
    size-one input where aliasing could hide): ``holds(case)`` says whether a drawn case is in it.

    A wrong answer that fails only in a corner would pass the runs that happen not to draw it, and a regrade
    could change a grade; so a lesson names its corners, and ``tests/test_corners.py`` requires every one of
    them among the drawn cases of every run seed it tries.
    """

    name: str
    holds: Callable[["Case | Raises"], bool]

    def drawn_in(self, cases: Sequence["Case | Raises"]) -> bool:
        """Whether some case of ``cases`` is in this corner (a predicate that cannot decide says no; its
        overflows, in casts to float16, are what it looks for)."""
        with np.errstate(all="ignore"):
            for case in cases:
                try:
                    if self.holds(case):
                        return True
                except Exception:
                    continue
        return False


def valid(case: "Case | Raises") -> bool:
    """Whether ``case`` is a valid call (a :class:`Case`), not a bad input."""
    return isinstance(case, Case)


def any_entry(value: Any, predicate: Callable[[np.ndarray], np.ndarray]) -> bool:
    """Whether ``predicate`` holds for some entry of some float array in ``value`` (an array, or a dict, list or
    tuple of them, at any depth)."""
    from shared.cluster import arrays_held
    return any(bool(np.any(predicate(array))) for _, array in arrays_held(value)
               if np.issubdtype(array.dtype, np.floating) and array.size)


# --------------------------------------------------------------------------
# Tolerances, named once: a part's cases use them as ``**FLOAT32`` (in a Case or a LessonSpec)
# --------------------------------------------------------------------------

#: float32 answers: the same operations in another order (a sum, a matrix product) change the last bits;
#: float32 keeps about 7 digits, so 1e-5 relative passes them and still fails a wrong number.
FLOAT32 = {"rtol": 1e-5, "atol": 1e-6}
#: float64 answers whose additions may come in another order (a sum split among workers or micro-batches):
#: they differ in the last bits only (float64 keeps about 16 digits).
FLOAT64_REORDERED = {"rtol": 1e-12, "atol": 1e-14}
#: float64 answers of long sums (a 1024-term matrix product) that einsum or np.dot may add in another order:
#: they differ by ~1e-12 relative; a float32 anywhere inside is still off by ~1e-7, far outside.
FLOAT64_LONG_SUMS = {"rtol": 1e-9, "atol": 1e-12}
#: Counted numbers (bytes, skipped steps, a loss scale, a power of two): exactly the reference's.
EXACT = {"rtol": 0.0, "atol": 0.0}

#: (rtol, atol) by the narrowest float dtype among a case's input arrays, for a lesson that sets none.
PRECISION_TOLERANCES = {np.dtype(np.float16): (1e-2, 1e-3),
                        np.dtype(np.float32): (FLOAT32["rtol"], FLOAT32["atol"]),
                        np.dtype(np.float64): (1e-12, DEFAULT_ATOL)}


def precision_tolerances(args: Any) -> tuple[float, float]:
    """The default (rtol, atol) of a case: those of the narrowest float dtype among its input arrays
    (float64 when it has none, e.g. a count of bytes)."""
    from shared.cluster import arrays_held
    floats = {array.dtype for _, array in arrays_held(args) if array.dtype in PRECISION_TOLERANCES}
    narrowest = min(floats, key=lambda dtype: dtype.itemsize, default=np.dtype(np.float64))
    return PRECISION_TOLERANCES[narrowest]


@dataclass(frozen=True)
class LessonSpec:
    """A lesson's hidden tests, declared once.

    code:       the lesson number, ``"003"``.
    cases:      ``rng -> [Case | Raises, ...]``, drawn fresh for every grading run.
    rtol, atol, exact: how close an answer must be to the reference's.  Unset, they follow the
                precision of the case's inputs (:data:`PRECISION_TOLERANCES`): float64 answers
                within 1e-12, so that a float32 shortcut (a sum, a rounded 2/n) never passes
                as rounding noise; float32 within 1e-5; float16 within 1e-2 (a few units in the last place).
    isolate:    earlier lessons' functions that the graded function calls; while
                this lesson is graded they are replaced by the helper package's
                versions, so a bug in an earlier lesson costs that lesson only.
    helpers:    functions that the lesson's own cell defines beside its function, which calls them
                (035's ``reduce_scatter_mean``, its step 1): part of the answer, graded through the
                lesson's function and mutated with it (``tools/mutation.py``); the build writes them
                into ``shared/lesson_blocks.py``, answering this lesson, for later parts to call.
    refuses:    the rules of bad input (:class:`Refusal`), one per class of Raises case.
    fresh_result: the result must share no memory with the inputs.
    workers_apart: the result holds one value per worker (a list indexed by rank, alone or as
                the first item of a returned tuple), and no array of one worker may share
                memory with another worker's (lessons about collectives).
    memory:     the bound that the ``measure`` cases' peak memory must keep (lessons
                whose point is saving memory).
    on_cluster: the lesson runs on a cluster the grader makes and passes in (:class:`OnCluster`):
                lessons whose contract names a collective; their traffic is measured.
    time_limit: seconds for all of the lesson's cases in the grading kernel.
    key_tolerances: other tolerances for the values under some dict keys of the answer
                (``shared.checking.difference``): bytes measured with tracemalloc within a few
                percent, counted bytes and traffic exactly, beside the lesson's own tolerances.
    equivalent_mutants: mutants of the reference that compute the same function
                (``tools/mutation.py``), each ``("MUTATION | LINE FRAGMENT", why)``.
    corners:    the contract's corners (:class:`Corner`) that every run must draw, beside those the
                declaration implies (:meth:`all_corners`: every refusal, the measured case).
    measured_reference: the reference's answer holds bytes it measured with tracemalloc (039): the judge
                computes it alone, in a forked child of one thread, as the harness runs the learner's
                (tracemalloc counts every thread's allocations, and the grader's process has threads).
    """

    code: str
    cases: Callable[[np.random.Generator], Sequence[Case | Raises]]
    rtol: float | None = None
    atol: float | None = None
    exact: bool = False
    isolate: tuple[str, ...] = ()
    helpers: tuple[str, ...] = ()
    refuses: tuple[Refusal, ...] = ()
    fresh_result: bool = True
    workers_apart: bool = False
    memory: MemoryBound | None = None
    on_cluster: OnCluster | None = None
    time_limit: float = 20.0
    key_tolerances: dict[str, dict[str, Any]] = field(default_factory=dict)
    equivalent_mutants: tuple[tuple[str, str], ...] = field(default=())
    corners: tuple[Corner, ...] = ()
    measured_reference: bool = False

    def all_corners(self) -> tuple[Corner, ...]:
        """The declared corners, and those the declaration implies: a bad input under every refusal, and the
        measured case of a lesson graded on memory."""
        implied = tuple(Corner(f"bad input: {refusal.rule}",
                               lambda case, refusal=refusal: isinstance(case, Raises) and refusal.covers(case.args))
                        for refusal in self.refuses)
        if self.memory is not None:
            implied += (Corner("the measured case", lambda case: valid(case) and case.measure),)
        return self.corners + implied

    def tolerances(self, case: Case) -> dict[str, Any]:
        rtol, atol = precision_tolerances(case.args)
        own = {"rtol": case.rtol if case.rtol is not None else self.rtol if self.rtol is not None else rtol,
               "atol": case.atol if case.atol is not None else self.atol if self.atol is not None else atol,
               "exact": self.exact if case.exact is None else case.exact}
        return {**own, "key_tolerances": self.key_tolerances} if self.key_tolerances else own


def draw_cases(spec: LessonSpec, seed: int) -> list[Case | Raises]:
    """The lesson's cases for one grading run (``seed`` comes from the grader), and last the first
    unmeasured case once more (:func:`repeated`)."""
    cases = list(spec.cases(np.random.default_rng(seed)))
    for case in cases:
        if not isinstance(case, (Case, Raises)):
            raise TypeError(f"lesson {spec.code}: cases() must give Case or Raises, got {case!r}")
    again = repeated(cases)
    return cases + ([again] if again is not None else [])


def repeated(cases: Sequence[Case | Raises]) -> Case | None:
    """A second call on the inputs of the first unmeasured case: an answer that hands every call the same
    output buffer then shares memory with the earlier result (the harness compares each result with the
    earlier ones), on every run, not only when two drawn cases happen to have the same shapes."""
    first = next((case for case in cases if isinstance(case, Case) and not case.measure), None)
    if first is None:
        return None
    return replace(first, args=copy.deepcopy(first.args),
                   about=f"{first.about + ': ' if first.about else ''}the first case again (a second call gives "
                         f"new arrays)")
