"""The relaxed grid x in [0, 1] and the one rule that picks its representation.

- dense: x (G, J, T), every cell; the Triton kernel on CUDA;
- packed: x (G, L), only the cells a job can ever hold: after its arrival,
  and for a rigid job within `window_slack` steps of waiting plus its
  duration. Chosen when the dense grid exceeds `dense_max_cells` on the CPU
  (it cannot sweep it fast enough), or by the memory guard when the dense
  grid does not fit (gpualloc.policies.allocator.memory.fit).

The memory guard estimates the grid this module builds: it reads
`representation` and `window_end` from here, never a copy of them.
"""
from __future__ import annotations

import torch

from gpualloc.config import SolverConfig
from gpualloc.kernels.pgd import pgd_step, pgd_step_packed, scratch, triton_available
from gpualloc.kernels.pgd_cpu import compiled
from gpualloc.scenario import Scenario

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def representation(s: Scenario, cfg, device: torch.device | str) -> str:
    """The grid built for `s` under `cfg` (a SolverConfig): cfg.grid, or for
    auto, packed on the CPU above cfg.dense_max_cells cells and dense otherwise."""
    if cfg.grid != "auto":
        return cfg.grid
    cpu = torch.device(device).type == "cpu"
    return "packed" if cpu and s.G * s.J * s.T > cfg.dense_max_cells else "dense"


def window_end(s: Scenario, window_slack: int) -> torch.Tensor:
    """(J,) int64: the end of the columns the packed grid keeps per job (it
    starts at arrival): a rigid job's arrival + window_slack + duration, cut
    at T; an elastic job's T."""
    return torch.where(s.rigid, torch.clamp(s.arrival + window_slack + s.duration, max=s.T),
                       torch.full_like(s.arrival, s.T))


def packed_columns(s: Scenario, window_slack: int) -> int:
    """L, the packed grid's columns."""
    if s.J == 0:
        return 0
    return int((window_end(s, window_slack) - s.arrival).clamp(min=0).sum())


class Grid:
    """The relaxed grid in the representation `representation` picks; the
    same objective and penalties either way."""

    def __init__(self, s: Scenario, cfg: SolverConfig, device, compat, free, dtype):
        G, J, T = s.G, s.J, s.T
        self.J = J
        self.compat, self.free = compat, free
        self.arrival, self.rigid = s.arrival.to(device), s.rigid.to(device)
        end = window_end(s, cfg.window_slack)
        width = (end - s.arrival).clamp(min=0)  # (J,) columns per job
        self.representation = representation(s, cfg, device)
        t = torch.arange(T, device=device)
        if self.representation == "dense":
            self.x = torch.zeros(G, J, T, device=device, dtype=dtype)
            self.mask = None
            self.work = None  # the fused kernels (Triton, compiled CPU) need none
            if compiled(self.x):
                return
            if device.type == "cpu":  # the reference would rebuild it every step
                self.mask = (compat.T[:, :, None] & (t[None, None, :] >= self.arrival[None, :, None])
                             & free[:, None, :]).to(dtype)  # (G, J, T)
            if device.type == "cpu" or not triton_available():
                self.work = scratch(self.x)
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
        self.work = None if compiled(self.x) else scratch(self.x)

    def step(self, gain, price, smooth):
        if self.representation == "dense":
            _, *out = pgd_step(self.x, self.compat, self.arrival, self.free, gain, price,
                               self.rigid, smooth, self.mask, self.work)
            return out
        _, *out = pgd_step_packed(self.x, self.cols_job, self.cols_t, self.mask, gain, price,
                                  self.smooth_cols, self.edges, smooth, self.J, self.work)
        return out
