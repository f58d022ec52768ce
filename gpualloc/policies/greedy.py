"""Greedy priority backfilling: what a careful Slurm or Kueue operator runs today.

At each timestep t:
- Rigid jobs that have arrived are scanned in priority order (ties: arrival,
  then scenario order). A job starts on a free block, best fit, if the known
  elastic demand over its whole run still fits on the GPUs rigid jobs leave
  free (demand-aware). "Fits" is tested against the elastic *footprint*: the
  demand of every elastic job, highest priority first, packed highest GPU
  first around the cells rigid jobs hold, over the rest of the horizon. A
  block that avoids the footprint leaves the elastic service untouched; for
  the first few blocked jobs, a block that overlaps it is re-packed exactly
  (the elastic demand without that block): no loss, it starts.
- Displacement (GreedyConfig.displace): a job the elastic demand would keep
  waiting may still take such a block when its value minus the
  priority-weighted elastic service it displaces beats its value at its
  earliest demand-safe start (0 when there is none). When the other waiting
  jobs could fill the free GPUs anyway, only a job with no demand-safe start
  at all displaces. Without displacement, a job as large as the cluster never
  runs beside a service that always wants a replica.
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

Rigid best fit: the block whose GPUs the fewest waiting jobs can use (keeps
scarce GPU types for the jobs that need them), then the node left with the
fewest free GPUs, then the shortest run of whole free nodes (keeps long runs
for multi-node gangs), then the shortest free run, then the lowest index.

Jobs in `Scenario.fixed` are done or running: rigid ones are not scheduled
again; elastic ones are served on top of the replicas their fixed cells hold.

Block fits are tested at once for every candidate block of every waiting job
(a gather on a 2-D prefix sum of the busy cells); the footprint is a few
scans per elastic job over the (G, T) grid (blocks.Packer).
"""
from __future__ import annotations

import torch

from gpualloc.blocks import Packer, _run_positions, cover, first_n, prefix
from gpualloc.config import GreedyConfig
from gpualloc.metrics import held
from gpualloc.plan import IDLE, Plan
from gpualloc.scenario import Scenario


def priority_order(s: Scenario, jobs) -> list[int]:
    """Jobs by priority, highest first; ties: arrival, then scenario order."""
    return sorted(jobs, key=lambda j: (-s.jobs[j].priority, s.jobs[j].arrival, j))


def prefix2d(mask: torch.Tensor) -> torch.Tensor:
    """(G, T) bool -> (G + 1, T + 1) int64 2-D prefix sums."""
    out = torch.zeros(mask.shape[0] + 1, mask.shape[1] + 1, dtype=torch.long, device=mask.device)
    out[1:, 1:] = mask.long().cumsum(0).cumsum(1)
    return out


def window_sum(P: torch.Tensor, g0, g1, t0, t1) -> torch.Tensor:
    """Busy cells in [g0, g1) x [t0, t1) from the prefix P, elementwise over tensors."""
    if isinstance(t0, int) and isinstance(t1, int):
        col = P[:, t1] - P[:, t0]  # (G + 1,) busy cells per GPU prefix; index_select is cheap
        return col.index_select(0, g1) - col.index_select(0, g0)
    return P[g1, t1] - P[g0, t1] - P[g1, t0] + P[g0, t0]


def flipped(s: Scenario) -> Scenario:
    """The same cluster with the GPU axis reversed (pools, nodes and GPUs in
    reverse order): a Packer built on it packs highest GPU first."""
    return Scenario(name=s.name, horizon=s.horizon, step_minutes=s.step_minutes,
                    pools=list(reversed(s.pools)))


def fixed_grid(s: Scenario, device) -> torch.Tensor:
    """(G, T) int64 owner grid of the cells decided before planning."""
    if s.fixed is None:
        return torch.full((s.G, s.T), IDLE, dtype=torch.long, device=device)
    fixed = s.fixed.to(device).long()
    if tuple(fixed.shape) != (s.G, s.T):
        raise ValueError(f"scenario.fixed is {tuple(fixed.shape)}, the scenario needs ({s.G}, {s.T})")
    return fixed


