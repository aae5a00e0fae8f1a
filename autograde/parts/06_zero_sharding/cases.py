"""Hidden cases of Part 6 (lessons 031-035), declared once.

Each lesson's ``cases(rng)`` draws fresh inputs from the grader's generator;
the judge compares the learner's answers with the reference solutions on
exactly these inputs.  The collectives (034, 035) run on a cluster the grader
makes and passes in (``OnCluster``): its ledger, read by the grader, is their
traffic, graded exactly, with every message received.  A reduce-scatter that is
really an all-reduce, or an all-gather through one worker, gives the right
numbers and the wrong ledger.  The step (035) has one case where any order of the
additions but the reduce-scatter's loses whole numbers (``grading.inputs``): each
worker's mean gradient must come from what it received.  (It is compared within
float64 rounding, not bit for bit: Adam may be written in more than one order.)  Parameter counts that N divides and ones it does
not, N = 1 and N = the number of elements, later steps as well as the first,
float32 as well as float64, and every class of bad input.

Memory is graded by what each worker keeps: the shards of 032 and the states of
035 are compared with the reference's array for array (so their bytes are exact,
1/N of the state to one element), and a measured case bounds what the result
keeps alive (``MemoryBound(kind="kept")``), so that shards which are views of a
full copy per worker, or workers that keep the full moments, score 0.
"""

import numpy as np

from grading.inputs import order_revealing_vectors
from grading.spec import (FLOAT32, FLOAT64_REORDERED, Case, Corner, LessonSpec, MemoryBound, OnCluster, Raises, Refusal,
                          any_entry, valid)
from shared import mlp
from shared.memory import partitioned_state_allowed_bytes, zero_step_allowed_bytes



def _normal(rng, shape, dtype=np.float64):
    return rng.standard_normal(shape).astype(dtype)


def _seed(rng):
    return int(rng.integers(0, 2**31))


def _params(rng, layers=(1, 3), dtype=np.float64, widths=None):
    """The helper MLP's parameters (zero biases) for random widths, or for ``widths``."""
    if widths is None:
        widths = [int(n) for n in rng.integers(2, 7, size=int(rng.integers(*layers)) + 2)]
    return {key: value.astype(dtype) for key, value in mlp.init_params(widths, seed=_seed(rng)).items()}


def _size(tensors):
    return sum(value.size for value in tensors.values())


def _uneven_workers(rng, total, low=2, high=7):
    """A worker count in [low, high) that does not divide ``total`` (the first larger one if none does)."""
    choices = [n for n in range(low, min(high, total + 1)) if total % n]
    if not choices:
        choices = [next(n for n in range(high, total + 1) if total % n)]
    return int(rng.choice(choices))


def _state(rng, params, step=None):
    """An Adam state some steps in (m any sign, v positive, step an int), or a fresh one for step 0."""
    step = int(rng.integers(1, 50)) if step is None else step
    m = {k: 0.1 * _normal(rng, v.shape, v.dtype) for k, v in params.items()}
    v = {k: (0.1 * _normal(rng, v.shape, v.dtype)) ** 2 for k, v in params.items()}
    if step == 0:
        m, v = ({k: np.zeros_like(value) for k, value in params.items()} for _ in range(2))
    return {"step": step, "m": m, "v": v}


def _shard_sizes(total, N):
    return [len(chunk) for chunk in np.array_split(np.zeros(total, dtype=np.int8), N)]


# 031 init_adam_state ---------------------------------------------------------------

def init_cases(rng):
    cases = [Case({"params": _params(rng)}, "an MLP's parameters") for _ in range(2)]
    cases.append(Case({"params": _params(rng, (3, 5))}, "a deeper MLP"))
    cases.append(Case({"params": {"w": _normal(rng, int(rng.integers(1, 6)))}}, "one 1-D tensor"))
    cases.append(Case({"params": _params(rng, dtype=np.float32)}, "float32 parameters: float32 moments"))
    diverged = _params(rng)
    key = str(rng.choice(sorted(diverged)))
    diverged[key].flat[rng.choice(diverged[key].size, size=min(3, diverged[key].size), replace=False)] = \
        [np.nan, np.inf, -np.inf][:min(3, diverged[key].size)]
    cases.append(Case({"params": diverged}, f"a diverged run: NaN and inf in {key}, the moments zeros all the same"))
    return cases


