"""The compiled insertions against the core's rules composed in Python: where
a rigid job fits at t (the guard, the displacement rule) and the allocator's
parallel repair (the EASY pass of gpualloc.core.easy with that fit), on
random small clusters and on generated scenarios with real-time demand."""
from __future__ import annotations

import heapq
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpualloc as ga
from gpualloc.core import priority_order
from gpualloc.core.easy import easy_pass
from gpualloc.core.footprint import EPS, worth_displacing
from gpualloc.core.schedule import Schedule
from gpualloc.policies.allocator.repair import insert_parallel
from strategies import scenarios


def fits_at_reference(sched: Schedule, j: int, t: int, demand_aware: bool, displace: bool,
                      prefer: int | None = None):
    """Schedule.fits_at's rule in numpy: free blocks, the guard's shortfall,
    and where none is safe, the best net value when it beats waiting."""
    lay = sched.lay
    if len(lay.blocks(j)) == 0 or t < lay.arrival[j]:
        return None, True
    k, length = int(lay.gpus[j]), sched.length(j, t)
    free = sched.occ.free_at(j, t, length)
    if not free.any():
        return None, True
    ok = free
    if demand_aware and sched.guard.U:
        pools = lay.job_block_pool(j)
        ok = free & ~sched.guard.short_at(k, t, length)[pools]
        if not ok.any():
            if not displace:
                return None, True
            value = float(lay.priority[j]) * k
            net = np.where(free, value * length - sched.guard.price_at(k, t, length)[pools], -1.0)
            best = float(net.max())

            def later() -> float:
                at = sched.find(j, t + 1, demand_aware, displace=False)
                return 0.0 if at is None else value * sched.length(j, at[0])

            if not worth_displacing(best, later):
                return None, False
            ok = net >= best - EPS
    if prefer is not None:
        mine = np.flatnonzero(lay.blocks(j) == prefer)
        if len(mine) and ok[mine[0]]:
            return prefer, False
    return sched.occ.fewest_left(j, t, ok), False


def parallel_reference(sched: Schedule, jobs: list[int], rank: dict[int, float], t: int,
                       demand_aware: bool, reserve: bool) -> None:
    """The parallel repair as core.easy's pass with Schedule's fit, hold and
    find, event by event."""
    lay, T = sched.lay, sched.T
    todo = sorted(jobs, key=lambda j: (lay.arrival[j], rank[j]))
    waiting: list[int] = []
    placed = np.nonzero(sched.start >= 0)[0]
    ends = [int(e) for e in sched.start[placed] + np.minimum(lay.duration[placed],
                                                             T - sched.start[placed]) if e > t]
    heapq.heapify(ends)
    nxt = 0
    while t < T and (nxt < len(todo) or waiting):
        while nxt < len(todo) and lay.arrival[todo[nxt]] <= t:
            waiting.append(todo[nxt])
            nxt += 1
        waiting.sort(key=rank.__getitem__)
        state = {"free": int((~sched.busy[t]).sum()), "ghost": None, "displaced": False}
        failed: dict[int, int] = {}  # class -> shortest run that did not fit

        def fits(j: int) -> bool:
            return (lay.gpus[j] <= state["free"]
                    and sched.length(j, t) < failed.get(int(lay.job_class[j]), 1 << 30))

        def start(j: int) -> bool:
            first = None
            if fits(j):
                first, hard = sched.fits_at(j, t, demand_aware, displace=False)
                if first is None and hard:
                    failed[int(lay.job_class[j])] = sched.length(j, t)
                    if not state["displaced"] and demand_aware:
                        state["displaced"] = True
                        first, _ = sched.fits_at(j, t, demand_aware, displace=True)
            if first is None:
                return False
            sched.place(j, t, first)
            state["free"] -= int(lay.gpus[j])
            heapq.heappush(ends, t + sched.length(j, t))
            failed.clear()
            return True

        def hold(j: int) -> bool:
            spot = sched.find(j, t + 1, demand_aware)
            if spot is not None:
                state["ghost"] = spot[0]
                sched.hold(j, *spot)
                failed.clear()
            return state["ghost"] is not None

        def tries():
            for j in list(waiting):
                if (state["ghost"] is not None or not reserve) and not fits(j):
                    continue
                yield j

        started = set(easy_pass(tries(), start, hold, held=not reserve,
                                full=lambda: state["free"] == 0))
        waiting = [j for j in waiting if j not in started]
        if state["ghost"] is not None:
            sched.release()
        while ends and ends[0] <= t:
            heapq.heappop(ends)
        events = [e for e in (ends[0] if ends else None,
                              int(lay.arrival[todo[nxt]]) if nxt < len(todo) else None,
                              state["ghost"]) if e is not None and e > t]
        t = min(events) if events else T


def same_state(a: Schedule, b: Schedule) -> None:
    for x, y in ((a.occ.busy, b.occ.busy), (a.occ.owner, b.occ.owner), (a.occ.run, b.occ.run),
                 (a.occ.busy_gpus, b.occ.busy_gpus), (a.start, b.start), (a.first, b.first),
                 (a.guard.slack, b.guard.slack)):
        np.testing.assert_array_equal(x, y)


def _orders(s, rng: random.Random):
    order = priority_order(s)
    shuffled = list(range(s.J))
    rng.shuffle(shuffled)
    return order, shuffled


@pytest.mark.parametrize("name,seed", [("mixed", 0), ("inference_diurnal", 1),
                                       ("heterogeneous", 2)])
