"""The placement core: every placement rule of PROBLEM.md, written once and
compiled (numba on numpy), that the policies build on.

- `layout`: the cluster and the jobs as flat arrays, candidate blocks per
  class of jobs (gpualloc.core.layout);
- `blocks`: the free-block index on a free-run grid: does a job fit at t,
  every block that fits it at t, the earliest start at which it fits;
- `occupancy`: rigid placements on the (G, T) grid with place / remove /
  snapshot, answering those questions for a job, and the EASY reservation
  (hold / release: the queue's head holds its earliest start);
- `pack`: elastic fill, replicas into free GPUs per timestep, lowest or
  highest block first;
- `guard`: the demand-aware guard (Hall's condition on pool sets) and the
  price of displacing elastic demand; the earliest feasible start under it;
- `insert`: serial insertion of a whole order, compiled;
- `schedule`: all of them as one state (`Schedule`): rigid placements, the
  guard, elastic service and the objective's value, what the allocator's
  repair and search and the online loop's steps between replans work on;
  `adopt` holds a plan's placements (FIFO's, greedy's, the last replan's) in one.

A policy is its own choices on top of it: an order, a fit key, a guard.

Numba compiles a function once per argument types, and a literal (True, 0)
passed between compiled functions is a type of its own: constants passed
there are np.bool_ / np.int64 values, and the grids C-ordered, so the
first run compiles each loop once.
"""
from __future__ import annotations

import numpy as np
import torch

from gpualloc.core.layout import layout
from gpualloc.jitcache import drop_stale
from gpualloc.plan import held
from gpualloc.scenario import Scenario

# Before any compiled loop loads its cache (at its first call): numba would
# keep a loop compiled from sources edited since (gpualloc.jitcache).
drop_stale()


def priority_order(s: Scenario, jobs=None) -> list[int]:
    """Jobs (all by default) by priority, highest first; ties: arrival, then
    scenario order."""
    jobs = range(s.J) if jobs is None else jobs
    if len(jobs) < 64:
        return sorted(jobs, key=lambda j: (-s.jobs[j].priority, s.jobs[j].arrival, j))
    # The same order at once: online views of thousands of jobs sort often (issue 28).
    jobs = np.asarray(jobs, dtype=np.int64)
    priority, arrival = s.priority.numpy()[jobs], s.arrival.numpy()[jobs]
    return jobs[np.lexsort((jobs, arrival, -priority))].tolist()


def service_order(s: Scenario, jobs=None, narrow_first: bool = False) -> list[int]:
    """The real-time services among `jobs` (all by default) that some block can
    hold, in the order elastic demand is served: priority, highest first
    (ties: arrival, then scenario order); `narrow_first`: among equal
    priorities, the services fewer GPUs can hold first (the Schedule's)."""
    jobs = np.arange(s.J) if jobs is None else np.asarray(jobs, dtype=np.int64)
    elastic = jobs[~s.rigid.numpy()[jobs] & ~s.unplaceable.numpy()[jobs]]
    if not narrow_first:
        return priority_order(s, elastic.tolist())
    pool_gpus = np.bincount(s.gpu_pool.numpy(), minlength=len(s.pools))
    compat_gpus = s.pool_compat.numpy()[elastic].astype(np.int64) @ pool_gpus  # GPUs each can use
    return elastic[np.lexsort((elastic, s.arrival.numpy()[elastic], compat_gpus,
                               -s.priority.numpy()[elastic]))].tolist()


class PoolDemand:
    """Per pool, the work that may want each of its GPUs over [t, end), in
    GPU-steps per GPU (rounded): the rigid jobs of a queue (not yet started)
    that arrive before `end`, gpus x duration each, and the demand `need`
    (J, T) of the services `elastic` in [t, end), each spread evenly over the
    GPUs it can use. Offline the plan knows every job; online, the view's
    (issue 25: a count of what waits at t lets flexible jobs take the only
    pool of jobs arriving later).

    Greedy asks this for nearly every start (issue 26: thousands of jobs
    waiting at 4,096 GPUs), so what does not change is built once: each
    job's work and the GPUs it can use, the services' demand as prefix sums
    over time. A call is then a few array operations over the queue; the
    values summed, their order and the last sum are those of the plain
    loop over jobs, so the plans stay the same bit for bit."""

    def __init__(self, lay, elastic: list[int], need: np.ndarray):
        self.lay = lay
        pool_gpus = np.bincount(lay.gpu_pool, minlength=lay.P)  # (P,)
        self.spread = np.maximum(lay.pool_ok.astype(np.int64) @ pool_gpus, 1)  # (J,) its GPUs
        self.work = (lay.gpus * lay.duration).astype(np.float64)  # (J,) a rigid job's GPU-steps
        self.el = np.asarray(elastic, dtype=np.int64)  # (E,) in the order given
        self.need_cs = np.zeros((len(self.el), lay.T + 1), dtype=np.int64)  # (E, T + 1)
        np.cumsum(need[self.el], axis=1, out=self.need_cs[:, 1:])

    def __call__(self, rigid: np.ndarray, t: int, end: int) -> np.ndarray:
        """(P,) int64 for the rigid jobs `rigid` (int64, in queue order)."""
        lay = self.lay
        rigid = rigid[lay.arrival[rigid] < end]  # (R,)
        el_work = (self.need_cs[:, end] - self.need_cs[:, t]) * lay.gpus[self.el]  # (E,) int64
        wanted = el_work > 0
        jobs = np.concatenate([rigid, self.el[wanted]])  # (n,) rigid first, as listed
        if not len(jobs):
            return np.zeros(lay.P, dtype=np.int64)
        work = np.concatenate([self.work[rigid], el_work[wanted].astype(np.float64)])  # (n,)
        per_gpu = work / self.spread[jobs]  # (n,) float64
        return np.rint(per_gpu @ lay.pool_ok[jobs]).astype(np.int64)


