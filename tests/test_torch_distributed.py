"""The course's collectives and training steps on real processes, against torch.distributed.

On 2 and 4 OS processes of this machine (gloo over TCP on 127.0.0.1), seeded cases:

- 027 ``all_reduce_mean`` and 028 ``ring_all_reduce_mean`` (simulated) against
  ``torch.distributed.all_reduce``; 028's ring run for real on the same processes
  (``torch_extra.real_cluster``) gives the simulated results bit for bit and sends, worker for
  worker, the bytes and messages of the simulated ledger;
- 029's data-parallel step, three steps, against DistributedDataParallel with SGD on
  the same model and shards;
- 035's ZeRO step, three steps, against DistributedDataParallel with
  ZeroRedundancyOptimizer (Adam), which partitions whole tensors where the lesson cuts
  the flat vector in N equal pieces;
- ``make train-distributed``'s run (``torch_extra.real_training.run``, handed the judge's
  reference lookup as the command hands it) with 2 and 4 workers:
  every worker's final parameters equal the simulated run's (float64, rtol 1e-10) and
  its traffic the ledger's; lesson 040's loop with ZeRO and without, in float64 and in
  mixed precision (its loss scaler skipping and growing), equal bit for bit, with the
  traffic of the ledger and of the ring's schedule, and the same skips on every worker;
- notebook 07's closing section quotes what `make train-distributed WORKERS=4` prints now;
- the launcher: a worker that raises ends the run at once with that worker's error (also
  one that fails inside 040's step), one that dies without a word is named as the cause,
  a run past its time limit is stopped, and without torch the command prints one line
  saying how to install it.

The cross-checks run in one launch per world size, and so do the training runs
(module-scoped fixtures); the workers are forked from a server that has imported torch
once (see torch_extra/real_cluster.py). Without torch every test here skips, saying how to
install it, but the three that need no worker process.
"""

import multiprocessing
import re
import sys
import tomllib

import nbformat
import numpy as np
import pytest

from course import ROOT, student_path, tool
from grading.judge import reference_function
from shared.lessons import lesson as find_lesson
from shared.training import TrainingConfig
from torch_extra import real_cluster
from torch_extra.real_cluster import MISSING_TORCH, WorkerFailed, WorkerTimeout, torch_available
from torch_extra.real_training import PRELOAD, DataParallel, FullTrainingLoop, TrainingSetup, Zero, run

needs_torch = pytest.mark.skipif(not torch_available(), reason=MISSING_TORCH)
WORLD_SIZES = (2, 4)
SETUP = TrainingSetup(steps=3)
SGD_LEARNING_RATE, ADAM_LEARNING_RATE = 0.05, 0.01
TIMEOUT = 120  # seconds for a launch; a run takes about one
# Lesson 040's loop in each combination of ZeRO and mixed precision. The mixed-precision ones start
# from a loss scale that overflows float16 on this data, so that their three steps include skipped
# and clean steps (checked below), and grow the scale after every clean step.
LOOPS = {
    "every switch on": TrainingConfig(learning_rate=0.01, num_micro_batches=2, segment_size=2, mixed_precision=True,
                                      zero_stage=1, loss_scale=2.0 ** 15, growth_interval=1),
    "all-reduce, mixed precision": TrainingConfig(learning_rate=0.01, num_micro_batches=3, segment_size=1,
                                                  mixed_precision=True, loss_scale=2.0 ** 15, growth_interval=1),
    "ZeRO, float64": TrainingConfig(learning_rate=0.01, num_micro_batches=2, zero_stage=1),
    "all-reduce, float64": TrainingConfig(learning_rate=0.01, segment_size=1),
}


def ref(name):
    return reference_function(find_lesson(name))


def largest_difference(got, expected):
    return max(float(np.abs(got[key] - expected[key]).max()) for key in expected)


def assert_every_worker_ends_as_simulated(results, key: str, course, tolerance: float) -> None:
    """Every worker's parameters after torch's run (``key`` of its cross-check results) are the simulated
    run's for that worker, to within ``tolerance``: 029's and 035's steps are held to this alike."""
    for rank, real in enumerate(results):
        assert largest_difference(real[key]["params"], course.worker_params[rank]) < tolerance, rank


def reference_preload() -> list[str]:
    """What `make train-distributed` has the process server import for the judge's reference lookup."""
    return tool("train_distributed").REFERENCE_PRELOAD


@pytest.fixture(scope="module")
def workers():
    """torch_workers, imported here only when torch is there; the process server preloads it."""
    import torch_workers
    real_cluster.start_process_server([*torch_workers.PRELOAD, *PRELOAD, *reference_preload()])
    return torch_workers


@pytest.fixture(scope="module")
def crosschecks(workers):
    """Every worker's results of every real-process cross-check, by world size: one launch each."""
    return {n: real_cluster.launch(n, workers.crosscheck_worker, SETUP, SGD_LEARNING_RATE, ADAM_LEARNING_RATE,
                                   timeout=TIMEOUT)
            for n in WORLD_SIZES}


