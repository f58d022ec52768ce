"""Greedy priority backfilling: what a careful Slurm or Kueue operator runs today.

At each timestep t:
- Rigid jobs that have arrived are scanned in priority order (ties: arrival,
  then scenario order). A job starts on a free block, best fit, if the known
  elastic demand over its whole run still fits beside it (demand-aware),
  tested against the elastic *footprint* (gpualloc.core.footprint): a block
  that avoids it leaves the service untouched; for the first few blocked
  jobs, a block on it is re-packed exactly: no loss, it starts.
- Displacement (GreedyConfig.displace): a job the demand would keep waiting
  may still take such a block when its value net of the service it displaces
  beats its value at its earliest demand-safe start (0 if none; when the
  other waiting jobs could fill the free GPUs, only a job with no such start
  displaces): else a job as large as the cluster never runs.
- Preemption (GreedyConfig.preempt, scenarios with preemptible jobs): a job
  that cannot start may evict running preemptible jobs of strictly lower
  priority when that frees a block for it now (Kueue and KAI's priority
  preemption); the victims cost the least priority x GPUs among such blocks.
  A victim must have more than its restart cost still to run (else waiting
  for it is cheaper than restoring it). Evicted jobs requeue; their next
  segment restores first (gpualloc.core.occupancy).
- EASY backfilling: the first job that cannot start reserves the earliest
  (time, block) at which it could; later jobs start only if they do not
  overlap that reservation (which the footprint also avoids).
- Elastic demand is then served at t, highest priority first (ties: arrival,
  then scenario order), on the GPUs left free, best fit: prefer GPUs that
  fewer still-unserved elastic jobs can use, then the shortest free run in a
  node (or the footprint's packing at t, if that serves more). Deciding rigid
  starts first is what keeps replicas off the blocks of rigid jobs starting
  now: a rigid job only starts when the elastic demand at t still fits beside
  it (or is worth displacing), so elastic work is served first either way.

Rigid best fit: the block whose pools the least work wants over the job's
run (fit_ahead: gpualloc.core.PoolDemand; else the fewest waiting jobs),
then the node left with the fewest free GPUs, the shortest run of whole free
nodes (kept for gangs), the shortest free run, the lowest index.

Jobs in `Scenario.fixed` are done or running: rigid ones are not scheduled
again; elastic ones are served on top of the replicas their fixed cells hold.

What is greedy's own: the order, the fit key, the footprint guard and the
elastic best fit. Occupancy, block searches, the EASY reservation and the
footprint's packing are the placement core's (gpualloc.core).
"""
from __future__ import annotations

from bisect import bisect_left

import numpy as np
import torch
from numba import njit

from gpualloc.config import GreedyConfig
from gpualloc.core import (PoolDemand, fixed_jobs, ideal_throughput, owner_of, priority_order,
                           service_order, still_wanted, time_major)
from gpualloc.core import blocks as kb
from gpualloc.core.blocks import runs_in_nodes
from gpualloc.core.classes import serve_steps
from gpualloc.core.guarantee import planning_fixed
from gpualloc.core.easy import easy_pass
from gpualloc.core.footprint import EPS, Footprint, worth_displacing
from gpualloc.core.layout import layout
from gpualloc.core.occupancy import Occupancy
from gpualloc.core.segments import cuts_in
from gpualloc.objective import weighted_throughput
from gpualloc.plan import Plan
from gpualloc.scenario import Scenario


