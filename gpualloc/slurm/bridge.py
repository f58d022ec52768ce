"""The one module of gpualloc.slurm that imports the rest of gpualloc: the
scenario and plan files, the checker, the metrics, the policies and the
online loop. Everything else in gpualloc.slurm goes through these names."""
from __future__ import annotations

import copy

import torch

from gpualloc.check import check
from gpualloc.config import RunConfig
from gpualloc.files import atomic_write_text
from gpualloc.metrics import metrics
from gpualloc.plan import IDLE, empty_owner, load_plan, save_plan
from gpualloc.policies import POLICIES
from gpualloc.scenario import (ELASTIC_KINDS, KINDS, RIGID_KINDS, Scenario, ScenarioError,
                               from_dict, load)

__all__ = ["check", "RunConfig", "atomic_write_text", "metrics", "IDLE", "empty_owner",
           "load_plan", "save_plan", "POLICIES", "ELASTIC_KINDS", "KINDS", "RIGID_KINDS",
           "Scenario", "ScenarioError", "from_dict", "load", "plan_now", "simulate_online",
           "policy_plan", "SERVE_POLICIES"]

SERVE_POLICIES = ("greedy", "allocator")


def serve_config(seed: int = 0, time_limit_s: float | None = None) -> RunConfig:
    """The run config `serve` plans each step with: the settings of a full
    replan of gpualloc's online loop (gpualloc.online.loop.replan_configs),
    on the CPU, without a progress bar. For the allocator that is the discounted
    objective (online.discount) and the online search budget: with the
    policy's offline settings a step's plan postpones work that later
    arrivals then compete with, and serve's loop fell below greedy's
    (docs/results.md, s79). The search is a budget of moves (a seed gives
    one plan); `time_limit_s` also stops it on the clock
    (solver.time_limit_s), to keep a plan inside a short step."""
    from gpualloc.online.loop import replan_configs
    cfg = RunConfig(device="cpu", seed=seed)
    cfg.solver.time_limit_s = time_limit_s
    full, _ = replan_configs(cfg)  # no progress bar, no offline deep search
    return full


def plan_now(view: Scenario, policy: str, cfg: RunConfig) -> torch.Tensor:
    """(G, T) the policy's plan of a view whose `fixed` cells (running jobs)
    it must keep."""
    if view.J == 0:
        return empty_owner(view)
    return POLICIES[policy](view, cfg, torch.device("cpu")).owner.cpu().long()


def simulate_online(s: Scenario, policy: str, seed: int = 0) -> torch.Tensor:
    """(G, T) what gpualloc's online loop (simulated, gpualloc.online) does
    with `s`: the prediction a served run is held to."""
    from gpualloc.online import online
    cfg = copy.deepcopy(RunConfig(device="cpu", seed=seed, mode="online"))
    cfg.solver.time_limit_s = None
    cfg.solver.progress = False
    cfg.online.forecast = "oracle"  # serve reads the demand curves from its --demand file
    return online(s, POLICIES[policy], cfg, "cpu", name=policy).owner


def policy_plan(s: Scenario, name: str, seed: int = 0) -> torch.Tensor:
    """(G, T) the offline plan of registry policy `name` (e.g. backfill: the
    simulation Slurm's own backfill is held to), as the policy makes it:
    under rule 4 without Policy.offline's weighing, which Slurm does not do."""
    cfg = RunConfig(device="cpu", seed=seed)
    cfg.solver.progress = False
    return POLICIES[name](s, cfg, torch.device("cpu")).owner
