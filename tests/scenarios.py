"""Hand-made scenarios the tests share."""
from gpualloc.scenario import Scenario, from_dict


def one_node(horizon: int, jobs: list[dict]) -> Scenario:
    """One 8-GPU node, hourly steps."""
    return from_dict({"name": "node", "horizon": horizon, "step_minutes": 60, "cluster": {
        "pools": [{"name": "h", "count": 1, "gpus_per_node": 8, "gpu_type": "H",
                   "memory_gb": 80}]}, "jobs": jobs})


def scen(pools, jobs, horizon=6):
    return from_dict({"name": "t", "horizon": horizon, "step_minutes": 60,
                      "cluster": {"pools": [
                          {"name": f"p{i}", "count": c, "gpus_per_node": n, "gpu_type": ty,
                           "memory_gb": 80} for i, (c, n, ty) in enumerate(pools)]},
                      "jobs": jobs})


def rigid(id, gpus, duration, arrival=0, priority=1, **kw):
    return {"id": id, "kind": "training", "priority": priority, "arrival": arrival,
            "gpus": gpus, "duration": duration, **kw}


def elastic(id, gpus, demand, arrival=0, priority=9, **kw):
    return {"id": id, "kind": "realtime_inference", "priority": priority, "arrival": arrival,
            "gpus": gpus, "demand": demand, **kw}


def with_fixed(s, fixed):
    return Scenario(name=s.name, horizon=s.horizon, step_minutes=s.step_minutes,
                    pools=s.pools, jobs=s.jobs, fixed=fixed)


def every_block(s, k: int, pools_ok) -> list[int]:
    """First GPUs of every block of k GPUs (PROBLEM.md): k consecutive GPUs
    inside one node at any offset, or k / n whole consecutive nodes of one
    pool when k is larger than the node; only on allowed pools."""
    out, first = [], 0
    for p, pool in enumerate(s.pools):
        n = pool.gpus_per_node
        for node in range(pool.count):
            base = first + node * n
            if not pools_ok[p]:
                continue
            if k <= n:
                out += [base + off for off in range(n - k + 1)]
            elif k % n == 0 and node + k // n <= pool.count:
                out.append(base)
        first += pool.count * n
    return sorted(out)
