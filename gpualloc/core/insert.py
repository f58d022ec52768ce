"""Serial insertion: rigid jobs in a given order, each at its earliest
feasible start (gpualloc.core.guard.guarded_find), placed as it goes. One
compiled loop for a whole order: the repair's builds and every move of the
local search are this call."""
from __future__ import annotations

import numpy as np
from numba import njit

from gpualloc.core.blocks import update_runs
from gpualloc.core.guard import guarded_find


@njit(cache=True)
def place(j, start, first, k, end, busy, busy_gpus, owner, run, start_of, first_of, slack,
          subset_pools, gpu_pool):
    """Rigid job j on GPUs [first, first + k) over [start, end): the
    occupancy, its count per step, its free runs and the guard's slack follow."""
    for t in range(start, end):
        for g in range(first, first + k):
            if not busy[t, g]:
                busy_gpus[t] += 1
            busy[t, g] = True
            owner[t, g] = j
    update_runs(busy, run, first, first + k, end)
    start_of[j] = start
    first_of[j] = first
    pool = gpu_pool[first]
    for u in range(slack.shape[0]):
        if subset_pools[u, pool]:
            for t in range(start, end):
                slack[u, t] -= k


@njit(cache=True)
def unplace(jobs, ends, busy, busy_gpus, owner, run, start_of, first_of, slack, subset_pools,
            gpus, gpu_pool):
    """`place` undone for each of `jobs` (placed, each running to ends[i]), in
    order: what a search move removes, in one call."""
    for i in range(jobs.shape[0]):
        j = jobs[i]
        start, first, k, end = start_of[j], first_of[j], gpus[j], ends[i]
        for t in range(start, end):
            for g in range(first, first + k):
                if busy[t, g]:
                    busy_gpus[t] -= 1
                busy[t, g] = False
                owner[t, g] = -1
        update_runs(busy, run, first, first + k, end)
        start_of[j] = -1
        first_of[j] = -1
        pool = gpu_pool[first]
        for u in range(slack.shape[0]):
            if subset_pools[u, pool]:
                for t in range(start, end):
                    slack[u, t] += k


@njit(cache=True)
def insert_serial(order, not_before, busy, busy_gpus, owner, run, start_of, first_of, slack,
                  subset_pools, subset_priority, subset_replica, guarded, gpus, duration,
                  arrival, priority, job_class, class_ptr, class_blocks, block_pool, gpu_pool,
                  gpu_node, n_nodes):
    """Each job of `order` not placed yet at its earliest feasible start: from
    not_before[i] first when it is >= 0, else (or failing that) from its
    arrival. Returns how many were placed."""
    T = busy.shape[0]
    C = class_ptr.shape[0] - 1
    # Per class, the earliest `after` and shortest run with no free block at
    # all in the current state: later and longer jobs of the class fail too.
    failed_after = np.full(C, T + 1, dtype=np.int64)
    failed_d = np.zeros(C, dtype=np.int64)
    placed = 0
    for i in range(order.shape[0]):
        j = order[i]
        if start_of[j] >= 0:
            continue
        c = job_class[j]
        lo, hi = class_ptr[c], class_ptr[c + 1]
        if lo == hi:
            continue
        k, d = gpus[j], duration[j]
        t, g = -1, -1
        for attempt in range(2):
            after = arrival[j]
            if attempt == 0:
                if not_before[i] < 0:
                    continue
                after = max(after, not_before[i])
            if failed_after[c] <= after and failed_d[c] <= d:
                continue
            t, g, none_free = guarded_find(run, busy, class_blocks[lo:hi], block_pool[lo:hi], k,
                                           d, after, slack, subset_pools, subset_priority,
                                           subset_replica, guarded, True, priority[j] * k,
                                           gpu_node, n_nodes)
            if t >= 0:
                break
            if none_free and (failed_after[c] > T
                              or (after <= failed_after[c] and d <= failed_d[c])):
                failed_after[c], failed_d[c] = after, d
        if t < 0:
            continue
        place(j, t, g, k, t + min(d, T - t), busy, busy_gpus, owner, run, start_of, first_of,
              slack, subset_pools, gpu_pool)
        failed_after[:] = T + 1
        placed += 1
    return placed
