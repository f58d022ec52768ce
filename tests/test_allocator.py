from dataclasses import replace

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpualloc.policies.allocator import allocator, relax, round_starts
from gpualloc.check import check
from gpualloc.config import SolverConfig
from gpualloc.policies.fifo import fifo
from gpualloc.metrics import weighted_throughput
from gpualloc.scenario import from_dict
from gpualloc.policies import rivals
from strategies import scenarios

# Small budgets: the properties hold for any budget; tests stay fast (the
# deep budget of small scenarios off: test_deep_budget_never_lowers_the_plan).
QUICK = SolverConfig(iterations=8, local_search_iters=8, deep_search_cells=0, progress=False)


@given(scenarios())
def test_plans_pass_the_checker(s):
    plan = allocator(s, QUICK, rivals=rivals())
    verdict = check(s, plan.owner)
    assert verdict.ok, str(verdict)


@given(scenarios(max_jobs=6))
def test_never_below_fifo(s):
    # The claim: on any valid scenario, the allocator's weighted throughput is
    # at least FIFO's (its local search starts from the best of its repaired
    # plans and FIFO's placement, and never accepts a worse plan).
    assert weighted_throughput(s, allocator(s, QUICK, rivals=rivals()).owner) >= \
        weighted_throughput(s, fifo(s).owner) - 1e-9


@given(scenarios(max_jobs=8))
def test_never_below_greedy(s):
    # greedy's plan is one of the search's starts, and the plan returned when
    # the search ends below it (the repair serves elastic demand its own way).
    from gpualloc.policies.greedy import greedy
    plan = allocator(s, QUICK, rivals=rivals())
    assert check(s, plan.owner).ok
    assert weighted_throughput(s, plan.owner) >= weighted_throughput(s, greedy(s, rivals=rivals()).owner) - 1e-9


@given(scenarios(max_jobs=6), st.data())
def test_fixed_cells_are_kept(s, data):
    # History up to t0 taken from FIFO's plan, frozen: the allocator keeps it
    # and does not start those rigid jobs again.
    base = fifo(s).owner
    t0 = data.draw(st.integers(0, s.T))
    fixed = torch.full_like(base, -1)
    fixed[:, :t0] = base[:, :t0]
    started = {int(j) for j in fixed[fixed >= 0].unique() if s.jobs[int(j)].rigid}
    # A rigid job cut at t0 keeps its block up to its end: running jobs stay put.
    for j in started:
        fixed[base == j] = j
    s.fixed = fixed
    owner = allocator(s, QUICK, rivals=rivals()).owner
    assert check(s, owner).ok
    assert torch.equal(owner[fixed >= 0], fixed[fixed >= 0])
    for j in started:
        assert torch.equal(owner == j, fixed == j)


def test_same_seed_same_plan():
    s = from_dict({"name": "d", "horizon": 24, "step_minutes": 60, "cluster": {"pools": [
        {"name": "h", "count": 2, "gpus_per_node": 4, "gpu_type": "H", "memory_gb": 80}]},
        "jobs": [{"id": f"j{i}", "kind": "training", "priority": 1 + i % 5, "arrival": i % 7,
                  "gpus": [1, 2, 4][i % 3], "duration": 3 + i % 9} for i in range(20)]
        + [{"id": "rt", "kind": "realtime_inference", "priority": 9, "arrival": 0, "gpus": 1,
            "demand": [1 + (t % 12 > 6) * 2 for t in range(24)]}]})
    cfg = SolverConfig(iterations=20, local_search_iters=30, progress=False, seed=3)
    a, b = allocator(s, cfg, rivals=rivals()).owner, allocator(s, cfg, rivals=rivals()).owner
    assert torch.equal(a, b)


