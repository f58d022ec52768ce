"""What the planner may know at tau: the jobs arrived by then (demand cut
after tau; with online.arrivals=oracle, every rigid job), the forecast of
real-time demand, the arrivals expected from history."""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch
from numba import njit

from gpualloc.config import OnlineConfig
from gpualloc.core.layout import layout
from gpualloc.scenario import RIGID_KINDS, Job, Scenario, ScenarioError

# ---- what is known at tau ------------------------------------------------------------

@dataclass
class Observation:
    """Everything the planner may learn at `tau`, and nothing more."""

    tau: int
    jobs: list[int]
    """Scenario indices of the jobs known at tau (arrived by then, or every
    rigid job; less those seen finished: `visible`), in scenario order."""
    known: list[Job]
    """Those jobs, each an own copy with its demand cut after tau."""
    history: torch.Tensor
    """(E, tau + 1) int64: observed demand of the elastic ones among `known`
    (in their order), zero before arrival."""
    services: np.ndarray
    """(E,) int64: those elastic jobs' scenario indices."""
    arrival: np.ndarray
    """(E,) int64: their arrivals."""


def visible(s: Scenario, tau: int, arrivals_known: bool = False,
            services_only: bool = False, gone: np.ndarray | None = None) -> Observation:
    """The observation at `tau`: the only place the online loop reads jobs
    for the planner. `arrivals_known` (online.arrivals=oracle): the rigid
    jobs still to arrive too; `services_only`: the real-time services alone
    (a forecast without the thousands of rigid jobs); `gone`: (J,) bool,
    rigid jobs the loop has seen finished, left out."""
    lay = layout(s)  # numpy: a view is built at most steps, and torch's small ops cost more
    if services_only:  # a few services among thousands of rigid jobs
        arrived = services_by(s, tau)
    else:
        seen = lay.arrival <= tau
        if arrivals_known:
            seen = seen | lay.rigid
        if gone is not None:
            seen = seen & ~(gone & lay.rigid)
        arrived = np.flatnonzero(seen)
    jobs = arrived.tolist()
    known = list(map(s.jobs.__getitem__, jobs))  # thousands of rigid jobs: no copy
    elastic = np.flatnonzero(~lay.rigid[arrived])
    for i in elastic.tolist():
        known[i] = copy_job(known[i], demand=list(known[i].demand[:tau + 1]))
    services = arrived[elastic]
    history = torch.from_numpy(observed_demand(s, services, tau))
    return Observation(tau=tau, jobs=jobs, known=known, history=history, services=services,
                       arrival=lay.arrival[services])


def services_by(s: Scenario, tau: int) -> np.ndarray:
    """(E,) int64: the real-time services arrived by tau, in scenario order."""
    lay = layout(s)
    return lay.services[lay.arrival[lay.services] <= tau]


def observed_demand(s: Scenario, services: np.ndarray, tau: int) -> np.ndarray:
    """(E, tau + 1) int64: the observed demand of `services` (arrived by tau),
    zero before arrival (Scenario.demand's rows are): a copy."""
    return layout(s).demand[services, :tau + 1]


def copy_job(k: Job, **changes) -> Job:
    """dataclasses.replace(k, **changes) without its call of __init__ (a
    third of the time): the loop copies every known job at every replan, and
    with thousands waiting that was a tenth of an online run (issue 28)."""
    out = object.__new__(Job)
    out.__dict__.update(k.__dict__)
    out.__dict__.update(changes)
    return out


# ---- forecasts ------------------------------------------------------------------------------

def season(cfg: OnlineConfig, step_minutes: float) -> int:
    """Timesteps in the forecast's season (online.period_steps; null: one day)."""
    return cfg.period_steps or max(1, round(1440 / step_minutes))


def forecast(method: str, obs: Observation, steps: int, cfg: OnlineConfig,
             step_minutes: float) -> torch.Tensor:
    """(E, steps) int64: demand guessed for tau+1 .. tau+steps from the
    observed history only (not for oracle: see `Oracle`)."""
    return torch.from_numpy(guess(method, obs.history.numpy(), obs.tau, obs.arrival, steps, cfg,
                                  step_minutes))


