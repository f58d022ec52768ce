"""Preemptible rigid jobs (PROBLEM.md): segments, restoring, done; the
checker's rule 2 for segments and the metrics that count them."""
import re

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gpualloc.check import check
from gpualloc.metrics import metrics, weighted_throughput
from gpualloc.plan import empty_owner, held, segments
from gpualloc.scenario import from_dict
from gpualloc.policies import rivals
from strategies import scenarios


def _scenario(restart_cost=1, preemptible=True):
    job = {"id": "p", "kind": "training", "priority": 3, "arrival": 0, "gpus": 2, "duration": 4}
    if preemptible:
        job.update(preemptible=True, restart_cost=restart_cost)
    return from_dict({
        "name": "segments", "horizon": 10, "step_minutes": 60,
        "cluster": {"pools": [{"name": "a", "count": 2, "gpus_per_node": 4, "gpu_type": "H100",
                               "memory_gb": 80}]},
        "jobs": [job]})


def _plan(s, cells):
    """cells: (first GPU, t0, t1 inclusive, GPUs) runs owned by job 0."""
    owner = empty_owner(s)
    for g, t0, t1, k in cells:
        owner[g:g + k, t0:t1 + 1] = 0
    return owner


# Segment 1 on GPUs 0-1 for t=0..1 (2 steps of progress), segment 2 on GPUs
# 4-5 from t=4: it restores at t=4, progresses at 5 and 6, done at 6.
GOOD = [(0, 0, 1, 2), (4, 4, 6, 2)]


def test_two_segments_with_a_restore_are_feasible_and_counted_exactly():
    s = _scenario()
    owner = _plan(s, GOOD)
    assert check(s, owner).ok
    seg = segments(s, owner)
    assert seg.new[0].nonzero().flatten().tolist() == [0, 4]
    assert seg.restoring[0].nonzero().flatten().tolist() == [4]
    assert seg.progress[0].nonzero().flatten().tolist() == [0, 1, 5, 6]
    m = metrics(s, owner)
    assert m["preemptions"] == 1
    assert m["restore_gpu_steps"] == 2
    assert m["jobs_completed"] == 1
    assert m["utilization"] == 8 / (8 * 10)  # 2 GPUs x 4 steps of progress
    assert weighted_throughput(s, owner) == 3 * 8


def test_a_cell_after_done_is_rejected():
    s = _scenario()
    bad = check(s, _plan(s, [(0, 0, 1, 2), (4, 4, 7, 2)]))
    assert set(bad.violations) == {"after_done"}
    assert bad.violations["after_done"][0] == 2  # 2 GPUs at t=7


def test_a_job_running_when_a_view_begins_restores_when_it_resumes():
    # An online view: job 0 runs at step 0 (its fixed cells, 4 steps left).
    # A plan that stops it there and runs it later resumes it: that first
    # segment in the view restores (gpualloc.core's cut counts it so, and
    # plans restart_cost + 4 steps); without fixed cells the same run is a
    # first segment and progresses at once.
    view = _scenario()
    view.fixed = torch.full((view.G, view.T), -1, dtype=torch.long)
    view.fixed[0:2, 0:4] = 0
    resumed = _plan(view, [(4, 4, 8, 2)])  # restore at t=4, progress 5..8
    assert check(view, resumed).ok
    seg = segments(view, resumed)
    assert seg.restoring[0].nonzero().flatten().tolist() == [4]
    assert bool(seg.done[0]) and not seg.after_done.any()
    assert weighted_throughput(view, resumed) == 3 * 2 * 4
    short = _plan(view, [(4, 4, 7, 2)])  # one step short of done
    assert check(view, short).ok and not bool(segments(view, short).done[0])
    fresh = _scenario()
    assert set(check(fresh, resumed).violations) == {"after_done"}
    kept = _plan(view, [(0, 0, 3, 2)])  # the fixed cells as they are: no restore
    assert check(view, kept).ok and not segments(view, kept).restoring.any()


