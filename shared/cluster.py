"""A simulated cluster: N workers, point-to-point messages, and a traffic ledger.

Data-parallel training (Part 5), optimizer sharding (Part 6) and the full loop
(Part 7) run on this cluster.  It is a simulation: every worker lives in this
one Python process and the workers run one after another, but nothing passes
from one worker to another except through :meth:`Cluster.send` and
:meth:`Cluster.receive`, and every message is written down in the cluster's
:class:`TrafficLedger`.

Communication happens in **rounds** (the bulk-synchronous model): all the
messages sent inside one ``with cluster.round():`` block travel at the same
time, and a message can be received only once its round is over::

    cluster = Cluster(4)
    with cluster.round():                 # worker 0 sends to 1 while 2 sends to 3
        cluster.send(0, 1, x)             # a copy of x travels; x itself stays with worker 0
        cluster.send(2, 3, y)
    x_at_1 = cluster.receive(1, 0)        # worker 1 takes the message from worker 0
    y_at_3 = cluster.receive(3, 2)
    cluster.ledger.summary()              # bytes and messages per worker, and rounds

Every transfer copies: the array a worker receives shares memory with nothing
that any other worker holds, as if it had crossed a network.

**Time, estimated with the alpha-beta model.**  A message of ``n`` bytes costs
``alpha + n * beta`` seconds on a link: ``alpha`` is the latency (per message),
``beta`` the seconds per byte (one over the bandwidth).  Each worker has one
full-duplex link: it sends its messages of a round one after another, and
receives its incoming ones one after another, at the same time as it sends.  A
round lasts as long as its busiest link direction, and rounds follow each other:

    round time = max over workers w of max(alpha * m_sent(w) + beta * b_sent(w),
                                           alpha * m_recv(w) + beta * b_recv(w))
    total time = sum of the round times

Computation is not timed: the estimate is the time spent communicating.
"""

from __future__ import annotations

import weakref
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np


#: alpha: seconds per message (10 microseconds, the order of a fast network's latency).
DEFAULT_LATENCY = 10e-6
#: beta: seconds per byte (1 ns per byte is a link of 1 GB/s).
DEFAULT_SECONDS_PER_BYTE = 1e-9

SUMMARY_KEYS = ("bytes_sent", "bytes_received", "messages_sent", "messages_received", "rounds")
#: The dtype kinds a message may hold (bool, signed and unsigned integers, floats, complex): numbers, whose
#: ``nbytes`` is what a link carries.  An object array's nbytes counts its pointers (8 bytes for an 8 MB array).
SENDABLE_KINDS = "biufc"


@dataclass
class Worker:
    """One worker of the cluster: its rank (0 .. N-1) and whatever it keeps (``state``, a dict)."""

    rank: int
    state: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Message:
    """One entry of the ledger: in round ``round`` (0, 1, ...), ``src`` sent ``nbytes`` bytes to ``dst``."""

    round: int
    src: int
    dst: int
    nbytes: int


