"""gpualloc from Python: the same code path as `gpualloc run`, without Hydra's
command line.

    import gpualloc as ga
    s = ga.generate("mixed", seed=0)         # or ga.load("scenario.json")
    fifo = ga.plan(s, "fifo")
    p = ga.plan(s, "allocator", seed=0)      # settings as keywords: solver={"iterations": 30}
    ga.check(s, p)                           # raises InfeasiblePlan naming the broken rule
    m = ga.metrics(s, p, baseline=fifo)      # PROBLEM.md's metrics, gains against the baseline
    ga.save(p, "plan.json")                  # a plan file of PROBLEM.md

Settings are the run config's (gpualloc.config), given as keywords: a
section as a dict (`solver={"iterations": 30}`, `online={"replan_every": 6}`)
or a top-level value (`min_served=1.0`, `device="cpu"`); config groups as
override strings in `overrides` (`["solver=quality"]`). A bad one raises the
SettingError a bad override gets on the command line, with the same message.
"""
from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any, Iterable, Mapping

from gpualloc.check import Check
from gpualloc.config import OnlineConfig, RunConfig, SettingError
from gpualloc.plan import Plan
from gpualloc.scenario import Scenario

__all__ = ["load", "generate", "run_config", "plan", "online", "check", "metrics", "save",
           "load_plan", "plot", "policy_names", "scenarios"]


def load(path: str | Path) -> Scenario:
    """A scenario file of PROBLEM.md (JSON or YAML), or `pkg://PACKAGE/FILE`
    shipped inside a package; any problem raises ScenarioError."""
    from gpualloc.config import FileScenarioConfig
    from gpualloc.run import build_scenario
    return build_scenario(FileScenarioConfig(path=str(path)), 0)


def scenarios() -> list[str]:
    """Names `generate` and `+scenario=NAME` know (conf/scenario/)."""
    from gpualloc.run import scenario_names
    return [n for n in scenario_names() if n != "file"]


def generate(name: str, seed: int = 0, **settings: Any) -> Scenario:
    """The generated scenario `name` of conf/scenario/ (`mixed`, ...) for
    `seed`, as `+scenario=NAME seed=N` builds it; `settings` override its
    values (`horizon=72`, `training={"count": 20}`)."""
    from gpualloc.run import build_scenario
    if name == "file" or name not in scenarios():
        raise SettingError(f"scenario={name}: no such scenario (known: {', '.join(scenarios())})")
    cfg = _run_config([f"+scenario={name}"], None, {"seed": seed, "scenario": settings})
    return build_scenario(cfg.scenario, cfg.seed)


def run_config(overrides: Iterable[str] = (), base: RunConfig | None = None, **settings: Any) -> RunConfig:
    """The run config as `gpualloc run` builds it: conf/'s defaults, then
    Hydra `overrides` (strings, e.g. "solver=quality"), then `settings`
    (keywords, sections as dicts), every value checked. `base`: start from
    that config instead of conf/'s defaults (overrides then do not apply)."""
    return _run_config(overrides, base, settings)


def _run_config(overrides: Iterable[str], base: RunConfig | None, settings: dict) -> RunConfig:
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from gpualloc.run import one_line

    if base is not None:
        if overrides:
            raise SettingError("overrides: not with a base config (give settings as keywords)")
        dcfg = OmegaConf.structured(base)
    else:
        dcfg = _compose(tuple(overrides))
    try:
        dcfg = OmegaConf.merge(dcfg, settings)
        return OmegaConf.to_object(dcfg)
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None) or "settings"
        raise SettingError(f"{key}: {one_line(e)}") from None


def plan(s: Scenario, policy: str = "allocator", *, seed: int = 0, config: RunConfig | None = None,
         overrides: Iterable[str] = (), **settings: Any) -> Plan:
    """Policy `policy`'s plan of `s` (a registry name: see `policies()`), as
    `gpualloc run policies=[POLICY]` makes and checks it: the run's options
    applied (`min_served`, `preemptible`, ...; the edited scenario is
    `plan.scenario`), offline or online as `mode` says. A plan the checker
    rejects raises InfeasiblePlan; a bad setting, SettingError; a scenario
    no policy can plan, ScenarioError."""
    from gpualloc.run import check_policies, plan_checked, prepare, resolve_device

    check_policies([policy])
    run_settings = {"policies": [policy], **settings}
    if config is None:
        run_settings["seed"] = seed
    cfg = _run_config(overrides, config, run_settings)
    device = resolve_device(cfg.device)
    prepared = prepare(s, cfg, device)
    result, wall = plan_checked(policy, prepared, cfg, device)
    return dataclasses.replace(result, policy=policy, mode=cfg.mode, scenario=prepared,
                               wall_s=wall)


