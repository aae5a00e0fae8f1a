"""Common mistakes of Part 7 (lessons 036-040), each a wrong version of the function.

The accounting mistakes (036-039) count with the wrong bytes, the wrong shard or the wrong
sum; they build on the helper's versions of the lessons they do not get wrong
(``shared.lesson_blocks``).  The loop's mistakes (040) are the loop with one building block
changed (:func:`_flawed_loop`, which has no flawless form): one worker, no ZeRO sharding, no
mixed precision, 026's weight left out, the loss scale left in or divided out twice, a skipped
step that still updates the state.  Each shows in what the workers hold or in the history.

No function here computes a lesson's right answer: the factories take every parameter without
a default (only wrong settings are given), and 038's function takes the mistake as a required
keyword argument (``_twists.twisted`` makes one catalogue entry per mistake of it).  The loops
that give the right numbers at a cost in memory (checkpointing or accumulation ignored, the
whole state on every worker under ZeRO) are graded by the measured peak, not named by their
answer: they are the catalogue's shortcuts (``tests/plausible.py``).
"""

from __future__ import annotations

import numpy as np

from ..checking import Mistake
from ..cluster import Cluster
from ..dtypes import BYTES_PER_NUMBER
from ..training import reduce_scatter_mean
from ._twists import check_mistake, twisted


def _blocks():
    from .. import lesson_blocks  # late: lesson_blocks is generated from the masters
    return lesson_blocks


def _owned(num_params, num_workers, rank, remainder=True):
    return num_params // num_workers + (1 if remainder and rank < num_params % num_workers else 0)


# 036 compute_param_memory_bytes -------------------------------------------------------

def _param_bytes(*, half, remainder, grads_from, params_from):
    def compute(num_params, dtype, zero_stage=0, num_workers=1, rank=0):
        size = half if dtype in ("mixed", "float16") else BYTES_PER_NUMBER[dtype]
        owned = _owned(num_params, num_workers, rank, remainder)
        return {"parameters": size * (owned if zero_stage >= params_from else num_params),
                "gradients": size * (owned if zero_stage >= grads_from else num_params)}
    return compute


# 037 compute_optimizer_memory_bytes ---------------------------------------------------

def _optimizer_bytes(*, mixed, half, remainder, shard):
    def compute(num_params, dtype, zero_stage=0, num_workers=1, rank=0):
        per_param = mixed if dtype == "mixed" else 2 * (half if dtype == "float16" else BYTES_PER_NUMBER[dtype])
        owned = _owned(num_params, num_workers, rank, remainder)
        return per_param * (owned if shard and zero_stage >= 1 else num_params)
    return compute


# 038 compute_peak_activation_memory_bytes ---------------------------------------------

_ACTIVATION_MISTAKES = ("summed", "no checkpointing", "float32 activations", "no input copy")


