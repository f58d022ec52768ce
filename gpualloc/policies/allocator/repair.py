"""From preferences to a feasible plan, then a better one.

The allocator's relaxation ends in per-job preferences (an order, a start);
this stage turns them into a plan that is feasible by construction and
improves it:

- `Schedule` holds the rigid placements as an owner grid plus, per pool
  subset that elastic jobs can use, the slack between free GPUs and elastic
  demand, so a rigid job is placed only where the known elastic demand over
  its whole run still fits (Hall's condition on pools, exact for 1-GPU
  replicas).
- `insert` puts a job at its earliest feasible start (a tie: the block
  whose node is left fullest), all candidate blocks and starts tested at once
  on free-run lengths.
- `fill_elastic` serves elastic demand on whatever rigid jobs leave free,
  highest priority first.
- `improve` is a ruin-and-recreate local search on the exact objective:
  remove the jobs that start in a random window (optionally on a few nodes),
  re-insert them and the waiting jobs in a randomized priority order, keep
  the result when the objective does not drop.
"""
from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass

import torch

from gpualloc.blocks import Packer, cover, first_n
from gpualloc.plan import IDLE
from gpualloc.scenario import Scenario


def _window_min(x: torch.Tensor, width: torch.Tensor | int, fill: float) -> torch.Tensor:
    """(..., T) -> (..., T): min of x over [t, t + width) (cut at T), by doubling."""
    T = x.shape[-1]
    out = x.clone()
    span = 1
    w = min(int(width), T)  # a window past the horizon is cut there
    while span < w:
        step = min(span, w - span)
        shifted = torch.full_like(out, fill)
        shifted[..., : T - step] = out[..., step:]
        out = torch.minimum(out, shifted)
        span += step
    return out


def _row_min(x: torch.Tensor, k: int) -> torch.Tensor:
    """(G, T) -> (G, T): min over rows [g, g + k) (rows past the end count as 0)."""
    G = x.shape[0]
    out = x.clone()
    span = 1
    while span < k:
        step = min(span, k - span)
        shifted = torch.zeros_like(out)
        shifted[: G - step] = out[step:]
        out = torch.minimum(out, shifted)
        span += step
    return out


@dataclass
class Snapshot:
    busy: torch.Tensor
    rigid_owner: torch.Tensor
    start: list
    first: list
    slack: torch.Tensor
    elastic_value: torch.Tensor
    elastic_used: torch.Tensor


def fixed_jobs(s: Scenario) -> torch.Tensor:
    """(J,) bool: rigid jobs that hold cells in `s.fixed` (started already)."""
    out = torch.zeros(s.J, dtype=torch.bool)
    if s.fixed is not None:
        out[s.fixed[s.fixed >= 0].unique().cpu()] = True
    return out & s.rigid


