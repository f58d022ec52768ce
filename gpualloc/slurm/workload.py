"""Submitting a scenario's jobs to Slurm with plain `sbatch` (the tests and
the end-to-end benchmark): one Slurm job per rigid job, named by its id,
carrying its kind, priority and duration in its comment, running
gpualloc.slurm.sleep so that it ends just before its last step's boundary."""
from __future__ import annotations

import math
import shlex
import sys

from gpualloc.slurm.client import Slurm


def job_command(since: float, step_s: float, duration: int, margin: float = 0.4) -> str:
    """The --wrap line: only numbers and this Python's path (quoted) in it."""
    return (f"{shlex.quote(sys.executable)} -m gpualloc.slurm.sleep {since:.3f} {step_s:g} "
            f"{int(duration)} {margin:g}")


def sbatch_args(job, gpus_per_node: int, since: float, step_s: float, held: bool = False,
                priority: int | None = None, reservation: str | None = None,
                exclude: str | None = None, gpu_type: str | None = None) -> list[str]:
    """sbatch arguments (an argument list, never a shell line) for a rigid scenario job."""
    t = gpu_type + ":" if gpu_type else ""
    if job.gpus > gpus_per_node:
        # Whole nodes in a row (PROBLEM.md's block): Slurm's --contiguous.
        shape = ["-N", str(job.gpus // gpus_per_node), f"--gres=gpu:{t}{gpus_per_node}",
                 "--contiguous"]
    else:
        shape = ["-N", "1", f"--gres=gpu:{t}{job.gpus}"]
    minutes = max(1, math.ceil(job.duration * step_s / 60))
    preempt = f" preemptible=1 restart_cost={job.restart_cost}" if job.preemptible else ""
    args = ["-J", job.id, "--comment",
            f"kind={job.kind} priority={job.priority:g} duration={job.duration}{preempt}",
            *shape, "-t", str(minutes), "-o", "/dev/null", "-e", "/dev/null"]
    if held:
        args.append("--hold")
    if priority is not None:
        args.append(f"--priority={priority}")
    if reservation:
        args.append(f"--reservation={reservation}")
    if exclude:
        args.append(f"--exclude={exclude}")
    args += ["--wrap", job_command(since, step_s, job.duration)]
    return args


def submit(slurm: Slurm, job, gpus_per_node: int, since: float, step_s: float, **kw) -> int:
    return slurm.sbatch(sbatch_args(job, gpus_per_node, since, step_s, **kw))
