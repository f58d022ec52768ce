import pytest
import torch
from hypothesis import given, settings

from gpualloc.check import check
from gpualloc.core import ideal_throughput
from gpualloc.metrics import gains, metrics, weighted_throughput
from gpualloc.objective import job_values, value
from gpualloc.scenario import from_dict
from strategies import scenarios

# One pool, one node of 4 GPUs, horizon 4.
S = from_dict({"name": "m", "horizon": 4, "step_minutes": 60, "cluster": {"pools": [
    {"name": "h", "count": 1, "gpus_per_node": 4, "gpu_type": "H", "memory_gb": 80}]},
    "jobs": [
        {"id": "t", "kind": "training", "priority": 5, "arrival": 0, "gpus": 2, "duration": 2},
        {"id": "b", "kind": "batch_inference", "priority": 2, "arrival": 1, "gpus": 1, "duration": 5},
        {"id": "q", "kind": "quantization", "priority": 1, "arrival": 0, "gpus": 1, "duration": 1},
        {"id": "r", "kind": "realtime_inference", "priority": 10, "arrival": 0, "gpus": 2,
         "demand": [1, 0, 2, 1]},
    ]})


def plan():
    o = torch.full((4, 4), -1)
    o[0:2, 1:3] = 0   # t: starts at 1 (waits 1), completes (1 + 2 <= 4)
    o[3, 2:4] = 1     # b: starts at 2 (waits 1), cut by the horizon: not completed
    o[2:4, 0] = 3     # r: 1 replica at t=0 (demand 1)
    o[2:4, 1] = 3     # r: 1 replica at t=1 where demand is 0 -> not useful
    o[0:2, 3] = 3     # r: 1 replica at t=3 (demand 1); t=2 unserved (demand 2)
    return o          # q never runs


def test_hand_computed():
    m = metrics(S, plan())
    useful = {0: 2 * 2, 1: 2 * 1, 3: 2 + 0 + 2}
    assert m["utilization"] == pytest.approx(sum(useful.values()) / 16)
    assert m["weighted_throughput"] == pytest.approx(5 * 4 + 2 * 2 + 10 * 4)
    assert m["allocated"] == pytest.approx((4 + 2 + 6) / 16)
    assert m["realtime_slo"] == pytest.approx(2 / 4)
    tr, bi, qu = (m["per_kind"][k] for k in ("training", "batch_inference", "quantization"))
    assert (tr["started"], tr["completed"], tr["mean_wait"]) == (1, 1, 1.0)
    assert (bi["started"], bi["completed"], bi["mean_wait"]) == (1, 0, 1.0)
    assert (qu["started"], qu["mean_wait"]) == (0, None)
    assert m["jobs_completed"] == 1 and m["mean_wait"] == 1.0
    assert weighted_throughput(S, plan()) == m["weighted_throughput"]


def test_objective_discounted_by_hand():
    # The same useful cells as test_hand_computed, each step weighted (1 - d)^t:
    # t: 2 GPUs at t=1, 2; b: 1 GPU at t=2, 3; r: 2 GPUs at t=0 and t=3.
    d = 0.5
    w = [(1 - d) ** t for t in range(4)]
    by_job = [5 * 2 * (w[1] + w[2]), 2 * 1 * (w[2] + w[3]), 0.0, 10 * 2 * (w[0] + w[3])]
    assert job_values(S, plan(), d).tolist() == pytest.approx(by_job)
    assert value(S, plan(), d) == pytest.approx(sum(by_job))
    assert value(S, plan()) == weighted_throughput(S, plan()) == 5 * 4 + 2 * 2 + 10 * 4


def test_empty_plan_and_gains():
    empty = metrics(S, torch.full((4, 4), -1))
    assert empty["utilization"] == 0 and empty["realtime_slo"] == 0
    g = gains(metrics(S, plan()), metrics(S, plan()))
    assert g == {"utilization_points": 0.0, "weighted_throughput_pct": 0.0}
    assert gains(metrics(S, plan()), empty)["weighted_throughput_pct"] is None


def test_p95_wait():
    s = from_dict({"name": "w", "horizon": 30, "step_minutes": 60, "cluster": {"pools": [
        {"name": "h", "count": 1, "gpus_per_node": 1, "gpu_type": "H", "memory_gb": 80}]},
        "jobs": [{"id": f"j{i}", "kind": "training", "priority": 1, "arrival": 0, "gpus": 1,
                  "duration": 1} for i in range(21)]})
    o = torch.full((1, 30), -1)
    o[0, :21] = torch.arange(21)
    m = metrics(s, o)
    assert m["mean_wait"] == 10.0 and m["p95_wait"] == pytest.approx(19.0)
    assert m["realtime_slo"] == 1.0  # nothing demanded


@settings(max_examples=40, deadline=None)
@given(scenarios(max_jobs=8, preemptible=True))
def test_no_plan_exceeds_the_ideal_throughput(s):
    # The bound greedy trusts to skip the plain backfill's plan: every
    # policy's plan (preemptible jobs included) stays at or under it.
    from gpualloc.policies import rivals
    from gpualloc.policies.backfill import backfill

    bound = ideal_throughput(s)
    for name, plan in (("backfill", backfill(s)), ("greedy", rivals()["greedy"](s)),
                       ("fifo", rivals()["fifo"](s))):
        assert check(s, plan.owner).ok, name
        assert weighted_throughput(s, plan.owner) <= bound + 1e-9, name


def test_ideal_throughput_on_online_views_and_when_reached():
    # Views of an online run, with running preemptible jobs in fixed cells,
    # cut and resumed: no policy's plan of a view exceeds the bound. On an
    # uncontended scenario greedy's plan reaches it; on a contended one not.
    from gpualloc import generate, run_config
    from gpualloc.online import online
    from gpualloc.policies import POLICIES, rivals
    from gpualloc.policies.backfill import backfill
    from gpualloc.scenario.edit import with_preemption

    s = with_preemption(generate("training_heavy", seed=0, horizon=48), ["training"], 1)
    views = []
    online(s, POLICIES["greedy"], run_config(mode="online", online={"replan_every": 6}),
           on_view=lambda *v: views.append(v[1]))
    assert any(v.fixed is not None and bool((v.fixed >= 0).any()) for v in views)
    for v in views[::3]:
        for plan in (backfill(v), rivals()["greedy"](v)):
            assert check(v, plan.owner).ok
            assert weighted_throughput(v, plan.owner) <= ideal_throughput(v) + 1e-9
    light = generate("low_contention", seed=0)
    plan = rivals()["greedy"](light).owner
    assert check(light, plan).ok
    assert weighted_throughput(light, plan) == ideal_throughput(light)
    assert weighted_throughput(s, rivals()["greedy"](s).owner) < ideal_throughput(s)
