"""Improve: local search on the exact objective, from the best repaired plan.

Ruin and recreate on the placement core: empty a time window (or force in a
waiting job), re-insert in a randomized priority order, keep the move when
the objective does not drop. Each move costs a few compiled block searches,
so the time saved by the core goes here (`SolverConfig.time_limit_s`).
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass

import numpy as np

from gpualloc.core.schedule import Schedule


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
            guide: tuple[list[float], list[int]] | None = None, patience: int = 0,
            time_limit_s: float | None = None, accept_worse: float = 0.0,
            progress=None) -> SearchStats:
    """Local search on the exact objective; never returns a worse schedule.

    Two moves, half the time each:
    - ruin and recreate: empty the jobs that start in a random time window
      (on a random half of the nodes, half the time);
    - force in: put a waiting job at a random start on the block it disturbs
      least, removing the jobs in its way. With a `guide` from the relaxation
      (per job: the share of it the relaxation ran, its relaxed start), jobs
      it ran are picked more often, half the time at their relaxed start.
    Then every removed and waiting job goes back, earliest fit, in priority
    order perturbed by noise. A move that lowers the objective is undone,
    unless `accept_worse` > 0: then a move may lower it by up to that share of
    the best value, a threshold that shrinks to 0 over the first half of the
    moves or the time (threshold accepting, so the walk can leave a local
    optimum; patience counts only after it); the best plan seen is what the
    search returns.
    With `patience`, the search stops after that many moves in a row without
    a strict improvement; with `time_limit_s`, when that many seconds have
    passed (anytime: the plan only improves with more time, but a run that
    stops on the clock depends on the machine's speed)."""
    rng = random.Random(seed)
    s, T, lay = sched.s, sched.T, sched.lay
    priority, arrival = lay.priority.tolist(), lay.arrival.tolist()
    stats = SearchStats(start_value=sched.value())
    best = stats.start_value
    # The walk moves freely across plans of equal value (and, with
    # accept_worse, below the best); what it returns is the best it saw, ties
    # going to the earliest: `kept` holds it when the walk is elsewhere.
    kept, kept_early = None, sched.earliness()
    current = best
    annealing = accept_worse > 0  # patience waits until the threshold is 0
    n_nodes = len(s.node_first_gpu)
    stale = 0
    deadline = None if time_limit_s is None else time.perf_counter() + time_limit_s
    for it in range(iterations):
        if patience and stale >= patience and not annealing:
            stats.stopped_by = "patience"
            break
        if deadline is not None and time.perf_counter() >= deadline:
            stats.stopped_by = "time_limit_s"
            break
        stale += 1
        snap = sched.snapshot()
        lo, hi = T, 0
        removed: list[int] = []
        waiting = sched.waiting()
        forced = -1
        if waiting and rng.random() < 0.5:
            share = guide[0] if guide else [1.0] * s.J
            j = rng.choices(waiting, weights=[priority[w] * (0.1 + min(share[w], 1.0))
                                              for w in waiting])[0]
            if guide and rng.random() < 0.5:
                start = max(guide[1][j], arrival[j])
            else:
                # Starts where GPUs sit idle are the promising ones.
                idle = (sched.G - sched.occ.busy_gpus - sched.elastic_used)[arrival[j]:]  # (T',)
                weights = (idle + 0.1).tolist()
                start = arrival[j] + rng.choices(range(len(weights)), weights=weights)[0]
            cleared = sched.clear_for(j, start, rng)
            if cleared is None:
                continue
            (removed, lo, hi), forced = cleared, j
            window_end = T
        else:
            width = rng.randint(min(window[0], T), min(window[1], T))
            a = rng.randrange(0, max(1, T - width + 1))
            window_end = a + width
            ruin_nodes = None
            if n_nodes > 1 and rng.random() < 0.5:
                ruin_nodes = np.zeros(n_nodes, dtype=np.bool_)
                ruin_nodes[rng.sample(range(n_nodes), rng.randint(1, max(1, n_nodes // 2)))] = True
            start = sched.start
            inside = (start >= a) & (start < window_end)  # (J,) placed: a >= 0
            if ruin_nodes is not None:
                inside &= ruin_nodes[lay.gpu_node[np.maximum(sched.first, 0)]]
            removed = np.flatnonzero(inside).tolist()
            lo, hi = sched.take_out(removed, lo, hi)
        # Waiting now: those before the move but the one forced in, and the
        # removed (which are candidates already).
        others = [j for j in waiting if j != forced and arrival[j] < window_end]
        if len(others) > max_waiting:
            others = rng.sample(others, max_waiting)
        candidates = removed + others
        key = {j: -priority[j] + noise * rng.random() for j in candidates}
        candidates.sort(key=lambda j: key[j])
        span = np.array([lo, hi], dtype=np.int64)
        sched.insert_all(candidates, demand_aware, span=span)
        lo, hi = int(span[0]), int(span[1])
        if hi > lo:
            sched.fill_elastic(lo, hi)
        value = sched.value()
        stats.iterations += 1
        slack = 0.0
        if annealing:
            used = (it + 1) / iterations
            if deadline is not None:
                used = max(used, 1 - (deadline - time.perf_counter()) / time_limit_s)
            # Down to 0 over the first half of the budget; the second half
            # climbs from wherever the walk is, with patience.
            slack = accept_worse * abs(best) * max(0.0, 1 - 2 * used)
            if slack == 0.0:
                annealing, stale = False, 0
        if value >= current - slack - 1e-9:
            stats.accepted += 1
            early = sched.earliness()
            if value > best + 1e-9:
                stats.improved += 1
                stale = 0
                kept, kept_early = None, early
                best = value
            elif value < best - 1e-9:
                if kept is None:
                    kept = snap  # the plan before this move was the best
            elif early > kept_early:
                kept, kept_early = None, early
            elif early < kept_early and kept is None:
                kept = snap  # the plan before this move: as good, and earlier
            stats.worse += value < current - 1e-9
            current = value
        else:
            sched.restore(snap)
        if progress is not None:
            progress(it, best)
    if kept is not None:
        sched.restore(kept)
    stats.end_value = best
    return stats