# 032 partition_optimizer_state -----------------------------------------------------

def partition_cases(rng):
    def case(state, N, about, **extra):
        return Case({"state": state, "num_workers": N}, about, **extra)

    cases = []
    for _ in range(3):
        params = _params(rng)
        N = _uneven_workers(rng, _size(params))
        # N does not divide the elements: the first few shards are one element longer
        cases.append(case(_state(rng, params), N, f"{_size(params)} elements on {N} workers"))
    params = _params(rng, widths=[3, 4, 2])  # 26 elements
    cases.append(case(_state(rng, params), 2, "N divides the elements (26 on 2 workers)"))
    cases.append(case(_state(rng, _params(rng)), 1, "N = 1: one shard of everything"))
    small = {"W": _normal(rng, (2, 2)), "b": _normal(rng, 2)}
    cases.append(case(_state(rng, small), 6, "N = the number of elements (6): one element each"))
    cases.append(case(_state(rng, {"b": _normal(rng, 3)}, step=0), 1,
                      "one 1-D tensor and one worker: the shard must still be a copy"))
    params32 = _params(rng, dtype=np.float32)
    cases.append(case(_state(rng, params32), _uneven_workers(rng, _size(params32)), "a float32 state"))
    big = _params(rng, widths=[64, 128, 128, 8])  # 202 KiB per moment: a full copy per worker keeps 3.2 MiB
    cases.append(case(_state(rng, big), 8, "memory measured: 25,864 elements on 8 workers", measure=True))
    small_state = _state(rng, small)
    cases += [Raises({"state": small_state, "num_workers": 0}, ValueError, "num_workers is 0"),
              Raises({"state": small_state, "num_workers": -int(rng.integers(1, 4))}, ValueError,
                     "num_workers is negative"),
              Raises({"state": small_state, "num_workers": 7}, ValueError,
                     "there are more workers (7) than elements (6)"),
              Raises({"state": {**small_state, "v": {"W": small_state["v"]["W"]}}, "num_workers": 2}, ValueError,
                     "v has other keys than m"),
              Raises({"state": {**small_state, "v": {"W": small_state["v"]["W"].T.reshape(1, 4),
                                                     "b": small_state["v"]["b"]}}, "num_workers": 2},
                     ValueError, "v's W has another shape than m's")]
    return cases


def _moments_differ(a):
    m, v = a["state"]["m"], a["state"]["v"]
    return m.keys() != v.keys() or any(m[k].shape != v[k].shape for k in m)


PARTITION_REFUSALS = (
    Refusal("m and v differ in keys or shapes", ValueError, _moments_differ),
    Refusal("num_workers < 1", ValueError, lambda a: a["num_workers"] < 1),
    Refusal("more workers than elements", ValueError,
            lambda a: not _moments_differ(a) and 1 <= a["num_workers"] and a["num_workers"] > _size(a["state"]["m"])),
)

PARTITION_MEMORY = MemoryBound(
    lambda args: partitioned_state_allowed_bytes(args["state"]),
    rule="1.25 x the state's bytes: the N shards together hold m and v once",
    shortcut="each worker keeps its own shard only (a copy of its slice); a shard that is a view of a full copy "
             "of the moments keeps that whole copy alive, N copies for N workers",
    kind="kept")


# 033 local_shard_adam_update -------------------------------------------------------

def _update_args(rng, shape, *, step=None, dtype=np.float64, scale=1.0, lr=None, beta1=0.9, beta2=0.999,
                 eps=1e-8):
    step = int(rng.integers(1, 100)) if step is None else step
    m = (0.1 * scale * _normal(rng, shape)).astype(dtype)
    v = ((0.1 * scale * _normal(rng, shape)) ** 2).astype(dtype)
    return {"param_shard": _normal(rng, shape, dtype), "grad_shard": (scale * _normal(rng, shape)).astype(dtype),
            "state_shard": {"step": step, "m": m if step else np.zeros(shape, dtype),
                            "v": v if step else np.zeros(shape, dtype)},
            "learning_rate": float(rng.uniform(1e-3, 1e-1)) if lr is None else lr,
            "beta1": beta1, "beta2": beta2, "eps": eps}


