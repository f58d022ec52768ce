"""Hand-made scenarios the tests share."""
from gpualloc.scenario import Scenario, from_dict


def one_node(horizon: int, jobs: list[dict]) -> Scenario:
    """One 8-GPU node, hourly steps."""
    return from_dict({"name": "node", "horizon": horizon, "step_minutes": 60, "cluster": {
        "pools": [{"name": "h", "count": 1, "gpus_per_node": 8, "gpu_type": "H",
                   "memory_gb": 80}]}, "jobs": jobs})
