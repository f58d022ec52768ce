"""A small policy that honours Scenario.fixed, for testing online mode until
the registry's own (greedy, allocator) do: real-time demand first, highest
priority first, lowest free blocks; then rigid jobs by priority, each at its
earliest start on the lowest free block. Not a good policy: a correct one."""
from __future__ import annotations


from gpualloc.blocks import Packer, cover, first_n, free_blocks, prefix
from gpualloc.plan import IDLE, Plan, empty_owner


def fixed_greedy(s, cfg=None, device="cpu") -> Plan:
    owner = s.fixed.clone() if s.fixed is not None else empty_owner(s)  # (G, T)
    decided = set(owner[owner >= 0].unique().tolist())
    packer = Packer(s)
    by_priority = sorted(range(s.J), key=lambda j: (-s.jobs[j].priority, s.jobs[j].arrival, j))
    for j in by_priority:
        if s.jobs[j].rigid or j in decided:
            continue
        k = s.jobs[j].gpus
        free = (owner == IDLE) & s.compat[j][:, None]  # (G, T)
        owner[cover(first_n(packer.starts(free, k), s.demand[j]), k)] = j
    for j in by_priority:
        job = s.jobs[j]
        if not job.rigid or j in decided or s.unplaceable[j]:
            continue
        blocks = s.blocks(j)
        for t in range(job.arrival, s.T):
            end = min(t + job.duration, s.T)
            busy = (owner[:, t:end] != IDLE).any(1)  # (G,)
            fits = free_blocks(blocks, job.gpus, prefix(busy))
            if fits.any():
                g = int(blocks[fits.nonzero()[0, 0]])
                owner[g:g + job.gpus, t:end] = j
                break
    return Plan(owner=owner)