def update_cases(rng):
    def length():
        return int(rng.integers(2, 30))

    cases = [Case(_update_args(rng, length(), step=0), "the first step (step 0 -> 1) of a fresh state")]
    for _ in range(2):
        cases.append(Case(_update_args(rng, length(), beta1=float(rng.uniform(0.8, 0.95)),
                                       beta2=float(rng.uniform(0.99, 0.9999))), "a later step, other betas"))
    # gradients of 1e-5: v_hat is about 1e-10, so eps (1e-8) is not negligible beside sqrt(v_hat)
    cases.append(Case(_update_args(rng, length(), scale=1e-5), "small gradients: where eps matters"))
    cases.append(Case(_update_args(rng, length(), eps=1e-3), "eps = 1e-3"))
    cases.append(Case(_update_args(rng, length(), beta1=0.0, beta2=0.0), "beta1 = beta2 = 0 (allowed)"))
    cases.append(Case(_update_args(rng, 1), "a shard of one element"))
    cases.append(Case(_update_args(rng, (3, 4)), "a 2-D array (any shape works: plain Adam on a matrix)"))
    cases.append(Case(_update_args(rng, length(), dtype=np.float32), "float32 shards", **FLOAT32))
    good = _update_args(rng, 5)
    bad = [({"learning_rate": 0.0}, "the learning rate is 0"),
           ({"learning_rate": -float(rng.uniform(0.01, 1))}, "the learning rate is negative"),
           ({"beta1": 1.0}, "beta1 is 1"), ({"beta1": -0.1}, "beta1 is negative"),
           ({"beta2": 1.0}, "beta2 is 1"), ({"beta2": 1.5}, "beta2 is above 1"), ({"beta2": -0.5}, "beta2 is negative"),
           ({"grad_shard": good["grad_shard"][:4]}, "grad_shard has 4 elements and param_shard 5"),
           ({"grad_shard": good["grad_shard"][:1]}, "grad_shard has 1 element and param_shard 5 (it would broadcast)"),
           ({"state_shard": {**good["state_shard"], "m": np.zeros(6)}}, "the state's m has 6 elements, the shard 5"),
           ({"state_shard": {**good["state_shard"], "v": np.zeros((5, 1))}}, "the state's v has shape (5, 1)")]
    cases += [Raises({**good, **change}, ValueError, why) for change, why in bad]
    return cases


def _beta_outside(value):
    return not 0 <= value < 1


UPDATE_REFUSALS = (
    Refusal("learning_rate <= 0", ValueError, lambda a: a["learning_rate"] <= 0),
    Refusal("beta1 outside [0, 1)", ValueError, lambda a: _beta_outside(a["beta1"])),
    Refusal("beta2 outside [0, 1)", ValueError, lambda a: _beta_outside(a["beta2"])),
    Refusal("grad_shard not shaped like param_shard", ValueError,
            lambda a: a["grad_shard"].shape != a["param_shard"].shape),
    Refusal("the state's m or v not shaped like param_shard", ValueError,
            lambda a: a["state_shard"]["m"].shape != a["param_shard"].shape
            or a["state_shard"]["v"].shape != a["param_shard"].shape),
)


# 034 all_gather_param_shards -------------------------------------------------------

def _split(rng, length, N, dtype=np.float64):
    return [np.array(chunk) for chunk in np.array_split(_normal(rng, length, dtype), N)]


