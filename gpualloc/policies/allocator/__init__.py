"""The constrained allocator.

1. Relax: the plan as a dense grid x[g, j, t] in [0, 1] on the device, cells
   that PROBLEM.md forbids (before arrival, incompatible GPU, decided before
   planning) fixed at 0. Maximize the priority-weighted useful work minus
   penalties for what the relaxation lets slip: capacity (more than one job
   on a GPU-timestep), gang size (a rigid job's mass at a timestep above its
   `gpus`), job area (a rigid job's mass above gpus x duration), elastic
   mass above demand, and broken runs in time (a rigid job's mass should
   stay on the same GPUs from one step to the next). Projected gradient
   ascent, the penalty weight growing geometrically over the steps; one fused
   kernel per step (kernels/pgd.py).
2. Round: each rigid job's start is the window of its duration that holds the
   most relaxed mass; the jobs that hold enough of their mass there (a few
   thresholds, each one rounding) are ordered by that start, the rest by
   priority.
3. Repair (repair.py): place the jobs in that order at their rounded start
   when it is free, else at their earliest feasible start, where the known
   elastic demand still fits; fill what is left with elastic replicas,
   highest priority first. Feasible whatever the relaxation did. The same
   repair from plain priority order, FIFO's placement, greedy's plan and,
   online, the last replan's plan compete; the best plan goes on.
4. Improve (search.py): local search on the exact objective (ruin and
   recreate, and forcing in waiting jobs the relaxation wanted), never
   accepting a worse plan, within its move cap, patience and time budget;
   then, with `local_search_anneal_iters`, a second walk from the same
   repaired plan that may take worse moves early on (threshold accepting);
   the better of the two walks' plans goes on. Scenarios of at most
   `deep_search_cells` cells search with the deep budget (`search_budget`);
   on big plans each walk's moves are capped by `local_search_work`, work
   counted in moves x GPU-steps (`search_moves`).
   Offline, greedy's plan is returned when the search ends below it.

Where the priority-order repair already runs every known job at its arrival
and serves every wanted replica (Schedule.is_ideal: no plan is better),
that plan is returned at once, with no relaxation and no search
(`info.optimal`); online, on a lightly loaded cluster, most replans are so.

Where no relaxed grid fits the memory guard, the registry's entry runs it
without stage 1 and 2 (gpualloc.policies.allocator.memory.fit): the
priority-order builds, FIFO's and greedy's plans, then the search; Plan.info
says so (`memory_guard`).

Guaranteed real-time replicas (rule 4) are fixed before all of this
(gpualloc.core.guarantee); online, the repair and the search maximize a
discounted objective (SolverConfig.discount, set by gpualloc.online).
"""
from __future__ import annotations

import dataclasses
import math
import time

import torch

from gpualloc import progress
from gpualloc.config import SolverConfig
from gpualloc.plan import Plan
from gpualloc.policies.allocator.relax import relax
from gpualloc.core import fixed_jobs, priority_order
from gpualloc.core.schedule import adopt
from gpualloc.policies.allocator.repair import build, build_parallel
from gpualloc.policies.allocator.search import SearchStats, improve
from gpualloc.policies.allocator.round import relaxed_order, round_starts
from gpualloc.core.segments import cuts_in, fill_segments
from gpualloc.objective import value, weighted_throughput
from gpualloc.scenario import Scenario, with_cuts
from gpualloc.threads import cpu_threads


def search_budget(s: Scenario, cfg: SolverConfig) -> tuple[int, int]:
    """(patience, second walk's moves) of the local search on `s`: the
    settings', or on a scenario of at most cfg.deep_search_cells cells
    (G x J x T) the deep budget where it is larger, scaled down on
    scenarios of few jobs (cfg.deep_search_moves_per_job)."""
    patience, anneal = cfg.local_search_patience, cfg.local_search_anneal_iters
    if s.G * s.J * s.T <= cfg.deep_search_cells:
        deep = cfg.deep_search_anneal_iters
        share = min(1.0, s.J * cfg.deep_search_moves_per_job / deep) if deep else 1.0
        patience = max(patience, math.ceil(share * cfg.deep_search_patience))
        anneal = max(anneal, math.ceil(share * cfg.deep_search_anneal_iters))
    return patience, anneal


def search_moves(s: Scenario, cfg: SolverConfig) -> tuple[int, int | None]:
    """(the first walk's moves, the cap on each walk's moves or None) on `s`:
    cfg.local_search_iters, capped at cfg.local_search_work / (G x T) where
    that is lower. A move re-inserts jobs by earliest fit, a scan of the
    plan's (G, T) free-run grid per job, so its cost grows with G x T
    (measured with rounding=priority on two shared cores: 4.3, 6.4 and 33
    ms a move at 64 x 168, 256 x 168 and 1,024 x 168 GPU-steps, 120-370 ms
    at 4,096 x 336): the cap keeps the search's work, not its moves,
    bounded. A count of work, never the clock: a seed gives one plan on any
    machine. The seven (at most 21,504 GPU-steps) keep all their moves."""
    cap = cfg.local_search_work // (s.G * s.T) if cfg.local_search_work and s.G * s.T else None
    moves = cfg.local_search_iters if cap is None else min(cfg.local_search_iters, cap)
    return moves, cap


