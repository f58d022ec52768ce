"""The lab cluster (gpualloc.slurm.lab) and what every command does when
Slurm is out of reach. Marked `slurm`: CI brings the lab up first."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpualloc.slurm import lab
from slurm_lab import need_lab, run_cli

pytestmark = pytest.mark.slurm


def lab_cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "gpualloc.slurm.lab", *args],
                          capture_output=True, text=True, timeout=180, env=env)


def test_status_and_second_up():
    slurm = need_lab()
    p = lab_cli("status")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert f"SLURM_CONF={slurm.conf}" in lines
    assert sum(1 for x in lines if x.split()[:1] and x.split()[0].startswith("n")) >= 8
    p = lab_cli("up")  # idempotent: nothing started
    assert p.returncode == 0 and "already up" in p.stdout, p.stdout + p.stderr
    assert len({n.name for n in slurm.nodes() if n.gpus == 8}) >= 8


@pytest.mark.slow
def test_a_second_lab_up_and_down(tmp_path):
    """A lab of another shape in its own folder: up, status, down stops
    exactly its processes (the first lab keeps running)."""
    need_lab()
    d = tmp_path / "lab"
    env = {**os.environ, "GPUALLOC_SLURM_LAB": str(d)}
    first = lab.running(lab.lab_dir())
    p = lab_cli("up", "--nodes", "2", "--gpus-per-node", "4", "--gpu-type", "a100",
                "--partition", "small:1-1", "--partition", "all", "--port", "17917", env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    pids = lab.running(d)
    assert set(pids) == {"munged", "slurmctld", "slurmd-n1", "slurmd-n2"}
    p = lab_cli("status", env=env)
    assert p.returncode == 0 and f"SLURM_CONF={d}/slurm.conf" in p.stdout
    assert "small" in p.stdout and "gpu:a100:4" in p.stdout
    p = lab_cli("down", env=env)
    assert p.returncode == 0 and "stopped" in p.stdout
    assert lab.running(d) == {}
    for pid in pids.values():
        assert not Path(f"/proc/{pid}").exists() or not lab._ours(pid, d)
    assert lab.running(lab.lab_dir()) == first  # the other lab untouched
    p = lab_cli("status", env=env)
    assert p.returncode == 1 and "down" in p.stdout
    p = lab_cli("down", env=env)  # idempotent
    assert p.returncode == 0 and "nothing ran" in p.stdout


def test_bad_shape_is_one_line():
    p = lab_cli("up", "--nodes", "0")
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "--nodes" in p.stderr


@pytest.mark.parametrize("args", [["snapshot", "-o", "{tmp}/s.json"],
                                  ["record", "-o", "{tmp}/r.jsonl", "--seconds", "1"],
                                  ["executed", "--scenario", "{scen}", "--since", "0",
                                   "-o", "{tmp}/p.json"],
                                  ["serve", "--steps", "1", "--policy", "greedy"]])
def test_unreachable_is_one_line(tmp_path, args):
    """A slurm.conf whose controller port nobody listens on: exit 2, one
    line naming the command, nothing written."""
    slurm = need_lab()
    conf = Path(slurm.conf).read_text().replace("SlurmctldPort=", "SlurmctldPort=1")
    conf += "\nMessageTimeout=1\n"  # the client gives up after it (10 s by default)
    bad = tmp_path / "slurm.conf"
    bad.write_text(conf)
    scen = Path(__file__).parent.parent / "gpualloc" / "examples" / "tiny.yaml"
    args = [a.format(tmp=tmp_path, scen=scen) for a in args]
    env = {**os.environ, "SLURM_CONF": str(bad)}
    p = run_cli(*args, env=env, timeout=120)
    assert p.returncode == 2, p.stdout + p.stderr
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("error: ") and "Traceback" not in p.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == ["slurm.conf"]
