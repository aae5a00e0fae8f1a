"""Memory measurement: the peak bytes a call really allocates.

NumPy reports its array buffers to ``tracemalloc`` (domain
``np.lib.tracemalloc_domain``), so tracing a call shows what its arrays cost.
The figure includes small Python objects too, and NumPy may elide temporaries,
so compare measured and predicted memory with a tolerance, never exactly.
"""

from __future__ import annotations

import contextlib
import gc
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .dtypes import BYTES_PER_NUMBER, check_memory_arguments  # noqa: F401  (the notebooks import them from here)
from .lesson_blocks import (compute_optimizer_memory_bytes, compute_param_memory_bytes,
                            compute_peak_activation_memory_bytes, estimate_checkpointing_memory_savings)


@dataclass(frozen=True)
class MemoryMeasurement:
    peak_bytes: int      # highest traced memory during the call, above the level before it
    retained_bytes: int  # traced memory still held after the call (what its result keeps alive)
    result: Any          # what the call returned


def measure_peak_memory(function: Callable[..., Any], *args: Any, **kwargs: Any) -> MemoryMeasurement:
    """Call ``function(*args, **kwargs)`` and measure the memory it allocates.

    Works whether or not tracemalloc is already running (it is left as found).
    """
    was_tracing = tracemalloc.is_tracing()
    with _older_objects_frozen():
        gc.collect()  # unfrozen garbage, freed during the call, would lower its peak (none after our freeze)
        if not was_tracing:
            tracemalloc.start()
        try:
            tracemalloc.reset_peak()
            before, _ = tracemalloc.get_traced_memory()
            result = function(*args, **kwargs)
            peak = tracemalloc.get_traced_memory()[1]
            gc.collect()  # what the result keeps alive, not garbage that waits for the collector
            after = tracemalloc.get_traced_memory()[0]
        finally:
            if not was_tracing:
                tracemalloc.stop()
    return MemoryMeasurement(peak_bytes=peak - before, retained_bytes=after - before, result=result)


_frozen_for_good = False


def freeze_for_good() -> None:
    """Freeze every object of this process for the rest of its life (``gc.freeze()``): for a
    short-lived child that inherits a large heap and never frees it (the grading child), so that
    the collector walks only the child's own objects.  The meter then leaves the freeze alone.
    (A flag, not ``gc.get_freeze_count()``, says so: that count walks every frozen object.)"""
    global _frozen_for_good
    gc.freeze()
    _frozen_for_good = True


