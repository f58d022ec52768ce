"""The main command: build a scenario, run the policies, check every plan, print
one table, write scenario.json, plan_<policy>.json and metrics.json into
Hydra's run folder.

    python -m gpualloc.run +scenario=mixed
    python -m gpualloc.run +scenario=file scenario.path=my.yaml policies=[fifo]
    python -m gpualloc.run -m '+scenario=glob(*)' seed=0,1,2
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
import traceback
from importlib import resources
from pathlib import Path

import hydra
import torch
from omegaconf import DictConfig, OmegaConf

from gpualloc import progress, warm
from gpualloc import scenario as scenario_io
from gpualloc.check import check
from gpualloc.core.guarantee import check_guarantee
from gpualloc.config import (FileScenarioConfig, GeneratedScenarioConfig, RunConfig, SettingError,
                             register_configs)
from gpualloc.files import atomic_write_text
from gpualloc.scenario.generate import generate
from gpualloc.policies.allocator.memory import check_scenario_memory
from gpualloc.metrics import gains, metrics
from gpualloc.online import run_policy
from gpualloc.plan import Plan, save_plan
from gpualloc.policies import BASELINE, POLICIES
from gpualloc.report import format_run_table
from gpualloc.scenario import Scenario, ScenarioError, with_min_served, with_preemption
from gpualloc.sweep import register_launchers


class InfeasiblePlan(RuntimeError):
    """A policy returned a plan the checker rejects: a bug, never hidden."""


USER_ERRORS = (ScenarioError, SettingError)
"""Bad input (a scenario, a setting): one line on stderr, exit code 2, no traceback."""


def resolve_device(name: str) -> torch.device:
    """`name`: auto | cpu | cuda (RunConfig checks the value; here, the machine)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ScenarioError("device=cuda: no CUDA device is available (use device=auto or cpu)")
    return torch.device(name)


PKG = "pkg://"


def _load_package_file(path: str) -> Scenario:
    """pkg://PACKAGE/FILE: a scenario file shipped inside an installed package,
    e.g. pkg://gpualloc.examples/alibaba_134d_168h.json."""
    package, _, name = path[len(PKG):].partition("/")
    try:
        ref = resources.files(package) / name
    except (ModuleNotFoundError, TypeError):
        raise ScenarioError(f"scenario.path={path}: no package {package!r}") from None
    if not name or not ref.is_file():
        raise ScenarioError(f"scenario.path={path}: package {package!r} has no file {name!r}")
    with resources.as_file(ref) as file:
        return scenario_io.load(file)


def build_scenario(cfg, seed: int) -> Scenario:
    if isinstance(cfg, FileScenarioConfig):
        if cfg.path.startswith(PKG):
            return _load_package_file(cfg.path)
        if cfg.path:
            return scenario_io.load(cfg.path)
        with resources.as_file(resources.files("gpualloc.examples") / "tiny.yaml") as path:
            return scenario_io.load(path)
    if isinstance(cfg, GeneratedScenarioConfig):
        return generate(cfg, seed)
    raise ScenarioError(f"scenario: unknown scenario config {type(cfg).__name__}")


def check_policies(names: list[str]) -> None:
    unknown = [p for p in names if p not in POLICIES]
    if unknown:
        raise SettingError(f"policies: unknown {', '.join(unknown)} "
                           f"(known: {', '.join(POLICIES)})")


def prepare(s: Scenario, cfg: RunConfig, device: torch.device) -> Scenario:
    """The scenario under the run's options (min_served, preemptible,
    restart_cost), refused before any planning where it cannot be planned:
    a policy that models no segments, a grid that does not fit, a guarantee
    no plan can keep."""
    if cfg.min_served is not None:
        s = with_min_served(s, cfg.min_served)
    if cfg.preemptible is not None or cfg.restart_cost is not None:
        s = with_preemption(s, cfg.preemptible, cfg.restart_cost)
    for name in cfg.policies:  # before any work: a scenario a policy does not model
        if POLICIES[name].refuses is not None:
            POLICIES[name].refuses(s)
    check_scenario_memory(s, cfg.solver.memory_budget_gb, device)  # before any (G, T) array
    check_guarantee(s)  # rule 4 possible at all, before any planning
    return s


def aims_only(name: str, mode: str) -> bool:
    """FIFO runs as PROBLEM.md defines it and online plans only aim at rule
    4: for them a shortfall is reported; for the others it is a bug."""
    policy = POLICIES[name]
    return not policy.keeps_guarantee or (mode == "online" and not policy.online_by_nature)


def plan_checked(name: str, s: Scenario, cfg: RunConfig, device: torch.device) -> tuple[Plan, float]:
    """Policy `name`'s plan of the prepared scenario `s` and its wall time;
    a plan the checker rejects raises InfeasiblePlan."""
    progress.compile_notice()
    start = time.perf_counter()
    plan = run_policy(name, s, cfg, device)
    wall = time.perf_counter() - start
    verdict = check(s, plan.owner)
    if not (verdict.ok_but_guarantee if aims_only(name, cfg.mode) else verdict.ok):
        raise InfeasiblePlan(f"policy {name} returned an infeasible plan on {s.name}:\n{verdict}")
    return plan, wall


