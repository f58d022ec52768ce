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
    sched = Schedule.empty(s, discount)
    lay = sched.lay
    sched.insert_all([j for j in order if lay.rigid[j] and not sched.done[j]], demand_aware, at)
    sched.fill_elastic()
    return sched


def build_parallel(s: Scenario, order: list[int], demand_aware: bool = True,
                   reserve: bool = True, discount: float = 0.0) -> Schedule:
    """Time-driven placement of every rigid job, in `order` at each event;
    then elastic service (see `insert_parallel`)."""
    sched = Schedule.empty(s, discount)
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
    n_classes = int(job_class.max(initial=0)) + 1
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
        # What a job needs to be tried at all, per waiting job: most of
        # thousands are answered here, without a call each (issue 28).
        jobs = np.array(waiting, dtype=np.int64)
        size, cls = gpus[jobs], job_class[jobs]
        length = sched.occ.lengths(jobs, t)
        failed = np.full(n_classes, 1 << 30, dtype=np.int64)  # shortest run that did not fit
        displaced = False

        def start(i: int) -> bool:
            nonlocal free, displaced
            j, c = waiting[i], cls[i]
            first = None
            if size[i] <= free and length[i] < failed[c]:
                first, hard = sched.fits_at(j, t, demand_aware, displace=False)
                if first is None and hard:
                    failed[c] = length[i]
                    # Only the first job held back by elastic demand may
                    # displace it: the one a reservation would protect.
                    if not displaced and demand_aware:
                        displaced = True
                        first, _ = sched.fits_at(j, t, demand_aware, displace=True)
            if first is None:
                return False
            sched.place(j, t, first)
            free -= int(size[i])
            heapq.heappush(ends, t + int(length[i]))
            failed[:] = 1 << 30
            return True

        def hold(i: int) -> bool:
            nonlocal ghost
            j = waiting[i]
            spot = sched.find(j, t + 1, demand_aware)
            if spot is not None:
                ghost = (j, spot[0])
                sched.hold(j, *spot)
                failed[:] = 1 << 30
            return ghost is not None

        def tries():
            """The waiting jobs in order; once a reservation is held (or none
            is made), only those that pass start's first test."""
            i = 0
            while i < len(waiting):
                if ghost is not None or not reserve:
                    can = (size[i:] <= free) & (length[i:] < failed[cls[i:]])
                    ahead = np.flatnonzero(can)
                    if len(ahead) == 0:
                        return
                    i += int(ahead[0])
                yield i
                i += 1

        started = set(easy_pass(tries(), start, hold, held=not reserve,
                                full=lambda: free == 0))
        waiting = [j for i, j in enumerate(waiting) if i not in started]
        if ghost is not None:
            sched.release()
        while ends and ends[0] <= t:
            heapq.heappop(ends)
        events = [e for e in (ends[0] if ends else None,
                              int(arrival[todo[nxt]]) if nxt < len(todo) else None,
                              ghost[1] if ghost else None) if e is not None and e > t]
        t = min(events) if events else T
