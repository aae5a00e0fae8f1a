"""Training on real processes, beside the simulated run: lessons 029, 035 and 040 on N OS processes.

``make train-distributed WORKERS=4`` (``tools/train_distributed.py``) calls :func:`run`:
the same seeded training runs twice,

- **simulated**: the course's reference ``data_parallel_train_step`` (029),
  ``zero_optimizer_step`` (035) and ``full_distributed_training_loop`` (040) on the
  simulated cluster, whose traffic ledger predicts the bytes and messages each worker sends;
- **real**: N processes (:func:`torch_extra.real_cluster.launch`), each computing its
  own part with the course's reference functions (025 its shard, 026 or Part 7's
  ``worker_gradients`` its local gradients, 033 Adam on its own shard), the messages
  carried by torch.distributed (gloo) on the schedules of lessons 028, 034 and 035;

and compares the final parameters of every worker (rtol 1e-10, in float64, or in
float32 for the master weights of 040's mixed precision; they come out equal bit for
bit, as the arithmetic is the same, operation for operation), each worker's bytes and
messages with the ledger's column for that worker, and 040's loss-scaler decisions.
What the operating system saw each process write to its sockets is reported too:
the payload plus the transport's own headers.

**The reference functions come from the caller.**  This package computes with the course's
reference solutions but does not know where they live: every technique is made with a
*reference lookup* (:data:`ReferenceLookup`), a module-level function that returns the
reference solution of a lesson (``grading.judge.reference_function``, which
``tools/train_distributed.py`` and the tests pass).  It is picklable, so every worker
process receives it with its technique and looks the functions up there.

**Plugging in another loop.**  A *technique* is a picklable :class:`Technique`, made with
the reference lookup, with

- ``name`` and ``describe()``: what it is, for the report;
- ``start(cluster, params) -> state``: a worker's state before the first step;
- ``step(cluster, params, state, X, Y) -> (params, state, loss)``: one worker's step
  on the global batch ``(X, Y)`` (``cluster`` is its :class:`RealCluster`; ``loss``
  that worker's contribution, the batch's loss being the mean over the workers);
- ``simulate(setup, num_workers) -> SimulatedRun``: the same run on the simulated cluster;

and, where the defaults of :class:`Technique` do not fit, ``batches(setup)`` (the global
batch of each step), ``train(cluster, params, state, setup)`` (the whole run: ``step`` on each
batch, or one call, as the learner's 040), ``final_params(cluster, params, state)`` (what the
worker's run ends with, compared with the simulated run's), ``history(state)`` (per-step
decisions to compare, such as the loss scaler's), ``messages(state)`` (the worker's messages,
for the first difference), ``running()`` and ``max_workers(setup)``.  :class:`DataParallel`
(029), :class:`Zero` (035) and :class:`FullTrainingLoop` (040) are the reference's three;
:mod:`torch_extra.learner_training` has the same with the learner's functions
(``make train-distributed FROM=notebooks``), and :mod:`torch_extra.first_difference` says where
a run that differs first left the simulated one.
"""

from __future__ import annotations

import textwrap
import time
from dataclasses import dataclass, field, replace
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from shared import mlp
from shared.cluster import Cluster
from shared.data import make_regression_batch
from shared.lessons import Lesson, lesson
from shared.training import TrainingConfig, worker_gradients

from .first_difference import first_difference
from .real_cluster import DEFAULT_TIMEOUT, RealCluster, TrafficCount, bytes_written_by_this_process, launch

RTOL = 1e-10  # the real run's parameters against the simulated run's, float64
REPORT_WIDTH = 116  # characters: the report's long lines are wrapped (it is quoted in notebook 07)
# What the workers' process server imports once, so that no worker spends a second on it; the
# caller of :func:`run` adds what its reference lookup loads.
PRELOAD = ["torch_extra.real_training"]

#: The reference solution of a lesson, given the lesson: a module-level function (picklable, as each
#: worker process receives it), such as ``grading.judge.reference_function``.
ReferenceLookup = Callable[[Lesson], Callable[..., Any]]


def ledger_messages(cluster: Cluster) -> list[tuple[int, int, int, int]]:
    """The simulated ledger's messages, (round, src, dst, bytes) each, in order."""
    return [(message.round, message.src, message.dst, message.nbytes) for message in cluster.ledger.messages]


