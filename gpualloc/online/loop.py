"""The rolling-horizon loop (gpualloc.online): replan, commit, serve between
replans; the starts decided at their own step are online/start.py's."""
from __future__ import annotations

import copy
from bisect import bisect_left, bisect_right
from typing import Callable

import numpy as np
import torch

from gpualloc.config import RunConfig
from gpualloc.core import fixed_jobs, priority_order, service_order
from gpualloc.core.classes import serve_steps
from gpualloc.core.layout import layout
from gpualloc.online.observe import Oracle, season
from gpualloc.online.serve import serve
from gpualloc.online.start import (between_replans, forecast_known, last_plan, progress_made,
                                   start_at_once, starts_in_turn)
from gpualloc.online.view import Committed, view_at
from gpualloc.plan import IDLE, Plan, Segments, empty_owner, segments
from gpualloc.progress import bar as progress_bar
from gpualloc.scenario import Scenario, ScenarioError
from gpualloc.threads import cpu_threads

Policy = Callable[[Scenario, RunConfig, torch.device], Plan]
"""A registry entry (gpualloc.policies) or any function of its signature."""

# ---- the loop -----------------------------------------------------------------------------

def online(s: Scenario, policy: Policy, cfg: RunConfig, device: torch.device | str = "cpu",
           name: str = "policy", on_view=None) -> Plan:
    """Rolling-horizon plan of `s` by `policy` (module docstring). `on_view`,
    if given, is called with each (tau, view scenario, view -> scenario index)."""
    with cpu_threads("cpu", 1):  # the loop's grids are small (G x T); a policy sets its own
        return _online(s, policy, cfg, device, name, on_view)


