"""Relax: projected gradient ascent on the relaxed grid (the allocator's first stage)."""
from __future__ import annotations

import torch

from gpualloc import progress
from gpualloc.config import SolverConfig
from gpualloc.core.guarantee import planning_fixed
from gpualloc.core import still_wanted, time_major
from gpualloc.policies.allocator.grid import DTYPES, Grid
from gpualloc.scenario import Scenario


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
    # Cells decided before planning and the guaranteed replicas are not the
    # relaxation's to move; the demand it sees is what they leave.
    fixed = planning_fixed(s)
    free = (fixed < 0).to(device) if fixed is not None else torch.ones(
        G, T, dtype=torch.bool, device=device)
    demand = s.demand if fixed is None else torch.from_numpy(
        still_wanted(s, time_major(fixed)))  # (J, T) what the fixed cells leave
    rigid = s.rigid.to(device)
    k = s.gpus.to(device).float()
    t = torch.arange(T, device=device)
    value = (s.priority / s.priority.max().clamp(min=1e-12) if J else s.priority).float().to(device)
    value_t = value[:, None] * (1 - cfg.time_discount * t[None, :] / max(T, 1))  # (J, T)
    # Column cap: a rigid job's gang size, an elastic job's demand in GPUs.
    col_cap = torch.where(rigid[:, None], k[:, None].expand(J, T),
                          (demand.to(device) * s.gpus.to(device)[:, None]).float())
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
