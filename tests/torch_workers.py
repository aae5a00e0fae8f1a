"""What each real process does in the PyTorch cross-checks (tests/test_torch_distributed.py).

Loaded by name in the worker processes (``launch`` pickles a function by its module and
name). The heavy parts of torch that only the workers need (DistributedDataParallel,
which imports torch._dynamo when first used, and ZeroRedundancyOptimizer) are imported
where they are used; :data:`PRELOAD` lists them for the process server, which imports
them once before forking the workers. Only tests that need torch import this module.
"""

from __future__ import annotations

import os
import time

import numpy as np
import torch
import torch.distributed as dist

from torch_extra.real_cluster import TrafficCount, bytes_written_by_this_process

PRELOAD = ["torch_workers", "torch._dynamo", "torch.distributed.optim", "torch.nn.parallel"]

# Shapes for the all-reduce checks: sizes that 2 and 4 workers divide and do not, one smaller than N.
ALL_REDUCE_CASES = [((7, 3), np.float64), ((5,), np.float64), ((1,), np.float64), ((4, 4), np.float64),
                    ((6, 5), np.float32)]
GLOO_PAYLOAD = 6000  # float64 numbers all-reduced by gloo itself, to see its bytes on the sockets


def worker_arrays(case: int, num_workers: int) -> list[np.ndarray]:
    """Every worker's array of all-reduce case ``case`` (each process draws them all and keeps its own)."""
    shape, dtype = ALL_REDUCE_CASES[case]
    rng = np.random.default_rng(1000 + case)
    return [rng.standard_normal(shape).astype(dtype) for _ in range(num_workers)]


def torch_mlp(params: dict[str, np.ndarray]) -> torch.nn.Sequential:
    """The helper MLP as torch layers, float64: ``nn.Linear`` keeps W as (fan_out, fan_in), so W.T."""
    layers = []
    count = len(params) // 2
    for i in range(1, count + 1):
        W = params[f"W{i}"]
        linear = torch.nn.Linear(W.shape[0], W.shape[1], dtype=torch.float64)
        with torch.no_grad():
            linear.weight.copy_(torch.from_numpy(W.T))
            linear.bias.copy_(torch.from_numpy(params[f"b{i}"]))
        layers.append(linear)
        if i < count:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def params_of(model: torch.nn.Module) -> dict[str, np.ndarray]:
    """The model's parameters back in the course's layout ``W1, b1, ...``."""
    linears = [layer for layer in model.modules() if isinstance(layer, torch.nn.Linear)]
    params = {}
    for i, linear in enumerate(linears, start=1):
        params[f"W{i}"] = linear.weight.detach().numpy().T.copy()
        params[f"b{i}"] = linear.bias.detach().numpy().copy()
    return params


def train_with_torch(cluster, setup, make_optimizer) -> dict:
    """DistributedDataParallel training on this worker's shard X[r::N], each worker's mean loss weighted
    by N * n_r / B as in lesson 026 (DDP averages the workers' gradients)."""
    from torch.nn.parallel import DistributedDataParallel

    n, rank = cluster.num_workers, cluster.rank
    model = DistributedDataParallel(torch_mlp(setup.initial_params()))
    optimizer = make_optimizer(model)
    losses = []
    for X, Y in setup.batches():
        X_r, Y_r = torch.from_numpy(X[rank::n]), torch.from_numpy(Y[rank::n])
        weight = n * len(X_r) / len(X)
        optimizer.zero_grad()
        loss = weight * torch.mean((model(X_r) - Y_r) ** 2)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return {"params": params_of(model.module), "losses": losses}


def crosscheck_worker(cluster, setup, sgd_learning_rate, adam_learning_rate) -> dict:
    """One worker's part of every real-process cross-check; the parent compares the results."""
    from torch.distributed.optim import ZeroRedundancyOptimizer

    n = cluster.num_workers
    results: dict = {"all_reduce": []}
    for case in range(len(ALL_REDUCE_CASES)):
        mine = worker_arrays(case, n)[cluster.rank]
        summed = torch.from_numpy(mine.copy())
        dist.all_reduce(summed, op=dist.ReduceOp.SUM)  # gloo's own algorithm
        cluster.traffic = TrafficCount()
        ring = cluster.ring_all_reduce_mean(mine)  # the course's ring, on these processes
        results["all_reduce"].append({"torch": (summed / n).numpy(), "ring": ring,
                                      "traffic": cluster.traffic.summary()})

    payload = torch.ones(GLOO_PAYLOAD, dtype=torch.float64)
    cluster.barrier()
    before = bytes_written_by_this_process()
    dist.all_reduce(payload)
    after = bytes_written_by_this_process()
    results["gloo_socket_bytes"] = None if before is None else after - before

    results["ddp_sgd"] = train_with_torch(
        cluster, setup, lambda model: torch.optim.SGD(model.parameters(), lr=sgd_learning_rate))
    partition: list[int] = []

    def zero_redundancy_adam(model):
        optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam,
                                            lr=adam_learning_rate)
        partition.extend(sum(p.numel() for group in groups for p in group["params"])
                         for groups in optimizer._partition_parameters())
        return optimizer

    results["ddp_zero_redundancy_adam"] = train_with_torch(cluster, setup, zero_redundancy_adam)
    results["zero_redundancy_partition"] = partition  # parameters whose Adam state each rank keeps
    return results


def fail_on_rank(cluster, failing_rank: int) -> None:
    """Worker ``failing_rank`` raises at once; the others compute for ten minutes, far beyond the run's
    time limit, unless the launcher stops them when the first worker fails."""
    if cluster.rank == failing_rank:
        raise ValueError(f"worker {failing_rank} was told to fail")
    time.sleep(600)


def die_on_rank(cluster, dying_rank: int) -> None:
    """Worker ``dying_rank`` disappears without a word (as after a crash of the interpreter)."""
    if cluster.rank == dying_rank:
        os._exit(3)
    x = np.zeros(3)
    cluster.exchange(x, x)


def sleep_forever(cluster) -> None:
    time.sleep(600)


def start_a_child_and_hang(cluster, record: str) -> None:
    """Start a child process (it stays in the worker's process group), write its pid to ``record``, never return."""
    import subprocess
    child = subprocess.Popen(["sleep", "600"])
    with open(record, "w") as out:
        out.write(str(child.pid))
    while True:
        time.sleep(1)