def gather_cases(rng):
    cases = []
    N = int(rng.integers(3, 7))
    length = N * int(rng.integers(1, 4)) + int(rng.integers(1, N))
    cases.append(Case({"param_shards": _split(rng, length, N)}, f"{N} shards of {length} numbers: unequal lengths"))
    N = int(rng.integers(2, 6))
    cases.append(Case({"param_shards": _split(rng, N * int(rng.integers(1, 4)), N)}, f"{N} shards of equal length"))
    sizes = [int(n) for n in rng.integers(1, 7, size=int(rng.integers(3, 6)))]
    cases.append(Case({"param_shards": [_normal(rng, n) for n in sizes]}, f"shards of lengths {sizes}"))
    cases.append(Case({"param_shards": _split(rng, int(rng.integers(2, 9)), 2)}, "2 workers"))
    cases.append(Case({"param_shards": _split(rng, int(rng.integers(20, 40)), 8)}, "8 workers"))
    N = int(rng.integers(3, 6))
    cases.append(Case({"param_shards": _split(rng, 2 * N + 1, N, np.float32)},
                      "float32 shards (4 bytes a number; keep the dtype)"))
    cases.append(Case({"param_shards": [_normal(rng, int(rng.integers(1, 6)))]}, "one worker: nothing to send"))
    cases.append(Case({"param_shards": _split(rng, 7, 3)}, "no cluster given: a new Cluster(N) of its own",
                      own_cluster=True))
    # the odd shard out is the last (of 2) and one in the middle of N >= 3: a check of the last shard's dtype
    # only, or one that skips the last, loses one of them (np.concatenate would widen the float32 shard)
    N = int(rng.integers(3, 7))
    odd = int(rng.integers(1, N - 1))
    cases += [Raises({"param_shards": []}, ValueError, "param_shards is empty"),
              Raises({"param_shards": [_normal(rng, 3), _normal(rng, 2, np.float32)]}, ValueError,
                     "the shards differ in dtype"),
              Raises({"param_shards": [_normal(rng, 2, np.float32 if rank == odd else np.float64) for rank in range(N)]},
                     ValueError, f"shard {odd} of {N} (not the last) has another dtype"),
              Raises({"param_shards": [_normal(rng, 3), _normal(rng, (2, 2))]}, ValueError, "worker 1's shard is 2-D"),
              Raises({"param_shards": [_normal(rng, (3, 1)), _normal(rng, 3)]}, ValueError, "worker 0's shard is 2-D"),
              Raises({"param_shards": [_normal(rng, (2, 1)), _normal(rng, (3, 1))]}, ValueError,
                     "every shard is a 2-D column (they would concatenate)")]
    return cases


GATHER_REFUSALS = (
    Refusal("param_shards is empty", ValueError, lambda a: len(a["param_shards"]) == 0),
    Refusal("the shards differ in dtype", ValueError, lambda a: len({s.dtype for s in a["param_shards"]}) > 1),
    Refusal("a shard is not 1-D", ValueError, lambda a: any(s.ndim != 1 for s in a["param_shards"])),
)

NO_SECTIONS = "np.array_split(flat, N) refuses N <= 0 with ValueError itself, the error the contract asks for"
PARTITION_EQUIVALENT = (
    *((f"{mutation} | if num_workers < 1:", f"with N = 0 (the only N < 1 left unchecked) {NO_SECTIONS}")
      for mutation in ("constant 1 - 1", "constant 1 -> 0")),
    ("drop the `raise` | raise ValueError(f\"num_workers must be at least 1, got {num_workers}\")",
     f"for N <= 0 {NO_SECTIONS}"),
    ("`copy(` -> `view(` | return [{\"step\": state[\"step\"], \"m\": m_r.copy(), \"v\": v_r.copy()}",
     "a view of the flat concatenation, which np.concatenate made new: the shards together still keep the state "
     "once and share no memory with the input or with each other (the contract allows it; see the right answer "
     "'views of one flat vector per moment' in tests/plausible.py)"),
)

FIRST_OR_LAST = (
    "constant 0 - 1 | dtype = param_shards[0].dtype",
    "every shard is checked against the reference dtype, so the last worker's serves as well as the first's "
    "(only the error message would name another worker)")


# 035 zero_optimizer_step -----------------------------------------------------------

def _step_args(rng, params, N, *, step=None, lr=None, beta1=0.9, beta2=0.999, eps=1e-8):
    """A step's inputs: N workers' gradients and the N shards of an Adam state some steps in."""
    dtype = next(iter(params.values())).dtype
    state = _state(rng, params, step)
    flat = {moment: np.concatenate([a.ravel() for a in state[moment].values()]) for moment in ("m", "v")}
    shards = [{"step": state["step"], "m": m.copy(), "v": v.copy()}
              for m, v in zip(np.array_split(flat["m"], N), np.array_split(flat["v"], N))]
    grads = [{k: _normal(rng, v.shape, dtype) for k, v in params.items()} for _ in range(N)]
    return {"params": {k: v + _normal(rng, v.shape, dtype) for k, v in params.items()}, "worker_grads": grads,
            "worker_states": shards, "learning_rate": float(rng.uniform(1e-3, 1e-1)) if lr is None else lr,
            "beta1": beta1, "beta2": beta2, "eps": eps}