def test_relaxation_respects_masks_and_rounds_to_the_heavy_window():
    s = from_dict({"name": "r", "horizon": 10, "step_minutes": 60, "cluster": {"pools": [
        {"name": "h", "count": 1, "gpus_per_node": 2, "gpu_type": "H", "memory_gb": 80},
        {"name": "l", "count": 1, "gpus_per_node": 2, "gpu_type": "L", "memory_gb": 48}]},
        "jobs": [{"id": "a", "kind": "training", "priority": 5, "arrival": 3, "gpus": 2,
                  "duration": 4, "gpu_types": ["H"]}]})
    C, _, _ = relax(s, SolverConfig(iterations=40, progress=False), torch.device("cpu"),
                 torch.ones(1, dtype=torch.bool))
    assert C[0, :3].eq(0).all() and C[0].max() <= 2 + 1e-6
    start, score = round_starts(s, C)
    assert 3 <= int(start[0]) and float(score[0]) > 0.5


def test_jobs_longer_than_twice_the_horizon():
    s = from_dict({"name": "long", "horizon": 5, "step_minutes": 60, "cluster": {"pools": [
        {"name": "h", "count": 1, "gpus_per_node": 2, "gpu_type": "H", "memory_gb": 80}]},
        "jobs": [{"id": "a", "kind": "training", "priority": 3, "arrival": 1, "gpus": 1,
                  "duration": 40},
                 {"id": "rt", "kind": "realtime_inference", "priority": 9, "arrival": 0,
                  "gpus": 1, "demand": [1, 1, 1, 1, 1]}]})
    owner = allocator(s, QUICK, rivals=rivals()).owner
    assert check(s, owner).ok
    assert (owner == 0).sum() == 4  # runs from its arrival to the horizon's end


@given(scenarios(max_jobs=6))
@settings(max_examples=15)
def test_packed_grid_equals_dense_when_windows_cover_the_horizon(s):
    # Same objective, same penalties: with windows wide enough to hold every
    # cell after arrival, the packed relaxation is the dense one.
    planned = ~s.unplaceable
    cfg = SolverConfig(iterations=12, progress=False, window_slack=3 * s.T)
    dense, _, rep_d = relax(s, cfg.__class__(**{**vars(cfg), "grid": "dense"}), torch.device("cpu"),
                            planned)
    packed, _, rep_p = relax(s, cfg.__class__(**{**vars(cfg), "grid": "packed"}),
                             torch.device("cpu"), planned)
    assert (rep_d, rep_p) == ("dense", "packed")
    torch.testing.assert_close(packed, dense, rtol=1e-4, atol=1e-4)


def test_packed_plans_pass_the_checker():
    s = from_dict({"name": "p", "horizon": 30, "step_minutes": 60, "cluster": {"pools": [
        {"name": "h", "count": 2, "gpus_per_node": 4, "gpu_type": "H", "memory_gb": 80}]},
        "jobs": [{"id": f"j{i}", "kind": "training", "priority": 1 + i % 5, "arrival": i,
                  "gpus": [1, 2, 4][i % 3], "duration": 2 + i % 7} for i in range(25)]})
    plan = allocator(s, SolverConfig(iterations=10, local_search_iters=10, progress=False,
                                     grid="packed", window_slack=4), rivals=rivals())
    assert plan.info["representation"] == "packed" and check(s, plan.owner).ok


def test_local_search_returns_the_earliest_plan_of_its_best_value():
    # Two 4-GPU jobs on one 4-GPU node: b placed late is worth as much as b
    # placed right after a (both end inside the horizon), so only the
    # tie-break on earliness can bring it forward, and online replanning
    # relies on it (a plan that postpones what it could start now loses
    # that work at the next replan).
    from gpualloc.core.schedule import Schedule
    from gpualloc.policies.allocator.search import improve

    s = from_dict({"name": "late", "horizon": 12, "step_minutes": 60, "cluster": {"pools": [
        {"name": "h", "count": 1, "gpus_per_node": 4, "gpu_type": "H", "memory_gb": 80}]},
        "jobs": [{"id": "a", "kind": "training", "priority": 5, "arrival": 0, "gpus": 4,
                  "duration": 3},
                 {"id": "b", "kind": "batch_inference", "priority": 2, "arrival": 0,
                  "gpus": 4, "duration": 3}]})
    sched = Schedule(s)
    sched.place(0, 0, 0)
    sched.place(1, 8, 0)
    sched.fill_elastic()
    before = sched.value()
    stats = improve(sched, 30, seed=0)
    assert stats.end_value == before == sched.value()
    assert sched.start.tolist() == [0, 3]
    assert check(s, sched.owner()).ok


