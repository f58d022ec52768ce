"""Helpers the tests share: the command line and the composed run config."""
import subprocess
import sys

from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from gpualloc.config import register_configs


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "gpualloc.run", *args], capture_output=True,
                          text=True, cwd=cwd)


def composed(*overrides):
    register_configs()
    with initialize_config_module("gpualloc.conf", version_base=None):
        return OmegaConf.to_object(compose("config", overrides=list(overrides)))


def plan_every_compiled_path() -> list:
    """Every policy offline and online on a cluster of two GPU types (Hall's
    path), with and without the guarantee (its footprint, reclaimed steps
    and start checks), and a light week's arrivals started at once (several
    steps' in turn): what runs each compiled loop of gpualloc. Returns the
    compiled functions (numba dispatchers) of gpualloc's modules."""
    from numba.core.registry import CPUDispatcher

    from gpualloc import api

    s = api.generate("heterogeneous", seed=0, horizon=24)
    for name in ("fifo", "backfill", "greedy", "allocator"):
        api.plan(s, name)
    for name in ("greedy", "allocator"):
        api.online(s, name, replan_every=3)
        api.plan(s, name, mode="online", online={"replan_every": 1}, min_served=1.0,
                 preemptible=["training"], restart_cost=1)
    light = api.generate("low_contention", seed=0, horizon=48)
    for forecast in ("last_day", "oracle"):
        api.online(light, "allocator", replan_every=3, forecast=forecast)
    return list({id(fn): fn for name, module in list(sys.modules.items())
                 if name.startswith("gpualloc") for fn in vars(module).values()
                 if isinstance(fn, CPUDispatcher)}.values())
