"""Run options that edit a scenario, over the file's or generator's values:
written once, for `python -m gpualloc.run` (min_served=, preemptible=,
restart_cost=) and `python -m gpualloc.trace` (--min-served, --preemptible,
--restart-cost)."""
from __future__ import annotations

from dataclasses import replace

from gpualloc.scenario.io import from_dict
from gpualloc.scenario.model import ELASTIC_KINDS, RIGID_KINDS, Scenario, torch


def with_min_served(s: Scenario, share: float) -> Scenario:
    """The scenario with min_served = share on every real-time service (rule 4)."""
    doc = s.to_dict()
    for job in doc["jobs"]:
        if job["kind"] in ELASTIC_KINDS:
            job["min_served"] = share
        else:
            job.pop("min_served", None)
    return from_dict(doc)


def without_guarantee(s: Scenario, weight: float = 1.0) -> Scenario:
    """`s` with no service guaranteed (rule 4 off), its fixed cells kept; the
    priority of the services that were guaranteed times `weight` (a large
    one: a plan that maximizes value then trades none of their replicas for
    other work)."""
    doc = s.to_dict()
    for job in doc["jobs"]:
        if job.pop("min_served", 0):
            job["priority"] = job["priority"] * weight
    out = from_dict(doc)
    out.fixed = s.fixed
    return out


def with_preemption(s: Scenario, kinds: list[str] | None, restart_cost: int | None) -> Scenario:
    """`kinds`: exactly the rigid jobs of these kinds are preemptible, no other
    (None: as the scenario says); `restart_cost`: that of every preemptible job
    (None: each keeps its own, 0 for a job `kinds` made preemptible)."""
    doc = s.to_dict()
    for job in doc["jobs"]:
        if job["kind"] not in RIGID_KINDS:
            continue
        if kinds is not None:
            job["preemptible"] = job["kind"] in kinds
            if not job["preemptible"]:
                job.pop("restart_cost", None)
        if restart_cost is not None and job.get("preemptible"):
            job["restart_cost"] = restart_cost
    return from_dict(doc)


def with_cuts(s: Scenario, cuts: dict[int, int]) -> Scenario:
    """`s` (with fixed cells: an online view) with these running jobs stopped
    at these steps: their fixed cells end there, and each comes back as a new
    job after the others (its restore and the rest of its run, from the step
    after; not preemptible), in the order of `cuts`."""
    fixed, jobs = s.fixed.clone(), list(s.jobs)
    for j, kept in cuts.items():
        mine = s.fixed == j
        length = int(mine.any(0).sum())
        fixed[:, kept:][mine[:, kept:]] = -1
        job = s.jobs[j]
        if kept == 0:
            # No fixed cell is left to mark the job as running: it would be
            # planned afresh beside its resumed copy. It arrives at the
            # horizon, so nothing places it.
            jobs[j] = replace(job, arrival=s.T)
        jobs.append(replace(job, id=f"{job.id} (resumed)", arrival=kept + 1, preemptible=False,
                            restart_cost=0,
                            duration=min(job.restart_cost + length - kept, s.T - kept - 1)))
    out = Scenario(name=s.name, horizon=s.T, step_minutes=s.step_minutes, pools=s.pools,
                   jobs=jobs, fixed=fixed)
    # Online, `s` is a view and this runs at many replans: the cluster's arrays
    # and the jobs' are s's (a resumed copy's are its job's, but for what the
    # copy changes), not built again from the job list.
    out.share_cluster(s).share_jobs(s, list(range(s.J)) + list(cuts))
    resumed = len(cuts)
    out.__dict__["preemptible"] = torch.cat([s.preemptible, torch.zeros(resumed, dtype=torch.bool)])
    out.__dict__["restart_cost"] = torch.cat([s.restart_cost,
                                              torch.zeros(resumed, dtype=torch.long)])
    out.__dict__["demand"] = torch.cat([s.demand, torch.zeros(resumed, s.T, dtype=torch.long)])
    return out