@pytest.mark.parametrize("accept_worse", [0.0, 0.05])
def test_local_search_with_threshold_accepting_returns_the_best_plan_it_saw(accept_worse):
    # With a generous threshold the walk goes below its start; what comes
    # back is still the best plan seen, never below the start, and feasible.
    from gpualloc.config import (GeneratedScenarioConfig, PoolConfig, RealtimeWorkloadConfig,
                                 RigidWorkloadConfig)
    from gpualloc.scenario.generate import generate
    from gpualloc.policies.allocator.repair import build
    from gpualloc.policies.allocator.search import improve

    s = generate(GeneratedScenarioConfig(
        name="walk", horizon=24, pools=[PoolConfig("h", 2, 8, "H100", 80.0),
                                        PoolConfig("l", 2, 4, "L40S", 48.0)],
        training=RigidWorkloadConfig(count=6, gpus=[1, 2, 4, 8], duration_median_hours=6.0),
        batch_inference=RigidWorkloadConfig(count=12, gpus=[1, 2, 3, 4],
                                            duration_median_hours=3.0),
        quantization=RigidWorkloadConfig(count=6, gpus=[1, 2, 4], duration_median_hours=2.0),
        realtime_inference=RealtimeWorkloadConfig(services=2, gpus=[1, 2],
                                                  peak_replicas=[2, 4])), 3)
    sched = build(s, sorted(range(s.J), key=lambda j: -s.jobs[j].priority))
    before = sched.value()
    stats = improve(sched, 400, seed=1, accept_worse=accept_worse)
    assert stats.end_value == pytest.approx(sched.value()) and stats.end_value >= before - 1e-9
    assert (stats.worse > 0) == (accept_worse > 0)
    assert check(s, sched.owner()).ok


def _walks(seed: int):
    from gpualloc.config import (GeneratedScenarioConfig, PoolConfig, RealtimeWorkloadConfig,
                                 RigidWorkloadConfig)
    from gpualloc.scenario.generate import generate

    return generate(GeneratedScenarioConfig(
        name="walks", horizon=24, pools=[PoolConfig("h", 2, 8, "H100", 80.0),
                                         PoolConfig("l", 2, 4, "L40S", 48.0)],
        training=RigidWorkloadConfig(count=6, gpus=[1, 2, 4, 8, 12], duration_median_hours=6.0),
        batch_inference=RigidWorkloadConfig(count=12, gpus=[1, 2, 3, 4],
                                            duration_median_hours=3.0),
        quantization=RigidWorkloadConfig(count=6, gpus=[1, 2, 4], duration_median_hours=2.0),
        realtime_inference=RealtimeWorkloadConfig(services=2, gpus=[1, 2],
                                                  peak_replicas=[2, 4])), seed)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000))
def test_second_walk_never_lowers_the_climb(seed):
    # local_search_anneal_iters: a second walk from the same start, taking
    # worse moves early on; the better of the two plans is kept. Without a
    # clock both runs are repeatable, so the climb's value is a floor.
    s = _walks(seed)
    base = SolverConfig(iterations=10, local_search_iters=60, local_search_patience=20,
                        deep_search_cells=0, time_limit_s=None, progress=False, seed=seed)
    climb = allocator(s, base, rivals=rivals())
    both = allocator(s, replace(base, local_search_anneal_iters=200,
                                local_search_accept_worse=0.02), rivals=rivals())
    assert check(s, both.owner).ok
    if "optimal" in both.info:  # an ideal plan: neither walk runs
        assert torch.equal(both.owner, climb.owner) and "anneal" not in both.info
        return
    assert both.info["anneal"]["iterations"] > 0
    assert weighted_throughput(s, both.owner) >= weighted_throughput(s, climb.owner) - 1e-6
    if not both.info["anneal"]["kept"]:
        assert torch.equal(both.owner, climb.owner)