class Schedule:
    """Rigid placements on the (G, T) grid, with elastic-demand slack."""

    def __init__(self, s: Scenario, device: torch.device | str = "cpu", max_subsets: int = 64):
        self.s = s
        self.device = device
        G, T = s.G, s.T
        self.G, self.T = G, T
        self.t = torch.arange(T, device=device)
        fixed = s.fixed.to(device) if s.fixed is not None else torch.full((G, T), IDLE,
                                                                          device=device)
        self.fixed = fixed
        self.busy = fixed >= 0  # (G, T) bool: held by a fixed cell or a placed rigid job
        self.rigid_owner = torch.full((G, T), IDLE, dtype=torch.long, device=device)
        self._runs = None
        self.done = fixed_jobs(s)  # jobs the fixed cells already hold: not planned again
        self.start = [-1] * s.J
        self.first = [-1] * s.J
        self.gpus = s.gpus.tolist()
        self.duration = s.duration.tolist()
        self.arrival = s.arrival.tolist()
        self.priority = s.priority.tolist()
        self.rigid = s.rigid.tolist()
        self.job_class = s.job_class.tolist()
        self.blocks = [b.to(device) for b in s.class_blocks]
        self.block_pool = [s.gpu_pool[b].to(device) for b in s.class_blocks]
        self.packer = Packer(s, device)
        self.gpu_node = s.gpu_node.to(device)
        self.gpu_pool = s.gpu_pool.to(device)
        self._init_elastic(max_subsets)

    # ---- elastic demand ----------------------------------------------------------------
    def _init_elastic(self, max_subsets: int) -> None:
        s, dev = self.s, self.device
        P = len(s.pools)
        self.elastic = [j for j in range(s.J) if not self.rigid[j] and not s.unplaceable[j]]
        # Replicas fixed cells already serve count against demand.
        demand = s.demand.to(dev).clone()
        if self.done.any():
            k = s.gpus.to(dev)
            held = torch.zeros(s.J, self.T, dtype=torch.long, device=dev)
            cells = self.fixed >= 0
            j = self.fixed[cells]
            t = self.t.expand(self.G, self.T)[cells]
            held.view(-1).index_add_(0, j * self.T + t, torch.ones_like(j))
            demand = (demand - held // k[:, None]).clamp(min=0)
        self.demand = demand  # (J, T) replicas still to serve
        masks = {tuple(s.pool_compat[j].tolist()) for j in self.elastic}
        subsets = set(masks)
        grown = True
        while grown and len(subsets) <= max_subsets:
            grown = False
            for a in list(subsets):
                for b in masks:
                    u = tuple(x or y for x, y in zip(a, b))
                    if u not in subsets:
                        subsets.add(u)
                        grown = True
        if len(subsets) > max_subsets:  # too many pools: the single masks and their union
            subsets = masks | {tuple(any(m[p] for m in masks) for p in range(P))}
        subsets = sorted(subsets)
        self.n_subsets = len(subsets)
        if not subsets:
            self.subset_pools = torch.zeros(0, P, dtype=torch.bool, device=dev)
            self.slack = torch.zeros(0, self.T, dtype=torch.long, device=dev)
            self.subset_priority = torch.zeros(0, dtype=torch.float64, device=dev)
            self.subset_replica = torch.ones(0, dtype=torch.long, device=dev)
        else:
            sp = torch.tensor(subsets, dtype=torch.bool, device=dev)  # (U, P)
            self.subset_pools = sp
            pc = s.pool_compat.to(dev)
            need = torch.zeros(len(subsets), self.T, dtype=torch.long, device=dev)
            self.subset_priority = torch.zeros(len(subsets), dtype=torch.float64, device=dev)
            self.subset_replica = torch.ones(len(subsets), dtype=torch.long, device=dev)
            for j in self.elastic:
                inside = (~pc[j][None, :] | sp).all(1)  # job's pools within the subset
                need[inside] += demand[j] * self.gpus[j]
                # The subset's replica size: its top-priority job's, whose
                # priority prices the displaced service.
                top = inside & (self.subset_priority < self.priority[j])
                self.subset_replica[top] = self.gpus[j]
                self.subset_priority[inside] = self.subset_priority[inside].clamp(
                    min=self.priority[j])
            gpu_in = sp[:, self.gpu_pool]  # (U, G)
            free = (gpu_in.long() @ (~self.busy).long())  # (U, T)
            self.slack = free - need
        self.elastic_order = sorted(self.elastic, key=lambda j: (
            -self.priority[j], int(s.compat[j].sum()), self.arrival[j], j))
        self.elastic_value = torch.zeros(self.T, dtype=torch.float64, device=dev)
        self.elastic_used = torch.zeros(self.T, dtype=torch.long, device=dev)  # GPUs per step

    # ---- rigid placements ------------------------------------------------------------------
    def _length(self, j: int, start: int) -> int:
        return min(self.duration[j], self.T - start)

    def place(self, j: int, start: int, first: int) -> None:
        k, end = self.gpus[j], start + self._length(j, start)
        self.busy[first:first + k, start:end] = True
        self.rigid_owner[first:first + k, start:end] = j
        self._runs = None
        self.start[j], self.first[j] = start, first
        if self.n_subsets:
            pool = int(self.gpu_pool[first])
            self.slack[self.subset_pools[:, pool], start:end] -= k

    def remove(self, j: int) -> None:
        start, first = self.start[j], self.first[j]
        k, end = self.gpus[j], start + self._length(j, start)
        self.busy[first:first + k, start:end] = False
        self.rigid_owner[first:first + k, start:end] = IDLE
        self._runs = None
        self.start[j] = self.first[j] = -1
        if self.n_subsets:
            pool = int(self.gpu_pool[first])
            self.slack[self.subset_pools[:, pool], start:end] += k

    def _block_runs(self, k: int) -> torch.Tensor:
        """(G, T): steps a k-block starting at GPU g stays free from t; cached
        until the next change, since most searches fail and change nothing."""
        if self._runs is None:
            nxt = torch.where(self.busy, self.t, self.T)
            nxt = torch.flip(torch.cummin(torch.flip(nxt, [1]), 1).values, [1])
            self._runs = {1: nxt - self.t}
            self._short = {}
            self._cost = {}
            self._failed = {}
        if k not in self._runs:
            self._runs[k] = _row_min(self._runs[1], k)
        return self._runs[k]

    def _lack(self, k: int, slack: torch.Tensor) -> torch.Tensor:
        """Elastic GPUs a k-GPU job takes from the demand of each subset with
        `slack` (U, ...) GPUs to spare, in whole replicas: a replica short of
        one GPU does not run at all."""
        lack = (k - slack.clamp(min=0)).clamp(min=0, max=k)
        size = self.subset_replica.view(-1, *[1] * (slack.dim() - 1))
        return ((lack + size - 1) // size * size).double()

    def _displaced(self, k: int, d: int) -> torch.Tensor:
        """(P, T): priority-weighted elastic GPU-steps a k-GPU run of d steps
        starting at t in pool p would take from the known elastic demand."""
        if (k, d) not in self._cost:
            lack = self._lack(k, self.slack)  # (U, T)
            cs = torch.zeros(self.n_subsets, self.T + 1, dtype=torch.float64, device=self.device)
            cs[:, 1:] = torch.cumsum(lack, 1)
            end = torch.clamp(self.t + d, max=self.T)
            window = (cs[:, end] - cs[:, :-1]) * self.subset_priority[:, None]  # (U, T)
            self._cost[k, d] = torch.where(self.subset_pools[:, :, None], window[:, None, :],
                                           torch.zeros((), dtype=torch.float64,
                                                       device=self.device)).amax(0)
        return self._cost[k, d]

    def find(self, j: int, not_before: int = 0, demand_aware: bool = True,
             displace: bool = True):
        """Earliest feasible (start, first GPU) for rigid job j, or None.

        With `demand_aware`, a start must leave the known elastic demand room
        over the whole run. With `displace` too, a start that takes GPUs the
        demand wants is allowed when the job's value there, minus the
        priority-weighted elastic service it displaces, beats its value at
        its earliest start that displaces nothing (0 when there is none)."""
        k, d, c = self.gpus[j], self.duration[j], self.job_class[j]
        blocks = self.blocks[c]
        if len(blocks) == 0:
            return None
        T = self.T
        run_k = self._block_runs(k)[blocks]  # (B, T): free-run length of each block
        after = max(self.arrival[j], not_before)
        # A job of the same class that is no longer and may start no later
        # already failed in this state: so does this one.
        key = (c, demand_aware)
        if any(a <= after and dd <= d for a, dd in self._failed.get(key, ())):
            return None
        need = torch.clamp(T - self.t, max=d)  # (T,) steps a start at t must hold
        fit = run_k >= need
        fit[:, :after] = False
        free_fit = fit
        if demand_aware and self.n_subsets:
            if (k, d) not in self._short:
                short = _window_min(self.slack, d, fill=1 << 30) < k  # (U, T)
                self._short[k, d] = (self.subset_pools[:, :, None] & short[:, None, :]).any(0)
            fit = fit & ~self._short[k, d][self.block_pool[c]]  # (P, T) -> (B, T)
        cols = fit.any(0).nonzero()
        t0 = int(cols[0]) if len(cols) else T
        if demand_aware and displace and self.n_subsets:
            spot = self._displacing(j, free_fit, t0)
            if spot is not None:
                return spot
        if t0 == T:
            if not free_fit.any():  # no free block at all: holds for longer jobs too
                self._failed.setdefault(key, []).append((after, d))
            return None
        return t0, self._best_fit(blocks, fit[:, t0].nonzero().flatten(), t0)

    def _displacing(self, j: int, free_fit: torch.Tensor, t_safe: int):
        """The best start before t_safe that displaces elastic demand, when it
        is worth more than starting at t_safe (see `find`)."""
        k, d, c = self.gpus[j], self.duration[j], self.job_class[j]
        early = free_fit[:, :t_safe]  # (B, t_safe)
        if not early.any():
            return None
        value = self.priority[j] * k * torch.clamp(self.T - self.t, max=d).double()  # (T,)
        base = float(value[t_safe]) if t_safe < self.T else 0.0
        cost = self._displaced(k, d)[self.block_pool[c]][:, :t_safe]  # (B, t_safe)
        net = torch.where(early, value[None, :t_safe] - cost, torch.tensor(-1.0, dtype=torch.float64,
                                                                          device=self.device))
        best = float(net.max())
        if best <= base + 1e-9:
            return None
        hit = (net >= best - 1e-9).any(0).nonzero()
        t0 = int(hit[0])
        blocks = self.blocks[c]
        return t0, self._best_fit(blocks, (net[:, t0] >= best - 1e-9).nonzero().flatten(), t0)

    def _best_fit(self, blocks: torch.Tensor, options: torch.Tensor, t0: int) -> int:
        """First GPU of the option whose node keeps the fewest free GPUs at t0."""
        if len(options) > 1:
            node_free = torch.zeros(int(self.gpu_node[-1]) + 1, dtype=torch.long,
                                    device=self.device)
            node_free.index_add_(0, self.gpu_node, (~self.busy[:, t0]).long())
            options = options[torch.argmin(node_free[self.gpu_node[blocks[options]]])]
        else:
            options = options[0]
        return int(blocks[options])


    def fits_at(self, j: int, t: int, demand_aware: bool = True,
                displace: bool = True) -> tuple[int | None, bool]:
        """(first GPU of the best-fit block where rigid job j can start at t, or
        None; whether that failure holds for any longer job of its class too).
        Demand-awareness and displacement as in `find`."""
        k, c = self.gpus[j], self.job_class[j]
        blocks = self.blocks[c]
        if len(blocks) == 0 or t < self.arrival[j]:
            return None, True
        length = self._length(j, t)
        free = self._block_runs(k)[blocks, t] >= length  # (B,)
        if not free.any():
            return None, True
        ok = free
        if demand_aware and self.n_subsets:
            window = self.slack[:, t:t + length]  # (U, length)
            short = window.amin(1) < k  # (U,)
            pool_short = (self.subset_pools & short[:, None]).any(0)  # (P,)
            ok = free & ~pool_short[self.block_pool[c]]
            if not ok.any():
                if not displace:
                    return None, True
                lack = self._lack(k, window).sum(1)  # (U,)
                cost = torch.where(self.subset_pools, (lack * self.subset_priority)[:, None],
                                   torch.zeros((), dtype=torch.float64, device=self.device))
                net = self.priority[j] * k * length - cost.amax(0)[self.block_pool[c]]  # (B,)
                net = torch.where(free, net, torch.tensor(-1.0, dtype=torch.float64,
                                                          device=self.device))
                best = float(net.max())
                if best <= 1e-9:
                    return None, False
                # Worth it only against the job's value at its earliest safe start.
                later = self.find(j, t + 1, demand_aware, displace=False)
                if later is not None and best <= self.priority[j] * k * self._length(
                        j, later[0]) + 1e-9:
                    return None, False
                ok = net >= best - 1e-9
        return self._best_fit(blocks, ok.nonzero().flatten(), t), False

    def clear_for(self, j: int, start: int, rng: random.Random) -> list[int] | None:
        """Make room for rigid job j at `start`: on the candidate block with the
        fewest busy cells over its run (no fixed cell), remove the rigid jobs
        there. Returns the removed jobs, or None when no block can be cleared."""
        k, c = self.gpus[j], self.job_class[j]
        blocks = self.blocks[c]
        end = start + self._length(j, start)
        if len(blocks) == 0 or start < self.arrival[j]:
            return None
        window_fixed = (self.fixed[:, start:end] >= 0).any(1).long()  # (G,)
        window_busy = self.busy[:, start:end].sum(1)  # (G,)
        cs_fixed = torch.zeros(self.G + 1, dtype=torch.long, device=self.device)
        cs_fixed[1:] = torch.cumsum(window_fixed, 0)
        cs_busy = torch.zeros(self.G + 1, dtype=torch.long, device=self.device)
        cs_busy[1:] = torch.cumsum(window_busy, 0)
        cost = (cs_busy[blocks + k] - cs_busy[blocks]).double()
        cost[cs_fixed[blocks + k] - cs_fixed[blocks] > 0] = float("inf")
        # Ties between equally busy blocks go to a random one.
        gen = torch.Generator(device=self.device).manual_seed(rng.getrandbits(62))
        cost += 0.5 * torch.rand(len(blocks), generator=gen, dtype=torch.float64,
                                 device=self.device)
        b = int(torch.argmin(cost))
        if not math.isfinite(float(cost[b])):
            return None
        first = int(blocks[b])
        victims = self.rigid_owner[first:first + k, start:end].unique().tolist()
        victims = [v for v in victims if v >= 0]
        for v in victims:
            self.remove(v)
        self.place(j, start, first)
        return victims

    def insert(self, j: int, not_before: int = 0, demand_aware: bool = True) -> bool:
        spot = self.find(j, not_before, demand_aware)
        if spot is None:
            return False
        self.place(j, *spot)
        return True

    def rigid_value(self) -> float:
        return sum(self.priority[j] * self.gpus[j] * self._length(j, self.start[j])
                   for j in range(self.s.J) if self.start[j] >= 0)

    # ---- elastic service -------------------------------------------------------------------
    def fill_elastic(self, t0: int = 0, t1: int | None = None, owner: torch.Tensor | None = None):
        """Serve elastic demand in [t0, t1) on GPUs the rigid jobs leave free,
        highest priority first, lowest free blocks; updates the per-step
        elastic value and, when `owner` is given, writes the replicas."""
        t1 = self.T if t1 is None else t1
        taken = self.busy[:, t0:t1].clone()
        value = torch.zeros(t1 - t0, dtype=torch.float64, device=self.device)
        compat = self.s.compat
        for j in self.elastic_order:
            if self.arrival[j] >= t1:
                continue
            k = self.gpus[j]
            free = ~taken & compat[j].to(self.device)[:, None]
            starts = first_n(self.packer.starts(free, k), self.demand[j, t0:t1])
            held = cover(starts, k)
            taken |= held
            value += starts.sum(0).double() * (self.priority[j] * k)
            if owner is not None:
                owner[:, t0:t1][held] = j
        self.elastic_value[t0:t1] = value
        self.elastic_used[t0:t1] = (taken & ~self.busy[:, t0:t1]).sum(0)
        return value

    def value(self) -> float:
        return self.rigid_value() + float(self.elastic_value.sum())

    def earliness(self) -> int:
        """Priority-weighted GPU-steps between the rigid jobs' starts and the
        horizon: among plans of equal value, the one that starts important
        work sooner. The objective does not see when work runs, but a plan
        that is replanned (online mode) loses what it postponed."""
        return sum(self.priority[j] * self.gpus[j] * (self.T - self.start[j])
                   for j in range(self.s.J) if self.start[j] >= 0)

    # ---- plans -----------------------------------------------------------------------------
    def owner(self) -> torch.Tensor:
        owner = torch.where(self.rigid_owner >= 0, self.rigid_owner, self.fixed)
        self.fill_elastic(owner=owner)
        return owner.cpu()

    def snapshot(self) -> Snapshot:
        return Snapshot(self.busy.clone(), self.rigid_owner.clone(), list(self.start),
                        list(self.first), self.slack.clone(), self.elastic_value.clone(),
                        self.elastic_used.clone())

    def restore(self, snap: Snapshot) -> None:
        self.busy, self.start, self.first = snap.busy, snap.start, snap.first
        self.rigid_owner = snap.rigid_owner
        self._runs = None
        self.slack, self.elastic_value = snap.slack, snap.elastic_value
        self.elastic_used = snap.elastic_used

    def waiting(self) -> list[int]:
        return [j for j in range(self.s.J) if self.rigid[j] and self.start[j] < 0
                and not self.done[j] and not self.s.unplaceable[j]]


def build(s: Scenario, order: list[int], device="cpu", demand_aware: bool = True,
          at: dict[int, int] | None = None) -> Schedule:
    """Serial placement: each rigid job in `order` at its earliest feasible
    start (from `at[j]` first, when given); then elastic service."""
    sched = Schedule(s, device)
    for j in order:
        if sched.rigid[j] and not sched.done[j] and sched.start[j] < 0:
            if at is None or j not in at or not sched.insert(j, at[j], demand_aware):
                sched.insert(j, demand_aware=demand_aware)
    sched.fill_elastic()
    return sched


def build_parallel(s: Scenario, order: list[int], device="cpu", demand_aware: bool = True,
                   reserve: bool = True) -> Schedule:
    """Time-driven placement of every rigid job, in `order` at each event;
    then elastic service (see `insert_parallel`)."""
    sched = Schedule(s, device)
    jobs = [j for j in range(s.J) if sched.rigid[j] and not sched.done[j]
            and not s.unplaceable[j]]
    insert_parallel(sched, jobs, {j: i for i, j in enumerate(order)}, 0, demand_aware, reserve)
    sched.fill_elastic()
    return sched


def insert_parallel(sched: Schedule, jobs: list[int], rank: dict[int, float], t: int,
                    demand_aware: bool = True, reserve: bool = True) -> None:
    """Time-driven insertion from timestep t: at each event (an arrival, a
    job's end), the waiting `jobs` in `rank` order start where they fit now;
    with `reserve`, the first that does not fit holds its earliest later
    start (EASY), and the jobs behind it start only around that reservation."""
    todo = sorted(jobs, key=lambda j: (sched.arrival[j], rank[j]))
    waiting: list[int] = []
    ends = [sched.start[j] + sched._length(j, sched.start[j]) for j in range(sched.s.J)
            if sched.start[j] >= 0 and sched.start[j] + sched._length(j, sched.start[j]) > t]
    heapq.heapify(ends)
    nxt = 0
    while t < sched.T and (nxt < len(todo) or waiting):
        while nxt < len(todo) and sched.arrival[todo[nxt]] <= t:
            waiting.append(todo[nxt])
            nxt += 1
        waiting.sort(key=rank.__getitem__)
        free = int((~sched.busy[:, t]).sum())
        ghost = None
        failed: dict[int, int] = {}  # class -> shortest run that did not fit (this state)
        displaced = False
        for j in list(waiting):
            if free == 0:
                break
            c, length = sched.job_class[j], sched._length(j, t)
            first = None
            if sched.gpus[j] <= free and length < failed.get(c, 1 << 30):
                first, hard = sched.fits_at(j, t, demand_aware, displace=False)
                if first is None and hard:
                    failed[c] = length
                    # Only the first job held back by elastic demand may
                    # displace it: the one a reservation would protect.
                    if not displaced and demand_aware:
                        displaced = True
                        first, _ = sched.fits_at(j, t, demand_aware, displace=True)
            if first is not None:
                sched.place(j, t, first)
                waiting.remove(j)
                free -= sched.gpus[j]
                heapq.heappush(ends, t + length)
                failed.clear()
            elif reserve and ghost is None:
                spot = sched.find(j, t + 1, demand_aware)
                if spot is not None:
                    ghost = (j, spot[0])
                    sched.place(j, *spot)
                    failed.clear()
        if ghost is not None:
            sched.remove(ghost[0])
        while ends and ends[0] <= t:
            heapq.heappop(ends)
        events = [e for e in (ends[0] if ends else None,
                              sched.arrival[todo[nxt]] if nxt < len(todo) else None,
                              ghost[1] if ghost else None) if e is not None and e > t]
        t = min(events) if events else sched.T


def adopt(s: Scenario, owner: torch.Tensor, device="cpu") -> Schedule:
    """A schedule holding the rigid placements of a feasible plan (e.g. FIFO's);
    elastic service is recomputed on what they leave free."""
    sched = Schedule(s, device)
    owner = owner.to(device)
    cells = owner >= 0
    j = owner[cells]
    rigid = s.rigid.to(device)[j]
    g = torch.arange(s.G, device=device)[:, None].expand(s.G, s.T)[cells][rigid]
    t = torch.arange(s.T, device=device)[None, :].expand(s.G, s.T)[cells][rigid]
    j = j[rigid]
    start = torch.full((s.J,), s.T, dtype=torch.long, device=device).scatter_reduce(0, j, t, "amin")
    first = torch.full((s.J,), s.G, dtype=torch.long, device=device).scatter_reduce(0, j, g, "amin")
    for job in j.unique().tolist():
        if not sched.done[job]:
            sched.place(job, int(start[job]), int(first[job]))
    sched.fill_elastic()
    return sched


def priority_order(s: Scenario) -> list[int]:
    """Priority first (ties: arrival, then scenario order)."""
    return sorted(range(s.J), key=lambda j: (-s.jobs[j].priority, s.jobs[j].arrival, j))


@dataclass
class SearchStats:
    iterations: int = 0
    accepted: int = 0
    improved: int = 0
    start_value: float = 0.0
    end_value: float = 0.0


def improve(sched: Schedule, iterations: int, seed: int, window: tuple[int, int] = (4, 48),
            noise: float = 1.5, demand_aware: bool = True, max_waiting: int = 24,
            guide: tuple[list[float], list[int]] | None = None, patience: int = 0,
            progress=None) -> SearchStats:
    """Local search on the exact objective; never returns a worse schedule.

    Two moves, half the time each:
    - ruin and recreate: empty the jobs that start in a random time window
      (on a random half of the nodes, half the time);
    - force in: put a waiting job at a random start on the block it disturbs
      least, removing the jobs in its way. With a `guide` from the relaxation
      (per job: the share of it the relaxation ran, its relaxed start), jobs
      it ran are picked more often, half the time at their relaxed start.
    Then every removed and waiting job goes back, earliest fit, in priority
    order perturbed by noise. A move that lowers the objective is undone.
    With `patience`, the search stops after that many moves in a row without
    a strict improvement."""
    rng = random.Random(seed)
    s, T = sched.s, sched.T
    stats = SearchStats(start_value=sched.value())
    best = stats.start_value
    # The walk moves freely across plans of equal value; what it returns is
    # the best it saw, ties going to the earliest.
    kept, kept_early = None, sched.earliness()
    n_nodes = len(s.node_first_gpu)
    node_of = sched.gpu_node.tolist()
    stale = 0
    for it in range(iterations):
        if patience and stale >= patience:
            break
        stale += 1
        snap = sched.snapshot()
        lo, hi = T, 0
        removed: list[int] = []
        waiting = sched.waiting()
        if waiting and rng.random() < 0.5:
            share = guide[0] if guide else [1.0] * s.J
            j = rng.choices(waiting, weights=[sched.priority[w] * (0.1 + min(share[w], 1.0))
                                              for w in waiting])[0]
            if guide and rng.random() < 0.5:
                start = max(guide[1][j], sched.arrival[j])
            else:
                # Starts where GPUs sit idle are the promising ones.
                idle = (sched.G - sched.busy.sum(0) - sched.elastic_used)[sched.arrival[j]:]
                weights = (idle.double() + 0.1).tolist()
                start = sched.arrival[j] + rng.choices(range(len(weights)), weights=weights)[0]
            victims = sched.clear_for(j, start, rng)
            if victims is None:
                continue
            removed = victims
            lo, hi = start, start + sched._length(j, start)
            window_end = T
        else:
            width = rng.randint(min(window[0], T), min(window[1], T))
            a = rng.randrange(0, max(1, T - width + 1))
            window_end = a + width
            ruin_nodes = None
            if n_nodes > 1 and rng.random() < 0.5:
                ruin_nodes = set(rng.sample(range(n_nodes), rng.randint(1, max(1, n_nodes // 2))))
            removed = [j for j in range(s.J) if sched.start[j] >= 0
                       and a <= sched.start[j] < window_end
                       and (ruin_nodes is None or node_of[sched.first[j]] in ruin_nodes)]
        for j in removed:
            if sched.start[j] >= 0:
                lo = min(lo, sched.start[j])
                hi = max(hi, sched.start[j] + sched._length(j, sched.start[j]))
                sched.remove(j)
        gone = set(removed)
        others = [j for j in sched.waiting() if j not in gone and sched.arrival[j] < window_end]
        if len(others) > max_waiting:
            others = rng.sample(others, max_waiting)
        candidates = removed + others
        key = {j: -sched.priority[j] + noise * rng.random() for j in candidates}
        candidates.sort(key=lambda j: key[j])
        for j in candidates:
            sched.insert(j, demand_aware=demand_aware)
        for j in candidates:
            if sched.start[j] >= 0:
                lo = min(lo, sched.start[j])
                hi = max(hi, sched.start[j] + sched._length(j, sched.start[j]))
        if hi > lo:
            sched.fill_elastic(lo, hi)
        value = sched.value()
        stats.iterations += 1
        if value >= best - 1e-9:
            stats.accepted += 1
            early = sched.earliness()
            if value > best + 1e-9:
                stats.improved += 1
                stale = 0
                kept, kept_early = None, early
            elif early > kept_early:
                kept, kept_early = None, early
            elif early < kept_early and kept is None:
                kept = snap  # the plan before this move: as good, and earlier
            best = value
        else:
            sched.restore(snap)
        if progress is not None:
            progress(it, best)
    if kept is not None:
        sched.restore(kept)
    stats.end_value = best
    return stats
