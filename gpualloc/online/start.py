"""Rigid starts decided at their own step (gpualloc.online): arrivals started
at once where a replan would start them so, and the steps between two
replans as a scheduler runs them (the jobs a plan starts there, arrivals
backfilled, and under the guarantee the checks a job that cannot yield
passes to start)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch
from numba import njit

from gpualloc.config import OnlineConfig
from gpualloc.core import priority_order, service_order
from gpualloc.core.classes import (all_served, blocks_at_once, hall_served, starts_at_once,
                                   take_blocks, union_free, unions)
from gpualloc.core.footprint import worth_displacing
from gpualloc.core.layout import layout
from gpualloc.core.reclaim import guaranteed_short
from gpualloc.core.schedule import Schedule, adopt
from gpualloc.online.observe import guess, last_day, observed_demand, season, services_by
from gpualloc.online.view import Committed, view_at
from gpualloc.plan import IDLE, Segments, segments
from gpualloc.scenario import Scenario, guaranteed_replicas


def last_plan(previous: np.ndarray | None, index: list[int], tau: int,
              J: int) -> torch.Tensor | None:
    """The last plan in the new view's job indices (jobs it no longer has: idle)."""
    if previous is None:
        return None
    to_view = np.full(J + 1, IDLE, dtype=np.int64)  # scenario job -> view job
    known = np.array(index, dtype=np.int64)
    real = known >= 0  # placeholders have no scenario job
    to_view[known[real]] = np.arange(len(index))[real]
    grid = previous[:, tau:]
    return torch.from_numpy(np.where(grid >= 0, to_view[grid], IDLE))


def progress_made(s: Scenario, committed: Committed, made) -> dict[int, int]:
    """Committed.progress from `made` (J,): the started preemptible jobs'
    steps of progress (thousands of jobs start, few are preemptible)."""
    started = np.fromiter(committed.start, dtype=np.int64, count=len(committed.start))
    started = started[layout(s).preemptible[started]]
    return dict(zip(started.tolist(), np.asarray(made)[started].tolist()))


def start_at_once(s: Scenario, o: OnlineConfig, oracle, tau: int, new: np.ndarray,
                  committed: Committed, owner: torch.Tensor, memo: dict) -> bool:
    """Start `new`, the rigid jobs arriving at tau, now, written into `owner`
    and `committed`, where they alone wait (the caller's test), each,
    highest priority first, finds a block free for its whole run (the best
    fit, as the core picks), and beside them the services' demand
    (observed at tau, forecast after, as a view has it) still fits at every
    step of the view by Hall's condition (exact for the 1-GPU replicas the
    caller allows). Then the view's priority-order build
    is this and ideal, so the allocator's replan returns it at once. False,
    with nothing written, where any fails: the loop replans. `memo`: the
    caller's for the run (`services_known`)."""
    lay = layout(s)
    order, subsets, demand = services_known(s, o, oracle, tau, memo)
    jobs = np.array(priority_order(s, new.tolist()), dtype=np.int64)
    first = starts_at_once(lay, owner.numpy(), tau, jobs, subsets, order, demand)
    if first is None:
        return False
    end = _started(s, committed, jobs, np.full(len(jobs), tau), first)
    grid = owner.numpy()  # owner's cells: numpy writes cost less than torch's
    for j, g0, stop in zip(jobs.tolist(), first.tolist(), end.tolist()):
        grid[g0:g0 + int(lay.gpus[j]), tau:stop] = j
    return True


def _started(s: Scenario, committed: Committed, jobs: np.ndarray, t: np.ndarray,
             first: np.ndarray) -> np.ndarray:
    """Rigid `jobs` committed as started at steps `t` on the blocks at
    `first` (arrays alike); the ends of their runs (cut at the horizon)."""
    end = np.minimum(t + layout(s).duration[jobs], s.T)
    jobs = jobs.tolist()
    committed.start.update(zip(jobs, zip(t.tolist(), first.tolist())))
    committed.end.update(zip(jobs, end.tolist()))
    return end


