import json
import os
import pty
import subprocess
import sys
import threading
import warnings

import pytest
from hydra import compose, initialize_config_module
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from gpualloc import progress
from gpualloc.check import check
from gpualloc.config import register_configs
from gpualloc.plan import load_plan
from gpualloc.run import scenario_names
from gpualloc.scenario import load
from gpualloc.sweep import SweepProgress, register_launchers


def hydra_cfg(*overrides):
    register_configs()
    register_launchers()
    with initialize_config_module("gpualloc.conf", version_base=None):
        return compose("config", overrides=["+scenario=file", *overrides], return_hydra_config=True)


def check_run(folder, seed=None):
    """A run's outputs: its metrics, its scenario and a feasible plan per policy."""
    m = json.loads((folder / "metrics.json").read_text())
    assert "error" not in m, m
    s = load(folder / "scenario.json")
    assert m["scenario"] == s.name and m["jobs"] == s.J and (seed is None or m["seed"] == seed)
    for policy in m["policies"]:
        name, owner = load_plan(folder / f"plan_{policy}.json", s)
        assert name == policy and check(s, owner).ok
    return m


def run_with_tty_stderr(args, env):
    """Run with stderr on a pseudo-terminal (so progress shows); returns rc, stdout, stderr."""
    master, slave = pty.openpty()
    chunks = []

    def read():
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:  # the child closed the terminal
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=slave, env=env, text=True)
    os.close(slave)
    stdout, _ = proc.communicate()
    reader.join(timeout=10)
    os.close(master)
    return proc.returncode, stdout, b"".join(chunks).decode(errors="replace")


@pytest.mark.slow
def test_glob_sweep_out_of_the_box_with_progress(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    rc, stdout, stderr = run_with_tty_stderr(
        [sys.executable, "-m", "gpualloc.run", "-m", "+scenario=glob(*)", "seed=0",
         "policies=[fifo]", f"hydra.sweep.dir={tmp_path}"], env)
    assert rc == 0, stderr
    folders = sorted(p for p in tmp_path.iterdir() if p.is_dir() and not p.name.startswith("."))
    n = len(scenario_names())
    assert len(folders) == n == 11  # the seven, broad, broad_types and the two shipped files
    names = {check_run(f, seed=0)["scenario"] for f in folders}
    shipped = {"file": "tiny", "alibaba": "alibaba_134d_168h"}  # scenario files in the package
    assert names == {shipped.get(name, name) for name in scenario_names()}
    # One status line per finished run, to the terminal, counting against the total.
    assert "sweep: 100%" in stderr and f"{n}/{n}" in stderr, stderr
    assert "validated against ConfigStore schema" not in stderr


@pytest.mark.slow
def test_submitit_local_sweep(tmp_path):
    """A real submitit executor: each run in its own process, as on Slurm."""
    r = subprocess.run([sys.executable, "-m", "gpualloc.run", "-m", "hydra/launcher=submitit_local",
                        "+scenario=file", "seed=0,1", "policies=[fifo]",
                        f"hydra.sweep.dir={tmp_path}"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "Submitit 'local' sweep output dir" in r.stdout + r.stderr
    for seed in (0, 1):
        m = check_run(tmp_path / str(seed), seed=seed)
        assert m["scenario"] == "tiny"
        overrides = (tmp_path / str(seed) / ".hydra" / "overrides.yaml").read_text()
        assert f"seed={seed}" in overrides
    logs = list((tmp_path / ".submitit").rglob("*_log.err"))
    assert len(logs) == 2  # submitit ran two jobs, and Hydra composed them without warning
    assert not any("validated against ConfigStore schema" in p.read_text() for p in logs)


@pytest.mark.parametrize("name, target", [("joblib", "JoblibLauncher"),
                                          ("submitit_local", "LocalLauncher"),
                                          ("submitit_slurm", "SlurmLauncher")])
def test_our_launcher_configs_win_on_the_plugins_schema(name, target):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", append=True)  # behind gpualloc.sweep's own filter
        cfg = hydra_cfg(f"hydra/launcher={name}")
    assert not [str(w.message) for w in caught if "schema" in str(w.message)]  # no schema matching
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith(target)
    assert OmegaConf.get_type(launcher).__name__ != "dict"  # typed by the plugin's dataclass
    if name == "submitit_slurm":
        assert (launcher.gpus_per_node, launcher.timeout_min, launcher.partition) == (1, 120, None)
        assert launcher.signal_delay_s == 120  # a plugin default, kept
    with pytest.raises(ConfigCompositionException):
        hydra_cfg(f"hydra/launcher={name}", "hydra.launcher.not_a_field=1")


def test_slurm_script(tmp_path, monkeypatch):
    """The sbatch script submitit writes from our Slurm config, through the
    plugin's own launch code (submission itself replaced: no cluster here)."""
    import submitit
    from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/sh\n")
    (bin_dir / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    executors = []
    monkeypatch.setattr(submitit.AutoExecutor, "map_array",
                        lambda self, *a: executors.append(self) or [])
    cfg = hydra_cfg("hydra/launcher=submitit_slurm", "hydra.launcher.partition=gpu",
                    f"hydra.sweep.dir={tmp_path / 'sweep'}", "hydra.job.name=gpualloc")
    params = OmegaConf.to_container(cfg.hydra.launcher, resolve=True)
    params.pop("_target_")
    launcher = SlurmLauncher(**params)
    launcher.setup(hydra_context=None, task_function=None, config=cfg)
    launcher.launch([["seed=0"]], initial_job_idx=0)
    script = executors[0]._executor._make_submission_file_text("python -m x", "uid")
    for line in ("--gpus-per-node=1", "--time=120", "--partition=gpu", "--cpus-per-task=8",
                 "--mem=64GB", "--ntasks-per-node=1", "--nodes=1"):
        assert f"#SBATCH {line}\n" in script, line


def test_progress_quiet_under_ci_or_without_terminal(monkeypatch):
    class Tty:
        def isatty(self):
            return True

    monkeypatch.delenv("CI", raising=False)
    assert progress.enabled(Tty()) and not progress.enabled(open(os.devnull, "w"))
    for value, on in [("true", False), ("1", False), ("0", True), ("false", True), ("", True)]:
        monkeypatch.setenv("CI", value)
        assert progress.enabled(Tty()) is on, value
    assert progress.bar(range(3)).disable  # pytest's stderr is no terminal
    assert list(progress.bar(range(3))) == [0, 1, 2]


def test_sweep_progress_lines(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(progress, "enabled", lambda stream=None: True)
    cfg = OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}, "sweeper": {}}})
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "metrics.json").write_text('{"policies": {}}')  # an earlier sweep's
    cb = SweepProgress(poll_s=60)
    cb.on_multirun_start(cfg)
    (tmp_path / "0").mkdir()
    (tmp_path / "0" / "metrics.json").write_text('{"policies": {}}')
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "metrics.json").write_text('{"error": "boom", "overrides": []}')
    cb.on_multirun_end(cfg)
    err = capsys.readouterr().err
    assert "sweep: 2run" in err and "1 failed" in err, err
    import pickle
    assert pickle.loads(pickle.dumps(cb)).poll_s == 60  # launchers pickle callbacks
