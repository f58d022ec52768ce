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
3. Repair (gpualloc.repair): place the jobs in that order at their rounded
   start when it is free, else at their earliest feasible start, where the
   known elastic demand still fits; fill what is left with elastic replicas,
   highest priority first. Feasible whatever the relaxation did. The same
   repair from plain priority order, and FIFO's placement, compete; the best
   plan goes on.
4. Improve: local search on the exact objective (ruin and recreate, and
   forcing in waiting jobs the relaxation wanted), never accepting a worse plan.
"""
from __future__ import annotations

import time
from contextlib import contextmanager

import torch

from gpualloc import progress
from gpualloc.config import SolverConfig
from gpualloc.kernels.pgd import pgd_step, pgd_step_packed
from gpualloc.plan import Plan
from gpualloc.fifo import fifo
from gpualloc.repair import adopt, build, build_parallel, fixed_jobs, improve, priority_order
from gpualloc.scenario import Scenario

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@contextmanager
def _cpu_threads(device: torch.device, n: int):
    # The repair's tensors are small (G x T) and a relaxation step is a few
    # passes over memory: more threads gain little, and where a core is
    # busy with anything else torch's thread pool spins and runs ~10x slower
    # (measured: 1.4 s on one thread, 13.8 s on two, beside one busy process).
    if device.type != "cpu" or n <= 0:
        yield
        return
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def relax(s: Scenario, cfg: SolverConfig, device: torch.device, planned: torch.Tensor):
    """Projected gradient ascent on the relaxed grid. `planned` (J,) bool marks
    the jobs to plan. Returns the column masses C (J, T), averaged over the
    second half of the steps, and the last step's (objective, capacity excess,
    column excess, area excess).

    Each step moves x along the value gradient (value per GPU-step, slightly
    discounted over time) and the contiguity penalty's, then projects onto
    the box, the masks and the constraints through their multipliers: one per
    cell (capacity), per (job, t) (gang size, elastic demand) and per rigid
    job (area). Each multiplier takes a Newton step on its constraint's
    violation, over the number of positive cells the kernel counts (the
    steepest its sum can fall): the projection is approximate at each step
    and exact at a fixed point. The contiguity weight grows geometrically from penalty_start
    to penalty_end over the steps."""
    G, J, T = s.G, s.J, s.T
    dtype = DTYPES[cfg.dtype]
    compat = (s.compat & planned[:, None]).to(device)  # (J, G)
    free = (s.fixed < 0).to(device) if s.fixed is not None else torch.ones(
        G, T, dtype=torch.bool, device=device)
    rigid = s.rigid.to(device)
    k = s.gpus.to(device).float()
    t = torch.arange(T, device=device)
    value = (s.priority / s.priority.max().clamp(min=1e-12) if J else s.priority).float().to(device)
    value_t = value[:, None] * (1 - cfg.time_discount * t[None, :] / max(T, 1))  # (J, T)
    # Column cap: a rigid job's gang size, an elastic job's demand in GPUs.
    col_cap = torch.where(rigid[:, None], k[:, None].expand(J, T),
                          (s.demand.to(device) * s.gpus.to(device)[:, None]).float())
    area_cap = torch.where(rigid, k * s.duration.to(device).float(), torch.full_like(k, 1e30))
    grid = Grid(s, cfg, device, compat, free, dtype)
    price_cell = torch.zeros(G, T, device=device)
    price_col = torch.zeros(J, T, device=device)
    price_area = torch.zeros(J, device=device)
    C_mean = torch.zeros(J, T, device=device)
    averaged = 0
    ratio = cfg.penalty_end / cfg.penalty_start
    bar = progress.bar(total=cfg.iterations, desc=f"relax {s.name}", unit="step", leave=False,
                       disable=not cfg.progress)
    last = (0.0, 0.0, 0.0, 0.0)
    for i in range(cfg.iterations):
        lam = cfg.penalty_start * ratio ** (i / max(cfg.iterations - 1, 1))
        gain = cfg.step * value_t - price_col - price_area[:, None]  # (J, T)
        S, N, C, M, A, K = (v.float() for v in grid.step(
            gain, price_cell, cfg.step * cfg.smooth * lam))
        # Newton steps on the multipliers: violation over slope.
        damp = cfg.damping
        price_cell = (price_cell + damp * (S - 1) / N.clamp(min=1)).clamp(min=0)
        price_col = (price_col + damp * (C - col_cap) / M.clamp(min=1)).clamp(min=0)
        price_area = (price_area + damp * (A - area_cap) / K.clamp(min=1)).clamp(min=0)
        if 2 * i >= cfg.iterations:
            C_mean += C
            averaged += 1
        if not bar.disable or i == cfg.iterations - 1:
            last = (float((value_t * C).sum()), float((S - 1).clamp(min=0).sum()),
                    float((C - col_cap).clamp(min=0).sum()),
                    float((A - area_cap).clamp(min=0).sum()))
            bar.set_postfix(objective=f"{last[0]:.0f}", capacity=f"{last[1]:.1f}",
                            column=f"{last[2]:.1f}", refresh=False)
            bar.update()
    bar.close()
    return (C_mean / max(averaged, 1)).cpu().double(), last, grid.representation


class Grid:
    """The relaxed grid in one of two representations, the same objective and
    penalties either way:
    - dense: x (G, J, T), every cell; the Triton kernel on CUDA;
    - packed: x (G, L), only the cells a job can ever hold: after its arrival,
      and for a rigid job within `window_slack` steps of waiting plus its
      duration. Chosen when the dense grid exceeds `dense_max_cells` (the
      CPU cannot sweep it fast enough) or the memory budget."""

    def __init__(self, s: Scenario, cfg: SolverConfig, device, compat, free, dtype):
        G, J, T = s.G, s.J, s.T
        self.J = J
        self.compat, self.free = compat, free
        self.arrival, self.rigid = s.arrival.to(device), s.rigid.to(device)
        end = torch.where(s.rigid, torch.clamp(s.arrival + cfg.window_slack + s.duration, max=T),
                          torch.full_like(s.arrival, T))
        width = (end - s.arrival).clamp(min=0)  # (J,) columns per job
        dense_cells = G * J * T
        self.representation = cfg.grid
        if cfg.grid == "auto":
            self.representation = "packed" if (device.type == "cpu" and dense_cells
                                               > cfg.dense_max_cells) else "dense"
        t = torch.arange(T, device=device)
        if self.representation == "dense":
            self.x = torch.zeros(G, J, T, device=device, dtype=dtype)
            self.mask = None
            if device.type == "cpu":  # the reference would rebuild it every step
                self.mask = (compat.T[:, :, None] & (t[None, None, :] >= self.arrival[None, :, None])
                             & free[:, None, :]).to(dtype)  # (G, J, T)
            return
        L = int(width.sum())
        self.cols_job = torch.repeat_interleave(torch.arange(J), width).to(device)  # (L,)
        first = torch.cumsum(width, 0) - width
        self.cols_t = (torch.arange(L) - torch.repeat_interleave(first, width)
                       + torch.repeat_interleave(s.arrival, width)).to(device)  # (L,)
        same_job = self.cols_job[1:] == self.cols_job[:-1]
        self.smooth_cols = (same_job & self.rigid[self.cols_job[1:]]).to(dtype)  # (L-1,)
        # A window's first column after t=0 and last before T border cells
        # outside it, which are zero: the dense grid's Laplacian sees them too.
        last = first + width - 1
        rigid_cpu = s.rigid & (width > 0)
        edges = torch.cat([first[rigid_cpu & (s.arrival > 0)], last[rigid_cpu & (end < T)]])
        self.edges = edges.to(device)
        self.mask = (compat.T[:, self.cols_job] & free[:, self.cols_t]).to(dtype)  # (G, L)
        self.x = torch.zeros(G, L, device=device, dtype=dtype)

    def step(self, gain, price, smooth):
        if self.representation == "dense":
            _, *out = pgd_step(self.x, self.compat, self.arrival, self.free, gain, price,
                               self.rigid, smooth, self.mask)
            return out
        _, *out = pgd_step_packed(self.x, self.cols_job, self.cols_t, self.mask, gain, price,
                                  self.smooth_cols, self.edges, smooth, self.J)
        return out


def round_starts(s: Scenario, C: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per rigid job, the start whose window [s, s + duration) holds the most
    relaxed mass, and that mass as a fraction of the job (J,), (J,)."""
    J, T = C.shape
    cs = torch.zeros(J, T + 1, dtype=C.dtype)
    cs[:, 1:] = torch.cumsum(C, 1)
    t = torch.arange(T)
    end = torch.minimum(t[None, :] + s.duration[:, None], torch.tensor(T))  # (J, T)
    window = cs.gather(1, end) - cs[:, :T]  # (J, T)
    window[t[None, :] < s.arrival[:, None]] = -1
    start = window.argmax(1)
    length = (end.gather(1, start[:, None]).flatten() - start).clamp(min=1)
    score = window.gather(1, start[:, None]).flatten() / (s.gpus * length)
    return start, score


