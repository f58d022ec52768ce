"""The view a replan plans: what is known and forecast at tau, with the cells
committed before it fixed."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from gpualloc.config import OnlineConfig
from gpualloc.online.observe import (Observation, copy_job, expected_arrivals, forecast,
                                     visible)
from gpualloc.plan import IDLE
from gpualloc.scenario import Job, Scenario

# ---- the view ----------------------------------------------------------------------------

@dataclass
class Committed:
    """What has been decided: rigid jobs' starts and blocks, by scenario index."""

    start: dict[int, tuple[int, int]]
    """job -> (start timestep, first GPU) of its last committed segment."""
    end: dict[int, int] = field(default_factory=dict)
    """Preemptible jobs: job -> the end of that segment."""
    progress: dict[int, int] = field(default_factory=dict)
    """Preemptible jobs: job -> steps of progress made before tau."""
    finished: np.ndarray | None = None
    """(J,) bool: jobs that are not preemptible, seen finished by a view
    (None: none yet). Later views never read them: most known jobs of a long
    trace have finished (issue 28)."""


def view(obs: Observation, future: torch.Tensor, committed: Committed, horizon: int,
         step_minutes: float, pools, G: int, expected: list[Job] | None = None,
         copies: dict[int, Job] | None = None) -> tuple[Scenario, list[int]]:
    """The scenario the planner sees at tau, and view job -> scenario job (IDLE
    for the `expected` placeholders, appended last). Built from the
    observation, the forecast and the commitments only. `copies`: the
    copies of jobs not started that earlier views made, by scenario index,
    reused while their cut duration holds (and added to)."""
    tau = obs.tau
    T = horizon - tau
    jobs, index, fixed_cells = [], [], []
    # The services' rows: the demand observed at tau, then the forecast.
    rows = torch.cat([obs.history[:, tau:tau + 1], future], 1).numpy()  # (E, T)
    lists = rows.tolist()  # each service's demand, as its Job holds it
    services = []  # view job of each row
    e = 0
    finished = committed.finished
    for j, k in zip(obs.jobs, obs.known):
        if k.demand is not None:
            services.append(len(jobs))
            jobs.append(copy_job(k, arrival=0, demand=lists[e]))
            e += 1
        elif j in committed.start and k.preemptible:
            s0, g0 = committed.start[j]
            end, made = committed.end[j], committed.progress[j]
            if made >= k.duration:
                continue  # done
            if end > tau:  # running: the rest of its segment, which a plan may cut
                jobs.append(copy_job(k, arrival=0, duration=min(end, horizon) - tau))
                fixed_cells.append((len(jobs) - 1, g0, k.gpus, min(end, horizon) - tau))
            else:  # stopped: it restores, then makes the rest of its progress
                jobs.append(copy_job(k, arrival=0,
                                  duration=min(k.restart_cost + k.duration - made, T)))
        elif j in committed.start:
            s0, g0 = committed.start[j]
            end = s0 + k.duration
            if end <= tau:
                if finished is not None:
                    finished[j] = True
                continue
            jobs.append(copy_job(k, arrival=0, duration=min(end, horizon) - tau))
            fixed_cells.append((len(jobs) - 1, g0, k.gpus, min(end, horizon) - tau))
        elif k.arrival > tau:  # known before it arrives (online.arrivals=oracle)
            after = k.arrival - tau
            jobs.append(copy_job(k, arrival=after, duration=min(k.duration, T - after)))
        else:
            # Cut at the view's end: the same cells and value (PROBLEM.md cuts runs at T).
            # With thousands waiting, the copies were a tenth of a view (issue 28):
            # one per job while its cut stays.
            duration = min(k.duration, T)
            copy = copies.get(j) if copies is not None else None
            if copy is None or copy.duration != duration:
                copy = copy_job(k, arrival=0, duration=duration)
                if copies is not None:
                    copies[j] = copy
            jobs.append(copy)
        index.append(j)
    fixed = np.full((G, T), IDLE, dtype=np.int64)  # numpy: torch's small writes cost more
    for v, g0, k, length in fixed_cells:
        fixed[g0:g0 + k, :length] = v
    for k in expected or []:
        jobs.append(k)
        index.append(IDLE)  # a placeholder: no scenario job behind it
    v = Scenario(name=f"view@{tau}", horizon=T, step_minutes=step_minutes, pools=pools,
                 jobs=jobs, fixed=torch.from_numpy(fixed))
    # Scenario.demand from the rows at once, not job by job (every service arrives at 0).
    demand = np.zeros((len(jobs), T), dtype=np.int64)
    demand[services] = rows
    v.__dict__["demand"] = torch.from_numpy(demand)
    return v, index


def view_at(s: Scenario, t: int, o: OnlineConfig, oracle, committed: Committed,
            period: int | None = None, copies: dict[int, Job] | None = None,
            end: int | None = None) -> tuple[Scenario, list[int]]:
    """The view of `s` a plan made at t sees: what is known then (with
    online.arrivals=oracle, the rigid jobs still to arrive too), the forecast
    (`oracle`'s, when given, else o.forecast's), the committed cells fixed;
    with `period` and online.arrivals=history, the arrivals expected too;
    `copies`, as `view` says; `end`: the step the view ends at (None: the
    scenario's end; before it, a view cut short, Policy.short_views).
    Returns the view and its jobs' scenario indices (`view`)."""
    end = s.T if end is None else end
    history = period is not None and o.arrivals == "history"
    if committed.finished is None:
        committed.finished = np.zeros(s.J, dtype=np.bool_)
    # The arrivals expected are counted from every job seen, finished ones too.
    obs = visible(s, t, o.arrivals == "oracle", gone=None if history else committed.finished)
    steps = end - t - 1
    future = (oracle(obs, steps) if oracle is not None
              else forecast(o.forecast, obs, steps, o, s.step_minutes))
    expected = expected_arrivals(obs, end - t, period) if history else None
    v, index = view(obs, future, committed, end, s.step_minutes, s.pools, s.G, expected,
                    copies)
    v.share_cluster(s)
    if not expected:  # placeholders have no row of s
        v.share_jobs(s, index)
    return v, index
