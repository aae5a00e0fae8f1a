"""Hidden cases of Part 3 (lessons 015-018), declared once.

Each lesson's ``cases(rng)`` draws fresh inputs from the grader's generator;
the judge compares the learner's answers with the reference solutions on
exactly these inputs.  The cases span each contract: segment sizes 1, between
1 and L, equal to L and beyond it; segments that start at the input and in the
middle, that end inside the network and at its output; and every class of bad
input.  Biases are perturbed so that every layer's ReLU mask has both signs.
"""

from grading.spec import FLOAT64_LONG_SUMS, Case, Corner, LessonSpec, MemoryBound, Raises, Refusal, valid
from shared import mlp


def _normal(rng, shape):
    return rng.standard_normal(shape)


def _params(rng, widths):
    """The helper MLP with layer widths ``widths``, biases made nonzero so ReLU masks vary."""
    params = mlp.init_params(widths, seed=int(rng.integers(0, 2**31)))
    return {key: value + 0.5 * _normal(rng, value.shape) if key[0] == "b" else value
            for key, value in params.items()}


def _network(rng, L, widths=None):
    """(X, params) for an L-layer MLP of equal width D (or the given widths) and a few outputs."""
    widths = widths or [int(rng.integers(1, 6))] * L + [int(rng.integers(1, 4))]
    return _normal(rng, (int(rng.integers(1, 7)), widths[0])), _params(rng, widths)


def _depth(rng, low=2, high=8):
    return int(rng.integers(low, high))


def _segment_sizes(rng):
    """(L, s, about) for s = 1, 1 < s < L, s = L, s > L and two random pairs."""
    L = [_depth(rng), _depth(rng, 3), _depth(rng), _depth(rng), _depth(rng), _depth(rng)]
    s = [1, int(rng.integers(2, L[1])), L[2], L[3] + int(rng.integers(1, 4)),
         int(rng.integers(1, L[4] + 2)), int(rng.integers(1, L[5] + 2))]
    about = ["s = 1: every layer's input is a checkpoint",
             "1 < s < L (a shorter last segment when s does not divide L)",
             "s = L: one segment", "s > L: one segment", "random L and s", "random L and s"]
    return zip(L, s, about)


SEGMENT_REFUSAL = Refusal("segment_size < 1", ValueError, lambda a: a["segment_size"] < 1)


# 015 mlp_forward_checkpointed --------------------------------------------------

def forward_cases(rng):
    cases = []
    for L, s, about in _segment_sizes(rng):
        X, params = _network(rng, L)
        cases.append(Case({"X": X, "params": params, "segment_size": s}, f"L = {L}, {about}"))
    X, params = _network(rng, 1)
    cases.append(Case({"X": X, "params": params, "segment_size": 1}, "a single layer: only X is kept"))
    # unequal widths: checkpointing Z or the wrong A shows in the shapes too
    X, params = _network(rng, 4, [3, 5, 2, 4, 2])
    cases.append(Case({"X": X, "params": params, "segment_size": 2}, "unequal layer widths"))
    X, params = _network(rng, 3)
    cases.append(Raises({"X": X, "params": params, "segment_size": 0}, ValueError, "segment_size is 0"))
    cases.append(Raises({"X": X, "params": params, "segment_size": -int(rng.integers(1, 4))},
                        ValueError, "segment_size is negative"))
    for segment in (MEMORY_SEGMENT, MEMORY_LAYERS):
        X, params = _memory_network(rng)
        cases.append(Case({"X": X, "params": params, "segment_size": segment}, _memory_about(segment), measure=True))
    return cases


# 016 recompute_block_activations -----------------------------------------------

def recompute_cases(rng):
    def case(L, start, end, about):
        X, params = _network(rng, L)
        _, cache = mlp.forward(X, params)
        return Case({"checkpoint": cache[f"A{start}"], "params": params, "start_layer": start,
                     "end_layer": end}, f"L = {L}, layers {start + 1}..{end}: {about}")

    cases = []
    L = _depth(rng, 3)
    cases.append(case(L, 0, int(rng.integers(1, L)), "from the input to a hidden layer"))
    L = _depth(rng)
    cases.append(case(L, 0, L, "the whole network (the output layer is not recomputed)"))
    L = _depth(rng, 4)
    start = int(rng.integers(1, L - 2))
    # an interior start: layer i uses W_i, so an off-by-one in the weights' index shows here
    cases.append(case(L, start, int(rng.integers(start + 1, L)), "an interior segment"))
    L = _depth(rng)
    cases.append(case(L, int(rng.integers(1, L)), L, "an interior start to the output"))
    L = _depth(rng)
    cases.append(case(L, L - 1, L, "only the output layer: nothing to recompute but the checkpoint"))
    for _ in range(2):
        L = _depth(rng)
        start = int(rng.integers(0, L))
        cases.append(case(L, start, int(rng.integers(start + 1, L + 1)), "random segment"))
    return cases