def relaxed_order(s: Scenario, start: torch.Tensor, score: torch.Tensor,
                  threshold: float) -> list[int]:
    """Jobs the relaxation runs (at least `threshold` of their mass in one
    window) by relaxed start; the rest after them, by priority."""
    runs = (score >= threshold).tolist()
    start = start.tolist()
    key = lambda j: (0, start[j], -s.jobs[j].priority, j) if runs[j] else (  # noqa: E731
        1, -s.jobs[j].priority, s.jobs[j].arrival, j)
    return sorted(range(s.J), key=key)


def allocator(s: Scenario, cfg: SolverConfig | None = None,
              device: torch.device | str = "cpu") -> Plan:
    cfg = cfg or SolverConfig()
    device = torch.device(device)
    info: dict = {}
    clock = time.perf_counter()
    planned = ~fixed_jobs(s) & ~s.unplaceable
    roundings = {}  # name -> (builder, order, starts to try first or None)
    guide = None
    if cfg.rounding in ("relaxed", "best") and s.J:
        with _cpu_threads(device, cfg.cpu_threads):
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
    info["relax_s"] = time.perf_counter() - clock
    if cfg.rounding in ("priority", "best") or not roundings:
        roundings["serial/priority"] = ("serial", priority_order(s), None)
        roundings["parallel/priority"] = ("parallel", priority_order(s), None)

    clock = time.perf_counter()
    with _cpu_threads(device, cfg.cpu_threads):
        built = {name: build(s, order, device, cfg.demand_aware, at) if how == "serial"
                 else build_parallel(s, order, device, cfg.demand_aware)
                 for name, (how, order, at) in roundings.items()}
        if s.fixed is None:
            # FIFO's placement competes too, so the search never starts below the baseline.
            built["fifo"] = adopt(s, fifo(s, device=device).owner, device)
        values = {name: sched.value() for name, sched in built.items()}
        chosen = max(values, key=lambda name: (values[name], "relaxed" in name))
        sched = built[chosen]
        info["repair_values"], info["rounding"] = values, chosen
        info["repair_s"] = time.perf_counter() - clock
        clock = time.perf_counter()
        bar = progress.bar(total=cfg.local_search_iters, desc=f"search {s.name}", unit="move",
                           leave=False, disable=not cfg.progress)

        def tick(_, value):
            bar.set_postfix(objective=f"{value:.0f}", refresh=False)
            bar.update()

        stats = improve(sched, cfg.local_search_iters, cfg.seed, tuple(cfg.ruin_window),
                        demand_aware=cfg.demand_aware, guide=guide,
                        patience=cfg.local_search_patience,
                        progress=None if bar.disable else tick)
        bar.close()
        info["local_search"] = vars(stats)
        owner = sched.owner()
    info["local_search_s"] = time.perf_counter() - clock
    return Plan(owner=owner, info=info)
