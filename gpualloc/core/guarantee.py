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

import copy

import numpy as np
import torch
from numba import njit

from gpualloc.core import owner_of, still_wanted, time_major
from gpualloc.core.classes import compatible_gpus
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
    owner = _fixed(s)
    _pack_guaranteed(s, owner, strict)
    s.__dict__[key] = owner
    return owner


def _pack_guaranteed(s: Scenario, owner: np.ndarray, strict: bool,
                     whole: np.ndarray | None = None) -> None:
    """Pack the guaranteed replicas `owner` (T, G) does not hold yet on its
    free cells (`footprint`'s order and search), writing them into it. The
    search of a step where first fit fails packs `whole` (J, T) there, every
    guaranteed cell freed (default: what `owner` wants now)."""
    lay = layout(s)
    need = still_guaranteed(s, owner)  # (J, T)
    whole = need if whole is None else whole
    jobs = packing_order(lay, [j for j in range(s.J) if not lay.rigid[j] and whole[j].any()])
    if jobs:
        guaranteed = np.zeros(lay.J + 1, dtype=np.bool_)  # IDLE: the spare last entry
        guaranteed[jobs] = True
        missing = pack_steps(lay, owner, owner == IDLE, jobs, need[jobs],
                             SEARCH_STEPS if strict else AIM_STEPS, whole[jobs], guaranteed)
        if strict and missing.any():
            t = int(np.flatnonzero(missing)[0])
            _name_the_short(s, owner, jobs, whole[jobs][:, t], t)


def pack_steps(lay, owner: np.ndarray, free: np.ndarray, jobs, need: np.ndarray, budget: int,
               whole: np.ndarray | None = None, held: np.ndarray | None = None) -> np.ndarray:
    """The guarantee's packing, at every step of `owner` (S, G), written into
    it: `need` (E, S) replicas of `jobs` (in packing_order) first fit on the
    highest `free` (S, G) blocks; where that leaves one out, the exhaustive
    search of the step's blocks packs `whole` (E, S; default `need`) there
    on the free cells and those of the jobs `held` ((J + 1,) bool, IDLE the
    last entry) marks, and first fit's packing stays where it finds none
    (or gives up after `budget` tries). The footprint packs every step so,
    and a reclaimed step its column. Returns (S,) the replicas still missing
    per step."""
    whole = need if whole is None else whole
    served = fill_elastic(lay, free.copy(), owner, jobs, need, high=True)  # (E, S)
    missing = np.maximum(need - served, 0).sum(0)  # (S,)
    short = np.flatnonzero(missing)
    if len(short):
        # First fit wrote only on free cells: the held ones are where they were.
        searchable = free[short] if held is None else free[short] | held[owner[short]]
        found = np.zeros(len(short), dtype=np.bool_)
        _settle_steps(owner, short.astype(np.int64), searchable,
                      np.asarray(jobs, dtype=np.int64),
                      np.ascontiguousarray(whole[:, short], dtype=np.int64),  # C: one compile
                      lay.gpus, lay.job_class, lay.class_ptr, lay.class_blocks, lay.pool_ok,
                      lay.gpu_pool, budget, found)
        missing[short[found]] = 0
    return missing


def packing_order(lay, services) -> list[int]:
    """`services` in the order their guaranteed replicas are packed, first
    fit on the highest free blocks: larger replicas first, then the services
    fewer GPUs can hold, then priority (highest first), then index. A
    service order (priority first) with the lowest blocks leaves replicas of
    a service bound to a few pools out where this order packs them all
    (measured online: a reclaimed step of `broad`, docs/results.md)."""
    services = [int(j) for j in services]
    compat = dict(zip(services, compatible_gpus(lay, services).tolist()))
    return sorted(services, key=lambda j: (-lay.gpus[j], compat[j], -lay.priority[j], j))