def guess(method: str, h: np.ndarray, tau: int, arrival: np.ndarray, steps: int,
          cfg: OnlineConfig, step_minutes: float) -> np.ndarray:
    """`forecast` on arrays: `h` (E, tau + 1) the observed history of services
    arriving at `arrival` (E,). The online loop's at-once starts ask this at
    most arrivals without an Observation's copies of the jobs (issue 28)."""
    if method == "last_day":
        out = np.empty((h.shape[0], steps), dtype=np.int64)
        last_day(np.ascontiguousarray(h, dtype=np.int64), tau, np.asarray(arrival, dtype=np.int64),
                 steps, season(cfg, step_minutes), out, 0)
        if cfg.headroom == 1.0:  # whole replicas: the rounding below leaves them as they are
            return out
    elif method == "ewma":  # torch's arithmetic (alpha times a count in float32), as it was
        ht, at = torch.from_numpy(h), torch.from_numpy(arrival)
        level = ht[:, 0].double()
        for t in range(1, tau + 1):
            new = cfg.ewma_alpha * ht[:, t] + (1 - cfg.ewma_alpha) * level
            level = torch.where(t > at, new, ht[:, t].double())  # restarts at arrival
        out = level[:, None].expand(-1, steps).numpy()
    else:
        raise ScenarioError(f"online.forecast={method}: not a forecast from history")
    return np.maximum(np.ceil(out * cfg.headroom - 1e-9), 0).astype(np.int64)


@njit(cache=True)
def last_day(h, tau, arrival, steps, period, out, col):
    """`last_day`'s guesses for tau+1 .. tau+steps, written into out[:, col:col
    + steps]: each service's demand at the same time of day on the last
    observed day of `h` (E, > tau), or at tau where that time was not
    observed since its `arrival` (E,). Compiled: the online loop's at-once
    starts guess at most arrivals (issue 28)."""
    for c in range(1, steps + 1):
        src = tau + c - period * ((c + period - 1) // period)
        for e in range(h.shape[0]):
            out[e, col + c - 1] = h[e, tau] if src < arrival[e] else h[e, src]


class Oracle:
    """The true future demand: the one forecaster handed the scenario."""

    def __init__(self, s: Scenario):
        self._demand = layout(s).demand  # (J, T)

    def __call__(self, obs: Observation, steps: int) -> torch.Tensor:
        return torch.from_numpy(self.ahead(obs.services, obs.tau, steps))

    def ahead(self, services: np.ndarray, tau: int, steps: int) -> np.ndarray:
        """(E, steps) int64: the demand of `services` at tau+1 .. tau+steps."""
        return self._demand[services, tau + 1: tau + 1 + steps].reshape(len(services), steps)


def expected_arrivals(obs: Observation, T: int, period: int) -> list[Job]:
    """Placeholders for the rigid work expected to arrive after tau, within
    the view's T steps, from the jobs seen so far only: per kind, the
    arrival rate (by time of day once a whole period has been seen, else
    flat), placed where the expected count crosses a whole job, each a copy
    (size, duration, priority, types) of a seen job of its kind, in an order
    drawn from tau. View arrivals are >= 1: none is ever started before the
    next replan can see what really arrived."""
    tau = obs.tau
    seen = [k for k in obs.known if k.demand is None]
    out: list[Job] = []
    rng = np.random.default_rng(tau)
    for kind in RIGID_KINDS:
        mine = [k for k in seen if k.kind == kind]
        if not mine:
            continue
        counts = np.bincount([k.arrival for k in mine], minlength=tau + 1)[:tau + 1]
        if tau + 1 >= period:  # a daily profile: mean arrivals at each time of day
            days = np.bincount(np.arange(tau + 1) % period, minlength=period)
            rate = np.bincount(np.arange(tau + 1) % period, weights=counts,
                               minlength=period) / np.maximum(days, 1)
        else:
            rate = np.full(period, counts.sum() / (tau + 1))
        protos = [mine[i] for i in rng.permutation(len(mine))]
        due = 0.0
        for dt in range(1, T):
            due += rate[(tau + dt) % period]
            while due >= 1.0:
                due -= 1.0
                p = protos[len(out) % len(protos)]
                out.append(replace(p, id=f"expected-{len(out)}", arrival=dt,
                                   duration=min(p.duration, T - dt)))
    return out
