import pytest
import torch
from hypothesis import given, settings

pytest.importorskip("ortools")
pytest.importorskip("highspy")

from gpualloc.check import check  # noqa: E402
from gpualloc.config import (ExactConfig, GeneratedScenarioConfig, PoolConfig,  # noqa: E402
                             RealtimeWorkloadConfig, RigidWorkloadConfig)
from gpualloc.scenario.generate import generate  # noqa: E402
from gpualloc.policies.bounds import lp_relaxation, mip_bound  # noqa: E402
from gpualloc.policies.exact import (ExactTooLarge, _hint_values, _plan, build_model,  # noqa: E402
                                     exact)
from gpualloc.policies.fifo import fifo  # noqa: E402
from gpualloc.policies.greedy import greedy  # noqa: E402
from gpualloc.metrics import weighted_throughput  # noqa: E402
from gpualloc.scenario import ScenarioError  # noqa: E402
from gpualloc.policies import rivals
from strategies import scenarios  # noqa: E402
from scenarios import elastic, rigid, scen  # noqa: E402
from scenarios import with_fixed  # noqa: E402
from strategies import scenario_with_fixed  # noqa: E402
from helpers import cli  # noqa: E402

CFG = ExactConfig(time_limit_s=10.0, workers=2)


def solve(s, **kw):
    cfg = ExactConfig(**{**vars(CFG), **kw})
    plan = exact(s, cfg, rivals=rivals())
    verdict = check(s, plan.owner)
    assert verdict.ok, str(verdict)
    assert plan.info["objective"] == pytest.approx(weighted_throughput(s, plan.owner))
    return plan


def test_beats_priority_order():
    # Two GPUs, three steps. Greedy runs the priority-5 single-step job first
    # and the priority-4 gang only from t=1 (5 + 4 x 2 x 2 = 21); the optimum
    # runs the gang from t=0 (4 x 2 x 3 = 24).
    s = scen([(1, 2, "H")], [rigid("z", 1, 1, priority=5), rigid("y", 2, 3, priority=4)],
             horizon=3)
    assert weighted_throughput(s, greedy(s, rivals=rivals()).owner) == 21
    plan = solve(s)
    assert plan.info["optimal"] and plan.info["status"] == "OPTIMAL"
    assert plan.info["objective"] == 24 and plan.info["best_bound"] == pytest.approx(24)
    assert plan.owner.eq(1).all()


def test_elastic_against_rigid():
    # One 2-GPU node, four steps: b (1 GPU for 4, priority 3) is worth 12, the
    # service (priority 2, one replica all along) 8; the gang a (2 GPUs for
    # 2, priority 1) can only run by pushing both aside: optimum 20.
    s = scen([(1, 2, "H")], [rigid("a", 2, 2, priority=1), rigid("b", 1, 4, priority=3),
                             elastic("e", 1, [1, 1, 1, 1], priority=2)], horizon=4)
    plan = solve(s)
    assert plan.info["optimal"] and plan.info["objective"] == 20
    assert (plan.owner == 0).sum() == 0
    assert plan.info["lp_bound"] >= 20 - 1e-6


def test_demand_caps_replicas():
    # Demand 1 on a 4-GPU node: one replica is worth something, more is not.
    s = scen([(1, 4, "H")], [elastic("e", 1, [1, 3, 0], priority=2)], horizon=3)
    plan = solve(s)
    assert plan.info["objective"] == 2 * 4
    assert (plan.owner == 0).sum(0).tolist() == [1, 3, 0]


def test_horizon_cut_counts():
    s = scen([(1, 1, "H")], [rigid("long", 1, 10, arrival=4, priority=2)], horizon=6)
    assert solve(s).info["objective"] == 2 * 2


def test_empty_and_unplaceable():
    s = scen([(1, 2, "H")], [rigid("odd", 3, 1)])
    plan = solve(s)
    assert plan.info["objective"] == 0 and plan.owner.eq(-1).all()


def test_refuses_above_size_limit():
    s = scen([(2, 4, "H")], [rigid("a", 1, 2), rigid("b", 2, 2)])
    size = build_model(s).size
    with pytest.raises(ExactTooLarge) as e:
        exact(s, ExactConfig(max_variables=size - 1), rivals=rivals())
    assert isinstance(e.value, ScenarioError)
    assert f"{size:,}" in str(e.value) and f"max_variables={size - 1:,}" in str(e.value)


def test_hint_reproduces_greedy():
    s = scen([(2, 4, "H")], [rigid("a", 3, 3, priority=2), rigid("b", 2, 4, arrival=1),
                             elastic("e", 2, [1, 2, 1, 0, 2, 2]), elastic("f", 1, [3] * 6)])
    owner = greedy(s, rivals=rivals()).owner
    m = build_model(s)
    assert torch.equal(_plan(s, m, _hint_values(s, m, owner)), owner)


def test_fixed_cells_kept():
    s = scen([(1, 4, "H")], [rigid("a", 2, 2, priority=9), rigid("c", 2, 3, priority=1),
                             elastic("e", 1, [2] * 6)])
    fixed = torch.full((4, 6), -1, dtype=torch.long)
    fixed[0:2, 0:2] = 0
    fixed[3, 0:2] = 2
    sf = with_fixed(s, fixed)
    plan = solve(sf)
    assert torch.equal(plan.owner[fixed >= 0], fixed[fixed >= 0])
    assert ((plan.owner == 0) & (fixed != 0)).sum() == 0
    # The objective counts the fixed cells too: it is the plan's weighted throughput.
    assert plan.info["objective"] >= weighted_throughput(sf, greedy(sf, rivals=rivals()).owner)