def starts_in_turn(s: Scenario, o: OnlineConfig, oracle, steps: list[int],
                   arrivals: dict[int, list[int]], committed: Committed, owner: torch.Tensor,
                   memo: dict) -> int:
    """`start_at_once` at each of `steps` in turn (ascending), each written
    before the next is tried, in one compiled call, up to the first that
    fails: how many started (that one and those after: nothing written).
    The caller's steps hold no replan (only their `arrivals`, in priority
    order, wait at each, or nothing: an idle step) and the same services
    (none arrives after the first); only for the forecasts computed there,
    `last_day` at headroom 1.0 and the oracle. On a lightly loaded cluster
    nearly every arrival starts so, and one call each cost more than the
    allocator's offline plan (issue 28)."""
    lay = layout(s)
    order, _, subsets = _ordered(s, services_by(s, steps[0]), memo)
    ordered = np.asarray(order, dtype=np.int64)
    jobs = [arrivals.get(t, []) for t in steps]
    ptr = np.zeros(len(steps) + 1, dtype=np.int64)
    ptr[1:] = np.cumsum([len(j) for j in jobs])
    flat = np.array([j for js in jobs for j in js], dtype=np.int64)
    first = np.zeros(len(flat), dtype=np.int64)
    done = _starts_in_turn(owner.numpy(), np.asarray(steps, dtype=np.int64), ptr, flat, first,
                           lay.rigid_cells, lay.gpus, lay.duration, lay.job_class, lay.class_ptr,
                           lay.class_blocks, lay.gpu_node, lay.N, subsets, lay.gpu_pool,
                           lay.gpus[ordered], lay.pool_ok[ordered], lay.demand[ordered],
                           lay.arrival[ordered], season(o, s.step_minutes), oracle is not None)
    n = int(ptr[done])
    _started(s, committed, flat[:n], np.repeat(np.asarray(steps[:done]), np.diff(ptr[:done + 1])),
             first[:n])
    return done


@njit(cache=True)
def _starts_in_turn(owner, steps, ptr, jobs, first, held, gpus, duration, job_class, class_ptr,
                    class_blocks, gpu_node, n_nodes, subset_pools, gpu_pool, service_gpus,
                    service_pool_ok, demand, arrival, period, oracle):
    G, T = owner.shape
    E = demand.shape[0]
    # The unions' free GPUs, read from the grid once: each start then takes
    # its own cells from them (a step's check read every GPU of every later
    # step: most of a light fortnight's run).
    t0 = steps[0]
    free_u = union_free(owner, t0, held, subset_pools, gpu_pool)
    for i in range(steps.shape[0]):
        tau, lo, hi = steps[i], ptr[i], ptr[i + 1]
        if hi == lo:
            continue
        mine = jobs[lo:hi]
        lengths = np.minimum(duration[mine], T - tau)
        at = np.zeros(hi - lo, dtype=np.int64)
        if not blocks_at_once(owner, tau, held, gpus[mine], lengths, job_class[mine],
                              class_ptr, class_blocks, gpu_node, n_nodes, at):
            return i
        # Taken before the check: where it fails, the call ends there.
        take_blocks(free_u, tau - t0, at, gpus[mine], lengths, subset_pools, gpu_pool)
        if E > 0:
            need = np.empty((E, T - tau), dtype=np.int64)
            known_rows(demand, tau, arrival, period, oracle, need)
            if not all_served(free_u[:, tau - t0:].copy(), subset_pools, service_gpus,
                              service_pool_ok, need):
                return i
        for x in range(hi - lo):
            first[lo + x] = at[x]
            for g in range(at[x], at[x] + gpus[mine[x]]):
                for c in range(tau, tau + lengths[x]):
                    owner[g, c] = mine[x]
    return steps.shape[0]


