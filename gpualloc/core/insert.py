"""Insertion: rigid jobs placed as they go, in one compiled loop each.

- `insert_serial`: in a given order, each at its earliest feasible start
  (gpualloc.core.guard.guarded_find): the repair's serial builds and every
  move of the local search;
- `insert_parallel`: time-driven, the waiting jobs in order at each event,
  each where it fits now (gpualloc.core.guard.guarded_fit), with the EASY
  pass of gpualloc.core.easy: the repair's parallel builds.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from gpualloc.core.blocks import block_free, update_runs
from gpualloc.core.guard import _take, guarded_find, guarded_find_low, guarded_fit, lows


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
def place_held(jobs, starts, firsts, ends, busy, busy_gpus, owner, run, start_of, first_of,
               slack, subset_pools, gpus, gpu_pool, job_class, class_ptr, class_blocks):
    """Each of `jobs` at (starts[i], firsts[i]) until ends[i], in order,
    where that is one of its candidate blocks and still free: a plan's
    placements held (gpualloc.core.schedule.adopt). Returns how many."""
    n = 0
    for i in range(jobs.shape[0]):
        j, t, g0 = jobs[i], starts[i], firsts[i]
        c = job_class[j]
        blocks = class_blocks[class_ptr[c]:class_ptr[c + 1]]
        at = np.searchsorted(blocks, g0)
        if at == blocks.shape[0] or blocks[at] != g0:
            continue
        if not block_free(run, g0, gpus[j], t, ends[i] - t):
            continue
        place(j, t, g0, gpus[j], ends[i], busy, busy_gpus, owner, run, start_of, first_of,
              slack, subset_pools, gpu_pool)
        n += 1
    return n


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
def take_out(jobs, lo, hi, busy, busy_gpus, owner, run, start, first, slack, subset_pools,
             gpus, gpu_pool, duration):
    """`unplace` for the placed jobs of `jobs` (first segments: each runs
    its duration, cut by the horizon); returns [lo, hi) widened to their runs."""
    T = busy.shape[0]
    placed = jobs[start[jobs] >= 0]
    end = np.empty(placed.shape[0], dtype=np.int64)
    for i in range(placed.shape[0]):
        t = start[placed[i]]
        end[i] = t + min(duration[placed[i]], T - t)
        lo, hi = min(lo, t), max(hi, end[i])
    unplace(placed, end, busy, busy_gpus, owner, run, start, first, slack, subset_pools, gpus,
            gpu_pool)
    return lo, hi


@njit(cache=True)
def insert_serial(order, not_before, busy, busy_gpus, owner, run, start_of, first_of, slack,
                  subset_pools, subset_priority, subset_replica, guarded, gpus, duration,
                  arrival, priority, job_class, class_ptr, class_blocks, block_pool, gpu_pool,
                  gpu_node, n_nodes, span):
    """Each job of `order` not placed yet at its earliest feasible start: from
    not_before[i] first when it is >= 0, else (or failing that) from its
    arrival. Returns how many were placed; span (2,) widens to their runs."""
    T = busy.shape[0]
    C = class_ptr.shape[0] - 1
    # Per class, the earliest `after` and shortest run with no free block at
    # all in the current state: later and longer jobs of the class fail too.
    failed_after = np.full(C, T + 1, dtype=np.int64)
    failed_d = np.zeros(C, dtype=np.int64)
    # The guard's `lows` table per job size, kept until a placement moves the slack.
    slot = np.full(gpus.max() + 1 if gpus.shape[0] else 1, -1, dtype=np.int64)
    n_sizes = 0
    for i in range(order.shape[0]):
        if slot[gpus[order[i]]] < 0:
            slot[gpus[order[i]]] = n_sizes
            n_sizes += 1
    low = np.empty((n_sizes, slack.shape[0] if guarded else 0, T), dtype=np.int64)
    low_ok = np.zeros(n_sizes, dtype=np.bool_)
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
            x = slot[k]
            if guarded and not low_ok[x]:
                lows(slack, k, np.int64(0), low[x])
                low_ok[x] = True
            t, g, none_free = guarded_find_low(run, busy, class_blocks[lo:hi], block_pool[lo:hi],
                                               k, d, after, slack, subset_pools, subset_priority,
                                               subset_replica, guarded, np.bool_(True),
                                               priority[j] * k,
                                               gpu_node, n_nodes, low[x])
            if t >= 0:
                break
            if none_free and (failed_after[c] > T
                              or (after <= failed_after[c] and d <= failed_d[c])):
                failed_after[c], failed_d[c] = after, d
        if t < 0:
            continue
        end = t + min(d, T - t)
        place(j, t, g, k, end, busy, busy_gpus, owner, run, start_of, first_of,
              slack, subset_pools, gpu_pool)
        span[0], span[1] = min(span[0], t), max(span[1], end)
        failed_after[:] = T + 1
        low_ok[:] = False
        placed += 1
    return placed


@njit(cache=True)
def mark(busy, busy_gpus, run, start, end, first, k, fixed, held):
    """busy[start:end, first:first + k] = True (`held`: a reservation held)
    or fixed >= 0 there (freed, but for the cells decided before planning),
    with its count per step and its free runs. (A flag, not fixed=None: one
    compiled function for both.)"""
    for t in range(start, end):
        for g in range(first, first + k):
            new = held or fixed[t, g] >= 0
            busy_gpus[t] += int(new) - int(busy[t, g])
            busy[t, g] = new
    update_runs(busy, run, first, first + k, end)


@njit(cache=True)
def insert_parallel(jobs, rank, t, reserve, demand_aware, busy, busy_gpus, owner, run, fixed,
                    start_of, first_of, steps, slack, subset_pools, subset_priority,
                    subset_replica, gpus, duration, arrival, priority, job_class, class_ptr,
                    class_blocks, block_pool, gpu_pool, gpu_node, n_nodes):
    """Time-driven insertion of `jobs` from timestep t: at each event (an
    arrival, a job's end, a reservation's start), the waiting jobs in `rank`
    (J,) order start where they fit now, best fit under the demand guard;
    only the first held back by elastic demand may displace it (the one a
    reservation would protect). With `reserve`, the EASY pass: the first
    that does not fit holds its earliest later start, and the jobs behind it
    start only around that reservation, which is freed before the next
    event. A job of a class whose shorter run just failed is not tried.
    `steps` (J,): each job's segment steps (Occupancy.steps_of)."""
    T = busy.shape[0]
    guarded = demand_aware and slack.shape[0] > 0
    n_classes = 1
    for j in jobs:
        n_classes = max(n_classes, job_class[j] + 1)
    todo = jobs[np.argsort(rank[jobs], kind="mergesort")]
    todo = todo[np.argsort(arrival[todo], kind="mergesort")]  # by arrival, then rank
    ends = np.empty(start_of.shape[0] + todo.shape[0], dtype=np.int64)
    n_ends = 0
    for j in range(start_of.shape[0]):
        if start_of[j] >= 0:
            e = start_of[j] + min(duration[j], T - start_of[j])
            if e > t:
                ends[n_ends] = e
                n_ends += 1
    waiting = np.empty(todo.shape[0], dtype=np.int64)
    n_wait = 0
    failed = np.empty(n_classes, dtype=np.int64)  # per class, the shortest run that did not fit
    # Reservations found impossible since the grids last changed, by (class,
    # GPUs, duration): the highest value per step that found none. With
    # thousands of jobs that can start nowhere (a guaranteed service's room)
    # each would scan the horizon again; a job like one that found none,
    # worth no more per step, finds none (guard.best_displacing's net value
    # rises with it).
    none_class = np.empty(todo.shape[0], dtype=np.int64)
    none_k = np.empty(todo.shape[0], dtype=np.int64)
    none_d = np.empty(todo.shape[0], dtype=np.int64)
    none_value = np.empty(todo.shape[0], dtype=np.float64)
    nxt = 0
    while t < T and (nxt < todo.shape[0] or n_wait > 0):
        while nxt < todo.shape[0] and arrival[todo[nxt]] <= t:
            waiting[n_wait] = todo[nxt]
            n_wait += 1
            nxt += 1
        order = np.argsort(rank[waiting[:n_wait]], kind="mergesort")
        waiting[:n_wait] = waiting[:n_wait][order]
        free = 0
        for g in range(busy.shape[1]):
            free += not busy[t, g]
        ghost_start, ghost_end, ghost_first, ghost_k = -1, -1, -1, 0
        failed[:] = 1 << 30
        n_none = 0
        displaced = False
        held = not reserve
        started = np.zeros(n_wait, dtype=np.bool_)
        length = np.empty(n_wait, dtype=np.int64)
        for i in range(n_wait):
            length[i] = min(steps[waiting[i]], T - t)
        i = 0
        while i < n_wait:
            if ghost_start >= 0 or not reserve:  # only those that pass start's first test
                while i < n_wait and not (gpus[waiting[i]] <= free
                                          and length[i] < failed[job_class[waiting[i]]]):
                    i += 1
                if i == n_wait:
                    break
            if free == 0:
                break
            j = waiting[i]
            c, k = job_class[j], gpus[j]
            lo, hi = class_ptr[c], class_ptr[c + 1]
            blocks, pools = class_blocks[lo:hi], block_pool[lo:hi]
            first = -1
            if k <= free and length[i] < failed[c]:
                value = float(priority[j]) * k
                hard = True
                if lo < hi:
                    first, hard = guarded_fit(run, busy, blocks, pools, k, length[i], steps[j],
                                              duration[j], t, slack, subset_pools,
                                              subset_priority, subset_replica, guarded,
                                              np.bool_(False), value, np.int64(-1), gpu_node,
                                              n_nodes)
                if first < 0 and hard:
                    failed[c] = length[i]
                    if not displaced and demand_aware:
                        displaced = True
                        if lo < hi:
                            first, _ = guarded_fit(run, busy, blocks, pools, k, length[i], steps[j],
                                                   duration[j], t, slack, subset_pools,
                                                   subset_priority, subset_replica, guarded,
                                                   np.bool_(True), value, np.int64(-1),
                                                   gpu_node, n_nodes)
            if first >= 0:
                place(j, t, first, k, t + length[i], busy, busy_gpus, owner, run, start_of,
                      first_of, slack, subset_pools, gpu_pool)
                free -= k
                ends[n_ends] = t + length[i]
                n_ends += 1
                failed[:] = 1 << 30
                n_none = 0
                started[i] = True
            elif not held:
                value = float(priority[j] * k)
                known = False
                for x in range(n_none):
                    if (none_class[x] == c and none_k[x] == k and none_d[x] == duration[j]
                            and none_value[x] >= value):
                        known = True
                        break
                if lo < hi and not known:  # its earliest later start, displacing where worth it
                    at, g, _ = guarded_find(run, busy, blocks, pools, k, duration[j],
                                            max(arrival[j], t + 1), slack, subset_pools,
                                            subset_priority, subset_replica, guarded,
                                            np.bool_(True), value, gpu_node, n_nodes)
                    if at < 0:
                        none_class[n_none], none_k[n_none] = c, k
                        none_d[n_none], none_value[n_none] = duration[j], value
                        n_none += 1
                    if at >= 0:
                        ghost_start, ghost_first, ghost_k = at, g, k
                        ghost_end = at + min(steps[j], T - at)
                        mark(busy, busy_gpus, run, ghost_start, ghost_end, g, k, fixed,
                             np.bool_(True))
                        _take(slack, subset_pools, gpu_pool[g], ghost_start, ghost_end, k)
                        failed[:] = 1 << 30
                held = ghost_start >= 0
            i += 1
        kept = 0
        for x in range(n_wait):
            if not started[x]:
                waiting[kept] = waiting[x]
                kept += 1
        n_wait = kept
        if ghost_start >= 0:
            mark(busy, busy_gpus, run, ghost_start, ghost_end, ghost_first, ghost_k, fixed,
                 np.bool_(False))
            _take(slack, subset_pools, gpu_pool[ghost_first], ghost_start, ghost_end, -ghost_k)
        nt = T
        live = 0
        for x in range(n_ends):
            if ends[x] > t:
                ends[live] = ends[x]
                live += 1
                nt = min(nt, ends[x])
        n_ends = live
        if nxt < todo.shape[0]:
            nt = min(nt, arrival[todo[nxt]])
        if ghost_start > t:
            nt = min(nt, ghost_start)
        t = nt
