"""FIFO, the baseline, exactly as PROBLEM.md defines it: whole nodes reserved for
real-time inference, rigid jobs in arrival order with head-of-line blocking.

Vectorized: the fit of every candidate block of the head job is one gather on
a prefix sum; elastic service is computed for all timesteps at once per job.
"""
from __future__ import annotations

import torch

from gpualloc.blocks import Packer, cover, first_n, free_blocks, prefix
from gpualloc.config import FifoConfig
from gpualloc.plan import IDLE, Plan, empty_owner
from gpualloc.scenario import Scenario


def reservation(s: Scenario, reserve: int | None = None) -> torch.Tensor:
    """(G,) bool: GPUs of the nodes reserved for elastic jobs. The fewest nodes,
    from the end of the GPU range, among nodes compatible with some elastic
    job, that cover the peak total elastic demand; `reserve` overrides the count."""
    reserved = torch.zeros(s.G, dtype=torch.bool)
    elastic = ~s.rigid
    if not elastic.any():
        return reserved
    node_ok = s.pool_compat[elastic].any(0)[s.node_pool]  # (N,)
    candidates = node_ok.nonzero().flatten().flip(0).tolist()  # from the end
    sizes = [s.pools[int(s.node_pool[n])].gpus_per_node for n in candidates]
    if reserve is None:
        peak, taken, count = s.peak_elastic_gpus(), 0, 0
        for size in sizes:
            if taken >= peak:
                break
            taken += size
            count += 1
    else:
        count = min(reserve, len(candidates))
    for n in candidates[:count]:
        reserved[s.gpu_node == n] = True
    return reserved


def fifo(s: Scenario, cfg: FifoConfig | None = None, device: torch.device | str = "cpu") -> Plan:
    cfg = cfg or FifoConfig()
    owner = empty_owner(s, device)
    reserved = reservation(s, cfg.reserve).to(device)
    _serve_elastic(s, owner, reserved, device)
    unplaceable = _run_rigid(s, owner, reserved, device)
    return Plan(owner=owner.cpu(), info={
        "reserved_nodes": int(s.gpu_node[reserved.cpu()].unique().numel()),
        "fifo_unplaceable": [s.jobs[j].id for j in unplaceable]})


def _serve_elastic(s: Scenario, owner, reserved, device) -> None:
    # Arrival order, then scenario order; each job up to its demand, lowest
    # free block first, all timesteps at once.
    packer = Packer(s, device)
    order = sorted((j for j in range(s.J) if not s.jobs[j].rigid),
                   key=lambda j: (s.jobs[j].arrival, j))
    for j in order:
        k = s.jobs[j].gpus
        free = (owner == IDLE) & reserved[:, None] & s.compat[j].to(device)[:, None]  # (G, T)
        take = first_n(packer.starts(free, k), s.demand[j].to(device))
        owner[cover(take, k)] = j


def _run_rigid(s: Scenario, owner, reserved, device) -> list[int]:
    queue = sorted((j for j in range(s.J) if s.jobs[j].rigid), key=lambda j: (s.jobs[j].arrival, j))
    outside = ~reserved
    busy_until = torch.zeros(s.G, dtype=torch.long, device=device)
    # Candidate blocks that avoid the reservation, per block class.
    cs_res = prefix(reserved)
    starts = [b.to(device) for b in s.class_blocks]
    starts = [b[free_blocks(b, k, cs_res)] for b, k in zip(starts, s.class_size)]
    unplaceable = []
    t, head = 0, 0
    while head < len(queue) and t < s.T:
        j = queue[head]
        b = starts[int(s.job_class[j])]
        if len(b) == 0:  # no block outside the reservation could ever hold it
            unplaceable.append(j)
            head += 1
            continue
        arrival = s.jobs[j].arrival
        if arrival > t:
            t = arrival
            continue
        k = s.jobs[j].gpus
        fits = free_blocks(b, k, prefix((busy_until > t) | ~outside))
        hit = fits.nonzero()
        if len(hit):
            g = int(b[hit[0, 0]])
            end = min(t + s.jobs[j].duration, s.T)
            owner[g:g + k, t:end] = j
            busy_until[g:g + k] = end
            head += 1
            continue
        # Head-of-line blocking: nothing changes until a running job ends.
        later = busy_until[busy_until > t]
        t = int(later.min()) if len(later) else s.T
    return unplaceable
