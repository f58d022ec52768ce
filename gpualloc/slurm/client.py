"""Slurm's own commands, run as argument lists (never through a shell: a
job's name or comment reaches no shell), each with a timeout. A command
that cannot run or that fails raises `SlurmUnreachable` with one line."""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass

from gpualloc.slurm import read

TIMEOUT_S = 30.0


class SlurmUnreachable(RuntimeError):
    """A Slurm command could not run, timed out or failed; the message says which and why."""


@dataclass
class Slurm:
    """Where the client commands find the cluster: `conf` is a slurm.conf
    (SLURM_CONF), None for the environment's own."""

    conf: str | None = None
    timeout_s: float = TIMEOUT_S

    def env(self) -> dict[str, str]:
        e = dict(os.environ)
        if self.conf:
            e["SLURM_CONF"] = self.conf
        return e

    def run(self, args: list[str], ok_codes: tuple[int, ...] = (0,)) -> str:
        if shutil.which(args[0]) is None:
            raise SlurmUnreachable(f"{args[0]}: not installed (no Slurm client on this machine)")
        try:
            p = subprocess.run(args, env=self.env(), capture_output=True, text=True,
                               timeout=self.timeout_s, errors="replace")
        except subprocess.TimeoutExpired:
            raise SlurmUnreachable(f"{args[0]}: no answer within {self.timeout_s:g} s") from None
        except OSError as e:
            raise SlurmUnreachable(f"{args[0]}: {e.strerror or e}") from None
        if p.returncode not in ok_codes:
            lines = [x for x in (p.stderr or p.stdout).strip().splitlines() if x.strip()]
            raise SlurmUnreachable(f"{' '.join(args[:2])} failed (exit {p.returncode}): "
                                   f"{lines[-1].strip() if lines else 'no message'}")
        return p.stdout

    # ---- reading -------------------------------------------------------------------------
    def jobs(self) -> list[read.SlurmJob]:
        return read.squeue(self.run(["squeue", "--json"]))

    def nodes(self) -> list[read.SlurmNode]:
        return read.sinfo(self.run(["sinfo", "--json"]))

    def now(self) -> float:
        return time.time()

    # ---- acting (each one Slurm command) --------------------------------------------------
    def sbatch(self, args: list[str]) -> int:
        out = self.run(["sbatch", "--parsable", *args])
        try:
            return int(out.strip().split(";")[0])
        except ValueError:
            raise SlurmUnreachable(f"sbatch: cannot read a job id in {out.strip()[:60]!r}") from None

    def pin(self, job: int, nodes: list[str]) -> None:
        """Run the job on exactly these nodes (it is pending), as soon as it is
        released: a requeued job is otherwise held back about two minutes
        after its release (Slurm's BeginTime; StartTime=now clears it)."""
        self.run(["scontrol", "update", f"JobId={job}", f"NodeList={','.join(nodes)}",
                  "StartTime=now"])

    def release(self, jobs: list[int]) -> None:
        if jobs:
            self.run(["scontrol", "release", ",".join(str(j) for j in jobs)])

    def set_comment(self, job: int, comment: str) -> None:
        self.run(["scontrol", "update", f"JobId={job}", f"Comment={comment}"])

    def requeue_hold(self, job: int) -> None:
        self.run(["scontrol", "requeuehold", str(job)])

    def cancel(self, jobs: list[int]) -> None:
        """Only for jobs gpualloc itself submitted (the benchmark's clean-up)."""
        if jobs:
            self.run(["scancel", *(str(j) for j in jobs)])
