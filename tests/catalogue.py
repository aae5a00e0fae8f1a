"""A catalogue of plausible wrong answers for every lesson, and what each one scores.

The visible tests in a notebook promise something: "All tests passed" should mean
that the only way left to lose the hidden points is to be wrong on values (on
inputs the learner has not seen).  This module holds the wrong answers that check
that promise, lesson by lesson, in four kinds:

- ``contract``: derived mechanically from the lesson's declaration
  (``autograde/parts/NN_slug/cases.py``), one per promise the hidden tests grade:
  each :class:`~grading.spec.Refusal` forgotten (the function returns, or raises
  the wrong error), an input changed in place, float32/float16 results widened to
  float64, a Python float, int or bool returned as a NumPy scalar, an input array
  returned as the result.  Each applies only when the hidden cases can see it.
- ``shortcut``: the right numbers computed the expensive way, for lessons whose
  point is memory (their declaration has a :class:`~grading.spec.MemoryBound`).
- ``mistake``: the lesson's named common mistakes (``shared.mistakes``).
- ``plausible``: other wrong answers a learner could write, beyond one-point mutants.
- ``right``: right answers written another way (``einsum``, loops, another
  summation order); these must pass both the visible and the hidden tests.

:func:`visible_failure` runs a lesson's visible test cell (as the learner's
notebook holds it) with the function replaced; :func:`hidden_verdict` grades the
function with the real cases, harness and judge.  ``python tests/catalogue.py``
(``make catalogue``) prints the per-lesson table.
"""

from __future__ import annotations

import builtins
import copy
import functools
import inspect
import io
import sys
from collections.abc import Callable, Iterator
from contextlib import redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from course import built_lessons, grade_id_of, read, reference_solutions, student_path  # noqa: E402
from grading.judge import Verdict, grade_in_process, lesson_spec, reference_function  # noqa: E402
from grading.protocol import Reason  # noqa: E402
from grading.spec import Case, Raises, draw_cases  # noqa: E402
from shared import mlp  # noqa: E402
from shared.checking import arrays_in  # noqa: E402
from shared.lessons import Lesson, lesson as find_lesson  # noqa: E402
from shared.mistakes import mistakes_of  # noqa: E402

#: The run seeds whose cases decide which contract entries apply to a lesson.
SEEDS = (0, 1, 2)


@dataclass(frozen=True)
class Entry:
    code: str
    name: str
    kind: str  # "contract", "shortcut", "mistake", "plausible" or "right"
    function: Callable[..., Any]


# --------------------------------------------------------------------------
# Running the visible tests and the hidden ones
# --------------------------------------------------------------------------

_namespaces: dict[str, dict[str, Any]] = {}


def _part_namespace(slug: str) -> dict[str, Any]:
    """The learner's set-up cell and every reference solution of the part, run once."""
    if slug not in _namespaces:
        namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
        reference = reference_solutions(slug)
        for cell in read(student_path(slug)).cells:
            meta = cell.metadata.get("nbgrader", {})
            if meta.get("grade_id") == "setup":
                exec(cell.source.replace("setup_notebook()", ""), namespace)  # noqa: S102 (course code)
            elif meta.get("solution"):
                exec(reference[meta["grade_id"]], namespace)  # noqa: S102
        _namespaces[slug] = namespace
    return _namespaces[slug]


def _test_cell(lesson: Lesson) -> str:
    return next(cell.source for cell in read(student_path(lesson.part.slug)).cells
                if grade_id_of(cell) == lesson.grade_id)


def visible_failure(lesson: Lesson, function: Callable[..., Any]) -> str | None:
    """Run the lesson's visible tests with ``function`` as the learner's: None when they pass,
    else what stopped them (the first line of the failure)."""
    passed: list[str] = []
    namespace = dict(_part_namespace(lesson.part.slug))
    namespace[lesson.function] = function
    namespace["lesson_passed"] = passed.append
    try:
        with redirect_stdout(io.StringIO()), np.errstate(all="ignore"):
            exec(_test_cell(lesson), namespace)  # noqa: S102 (the course's own test cell)
    except BaseException as error:  # noqa: BLE001 (any failure of the cell is the answer)
        if isinstance(error, KeyboardInterrupt):
            raise
        return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    return None if passed == [lesson.code] else f"the cell ended without lesson_passed({lesson.code!r})"


