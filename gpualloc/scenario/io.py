"""The scenario file format of PROBLEM.md (JSON or YAML) and its strict
validation: every problem raises ScenarioError naming the field and the job."""
from __future__ import annotations

import math
from pathlib import Path

from gpualloc.files import read_document
from gpualloc.scenario.model import (MAX_INT, MAX_PRIORITY, Job, Pool, Scenario,  # noqa: F401
                                     ELASTIC_KINDS, KINDS, RIGID_KINDS, ScenarioError,
                                     _show, check_limits)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool)
            and math.isfinite(v))


def _check_keys(doc: dict, where: str, required: set[str], optional: set[str]) -> None:
    if not isinstance(doc, dict):
        raise ScenarioError(f"{where}: expected a mapping, got {type(doc).__name__}")
    for key in doc:
        if key not in required | optional:
            raise ScenarioError(f"{where}: unknown key '{key}'")
    for key in sorted(required):
        if key not in doc:
            raise ScenarioError(f"{where}: missing field '{key}'")


def _int(doc: dict, key: str, where: str, lo: int, hi: int | None = None) -> int:
    v = doc[key]
    if not _is_int(v):
        raise ScenarioError(f"{where}: field '{key}' must be an integer, got {_show(v)}")
    if v < lo or (hi is not None and v > hi):
        rng = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise ScenarioError(f"{where}: field '{key}' must be {rng}, got {_show(v)}")
    if v > MAX_INT:
        raise ScenarioError(f"{where}: field '{key}' is {_show(v)}, above gpualloc's limit "
                            f"of {MAX_INT:,} (see docs/guide.md, Limits)")
    return v


def _str(doc: dict, key: str, where: str) -> str:
    v = doc[key]
    if not isinstance(v, str) or not v:
        raise ScenarioError(f"{where}: field '{key}' must be a non-empty string, got {_show(v)}")
    return v


def _pool(doc, i: int) -> Pool:
    where = f"cluster.pools[{i}]"
    _check_keys(doc, where, {"name", "count", "gpus_per_node", "gpu_type", "memory_gb"}, set())
    where = f"cluster.pools[{i}] (name {_show(doc['name'])})"
    mem = doc["memory_gb"]
    if not _is_number(mem) or mem <= 0:
        raise ScenarioError(f"{where}: field 'memory_gb' must be a positive number, "
                            f"got {_show(mem)}")
    return Pool(name=_str(doc, "name", where), count=_int(doc, "count", where, 1),
                gpus_per_node=_int(doc, "gpus_per_node", where, 1),
                gpu_type=_str(doc, "gpu_type", where), memory_gb=mem)