def walk_budget(s: Scenario, cfg: SolverConfig) -> dict:
    """The search's budget on `s` (Plan.info["search_budget"]): patience, the
    second walk's moves and the first's (search_budget, search_moves), each
    walk capped."""
    patience, anneal_iters = search_budget(s, cfg)
    moves, cap = search_moves(s, cfg)
    if cap is not None:
        anneal_iters = min(anneal_iters, cap)
    return {"cells": s.G * s.J * s.T, "patience": patience, "anneal_iters": anneal_iters,
            "moves": moves, "plan_cells": s.G * s.T, "move_cap": cap}


def allocator(s: Scenario, cfg: SolverConfig | None = None,
              device: torch.device | str = "cpu", rivals: dict | None = None) -> Plan:
    """`rivals` (gpualloc.policies.rivals): the plans that compete with the
    repaired ones (fifo's, greedy's whole runs and, with preemptible jobs,
    greedy's preemption); None: none compete."""
    cfg = cfg or SolverConfig()
    rivals = rivals or {}
    device = torch.device(device)
    info: dict = {}
    clock = time.perf_counter()
    planned = ~torch.from_numpy(fixed_jobs(s) & s.rigid.numpy()) & ~s.unplaceable
    first = None  # the serial priority-order build, made first
    if cfg.rounding in ("priority", "best") and s.J:
        with cpu_threads(device, cfg.cpu_threads):
            first = build(s, priority_order(s), cfg.demand_aware, None, cfg.discount)
        if first.is_ideal():
            # Everything known runs at its arrival and every wanted replica is
            # served: no plan is better (online, most replans of a lightly
            # loaded cluster), so nothing is relaxed or searched.
            value_first = first.value()
            info.update(representation="none", relax_s=0.0, rounding="serial/priority",
                        repair_values={"serial/priority": value_first}, optimal="ideal",
                        repair_s=time.perf_counter() - clock, local_search_s=0.0,
                        search_budget=walk_budget(s, cfg),
                        local_search=vars(SearchStats(start_value=value_first,
                                                      end_value=value_first,
                                                      stopped_by="optimal")))
            return Plan(owner=first.owner(), info=info)
    roundings = {}  # name -> (builder, order, starts to try first or None)
    guide = None
    if cfg.rounding in ("relaxed", "best") and s.J:
        with cpu_threads(device, cfg.cpu_threads):
            C, last, info["representation"] = relax(s, cfg, device, planned)
        start, score = round_starts(s, C)
        guide = (score.tolist(), start.tolist())
        for th in cfg.rounding_thresholds:
            order = relaxed_order(s, start, score, th)
            at = {j: int(start[j]) for j in range(s.J) if score[j] >= th}
            roundings[f"serial/relaxed@{th:g}"] = ("serial", order, None)
            roundings[f"serial/relaxed@{th:g}+start"] = ("serial", order, at)
            roundings[f"parallel/relaxed@{th:g}"] = ("parallel", order, None)
        info["relaxed_objective"], info["capacity_excess"] = last[0], last[1]
        info["column_excess"], info["area_excess"] = last[2], last[3]
    else:
        info["representation"] = "none"  # no relaxed grid built
    info["relax_s"] = time.perf_counter() - clock
    if cfg.rounding in ("priority", "best") or not roundings:
        roundings["serial/priority"] = ("serial", priority_order(s), None)
        roundings["parallel/priority"] = ("parallel", priority_order(s), None)

    clock = time.perf_counter()
    with cpu_threads(device, cfg.cpu_threads):
        built = {name: first if name == "serial/priority" and first is not None
                 else build(s, order, cfg.demand_aware, at, cfg.discount) if how == "serial"
                 else build_parallel(s, order, cfg.demand_aware, discount=cfg.discount)
                 for name, (how, order, at) in roundings.items()}
        if "fifo" in rivals and s.fixed is None and not bool((s.min_served > 0).any()):
            # FIFO's placement competes too, so the search never starts below
            # the baseline (not under rule 4, which FIFO's plan may break).
            built["fifo"] = adopt(s, rivals["fifo"](s).owner, cfg.discount)
        if s.hint is not None:
            # The last replan's plan, grown with the jobs it did not know.
            built["previous"] = adopt(s, s.hint, cfg.discount, complete=True,
                                      demand_aware=cfg.demand_aware)
        reference = None
        if cfg.start_from_greedy and "greedy_whole" in rivals:
            # And greedy's: the search starts no lower than the reference.
            reference = rivals["greedy_whole"](s).owner
            built["greedy"] = adopt(s, reference, cfg.discount)
        values = {name: sched.value() for name, sched in built.items()}
        chosen = max(values, key=lambda name: (values[name], "relaxed" in name))
        sched = built[chosen]
        info["repair_values"], info["rounding"] = values, chosen
        info["repair_s"] = time.perf_counter() - clock
        clock = time.perf_counter()
        budget = info["search_budget"] = walk_budget(s, cfg)
        patience, anneal_iters, moves = budget["patience"], budget["anneal_iters"], budget["moves"]
        # No bar at all where none shows: online, hundreds of replans a run.
        bar = progress.bar(total=moves + anneal_iters, desc=f"search {s.name}", unit="move",
                           leave=False) if cfg.progress else None

        def tick(moves, value):
            bar.set_postfix(objective=f"{value:.0f}", refresh=False)
            bar.update(moves)

        limit = getattr(cfg, "time_limit_s", None)
        search = dict(window=tuple(cfg.ruin_window), demand_aware=cfg.demand_aware, guide=guide,
                      patience=patience, max_waiting=cfg.local_search_max_waiting,
                      max_removed=cfg.local_search_max_removed or 0,
                      progress=None if bar is None or bar.disable else tick)
        start = sched.snapshot() if anneal_iters else None
        climb = improve(sched, moves, cfg.seed, time_limit_s=limit, **search)
        info["local_search"] = vars(climb)
        left = None if limit is None else limit - (time.perf_counter() - clock)
        if start is not None and (left is None or left > 0):
            # A second walk from the same start that may go downhill early on
            # (threshold accepting): from the repaired plan it found more than
            # from the climb's local optimum (broad family, tuning seeds). The
            # better walk's plan is kept, so the climb's is a floor.
            climbed = sched.snapshot()
            sched.restore(start)
            anneal = improve(sched, anneal_iters, cfg.seed + 1,
                             time_limit_s=left, accept_worse=cfg.local_search_accept_worse,
                             **search)
            if anneal.end_value <= climb.end_value + 1e-9:
                sched.restore(climbed)
            info["anneal"] = dict(vars(anneal), kept=anneal.end_value > climb.end_value + 1e-9)
        if bar is not None:
            bar.close()
        owner = sched.owner()
        if reference is not None and not cfg.discount and (
                weighted_throughput(s, reference) > weighted_throughput(s, owner)):
            # The repair re-serves greedy's rigid placements with its own elastic
            # fill, which can serve less than greedy's best fit: never below greedy.
            owner, info["returned"] = reference, "greedy's plan"
    info["local_search_s"] = time.perf_counter() - clock
    if cfg.preempt and bool(s.preemptible.any()):
        owner = _preempt(s, owner, info, cfg, rivals)
    return Plan(owner=owner, info=info)