def footprint_after(s: Scenario, plan: torch.Tensor) -> np.ndarray | None:
    """(T, G) int64: a footprint (as `footprint`, strict) that keeps the
    guaranteed services' cells of `plan` ((G, T), made without rule 4) and
    packs the replicas it leaves short around them; None where some step's
    guarantee finds no packing that way."""
    owner = _fixed(s)
    whole = still_guaranteed(s, owner)  # (J, T) before any of the plan's cells
    planned = time_major(plan)
    lay = layout(s)
    guaranteed = np.append(~lay.rigid & (s.min_served.numpy() > 0), False)  # IDLE: spare entry
    keep = (owner == IDLE) & guaranteed[planned]
    owner[keep] = planned[keep]
    try:
        _pack_guaranteed(s, owner, strict=True, whole=whole)
    except GuaranteeError:
        return None
    return owner


def with_footprint(s: Scenario, owner: np.ndarray) -> Scenario:
    """A copy of `s` whose policies plan around the footprint `owner` (T, G;
    from footprint_after) instead of their own."""
    out = copy.copy(s)
    for key in ("_footprint", "_footprint_strict", "_empty_schedules"):
        out.__dict__.pop(key, None)
    out.__dict__["_footprint_strict"] = owner
    return out


def _name_the_short(s: Scenario, owner: np.ndarray, jobs: list[int], need: np.ndarray,
                    t: int) -> None:
    """Raise the GuaranteeError of step t, where no packing of the
    guaranteed replicas `need` (E,) of `jobs` was found: the services whose
    guarantees break Hall's condition, else the first service short."""
    lay = layout(s)
    guaranteed = np.zeros(lay.J + 1, dtype=np.bool_)  # IDLE: the spare last entry
    guaranteed[jobs] = True
    free = (owner[t] == IDLE) | guaranteed[owner[t]]
    alone = [j for j, n in zip(jobs, need.tolist())
             if n * int(lay.gpus[j]) > int((lay.compat(j) & free).sum())]
    if not alone:
        _name_the_broken_set(s, t, free, dict(zip(jobs, need.tolist())))
    short = alone[0] if alone else next(j for j, n in zip(jobs, need.tolist())
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


def _name_the_broken_set(s: Scenario, t: int, free: np.ndarray, replicas: dict) -> None:
    """Raise the GuaranteeError that names the services whose pools lie
    inside one of theirs (or are any pools) and whose guaranteed `replicas`
    at t need more GPUs than those pools have `free` (G,): Hall's condition,
    broken where it is tightest (no service breaks it alone). Return when
    none is broken: the blocks do not pack (_name_the_short names a service short)."""
    lay = layout(s)
    gpus = {j: int(n) * int(lay.gpus[j]) for j, n in replicas.items() if n > 0}
    broken = []
    for pools, by in [(lay.pool_ok[j], j) for j in gpus] + [(np.ones(lay.P, bool), None)]:
        inside = [j for j in gpus if not (lay.pool_ok[j] & ~pools).any()]
        room, wanted = int((free & pools[lay.gpu_pool]).sum()), sum(gpus[j] for j in inside)
        if wanted > room:
            broken.append((room, wanted - room, by, inside, pools))
    if not broken:
        return
    room, _, by, inside, pools = min(broken, key=lambda b: (b[0], -b[1]))
    inside.sort(key=lambda j: -gpus[j])
    by = inside[0] if by is None or pools.all() else by
    names = ", ".join(repr(s.jobs[j].id) for j in inside[:-1]) + f" and {s.jobs[inside[-1]].id!r}"
    where = ("the cluster" if pools.all() else "pool" + "s" * (int(pools.sum()) > 1) + " "
             + ", ".join(repr(s.pools[p].name) for p in np.flatnonzero(pools)))
    raise GuaranteeError(
        f"job {s.jobs[by].id!r}: rule 4 cannot be met at t={t}: the guarantees of {names} "
        f"({' + '.join(str(gpus[j]) for j in inside)} GPUs)"
        + ("" if pools.all() else f", which only {where} can hold,")
        + f" come to {sum(gpus[j] for j in inside)} GPUs and {where} "
        f"{'has' if pools.all() or int(pools.sum()) == 1 else 'have'} {room} free there "
        f"(lower min_served, or plan without it)")


@njit(cache=True)
def _settle_steps(owner, steps, searchable, jobs, need, gpus, job_class, class_ptr,
                  class_blocks, pool_ok, gpu_pool, budget, found):
    """At each step t = steps[i]: `need[:, i]` replicas of each of `jobs` (in
    packing_order) packed by `_place` on the `searchable[i]` cells (G,) of
    owner[t]; owner[t] rewritten there where a packing is found (found[i]),
    left as it is where not."""
    G = owner.shape[1]
    for i in range(steps.shape[0]):
        t = steps[i]
        free = searchable[i].copy()
        N = 0
        for e in range(jobs.shape[0]):
            N += need[e, i]
        replica = np.empty(N, dtype=np.int64)
        n = 0
        for e in range(jobs.shape[0]):
            for _ in range(need[e, i]):
                replica[n] = jobs[e]
                n += 1
        chosen = np.zeros(N, dtype=np.int64)
        if not _place(free, replica, gpus, job_class, class_ptr, class_blocks, pool_ok,
                      gpu_pool, budget, chosen):
            continue
        found[i] = True
        for g in range(G):
            if free[g]:
                owner[t, g] = -1
        for n in range(N):
            for g in range(chosen[n], chosen[n] + gpus[replica[n]]):
                owner[t, g] = replica[n]


def _search(lay, free: np.ndarray, replicas: list[int], budget: int) -> list[int] | None:
    """Blocks (first GPUs) for every replica inside the free GPUs, or None
    when there is none (or the search gave up after `budget` tries).
    `replicas`: in packing_order, a service's replicas together. The
    search of one column, as `pack_steps` runs it at a step; the tests ask
    it whether a column packs."""
    if not replicas:
        return []
    replica = np.asarray(replicas, dtype=np.int64)
    chosen = np.zeros(len(replicas), dtype=np.int64)
    if not _place(free, replica, lay.gpus, lay.job_class, lay.class_ptr,
                  lay.class_blocks, lay.pool_ok, lay.gpu_pool, budget, chosen):
        return None
    return chosen.tolist()


@njit(cache=True)
def _place(free, replica, gpus, job_class, class_ptr, class_blocks, pool_ok, gpu_pool,
           budget, chosen):
    """Blocks chosen[n] inside the `free` GPUs (G,) for every replica, of job
    replica[n] (in packing_order, a job's replicas together), each trying
    the highest blocks first as first fit does: a step the search packs
    keeps the replicas on the side the steps first fit packs keep them, so
    the GPUs left free line up from step to step for rigid blocks that run
    across them (a search from the lowest blocks split them: `broad`, 2.7%
    of online value under rule 4, docs/results.md). False when there is
    none or `_pack` gave up after `budget` tries.
    Replicas hold disjoint GPUs: more than a set of services' pools have
    free never pack (Hall's condition, below). Online, around committed
    cells, that is nearly every search, and each would spend its whole
    budget."""
    N, G = replica.shape[0], free.shape[0]
    free_cs = np.zeros(G + 1, dtype=np.int64)  # free GPUs below each
    for g in range(G):
        free_cs[g + 1] = free_cs[g] + free[g]
    # Each replica's candidates (its class's blocks whose GPUs are all
    # free), a slice of one array.
    bounds = np.zeros(N + 1, dtype=np.int64)
    for n in range(N):
        j = replica[n]
        k, c = gpus[j], job_class[j]
        count = 0
        for x in range(class_ptr[c], class_ptr[c + 1]):
            b = class_blocks[x]
            count += free_cs[b + k] - free_cs[b] == k
        bounds[n + 1] = bounds[n] + count
    flat = np.empty(bounds[N], dtype=np.int64)
    sizes = np.empty(N, dtype=np.int64)
    same = np.zeros(N, dtype=np.bool_)
    for n in range(N):
        j = replica[n]
        k, c = gpus[j], job_class[j]
        sizes[n] = k
        same[n] = n > 0 and replica[n - 1] == j
        y = bounds[n]
        for x in range(class_ptr[c + 1] - 1, class_ptr[c] - 1, -1):  # the highest first
            b = class_blocks[x]
            if free_cs[b + k] - free_cs[b] == k:
                flat[y] = b
                y += 1
    # Hall's condition on the pool sets of the jobs (and on all pools): the
    # replicas after n whose pools lie inside a job's need no more GPUs than
    # that job's pools have free. Checked after each placement, it cuts the
    # branches that fill a few pools' GPUs with replicas that fit anywhere.
    P = pool_ok.shape[1]
    group = np.zeros(N, dtype=np.int64)  # each replica's job, as a row of `sets`
    U = 0
    for n in range(N):
        if n > 0 and replica[n] != replica[n - 1]:
            U += 1
        group[n] = U
    U = U + 1 if N else 0
    sets = np.ones((U + 1, P), dtype=np.bool_)  # the last row: every pool
    for n in range(N):
        for p in range(P):
            sets[group[n], p] = pool_ok[replica[n], p]
    inside = np.zeros((U + 1, U + 1), dtype=np.bool_)  # inside[u, v]: u's pools in v's
    for u in range(U + 1):
        for v in range(U + 1):
            ok = True
            for p in range(P):
                if sets[u, p] and not sets[v, p]:
                    ok = False
                    break
            inside[u, v] = ok
    need = np.zeros((N + 1, U + 1), dtype=np.int64)  # need[n, v]: replicas n.. inside v
    for n in range(N - 1, -1, -1):
        for v in range(U + 1):
            need[n, v] = need[n + 1, v] + (sizes[n] if inside[group[n], v] else 0)
    room = np.zeros(U + 1, dtype=np.int64)  # free GPUs in each set's pools
    for g in range(G):
        if free[g]:
            for v in range(U + 1):
                room[v] += sets[v, gpu_pool[g]]
    for v in range(U + 1):
        if need[0, v] > room[v]:
            return False
    taken = ~free
    return _pack(sizes, same, bounds, flat, taken, budget, chosen, sets, need, room, gpu_pool)


@njit(cache=True)
def _pack(sizes, same, bounds, flat, taken, budget, chosen, sets, need, room, gpu_pool):
    """Depth-first: replica n (of sizes[n] GPUs) tries the blocks
    flat[bounds[n]:bounds[n + 1]] in order, skipping those before the block
    after its previous replica's where both are of one job (`same`), and
    those after which the replicas left fail Hall's condition: need[n + 1, v]
    GPUs in set v's pools (`sets`, (V, P)) against room[v] free there. Each
    block tried counts against `budget`. Writes chosen[n]; returns whether
    every replica is placed. taken: (G,) bool, the GPUs not free (updated)."""
    N = sizes.shape[0]
    if N == 0:
        return True
    V = room.shape[0]
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
            p = gpu_pool[b]
            fits = True
            for v in range(V):
                if need[n + 1, v] > room[v] - (k if sets[v, p] else 0):
                    fits = False
                    break
            if not fits:
                continue
            for v in range(V):
                if sets[v, p]:
                    room[v] -= k
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
        p = gpu_pool[chosen[n]]
        for v in range(V):
            if sets[v, p]:
                room[v] += sizes[n]


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
    # Packed once per scenario and fixed cells (online, greedy's cuts and the
    # allocator plan the same view at each replan); callers only read it.
    packed = s.__dict__.get("_planning_fixed")
    if packed is None or packed[0] is not s.fixed:
        grid = owner_of(footprint(s, strict=s.fixed is None))
        packed = s.__dict__["_planning_fixed"] = (s.fixed, grid)
    return packed[1]