def test_search_budget_by_size():
    # solver.deep_search_cells: the broad family at 64 GPUs (its jobs, its
    # 96 steps) gets the deep budget whole; the seven keep the default one,
    # a scenario of few jobs a share of the deep one, and the larger of two
    # settings applies.
    from bench.common import SEVEN, composed
    from bench.family import family
    from gpualloc.policies.allocator import search_budget
    from gpualloc.scenario.generate import generate

    cfg = SolverConfig()
    for name in ("broad", "broad_types"):
        s = generate(family(1, (), name).scenario, 100)
        assert search_budget(s, cfg) == (1000, 8000), name
        assert search_budget(s, replace(cfg, deep_search_cells=0)) == (300, 0)
    for name in ("low_contention", "mixed"):  # the smallest of the seven, and mixed
        assert name in SEVEN
        s = generate(composed(f"+scenario={name}").scenario, 0)
        assert s.G * s.J * s.T > cfg.deep_search_cells
        assert search_budget(s, cfg) == (300, 0), name
        assert search_budget(s, replace(cfg, local_search_anneal_iters=50)) == (300, 50)
    few = _walks(0)  # 26 jobs: 2,600 moves of the second walk, patience 325 of 1,000
    assert few.J == 26 and search_budget(few, cfg) == (325, 2600)
    assert search_budget(few, replace(cfg, local_search_patience=500,
                                      local_search_anneal_iters=3000)) == (500, 3000)


@pytest.mark.parametrize("seed", [0, 1])
def test_deep_budget_never_lowers_the_plan(seed):
    # The deep budget (more patience, a second walk whose better plan is
    # kept) of a small scenario, against the same search without it: a
    # checked plan, never of lower value; same seed, same plan.
    s = _walks(seed)
    base = SolverConfig(iterations=10, progress=False, seed=seed,
                        deep_search_moves_per_job=20)  # 520 moves: fast
    deep = allocator(s, base, rivals=rivals())
    plain = allocator(s, replace(base, deep_search_cells=0), rivals=rivals())
    assert check(s, deep.owner).ok and check(s, plain.owner).ok
    assert deep.info["search_budget"]["anneal_iters"] == 520 and "anneal" in deep.info
    assert "anneal" not in plain.info
    assert weighted_throughput(s, deep.owner) >= weighted_throughput(s, plain.owner) - 1e-6
    assert torch.equal(deep.owner, allocator(s, base, rivals=rivals()).owner)


def test_search_moves_scale_with_the_plan():
    # solver.local_search_work caps each walk at work / (G x T) moves: the
    # seven keep all of local_search_iters, the scaled mixed at 4,096 GPUs x
    # 336 steps gets 108 (150 million / 1,376,256); 0 lifts the cap.
    from bench.common import SEVEN, composed
    from gpualloc.policies.allocator import search_moves
    from gpualloc.scenario.generate import generate

    cfg = SolverConfig()
    for name in SEVEN:
        s = generate(composed(f"+scenario={name}").scenario, 0)
        moves, cap = search_moves(s, cfg)
        assert moves == cfg.local_search_iters and cap > cfg.local_search_iters, name
    big = from_dict({"name": "big", "horizon": 336, "step_minutes": 60, "cluster": {"pools": [
        {"name": "h", "count": 512, "gpus_per_node": 8, "gpu_type": "H", "memory_gb": 80}]},
        "jobs": [{"id": "j", "kind": "training", "priority": 1, "arrival": 0, "gpus": 8,
                  "duration": 4}]})
    assert search_moves(big, cfg) == (108, 108)
    assert search_moves(big, replace(cfg, local_search_work=0)) == (1500, None)
    assert search_moves(big, replace(cfg, local_search_iters=50)) == (50, 108)


