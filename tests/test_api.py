"""The Python API (gpualloc.api) and the `gpualloc` command (gpualloc.cli)."""
import io
import json
import subprocess
import sys

import pytest
import torch

import gpualloc as ga
from gpualloc import cli, progress
from gpualloc.check import main as check_main
from gpualloc.run import run

TINY = "pkg://gpualloc.examples/tiny.yaml"


@pytest.fixture(scope="module")
def tiny():
    return ga.load(TINY)


def test_the_snippet_plans_checks_measures_and_saves(tiny, tmp_path):
    fifo = ga.plan(tiny, "fifo")
    p = ga.plan(tiny, "allocator", seed=0)
    assert ga.check(tiny, p).ok and p.policy == "allocator" and p.scenario is tiny
    m = ga.metrics(tiny, p, baseline=fifo)
    base = ga.metrics(tiny, fifo)
    assert m["gains"]["weighted_throughput_pct"] == pytest.approx(
        100 * (m["weighted_throughput"] / base["weighted_throughput"] - 1))
    out = ga.save(p, tmp_path / "plan.json")
    assert check_main([_write(tiny, tmp_path), str(out)]) == 0
    again = ga.load_plan(out, tiny)
    assert again.policy == "allocator" and torch.equal(again.owner, p.owner)


def _write(s, folder):
    path = folder / "scenario.json"
    s.save(path)
    return str(path)


def test_api_plans_what_the_command_plans(tiny, tmp_path):
    """One code path: the API's plan of a file is the plan `run` writes for it."""
    path = _write(tiny, tmp_path)
    cfg = ga.run_config(["+scenario=file", f"scenario.path={path}"], seed=3,
                    policies=["fifo", "greedy", "allocator"])
    result = run(cfg, tmp_path)
    for name in ("greedy", "allocator"):
        on_disk = json.loads((tmp_path / f"plan_{name}.json").read_text())["owner"]
        assert ga.plan(tiny, name, seed=3).owner.tolist() == on_disk
        assert result["policies"][name]["weighted_throughput"] == \
            ga.metrics(tiny, ga.load_plan(tmp_path / f"plan_{name}.json", tiny))["weighted_throughput"]


def test_settings_reach_the_policy_and_the_scenario(tiny):
    guaranteed = ga.plan(tiny, "greedy", min_served=1.0)
    assert all(j.min_served == 1.0 for j in guaranteed.scenario.jobs if not j.rigid)
    assert ga.check(guaranteed.scenario, guaranteed).ok
    a = ga.plan(tiny, "allocator", seed=0, solver={"iterations": 5, "rounding": "relaxed"})
    b = ga.plan(tiny, "allocator", seed=0, config=ga.run_config(solver={"iterations": 5,
                                                                     "rounding": "relaxed"}))
    assert torch.equal(a.owner, b.owner)


@pytest.mark.parametrize("settings, field", [
    ({"solver": {"rounding": "bset"}}, "solver.rounding=bset"),
    ({"solver": {"iterationz": 3}}, "solver.iterationz"),
    ({"solver": {"iterations": "many"}}, "solver.iterations"),
    ({"mode": "onlin"}, "mode=onlin"),
    ({"min_served": 1.5}, "min_served=1.5"),
])
def test_a_bad_setting_names_its_field(tiny, settings, field):
    with pytest.raises(ga.SettingError, match="^" + field.replace(".", r"\.")):
        ga.plan(tiny, "greedy", **settings)


def test_a_bad_setting_reads_as_on_the_command_line(tiny):
    with pytest.raises(ga.SettingError) as caught:
        ga.plan(tiny, "greedy", solver={"rounding": "bset"})
    line = subprocess.run([sys.executable, "-m", "gpualloc.cli", "run", "+scenario=mixed",
                           "solver.rounding=bset"], capture_output=True, text=True)
    assert line.returncode == 2
    assert line.stderr.strip() == f"error: {caught.value}"


def test_unknown_names_are_setting_errors(tiny):
    with pytest.raises(ga.SettingError, match="policies: unknown nope"):
        ga.plan(tiny, "nope")
    with pytest.raises(ga.SettingError, match="scenario=nope: no such scenario"):
        ga.generate("nope")
    with pytest.raises(ga.SettingError, match="solver/qualty"):
        ga.plan(tiny, "greedy", overrides=["solver=qualty"])