def greedy(s: Scenario, cfg: GreedyConfig | None = None,
           device: torch.device | str = "cpu", rivals: dict | None = None,
           window: int | None = None) -> Plan:
    """Greedy's plan of `s` (the placement core runs on the CPU whatever `device`
    says); with `cfg.variants`, the plain EASY backfill's too (`rivals`, from
    the registry: gpualloc.policies.rivals), the better kept. With `window`
    (online), steps from there on may be left unplanned."""
    cfg = cfg or GreedyConfig()
    plain = rivals.get("backfill") if cfg.variants and rivals else None
    if plain is None:
        return _Greedy(s, cfg).run(window)
    # Greedy decides each step from the steps before it: a window's plan is
    # the first steps of the whole one. The variants are weighed over whole
    # plans; online, at a full replan, and that choice is carried to the
    # light replans after it (Scenario.carry).
    variant = (s.carry or {}).get("greedy_variant") if window is not None else None
    if variant == "backfill":
        other = plain(s, window=window)
        plan = Plan(owner=other.owner, info={**other.info, "variant": "backfill"})
    elif variant == "greedy":
        plan = _Greedy(s, cfg).run(window)
    else:
        plan, variant = _better(s, _Greedy(s, cfg).run(), plain)
    if window is not None:
        plan.info["carry"] = {"greedy_variant": variant}
    return plan


def _better(s: Scenario, plan: Plan, plain) -> tuple[Plan, str]:
    """Greedy's own whole `plan` or the plain backfill's, the better kept
    (ties: greedy's), and which."""
    own = weighted_throughput(s, plan.owner)
    if own >= ideal_throughput(s):  # no plan is better: the backfill's is not made
        return plan, "greedy"
    other = plain(s)
    if weighted_throughput(s, other.owner) > own:
        return Plan(owner=other.owner, info={**plan.info, "variant": "backfill"}), "backfill"
    return plan, "greedy"


def running_cuts(s: Scenario, cfg: GreedyConfig) -> dict[int, int]:
    """The running jobs (in `s.fixed`) that greedy's own way (its priority
    preemption, not the plain backfill variant) cuts in its plan of `s`, and
    the step each is cut at (core.segments.cuts_in). Cuts fall inside the
    running segments, and a running job is cut by a waiting one of higher
    priority (preempt_for): greedy plans those steps only, and only while a
    waiting job outranks a victim still running, and only inside the
    window of `s` (Scenario.window, when set: online, the steps the replan
    commits; the next replan asks again about the steps after them).
    Online, the allocator asks this at every replan with preemptible jobs,
    and weighs the cuts by its own objective; whether greedy's whole plan
    would keep its own way is not asked (measured: the same value, less
    time; docs/results.md)."""
    if s.fixed is None or not cfg.preempt:
        return {}
    fixed, priority = fixed_jobs(s), s.priority.numpy()
    waiting = s.rigid.numpy() & ~s.unplaceable.numpy() & ~fixed
    if not waiting.any():
        return {}
    victims = np.zeros(s.J + 1, dtype=np.bool_)  # IDLE: the spare last entry
    victims[:-1] = fixed & s.preemptible.numpy() & (priority < priority[waiting].max())
    fixed_cells = s.fixed.numpy()
    held = victims[fixed_cells]  # (G, T) cells such a job holds
    if not held.any():
        return {}
    # A cut needs a waiting job above a victim still running. The queue's top
    # priority never rises (an eviction queues a job below the evictor), and
    # victims only end: once none running after t is below it, no step cuts.
    ends = np.full(s.J + 1, -1, dtype=np.int64)
    gpu, step = np.nonzero(held)
    np.maximum.at(ends, fixed_cells[gpu, step], step)  # each victim's last held step
    victim = np.flatnonzero(victims)
    planner = _Greedy(s, cfg)
    last = int(ends.max()) + 1 if s.window is None else min(int(ends.max()) + 1, s.window)
    for t in range(last):
        planner.advance(t + 1)
        queue = planner.queue
        if not queue or not ((priority[victim] < priority[queue[0]]) & (ends[victim] > t)).any():
            break
    return cuts_in(s, planner.run(planner.now).owner)

# ---- greedy's own fit key, compiled ---------------------------------------------------------

