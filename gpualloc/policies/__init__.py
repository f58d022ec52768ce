"""The policy registry: name -> Policy, called as policy(scenario, run config,
device) -> Plan.

A policy never imports another one: where a policy weighs other plans (the
allocator starts from FIFO's and greedy's, greedy keeps the plain EASY
backfill's where it is better, exact starts CP-SAT from greedy's), the
registry hands them over as `rivals` (`rivals(device)`: name -> plan of a
scenario, each with its default settings). Entries import their module
lazily, so an optional dependency (OR-Tools for `exact`) is needed only when
that policy runs.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable

import torch

from gpualloc.config import RunConfig
from gpualloc.plan import Plan
from gpualloc.scenario import Scenario

Rivals = dict[str, Callable[[Scenario], Plan]]


GUARANTEED_WEIGHT = 1000.0
"""Offline under rule 4, one guide for the allocator is its plan with the
guaranteed services' priority raised this many times: above any rigid job's
value per GPU-step, so no replica of theirs is traded for rigid work."""


@dataclass
class Policy:
    """A registry entry."""

    fn: Callable[[Scenario, RunConfig, torch.device], Plan]
    online_by_nature: bool = False
    """Runs unchanged in online mode (it never looks ahead): no rolling horizon."""
    refuses: Callable[[Scenario], None] | None = None
    """Raises ScenarioError, before any work, on a scenario it does not model."""
    keeps_guarantee: bool = True
    """Its plans meet rule 4 (FIFO's, as PROBLEM.md defines it, need not)."""
    places_guarantee_first: bool = True
    """It meets rule 4 by planning around the guaranteed replicas placed first
    (core.guarantee; exact holds rule 4 as a constraint instead)."""
    starts_arrivals_at_once: bool = False
    """Online, where every job known before an arrival has started and the
    arrival and the forecast demand all fit, its plan of the view starts the
    arrival at once on the core's best-fit block free for the whole run (the
    allocator: its priority-order build, ideal there, is returned at once),
    so the loop starts such arrivals without planning the view
    (online.start.start_at_once; several steps' in turn in one call,
    starts_in_turn). Such a policy carries nothing from a full replan to the
    light ones (Plan.info["carry"]): its first full replan may be skipped too."""
    reads_hint: bool = False
    """Online, it starts from the last replan's plan (Scenario.hint: the
    allocator's "previous" build); for the others the loop leaves it unset."""
    short_views: bool = False
    """Online, at a light replan (an arrival's, or between two full ones) it
    plans only the view's window, and each step from the steps before it
    (greedy's carried variant, the plain backfill): where every job it starts
    there starts at once on a block free for its run and none waits, its plan
    read the view no further than those runs (Plan.info["looked_ahead"]
    False), so the loop may plan such a replan on a view cut after them
    (online.loop)."""

    def __call__(self, s: Scenario, cfg: RunConfig, device: torch.device) -> Plan:
        return self.fn(s, cfg, device)

    def offline(self, s: Scenario, cfg: RunConfig, device: torch.device) -> Plan:
        """Its plan of `s`, offline. Under rule 4 a policy plans around the
        guaranteed replicas placed first (core.guarantee), and where that
        placement splits the free GPUs it costs work. So plans made without
        the guarantee guide it too: its own, and for greedy and the allocator
        (which starts from greedy's plans) greedy's that never displaces
        forecast demand (greedy.displace=false); for the allocator, its own
        with the guaranteed services' value raised. Each is kept where it meets
        rule 4 all the same, and around the replicas placed where each of its
        own guides serves them (the rest packed around those) the policy plans
        again. The best is kept (ties: the first); Plan.info["guarantee"] has
        each one's value."""
        plan = self(s, cfg, device)
        if not self.places_guarantee_first or not bool((s.min_served > 0).any()):
            return plan
        from gpualloc.check import check
        from gpualloc.core.guarantee import footprint_after, with_footprint
        from gpualloc.objective import weighted_throughput
        from gpualloc.scenario.edit import without_guarantee
        options = {"replicas placed first": plan}
        unguaranteed = without_guarantee(s)
        guides = {"without the guarantee": (self(unguaranteed, cfg, device), True)}
        if self.fn in (_greedy, _allocator):
            strict = copy.deepcopy(cfg)
            strict.greedy.displace = False
            guides["greedy's, never displacing demand"] = (
                POLICIES["greedy"](unguaranteed, strict, device), self.fn is _greedy)
        if self.fn is _allocator:  # it has no such switch: the services' value raised instead
            guides["the guaranteed services' value raised"] = (
                self(without_guarantee(s, GUARANTEED_WEIGHT), cfg, device), True)
        for name, (guide, own) in guides.items():
            if check(s, guide.owner).ok:
                options[name] = guide
            placed = footprint_after(s, guide.owner) if own else None
            if placed is not None:
                around = with_footprint(s, placed)
                around.hint = guide.owner  # its rigid jobs fit there: a start (the allocator's)
                options[f"around the replicas of {name}"] = self(around, cfg, device)
        values = {name: weighted_throughput(s, p.owner) for name, p in options.items()}
        kept = max(values, key=values.get)  # the first of equal ones
        options[kept].info["guarantee"] = {"values": values, "kept": kept}
        return options[kept]


def rivals(device: torch.device | str = "cpu") -> Rivals:
    """The plans other policies are weighed against, default settings each:
    fifo, backfill, greedy, greedy without preemption (`greedy_whole`), and
    the running jobs greedy's own way cuts (`greedy_cuts`)."""
    from gpualloc.config import GreedyConfig
    from gpualloc.policies.backfill import backfill
    from gpualloc.policies.fifo import fifo
    from gpualloc.policies.greedy import greedy, running_cuts

    return {"fifo": lambda s: fifo(s, device=device),
            "backfill": lambda s, window=None: backfill(s, window=window),
            "greedy": lambda s: greedy(s, GreedyConfig(), "cpu", rivals(device)),
            "greedy_whole": lambda s: greedy(s, GreedyConfig(preempt=False), "cpu",
                                             rivals(device)),
            "greedy_cuts": lambda s: running_cuts(s, GreedyConfig())}


def _fifo(s: Scenario, cfg: RunConfig, device: torch.device) -> Plan:
    from gpualloc.policies.fifo import fifo
    return fifo(s, cfg.fifo, device)


def _allocator(s: Scenario, cfg: RunConfig, device: torch.device) -> Plan:
    from gpualloc.policies.allocator import allocator
    from gpualloc.policies.allocator.memory import fit
    # Before the grid exists: the representation that fits, the path without
    # the relaxation where none does, or a clear error.
    solver, note = fit(s, cfg.solver, device)
    plan = allocator(s, solver, device, rivals(device))
    if note is not None:
        plan.info["memory_guard"] = note
    return plan


def _greedy(s: Scenario, cfg: RunConfig, device: torch.device) -> Plan:
    from gpualloc.policies.greedy import greedy
    return greedy(s, cfg.greedy, device, rivals(device), window=s.window)


def _backfill(s: Scenario, cfg: RunConfig, device: torch.device) -> Plan:
    from gpualloc.policies.backfill import backfill
    return backfill(s, window=s.window)


def _exact(s: Scenario, cfg: RunConfig, device: torch.device) -> Plan:
    from gpualloc.policies.exact import exact
    return exact(s, cfg.exact, device, seed=cfg.seed, rivals=rivals(device))


def _refuse_preemptible(s: Scenario) -> None:
    from gpualloc.policies.exact import refuse_preemptible
    refuse_preemptible(s)


BASELINE = "fifo"
"""The yardstick of every gain (PROBLEM.md): a run always plans with it, first."""

POLICIES: dict[str, Policy] = {
    "fifo": Policy(_fifo, online_by_nature=True, keeps_guarantee=False,
                   places_guarantee_first=False),
    "allocator": Policy(_allocator, starts_arrivals_at_once=True, reads_hint=True),
    "greedy": Policy(_greedy, short_views=True),
    "backfill": Policy(_backfill, short_views=True),
    "exact": Policy(_exact, refuses=_refuse_preemptible, places_guarantee_first=False),
}
