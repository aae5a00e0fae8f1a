"""``make train-distributed WORKERS=4``: the course's training on real processes, against the simulation.

    python tools/train_distributed.py [--workers 4] [--steps 20] [--technique all] [--timeout 120]

Runs lesson 029's data-parallel step, lesson 035's ZeRO step and lesson 040's full
training loop (every switch on: micro-batches, checkpointing, mixed precision with
dynamic loss scaling, ZeRO stage 1) on N operating-system processes of this machine,
torch.distributed (gloo) carrying the messages and the course's reference functions
doing the computing, then the same training on the simulated cluster; prints the
losses, the largest difference between the real and simulated final parameters, and
each worker's bytes and messages beside the simulated ledger's prediction (see
``torch_extra/real_training.py``, which this command hands the course's reference
solutions: ``grading.judge.reference_function``). ``--technique`` runs one of them only.

Exit status: 0 when every worker's parameters equal the simulated run's (float64,
rtol 1e-10; the full loop's float32 master weights bit for bit), its traffic is the
ledger's and its loss scaler decided as the simulation's; 1 when not, or when a worker
failed (its error is printed); 2 without torch (one line says how to install it).
"""

from __future__ import annotations

import argparse
import sys

from grading.judge import reference_function
from torch_extra.real_cluster import DEFAULT_TIMEOUT, TorchMissing, WorkerFailed, WorkerTimeout
from torch_extra.real_training import TECHNIQUES, TrainingSetup, format_report, run

# What the workers' process server imports once for the reference lookup, so that no worker spends
# a second on it: the judge, and matplotlib's pyplot, which the reference solutions import.
REFERENCE_PRELOAD = ["grading.judge", "matplotlib.pyplot"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=4, help="number of worker processes (default 4)")
    parser.add_argument("--steps", type=int, default=TrainingSetup.steps, help="training steps (default %(default)s)")
    parser.add_argument("--technique", choices=["all", *TECHNIQUES], default="all",
                        help="what to train with (default: all three, one after another)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                        help="seconds before the run is stopped (default %(default)s)")
    options = parser.parse_args(argv)
    if options.workers < 1 or options.steps < 1:
        parser.error("--workers and --steps must be at least 1")
    setup = TrainingSetup(steps=options.steps)
    names = list(TECHNIQUES) if options.technique == "all" else [options.technique]
    techniques = [TECHNIQUES[name](reference_function) for name in names]
    for name, technique in zip(names, techniques):
        if options.workers > technique.max_workers(setup):
            parser.error(f"{name} trains a batch of {setup.batch_size} on at most {technique.max_workers(setup)} "
                         f"workers, got --workers {options.workers}")
    try:
        comparisons = run(options.workers, setup, techniques, timeout=options.timeout, preload=REFERENCE_PRELOAD)
    except TorchMissing as missing:
        print(f"train-distributed: {missing}", file=sys.stderr)
        return 2
    except (WorkerFailed, WorkerTimeout) as failure:
        print(f"train-distributed: {failure}", file=sys.stderr)
        return 1
    print(format_report(comparisons, setup))
    failed = [c.technique for c in comparisons if not c.ok]
    if failed:
        print(f"train-distributed: the real run differs from the simulated one ({', '.join(failed)})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
