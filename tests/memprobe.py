"""Measure real peaks on the CPU for tests/test_memory.py, in a fresh process
(one JSON line per case): the allocator's relaxation against
gpualloc.policies.allocator.memory.grid_bytes, FIFO + check + metrics against scenario_bytes.

    python tests/memprobe.py relax G J T DTYPE GRID [relax ...] | fifo G J T | search G J T

search: the allocator without its relaxation (rounding=priority, greedy's
plan as a start, 30 moves of search) against search_bytes.

GRID: dense | packed (SolverConfig.grid).
"""
from __future__ import annotations

import json
import sys

import torch

from gpualloc.policies.allocator import relax
from gpualloc.check import check
from gpualloc.config import SolverConfig
from gpualloc.policies.fifo import fifo
from gpualloc.policies.allocator.memory import (grid_bytes, measure_rss_peak, scenario_bytes,
                                                search_bytes)
from gpualloc.metrics import metrics
from gpualloc.scenario import from_dict


def scenario(G: int, J: int, T: int):
    sizes = [1, 2, 4, 8, 16, 3]
    jobs = [{"id": f"j{i}", "kind": "training", "priority": 1 + i % 5, "arrival": (i * 37) % T,
             "gpus": sizes[i % 6], "duration": 3 + i % 9} for i in range(J - 2)]
    jobs += [{"id": f"rt{i}", "kind": "realtime_inference", "priority": 9, "arrival": 0,
              "gpus": 1, "demand": [2 + t % 3 for t in range(T)]} for i in range(2)]
    s = from_dict({"name": "probe", "horizon": T, "step_minutes": 60, "cluster": {"pools": [
        {"name": "h", "count": G // 8, "gpus_per_node": 8, "gpu_type": "H", "memory_gb": 80}]},
        "jobs": jobs})
    for name in ("compat", "demand", "priority", "arrival", "gpus", "rigid", "duration",
                 "unplaceable"):
        getattr(s, name)  # the scenario's own arrays exist before the measurement
    return s


def main(argv: list[str]) -> None:
    torch.set_num_threads(1)
    while argv:
        what, G, J, T = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
        s = scenario(G, J, T)
        if what == "relax":
            dtype, grid = argv[4], argv[5]
            argv = argv[6:]
            cfg = SolverConfig(iterations=2, progress=False, dtype=dtype, grid=grid)
            _, peak = measure_rss_peak(relax, s, cfg, torch.device("cpu"),
                                       torch.ones(s.J, dtype=torch.bool))
            est = grid_bytes(s, cfg, "cpu")
        elif what == "search":
            from gpualloc.policies import rivals
            from gpualloc.policies.allocator import allocator
            argv = argv[4:]
            dtype = grid = None
            cfg = SolverConfig(rounding="priority", local_search_iters=30, progress=False)
            _, peak = measure_rss_peak(allocator, s, cfg, "cpu", rivals("cpu"))
            est = search_bytes(s)
        else:
            argv = argv[4:]
            dtype = grid = None

            def run():
                owner = fifo(s).owner
                assert check(s, owner).ok
                return metrics(s, owner)
            _, peak = measure_rss_peak(run)
            est = scenario_bytes(s)
        print(json.dumps({"what": what, "G": G, "J": J, "T": T, "dtype": dtype,
                          "grid": grid if what == "relax" else None, "peak": peak,
                          "estimate": est}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