def test_capped_search_is_repeatable_and_the_default_leaves_small_plans():
    # A cap that binds (12 moves' worth of work) gives one plan per seed,
    # checked, with its choice in the info; on this small scenario the
    # default work leaves the moves, and the plan, as without a cap.
    s = _walks(0)
    cfg = SolverConfig(iterations=10, deep_search_cells=0, progress=False,
                       local_search_work=12 * s.G * s.T + s.G * s.T - 1)
    a, b = (allocator(s, cfg, rivals=rivals()) for _ in range(2))
    assert a.info["search_budget"]["moves"] == 12
    assert a.info["search_budget"]["move_cap"] == 12
    assert a.info["local_search"]["iterations"] <= 12
    assert check(s, a.owner).ok and torch.equal(a.owner, b.owner)
    default = allocator(s, replace(cfg, local_search_work=SolverConfig().local_search_work),
                        rivals=rivals())
    uncapped = allocator(s, replace(cfg, local_search_work=0), rivals=rivals())
    assert default.info["search_budget"]["moves"] == cfg.local_search_iters
    assert uncapped.info["search_budget"]["move_cap"] is None
    assert default.info["local_search"] == uncapped.info["local_search"]
    assert default.info["local_search"]["iterations"] > 12  # the cap above did bind
    assert torch.equal(default.owner, uncapped.owner)


@given(scenarios())
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_no_plan_is_above_the_ideal_value(s):
    from gpualloc.core.schedule import adopt
    from gpualloc.policies.greedy import greedy

    ideal = adopt(s, fifo(s).owner).ideal_value()
    for owner in (fifo(s).owner, greedy(s).owner, allocator(s, QUICK, rivals=rivals()).owner):
        assert check(s, owner).ok
        assert adopt(s, owner).value() <= ideal + 1e-6 * max(1.0, ideal)


def test_a_plan_that_runs_everything_at_once_is_returned_without_search():
    from gpualloc.core.schedule import adopt

    from scenarios import elastic, rigid, scen

    # Two 8-GPU nodes: every job fits at its arrival beside the service.
    s = scen([(2, 8, "H")], [rigid("a", 4, 3), rigid("b", 8, 2, arrival=1, priority=3),
                             rigid("c", 2, 4, arrival=2), elastic("s", 1, [2, 1, 2, 2, 1, 1])])
    plan = allocator(s, SolverConfig(progress=False), rivals=rivals())
    assert plan.info["optimal"] == "ideal" and plan.info["relax_s"] == 0
    assert check(s, plan.owner).ok
    sched = adopt(s, plan.owner)
    assert sched.value() == pytest.approx(sched.ideal_value())
    rigid = s.rigid.numpy()
    assert sched.waiting() == [] and (sched.start[rigid] == s.arrival.numpy()[rigid]).all()
    searched = allocator(s, replace(QUICK, rounding="relaxed"), rivals=rivals())
    assert weighted_throughput(s, searched.owner) <= weighted_throughput(s, plan.owner) + 1e-6
    import gpualloc as ga

    contended = ga.generate("mixed", seed=0, horizon=48)
    plan = allocator(contended, QUICK, rivals=rivals())
    assert "optimal" not in plan.info and check(contended, plan.owner).ok



@pytest.mark.parametrize("max_removed", [0, 2])
def test_the_search_value_after_each_move_is_its_plans(max_removed):
    # A move re-serves the elastic demand only over the steps it changed; a
    # job forced in frees its victims' whole runs, and a value that missed
    # those steps would judge the next moves on a plan it does not hold (it
    # did on this scenario, discounted as online).
    from gpualloc.core import priority_order
    from gpualloc.core.schedule import Schedule
    from gpualloc.policies.allocator.search import improve
    import gpualloc as ga

    s = ga.generate("training_heavy", seed=0)
    sched = Schedule(s, discount=0.05)
    sched.insert_all([j for j in priority_order(s) if s.jobs[j].rigid])
    sched.fill_elastic()
    stale = []

    def fresh(it, best):
        whole = sched.copy()
        whole.fill_elastic()
        if abs(whole.value() - sched.value()) > 1e-9 * abs(whole.value()):
            stale.append(it)

    assert improve(sched, 120, seed=1, progress=fresh, chunk=1,
                   max_removed=max_removed).iterations == 120
    assert stale == []
    assert check(s, sched.owner()).ok