# 017 mlp_backward_checkpointed -------------------------------------------------

def backward_cases(rng):
    from shared import lesson_blocks  # the helper's checkpointed forward makes valid checkpoints
    cases = []
    for L, s, about in list(_segment_sizes(rng)) + [(1, 1, "a single layer")]:
        X, params = _network(rng, L)
        _, checkpoints = lesson_blocks.mlp_forward_checkpointed(X, params, s)
        d_out = _normal(rng, (len(X), params[f"b{L}"].shape[0]))
        # s < L puts segment boundaries inside the network, where the ReLU mask is easily skipped
        cases.append(Case({"d_out": d_out, "params": params, "checkpoints": checkpoints, "segment_size": s},
                          f"L = {L}, {about}"))
    for segment in (MEMORY_SEGMENT, MEMORY_SEGMENT + 1):
        X, params = _memory_network(rng)
        _, checkpoints = lesson_blocks.mlp_forward_checkpointed(X, params, segment)
        cases.append(Case({"d_out": _normal(rng, (len(X), 4)), "params": params, "checkpoints": checkpoints,
                           "segment_size": segment}, _memory_about(segment), measure=True))
    return cases


# The memory cases of 015 and 017: one (batch, width) array is a megabyte, and the network is deep enough that
# keeping every layer's activation cannot hide in the room the bounds leave for one segment and the working
# space.  With 8 layers it could: 017 recomputing the whole forward from X, keeping each A (not Z), then an
# ordinary backward peaked at 0.92 of its bound and earned the points.  With 16 layers, every answer that keeps
# all the activations needs 1.5 to 7 times its bound (tests/test_technique.py requires 1.4).  Tall and narrow
# (4096 x 32, not 1024 x 128): 017's allowance for the gradients (twice the parameters) grows with the depth
# times the width squared, and at 16 layers of width 128 it was four arrays, room for two segments alive at once.
MEMORY_BATCH, MEMORY_WIDTH, MEMORY_LAYERS, MEMORY_SEGMENT = 4096, 32, 16, 2


def _memory_network(rng):
    return _normal(rng, (MEMORY_BATCH, MEMORY_WIDTH)), _params(rng, [MEMORY_WIDTH] * MEMORY_LAYERS + [4])


def _memory_about(segment):
    return (f"memory measured: batch {MEMORY_BATCH}, width {MEMORY_WIDTH}, {MEMORY_LAYERS} layers, "
            + (f"segments of {segment}" if segment < MEMORY_LAYERS else "one segment: only X is kept"))


def _activation_bytes(args):
    """Bytes of one (batch, width) activation array of a case."""
    first = args["X"] if "X" in args else args["checkpoints"][0]
    return first.shape[0] * first.shape[1] * first.itemsize


def _layers(args):
    return sum(1 for key in args["params"] if key[0] == "W")


def _output_bytes(args):
    """Bytes of the network's output, (batch, outputs)."""
    first, last = args["X"], args["params"][f"b{_layers(args)}"]
    return first.shape[0] * last.shape[0] * first.itemsize