def forecast_known(o: OnlineConfig) -> bool:
    """Whether `known_rows` computes o's forecast as a view has it (the
    oracle's, and `last_day`'s at headroom 1.0): only then may the loop
    start arrivals in turn (`starts_in_turn`)."""
    return o.forecast == "oracle" or o.forecast == "last_day" and o.headroom == 1.0


@njit(cache=True)
def known_rows(demand, tau, arrival, period, oracle, out):
    """`services_known`'s demand rows (E, T - tau), written into `out`, from
    the services' whole demand (E, T) in order of service, for the forecasts
    `starts_in_turn` takes: the demand observed at tau, then `last_day`'s
    guesses at headroom 1.0 (its reads stop at tau) or, `oracle`, the true
    demand."""
    T = demand.shape[1]
    for e in range(demand.shape[0]):
        out[e, 0] = demand[e, tau]
    if oracle:
        for e in range(demand.shape[0]):
            for c in range(1, T - tau):
                out[e, c] = demand[e, tau + c]
    else:
        last_day(demand, tau, arrival, T - tau - 1, period, out, np.int64(1))


def services_known(s: Scenario, o: OnlineConfig, oracle, tau: int,
                   memo: dict) -> tuple[list[int], np.ndarray, np.ndarray]:
    """The real-time services arrived by tau in order of service, the unions
    of their pools, and their demand (E, T - tau): observed at tau, then
    forecast, as a view at tau has them (`visible`, `forecast`), read as
    arrays without the view's copies of the jobs. `memo`: the order and
    unions by the set arrived (it changes only where a service arrives)."""
    lay = layout(s)
    services = services_by(s, tau)
    order, at, subsets = _ordered(s, services, memo)
    ordered = services[at]
    history = observed_demand(s, ordered, tau)  # (E, tau + 1)
    steps = s.T - tau - 1
    future = (oracle.ahead(ordered, tau, steps) if oracle is not None
              else guess(o.forecast, history, tau, lay.arrival[ordered], steps, o,
                         s.step_minutes))
    return order, subsets, np.concatenate([history[:, tau:tau + 1], future], 1)


def _ordered(s: Scenario, services: np.ndarray, memo: dict) -> tuple[list[int], np.ndarray,
                                                                      np.ndarray]:
    """`services` (scenario order) in order of service, the positions that
    order them, and the unions of their pools: kept in `memo` by the set."""
    key = services.tobytes()
    if key not in memo:
        order = service_order(s, services)
        rank = {j: i for i, j in enumerate(services.tolist())}
        memo[key] = (order, np.array([rank[j] for j in order], dtype=np.int64),
                     unions(layout(s), order))
    return memo[key]


