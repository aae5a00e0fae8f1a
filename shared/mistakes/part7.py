"""Common mistakes of Part 7 (lessons 036-040), each a wrong version of the function.

The accounting mistakes (036-039) count with the wrong bytes, the wrong shard or the wrong
sum; they build on the helper's versions of the lessons they do not get wrong
(``shared.lesson_blocks``).  The loop's mistakes (040) are the loop with one switch
ignored: the same losses, or nearly, and the memory or the traffic of another loop.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..checking import Mistake
from ..cluster import Cluster, reduce_scatter_mean
from ..memory import BYTES_PER_NUMBER


def _blocks():
    from .. import lesson_blocks  # late: lesson_blocks is generated from the masters
    return lesson_blocks


def _owned(num_params, num_workers, rank, remainder=True):
    return num_params // num_workers + (1 if remainder and rank < num_params % num_workers else 0)


# 036 compute_param_memory_bytes -------------------------------------------------------

def _param_bytes(*, half=2, remainder=True, grads_from=2, params_from=3):
    def compute(num_params, dtype, zero_stage=0, num_workers=1, rank=0):
        size = half if dtype in ("mixed", "float16") else BYTES_PER_NUMBER[dtype]
        owned = _owned(num_params, num_workers, rank, remainder)
        return {"parameters": size * (owned if zero_stage >= params_from else num_params),
                "gradients": size * (owned if zero_stage >= grads_from else num_params)}
    return compute


# 037 compute_optimizer_memory_bytes ---------------------------------------------------

def _optimizer_bytes(*, mixed=12, half=2, remainder=True, shard=True):
    def compute(num_params, dtype, zero_stage=0, num_workers=1, rank=0):
        per_param = mixed if dtype == "mixed" else 2 * (half if dtype == "float16" else BYTES_PER_NUMBER[dtype])
        owned = _owned(num_params, num_workers, rank, remainder)
        return per_param * (owned if shard and zero_stage >= 1 else num_params)
    return compute


# 038 compute_peak_activation_memory_bytes ---------------------------------------------

def _activation_bytes(*, summed=False, checkpointing=True, mixed_bytes=2, input_copy=True):
    def peak(rows, width, num_layers, dtype, segment_size):
        size = mixed_bytes if dtype == "mixed" else BYTES_PER_NUMBER[dtype]
        segment = num_layers if segment_size is None or not checkpointing else segment_size
        bytes_ = _blocks().estimate_checkpointing_memory_savings(rows, width, num_layers, segment,
                                                                 size)["checkpointed_bytes"]
        return bytes_ + (rows * width * mixed_bytes if dtype == "mixed" and input_copy else 0)

    def compute(batch_size, width, num_layers, dtype, segment_size=None, num_micro_batches=1):
        if not 1 <= num_micro_batches <= batch_size:
            raise ValueError(f"{num_micro_batches} micro-batches do not fit a batch of {batch_size} rows")
        if summed:  # every micro-batch's activations added up
            sizes = [len(part) for part in np.array_split(np.empty(batch_size, np.int8), num_micro_batches)]
            return sum(peak(rows, width, num_layers, dtype, segment_size) for rows in sizes)
        return peak(-(-batch_size // num_micro_batches), width, num_layers, dtype, segment_size)
    return compute


# 039 compare_memory_with_and_without_optimizations ------------------------------------

def _compare(*, gradient_buffers=2, rows_of_worker=True, measure_config=False):
    def compare(params, X, Y, config):
        from ..training import TrainingConfig, measure_worker_memory
        blocks = _blocks()
        layers, width = sum(1 for key in params if key.startswith("W")), X.shape[1]
        plain = TrainingConfig()
        rows = [("none", plain), ("accumulation", replace(plain, num_micro_batches=config.num_micro_batches)),
                ("checkpointing", replace(plain, segment_size=config.segment_size)),
                ("mixed precision", replace(plain, mixed_precision=config.mixed_precision)),
                ("ZeRO", replace(plain, num_workers=config.num_workers, zero_stage=config.zero_stage)),
                ("all together", config)]
        num_params = sum(value.size for value in params.values())
        table = []
        for name, row in rows:
            dtype = "mixed" if row.mixed_precision else params["W1"].dtype.name
            memory = blocks.compute_param_memory_bytes(num_params, dtype, row.zero_stage, row.num_workers)
            examples = len(X[0::row.num_workers]) if rows_of_worker else len(X)
            entry = {"configuration": name, "parameters": memory["parameters"],
                     "gradients": memory["gradients"] * (gradient_buffers if row.num_micro_batches > 1 else 1),
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

def _loop(params, X, Y, config):
    """The loop as lesson 040 teaches it (the mistakes below run it with a switch ignored)."""
    from ..training import worker_gradients
    blocks = _blocks()
    N, k, mixed = config.num_workers, config.num_micro_batches, config.mixed_precision
    keys, size = list(params), sum(value.size for value in params.values())
    if len(X) != len(Y) or N > len(X) or k > len(X) // N or (config.zero_stage and N > size):
        raise ValueError("the configuration does not fit the data")
    cluster = Cluster(N)
    shards = blocks.shard_dataset_across_workers(X, Y, N)
    flat = np.concatenate([params[key].ravel() for key in keys])
    if config.zero_stage:
        cuts = np.cumsum([0] + [len(c) for c in np.array_split(flat, N)])
        own = [(cuts[r], cuts[r + 1]) for r in range(N)]
    else:
        own = [(0, size)] * N
    working = [flat.astype(np.float16) if mixed else flat.copy() for _ in range(N)]
    master = [flat[lo:hi].astype(np.float32) for lo, hi in own] if mixed else None
    state_dtype = np.float32 if mixed else flat.dtype
    states = [{"step": 0, "m": np.zeros(hi - lo, state_dtype), "v": np.zeros(hi - lo, state_dtype)} for lo, hi in own]

    def as_dict(vector):
        out, offset = {}, 0
        for key in keys:
            out[key] = vector[offset:offset + params[key].size].reshape(params[key].shape)
            offset += params[key].size
        return out

    scale, clean = float(config.loss_scale) if mixed else 1.0, 0
    history = {"loss": [], "skipped": [], "loss_scale": [], "memory": None, "traffic": None}
    activations, grad_bytes = [0] * N, [0] * N
    for step in range(config.steps):
        flat_grads, loss = [], 0.0
        for r, (X_r, Y_r) in enumerate(shards):
            loss_r, grads, measured = worker_gradients(as_dict(working[r]), X_r, Y_r, k, config.segment_size,
                                                       scale if mixed else None, measure=step == 0)
            weight = N * len(X_r) / len(X)
            flat_grads.append(np.concatenate([weight * grads[key].ravel() for key in keys]))
            loss += weight * loss_r / N
            activations[r], grad_bytes[r] = max(activations[r], measured), sum(g.nbytes for g in grads.values())
        with np.errstate(over="ignore", invalid="ignore"):
            if config.zero_stage:
                reduced = reduce_scatter_mean(flat_grads, cluster)
            else:
                reduced, _ = blocks.ring_all_reduce_mean(flat_grads, cluster)
            updates = []
            for r in range(N):
                grad = reduced[r].astype(np.float32) / np.float32(scale) if mixed else reduced[r]
                mine = master[r] if mixed else working[r][own[r][0]:own[r][1]]
                updates.append(blocks.local_shard_adam_update(mine, grad, states[r], config.learning_rate,
                                                              config.beta1, config.beta2, config.eps))
            new = [shard.astype(np.float16) if mixed else shard for shard, _ in updates]
            if config.zero_stage:
                new, _ = blocks.all_gather_param_shards(new, cluster)
            skipped = mixed and not all(np.isfinite(vector).all() for vector in new)
        history["loss"].append(float(loss))
        history["skipped"].append(bool(skipped))
        history["loss_scale"].append(float(scale))
        if skipped:
            scale, clean = scale / 2, 0
            continue
        working, states = new, [state for _, state in updates]
        if mixed:
            master = [shard for shard, _ in updates]
            clean += 1
            if clean == config.growth_interval:
                scale, clean = scale * 2, 0
    history["memory"] = [{"parameters": int(working[r].nbytes), "gradients": int(grad_bytes[r]),
                          "optimizer": int(states[r]["m"].nbytes + states[r]["v"].nbytes
                                           + (master[r].nbytes if mixed else 0)),
                          "activations": int(activations[r])} for r in range(N)]
    history["traffic"] = cluster.ledger.summary()
    final = np.concatenate(master) if mixed and config.zero_stage else (master[0] if mixed else working[0])
    return {key: value.copy() for key, value in as_dict(final).items()}, history


def _ignoring(**off):
    """The loop run as if the configuration's ``off`` fields were at their defaults."""
    def loop(params, X, Y, config):
        return _loop(params, X, Y, replace(config, **off))
    return loop


