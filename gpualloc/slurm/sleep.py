"""What a workload job runs: sleep until just before the step boundary where
its run of `duration` steps ends, counted from the step it started in.

    python -m gpualloc.slurm.sleep SINCE STEP_SECONDS DURATION [MARGIN]

(Slurm's time limits are whole minutes, and a job that sleeps its nominal
length drifts past the boundary and delays the next step's jobs.)"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import datetime


def slurm_start(now: float) -> float:
    """This job's start time as Slurm records it (squeue), else `now` cut to the second."""
    job = os.environ.get("SLURM_JOB_ID", "")
    if job.isdigit():
        try:
            out = subprocess.run(["squeue", "-h", "-j", job, "-o", "%S"], capture_output=True,
                                 text=True, timeout=10).stdout.strip()
            return datetime.fromisoformat(out).timestamp()
        except (OSError, ValueError, subprocess.TimeoutExpired):
            pass
    return float(int(now))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    since, step, duration = float(args[0]), float(args[1]), int(args[2])
    margin = float(args[3]) if len(args) > 3 else 0.4
    now = time.time()
    # The step is counted as `executed` will count it: from Slurm's own
    # start time (whole seconds), which can be a second or two before this
    # process runs on a loaded host.
    start = round((slurm_start(now) - since) / step)
    time.sleep(max(0.0, since + (start + duration) * step - margin - time.time()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