def flatten(params: dict[str, np.ndarray]) -> np.ndarray:
    """The parameters as one new 1-D vector: every tensor raveled, in the dict's order (Part 6's layout)."""
    return np.concatenate([value.ravel() for value in params.values()])


def unflatten(vector: np.ndarray, like: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``vector`` cut back into tensors shaped like ``like``'s, in its order (views of ``vector``, its dtype)."""
    out, offset = {}, 0
    for key, value in like.items():
        out[key] = vector[offset:offset + value.size].reshape(value.shape)
        offset += value.size
    return out


@dataclass(frozen=True)
class TrainingSetup:
    """The model, the data and the length of a run: the same in every process and in the simulation.

    The defaults make the interesting cases happen: 1,293 parameters (2, 3 and 4 workers do
    not divide them), a batch of 30 (4 workers get shards of 8, 8, 7 and 7 rows) and a last
    bias of 3 numbers (with 4 workers, one chunk of its ring all-reduce is empty).
    """

    layer_sizes: tuple[int, ...] = (8, 30, 30, 3)
    batch_size: int = 30
    steps: int = 20
    seed: int = 0

    def initial_params(self) -> dict[str, np.ndarray]:
        return mlp.init_params(list(self.layer_sizes), seed=self.seed)

    def batch(self, step: int) -> tuple[np.ndarray, np.ndarray]:
        """The global batch of step ``step`` (0, 1, ...): every worker draws it and takes its shard."""
        return make_regression_batch(self.batch_size, self.layer_sizes[0], self.layer_sizes[-1],
                                     seed=1000 * (self.seed + 1) + step)

    def batches(self):
        return (self.batch(step) for step in range(self.steps))

    @property
    def num_params(self) -> int:
        return sum(value.size for value in self.initial_params().values())


@dataclass
class SimulatedRun:
    """A run on the simulated cluster: every worker's final parameters, the losses, the ledger."""

    worker_params: list[dict[str, np.ndarray]]
    losses: list[float]
    traffic: dict[str, Any]  # TrafficLedger.summary(): lists per worker, and rounds
    history: dict[str, list] = field(default_factory=dict)  # per-step decisions, as Technique.history
    # Every worker's parameters after each step (a list per step of a list per worker), where the run has steps
    # of its own (029, 035; 040's loop is one call), and the ledger's messages, (round, src, dst, bytes) each.
    step_params: list[list[dict[str, np.ndarray]]] | None = None
    messages: list[tuple[int, int, int, int]] | None = None


class Technique:
    """What a technique does unless it says otherwise (the protocol is in the module's docstring):
    a new global batch at each step, the worker's parameters as its result, nothing else to compare.

    ``reference_function`` is the caller's :data:`ReferenceLookup`; :meth:`reference` reads it.
    """

    name = "technique"
    records_steps = False  # whether train() keeps the worker's parameters after every step, for the comparison

    def __init__(self, reference_function: ReferenceLookup):
        self.reference_function = reference_function

    def reference(self, name: str) -> Callable[..., Any]:
        """The course's reference solution of the lesson whose function is ``name``."""
        return self.reference_function(lesson(name))

    def batches(self, setup: TrainingSetup):
        """The global batch ``(X, Y)`` of each step, in order."""
        return setup.batches()

    def train(self, cluster: RealCluster, params: dict[str, np.ndarray], state, setup: TrainingSetup):
        """The worker's whole training: ``step`` on each batch. Returns (params, state, losses), and with
        :attr:`records_steps` keeps the parameters after each step in ``self.step_params``."""
        losses, self.step_params = [], []
        for X, Y in self.batches(setup):
            params, state, loss = self.step(cluster, params, state, X, Y)
            losses.append(loss)
            if self.records_steps:
                self.step_params.append({key: np.array(value, copy=True) for key, value in params.items()})
        return params, state, losses

    def running(self) -> str:
        """What a worker training with this technique runs, in a few words (named if the run is stopped)."""
        return self.name

    def messages(self, state) -> list[tuple[int, ...]] | None:
        """The worker's messages of the training, (round, src, dst, bytes, step) each, where the technique keeps
        them (``WiredCluster.wire``)."""
        wired = getattr(state, "wired", None)
        return None if wired is None else list(wired.wire)

    def final_params(self, cluster: RealCluster, params: dict[str, np.ndarray], state) -> dict[str, np.ndarray]:
        """What this worker's run ends with, to compare with the simulated run's (after the traffic is counted)."""
        return params

    def history(self, state) -> dict[str, list]:
        """Per-step decisions of this worker to compare with :attr:`SimulatedRun.history` (none here)."""
        return {}

    def max_workers(self, setup: TrainingSetup) -> int:
        """The most workers this technique can train ``setup`` on: one example each."""
        return setup.batch_size


class DataParallel(Technique):
    """Lesson 029's step: each worker takes its shard (025), computes its weighted local gradients
    (026), averages each tensor over the workers with lesson 028's ring all-reduce, and takes the
    same SGD step."""

    name = "data parallel"

    def __init__(self, reference_function: ReferenceLookup, learning_rate: float = 0.05):
        super().__init__(reference_function)
        self.learning_rate = learning_rate

    def describe(self) -> str:
        return (f"lesson 029's step: shard (025), local gradients (026), ring all-reduce of each tensor "
                f"(028's schedule), SGD with learning rate {self.learning_rate:g}")

    def start(self, cluster: RealCluster, params: dict[str, np.ndarray]) -> None:
        for name in ("shard_dataset_across_workers", "compute_local_gradients"):
            self.reference(name)  # loaded now, not during the first step
        return None

    def step(self, cluster: RealCluster, params, state, X, Y):
        n = cluster.num_workers
        X_r, Y_r = self.reference("shard_dataset_across_workers")(X, Y, n)[cluster.rank]
        loss, grads = self.reference("compute_local_gradients")(params, X_r, Y_r, len(X), n)
        new = {key: params[key] - self.learning_rate * cluster.ring_all_reduce_mean(grads[key]) for key in params}
        return new, state, loss

    def simulate(self, setup: TrainingSetup, num_workers: int) -> SimulatedRun:
        train_step = self.reference("data_parallel_train_step")
        shard, local = self.reference("shard_dataset_across_workers"), self.reference("compute_local_gradients")
        ring = self.reference("ring_all_reduce_mean")
        params, losses, cluster, steps = setup.initial_params(), [], Cluster(num_workers), []
        for X, Y in self.batches(setup):
            # 029 all-reduces each tensor with 028 on a cluster of its own and keeps no ledger; the
            # same calls on one cluster write down the traffic of the whole run.
            local_grads = [local(params, X_r, Y_r, len(X), num_workers)[1] for X_r, Y_r in shard(X, Y, num_workers)]
            for key in params:
                ring([grads[key] for grads in local_grads], cluster)
            worker_params, loss = train_step(params, X, Y, num_workers, self.learning_rate)
            params = worker_params[0]
            losses.append(loss)
            steps.append(worker_params)
        return SimulatedRun(worker_params, losses, cluster.ledger.summary(), step_params=steps,
                            messages=ledger_messages(cluster))


class Zero(Technique):
    """Lesson 035's step (ZeRO stage 1): local gradients as in data parallelism, a ring reduce-scatter
    so that worker r holds the mean gradient of its shard r, Adam on that shard with its own state
    (033), and an all-gather of the new shards (034)."""

    name = "ZeRO"

    def __init__(self, reference_function: ReferenceLookup, learning_rate: float = 0.01, beta1: float = 0.9,
                 beta2: float = 0.999, eps: float = 1e-8):
        super().__init__(reference_function)
        self.learning_rate, self.beta1, self.beta2, self.eps = learning_rate, beta1, beta2, eps

    def describe(self) -> str:
        return (f"lesson 035's step: local gradients (025, 026), ring reduce-scatter, Adam on the worker's "
                f"own shard (033, learning rate {self.learning_rate:g}), all-gather (034)")

    def start(self, cluster: RealCluster, params):
        for name in ("shard_dataset_across_workers", "compute_local_gradients", "local_shard_adam_update"):
            self.reference(name)  # loaded now, not during the first step
        # 031 and 032 cut this worker's shard of Adam's (zero) state; a worker keeps only its own.
        state = self.reference("init_adam_state")(params)
        return self.reference("partition_optimizer_state")(state, cluster.num_workers)[cluster.rank]

    def step(self, cluster: RealCluster, params, state, X, Y):
        n, rank = cluster.num_workers, cluster.rank
        X_r, Y_r = self.reference("shard_dataset_across_workers")(X, Y, n)[rank]
        loss, grads = self.reference("compute_local_gradients")(params, X_r, Y_r, len(X), n)
        mean_grad_shard = cluster.reduce_scatter_mean(flatten({key: grads[key] for key in params}))
        param_shards = np.array_split(flatten(params), n)
        new_shard, state = self.reference("local_shard_adam_update")(
            param_shards[rank], mean_grad_shard, state, self.learning_rate, self.beta1, self.beta2, self.eps)
        flat = cluster.all_gather_shards(new_shard, [shard.size for shard in param_shards])
        return unflatten(flat, params), state, loss

    def simulate(self, setup: TrainingSetup, num_workers: int) -> SimulatedRun:
        zero_step = self.reference("zero_optimizer_step")
        shard, local = self.reference("shard_dataset_across_workers"), self.reference("compute_local_gradients")
        params, losses, cluster, steps = setup.initial_params(), [], Cluster(num_workers), []
        states = self.reference("partition_optimizer_state")(self.reference("init_adam_state")(params), num_workers)
        for X, Y in self.batches(setup):
            contributions = [local(params, X_r, Y_r, len(X), num_workers) for X_r, Y_r in shard(X, Y, num_workers)]
            worker_params, states, _ = zero_step(params, [grads for _, grads in contributions], states,
                                                 self.learning_rate, self.beta1, self.beta2, self.eps,
                                                 cluster=cluster)
            params = worker_params[0]
            losses.append(sum(loss for loss, _ in contributions) / num_workers)
            steps.append(worker_params)
        return SimulatedRun(worker_params, losses, cluster.ledger.summary(), step_params=steps,
                            messages=ledger_messages(cluster))


@dataclass
class LoopState:
    """One worker's state between two steps of lesson 040's loop (what it owns, and the loss scaler)."""

    sizes: list[int]  # every worker's number of owned parameters: ZeRO's shards, or [all of them]
    lo: int  # this worker owns the flat vector's elements lo .. hi - 1
    hi: int
    adam: dict[str, Any]  # {"step": t, "m": (owned,), "v": (owned,)}: float32 in mixed precision
    master: np.ndarray | None  # (owned,) float32 master weights in mixed precision, else None
    loss_scale: float  # the scale of the next step (1.0 without mixed precision)
    clean_steps: int = 0  # steps in a row without an overflow, since the scale last changed
    skipped: list[bool] = field(default_factory=list)  # per step: skipped by the loss scaler?
    loss_scales: list[float] = field(default_factory=list)  # per step: the scale it used


class FullTrainingLoop(Technique):
    """Lesson 040's step, with the switches of a :class:`~shared.training.TrainingConfig`.

    Worker r takes its shard ``X[r::N]`` (025) and computes its gradients with Part 7's
    ``worker_gradients`` (micro-batches, checkpointed segments, the loss scale), weighted by
    N n_r / B (026) into one flat vector; the workers average it with the ring reduce-scatter
    of 035 (ZeRO) or the ring all-reduce of 028; each worker unscales it in float32 (mixed
    precision), updates what it owns with Adam (033: its shard of the float32 master weights,
    or of the parameters), casts it to float16 (mixed precision) and, with ZeRO, all-gathers
    the new shards (034). A vector with an inf or NaN is skipped and the scale halved; after
    ``growth_interval`` clean steps it doubles. Every worker holds the same vector after the
    collective, so each decides to skip on its own: no message is needed.

    As lesson 040's loop does, it trains on one batch (the setup's first) at every step. The
    config's ``num_workers`` and ``steps`` are ignored: a run has the cluster's N and the setup's steps.
    """

    name = "full loop"

    def __init__(self, reference_function: ReferenceLookup, config: TrainingConfig | None = None):
        super().__init__(reference_function)
        # Every switch on; a loss scale that overflows float16 at first (the scaler skips and halves),
        # doubled again after 5 clean steps.
        self.config = config or TrainingConfig(learning_rate=0.01, num_micro_batches=2, segment_size=2,
                                               mixed_precision=True, zero_stage=1, growth_interval=5)

    def describe(self) -> str:
        c = self.config
        switches = [f"{c.num_micro_batches} micro-batches" if c.num_micro_batches > 1 else "",
                    f"checkpointed segments of {c.segment_size} layers" if c.segment_size else "",
                    f"float16 with a loss scale of {c.loss_scale:g} at first, doubled after {c.growth_interval} "
                    f"clean steps" if c.mixed_precision else ""]
        passes = ", ".join(switch for switch in switches if switch) or "one pass"
        owned = "the float32 master weights" if c.mixed_precision else "the parameters"
        if c.zero_stage:
            collectives = (f"ring reduce-scatter (035), Adam on the worker's shard of {owned} (033, learning rate "
                           f"{c.learning_rate:g}), all-gather (034)")
        else:
            collectives = f"ring all-reduce (028), Adam on all of {owned} (033, learning rate {c.learning_rate:g})"
        return (f"lesson 040's step on its one batch: shard (025), worker_gradients ({passes}) weighted (026), "
                f"{collectives}")

    def batches(self, setup: TrainingSetup):
        return [setup.batch(0)] * setup.steps

    def max_workers(self, setup: TrainingSetup) -> int:
        """Each worker needs ``num_micro_batches`` examples, and with ZeRO one parameter (040 refuses less)."""
        most = setup.batch_size // self.config.num_micro_batches
        return min(most, setup.num_params) if self.config.zero_stage else most

    def start(self, cluster: RealCluster, params) -> LoopState:
        for name in ("shard_dataset_across_workers", "local_shard_adam_update"):
            self.reference(name)  # loaded now, not during the first step
        config, flat = self.config, flatten(params)
        # What each worker owns (updates with Adam, and keeps the state of): with ZeRO its shard of
        # np.array_split, without it everything (one "shard").
        if config.zero_stage:
            sizes, shard = [len(chunk) for chunk in np.array_split(flat, cluster.num_workers)], cluster.rank
        else:
            sizes, shard = [flat.size], 0
        lo, owned = sum(sizes[:shard]), sizes[shard]
        dtype = np.float32 if config.mixed_precision else flat.dtype
        return LoopState(sizes, lo, lo + owned, {"step": 0, "m": np.zeros(owned, dtype), "v": np.zeros(owned, dtype)},
                         flat[lo:lo + owned].astype(np.float32) if config.mixed_precision else None,
                         config.loss_scale if config.mixed_precision else 1.0)

    def local_gradient(self, params, X_r, Y_r, batch_size: int, num_workers: int, loss_scale: float | None):
        """This worker's weighted loss and flat gradient: ``worker_gradients`` times N n_r / B (026).

        ``params`` in the dtype of the passes (float16 in mixed precision, where the gradient is
        ``loss_scale`` times too large, and may hold inf); returns (a float, a 1-D vector of that dtype).
        """
        loss, grads, _ = worker_gradients(params, X_r, Y_r, self.config.num_micro_batches,
                                          self.config.segment_size, loss_scale)
        weight = num_workers * len(X_r) / batch_size
        with np.errstate(over="ignore", invalid="ignore"):  # float16 overflow is the loss scaler's business
            return weight * loss, np.concatenate([weight * grads[key].ravel() for key in params])

    def step(self, cluster: RealCluster, params, state: LoopState, X, Y):
        config, n, mixed = self.config, cluster.num_workers, self.config.mixed_precision
        X_r, Y_r = self.reference("shard_dataset_across_workers")(X, Y, n)[cluster.rank]
        # The working copy: float16 in mixed precision (the first step casts the float64 start, as 040 does).
        working = flatten(params).astype(np.float16, copy=False) if mixed else flatten(params)
        loss, flat_grad = self.local_gradient(unflatten(working, params), X_r, Y_r, len(X), n,
                                              state.loss_scale if mixed else None)
        with np.errstate(over="ignore", invalid="ignore"):  # float16 overflow is the loss scaler's business
            # The mean gradient of what this worker owns: its shard (035), or everything (028).
            if config.zero_stage:
                mean = cluster.reduce_scatter_mean(flat_grad)
            else:
                mean = cluster.ring_all_reduce_mean(flat_grad)
            grad = mean.astype(np.float32) / np.float32(state.loss_scale) if mixed else mean
            owned = state.master if mixed else working[state.lo:state.hi]
            new_owned, adam = self.reference("local_shard_adam_update")(owned, grad, state.adam, config.learning_rate,
                                                                   config.beta1, config.beta2, config.eps)
            new = new_owned.astype(np.float16) if mixed else new_owned
            if config.zero_stage:
                new = cluster.all_gather_shards(new, state.sizes)
            skipped = mixed and not np.isfinite(new).all()  # every worker holds the same vector: no message
        state.skipped.append(bool(skipped))
        state.loss_scales.append(float(state.loss_scale))
        if skipped:  # nothing changes; the scale halves
            state.loss_scale, state.clean_steps = state.loss_scale / 2, 0
            return params, state, loss
        state.adam = adam
        if mixed:
            state.master, state.clean_steps = new_owned, state.clean_steps + 1
            if state.clean_steps == config.growth_interval:
                state.loss_scale, state.clean_steps = state.loss_scale * 2, 0
        return unflatten(new, params), state, loss

    def final_params(self, cluster: RealCluster, params, state: LoopState):
        """The loop's answer: its master weights. In mixed precision they are the float32 ones, of which
        a ZeRO worker holds its shard: the workers all-gather them once, after the training's traffic
        is counted (the simulated loop concatenates them outside its ledger too)."""
        if not self.config.mixed_precision:
            return params
        master = cluster.all_gather_shards(state.master, state.sizes) if self.config.zero_stage else state.master
        return unflatten(master, params)

    def history(self, state: LoopState) -> dict[str, list]:
        return {"skipped": state.skipped, "loss_scale": state.loss_scales}

    def simulate(self, setup: TrainingSetup, num_workers: int) -> SimulatedRun:
        X, Y = setup.batch(0)
        config = replace(self.config, steps=setup.steps, num_workers=num_workers)
        cluster = Cluster(num_workers)  # the loop runs every collective on it: its ledger is the traffic
        final, history, _ = self.reference("full_distributed_training_loop")(setup.initial_params(), X, Y, config, cluster)
        # The lesson's workers all end with these parameters; its loop returns them once.
        return SimulatedRun([final] * num_workers, history["loss"], cluster.ledger.summary(),
                            {"skipped": history["skipped"], "loss_scale": history["loss_scale"]},
                            messages=ledger_messages(cluster))


# The techniques by the names that `make train-distributed TECHNIQUE=...` takes.
TECHNIQUES = {"data-parallel": DataParallel, "zero": Zero, "full-loop": FullTrainingLoop}


def train_worker(cluster: RealCluster, setup: TrainingSetup, techniques: list[Technique]) -> list[dict[str, Any]]:
    """What each real process runs: every technique's training from the same start, one after another.

    Returns one dict per technique: this worker's final ``params`` (``technique.final_params``), its
    ``losses`` (its contribution at each step), its ``traffic`` (the :class:`TrafficCount` summary of
    the training), its ``history`` (``technique.history``), ``socket_bytes`` (what the operating
    system saw this process write during the training, or None) and ``seconds``; and, where the
    technique keeps them, ``step_params`` (its parameters after each step) and ``messages``.
    """
    results = []
    for technique in techniques:
        cluster.traffic = TrafficCount()
        params = setup.initial_params()
        cluster.doing(technique.running())  # what the parent names if the run is stopped (before the byte count)
        state = technique.start(cluster, params)
        cluster.barrier()
        written = bytes_written_by_this_process()
        started = time.perf_counter()
        params, state, losses = technique.train(cluster, params, state, setup)
        seconds = time.perf_counter() - started
        after = bytes_written_by_this_process()
        traffic = cluster.traffic.summary()  # the training's, before final_params may communicate
        results.append({"params": technique.final_params(cluster, params, state), "losses": losses,
                        "traffic": traffic, "history": technique.history(state),
                        "socket_bytes": None if written is None or after is None else after - written,
                        "seconds": seconds, "messages": technique.messages(state),
                        "step_params": getattr(technique, "step_params", None) if technique.records_steps else None})
    return results


@dataclass
class Comparison:
    """One technique, run on real processes and simulated: what matched and by how much."""

    technique: str
    description: str
    num_workers: int
    largest_difference: float  # max |real - simulated| over every worker's every parameter
    largest_relative_difference: float
    real_losses: list[float]  # the batch's loss at each step: the mean of the workers' contributions
    simulated_losses: list[float]
    real_traffic: list[dict[str, int]]  # per worker
    simulated_traffic: dict[str, Any]  # the ledger's summary
    socket_bytes: list[int | None]
    seconds: float  # the slowest worker's training time
    params_close: bool = field(default=False)
    params_dtype: str = "float64"
    real_histories: list[dict[str, list]] = field(default_factory=list)  # per worker, Technique.history
    simulated_history: dict[str, list] = field(default_factory=dict)
    first_difference: list[str] = field(default_factory=list)  # where the real run first left the simulated one

    @property
    def traffic_matches(self) -> bool:
        return all(self.real_traffic[rank][key] == self.simulated_traffic[key][rank]
                   for rank in range(self.num_workers)
                   for key in ("bytes_sent", "bytes_received", "messages_sent", "messages_received")) \
            and all(count["rounds"] == self.simulated_traffic["rounds"] for count in self.real_traffic)

    @property
    def histories_match(self) -> bool:
        """Every worker took the simulated run's per-step decisions (the loss scaler's skips and scales)."""
        return all(history == self.simulated_history for history in self.real_histories)

    @property
    def ok(self) -> bool:
        return self.params_close and self.traffic_matches and self.histories_match


def compare(technique: Any, setup: TrainingSetup, real: list[dict[str, Any]],
            simulated: SimulatedRun) -> Comparison:
    """Compare every real worker's run (``real``, by rank) with the simulated run."""
    num_workers = len(real)
    largest = largest_relative = 0.0
    close = True
    for rank, result in enumerate(real):
        for key, value in simulated.worker_params[rank].items():
            got = result["params"][key]
            difference = np.abs(got - value)
            largest = max(largest, float(difference.max(initial=0.0)))
            scale = np.abs(value)
            relative = np.divide(difference, scale, out=np.where(difference > 0, np.inf, 0.0), where=scale > 0)
            largest_relative = max(largest_relative, float(relative.max(initial=0.0)))
            close = close and got.dtype == value.dtype and bool(np.allclose(got, value, rtol=RTOL, atol=0.0))
    real_losses = [sum(result["losses"][step] for result in real) / num_workers for step in range(setup.steps)]
    comparison = Comparison(technique.name, technique.describe(), num_workers, largest, largest_relative, real_losses,
                      simulated.losses, [result["traffic"] for result in real],
                      simulated.traffic, [result["socket_bytes"] for result in real],
                      max(result["seconds"] for result in real), close,
                      str(next(iter(simulated.worker_params[0].values())).dtype),
                      [result["history"] for result in real], simulated.history)
    if not comparison.ok:
        comparison.first_difference = first_difference(technique.name, real, simulated)
    return comparison


def run(num_workers: int, setup: TrainingSetup, techniques: list[Any], timeout: float = DEFAULT_TIMEOUT,
        preload: Iterable[str] = ()) -> list[Comparison]:
    """Train on ``num_workers`` real processes and in the simulation; one :class:`Comparison` per technique.

    ``preload``: modules for the workers' process server to import once beside :data:`PRELOAD`: what
    the techniques' reference lookup loads (for the course's, ``grading.judge`` and the matplotlib
    that the reference solutions import), so that no worker spends a second on it.

    Raises what :func:`torch_extra.real_cluster.launch` raises (no torch, a failed worker, the time limit).
    """
    real = launch(num_workers, train_worker, setup, techniques, timeout=timeout,
                  preload=[*PRELOAD, *preload])
    return [compare(technique, setup, [per_rank[index] for per_rank in real], technique.simulate(setup, num_workers))
            for index, technique in enumerate(techniques)]


def step_ranges(steps: list[int]) -> str:
    """Step numbers as ranges: [0, 1, 2, 5] -> "0-2, 5"."""
    ranges: list[list[int]] = []
    for step in steps:
        if ranges and step == ranges[-1][1] + 1:
            ranges[-1][1] = step
        else:
            ranges.append([step, step])
    return ", ".join(f"{first}" if first == last else f"{first}-{last}" for first, last in ranges)


def describe_loss_scaler(history: dict[str, list]) -> str:
    """Lesson 040's ``skipped`` and ``loss_scale`` per step, in a line:
    "steps 0-4 skipped (5 of 20); scale 65536 (step 0), 32768 (1), ..., 2048 (5-9)"."""
    skipped = [step for step, flag in enumerate(history["skipped"]) if flag]
    runs: list[tuple[float, list[int]]] = []  # (scale, the steps that used it), in order
    for step, scale in enumerate(history["loss_scale"]):
        if runs and runs[-1][0] == scale:
            runs[-1][1].append(step)
        else:
            runs.append((scale, [step]))
    scales = ", ".join(f"{scale:g} ({('step ' if len(steps) == 1 else 'steps ') if index == 0 else ''}"
                       f"{step_ranges(steps)})" for index, (scale, steps) in enumerate(runs))
    skips = f"steps {step_ranges(skipped)} skipped" if skipped else "no step skipped"
    return f"{skips} ({len(skipped)} of {len(history['skipped'])}); scale {scales}"


def format_report(comparisons: list[Comparison], setup: TrainingSetup,
                  computing_with: str = "the course's reference functions") -> str:
    """The comparison as text: losses, the largest difference, the traffic per worker, and where a real run
    first left the simulated one. ``computing_with`` says whose functions the processes ran."""
    import torch

    n = comparisons[0].num_workers
    params = setup.initial_params()
    num_params = sum(value.size for value in params.values())
    shard_rows = [len(range(rank, setup.batch_size, n)) for rank in range(n)]
    lines = [f"{n} worker processes (torch {torch.__version__}, gloo over TCP on 127.0.0.1), computing with "
             f"{computing_with}",
             f"model: MLP {list(setup.layer_sizes)} ({num_params:,} parameters, {num_params * 8:,} bytes in float64); "
             f"batch {setup.batch_size}, shards of {', '.join(map(str, shard_rows))} rows; {setup.steps} steps", ""]
    for c in comparisons:
        verdict = "equal bit for bit" if c.largest_difference == 0 else (
            "within rtol 1e-10" if c.params_close else "NOT EQUAL")
        lines += [f"{c.technique}: {c.description}",
                  f"  loss {c.real_losses[0]:.6f} -> {c.real_losses[-1]:.6f} "
                  f"(simulated: {c.simulated_losses[0]:.6f} -> {c.simulated_losses[-1]:.6f})",
                  *([f"  loss scaler: {describe_loss_scaler(c.real_histories[0])}; "
                     f"{'every worker as simulated' if c.histories_match else 'DIFFERS from the simulated run'}"]
                    if c.simulated_history else []),
                  f"  final {c.params_dtype} parameters, every worker vs the simulated run: largest difference "
                  f"{c.largest_difference:.3g} (relative {c.largest_relative_difference:.3g}), {verdict}",
                  f"  {'worker':>6} {'bytes sent':>12} {'ledger says':>12} {'messages sent':>14} {'ledger says':>12}"
                  f" {'written to its sockets (OS count)':>34}"]
        for rank in range(n):
            real, ledger = c.real_traffic[rank], c.simulated_traffic
            wire = c.socket_bytes[rank]
            socket = "n/a" if wire is None else (
                f"{wire:,} (+{(wire - real['bytes_sent']) / max(real['messages_sent'], 1):.0f} B/message)")
            lines.append(f"  {rank:>6} {real['bytes_sent']:>12,} {ledger['bytes_sent'][rank]:>12,} "
                         f"{real['messages_sent']:>14,} {ledger['messages_sent'][rank]:>12,} {socket:>34}")
        matches = "as the ledger predicts, worker for worker" if c.traffic_matches else "DIFFERS from the ledger"
        lines.append(f"  rounds: {c.real_traffic[0]['rounds']:,} (ledger: {c.simulated_traffic['rounds']:,}); "
                     f"traffic {matches}; training {c.seconds:.2f} s (slowest worker)")
        lines += [f"  {line}" for line in c.first_difference]
        lines.append("")
    lines.append("(OS count: what the operating system saw the process write during the training, payload "
                 "and gloo's headers)")
    return "\n".join(wrapped for line in lines for wrapped in wrap_line(line))


def wrap_line(line: str) -> list[str]:
    """A report line cut at :data:`REPORT_WIDTH` characters, the rest indented two more spaces than it."""
    indent = " " * (len(line) - len(line.lstrip()) + 2)
    return textwrap.wrap(line, REPORT_WIDTH, subsequent_indent=indent, break_on_hyphens=False) or [line]
