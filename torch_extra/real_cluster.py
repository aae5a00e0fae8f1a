"""Real workers: N operating-system processes that exchange NumPy arrays over torch.distributed.

The simulated :class:`shared.cluster.Cluster` runs every worker in one Python
process, one after another.  This module is the same idea on real processes:
:func:`launch` starts N processes on this machine, joins them into one
``torch.distributed`` process group (the ``gloo`` backend, over TCP on the
loopback interface), and calls ``worker(cluster, *args)`` in each one, with ``cluster`` a
:class:`RealCluster`: that process's rank, N, and the course's ring collectives
(the schedules of lessons 028, 034 and 035) carried by ``torch.distributed``
sends and receives.  The computation stays NumPy; torch only carries the bytes::

    def worker(cluster, seed):
        x = np.random.default_rng(seed + cluster.rank).standard_normal(10)
        return cluster.ring_all_reduce_mean(x), cluster.traffic.summary()

    results = launch(4, worker, 0)   # one result per rank, in rank order

``worker`` must be importable by name (a module-level function) and its
arguments and result picklable.  Each :class:`RealCluster` counts what its
process sends and receives in a :class:`TrafficCount`, whose summary has the keys
of the simulated ledger's (``TrafficLedger.summary()``) for this one worker.

**Fail fast, clean up.**  A worker that raises, or dies, ends the whole run at
once: the other workers (blocked in a receive that will never complete) are
terminated, and :func:`launch` raises :class:`WorkerFailed` with the failed
worker's rank and its traceback.  The run as a whole has a time limit
(:class:`WorkerTimeout`).  Processes are always stopped and joined, whatever
happens. The rendezvous (a ``TCPStore`` in the launching process) listens on
127.0.0.1 only, on a port the operating system picks.

PyTorch is an optional extra of the course (``make torch``); without it
:func:`launch` raises :class:`TorchMissing`, whose message says how to install it.
The processes are forked from a server process that has imported torch once
(multiprocessing's ``forkserver``), so a launch costs a fraction of a second,
not an import of torch per worker.
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import multiprocessing.connection
import os
import socket
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import numpy as np

HOST = "127.0.0.1"
INSTALL_COMMAND = "make torch"
MISSING_TORCH = (f"PyTorch is not installed (an optional extra of the course): "
                 f"`{INSTALL_COMMAND}` installs it into .venv")
DEFAULT_TIMEOUT = 120.0  # seconds for a whole run; a worker blocked longer than this is stopped
_GRACE = 0.5  # seconds to wait, after a first failure, for the failure that caused it
_PRELOAD = ["numpy", "torch", "torch.distributed", "torch_extra.real_cluster"]


class TorchMissing(RuntimeError):
    """PyTorch (or its gloo backend) is not available; the message says how to install it."""


class WorkerFailed(RuntimeError):
    """A worker process raised an exception or died; ``rank`` says which, ``details`` its traceback."""

    def __init__(self, rank: int, num_workers: int, summary: str, details: str = "", others: str = ""):
        self.rank, self.num_workers, self.summary, self.details = rank, num_workers, summary, details
        message = f"worker {rank} of {num_workers} failed: {summary}"
        if others:
            message += f" (then: {others})"
        super().__init__(message + (f"\n{details.rstrip()}" if details else ""))


class WorkerTimeout(RuntimeError):
    """The run did not finish within its time limit; every worker was stopped."""


def torch_available() -> bool:
    """Whether torch can be imported here (without importing it)."""
    return importlib.util.find_spec("torch") is not None


def require_torch() -> Any:
    """Import and return torch, or raise :class:`TorchMissing` saying how to install it."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError as error:
        raise TorchMissing(MISSING_TORCH) from error
    if not dist.is_available() or not dist.is_gloo_available():
        raise TorchMissing(f"this build of torch has no torch.distributed gloo backend: `{INSTALL_COMMAND}` "
                           f"installs the course's CPU build")
    return torch


def loopback_interface() -> str | None:
    """The name of this machine's loopback network interface ("lo" on Linux, "lo0" on macOS), or None."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        return None
    return next((name for name in names if name in ("lo", "lo0")), None)


def bytes_written_by_this_process() -> int | None:
    """What this process has written with write() calls, sockets included (Linux's /proc/self/io
    ``wchar``), or None where the operating system does not say.

    Around a stretch of communication (and nothing else writing), the difference is what went
    into the sockets: the payload and the transport's own headers.
    """
    try:
        with open("/proc/self/io") as counters:
            for line in counters:
                if line.startswith("wchar:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


@dataclass
class TrafficCount:
    """What one worker sent and received: the simulated ledger's totals, for this worker alone."""

    bytes_sent: int = 0
    bytes_received: int = 0
    messages_sent: int = 0
    messages_received: int = 0
    rounds: int = 0

    def summary(self) -> dict[str, int]:
        return {"bytes_sent": self.bytes_sent, "bytes_received": self.bytes_received,
                "messages_sent": self.messages_sent, "messages_received": self.messages_received,
                "rounds": self.rounds}