def step_cases(rng):
    cases = []
    for _ in range(3):
        params = _params(rng)
        N = _uneven_workers(rng, _size(params))
        # N does not divide the parameters: shards (and messages) of two sizes
        cases.append(Case(_step_args(rng, params, N), f"{_size(params)} parameters on {N} workers"))
    cases.append(Case(_step_args(rng, _params(rng, widths=[3, 4, 2]), 4), "N divides the parameters (28 on 4)"))
    cases.append(Case(_step_args(rng, _params(rng), 1), "N = 1: plain Adam"))
    cases.append(Case(_step_args(rng, _params(rng, widths=[3, 4, 2]), 3), "no cluster given: a new Cluster(N) of "
                      "its own", own_cluster=True))
    cases.append(Case(_step_args(rng, _params(rng), int(rng.integers(2, 5)), step=0), "the first step"))
    small = {"W": _normal(rng, (2, 2)), "b": _normal(rng, 2)}
    cases.append(Case(_step_args(rng, small, 6), "N = the number of parameters (6): one element each"))
    cases.append(Case(_step_args(rng, _params(rng, widths=[5, 6, 3]), 8), "8 workers"))
    params32 = _params(rng, dtype=np.float32)
    cases.append(Case(_step_args(rng, params32, _uneven_workers(rng, _size(params32))),
                      "float32 parameters, gradients and state", **FLOAT32))
    ordered = _params(rng, widths=[3, 4, 2])
    N = int(rng.integers(3, 6))
    flat = order_revealing_vectors(rng, N, _size(ordered), lambda c: (c + 1, c + 2))
    args = _step_args(rng, ordered, N)
    args["worker_grads"] = [_as_tensors(vector, ordered) for vector in flat]
    cases.append(Case(args, f"{N} workers, gradients of 2**60 that only the reduce-scatter's order cancels "
                            f"before adding the others"))
    big = _params(rng, widths=[64, 128, 128, 32])  # 226 KiB of parameters: every worker's full moments keep 2.7 MiB
    cases.append(Case(_step_args(rng, big, 4), "memory measured: 28,960 parameters on 4 workers", measure=True))
    good = _step_args(rng, small, 3)
    grads, states = good["worker_grads"], good["worker_states"]
    # 8 workers for 6 parameters, with the states np.array_split would cut (two empty): only the check refuses it
    empty = [{"step": states[0]["step"], "m": np.zeros(n), "v": np.zeros(n)} for n in _shard_sizes(6, 8)]
    bad = [({"worker_grads": [], "worker_states": []}, "there are no workers"),
           ({"worker_grads": grads * 3, "worker_states": states * 3}, "there are more workers (9) than parameters (6)"),
           ({"worker_grads": grads * 2 + grads[:2], "worker_states": empty},
            "there are more workers (8) than parameters (6), with two empty state shards"),
           ({"worker_grads": [grads[0], {"W": grads[1]["W"]}, grads[2]]}, "worker 1's gradients have no b"),
           ({"worker_grads": [grads[0], grads[1], {"W": grads[2]["W"], "b": grads[2]["b"][:1]}]},
            "worker 2's b has another shape"),
           ({"worker_states": states[:2]}, "2 state shards for 3 workers"),
           ({"worker_states": [states[0], states[1], {**states[2], "m": np.zeros(3)}]},
            "worker 2's state shard has 3 elements, its shard 2"),
           ({"learning_rate": 0.0}, "the learning rate is 0"),
           ({"beta1": 1.0}, "beta1 is 1"),
           ({"beta2": -0.5}, "beta2 is negative")]
    cases += [Raises({**good, **change}, ValueError, why) for change, why in bad]
    return cases


def _as_tensors(vector, like):
    """``vector`` cut into arrays shaped like ``like``'s, in the dict's order."""
    out, offset = {}, 0
    for key, value in like.items():
        out[key] = vector[offset:offset + value.size].reshape(value.shape).copy()
        offset += value.size
    return out


def _grads_differ(a):
    params = a["params"]
    return any(g.keys() != params.keys() or any(g[k].shape != params[k].shape for k in params)
               for g in a["worker_grads"])