MISTAKES = {
    "compute_param_memory_bytes": (
        Mistake("float32 bytes for float16 tensors",
                "A float16 number takes 2 bytes, and mixed precision's working parameters and gradients are "
                "float16: count 2 bytes each, not 4.", _param_bytes(half=4)),
        Mistake("the remainder dropped (every worker owns num_params // N)",
                "When N does not divide the parameters, np.array_split gives the first num_params % N workers "
                "one element more: n_r = num_params // N + (1 if r < num_params % N else 0).",
                _param_bytes(remainder=False)),
        Mistake("sharded at the wrong stage",
                "Stage 1 shards the optimizer state only, stage 2 the gradients as well, stage 3 the parameters "
                "too.", _param_bytes(grads_from=1, params_from=2)),
    ),
    "compute_optimizer_memory_bytes": (
        Mistake("forgot the float32 master copy",
                "Mixed precision's optimizer updates float32 master weights beside float32 m and v: "
                "4 + 4 + 4 = 12 bytes a parameter, not 8.", _optimizer_bytes(mixed=8)),
        Mistake("float32 bytes for float16 tensors",
                "Adam's moments have the parameters' dtype: float16 m and v take 2 + 2 bytes a parameter.",
                _optimizer_bytes(half=4)),
        Mistake("the optimizer state not divided among the workers under ZeRO",
                "From stage 1 on, each worker keeps the state of its own shard of the parameters only: "
                "K * n_r bytes, not K * num_params.", _optimizer_bytes(shard=False)),
        Mistake("the remainder dropped (every worker owns num_params // N)",
                "The first num_params % N workers own one element more (np.array_split).",
                _optimizer_bytes(remainder=False)),
    ),
    "compute_peak_activation_memory_bytes": (
        Mistake("the sum instead of the peak (every micro-batch's activations added up)",
                "Micro-batches run one after another: only the largest one's activations, ceil(B / k) rows, "
                "are alive at the peak.", _activation_bytes(summed=True)),
        Mistake("every layer's activations at once under checkpointing",
                "Checkpointing keeps one input per segment and recomputes one segment at a time: pass "
                "segment_size to estimate_checkpointing_memory_savings (num_layers when it is None).",
                _activation_bytes(checkpointing=False)),
        Mistake("float32 bytes for float16 activations",
                "In mixed precision the forward and backward passes are float16: 2 bytes a number.",
                _activation_bytes(mixed_bytes=4)),
        Mistake("forgot the float16 copy of the input",
                "Mixed precision casts the micro-batch's inputs to float16 before the first layer: "
                "2 * rows * width bytes more.", _activation_bytes(input_copy=False)),
    ),
    "compare_memory_with_and_without_optimizations": (
        Mistake("one gradient buffer with accumulation",
                "With k > 1 micro-batches, a worker holds the running sum of the gradients and the "
                "micro-batch's own gradients at the backward peak: twice 036's gradients.",
                _compare(gradient_buffers=1)),
        Mistake("the sum instead of the peak (the whole batch's activations on each worker)",
                "Each worker runs its own rows, X[0::N] for worker 0, not the whole batch: 038 with "
                "len(X[0::N]) rows.", _compare(rows_of_worker=False)),
        Mistake("every row measured with the whole configuration",
                "Each row measures its own configuration: measure_worker_memory(params, X, Y, row_config).",
                _compare(measure_config=True)),
    ),
    "full_distributed_training_loop": (
        Mistake("the loop ignores data parallelism (num_workers)",
                "Deal the batch to the N workers (shard_dataset_across_workers) and average their gradients "
                "on the cluster: the history reports N workers and the traffic.", _ignoring(num_workers=1,
                                                                                          zero_stage=0)),
        Mistake("the loop ignores ZeRO (zero_stage)",
                "With zero_stage 1 each worker keeps Adam's state (and, in mixed precision, the master "
                "weights) of its own shard only: reduce-scatter, update the shard, all-gather.",
                _ignoring(zero_stage=0)),
        Mistake("the loop ignores checkpointing (segment_size)",
                "Pass config.segment_size to worker_gradients: the losses are the same, the activations "
                "measured are not.", _ignoring(segment_size=None)),
        Mistake("the loop ignores gradient accumulation (num_micro_batches)",
                "Pass config.num_micro_batches to worker_gradients: the activations measured are those of "
                "one micro-batch.", _ignoring(num_micro_batches=1)),
        Mistake("the loop ignores mixed precision",
                "With mixed_precision the passes run on a float16 copy with a scaled loss, and Adam updates "
                "float32 master weights (and returns them).", _ignoring(mixed_precision=False)),
    ),
}
