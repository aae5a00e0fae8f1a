"""The course's collectives and training steps on real processes, against torch.distributed.

On 2 and 4 OS processes of this machine (gloo over TCP on 127.0.0.1), seeded cases:

- 027 ``all_reduce_mean`` and 028 ``ring_all_reduce_mean`` (simulated) against
  ``torch.distributed.all_reduce``; 028's ring run for real on the same processes
  (``shared.real_cluster``) gives the simulated results bit for bit and sends, worker for
  worker, the bytes and messages of the simulated ledger;
- 029's data-parallel step, three steps, against DistributedDataParallel with SGD on
  the same model and shards;
- 035's ZeRO step, three steps, against DistributedDataParallel with
  ZeroRedundancyOptimizer (Adam), which partitions whole tensors where the lesson cuts
  the flat vector in N equal pieces;
- ``make train-distributed``'s run (``shared.real_training.run``) with 2 and 4 workers:
  every worker's final parameters equal the simulated run's (float64, rtol 1e-10) and
  its traffic the ledger's;
- the launcher: a worker that raises ends the run at once with that worker's error, one
  that dies without a word is named as the cause, a run past its time limit is stopped,
  and without torch the command prints one line saying how to install it.

The cross-checks run in one launch per world size (a module-scoped fixture); the workers
are forked from a server that has imported torch once (see shared/real_cluster.py).
Without torch every test here but the last skips, saying how to install it.
"""

import multiprocessing
import re
import sys
import tomllib

import nbformat
import numpy as np
import pytest

from course import ROOT, tool
from grading.judge import reference_function
from shared import real_cluster
from shared.lessons import lesson as find_lesson
from shared.real_cluster import MISSING_TORCH, WorkerFailed, WorkerTimeout, torch_available
from shared.real_training import PRELOAD, DataParallel, TrainingSetup, Zero, run

needs_torch = pytest.mark.skipif(not torch_available(), reason=MISSING_TORCH)
WORLD_SIZES = (2, 4)
SETUP = TrainingSetup(steps=3)
SGD_LEARNING_RATE, ADAM_LEARNING_RATE = 0.05, 0.01
TIMEOUT = 120  # seconds for a launch; a run takes about one


def ref(name):
    return reference_function(find_lesson(name))


def largest_difference(got, expected):
    return max(float(np.abs(got[key] - expected[key]).max()) for key in expected)


@pytest.fixture(scope="module")
def workers():
    """torch_workers, imported here only when torch is there; the process server preloads it."""
    import torch_workers
    real_cluster.start_process_server([*torch_workers.PRELOAD, *PRELOAD])
    return torch_workers


@pytest.fixture(scope="module")
def crosschecks(workers):
    """Every worker's results of every real-process cross-check, by world size: one launch each."""
    return {n: real_cluster.launch(n, workers.crosscheck_worker, SETUP, SGD_LEARNING_RATE, ADAM_LEARNING_RATE,
                                   timeout=TIMEOUT)
            for n in WORLD_SIZES}


@pytest.fixture(scope="module")
def simulated():
    """029's and 035's runs on the simulated cluster, by world size."""
    return {n: {"sgd": DataParallel(SGD_LEARNING_RATE).simulate(SETUP, n),
                "adam": Zero(ADAM_LEARNING_RATE).simulate(SETUP, n)} for n in WORLD_SIZES}


