"""Training on real processes, beside the simulated run: lessons 029 and 035 on N OS processes.

``make train-distributed WORKERS=4`` (``tools/train_distributed.py``) calls :func:`run`:
the same seeded training runs twice,

- **simulated**: the course's reference ``data_parallel_train_step`` (029) and
  ``zero_optimizer_step`` (035) on the simulated cluster, whose traffic ledger
  predicts the bytes and messages each worker sends;
- **real**: N processes (:func:`shared.real_cluster.launch`), each computing its
  own part with the course's reference functions (025 its shard, 026 its local
  gradients, 033 Adam on its own shard), the messages carried by torch.distributed
  (gloo) on the schedules of lessons 028, 034 and 035;

and compares the final parameters of every worker (float64, rtol 1e-10; they come
out equal bit for bit, as the arithmetic is the same, operation for operation)
and each worker's bytes and messages with the ledger's column for that worker.
What the operating system saw each process write to its sockets is reported too:
the payload plus the transport's own headers.

**Plugging in another loop.**  A *technique* is any picklable object with

- ``name`` and ``describe()``: what it is, for the report;
- ``start(cluster, params) -> state``: a worker's state before the first step;
- ``step(cluster, params, state, X, Y) -> (params, state, loss)``: one worker's step
  on the global batch ``(X, Y)`` (``cluster`` is its :class:`RealCluster`; ``loss``
  that worker's contribution, the batch's loss being the mean over the workers);
- ``simulate(setup, num_workers) -> SimulatedRun``: the same run on the simulated cluster;

:class:`DataParallel` and :class:`Zero` are the two that exist; lesson 040's
training loop can come in as a third, its per-step work built from its own pieces.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import mlp
from .cluster import Cluster
from .data import make_regression_batch
from .real_cluster import DEFAULT_TIMEOUT, RealCluster, TrafficCount, bytes_written_by_this_process, launch

RTOL = 1e-10  # the real run's parameters against the simulated run's, float64
# What the workers' process server imports once, so that no worker spends a second on it
# (the reference solutions import matplotlib's pyplot).
PRELOAD = ["shared.real_training", "grading.judge", "matplotlib.pyplot"]


def reference(name: str) -> Any:
    """The course's reference solution of the lesson whose function is ``name`` (solutions/NN_slug.py)."""
    from grading.judge import reference_function
    from .lessons import lesson
    return reference_function(lesson(name))


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


class DataParallel:
    """Lesson 029's step: each worker takes its shard (025), computes its weighted local gradients
    (026), averages each tensor over the workers with lesson 028's ring all-reduce, and takes the
    same SGD step."""

    name = "data parallel"

    def __init__(self, learning_rate: float = 0.05):
        self.learning_rate = learning_rate

    def describe(self) -> str:
        return (f"lesson 029's step: shard (025), local gradients (026), ring all-reduce of each tensor "
                f"(028's schedule), SGD with learning rate {self.learning_rate:g}")

    def start(self, cluster: RealCluster, params: dict[str, np.ndarray]) -> None:
        for name in ("shard_dataset_across_workers", "compute_local_gradients"):
            reference(name)  # loaded now, not during the first step
        return None

    def step(self, cluster: RealCluster, params, state, X, Y):
        n = cluster.num_workers
        X_r, Y_r = reference("shard_dataset_across_workers")(X, Y, n)[cluster.rank]
        loss, grads = reference("compute_local_gradients")(params, X_r, Y_r, len(X), n)
        new = {key: params[key] - self.learning_rate * cluster.ring_all_reduce_mean(grads[key]) for key in params}
        return new, state, loss

    def simulate(self, setup: TrainingSetup, num_workers: int) -> SimulatedRun:
        train_step = reference("data_parallel_train_step")
        shard, local = reference("shard_dataset_across_workers"), reference("compute_local_gradients")
        ring = reference("ring_all_reduce_mean")
        params, losses, cluster = setup.initial_params(), [], Cluster(num_workers)
        for X, Y in setup.batches():
            # 029 all-reduces each tensor with 028 on a cluster of its own and keeps no ledger; the
            # same calls on one cluster write down the traffic of the whole run.
            local_grads = [local(params, X_r, Y_r, len(X), num_workers)[1] for X_r, Y_r in shard(X, Y, num_workers)]
            for key in params:
                ring([grads[key] for grads in local_grads], cluster)
            worker_params, loss = train_step(params, X, Y, num_workers, self.learning_rate)
            params = worker_params[0]
            losses.append(loss)
        return SimulatedRun(worker_params, losses, cluster.ledger.summary())


