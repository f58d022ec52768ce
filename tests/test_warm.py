"""A first run's compiling shared with helper processes (gpualloc.warm)."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpualloc import api
from gpualloc.check import check
from gpualloc.config import RunConfig
from gpualloc.warm import first_steps, later_policies

ROOT = Path(__file__).resolve().parents[1]


def test_the_first_steps_are_a_scenario_every_policy_plans_feasibly():
    s = api.generate("heterogeneous", seed=0)
    cut = first_steps(s, 30)
    assert cut.T == 30 and cut.G == s.G and 0 < cut.J < s.J
    assert all(j.arrival < 30 for j in cut.jobs)
    assert all(j.arrival + j.duration <= 30 for j in cut.jobs if j.rigid)
    assert all(len(j.demand) == 30 for j in cut.jobs if not j.rigid)
    kept = {j.id: j for j in s.jobs}
    for j in cut.jobs:  # the same jobs, cut where the horizon ends
        whole = kept[j.id]
        assert (j.kind, j.priority, j.arrival, j.gpus) == (whole.kind, whole.priority,
                                                           whole.arrival, whole.gpus)
        if j.rigid:
            assert j.duration == min(whole.duration, 30 - j.arrival)
        else:
            assert j.demand == whole.demand[:30]
    for name in ("fifo", "greedy", "allocator"):
        assert check(cut, api.plan(cut, name).owner).ok, name


def test_helpers_go_to_the_later_policies_that_compile_the_last_first():
    cfg = RunConfig()  # fifo, greedy, allocator
    assert later_policies(cfg, cores=1) == []
    assert later_policies(cfg, cores=2) == ["allocator"]
    assert later_policies(cfg, cores=16) == ["allocator", "greedy"]
    assert later_policies(dataclasses.replace(cfg, warm_helpers=0), cores=16) == []
    assert later_policies(dataclasses.replace(cfg, warm_helpers=1), cores=16) == ["allocator"]
    # FIFO, the baseline, always runs first; exact's first run is CP-SAT's, not compiling.
    cfg = dataclasses.replace(cfg, policies=["exact", "greedy", "fifo"])
    assert later_policies(cfg, cores=16) == ["greedy"]


@pytest.mark.slow
def test_a_helper_compiles_what_the_run_then_loads_from_the_cache(tmp_path):
    """In a process of its own with an empty numba cache: a helper for the
    plain backfill (the run's second policy) plans the first steps of
    `mixed`; then the run's own backfill loads every compiled loop it calls
    from the cache, compiling none."""
    script = textwrap.dedent("""
        import sys

        from numba.core.registry import CPUDispatcher
        from gpualloc import api, warm
        from gpualloc.jitcache import cold
        from tests.helpers import composed

        assert cold()
        cfg = composed("+scenario=mixed", "policies=[backfill]", "warm_helpers=1")
        with warm.helpers(cfg) as procs:
            assert [p.name for p in procs] == ["gpualloc-warm-backfill"]
            for p in procs:
                p.join(600)
                assert p.exitcode == 0
        assert not cold()
        api.plan(api.generate("mixed", seed=0), "backfill")
        used = list({id(fn): fn for name, m in list(sys.modules.items())
                     if name.startswith("gpualloc") for fn in vars(m).values()
                     if isinstance(fn, CPUDispatcher) and fn.signatures}.values())
        assert used
        missed = [fn.py_func.__qualname__ for fn in used if sum(fn.stats.cache_misses.values())]
        assert not missed, missed
        print("loaded", len(used))
    """)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    r = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith("loaded ")
