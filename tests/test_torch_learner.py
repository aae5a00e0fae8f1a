"""``make train-distributed FROM=notebooks``: the learner's own 029, 035 and 040 on real processes.

The learner's notebooks are made here as a learner would leave them (``tests/course.py``'s
``make_submission``): with the reference answers written into their Implementation cells, with
one known mistake, with a stub, with a cell against the rules, with a loop that never ends. The
command runs in this process (its ``main``), but for the loop that never ends, which runs it as
`make` does, in a process of its own (a session of its own, to find whatever it leaves behind).

- the reference answers, run from the notebooks on 4 processes, train equal to the reference on
  the simulated cluster, bit for bit, traffic for traffic: exit 0;
- a 029 that averages the workers' gradients unweighted, a 035 without its all-gather, a 040
  that never updates its master weights and a 029 that leaves the cluster it is given unused
  each exit 1, the report naming the first difference (its
  step, worker and tensor, or the traffic, and what it most likely means); 4 workers, as the batch
  of 30 then falls in shards of 8, 8, 7 and 7 rows (2 workers' equal shards would weigh alike);
- a lesson not answered yet is named, and a cell against the rules gets the visible tests' message,
  before anything starts;
- a learner's function that raises in a worker: the worker's rank, the error and the learner's
  cell and line;
- a learner's function that never returns is stopped at the time limit, the message naming the
  workers and what they ran, and nothing of the run is left running; a worker's own child
  process goes with it;
- without torch the command says how to install it (exit 2); the notebook is read as the learner
  runs it, without its visible tests and demos.

Without torch every test here skips, saying how to install it, but the three that need no worker.
"""

import multiprocessing
import os
import re
import subprocess
import sys
import textwrap
import time

import nbformat
import pytest

from course import ROOT, make_submission, reference_code, tool, with_import_inside
from grading.judge import reference_function
from shared import policy
from shared.lessons import lesson
from torch_extra import notebook_functions
from torch_extra.real_cluster import MISSING_TORCH, WorkerTimeout, launch, torch_available
from torch_extra.real_training import FullTrainingLoop, TrainingSetup

needs_torch = pytest.mark.skipif(not torch_available(), reason=MISSING_TORCH)
SLUGS = ("05_data_parallel", "06_zero_sharding", "07_memory_accounting")
WORKERS, STEPS = "4", "6"

# The mistakes, each a change of the reference answer: (part, function, the reference's text, the mistake's).
UNWEIGHTED_029 = ("05_data_parallel", "data_parallel_train_step",
                  "compute_local_gradients(params, X_shard, Y_shard, len(X), num_workers)",
                  "mlp.loss_and_grads(X_shard, Y_shard, params)")  # each shard's plain mean: 1/N each, not n_r/B
NO_ALL_GATHER_035 = ("06_zero_sharding", "zero_optimizer_step",
                     "    vectors, traffic = all_gather_param_shards(new_shards, cluster)\n"
                     "    return [as_params(vector) for vector in vectors], new_states, traffic",
                     "    flat = np.concatenate([value.ravel() for value in params.values()])\n"
                     "    vectors, start = [], 0\n"
                     "    for shard in new_shards:  # each worker writes its own new shard into its copy\n"
                     "        mine = flat.copy()\n"
                     "        mine[start:start + len(shard)] = shard\n"
                     "        vectors.append(mine)\n"
                     "        start += len(shard)\n"
                     "    return [as_params(vector) for vector in vectors], new_states, cluster.ledger.summary()")
STALE_MASTER_040 = ("07_memory_accounting", "full_distributed_training_loop",
                    "            master = [shard for shard, _ in updates]\n", "")
OWN_CLUSTER_029 = ("05_data_parallel", "data_parallel_train_step",
                   "    if cluster is None:\n        cluster = Cluster(num_workers)\n",
                   "    cluster = Cluster(num_workers)  # the one it was given is left unused\n")
NAIVE_029 = ("05_data_parallel", "data_parallel_train_step",
             "averaged, _ = ring_all_reduce_mean(", "averaged, _ = all_reduce_mean(")  # 027's, not the ring
HANGING_040 = ("07_memory_accounting", "full_distributed_training_loop",
               "    N, k, mixed = config.num_workers, config.num_micro_batches, config.mixed_precision\n",
               "    N, k, mixed = config.num_workers, config.num_micro_batches, config.mixed_precision\n"
               "    while N > 0:  # never ends\n"
               "        k = k + 1\n")


