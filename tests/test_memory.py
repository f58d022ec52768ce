"""The memory guard: estimates that bound the measured peak, and a clear
error (never an out-of-memory kill) when a run would not fit."""
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from hypothesis import given

from gpualloc.config import SettingError, SolverConfig
from gpualloc.kernels.pgd import triton_available
from gpualloc.policies.allocator.memory import (MemoryGuardError, budget, check_grid_memory,
                             check_scenario_memory, cpu_available, dense_bytes, fit,
                             fmt_bytes, grid_bytes, packed_columns, representation,
                             scenario_bytes, search_bytes)
from gpualloc.policies import POLICIES, rivals
from gpualloc.scenario import ScenarioError, from_dict
from strategies import scenarios
from helpers import composed

ROOT = Path(__file__).resolve().parents[1]
linux_peak = pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(),
                                reason="peak RSS is measured through /proc (Linux)")


def rigid_doc(G, J, T):
    return {"name": "big", "horizon": T, "step_minutes": 60, "cluster": {"pools": [
        {"name": "h", "count": G // 8, "gpus_per_node": 8, "gpu_type": "H", "memory_gb": 80}]},
        "jobs": [{"id": f"j{i}", "kind": "training", "priority": 1 + i % 3, "arrival": 0,
                  "gpus": 1, "duration": 3} for i in range(J)]}


@linux_peak
def test_estimates_bound_the_measured_peak():
    # A fresh process measures the real peak resident memory of the
    # relaxation and of FIFO + check + metrics; the estimates must be above.
    # FIFO first: freed heap memory of an earlier case would hide its peak.
    cases = ["fifo", "64", "200", "3000", "relax", "128", "400", "168", "float32", "dense",
             "relax", "128", "400", "168", "bfloat16", "dense",
             "relax", "128", "400", "168", "float32", "packed"]
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "memprobe.py"), *cases],
                       capture_output=True, text=True, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(rows) == 4
    for row in rows:
        if row["peak"] is None:
            pytest.skip("this kernel refuses to reset the peak RSS")
        assert row["estimate"] >= row["peak"], row
    # The relaxation's grid is what the estimate is about: the peak must see
    # it (8.6e6 cells x 4 bytes for the float32 grid of the second case, the
    # compiled step's only array of that size; pages freed by the case before
    # may be reused, so most of it, not all).
    assert rows[1]["peak"] >= 0.75 * 128 * 400 * 168 * 4


@linux_peak
def test_search_estimate_bounds_the_measured_peak():
    # The allocator without its relaxation (the path the guard takes where no
    # grid fits), in a fresh process of its own: search_bytes is above it.
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "memprobe.py"),
                        "search", "256", "600", "168"],
                       capture_output=True, text=True, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr
    row = json.loads(r.stdout.splitlines()[-1])
    if row["peak"] is None:
        pytest.skip("this kernel refuses to reset the peak RSS")
    assert 0 < row["peak"] <= row["estimate"], row


def test_no_grid_fits_the_allocator_plans_without_the_relaxation():
    # A budget below the smaller (packed) grid's estimate and above the
    # path without the relaxation: the allocator does not refuse; it plans
    # from the priority-order builds and greedy's plan, with its search, and
    # says so. The plan is feasible and not below greedy's.
    from gpualloc.policies.greedy import greedy
    from gpualloc.metrics import weighted_throughput
    from gpualloc.check import check
    from gpualloc.scenario.generate import generate

    cfg = composed("+scenario=mixed", "solver.local_search_iters=40", "solver.progress=false")
    s = generate(cfg.scenario, cfg.seed)
    packed, free = grid_bytes(s, cfg.solver, "cpu", "packed"), search_bytes(s)
    assert scenario_bytes(s) < free < packed < grid_bytes(s, cfg.solver, "cpu", "dense")
    cfg.solver.memory_budget_gb = (free + packed) / 2 / 2**30
    with pytest.raises(MemoryGuardError):  # no grid fits
        check_grid_memory(s, replace(cfg.solver, grid="packed"), "cpu")
    plan = POLICIES["allocator"](s, cfg, torch.device("cpu"))
    note = plan.info["memory_guard"]
    assert "skipped" in note["relaxation"] and note["search_bytes"] == free
    assert note["grid_bytes"] == packed and note["budget_bytes"] < packed
    assert plan.info["representation"] == "none" and plan.info["relax_s"] < 1
    assert plan.info["local_search"]["iterations"] > 0
    assert check(s, plan.owner).ok
    reference = greedy(s, cfg.greedy, "cpu", rivals("cpu")).owner
    assert weighted_throughput(s, plan.owner) >= weighted_throughput(s, reference) - 1e-9
    # An explicit grid or relaxed rounding asked for the grid: refused, as before.
    for field, value in (("grid", "packed"), ("rounding", "relaxed")):
        with pytest.raises(MemoryGuardError, match="relaxed grid"):
            fit(s, replace(cfg.solver, **{field: value}), "cpu")
    # Where even the path without the relaxation does not fit: refused, naming both.
    tight = replace(cfg.solver, memory_budget_gb=(scenario_bytes(s) + 1024) / 2**30)
    with pytest.raises(MemoryGuardError, match="Without the relaxation") as e:
        fit(s, tight, "cpu")
    assert "packed to" in str(e.value) and fmt_bytes(free) in str(e.value)
    # With room for the grid, the guard changes nothing and says nothing.
    assert fit(s, replace(cfg.solver, memory_budget_gb=100.0), "cpu") == (
        replace(cfg.solver, memory_budget_gb=100.0), None)