def hidden_verdict(lesson: Lesson, function: Callable[..., Any], seed: int = 0, name_mistakes: bool = False) -> Verdict:
    """The grader's verdict on ``function`` as the learner's (the catalogue asks why an answer fails,
    not which mistake it is: tests/test_mistakes.py checks the naming)."""
    return grade_in_process(lesson.code, namespace_with(lesson, function), seed, name_mistakes=name_mistakes)


def namespace_with(lesson: Lesson, function: Callable[..., Any]) -> dict[str, Any]:
    """The reference module's namespace with the lesson's function replaced by ``function``."""
    namespace = dict(reference_function(lesson).__globals__)
    namespace[lesson.function] = function
    return namespace


# --------------------------------------------------------------------------
# Contract entries, derived from the declaration
# --------------------------------------------------------------------------

def _map(value: Any, leaf: Callable[[Any], Any]) -> Any:
    if isinstance(value, dict):
        return {key: _map(item, leaf) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_map(item, leaf) for item in value)
    return leaf(value)


def _leaves(value: Any) -> Iterator[Any]:
    if isinstance(value, dict):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _leaves(item)
    else:
        yield value


def _named(lesson: Lesson, body: Callable[[dict[str, Any], Callable[..., Any]], Any]) -> Callable[..., Any]:
    """A function with the lesson's signature whose answer is ``body(args, reference)``."""
    reference = reference_function(lesson)
    names = list(inspect.signature(reference).parameters)

    @functools.wraps(reference)
    def wrong(*args, **kwargs):
        given = dict(zip(names, args))
        given.update(kwargs)
        return body(given, reference)
    return wrong


def _drawn(lesson: Lesson, seeds: tuple[int, ...] = SEEDS) -> list[Case | Raises]:
    from grading.judge import case_seed
    return [case for seed in seeds for case in draw_cases(lesson_spec(lesson.code), case_seed(seed, lesson.code))]


def _reference_results(lesson: Lesson, seeds: tuple[int, ...] = SEEDS) -> list[tuple[dict[str, Any], Any]]:
    reference = reference_function(lesson)
    results = []
    for case in _drawn(lesson, seeds):
        if isinstance(case, Case):
            with np.errstate(all="ignore"):
                results.append((case.args, reference(**copy.deepcopy(case.args))))
    return results


@dataclass(frozen=True)
class Traits:
    """What one run seed's cases and reference results show of a lesson's contract: which promises the
    hidden cases can grade (so which contract entries the catalogue holds)."""
    float_inputs: bool       # some case has a float array among its inputs
    narrow_floats: bool      # some case takes a float narrower than float64 and returns one
    python_float: bool       # some result holds a Python float
    python_int: bool
    python_bool: bool
    input_twin: bool         # some result equals an input array (returning the input itself would pass)


@functools.lru_cache(maxsize=None)
def traits(lesson: Lesson, seed: int) -> Traits:
    """The traits of the cases of ``seed``, computed once per process (the catalogue is listed by several
    test files when they are collected, and each reference run of 040 takes a while)."""
    results = _reference_results(lesson, (seed,))
    leaves = [type(leaf) for _, result in results for leaf in _leaves(result)]
    return Traits(
        float_inputs=any(any(a.dtype.kind == "f" for a in arrays_in(args)) for args, _ in results),
        narrow_floats=any(any(a.dtype.kind == "f" and a.dtype != np.float64 for a in arrays_in(args))
                          and any(r.dtype.kind == "f" and r.dtype != np.float64 for r in arrays_in(result))
                          for args, result in results),
        python_float=float in leaves, python_int=int in leaves, python_bool=bool in leaves,
        input_twin=any(_input_twin(args, result) is not None for args, result in results))