def _job(doc, i: int, horizon: int, types: set[str]) -> Job:
    where = f"jobs[{i}]"
    if not isinstance(doc, dict):
        raise ScenarioError(f"{where}: expected a mapping, got {type(doc).__name__}")
    if "id" in doc:
        if not isinstance(doc["id"], str) or not doc["id"]:
            raise ScenarioError(f"{where}: field 'id' must be a non-empty string, "
                                f"got {_show(doc['id'])}")
        where = f"job {_show(doc['id'])} (jobs[{i}])"
    kind = doc.get("kind")
    if "kind" in doc and kind not in KINDS:
        raise ScenarioError(f"{where}: field 'kind' must be one of {', '.join(KINDS)}, "
                            f"got {_show(kind)}")
    base = {"id", "kind", "priority", "arrival", "gpus"}
    extra = {"duration"} if kind in RIGID_KINDS else {"demand"} if kind in ELASTIC_KINDS else set()
    if kind in RIGID_KINDS and "min_served" in doc:
        raise ScenarioError(f"{where}: field 'min_served' is for real-time inference jobs only "
                            f"(a {kind} job cannot be guaranteed a share of demand)")
    for key in ("preemptible", "restart_cost"):
        if kind in ELASTIC_KINDS and key in doc:
            raise ScenarioError(f"{where}: field '{key}' is for rigid jobs only (a real-time "
                                f"inference job is elastic: it never needs preempting)")
    _check_keys(doc, where, base | extra,
                {"gpu_types", "min_memory_gb", "min_served", "preemptible", "restart_cost"})
    prio = doc["priority"]
    if not _is_number(prio) or prio <= 0:
        raise ScenarioError(f"{where}: field 'priority' must be a finite number > 0, "
                            f"got {_show(prio)}")
    if prio > MAX_PRIORITY:
        raise ScenarioError(f"{where}: field 'priority' is {prio:g}, above gpualloc's limit of "
                            f"{MAX_PRIORITY:g} (only ratios of priorities matter)")
    arrival = _int(doc, "arrival", where, 0, horizon - 1)
    gpus = _int(doc, "gpus", where, 1)
    duration = _int(doc, "duration", where, 1) if kind in RIGID_KINDS else None
    demand = None
    if kind in ELASTIC_KINDS:
        demand = doc["demand"]
        if not isinstance(demand, list) or len(demand) != horizon:
            n = len(demand) if isinstance(demand, list) else type(demand).__name__
            raise ScenarioError(f"{where}: field 'demand' must be a list of horizon={horizon} "
                                f"integers, got {n}")
        for t, v in enumerate(demand):
            if not _is_int(v) or v < 0:
                raise ScenarioError(f"{where}: field 'demand' must hold non-negative integers, "
                                    f"got {_show(v)} at t={t}")
            if v > MAX_INT:
                raise ScenarioError(f"{where}: field 'demand' holds {v} at t={t}, above "
                                    f"gpualloc's limit of {MAX_INT:,}")
    gpu_types = doc.get("gpu_types")
    if gpu_types is not None:
        if not isinstance(gpu_types, list) or not gpu_types or not all(
                isinstance(t, str) for t in gpu_types):
            raise ScenarioError(f"{where}: field 'gpu_types' must be a non-empty list of "
                                f"strings, got {_show(gpu_types)}")
        for t in gpu_types:
            if t not in types:
                raise ScenarioError(f"{where}: field 'gpu_types' names {_show(t)}, which no "
                                    f"pool has "
                                    f"(pools have {', '.join(sorted(types))})")
    mem = doc.get("min_memory_gb", 0.0)
    if not _is_number(mem) or mem < 0:
        raise ScenarioError(f"{where}: field 'min_memory_gb' must be a number >= 0, "
                            f"got {_show(mem)}")
    served = doc.get("min_served", 0.0)
    if not _is_number(served) or not 0 <= served <= 1:
        raise ScenarioError(f"{where}: field 'min_served' must be a number in [0, 1], "
                            f"got {_show(served)}")
    preemptible = doc.get("preemptible", False)
    if not isinstance(preemptible, bool):
        raise ScenarioError(f"{where}: field 'preemptible' must be true or false, "
                            f"got {_show(preemptible)}")
    restart_cost = 0
    if "restart_cost" in doc:
        if not preemptible:
            raise ScenarioError(f"{where}: field 'restart_cost' is allowed only with "
                                f"'preemptible: true'")
        restart_cost = _int(doc, "restart_cost", where, 0)
    return Job(id=doc["id"], kind=kind, priority=prio, arrival=arrival, gpus=gpus,
               duration=duration, demand=list(demand) if demand is not None else None,
               gpu_types=list(gpu_types) if gpu_types is not None else None,
               min_memory_gb=mem, min_served=served, preemptible=preemptible,
               restart_cost=restart_cost)


def from_dict(doc) -> Scenario:
    """Validate a scenario document (PROBLEM.md) and build the Scenario."""
    if doc is None:
        raise ScenarioError("scenario: the document is empty")
    _check_keys(doc, "scenario", {"name", "horizon", "step_minutes", "cluster", "jobs"}, set())
    name = _str(doc, "name", "scenario")
    if _is_int(doc["horizon"]):
        check_limits(doc["horizon"], 0, 0)  # first: the jobs' demand lists are T long
    horizon = _int(doc, "horizon", "scenario", 1)
    step = doc["step_minutes"]
    if not _is_number(step) or step <= 0:
        raise ScenarioError(f"scenario: field 'step_minutes' must be a positive number, "
                            f"got {_show(step)}")
    _check_keys(doc["cluster"], "cluster", {"pools"}, set())
    pools_doc = doc["cluster"]["pools"]
    if not isinstance(pools_doc, list) or not pools_doc:
        raise ScenarioError("cluster: field 'pools' must be a non-empty list")
    pools = [_pool(p, i) for i, p in enumerate(pools_doc)]
    if len({p.name for p in pools}) != len(pools):
        raise ScenarioError("cluster.pools: duplicate pool name")
    if not isinstance(doc["jobs"], list):
        raise ScenarioError("scenario: field 'jobs' must be a list")
    check_limits(horizon, sum(p.count * p.gpus_per_node for p in pools), len(doc["jobs"]))
    types = {p.gpu_type for p in pools}
    jobs = []
    seen: set[str] = set()
    for i, j in enumerate(doc["jobs"]):
        job = _job(j, i, horizon, types)
        if job.id in seen:
            raise ScenarioError(f"job {job.id!r} (jobs[{i}]): duplicate id")
        seen.add(job.id)
        jobs.append(job)
    return Scenario(name=name, horizon=horizon, step_minutes=step, pools=pools, jobs=jobs)


def load(path: str | Path) -> Scenario:
    """Read a JSON or YAML scenario file; any problem raises ScenarioError."""
    doc = read_document(path, ScenarioError)
    try:
        return from_dict(doc)
    except ScenarioError as e:  # the file named, as for a file it cannot parse
        raise ScenarioError(f"{path}: {e}") from None