def changed(mistake) -> tuple[str, str]:
    """(part, the Implementation cell's code): the reference answer with the mistake's change."""
    slug, function, reference, wrong = mistake
    code = reference_code(slug, function)
    assert code.count(reference) == 1, (function, reference)
    return slug, code.replace(reference, wrong)


def write_notebooks(folder, answers: dict[str, dict[str, str]] | None = None, default: str = "reference"):
    """The three notebooks into ``folder``: every Implementation cell the reference's (or ``default``'s), but for
    ``answers`` (part -> {function: code})."""
    for slug in SLUGS:
        nbformat.write(make_submission(slug, (answers or {}).get(slug), default=default), folder / f"{slug}.ipynb")
    return folder


def train(folder, *extra: str, workers: str = WORKERS, steps: str = STEPS) -> list[str]:
    return ["--from", "notebooks", "--notebooks", str(folder), "--workers", workers, "--steps", steps, *extra]


def section(report: str, technique: str) -> str:
    """One technique's part of the report (from its heading line to the next blank line)."""
    return re.search(rf"^{re.escape(technique)}: .*?(?=^$)", report, re.DOTALL | re.MULTILINE).group(0)


@needs_torch
def test_the_reference_answers_in_the_learners_notebooks_train_equal(tmp_path, capsys):
    folder = write_notebooks(tmp_path)
    assert tool("train_distributed").main(train(folder)) == 0
    out, err = capsys.readouterr()
    for technique, slug, function in (("data parallel", "05_data_parallel", "data_parallel_train_step"),
                                      ("ZeRO", "06_zero_sharding", "zero_optimizer_step"),
                                      ("full loop", "07_memory_accounting", "full_distributed_training_loop")):
        part = " ".join(section(out, technique).split())  # the report's lines are wrapped
        assert f"your {function} from {folder / slug}.ipynb" in part  # the report says whose
        assert "largest difference 0 (relative 0), equal bit for bit" in part
        assert "traffic as the ledger predicts, worker for worker" in part
    assert "every worker as simulated" in " ".join(section(out, "full loop").split())  # the loss scaler's decisions
    assert "FIRST DIFFERENCE" not in out and err == ""


def leading_skips(steps: int, workers: int) -> int:
    """How many first steps the reference loop's loss scaler skips on this run (its scale overflows at first)."""
    history = FullTrainingLoop(reference_function).simulate(TrainingSetup(steps=steps), workers).history
    return next(step for step, skipped in enumerate(history["skipped"]) if not skipped)


def lesson_marks(code: str, part: int) -> list:
    return [getattr(pytest.mark, f"lesson_{code}"), getattr(pytest.mark, f"part_{part}")]


SAME_TRAFFIC = r"traffic as the ledger predicts, worker for worker"