class Zero:
    """Lesson 035's step (ZeRO stage 1): local gradients as in data parallelism, a ring reduce-scatter
    so that worker r holds the mean gradient of its shard r, Adam on that shard with its own state
    (033), and an all-gather of the new shards (034)."""

    name = "ZeRO"

    def __init__(self, learning_rate: float = 0.01, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8):
        self.learning_rate, self.beta1, self.beta2, self.eps = learning_rate, beta1, beta2, eps

    def describe(self) -> str:
        return (f"lesson 035's step: local gradients (025, 026), ring reduce-scatter, Adam on the worker's "
                f"own shard (033, learning rate {self.learning_rate:g}), all-gather (034)")

    def start(self, cluster: RealCluster, params):
        for name in ("shard_dataset_across_workers", "compute_local_gradients", "local_shard_adam_update"):
            reference(name)  # loaded now, not during the first step
        # 031 and 032 cut this worker's shard of Adam's (zero) state; a worker keeps only its own.
        state = reference("init_adam_state")(params)
        return reference("partition_optimizer_state")(state, cluster.num_workers)[cluster.rank]

    def step(self, cluster: RealCluster, params, state, X, Y):
        n, rank = cluster.num_workers, cluster.rank
        X_r, Y_r = reference("shard_dataset_across_workers")(X, Y, n)[rank]
        loss, grads = reference("compute_local_gradients")(params, X_r, Y_r, len(X), n)
        mean_grad_shard = cluster.reduce_scatter_mean(np.concatenate([grads[key].ravel() for key in params]))
        param_shards = np.array_split(np.concatenate([value.ravel() for value in params.values()]), n)
        new_shard, state = reference("local_shard_adam_update")(
            param_shards[rank], mean_grad_shard, state, self.learning_rate, self.beta1, self.beta2, self.eps)
        flat = cluster.all_gather_shards(new_shard, [shard.size for shard in param_shards])
        new, offset = {}, 0
        for key, value in params.items():
            new[key] = flat[offset:offset + value.size].reshape(value.shape)
            offset += value.size
        return new, state, loss

    def simulate(self, setup: TrainingSetup, num_workers: int) -> SimulatedRun:
        zero_step = reference("zero_optimizer_step")
        shard, local = reference("shard_dataset_across_workers"), reference("compute_local_gradients")
        params, losses, cluster = setup.initial_params(), [], Cluster(num_workers)
        states = reference("partition_optimizer_state")(reference("init_adam_state")(params), num_workers)
        for X, Y in setup.batches():
            contributions = [local(params, X_r, Y_r, len(X), num_workers) for X_r, Y_r in shard(X, Y, num_workers)]
            worker_params, states, _ = zero_step(params, [grads for _, grads in contributions], states,
                                                 self.learning_rate, self.beta1, self.beta2, self.eps,
                                                 cluster=cluster)
            params = worker_params[0]
            losses.append(sum(loss for loss, _ in contributions) / num_workers)
        return SimulatedRun(worker_params, losses, cluster.ledger.summary())


def default_techniques() -> list[Any]:
    return [DataParallel(), Zero()]