def contract_entries(lesson: Lesson) -> list[Entry]:
    """One wrong answer per promise that the lesson's hidden cases grade."""
    spec = lesson_spec(lesson.code)
    entries = []
    for refusal in spec.refuses:
        def returns(args, reference, refusal=refusal):
            return None if refusal.covers(args) else reference(**args)

        def raises_other(args, reference, refusal=refusal):
            if refusal.covers(args):
                other = TypeError if refusal.error is not TypeError else ValueError
                raise other(f"(not the contract's {refusal.error.__name__})")
            return reference(**args)
        entries.append(Entry(lesson.code, f"does not refuse: {refusal.rule}", "contract", _named(lesson, returns)))
        entries.append(Entry(lesson.code, f"refuses {refusal.rule} with the wrong error", "contract",
                             _named(lesson, raises_other)))

    seen = [traits(lesson, seed) for seed in SEEDS]
    if any(item.float_inputs for item in seen):
        def mutates(args, reference):
            answer = reference(**copy.deepcopy(args))
            first = next(a for a in arrays_in(args) if a.dtype.kind == "f" and a.size and a.flags.writeable)
            first *= 2.0
            first += 1.0
            return answer
        entries.append(Entry(lesson.code, "changes an input in place", "contract", _named(lesson, mutates)))
    if any(item.narrow_floats for item in seen):
        def widens(args, reference):
            return _map(reference(**args), lambda v: v.astype(np.float64)
                        if isinstance(v, np.ndarray) and v.dtype.kind == "f" else v)
        entries.append(Entry(lesson.code, "returns float64 for narrower float inputs", "contract",
                             _named(lesson, widens)))
    if any(item.python_float for item in seen):
        def numpy_float(args, reference):
            return _map(reference(**args), lambda v: np.float32(v) if type(v) is float else v)
        entries.append(Entry(lesson.code, "returns a NumPy scalar for a Python float", "contract",
                             _named(lesson, numpy_float)))
    if any(item.python_int for item in seen):
        def numpy_int(args, reference):
            return _map(reference(**args), lambda v: np.int64(v) if type(v) is int else v)
        entries.append(Entry(lesson.code, "returns a NumPy integer for a Python int", "contract",
                             _named(lesson, numpy_int)))

        def float_int(args, reference):
            return _map(reference(**args), lambda v: float(v) if type(v) is int else v)
        entries.append(Entry(lesson.code, "returns a float for a Python int", "contract", _named(lesson, float_int)))
    if any(item.python_bool for item in seen):
        def numpy_bool(args, reference):
            return _map(reference(**args), lambda v: np.bool_(v) if type(v) is bool else v)
        entries.append(Entry(lesson.code, "returns a NumPy bool for a Python bool", "contract",
                             _named(lesson, numpy_bool)))
    # Only where every run's cases have a result equal to an input (a declared case such as 012's
    # "first micro-batch of size 1"), not where a random draw makes one equal by chance.
    if spec.fresh_result and all(item.input_twin for item in seen):
        def aliases(args, reference):
            def twin_or_itself(v):
                twin = _input_twin(args, v) if isinstance(v, np.ndarray) else None
                return v if twin is None else twin
            return _map(reference(**args), twin_or_itself)
        entries.append(Entry(lesson.code, "returns an input array itself", "contract", _named(lesson, aliases)))
    return entries


def _input_twin(args: dict[str, Any], result: Any) -> np.ndarray | None:
    """An input array equal to (one of) the result's arrays, which a lazy answer could return as is."""
    for out in arrays_in(result):
        for given in arrays_in(args):
            if given.dtype == out.dtype and given.shape == out.shape and np.array_equal(given, out):
                return given
    return None


# --------------------------------------------------------------------------
# Shortcuts: the right numbers at the wrong cost
# --------------------------------------------------------------------------

def first_backward_with_input_gradient(dZ1, X, W1):
    """009 the expensive way: linear_backward's three gradients, the input's thrown away (dX is computed, a
    (batch, in_features) array, and never used)."""
    dX = dZ1 @ W1.T  # noqa: F841  (the waste this lesson is about)
    return X.T @ dZ1, dZ1.sum(axis=0)


def whole_batch_step(params, X, Y, num_micro_batches, learning_rate):
    """014 the expensive way: one forward and backward pass over the whole batch."""
    if isinstance(num_micro_batches, bool) or int(num_micro_batches) != num_micro_batches \
            or not 1 <= num_micro_batches <= len(X):
        raise ValueError("bad num_micro_batches")
    loss, grads = mlp.loss_and_grads(X, Y, params)
    return {key: params[key] - learning_rate * grads[key] for key in params}, loss


def store_everything_forward(X, params, segment_size):
    """015 the expensive way: keep every activation, pick the checkpoints at the end."""
    if segment_size < 1:
        raise ValueError("segment_size must be at least 1")
    out, cache = mlp.forward(X, params)  # every Z{i} and A{i} alive at once, as a standard forward pass keeps them
    return out, {i: cache[f"A{i}"] for i in range(0, mlp.num_layers(params), segment_size)}