FORWARD_MEMORY = MemoryBound(
    lambda args: (-(-_layers(args) // args["segment_size"]) - 1 + 4) * _activation_bytes(args)
    + 2 * _output_bytes(args) + 64 * 1024,
    rule="the stored checkpoints (one per segment after the first) plus four activation arrays "
         "of working space, the output twice (z, then z + b) and 64 KiB for small objects",
    shortcut="keep only each segment's input activation while you go forward; storing every layer's "
             "activations and picking the checkpoints afterwards saves nothing")

BACKWARD_MEMORY = MemoryBound(
    lambda args: (2 * min(args["segment_size"], _layers(args) - 1) + 5) * _activation_bytes(args)
    + 2 * sum(value.nbytes for value in args["params"].values()),
    rule="one recomputed segment (Z and A of each of its layers) plus five activation arrays of working "
         "space, plus the gradients",
    shortcut="recompute one segment at a time, use it, and let it go before the next one; recomputing "
             "the whole network (or every segment) first stores as much as no checkpointing at all")


# 018 estimate_checkpointing_memory_savings -------------------------------------

NAMES = ("batch_size", "width", "num_layers", "segment_size", "bytes_per_element")


def estimate_cases(rng):
    def case(B, D, L, s, b, about=""):
        return Case(dict(zip(NAMES, (B, D, L, s, b))), about)

    cases = []
    for _ in range(4):
        L = _depth(rng, 2, 40)
        cases.append(case(int(rng.integers(1, 5000)), int(rng.integers(1, 300)), L,
                          int(rng.integers(1, L + 3)), int(rng.choice([2, 4, 8])), "random sizes"))
    L = _depth(rng, 3, 40)
    # s does not divide L: a last, shorter segment still needs its checkpoint (ceil, not floor)
    cases.append(case(int(rng.integers(1, 5000)), int(rng.integers(1, 300)), L, L - 1, 4, "s = L - 1"))
    L = _depth(rng, 2, 40)
    cases.append(case(int(rng.integers(1, 5000)), int(rng.integers(1, 300)), L, L, 8, "s = L: no checkpointing"))
    cases.append(case(1, 1, 1, 1, 1, "all ones"))
    for i, name in enumerate(NAMES):
        for bad in (0, -int(rng.integers(1, 10))):
            args = [10, 10, 4, 2, 8]
            args[i] = bad
            cases.append(Raises(dict(zip(NAMES, args)), ValueError, f"{name} is {'0' if bad == 0 else 'negative'}"))
    return cases


ESTIMATE_REFUSALS = tuple(Refusal(f"{name} < 1", ValueError, lambda a, name=name: a[name] < 1) for name in NAMES)


LESSONS = (
    LessonSpec("015", forward_cases, **FLOAT64_LONG_SUMS, refuses=(SEGMENT_REFUSAL,), fresh_result=False, memory=FORWARD_MEMORY,  # the checkpoints hold X itself
               equivalent_mutants=(
        ("`<` -> `<=` | if i < num_layers:",
         "it only adds a ReLU after the last layer, whose result `a` is never used again (z is returned)"),
        ("swap the first two arguments of `maximum` | a = np.maximum(z, 0)",
         "np.maximum is symmetric in its two arguments (and keeps the array's dtype either way)"))),
    LessonSpec("016", recompute_cases, **FLOAT64_LONG_SUMS, corners=(
        Corner("from the input (the checkpoint is X, A0)", lambda case: valid(case) and case.args["start_layer"] == 0),
        Corner("the output layer alone (the cache is the checkpoint)", lambda case: valid(case) and case.args[
            "start_layer"] == mlp.num_layers(case.args["params"]) - 1),
        Corner("an interior start", lambda case: valid(case) and 0 < case.args["start_layer"] < mlp.num_layers(
            case.args["params"]) - 1)), fresh_result=False,  # the result holds the checkpoint itself
               equivalent_mutants=(
        ("swap the first two arguments of `min` | last_hidden = min(end_layer, mlp.num_layers(params) - 1)",
         "min is symmetric in its two arguments"),
        ("swap the first two arguments of `maximum` | a = np.maximum(z, 0)",
         "np.maximum is symmetric in its two arguments (and keeps the array's dtype either way)"))),
    LessonSpec("017", backward_cases, **FLOAT64_LONG_SUMS, memory=BACKWARD_MEMORY,
               isolate=("mlp_forward_checkpointed", "recompute_block_activations"),
               equivalent_mutants=(
        ("swap the first two arguments of `min` | end = min(start + segment_size, num_layers)",
         "min is symmetric in its two arguments"),
        *((f"{mutation} | if i > 1:",
           "it only adds the gradient for layer 0's input at the very end, which nothing uses")
          for mutation in ("`>` -> `>=`", "constant 1 - 1", "constant 1 -> 0")))),
    LessonSpec("018", estimate_cases, refuses=ESTIMATE_REFUSALS, equivalent_mutants=(
        ("swap the first two arguments of `min` | recomputed = 2 * min(segment_size, num_layers - 1)",
         "min is symmetric in its two arguments"),
        ("`int(x)` -> `x` | return {\"standard_bytes\": int(standard), \"checkpointed_bytes\": int(checkpointed),",
         "standard and checkpointed are already ints (products and sums of ints)"))),
)
