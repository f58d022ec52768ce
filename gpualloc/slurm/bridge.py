"""The one module of gpualloc.slurm that imports the rest of gpualloc: the
scenario and plan files, the checker, the metrics, the policies and the
online loop. Everything else in gpualloc.slurm goes through these names."""
from __future__ import annotations

import copy

import numpy as np
import torch

from gpualloc.check import check
from gpualloc.config import RunConfig
from gpualloc.core import service_order
from gpualloc.core.layout import layout
from gpualloc.core.reclaim import held_replicas, reclaim
from gpualloc.files import atomic_write_text
from gpualloc.metrics import metrics
from gpualloc.plan import IDLE, empty_owner, load_plan, save_plan
from gpualloc.policies import POLICIES
from gpualloc.scenario import (ELASTIC_KINDS, KINDS, RIGID_KINDS, Scenario, ScenarioError,
                               from_dict, load)

__all__ = ["check", "RunConfig", "atomic_write_text", "metrics", "IDLE", "empty_owner",
           "load_plan", "save_plan", "POLICIES", "ELASTIC_KINDS", "KINDS", "RIGID_KINDS",
           "Scenario", "ScenarioError", "from_dict", "load", "plan_now", "held_guarantee",
           "guarded_starts", "short_now", "demand_seen", "simulate_online",
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


def held_guarantee(view: Scenario, col: torch.Tensor) -> torch.Tensor:
    """The column `col` (G,) of a view's first step, re-packed where a
    guaranteed service holds fewer replicas than its guarantee of the step's
    demand (PROBLEM.md rule 4 online), as the online loop's autoscaler does
    it (gpualloc.core.reclaim): idle GPUs, then replicas above their own
    guarantee, then preemptible jobs, lowest priority first (cut: they hold
    nothing in the column; the rigid work it keeps stays where the column
    has it). Kept as it is where that helps no service, or would move a
    fixed replica (a user's or a pinned one: Slurm runs it where it runs)."""
    if not bool((view.min_served > 0).any()):
        return col
    lay = layout(view)
    order = service_order(view, np.flatnonzero(lay.demand[:, 0] > 0))
    guaranteed = view.guaranteed.numpy()[:, 0]
    got = reclaim(lay, col.numpy().astype(np.int64), order, guaranteed, lay.demand[:, 0])
    if got is None:
        return col
    out = torch.from_numpy(got.column)
    fixed = view.fixed[:, 0] if view.fixed is not None else torch.full_like(col, IDLE)
    rigid = torch.cat([view.rigid, torch.tensor([True])])  # IDLE reads the spare last entry
    pinned = (fixed != IDLE) & ~rigid[fixed]  # a fixed replica: Slurm runs it where it runs
    return out if torch.equal(out[pinned], fixed[pinned]) else col


def guarded_starts(view: Scenario, col: torch.Tensor, headroom: float) -> torch.Tensor:
    """The column `col` (G,) of a view's first step with each start of work
    that cannot yield (rigid, not preemptible, not running) taken out where,
    beside it and the starts kept before it (priority order), the
    guaranteed replicas of its run's steps, the view's curves raised by
    `headroom` and rounded up, would not fit on the GPUs such work leaves
    them: the online loop's start check (online.start.room_for_guarantee,
    online.guarantee_headroom), for a demand file whose curves are a
    forecast. `headroom` 0: the curves are the demand (kept as it is)."""
    if not headroom > 0 or not bool((view.min_served > 0).any()):
        return col
    from gpualloc.config import OnlineConfig
    from gpualloc.core import priority_order
    from gpualloc.online.start import room_for_guarantee
    o = OnlineConfig(forecast="last_day", guarantee_headroom=headroom,
                     guarantee_headroom_first_day=headroom)  # every view job arrives at 0
    lay = layout(view)
    owner = (view.fixed.clone() if view.fixed is not None
             else torch.full((view.G, view.T), IDLE, dtype=torch.long))
    running = torch.zeros(view.J + 1, dtype=torch.bool)
    running[owner[:, 0]] = True  # IDLE reads the spare last entry
    starts = [k for k in torch.unique(col[col != IDLE]).tolist()
              if lay.rigid[k] and not lay.preemptible[k] and not running[k]]
    out = col.clone()
    index = list(range(view.J))
    for k in priority_order(view, starts):
        first = int((col == k).nonzero()[0])
        if room_for_guarantee(view, view, index, owner, 0, k, first, o):
            owner[first:first + int(lay.gpus[k]), :int(lay.duration[k])] = k
        else:
            out[out == k] = IDLE
    return out


def short_now(view: Scenario, col: torch.Tensor) -> int:
    """Guaranteed replicas the column `col` (G,) of a view's first step
    leaves short (PROBLEM.md rule 4)."""
    if not bool((view.min_served > 0).any()):
        return 0
    lay = layout(view)
    services = np.flatnonzero(~lay.rigid)
    held = held_replicas(lay, col.numpy().astype(np.int64), services)
    return int(np.maximum(view.guaranteed.numpy()[services, 0] - held, 0).sum())


def simulate_online(s: Scenario, policy: str, seed: int = 0,
                    forecast: str = "oracle") -> torch.Tensor:
    """(G, T) what gpualloc's online loop (simulated, gpualloc.online) does
    with `s`, replanning every step: the prediction a served run is held to.
    `forecast`: online.forecast (oracle: serve reads the true curves from
    its --demand file)."""
    from gpualloc.online import online
    cfg = copy.deepcopy(RunConfig(device="cpu", seed=seed, mode="online"))
    cfg.solver.time_limit_s = None
    cfg.solver.progress = False
    cfg.online.forecast = forecast
    return online(s, POLICIES[policy], cfg, "cpu", name=policy).owner


def demand_seen(s: Scenario, k: int, steps: int, method: str) -> np.ndarray:
    """(J, steps) each service's demand as an autoscaler would write it into
    serve's demand file at step k: the actual demand of step k, then
    `method`'s forecast from the demand observed up to k (online.forecast:
    last_day, ewma; gpualloc.online.observe.guess); rigid jobs' rows zero."""
    from gpualloc.config import OnlineConfig
    from gpualloc.online.observe import guess
    services = np.flatnonzero(~s.rigid.numpy())
    out = np.zeros((s.J, steps), dtype=np.int64)
    history = s.demand.numpy()[services, :k + 1]
    out[services, 0] = history[:, k]
    out[services, 1:] = guess(method, history, k, s.arrival.numpy()[services], steps - 1,
                              OnlineConfig(), s.step_minutes)
    return out


def policy_plan(s: Scenario, name: str, seed: int = 0) -> torch.Tensor:
    """(G, T) the offline plan of registry policy `name` (e.g. backfill: the
    simulation Slurm's own backfill is held to), as the policy makes it:
    under rule 4 without Policy.offline's weighing, which Slurm does not do."""
    cfg = RunConfig(device="cpu", seed=seed)
    cfg.solver.progress = False
    return POLICIES[name](s, cfg, torch.device("cpu")).owner