@pytest.fixture(scope="module")
def real_runs(workers):
    """``make train-distributed``'s run with 029's and 035's steps and 040's loops, by world size: one launch each."""
    techniques = [DataParallel(reference_function), Zero(reference_function),
                  *(FullTrainingLoop(reference_function, config) for config in LOOPS.values())]
    return {n: dict(zip(["data parallel", "ZeRO", *LOOPS],
                        run(n, SETUP, techniques, timeout=TIMEOUT, preload=reference_preload())))
            for n in WORLD_SIZES}


@pytest.fixture(scope="module")
def simulated():
    """029's and 035's runs on the simulated cluster, by world size."""
    return {n: {"sgd": DataParallel(reference_function, SGD_LEARNING_RATE).simulate(SETUP, n),
                "adam": Zero(reference_function, ADAM_LEARNING_RATE).simulate(SETUP, n)} for n in WORLD_SIZES}


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
    assert_every_worker_ends_as_simulated(crosschecks[n], "ddp_sgd", course, 1e-13)
    losses = np.sum([real["ddp_sgd"]["losses"] for real in crosschecks[n]], axis=0) / n
    np.testing.assert_allclose(losses, course.losses, rtol=1e-12)


@needs_torch
@pytest.mark.part_6
@pytest.mark.lesson_035
@pytest.mark.parametrize("n", WORLD_SIZES)
def test_the_zero_step_equals_zero_redundancy_adam(n, crosschecks, simulated):
    assert_every_worker_ends_as_simulated(crosschecks[n], "ddp_zero_redundancy_adam", simulated[n]["adam"], 1e-12)
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
def test_training_on_real_processes_equals_the_simulated_run(n, real_runs):
    for name in ("data parallel", "ZeRO"):
        c = real_runs[n][name]
        assert c.technique == name
        assert c.params_close and c.largest_difference <= 1e-10 * 10, (c.technique, c.largest_difference)
        assert c.traffic_matches, (c.technique, c.real_traffic, c.simulated_traffic)
        np.testing.assert_allclose(c.real_losses, c.simulated_losses, rtol=1e-12)
        assert c.real_losses[-1] < c.real_losses[0]  # it trains
        for rank, written in enumerate(c.socket_bytes):
            if written is not None:  # the payload went through the sockets, with gloo's headers
                sent = c.real_traffic[rank]
                assert sent["bytes_sent"] <= written <= sent["bytes_sent"] + 512 * sent["messages_sent"]


def ring_bytes_sent(num_elements, itemsize, n, rank, first_chunks):
    """What worker ``rank`` sends in one reduce-scatter and one all-gather of a vector cut by np.array_split
    into N chunks: each half sends every chunk but one, the one it starts the half with skipped
    (``first_chunks``: the chunk each half skips, as offsets from the rank)."""
    chunks = [len(chunk) for chunk in np.array_split(np.empty(num_elements), n)]
    return sum(itemsize * (sum(chunks) - chunks[(rank + offset) % n]) for offset in first_chunks)


@needs_torch
@pytest.mark.part_7
@pytest.mark.lesson_040
@pytest.mark.parametrize("name", LOOPS)
@pytest.mark.parametrize("n", WORLD_SIZES)
def test_lesson_040s_loop_on_real_processes_equals_the_simulated_loop(n, name, real_runs):
    c, config = real_runs[n][name], LOOPS[name]
    assert c.technique == "full loop"
    # The same arithmetic, operation for operation: equal bit for bit, float16 passes and loss scaling included.
    assert c.params_close and c.largest_difference == 0, c.largest_difference
    assert c.params_dtype == ("float32" if config.mixed_precision else "float64")
    np.testing.assert_allclose(c.real_losses, c.simulated_losses, rtol=1e-12)
    # Each worker decided to skip, and scaled the loss, as the simulated loop did, with no message of its own.
    assert c.histories_match and len(c.real_histories) == n
    skipped = c.simulated_history["skipped"]
    if config.mixed_precision:  # the case exercises both branches of the loss scaler
        assert any(skipped) and not all(skipped), skipped
    else:
        assert not any(skipped) and c.real_losses[-1] < c.real_losses[0]
    # The traffic: the ledger's, worker for worker, and what the ring's schedule sends (028 all-reduce:
    # chunks r + 1 and r + 2 skipped; 035's reduce-scatter and 034's all-gather: chunks r and r + 1).
    assert c.traffic_matches, (c.real_traffic, c.simulated_traffic)
    itemsize = 2 if config.mixed_precision else 8
    skipped_chunks = (0, 1) if config.zero_stage else (1, 2)
    for rank, traffic in enumerate(c.real_traffic):
        per_step = ring_bytes_sent(SETUP.num_params, itemsize, n, rank, skipped_chunks)
        assert traffic["bytes_sent"] == SETUP.steps * per_step, rank
        assert traffic["messages_sent"] == traffic["rounds"] == SETUP.steps * 2 * (n - 1)


