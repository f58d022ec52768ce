"""Plain priority-order EASY backfilling: the floor a scheduler should clear.

At each timestep t:
- real-time replicas are served first, on the GPUs running rigid jobs leave
  free, highest priority first, lowest free block first (the placement
  core's elastic fill);
- waiting rigid jobs, by priority (ties: arrival, scenario order), start on
  the lowest free block that is free for their whole run and holds no
  replica at t; the first that cannot start reserves the earliest (time,
  block) at which it could (EASY), and the jobs behind it start only off
  that reservation.

No look-ahead at the real-time curves, no fit key beyond the lowest block:
greedy (gpualloc.policies.greedy) must never be below it.
"""
from __future__ import annotations

import numpy as np
import torch

from gpualloc.core import (fixed_jobs, owner_of, priority_order, service_order, still_wanted,
                           time_major)
from gpualloc.core import blocks as kb
from gpualloc.core.easy import easy_pass
from gpualloc.core.guarantee import planning_fixed
from gpualloc.core.layout import layout
from gpualloc.core.occupancy import Occupancy
from gpualloc.core.pack import fill_elastic
from gpualloc.plan import Plan
from gpualloc.scenario import Scenario


def backfill(s: Scenario, cfg=None, device: torch.device | str = "cpu",
             window: int | None = None) -> Plan:
    """The plan of `s`; with `window`, steps from there on are left unplanned
    (each step is decided from the steps before it), and the plan says
    whether it `looked_ahead` (a job waited: its reservation reads the
    scenario past its run; greedy's Plan.info says why it matters)."""
    lay = layout(s)
    fixed = planning_fixed(s)  # decided cells and guaranteed replicas
    occ = Occupancy(lay, None if fixed is None else time_major(fixed))
    owner = occ.owner_grid()  # (T, G): fixed cells, then what starts and what is served
    need = still_wanted(s, owner)  # (J, T) replicas still wanted
    order = priority_order(s)
    elastic = service_order(s)
    done = fixed_jobs(s)
    queue = [j for j in order if lay.rigid[j] and not lay.unplaceable[j] and not done[j]]
    arrival = lay.arrival.tolist()
    end = lay.T if window is None else min(window, lay.T)
    waited = False
    for t in range(end):
        occ.release()
        if not queue:  # nothing left to start: the steps' service is all that is left
            fill_elastic(lay, ~occ.busy[t:end], owner[t:end], elastic, need[elastic, t:end])
            break
        column = ~occ.busy[t:t + 1]  # (1, G) free of rigid jobs and fixed cells
        fill_elastic(lay, column, owner[t:t + 1], elastic, need[elastic, t:t + 1])
        replica = np.zeros(lay.G + 1, dtype=np.int64)  # prefix sums of GPUs serving replicas at t
        np.cumsum((owner[t] >= 0) & ~occ.busy[t], out=replica[1:])

        # The grid only fills during a pass: once no block of a class is free
        # for n steps, none is for n or more (issue 26: most of thousands of
        # waiting jobs are answered without a scan).
        short: dict[int, int] = {}  # class -> the fewest steps no block was free for
        waiting = [j for j in queue if arrival[j] <= t]
        jobs = np.array(waiting, dtype=np.int64)
        length = dict(zip(waiting, occ.lengths(jobs, t).tolist()))
        cls = dict(zip(waiting, lay.job_class[jobs].tolist()))

        def start(j: int) -> bool:  # the lowest free block holding no replica at t
            c, need = cls[j], length[j]
            if need >= short.get(c, lay.T + 1):
                return False
            b, k = lay.blocks(j), int(lay.gpus[j])
            i = kb.first_free(occ.run, b, k, t, need, replica)
            if i < 0:
                short[c] = need
                return False
            g = int(b[i])
            owner[t:t + need, g:g + k] = j
            occ.place(j, t, g)
            return True

        def reserve(j: int) -> bool:  # the lowest block at the earliest later start
            t0, at = occ.earliest(j, t + 1)
            if at is not None:
                g = int(lay.blocks(j)[np.nonzero(at)[0][0]])
                occ.hold(t0, t0 + occ.length(j, t0), g, int(lay.gpus[j]))
            return True  # the head's turn is taken, held or not

        started = set(easy_pass(waiting, start, reserve))
        waited |= len(started) < len(waiting)
        if started:
            queue = [j for j in queue if j not in started]
    return Plan(owner=owner_of(owner), info={} if window is None else {"looked_ahead": waited})