def test_restoring_is_not_progress():
    # Counting the restore at t=4 as progress would make the job done at t=5
    # and t=6 a cell after done; it is not: this plan is feasible, and the
    # same plan cut at t=5 is not done (3 steps of progress).
    s = _scenario()
    assert check(s, _plan(s, GOOD)).ok
    cut = _plan(s, [(0, 0, 1, 2), (4, 4, 5, 2)])
    assert check(s, cut).ok
    m = metrics(s, cut)
    assert m["jobs_completed"] == 0 and m["utilization"] == 6 / 80
    # With restart_cost 3, a 3-step second segment restores only.
    s3 = _scenario(restart_cost=3)
    owner = _plan(s3, [(0, 0, 1, 2), (4, 4, 6, 2)])
    assert check(s3, owner).ok
    assert weighted_throughput(s3, owner) == 3 * 2 * 2
    assert metrics(s3, owner)["restore_gpu_steps"] == 6


def test_a_segment_that_is_not_a_block_is_rejected():
    s = _scenario()
    across_nodes = _plan(s, [(0, 0, 1, 2), (3, 4, 6, 2)])  # GPUs 3 and 4: two nodes
    assert set(check(s, across_nodes).violations) == {"segment_not_block"}
    gap = _plan(s, [(0, 0, 1, 2)])
    gap[[4, 6], 4:7] = 0  # GPUs 4 and 6: not consecutive
    assert "segment_not_block" in check(s, gap).violations
    too_many = _plan(s, [(0, 0, 1, 2), (4, 4, 6, 3)])
    assert "segment_not_block" in check(s, too_many).violations


def test_a_move_without_a_stop_is_a_new_segment():
    s = _scenario()
    owner = _plan(s, [(0, 0, 1, 2), (4, 2, 4, 2)])  # moves at t=2: restores at 2
    assert check(s, owner).ok
    seg = segments(s, owner)
    assert seg.new[0].nonzero().flatten().tolist() == [0, 2]
    assert int(seg.progress[0].sum()) == 4


def test_a_stopped_run_is_feasible_for_a_preemptible_job_only():
    s = _scenario()
    owner = _plan(s, [(0, 0, 1, 2)])  # runs 2 of 4 steps, never resumes
    assert check(s, owner).ok
    assert metrics(s, owner)["jobs_completed"] == 0
    rigid = _scenario(preemptible=False)
    assert not check(rigid, owner).ok
    assert not check(rigid, _plan(rigid, GOOD)).ok
    # One uninterrupted run is a plan for both.
    whole = _plan(s, [(0, 0, 3, 2)])
    assert check(s, whole).ok and check(rigid, whole).ok
    assert weighted_throughput(s, whole) == weighted_throughput(rigid, whole)
    assert metrics(s, whole)["preemptions"] == 0


def test_random_plans_agree_with_a_plain_count():
    # Segments, restores and progress against a step-by-step count.
    gen = torch.Generator().manual_seed(0)
    for trial in range(200):
        rc = int(torch.randint(0, 3, (1,), generator=gen))
        s = _scenario(restart_cost=rc)
        owner = empty_owner(s)
        for t in range(s.T):
            if torch.rand(1, generator=gen) < 0.6:
                g = int(torch.randint(0, 2, (1,), generator=gen)) * 4
                owner[g:g + 2, t] = 0
        seg = segments(s, owner)
        progress, prev, start, index, expect = 0, None, 0, 0, []
        for t in range(s.T):
            cols = tuple(owner[:, t].eq(0).nonzero().flatten().tolist())
            if not cols:
                prev = None
                continue
            if cols != prev:
                index, start = index + 1, t
            prev = cols
            restoring = index > 1 and t - start < rc
            if not restoring and progress < 4:
                progress += 1
                expect.append(t)
        assert seg.progress[0].nonzero().flatten().tolist() == expect, trial


def _segments_reference(s, owner):
    """plan.segments in plain torch, step by step as PROBLEM.md reads it (the
    compiled pass is checked against it)."""
    J, T, G = s.J, s.T, s.G
    busy = owner >= 0
    j = owner[busy]
    t = torch.arange(T).expand(G, T)[busy]
    g = torch.arange(G)[:, None].expand(G, T)[busy]
    key = j * T + t
    first = torch.full((J * T,), G, dtype=torch.long).scatter_reduce(0, key, g, "amin")
    last = torch.full((J * T,), -1, dtype=torch.long).scatter_reduce(0, key, g, "amax")
    count = torch.bincount(key, minlength=J * T)
    first, last, count = first.reshape(J, T), last.reshape(J, T), count.reshape(J, T)
    pre = s.preemptible[:, None]
    count = torch.where(pre, count, 0)
    first, last = torch.where(pre, first, G), torch.where(pre, last, -1)
    on = count > 0
    same = torch.zeros_like(on)
    same[:, 1:] = on[:, 1:] & on[:, :-1] & (first[:, 1:] == first[:, :-1]) \
        & (count[:, 1:] == count[:, :-1])
    new = on & ~same
    index = torch.cumsum(new.long(), 1)
    steps = torch.arange(T).expand(J, T)
    seg_start = torch.cummax(torch.where(new, steps, -1), 1).values
    restoring = on & (index > 1) & (steps - seg_start < s.restart_cost[:, None])
    working = on & ~restoring
    before = torch.cumsum(working.long(), 1) - working.long()
    finished = before >= s.duration[:, None]
    progress = working & ~finished
    return dict(first=first, last=last, count=count, new=new, restoring=restoring,
                progress=progress, after_done=on & finished,
                done=(progress.sum(1) >= s.duration) & s.preemptible)


