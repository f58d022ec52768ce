"""Online (rolling-horizon) planning: the plan a policy makes when it learns
about jobs only as they arrive and about real-time demand only as it happens.

    python -m gpualloc.run +scenario=mixed policies=[fifo,allocator] mode=online \\
        online.forecast=last_day online.replan_every=1

Every `replan_every` timesteps, at the decision time `tau`, the policy (any
registry policy that honours `Scenario.fixed`) plans a *view*: a scenario
built only from what is known at `tau`, over the rest of the horizon
(view timestep 0 is `tau`):

- the jobs that have arrived (`arrival <= tau`), each with arrival 0; rigid
  jobs that have finished are left out; rigid jobs already running keep their
  block, as `fixed` cells, with the rest of their run as their duration;
  durations are cut at the view's end (the same cells and value: the horizon
  cuts runs anyway);
- the real-time demand observed at `tau`, then the forecaster's guess for
  `tau + 1 ..` computed from the observed history only (`oracle` alone is
  handed the true future; `last_day` repeats the last observed day, `ewma`
  holds an exponentially weighted level flat).

`visible` and `view` build it from the observation alone, so the planner
cannot read a job before its arrival, nor (but with `oracle`) demand after
`tau`: the scenario it gets does not contain them.

Replans come every `replan_every` steps and, with `online.replan_on_arrival`
(`light` by default), also at each step where a rigid job arrives: the
window of the plan before ends there. An arrival's replan runs the policy in
its cheap form where it has one (the allocator: priority-order builds and
the last plan, no relaxation, `arrival_search_moves` of search). So does a
periodic replan less than `online.full_every` steps after the allocator's
last full one: replanning every step then costs about what replanning every
`full_every` steps does; a full replan sooner than `online.relax_every`
steps after the last relaxed one skips the relaxation (the priority-order
builds and the last plan, with the full search). Each view carries its
window (`Scenario.window`):
greedy, which decides each step from the steps before it, plans only the
window, the steps the loop executes; it weighs its backfill variant over the
whole view at full replans only, and the light ones keep that choice
(`Scenario.carry`).

A replan with nothing to decide is skipped: when every rigid job known at
tau has started (and a preemptible one has made all its progress), no
policy runs, and the window's actual real-time demand is packed the best
way the placement core packs a step, then served (below): most steps of a
lightly loaded cluster (`Plan.info`'s `skipped`). A full replan runs all
the same where the policy's full replans carry a choice to the light ones
after them (greedy's variant); skipped or not, the cadence of full and
relaxed replans holds. At a replan where only the rigid jobs arriving then
wait (and, full, nothing is carried), a policy that would start each at
once on the core's best-fit block beside the forecast demand
(`Policy.starts_arrivals_at_once`: the allocator, whose priority-order
build does, returned as ideal) is not run: the loop starts them so
(`Plan.info`'s `inserted`), or plans the view where one does not fit; not
with guaranteed services, preemptible jobs, expected arrivals or replicas
of more than one GPU. Where each step's real-time service is its own (no
guaranteed service, no preemptible job, at most 6 service classes:
loop._service_at_end), no decision reads a replica: every window is
served in one pass after the last decision, with the same plan, and
skipped windows in a row, up to the next arrival, are one step of the
loop. A light replan where only the arrivals wait, of a
policy that plans only its window step by step (`Policy.short_views`:
greedy, the backfill), is planned on a view cut after their longest run
(`Plan.info`'s `short_views`); where its plan says it looked further (a job
waited), on the whole view.

From the policy's plan, the decisions of the window `[tau, next replan)`
are executed:

- a rigid job the plan starts inside the window is committed: it runs on
  that block to its end (never moved); the others go back to the queue and
  are planned again at the next replan. With `online.commit_at_start` (on by
  default), a job (not preemptible) the plan starts after tau is decided at
  its start step, from what is known then: it starts on its planned block
  (or another free one) where the forecast real-time demand still fits, or
  where it no longer does, when the replan's objective (discounted) values
  starting it there now over its earliest start that displaces no demand;
  else it waits, tried again at each later step of the window. A preemptible job (PROBLEM.md) is
  committed one segment at a time: while it runs it is in the view as
  fixed cells the planner may cut (greedy's priority preemption does; the
  allocator weighs its own replan after greedy's cuts), and a cut inside the window preempts it
  there; once stopped, it waits in the view with its remaining progress
  plus its restore as its duration;
- between two replans (`online.fill_between`, on by default; with
  `replan_on_arrival` on, no rigid job arrives between two replans), at each step
  t a rigid job (not preemptible) that arrived after tau starts at t if a block is free for
  its whole run, in the executed plan and in the last plan (which holds its
  placements of waiting jobs), where the forecast real-time demand still
  fits: a scheduler's backfill pass, decided from what is known at t;
- real-time capacity reacts to the *actual* demand at each timestep (an
  autoscaler): a service keeps its planned replicas up to its actual demand
  (lowest blocks first) and releases the rest; unmet actual demand then takes
  free compatible GPUs (GPUs no committed rigid job holds), highest priority
  first (ties: arrival, scenario order), lowest free block first. Services
  that arrive between two replans are served this way too. The forecast thus
  shapes where rigid jobs go, not how much real-time traffic is served on
  GPUs left free.
- rule 4 online (`min_served`; gpualloc.online.serve): at a step where a
  guaranteed service still holds fewer replicas than its guarantee of the
  actual demand, the step takes GPUs from work that may yield
  (gpualloc.core.reclaim): idle GPUs, then replicas above their own
  service's guarantee (lower priorities first), then preemptible rigid jobs
  (lowest priority first, only those the packing needs), each preempted
  there: its segment ends at that step and it requeues with its remaining
  progress plus its restore, placed again by a later replan. What
  non-preemptible committed work holds never yields: the replicas still
  missing are the plan's `guarantee_shortfall`. So that little is, with
  guaranteed services, work that cannot yield (not preemptible) starts only
  where their forecast raised by `online.guarantee_headroom` (none with the
  oracle, which has no error to cover) fits on the
  GPUs that such work leaves beside it (what preemptible jobs hold counts:
  a step reclaims it) and where the step's guaranteed replicas still pack
  beside it (exactly, as a reclaimed step packs them), decided at its start
  step (tau's starts too); the replans plan with the forecast as it is.

The result is one plan of the whole scenario; `run` checks it like any other.
FIFO is online by nature (its queue needs no future) and runs unchanged; note
that its reservation is sized from the horizon's peak demand, as PROBLEM.md
defines it.
"""
from __future__ import annotations

import torch

from gpualloc.config import FORECASTS, RunConfig  # noqa: F401 (re-exported)
from gpualloc.online.loop import online
from gpualloc.online.observe import (Observation, Oracle, expected_arrivals,  # noqa: F401
                                     forecast, visible)
from gpualloc.online.view import Committed, view  # noqa: F401
from gpualloc.plan import Plan
from gpualloc.policies import POLICIES
from gpualloc.scenario import Scenario


def run_policy(name: str, s: Scenario, cfg: RunConfig, device: torch.device) -> Plan:
    """The registry policy `name` on `s`, offline or online as `cfg.mode` says
    (`cfg`'s settings are checked where they are defined: gpualloc.config)."""
    if cfg.mode == "offline" or POLICIES[name].online_by_nature:
        return POLICIES[name].offline(s, cfg, device)
    return online(s, POLICIES[name], cfg, device, name=name)
