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
from numba import njit

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
    if not replicas:
        return []
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
    free_cs = np.concatenate([[0], np.cumsum(free)])  # (G + 1,) free GPUs below each
    cand = {}  # job -> (B,) its blocks whose GPUs are all free, in order
    for j in jobs.tolist():
        b, k = lay.blocks(j), int(lay.gpus[j])
        cand[j] = b[free_cs[b + k] - free_cs[b] == k]
    # The packing in `order`, each replica's candidates a slice of one array.
    job = [replicas[i] for i in order]
    sizes = lay.gpus[job].astype(np.int64)
    same = np.array([n > 0 and job[n - 1] == j for n, j in enumerate(job)], dtype=np.bool_)
    bounds = np.cumsum([0] + [len(cand[j]) for j in job]).astype(np.int64)
    flat = np.concatenate([cand[j] for j in job]).astype(np.int64)
    chosen = np.zeros(len(job), dtype=np.int64)
    if not _pack(sizes, same, bounds, flat, ~free, budget, chosen):
        return None
    out = [0] * len(replicas)
    for n, i in enumerate(order):
        out[i] = int(chosen[n])
    return out


@njit(cache=True)
def _pack(sizes, same, bounds, flat, taken, budget, chosen):
    """Depth-first: replica n (of sizes[n] GPUs) tries the blocks
    flat[bounds[n]:bounds[n + 1]] in order, skipping those before the block
    after its previous replica's where both are of one job (`same`); each
    block tried counts against `budget`. Writes chosen[n]; returns whether
    every replica is placed. taken: (G,) bool, the GPUs not free (updated)."""
    N = sizes.shape[0]
    if N == 0:
        return True
    nxt = np.zeros(N, dtype=np.int64)  # the next candidate to try, per replica
    lo = np.zeros(N, dtype=np.int64)  # same job as the one before: no candidate below
    steps = 0
    n = 0
    while True:
        k, first = sizes[n], bounds[n]
        x = nxt[n]
        placed = False
        while first + x < bounds[n + 1]:
            if same[n] and x < lo[n]:
                x += 1
                continue
            steps += 1
            if steps > budget:
                return False
            b = flat[first + x]
            x += 1
            clear = True
            for g in range(b, b + k):
                if taken[g]:
                    clear = False
                    break
            if not clear:
                continue
            for g in range(b, b + k):
                taken[g] = True
            chosen[n] = b
            nxt[n] = x
            placed = True
            break
        if placed:
            if n + 1 == N:
                return True
            n += 1
            nxt[n] = 0
            lo[n] = x
            continue
        if n == 0:
            return False
        n -= 1  # back: free the previous replica's block, try its next
        for g in range(chosen[n], chosen[n] + sizes[n]):
            taken[g] = False


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