def _random_grid(s, data) -> torch.Tensor:
    """(G, T) any cells from -1 to J - 1, feasible or not."""
    cells = data.draw(st.lists(st.integers(-1, s.J - 1), min_size=s.G * s.T,
                               max_size=s.G * s.T))
    return torch.tensor(cells, dtype=torch.long).reshape(s.G, s.T)


@given(scenarios(max_jobs=6, preemptible=True), st.data())
@settings(max_examples=60)
def test_segments_match_the_torch_reference_on_random_grids(s, data):
    # Any grid, feasible or not: jobs moving GPUs, stopping, running past done.
    owner = _random_grid(s, data)
    seg, want = segments(s, owner), _segments_reference(s, owner)
    for name, expected in want.items():
        assert torch.equal(getattr(seg, name), expected), name


@given(scenarios(max_jobs=6, preemptible=True), st.data())
@settings(max_examples=60)
def test_held_counts_match_a_bincount_on_random_grids(s, data):
    # plan.held is one compiled pass; its reference is the bincount it replaced.
    owner = _random_grid(s, data)
    busy = owner >= 0
    t = torch.arange(s.T).expand(s.G, s.T)[busy]
    want = torch.bincount(owner[busy] * s.T + t, minlength=s.J * s.T).reshape(s.J, s.T)
    assert torch.equal(held(s, owner), want)


def test_held_refuses_a_cell_that_is_no_job():
    s = _scenario()
    for bad in (s.J, -2):
        owner = empty_owner(s)
        owner[1, 2] = bad
        with pytest.raises(ValueError, match="job index below"):
            held(s, owner)


def test_segments_refuse_a_cell_that_is_no_job():
    s = _scenario()
    owner = empty_owner(s)
    owner[0, 0] = s.J
    with pytest.raises(ValueError, match="job index below"):
        segments(s, owner)


@given(scenarios(max_jobs=6, preemptible=True), st.data())
@settings(max_examples=60)
def test_cuts_are_read_job_by_job(s, data):
    # core.segments.cuts_in against its definition: a running preemptible
    # job is cut where the plan stops holding its fixed cells, from step 0 on.
    from gpualloc.core.segments import cuts_in

    def grid():
        cells = data.draw(st.lists(st.integers(-1, s.J - 1), min_size=s.G * s.T,
                                   max_size=s.G * s.T))
        return torch.tensor(cells, dtype=torch.long).reshape(s.G, s.T)

    s.fixed, plan = grid(), grid()
    want = {}
    for j in s.fixed.unique().tolist():
        mine = s.fixed == j
        kept = int(((plan == j) & mine).any(0).cumprod(0).sum())
        if j >= 0 and s.jobs[j].preemptible and kept < int(mine.any(0).sum()) and kept + 1 < s.T:
            want[j] = kept
    assert cuts_in(s, plan) == want
    assert list(cuts_in(s, plan)) == sorted(want)


# ---- the placement core ---------------------------------------------------------------

def _cluster(jobs, horizon=12, nodes=1, gpn=4):
    return from_dict({
        "name": "preempt", "horizon": horizon, "step_minutes": 60,
        "cluster": {"pools": [{"name": "a", "count": nodes, "gpus_per_node": gpn,
                               "gpu_type": "H100", "memory_gb": 80}]},
        "jobs": jobs})


def _rigid(id, priority, arrival, gpus, duration, **kw):
    return {"id": id, "kind": "training", "priority": priority, "arrival": arrival,
            "gpus": gpus, "duration": duration, **kw}


