"""Hidden cases of Part 5 (lessons 025-030), declared once.

Each lesson's ``cases(rng)`` draws fresh inputs from the grader's generator;
the judge compares the learner's answers with the reference solutions on
exactly these inputs.  The collectives (027, 028, 030) and the step (029) run on
a cluster the grader makes and passes in (``OnCluster``): its ledger, read by the
grader after the call, is their traffic (bytes and messages per worker, rounds),
graded exactly beside the values, with every message received.  A "ring" that
gathers everything to one worker gives the right numbers and the wrong ledger; one
that computes with ``np.mean`` sends nothing.  The ring (028) and the buckets (030)
are compared bit for bit, on one case each where any other order of the additions
gives other bits (``grading.inputs``): each worker's result must come from what it
received.  The cases span
each contract: batches that N divides and batches it does not, N = 1 and
N = B, payloads that N divides and payloads it does not, float32 as well as
float64, bucket caps below, between and above the tensors' sizes, and every
class of bad input.  Lesson 029's memory case grades the technique: each
worker computes on its own shard only.
"""

import numpy as np

from grading.inputs import even_and_extreme_splits, order_revealing_vectors
from grading.spec import FLOAT32, FLOAT64_REORDERED, Case, LessonSpec, MemoryBound, OnCluster, Raises, Refusal
from shared import mlp
from shared.memory import data_parallel_step_allowed_bytes



def _normal(rng, shape, dtype=np.float64):
    return rng.standard_normal(shape).astype(dtype)


def _seed(rng):
    return int(rng.integers(0, 2**31))


def _uneven(rng, low=2, high=6, multiples=(2, 4)):
    """(B, N) with N in [low, high), B >= 2N and B % N != 0."""
    N = int(rng.integers(low, high))
    return N * int(rng.integers(*multiples)) + int(rng.integers(1, N)), N


# 025 shard_dataset_across_workers ------------------------------------------------

def shard_cases(rng):
    def case(B, N, about, dtype=np.float64):
        return Case({"X": _normal(rng, (B, 3), dtype), "Y": _normal(rng, (B, 2), dtype), "num_workers": N}, about)

    cases = []
    for _ in range(3):
        B, N = _uneven(rng)
        # B % N != 0: padding, dropping and contiguous blocks all differ from dealing
        cases.append(case(B, N, f"B = {B} is not a multiple of N = {N}"))
    cases += even_and_extreme_splits(rng, case, "N", "worker")  # B a multiple of N, N = B, N = 1
    B, N = _uneven(rng)
    # shards built in new float64 arrays (np.zeros, then the rows copied in) widen float32 data
    cases.append(case(B, N, f"float32 inputs (keep their dtype), B = {B}, N = {N}", np.float32))
    bad = [(3, 4, "there are more workers (4) than examples (3)"), (3, 0, "num_workers is 0"),
           (3, -int(rng.integers(1, 4)), "num_workers is negative")]
    cases += [Raises({"X": _normal(rng, (B, 2)), "Y": _normal(rng, (B, 1)), "num_workers": N}, ValueError, why)
              for B, N, why in bad]
    cases.append(Raises({"X": _normal(rng, (5, 2)), "Y": _normal(rng, (4, 1)), "num_workers": 2}, ValueError,
                        "X and Y have different lengths"))
    return cases


SHARD_REFUSALS = (
    Refusal("num_workers < 1", ValueError, lambda a: a["num_workers"] < 1),
    Refusal("X and Y have different lengths", ValueError, lambda a: len(a["X"]) != len(a["Y"])),
    Refusal("more workers than examples", ValueError,
            lambda a: len(a["X"]) == len(a["Y"]) and 1 <= a["num_workers"] and len(a["X"]) < a["num_workers"]),
)


# 026 compute_local_gradients -----------------------------------------------------

def _hidden(rng, low=1, high=3):
    return [int(n) for n in rng.integers(2, 6, size=int(rng.integers(low, high)))]


