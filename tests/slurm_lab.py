"""The lab cluster the `slurm` tests use: the one `.ci/run` brings up
(python -m gpualloc.slurm.lab up; $GPUALLOC_SLURM_LAB or its default folder).

A test that needs it and cannot reach it fails with the reason under CI
(CI=true, or GPUALLOC_SLURM_REQUIRED=1 as .ci/run sets); elsewhere it is skipped with the command that brings the lab up."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import uuid

import pytest

from gpualloc.slurm import lab
from gpualloc.slurm.client import Slurm, SlurmUnreachable


def need_lab() -> Slurm:
    d = lab.lab_dir()
    ok, text = lab.status(d)
    if ok:
        try:
            Slurm(str(d / "slurm.conf")).nodes()
        except SlurmUnreachable as e:
            ok, text = False, str(e)
    if not ok:
        why = (f"the Slurm lab is not up ({text}); bring it up with "
               f"`python -m gpualloc.slurm.lab up`")
        if os.environ.get("CI") == "true" or os.environ.get("GPUALLOC_SLURM_REQUIRED") == "1":
            pytest.fail(why)
        pytest.skip(why)
    return Slurm(str(d / "slurm.conf"))


@contextlib.contextmanager
def own_lab(tmp_path, nodes: int, port: int):
    """A lab of `nodes` nodes of its own (its own folder and ports, nothing
    else on it), for a test that needs the whole cluster; down after it."""
    need_lab()
    d = tmp_path / "lab"
    lab.up(d, lab.Shape(nodes=nodes, port=port))
    try:
        yield Slurm(str(d / "slurm.conf"))
    finally:
        lab.down(d)


def tag() -> str:
    """A prefix unique to one test, for the names of the jobs it submits."""
    return f"t{uuid.uuid4().hex[:6]}"


def run_cli(*args: str, slurm: Slurm | None = None, env: dict | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess:
    e = dict(os.environ if env is None else env)
    if slurm is not None:
        e["SLURM_CONF"] = slurm.conf
    return subprocess.run([sys.executable, "-m", "gpualloc.slurm", *args], env=e,
                          capture_output=True, text=True, timeout=timeout)


def wait_done(slurm: Slurm, ids: list[int], timeout: float = 120) -> list:
    """Poll until none of these jobs is pending or running; returns the jobs."""
    end = time.time() + timeout
    while True:
        jobs = [j for j in slurm.jobs() if j.id in set(ids)]
        if all(j.state not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING") for j in jobs):
            return jobs
        if time.time() > end:
            raise AssertionError(f"jobs still live after {timeout} s: "
                                 f"{[(j.id, j.state, j.reason) for j in jobs]}")
        time.sleep(0.5)


def cancel(slurm: Slurm, ids: list[int]) -> None:
    """Clean-up of the jobs a test itself submitted."""
    live = [j.id for j in slurm.jobs() if j.id in set(ids) and j.state in ("PENDING", "RUNNING")]
    if live:
        slurm.cancel(live)