def test_a_ruin_takes_out_the_jobs_that_start_first():
    # online.search_max_removed: a window holding more starts than the cap
    # gives up those that start last (ties: the higher index).
    from gpualloc.policies.allocator.search import first_to_start

    rng = np.random.default_rng(0)
    for _ in range(50):
        start = rng.integers(0, 12, size=40)
        jobs = np.sort(rng.choice(40, size=int(rng.integers(1, 40)), replace=False))
        m = int(rng.integers(1, len(jobs) + 1))
        ranked = sorted(jobs.tolist(), key=lambda j: (start[j], j))
        assert first_to_start(jobs, start, m).tolist() == sorted(ranked[:m])


def test_the_ruin_cap_changes_the_walk_only_where_it_binds():
    from gpualloc.core import priority_order
    from gpualloc.core.schedule import Schedule
    from gpualloc.policies.allocator.search import improve
    import gpualloc as ga

    s = ga.generate("batch_flood", seed=0)
    plans = {}
    for cap in (0, 2, 10_000):
        sched = Schedule(s, discount=0.05)
        sched.insert_all([j for j in priority_order(s) if s.jobs[j].rigid])
        sched.fill_elastic()
        improve(sched, 200, seed=3, max_removed=cap)
        plans[cap] = sched.owner()
        assert check(s, plans[cap]).ok
    assert torch.equal(plans[0], plans[10_000])  # a cap no window reaches
    assert not torch.equal(plans[0], plans[2])



def test_each_move_leaves_the_grids_its_plan_holds():
    # After every move, accepted or undone, the grids are those of the jobs'
    # placements (a move that restored only the steps it touched would have
    # to restore the free runs before them too: 21ce4c2).
    from gpualloc.core import priority_order
    from gpualloc.core import blocks as kb
    from gpualloc.core.schedule import Schedule
    from gpualloc.policies.allocator.search import improve
    import gpualloc as ga

    s = ga.generate("training_heavy", seed=0)
    sched = Schedule(s, discount=0.05)
    sched.insert_all([j for j in priority_order(s) if s.jobs[j].rigid])
    sched.fill_elastic()
    occ, lay = sched.occ, sched.lay
    wrong = []

    def grids(it, best):
        owner = np.full(occ.owner.shape, -1)
        for j in np.flatnonzero(occ.start >= 0):
            t, g = int(occ.start[j]), int(occ.first[j])
            owner[t:t + int(lay.duration[j]), g:g + int(lay.gpus[j])] = j
        if not ((occ.owner == owner).all() and (occ.busy == (owner >= 0)).all()
                and (occ.run == kb.runs_of(occ.busy)).all()
                and (occ.busy_gpus == occ.busy.sum(1)).all()):
            wrong.append(it)

    stats = improve(sched, 150, seed=2, progress=grids, chunk=1)
    assert stats.iterations == 150 and 0 < stats.accepted < 150  # moves undone too
    assert wrong == []


def test_the_walk_in_chunks_is_the_walk_at_once():
    # The clock and the progress bar cut the compiled walk into chunks; its
    # random stream and its kept plan carry across them, so the plan is the
    # same whatever the chunks.
    from gpualloc.core import priority_order
    from gpualloc.core.schedule import Schedule
    from gpualloc.policies.allocator.search import improve

    for seed in range(3):
        s = _walks(seed)
        plans = []
        for chunk in (None, 1, 7):
            sched = Schedule(s, discount=0.05)
            sched.insert_all([j for j in priority_order(s) if s.jobs[j].rigid])
            sched.fill_elastic()
            stats = improve(sched, 200, seed=seed, patience=40, accept_worse=0.02, chunk=chunk)
            plans.append((sched.owner().tolist(), vars(stats)))
        assert plans[0] == plans[1] == plans[2]
        assert plans[0][1]["accepted"] > 0
        assert check(s, torch.tensor(plans[0][0])).ok
