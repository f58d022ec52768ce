"""The policy registry: name -> policy(scenario, run config, device) -> Plan.

Entries import their module lazily, so an optional dependency (OR-Tools for
`exact`) is needed only when that policy runs.
"""
from __future__ import annotations

from typing import Callable

import torch

from gpualloc.config import RunConfig
from gpualloc.plan import Plan
from gpualloc.scenario import Scenario

Policy = Callable[[Scenario, RunConfig, torch.device], Plan]


def _fifo(s: Scenario, cfg: RunConfig, device: torch.device) -> Plan:
    from gpualloc.policies.fifo import fifo
    return fifo(s, cfg.fifo, device)


def _allocator(s: Scenario, cfg: RunConfig, device: torch.device) -> Plan:
    from gpualloc.policies.allocator import allocator
    from gpualloc.memory import fit_grid
    # Before the grid exists: the representation that fits, or a clear error.
    return allocator(s, fit_grid(s, cfg.solver, device), device)


def _greedy(s: Scenario, cfg: RunConfig, device: torch.device) -> Plan:
    from gpualloc.policies.greedy import greedy
    return greedy(s, cfg.greedy, device)


def _backfill(s: Scenario, cfg: RunConfig, device: torch.device) -> Plan:
    from gpualloc.policies.backfill import backfill
    return backfill(s)


def _exact(s: Scenario, cfg: RunConfig, device: torch.device) -> Plan:
    from gpualloc.policies.exact import exact
    return exact(s, cfg.exact, device, seed=cfg.seed)


POLICIES: dict[str, Policy] = {
    "fifo": _fifo,
    "allocator": _allocator,
    "greedy": _greedy,
    "backfill": _backfill,
    "exact": _exact,
}
