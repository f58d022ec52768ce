"""`hydra/launcher=submitit_slurm` runs a real multirun on the lab cluster
and gpualloc.report reads its folder. Without accounting (no slurmdbd)
submitit cannot read job states (sacct fails: it reports them as unknown),
so the test judges by the results written. Marked `slurm`."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gpualloc.report import main as report_main
from slurm_lab import need_lab
from test_sweep import check_run

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def test_submitit_multirun_on_the_lab(tmp_path):
    slurm = need_lab()
    sweep = tmp_path / "sweep"
    env = {**os.environ, "SLURM_CONF": slurm.conf, "HYDRA_FULL_ERROR": "1"}
    p = subprocess.run(
        [sys.executable, "-m", "gpualloc.run", "-m", "hydra/launcher=submitit_slurm",
         "hydra.launcher.partition=gpu", "hydra.launcher.mem_gb=1",  # the lab's nodes: 62.5 GB
         "hydra.launcher.cpus_per_task=1", "hydra.launcher.timeout_min=5",
         "+scenario=file", "policies=[fifo,greedy]", "seed=0,1",
         f"hydra.sweep.dir={sweep}"], env=env, capture_output=True, text=True, timeout=300,
        cwd=tmp_path)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    runs = sorted(x for x in sweep.iterdir() if x.is_dir() and x.name.isdigit())
    assert [r.name for r in runs] == ["0", "1"]
    for seed, run in enumerate(runs):
        check_run(run, seed=seed)
    # The runs were Slurm jobs of the lab (submitit's folder names their ids).
    ids = {int(x.name) for x in (sweep / ".submitit").iterdir() if x.name.isdigit()}
    assert ids and ids <= {j.id for j in slurm.jobs()}
    assert report_main([str(sweep)]) == 0
    assert (sweep / "report.md").exists()
