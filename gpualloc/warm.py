"""A first run's compiling shared with helper processes.

Numba compiles each of gpualloc's loops once per machine and keeps it in its
on-disk cache, which processes share. Where that cache holds none of them yet
(a user's first run), `gpualloc.run` compiles for about a minute on two
cores, most of it the allocator's (its search, insertion and relaxation),
which runs last. So on such a machine the run starts helpers beside itself,
one per later policy (the last ones first, at most one per spare core): each
plans the first steps of the run's scenario with its policy, in the run's
mode and settings, on one thread, and its compiled loops go to the cache.
When the run gets to that policy, what a helper compiled loads from the
cache; a loop the helper is still compiling the run compiles itself. The
run's plans never depend on the helpers (the same code either way); they
are stopped when the run ends.
"""
from __future__ import annotations

import dataclasses
import multiprocessing
import os
from contextlib import contextmanager

from gpualloc.config import RunConfig

STEPS = 48
"""The helpers plan the scenario's first this many steps: what runs the
policy's loops (their types do not depend on the size), not its time."""


def later_policies(cfg: RunConfig, cores: int) -> list[str]:
    """The policies a helper compiles for: those the run plans after its
    first (FIFO, the baseline) whose first run is mostly compiling, the
    last first, as many as `cfg.warm_helpers` (null: the spare cores) lets."""
    from gpualloc.policies import BASELINE, POLICIES

    names = [BASELINE] + [p for p in cfg.policies if p != BASELINE]
    # An unknown name is the run's to refuse (gpualloc.run.check_policies).
    later = [p for p in reversed(names[1:]) if p in POLICIES and POLICIES[p].compiles]
    most = cores - 1 if cfg.warm_helpers is None else cfg.warm_helpers
    return later[:max(most, 0)]


@contextmanager
def helpers(cfg: RunConfig, cold: bool | None = None):
    """Helper processes for the block: started where numba's cache is `cold`
    (default: gpualloc.jitcache.cold()), stopped when the block ends."""
    from gpualloc.jitcache import cold as cache_cold

    names = later_policies(cfg, os.cpu_count() or 1)
    if not names or not (cache_cold() if cold is None else cold):
        yield []
        return
    # spawn: a fresh interpreter, never a fork of a process with torch's and
    # numba's threads running.
    context = multiprocessing.get_context("spawn")
    procs = [context.Process(target=plan_first_steps, args=(name, cfg), daemon=True,
                             name=f"gpualloc-warm-{name}") for name in names]
    try:
        for p in procs:
            p.start()
        yield procs
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(5)


def plan_first_steps(name: str, cfg: RunConfig, steps: int = STEPS) -> None:
    """A helper: policy `name` on the first `steps` of `cfg`'s scenario,
    on the CPU and one thread, nothing printed or written. Any error is the
    run's to report, not the helper's."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    try:
        import torch

        from gpualloc.online import run_policy
        from gpualloc.run import build_scenario, prepare

        torch.set_num_threads(1)
        cfg = dataclasses.replace(
            cfg, device="cpu", policies=[name],
            solver=dataclasses.replace(cfg.solver, progress=False, cpu_threads=1))
        device = torch.device("cpu")
        s = prepare(first_steps(build_scenario(cfg.scenario, cfg.seed), steps), cfg, device)
        run_policy(name, s, cfg, device)
    except Exception:  # noqa: BLE001 - see the docstring
        pass


def first_steps(s, steps: int):
    """`s` cut to its first `steps` steps: the jobs that arrive before, runs
    and demand cut there."""
    from gpualloc.scenario import Scenario

    T = min(s.T, steps)
    jobs = [dataclasses.replace(
        j, duration=None if j.duration is None else min(j.duration, T - j.arrival),
        demand=None if j.demand is None else list(j.demand[:T]))
        for j in s.jobs if j.arrival < T]
    return Scenario(name=s.name, horizon=T, step_minutes=s.step_minutes, pools=s.pools,
                    jobs=jobs)
