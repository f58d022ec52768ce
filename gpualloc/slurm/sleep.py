"""What a workload job runs: sleep until just before the step boundary where
its run of `duration` steps ends, counted from the step it started in. A
preemptible job that serve requeued resumes as a checkpointing job would:
it runs its restore and the rest of its progress (its comment's
`restart_cost=` and `done=`, as the snapshot plans it).

    python -m gpualloc.slurm.sleep SINCE STEP_SECONDS DURATION [MARGIN]

(Slurm's time limits are whole minutes, and a job that sleeps its nominal
length drifts past the boundary and delays the next step's jobs.)"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import datetime

from gpualloc.slurm import read


def slurm_start(now: float) -> tuple[float, str]:
    """This job's start time as Slurm records it (squeue), else `now` cut to
    the second; and its comment."""
    job = os.environ.get("SLURM_JOB_ID", "")
    if job.isdigit():
        try:
            out = subprocess.run(["squeue", "-h", "-j", job, "-o", "%S|%k"], capture_output=True,
                                 text=True, timeout=10).stdout.strip()
            start, _, comment = out.partition("|")
            return datetime.fromisoformat(start).timestamp(), comment
        except (OSError, ValueError, subprocess.TimeoutExpired):
            pass
    return float(int(now)), ""


def resumed(comment: str) -> int:
    """read.resumed from the comment alone (0 where it cannot be read)."""
    try:
        return read.resumed(read.comment_hints(comment))
    except read.SlurmReadError:
        return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    since, step, duration = float(args[0]), float(args[1]), int(args[2])
    margin = float(args[3]) if len(args) > 3 else 0.4
    now = time.time()
    # The step is counted as `executed` will count it: from Slurm's own
    # start time (whole seconds), which can be a second or two before this
    # process runs on a loaded host.
    started, comment = slurm_start(now)
    start = round((started - since) / step)
    duration = max(1, duration + resumed(comment))
    time.sleep(max(0.0, since + (start + duration) * step - margin - time.time()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