def recompute_everything_backward(d_out, params, checkpoints, segment_size):
    """017 the expensive way: recompute every segment first, then run the backward pass."""
    blocks = reference_function(find_lesson("016"))
    layers = mlp.num_layers(params)
    cache = {}
    for start in checkpoints:
        cache.update(blocks(checkpoints[start], params, start, min(start + segment_size, layers)))
    grads, delta = {}, d_out
    for i in range(layers, 0, -1):
        a_prev = cache[f"A{i - 1}"]
        grads[f"W{i}"], grads[f"b{i}"] = a_prev.T @ delta, delta.sum(axis=0)
        if i > 1:
            delta = (delta @ params[f"W{i}"].T) * (a_prev > 0)
    return {key: grads[key] for key in params}


def float32_step(master_params, X, Y, scaler_state, learning_rate, growth_interval=2000):
    """024 the expensive way: the same step and scaler, but forward and backward in float32."""
    if any(value.dtype != np.float32 for value in master_params.values()):
        raise TypeError("master weights must be float32")
    if growth_interval < 1 or not np.isfinite(scaler_state["scale"]) or scaler_state["scale"] <= 0:
        raise ValueError("growth_interval must be at least 1 and the scale positive and finite")
    with np.errstate(over="ignore", invalid="ignore"):
        _, grads = mlp.loss_and_grads(X.astype(np.float32), Y.astype(np.float32), master_params)
    scale = scaler_state["scale"]
    if not all(np.isfinite(g).all() for g in grads.values()):
        return master_params, {"scale": scale * 0.5, "growth_tracker": 0}, True
    tracker = scaler_state["growth_tracker"] + 1
    if tracker == growth_interval:
        scale, tracker = scale * 2.0, 0
    return ({key: master_params[key] - learning_rate * grads[key] for key in master_params},
            {"scale": scale, "growth_tracker": tracker}, False)


def whole_batch_data_parallel_step(params, X, Y, num_workers, learning_rate, cluster=None):
    """029 the expensive way: the whole batch through one worker, its gradient then all-reduced on the
    cluster as the workers' (the ledger the reference's), every replica stepping with it."""
    from shared.cluster import Cluster
    from shared.lesson_blocks import ring_all_reduce_mean
    if not 1 <= num_workers <= len(X):
        raise ValueError("bad num_workers")
    cluster = Cluster(num_workers) if cluster is None else cluster
    loss, grads = mlp.loss_and_grads(X, Y, params)
    replicas = [{} for _ in range(num_workers)]
    for key in params:
        averaged, _ = ring_all_reduce_mean([grads[key]] * num_workers, cluster)
        for rank in range(num_workers):
            replicas[rank][key] = params[key] - learning_rate * averaged[rank]
    return replicas, loss


def _check_partition(state, num_workers):
    m, v = state["m"], state["v"]
    if m.keys() != v.keys() or any(m[k].shape != v[k].shape for k in m) or not \
            1 <= num_workers <= sum(a.size for a in m.values()):
        raise ValueError("bad partition")


def full_copy_per_worker_partition(state, num_workers):
    """032 the expensive way: every worker flattens its own full copy of the moments and keeps a view of its
    shard, which keeps the whole copy alive (N copies of the state for N workers)."""
    _check_partition(state, num_workers)
    total = sum(a.size for a in state["m"].values())
    bounds = np.cumsum([0] + [len(c) for c in np.array_split(np.zeros(total), num_workers)])
    shards = []
    for r in range(num_workers):
        full_m = np.concatenate([a.ravel() for a in state["m"].values()])
        full_v = np.concatenate([a.ravel() for a in state["v"].values()])
        shards.append({"step": state["step"], "m": full_m[bounds[r]:bounds[r + 1]],
                       "v": full_v[bounds[r]:bounds[r + 1]]})
    return shards


