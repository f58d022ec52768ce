"""The value of a plan, in one place: sum over jobs j and steps t of
priority_j * useful_j(t) * (1 - discount)^t. At discount 0 it is PROBLEM.md's
weighted throughput (what the metrics report); online, the policies maximize
it with a small discount. The compiled core keeps the same value incrementally
(gpualloc.core.schedule.Schedule.value) and is tested against this one."""
from __future__ import annotations

import torch

from gpualloc.plan import Segments, held, segments
from gpualloc.scenario import Scenario


def useful(s: Scenario, n: torch.Tensor, seg: Segments | None = None) -> torch.Tensor:
    """(J, T) int64 useful GPUs from (J, T) held GPUs: a rigid job's GPUs while
    it runs (a preemptible one's while it progresses: `seg`, needed when the
    scenario has preemptible jobs), an elastic job's whole replicas up to demand."""
    k = s.gpus[:, None]
    replicas = torch.minimum(n // k, s.demand)
    out = torch.where(s.rigid[:, None], n, replicas * k)
    if seg is not None:
        out = torch.where(s.preemptible[:, None], seg.progress * k, out)
    return out


def useful_of(s: Scenario, owner: torch.Tensor) -> torch.Tensor:
    """(J, T) useful GPUs of the (G, T) owner grid."""
    owner = owner.cpu().long()
    seg = segments(s, owner) if bool(s.preemptible.any()) else None
    return useful(s, held(s, owner), seg)


def job_values(s: Scenario, owner: torch.Tensor, discount: float = 0.0) -> torch.Tensor:
    """(J,) float64: each job's part of the value."""
    value = s.priority[:, None] * useful_of(s, owner).double()  # (J, T)
    if discount:
        value = value * (1 - discount) ** torch.arange(s.T, dtype=torch.float64)
    return value.sum(1)


def value(s: Scenario, owner: torch.Tensor, discount: float = 0.0) -> float:
    """The value of the (G, T) owner grid; discount 0: the weighted throughput."""
    v = s.priority[:, None] * useful_of(s, owner).double()  # (J, T)
    if discount:
        v = v * (1 - discount) ** torch.arange(s.T, dtype=torch.float64)
    return float(v.sum())


def weighted_throughput(s: Scenario, owner: torch.Tensor) -> float:
    """PROBLEM.md's objective: sum over j, t of priority_j * useful(j, t)."""
    return value(s, owner)