def _online(s: Scenario, policy: Policy, cfg: RunConfig, device: torch.device | str,
            name: str, on_view) -> Plan:
    o = cfg.online
    cfg, light = replan_configs(cfg)
    unrelaxed = without_relaxation(cfg)
    # Steps where rigid work arrives; each is known at its own step, and a
    # window that reaches one ends there, so every decision from that step
    # on comes from a plan made then.
    arrives = {j.arrival for j in s.jobs if j.rigid}
    # With guaranteed services, work that cannot yield starts only where their
    # forecast raised by the headroom fits beside the work that cannot yield
    # and the step's guaranteed replicas still pack: every such start, at tau
    # too, is decided at its step (online.start.between_replans).
    guarded = o.guarantee_headroom > 0 and any(j.min_served > 0 for j in s.jobs if not j.rigid)
    oracle = Oracle(s) if o.forecast == "oracle" else None
    # Arrivals inside a window are filled between replans; windows end at
    # arrivals where they are replanned.
    fills = o.fill_between and o.replan_on_arrival == "none"
    # The last plan in each view's indices, for a policy that starts from it (a
    # function that is no registry entry may: it gets it too).
    hinted = getattr(policy, "reads_hint", True)
    period = season(o, s.step_minutes)
    owner = empty_owner(s)  # (G, T) int64, the executed plan
    committed = Committed(start={})
    previous = None  # the last replan's plan of its rigid jobs, by scenario index
    progress = None  # (J, T) progress of the executed plan, preemptible jobs (from _trim_done)
    replans = arrival_replans = filled = deferred = full_replans = relaxed_replans = skipped = 0
    inserted = 0
    # Arrivals are started without a replan only for a policy that would start
    # them so (Policy.starts_arrivals_at_once), and where the views hold nothing
    # the loop would have to weigh: no guaranteed service (its start checks),
    # no preemptible job (cuts), no expected arrivals (placeholders); and only
    # beside 1-GPU replicas, for which Hall's condition is exact.
    insertable = (getattr(policy, "starts_arrivals_at_once", False) and o.arrivals == "none"
                  and not bool((s.min_served > 0).any()) and not bool(s.preemptible.any())
                  and bool((s.gpus[~s.rigid] == 1).all()))
    # Where each step's service is its own and no decision reads it
    # (_service_at_end), every window is served in one pass at the end:
    # (tau, stop, the plan's replicas or None where the window's demand is
    # packed on what rigid work leaves free). Then skipped windows in a
    # row, up to the next arrival (they end at arrivals), are one step of
    # the loop.
    windows = [] if _service_at_end(s) else None
    stretches = windows is not None and o.replan_on_arrival != "none"
    # A light replan where only the jobs arriving at tau wait is first planned
    # on a view cut after the longest of their runs (or the window), for a
    # policy that plans only its window, each step from the steps before it
    # (Policy.short_views). Where that plan looked no further (every such job
    # started at once: Plan.info["looked_ahead"] False), it is the whole
    # view's plan; else the whole view is planned. Only with no arrivals in
    # the views but those known, and where a service that wants nothing
    # before the cut, which the cut view leaves out, changes no step's
    # service (_one_step_service).
    shortable = (getattr(policy, "short_views", False) and not hinted
                 and o.arrivals == "none" and _one_step_service(s))
    short_views = 0
    last_full = last_relaxed = None  # the steps of the last full replan, of the last relaxed one
    carry = None  # what its plan carries to the light replans after it
    copies = {}  # the views' copies of jobs not started (online.view.view)
    services_memo = {}  # what the at-once starts read of each set of services (start_at_once)
    # After an arrival started at once, the arrivals of the steps after it are
    # tried in turn in one call (start.starts_in_turn), up to the first that
    # does not start or a service's arrival: where each step's service waits
    # for the end (no step's decision reads it) and the forecast is one the
    # call computes. The loop then passes those steps as started.
    chained: set[int] = set()
    chains = insertable and stretches and _builds_priority_first(cfg) and forecast_known(o)
    if chains:
        lay = layout(s)
        placeable = np.flatnonzero(lay.rigid & ~lay.unplaceable)
        arrivals_at: dict[int, list[int]] = {}
        for j in priority_order(s, placeable.tolist()):
            arrivals_at.setdefault(int(lay.arrival[j]), []).append(j)
        steps_ahead = sorted(t for t in arrives if t < s.T)
        service_arrivals = np.unique(lay.arrival[lay.services])

    def window_end(t: int) -> int:
        """The end of the window from t: the next replan step, or an arrival."""
        stop = min(t - t % o.replan_every + o.replan_every, s.T)
        if o.replan_on_arrival != "none":
            stop = next((x for x in range(t + 1, stop) if x in arrives), stop)
        return stop

    def cadence(t: int) -> tuple[bool, bool, bool, bool]:
        """Whether the replan at t is periodic, full, relaxed; and quiet: not
        full, or the policy's last full plan carried nothing (it weighs
        nothing at a full replan), or it never carries (a policy that starts
        arrivals at once: its first full replan is quiet too)."""
        periodic = t % o.replan_every == 0
        full = (periodic and (last_full is None or o.full_every is None
                              or t - last_full >= o.full_every)
                or not periodic and o.replan_on_arrival == "full")
        relaxed = full and (last_relaxed is None or o.relax_every is None
                            or t - last_relaxed >= o.relax_every)
        return periodic, full, relaxed, not full or (carry is None
                                                     and (last_full is not None or insertable))

    tau = 0
    bar = progress_bar(total=s.T, desc=f"online {name}", unit="step", leave=False)
    while tau < s.T:
        stop = window_end(tau)
        made_by_tau = None  # (J,) preemptible jobs' progress before tau
        if progress is not None:  # from the last trim: serving moves no rigid cell
            made_by_tau = progress[:, :tau].sum(1)
            committed.progress = progress_made(s, committed, made_by_tau)
        periodic, full, relaxed, quiet = cadence(tau)
        # Every rigid job known has started (and, preemptible, finished): a
        # replan would place nothing, and real-time service follows the actual
        # demand (serve): most steps of a lightly loaded cluster. Or only the
        # arrivals at tau wait, and each starts now where a block is free for
        # its whole run beside the forecast demand, as the policy's replan would
        # start it (Policy.starts_arrivals_at_once). A full replan still runs
        # where the policy carries what it weighs there to the light replans
        # after it (greedy's variant).
        if tau in chained:  # its arrivals started by the chain (quiet: nothing else waits)
            idle, at_once = not arrivals_at.get(tau), bool(arrivals_at.get(tau))
        else:
            waiting = _waiting(s, tau, committed, made_by_tau) if quiet else None
            idle = quiet and not waiting.any()
            arrivals_only = quiet and not idle and bool((s.arrival.numpy()[waiting] == tau).all())
            at_once = (arrivals_only and insertable
                       and (not full or _builds_priority_first(cfg if relaxed else unrelaxed))
                       and start_at_once(s, o, oracle, tau, np.flatnonzero(waiting), committed,
                                         owner, services_memo))
            if at_once and chains:
                # The steps after tau where rigid work arrives, while the services stay.
                ahead = steps_ahead[bisect_right(steps_ahead, tau):]
                later = service_arrivals[service_arrivals > tau]
                if len(later):
                    ahead = ahead[:bisect_left(ahead, int(later[0]))]
                if ahead:
                    done = starts_in_turn(s, o, oracle, ahead, arrivals_at, committed, owner,
                                          services_memo)
                    chained = set(ahead[:done])
        if idle or at_once:
            skipped += idle
            inserted += at_once
            if full:  # the cadence holds: the next full replan comes when it would have
                last_full = tau
                last_relaxed = tau if relaxed else last_relaxed
            # Nothing waits now, and nothing arrives before `stop`: each quiet
            # window after it up to the next arrival would be skipped too.
            while stretches and stop < s.T and stop not in arrives:
                _, full, relaxed, quiet = cadence(stop)
                if not quiet:
                    break
                skipped += 1
                if full:
                    last_full = stop
                    last_relaxed = stop if relaxed else last_relaxed
                stop = window_end(stop)
            if fills or guarded:
                filled += between_replans(s, o, oracle, tau, stop, previous, committed, owner,
                                          {}, guarded, copies)[0]
            if windows is not None:
                windows.append((tau, stop, None))
            elif serve(s, _packed(s, owner, np.arange(tau, stop)), tau, stop, owner, committed):
                progress = _trim_done(s, owner)
            bar.update(stop - tau)
            tau = stop
            continue
        v = made = None
        if shortable and not full and arrivals_only:
            end = tau + max(stop - tau, int(np.minimum(s.duration.numpy()[waiting],
                                                       s.T - tau).max()))
            if end < s.T:
                v, index = view_at(s, tau, o, oracle, committed, period, copies, end)
                v.window, v.carry = stop - tau, carry
                made = policy(v, light, device)
                if made.info.get("looked_ahead", True):
                    v = made = None  # planned again on the whole view
                short_views += v is not None
        if v is None:
            v, index = view_at(s, tau, o, oracle, committed, period, copies=copies)
            if hinted:
                v.hint = last_plan(previous, index, tau, s.J)
            v.window = stop - tau
        if on_view is not None:
            on_view(tau, v, index)
        if not v.J:
            planned = empty_owner(v)
        else:
            last_full = tau if full else last_full
            full_replans += full
            last_relaxed = tau if relaxed else last_relaxed
            relaxed_replans += relaxed
            v.carry = None if full else carry
            if made is None:
                made = policy(v, cfg if relaxed else unrelaxed if full else light, device)
            carry = made.info.get("carry") if full else carry
            planned = made.owner.cpu().long()
            _check_honours(v, planned, name)
            replans += periodic
            arrival_replans += not periodic
            previous = _remember(v, index, planned, tau, s, owner)
        due, moved = _commit_rigid(v, index, planned, tau, stop, owner, committed,
                                   0 if guarded else 1 if o.commit_at_start else None)
        # Between replans only jobs that are not preemptible start: the
        # preemptible jobs' segments stay as committed, read once for both.
        seg = segments(s, owner) if bool(s.preemptible.any()) else None
        if fills or guarded or due:
            # tau's own starts (guarded) see the replan's view where the
            # commits left it as it was (no arrivals expected: placeholders
            # are the replan's own).
            same = (v, index) if guarded and not moved and o.arrivals != "history" else None
            done = between_replans(s, o, oracle, tau, stop, previous, committed, owner, due,
                                   guarded, copies, seg, same)
            filled += done[0]
            deferred += done[1]
        progress = _trim_done(s, owner, seg)
        replicas = _replicas(v, index, planned, stop - tau)
        if windows is not None:
            windows.append((tau, stop, replicas))
        elif serve(s, replicas, tau, stop, owner, committed):
            progress = _trim_done(s, owner)  # preempted at a step of the window
        bar.update(stop - tau)
        if not bar.disable:  # formatting it costs even a hidden bar's time
            bar.set_postfix(replans=replans + arrival_replans, refresh=False)
        tau = stop
    bar.close()
    if windows:
        serve(s, _service_plan(s, owner, windows), 0, s.T, owner, committed)
    return Plan(owner=owner, info={"mode": "online", "forecast": o.forecast,
                                   "replan_every": o.replan_every, "replans": replans,
                                   "arrival_replans": arrival_replans,
                                   "full_replans": full_replans,
                                   "relaxed_replans": relaxed_replans,
                                   "filled": filled, "deferred": deferred,
                                   "skipped": skipped, "inserted": inserted,
                                   "short_views": short_views})