def test_lp_levels_bound_the_optimum():
    s = scen([(2, 4, "H"), (1, 2, "L")],
             [rigid("a", 4, 3, priority=3), rigid("b", 8, 2, priority=2),
              rigid("c", 2, 5, priority=5, gpu_types=["L"]), rigid("d", 3, 2, priority=4),
              elastic("e", 1, [2, 3, 4, 4, 3, 2], priority=7)])
    opt = solve(s).info
    assert opt["optimal"]
    gpu = lp_relaxation(s)
    pool = lp_relaxation(s, ExactConfig(lp_max_nonzeros=0))
    assert (gpu.level, pool.level) == ("gpu", "pool")
    assert pool.value >= gpu.value - 1e-6 >= opt["objective"] - 2e-6
    mip = mip_bound(s)
    assert pool.value >= mip.value - 1e-6 >= opt["objective"] - 2e-6


def test_mip_bound_is_tighter_where_gangs_fill_a_node():
    # One 4-GPU node, two 3-GPU jobs of the whole horizon: the per-pool LP
    # runs 4/3 of a job at every step (4 x 2 = 8); only one fits (3 x 2 = 6).
    s = scen([(1, 4, "H")], [rigid("a", 3, 2), rigid("b", 3, 2)], horizon=2)
    assert lp_relaxation(s, ExactConfig(lp_max_nonzeros=0)).value == pytest.approx(8.0)
    assert mip_bound(s).value == pytest.approx(6.0)
    assert solve(s).info["objective"] == 6.0


def test_mip_bound_declines_preemptible_jobs():
    s = scen([(1, 4, "H")], [rigid("a", 3, 2, preemptible=True, restart_cost=1)], horizon=2)
    b = mip_bound(s)
    assert b.value is None and b.status == "preemptible jobs"


@settings(max_examples=12)
@given(scenarios(max_jobs=5, max_horizon=8, max_pools=2))
def test_oracles_on_random_scenarios(s):
    plan = solve(s, time_limit_s=5.0)
    info = plan.info
    lp = info["lp_bound"]
    assert lp is not None and lp >= info["objective"] - 1e-6 * max(1.0, lp)
    mip = mip_bound(s, ExactConfig(mip_time_limit_s=5.0)).value
    pool = lp_relaxation(s, ExactConfig(lp_max_nonzeros=0)).value
    assert mip is not None and pool >= mip - 1e-6 * max(1.0, mip)
    assert mip >= info["objective"] - 1e-6 * max(1.0, mip)
    for other in (fifo(s).owner, greedy(s, rivals=rivals()).owner):
        assert mip >= weighted_throughput(s, other) - 1e-6 * max(1.0, mip)
    if info["best_bound"] is not None:
        assert info["best_bound"] >= info["objective"] - 1e-6
    if info["optimal"]:
        for other in (fifo(s).owner, greedy(s, rivals=rivals()).owner):
            assert info["objective"] >= weighted_throughput(s, other) - 1e-6
        assert lp >= info["objective"] - 1e-6 * max(1.0, lp)


def small_generated(seed):
    # The shape of bench/quality.py's SMALL: two 4-GPU nodes, 16 steps, 11 jobs.
    cfg = GeneratedScenarioConfig(
        name="small", horizon=16, pools=[PoolConfig("h100", 2, 4, "H100", 80.0)],
        training=RigidWorkloadConfig(count=2, gpus=[1, 2, 4, 8], priority=[3, 8],
                                     duration_median_hours=6.0),
        batch_inference=RigidWorkloadConfig(count=5, gpus=[1, 2, 4], duration_median_hours=3.0),
        quantization=RigidWorkloadConfig(count=3, gpus=[1, 2, 4], duration_median_hours=2.0),
        realtime_inference=RealtimeWorkloadConfig(services=1, gpus=[1, 2], peak_replicas=[2, 4]))
    return generate(cfg, seed)


@pytest.mark.parametrize("seed", [1, 2, 4])
def test_oracles_on_generated_small(seed):
    s = small_generated(seed)
    info = solve(s).info
    assert info["optimal"]
    f, g = weighted_throughput(s, fifo(s).owner), weighted_throughput(s, greedy(s, rivals=rivals()).owner)
    assert info["lp_bound"] >= info["objective"] - 1e-6 >= g - 2e-6
    assert g >= f  # on these, greedy beats the baseline


@settings(max_examples=8)
@given(scenario_with_fixed())
def test_exact_keeps_fixed_cells(s):
    plan = solve(s, time_limit_s=5.0)
    fixed = s.fixed
    assert torch.equal(plan.owner[fixed >= 0], fixed[fixed >= 0])
    if plan.info["optimal"]:
        assert plan.info["objective"] >= weighted_throughput(s, greedy(s, rivals=rivals()).owner) - 1e-6


@pytest.mark.slow
def test_cli_refusal_is_one_line_exit_2(tmp_path):
    r = cli("+scenario=file", "policies=[exact]", "exact.max_variables=10",
            f"hydra.run.dir={tmp_path}")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "exact.max_variables=10" in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_cli_runs_exact_beside_fifo_and_greedy(tmp_path):
    r = cli("+scenario=file", "policies=[fifo,greedy,exact]", "exact.time_limit_s=20",
            f"hydra.run.dir={tmp_path}")
    assert r.returncode == 0, r.stderr
    rows = [line.split()[0] for line in r.stdout.splitlines()[3:]]
    assert rows == ["fifo", "greedy", "exact"]