def test_estimate_scales_with_the_grid_and_dtype():
    small, big = dense_bytes(64, 300, 168), dense_bytes(640, 300, 168)
    extra_cells = (640 - 64) * 300 * 168
    assert 4 * extra_cells < big - small < 6 * extra_cells  # the float32 grid, stepped in place
    # Half precision halves the grid where a fused kernel works in place
    # (Triton); the compiled CPU step is float32 only, and the torch step's
    # float32 temporaries make a half-precision grid on the CPU the larger.
    assert dense_bytes(512, 1500, 168, "bfloat16") > dense_bytes(512, 1500, 168, "float32")
    if triton_available():
        assert (dense_bytes(512, 1500, 168, "bfloat16", "cuda")
                < dense_bytes(512, 1500, 168, "float32", "cuda"))
    # The representation is the allocator's: packed on the CPU above dense_max_cells.
    cfg = SolverConfig()
    small_s, big_s = from_dict(rigid_doc(64, 100, 96)), from_dict(rigid_doc(512, 1500, 168))
    assert representation(small_s, cfg, "cpu") == "dense"
    assert representation(big_s, cfg, "cpu") == "packed"
    L = packed_columns(big_s, cfg.window_slack)
    assert L == 1500 * min(168, cfg.window_slack + 3)  # all arrive at 0, duration 3
    assert grid_bytes(big_s, cfg, "cpu") < dense_bytes(512, 1500, 168)


def test_tiny_budget_stops_the_allocator_before_the_grid():
    s = from_dict(rigid_doc(64, 200, 96))
    cfg = SolverConfig(memory_budget_gb=0.05, progress=False)
    with pytest.raises(MemoryGuardError) as e:
        check_grid_memory(s, cfg, torch.device("cpu"))
    msg = str(e.value)
    assert isinstance(e.value, ScenarioError) and "\n" not in msg
    # On the CPU half precision saves nothing (see above): it is not offered.
    assert "solver.dtype=bfloat16" not in msg
    for part in ("64 x 200 x 96", "solver.memory_budget_gb=0.05",
                 "solver.grid=packed", "solver.rounding=priority", "smaller scenario",
                 fmt_bytes(dense_bytes(64, 200, 96))):
        assert part in msg
    with pytest.raises(MemoryGuardError, match="packed to"):  # not even the packed grid fits
        fit(s, cfg, "cpu")
    # rounding=priority builds no grid: nothing to guard.
    assert check_grid_memory(s, replace(cfg, rounding="priority"), "cpu") == 0


def test_guard_in_the_run_path(tmp_path):
    # Through gpualloc.run.run and the policy registry, with a budget between
    # the packed and the dense grid's estimates: with the dense grid forced, a
    # clear ScenarioError; with grid=auto, the packed grid instead (on a
    # contended scenario: an ideal plan is returned before any grid).
    from gpualloc.scenario.generate import generate
    from gpualloc.run import run
    args = ["+scenario=mixed", "policies=[fifo,allocator]", "solver.iterations=4",
            "solver.local_search_iters=10", "solver.rounding_thresholds=[0.5]",
            "solver.progress=false"]
    cfg = composed(*args)
    s = generate(cfg.scenario, cfg.seed)
    dense, packed = (grid_bytes(s, cfg.solver, "cpu", grid) for grid in ("dense", "packed"))
    budget_gb = (dense + packed) / 2 / 2**30
    assert scenario_bytes(s) < packed < dense
    args.append(f"solver.memory_budget_gb={budget_gb:.6f}")
    with pytest.raises(MemoryGuardError, match="relaxed grid for G x J x T = 64 x"):
        run(composed(*args, "solver.grid=dense"), tmp_path / "dense")
    assert not (tmp_path / "dense" / "metrics.json").exists()
    result = run(composed(*args), tmp_path / "auto")
    assert result["policies"]["allocator"]["info"]["representation"] == "packed"
    assert "allocator" in POLICIES


def test_huge_documents_are_refused_cleanly():
    # Far beyond any machine: the estimate names it, nothing is allocated.
    s = from_dict(rigid_doc(4096, 10000, 336))
    with pytest.raises(MemoryGuardError, match="4096 x 10000 x 336"):
        check_grid_memory(s, SolverConfig(memory_budget_gb=16, grid="dense"), "cpu")
    # A million GPUs over 10^5 steps: the plan grids alone are terabytes.
    s = from_dict(rigid_doc(1_000_000, 1, 100_000))
    with pytest.raises(MemoryGuardError, match="plan grids"):
        check_scenario_memory(s, None, "cpu")
    # Past the practical limits the loader refuses before building anything.
    with pytest.raises(ScenarioError, match="horizon 1,000,000,000 is above"):
        from_dict(rigid_doc(8, 1, 10**9))


def test_budget_sources():
    avail, source = cpu_available()
    if avail is not None:
        assert avail > 0 and source
        limit, text = budget(None, "cpu")
        assert limit <= avail and "%" in text
    assert budget(2.0, "cpu") == (2 * 2**30, "solver.memory_budget_gb=2")
    # A budget of 0 is refused where the setting is defined (tests/test_settings.py).
    with pytest.raises(SettingError, match=r"solver.memory_budget_gb=0.0: must be > 0 or null"):
        SolverConfig(memory_budget_gb=0.0)
    s = from_dict(rigid_doc(64, 10, 24))
    assert 0 < scenario_bytes(s) < 2**30
