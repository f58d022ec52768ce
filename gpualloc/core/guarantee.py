"""Guaranteed real-time service (PROBLEM.md rule 4): where the guaranteed
replicas go, decided before any rigid job is placed.

Rigid jobs may always wait, so a plan meeting rule 4 exists exactly when the
guaranteed replicas of every timestep fit on the GPUs no fixed cell holds.
`footprint` packs them, timestep by timestep: larger replicas first, then
the services with fewer compatible GPUs, then priority, each on the highest
free blocks (the low GPUs stay together for rigid blocks). Where that
first-fit packing leaves a service short, an exhaustive search of the
timestep's blocks decides; only when it finds no packing either is the
guarantee impossible, and the error names the service, the timestep, the
replicas and GPUs it needs and the compatible GPUs there are.

Policies plan around the footprint: its cells are fixed to their service
(rigid jobs never take them, the elastic fill serves the rest of the demand
elsewhere), so every plan they return meets rule 4 by construction.
"""
from __future__ import annotations

import numpy as np
import torch

from gpualloc.core import owner_of, still_wanted, time_major
from gpualloc.core.layout import layout
from gpualloc.core.pack import fill_elastic
from gpualloc.plan import IDLE
from gpualloc.scenario import Scenario, ScenarioError

SEARCH_STEPS = 200_000
"""Blocks the exhaustive search of one timestep may try before it gives up."""
AIM_STEPS = 2_000
"""The same where rule 4 is only aimed at (around decided cells, online):
a short search, since what does not fit there is reported, not refused."""


class GuaranteeError(ScenarioError):
    """Rule 4 cannot be met: a ScenarioError, so the run prints one line, exit 2."""


def _fixed(s: Scenario) -> np.ndarray:
    """(T, G) int64: the cells decided before planning, an own copy (the
    footprint is written into it)."""
    if s.fixed is None:
        return np.full((s.T, s.G), IDLE, dtype=np.int64)
    return time_major(s.fixed)


def still_guaranteed(s: Scenario, owner: np.ndarray) -> np.ndarray:
    """(J, T) int64: guaranteed replicas not yet held in `owner` (T, G)."""
    return still_wanted(s, owner, s.guaranteed.numpy())


def footprint(s: Scenario, strict: bool = True) -> np.ndarray:
    """(T, G) int64: the cells decided before planning (`s.fixed`) plus, on
    free cells, the guaranteed replicas, each cell labelled with its job.
    With `strict`, a guarantee that cannot be met raises GuaranteeError;
    without (online views, where committed jobs already hold cells), the
    replicas that fit are placed. Cached on the scenario."""
    key = "_footprint_strict" if strict else "_footprint"
    if key in s.__dict__:
        return s.__dict__[key]
    lay = layout(s)
    owner = _fixed(s)
    need = still_guaranteed(s, owner)  # (J, T)
    jobs = [j for j in range(s.J) if not lay.rigid[j] and need[j].any()]
    if jobs:
        compat_gpus = lay.pool_ok @ np.bincount(lay.gpu_pool, minlength=lay.P)
        jobs.sort(key=lambda j: (-lay.gpus[j], compat_gpus[j], -lay.priority[j], j))
        free = owner == IDLE
        served = fill_elastic(lay, free, owner, jobs, need[jobs], high=True)  # (E, T)
        for t in np.nonzero((served < need[jobs]).any(0))[0].tolist():
            _settle(s, owner, jobs, need[jobs, t], t, strict)
    s.__dict__[key] = owner
    return owner