@njit(cache=True)
def _fit_keys(free, cand, k, want_cs, gpu_node, node_first, node_end, node_pool, pool_gpn, out):
    """Best-fit key of each candidate block (lower is better): GPUs the fewest
    waiting jobs want, node left with the fewest free GPUs, shortest run of
    whole free nodes, shortest free run, lowest index. free: (G,) bool."""
    G, N = free.shape[0], node_first.shape[0]
    node_free = np.zeros(N, dtype=np.int64)
    for g in range(G):
        if free[g]:
            node_free[gpu_node[g]] += 1
    # Runs of whole free nodes inside a pool.
    node_run = np.zeros(N, dtype=np.int64)
    n = 0
    while n < N:
        if node_free[n] != pool_gpn[node_pool[n]]:
            n += 1
            continue
        a = n
        while n < N and node_free[n] == pool_gpn[node_pool[n]] and node_pool[n] == node_pool[a]:
            n += 1
        for x in range(a, n):
            node_run[x] = n - a
    run = np.zeros(G, dtype=np.int64)
    runs_in_nodes(free, gpu_node, node_first, node_end, run)
    W = G + 1
    cap = (2 ** 62) // (W * W * W * W)  # the first term's room in an int64 key
    for i in range(cand.shape[0]):
        b = cand[i]
        node = gpu_node[b]
        left = max(node_free[node] - k, 0)
        scarce = min(want_cs[b + k] - want_cs[b], cap)
        key = (scarce * W + left) * W + min(node_run[node], G)
        out[i] = (key * W + min(run[b], G)) * W + b


@njit(cache=True)
def _excess(busy_gpus, used, t, end, k, G):
    """Elastic GPUs in use over [t, end) beyond the free GPUs left beside a
    new block of k (busy_gpus, used: (T,) per step), summed."""
    out = 0
    for x in range(t, end):
        out += max(used[x] - (G - busy_gpus[x] - k), 0)
    return out


# ---- the policy ----------------------------------------------------------------------------