def test_parallel_repair_is_the_easy_pass_with_the_guarded_fit(name, seed):
    # Generated scenarios: real-time demand makes the guard bind and the
    # displacement rule decide, which small random ones rarely do.
    s = ga.generate(name, seed=seed, horizon=48)
    rng = random.Random(seed)
    for order in _orders(s, rng):
        rank = {j: i for i, j in enumerate(order)}
        for demand_aware, reserve in ((True, True), (True, False), (False, True)):
            compiled, reference = Schedule(s), Schedule(s)
            jobs = np.nonzero(compiled.lay.rigid & ~compiled.done
                              & ~compiled.lay.unplaceable)[0].tolist()
            insert_parallel(compiled, jobs, rank, 0, demand_aware, reserve)
            parallel_reference(reference, jobs, rank, 0, demand_aware, reserve)
            assert (compiled.start >= 0).any()
            same_state(compiled, reference)


@given(scenarios(max_jobs=12), st.integers(0, 2**16), st.booleans(), st.booleans())
@settings(max_examples=60, deadline=None)
def test_parallel_repair_matches_the_reference_on_random_clusters(s, seed, demand_aware,
                                                                  reserve):
    order = _orders(s, random.Random(seed))[seed % 2]
    rank = {j: i for i, j in enumerate(order)}
    compiled, reference = Schedule(s), Schedule(s)
    jobs = np.nonzero(compiled.lay.rigid & ~compiled.done & ~compiled.lay.unplaceable)[0].tolist()
    insert_parallel(compiled, jobs, rank, 0, demand_aware, reserve)
    parallel_reference(reference, jobs, rank, 0, demand_aware, reserve)
    same_state(compiled, reference)


@pytest.mark.parametrize("case", ["duration", "value"])
def test_a_reservation_found_after_one_like_it_found_none(case):
    # One node of 2 GPUs. x holds GPU 0 over 0-1; the service fills the node
    # over 3-5. a (2 GPUs) finds no reservation; b, of a's class, finds one
    # (at 2) by being shorter, or by being worth enough to displace the
    # service, and holds it: c (1 GPU) may not start now on GPU 1. The pass
    # skips only searches of jobs like a (same duration, worth no more).
    from scenarios import elastic, rigid, scen

    a, b = (rigid("a", 2, 5), rigid("b", 2, 1)) if case == "duration" else (
        rigid("a", 2, 4, priority=0.1), rigid("b", 2, 4, priority=40))
    service = elastic("s", 1, [0, 0, 0, 2, 2, 2], priority=100 if case == "duration" else 2)
    s = scen([(1, 2, "H")], [rigid("x", 1, 2, priority=50), a, b,
                             rigid("c", 1, 3, priority=0.5), service])
    rank = {j: j for j in range(4)}  # x, a, b, c
    compiled, reference = Schedule(s), Schedule(s)
    insert_parallel(compiled, [0, 1, 2, 3], rank, 0, True, True)
    parallel_reference(reference, [0, 1, 2, 3], rank, 0, True, True)
    assert compiled.start[3] == -1  # c waits behind b's reservation
    same_state(compiled, reference)


def test_parallel_repair_matches_the_reference_under_a_guarantee_on_a_real_window():
    # A real week (hundreds of one-GPU batch jobs) with every service
    # guaranteed: many jobs can start nowhere for many steps, so the pass
    # skips the reservation searches of jobs like one that found none (the
    # code before made 5,008 searches in 167 events here).
    from pathlib import Path

    from gpualloc.scenario.edit import with_min_served

    window = Path(__file__).resolve().parents[1] / "bench" / "traces" / "openb_118d_64.json"
    s = with_min_served(ga.load(window), 1.0)
    rank = {j: i for i, j in enumerate(priority_order(s))}
    compiled, reference = Schedule(s), Schedule(s)
    jobs = np.nonzero(compiled.lay.rigid & ~compiled.done & ~compiled.lay.unplaceable)[0].tolist()
    insert_parallel(compiled, jobs, rank, 0, True, True)
    parallel_reference(reference, jobs, rank, 0, True, True)
    assert 0 < (compiled.start >= 0).sum() < len(jobs)
    same_state(compiled, reference)


@pytest.mark.parametrize("name,seed", [("mixed", 3), ("inference_diurnal", 4)])
def test_fit_at_t_is_the_rule(name, seed):
    # After a partial plan, every waiting job at many steps, with and without
    # the guard and displacement, and with a preferred block.
    s = ga.generate(name, seed=seed, horizon=48)
    sched = Schedule(s)
    order = priority_order(s)
    sched.insert_all([j for j in order[: len(order) // 2] if sched.lay.rigid[j]])
    rng = random.Random(seed)
    waiting = sched.waiting()
    displaced = 0
    for _ in range(400):
        j, t = rng.choice(waiting), rng.randrange(s.T)
        blocks = sched.lay.blocks(j)
        prefer = int(rng.choice(blocks)) if len(blocks) and rng.random() < 0.3 else None
        for demand_aware, displace in ((True, False), (True, True), (False, True)):
            got = sched.fits_at(j, t, demand_aware, displace, prefer)
            want = fits_at_reference(sched, j, t, demand_aware, displace, prefer)
            assert got == want, (j, t, demand_aware, displace, prefer)
            displaced += displace and got != sched.fits_at(j, t, demand_aware, False, prefer)
    assert displaced > 0  # the displacement rule decided some of them