def test_a_cut_keeps_progress_and_the_next_segment_restores():
    from gpualloc.core.layout import layout
    from gpualloc.core.occupancy import Occupancy

    s = _cluster([_rigid("low", 1, 0, 4, 8, preemptible=True, restart_cost=2)])
    occ = Occupancy(layout(s))
    assert occ.length(0, 0) == 8
    occ.place(0, 0, 0)
    assert occ.running(3).tolist() == [0]
    occ.cut(0, 3)  # 3 steps of progress made
    assert not occ.busy[3:].any() and occ.busy[:3].all()
    assert occ.steps(0) == 2 + 5  # restore, then the 5 steps still missing
    occ.place(0, 5, 0)
    assert occ.busy[5:12].all() and occ.length(0, 5) == 7


# ---- policies ---------------------------------------------------------------------------

def _urgent(preemptible=True):
    # A long low-priority job holds the whole node; an urgent one arrives at 3.
    low = _rigid("low", 1, 0, 4, 8, **({"preemptible": True, "restart_cost": 1}
                                      if preemptible else {}))
    return _cluster([low, _rigid("urgent", 10, 3, 4, 3)])


def test_greedy_evicts_a_lower_priority_preemptible_job():
    from gpualloc.config import GreedyConfig
    from gpualloc.policies.greedy import greedy

    s = _urgent()
    plan = greedy(s, GreedyConfig(variants=False), rivals=rivals())
    assert check(s, plan.owner).ok
    assert (plan.owner[:, 3:6] == 1).all()  # the urgent job starts on arrival
    m = metrics(s, plan.owner)
    assert m["preemptions"] == 1 and m["restore_gpu_steps"] == 4
    assert m["jobs_completed"] == 2  # low resumes at 6: restores, then 5 steps
    assert weighted_throughput(s, plan.owner) == 10 * 4 * 3 + 1 * 4 * 8
    # Without preemption (or when the job is not preemptible) it waits.
    for s2, cfg in ((s, GreedyConfig(variants=False, preempt=False)),
                    (_urgent(preemptible=False), GreedyConfig(variants=False))):
        waited = greedy(s2, cfg, rivals=rivals()).owner
        assert check(s2, waited).ok
        assert (waited[:, :8] == 0).all() and metrics(s2, waited)["preemptions"] == 0


def test_no_eviction_for_a_job_of_equal_priority():
    from gpualloc.config import GreedyConfig
    from gpualloc.policies.greedy import greedy

    s = _cluster([_rigid("a", 5, 0, 4, 8, preemptible=True, restart_cost=1),
                  _rigid("b", 5, 3, 4, 3)])
    owner = greedy(s, GreedyConfig(variants=False), rivals=rivals()).owner
    assert check(s, owner).ok
    assert (owner[:, :8] == 0).all()


def test_segments_fill_idle_blocks_and_only_add_value():
    from gpualloc.core.segments import fill_segments

    # GPUs 0-1 are idle at t=3..5 only; the preemptible filler (5 steps,
    # restore 1) runs a first segment there and nothing more fits.
    s = _cluster([_rigid("wall", 5, 0, 2, 3), _rigid("wall2", 5, 6, 2, 4),
                  _rigid("filler", 1, 0, 2, 5, preemptible=True, restart_cost=1)],
                 horizon=10, gpn=2)
    owner = empty_owner(s)
    owner[:, 0:3] = 0
    owner[:, 6:10] = 1
    filled, added = fill_segments(s, owner)
    assert check(s, filled).ok
    assert added == 1 and (filled[:, 3:6] == 2).all()  # a first segment: no restore
    assert weighted_throughput(s, filled) == weighted_throughput(s, owner) + 1 * 2 * 3
    assert (filled[owner >= 0] == owner[owner >= 0]).all()  # nothing taken away


def test_exact_refuses_preemptible_jobs():
    from gpualloc.policies.exact import exact
    from gpualloc.scenario import ScenarioError

    with pytest.raises(ScenarioError, match="'low' is preemptible"):
        exact(_urgent(), rivals=rivals())


def test_online_preempts_a_committed_job():
    # Online, the low job is committed at 0 (the urgent one is unknown); at
    # the replan after its arrival greedy cuts the low job's fixed cells.
    from gpualloc.config import OnlineConfig, RunConfig
    from gpualloc.online import run_policy

    s = _urgent()
    cfg = RunConfig(mode="online", online=OnlineConfig(replan_every=1, forecast="last_day"))
    owner = run_policy("greedy", s, cfg, "cpu").owner
    assert check(s, owner).ok
    assert (owner[:, 3:6] == 1).all()
    assert metrics(s, owner)["preemptions"] == 1
    cfg.greedy.preempt = False
    waited = run_policy("greedy", s, cfg, "cpu").owner
    assert check(s, waited).ok and (waited[:, :8] == 0).all()