def every_worker_keeps_full_moments(params, worker_grads, worker_states, learning_rate, beta1=0.9, beta2=0.999,
                                    eps=1e-8, cluster=None):
    """035 the expensive way: data-parallel Adam with ZeRO's ledger.  The mean gradient reaches every worker (the
    reduce-scatter, then an all-gather of the reduced gradient shards instead of the parameters: the same bytes
    and rounds); every worker rebuilds the full moments, updates all the parameters, and keeps the full new
    moments, returning views of its own shard of them."""
    from shared.cluster import Cluster
    from shared.lesson_blocks import all_gather_param_shards  # lesson 034's, unlocked while 035 is graded
    from shared.mistakes.part6 import ring_reduce_scatter_sums
    adam = reference_function(find_lesson("033"))
    n, total = len(worker_grads), sum(value.size for value in params.values())
    if not 1 <= n <= total or len(worker_states) != n or any(
            g.keys() != params.keys() or any(g[k].shape != params[k].shape for k in params) for g in worker_grads):
        raise ValueError("bad step")
    bounds = np.cumsum([0] + [len(c) for c in np.array_split(np.zeros(total), n)])
    if any(len(s["m"]) != bounds[r + 1] - bounds[r] for r, s in enumerate(worker_states)):
        raise ValueError("bad states")
    cluster = cluster or Cluster(n)
    sums = ring_reduce_scatter_sums([np.concatenate([g[k].ravel() for k in params]) for g in worker_grads], cluster)
    mean_grads, traffic = all_gather_param_shards([part / n for part in sums], cluster)
    flat_params = np.concatenate([value.ravel() for value in params.values()])
    worker_params, states = [], []
    for r in range(n):
        full = {"step": worker_states[r]["step"], "m": np.concatenate([s["m"] for s in worker_states]),
                "v": np.concatenate([s["v"] for s in worker_states])}
        vector, new = adam(flat_params, mean_grads[r], full, learning_rate, beta1, beta2, eps)
        mine, offset = {}, 0
        for key, value in params.items():
            mine[key] = vector[offset:offset + value.size].reshape(value.shape)
            offset += value.size
        worker_params.append(mine)
        states.append({"step": new["step"], "m": new["m"][bounds[r]:bounds[r + 1]],
                       "v": new["v"][bounds[r]:bounds[r + 1]]})
    return worker_params, states, traffic


#: lesson code -> (function name, the shortcut, words the verdict must contain)
SHORTCUTS: dict[str, tuple[str, Callable[..., Any], str]] = {
    "009": ("first_linear_backward", first_backward_with_input_gradient, "dX = dZ1 @ W1.T is a (batch, in_features)"),
    "014": ("grad_accumulation_step", whole_batch_step, "only one micro-batch may be alive at a time"),
    "015": ("mlp_forward_checkpointed", store_everything_forward, "keep only each segment's input"),
    "017": ("mlp_backward_checkpointed", recompute_everything_backward, "recompute one segment at a time"),
    "024": ("mixed_precision_step", float32_step, "run the forward and backward passes in float16"),
    "029": ("data_parallel_train_step", whole_batch_data_parallel_step, "each worker computes on its own shard only"),
    "032": ("partition_optimizer_state", full_copy_per_worker_partition, "each worker keeps its own shard only"),
    "035": ("zero_optimizer_step", every_worker_keeps_full_moments, "every worker keeping the full moments"),
}


# --------------------------------------------------------------------------
# Plausible wrong answers and right answers written differently, by hand
# --------------------------------------------------------------------------

from plausible import EXPENSIVE, PLAUSIBLE, RIGHT  # noqa: E402  (lesson code -> [(name, function)])


def catalogue(lesson: Lesson) -> list[Entry]:
    entries = contract_entries(lesson)
    if lesson.code in SHORTCUTS:
        entries.append(Entry(lesson.code, "the expensive way (memory)", "shortcut", SHORTCUTS[lesson.code][1]))
    entries += [Entry(lesson.code, name, "shortcut", f) for name, f in EXPENSIVE.get(lesson.code, ())]
    entries += [Entry(lesson.code, m.name, "mistake", m.compute) for m in mistakes_of(lesson.function)]
    entries += [Entry(lesson.code, name, "plausible", f) for name, f in PLAUSIBLE.get(lesson.code, ())]
    entries += [Entry(lesson.code, name, "right", f) for name, f in RIGHT.get(lesson.code, ())]
    return entries


@dataclass(frozen=True)
class Outcome:
    entry: Entry
    visible: str | None  # None: the visible tests passed
    verdict: Verdict

    @property
    def problem(self) -> str | None:
        """Why this outcome breaks the notebook's promise, or None."""
        entry, verdict = self.entry, self.verdict
        if entry.kind == "right":
            if self.visible is not None:
                return f"a right answer fails the visible tests: {self.visible}"
            if not verdict.passed:
                return f"a right answer loses the hidden points: {verdict.message}"
            return None
        if verdict.passed:
            return "a wrong answer earns the hidden points"
        if self.visible is None and verdict.reason != Reason.VALUE:
            return (f"passes the visible tests but loses the hidden points for a reason other than values "
                    f"({verdict.reason}): {verdict.message.splitlines()[0]}")
        if entry.kind in ("contract", "shortcut") and self.visible is None:
            return "the visible tests do not check this promise"
        return None


