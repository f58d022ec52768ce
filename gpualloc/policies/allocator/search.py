"""Improve: local search on the exact objective, from the best repaired plan.

Ruin and recreate on the placement core: empty a time window (or force in a
waiting job), re-insert in a randomized priority order, keep the move when
the objective does not drop. The whole move is one compiled loop (`_walk`)
over the Schedule's arrays: the core's insertion, removal and elastic
service, and a random stream of its own, seeded per call (one plan per seed
on any machine).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from numba import njit

from gpualloc.core.blocks import settle_columns
from gpualloc.core.insert import insert_serial, place, take_out
from gpualloc.core.schedule import Schedule, rigid_totals, serve_span


@dataclass
class SearchStats:
    iterations: int = 0
    accepted: int = 0
    improved: int = 0
    worse: int = 0
    """Accepted moves that lowered the objective (accept_worse > 0 only)."""
    start_value: float = 0.0
    end_value: float = 0.0
    stopped_by: str = "iterations"
    """iterations | patience | time_limit_s: what ended the search; optimal:
    none ran (the repaired plan was ideal: Schedule.is_ideal)."""


def improve(sched: Schedule, iterations: int, seed: int, window: tuple[int, int] = (4, 48),
            noise: float = 1.5, demand_aware: bool = True, max_waiting: int = 24,
            max_removed: int = 0,
            guide: tuple[list[float], list[int]] | None = None, patience: int = 0,
            time_limit_s: float | None = None, accept_worse: float = 0.0,
            progress=None, chunk: int | None = None) -> SearchStats:
    """Local search on the exact objective; never returns a worse schedule.

    Two moves, half the time each:
    - ruin and recreate: empty the jobs that start in a random time window
      (on a random half of the nodes, half the time);
    - force in: put a waiting job at a random start on the block it disturbs
      least, removing the jobs in its way. With a `guide` from the relaxation
      (per job: the share of it the relaxation ran, its relaxed start), jobs
      it ran are picked more often, half the time at their relaxed start.
    With `max_removed` > 0, a ruin takes out at most that many jobs, those
    that start first in its window.
    Then every removed and waiting job goes back, earliest fit, in priority
    order perturbed by noise. A move that lowers the objective is undone,
    unless `accept_worse` > 0: then a move may lower it by up to that share of
    the best value, a threshold that shrinks to 0 over the first half of the
    moves or the time (threshold accepting, so the walk can leave a local
    optimum; patience counts only after it); the best plan seen is what the
    search returns.
    With `patience`, the search stops after that many moves in a row without
    a strict improvement; with `time_limit_s`, when that many seconds have
    passed (checked between chunks of moves: anytime, but a run that stops
    on the clock depends on the machine's speed). `progress(moves, best)` is
    called after each chunk (`chunk` moves; by default all of them in one
    call, 16 with a clock or a progress callback)."""
    lay, occ, guard = sched.lay, sched.occ, sched.guard
    stats = SearchStats(start_value=sched.value())
    J, T = lay.J, sched.T
    share = np.ones(J) if guide is None else np.minimum(np.asarray(guide[0], dtype=np.float64), 1.0)
    guide_start = (np.full(J, -1, dtype=np.int64) if guide is None
                   else np.asarray(guide[1], dtype=np.int64))
    # The state a move may undo, and the best plan while the walk is elsewhere.
    live = (occ.busy, occ.owner, occ.run, occ.start, occ.first, occ.busy_gpus, guard.slack,
            sched.elastic_value, sched.elastic_used)
    saved = tuple(a.copy() for a in live)
    kept = tuple(a.copy() for a in live)
    rng = _seeded(seed)
    # ints: moves tried, moves made, accepted, improved, worse, stale, a plan
    # kept, annealing, stopped by patience; floats: best, current, kept's earliness.
    ints = np.array([0, 0, 0, 0, 0, 0, 0, int(accept_worse > 0), 0], dtype=np.int64)
    floats = np.array([stats.start_value, stats.start_value, sched.earliness()])
    if chunk is None:
        chunk = iterations if time_limit_s is None and progress is None else 16
    deadline = None if time_limit_s is None else time.perf_counter() + time_limit_s
    while ints[0] < iterations and not ints[8]:
        used = 0.0
        if deadline is not None:
            left = deadline - time.perf_counter()
            if left <= 0:
                stats.stopped_by = "time_limit_s"
                break
            used = 1 - left / time_limit_s
        before = int(ints[1])
        _walk(rng, min(int(ints[0]) + max(chunk, 1), iterations), iterations, ints, floats, used,
              *live, *saved, *kept, occ.fixed, guard.subset_pools, guard.subset_priority,
              guard.subset_replica, demand_aware and guard.U > 0, sched._plannable,
              lay.priority, lay.arrival, lay.gpus, lay.duration, share, guide_start,
              guide is not None, lay.job_class, lay.class_ptr, lay.class_blocks,
              lay.block_pool, lay.gpu_pool, lay.gpu_node, lay.N, sched._worth,
              sched.cum_weight, sched.step_weight, sched.discounted, sched._order,
              sched._order_arrival, sched._compat, sched.demand, lay.pool_ok, lay.node_first,
              lay.node_end, lay.node_pool, lay.pool_gpn, lay.pool_nodes, sched.classes,
              window[0], window[1], noise, max_waiting, max_removed, patience, accept_worse)
        if progress is not None:
            progress(int(ints[1]) - before, float(floats[0]))
    if ints[8]:
        stats.stopped_by = "patience"
    if ints[6]:
        for a, b in zip(live, kept):
            a[...] = b
    occ.version += 1
    stats.iterations, stats.accepted, stats.improved, stats.worse = (int(x) for x in ints[1:5])
    stats.end_value = float(floats[0])
    return stats


# ---- the random stream ------------------------------------------------------------------

def _seeded(seed: int) -> np.ndarray:
    """(1,) uint64: a xorshift state from `seed` (splitmix64, never 0)."""
    z = (int(seed) * 0x9E3779B97F4A7C15 + 0x9E3779B97F4A7C15) % 2 ** 64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) % 2 ** 64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) % 2 ** 64
    return np.array([(z ^ (z >> 31)) or 1], dtype=np.uint64)


@njit(cache=True)
def _uniform(rng):
    """A float in [0, 1) (xorshift64*)."""
    x = rng[0]
    x ^= x >> np.uint64(12)
    x ^= x << np.uint64(25)
    x ^= x >> np.uint64(27)
    rng[0] = x
    return float((x * np.uint64(2685821657736338717)) >> np.uint64(11)) / 9007199254740992.0


@njit(cache=True)
def _below(rng, n):
    """An int in [0, n), n >= 1."""
    return min(int(_uniform(rng) * n), n - 1)


@njit(cache=True)
def _pick(rng, weights):
    """An index drawn with these (non-negative) weights."""
    total = 0.0
    for w in weights:
        total += w
    r = _uniform(rng) * total
    acc = 0.0
    for i in range(weights.shape[0]):
        acc += weights[i]
        if r < acc:
            return i
    return weights.shape[0] - 1


@njit(cache=True)
def _sample(rng, items, m):
    """m of `items` without repeats, in random order (a partial shuffle)."""
    pool = items.copy()
    for i in range(m):
        x = i + _below(rng, pool.shape[0] - i)
        pool[i], pool[x] = pool[x], pool[i]
    return pool[:m]


# ---- the walk ---------------------------------------------------------------------------

@njit(cache=True)
def _same_row(a, b, t):
    for g in range(a.shape[1]):
        if a[t, g] != b[t, g]:
            return False
    return True


@njit(cache=True)
def _clear_costs(busy, fixed, start, end, blocks, k):
    """(B,) float64: busy cells of each block [b, b + k) over [start, end),
    inf where a fixed cell lies in it."""
    G = busy.shape[1]
    busy_cs = np.zeros(G + 1, dtype=np.int64)
    fixed_cs = np.zeros(G + 1, dtype=np.int64)
    for g in range(G):
        n, f = 0, False
        for t in range(start, end):
            n += busy[t, g]
            f = f or fixed[t, g] >= 0
        busy_cs[g + 1] = busy_cs[g] + n
        fixed_cs[g + 1] = fixed_cs[g] + f
    cost = np.empty(blocks.shape[0], dtype=np.float64)
    for i in range(blocks.shape[0]):
        b = blocks[i]
        cost[i] = np.inf if fixed_cs[b + k] > fixed_cs[b] else float(busy_cs[b + k] - busy_cs[b])
    return cost


# np.sort and np.unique would compile numba's quicksort beside the merge sort
# the search's other orders use: seconds more at a user's first run.
@njit(cache=True)
def _ascending(a):
    """The distinct values of `a` (int64), ascending (np.unique's answer)."""
    a = a[np.argsort(a, kind="mergesort")]
    keep = np.ones(a.shape[0], dtype=np.bool_)
    for i in range(1, a.shape[0]):
        keep[i] = a[i] != a[i - 1]
    return a[keep]


@njit(cache=True)
def first_to_start(jobs, start, m):
    """The m of `jobs` (ascending) that start first (ties: the lower index),
    ascending: what a ruin takes out when its window holds more."""
    earliest = np.argsort(start[jobs], kind="mergesort")[:m]
    return _ascending(jobs[earliest])


@njit(cache=True)
def _walk(rng, stop, iterations, ints, floats, used_clock,
          busy, owner, run, start, first, busy_gpus, slack, elastic_value, elastic_used,
          s_busy, s_owner, s_run, s_start, s_first, s_busy_gpus, s_slack, s_value, s_used,
          k_busy, k_owner, k_run, k_start, k_first, k_busy_gpus, k_slack, k_value, k_used,
          fixed, subset_pools, subset_priority, subset_replica, guarded, plannable,
          priority, arrival, gpus, duration, share, guide_start, guided, job_class, class_ptr,
          class_blocks, block_pool, gpu_pool, gpu_node, n_nodes, worth, cum_weight,
          step_weight, discounted, order, order_arrival, compat, demand, pool_ok, node_first,
          node_end, node_pool, pool_gpn, pool_nodes, classes, window_lo, window_hi, noise,
          max_waiting, max_removed, patience, accept_worse):
    """Moves of `improve` until ints[0] reaches `stop` (or patience ends the
    walk), on the Schedule's arrays; the state carried between calls lives
    in ints, floats, rng and the kept arrays (improve's names)."""
    T, G = busy.shape
    no_owner = np.zeros((1, 1), dtype=np.int64)  # the replicas are not written
    while ints[0] < stop:
        it = ints[0]
        if patience > 0 and ints[5] >= patience and not ints[7]:
            ints[8] = 1
            return
        ints[0] += 1
        ints[5] += 1
        lo, hi = T, np.int64(0)
        waiting = np.flatnonzero(plannable & (start < 0))
        forced = -1
        if waiting.shape[0] and _uniform(rng) < 0.5:
            w = np.empty(waiting.shape[0])
            for i in range(waiting.shape[0]):
                w[i] = priority[waiting[i]] * (0.1 + share[waiting[i]])
            j = waiting[_pick(rng, w)]
            if arrival[j] >= T:
                continue
            if guided and _uniform(rng) < 0.5:
                at = max(guide_start[j], arrival[j])
            else:
                # Starts where GPUs sit idle are the promising ones.
                idle = G - busy_gpus[arrival[j]:] - elastic_used[arrival[j]:] + 0.1
                at = arrival[j] + _pick(rng, idle)
            c = job_class[j]
            blocks = class_blocks[class_ptr[c]:class_ptr[c + 1]]
            if blocks.shape[0] == 0 or at >= T:
                continue
            k, end = gpus[j], at + min(duration[j], T - at)
            cost = _clear_costs(busy, fixed, at, end, blocks, k)
            for i in range(cost.shape[0]):
                cost[i] += 0.5 * _uniform(rng)
            b = np.argmin(cost)
            if not np.isfinite(cost[b]):
                continue
            g0 = blocks[b]
            held = owner[at:end, g0:g0 + k].copy().ravel()
            removed = _ascending(held[held >= 0])
            lo, hi = take_out(removed, at, end, busy, busy_gpus, owner, run, start, first,
                              slack, subset_pools, gpus, gpu_pool, duration)
            place(j, at, g0, k, end, busy, busy_gpus, owner, run, start, first, slack,
                  subset_pools, gpu_pool)
            forced = j
            window_end = T
        else:
            width = min(window_lo, T) + _below(rng, min(window_hi, T) - min(window_lo, T) + 1)
            a = _below(rng, max(1, T - width + 1))
            window_end = a + width
            inside = (start >= a) & (start < window_end)  # placed: a >= 0
            if n_nodes > 1 and _uniform(rng) < 0.5:
                ruin = np.zeros(n_nodes, dtype=np.bool_)
                m = 1 + _below(rng, max(1, n_nodes // 2))
                for x in _sample(rng, np.arange(n_nodes), m):
                    ruin[x] = True
                inside &= ruin[gpu_node[np.maximum(first, 0)]]
            removed = np.flatnonzero(inside)
            if 0 < max_removed < removed.shape[0]:
                removed = first_to_start(removed, start, max_removed)
                window_end = start[removed].max() + 1  # the window ends sooner
            lo, hi = take_out(removed, lo, hi, busy, busy_gpus, owner, run, start, first,
                              slack, subset_pools, gpus, gpu_pool, duration)
        # Waiting now: those before the move but the one forced in, and the
        # removed (which are candidates already).
        others = waiting[(waiting != forced) & (arrival[waiting] < window_end)]
        if others.shape[0] > max_waiting:
            others = _sample(rng, others, max_waiting)
        candidates = np.concatenate((removed, others))
        key = np.empty(candidates.shape[0])
        for i in range(candidates.shape[0]):
            key[i] = -priority[candidates[i]] + noise * _uniform(rng)
        candidates = candidates[np.argsort(key, kind="mergesort")]
        span = np.array([lo, hi], dtype=np.int64)
        insert_serial(candidates, np.full(candidates.shape[0], -1, dtype=np.int64), busy,
                      busy_gpus, owner, run, start, first, slack, subset_pools, subset_priority,
                      subset_replica, guarded, gpus, duration, arrival, priority, job_class,
                      class_ptr, class_blocks, block_pool, gpu_pool, gpu_node, n_nodes, span)
        # A step's service depends on its own free GPUs only: served again
        # where the move left them otherwise (a ruined job often goes back
        # where it was).
        c = span[0]
        while c < span[1]:
            if _same_row(busy, s_busy, c):
                c += 1
                continue
            d = c + 1
            while d < span[1] and not _same_row(busy, s_busy, d):
                d += 1
            serve_span(c, d, busy, no_owner, np.bool_(False), elastic_value, elastic_used, order,
                       order_arrival, compat, demand, gpus, pool_ok, worth, step_weight,
                       discounted, node_first, node_end, node_pool, pool_gpn, pool_nodes,
                       gpu_node, classes, gpu_pool)
            c = d
        rigid, early = rigid_totals(start, duration, worth, cum_weight, discounted)
        served = 0.0
        for t in range(T):
            served += elastic_value[t]
        value = rigid + served  # as Schedule.value adds them
        ints[1] += 1
        best, current = floats[0], floats[1]
        slack_ok = 0.0
        if ints[7]:
            # Down to 0 over the first half of the budget; the second half
            # climbs from wherever the walk is, with patience.
            used = max((it + 1) / iterations, used_clock)
            slack_ok = accept_worse * abs(best) * max(0.0, 1 - 2 * used)
            if slack_ok == 0.0:
                ints[7], ints[5] = 0, 0
        if value >= current - slack_ok - 1e-9:
            ints[2] += 1
            if value > best + 1e-9:
                ints[3] += 1
                ints[5] = 0
                ints[6], floats[2] = 0, early
                floats[0] = value
            elif value < best - 1e-9:
                if not ints[6]:  # the plan before this move was the best
                    _keep(ints, s_busy, s_owner, s_run, s_start, s_first, s_busy_gpus, s_slack,
                          s_value, s_used, k_busy, k_owner, k_run, k_start, k_first,
                          k_busy_gpus, k_slack, k_value, k_used)
            elif early > floats[2]:
                ints[6], floats[2] = 0, early
            elif early < floats[2] and not ints[6]:  # the plan before: as good, and earlier
                _keep(ints, s_busy, s_owner, s_run, s_start, s_first, s_busy_gpus, s_slack,
                      s_value, s_used, k_busy, k_owner, k_run, k_start, k_first, k_busy_gpus,
                      k_slack, k_value, k_used)
            ints[4] += 1 if value < current - 1e-9 else 0
            floats[1] = value
            _rows(s_busy, s_owner, s_run, s_start, s_first, s_busy_gpus, s_slack, s_value, s_used,
                  busy, owner, run, start, first, busy_gpus, slack, elastic_value, elastic_used,
                  span[0], span[1], candidates, forced)
        else:
            _rows(busy, owner, run, start, first, busy_gpus, slack, elastic_value, elastic_used,
                  s_busy, s_owner, s_run, s_start, s_first, s_busy_gpus, s_slack, s_value, s_used,
                  span[0], span[1], candidates, forced)


@njit(cache=True)
def _rows(busy, owner, run, start, first, busy_gpus, slack, value, used,
          s_busy, s_owner, s_run, s_start, s_first, s_busy_gpus, s_slack, s_value, s_used,
          lo, hi, jobs, forced):
    """The first state made the second's where a move changed them: steps
    [lo, hi), the start and first GPU of `jobs` and `forced`, and the free
    runs before lo, which follow the cells (settled back from lo)."""
    if lo >= hi:
        return
    for t in range(lo, hi):
        for g in range(busy.shape[1]):
            busy[t, g] = s_busy[t, g]
            owner[t, g] = s_owner[t, g]
            run[t, g] = s_run[t, g]
        busy_gpus[t] = s_busy_gpus[t]
        value[t] = s_value[t]
        used[t] = s_used[t]
        for u in range(slack.shape[0]):
            slack[u, t] = s_slack[u, t]
    settle_columns(busy, run, np.int64(0), lo, lo)
    for j in jobs:
        start[j], first[j] = s_start[j], s_first[j]
    if forced >= 0:
        start[forced], first[forced] = s_start[forced], s_first[forced]


@njit(cache=True)
def _keep(ints, s_busy, s_owner, s_run, s_start, s_first, s_busy_gpus, s_slack, s_value, s_used,
          k_busy, k_owner, k_run, k_start, k_first, k_busy_gpus, k_slack, k_value, k_used):
    """The snapshot becomes the kept plan."""
    ints[6] = 1
    k_busy[:] = s_busy
    k_owner[:] = s_owner
    k_run[:] = s_run
    k_start[:] = s_start
    k_first[:] = s_first
    k_busy_gpus[:] = s_busy_gpus
    k_slack[:] = s_slack
    k_value[:] = s_value
    k_used[:] = s_used