@contextlib.contextmanager
def _older_objects_frozen():
    """While measuring, the garbage collector walks only the objects made during the call.

    ``gc.collect()`` walks every object the process tracks, and a process with large libraries
    loaded (a kernel, a test runner) holds hundreds of thousands: a collection can take a second.
    Frozen, the older objects are never freed by the collector during the call, garbage or not,
    so they cannot lower its peak either; the call's own garbage is made of new objects, which are
    collected as usual.  (An old reference cycle that the call lets go of is freed at a later
    collection: counted neither way.)  Freezing moves objects between the collector's lists and
    allocates nothing.  A process frozen for good (:func:`freeze_for_good`) stays as it is.
    """
    if _frozen_for_good:
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def format_bytes(n: float) -> str:
    """Human-readable bytes: ``format_bytes(3 * 2**20) == '3.0 MiB'``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def format_measured(n_bytes: float) -> str:
    """A *measured* size, marked with "≈": tracemalloc also counts the few bytes that other
    threads allocate meanwhile, so the last digit may differ between runs (the course's
    output checks sanitise exactly these)."""
    return "≈" + format_bytes(n_bytes)


def format_ratio(measured: float, predicted: float) -> str:
    """measured / predicted as "×0.97" (sanitised like format_measured)."""
    return f"×{measured / predicted:.2f}"


def mlp_activation_bytes(batch_size: int, width: int, num_layers: int,
                         bytes_per_element: int = 8) -> int:
    """Predicted activation memory at the backward peak of the helper MLP (no checkpointing).

    The model every memory lesson uses, for ``num_layers`` linear layers whose
    inputs and hidden widths are all ``width`` (the output layer's (batch, out)
    arrays are small and left out):

    - stored by the forward pass: Z_i and A_i for each hidden layer,
      2 (L - 1) arrays of shape (batch, width) (the input X is the caller's);
    - the backward working set: the incoming gradient and the next one, two more
      such arrays, plus one boolean ReLU mask of batch * width bytes.

    The formula is written once, in lesson 018 (``estimate_checkpointing_memory_savings``,
    whose segments of ``num_layers`` layers mean no checkpointing); this is its helper version.
    """
    return estimate_checkpointing_memory_savings(batch_size, width, num_layers, num_layers,
                                                 bytes_per_element)["standard_bytes"]


def accumulation_activation_bytes(batch_size: int, width: int, num_layers: int,
                                  num_micro_batches: int, bytes_per_element: int = 8) -> int:
    """The same prediction for gradient accumulation: only one micro-batch is alive at a time,
    and the largest one has ceil(batch_size / num_micro_batches) examples."""
    largest = -(-batch_size // num_micro_batches)
    return mlp_activation_bytes(largest, width, num_layers, bytes_per_element)


def mixed_precision_activation_bytes(batch_size: int, width: int, num_layers: int) -> int:
    """Predicted activation memory of a mixed-precision step of the helper MLP (Part 4).

    The forward and backward passes run in float16, so :func:`mlp_activation_bytes` with
    2 bytes per element, plus the float16 copy of the input batch X that the step makes:
    lesson 038's prediction for the dtype "mixed" (its helper version).
    """
    return compute_peak_activation_memory_bytes(batch_size, width, num_layers, "mixed")


def mixed_precision_memory_bound(batch_size: int, width: int, num_layers: int, master_bytes: int) -> int:
    """The most a mixed-precision step of the helper MLP may allocate at its peak (lesson 024).

    Half the float32 step's activations (:func:`mlp_activation_bytes` with 4 bytes per element),
    plus a margin of five float16 (batch, width) arrays (X's float16 copy and working space),
    plus four times the float32 master weights' bytes (the float16 copy and float16 gradients,
    the float32 gradients, the new master weights: 12 bytes per parameter, and 4 to spare).
    A step that computes in float32 stores twice the bytes and breaks it.
    """
    half_of_float32 = mlp_activation_bytes(batch_size, width, num_layers, bytes_per_element=4) // 2
    return half_of_float32 + 5 * batch_size * width * 2 + 4 * master_bytes


def data_parallel_activation_bytes(batch_size: int, width: int, num_layers: int,
                                   num_workers: int, bytes_per_element: int = 8) -> int:
    """The same prediction for one worker of data-parallel training: the largest shard has
    ceil(batch_size / num_workers) examples, and the simulated workers compute one after
    another, so only one worker's activations are alive at a time."""
    largest = -(-batch_size // num_workers)
    return mlp_activation_bytes(largest, width, num_layers, bytes_per_element)


def data_parallel_step_allowed_bytes(params: dict, X: Any, num_workers: int) -> int:
    """The most a data-parallel training step may allocate at its peak (lesson 029's bound).

    1.5 x one worker's shard activations (:func:`data_parallel_activation_bytes`, for an MLP
    whose layers have the input's width), plus four parameter-sized dicts per worker: its
    gradients, the all-reduce's working copies, the averaged gradients and its new replica.
    A step that runs the whole batch through one worker needs about N times the first term.
    """
    layers = sum(1 for key in params if key.startswith("W"))
    param_bytes = sum(value.nbytes for value in params.values())
    activations = data_parallel_activation_bytes(len(X), X.shape[1], layers, num_workers, X.itemsize)
    return int(1.5 * activations) + 4 * num_workers * param_bytes


#: Allowance for the small Python objects a result holds beside its arrays (dicts, lists, ints).
OBJECT_ALLOWANCE = 64 * 2**10


def adam_state_bytes(params: dict) -> int:
    """The bytes of Adam's two moments for ``params``: m and v, each shaped and typed like the
    parameters (the step counter, one int, is left out): lesson 037's count for each tensor
    (its helper version)."""
    return sum(compute_optimizer_memory_bytes(value.size, value.dtype.name) for value in params.values())


def partitioned_state_allowed_bytes(state: dict) -> int:
    """The most that the shards of a partitioned Adam state may keep alive (lesson 032's bound).

    All N workers' shards together hold the state's moments exactly once, whatever N: 1.25 x the
    bytes of m and v, plus :data:`OBJECT_ALLOWANCE`.  Shards that are views of a full copy per
    worker keep N copies.
    """
    return int(1.25 * adam_state_bytes(state["m"])) + OBJECT_ALLOWANCE


def zero_step_allowed_bytes(params: dict, num_workers: int) -> int:
    """The most that a ZeRO step's result may keep alive (lesson 035's bound).

    After the step each of the N workers holds its full parameters (one parameter-sized copy
    per worker) and its shard of Adam's state; the shards together are one copy of m and v
    (two parameter-sized arrays): 1.25 x (N + 2) x the parameters' bytes, plus
    :data:`OBJECT_ALLOWANCE`.  Workers that each keep the full moments hold 2N of them.
    """
    param_bytes = sum(value.nbytes for value in params.values())
    return int(1.25 * (num_workers + 2) * param_bytes) + OBJECT_ALLOWANCE


def training_loop_allowed_bytes(params: dict, X: Any, config: Any) -> int:
    """The most lesson 040's training loop may allocate at its peak (its bound).

    The simulated workers live in one process and compute one after another, so the loop holds
    every worker's arrays at once and one worker's activations at a time.  For the dtype of the
    passes (``"mixed"`` in mixed precision, else the parameters'): twice the bytes of every
    worker's parameters and gradients (lesson 036 for its rank) and optimizer state (037: with
    the master weights, its shard under ZeRO), for the collectives' copies and the new state
    beside the old; the flat vector of the parameters in their own dtype; and the activations of
    worker 0's rows (038: ``len(X[0::N])``, the most rows, with the configuration's micro-batches
    and checkpointed segments); all of it times 1.5, plus :data:`OBJECT_ALLOWANCE`.  Each
    formula is the helper version of its lesson.

    A loop that ignores checkpointing or gradient accumulation needs 038's activations without
    them (2 to 4 times the bound on 040's measured cases); one whose every worker keeps Adam's
    state of the whole vector under ZeRO needs N times the state.
    """
    N, stage = config.num_workers, config.zero_stage
    num_params = sum(value.size for value in params.values())
    itemsize = next(iter(params.values())).itemsize
    dtype = "mixed" if config.mixed_precision else next(iter(params.values())).dtype.name
    held = 0
    for rank in range(N):
        counted = compute_param_memory_bytes(num_params, dtype, stage, N, rank)
        held += counted["parameters"] + counted["gradients"] + compute_optimizer_memory_bytes(num_params, dtype,
                                                                                             stage, N, rank)
    layers = sum(1 for key in params if key.startswith("W"))
    activations = compute_peak_activation_memory_bytes(len(X[0::N]), X.shape[1], layers, dtype,
                                                       config.segment_size, config.num_micro_batches)
    return int(1.5 * (2 * held + num_params * itemsize + activations)) + OBJECT_ALLOWANCE