def local_cases(rng):
    def case(B, N, rank, about, hidden=None):
        params = mlp.init_params([3] + (hidden or _hidden(rng)) + [2], seed=_seed(rng))
        X, Y = _normal(rng, (B, 3)), _normal(rng, (B, 2))
        return Case({"params": params, "X_shard": X[rank::N], "Y_shard": Y[rank::N], "global_batch_size": B,
                     "num_workers": N}, about)

    cases = []
    for _ in range(2):
        B, N = _uneven(rng, 2, 5, (2, 4))
        # a worker with one example more than the average shard: its weight N n_r / B is not 1
        cases.append(case(B, N, 0, f"worker 0 of {N}, B = {B}: a larger shard than average"))
    B, N = _uneven(rng, 3, 6, (2, 4))
    cases.append(case(B, N, N - 1, f"the last of {N} workers, B = {B}: a smaller shard than average"))
    N = int(rng.integers(2, 5))
    cases.append(case(3 * N, N, int(rng.integers(0, N)), "equal shards: the weight is 1"))
    B = int(rng.integers(3, 9))
    cases.append(case(B, 1, 0, "N = 1: the whole batch"))
    cases.append(case(11, 4, 1, "a deeper MLP", hidden=[4, 3, 5, 2]))
    params = mlp.init_params([3, 4, 2], seed=0)
    # Y_shard of one row would broadcast against 3 outputs: only the check refuses it
    bad = [(_normal(rng, (3, 3)), _normal(rng, (1, 2)), 4, "X_shard has 3 rows and Y_shard has 1"),
           (_normal(rng, (2, 3)), _normal(rng, (4, 2)), 4, "X_shard has 2 rows and Y_shard has 4"),
           (_normal(rng, (0, 3)), _normal(rng, (0, 2)), 4, "the shard is empty"),
           (_normal(rng, (3, 3)), _normal(rng, (3, 2)), 0, "num_workers is 0"),
           (_normal(rng, (3, 3)), _normal(rng, (3, 2)), -2, "num_workers is negative")]
    cases += [Raises({"params": params, "X_shard": X, "Y_shard": Y, "global_batch_size": 12, "num_workers": N},
                     ValueError, why) for X, Y, N, why in bad]
    return cases


LOCAL_REFUSALS = (
    Refusal("X_shard and Y_shard have different lengths", ValueError,
            lambda a: len(a["X_shard"]) != len(a["Y_shard"])),
    Refusal("the shard is empty", ValueError, lambda a: len(a["X_shard"]) == 0),
    Refusal("num_workers < 1", ValueError, lambda a: a["num_workers"] < 1),
)


# 027 all_reduce_mean and 028 ring_all_reduce_mean --------------------------------

def _workers(rng, N, shape, dtype=np.float64):
    return [_normal(rng, shape, dtype) for _ in range(N)]


def naive_cases(rng):
    cases = []
    for _ in range(3):
        N = int(rng.integers(3, 7))
        shape = tuple(int(n) for n in rng.integers(1, 6, size=int(rng.integers(1, 3))))
        cases.append(Case({"worker_arrays": _workers(rng, N, shape)}, f"{N} workers, arrays of shape {shape}"))
    cases.append(Case({"worker_arrays": _workers(rng, 2, (int(rng.integers(2, 9)),))}, "2 workers"))
    cases.append(Case({"worker_arrays": _workers(rng, int(rng.integers(3, 6)), (3, 2), np.float32)},
                      "float32 arrays (4 bytes a number; keep the dtype)", **FLOAT32))
    cases.append(Case({"worker_arrays": _workers(rng, 3, (4,))}, "no cluster given: a new Cluster(N) of its own",
                      own_cluster=True))
    cases.append(Case({"worker_arrays": _workers(rng, 1, (4,))}, "one worker: nothing to send"))
    N = int(rng.integers(2, 6))
    cases.append(Case({"worker_arrays": _workers(rng, N, ())},
                      f"{N} workers, 0-d arrays (the mean of 0-d arrays is a NumPy scalar: an array again)"))
    cases.append(Case({"worker_arrays": _workers(rng, 1, (), np.float32)},
                      "one worker, a 0-d float32 array: a 0-d float32 array back"))
    cases += _bad_collective_cases(rng)
    return cases


