"""The learner's lessons 029, 035 and 040 on real processes: ``make train-distributed FROM=notebooks``.

The learner's functions run a whole simulated cluster in one call: ``data_parallel_train_step``
computes every worker's part, one after another, and sends their messages on the ``Cluster`` it
is given.  To run that on real processes, each of the N processes calls the learner's function
on a :class:`WiredCluster`: a simulated cluster on which the messages of *its* worker travel for
real.  In process r, when a round ends,

- every message that worker r sends goes to the receiving worker's process over torch.distributed
  (gloo), and is counted as the process's traffic;
- every message sent to worker r is taken from the sending worker's process, and it, not the copy
  that process r computed itself, is what worker r receives;
- messages between two other workers stay inside the process (the process computes their
  part too, as the simulation does, and does not count them).

So process r's worker r computes with what really arrived through the sockets, and its final
parameters, taken from the function's result for worker r, are compared with what the course's
reference gives worker r on the simulated cluster (``Technique.simulate``), as are the bytes and
messages that process r really sent and received, against the ledger's column for worker r.

The three techniques here are the reference ones (:mod:`torch_extra.real_training`) with the
learner's function in each process instead of the reference's pieces; what feeds them (the
batches, 035's gradients and first optimizer state) is made as the reference run makes it.  The
functions come from the learner's notebooks (:mod:`torch_extra.notebook_functions`): each technique
carries its notebook's cells as the launching process read and checked them, and each worker process
runs them itself (a function made by a notebook's cell cannot be pickled).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from shared.cluster import Cluster
from shared.lessons import lesson

from . import notebook_functions
from .real_cluster import RealCluster
from .real_training import DataParallel, FullTrainingLoop, ReferenceLookup, Zero, unflatten

# gloo's tags are ints; the messages between two workers are numbered, and the number is the tag.
_TAG_LIMIT = 2 ** 24


class WiredCluster(Cluster):
    """The simulated cluster of real process ``real.rank``: worker ``real.rank``'s messages travel for real.

    A :class:`shared.cluster.Cluster` in every way the learner's code can see (rounds, sends, receives,
    its ledger of the whole simulated traffic); when a round ends, the messages that this process's
    worker sends are sent to the other processes, and those it receives are replaced by what the
    other processes sent (see the module's docstring).  ``real.traffic`` counts what this process
    sent and received; :attr:`wire` lists those messages, ``(round, src, dst, bytes, step)``, in order,
    ``step`` being what :attr:`step` said when the message travelled (the technique sets it before each
    step; None in lesson 040's loop, which is one call).
    """

    def __init__(self, real: RealCluster):
        super().__init__(real.num_workers)
        self.real = real
        self.step: int | None = None
        self.wire: list[tuple[int, int, int, int, int | None]] = []
        self._numbered: dict[tuple[int, int], int] = {}  # (src, dst) -> messages so far, the next tag

    @contextmanager
    def round(self):
        with super().round():
            yield
            # The round ends without an error: its messages travel (Cluster.round delivers them next).
            self._carry(self._in_flight)

    def _tag(self, src: int, dst: int) -> int:
        number = self._numbered.get((src, dst), 0)
        self._numbered[(src, dst)] = number + 1
        return number % _TAG_LIMIT

    def _carry(self, transfers: list[tuple[int, int, np.ndarray]]) -> None:
        """Send this worker's messages of the round, receive those sent to it, and put those in ``transfers``."""
        import torch
        import torch.distributed as dist

        rank, traffic = self.real.rank, self.real.traffic
        round_number = self.ledger.rounds  # the number the ledger gives this round
        pending, arrivals, outgoing = [], [], []
        for index, (src, dst, array) in enumerate(transfers):
            if rank not in (src, dst):
                continue
            tag = self._tag(src, dst)
            if src == rank:
                payload = np.ascontiguousarray(array).reshape(-1).view(np.uint8)  # any dtype, as its bytes
                outgoing.append(payload)  # kept alive until the send completes
                pending.append(dist.isend(torch.from_numpy(payload), dst=dst, tag=tag))
                traffic.bytes_sent += array.nbytes
                traffic.messages_sent += 1
            else:
                buffer = np.empty(array.nbytes, dtype=np.uint8)
                pending.append(dist.irecv(torch.from_numpy(buffer), src=src, tag=tag))
                arrivals.append((index, buffer))
                traffic.bytes_received += array.nbytes
                traffic.messages_received += 1
            self.wire.append((round_number, src, dst, int(array.nbytes), self.step))
        for work in pending:
            work.wait()
        for index, buffer in arrivals:
            src, dst, like = transfers[index]
            # Read-only, as the cluster delivers a message (its memory an immutable bytes): what a worker
            # received stays what was sent, here as in the simulation.
            transfers[index] = (src, dst, np.frombuffer(buffer.tobytes(), dtype=like.dtype).reshape(like.shape))
        if transfers:
            traffic.rounds += 1


class LearnerTechnique:
    """What the three learner's techniques share: the learner's notebook (as the launching process read and
    checked it: see :func:`torch_extra.notebook_functions.problems`), and its function."""

    lesson_function = ""

    def __init__(self, notebook: notebook_functions.Notebook):
        self.notebook = notebook

    @classmethod
    def lesson(cls):
        return lesson(cls.lesson_function)

    def source(self) -> str:
        """Where the learner's function comes from, as the report says it."""
        return f"your {self.lesson_function} from {self.notebook.name}"

    def running(self) -> str:
        return self.source()

    def learner(self):
        """The learner's function (the notebook's cells run once per process)."""
        return notebook_functions.function(self.notebook, self.lesson())


@dataclass
class WiredState:
    """A process's state between two steps: its wired cluster (one per run), and what the technique keeps."""

    wired: WiredCluster
    kept: Any = None
    extra: dict[str, Any] = field(default_factory=dict)
    steps_begun: int = 0

    def begin_step(self) -> None:
        """The messages from now on belong to the next step (numbered from 0)."""
        self.wired.step = self.steps_begun
        self.steps_begun += 1


class LearnerDataParallel(LearnerTechnique, DataParallel):
    """Lesson 029's step, the learner's ``data_parallel_train_step``, in each process on its wired cluster."""

    lesson_function = "data_parallel_train_step"
    records_steps = True

    def __init__(self, reference_function: ReferenceLookup, notebook: notebook_functions.Notebook,
                 learning_rate: float = 0.05):
        DataParallel.__init__(self, reference_function, learning_rate)
        LearnerTechnique.__init__(self, notebook)

    def describe(self) -> str:
        return f"{self.source()} (lesson 029), SGD with learning rate {self.learning_rate:g}"

    def start(self, cluster: RealCluster, params) -> WiredState:
        self.learner()  # the notebook is read now, not during the first step
        return WiredState(WiredCluster(cluster))

    def step(self, cluster: RealCluster, params, state: WiredState, X, Y):
        state.begin_step()
        worker_params, loss = self.learner()(params, X, Y, cluster.num_workers, self.learning_rate, state.wired)
        return worker_params[cluster.rank], state, float(loss)


class LearnerZero(LearnerTechnique, Zero):
    """Lesson 035's step, the learner's ``zero_optimizer_step``, in each process on its wired cluster; the
    workers' gradients and first optimizer state are made as the reference run makes them."""

    lesson_function = "zero_optimizer_step"
    records_steps = True

    def __init__(self, reference_function: ReferenceLookup, notebook: notebook_functions.Notebook,
                 **hyperparameters: float):
        Zero.__init__(self, reference_function, **hyperparameters)
        LearnerTechnique.__init__(self, notebook)

    def describe(self) -> str:
        return (f"{self.source()} (lesson 035), Adam with learning rate {self.learning_rate:g}; each worker's "
                f"gradients from the course's 025 and 026")

    def start(self, cluster: RealCluster, params) -> WiredState:
        self.learner()
        for name in ("shard_dataset_across_workers", "compute_local_gradients"):
            self.reference(name)
        # Every worker's shard of Adam's (zero) state: the process runs the whole step, as the simulation does.
        states = self.reference("partition_optimizer_state")(self.reference("init_adam_state")(params),
                                                             cluster.num_workers)
        return WiredState(WiredCluster(cluster), states)

    def step(self, cluster: RealCluster, params, state: WiredState, X, Y):
        n = cluster.num_workers
        state.begin_step()
        shard, local = self.reference("shard_dataset_across_workers"), self.reference("compute_local_gradients")
        contributions = [local(params, X_r, Y_r, len(X), n) for X_r, Y_r in shard(X, Y, n)]
        worker_params, state.kept, _ = self.learner()(params, [grads for _, grads in contributions], state.kept,
                                                      self.learning_rate, self.beta1, self.beta2, self.eps,
                                                      cluster=state.wired)
        return worker_params[cluster.rank], state, sum(loss for loss, _ in contributions) / n


class LearnerFullLoop(LearnerTechnique, FullTrainingLoop):
    """Lesson 040's loop, the learner's ``full_distributed_training_loop``, called once in each process with
    the whole run's steps, on its wired cluster. Worker r's final parameters are its own master weights
    (``workers[r]["master"]``; without mixed precision its ``"parameters"``), with ZeRO all-gathered from
    every process after the training, as the reference run's are."""

    lesson_function = "full_distributed_training_loop"
    records_steps = False

    def __init__(self, reference_function: ReferenceLookup, notebook: notebook_functions.Notebook, config=None):
        FullTrainingLoop.__init__(self, reference_function, config)
        LearnerTechnique.__init__(self, notebook)

    def describe(self) -> str:
        return f"{self.source()} (lesson 040), {FullTrainingLoop.describe(self).split(': ', 1)[1]}"

    def start(self, cluster: RealCluster, params) -> WiredState:
        import threading

        from tqdm import tqdm

        self.learner()
        # The loop's steps come from training_steps, a tqdm (hidden here); tqdm's default lock is a multiprocessing
        # semaphore that a worker process would leave behind. A thread lock does for one process.
        tqdm.set_lock(threading.RLock())
        return WiredState(WiredCluster(cluster))

    def train(self, cluster: RealCluster, params, state: WiredState, setup):
        X, Y = setup.batch(0)
        config = replace(self.config, steps=setup.steps, num_workers=cluster.num_workers, progress_bar=False)
        _, history, workers = self.learner()(params, X, Y, config, state.wired)
        state.kept = workers[cluster.rank]
        state.extra = {"skipped": [bool(flag) for flag in history["skipped"]],
                       "loss_scale": [float(scale) for scale in history["loss_scale"]]}
        # The worker's answer is what it holds (final_params); the starting parameters stay the template of
        # the tensors' names and shapes.
        return params, state, [float(loss) for loss in history["loss"]]

    def final_params(self, cluster: RealCluster, params, state: WiredState):
        mine = state.kept
        key = "master" if self.config.mixed_precision else "parameters"
        if not isinstance(mine, dict) or key not in mine:
            raise ValueError(f"your full_distributed_training_loop's workers[{cluster.rank}] holds no {key!r} "
                             f"(the lesson's docstring: a dict with 'parameters', 'm', 'v' and, in mixed "
                             f"precision, 'master')")
        own = np.asarray(mine[key])
        flat_size = sum(value.size for value in params.values())
        if self.config.mixed_precision and self.config.zero_stage:
            sizes = [len(chunk) for chunk in np.array_split(np.empty(flat_size), cluster.num_workers)]
            if own.shape != (sizes[cluster.rank],):
                raise ValueError(f"your full_distributed_training_loop's workers[{cluster.rank}]['master'] has shape "
                                 f"{own.shape}; worker {cluster.rank}'s shard has {sizes[cluster.rank]} numbers")
            own = cluster.all_gather_shards(own, sizes)
        if own.shape != (flat_size,):
            raise ValueError(f"your full_distributed_training_loop's workers[{cluster.rank}][{key!r}] has shape "
                             f"{own.shape}, not the {flat_size} parameters")
        return unflatten(own, params)

    def history(self, state: WiredState) -> dict[str, list]:
        return state.extra


# The learner's techniques by the names that `make train-distributed TECHNIQUE=...` takes.
LEARNER_TECHNIQUES = {"data-parallel": LearnerDataParallel, "zero": LearnerZero, "full-loop": LearnerFullLoop}