def _one_step_service(s: Scenario) -> bool:
    """Whether each step's real-time service depends on that step alone, and
    a service that wants nothing at a step changes nothing there: no
    guarantee (its reclaims cut work for later steps), no preemptible job,
    and at most 6 service classes (the unions of classes that Hall's counts
    take then stay under core.classes' cap of 64)."""
    lay = layout(s)
    classes = {tuple(row) for row in lay.pool_ok[~lay.rigid].tolist()}
    return (not bool((s.min_served > 0).any()) and not bool(s.preemptible.any())
            and len(classes) <= 6)


def _service_at_end(s: Scenario) -> bool:
    """Whether the loop may serve every window in one pass after its last
    decision, as window by window: where each step's service is its own
    (_one_step_service: no reclaim cuts work, nothing preemptible), no
    decision reads a replica (views fix committed rigid cells; starts read
    rigid cells from their own step on), so a window's service changes no
    later decision."""
    return _one_step_service(s)


def _service_plan(s: Scenario, owner: torch.Tensor,
                  windows: list[tuple[int, int, np.ndarray | None]]) -> np.ndarray:
    """(T, G) the replicas `serve` starts from, the loop's windows in time
    order: each replanned window's plan (`_replicas`), and the other windows'
    actual demand packed (`_packed`, in one pass)."""
    out = np.full((s.T, s.G), IDLE, dtype=np.int64)
    packed = []
    for tau, stop, replicas in windows:
        if replicas is None:
            packed.append(np.arange(tau, stop))
        else:
            out[tau:stop] = replicas
    if packed:
        steps = np.concatenate(packed)
        out[steps] = _packed(s, owner, steps)
    return out