def between_replans(s: Scenario, o: OnlineConfig, oracle, tau: int, stop: int,
                    previous: np.ndarray | None, committed: Committed,
                    owner: torch.Tensor, due: dict[int, tuple[int, int]],
                    guarded: bool = False, copies: dict | None = None,
                    seg: Segments | None = None,
                    same: tuple[Scenario, list[int]] | None = None) -> tuple[int, int]:
    """The steps between two replans, as a scheduler runs them, each decided
    from what is known at that step t (its view is built like a replan's,
    and with `guarded`, tau's own starts decided here too, and only where
    the step's guaranteed replicas still pack and the guaranteed forecast
    raised by online.guarantee_headroom fits beside the work that cannot
    yield) with the last plan's placements of jobs not yet started held:
    - `due` (online.commit_at_start): jobs the last plan starts at t start
      (`_start_due`), or wait and are tried again at each later step like
      an arrival;
    - with online.fill_between, a rigid job (not preemptible) that arrived
      after tau starts at t if a block is free for its whole run where the
      forecast real-time demand still fits (a backfill pass); highest
      priority first.
    `seg`: the executed plan's segments at tau, when the caller has them;
    `same`: the replan's view and index, when the view at tau would be it.
    Returns (arrivals started, due jobs that did not start at their step)."""
    filled, deferred = 0, 0
    waiting: list[int] = []  # due jobs that did not start at their step
    # The window's arrivals that may fill, read once (thousands of jobs, issue 28);
    # not those the replan planned (online.arrivals=oracle): they are due.
    lay = layout(s)
    fills = [j for j in np.flatnonzero((lay.arrival > tau) & (lay.arrival < stop) & lay.rigid
                                       & ~lay.preemptible & ~lay.unplaceable).tolist()
             if j not in due] if o.fill_between else []
    if not due and not fills and not guarded:  # no step of the window has a start to decide
        return filled, deferred
    # Preemptible jobs' progress: none is started here, so one pass serves the window.
    if seg is None and bool(s.preemptible.any()):
        seg = segments(s, owner)
    progress = None if seg is None else seg.progress
    for t in range(tau if guarded else tau + 1, stop):
        now_due = [j for j, (t0, _) in due.items() if t0 == t]
        new = [j for j in fills if s.jobs[j].arrival <= t and j not in committed.start]
        if not now_due and not new and not waiting:
            continue
        if t == tau and same is not None:
            v, index = same
        else:
            now = committed
            if progress is not None:  # segments committed at tau: their progress by t
                made = progress[:, :t].sum(1)
                now = replace(committed, progress=progress_made(s, committed, made))
            v, index = view_at(s, t, o, oracle, now, copies=copies)
        to_view = {j: vj for vj, j in enumerate(index)}
        if previous is None:
            sched = Schedule(v, discount=o.discount)
        else:
            # The last plan's placements of jobs not started, where still free: held.
            hint = last_plan(previous, index, t, s.J)
            started = [to_view[j] for j in committed.start if j in to_view]
            drop = np.zeros(len(index) + 1, dtype=np.bool_)  # IDLE: the spare last entry
            drop[started] = True
            cells = hint.numpy()  # hint's own cells
            cells[drop[cells]] = IDLE
            sched = adopt(v, hint, o.discount)
        for j in priority_order(s, now_due) + priority_order(s, new + waiting):
            vj = to_view[j]
            if int(sched.start[vj]) >= 0:
                sched.remove(vj)  # its held block: decided now
            if j in now_due:
                first = _start_due(sched, vj, due[j][1])
            else:
                first, _ = sched.fits_at(vj, 0, demand_aware=True, displace=False)
            end = min(t + s.jobs[j].duration, s.T)
            if first is not None and not _free_in_plan(owner, seg, first, s.jobs[j].gpus, t, end):
                first = None
            # Both checks hold or the job waits; the room ahead fails far more often.
            if first is not None and guarded and not (
                    room_for_guarantee(s, v, index, owner, t, j, first, o)
                    and _leaves_guarantee(s, owner, t, j, first)):
                first = None
            if first is None:
                if j in now_due:
                    waiting.append(j)
                    deferred += 1
                continue
            sched.place(vj, 0, first)
            owner[first:first + s.jobs[j].gpus, t:end] = j
            committed.start[j], committed.end[j] = (t, first), end
            if j in waiting:
                waiting.remove(j)
            elif j not in now_due:
                filled += 1
    return filled, deferred


def _start_due(sched: Schedule, j: int, planned: int) -> int | None:
    """The first GPU where view job j, planned to start now on the block at
    `planned`, starts now, or None (it waits): a block where the forecast
    real-time demand still fits (its planned one when it is), else its
    planned block when it is free and the objective (the schedule's
    discount) is higher with j there now than with j at its earliest later
    start that displaces no demand. The replan may have chosen to displace
    demand for it; the demand may have changed since."""
    first, _ = sched.fits_at(j, 0, demand_aware=True, displace=False, prefer=planned)
    if first is not None:
        return first
    if sched.fits_at(j, 0, demand_aware=False, prefer=planned)[0] != planned:
        return None  # not free any more
    before = sched.snapshot()
    sched.place(j, 0, planned)
    sched.fill_elastic()
    now = sched.value()
    sched.restore(before)
    later = sched.find(j, 1, demand_aware=True, displace=False)
    if later is not None:
        sched.place(j, *later)
    sched.fill_elastic()
    wait = sched.value()
    sched.restore(before)
    return planned if worth_displacing(now, wait) else None