@needs_torch
@pytest.mark.parametrize("technique, mistake, steps, first", [
    # The unweighted mean changes the first step's gradient, so every worker's first update: the same messages.
    pytest.param("data-parallel", UNWEIGHTED_029, "2",
                 [SAME_TRAFFIC, r"FIRST DIFFERENCE \(data parallel, step 0\): worker 0's parameters after the step: "
                  r"W1 differs by up to", r"what it most likely means: the same messages carry other numbers: how "
                  r"the gradients are weighted"], id="029 unweighted", marks=lesson_marks("029", 5)),
    # Without the all-gather the first step sends half the ledger's messages, and worker 0 misses the others' shards.
    pytest.param("zero", NO_ALL_GATHER_035, "2",
                 [r"FIRST DIFFERENCE \(ZeRO, step 0\): worker 0 sent 3 messages, [\d,]+ bytes, .* in the step; the "
                  r"ledger says 6 messages", r"also in that step: worker 0's parameters after the step: \w+ differs by "
                  r"up to", r"what it most likely means: less traffic than the ledger: a collective left out"],
                 id="035 without its all-gather", marks=lesson_marks("035", 6)),
    # Stale master weights: the first clean step starts from the same ones, the second does not, and the loss
    # of the step after it is the first number that differs; the traffic stays the ledger's.
    pytest.param("full-loop", STALE_MASTER_040, STEPS,
                 [SAME_TRAFFIC, r"FIRST DIFFERENCE \(full loop, step {after_two_clean_steps}\): the step's loss is",
                  r"at the end: worker 0's final parameters: W1 differs by up to",
                  r"what it most likely means: the parameters that the earlier steps left differ .*its master weights"],
                 id="040 with stale master weights", marks=lesson_marks("040", 7)),
    # Right numbers, but every message stays inside the process: nothing crossed, the ledger's traffic is missing.
    pytest.param("data-parallel", OWN_CLUSTER_029, "2",
                 [r"FIRST DIFFERENCE \(data parallel, step 0\): worker 0 sent 0 messages, 0 bytes, and received 0, "
                  r"0 bytes in the step; the ledger says [1-9]\d* messages",
                  r"what it most likely means: no message crossed between the processes: .*its `cluster` argument"],
                 id="029 on its own cluster", marks=lesson_marks("029", 5)),
    # The naive all-reduce (027): worker 0 gathers and sends back whole tensors, more bytes than its ring's chunks.
    pytest.param("data-parallel", NAIVE_029, "1",
                 [r"FIRST DIFFERENCE \(data parallel, step 0\): worker 0 sent \d+ messages, [\d,]+ bytes, .* in the "
                  r"step; the ledger says \d+ messages, [\d,]+ bytes",
                  r"what it most likely means: more traffic than the ledger: a collective done the expensive way"],
                 id="029 with the naive all-reduce", marks=lesson_marks("029", 5)),
])
def test_a_mistake_exits_1_naming_its_first_difference(technique, mistake, steps, first, tmp_path, capsys):
    slug, code = changed(mistake)
    folder = write_notebooks(tmp_path, {slug: {mistake[1]: code}})
    assert tool("train_distributed").main(train(folder, "--technique", technique, steps=steps)) == 1
    out, err = capsys.readouterr()
    report = " ".join(out.split())  # the report's lines are wrapped
    after_two_clean_steps = leading_skips(int(STEPS), int(WORKERS)) + 2
    for pattern in first:
        assert re.search(pattern.format(after_two_clean_steps=after_two_clean_steps), report), (pattern, out)
    assert "your functions' real run differs from the reference's" in err


@needs_torch
def test_a_lesson_not_answered_yet_is_named_and_not_run(tmp_path, capsys):
    folder = write_notebooks(tmp_path, default="stub")  # the notebooks as released
    assert tool("train_distributed").main(train(folder, "--technique", "zero")) == 1
    out, err = capsys.readouterr()
    assert out == ""  # nothing ran
    assert ("zero: lesson 035 · ZeRO optimizer step is not answered yet in "
            f"{folder / '06_zero_sharding.ipynb'}: zero_optimizer_step still raises NotImplementedError") in err
    # Step 1 of the skeleton is a function of its own, which the step calls: named too.
    assert ("your reduce_scatter_mean (of lesson 035's Implementation cell) is not answered yet" in err
            and "which your zero_optimizer_step calls" in err)
    assert err.rstrip().endswith("nothing to run from " + str(folder) + " (zero: see above)")


@needs_torch
def test_a_missing_notebook_is_named(tmp_path, capsys):
    assert tool("train_distributed").main(train(tmp_path, "--technique", "data-parallel")) == 1
    assert f"data-parallel: there is no notebook at {tmp_path / '05_data_parallel.ipynb'}" in capsys.readouterr().err


@needs_torch
def test_a_cell_against_the_rules_gets_the_visible_tests_message(tmp_path, capsys):
    code = reference_code("05_data_parallel", "shard_dataset_across_workers")
    cell, _ = with_import_inside(code, "shard_dataset_across_workers", "import os  # not for graded code")
    folder = write_notebooks(tmp_path, {"05_data_parallel": {"shard_dataset_across_workers": cell}})
    assert tool("train_distributed").main(train(folder, "--technique", "data-parallel")) == 1
    _, err = capsys.readouterr()
    # What the visible test cell's check_rules(shard_dataset_across_workers) says, from the rules themselves.
    message = policy.describe(policy.check_source(cell), "the cell that defines shard_dataset_across_workers")
    assert message and f"data-parallel: {folder / '05_data_parallel.ipynb'}: {message}\n" in err
    assert err.count(message) == 1  # said once, though 029's check reads the cells of what it calls too