# ---- properties on random scenarios ------------------------------------------------------

QUICK = dict(iterations=8, local_search_iters=8, deep_search_cells=0, progress=False)


@settings(max_examples=40, deadline=None)
@given(scenarios(max_jobs=7, preemptible=True))
def test_every_policy_plans_preemptible_jobs_feasibly(s):
    from gpualloc.config import GreedyConfig, SolverConfig
    from gpualloc.policies.allocator import allocator
    from gpualloc.policies.backfill import backfill
    from gpualloc.policies.fifo import fifo
    from gpualloc.policies.greedy import greedy

    plans = {"fifo": fifo(s).owner, "backfill": backfill(s).owner}
    for preempt in (False, True):
        plans[f"greedy {preempt}"] = greedy(s, GreedyConfig(preempt=preempt), rivals=rivals()).owner
        plans[f"allocator {preempt}"] = allocator(
            s, SolverConfig(preempt=preempt, **QUICK), rivals=rivals()).owner
    for name, owner in plans.items():
        verdict = check(s, owner)
        assert verdict.ok, f"{name}: {verdict}"
    assert metrics(s, plans["fifo"])["preemptions"] == 0  # FIFO never preempts
    value = {name: weighted_throughput(s, owner) for name, owner in plans.items()}
    # Allowed to preempt, the allocator may always choose not to.
    assert value["allocator True"] >= value["allocator False"] - 1e-9
    assert value["allocator True"] >= value["greedy True"] - 1e-9


@settings(max_examples=15, deadline=None)
@given(scenarios(max_jobs=6, max_horizon=10, preemptible=True), st.sampled_from([1, 3]))
def test_online_plans_with_preemption_pass_the_checker(s, every):
    from gpualloc.config import OnlineConfig, RunConfig, SolverConfig
    from gpualloc.online import run_policy

    cfg = RunConfig(mode="online", solver=SolverConfig(**QUICK),
                    online=OnlineConfig(replan_every=every, forecast="last_day"))
    for name in ("greedy", "allocator"):
        owner = run_policy(name, s, cfg, "cpu").owner
        verdict = check(s, owner)
        assert verdict.ok_but_guarantee, f"{name}: {verdict}"


@settings(max_examples=15, deadline=None)
@given(scenarios(max_jobs=6, max_horizon=10, preemptible=True), st.sampled_from([1, 3]),
       st.sampled_from([0.0, 1.0]))
def test_every_online_view_holds_its_running_jobs_from_the_first_step(s, every, min_served):
    # "Running when a view begins" is read twice: the checker reads a fixed
    # cell at step 0, the core (plan.segments, Occupancy) any fixed cell.
    # They agree because a view's fixed cells of a job are one run from step
    # 0: every view the loop builds, at replans and at the steps between
    # (guarded starts with min_served, due jobs, fills), is checked here.
    import sys
    from unittest import mock

    import gpualloc as ga
    import gpualloc.online  # noqa: F401  (loads the loop's module)

    loop = sys.modules["gpualloc.online.loop"]
    views = []

    def recording(*args, **kw):
        made = real(*args, **kw)
        views.append(made[0])
        return made

    real = loop.view_at
    with mock.patch.object(loop, "view_at", recording):
        for name in ("greedy", "allocator"):
            try:
                ga.plan(s, name, mode="online", online={"replan_every": every},
                        solver=QUICK, min_served=min_served)
            except ga.ScenarioError:  # the guarantee infeasible on this cluster
                continue
    for v in views:
        if v.T == 0:
            continue
        fixed = v.fixed.numpy()
        jobs = set(fixed[fixed >= 0].tolist())
        assert jobs == set(fixed[:, 0][fixed[:, 0] >= 0].tolist())
        for vj in jobs:
            steps = (fixed == vj).any(0)
            assert steps.all() or not steps[steps.argmin():].any()  # one run from 0