def _free_in_plan(owner: torch.Tensor, seg: Segments | None, first: int, k: int, t: int,
                  end: int) -> bool:
    """Whether the executed plan leaves GPUs [first, first + k) free over
    [t, end): idle, or held by a preemptible job after it is done (trimmed
    later). A view between replans holds a preemptible job's last committed
    segment only (Committed), not an earlier one still to come in the
    window, which a start there would cut."""
    cells = owner.numpy()[first:first + k, t:end]
    held = cells >= 0
    if not held.any():
        return True
    g, c = np.nonzero(held)
    return seg is not None and bool(seg.after_done.numpy()[cells[g, c], t + c].all())


def _leaves_guarantee(s: Scenario, owner: torch.Tensor, t: int, j: int, first: int) -> bool:
    """Whether rigid job j (not preemptible) on the block at `first` leaves
    no more of step t's guaranteed replicas (of its actual demand) without
    GPUs than there are without it, packed exactly (gpualloc.core.reclaim)
    around the work that cannot yield at t: the start check's demand guard
    counts pools, not blocks."""
    lay = layout(s)
    order = [k for k in service_order(s) if lay.arrival[k] <= t]
    guaranteed = s.guaranteed.numpy()[:, t]
    if not guaranteed[order].any():
        return True
    column = owner[:, t].numpy().copy()  # rigid work only: replicas are placed later
    column[(column >= 0) & lay.preemptible[np.maximum(column, 0)]] = IDLE
    short = guaranteed_short(lay, column, order, guaranteed)
    column[first:first + int(lay.gpus[j])] = j
    return guaranteed_short(lay, column, order, guaranteed) <= short


def room_for_guarantee(s: Scenario, v: Scenario, index: list[int], owner: torch.Tensor,
                        t: int, j: int, first: int, o: OnlineConfig) -> bool:
    """Whether, beside rigid job j (not preemptible) on the block at `first`,
    the guaranteed replicas of each later step of its run, their forecast
    (view `v`'s, made at t) raised by online.guarantee_headroom (its
    first-day share where the service has less than a period of history)
    and rounded up, still fit on the GPUs that work which cannot yield
    leaves them: the core's Hall condition (core.classes.hall_served) on
    the unions of the services' pool sets that hold j's pool. What
    preemptible jobs and replicas above a guarantee hold, a step's reclaim
    takes when demand comes (online.guarantee_headroom)."""
    lay = layout(s)
    end = min(t + int(lay.duration[j]), s.T)
    min_served = v.min_served.numpy()
    held = np.flatnonzero(~v.rigid.numpy() & (min_served > 0))
    if end <= t + 1 or not len(held):
        return True
    services = [index[vj] for vj in held.tolist()]
    young = t - lay.arrival[services] < season(o, s.step_minutes)  # less than a day seen
    share = np.where(young, o.guarantee_headroom_first_day, o.guarantee_headroom)
    if o.forecast == "oracle":  # the true future: no forecast error to keep room for
        share = np.zeros_like(share)
    raised = np.ceil(v.demand.numpy()[held, 1:end - t] * (1 + share[:, None]) - 1e-9)  # (E, L)
    guaranteed = guaranteed_replicas(min_served[held, None], raised)  # (E, L)
    rigid = np.append(lay.rigid & ~lay.preemptible, False)  # IDLE: the spare last entry
    stays = rigid[owner[:, t + 1:end].numpy().T]  # (L, G) held by work that cannot yield
    stays[:, first:first + int(lay.gpus[j])] = True
    subsets = unions(lay, services)  # (U, P)
    subsets = np.ascontiguousarray(subsets[subsets[:, lay.gpu_pool[first]]])  # j's pool's
    subsets.flags.writeable = False  # as unions' are: one compiled kernel for both
    return bool((hall_served(lay, subsets, ~stays, services, guaranteed) == guaranteed).all())