def train_worker(cluster: RealCluster, setup: TrainingSetup, techniques: list[Any]) -> list[dict[str, Any]]:
    """What each real process runs: every technique's training from the same start, one after another.

    Returns one dict per technique: this worker's final ``params``, its ``losses`` (its contribution
    at each step), its ``traffic`` (the :class:`TrafficCount` summary), ``socket_bytes`` (what the
    operating system saw this process write during the training, or None) and ``seconds``.
    """
    results = []
    for technique in techniques:
        cluster.traffic = TrafficCount()
        params = setup.initial_params()
        state = technique.start(cluster, params)
        losses = []
        cluster.barrier()
        written = bytes_written_by_this_process()
        started = time.perf_counter()
        for X, Y in setup.batches():
            params, state, loss = technique.step(cluster, params, state, X, Y)
            losses.append(loss)
        seconds = time.perf_counter() - started
        after = bytes_written_by_this_process()
        results.append({"params": params, "losses": losses, "traffic": cluster.traffic.summary(),
                        "socket_bytes": None if written is None or after is None else after - written,
                        "seconds": seconds})
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

    @property
    def traffic_matches(self) -> bool:
        return all(self.real_traffic[rank][key] == self.simulated_traffic[key][rank]
                   for rank in range(self.num_workers)
                   for key in ("bytes_sent", "bytes_received", "messages_sent", "messages_received")) \
            and all(count["rounds"] == self.simulated_traffic["rounds"] for count in self.real_traffic)

    @property
    def ok(self) -> bool:
        return self.params_close and self.traffic_matches


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
    return Comparison(technique.name, technique.describe(), num_workers, largest, largest_relative, real_losses,
                      simulated.losses, [result["traffic"] for result in real],
                      simulated.traffic, [result["socket_bytes"] for result in real],
                      max(result["seconds"] for result in real), close)


def run(num_workers: int, setup: TrainingSetup | None = None, techniques: list[Any] | None = None,
        timeout: float = DEFAULT_TIMEOUT) -> list[Comparison]:
    """Train on ``num_workers`` real processes and in the simulation; one :class:`Comparison` per technique.

    Raises what :func:`shared.real_cluster.launch` raises (no torch, a failed worker, the time limit).
    """
    setup = setup or TrainingSetup()
    techniques = techniques or default_techniques()
    real = launch(num_workers, train_worker, setup, techniques, timeout=timeout,
                  preload=PRELOAD)
    return [compare(technique, setup, [per_rank[index] for per_rank in real], technique.simulate(setup, num_workers))
            for index, technique in enumerate(techniques)]


def format_report(comparisons: list[Comparison], setup: TrainingSetup) -> str:
    """The comparison as text: losses, the largest difference, and the traffic per worker."""
    import torch

    n = comparisons[0].num_workers
    params = setup.initial_params()
    num_params = sum(value.size for value in params.values())
    shard_rows = [len(range(rank, setup.batch_size, n)) for rank in range(n)]
    lines = [f"{n} worker processes on this machine (torch {torch.__version__}, gloo over TCP on 127.0.0.1), "
             f"each computing with the course's reference functions",
             f"model: MLP {list(setup.layer_sizes)}, {num_params:,} parameters ({num_params * 8:,} bytes in float64); "
             f"batch {setup.batch_size} (shards of {', '.join(map(str, shard_rows))} rows); {setup.steps} steps", ""]
    for c in comparisons:
        verdict = "equal bit for bit" if c.largest_difference == 0 else (
            "within rtol 1e-10" if c.params_close else "NOT EQUAL")
        lines += [f"{c.technique}: {c.description}",
                  f"  loss {c.real_losses[0]:.6f} -> {c.real_losses[-1]:.6f} "
                  f"(simulated: {c.simulated_losses[0]:.6f} -> {c.simulated_losses[-1]:.6f})",
                  f"  final parameters, every worker against the simulated run: largest difference "
                  f"{c.largest_difference:.3g} (relative {c.largest_relative_difference:.3g}): {verdict}",
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
                     f"traffic {matches}; {c.seconds:.2f} s of training on the slowest worker")
        lines.append("")
    lines.append("(written to its sockets: what the operating system counted for the process during the "
                 "training, the payload and gloo's own headers)")
    return "\n".join(lines)