class TrafficLedger:
    """What the cluster's workers sent and received, message by message and round by round.

    Totals per worker are lists indexed by rank (Python ints); :meth:`summary`
    gives them all as plain data.  The ledger is read-only: only the cluster writes
    in it, when a round's messages travel, so what it says is what was sent (the
    grader reads the ledger of a cluster it made, after the learner's function ran).
    """

    def __init__(self, num_workers: int):
        self._num_workers = int(num_workers)
        self._messages: list[Message] = []
        self._rounds = 0  # rounds in which at least one message travelled

    @property
    def num_workers(self) -> int:
        return self._num_workers

    @property
    def messages(self) -> tuple[Message, ...]:
        """Every message so far, in order (a tuple: the record cannot be changed through it)."""
        return tuple(self._messages)

    @property
    def rounds(self) -> int:
        """How many rounds carried at least one message."""
        return self._rounds

    def _record_round(self, transfers: list[tuple[int, int, int]]) -> None:
        """Write down one round's transfers, each ``(src, dst, nbytes)`` (an empty round is not counted)."""
        if not transfers:
            return
        for src, dst, nbytes in transfers:
            self._messages.append(Message(self._rounds, src, dst, int(nbytes)))
        self._rounds += 1

    def _per_worker(self, rank_of: str, value_of: str | None) -> list[int]:
        totals = [0] * self.num_workers
        for message in self._messages:
            totals[getattr(message, rank_of)] += 1 if value_of is None else getattr(message, value_of)
        return totals

    @property
    def bytes_sent(self) -> list[int]:
        return self._per_worker("src", "nbytes")

    @property
    def bytes_received(self) -> list[int]:
        return self._per_worker("dst", "nbytes")

    @property
    def messages_sent(self) -> list[int]:
        return self._per_worker("src", None)

    @property
    def messages_received(self) -> list[int]:
        return self._per_worker("dst", None)

    def summary(self) -> dict[str, Any]:
        """Plain data: ``{"bytes_sent": [per worker], "bytes_received": [...], "messages_sent": [...],
        "messages_received": [...], "rounds": int}``, every number a Python int."""
        return {"bytes_sent": self.bytes_sent, "bytes_received": self.bytes_received,
                "messages_sent": self.messages_sent, "messages_received": self.messages_received,
                "rounds": self.rounds}

    def round_seconds(self, latency: float = DEFAULT_LATENCY,
                      seconds_per_byte: float = DEFAULT_SECONDS_PER_BYTE) -> list[float]:
        """The alpha-beta time of each round (see the module docstring), in order."""
        messages = self._messages
        if not messages:
            return []
        rounds = np.array([m.round for m in messages])
        seconds = latency + seconds_per_byte * np.array([m.nbytes for m in messages], dtype=np.float64)
        sending = np.zeros((self.rounds, self.num_workers))     # seconds each worker spends sending
        receiving = np.zeros((self.rounds, self.num_workers))   # ... and receiving, per round
        np.add.at(sending, (rounds, [m.src for m in messages]), seconds)
        np.add.at(receiving, (rounds, [m.dst for m in messages]), seconds)
        return [float(t) for t in np.maximum(sending.max(axis=1), receiving.max(axis=1))]

    def estimated_seconds(self, latency: float = DEFAULT_LATENCY,
                          seconds_per_byte: float = DEFAULT_SECONDS_PER_BYTE) -> float:
        """The alpha-beta estimate of the time spent communicating: the sum of the round times."""
        return float(sum(self.round_seconds(latency, seconds_per_byte)))

    def table(self) -> str:
        """The totals per worker as a small text table."""
        rows = [f"{'worker':>6} {'bytes sent':>12} {'bytes received':>15} {'messages sent':>14} "
                f"{'messages received':>18}"]
        for rank in range(self.num_workers):
            rows.append(f"{rank:>6} {self.bytes_sent[rank]:>12,} {self.bytes_received[rank]:>15,} "
                        f"{self.messages_sent[rank]:>14} {self.messages_received[rank]:>18}")
        rows.append(f"rounds: {self.rounds}")
        return "\n".join(rows)


