"""``make train-distributed WORKERS=4``: the course's training on real processes, against the simulation.

    python tools/train_distributed.py [--workers 4] [--steps 20] [--technique all] [--timeout 120]
                                      [--from references|notebooks] [--notebooks notebooks]

Runs lesson 029's data-parallel step, lesson 035's ZeRO step and lesson 040's full
training loop (every switch on: micro-batches, checkpointing, mixed precision with
dynamic loss scaling, ZeRO stage 1) on N operating-system processes of this machine,
torch.distributed (gloo) carrying the messages and the course's reference functions
doing the computing, then the same training on the simulated cluster; prints the
losses, the largest difference between the real and simulated final parameters, and
each worker's bytes and messages beside the simulated ledger's prediction (see
``torch_extra/real_training.py``, which this command hands the course's reference
solutions: ``grading.judge.reference_function``). ``--technique`` runs one of them only.

``--from notebooks`` (``make train-distributed FROM=notebooks``) runs *your* 029, 035 and 040
instead, from your notebooks in ``notebooks/`` (``torch_extra/learner_training.py``): the
rules for graded code are checked first, with the visible test cells' message, and a lesson
not answered yet is named and not run; each process calls your function on a simulated
cluster whose own worker's messages travel between the processes, and every worker's final
parameters, bytes and messages and loss-scaler decisions are compared with the course's
reference on the simulated cluster. A difference is reported where it first appears: the
technique, the step, the worker, the tensor and by how much, and what it most likely means.

Exit status: 0 when every worker's parameters equal the simulated run's (float64,
rtol 1e-10; the full loop's float32 master weights bit for bit), its traffic is the
ledger's and its loss scaler decided as the simulation's; 1 when not, or when a worker
failed (its error is printed), or (``--from notebooks``) when a lesson could not run (not
answered, or against the rules); 2 without torch (one line says how to install it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from grading.judge import reference_function
from shared.lessons import lesson
from torch_extra import notebook_functions
from torch_extra.learner_training import LEARNER_TECHNIQUES
from torch_extra.real_cluster import DEFAULT_TIMEOUT, TorchMissing, WorkerFailed, WorkerTimeout, require_torch
from torch_extra.real_training import TECHNIQUES, TrainingSetup, format_report, run

ROOT = Path(__file__).resolve().parent.parent

# What the workers' process server imports once for the reference lookup, so that no worker spends
# a second on it: the judge, and matplotlib's pyplot, which the reference solutions import.
REFERENCE_PRELOAD = ["grading.judge", "matplotlib.pyplot"]
# ... and, for --from notebooks, what reading the learner's notebooks imports: their set-up cells' modules.
NOTEBOOK_PRELOAD = ["torch_extra.learner_training", "nbformat", "shared.checking", "shared.memory", "shared.mistakes",
                    "shared.notebook", "shared.plotting", "shared.progress", "shared.lesson_blocks", "shared.training"]
LEARNER_SOURCE = "your own functions, from your notebooks, against the course's reference on the simulated cluster"


def runnable(names: list[str], folder: Path) -> dict[str, object]:
    """The learner's techniques whose lesson can run from the notebooks in ``folder``, by name; prints what
    stops the others. Each carries its notebook as read and checked here, which is what its workers run."""
    ready = {}
    for name in names:
        kind = LEARNER_TECHNIQUES[name]
        try:
            notebook = notebook_functions.read(notebook_functions.notebook_path(folder, kind.lesson()))
            found = notebook_functions.problems(notebook, kind.lesson())
        except notebook_functions.NotebookProblem as problem:
            found = [str(problem)]
        for problem in found:
            print(f"train-distributed: {name}: {problem}", file=sys.stderr)
        if not found:
            ready[name] = kind(reference_function, notebook)
    return ready


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=4, help="number of worker processes (default 4)")
    parser.add_argument("--steps", type=int, default=TrainingSetup.steps, help="training steps (default %(default)s)")
    parser.add_argument("--technique", choices=["all", *TECHNIQUES], default="all",
                        help="what to train with (default: all three, one after another)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                        help="seconds before the run is stopped (default %(default)s)")
    parser.add_argument("--from", dest="source", choices=["references", "notebooks"], default="references",
                        help="whose 029, 035 and 040 run: the course's reference solutions (default) or yours")
    parser.add_argument("--notebooks", type=Path, default=ROOT / "notebooks",
                        help="the folder of your notebooks, for --from notebooks (default: notebooks/)")
    options = parser.parse_args(argv)
    if options.workers < 1 or options.steps < 1:
        parser.error("--workers and --steps must be at least 1")
    setup = TrainingSetup(steps=options.steps)
    names = list(TECHNIQUES) if options.technique == "all" else [options.technique]
    from_notebooks = options.source == "notebooks"
    for name in names:
        most = TECHNIQUES[name](reference_function).max_workers(setup)
        if options.workers > most:
            parser.error(f"{name} trains a batch of {setup.batch_size} on at most {most} workers, "
                         f"got --workers {options.workers}")
    not_run = []
    if from_notebooks:
        try:
            require_torch()  # before reading any notebook: without torch nothing here can run
        except TorchMissing as missing:
            print(f"train-distributed: {missing}", file=sys.stderr)
            return 2
        ready = runnable(names, options.notebooks)
        not_run = [name for name in names if name not in ready]
        if not ready:
            print(f"train-distributed: nothing to run from {notebook_functions.display_path(options.notebooks)} "
                  f"({', '.join(not_run)}: see above)", file=sys.stderr)
            return 1
        names, techniques = list(ready), list(ready.values())
    else:
        techniques = [TECHNIQUES[name](reference_function) for name in names]
    preload = REFERENCE_PRELOAD + (NOTEBOOK_PRELOAD if from_notebooks else [])
    try:
        comparisons = run(options.workers, setup, techniques, timeout=options.timeout, preload=preload)
    except TorchMissing as missing:
        print(f"train-distributed: {missing}", file=sys.stderr)
        return 2
    except (WorkerFailed, WorkerTimeout) as failure:
        print(f"train-distributed: {failure}", file=sys.stderr)
        return 1
    if from_notebooks:
        print(format_report(comparisons, setup, LEARNER_SOURCE))
    else:
        print(format_report(comparisons, setup))
    failed = [c.technique for c in comparisons if not c.ok]
    if failed:
        whose = "your functions' real run differs from the reference's" if from_notebooks else \
            "the real run differs from the simulated one"
        print(f"train-distributed: {whose} ({', '.join(failed)})", file=sys.stderr)
        return 1
    if not_run:
        print(f"train-distributed: not run: {', '.join(not_run)} (see above)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
