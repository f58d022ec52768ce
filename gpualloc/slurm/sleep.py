"""What a workload job runs: sleep until just before the step boundary where
its run of `duration` steps ends, counted from the step it started in.

    python -m gpualloc.slurm.sleep SINCE STEP_SECONDS DURATION [MARGIN]

(Slurm's time limits are whole minutes, and a job that sleeps its nominal
length drifts past the boundary and delays the next step's jobs.)"""
from __future__ import annotations

import sys
import time


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    since, step, duration = float(args[0]), float(args[1]), int(args[2])
    margin = float(args[3]) if len(args) > 3 else 0.4
    now = time.time()
    # Slurm records whole seconds (its start time is this second, cut):
    # the step is counted as `executed` will count it.
    start = round((int(now) - since) / step)
    time.sleep(max(0.0, since + (start + duration) * step - margin - now))
    return 0


if __name__ == "__main__":
    sys.exit(main())
