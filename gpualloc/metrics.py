"""Every metric of PROBLEM.md for one plan, and its gains against FIFO's plan."""
from __future__ import annotations

import numpy as np
import torch

from gpualloc.check import shortfall
from gpualloc.objective import useful, useful_of, weighted_throughput  # noqa: F401 (re-exported)
from gpualloc.plan import held, segments
from gpualloc.scenario import KINDS, RIGID_KINDS, Scenario


def metrics(s: Scenario, owner: torch.Tensor) -> dict:
    """All metrics of PROBLEM.md for a (feasible) plan, as plain numbers."""
    owner = owner.cpu().long()
    n = held(s, owner)
    seg = segments(s, owner) if bool(s.preemptible.any()) else None
    u = useful(s, n, seg)
    cells = s.G * s.T
    out: dict = {
        "utilization": float(u.sum()) / cells,
        "weighted_throughput": float((s.priority[:, None] * u.double()).sum()),
        "allocated": float((owner >= 0).sum()) / cells,
    }
    demanded = int(s.demand[~s.rigid].sum())
    served = int(torch.minimum(n // s.gpus[:, None], s.demand)[~s.rigid].sum())
    out["realtime_slo"] = served / demanded if demanded else 1.0
    out["replicas_demanded"] = demanded
    out["replicas_served"] = served
    # Rule 4: replicas below the guarantee, and per service the lowest share
    # of its demand served at any timestep it demands something.
    out["guarantee_shortfall"] = int(shortfall(s, owner).sum())
    replicas = torch.minimum(n // s.gpus[:, None], s.demand)  # (J, T)
    wanted = s.demand > 0
    share = torch.where(wanted, replicas.double() / s.demand.clamp(min=1), float("inf"))
    out["lowest_served_share"] = {
        s.jobs[j].id: float(share[j].min()) for j in range(s.J)
        if not s.jobs[j].rigid and bool(wanted[j].any())}

    ran = n.sum(1) > 0
    start = torch.where(n > 0, torch.arange(s.T), s.T).amin(1)  # (J,) first timestep held
    completed = ran & (start + s.duration <= s.T)
    if seg is not None:  # a preemptible job: done inside the horizon
        completed = torch.where(s.preemptible, seg.done, completed)
    wait = (start - s.arrival).double()
    kinds = [j.kind for j in s.jobs]
    per_kind = {}
    for kind in KINDS:
        mask = torch.tensor([k == kind for k in kinds], dtype=torch.bool)
        if not mask.any():
            continue
        row = {"jobs": int(mask.sum()), "unplaceable": int((mask & s.unplaceable).sum())}
        if kind in RIGID_KINDS:
            waits = wait[mask & s.rigid & ran].numpy()
            row.update(started=int((mask & ran).sum()), completed=int((mask & completed).sum()),
                       mean_wait=_mean(waits), p95_wait=_p95(waits))
        else:
            row["served_any"] = int((mask & ran).sum())
        per_kind[kind] = row
    out["per_kind"] = per_kind
    rigid_waits = wait[s.rigid & ran].numpy()
    out["jobs_started"] = int((s.rigid & ran).sum())
    out["jobs_completed"] = int((s.rigid & completed).sum())
    out["unplaceable"] = int(s.unplaceable.sum())
    out["mean_wait"] = _mean(rigid_waits)
    out["p95_wait"] = _p95(rigid_waits)
    out["preemptions"] = int(seg.preemptions.sum()) if seg is not None else 0
    out["restore_gpu_steps"] = (int((seg.restoring * s.gpus[:, None]).sum())
                                if seg is not None else 0)
    return out


def gains(m: dict, fifo: dict) -> dict:
    """PROBLEM.md's gains against the FIFO plan of the same scenario."""
    base = fifo["weighted_throughput"]
    return {
        "utilization_points": 100.0 * (m["utilization"] - fifo["utilization"]),
        # Undefined (None) when FIFO does no useful work at all.
        "weighted_throughput_pct": 100.0 * (m["weighted_throughput"] / base - 1.0) if base else None,
    }


def _mean(x: np.ndarray) -> float | None:
    return float(x.mean()) if len(x) else None


def _p95(x: np.ndarray) -> float | None:
    # numpy's default (linear interpolation between order statistics).
    return float(np.percentile(x, 95)) if len(x) else None