@needs_torch
@pytest.mark.part_7
@pytest.mark.lesson_040
def test_a_worker_that_fails_in_lesson_040s_step_ends_the_run_with_its_error(workers):
    # 4 workers share a batch of 30 as 8, 8, 7 and 7 rows: 8 micro-batches fit workers 0 and 1 only.
    # Workers 2 and 3 fail in their first step while 0 and 1 wait in the ring for them: the run ends
    # with the error at once, not after the time limit.
    loop = FullTrainingLoop(reference_function, TrainingConfig(num_micro_batches=8))
    with pytest.raises(WorkerFailed) as failure:
        run(4, SETUP, [loop], timeout=TIMEOUT, preload=reference_preload())
    assert failure.value.rank in (2, 3)
    assert "ValueError: cannot split a batch of 7 examples into 8 non-empty micro-batches" in str(failure.value)
    assert "split_into_micro_batches" in failure.value.details
    assert multiprocessing.active_children() == []


def test_the_command_refuses_more_workers_than_the_full_loop_can_use(capsys):
    # 2 micro-batches per worker of a batch of 30: at most 15 workers (lesson 040 refuses more). Refused
    # before anything starts, so without torch too.
    with pytest.raises(SystemExit) as refused:
        tool("train_distributed").main(["--workers", "16", "--technique", "full-loop"])
    assert refused.value.code == 2
    assert "full-loop trains a batch of 30 on at most 15 workers, got --workers 16" in capsys.readouterr().err


def quoted_in_notebook_07() -> str:
    """What notebook 07's closing section quotes as the output of `make train-distributed WORKERS=4`."""
    notebook = nbformat.read(student_path("07_memory_accounting"), as_version=4)
    section = next(cell.source for cell in notebook.cells
                   if cell.cell_type == "markdown" and cell.source.startswith("## Beyond the simulator"))
    assert "make train-distributed WORKERS=4" in section
    return re.search(r"^```text\n(.*?)^```", section, re.DOTALL | re.MULTILINE).group(1)


def makefile_default(variable: str) -> str:
    """A Makefile variable's default (``STEPS ?= 20``): what `make train-distributed` passes unless told."""
    return re.search(rf"^{variable} \?= (\S+)$", (ROOT / "Makefile").read_text(), re.MULTILINE).group(1)


def without_what_varies(report: str, socket_counts: bool) -> str:
    """A report without what changes from one run to the next, the training's seconds, and, where the
    operating system does not count a process's writes, the socket column."""
    report = re.sub(r"training \d+\.\d+ s", "training ... s", report.strip())
    if not socket_counts:
        report = re.sub(r" +(?:[\d,]+ \(\+\d+ B/message\)|n/a)$", " ...", report, flags=re.MULTILINE)
    return report


@needs_torch
@pytest.mark.part_7
@pytest.mark.lesson_040
def test_notebook_07_quotes_what_make_train_distributed_prints_now(workers, capsys):
    # The command's own code path, with the arguments `make train-distributed WORKERS=4` passes.
    arguments = ["--workers", "4", "--steps", makefile_default("STEPS"), "--technique", makefile_default("TECHNIQUE")]
    assert tool("train_distributed").main(arguments) == 0
    printed = capsys.readouterr().out
    socket_counts = real_cluster.bytes_written_by_this_process() is not None
    assert without_what_varies(quoted_in_notebook_07(), socket_counts) == without_what_varies(printed, socket_counts), (
        "notebook 07's closing section quotes another output than `make train-distributed WORKERS=4` prints now: "
        "paste the new one into autograde/parts/07_memory_accounting/master.py and run `make build`")


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
    that a notebook, the build or grading loads, nor by the extra's own modules at their top level
    (torch_extra.real_cluster imports it only when used), nor by any notebook."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["optional-dependencies"]["torch"] == ["torch==2.13.0"]
    assert not any(r.startswith("torch") for r in project["dependencies"] + project["optional-dependencies"]["dev"])
    ci = (ROOT / ".ci" / "run").read_text()
    assert ci.index("make torch") < ci.index("make test")
    sources = {path: path.read_text() for pattern in ("shared/**/*.py", "grading/*.py", "tools/*.py",
                                                      "torch_extra/*.py", "autograde/parts/*/*.py",
                                                      "solutions/*.py")
               for path in ROOT.glob(pattern)}
    for pattern in ("notebooks/*.ipynb", "solutions/*.ipynb"):
        for path in ROOT.glob(pattern):
            sources[path] = "\n".join(cell.source for cell in nbformat.read(path, as_version=4).cells)
    assert len(sources) > 30 and any(path.suffix == ".ipynb" for path in sources)
    for path, text in sources.items():  # a module's top level, or any line of a notebook's cells
        indent = r"\s*" if path.suffix == ".ipynb" else ""
        assert not re.search(rf"^{indent}(import torch|from torch)\b", text, re.MULTILINE), path  # not torch_extra
