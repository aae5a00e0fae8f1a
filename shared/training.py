"""The pieces of Part 7's training loop that earlier parts already taught, and its configuration.

Lesson 040 puts every technique of the course into one loop on the simulated
cluster.  Its configuration is one object, :class:`TrainingConfig`, which checks
its own fields when it is made (a bad value is refused before any work starts).
The loop builds on:

- :func:`worker_gradients`: one worker's loss and gradients on its examples,
  micro-batch by micro-batch (Part 2), each forward and backward pass
  checkpointed (Part 3) and its loss scaled (Part 4) when asked;
- :func:`measure_worker_memory`: the peak bytes one worker allocates in a step
  (its parameters, master weights, optimizer state, gradients and activations),
  measured with tracemalloc, for lesson 039's table.

- :func:`reduce_scatter_mean`: the ring reduce-scatter of lesson 035's step (worker r ends
  with the mean of chunk r), the first half of ZeRO's communication: lesson 035's own code,
  generated from its cell into ``shared.lesson_blocks`` and offered here under the loop's other
  pieces.

The other collectives come from Parts 5 and 6 (``shared.lesson_blocks``).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable
from dataclasses import dataclass, replace

import numpy as np

from . import mlp
from .answers import answers
# reduce_scatter_mean is offered from here, beside the loop's other pieces (Part 7's notebook imports it so).
from .lesson_blocks import (mlp_backward_checkpointed, mlp_forward_checkpointed, reduce_scatter_mean, scale_loss,
                            split_into_micro_batches)
from .memory import measure_peak_memory


@dataclass(frozen=True)
class TrainingConfig:
    """Everything lesson 040's loop can switch on or off, checked when the object is made.

    Each optimisation is off at its default, and with all of them off the loop is plain
    Adam on one worker, in the parameters' dtype:

    - ``num_workers``: N simulated workers, data parallel (1: off);
    - ``num_micro_batches``: k micro-batches per worker and step, gradient accumulation (1: off);
    - ``segment_size``: layers per checkpointed segment, activation checkpointing (None: off);
    - ``mixed_precision``: float16 forward and backward passes, float32 master weights and
      Adam state, dynamic loss scaling from ``loss_scale`` (doubled after ``growth_interval``
      clean steps, halved on a skipped one) (False: off);
    - ``zero_stage``: 1 shards Adam's state (with the master weights, in mixed precision)
      across the N workers as Part 6 does, ZeRO stage 1 (0: off). Stages 2 and 3 are counted
      by lessons 036 and 037 but not simulated by the loop.

    ``steps`` Adam steps with ``learning_rate``, ``beta1``, ``beta2`` and ``eps``;
    ``progress_bar`` shows a tqdm bar.

    Raises:
        TypeError: a field of the wrong type (a float where an int is needed, ...).
        ValueError: a value out of range (no steps, N < 1, k < 1, segment_size < 1, a stage
            other than 0 or 1, a learning rate, loss scale or beta out of range).
    """

    steps: int = 10
    learning_rate: float = 1e-3
    num_workers: int = 1
    num_micro_batches: int = 1
    segment_size: int | None = None
    mixed_precision: bool = False
    zero_stage: int = 0
    loss_scale: float = 2.0 ** 16
    growth_interval: int = 2000
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    progress_bar: bool = False

    def __post_init__(self) -> None:
        for name in ("steps", "num_workers", "num_micro_batches", "zero_stage", "growth_interval"):
            _require_int(name, getattr(self, name))
        if self.segment_size is not None:
            _require_int("segment_size", self.segment_size)
        for name in ("mixed_precision", "progress_bar"):
            if type(getattr(self, name)) is not bool:
                raise TypeError(f"{name} must be True or False, got {getattr(self, name)!r}")
        for name in ("learning_rate", "loss_scale", "beta1", "beta2", "eps"):
            value = getattr(self, name)
            if type(value) not in (int, float) or not math.isfinite(value):
                raise TypeError(f"{name} must be a finite number, got {value!r}")
        for name in ("steps", "num_workers", "num_micro_batches", "growth_interval"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.segment_size is not None and self.segment_size < 1:
            raise ValueError(f"segment_size must be at least 1 (or None: no checkpointing), got {self.segment_size}")
        if self.zero_stage not in (0, 1):
            raise ValueError(f"zero_stage must be 0 (off) or 1 (Adam's state sharded, Part 6), got "
                             f"{self.zero_stage}: the loop simulates stage 1 only (036 and 037 count 2 and 3)")
        if not self.learning_rate > 0 or not self.loss_scale > 0 or not self.eps >= 0:
            raise ValueError("learning_rate and loss_scale must be positive and eps at least 0, got "
                             f"{self.learning_rate}, {self.loss_scale} and {self.eps}")
        if not (0 <= self.beta1 < 1 and 0 <= self.beta2 < 1):
            raise ValueError(f"beta1 and beta2 must be in [0, 1), got {self.beta1} and {self.beta2}")


def configurations_to_compare(config: TrainingConfig) -> list[tuple[str, TrainingConfig]]:
    """Lesson 039's six rows, ``(name, configuration)`` in this order: "none" is ``TrainingConfig()``;
    "accumulation", "checkpointing", "mixed precision" and "ZeRO" each switch one technique on, with
    ``config``'s value of its fields (ZeRO: ``num_workers`` and ``zero_stage``); "all together" is
    ``config`` itself."""
    plain = TrainingConfig()
    return [("none", plain), ("accumulation", replace(plain, num_micro_batches=config.num_micro_batches)),
            ("checkpointing", replace(plain, segment_size=config.segment_size)),
            ("mixed precision", replace(plain, mixed_precision=config.mixed_precision)),
            ("ZeRO", replace(plain, num_workers=config.num_workers, zero_stage=config.zero_stage)),
            ("all together", config)]


def training_steps(config: TrainingConfig) -> Iterable[int]:
    """The loop's step numbers, 0 .. config.steps - 1, behind a tqdm progress bar when
    ``config.progress_bar`` (on standard output, in one fixed format, so that a notebook's output
    is the same on every run)."""
    from tqdm import tqdm
    return tqdm(range(config.steps), desc="training", disable=not config.progress_bar, mininterval=0,
                bar_format="{desc}: step {n_fmt}/{total_fmt} |{bar:20}|", file=sys.stdout)


def _require_int(name: str, value) -> None:
    if type(value) is not int:
        raise TypeError(f"{name} must be an int, got {value!r}")


def _forward_backward(params, X, Y, segment_size, loss_scale):
    """One micro-batch's mean loss and gradients, in the parameters' dtype (float16: loss in float32)."""
    dtype = params["W1"].dtype
    X = X.astype(dtype, copy=False)  # the float16 copy of the inputs in mixed precision
    if segment_size is None:
        out, cache = mlp.forward(X, params)
    else:
        out, checkpoints = mlp_forward_checkpointed(X, params, segment_size)
    with np.errstate(over="ignore", invalid="ignore"):  # float16 overflow is the loss scaler's business
        if dtype == np.float16:
            loss, d_out = mlp.mse_loss_and_grad(out.astype(np.float32), Y.astype(np.float32))
        else:
            loss, d_out = mlp.mse_loss_and_grad(out, Y)
        if loss_scale is not None:
            _, d_out = scale_loss(loss, d_out, loss_scale)  # float16, times the loss scale
        del out
        if segment_size is None:
            grads = mlp.backward(d_out, params, cache)
        else:
            grads = mlp_backward_checkpointed(d_out, params, checkpoints, segment_size)
    return loss, grads


def _measure_activations(params, X, Y, segment_size, loss_scale):
    """``(_forward_backward(...), bytes)``: the peak it allocates beyond what its result keeps."""
    measured = measure_peak_memory(_forward_backward, params, X, Y, segment_size, loss_scale)
    return measured.result, max(0, measured.peak_bytes - measured.retained_bytes)


@answers("014", "017")
def worker_gradients(params, X, Y, num_micro_batches=1, segment_size=None, loss_scale=None, measure=False):
    """One worker's loss and gradients of its examples' mean loss, micro-batch by micro-batch.

    Args:
        params: the helper MLP's parameters in the dtype of the passes (float16 in mixed
            precision); not modified.
        X: (n, width) the worker's examples (cast to the parameters' dtype, without a copy
            when it has it already); Y: (n, outputs) their targets.
        num_micro_batches: k, 1 <= k <= n: consecutive micro-batches (lesson 011), their
            gradients accumulated (012) and scaled (013). The running sum is kept in float32 when
            the gradients are float16 (mixed precision's float32 accumulation: the sum of
            n_j * S * g_j overflows float16 long before the mean does) and rounded to float16
            once, at the end; in the gradients' own dtype otherwise.
        segment_size: None, or the layers per checkpointed segment (lessons 015 and 017).
        loss_scale: None, or S: each micro-batch's output gradient is scaled by S and made
            float16 (lesson 021), so the gradients are S times too large (and may be inf).
        measure: also measure, with tracemalloc, the bytes the largest (the first) micro-batch's
            forward and backward passes need beyond the gradients they return: its activations.

    Returns:
        (loss, grads, activation_bytes): the mean loss over the n examples (a float), the
        gradients (a new dict in the parameters' dtype) and, with ``measure``, the largest
        micro-batch's measured activation bytes (an int; 0 without ``measure``).
    """
    accumulated, sizes, loss_sum, activation_bytes = None, [], 0.0, 0
    single = num_micro_batches == 1  # nothing to accumulate: the gradients as the passes give them
    for X_j, Y_j in split_into_micro_batches(X, Y, num_micro_batches):
        if measure and not sizes:  # the first micro-batch is the largest (np.array_split)
            (loss_j, grads_j), activation_bytes = _measure_activations(params, X_j, Y_j, segment_size, loss_scale)
        else:
            loss_j, grads_j = _forward_backward(params, X_j, Y_j, segment_size, loss_scale)
        if single:
            return float(loss_j), grads_j, int(activation_bytes)
        accumulated = _accumulate(accumulated, grads_j, len(X_j))
        del grads_j
        sizes.append(len(X_j))
        loss_sum += len(X_j) * loss_j
    return float(loss_sum / sum(sizes)), _mean(accumulated, sum(sizes), params["W1"].dtype), int(activation_bytes)


def _accumulate(running, grads, size):
    """Lesson 012's ``running + size * grads``, in place, the running sum in at least float32.

    ``running``: None (the first micro-batch) or the dict of running sums; ``grads``: one micro-batch's
    gradients (float16 in mixed precision). float16 would overflow: a micro-batch of n_j rows at loss
    scale S adds n_j * S * g_j, where the mean S * g fits. In place, so that the step holds the running
    sum and one micro-batch's gradients, not a second running sum beside the first.
    """
    if running is None:
        running = {key: np.zeros(grad.shape, np.promote_types(grad.dtype, np.float32)) for key, grad in grads.items()}
    with np.errstate(over="ignore", invalid="ignore"):
        for key, grad in grads.items():
            running[key] += np.multiply(grad, size, dtype=running[key].dtype)
    return running


def _mean(running, total, dtype):
    """Lesson 013's ``running / total``, rounded once to the passes' ``dtype`` (float16 in mixed precision)."""
    with np.errstate(over="ignore", invalid="ignore"):
        for value in running.values():
            value /= total
        return {key: value.astype(dtype, copy=False) for key, value in running.items()}


def _worker_step(params, X, Y, config, rank):
    """What worker ``rank`` allocates in one step, up to the end of its backward pass."""
    N = config.num_workers
    size = sum(value.size for value in params.values())
    owned = len(np.array_split(np.empty(size, dtype=np.int8), N)[rank]) if config.zero_stage else size
    if config.mixed_precision:
        working = {key: value.astype(np.float16) for key, value in params.items()}
        held = [np.zeros(owned, np.float32) for _ in range(3)]  # master weights, m and v (float32)
    else:
        working = {key: value.copy() for key, value in params.items()}
        dtype = next(iter(params.values())).dtype
        held = [np.zeros(owned, dtype) for _ in range(2)]       # m and v
    _, grads, _ = worker_gradients(working, X[rank::N], Y[rank::N], config.num_micro_batches,
                                   config.segment_size, config.loss_scale if config.mixed_precision else None)
    return len(held) + len(grads)


def measure_worker_memory(params, X, Y, config, rank=0):
    """The peak bytes (tracemalloc) that worker ``rank`` allocates in one training step of ``config``.

    The step as lesson 040's loop runs it, up to the end of the backward pass: the worker's
    parameters (float16 in mixed precision), its Adam state (with the float32 master weights in
    mixed precision; its shard of them with ZeRO), and the forward and backward passes over its
    examples (``X[rank::N]``), with gradient accumulation, checkpointing and loss scaling as
    ``config`` says.  The optimizer's arithmetic (in place in real frameworks) is left out.
    """
    return measure_peak_memory(_worker_step, params, X, Y, config, rank).peak_bytes
