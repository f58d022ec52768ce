"""FIFO, the baseline, exactly as PROBLEM.md defines it: whole nodes reserved for
real-time inference, rigid jobs in arrival order with head-of-line blocking.

On the placement core: elastic service is its elastic fill (lowest block
first) inside the reservation; the rigid queue is one compiled loop over
events (a job's end), the head taking the lowest free block outside it.
"""
from __future__ import annotations

import numpy as np
import torch
from numba import njit

from gpualloc.core import owner_of
from gpualloc.config import FifoConfig
from gpualloc.core.layout import layout
from gpualloc.core.pack import fill_elastic
from gpualloc.plan import IDLE, Plan
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
    lay = layout(s)
    reserved = reservation(s, cfg.reserve)
    owner = np.full((s.T, s.G), IDLE, dtype=np.int64)  # (T, G)
    # Elastic jobs: arrival order, then scenario order; each up to its
    # demand, lowest free block first, inside the reservation.
    elastic = sorted((j for j in range(s.J) if not lay.rigid[j]),
                     key=lambda j: (lay.arrival[j], j))
    free = np.repeat(reserved.numpy()[None, :], s.T, axis=0)  # (T, G)
    fill_elastic(lay, free, owner, elastic, lay.demand[elastic])
    # Rigid jobs: candidate blocks that avoid the reservation, per class.
    outside = np.zeros(s.G + 1, dtype=np.int64)
    outside[1:] = np.cumsum(reserved.numpy())
    size = np.array(s.class_size, dtype=np.int64)
    start = lay.class_blocks
    block_size = np.repeat(size, np.diff(lay.class_ptr))
    clear = outside[start + block_size] - outside[start] == 0
    queue = np.array(sorted((j for j in range(s.J) if lay.rigid[j]),
                            key=lambda j: (lay.arrival[j], j)), dtype=np.int64)
    unplaceable = np.zeros(s.J, dtype=np.bool_)
    _run_rigid(queue, lay.arrival, lay.gpus, lay.duration, lay.job_class, lay.class_ptr,
               lay.class_blocks, clear, s.G, s.T, owner, unplaceable)
    return Plan(owner=owner_of(owner), info={
        "reserved_nodes": int(s.gpu_node[reserved].unique().numel()),
        "fifo_unplaceable": [s.jobs[j].id for j in queue if unplaceable[j]]})


@njit(cache=True)
def _run_rigid(queue, arrival, gpus, duration, job_class, class_ptr, class_blocks, clear, G, T,
               owner, unplaceable):
    """The head of the queue starts on the lowest free block outside the
    reservation (`clear` marks those blocks) while it fits; when it does not,
    nothing starts until a running job ends (no backfill). A job no block
    outside the reservation could ever hold is unplaceable and leaves."""
    busy_until = np.zeros(G, dtype=np.int64)
    t, head = 0, 0
    while head < queue.shape[0] and t < T:
        j = queue[head]
        c = job_class[j]
        k = gpus[j]
        possible = False
        for x in range(class_ptr[c], class_ptr[c + 1]):
            possible = possible or clear[x]
        if not possible:
            unplaceable[j] = True
            head += 1
            continue
        if arrival[j] > t:
            t = arrival[j]
            continue
        hit = -1
        for x in range(class_ptr[c], class_ptr[c + 1]):
            if not clear[x]:
                continue
            b = class_blocks[x]
            ok = True
            for g in range(b, b + k):
                if busy_until[g] > t:
                    ok = False
                    break
            if ok:
                hit = b
                break
        if hit >= 0:
            end = min(t + duration[j], T)
            for tt in range(t, end):
                for g in range(hit, hit + k):
                    owner[tt, g] = j
            for g in range(hit, hit + k):
                busy_until[g] = end
            head += 1
            continue
        # Head-of-line blocking: nothing changes until a running job ends.
        nxt = T
        for g in range(G):
            if busy_until[g] > t and busy_until[g] < nxt:
                nxt = busy_until[g]
        t = nxt