def replicas_held(s: Scenario, owner: np.ndarray) -> np.ndarray:
    """(J, T) int64: whole replicas (floor(n_j(t) / gpus_j)) each job holds in
    the time-major owner grid `owner` (T, G), e.g. the cells fixed before
    planning, whose replicas count against demand."""
    return (held(s, owner_of(owner)) // s.gpus[:, None]).numpy()


def time_major(grid: torch.Tensor) -> np.ndarray:
    """(T, G) int64: a (G, T) owner grid turned time-major, the layout of the
    core's grids, as an own C-order copy (a transpose of a one-step or one-GPU
    grid is already contiguous, so np.ascontiguousarray would hand out the
    original, and a caller writing into it would write into the plan)."""
    return np.array(grid.cpu().numpy().T, dtype=np.int64, order="C")


def owner_of(grid: np.ndarray) -> torch.Tensor:
    """(G, T) int64 owner tensor of a time-major (T, G) grid: what a policy
    returns (time_major's inverse)."""
    return torch.from_numpy(np.ascontiguousarray(grid.T))


def still_wanted(s: Scenario, fixed: np.ndarray | None,
                 target: np.ndarray | None = None) -> np.ndarray:
    """(J, T) int64: replicas still wanted once the cells of `fixed` (T, G;
    None: no cells) serve theirs; `target`: what is wanted (the demand by
    default; e.g. the guaranteed replicas)."""
    target = s.demand.numpy() if target is None else target
    if fixed is None:
        return target.astype(np.int64, copy=True)
    # Most fixed cells are rigid work (online: the committed jobs): counted
    # only where a job with something wanted holds one.
    wanted = np.append(target.any(1), False)  # IDLE indexes the spare last entry
    if not wanted[fixed].any():
        return target.astype(np.int64, copy=True)
    return np.maximum(target - replicas_held(s, fixed), 0)


def fixed_jobs(s: Scenario) -> np.ndarray:
    """(J,) bool: jobs holding cells in `s.fixed` (decided before planning:
    a rigid one has started and is not planned again); the caller's own copy."""
    # Online, a replan asks this of its view several times (the policy, the
    # loop's checks and commits), each a pass over the (G, T) grid: one pass
    # while s.fixed stays the same tensor (nothing writes into it in place).
    cached = s.__dict__.get("_fixed_jobs")
    if cached is not None and cached[0] is s.fixed and len(cached[1]) == s.J:
        return cached[1].copy()
    out = np.zeros(s.J + 1, dtype=np.bool_)  # IDLE marks the spare last entry
    if s.fixed is not None:
        out[s.fixed.cpu().numpy()] = True
    s.__dict__["_fixed_jobs"] = (s.fixed, out[:-1])
    return out[:-1].copy()


def ordered_sum(x: np.ndarray) -> float:
    """The sum of x in index order. numpy's `sum` adds in an order that
    depends on the CPU's vector width (AVX-512 or not): discounted values,
    which are not integers, then differ in their last bits from machine to
    machine, and a tie between two plans can break either way. One order
    gives one plan per seed on every machine."""
    return float(np.add.accumulate(x)[-1]) if len(x) else 0.0


def ideal_value(lay, rigid: np.ndarray, elastic: np.ndarray, demand: np.ndarray,
                step_weight: np.ndarray | None = None) -> float:
    """A value no plan exceeds (PROBLEM.md's objective; with `step_weight`
    (T,), discounted): the `rigid` jobs each held whole from its arrival, cut
    by the horizon, and every replica the `elastic` jobs want in `demand`
    (J, T) served. A plan that reaches it is optimal. `lay`: core.layout."""
    worth = lay.priority * lay.gpus  # a job's value per GPU-step of its size
    start = np.minimum(lay.arrival[rigid], lay.T)
    steps = np.minimum(lay.duration[rigid], lay.T - start)
    per_step = (worth[elastic][:, None] * demand[elastic]).sum(0)  # (T,)
    if step_weight is not None:
        cum_weight = np.concatenate([[0.0], np.cumsum(step_weight)])
        steps = cum_weight[start + steps] - cum_weight[start]
        per_step = per_step * step_weight
    return ordered_sum(worth[rigid] * steps) + ordered_sum(per_step)


def ideal_throughput(s: Scenario) -> float:
    """ideal_value of `s` undiscounted: every placeable rigid job and every
    replica wanted (the bound greedy trusts to skip a variant)."""
    lay = layout(s)
    ok = ~lay.unplaceable
    return ideal_value(lay, np.flatnonzero(lay.rigid & ok), np.flatnonzero(~lay.rigid & ok),
                       lay.demand)