def _states_differ(a):
    N, states = len(a["worker_grads"]), a["worker_states"]
    if len(states) != N:
        return True
    sizes = _shard_sizes(_size(a["params"]), N)
    return any(s["m"].shape != (n,) or s["v"].shape != (n,) for s, n in zip(states, sizes))


def _workers_ok(a):
    return 1 <= len(a["worker_grads"]) <= _size(a["params"])


STEP_REFUSALS = (
    Refusal("no workers (worker_grads is empty)", ValueError, lambda a: len(a["worker_grads"]) == 0),
    Refusal("more workers than parameter elements", ValueError,
            lambda a: len(a["worker_grads"]) > _size(a["params"])),
    Refusal("a worker's gradients differ from params in keys or shapes", ValueError,
            lambda a: _workers_ok(a) and _grads_differ(a)),
    Refusal("worker_states is not N shards of the parameters", ValueError,
            lambda a: _workers_ok(a) and not _grads_differ(a) and _states_differ(a)),
    Refusal("learning_rate <= 0", ValueError, lambda a: a["learning_rate"] <= 0),
    Refusal("beta1 outside [0, 1)", ValueError, lambda a: _beta_outside(a["beta1"])),
    Refusal("beta2 outside [0, 1)", ValueError, lambda a: _beta_outside(a["beta2"])),
)

NO_WORKERS = "Cluster(0) refuses a cluster of no workers with ValueError itself, the error the contract asks for"
RING_INDEX = ("a Python list counts a negative index from its end, so chunks[i] is chunks[i % N] for -N <= i < N "
              "(the ranks and rounds here)")
STEP_EQUIVALENT = (
    *((f"{mutation} | if n < 1:", f"the check now lets N = 0 through (the only N < 1 a list can have), and {NO_WORKERS}")
      for mutation in ("constant 1 - 1", "constant 1 -> 0")),
    ('drop the `raise` | raise ValueError("worker_grads is empty: a step needs at least one worker")',
     f"with no workers the step goes on to its cluster, and {NO_WORKERS}"),
    ("drop the right operand of `%` | cluster.send(rank, (rank + 1) % n, chunks[rank][(rank - 1 - step) % n])",
     RING_INDEX),
    ("drop the right operand of `%` | index = (rank - 2 - step) % n", RING_INDEX),
)

STEP_MEMORY = MemoryBound(
    lambda args: zero_step_allowed_bytes(args["params"], len(args["worker_grads"])),
    rule="1.25 x (N + 2) x the parameters' bytes: each of the N workers keeps its parameters and its shard of "
         "Adam's state, the shards together one m and one v",
    shortcut="every worker keeping the full moments is data parallelism's memory, not ZeRO's: each worker keeps "
             "m and v of its own shard only (and returns them as arrays of their own, not views of full ones)",
    kind="kept")


LESSONS = (
    LessonSpec("031", init_cases, exact=True, corners=(
        Corner("NaN and inf in the parameters", lambda case: valid(case) and any_entry(case.args["params"], np.isnan)),
        Corner("float32 parameters", lambda case: valid(case) and all(
            value.dtype == np.float32 for value in case.args["params"].values())))),
    LessonSpec("032", partition_cases, exact=True, refuses=PARTITION_REFUSALS, memory=PARTITION_MEMORY,
               workers_apart=True, equivalent_mutants=PARTITION_EQUIVALENT),
    LessonSpec("033", update_cases, **FLOAT64_REORDERED, refuses=UPDATE_REFUSALS),
    LessonSpec("034", gather_cases, exact=True, refuses=GATHER_REFUSALS, workers_apart=True,
               on_cluster=OnCluster(lambda a: len(a["param_shards"])),
               equivalent_mutants=(FIRST_OR_LAST,)),
    LessonSpec("035", step_cases, **FLOAT64_REORDERED, refuses=STEP_REFUSALS, memory=STEP_MEMORY, workers_apart=True,
               on_cluster=OnCluster(lambda a: len(a["worker_grads"])),
               isolate=("local_shard_adam_update", "all_gather_param_shards"), helpers=("reduce_scatter_mean",),
               equivalent_mutants=STEP_EQUIVALENT),
)