class _Greedy:
    def __init__(self, s: Scenario, cfg: GreedyConfig):
        self.s, self.cfg = s, cfg
        lay = self.lay = layout(s)
        T, G = lay.T, lay.G
        if s.fixed is not None and tuple(s.fixed.shape) != (G, T):
            raise ValueError(f"scenario.fixed is {tuple(s.fixed.shape)}, the scenario needs "
                             f"({G}, {T})")
        fixed = planning_fixed(s)  # decided cells and guaranteed replicas
        fixed = None if fixed is None else time_major(fixed)
        # hard: fixed cells, started rigid jobs and the EASY reservation.
        self.hard = Occupancy(lay, fixed, cuttable=cfg.preempt)
        self.length = self.hard.length  # steps j's next segment runs from t
        self.owner = self.hard.owner_grid()  # (T, G) the plan: fixed cells, then what starts
        in_fixed = fixed_jobs(s)
        need = self.need = still_wanted(s, fixed)  # (J, T) once the fixed cells serve theirs
        order = priority_order(s)
        self.rank = {j: i for i, j in enumerate(order)}
        self.preempt = cfg.preempt and bool(lay.preemptible.any())
        self.evictions = 0
        ok = ~lay.unplaceable
        self.elastic = [j for j in service_order(s) if need[j].any()]
        self.queue = [j for j in order if lay.rigid[j] and ok[j] and not in_fixed[j]]
        self.el = np.array(self.elastic, dtype=np.int64)
        self.weight = lay.priority * lay.gpus
        self.weight_of = self.weight.tolist()  # a list: read per waiting job per step
        self.priority_of = lay.priority.tolist()
        self.min_el_priority = min((float(lay.priority[e]) for e in self.elastic), default=0.0)
        # The elastic footprint and the grid a new rigid job must avoid (core).
        self.foot = Footprint(lay, self.hard, self.elastic, need, cfg.demand_aware,
                              cfg.type_aware)
        self.demand = PoolDemand(lay, self.elastic, need)
        # Answers shared by the many jobs of one pass (issue 26: thousands wait
        # at 4,096 GPUs): the fit key's demand by (t, end) until the queue
        # changes; the longest free run of a class's blocks until its grid does.
        self.cached_cs: dict[tuple[int, int], np.ndarray] = {}
        self.queued = None  # self.queue as an int64 array, rebuilt when it changes
        self.longest: dict[tuple[bool, int, int], tuple[int, int]] = {}
        # Per pass, while the grids stay as they are: _excess by (t, end, k), and
        # whether a class has a demand-safe start for n steps after t.
        self.excess_at: dict[tuple[int, int, int], int] = {}
        self.excess_version = (-1, -1)
        self.safe_later: dict[tuple[int, int, int], bool] = {}
        self.safe_version = -1
        self.arrival = lay.arrival.tolist()  # a list: read per waiting job per step
        self.now = 0  # the next step `run` plans: a window's run may go on to the rest
        self.waited = False  # a job waited at a step: its reservation looks past its run
        self.waiting_gpus = self.free_now = 0  # set per timestep by schedule_rigid

    # ---- rigid jobs -------------------------------------------------------------------
    def want_cs(self, waiting: list[int], j: int | None = None, t: int = 0) -> np.ndarray:
        """(G + 1,) int64 prefix sums of the work that may want each GPU: with
        fit_ahead, over j's run from t (core.PoolDemand); else how many
        waiting rigid jobs and services can use it."""
        lay = self.lay
        if j is not None and self.cfg.fit_ahead:
            # Jobs of one length share it: computed once per (t, end) until the queue changes.
            end = t + self.length(j, t)
            cs = self.cached_cs.get((t, end))
            if cs is not None:
                return cs
            if self.queued is None:
                self.queued = np.array(self.queue, dtype=np.int64)
            per_pool = self.demand(self.queued, t, end)
            cs = self.cached_cs[(t, end)] = np.concatenate(
                [[0], np.cumsum(per_pool[lay.gpu_pool])]).astype(np.int64)
            return cs
        per_pool = lay.pool_ok[waiting + self.elastic].sum(0, dtype=np.int64)  # (P,)
        return np.concatenate([[0], np.cumsum(per_pool[lay.gpu_pool])]).astype(np.int64)

    def queue_changed(self) -> None:
        self.queued = None
        self.cached_cs.clear()

    def fit_key(self, j: int, cand: np.ndarray, free_t: np.ndarray,
                want_cs: np.ndarray) -> np.ndarray:
        lay = self.lay
        out = np.zeros(len(cand), dtype=np.int64)
        _fit_keys(free_t, cand, int(lay.gpus[j]), want_cs, lay.gpu_node, lay.node_first,
                  lay.node_end, lay.node_pool, lay.pool_gpn, out)
        return out

    def free_blocks(self, run: np.ndarray, j: int, t: int) -> np.ndarray:
        """(B,) bool: j's blocks free in `run` for its run from t."""
        return self.hard.free_at(j, t, run=run)

    def fits(self, j: int, t: int, beside_footprint: bool) -> bool:
        """Whether some block of j is free for its run from t: beside the
        footprint (its grid refreshed) or of the hard cells only. Exactly
        free_blocks(...).any()."""
        return self.length(j, t) <= self.longest_free(j, t, beside_footprint)

    def longest_free(self, j: int, t: int, beside_footprint: bool) -> int:
        """The longest free run from t of a block of j's class, kept until
        that grid changes."""
        lay = self.lay
        return self.longest_of(int(lay.job_class[j]), int(lay.gpus[j]), t, beside_footprint)

    def longest_of(self, c: int, k: int, t: int, beside_footprint: bool) -> int:
        """longest_free for a job of class c (of k GPUs)."""
        grid = self.foot if beside_footprint else self.hard
        key = (beside_footprint, c, t)
        hit = self.longest.get(key)
        if hit is None or hit[0] != grid.version:
            lay = self.lay
            blocks = lay.class_blocks[lay.class_ptr[c]:lay.class_ptr[c + 1]]
            hit = self.longest[key] = (grid.version, int(kb.longest_free(
                grid.run, blocks, k, t)))
        return hit[1]

    def start(self, j: int, g: int, t: int) -> None:
        k, end = int(self.lay.gpus[j]), t + self.length(j, t)
        self.hard.place(j, t, g)
        self.owner[t:end, g:g + k] = j
        self.foot.placed(t, end, g, k)

    def value(self, j: int, t: int) -> float:
        """Weighted throughput of rigid job j started at t (cut by the horizon;
        after its restore, for a resumed one)."""
        return float(self.weight[j]) * max(self.length(j, t) - self.hard.restoring(j), 0)

    def earliest(self, j: int, t: int, run: np.ndarray):
        """Earliest start > t at which some block of j is free in `run`:
        (start, (B,) bool free blocks) or None."""
        if t + 1 >= self.lay.T:
            return None
        t0, out = self.hard.earliest(j, t + 1, run=run)
        return None if out is None else (t0, out)

    def displacing(self, j: int, t: int, want, later):
        """Best block to start j at t on, among the free blocks that overlap the
        elastic footprint: a block where the elastic demand re-packs without
        loss, else (displace) the one with the highest value net of the
        displaced elastic service, if that beats later() (what waiting for a
        demand-safe start would give; computed only when needed); `want()`:
        the fit key's demand. Returns the block or None."""
        lay, cfg = self.lay, self.cfg
        k, end = int(lay.gpus[j]), t + self.length(j, t)
        if not self.fits(j, t, beside_footprint=False):
            return None
        # A lower bound on the loss first: at each step the elastic GPUs in use
        # must fit in the free GPUs minus this job's; any excess is lost, at
        # the lowest elastic priority per GPU at least. Skips hopeless re-packs.
        excess = self.excess(t, end, k)
        if excess > 0:
            if not cfg.displace:
                return None
            if not worth_displacing(self.value(j, t) - self.min_el_priority * float(excess), later):
                return None
        cand = lay.blocks(j)[self.free_blocks(self.hard.run, j, t)]
        key = self.fit_key(j, cand, ~self.hard.busy[t], want())
        cand = cand[np.argsort(key, kind="stable")[: cfg.repack_blocks]]  # best fit first
        loss = self.foot.loss(t, end, k, cand, until_free=True)
        if (loss <= EPS).any():
            return int(cand[np.nonzero(loss <= EPS)[0][0]])
        if not cfg.displace:
            return None
        net = self.value(j, t) - loss
        i = int(np.argmax(net))
        return int(cand[i]) if worth_displacing(float(net[i]), later) else None

    def excess(self, t: int, end: int, k: int) -> int:
        """_excess of a block of k over [t, end), kept while both grids stay."""
        version = (self.hard.version, self.foot.version)
        if version != self.excess_version:
            self.excess_at.clear()
            self.excess_version = version
        out = self.excess_at.get((t, end, k))
        if out is None:
            out = self.excess_at[(t, end, k)] = int(_excess(self.hard.busy_gpus, self.foot.used, t,
                                                         end, k, self.lay.G))
        return out

    def waits_free(self, j: int, t: int) -> bool:
        """Waiting costs j nothing: the other waiting jobs would fill the free
        GPUs and j has a demand-safe start later (later_value is infinite)."""
        return self.waiting_gpus - int(self.lay.gpus[j]) >= self.free_now and self.safe_after(j, t)

    def later_value(self, j: int, t: int) -> float:
        """What j gets if it waits for its earliest demand-safe start after t."""
        if self.waiting_gpus - int(self.lay.gpus[j]) >= self.free_now:
            # wait_value's bar is infinite whenever j has a demand-safe start:
            # whether it has one is enough (and the latest starts say it first).
            return float("inf") if self.safe_after(j, t) else 0.0
        e = self.earliest(j, t, self.foot.run)
        return self.wait_value(j, None if e is None else e[0])

    def safe_after(self, j: int, t: int) -> bool:
        """Whether j has a demand-safe start after t (jobs of one class and
        length share the answer while the footprint's grid stays)."""
        lay = self.lay
        if t + 1 >= lay.T:
            return False
        if self.safe_version != self.foot.version:
            self.safe_later.clear()
            self.safe_version = self.foot.version
        steps = self.hard.steps(j)
        key = (int(lay.job_class[j]), steps, t)
        out = self.safe_later.get(key)
        if out is None:
            out = self.safe_later[key] = bool(kb.any_start(
                self.foot.run, lay.blocks(j), int(lay.gpus[j]), steps, t + 1, lay.T))
        return out

    def wait_value(self, j: int, t_safe: int | None) -> float:
        """The value displacing must beat: j's value at its earliest demand-safe
        start; 0 when it has none. When the other waiting jobs could fill the
        free GPUs anyway, the GPUs j leaves would not idle: only a job with no
        demand-safe start displaces then (infinite bar otherwise)."""
        if t_safe is None:
            return 0.0
        if self.waiting_gpus - int(self.lay.gpus[j]) >= self.free_now:
            return float("inf")
        return self.value(j, t_safe)

    def start_beside(self, j: int, t: int, want) -> None:
        """Start j at t on its best-fit block beside the footprint (one is
        free: fits(j, t, True)). `want()`: the fit key's demand."""
        cand = self.lay.blocks(j)[self.free_blocks(self.foot.run, j, t)]
        key = self.fit_key(j, cand, ~self.foot.avoid[t], want())
        self.start(j, int(cand[np.argmin(key)]), t)

    def reserve(self, j: int, t: int, want, allow_repack: bool) -> bool:
        """EASY: reserve the earliest (time > t, block) at which j could start:
        beside the started jobs and the elastic footprint, or earlier on a
        block the elastic demand re-packs around (or, displacing, gives up)."""
        self.foot.refresh(t)
        safe = self.earliest(j, t, self.foot.run)
        hard = (self.earliest(j, t, self.hard.run) if allow_repack and self.cfg.demand_aware
                else None)
        if hard is not None and (safe is None or hard[0] < safe[0]):
            tr = hard[0]
            later = self.wait_value(j, None if safe is None else safe[0])
            # displacing() looks at t = tr: its free blocks come from the hard grid.
            g = self.displacing(j, tr, want, lambda: later)
            if g is not None:
                return self._hold(j, g, tr)
        if safe is None:
            return False
        tr, clear = safe
        cand = self.lay.blocks(j)[clear]
        g = int(cand[np.argmin(self.fit_key(j, cand, ~self.foot.avoid[tr], want()))])
        return self._hold(j, g, tr)

    def preempt_for(self, j: int, t: int) -> bool:
        """Start j at t on a block freed by evicting running preemptible jobs
        of lower priority (the cheapest victims); False if there is none."""
        lay, hard = self.lay, self.hard
        below = self.priority_of[j]
        victims = [r for r in self.evictable if self.priority_of[r] < below]
        if not victims:
            return False
        self.foot.refresh(t)
        best, best_victims = hard.cheapest_eviction(j, t, victims, self.weight, self.foot.avoid)
        restore = sum(float(self.weight[r]) * int(lay.restart_cost[r]) for r in best_victims)
        if best < 0 or self.value(j, t) <= restore:
            return False
        for r in best_victims:
            start, first = int(hard.start[r]), int(hard.first[r])
            end, kr = start + self.length(r, start), int(lay.gpus[r])
            hard.cut(r, t)
            self.owner[t:end, first:first + kr] = -1
            self.foot.freed(t, end, first, kr)
            self.queue.append(r)
            self.evictable.remove(r)
            self.evictions += 1
        self.queue.sort(key=self.rank.__getitem__)
        self.queue_changed()
        self.start(j, best, t)
        return True

    def _hold(self, j: int, g: int, tr: int) -> bool:
        k, end = int(self.lay.gpus[j]), tr + self.length(j, tr)
        self.hard.hold(tr, end, g, k)
        self.foot.placed(tr, end, g, k)
        return True

    def schedule_rigid(self, t: int) -> None:
        lay = self.lay
        waiting = [j for j in self.queue if self.arrival[j] <= t]
        self.waiting_gpus = int(lay.gpus[waiting].sum()) if waiting else 0
        self.free_now = int((~self.hard.busy_unheld(t)).sum())
        if not waiting:
            return
        held = self.hard.release()
        if held is not None:  # the last timestep's reservation is recomputed from scratch
            start, end, first, k = held
            self.foot.freed(start, end, first, k)
        self.foot.refresh(t)
        self.longest.clear()
        want_cs_now = None if self.cfg.fit_ahead else self.want_cs(waiting)
        # Which jobs have a footprint-free block now (or one free of hard cells):
        # one scan per class and grid.
        jobs = np.array(waiting, dtype=np.int64)
        lengths = self.hard.lengths(jobs, t)  # (W,)
        classes, first = np.unique(lay.job_class[jobs], return_index=True)
        at = np.searchsorted(classes, lay.job_class[jobs])  # (W,) each job's class, 0..C-1
        reps = jobs[first].tolist()  # a job of each class
        foot_run = np.array([self.longest_free(r, t, True) for r in reps], dtype=np.int64)
        hard_run = np.array([self.longest_free(r, t, False) for r in reps], dtype=np.int64)
        maybe = dict(zip(waiting, (lengths <= foot_run[at]).tolist()))
        maybe_hard = dict(zip(waiting, (lengths <= hard_run[at]).tolist()))
        # Most of thousands of waiting jobs fit nowhere: answered from the
        # class's longest free run without a call per grid.
        length = dict(zip(waiting, lengths.tolist()))
        cls = dict(zip(waiting, lay.job_class[jobs].tolist()))
        size = dict(zip(waiting, lay.gpus[jobs].tolist()))
        foot, repacks_before = self.foot, self.foot.repacks
        demand_aware = self.cfg.demand_aware
        if self.preempt:
            # Victims: preemptible jobs that started before t, run at t and
            # have more left than their restore; one list per step (only an
            # eviction changes it).
            running = self.hard.running(t)
            running = running[lay.preemptible[running]]
            starts = self.hard.start[running]
            left = starts + self.hard.lengths(running, starts) - t
            self.evictable = running[left > lay.restart_cost[running]].tolist()

        def want(j: int):
            """The fit key's demand for j, computed when first asked."""
            if not self.cfg.fit_ahead:
                return lambda: want_cs_now
            return lambda: self.want_cs(waiting, j, t)

        def beside(j: int) -> bool:  # a block free beside the footprint (refreshed)
            if foot.any_stale:
                foot.refresh(t)
            return length[j] <= self.longest_of(cls[j], size[j], t, True)

        # Whether j starts is a function of its class, steps, priority (and
        # the restore of a resumed job) and of the grids: a job like one that
        # could not start, with the grids unchanged since, cannot either.
        steps = dict(zip(waiting, self.hard.steps_of(jobs).tolist()))
        weight = self.weight_of
        restoring = dict(zip(waiting, self.hard.restorings(jobs).tolist()))
        stuck: set = set()
        stuck_at = None

        def start(j: int) -> bool:
            nonlocal stuck_at
            if foot.any_stale:
                foot.refresh(t)
            state = (self.hard.version, foot.version, foot.repacks)
            if state != stuck_at:
                stuck.clear()
                stuck_at = state
            like = (cls[j], length[j], steps[j], weight[j], restoring[j])
            if like in stuck:
                return False
            if try_start(j):
                return True
            if state == (self.hard.version, foot.version, foot.repacks):
                stuck.add(like)
            return False

        def try_start(j: int) -> bool:
            if maybe[j] and beside(j):
                self.start_beside(j, t, want(j))
                return True
            if maybe_hard[j] and foot.repacks - repacks_before < self.cfg.repack_jobs:
                if beside(j):
                    self.start_beside(j, t, want(j))
                    return True
                # Every free block overlaps the footprint: re-pack the elastic
                # demand without it (and weigh what it would displace).
                if (demand_aware and length[j] <= self.longest_of(cls[j], size[j], t, False)
                        and not hopeless(j)):
                    g = self.displacing(j, t, want(j), lambda: self.later_value(j, t))
                    if g is not None:
                        self.start(j, g, t)
                        return True
            return self.preempt and self.preempt_for(j, t)

        def hopeless(j: int) -> bool:
            """displacing() would refuse j on its lower bound: the demand
            spills (the excess) and j may not displace, or waiting has no
            cost (a demand-safe start later, the free GPUs wanted anyway)."""
            if self.excess(t, t + length[j], size[j]) <= 0:
                return False
            return not self.cfg.displace or self.waits_free(j, t)

        held = not self.cfg.reservation

        def reserve(j: int) -> bool:
            nonlocal held
            held = self.reserve(j, t, want(j),
                                self.foot.repacks - repacks_before < self.cfg.repack_jobs)
            return held

        # Once a reservation is held, a job with no free block at the pass's
        # start (in either grid, which only fill) and nothing to preempt
        # cannot start; once the pass's re-pack checks are spent, only one
        # with a block free beside the footprint can. The others are passed
        # over without a call each (issues 26, 28).
        may = None if self.preempt else [i for i, j in enumerate(waiting)
                                         if maybe[j] or maybe_hard[j]]
        may_beside = [i for i, j in enumerate(waiting) if maybe[j]]

        def tries():
            for i, j in enumerate(waiting):
                if held and may is not None:
                    break
                yield j
            else:
                return
            for x in may[bisect_left(may, i):]:
                if foot.repacks - repacks_before >= self.cfg.repack_jobs:
                    yield from beside_only(may_beside[bisect_left(may_beside, x):])
                    break
                yield waiting[x]
            if foot.any_stale:  # as the first job passed over would have
                foot.refresh(t)

        def beside_only(rest: list[int]):
            """The jobs waiting[rest] that beside() lets start, in order: with
            the grids unchanged between starts, one comparison per pick."""
            rest = np.array(rest, dtype=np.int64)
            need, of = lengths[rest], at[rest]  # (R,) steps, class index
            p = 0
            while p < len(rest):
                if foot.any_stale:
                    foot.refresh(t)
                room = np.array([self.longest_of(int(c), size[r], t, True)
                                 for c, r in zip(classes.tolist(), reps)], dtype=np.int64)
                hit = np.flatnonzero(need[p:] <= room[of[p:]])
                if not len(hit):
                    return
                p += int(hit[0])
                yield waiting[int(rest[p])]
                p += 1

        started = set(easy_pass(tries(), start, reserve, held=held))
        self.waited |= len(started) < len(waiting)
        if started:
            self.queue = [j for j in self.queue if j not in started]
            self.queue_changed()

    # ---- elastic service ----------------------------------------------------------------------
    def serve_elastic(self, lo: int, hi: int) -> None:
        """Real-time service at steps lo..hi-1, once their rigid decisions are
        made: a step's rigid cells are final after its own decisions (later
        ones start, hold and cut from later steps), and no rigid decision
        reads the replicas, so the steps are served together."""
        if self.elastic and hi > lo:
            serve_steps(self.lay, self.owner[lo:hi], ~self.hard.busy_unheld(lo, hi), self.el,
                        self.need[self.el, lo:hi])

    # ---- main loop ----------------------------------------------------------------------------
    def run(self, window: int | None = None) -> Plan:
        """The plan of the steps before `window` (None: all), going on from
        the steps an earlier call planned. A window's plan says whether it
        `looked_ahead`: read the scenario past the runs of the jobs it started
        (a job waited, a displacement or an eviction was weighed); where it
        did not, a view cut after those runs gives the same window (online:
        Policy.short_views)."""
        self.advance(self.lay.T if window is None else window)
        owner = owner_of(self.owner)
        info = {"repack_checks": self.foot.repacks}
        if self.preempt:
            info["evictions"] = self.evictions
        if window is not None:
            info["looked_ahead"] = self.waited or self.foot.repacks > 0 or self.evictions > 0
        return Plan(owner=owner, info=info)

    def advance(self, end: int) -> None:
        """Plan the steps from the last one planned up to `end`."""
        end = min(end, self.lay.T)
        for t in range(self.now, end):
            if self.queue:
                self.schedule_rigid(t)
        self.serve_elastic(self.now, end)
        self.now = max(self.now, end)
