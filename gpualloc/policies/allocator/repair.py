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

import numpy as np

from gpualloc.core.insert import insert_parallel as compiled_parallel
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
    start (EASY), and the jobs behind it start only around that reservation.
    One compiled loop (gpualloc.core.insert.insert_parallel)."""
    lay, occ, guard = sched.lay, sched.occ, sched.guard
    order = np.full(lay.J, np.inf)
    order[list(rank)] = list(rank.values())
    compiled_parallel(
        np.asarray(jobs, dtype=np.int64), order, t, reserve, demand_aware, occ.busy,
        occ.busy_gpus, occ.owner, occ.run, occ.fixed, occ.start, occ.first,
        occ.steps_of(np.arange(lay.J)), guard.slack, guard.subset_pools, guard.subset_priority,
        guard.subset_replica, lay.gpus, lay.duration, lay.arrival, lay.priority, lay.job_class,
        lay.class_ptr, lay.class_blocks, lay.block_pool, lay.gpu_pool, lay.gpu_node, lay.N)
    occ.version += 1
