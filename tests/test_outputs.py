"""Outputs survive interruptions (atomic writes), and plans are repeatable:
the same scenario, seed and device give the same plan, bit for bit. The
preemption run options (preemptible, restart_cost) reach the written
scenario and metrics."""
from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path

import pytest
import torch

from gpualloc import files
from gpualloc.files import atomic_write_text
from gpualloc.scenario.generate import generate
from gpualloc.policies import POLICIES
from gpualloc.report import format_run_table
from gpualloc.run import run
from gpualloc.scenario import with_preemption
from gpualloc.scenario import from_dict
from gpualloc.scenario import load as load_scenario
from helpers import composed

ROOT = Path(__file__).resolve().parents[1]
OUTPUTS = ("scenario.json", "metrics.json")


# ---- atomic writes ---------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["write", "fsync", "replace"])
def test_interrupted_write_keeps_the_old_file(tmp_path, monkeypatch, where):
    target = tmp_path / "plan_fifo.json"
    atomic_write_text(target, '{"old": 1}')

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    if where == "write":
        real_fdopen = os.fdopen

        def fdopen(fd, mode):
            f = real_fdopen(fd, mode)
            f.write = interrupt
            return f
        monkeypatch.setattr(files.os, "fdopen", fdopen)
    else:
        monkeypatch.setattr(files.os, where, interrupt)
    with pytest.raises(KeyboardInterrupt):
        atomic_write_text(target, '{"new": 2}' * 1000)
    monkeypatch.undo()
    assert json.loads(target.read_text()) == {"old": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["plan_fifo.json"]  # no temporary left


def test_outputs_get_the_usual_mode(tmp_path):
    atomic_write_text(tmp_path / "a.json", "{}")
    mask = os.umask(0o022)
    os.umask(mask)
    assert stat.S_IMODE((tmp_path / "a.json").stat().st_mode) == 0o666 & ~mask


# The child runs the real command; `slow_write` stalls the rename of one
# output so that a signal lands while that file is being written.
CHILD = """
import os, runpy, sys, time
target = os.environ.get("STALL_WRITE")
if target:
    real = os.replace
    def slow_replace(src, dst, *a, **k):
        if str(dst).endswith(target):
            print("WRITING", flush=True)
            time.sleep(120)
        return real(src, dst, *a, **k)
    os.replace = slow_replace
sys.argv = ["gpualloc.run"] + sys.argv[1:]
runpy.run_module("gpualloc.run", run_name="__main__")
"""


def _start(out: Path, *args, stall: str | None = None) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if stall:
        env["STALL_WRITE"] = stall
    return subprocess.Popen([sys.executable, "-c", CHILD, *args, f"hydra.run.dir={out}"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _wait_for(cond, proc: subprocess.Popen, timeout: float = 240) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < end, "timed out"
        time.sleep(0.05)


def _assert_whole(out: Path, temporaries_allowed: bool) -> list[str]:
    """Every output present parses; returns their names."""
    names = sorted(p.name for p in out.iterdir() if p.is_file())
    present = [n for n in names if n.endswith(".json")]
    for name in present:
        json.loads((out / name).read_text())  # raises on a half-written file
    stray = [n for n in names if n.endswith(".tmp")]
    if not temporaries_allowed:
        assert not stray, stray
    return present


@pytest.mark.slow
def test_interrupted_runs_leave_whole_files(tmp_path):
    scenario = ["+scenario=mixed", "policies=[fifo,allocator]", "solver.progress=false"]
    runs = {
        # Ctrl-C while plan_fifo.json is being written: its temporary goes.
        "sigint_write": (_start(tmp_path / "a", *scenario, stall="plan_fifo.json"),
                         signal.SIGINT),
        # A killed sweep job mid-write: nothing half-written under a real name.
        "sigkill_write": (_start(tmp_path / "b", *scenario, stall="plan_fifo.json"),
                          signal.SIGKILL),
        # Ctrl-C in the allocator's solve, after FIFO's plan was written (a
        # search that only the clock would end, so the signal lands in it).
        "sigint_solve": (_start(tmp_path / "c", *scenario, "solver.local_search_patience=0",
                                "solver.local_search_iters=1000000000",
                                "solver.time_limit_s=600"), signal.SIGINT),
    }
    folders = {"sigint_write": "a", "sigkill_write": "b", "sigint_solve": "c"}
    for name, (proc, sig) in runs.items():
        out = tmp_path / folders[name]
        if name.endswith("write"):
            line = proc.stdout.readline()
            assert line.strip() == "WRITING", (line, proc.communicate())
        else:
            _wait_for(lambda: (out / "plan_fifo.json").exists(), proc)
            time.sleep(1.0)
        proc.send_signal(sig)
        proc.communicate(timeout=120)
        assert proc.returncode != 0
        present = _assert_whole(out, temporaries_allowed=sig == signal.SIGKILL)
        assert "metrics.json" not in present
        assert "scenario.json" in present
        if name.endswith("write"):
            assert "plan_fifo.json" not in present
            if sig == signal.SIGKILL:  # the temporary stays behind, under a hidden name
                assert any(p.name.startswith(".plan_fifo.json.") for p in out.iterdir())


# ---- determinism ------------------------------------------------------------------------------

# The optimum is proved only on small scenarios: `exact` runs on the shipped
# example, every other policy on a benchmark scenario.
SMALL_ONLY = {"exact"}


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_same_seed_same_plan_every_policy(policy):
    args = ["seed=5", "solver.iterations=6", "solver.local_search_iters=30",
            "solver.rounding_thresholds=[0.5]", "solver.progress=false"]
    if policy in SMALL_ONLY:
        pytest.importorskip("ortools")
        from gpualloc.run import build_scenario
        # CP-SAT's parallel portfolio is not repeatable; one worker is.
        cfg = composed("+scenario=file", "exact.workers=1", *args)
        s1, s2 = build_scenario(cfg.scenario, 5), build_scenario(cfg.scenario, 5)
        a = POLICIES[policy](s1, cfg, torch.device("cpu")).owner
        b = POLICIES[policy](s2, cfg, torch.device("cpu")).owner
        assert torch.equal(a, b)
        return
    cfg = composed("+scenario=low_contention", *args)
    s = generate(cfg.scenario, cfg.seed)
    device = torch.device("cpu")
    a = POLICIES[policy](s, cfg, device).owner
    b = POLICIES[policy](generate(cfg.scenario, cfg.seed), cfg, device).owner
    assert a.dtype == b.dtype and torch.equal(a, b)


@pytest.mark.slow
def test_same_seed_same_plan_files_across_processes(tmp_path):
    policies = [p for p in POLICIES if p not in SMALL_ONLY]
    args = ["+scenario=low_contention", "seed=5", "device=cpu",
            f"policies=[{','.join(policies)}]", "solver.iterations=10",
            "solver.local_search_iters=40", "solver.progress=false"]
    procs = [_start(tmp_path / f"run{i}", *args) for i in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
    names = sorted(p.name for p in (tmp_path / "run0").glob("plan_*.json"))
    assert names == sorted(f"plan_{name}.json" for name in policies)
    for name in names + ["scenario.json"]:
        assert (tmp_path / "run0" / name).read_bytes() == (tmp_path / "run1" / name).read_bytes()


def test_run_twice_in_process_same_outputs(tmp_path):
    cfg = composed("+scenario=file", "seed=3", "solver.progress=false")
    run(cfg, tmp_path / "a")
    run(cfg, tmp_path / "b")
    for name in ["scenario.json"] + [f"plan_{p}.json" for p in cfg.policies]:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


# ---- preemption run options ---------------------------------------------------------------------

def _kinds_doc():
    """The shipped example with its training jobs preemptible (restart_cost 3
    on the first) and one quantization job more."""
    with resources.as_file(resources.files("gpualloc.examples") / "tiny.yaml") as path:
        doc = load_scenario(path).to_dict()
    doc["jobs"][0].update(preemptible=True, restart_cost=3)
    doc["jobs"][1].update(preemptible=True)
    doc["jobs"].append({"id": "quant-1", "kind": "quantization", "priority": 1, "arrival": 5,
                        "gpus": 2, "duration": 2, "preemptible": True, "restart_cost": 1})
    return doc


def _preemption(s):
    return {j.id: (j.preemptible, j.restart_cost) for j in s.jobs}


def test_with_preemption_sets_exactly_the_kinds():
    s = from_dict(_kinds_doc())
    assert _preemption(s) == {"train-0": (True, 3), "train-1": (True, 0), "batch-0": (False, 0),
                              "quant-0": (False, 0), "chat": (False, 0), "quant-1": (True, 1)}
    assert with_preemption(s, None, None).to_dict() == s.to_dict()
    # A list: exactly its kinds, their own restart costs kept (0 for jobs it makes preemptible).
    assert _preemption(with_preemption(s, ["batch_inference", "quantization"], None)) == {
        "train-0": (False, 0), "train-1": (False, 0), "batch-0": (True, 0),
        "quant-0": (True, 0), "chat": (False, 0), "quant-1": (True, 1)}
    # A restart cost alone: every preemptible job gets it, nothing else changes.
    assert _preemption(with_preemption(s, None, 5)) == {
        "train-0": (True, 5), "train-1": (True, 5), "batch-0": (False, 0),
        "quant-0": (False, 0), "chat": (False, 0), "quant-1": (True, 5)}
    assert _preemption(with_preemption(s, ["training"], 0)) == {
        "train-0": (True, 0), "train-1": (True, 0), "batch-0": (False, 0),
        "quant-0": (False, 0), "chat": (False, 0), "quant-1": (False, 0)}
    # [] makes no job preemptible; a restart cost beside it is fine.
    none = with_preemption(s, [], 4)
    assert not any(p for p, _ in _preemption(none).values())
    assert _preemption(s)["train-0"] == (True, 3)  # the input is left alone


def test_run_writes_the_preemption_it_planned(tmp_path):
    cfg = composed("+scenario=file", "policies=[fifo]", "preemptible=[training,batch_inference]",
                   "restart_cost=2")
    result = run(cfg, tmp_path)
    written = load_scenario(tmp_path / "scenario.json")
    assert {j.kind: (j.preemptible, j.restart_cost) for j in written.jobs} == {
        "training": (True, 2), "batch_inference": (True, 2), "quantization": (False, 0),
        "realtime_inference": (False, 0)}
    on_disk = json.loads((tmp_path / "metrics.json").read_text())
    assert (on_disk["preemptible"], on_disk["restart_cost"]) == ("training, batch_inference", "2")
    assert result["preemptible"] == on_disk["preemptible"]
    assert "preemptible training, batch_inference (restart_cost 2)" in format_run_table(result)
    # Distinct restart costs are all recorded (the file's, kept under restart_cost=null).
    f = tmp_path / "kinds.json"
    f.write_text(json.dumps(_kinds_doc()))
    result = run(composed("+scenario=file", f"scenario.path={f}", "policies=[fifo]"),
                 tmp_path / "file")
    assert (result["preemptible"], result["restart_cost"]) == ("training, quantization",
                                                               "0, 1, 3")
    # No preemptible job: nothing recorded, whatever restart_cost says.
    for overrides in ([], ["preemptible=[]", "restart_cost=1"]):
        result = run(composed("+scenario=file", "policies=[fifo]", *overrides), tmp_path / "x")
        assert "preemptible" not in result and "restart_cost" not in result
        written = load_scenario(tmp_path / "x" / "scenario.json")
        assert not any(j.preemptible for j in written.jobs)


def test_preemptible_option_on_a_generated_scenario(tmp_path):
    # The documented command: a Hydra list override on the structured config.
    cfg = composed("+scenario=training_heavy", "preemptible=[training]", "restart_cost=1",
                   "policies=[fifo]")
    assert cfg.preemptible == ["training"] and cfg.restart_cost == 1
    result = run(cfg, tmp_path)
    s = load_scenario(tmp_path / "scenario.json")
    assert all(j.preemptible == (j.kind == "training") for j in s.jobs)
    assert all(j.restart_cost == (1 if j.kind == "training" else 0) for j in s.jobs)
    assert (result["preemptible"], result["restart_cost"]) == ("training", "1")
    # The generator's own settings, and the run option over them.
    cfg = composed("+scenario=training_heavy", "scenario.quantization.preemptible=true",
                   "scenario.quantization.restart_cost=3", "policies=[fifo]")
    s = generate(cfg.scenario, cfg.seed)
    assert {(j.kind, j.restart_cost) for j in s.jobs if j.preemptible} == {("quantization", 3)}
    cfg.preemptible = []
    assert "preemptible" not in run(cfg, tmp_path / "none")