def run(cfg: RunConfig, out_dir: Path | None = None) -> dict:
    """Run every chosen policy on the scenario; returns what metrics.json holds."""
    check_policies(cfg.policies)
    if cfg.plot:
        from gpualloc.plots import require_matplotlib
        require_matplotlib()  # before the work, not after it
    device = resolve_device(cfg.device)
    s = prepare(build_scenario(cfg.scenario, cfg.seed), cfg, device)
    if out_dir is not None:
        s.save(out_dir / "scenario.json")
    result = {"scenario": s.name, "seed": cfg.seed, "device": str(device),
              "gpus": s.G, "jobs": s.J, "timesteps": s.T,
              "offered_load": s.offered_load, "policies": {}}
    shares = sorted({j.min_served for j in s.jobs if not j.rigid and j.min_served > 0})
    if shares:  # rule 4 is in force: which guarantees
        result["min_served"] = ", ".join(f"{v:g}" for v in shares)
    preemptible = [j for j in s.jobs if j.rigid and j.preemptible]
    if preemptible:  # which kinds may run in segments, and what a restart costs
        result["preemptible"] = ", ".join(k for k in scenario_io.RIGID_KINDS
                                          if any(j.kind == k for j in preemptible))
        result["restart_cost"] = ", ".join(str(v) for v in
                                           sorted({j.restart_cost for j in preemptible}))
    if cfg.mode != "offline":
        result["mode"] = cfg.mode
        result["online"] = dataclasses.asdict(cfg.online)
    # The baseline (FIFO) is the yardstick of every gain: it runs first, and always.
    names = [BASELINE] + [p for p in cfg.policies if p != BASELINE]
    owners = {}
    for name in names:
        plan, wall = plan_checked(name, s, cfg, device)
        row = metrics(s, plan.owner)
        row["wall_s"] = wall
        row["info"] = plan.info
        result["policies"][name] = row
        owners[name] = plan.owner
        if out_dir is not None and cfg.save_plans:
            save_plan(out_dir / f"plan_{name}.json", s, name, plan.owner)
    fifo = result["policies"][BASELINE]
    for row in result["policies"].values():
        row["gains"] = gains(row, fifo)
    if BASELINE not in cfg.policies:
        del result["policies"][BASELINE]
    if out_dir is not None:
        atomic_write_text(out_dir / "metrics.json", json.dumps(result, indent=1))
        if cfg.plot:
            from gpualloc.plots import plot_run
            plot_run(out_dir, s, {p: owners[p] for p in result["policies"]},
                     f"{s.name}, seed {cfg.seed}")
    return result


def scenario_names() -> list[str]:
    folder = resources.files("gpualloc.conf") / "scenario"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))


def _usage() -> str:
    return ("no scenario chosen. Pick one of: " + ", ".join(scenario_names()) + "\n"
            "  python -m gpualloc.run +scenario=mixed\n"
            "  python -m gpualloc.run +scenario=file scenario.path=my_scenario.yaml\n"
            "  python -m gpualloc.run -m '+scenario=glob(*)' seed=0,1,2")


def _overrides() -> list[str]:
    from hydra.core.hydra_config import HydraConfig
    return list(HydraConfig.get().overrides.task)


register_configs()
register_launchers()


@hydra.main(version_base=None, config_path="conf", config_name="config")
def main(dcfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    out_dir = Path(HydraConfig.get().runtime.output_dir)
    multirun = HydraConfig.get().mode == RunMode.MULTIRUN
    if dcfg.scenario is None:
        print(f"error: {_usage()}", file=sys.stderr)
        sys.exit(2)
    try:
        # Building the dataclasses checks every setting (gpualloc.config): a
        # bad one raises SettingError here, before any work.
        cfg: RunConfig = OmegaConf.to_object(dcfg)
        # A sweep's launcher keeps the cores busy itself: no helpers there.
        with warm.helpers(cfg.warm_helpers, cold=False if multirun else None):
            result = run(cfg, out_dir)
    except Exception as e:  # noqa: BLE001 - sorted below
        if multirun:
            # In a sweep, one failed run is recorded and the others go on.
            message = str(e) if isinstance(e, USER_ERRORS) else traceback.format_exc()
            atomic_write_text(out_dir / "metrics.json",
                              json.dumps({"error": message, "overrides": _overrides()}))
            print(f"error: {message}", file=sys.stderr)
            return
        if isinstance(e, USER_ERRORS):
            print(f"error: {e}", file=sys.stderr)
            sys.exit(2)
        raise
    print(format_run_table(result))


def cli() -> None:
    """`python -m gpualloc.run`. Hydra's own command-line errors (an override
    of the wrong type, an unknown key, bad syntax, a missing config group
    option) end like ours: one line, exit 2, nothing written."""
    from hydra.errors import HydraException

    os.environ.setdefault("HYDRA_FULL_ERROR", "1")  # raise them here, not print and exit 1
    try:
        main()
    except HydraException as e:
        print(f"error: {one_line(e)}", file=sys.stderr)
        sys.exit(2)


def one_line(e: Exception) -> str:
    """Hydra's or OmegaConf's multi-line message as one line: its first line
    and its cause's."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    message = lines[0].rstrip(".") if lines else type(e).__name__
    cause = [line.strip() for line in str(e.__cause__ or "").splitlines() if line.strip()]
    if cause:
        message += f": {cause[0]}"
    return message


if __name__ == "__main__":
    cli()