def _settle(s: Scenario, owner: np.ndarray, jobs: list[int], need: np.ndarray, t: int,
            strict: bool) -> None:
    """First fit left a service short at t: search every packing of the
    timestep's guaranteed replicas; write it, or name the first service short."""
    lay = layout(s)
    column = owner[t].copy()
    placed = np.isin(column, jobs)
    column[placed] = IDLE
    free = column == IDLE
    replicas = [j for j, n in zip(jobs, need.tolist()) for _ in range(n)]
    found = _search(lay, free, replicas, SEARCH_STEPS if strict else AIM_STEPS)
    if found is not None:
        column[free] = IDLE
        for j, b in zip(replicas, found):
            column[b:b + lay.gpus[j]] = j
        owner[t] = column
        return
    if not strict:
        return  # first fit's partial packing stays: what fits, fits
    short = next(j for j, n in zip(jobs, need.tolist())
                 if (owner[t] == j).sum() // lay.gpus[j] < n)
    n = int(need[jobs.index(short)])
    compatible = int((lay.compat(short) & free).sum())
    total = int(sum(int(m) * int(lay.gpus[j]) for j, m in zip(jobs, need.tolist())))
    others = len([m for m in need.tolist() if m > 0]) - 1
    raise GuaranteeError(
        f"job {s.jobs[short].id!r}: rule 4 cannot be met at t={t}: its guarantee "
        f"(min_served={s.jobs[short].min_served:g} of demand {int(lay.demand[short, t])}) is "
        f"{n} replicas of {int(lay.gpus[short])} GPUs ({n * int(lay.gpus[short])} GPUs) and the "
        f"cluster has {compatible} compatible GPUs free there"
        + (f", where {others} other guaranteed services need some of the {total} GPUs "
           f"guaranteed at t={t} in all" if others > 0 else "")
        + " (lower min_served, or plan without it)")


def _search(lay, free: np.ndarray, replicas: list[int], budget: int) -> list[int] | None:
    """Blocks (first GPUs) for every replica inside the free GPUs, or None
    when there is none (or the search gave up after `budget` tries).
    Replicas of one job take blocks in increasing order (they are alike)."""
    # Replicas hold disjoint GPUs: more than are free, or than a service's
    # compatible free GPUs, never pack. Online, around committed cells, that
    # is nearly every search, and each would spend its whole budget.
    count = np.bincount(np.asarray(replicas, dtype=np.int64), minlength=lay.J)
    jobs = np.flatnonzero(count)
    wanted = count[jobs] * lay.gpus[jobs]
    compatible = (lay.pool_ok[jobs][:, lay.gpu_pool] & free).sum(1)
    if wanted.sum() > free.sum() or (wanted > compatible).any():
        return None
    order = sorted(range(len(replicas)), key=lambda i: (-lay.gpus[replicas[i]], replicas[i]))
    cand = {}
    for j in set(replicas):
        k = int(lay.gpus[j])
        b = lay.blocks(j)
        cand[j] = [int(x) for x in b if free[x:x + k].all()]
    taken = ~free.copy()
    chosen = [0] * len(replicas)
    steps = [0]

    def place(n: int, lo: int) -> bool:
        if n == len(order):
            return True
        i = order[n]
        j = replicas[i]
        k = int(lay.gpus[j])
        same_as_before = n > 0 and replicas[order[n - 1]] == j
        for x, b in enumerate(cand[j]):
            if same_as_before and x < lo:
                continue
            steps[0] += 1
            if steps[0] > budget:
                return False
            if taken[b:b + k].any():
                continue
            taken[b:b + k] = True
            chosen[i] = b
            if place(n + 1, x + 1):
                return True
            taken[b:b + k] = False
        return False

    return [chosen[i] for i in range(len(replicas))] if place(0, 0) else None


def check_guarantee(s: Scenario) -> None:
    """Raise GuaranteeError when no plan can meet rule 4 (before any planning)."""
    if bool((s.min_served > 0).any()):
        footprint(s, strict=True)


def planning_fixed(s: Scenario) -> torch.Tensor | None:
    """(G, T) int64: what a policy plans around, `s.fixed` plus the guaranteed
    replicas (None when there is neither). Strict on a scenario planned from
    scratch, best effort around decided cells (online views)."""
    if not bool((s.min_served > 0).any()):
        return s.fixed
    return owner_of(footprint(s, strict=s.fixed is None))