def _preempt(s: Scenario, owner: torch.Tensor, info: dict, cfg: SolverConfig,
             rivals: dict) -> torch.Tensor:
    """Segments where they pay: the plan of whole runs; greedy's plan with
    priority preemption (where greedy's plan competes: cfg.start_from_greedy,
    off online, where greedy's plan of a view wins it too often and loses
    the executed plan); and, where greedy cuts jobs that run now (online:
    preemptible jobs in the fixed cells), the allocator's own plan after
    those cuts, and after each one alone. Each gets the remaining work of
    preemptible jobs run in its idle blocks (gpualloc.core.segments); the
    best by the objective the search maximized (discounted online) is kept.
    The first is never below the plan of whole runs."""
    clock = time.perf_counter()
    options = {"whole runs": owner}
    cuts = {}
    if cfg.start_from_greedy and "greedy" in rivals:
        preemptive = rivals["greedy"](s).owner
        options["greedy's preemption"] = preemptive
        cuts = cuts_in(s, preemptive)
    elif "greedy_cuts" in rivals:  # the running jobs greedy's own way cuts
        cuts = rivals["greedy_cuts"](s)
    after_cfg = dataclasses.replace(cfg, preempt=False) if cuts else cfg
    if cuts:  # all of greedy's cuts, and each alone (greedy cuts for itself, not for us)
        options["greedy's cuts"] = _after_cuts(s, cuts, after_cfg, rivals)
    if len(cuts) > 1:
        for j, t in cuts.items():
            options[f"greedy's cut of {s.jobs[j].id}"] = _after_cuts(s, {j: t}, after_cfg, rivals)
    values = {}
    for name, plan in options.items():
        options[name], _ = fill_segments(s, plan)
        values[name] = value(s, options[name], cfg.discount)
    chosen = max(values, key=lambda name: (values[name], name == "whole runs"))
    info["preemption"] = {"values": values, "chosen": chosen,
                          "seconds": time.perf_counter() - clock}
    return options[chosen]


def _after_cuts(s: Scenario, cuts: dict[int, int], cfg: SolverConfig,
                rivals: dict) -> torch.Tensor:
    """The allocator's plan of `s` with these running jobs stopped at these
    steps: their fixed cells end there, and each comes back as a new job
    (its restore and the rest of its run, from the step after) that maps
    back to it; `cfg` with preemption off."""
    plan = allocator(with_cuts(s, cuts), cfg, rivals=rivals).owner
    for i, j in enumerate(cuts):
        plan[plan == s.J + i] = j
    return plan