def test_without_torch_the_command_from_notebooks_says_how_to_install_it(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now fails, as without the extra
    assert tool("train_distributed").main(train(tmp_path)) == 2  # before any notebook is read
    out, err = capsys.readouterr()
    assert out == "" and err == f"train-distributed: {MISSING_TORCH}\n"


@needs_torch
def test_a_learners_function_that_raises_in_a_worker_gives_its_rank_error_and_line(tmp_path, capsys):
    code = reference_code("05_data_parallel", "data_parallel_train_step")
    anchor = "    worker_params = [{} for _ in range(num_workers)]\n"
    assert anchor in code
    code = code.replace(anchor, anchor + "    raise ValueError('a learner\\'s bug')\n")
    folder = write_notebooks(tmp_path, {"05_data_parallel": {"data_parallel_train_step": code}})
    assert tool("train_distributed").main(train(folder, "--technique", "data-parallel", workers="2", steps="1")) == 1
    _, err = capsys.readouterr()
    assert re.match(r"train-distributed: worker [01] of 2 failed: ValueError: a learner's bug", err), err
    # The traceback ends in the learner's cell, by its place in the notebook, with the line.
    assert re.search(r'File "<05_data_parallel\.ipynb, cell \d+>", line \d+, in data_parallel_train_step\n'
                     r"\s+raise ValueError\('a learner\\'s bug'\)", err), err
    assert multiprocessing.active_children() == []


def processes_in_session(session: int) -> list[str]:
    """The processes of this machine in a session (Linux's /proc), as "pid command"."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            if int(fields[3]) == session:  # after the command's ")": state, ppid, pgrp, session
                with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                    command = cmdline.read().replace(b"\0", b" ").decode(errors="replace")
                found.append(f"{entry} {command}")
        except (OSError, IndexError, ValueError):
            continue  # it ended meanwhile
    return found


@needs_torch
@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads the processes from Linux's /proc")
def test_a_learners_loop_that_never_ends_is_stopped_and_nothing_is_left(tmp_path):
    slug, code = changed(HANGING_040)
    folder = write_notebooks(tmp_path, {slug: {HANGING_040[1]: code}})
    # As `make train-distributed` runs it, in a session of its own: everything it starts stays in it.
    command = subprocess.Popen([sys.executable, str(ROOT / "tools" / "train_distributed.py"),
                                *train(folder, "--technique", "full-loop", "--timeout", "4", workers="2")],
                               cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        out, err = command.communicate(timeout=120)
    finally:
        if command.poll() is None:
            os.killpg(command.pid, 9)
    assert command.returncode == 1, err
    assert re.search(r"the run did not finish in 4 s: worker\(s\) 0, 1 of 2 still running \(each in your "
                     r"full_distributed_training_loop from .*07_memory_accounting\.ipynb\); all stopped", err), err
    deadline = time.monotonic() + 10  # the process server ends when the command's end closes its pipe
    while processes_in_session(command.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = processes_in_session(command.pid)
    for process in left:  # not left behind by a failing test either
        os.kill(int(process.split()[0]), 9)
    assert left == []


@needs_torch
@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads the processes from Linux's /proc")
def test_what_a_worker_started_is_stopped_with_it(tmp_path):
    import torch_workers
    record = tmp_path / "child.pid"
    with pytest.raises(WorkerTimeout):
        launch(1, torch_workers.start_a_child_and_hang, str(record), timeout=3)
    child = int(record.read_text())
    deadline = time.monotonic() + 5
    while running(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    if running(child):
        os.kill(child, 9)  # not left behind by a failing test either
        pytest.fail("the worker's child process outlived the run")
    assert multiprocessing.active_children() == []


def running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (Linux's /proc)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_the_notebook_is_read_as_the_learner_runs_it_without_its_tests_and_demos(tmp_path):
    notebook = make_submission("05_data_parallel", default="reference")
    # A learner's own cell: a magic, a helper, and a computation that would fail if it ran.
    notebook.cells.append(nbformat.v4.new_code_cell(textwrap.dedent("""\
        %matplotlib inline
        def my_helper(x):
            return 2 * x
        raise RuntimeError("a demo line: not run here")
        """)))
    path = tmp_path / "05_data_parallel.ipynb"
    nbformat.write(notebook, path)
    notebook = notebook_functions.read(path)
    namespace = notebook.namespace()
    assert namespace["my_helper"](3) == 6
    # The visible test cells did not run: they leave names such as the test data behind.
    test_names = {"X10", "Y10", "p0", "replicas"}
    assert not test_names & namespace.keys()
    assert namespace["data_parallel_train_step"].__module__ == "__main__"  # as in the notebook
    assert notebook_functions.problems(notebook, lesson("data_parallel_train_step")) == []
    called = [f.__name__ for f in notebook_functions.called_functions(namespace["data_parallel_train_step"])]
    assert called == ["data_parallel_train_step", "shard_dataset_across_workers", "compute_local_gradients",
                      "ring_all_reduce_mean"]