@needs_torch
@pytest.mark.part_5
@pytest.mark.lesson_027
@pytest.mark.lesson_028
@pytest.mark.parametrize("n", WORLD_SIZES)
def test_the_all_reduces_equal_torch_distributed_all_reduce(n, workers, crosschecks):
    for case, (shape, dtype) in enumerate(workers.ALL_REDUCE_CASES):
        arrays = workers.worker_arrays(case, n)
        naive, _ = ref("all_reduce_mean")(arrays)
        ring, ledger = ref("ring_all_reduce_mean")(arrays)
        tolerance = dict(rtol=1e-12, atol=1e-15) if dtype == np.float64 else dict(rtol=1e-5, atol=1e-6)
        for rank, real in enumerate(crosschecks[n]):
            torch_mean = real["all_reduce"][case]["torch"]
            assert torch_mean.dtype == dtype and torch_mean.shape == shape
            np.testing.assert_allclose(naive[rank], torch_mean, **tolerance, err_msg=f"027, case {case}, worker {rank}")
            np.testing.assert_allclose(ring[rank], torch_mean, **tolerance, err_msg=f"028, case {case}, worker {rank}")
            # The same ring on real processes: the same numbers and, worker for worker, the ledger's traffic.
            assert np.array_equal(real["all_reduce"][case]["ring"], ring[rank]), (case, rank)
            traffic = real["all_reduce"][case]["traffic"]
            for key in ("bytes_sent", "bytes_received", "messages_sent", "messages_received"):
                assert traffic[key] == ledger[key][rank], (case, rank, key)
            assert traffic["rounds"] == ledger["rounds"] == 2 * (n - 1)


@needs_torch
@pytest.mark.part_5
@pytest.mark.lesson_028
@pytest.mark.parametrize("n", WORLD_SIZES)
def test_gloo_all_reduce_writes_about_what_the_ring_ledger_predicts(n, workers, crosschecks):
    """gloo's own all-reduce is a ring too: each process writes 2(N-1)/N of the payload to its
    sockets (the ledger's figure), plus gloo's headers."""
    payload = workers.GLOO_PAYLOAD * 8
    _, ledger = ref("ring_all_reduce_mean")([np.ones(workers.GLOO_PAYLOAD)] * n)
    for rank, real in enumerate(crosschecks[n]):
        written = real["gloo_socket_bytes"]
        if written is None:
            pytest.skip("this system does not count the bytes a process writes (/proc/self/io)")
        assert ledger["bytes_sent"][rank] == 2 * (n - 1) * payload // n
        assert ledger["bytes_sent"][rank] <= written <= ledger["bytes_sent"][rank] + 0.05 * payload, (rank, written)


@needs_torch
@pytest.mark.part_5
@pytest.mark.lesson_029
@pytest.mark.parametrize("n", WORLD_SIZES)
def test_the_data_parallel_step_equals_distributed_data_parallel(n, crosschecks, simulated):
    course = simulated[n]["sgd"]
    for rank, real in enumerate(crosschecks[n]):
        ddp = real["ddp_sgd"]
        assert largest_difference(ddp["params"], course.worker_params[rank]) < 1e-13
    losses = np.sum([real["ddp_sgd"]["losses"] for real in crosschecks[n]], axis=0) / n
    np.testing.assert_allclose(losses, course.losses, rtol=1e-12)


@needs_torch
@pytest.mark.part_6
@pytest.mark.lesson_035
@pytest.mark.parametrize("n", WORLD_SIZES)
def test_the_zero_step_equals_zero_redundancy_adam(n, crosschecks, simulated):
    course = simulated[n]["adam"]
    for rank, real in enumerate(crosschecks[n]):
        assert largest_difference(real["ddp_zero_redundancy_adam"]["params"], course.worker_params[rank]) < 1e-12
    # Both keep Adam's state once over the workers; torch gives each rank whole tensors, so its
    # shares are uneven where the lesson's flat shards differ by one element at most.
    partition = crosschecks[n][0]["zero_redundancy_partition"]
    assert sum(partition) == SETUP.num_params and len(partition) == n
    shards = [state["m"].size for state in ref("partition_optimizer_state")(
        ref("init_adam_state")(SETUP.initial_params()), n)]
    assert sum(shards) == SETUP.num_params and max(shards) - min(shards) <= 1 < max(partition) - min(partition)