def greedy(s: Scenario, cfg: GreedyConfig | None = None,
           device: torch.device | str = "cpu") -> Plan:
    device = torch.device(device)
    # Thousands of small tensor ops: on CPU, intra-op threads only add
    # overhead (10x on a loaded 2-core machine), so run them on one thread.
    threads = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(1)
    try:
        return _Greedy(s, cfg or GreedyConfig(), device).run()
    finally:
        torch.set_num_threads(threads)


class _Greedy:
    def __init__(self, s: Scenario, cfg: GreedyConfig, device: torch.device):
        self.s, self.cfg, self.dev = s, cfg, device
        T = s.T
        fixed = fixed_grid(s, device)
        self.owner = fixed.clone()  # (G, T) int64
        self.busy = fixed >= 0  # (G, T) bool: cells held by fixed cells or started rigid jobs
        self.res = torch.zeros_like(self.busy)  # (G, T) bool: the EASY reservation
        in_fixed = torch.zeros(s.J, dtype=torch.bool)
        in_fixed[fixed[fixed >= 0].unique().cpu()] = True
        # Replicas still wanted once the fixed cells are counted.
        have = held(s, fixed.cpu()) // s.gpus[:, None]  # (J, T)
        self.need = (s.demand - have).clamp(min=0).to(device)  # (J, T) int64
        ok = ~s.unplaceable
        self.elastic = [j for j in priority_order(s, range(s.J))
                        if not s.jobs[j].rigid and ok[j] and self.need[j].any()]
        self.queue = [j for j in priority_order(s, range(s.J))
                      if s.jobs[j].rigid and ok[j] and not in_fixed[j]]
        self.compat = s.compat.to(device)  # (J, G) bool
        self.gpus = s.gpus.tolist()
        self.blocks = {j: s.blocks(j).to(device) for j in self.queue + self.elastic}
        self.weight = (s.priority * s.gpus).tolist()  # value of one replica-step / GPU-run-step
        self.packer = Packer(s, device)
        self.packer_high = Packer(flipped(s), device)
        self.gpu_node = s.gpu_node.to(device)
        self.n_nodes = len(s.node_first_gpu)
        self.gpu_first, self.gpu_last = self.packer.gpu_first, self.packer.gpu_last
        # Flat (job, block) pairs of every queued job: fits are tested for all at once.
        if self.queue:
            self.pair_job = torch.cat([torch.full((len(self.blocks[j]),), i, dtype=torch.long)
                                       for i, j in enumerate(self.queue)]).to(device)
            self.pair_start = torch.cat([self.blocks[j] for j in self.queue])
            qk = torch.tensor([self.gpus[j] for j in self.queue], dtype=torch.long, device=device)
            self.pair_k = qk[self.pair_job]
            self.q_duration = s.duration[self.queue].to(device)
        self.el_gpus = torch.tensor([self.gpus[e] for e in self.elastic], dtype=torch.long,
                                    device=device)  # (E,)
        self.min_el_priority = min((s.jobs[e].priority for e in self.elastic), default=0.0)
        self.fp = torch.zeros_like(self.busy)  # (G, T) bool elastic footprint from t on
        self.fp_served = torch.zeros(len(self.elastic), T, dtype=torch.long, device=device)
        self.dirty = (0, T)  # columns whose footprint is stale (lo, hi)
        self.P = self.P_hard = None
        self.repack_checks = 0
        self.waiting_gpus = self.free_now = 0  # set per timestep by schedule_rigid

    # ---- elastic footprint ------------------------------------------------------
    def pack(self, free: torch.Tensor, need: torch.Tensor):
        """Elastic demand packed highest GPU first into (G, C) `free` columns,
        jobs in priority order. need: (E, C). Returns the (G, C) cover and the
        (E, C) replicas served."""
        free = free.clone()
        cov = torch.zeros_like(free)
        served = torch.zeros_like(need)
        for i, e in enumerate(self.elastic):
            k = self.gpus[e]
            f = (free & self.compat[e][:, None]).flip(0)  # (G, C) in reversed GPU order
            take = first_n(self.packer_high.starts(f, k), need[i])
            c = cover(take, k).flip(0)
            free &= ~c
            cov |= c
            served[i] = take.sum(0)
        return cov, served

    def touch(self, lo: int, hi: int) -> None:
        """Cells in columns [lo, hi) changed: their footprint is stale."""
        self.dirty = (min(self.dirty[0], lo), max(self.dirty[1], hi))

    def refresh(self, t: int) -> None:
        """Recompute the stale footprint columns from t on (columns pack
        independently) and the prefix sums of the blocked cells."""
        lo, hi = max(self.dirty[0], t), self.dirty[1]
        if lo >= hi and self.P is not None:
            return
        if lo < hi and self.elastic and self.cfg.demand_aware:
            cov, served = self.pack(~(self.busy | self.res)[:, lo:hi], self.need[self.elastic, lo:hi])
            self.fp[:, lo:hi] = cov
            self.fp_served[:, lo:hi] = served
        self.P = prefix2d(self.busy | self.res | self.fp)  # what a new rigid job must avoid
        self.P_hard = prefix2d(self.busy | self.res)  # ignoring the elastic footprint
        self.free_count = self.s.G - (self.P_hard[-1, 1:] - self.P_hard[-1, :-1])  # (T,)
        self.el_used = (self.fp_served * self.el_gpus[:, None]).sum(0)  # (T,) GPUs elastic holds
        self.dirty = (self.s.T, 0)

    # ---- rigid jobs -------------------------------------------------------------
    def want(self, waiting: list[int]) -> torch.Tensor:
        """(G,) int64: how many waiting rigid jobs and elastic jobs can use each GPU."""
        jobs = waiting + self.elastic
        if not jobs:
            return torch.zeros(self.s.G, dtype=torch.long, device=self.dev)
        return self.compat[jobs].long().sum(0)

    def fit_key(self, j: int, b: torch.Tensor, t: int, free_t: torch.Tensor,
                want_cs: torch.Tensor) -> torch.Tensor:
        """(B,) int64 best-fit key of blocks b of job j (lower is better): GPUs
        the fewest waiting jobs want, node left with the fewest free GPUs,
        shortest run of whole free nodes, shortest free run, lowest index.
        free_t: (G,) bool free at t."""
        G, k = self.s.G, self.gpus[j]
        node_free = torch.zeros(self.n_nodes, dtype=torch.long, device=self.dev)
        node_free.index_add_(0, self.gpu_node, free_t.long())
        node = self.gpu_node[b]  # (B,) first node of each block
        left = (node_free[node] - k).clamp(min=0)  # (B,) 0 for multi-node blocks
        # Runs of whole free nodes (inside a pool): whole-node blocks go to the
        # shortest, keeping long runs for multi-node gangs.
        whole = node_free == self.packer.node_gpn  # (N,)
        _, node_run = _run_positions(whole[:, None], self.packer.node_first, self.packer.node_last)
        node_run = torch.where(whole, node_run[:, 0], 0)[node].clamp(max=G)  # (B,)
        _, run = _run_positions(free_t[:, None], self.gpu_first, self.gpu_last)
        run = run[:, 0][b].clamp(max=G)  # (B,)
        scarce = want_cs[b + k] - want_cs[b]  # (B,)
        key = (scarce * (G + 1) + left) * (G + 1) + node_run
        return (key * (G + 1) + run) * (G + 1) + b

    def start(self, j: int, g: int, t: int) -> None:
        k, end = self.gpus[j], min(t + int(self.s.duration[j]), self.s.T)
        self.owner[g:g + k, t:end] = j
        self.busy[g:g + k, t:end] = True
        self.touch(t, end)

    def value(self, j: int, t: int) -> float:
        """Weighted throughput of rigid job j started at t (cut by the horizon)."""
        return self.weight[j] * min(int(self.s.duration[j]), self.s.T - t)

    def losses(self, j: int, t: int, cand: torch.Tensor) -> torch.Tensor:
        """(C,) float64: priority-weighted elastic service lost over j's run if
        it starts at t on each block of cand, the demand re-packed without it."""
        self.repack_checks += 1
        s, k = self.s, self.gpus[j]
        end = min(t + int(s.duration[j]), s.T)
        L, C, G = end - t, len(cand), s.G
        free = (~(self.busy | self.res)[:, t:end]).repeat(1, C)  # (G, C*L)
        g = torch.arange(G, device=self.dev)[:, None]
        col_block = cand.repeat_interleave(L)[None, :]  # (1, C*L)
        free &= ~((g >= col_block) & (g < col_block + k))
        need = self.need[self.elastic, t:end].repeat(1, C)  # (E, C*L)
        _, served = self.pack(free, need)
        w = torch.tensor([self.weight[e] for e in self.elastic], dtype=torch.float64,
                         device=self.dev)
        base = (w[:, None] * self.fp_served[:, t:end].double()).sum()
        got = (w[:, None] * served.double()).sum(0).reshape(C, L).sum(1)  # (C,)
        return (base - got).clamp(min=0)

    def earliest(self, j: int, t: int, P: torch.Tensor):
        """Earliest start > t at which some block of j is clear in the prefix P:
        (start, (B,) bool clear blocks) or None."""
        s, k, d = self.s, self.gpus[j], int(self.s.duration[j])
        if t + 1 >= s.T:
            return None
        b = self.blocks[j]
        t0 = torch.arange(t + 1, s.T, device=self.dev)  # (S,) candidate starts
        t1 = (t0 + d).clamp(max=s.T)
        ok = window_sum(P, b[:, None], b[:, None] + k, t0[None, :], t1[None, :]) == 0  # (B, S)
        when = ok.any(0).nonzero()
        if len(when) == 0:
            return None
        i = int(when[0, 0])
        return int(t0[i]), ok[:, i]

    def displacing(self, j: int, t: int, want_cs: torch.Tensor, later):
        """Best block to start j at t on, among the free blocks that overlap the
        elastic footprint: a block where the elastic demand re-packs without
        loss, else (displace) the one with the highest value net of the
        displaced elastic service, if that beats later() (what waiting for a
        demand-safe start would give; computed only when needed). Returns the
        block or None."""
        s, k = self.s, self.gpus[j]
        b = self.blocks[j]
        end = min(t + int(s.duration[j]), s.T)
        hard = window_sum(self.P_hard, b, b + k, t, end) == 0
        if not hard.any():
            return None
        # A lower bound on the loss first: at each step the elastic GPUs in use
        # must fit in the free GPUs minus this job's; any excess is lost, at
        # the lowest elastic priority per GPU at least. Skips hopeless re-packs.
        excess = (self.el_used[t:end] - (self.free_count[t:end] - k)).clamp(min=0).sum()
        if excess > 0:
            if not self.cfg.displace:
                return None
            bar = self.value(j, t) - self.min_el_priority * float(excess)
            if bar <= 1e-9 or bar <= later() + 1e-9:
                return None
        cand = b[hard]
        key = self.fit_key(j, cand, t, ~(self.busy | self.res)[:, t], want_cs)
        cand = cand[key.argsort()[: self.cfg.repack_blocks]]  # (C,) best fit first
        loss = self.losses(j, t, cand)
        if bool((loss <= 1e-9).any()):
            return int(cand[(loss <= 1e-9).nonzero()[0, 0]])
        if not self.cfg.displace:
            return None
        net = self.value(j, t) - loss  # (C,)
        i = int(net.argmax())
        return int(cand[i]) if float(net[i]) > 1e-9 and float(net[i]) > later() + 1e-9 else None

    def later_value(self, j: int, t: int) -> float:
        """What j gets if it waits for its earliest demand-safe start after t."""
        e = self.earliest(j, t, self.P)
        return self.wait_value(j, None if e is None else e[0])

    def wait_value(self, j: int, t_safe: int | None) -> float:
        """The value displacing must beat: j's value at its earliest demand-safe
        start; 0 when it has none. When the other waiting jobs could fill the
        free GPUs anyway, the GPUs j leaves would not idle: only a job with no
        demand-safe start displaces then (infinite bar otherwise)."""
        if t_safe is None:
            return 0.0
        if self.waiting_gpus - self.gpus[j] >= self.free_now:
            return float("inf")
        return self.value(j, t_safe)

    def try_start(self, j: int, t: int, want_cs: torch.Tensor, allow_repack: bool) -> bool:
        """Start j at t on its best-fit demand-safe block; False if none."""
        s, k = self.s, self.gpus[j]
        b = self.blocks[j]
        end = min(t + int(s.duration[j]), s.T)
        self.refresh(t)
        ok = window_sum(self.P, b, b + k, t, end) == 0  # (B,)
        if ok.any():
            cand = b[ok]
            key = self.fit_key(j, cand, t, ~(self.busy | self.res | self.fp)[:, t], want_cs)
            self.start(j, int(cand[key.argmin()]), t)
            return True
        if not allow_repack or not self.cfg.demand_aware:
            return False
        # Every free block overlaps the footprint: re-pack the elastic demand
        # without it (and weigh what it would displace).
        if not bool((window_sum(self.P_hard, b, b + k, t, end) == 0).any()):
            return False
        g = self.displacing(j, t, want_cs, lambda: self.later_value(j, t))
        if g is None:
            return False
        self.start(j, g, t)
        return True

    def reserve(self, j: int, t: int, want_cs: torch.Tensor, allow_repack: bool) -> bool:
        """EASY: reserve the earliest (time > t, block) at which j could start:
        beside the started jobs and the elastic footprint, or earlier on a
        block the elastic demand re-packs around (or, displacing, gives up)."""
        self.refresh(t)
        safe = self.earliest(j, t, self.P)
        hard = self.earliest(j, t, self.P_hard) if allow_repack and self.cfg.demand_aware else None
        if hard is not None and (safe is None or hard[0] < safe[0]):
            tr = hard[0]
            later = self.wait_value(j, None if safe is None else safe[0])
            # displacing() looks at t = tr: its clear blocks come from P_hard.
            g = self.displacing(j, tr, want_cs, lambda: later)
            if g is not None:
                return self._hold(j, g, tr)
        if safe is None:
            return False
        tr, clear = safe
        cand = self.blocks[j][clear]
        free_tr = ~(self.busy | self.res | self.fp)[:, tr]
        return self._hold(j, int(cand[self.fit_key(j, cand, tr, free_tr, want_cs).argmin()]), tr)

    def _hold(self, j: int, g: int, tr: int) -> bool:
        k, end = self.gpus[j], min(tr + int(self.s.duration[j]), self.s.T)
        self.res[g:g + k, tr:end] = True
        self.touch(tr, end)
        return True

    def schedule_rigid(self, t: int) -> None:
        s = self.s
        waiting = [j for j in self.queue if s.jobs[j].arrival <= t]
        self.waiting_gpus = sum(self.gpus[j] for j in waiting)  # GPUs the queue asks for
        self.free_now = int((~self.busy[:, t]).sum())  # GPUs no rigid or fixed cell holds
        if not waiting:
            return
        cols = self.res.any(0).nonzero()
        if len(cols):  # the last timestep's reservation is recomputed from scratch
            self.res.zero_()
            self.touch(int(cols[0, 0]), int(cols[-1, 0]) + 1)
        self.refresh(t)
        want_cs = prefix(self.want(waiting))  # (G + 1,)
        # Which jobs have a footprint-free block now: every pair at once.
        qpos = {j: i for i, j in enumerate(self.queue)}
        end = (t + self.q_duration[self.pair_job]).clamp(max=s.T)  # (pairs,)
        g0, g1 = self.pair_start, self.pair_start + self.pair_k
        pair_ok = torch.stack([window_sum(self.P, g0, g1, t, end) == 0,  # beside the footprint
                               window_sum(self.P_hard, g0, g1, t, end) == 0])  # (2, pairs)
        job_ok = torch.zeros(2, len(self.queue), dtype=torch.long, device=self.dev)
        job_ok.index_add_(1, self.pair_job, pair_ok.long())
        maybe, maybe_hard = (job_ok > 0).tolist()
        reserved = not self.cfg.reservation
        repacks_before = self.repack_checks
        started = []
        for j in waiting:
            ok = maybe[qpos[j]] and self.try_start(j, t, want_cs, allow_repack=False)
            if (not ok and maybe_hard[qpos[j]]
                    and self.repack_checks - repacks_before < self.cfg.repack_jobs):
                ok = self.try_start(j, t, want_cs, allow_repack=True)
            if ok:
                started.append(j)
            elif not reserved:
                reserved = self.reserve(
                    j, t, want_cs, self.repack_checks - repacks_before < self.cfg.repack_jobs)
        if started:
            done = set(started)
            keep = [i for i, j in enumerate(self.queue) if j not in done]
            self._keep(keep)

    def _keep(self, keep: list[int]) -> None:
        """Drop started jobs from the queue and its flat pair arrays."""
        old = torch.full((len(self.queue),), -1, dtype=torch.long, device=self.dev)
        old[keep] = torch.arange(len(keep), device=self.dev)
        self.queue = [self.queue[i] for i in keep]
        alive = old[self.pair_job] >= 0
        self.pair_job = old[self.pair_job][alive]
        self.pair_start = self.pair_start[alive]
        self.pair_k = self.pair_k[alive]
        self.q_duration = self.q_duration[keep] if keep else self.q_duration[:0]

    # ---- elastic service at t ---------------------------------------------------
    def serve_elastic(self, t: int) -> None:
        if not self.elastic:
            return
        G = self.s.G
        w = [self.weight[e] for e in self.elastic]
        need = [int(v) for v in self.need[self.elastic, t].tolist()]
        # Best fit, replica by replica.
        occ = self.busy[:, t].clone()  # (G,) bool
        fit: list[list[int]] = []
        fit_value = 0.0
        for i, e in enumerate(self.elastic):
            k, b, picks = self.gpus[e], self.blocks[e], []
            later = [f for f, n in zip(self.elastic[i + 1:], need[i + 1:]) if n > 0]
            want = (self.compat[later].long().sum(0) if later
                    else torch.zeros(G, dtype=torch.long, device=self.dev))
            want_cs = prefix(want)
            scarce = want_cs[b + k] - want_cs[b]  # (B,)
            for _ in range(need[i]):
                cs = prefix(occ)
                ok = cs[b + k] - cs[b] == 0
                if not ok.any():
                    break
                _, run = _run_positions((~occ)[:, None], self.gpu_first, self.gpu_last)
                key = (scarce * (G + 1) + run[:, 0][b].clamp(max=G)) * (G + 1) + b
                key = torch.where(ok, key, torch.iinfo(torch.long).max)
                g = int(b[key.argmin()])
                occ[g:g + k] = True
                picks.append(g)
            fit.append(picks)
            fit_value += w[i] * len(picks)
        # The footprint's highest-first packing at t, if it serves more.
        free = ~self.busy[:, t:t + 1]
        cov, served = self.pack(free, self.need[self.elastic, t:t + 1])
        pack_value = sum(wi * int(n) for wi, n in zip(w, served[:, 0].tolist()))
        if pack_value > fit_value:
            f = free.clone()
            for i, e in enumerate(self.elastic):
                k = self.gpus[e]
                ff = (f & self.compat[e][:, None]).flip(0)
                take = first_n(self.packer_high.starts(ff, k), self.need[e, t:t + 1])
                c = cover(take, k).flip(0)
                f &= ~c
                self.owner[c[:, 0], t] = e
            return
        for e, picks in zip(self.elastic, fit):
            k = self.gpus[e]
            for g in picks:
                self.owner[g:g + k, t] = e

    # ---- main loop ----------------------------------------------------------------
    def run(self) -> Plan:
        for t in range(self.s.T):
            if self.queue:
                self.schedule_rigid(t)
            self.serve_elastic(t)
        return Plan(owner=self.owner.cpu(), info={"repack_checks": self.repack_checks})