class RealCluster:
    """One process's view of the real cluster: its rank, N, and the ring collectives.

    Built by :func:`launch` inside each worker process (the process group is already set up).
    Every collective follows, message for message, the schedule of the course's lesson of
    the same name, so :attr:`traffic` ends equal to this worker's column of the simulated
    ledger and the results equal the simulated ones bit for bit.
    """

    def __init__(self, rank: int, num_workers: int, report: Callable[[str], None] | None = None):
        self.rank = rank
        self.num_workers = num_workers
        self.traffic = TrafficCount()
        self._report = report

    def doing(self, what: str) -> None:
        """Tell the launching process what this worker does now (named if the run is stopped at its time limit)."""
        if self._report is not None:
            self._report(what)

    def __repr__(self) -> str:
        return f"RealCluster(rank {self.rank} of {self.num_workers}, {self.traffic.messages_sent} messages sent)"

    @property
    def right(self) -> int:
        return (self.rank + 1) % self.num_workers

    @property
    def left(self) -> int:
        return (self.rank - 1) % self.num_workers

    def exchange(self, array: np.ndarray, like: np.ndarray) -> np.ndarray:
        """One round of a ring: send ``array`` to the right neighbour while receiving, from the left
        one, a new array shaped and typed like ``like``; returns what was received."""
        import torch
        import torch.distributed as dist

        if self.num_workers < 2:
            raise ValueError("a single worker has no neighbour to exchange with")
        outgoing = torch.from_numpy(np.ascontiguousarray(array))
        incoming = np.empty_like(like, order="C")
        sending = dist.isend(outgoing, dst=self.right)
        dist.recv(torch.from_numpy(incoming), src=self.left)
        sending.wait()
        self.traffic.bytes_sent += array.nbytes
        self.traffic.bytes_received += incoming.nbytes
        self.traffic.messages_sent += 1
        self.traffic.messages_received += 1
        self.traffic.rounds += 1
        return incoming

    def reduce_scatter(self, chunks: Sequence[np.ndarray], first: int) -> list[np.ndarray]:
        """Ring reduce-scatter of this worker's N chunks: in round s worker r sends its running sum of
        chunk (r + first - s) % N to its right neighbour, which adds it to its own (own + received).
        Worker r ends holding the sum over all workers of chunk (r + first + 1) % N.
        (first=0 is lesson 028's schedule, first=-1 lesson 035's.)"""
        n, chunks = self.num_workers, list(chunks)
        for step in range(n - 1):
            incoming = (self.rank + first - 1 - step) % n  # what the left neighbour sends this round
            chunks[incoming] = chunks[incoming] + self.exchange(chunks[(self.rank + first - step) % n],
                                                                chunks[incoming])
        return chunks

    def all_gather(self, chunks: Sequence[np.ndarray], first: int) -> list[np.ndarray]:
        """Ring all-gather: worker r starts with chunk (r + first) % N complete; in round s it sends
        chunk (r + first - s) % N to its right neighbour, which keeps it.
        (first=1 is lesson 028's schedule, first=0 lesson 034's.)"""
        n, chunks = self.num_workers, list(chunks)
        for step in range(n - 1):
            incoming = (self.rank + first - 1 - step) % n
            chunks[incoming] = self.exchange(chunks[(self.rank + first - step) % n], chunks[incoming])
        return chunks

    def ring_all_reduce_mean(self, array: np.ndarray) -> np.ndarray:
        """Lesson 028 on real workers: the element-wise mean over the workers of ``array`` (this
        worker's; same shape and dtype on every worker), a new array, bitwise equal on all workers."""
        n = self.num_workers
        chunks = self.reduce_scatter(np.array_split(array.ravel(), n), first=0)
        owned = (self.rank + 1) % n
        chunks[owned] = chunks[owned] / n
        return np.concatenate(self.all_gather(chunks, first=1)).reshape(array.shape)

    def reduce_scatter_mean(self, flat: np.ndarray) -> np.ndarray:
        """Lesson 035's reduce-scatter: this worker's chunk r of ``np.array_split(flat, N)``, averaged
        over the workers."""
        chunks = self.reduce_scatter(np.array_split(flat, self.num_workers), first=-1)
        return chunks[self.rank] / self.num_workers

    def all_gather_shards(self, shard: np.ndarray, sizes: Sequence[int]) -> np.ndarray:
        """Lesson 034 on real workers: every worker's 1-D shard (``sizes[r]`` elements for worker r,
        this worker's being ``shard``), concatenated in rank order."""
        if len(sizes) != self.num_workers or shard.size != sizes[self.rank]:
            raise ValueError(f"worker {self.rank}'s shard has {shard.size} elements; sizes say {list(sizes)}")
        chunks = [shard if rank == self.rank else np.empty(size, dtype=shard.dtype)
                  for rank, size in enumerate(sizes)]
        return np.concatenate(self.all_gather(chunks, first=0))

    def barrier(self) -> None:
        """Wait until every worker gets here (not counted as traffic)."""
        import torch.distributed as dist
        dist.barrier()