def ring_cases(rng):
    cases = []
    N = int(rng.integers(3, 6))
    k = int(rng.integers(2, 5))
    # equal chunks first: a chunk-index off-by-one then gives wrong sums, not a crash
    cases.append(Case({"worker_arrays": _workers(rng, N, (N * k,))},
                      f"{N} workers, {N * k} numbers: N divides the length"))
    N = int(rng.integers(3, 6))
    length = N * int(rng.integers(1, 4)) + int(rng.integers(1, N))
    cases.append(Case({"worker_arrays": _workers(rng, N, (length,))},
                      f"{N} workers, {length} numbers: chunks of unequal length"))
    N = int(rng.integers(2, 5))
    shape = (int(rng.integers(2, 5)), int(rng.integers(2, 5)))
    cases.append(Case({"worker_arrays": _workers(rng, N, shape)}, f"{N} workers, 2-D arrays of shape {shape}"))
    cases.append(Case({"worker_arrays": _workers(rng, 2, (int(rng.integers(2, 9)),))}, "2 workers"))
    cases.append(Case({"worker_arrays": _workers(rng, 8, (int(rng.integers(20, 40)),))}, "8 workers"))
    cases.append(Case({"worker_arrays": _workers(rng, int(rng.integers(3, 6)), (7,), np.float32)},
                      "float32 arrays (4 bytes a number; keep the dtype)"))
    cases.append(Case({"worker_arrays": _workers(rng, 1, (5,))}, "one worker: nothing to send"))
    cases.append(Case({"worker_arrays": _workers(rng, 3, (5,))}, "no cluster given: a new Cluster(N) of its own",
                      own_cluster=True))
    for dtype in (np.float64, np.float32):
        N = int(rng.integers(3, 7))
        length = N * int(rng.integers(2, 5)) + int(rng.integers(0, N))
        cases.append(Case({"worker_arrays": order_revealing_vectors(rng, N, length, ring_order, dtype)},
                          f"{N} workers, {np.dtype(dtype).name}, numbers of 2**60 that only the ring's order of "
                          f"the additions cancels before adding the others (bit for bit)"))
    cases += _bad_collective_cases(rng)
    return cases


def ring_order(chunk):
    """Lesson 028's order: chunk c's sum starts with worker c's number, then worker c + 1's, ..."""
    return chunk, chunk + 1


def _bad_collective_cases(rng):
    # The odd worker out is the last one (2 workers, or 3 with the last array longer), and one in the middle of
    # N >= 3: a check that compares only the last worker's array with worker 0's, or that skips the last, loses
    # one of them.  The middle one has the same size, so that nothing but the check refuses it.
    N = int(rng.integers(3, 7))
    odd = int(rng.integers(1, N - 1))
    return [Raises({"worker_arrays": []}, ValueError, "worker_arrays is empty"),
            Raises({"worker_arrays": [_normal(rng, 3, np.float32 if rank == odd else np.float64) for rank in range(N)]},
                   ValueError, f"worker {odd} of {N} (not the last) has another dtype"),
            Raises({"worker_arrays": [_normal(rng, (3, 2) if rank == odd else (2, 3)) for rank in range(N)]},
                   ValueError, f"worker {odd} of {N} (not the last) has another shape of the same size"),
            Raises({"worker_arrays": [_normal(rng, 3), _normal(rng, 3), _normal(rng, 4)]}, ValueError,
                   "the workers' arrays have different shapes"),
            Raises({"worker_arrays": [_normal(rng, (2, 3)), _normal(rng, (3, 2))]}, ValueError,
                   "the workers' arrays have different shapes (same size)"),
            Raises({"worker_arrays": [_normal(rng, 3), _normal(rng, 3, np.float32)]}, ValueError,
                   "the workers' arrays have different dtypes")]


FIRST_OR_LAST = (
    "constant 0 - 1 | n, shape = len(worker_arrays), worker_arrays[0].shape",
    "check_worker_arrays has checked every array against worker 0's shape, so the last worker's shape serves "
    "as well as the first's")


