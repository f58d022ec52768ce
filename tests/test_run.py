import json
import os

import pytest

from gpualloc.check import check
from gpualloc.plan import load_plan
from gpualloc.run import run
from gpualloc.scenario import load
from helpers import cli, composed


def test_run_writes_checked_outputs(tmp_path):
    cfg = composed("+scenario=mixed", "seed=1")
    result = run(cfg, tmp_path)
    s = load(tmp_path / "scenario.json")
    assert s.J == result["jobs"] and result["offered_load"] == pytest.approx(s.offered_load)
    for name in cfg.policies:
        policy, owner = load_plan(tmp_path / f"plan_{name}.json", s)
        assert policy == name and check(s, owner).ok
    on_disk = json.loads((tmp_path / "metrics.json").read_text())
    assert set(on_disk["policies"]) == set(cfg.policies)
    fifo = on_disk["policies"]["fifo"]
    assert fifo["gains"] == {"utilization_points": 0.0, "weighted_throughput_pct": 0.0}
    assert 0 < fifo["utilization"] <= fifo["allocated"] <= 1


def test_cli_file_scenario(tmp_path):
    r = cli("+scenario=file", f"hydra.run.dir={tmp_path}")
    assert r.returncode == 0, r.stderr
    assert "offered load" in r.stdout and "fifo" in r.stdout
    assert {"scenario.json", "plan_fifo.json", "metrics.json"} <= {p.name for p in tmp_path.iterdir()}


def test_cli_bad_file_exit_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nhorizon: 4\nstep_minutes: 60\ncluster: {pools: []}\njobs: []\n")
    out = tmp_path / "out"
    r = cli("+scenario=file", f"scenario.path={bad}", f"hydra.run.dir={out}")
    assert r.returncode == 2
    assert "pools" in r.stderr and "Traceback" not in r.stderr
    assert not (out / "metrics.json").exists() and not (out / "scenario.json").exists()


def test_cli_without_scenario_lists_them(tmp_path):
    r = cli(f"hydra.run.dir={tmp_path}")
    assert r.returncode == 2
    for name in ("mixed", "training_heavy", "low_contention"):
        assert name in r.stderr


def test_cli_unknown_policy(tmp_path):
    r = cli("+scenario=file", "policies=[fifo,nope]", f"hydra.run.dir={tmp_path}")
    assert r.returncode == 2 and "nope" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.slow
def test_cli_multirun(tmp_path):
    r = cli("-m", "+scenario=file", "seed=0,1", f"hydra.sweep.dir={tmp_path}")
    assert r.returncode == 0, r.stderr
    runs = sorted(tmp_path.glob("*/metrics.json"))
    assert len(runs) == 2
    assert [json.loads(p.read_text())["seed"] for p in runs] == [0, 1]


def test_outputs_follow_the_umask(tmp_path):
    from gpualloc.files import atomic_write_text
    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "a.json", "{}")
    finally:
        os.umask(old)
    assert (tmp_path / "a.json").stat().st_mode & 0o777 == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]