# --------------------------------------------------------------------------
# Launching the processes
# --------------------------------------------------------------------------

def start_process_server(preload: Iterable[str] = ()) -> None:
    """Start the server that the workers are forked from, with torch and ``preload`` imported.

    Only the first call in a process has an effect (the server then lives as long as this
    process); :func:`launch` calls it. A module a worker needs that the server did not import
    is imported by the worker itself, which is slower but the same.
    """
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(dict.fromkeys([*_PRELOAD, *preload])))
    from multiprocessing import forkserver
    forkserver.ensure_running()


def launch(num_workers: int, worker: Callable[..., Any], *args: Any, timeout: float = DEFAULT_TIMEOUT,
           preload: Iterable[str] = ()) -> list[Any]:
    """Run ``worker(cluster, *args)`` in ``num_workers`` new processes; their results, in rank order.

    Args:
        num_workers: N >= 1.
        worker: a module-level function; ``cluster`` is that process's :class:`RealCluster`.
        args: picklable arguments, the same for every worker.
        timeout: seconds for the whole run (then :class:`WorkerTimeout`); also the process
            group's timeout, so a worker left behind by a crashed parent gives up by itself.
        preload: modules for the process server to import (see :func:`start_process_server`).

    Raises:
        TorchMissing: without torch (the message says how to install it).
        WorkerFailed: as soon as one worker raises or dies (the others are stopped).
        WorkerTimeout: if the run takes longer than ``timeout``.
    """
    require_torch()
    import torch.distributed as dist

    if isinstance(num_workers, bool) or not isinstance(num_workers, (int, np.integer)) or num_workers < 1:
        raise ValueError(f"num_workers must be a positive int, got {num_workers!r}")
    num_workers = int(num_workers)
    start_process_server(preload)
    context = multiprocessing.get_context("forkserver")
    # The rendezvous lives here, on a port the operating system picks (port 0) on the loopback
    # interface only: no fixed port, no gap between choosing a free port and listening on it,
    # and nothing reachable from another machine. The store takes the socket over and closes it.
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.bind((HOST, 0))
        listener.listen()
        port = listener.getsockname()[1]
        store = dist.TCPStore(HOST, port, is_master=True, wait_for_workers=False, master_listen_fd=listener.fileno(),
                              timeout=timedelta(seconds=timeout))
    except BaseException:
        listener.close()
        raise
    listener.detach()
    processes: list[Any] = []
    readers: list[multiprocessing.connection.Connection] = []
    try:
        for rank in range(num_workers):
            reader, writer = context.Pipe(duplex=False)
            process = context.Process(target=_worker_main, name=f"mct-worker-{rank}", daemon=True,
                                      args=(rank, num_workers, port, timeout, writer, worker, args))
            process.start()
            writer.close()  # the worker holds the only writing end: EOF means it is gone
            processes.append(process)
            readers.append(reader)
        return _collect(processes, readers, time.monotonic() + timeout, timeout)
    finally:
        _stop(processes)
        for reader in readers:
            reader.close()
        del store