_ONLINE_KEYS = {f.name for f in dataclasses.fields(OnlineConfig)}


def online(s: Scenario, policy: str = "allocator", *, seed: int = 0, **settings: Any) -> Plan:
    """`plan(s, policy, mode="online")`: jobs known as they arrive, real-time
    demand forecast. Online settings may be given flat (`replan_every=6,
    forecast="last_day"`) beside the run's (`min_served=1.0`, `solver={...}`)."""
    section = dict(settings.pop("online", {}))
    section.update({k: settings.pop(k) for k in list(settings) if k in _ONLINE_KEYS})
    return plan(s, policy, seed=seed, mode="online", online=section, **settings)


def check(s: Scenario, p: Plan, *, strict: bool = True) -> Check:
    """PROBLEM.md's feasibility rules on `p`: the violations by kind
    (`Check.violations`, empty when feasible). `strict`: raise InfeasiblePlan
    when `p` breaks a rule its policy must keep (FIFO's and online plans are
    held to rules 1-3; their shortfall under rule 4 is returned, not raised)."""
    from gpualloc.check import check as judge
    from gpualloc.run import InfeasiblePlan, aims_only

    verdict = judge(s, p.owner)
    held_to_all = not aims_only(p.policy, p.mode)
    if strict and not (verdict.ok if held_to_all else verdict.ok_but_guarantee):
        raise InfeasiblePlan(f"{p.policy or 'plan'} on {s.name}: {verdict}")
    return verdict


def metrics(s: Scenario, p: Plan, baseline: Plan | None = None) -> dict:
    """PROBLEM.md's metrics of `p` (what metrics.json holds per policy);
    with a `baseline` plan (FIFO's), also `gains` against it."""
    from gpualloc.metrics import gains, metrics as measure

    row = measure(s, p.owner)
    if baseline is not None:
        row["gains"] = gains(row, measure(s, baseline.owner))
    return row


def save(p: Plan, path: str | Path, scenario: Scenario | None = None) -> Path:
    """Write `p` as a plan file of PROBLEM.md (atomically); `scenario`
    defaults to the one `plan` planned."""
    from gpualloc.plan import save_plan

    scenario = scenario if scenario is not None else p.scenario
    if scenario is None:
        raise SettingError("save: this plan carries no scenario; pass scenario=")
    save_plan(path, scenario, p.policy or "unknown", p.owner)
    return Path(path)


def load_plan(path: str | Path, s: Scenario) -> Plan:
    """A plan file of PROBLEM.md for `s`; any problem raises ScenarioError."""
    from gpualloc.plan import load_plan as read

    policy, owner = read(path, s)
    return Plan(owner=owner, policy=policy, scenario=s)


def plot(s: Scenario, plans: Mapping[str, Plan], path: str | Path, kind: str = "gantt",
         title: str = "") -> Path:
    """Draw `plans` (name -> plan) of `s` into `path` (PNG): kind `gantt`
    (who owns each GPU when) or `utilization` (useful GPUs over time). Needs
    matplotlib (`pip install gpualloc[plot]`)."""
    from gpualloc import plots

    plots.require_matplotlib()
    draw = {"gantt": plots.gantt, "utilization": plots.utilization}.get(kind)
    if draw is None:
        raise SettingError(f"kind={kind}: must be one of gantt, utilization")
    return draw(path, s, {name: p.owner for name, p in plans.items()}, title)


def policy_names() -> list[str]:
    """The registered policy names."""
    from gpualloc.policies import POLICIES
    return list(POLICIES)


@functools.lru_cache(maxsize=32)
def _compose(overrides: tuple[str, ...]):
    """conf/'s config under `overrides`, composed once per process (Hydra's
    compose takes a quarter of a second; OmegaConf.merge copies what it
    returns, so the cached config is never changed)."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from gpualloc.config import register_configs
    from gpualloc.run import one_line

    register_configs()
    if GlobalHydra.instance().is_initialized():  # inside a Hydra app or a notebook's earlier call
        GlobalHydra.instance().clear()
    try:
        with initialize_config_module(config_module="gpualloc.conf", version_base=None):
            return compose(config_name="config", overrides=list(overrides))
    except HydraException as e:
        raise SettingError(one_line(e)) from None