def _activation_bytes(batch_size, width, num_layers, dtype, segment_size=None, num_micro_batches=1, *, mistake):
    """038 with ``mistake`` made, one of _ACTIVATION_MISTAKES: every micro-batch's activations added up,
    segment_size ignored, 4 bytes a number in mixed precision's passes, or their float16 input left out."""
    check_mistake(mistake, _ACTIVATION_MISTAKES)
    mixed_bytes = 4 if mistake == "float32 activations" else 2

    def peak(rows):
        """The activations alive at the backward peak of a micro-batch of ``rows`` rows (018's estimate)."""
        size = mixed_bytes if dtype == "mixed" else BYTES_PER_NUMBER[dtype]
        segment = num_layers if segment_size is None or mistake == "no checkpointing" else segment_size
        bytes_ = _blocks().estimate_checkpointing_memory_savings(rows, width, num_layers, segment,
                                                                 size)["checkpointed_bytes"]
        input_copy = dtype == "mixed" and mistake != "no input copy"
        return bytes_ + (rows * width * mixed_bytes if input_copy else 0)

    if not 1 <= num_micro_batches <= batch_size:
        raise ValueError(f"{num_micro_batches} micro-batches do not fit a batch of {batch_size} rows")
    if mistake == "summed":  # every micro-batch's activations added up
        sizes = [len(part) for part in np.array_split(np.empty(batch_size, np.int8), num_micro_batches)]
        return sum(peak(rows) for rows in sizes)
    return peak(-(-batch_size // num_micro_batches))


# 039 compare_memory_with_and_without_optimizations ------------------------------------

def _accumulation_buffers(row) -> int:
    """039's gradient buffers of a row, in units of 036's gradients: the micro-batch's own, and with
    k > 1 the running sum (float32 in mixed precision: twice float16's bytes)."""
    if row.num_micro_batches == 1:
        return 1
    return 3 if row.mixed_precision else 2


def _compare(*, gradient_buffers, rows_of_worker, measure_config):
    """039 with one step changed: ``gradient_buffers(row)`` counts the gradient buffers, worker 0's rows
    (or the whole batch's), each row's configuration measured (or ``config``'s)."""
    def compare(params, X, Y, config):
        from ..training import configurations_to_compare, measure_worker_memory
        blocks = _blocks()
        layers, width = sum(1 for key in params if key.startswith("W")), X.shape[1]
        rows = configurations_to_compare(config)
        num_params = sum(value.size for value in params.values())
        table = []
        for name, row in rows:
            dtype = "mixed" if row.mixed_precision else params["W1"].dtype.name
            memory = blocks.compute_param_memory_bytes(num_params, dtype, row.zero_stage, row.num_workers)
            examples = len(X[0::row.num_workers]) if rows_of_worker else len(X)
            entry = {"configuration": name, "parameters": memory["parameters"],
                     "gradients": memory["gradients"] * gradient_buffers(row),
                     "optimizer": blocks.compute_optimizer_memory_bytes(num_params, dtype, row.zero_stage,
                                                                        row.num_workers),
                     "activations": blocks.compute_peak_activation_memory_bytes(
                         examples, width, layers, dtype, row.segment_size, row.num_micro_batches)}
            entry["predicted"] = entry["parameters"] + entry["gradients"] + entry["optimizer"] + entry["activations"]
            entry["measured"] = measure_worker_memory(params, X, Y, config if measure_config else row)
            table.append(entry)
        return table
    return compare


# 040 full_distributed_training_loop ---------------------------------------------------

#: The flaws of lesson 040's loop that the catalogue names, each one building block changed: the
#: workers (one), ZeRO's sharding (none), mixed precision (none), 026's weight (none), the unscaling
#: (none, or twice), and the loss scaler's skip (the state still updated).
LOOP_FLAWS = ("one worker", "no sharding", "no mixed precision", "unweighted", "not unscaled", "unscaled twice",
              "skip updates the state")


def _loss_scale_after(scale, clean, skipped, growth_interval):
    """Dynamic loss scaling (Part 4): the scale and the count of clean steps in a row after a step.
    A skipped step halves the scale; growth_interval clean steps in a row double it."""
    if skipped:
        return scale / 2, 0
    clean += 1
    return (scale * 2, 0) if clean == growth_interval else (scale, clean)


def _flawed_loop(flaw, params, X, Y, config, cluster=None):
    """Lesson 040's loop with ``flaw`` (one of LOOP_FLAWS; there is no flawless one)."""
    from ..training import worker_gradients
    if flaw not in LOOP_FLAWS:
        raise ValueError(f"unknown flaw {flaw!r}: one of {LOOP_FLAWS}")
    blocks = _blocks()
    N = 1 if flaw == "one worker" else config.num_workers
    zero = config.zero_stage == 1 and flaw != "no sharding"
    mixed = config.mixed_precision and flaw != "no mixed precision"
    keys, size = list(params), sum(value.size for value in params.values())
    if len(X) != len(Y) or N > len(X) or config.num_micro_batches > len(X) // N or (zero and N > size):
        raise ValueError("the configuration does not fit the data")
    if cluster is None or flaw == "one worker":
        cluster = Cluster(N)
    shards = blocks.shard_dataset_across_workers(X, Y, N)
    flat = np.concatenate([params[key].ravel() for key in keys])
    cuts = np.cumsum([0] + [len(part) for part in np.array_split(flat, N)])
    own = [(cuts[r], cuts[r + 1]) if zero else (0, size) for r in range(N)]
    vectors = [flat.astype(np.float16) if mixed else flat.copy() for _ in range(N)]
    master = [flat[lo:hi].astype(np.float32) for lo, hi in own] if mixed else None
    kind = np.float32 if mixed else flat.dtype
    states = [{"step": 0, "m": np.zeros(hi - lo, kind), "v": np.zeros(hi - lo, kind)} for lo, hi in own]

    def tensors(vector):
        sizes = np.cumsum([0] + [params[key].size for key in keys])
        return {key: vector[sizes[i]:sizes[i + 1]].reshape(params[key].shape) for i, key in enumerate(keys)}

    divisions = {"not unscaled": 0, "unscaled twice": 2}.get(flaw, 1)
    scale, clean = config.loss_scale if mixed else 1.0, 0
    history = {"loss": [], "skipped": [], "loss_scale": []}
    for _ in range(config.steps):
        flat_grads, loss = [], 0.0
        for r, (X_r, Y_r) in enumerate(shards):
            loss_r, grads, _ = worker_gradients(tensors(vectors[r]), X_r, Y_r,
                                                config.num_micro_batches, config.segment_size,
                                                scale if mixed else None)
            weight = 1.0 if flaw == "unweighted" else N * len(X_r) / len(X)
            flat_grads.append(np.concatenate([weight * grads[key].ravel() for key in keys]))
            loss += weight * loss_r / N
        with np.errstate(over="ignore", invalid="ignore"):
            if zero:
                reduced, _ = reduce_scatter_mean(flat_grads, cluster)
            else:
                reduced, _ = blocks.ring_all_reduce_mean(flat_grads, cluster)
            updates = []
            for r in range(N):
                grad = reduced[r].astype(np.float32) if mixed else reduced[r]
                for _ in range(divisions if mixed else 0):
                    grad = grad / np.float32(scale)
                mine = master[r] if mixed else vectors[r][own[r][0]:own[r][1]]
                updates.append(blocks.local_shard_adam_update(mine, grad, states[r], config.learning_rate,
                                                              config.beta1, config.beta2, config.eps))
            new = [shard.astype(np.float16) if mixed else shard for shard, _ in updates]
            if zero:
                new, _ = blocks.all_gather_param_shards(new, cluster)
            skipped = bool(mixed and not all(np.isfinite(vector).all() for vector in new))
        history["loss"].append(float(loss))
        history["skipped"].append(skipped)
        history["loss_scale"].append(float(scale))
        # A clean step keeps what it computed; a skipped one keeps nothing (with the flaw: the moments
        # and the master weights take the non-finite step all the same).
        if not skipped or flaw == "skip updates the state":
            states = [state for _, state in updates]
            if mixed:
                master = [shard for shard, _ in updates]
        if not skipped:
            vectors = new
        if mixed:
            scale, clean = _loss_scale_after(scale, clean, skipped, config.growth_interval)
    workers = [{"parameters": vectors[r], "m": states[r]["m"], "v": states[r]["v"]} for r in range(N)]
    if mixed:
        for r in range(N):
            workers[r]["master"] = master[r]
    final = (np.concatenate(master) if zero else master[0]) if mixed else vectors[0]
    return {key: value.copy() for key, value in tensors(final).items()}, history, workers


def _loop_with(flaw):
    """Lesson 040's loop with ``flaw``, with the graded function's arguments."""
    if flaw not in LOOP_FLAWS:
        raise ValueError(f"unknown flaw {flaw!r}: one of {LOOP_FLAWS}")

    def loop(params, X, Y, config, cluster=None):
        return _flawed_loop(flaw, params, X, Y, config, cluster)
    return loop


MISTAKES = {
    "compute_param_memory_bytes": (
        Mistake("float32 bytes for float16 tensors",
                "A float16 number takes 2 bytes, and mixed precision's working parameters and gradients are "
                "float16: count 2 bytes each, not 4.",
                _param_bytes(half=4, remainder=True, grads_from=2, params_from=3)),
        Mistake("the remainder dropped (every worker owns num_params // N)",
                "When N does not divide the parameters, np.array_split gives the first num_params % N workers "
                "one element more: n_r = num_params // N + (1 if r < num_params % N else 0).",
                _param_bytes(half=2, remainder=False, grads_from=2, params_from=3)),
        Mistake("sharded at the wrong stage",
                "Stage 1 shards the optimizer state only, stage 2 the gradients as well, stage 3 the parameters "
                "too.", _param_bytes(half=2, remainder=True, grads_from=1, params_from=2)),
    ),
    "compute_optimizer_memory_bytes": (
        Mistake("forgot the float32 master copy",
                "Mixed precision's optimizer updates float32 master weights beside float32 m and v: "
                "4 + 4 + 4 = 12 bytes a parameter, not 8.",
                _optimizer_bytes(mixed=8, half=2, remainder=True, shard=True)),
        Mistake("float32 bytes for float16 tensors",
                "Adam's moments have the parameters' dtype: float16 m and v take 2 + 2 bytes a parameter.",
                _optimizer_bytes(mixed=12, half=4, remainder=True, shard=True)),
        Mistake("the optimizer state not divided among the workers under ZeRO",
                "From stage 1 on, each worker keeps the state of its own shard of the parameters only: "
                "K * n_r bytes, not K * num_params.", _optimizer_bytes(mixed=12, half=2, remainder=True, shard=False)),
        Mistake("the remainder dropped (every worker owns num_params // N)",
                "The first num_params % N workers own one element more (np.array_split).",
                _optimizer_bytes(mixed=12, half=2, remainder=False, shard=True)),
    ),
    "compute_peak_activation_memory_bytes": twisted(_activation_bytes, {
        "summed": (
            "the sum instead of the peak (every micro-batch's activations added up)",
            "Micro-batches run one after another: only the largest one's activations, ceil(B / k) rows, "
            "are alive at the peak."),
        "no checkpointing": (
            "every layer's activations at once under checkpointing",
            "Checkpointing keeps one input per segment and recomputes one segment at a time: pass "
            "segment_size to estimate_checkpointing_memory_savings (num_layers when it is None)."),
        "float32 activations": (
            "float32 bytes for float16 activations",
            "In mixed precision the forward and backward passes are float16: 2 bytes a number."),
        "no input copy": (
            "forgot the float16 copy of the input",
            "Mixed precision casts the micro-batch's inputs to float16 before the first layer: "
            "2 * rows * width bytes more."),
    }),
    "compare_memory_with_and_without_optimizations": (
        Mistake("one gradient buffer with accumulation",
                "With k > 1 micro-batches, a worker holds the running sum of the gradients and the "
                "micro-batch's own gradients at the backward peak: twice 036's gradients (three times in "
                "mixed precision, where the running sum is float32).",
                _compare(gradient_buffers=lambda row: 1, rows_of_worker=True, measure_config=False)),
        Mistake("the running sum counted in float16",
                "In mixed precision worker_gradients keeps the running sum of the micro-batches' gradients "
                "in float32 (float16 would overflow): 4 bytes a parameter beside the micro-batch's float16 "
                "gradients, three times 036's gradients.",
                _compare(gradient_buffers=lambda row: 2 if row.num_micro_batches > 1 else 1, rows_of_worker=True,
                         measure_config=False)),
        Mistake("the sum instead of the peak (the whole batch's activations on each worker)",
                "Each worker runs its own rows, X[0::N] for worker 0, not the whole batch: 038 with "
                "len(X[0::N]) rows.", _compare(gradient_buffers=_accumulation_buffers, rows_of_worker=False,
                                             measure_config=False)),
        Mistake("every row measured with the whole configuration",
                "Each row measures its own configuration: measure_worker_memory(params, X, Y, row_config).",
                _compare(gradient_buffers=_accumulation_buffers, rows_of_worker=True, measure_config=True)),
    ),
    "full_distributed_training_loop": (
        Mistake("the loop ignores data parallelism (num_workers)",
                "Deal the batch to the N workers (shard_dataset_across_workers), average their gradients on "
                "the cluster, and return one dict per worker: the grader compares what each of the N holds.",
                _loop_with("one worker")),
        Mistake("the loop ignores ZeRO (zero_stage)",
                "With zero_stage 1 each worker keeps Adam's state (and, in mixed precision, the master weights) "
                "of its own shard np.array_split(flat, N)[r] only: reduce-scatter, update the shard, all-gather.",
                _loop_with("no sharding")),
        Mistake("the loop ignores mixed precision",
                "With mixed_precision the passes run on a float16 copy with a scaled loss, and Adam updates "
                "float32 master weights with float32 m and v (each worker returns them).",
                _loop_with("no mixed precision")),
        Mistake("the workers' gradients averaged unweighted",
                "A worker's mean gradient covers n_r of the B examples: weight it by N n_r / B (026) before the "
                "all-reduce, and its loss too, or shards of unequal size count as equal.",
                _loop_with("unweighted")),
        Mistake("the gradients not unscaled",
                "The gradients carry the loss scale: each worker divides its float32 mean gradient by the scale "
                "once before Adam (Adam's step hardly changes, but m and v are the scale times too large).",
                _loop_with("not unscaled")),
        Mistake("the gradients unscaled twice",
                "Divide the float32 mean gradient by the loss scale once: worker_gradients scales the loss's "
                "gradient, and the all-reduce averages, it does not unscale.", _loop_with("unscaled twice")),
        Mistake("a skipped step still updates the master weights and moments",
                "When any new parameter is inf or NaN the step is skipped: the master weights, m, v, the step "
                "count and the parameters stay as they were, and only the scale halves.",
                _loop_with("skip updates the state")),
    ),
}