def _worker_main(rank: int, num_workers: int, port: int, timeout: float,
                 writer: multiprocessing.connection.Connection, worker: Callable[..., Any],
                 args: tuple[Any, ...]) -> None:
    """What each worker process runs: join the group, run ``worker``, report the result or the error."""
    failed = False
    try:
        # A process group of its own: whatever the worker runs is stopped with it (see _stop).
        os.setpgid(0, 0)
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)  # N workers share this machine's cores
        if "GLOO_SOCKET_IFNAME" not in os.environ and loopback_interface():
            # gloo's connections stay on this machine's loopback interface, whatever the host name says.
            os.environ["GLOO_SOCKET_IFNAME"] = loopback_interface()
        store = dist.TCPStore(HOST, port, is_master=False, timeout=timedelta(seconds=timeout))
        dist.init_process_group("gloo", store=store, rank=rank, world_size=num_workers,
                                timeout=timedelta(seconds=timeout))
        cluster = RealCluster(rank, num_workers, lambda what: writer.send(("doing", what)))
        result = worker(cluster, *args)
        dist.barrier()  # nobody closes its connections while a neighbour still reads from them
        dist.destroy_process_group()
        message: tuple[Any, ...] = ("ok", result)
    except BaseException as error:  # noqa: BLE001 - every failure is reported to the parent
        failed = True
        message = ("error", time.monotonic(), f"{type(error).__name__}: {error}", traceback.format_exc())
    try:
        writer.send(message)
    except Exception as error:  # e.g. an unpicklable result
        failed = True
        writer.send(("error", time.monotonic(), f"the result could not be sent back: {error!r}", ""))
    finally:
        writer.close()
    if failed:
        os._exit(1)  # not a normal exit: a failed process group's threads must not keep it alive


def _collect(processes: list[Any], readers: list[multiprocessing.connection.Connection],
             deadline: float, timeout: float) -> list[Any]:
    """Wait for every worker's result; at the first failure, find its cause and raise."""
    num_workers = len(processes)
    results: dict[int, Any] = {}
    failures: dict[int, tuple[float, str, str]] = {}  # rank -> (when, summary, traceback)
    doing: dict[int, str] = {}  # rank -> what the worker said it does now (RealCluster.doing)
    first_failure: float | None = None
    while len(results) + len(failures) < num_workers:
        pending = [rank for rank in range(num_workers) if rank not in results and rank not in failures]
        if first_failure is not None:
            wait_for = first_failure + _GRACE - time.monotonic()
        else:
            wait_for = deadline - time.monotonic()
        if wait_for <= 0:
            if first_failure is not None:
                break
            raise WorkerTimeout(f"the run did not finish in {timeout:g} s: worker(s) "
                                f"{', '.join(map(str, pending))} of {num_workers} still running"
                                f"{_what_they_did(pending, doing)}; all stopped")
        waitables = [readers[rank] for rank in pending] + [processes[rank].sentinel for rank in pending]
        ready = multiprocessing.connection.wait(waitables, timeout=wait_for)
        for rank in pending:
            reader, process = readers[rank], processes[rank]
            if reader not in ready and process.sentinel not in ready:
                continue
            message = None
            if reader.poll():
                try:
                    message = reader.recv()
                except (EOFError, OSError):
                    message = None
            if message is not None and message[0] == "doing":
                doing[rank] = message[1]
                continue
            if message is not None and message[0] == "ok":
                results[rank] = message[1]
                continue
            if message is None:
                if process.is_alive():  # EOF while alive should not happen; wait for its exit
                    process.join(1.0)
                # No message: the process died without reporting (a signal, os._exit, out of memory).
                failures[rank] = (-1.0, f"the process exited with code {process.exitcode} without a result", "")
            else:
                _, when, summary, details = message
                failures[rank] = (when, summary, details)
            if first_failure is None:
                first_failure = time.monotonic()
    if not failures:
        return [results[rank] for rank in range(num_workers)]
    # The cause is the worker that died without a word, or else the one that failed first; the
    # others failed because it did (their neighbour's connection closed).
    cause = min(failures, key=lambda rank: (failures[rank][0], rank))
    _, summary, details = failures[cause]
    others = "; ".join(f"worker {rank}: {failures[rank][1].splitlines()[0][:200]}"
                       for rank in sorted(failures) if rank != cause)
    raise WorkerFailed(cause, num_workers, summary, details, others)


def _what_they_did(pending: list[int], doing: dict[int, str]) -> str:
    """" (worker 0 in ..., worker 1 in ...)" for the workers that said what they were doing, else ""."""
    said = {rank: doing[rank] for rank in pending if rank in doing}
    if len(said) > 1 and len(set(said.values())) == 1:
        return f" (each in {next(iter(said.values()))})"
    return f" ({'; '.join(f'worker {rank} in {what}' for rank, what in said.items())})" if said else ""


def _stop(processes: list[Any]) -> None:
    """Terminate the workers that are still running and wait for every one of them; then end whatever is left
    in their process groups (each worker leads one of its own), so that nothing of the run keeps running."""
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(5.0)
        if process.is_alive():
            process.kill()
            process.join(5.0)
        _kill_group(process.pid)


def _kill_group(pid: int | None) -> None:
    """SIGKILL to the process group ``pid`` leads, if there is one still (no group of that number: nothing)."""
    import signal
    if pid is None:
        return
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        pass