def replan_configs(cfg: RunConfig) -> tuple[RunConfig, RunConfig]:
    """(full, light): the policy's settings at a full replan, and its cheap
    form at an arrival or between two full replans (the same for a policy
    without a solver)."""
    o = cfg.online
    if getattr(cfg, "solver", None) is not None:
        cfg = _own_solver(cfg)
        cfg.solver.progress = False  # one progress bar per replan would flood the terminal
        cfg.solver.discount = o.discount
        # greedy's plan of a view wins there too often and loses online
        # (measured on the Alibaba week: +3.0% against +13.4% over FIFO).
        cfg.solver.start_from_greedy = False
        cfg.solver.local_search_iters = min(cfg.solver.local_search_iters, o.search_moves)
        cfg.solver.iterations = min(cfg.solver.iterations, o.relax_iterations)
        cfg.solver.local_search_max_waiting = min(cfg.solver.local_search_max_waiting,
                                                  o.search_max_waiting)
        if o.search_max_removed is not None:
            cfg.solver.local_search_max_removed = min(
                cfg.solver.local_search_max_removed or o.search_max_removed, o.search_max_removed)
        cfg.solver.local_search_anneal_iters = o.anneal_moves
        cfg.solver.local_search_patience = min(cfg.solver.local_search_patience,
                                               max(1, o.search_moves // 5))
        cfg.solver.deep_search_cells = 0  # a view's size never deepens a replan's search
    light = cfg  # the policy's cheap plan: at an arrival, between two full replans
    if getattr(cfg, "solver", None) is not None:
        light = _own_solver(cfg)
        light.solver.rounding = "priority"  # no relaxation
        light.solver.local_search_iters = min(cfg.solver.local_search_iters,
                                              o.arrival_search_moves)
        light.solver.local_search_anneal_iters = 0
        light.solver.local_search_patience = max(1, o.arrival_search_moves // 5)
    return cfg, light


def _builds_priority_first(cfg: RunConfig) -> bool:
    """Whether a replan with these settings makes the priority-order build
    first and returns it where it is ideal: only then is an arrival started
    at once (Policy.starts_arrivals_at_once) what that replan would start
    (solver.rounding=relaxed rounds the relaxation only, and may pick
    another block of the same value)."""
    solver = getattr(cfg, "solver", None)
    return solver is None or solver.rounding != "relaxed"


def without_relaxation(cfg: RunConfig) -> RunConfig:
    """A full replan's settings without the relaxation (online.relax_every):
    the priority-order builds and the last plan, the full replan's search."""
    if getattr(cfg, "solver", None) is None:
        return cfg
    out = _own_solver(cfg)
    out.solver.rounding = "priority"
    return out


def _own_solver(cfg: RunConfig) -> RunConfig:
    """A copy of `cfg` with a copy of its solver settings, for the loop to
    change (a deep copy of the whole run's settings cost a millisecond a
    run: most of a quiet week)."""
    out = copy.copy(cfg)
    out.solver = copy.copy(cfg.solver)
    return out


def _remember(v: Scenario, index: list[int], planned: torch.Tensor, tau: int,
              s: Scenario, owner: torch.Tensor) -> np.ndarray:
    """(G, T) the plan's rigid cells from tau on, by scenario index: where the
    next replan may start from (gangs keep their future block unless a
    better plan moves them). After a view cut short, the committed cells of
    the executed plan `owner` (those of the view's fixed jobs there)."""
    # numpy: these (G, T) grids are small, and torch's threads cost more than the work.
    # View job -> scenario job where rigid, else IDLE (so is IDLE's spare last entry).
    to_scenario = np.where(np.append(v.rigid.numpy(), False),
                           np.array(index + [IDLE], dtype=np.int64), IDLE)
    out = np.empty((s.G, s.T), dtype=np.int64)
    out[:, :tau] = IDLE
    out[:, tau:tau + v.T] = to_scenario[planned.numpy()]
    out[:, tau + v.T:] = owner.numpy()[:, tau + v.T:]
    return out


def _waiting(s: Scenario, tau: int, committed: Committed,
             made: torch.Tensor | None) -> np.ndarray:
    """(J,) bool: the rigid jobs a replan at tau would place or cut, those
    arrived by tau (placeable) that have not started or, preemptible, not
    made all their progress (`made`: (J,) steps made before tau). With none,
    the replan would decide nothing."""
    lay = layout(s)
    open_ = (lay.arrival <= tau) & lay.rigid & ~lay.unplaceable
    started = np.zeros(s.J, dtype=np.bool_)
    started[np.fromiter(committed.start, dtype=np.int64, count=len(committed.start))] = True
    done = started & ~lay.preemptible
    if made is not None:
        done |= started & lay.preemptible & (np.asarray(made) >= lay.duration)
    return open_ & ~done


def _packed(s: Scenario, owner: torch.Tensor, steps: np.ndarray) -> np.ndarray:
    """(R, G) the actual demand of `steps` (R,), step by step, on the GPUs
    rigid work leaves free, packed the best way the core packs a step
    (gpualloc.core.classes.serve_steps: greedy's ways and the allocator's,
    by class), by scenario index; IDLE elsewhere. A skipped replan's
    planned replicas."""
    lay = layout(s)
    window = owner.numpy()[:, steps].T  # (R, G)
    out = np.full(window.shape, IDLE, dtype=np.int64)
    services = lay.services  # rigid jobs' demand rows are zero
    jobs = service_order(s, services[lay.demand[services][:, steps].any(1)].tolist())
    if jobs:
        serve_steps(lay, out, window == IDLE, jobs, lay.demand[jobs][:, steps], by_class=True)
    return out


def _replicas(v: Scenario, index: list[int], planned: torch.Tensor, R: int) -> np.ndarray:
    """(R, G) the services the plan `planned` (G, view T) serves on each cell
    of its first R steps, by scenario index; IDLE elsewhere."""
    to_scenario = np.array(index + [IDLE], dtype=np.int64)  # view job -> scenario job
    elastic = np.append(~v.rigid.numpy(), False)
    p = planned[:, :R].T.numpy()
    return np.where(elastic[p], to_scenario[p], IDLE)


def _check_honours(v: Scenario, planned: torch.Tensor, name: str) -> None:
    if tuple(planned.shape) != (v.G, v.T):
        raise ScenarioError(f"policy {name} returned a ({tuple(planned.shape)}) plan for a "
                            f"({v.G}, {v.T}) view: it cannot run with mode=online")
    p, fixed = planned.numpy(), v.fixed.numpy()
    preemptible = v.preemptible.numpy()
    # Preemptible jobs' fixed cells may be cut, and such a job may run again.
    held_by = np.zeros(v.J + 1, dtype=bool)  # IDLE indexes the spare last entry
    held_by[:-1] = ~preemptible
    held = held_by[fixed]  # cells decided before the view that no plan may change
    decided = np.zeros(v.J + 1, dtype=bool)
    decided[:-1] = fixed_jobs(v) & ~preemptible
    # On held cells the plan keeps the fixed job; elsewhere no decided job runs.
    if np.where(held, p != fixed, decided[p]).any():
        moved, elsewhere = held & (p != fixed), ~held & decided[p]
        raise ScenarioError(f"policy {name} does not honour Scenario.fixed (it changed "
                            f"{int(moved.sum())} decided cells and ran decided jobs on "
                            f"{int(elsewhere.sum())} others): it cannot run with mode=online")


def _commit_rigid(v, index, planned, tau, stop, owner, committed,
                  due_from: int | None = None) -> tuple[dict[int, tuple[int, int]], bool]:
    # A rigid job the plan starts inside the window runs there to its end; a
    # preemptible one, to the end of that segment. A running preemptible job
    # the plan cuts inside the window stops there. With `due_from`, jobs (not
    # preemptible) the plan starts at tau + due_from or later are returned
    # instead, job -> (planned start, first GPU): decided at that step
    # (online.start.between_replans). Also returns whether `committed` changed.
    R = stop - tau
    plan, fixed = planned.numpy(), v.fixed.numpy()  # (G, T) each
    # Jobs the plan runs inside the window (IDLE marks the spare last entry).
    in_window = np.zeros(v.J + 1, dtype=np.bool_)
    in_window[plan[:, :R]] = True
    # Only the jobs this window starts or may cut: thousands wait (issue 28).
    decided = fixed_jobs(v)
    placeholder = np.array(index, dtype=np.int64) == IDLE  # they hold capacity, never run
    acts = (v.rigid.numpy() & ~placeholder
            & np.where(decided, v.preemptible.numpy(), in_window[:-1]))
    decided = decided.tolist()
    commits = []
    moved = False
    acting = np.flatnonzero(acts)
    runs_of = _runs(plan, acting)
    for vj in acting.tolist():
        job, j = v.jobs[vj], index[vj]
        runs = runs_of[vj]
        if decided[vj]:  # running: its fixed cells start at 0; a cut ends them
            length = int((fixed == vj).any(0).sum())
            g0, k = committed.start[j][1], job.gpus
            # Its fixed cells while the plan keeps them (a run from 0 on other
            # GPUs is a move: a cut, and a new segment).
            kept = runs[0][1] if runs and runs[0][0] == 0 and runs[0][2] == g0 else 0
            kept = min(kept, length)
            if kept < length and kept < R:
                cut = owner[g0:g0 + k, tau + kept:tau + length]
                cut[cut == j] = IDLE
                committed.end[j] = tau + kept
                moved = True
            if kept:
                runs = ([(kept, runs[0][1], g0)] if runs[0][1] > kept else []) + runs[1:]
        commits += [(j, job, run) for run in (runs if job.preemptible else runs[:1])
                    if run[0] < R]
    due = {}
    if due_from is not None:
        due = {j: (tau + t0, g0) for j, job, (t0, _, g0) in commits
               if t0 >= due_from and not job.preemptible}
        commits = [c for c in commits if c[0] not in due]
    # After every cut: a segment may start where another job was cut.
    for j, job, (t0, t1, g0) in commits:
        owner[g0:g0 + job.gpus, tau + t0:tau + t1] = j
        committed.start[j] = (tau + t0, g0)
        committed.end[j] = tau + t1
    return due, moved or bool(commits)


def _runs(plan: np.ndarray, jobs: np.ndarray) -> dict[int, list[tuple[int, int, int]]]:
    """Each of `jobs`' runs in `plan` (G, T) on one set of GPUs, in time
    order: job -> [(first step, end step, first GPU)] (all jobs in one pass:
    a replan commits several)."""
    out: dict[int, list[tuple[int, int, int]]] = {j: [] for j in jobs.tolist()}
    mine = np.zeros(int(plan.max(initial=-1)) + 2, dtype=np.bool_)  # IDLE: the spare last entry
    mine[jobs[jobs < len(mine) - 1]] = True
    step, gpu = np.nonzero(mine[plan.T])  # by step, then GPU
    job = plan[gpu, step]
    # Each (job, step)'s first GPU held, ordered by job, then step.
    _, first = np.unique(job * (plan.shape[1] + 1) + step, return_index=True)
    for j, t, g in zip(job[first].tolist(), step[first].tolist(), gpu[first].tolist()):
        runs = out[j]
        if runs and runs[-1][1] == t and runs[-1][2] == g:
            runs[-1] = (runs[-1][0], t + 1, g)
        else:
            runs.append((t, t + 1, g))
    return out


def _trim_done(s: Scenario, owner: torch.Tensor,
               seg: Segments | None = None) -> torch.Tensor | None:
    """Free the cells a preemptible job holds after it is done; returns the
    (J, T) progress of the executed plan (None without preemptible jobs). A
    guard: the views' plans pass their checker, restores of running jobs
    included; it trimmed nothing in 32 guarantee runs of four of the seven."""
    if not bool(s.preemptible.any()):
        return None
    seg = segments(s, owner) if seg is None else seg
    late = seg.after_done  # (J, T)
    if late.any():
        j = owner.clamp(min=0)
        t = torch.arange(s.T).expand(s.G, s.T)
        owner[(owner >= 0) & late[j, t]] = IDLE
    return seg.progress  # cells after done were not progress: trimming changes none