@needs_torch
@pytest.mark.part_5
@pytest.mark.part_6
@pytest.mark.lesson_029
@pytest.mark.lesson_035
@pytest.mark.parametrize("n", WORLD_SIZES)
def test_training_on_real_processes_equals_the_simulated_run(n, workers):
    comparisons = run(n, SETUP, timeout=TIMEOUT)
    assert [c.technique for c in comparisons] == ["data parallel", "ZeRO"]
    for c in comparisons:
        assert c.params_close and c.largest_difference <= 1e-10 * 10, (c.technique, c.largest_difference)
        assert c.traffic_matches, (c.technique, c.real_traffic, c.simulated_traffic)
        np.testing.assert_allclose(c.real_losses, c.simulated_losses, rtol=1e-12)
        assert c.real_losses[-1] < c.real_losses[0]  # it trains
        for rank, written in enumerate(c.socket_bytes):
            if written is not None:  # the payload went through the sockets, with gloo's headers
                sent = c.real_traffic[rank]
                assert sent["bytes_sent"] <= written <= sent["bytes_sent"] + 512 * sent["messages_sent"]


@needs_torch
def test_a_worker_that_raises_ends_the_run_at_once_with_its_error(workers):
    # The other worker computes for ten minutes: had the launcher waited for it, the run would end
    # in WorkerTimeout after TIMEOUT seconds, not in the failed worker's error.
    with pytest.raises(WorkerFailed) as failure:
        real_cluster.launch(2, workers.fail_on_rank, 1, timeout=TIMEOUT)
    assert failure.value.rank == 1
    assert str(failure.value).startswith("worker 1 of 2 failed: ValueError: worker 1 was told to fail")
    assert "Traceback" in failure.value.details and "fail_on_rank" in failure.value.details
    assert multiprocessing.active_children() == []  # every worker stopped and joined


@needs_torch
def test_a_worker_that_dies_is_named_as_the_cause(workers):
    # Worker 0 then fails too (its neighbour's connection closed): that is a consequence, not the cause.
    with pytest.raises(WorkerFailed) as failure:
        real_cluster.launch(2, workers.die_on_rank, 1, timeout=TIMEOUT)
    assert failure.value.rank == 1
    assert "exited with code 3 without a result" in str(failure.value)
    assert multiprocessing.active_children() == []


@needs_torch
def test_a_run_past_its_time_limit_is_stopped(workers):
    with pytest.raises(WorkerTimeout, match=r"did not finish in 3 s: worker\(s\) 0, 1 of 2 still running"):
        real_cluster.launch(2, workers.sleep_forever, timeout=3)
    assert multiprocessing.active_children() == []


def test_without_torch_the_command_says_how_to_install_it(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now fails, as without the extra
    assert tool("train_distributed").main(["--workers", "2"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"train-distributed: {MISSING_TORCH}\n"
    assert err.count("\n") == 1 and "`make torch`" in err


def test_torch_is_an_optional_extra_that_the_course_never_imports():
    """Pinned exactly in its own extra, installed by CI before `make test`, and imported by no module
    that a notebook, the build or grading loads (shared.real_cluster imports it only when used), nor
    by any notebook."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["optional-dependencies"]["torch"] == ["torch==2.13.0"]
    assert not any(r.startswith("torch") for r in project["dependencies"] + project["optional-dependencies"]["dev"])
    ci = (ROOT / ".ci" / "run").read_text()
    assert ci.index("make torch") < ci.index("make test")
    sources = {path: path.read_text() for pattern in ("shared/**/*.py", "grading/*.py", "tools/*.py",
                                                      "autograde/parts/*/*.py", "solutions/*.py")
               for path in ROOT.glob(pattern)}
    for pattern in ("notebooks/*.ipynb", "solutions/*.ipynb"):
        for path in ROOT.glob(pattern):
            sources[path] = "\n".join(cell.source for cell in nbformat.read(path, as_version=4).cells)
    assert len(sources) > 30 and any(path.suffix == ".ipynb" for path in sources)
    for path, text in sources.items():  # a module's top level, or any line of a notebook's cells
        indent = r"\s*" if path.suffix == ".ipynb" else ""
        assert not re.search(rf"^{indent}(import torch|from torch)", text, re.MULTILINE), path