def _shapes(a):
    return {array.shape for array in a["worker_arrays"]}


#: The collectives run on a cluster the grader makes: one worker per array (none for an empty list).
ON_WORKERS = OnCluster(lambda a: len(a["worker_arrays"]))


COLLECTIVE_REFUSALS = (
    Refusal("worker_arrays is empty", ValueError, lambda a: len(a["worker_arrays"]) == 0),
    Refusal("the workers' arrays differ in shape", ValueError, lambda a: len(_shapes(a)) > 1),
    Refusal("the workers' arrays differ in dtype", ValueError,
            lambda a: len(_shapes(a)) == 1 and len({array.dtype for array in a["worker_arrays"]}) > 1),
)


# 029 data_parallel_train_step ----------------------------------------------------

def step_cases(rng):
    def case(B, N, hidden, about, width=3, outputs=2, measure=False):
        return Case({"params": mlp.init_params([width] + hidden + [outputs], seed=_seed(rng)),
                     "X": _normal(rng, (B, width)), "Y": _normal(rng, (B, outputs)), "num_workers": N,
                     "learning_rate": 0.05}, about, measure=measure)

    cases = []
    for _ in range(3):
        B, N = _uneven(rng, 2, 6, (1, 4))
        # shards of unequal sizes tell weighted contributions from a mean of the shards' means
        cases.append(case(B, N, _hidden(rng), f"B = {B} is not a multiple of N = {N}"))
    cases.append(case(8, 4, _hidden(rng), "equal shards"))
    cases.append(case(int(rng.integers(2, 10)), 1, _hidden(rng), "N = 1: the plain full-batch step"))
    B = int(rng.integers(2, 7))
    cases.append(case(B, B, _hidden(rng), "N = B: one example per worker"))
    cases.append(Case(case(9, 3, _hidden(rng), "").args, "no cluster given: a new Cluster(N) of its own",
                      own_cluster=True))
    cases.append(case(int(rng.integers(7, 14)), 3, _hidden(rng, 4, 6), "a deeper MLP (4-5 hidden layers)"))
    params = mlp.init_params([2, 3, 1], seed=0)
    for B, N, why in ((3, 4, "there are more workers (4) than examples (3)"), (3, 0, "num_workers is 0")):
        cases.append(Raises({"params": params, "X": _normal(rng, (B, 2)), "Y": _normal(rng, (B, 1)),
                             "num_workers": N, "learning_rate": 0.1}, ValueError, why))
    # large enough that one shard's activations and the whole batch's differ by megabytes
    B, D, L, N = 2048, 64, 4, 4
    cases.append(case(B, N, [D] * (L - 1), f"memory measured: B = {B}, width {D}, {L} layers, N = {N}",
                      width=D, outputs=4, measure=True))
    return cases


STEP_REFUSALS = (
    Refusal("num_workers < 1", ValueError, lambda a: a["num_workers"] < 1),
    Refusal("more workers than examples", ValueError, lambda a: 1 <= a["num_workers"] and len(a["X"]) < a["num_workers"]),
)

STEP_MEMORY = MemoryBound(
    lambda args: data_parallel_step_allowed_bytes(args["params"], args["X"], args["num_workers"]),
    rule="1.5 x one worker's shard activations, plus four parameter-sized dicts per worker",
    shortcut="each worker computes on its own shard only (compute_local_gradients on the worker's shard, one "
             "worker after another); a forward and backward pass over the whole batch on one worker costs N "
             "times the activation memory, which is what data parallelism saves")


# 030 bucket_gradients ------------------------------------------------------------

def _grad_shapes(rng, layers):
    widths = [int(n) for n in rng.integers(2, 7, size=layers + 1)]
    shapes = {}
    for i in range(1, layers + 1):
        shapes[f"W{i}"] = (widths[i - 1], widths[i])
        shapes[f"b{i}"] = (widths[i],)
    return shapes


def _worker_grads(rng, N, shapes, dtype=np.float64):
    return [{key: _normal(rng, shape, dtype) for key, shape in shapes.items()} for _ in range(N)]


