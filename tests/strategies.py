"""Hypothesis strategies for small valid scenario documents, adversarial ones
included: jobs larger than any node, type-restricted jobs, demand spikes above
the cluster's size, everything arriving at once, no jobs at all."""
from __future__ import annotations

import torch
from hypothesis import strategies as st

from gpualloc.policies.fifo import fifo
from gpualloc.scenario import KINDS, Scenario, from_dict
from scenarios import with_fixed

TYPES = ["A", "B", "C"]


@st.composite
def scenario_docs(draw, max_pools=3, max_jobs=8, max_horizon=12, max_gpus=16,
                  preemptible=False):
    """`preemptible`: rigid jobs may be preemptible, with restart costs 0-2."""
    horizon = draw(st.integers(1, max_horizon))
    n_pools = draw(st.integers(1, max_pools))
    pools = []
    for p in range(n_pools):
        pools.append({"name": f"p{p}", "count": draw(st.integers(1, 3)),
                      "gpus_per_node": draw(st.sampled_from([1, 2, 4, 8])),
                      "gpu_type": draw(st.sampled_from(TYPES[:n_pools])),
                      "memory_gb": draw(st.sampled_from([40, 80]))})
    types = sorted({p["gpu_type"] for p in pools})
    same_arrival = draw(st.booleans())
    jobs = []
    for i in range(draw(st.integers(0, max_jobs))):
        kind = draw(st.sampled_from(KINDS))
        job = {"id": f"j{i}", "kind": kind,
               "priority": draw(st.integers(1, 10)),
               "arrival": 0 if same_arrival else draw(st.integers(0, horizon - 1)),
               "gpus": draw(st.sampled_from([1, 1, 2, 2, 3, 4, 8, max_gpus]))}
        if kind == "realtime_inference":
            job["gpus"] = draw(st.sampled_from([1, 1, 2, 4, 16]))
            job["demand"] = draw(st.lists(st.integers(0, 6), min_size=horizon, max_size=horizon))
        else:
            job["duration"] = draw(st.integers(1, 3 * horizon + 2))
            if preemptible and draw(st.booleans()):
                job["preemptible"] = True
                job["restart_cost"] = draw(st.integers(0, 2))
        if draw(st.integers(0, 3)) == 0:
            job["gpu_types"] = draw(st.lists(st.sampled_from(types), min_size=1, max_size=2,
                                             unique=True))
        if draw(st.integers(0, 4)) == 0:
            job["min_memory_gb"] = 80
        jobs.append(job)
    return {"name": "hyp", "horizon": horizon, "step_minutes": 60,
            "cluster": {"pools": pools}, "jobs": jobs}


def scenarios(**kw) -> st.SearchStrategy[Scenario]:
    return scenario_docs(**kw).map(from_dict)


@st.composite
def scenario_with_fixed(draw):
    """A scenario and a fixed prefix: FIFO's plan before a cut, plus the
    rest of the runs of rigid jobs that started before it (running jobs)."""
    s = draw(scenarios())
    cut = draw(st.integers(0, s.T))
    owner = fifo(s).owner
    fixed = torch.full_like(owner, -1)
    fixed[:, :cut] = owner[:, :cut]
    for j in fixed[:, :cut].unique().tolist():
        if j >= 0 and s.jobs[j].rigid:
            fixed[owner == j] = j
    return with_fixed(s, fixed)