def test_the_run_table_shows_preemptions_when_jobs_are_preemptible():
    from gpualloc.report import format_run_table

    row = {"utilization": 0.5, "weighted_throughput": 10.0, "allocated": 0.5,
           "realtime_slo": 1.0, "jobs_completed": 2, "mean_wait": 1.0, "wall_s": 0.1,
           "gains": {"utilization_points": 0.0, "weighted_throughput_pct": 0.0},
           "preemptions": 7, "restore_gpu_steps": 28}
    result = {"scenario": "x", "gpus": 4, "jobs": 2, "timesteps": 12, "offered_load": 1.0,
              "seed": 0, "device": "cpu", "policies": {"greedy": row}}
    assert "preempt" not in format_run_table(result)
    table = format_run_table({**result, "preemptible": "training", "restart_cost": "1"})
    head, cols, _, line = table.splitlines()
    assert "preemptible training (restart_cost 1)" in head
    assert "done  preempt  restore  mean wait" in cols
    assert re.search(r" 2 +7 +28 +1\.0 ", line)


def test_online_a_running_job_moved_at_the_replan_is_cut_there():
    # At the second replan the policy moves the running preemptible job to
    # the other node from the view's first step (a cut and a new segment)
    # and starts another job on the GPUs it left: the executed plan must
    # hold both, the moved job restoring first.
    from gpualloc.config import OnlineConfig, RunConfig
    from gpualloc.online import online
    from gpualloc.plan import Plan

    s = _cluster([_rigid("p", 1, 0, 4, 6, preemptible=True, restart_cost=1),
                  _rigid("q", 5, 2, 4, 3)], horizon=12, nodes=2)

    def policy(v, cfg, device):
        owner = v.fixed.clone()
        ids = [j.id for j in v.jobs]
        if v.name == "view@0":  # p on node 0
            owner[0:4, 0:6] = ids.index("p")
        elif v.name == "view@2":  # p moves to node 1 now; q takes node 0
            p = ids.index("p")
            owner[owner == p] = -1
            owner[4:8, 0:v.jobs[p].duration + 1] = p
            owner[0:4, 0:3] = ids.index("q")
        return Plan(owner=owner)

    cfg = RunConfig(mode="online", online=OnlineConfig(replan_every=2, forecast="last_day"))
    owner = online(s, policy, cfg).owner
    assert check(s, owner).ok, str(check(s, owner))
    assert (owner[0:4, 2:5] == 1).all()  # q on node 0 from its arrival
    seg = segments(s, owner)
    assert seg.new[0].nonzero().flatten().tolist() == [0, 2]  # moved at 2
    assert metrics(s, owner)["jobs_completed"] == 2


def test_online_fill_between_replans_beside_preemptible_segments():
    # A preemptible job committed at a replan is in the view of every step
    # the fill looks at before the next one, with the progress it made by then.
    from gpualloc.config import (GeneratedScenarioConfig, OnlineConfig, PoolConfig,
                                 RealtimeWorkloadConfig, RigidWorkloadConfig, RunConfig,
                                 SolverConfig)
    from gpualloc.scenario.generate import generate
    from gpualloc.online import run_policy

    s = generate(GeneratedScenarioConfig(
        name="segments", horizon=36, pools=[PoolConfig("h", 2, 8, "H100", 80.0)],
        training=RigidWorkloadConfig(count=8, gpus=[2, 4, 8], duration_median_hours=8.0,
                                     preemptible=True, restart_cost=1),
        batch_inference=RigidWorkloadConfig(count=20, gpus=[1, 2, 4],
                                            duration_median_hours=3.0),
        realtime_inference=RealtimeWorkloadConfig(services=1, gpus=[1], peak_replicas=[1, 2])), 1)
    assert s.preemptible.any()
    cfg = RunConfig(mode="online", solver=SolverConfig(**QUICK),
                    online=OnlineConfig(replan_every=6, forecast="last_day"))
    for name in ("greedy", "allocator"):
        verdict = check(s, run_policy(name, s, cfg, "cpu").owner)
        assert verdict.ok_but_guarantee, f"{name}: {verdict}"


