"""``make train-distributed WORKERS=4``: the course's training on real processes, against the simulation.

    python tools/train_distributed.py [--workers 4] [--steps 20] [--timeout 120]

Runs lesson 029's data-parallel step and lesson 035's ZeRO step on N operating-system
processes of this machine, torch.distributed (gloo) carrying the messages and the
course's reference functions doing the computing, then the same training on the
simulated cluster; prints the losses, the largest difference between the real and
simulated final parameters, and each worker's bytes and messages beside the
simulated ledger's prediction (see ``shared/real_training.py``).

Exit status: 0 when every worker's parameters equal the simulated run's (float64,
rtol 1e-10) and its traffic is the ledger's; 1 when not, or when a worker failed
(its error is printed); 2 without torch (one line says how to install it).
"""

from __future__ import annotations

import argparse
import sys

from shared.real_cluster import DEFAULT_TIMEOUT, TorchMissing, WorkerFailed, WorkerTimeout
from shared.real_training import TrainingSetup, format_report, run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=4, help="number of worker processes (default 4)")
    parser.add_argument("--steps", type=int, default=TrainingSetup.steps, help="training steps (default %(default)s)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                        help="seconds before the run is stopped (default %(default)s)")
    options = parser.parse_args(argv)
    if options.workers < 1 or options.steps < 1:
        parser.error("--workers and --steps must be at least 1")
    setup = TrainingSetup(steps=options.steps)
    if options.workers > setup.batch_size:
        parser.error(f"at most {setup.batch_size} workers: each needs at least one example of the batch")
    try:
        comparisons = run(options.workers, setup, timeout=options.timeout)
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