def outcome(entry: Entry, seed: int = 0) -> Outcome:
    """How the notebook's visible tests and the grader (run seed ``seed``) meet ``entry``.

    A contract or shortcut entry that the visible tests catch keeps its promise when the hidden cases fail it
    anywhere, so it is graded first on the cases it is about (a contract entry on the refusals' cases, a
    shortcut on the measured ones): a function that fails some of a run's cases fails the run.  Only one
    that passes those is graded on every case (tests/test_seeds.py grades every entry on every case of
    eight seeds)."""
    lesson = find_lesson(entry.code)
    visible = visible_failure(lesson, entry.function)
    if entry.kind in ("contract", "shortcut") and visible is not None:
        verdict = _verdict_on_its_own_cases(lesson, entry, seed)
        if not verdict.passed:
            return Outcome(entry, visible, verdict)
    return Outcome(entry, visible, hidden_verdict(lesson, entry.function, seed))


def _verdict_on_its_own_cases(lesson: Lesson, entry: Entry, seed: int) -> Verdict:
    """The verdict on the run's refusal cases alone (a contract entry) or its measured cases alone (a
    shortcut); its "hidden case k of N" counts among these."""
    from grading.judge import case_seed, drawn_cases, grade_cases
    cases = drawn_cases(lesson.code, case_seed(seed, lesson.code))
    if entry.kind == "contract":
        own = [case for case in cases if isinstance(case, Raises)]
    else:
        own = [case for case in cases if isinstance(case, Case) and case.measure]
    return grade_cases(lesson.code, namespace_with(lesson, entry.function), own, name_mistakes=False)


def table(lessons: list[Lesson] | None = None) -> str:
    """The per-lesson report: catalogue size, passing the visible tests, earning hidden points."""
    rows = ["| lesson | catalogue (contract/shortcut/mistake/plausible) | right answers | pass visible "
            "(value-only) | earn hidden | broken promises |", "|---|---|---|---|---|---|"]
    for lesson in lessons or built_lessons():
        outcomes = [outcome(e) for e in catalogue(lesson)]
        wrong = [o for o in outcomes if o.entry.kind != "right"]
        right = [o for o in outcomes if o.entry.kind == "right"]
        counts = "/".join(str(sum(o.entry.kind == k for o in wrong))
                          for k in ("contract", "shortcut", "mistake", "plausible"))
        visible = [o for o in wrong if o.visible is None]
        rows.append(f"| {lesson.code} {lesson.function} | {len(wrong)} ({counts}) | "
                    f"{sum(o.problem is None for o in right)}/{len(right)} pass both | "
                    f"{len(visible)} ({sum(o.verdict.reason == Reason.VALUE for o in visible)}) | "
                    f"{sum(o.verdict.passed for o in wrong)} | {sum(o.problem is not None for o in outcomes)} |")
    return "\n".join(rows)


def memory_table(lessons: list[Lesson] | None = None) -> str:
    """For each lesson graded on memory: its bound and the measured bytes on its hidden memory case
    (run seed 0: the peak, or what the result keeps for a ``kind="kept"`` bound), of the reference and
    of each shortcut."""
    from grading.judge import case_seed
    from shared.memory import format_bytes, measure_peak_memory
    rows = ["| lesson | bound (rule) | allowed | reference | shortcuts |", "|---|---|---|---|---|"]
    for lesson in lessons or built_lessons():
        spec = lesson_spec(lesson.code)
        if spec.memory is None:
            continue
        case = next(c for c in draw_cases(spec, case_seed(0, lesson.code)) if isinstance(c, Case) and c.measure)

        def peak(function):
            measured = measure_peak_memory(function, **copy.deepcopy(case.args))
            return format_bytes(measured.retained_bytes if spec.memory.kind == "kept" else measured.peak_bytes)
        shortcuts = [e for e in catalogue(lesson) if e.kind == "shortcut"]
        rows.append(f"| {lesson.code} | {spec.memory.rule} | {format_bytes(spec.memory.allowed(case.args))} | "
                    f"{peak(reference_function(lesson))} | "
                    + "; ".join(f"{e.name}: {peak(e.function)}" for e in shortcuts) + " |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(table())
    print()
    print(memory_table())