TIES = {"W1": (4, 4), "b1": (4,), "W2": (3, 4), "b2": (8,), "W3": (2, 9), "b3": (2,)}


def bucket_cases(rng):
    def case(N, shapes, cap, about, dtype=np.float64, **tolerances):
        return Case({"worker_grads": _worker_grads(rng, N, shapes, dtype), "bucket_cap_bytes": cap}, about,
                    **tolerances)

    cases = []
    # first: a cap that the largest weight exceeds and that two biases and a weight share, so that
    # forward order, overflowing, counting numbers and no bucketing all give other buckets
    shapes = {"W1": (5, 6), "b1": (6,), "W2": (6, 4), "b2": (4,), "W3": (4, 3), "b3": (3,)}
    cases.append(case(int(rng.integers(2, 5)), shapes, 200,
                      "a cap of 200 bytes: W1 (240 bytes) alone, the others packed"))
    for _ in range(2):
        shapes = _grad_shapes(rng, int(rng.integers(2, 5)))
        sizes = sorted(8 * int(np.prod(s)) for s in shapes.values())
        cap = int(rng.integers(sizes[len(sizes) // 2], 2 * sizes[-1]))
        cases.append(case(int(rng.integers(2, 6)), shapes, cap, f"a cap of {cap} bytes, between the tensors' sizes"))
    shapes = _grad_shapes(rng, 3)
    cases.append(case(int(rng.integers(2, 5)), shapes, 1, "a cap of 1 byte: one bucket per tensor"))
    # buckets that fill the cap exactly (160 = 16 + 144 = 64 + 96 = 32 + 128), and one byte less
    for cap in (160, 159):
        cases.append(case(int(rng.integers(2, 5)), TIES, cap, f"a cap of {cap} bytes: buckets of exactly 160 bytes"))
    shapes = _grad_shapes(rng, 3)
    cases.append(case(int(rng.integers(2, 5)), shapes, 10**6, "a cap larger than all gradients: one bucket"))
    shapes = _grad_shapes(rng, 3)
    sizes = sorted(4 * int(np.prod(s)) for s in shapes.values())
    cases.append(case(int(rng.integers(3, 6)), shapes, sizes[-2] + sizes[-3],
                      "float32 gradients (4 bytes a number)", np.float32))
    cases.append(case(1, _grad_shapes(rng, 2), 64, "one worker"))
    cases.append(Case(case(3, _grad_shapes(rng, 2), 64, "").args, "no cluster given: a new Cluster(N) of its own",
                      own_cluster=True))
    N = int(rng.integers(3, 6))
    ordered = order_revealing_vectors(rng, N, N * int(rng.integers(2, 5)) + 1, ring_order)
    cases.append(Case({"worker_grads": [{"W1": vector[1:].reshape(-1, 1), "b1": vector[:1]} for vector in ordered],
                       "bucket_cap_bytes": 10**6},
                      f"{N} workers, one bucket (b1 then W1, from the last key) of numbers of 2**60 that only "
                      f"the ring's order cancels first (bit for bit)"))
    grads = _worker_grads(rng, 2, {"W1": (2, 3), "b1": (3,)})
    # the odd worker out in the middle of N >= 3 as well as last (worker 1 of 2): a check of the last worker's
    # gradients only, or one that skips the last, loses one of them
    N = int(rng.integers(3, 6))
    odd = int(rng.integers(1, N - 1))
    many = _worker_grads(rng, N, {"W1": (2, 3), "b1": (3,)})
    extra = [{**g, "b0": _normal(rng, 3)} if rank == odd else g for rank, g in enumerate(many)]
    turned = [{"W1": g["W1"].T.copy(), "b1": g["b1"]} if rank == odd else g for rank, g in enumerate(many)]
    cases += [Raises({"worker_grads": extra, "bucket_cap_bytes": 64}, ValueError,
                     f"worker {odd} of {N} (not the last) has a key more"),
              Raises({"worker_grads": turned, "bucket_cap_bytes": 64}, ValueError,
                     f"worker {odd} of {N}'s (not the last) W1 has another shape")]
    cases += [Raises({"worker_grads": grads, "bucket_cap_bytes": 0}, ValueError, "bucket_cap_bytes is 0"),
              Raises({"worker_grads": grads, "bucket_cap_bytes": -int(rng.integers(1, 100))}, ValueError,
                     "bucket_cap_bytes is negative"),
              Raises({"worker_grads": [], "bucket_cap_bytes": 64}, ValueError, "worker_grads is empty"),
              Raises({"worker_grads": [grads[0], {"W1": grads[1]["W1"]}], "bucket_cap_bytes": 64}, ValueError,
                     "worker 1's gradients have other keys"),
              Raises({"worker_grads": [grads[0], {"W1": grads[1]["W1"].T, "b1": grads[1]["b1"]}],
                      "bucket_cap_bytes": 64}, ValueError, "worker 1's W1 has another shape")]
    return cases


def _mismatched(a):
    first = a["worker_grads"][0]
    return any(g.keys() != first.keys() or any(g[k].shape != first[k].shape for k in first)
               for g in a["worker_grads"])


BUCKET_REFUSALS = (
    Refusal("bucket_cap_bytes <= 0", ValueError, lambda a: a["bucket_cap_bytes"] <= 0),
    Refusal("worker_grads is empty", ValueError, lambda a: a["bucket_cap_bytes"] > 0 and len(a["worker_grads"]) == 0),
    Refusal("the workers' gradients differ in keys or shapes", ValueError,
            lambda a: a["bucket_cap_bytes"] > 0 and _mismatched(a)),
)


LESSONS = (
    LessonSpec("025", shard_cases, refuses=SHARD_REFUSALS, fresh_result=False),  # shards may be views of X and Y
    LessonSpec("026", local_cases, **FLOAT64_REORDERED, refuses=LOCAL_REFUSALS, equivalent_mutants=(
        ("`float(x)` -> `x` | return float(weight * mean_loss)",
         "mlp.loss_and_grads gives the loss as a Python float, and a float times a float is one"),)),
    LessonSpec("027", naive_cases, **FLOAT64_REORDERED, refuses=COLLECTIVE_REFUSALS, workers_apart=True,
               on_cluster=OnCluster(ON_WORKERS.workers, results_received=True)),
    LessonSpec("028", ring_cases, exact=True, refuses=COLLECTIVE_REFUSALS, workers_apart=True, on_cluster=ON_WORKERS,
               equivalent_mutants=(
        FIRST_OR_LAST,
        *((f"drop the right operand of `%` | {line}",
           "a Python list counts a negative index from its end, so chunks[r - s] is chunks[(r - s) % N] "
           "for -N < r - s < N (the ranks and steps here)")
          for line in ("chunks[rank][(rank - step) % n])", "index = (rank - 1 - step) % n",
                       "chunks[rank][(rank - step) % n] = cluster.receive")))),
    LessonSpec("029", step_cases, **FLOAT64_REORDERED, refuses=STEP_REFUSALS, memory=STEP_MEMORY, workers_apart=True,
               on_cluster=OnCluster(lambda a: a["num_workers"]),
               isolate=("shard_dataset_across_workers", "compute_local_gradients", "ring_all_reduce_mean"),
               equivalent_mutants=(
        ("`float(x)` -> `x` | return worker_params, float(sum(losses) / num_workers)",
         "compute_local_gradients gives each loss as a Python float, and their sum divided by an int is one"),)),
    LessonSpec("030", bucket_cases, exact=True, refuses=BUCKET_REFUSALS, workers_apart=True,
               on_cluster=OnCluster(lambda a: len(a["worker_grads"])),
               isolate=("ring_all_reduce_mean",), equivalent_mutants=(
        ("constant 0 - 1 | first = worker_grads[0]",
         "every worker's gradients have been checked to have the same keys and shapes, and the contract "
         "gives them in one parameter order, so the last worker's describe the tensors as well as the first's"),
        ("`list(x)` -> `x` | for key in reversed(list(first)):",
         "a dict can be reversed directly (Python 3.8+), in the same order as the list of its keys"))),
)