def test_a_cut_at_the_first_step_leaves_only_the_resumed_job_to_plan():
    # A running job stopped at the view's first step keeps no fixed cell,
    # so nothing marks it as running: it must not be planned afresh beside
    # its resumed copy (the allocator did, online, and the plan held the job
    # twice at once).
    from dataclasses import replace as with_fields

    from gpualloc.config import SolverConfig
    from gpualloc.policies.allocator import allocator
    from gpualloc.scenario import Scenario, with_cuts

    s = _scenario()
    running = with_fields(s.jobs[0], duration=6)
    other = with_fields(s.jobs[0], id="q", preemptible=False, restart_cost=0, priority=1)
    fixed = torch.full((s.G, s.T), -1, dtype=torch.long)
    fixed[0:2, 0:6] = 0  # the running job's current segment
    view = Scenario(name="view", horizon=s.T, step_minutes=60, pools=s.pools,
                    jobs=[running, other], fixed=fixed)
    cut = with_cuts(view, {0: 0})
    plan = allocator(cut, SolverConfig(progress=False), rivals=rivals("cpu")).owner
    assert not (plan == 0).any()  # the original: its work is the resumed copy's
    assert (plan == 2).any()  # the resumed copy (restore, then the rest) runs
    assert check(cut, plan).ok


def test_a_cut_scenario_takes_its_views_arrays_as_its_jobs_would_give_them():
    # with_cuts takes the view's cluster and job arrays (online it runs at
    # many replans) instead of building them from its job list: the same
    # arrays and blocks, the resumed copies' own (not preemptible, nothing
    # to restore, no demand).
    from gpualloc import generate
    from gpualloc.scenario import Scenario, with_cuts, with_preemption

    s = with_preemption(generate("mixed", seed=0), ["training"], 2)
    training = [j for j, job in enumerate(s.jobs) if job.kind == "training"][:2]
    fixed = torch.full((s.G, s.T), -1, dtype=torch.long)
    first = 0
    for j in training:  # running since before the view, on the lowest free GPUs
        fixed[first:first + s.jobs[j].gpus, 0:5] = j
        first += s.jobs[j].gpus
    view = Scenario(name="view", horizon=s.T, step_minutes=s.step_minutes, pools=s.pools,
                    jobs=s.jobs, fixed=fixed)
    cut = with_cuts(view, {training[0]: 2, training[1]: 0})
    built = Scenario(name=cut.name, horizon=cut.T, step_minutes=cut.step_minutes,
                     pools=cut.pools, jobs=cut.jobs, fixed=cut.fixed)
    assert cut.J == s.J + 2 and bool(s.preemptible[training].all())
    for name in ("priority", "gpus", "rigid", "min_served", "preemptible", "restart_cost",
                 "pool_compat", "unplaceable", "job_class", "demand", "arrival", "duration"):
        assert torch.equal(getattr(cut, name), getattr(built, name)), name
    assert [b.tolist() for b in cut.class_blocks] == [b.tolist() for b in built.class_blocks]


@pytest.mark.parametrize("name,seed,later", [("training_heavy", 0, True),
                                             ("heterogeneous", 1, False), ("mixed", 2, True)])
def test_greedys_cuts_of_running_jobs_are_those_of_its_own_whole_plan(name, seed, later):
    # running_cuts plans only the running segments' steps inside the view's
    # window, and only while a waiting job outranks a victim still running,
    # yet answers there as greedy's whole plan its own way (no backfill
    # variant) would. Views of an online run with training preemptible, some
    # cut and some not; without a window, every step.
    from collections import Counter

    from gpualloc import generate, run_config
    from gpualloc.config import GreedyConfig
    from gpualloc.core.segments import cuts_in
    from gpualloc.online import online
    from gpualloc.policies import POLICIES
    from gpualloc.policies.greedy import greedy, running_cuts
    from gpualloc.scenario.edit import with_min_served, with_preemption

    s = with_preemption(generate(name, seed=seed, horizon=48), ["training"], 1)
    s = with_min_served(s, 1.0)
    views = []
    online(s, POLICIES["greedy"], run_config(mode="online", online={"replan_every": 6}),
           on_view=lambda *v: views.append(v[1]))
    seen = Counter()
    for v in views:
        plan = greedy(v, GreedyConfig(variants=False)).owner
        # Rules 1-3: a view's guaranteed demand at step 0 may exceed what is free
        # (online plans report rule 4 and are not held to it).
        assert check(v, plan).ok_but_guarantee
        whole = cuts_in(v, plan)
        inside = {j: t for j, t in whole.items() if t < v.window}
        assert running_cuts(v, GreedyConfig()) == inside
        seen[bool(inside)] += 1
        seen["later"] += len(whole) > len(inside)
        v.window = None
        assert running_cuts(v, GreedyConfig()) == whole
    assert seen[True] and seen[False], seen
    assert seen["later"] or not later, seen  # some views cut after their window