def _rank(value: Any, num_workers: int, what: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{what} must be a worker's rank (an int), got {value!r}")
    if not 0 <= value < num_workers:
        raise ValueError(f"{what} {value} is not a worker of this cluster (ranks 0..{num_workers - 1})")
    return int(value)


class Cluster:
    """N simulated workers that exchange NumPy arrays, with a ledger of every message.

    Args:
        num_workers: N >= 1.
        latency: alpha, seconds per message, for :meth:`estimated_seconds`.
        seconds_per_byte: beta, seconds per byte.

    Attributes:
        workers: the N :class:`Worker` (a tuple indexed by rank), each with its own ``state`` dict.
        ledger: the :class:`TrafficLedger` of everything sent so far (read-only).
    """

    def __init__(self, num_workers: int, *, latency: float = DEFAULT_LATENCY,
                 seconds_per_byte: float = DEFAULT_SECONDS_PER_BYTE):
        if isinstance(num_workers, (bool, np.bool_)) or not isinstance(num_workers, (int, np.integer)):
            raise TypeError(f"num_workers must be an int, got {num_workers!r}")
        if num_workers < 1:
            raise ValueError(f"a cluster needs at least one worker, got num_workers={num_workers}")
        if not latency >= 0 or not seconds_per_byte >= 0:
            raise ValueError(f"latency and seconds_per_byte must be >= 0, got {latency} and {seconds_per_byte}")
        self.latency = float(latency)
        self.seconds_per_byte = float(seconds_per_byte)
        self._workers = tuple(Worker(rank) for rank in range(int(num_workers)))
        self._ledger = TrafficLedger(int(num_workers))
        self._in_flight: list[tuple[int, int, np.ndarray]] | None = None  # None: no round is open
        self._mailboxes: dict[tuple[int, int], deque[np.ndarray]] = {}
        # What each worker received (weak references: the record keeps no array alive), so that the
        # grader can tell a worker's result made of what it received from one it computed itself.
        self._received: dict[int, list[weakref.ref]] = {}

    @property
    def workers(self) -> tuple[Worker, ...]:
        return self._workers

    @property
    def ledger(self) -> TrafficLedger:
        return self._ledger

    @property
    def num_workers(self) -> int:
        return len(self._workers)

    def __repr__(self) -> str:
        return (f"Cluster({self.num_workers} workers, {len(self._ledger.messages)} messages in "
                f"{self._ledger.rounds} rounds)")

    def round(self) -> "Round":
        """A communication round: the sends inside ``with cluster.round():`` travel together, and
        arrive when it ends."""
        return Round(self)

    def _open_round(self) -> None:
        if self._in_flight is not None:
            raise RuntimeError("rounds do not nest: close the current `with cluster.round():` first")
        self._in_flight = []

    def _close_round(self, delivered: bool) -> None:
        """End the open round: its messages travel (unless the round ended with an exception)."""
        transfers, self._in_flight = self._in_flight, None
        if not delivered or transfers is None:
            return  # a round left by an exception sends nothing
        self._ledger._record_round([(src, dst, array.nbytes) for src, dst, array in transfers])
        for src, dst, array in transfers:
            self._mailboxes.setdefault((src, dst), deque()).append(array)

    def send(self, src: int, dst: int, array: np.ndarray) -> None:
        """Worker ``src`` sends a copy of ``array`` (any shape, a dtype of numbers) to worker ``dst``.

        Must be called inside ``with cluster.round():``; the ledger counts ``array.nbytes``
        bytes and one message for both workers when the round ends.
        """
        if self._in_flight is None:
            raise RuntimeError("send() must be called inside a round: `with cluster.round(): cluster.send(...)`")
        src = _rank(src, self.num_workers, "src")
        dst = _rank(dst, self.num_workers, "dst")
        if src == dst:
            raise ValueError(f"worker {src} cannot send a message to itself")
        if type(array) is not np.ndarray:
            raise TypeError(f"send() sends NumPy arrays, got {type(array).__name__}")
        if array.dtype.kind not in SENDABLE_KINDS:
            raise TypeError(f"send() sends arrays of numbers (bool, integer, float, complex), got dtype "
                            f"{array.dtype}: the ledger counts nbytes, which for objects counts pointers, not what "
                            f"they point to")
        self._in_flight.append((src, dst, _delivered_copy(array)))

    def receive(self, dst: int, src: int) -> np.ndarray:
        """Worker ``dst`` takes the oldest message that worker ``src`` sent it (a round that has ended).

        Returns the array as it was when sent: a copy that no other worker holds, and read-only (a
        message is what was sent; compute a new array from it, e.g. ``received + mine``).
        """
        dst = _rank(dst, self.num_workers, "dst")
        src = _rank(src, self.num_workers, "src")
        box = self._mailboxes.get((src, dst))
        if box:
            array = box.popleft()
            self._received.setdefault(dst, []).append(weakref.ref(array))
            return array
        if self._in_flight and any(s == src and d == dst for s, d, _ in self._in_flight):
            raise RuntimeError(f"the message from worker {src} to worker {dst} is still in flight: "
                               f"receive it after the `with cluster.round():` block in which it was sent")
        raise RuntimeError(f"worker {dst} has no message from worker {src} to receive")

    def unreceived(self) -> int:
        """How many delivered messages no worker has received yet (0 after a finished collective)."""
        return sum(len(box) for box in self._mailboxes.values())

    def holds_received(self, rank: int, value: Any) -> bool:
        """Whether an array in ``value`` shares memory with an array worker ``rank`` received."""
        received = [array for ref in self._received.get(rank, []) if (array := ref()) is not None]
        return any(first_shared(mine, received) is not None for _, mine in arrays_held(value))

    def estimated_seconds(self) -> float:
        """The alpha-beta estimate of the communication so far, with this cluster's latency and bandwidth."""
        return self.ledger.estimated_seconds(self.latency, self.seconds_per_byte)


class Round:
    """One communication round of a cluster, as ``with cluster.round():`` opens and closes it."""

    def __init__(self, cluster: Cluster):
        self._cluster = cluster

    def __enter__(self) -> None:
        self._cluster._open_round()

    def __exit__(self, kind: Any, error: Any, trace: Any) -> bool:
        self._cluster._close_round(delivered=kind is None)
        return False


def _delivered_copy(array: np.ndarray) -> np.ndarray:
    """A copy of ``array`` as a message delivers it: read-only for good (its memory is an immutable
    ``bytes``, so no flag can make it writeable), so what a worker received stays what was sent."""
    if array.dtype.hasobject:  # (no bytes can hold Python objects: a plain read-only copy)
        copy = np.array(array, copy=True)
        copy.flags.writeable = False
        return copy
    return np.frombuffer(array.tobytes(), dtype=array.dtype).reshape(array.shape)


def check_worker_arrays(worker_arrays: list[np.ndarray]) -> None:
    """The input of an all-reduce (lessons 027 and 028): one array per worker, all of one shape and dtype.

    Raises:
        ValueError: if ``worker_arrays`` is empty, or if worker r's array differs from worker 0's in
            shape or dtype (the message names r and both arrays' dtype and shape).
    """
    if len(worker_arrays) == 0:
        raise ValueError("worker_arrays is empty: an all-reduce needs at least one worker")
    shape, dtype = worker_arrays[0].shape, worker_arrays[0].dtype
    for rank, array in enumerate(worker_arrays):
        if array.shape != shape or array.dtype != dtype:
            raise ValueError(f"worker {rank}'s array is {array.dtype} {array.shape}, worker 0's is "
                             f"{dtype} {shape}: every worker must hold an array of the same shape and dtype")


def arrays_held(value: Any, where: str = "the value") -> list[tuple[str, np.ndarray]]:
    """Every array inside a nest of dicts, lists and tuples, with where it is (``"x[0]['W1']"``)."""
    if type(value) is np.ndarray:  # exact types: walking a nest never runs code of a class of the learner's
        return [(where, value)]
    if type(value) in (list, tuple):
        return [item for i, v in enumerate(value) for item in arrays_held(v, f"{where}[{i}]")]
    if type(value) in (dict, MappingProxyType):
        return [item for k, v in value.items() for item in arrays_held(v, f"{where}[{k!r}]")]
    return []


def parts_held(value: Any, where: str = "the value") -> list[tuple[str, Any]]:
    """Every array, dict and list inside a nest of dicts, lists and tuples (the value itself included), with
    where it is: what a later call of a function must not hand out again."""
    found = [(where, value)] if type(value) in (np.ndarray, dict, list) else []
    if type(value) in (list, tuple):
        found += [item for i, v in enumerate(value) for item in parts_held(v, f"{where}[{i}]")]
    elif type(value) is dict:
        found += [item for k, v in value.items() for item in parts_held(v, f"{where}[{k!r}]")]
    return found


def parts_reused(result: Any, earlier: list[tuple[str, Any]], where: str = "the result") -> list[str]:
    """Which parts of ``result`` an earlier call returned already (``earlier``: :func:`parts_held` of the earlier
    results): an array sharing its memory, or the very same dict or list.  A function that fills one buffer or
    one module-level dict again at every call changes what the caller of an earlier call holds."""
    arrays = [(name, item) for name, item in earlier if type(item) is np.ndarray]
    boxes = [(name, item) for name, item in earlier if type(item) is not np.ndarray]
    found = []
    for place, part in parts_held(result, where):
        if type(part) is np.ndarray:
            index = first_shared(part, [other for _, other in arrays])
            if index is not None:
                found.append(f"{place} shares memory with {arrays[index][0]}")
        else:
            same = next((name for name, other in boxes if other is part), None)
            if same is not None:
                found.append(f"{place} is the same {type(part).__name__} object as {same}")
    return found


# Bound once, when the helper package is imported (before any learner code runs): a notebook that later
# rebinds np.shares_memory cannot change what these checks find (shared.checking binds its NumPy alike).
_np_shares_memory = np.shares_memory


def share_memory(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether arrays ``a`` and ``b`` (any shapes and dtypes) share memory: writing into one may change the
    other.  An empty array holds no number, so it shares nothing (not even with itself)."""
    return bool(a.size and b.size and _np_shares_memory(a, b))


def first_shared(array: np.ndarray, candidates: Iterable[np.ndarray]) -> int | None:
    """The index of the first of ``candidates`` (arrays) that shares memory with ``array``
    (:func:`share_memory`), or None when none does."""
    for index, other in enumerate(candidates):
        if share_memory(array, other):
            return index
    return None


#: Arrays of one result compared pairwise for shared memory, at most (a result holds a few dozen).
SHARING_CHECKED = 256


def arrays_shared_within(value: Any, name: str = "the result") -> list[str]:
    """Where two places of one value hold the same memory (``m`` and ``v`` as one dict of arrays): one line
    per array that shares memory with an array at an earlier place, empty when every place has its own."""
    held = arrays_held(value, name)[:SHARING_CHECKED]
    found = []
    for i, (where, array) in enumerate(held):
        other = first_shared(array, [earlier for _, earlier in held[:i]])
        if other is not None:
            found.append(f"{where} shares memory with {held[other][0]}")
    return found


def arrays_shared_between_workers(per_worker: Any, name: str = "the result") -> list[str]:
    """Where arrays held by different workers share memory (on a real cluster they never can).

    ``per_worker`` is a list indexed by rank whose items are arrays, or dicts, lists
    and tuples of arrays (one worker's arrays may share memory among themselves).
    Returns one line per array that shares memory with an array of an earlier
    worker; empty when every worker holds its own.
    """
    if type(per_worker) not in (list, tuple):
        return []
    held = [(rank, where, array) for rank, item in enumerate(per_worker)
            for where, array in arrays_held(item, f"{name}[{rank}]")]
    found = []
    for i, (rank, where, array) in enumerate(held):
        others = [(other_rank, other_where, other) for other_rank, other_where, other in held[:i] if other_rank != rank]
        index = first_shared(array, [other for _, _, other in others])
        if index is not None:
            other_rank, other_where, _ = others[index]
            found.append(f"{where} (worker {rank}) shares memory with {other_where} (worker {other_rank})")
    return found
