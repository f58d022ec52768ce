"""A small policy that honours Scenario.fixed, for testing online mode
independently of the registry's own: real-time demand first, highest
priority first, lowest free blocks; then rigid jobs by priority, each at its
earliest start on the lowest free block. Not a good policy: a correct one,
on the placement core's plainest calls."""
from __future__ import annotations

import numpy as np
import torch

from gpualloc.core import fixed_jobs, priority_order
from gpualloc.core.layout import layout
from gpualloc.core.occupancy import Occupancy
from gpualloc.core.pack import fill_elastic
from gpualloc.plan import IDLE, Plan


def fixed_greedy(s, cfg=None, device="cpu") -> Plan:
    lay = layout(s)
    fixed = None if s.fixed is None else s.fixed.numpy().T
    occ = Occupancy(lay, fixed)
    decided = fixed_jobs(s)
    order = priority_order(s)
    elastic = [j for j in order if not lay.rigid[j] and not decided[j]]
    owner = occ.owner_grid()  # (T, G)
    fill_elastic(lay, owner == IDLE, owner, elastic, lay.demand[elastic])
    occ = Occupancy(lay, owner)  # the replicas are fixed from here on
    for j in order:
        if not lay.rigid[j] or decided[j] or lay.unplaceable[j]:
            continue
        t, free = occ.earliest(j, int(lay.arrival[j]))
        if free is not None:
            occ.place(j, t, int(lay.blocks(j)[np.nonzero(free)[0][0]]))
    return Plan(owner=torch.from_numpy(np.ascontiguousarray(occ.owner_grid().T)))