def test_generate_is_the_command_lines_scenario():
    s = ga.generate("mixed", seed=2, horizon=48)
    cfg = ga.run_config(["+scenario=mixed", "scenario.horizon=48"], seed=2)
    from gpualloc.run import build_scenario
    assert s.T == 48 and s.to_dict() == build_scenario(cfg.scenario, 2).to_dict()


def test_check_raises_on_a_broken_plan(tiny):
    p = ga.plan(tiny, "greedy")
    broken = p.owner.clone()
    j = next(i for i, job in enumerate(tiny.jobs) if job.rigid)
    broken[:, :] = j  # one rigid job on every GPU at every step
    bad = ga.Plan(owner=broken, policy="greedy")
    with pytest.raises(ga.InfeasiblePlan):
        ga.check(tiny, bad)
    assert not ga.check(tiny, bad, strict=False).ok


def test_online_plans_as_jobs_arrive(tiny):
    p = ga.online(tiny, "greedy", replan_every=6, forecast="last_day")
    assert p.mode == "online" and p.info["replan_every"] == 6
    assert ga.check(tiny, p).ok_but_guarantee


def test_save_needs_a_scenario(tiny, tmp_path):
    p = ga.plan(tiny, "fifo")
    with pytest.raises(ga.SettingError, match="scenario"):
        ga.save(ga.Plan(owner=p.owner), tmp_path / "x.json")
    assert not (tmp_path / "x.json").exists()


def test_plot_draws_plans(tiny, tmp_path):
    pytest.importorskip("matplotlib")
    plans = {"fifo": ga.plan(tiny, "fifo"), "greedy": ga.plan(tiny, "greedy")}
    path = ga.plot(tiny, plans, tmp_path / "gantt.png")
    assert path.exists() and path.stat().st_size > 1000
    with pytest.raises(ga.SettingError, match="kind=pie"):
        ga.plot(tiny, plans, tmp_path / "x.png", kind="pie")


def test_import_is_light_and_stage_modules_are_the_api_too():
    code = ("import sys, gpualloc as ga; assert 'torch' not in sys.modules, 'torch imported'; "
            "import gpualloc.plan, gpualloc.check, gpualloc.metrics, gpualloc.online; "
            "from gpualloc import check as module; import gpualloc.plan as P; "
            "assert callable(ga.plan) and callable(ga.check) and callable(ga.metrics) "
            "and callable(ga.online) and module.main and P.Plan and ga.check.Check; "
            "s = ga.load('pkg://gpualloc.examples/tiny.yaml'); p = ga.plan(s, 'fifo'); "
            "assert ga.check(s, p).ok and ga.metrics(s, p)['utilization'] > 0; "
            "print(sorted(ga.policy_names()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "'allocator'" in out.stdout and "'fifo'" in out.stdout


def test_command_lists_subcommands_and_refuses_unknown(capsys):
    assert cli.main(["--help"]) == 0
    listed = capsys.readouterr().out
    for name in ("run", "check", "trace", "report"):
        assert f"\n  {name}" in listed
    assert cli.main(["frobnicate"]) == 2
    assert "unknown command 'frobnicate'" in capsys.readouterr().err


def test_command_dispatches_to_the_modules(tiny, tmp_path, capsys):
    p = ga.plan(tiny, "greedy")
    plan_path = ga.save(p, tmp_path / "plan.json")
    assert cli.main(["check", _write(tiny, tmp_path), str(plan_path)]) == 0
    assert capsys.readouterr().out.strip() == "feasible"
    assert cli.main(["check", "--help"]) == 0
    assert cli.main(["check", str(tmp_path / "none.json"), str(plan_path)]) == 2


def test_compile_notice_once_and_only_with_nothing_compiled(monkeypatch):
    buf = io.StringIO()
    monkeypatch.setattr(progress, "_told", False)
    monkeypatch.setattr(progress.os.path, "exists", lambda path: False)
    assert progress.compile_notice(stream=buf)
    assert "compiling the placement core" in buf.getvalue()
    assert not progress.compile_notice(stream=buf)  # once per process
    monkeypatch.setattr(progress, "_told", False)
    monkeypatch.setattr(progress.os.path, "exists", lambda path: True)
    assert not progress.compile_notice(stream=buf)
