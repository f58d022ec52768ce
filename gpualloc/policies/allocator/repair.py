"""Repair: from the relaxation's preferences (an order, a start) to a plan
that is feasible by construction.

The allocator's state is the placement core's `Schedule`
(gpualloc.core.schedule). What is the repair's own: the two ways of placing
an order:

- `build`: serial, each job at its earliest feasible start (from its rounded
  start first, when given);
- `build_parallel`: time-driven, the waiting jobs in order at each event,
  with an EASY reservation for the first that does not fit.
"""
from __future__ import annotations

import heapq

import numpy as np

from gpualloc.core.easy import easy_pass
from gpualloc.core.schedule import Schedule
from gpualloc.scenario import Scenario


def build(s: Scenario, order: list[int], demand_aware: bool = True,
          at: dict[int, int] | None = None, discount: float = 0.0) -> Schedule:
    """Serial placement: each rigid job in `order` at its earliest feasible
    start (from `at[j]` first, when given); then elastic service."""
    sched = Schedule(s, discount=discount)
    lay = sched.lay
    sched.insert_all([j for j in order if lay.rigid[j] and not sched.done[j]], demand_aware, at)
    sched.fill_elastic()
    return sched


def build_parallel(s: Scenario, order: list[int], demand_aware: bool = True,
                   reserve: bool = True, discount: float = 0.0) -> Schedule:
    """Time-driven placement of every rigid job, in `order` at each event;
    then elastic service (see `insert_parallel`)."""
    sched = Schedule(s, discount=discount)
    lay = sched.lay
    jobs = np.nonzero(lay.rigid & ~sched.done & ~lay.unplaceable)[0].tolist()
    insert_parallel(sched, jobs, {j: i for i, j in enumerate(order)}, 0, demand_aware, reserve)
    sched.fill_elastic()
    return sched


def insert_parallel(sched: Schedule, jobs: list[int], rank: dict[int, float], t: int,
                    demand_aware: bool = True, reserve: bool = True) -> None:
    """Time-driven insertion from timestep t: at each event (an arrival, a
    job's end), the waiting `jobs` in `rank` order start where they fit now;
    with `reserve`, the first that does not fit holds its earliest later
    start (EASY), and the jobs behind it start only around that reservation."""
    lay, T = sched.lay, sched.T
    arrival, gpus, job_class = lay.arrival, lay.gpus, lay.job_class
    todo = sorted(jobs, key=lambda j: (arrival[j], rank[j]))
    waiting: list[int] = []
    placed = np.nonzero(sched.start >= 0)[0]
    ends = [int(e) for e in sched.start[placed] + np.minimum(lay.duration[placed],
                                                             T - sched.start[placed]) if e > t]
    heapq.heapify(ends)
    nxt = 0
    while t < T and (nxt < len(todo) or waiting):
        while nxt < len(todo) and arrival[todo[nxt]] <= t:
            waiting.append(todo[nxt])
            nxt += 1
        waiting.sort(key=rank.__getitem__)
        free = int((~sched.busy[t]).sum())
        ghost = None
        failed: dict[int, int] = {}  # class -> shortest run that did not fit (this state)
        displaced = False

        def start(j: int) -> bool:
            nonlocal free, displaced
            c, length = job_class[j], sched.length(j, t)
            first = None
            if gpus[j] <= free and length < failed.get(c, 1 << 30):
                first, hard = sched.fits_at(j, t, demand_aware, displace=False)
                if first is None and hard:
                    failed[c] = length
                    # Only the first job held back by elastic demand may
                    # displace it: the one a reservation would protect.
                    if not displaced and demand_aware:
                        displaced = True
                        first, _ = sched.fits_at(j, t, demand_aware, displace=True)
            if first is None:
                return False
            sched.place(j, t, first)
            free -= int(gpus[j])
            heapq.heappush(ends, t + length)
            failed.clear()
            return True

        def hold(j: int) -> bool:
            nonlocal ghost
            spot = sched.find(j, t + 1, demand_aware)
            if spot is not None:
                ghost = (j, spot[0])
                sched.hold(j, *spot)
                failed.clear()
            return ghost is not None

        for j in easy_pass(list(waiting), start, hold, held=not reserve,
                           full=lambda: free == 0):
            waiting.remove(j)
        if ghost is not None:
            sched.release()
        while ends and ends[0] <= t:
            heapq.heappop(ends)
        events = [e for e in (ends[0] if ends else None,
                              int(arrival[todo[nxt]]) if nxt < len(todo) else None,
                              ghost[1] if ghost else None) if e is not None and e > t]
        t = min(events) if events else T
