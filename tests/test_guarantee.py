"""Rule 4 of PROBLEM.md: guaranteed real-time service (`min_served`)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gpualloc.check import GUARANTEE, check
from gpualloc.core.guarantee import GuaranteeError, check_guarantee
from gpualloc.metrics import metrics
from gpualloc.policies import POLICIES
from gpualloc.run import run
from gpualloc.scenario import with_min_served
from gpualloc.scenario import ScenarioError, from_dict
from strategies import scenario_docs
from scenarios import every_block
from helpers import composed

ROOT = Path(__file__).resolve().parents[1]


def doc(jobs, pools=((1, 4, "H"),), horizon=4):
    return {"name": "g", "horizon": horizon, "step_minutes": 60,
            "cluster": {"pools": [{"name": f"p{i}", "count": c, "gpus_per_node": n,
                                   "gpu_type": t, "memory_gb": 80}
                                  for i, (c, n, t) in enumerate(pools)]},
            "jobs": jobs}


def service(name, demand, gpus=1, min_served=1.0, priority=9, **kw):
    return {"id": name, "kind": "realtime_inference", "priority": priority, "arrival": 0,
            "gpus": gpus, "demand": demand, "min_served": min_served, **kw}


# ---- the checker ------------------------------------------------------------------------

def test_checker_rejects_one_replica_short_and_accepts_it_added():
    s = from_dict(doc([service("chat", [2, 3, 1, 0], min_served=0.5),
                       {"id": "r", "kind": "training", "priority": 1, "arrival": 0, "gpus": 2,
                        "duration": 4}]))
    assert s.guaranteed[0].tolist() == [1, 2, 1, 0]  # ceil(0.5 x demand)
    owner = torch.full((4, 4), -1, dtype=torch.long)
    owner[2:4] = 1  # the training job on GPUs 2-3 for the whole horizon
    owner[0, :3] = 0  # one replica at t = 0, 1, 2
    verdict = check(s, owner)
    assert not verdict.ok and set(verdict.violations) == {GUARANTEE}
    count, example = verdict.violations[GUARANTEE]
    assert count == 1 and "t=1" in example and "'chat'" in example
    assert verdict.ok_but_guarantee
    assert metrics(s, owner)["guarantee_shortfall"] == 1
    owner[1, 1] = 0  # the second replica at t = 1
    assert check(s, owner).ok
    m = metrics(s, owner)
    assert m["guarantee_shortfall"] == 0
    assert m["lowest_served_share"] == {"chat": 0.5}  # 1 of 2 at t=0


def test_guarantee_rounds_the_share_times_demand_up_exactly():
    s = from_dict(doc([service("a", [10, 3, 1, 7], min_served=0.7)]))
    assert s.guaranteed[0].tolist() == [7, 3, 1, 5]  # 0.7 x 10 is 7, not 8


# ---- impossible guarantees ----------------------------------------------------------------

def test_impossible_guarantee_names_service_timestep_replicas_and_gpus():
    s = from_dict(doc([service("chat", [1, 2, 3, 1], gpus=2, min_served=1.0),
                       service("web", [0, 0, 1, 0], gpus=1, min_served=1.0)]))
    with pytest.raises(GuaranteeError) as e:
        check_guarantee(s)
    msg = str(e.value)
    assert isinstance(e.value, ScenarioError) and "\n" not in msg
    for part in ("'chat'", "t=2", "3 replicas of 2 GPUs (6 GPUs)", "4 compatible GPUs"):
        assert part in msg, msg


def _two_types(b_wants: int, extra=()):
    """Two 2-GPU nodes of type A (GPUs 0-3), two of type B (4-7). Services a
    and b of 2-GPU replicas may use either type, c of 1-GPU ones only B and
    wants 3; b wants `b_wants`."""
    both = ["A", "B"]
    return from_dict(doc([service("a", [1], gpus=2, gpu_types=both),
                          service("b", [b_wants], gpus=2, gpu_types=both),
                          service("c", [3], gpus=1, gpu_types=["B"]), *extra],
                         pools=((2, 2, "A"), (2, 2, "B")), horizon=1))


def test_first_fit_failure_is_decided_by_search():
    # First fit (largest first, highest blocks) puts the 2-GPU replicas on B
    # and leaves c short; the search moves them to A.
    fits = _two_types(b_wants=1)
    check_guarantee(fits)
    owner = POLICIES["greedy"](fits, composed("+scenario=file"), torch.device("cpu")).owner
    assert check(fits, owner).ok
    with pytest.raises(GuaranteeError, match="t=0"):
        check_guarantee(_two_types(b_wants=2))


def test_pack_steps_searches_where_first_fit_leaves_one_out():
    # The scenario above that packs, over three steps: step 0 all free, step
    # 1 with GPUs 0-1 held by a training job, step 2 with a's replica already
    # on 4-5.
    from gpualloc.core.guarantee import SEARCH_STEPS, pack_steps, packing_order
    from gpualloc.core.layout import layout
    from gpualloc.plan import IDLE

    s = _two_types(b_wants=1, extra=[{"id": "r", "kind": "training", "priority": 1,
                                      "arrival": 0, "gpus": 2, "duration": 1}])
    lay, a, b, c, r = layout(s), 0, 1, 2, 3
    jobs = packing_order(lay, [a, b, c])
    owner = np.full((3, 8), IDLE, dtype=np.int64)
    owner[1, 0:2] = r  # not a service of `jobs`: never freed
    owner[2, 4:6] = a
    whole = np.array([[1, 1, 1] if j != c else [3, 3, 3] for j in jobs])  # (E, S)
    need = whole.copy()
    need[jobs.index(a), 2] = 0  # step 2 holds it already
    held = np.zeros(lay.J + 1, dtype=bool)  # IDLE: the spare last entry
    held[jobs] = True
    missing = pack_steps(lay, owner, owner == IDLE, jobs, need, SEARCH_STEPS, whole, held)
    # Steps 0 and 2: first fit puts a and b on B and leaves c out; the search
    # moves them to A (at step 2 a's held replica too).
    assert missing.tolist() == [0, 3, 0]
    for t in (0, 2):
        assert sorted(owner[t, :4].tolist()) == [a, a, b, b], owner[t]
        assert owner[t, 4:].tolist().count(c) == 3, owner[t]
    # Step 1: only one 2-GPU replica fits on A, so c cannot have 3 of B: no
    # packing, and first fit's stays (a and b on B, c short by 3).
    assert sorted(owner[1, 4:].tolist()) == [a, a, b, b] and c not in owner[1]
    assert owner[1, :2].tolist() == [r, r]


def test_a_packing_that_fills_few_pools_last_is_found():
    # A step of `broad` (seed 15, t=16, min_served=1) refused before:
    # 56 of 64 GPUs guaranteed, 46 in 2-GPU replicas that fit anywhere, 3
    # 1-GPU replicas only H100 or A100 GPUs hold and 2 only L40S ones. First
    # fit fills the L40S nodes with 2-GPU replicas, and a search that tries
    # blocks without counting what the rest needs where gave up.
    ha, l40s = ["H100", "A100"], ["L40S"]
    s = from_dict(doc([service("a", [3], gpus=2), service("b", [2], gpu_types=l40s),
                       service("c", [5]), service("d", [3], gpus=2),
                       service("e", [12], gpus=2), service("f", [5], gpus=2),
                       service("g", [3], gpu_types=ha)],
                      pools=((2, 8, "H100"), (2, 8, "A100"), (2, 8, "A100"), (4, 4, "L40S")),
                      horizon=1))
    check_guarantee(s)
    owner = POLICIES["greedy"](s, composed("+scenario=file"), torch.device("cpu")).owner
    assert check(s, owner).ok
    # One more 1-GPU L40S replica than the pool holds: refused, and the
    # error names the services that compete for it.
    over = from_dict(doc([service("a", [3], gpus=2), service("b", [9], gpu_types=l40s),
                          service("c", [4], gpus=2, gpu_types=l40s)],
                         pools=((2, 8, "H100"), (4, 4, "L40S")), horizon=1))
    with pytest.raises(GuaranteeError) as e:
        check_guarantee(over)
    msg = str(e.value)
    for part in ("t=0", "'b' and 'c' (9 + 8 GPUs)", "only pool 'p1' can hold", "17 GPUs",
                 "has 16 free"):
        assert part in msg, msg


def test_a_step_the_search_packs_keeps_the_side_first_fit_packs():
    # GPUs 0-3 are type A, 4-7 type B. At t=0 first fit packs x's two 2-GPU
    # replicas on the highest blocks (4-7); at t=1 y (B only) wants a GPU too,
    # first fit leaves it out, and the search packs the step. It tries the
    # highest blocks first, as first fit does, so GPUs 0-1 stay free at both
    # steps: a 2-GPU rigid job fits beside the replicas for the two steps. A
    # search from the lowest blocks (the code before) moved x to 0-3 at t=1,
    # and no GPU was free at both.
    from gpualloc.core.guarantee import SEARCH_STEPS, _search, footprint
    from gpualloc.core.layout import layout

    s = from_dict(doc([service("x", [2, 2], gpus=2), service("y", [0, 1], gpu_types=["B"])],
                      pools=((1, 4, "A"), (1, 4, "B")), horizon=2))
    owner = footprint(s)  # (T, G)
    assert [(owner[t] == 0).sum() // 2 for t in (0, 1)] == [2, 2]
    assert (owner[1] == 1).sum() == 1 and owner[1][4:].tolist().count(1) == 1
    free = (owner == -1).all(0)
    assert free[0] and free[1], owner
    # The search of one column (a reclaimed step's, core.guarantee.pack_steps) packs the
    # same side.
    lay = layout(s)
    found = _search(lay, np.ones(8, dtype=bool), [0, 0, 1], SEARCH_STEPS)
    assert found is not None and min(found) >= 2, found


def _fits(s, t) -> bool:
    """Reference: the guaranteed replicas of t fit on the empty cluster (a
    search over every block of PROBLEM.md's definition)."""
    replicas = [(j.gpus, [p.gpu_type in (j.gpu_types or [p.gpu_type])
                          and p.memory_gb >= j.min_memory_gb for p in s.pools])
                for i, j in enumerate(s.jobs) if not j.rigid
                for _ in range(int(s.guaranteed[i, t]))]
    replicas.sort(key=lambda r: -r[0])
    taken = [False] * s.G

    def place(n):
        if n == len(replicas):
            return True
        k, ok = replicas[n]
        for b in every_block(s, k, ok):
            if not any(taken[b:b + k]):
                taken[b:b + k] = [True] * k
                if place(n + 1):
                    return True
                taken[b:b + k] = [False] * k
        return False

    return place(0)


@st.composite
def guaranteed_docs(draw):
    d = draw(scenario_docs(max_jobs=6, max_horizon=6, max_gpus=8))
    for job in d["jobs"]:
        if job["kind"] == "realtime_inference":
            job["demand"] = [min(v, 3) for v in job["demand"]]
            job["min_served"] = draw(st.sampled_from([0, 0.25, 0.5, 0.7, 1.0]))
    return d


@given(guaranteed_docs())
@settings(max_examples=30)
def test_every_policy_meets_rule_4_or_the_run_says_it_is_impossible(d):
    s = from_dict(d)
    possible = all(_fits(s, t) for t in range(s.T))
    cfg = composed("+scenario=file", "solver.iterations=5", "solver.local_search_iters=10",
                   "solver.progress=false")
    try:
        check_guarantee(s)
    except GuaranteeError:
        assert not possible  # never otherwise
        return
    assert possible
    for name in ("greedy", "allocator"):
        placed_first = POLICIES[name](s, cfg, torch.device("cpu")).owner
        verdict = check(s, placed_first)
        assert verdict.ok, (name, str(verdict))
        owner = POLICIES[name].offline(s, cfg, torch.device("cpu")).owner
        assert check(s, owner).ok, name
        value = metrics(s, owner)["weighted_throughput"]
        assert value >= metrics(s, placed_first)["weighted_throughput"], name


def test_a_plan_without_the_replicas_placed_first_is_kept_where_it_meets_rule_4():
    # Found by a search of random scenarios: a's guaranteed replica placed
    # first (2 GPUs) takes the 80 GB GPUs that only b's replicas can use.
    d = doc([service("b", [2, 0, 3, 3, 0], gpus=2, priority=8, min_served=0, min_memory_gb=80),
             service("a", [3, 3, 3, 1, 3], gpus=2, priority=8, min_served=0.25)], horizon=5)
    d["cluster"]["pools"] = [{"name": f"p{i}", "count": 2, "gpus_per_node": 1, "gpu_type": "B",
                              "memory_gb": memory} for i, memory in enumerate((40, 80))]
    s = from_dict(d)
    cfg = composed("+scenario=file", "solver.progress=false")
    cpu = torch.device("cpu")
    placed_first = POLICIES["greedy"](s, cfg, cpu)
    plan = POLICIES["greedy"].offline(s, cfg, cpu)
    assert check(s, plan.owner).ok
    assert metrics(s, placed_first.owner)["weighted_throughput"] == 144
    assert metrics(s, plan.owner)["weighted_throughput"] == 160
    assert plan.info["guarantee"]["kept"] in ("without the guarantee",
                                              "greedy's, never displacing demand")


@given(guaranteed_docs())
@settings(max_examples=10)
def test_exact_meets_rule_4(d):
    pytest.importorskip("ortools")
    s = from_dict(d)
    try:
        check_guarantee(s)
    except GuaranteeError:
        return
    cfg = composed("+scenario=file", "exact.workers=1", "exact.time_limit_s=10",
                   "exact.lp=false")
    plan = POLICIES["exact"](s, cfg, torch.device("cpu"))
    assert check(s, plan.owner).ok
    greedy = POLICIES["greedy"](s, cfg, torch.device("cpu")).owner
    assert plan.info["objective"] >= metrics(s, greedy)["weighted_throughput"] - 1e-6


# ---- runs -------------------------------------------------------------------------------

def test_run_option_sets_every_service_and_fifo_shortfall_is_reported(tmp_path):
    cfg = composed("+scenario=file", "min_served=1.0", "fifo.reserve=0", "solver.progress=false")
    result = run(cfg, tmp_path)
    written = from_dict(__import__("json").loads((tmp_path / "scenario.json").read_text()))
    assert all(j.min_served == 1.0 for j in written.jobs if not j.rigid)
    assert result["min_served"] == "1"
    fifo = result["policies"]["fifo"]
    assert fifo["guarantee_shortfall"] > 0  # no reservation: FIFO serves nothing
    for name in ("greedy", "allocator"):
        assert result["policies"][name]["guarantee_shortfall"] == 0
        assert result["policies"][name]["realtime_slo"] == 1.0


def test_with_min_served_leaves_rigid_jobs_alone():
    s = with_min_served(from_dict(doc([service("a", [1, 1, 1, 1], min_served=0.2),
                                       {"id": "r", "kind": "training", "priority": 1,
                                        "arrival": 0, "gpus": 1, "duration": 2}])), 0.5)
    assert [j.min_served for j in s.jobs] == [0.5, 0.0]


def test_online_aims_at_rule_4_and_reports_the_shortfall(tmp_path):
    cfg = composed("+scenario=mixed", "min_served=1.0", "mode=online", "online.replan_every=24",
                   "policies=[fifo,greedy]", "solver.progress=false")
    result = run(cfg, tmp_path)
    row = result["policies"]["greedy"]
    assert row["guarantee_shortfall"] >= 0 and row["realtime_slo"] > 0.9


def _cli(tmp_path, *args):
    return subprocess.run([sys.executable, "-m", "gpualloc.run", *args,
                           f"hydra.run.dir={tmp_path / 'out'}"], cwd=ROOT, capture_output=True,
                          text=True)


@pytest.mark.slow
def test_bad_min_served_exits_2(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(__import__("json").dumps(doc([service("a", [1, 1, 1, 1], min_served=1.2)])))
    rigid = tmp_path / "rigid.json"
    rigid.write_text(__import__("json").dumps(doc([
        {"id": "r", "kind": "training", "priority": 1, "arrival": 0, "gpus": 1, "duration": 2,
         "min_served": 0.5}])))
    impossible = tmp_path / "impossible.json"
    impossible.write_text(__import__("json").dumps(doc([service("a", [1, 9, 1, 1])])))
    cases = {
        "file": (["+scenario=file", f"scenario.path={bad}"], "'min_served'"),
        "rigid": (["+scenario=file", f"scenario.path={rigid}"], "'min_served'"),
        "option": (["+scenario=file", "min_served=2"], "min_served=2"),
        "impossible": (["+scenario=file", f"scenario.path={impossible}"], "t=1"),
    }
    for name, (args, part) in cases.items():
        r = _cli(tmp_path / name, *args, "policies=[fifo]")
        assert r.returncode == 2, (name, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and part in lines[0], (name, r.stderr)
        assert not (tmp_path / name / "out" / "metrics.json").exists()


def test_the_footprint_leaves_the_decided_cells_alone():
    # One timestep: the transposed fixed grid is already contiguous, and the
    # guaranteed replicas were once written into the scenario's own cells
    # (online, greedy then refused its own view as not honouring them).
    from gpualloc.config import OnlineConfig, RunConfig
    from gpualloc.core.guarantee import planning_fixed
    from gpualloc.online import run_policy
    from gpualloc.scenario import Scenario

    doc = {"name": "one-step", "horizon": 1, "step_minutes": 60,
           "cluster": {"pools": [{"name": f"p{i}", "count": 1, "gpus_per_node": 1,
                                  "gpu_type": "A", "memory_gb": 40} for i in range(3)]},
           "jobs": [{"id": "rt", "kind": "realtime_inference", "priority": 1, "arrival": 0,
                     "gpus": 1, "demand": [2], "min_served": 0.5}]}
    s = from_dict(doc)
    view = Scenario(name="v", horizon=1, step_minutes=60, pools=s.pools, jobs=s.jobs,
                    fixed=torch.full((3, 1), -1, dtype=torch.long))
    assert int((planning_fixed(view) >= 0).sum()) == 1  # the guaranteed replica
    assert bool((view.fixed == -1).all())
    cfg = RunConfig(mode="online", online=OnlineConfig(replan_every=1, forecast="last_day"))
    owner = run_policy("greedy", s, cfg, "cpu").owner
    assert check(s, owner).ok


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([1, 2, 4, 8]), st.sampled_from(["A", "B", "AB"]),
                          st.integers(0, 3)), min_size=1, max_size=3),
       st.lists(st.booleans(), min_size=14, max_size=14))
def test_the_search_packs_exactly_when_some_packing_exists(services, free):
    # The search's counting shortcut (more GPUs wanted than free, in all or
    # for one service's types) never refuses a column that packs.
    from gpualloc.core.guarantee import SEARCH_STEPS, _search
    from gpualloc.core.layout import layout

    s = from_dict(doc([service(f"s{i}", [1], gpus=k, gpu_types=list(types))
                       for i, (k, types, _) in enumerate(services)],
                      pools=((2, 4, "A"), (3, 2, "B")), horizon=1))
    lay, free = layout(s), np.array(free)
    replicas = [j for j, (_, _, n) in enumerate(services) for _ in range(n)]
    found = _search(lay, free, replicas, SEARCH_STEPS)
    taken = ~free.copy()

    def place(n: int) -> bool:  # reference: every block of PROBLEM.md, in any order
        if n == len(replicas):
            return True
        j = replicas[n]
        k, ok = services[j][0], [p.gpu_type in services[j][1] for p in s.pools]
        for b in every_block(s, k, ok):
            if not taken[b:b + k].any():
                taken[b:b + k] = True
                if place(n + 1):
                    return True
                taken[b:b + k] = False
        return False

    assert (found is not None) == place(0)
    if found is not None:  # disjoint blocks on free GPUs, each of its service's
        held = np.zeros(s.G, dtype=int)
        for j, b in zip(replicas, found):
            assert b in every_block(s, services[j][0], [p.gpu_type in services[j][1]
                                                          for p in s.pools])
            held[b:b + services[j][0]] += 1
        assert (held <= free).all()


def test_a_footprint_after_a_plan_keeps_its_replicas_and_packs_the_rest():
    from gpualloc.core.guarantee import footprint_after
    # One node of 4 GPUs; a's guarantee is 2 replicas at t=0 and t=1.
    s = from_dict(doc([service("a", [2, 2], min_served=1.0)], horizon=2))
    plan = torch.full((4, 2), -1, dtype=torch.long)
    plan[0:2, 0] = 0  # at t=0 the plan serves both, on GPUs 0-1 (not the highest)
    plan[1, 1] = 0  # at t=1 one, on GPU 1
    fp = footprint_after(s, plan)  # (T, G)
    assert fp[0].tolist() == [0, 0, -1, -1]  # kept where the plan put them
    assert fp[1, 1] == 0 and int((fp[1] == 0).sum()) == 2  # the second packed on a free GPU
    assert footprint_after(s, torch.full((4, 2), -1, dtype=torch.long)) is not None


def test_without_the_guarantee_the_guaranteed_services_value_is_raised_and_nothing_else():
    from gpualloc.scenario.edit import without_guarantee
    s = from_dict(doc([service("a", [1, 1], min_served=0.5, priority=3),
                       service("b", [1, 1], min_served=0, priority=2),
                       {"id": "r", "kind": "training", "priority": 4, "arrival": 0, "gpus": 1,
                        "duration": 2}], horizon=2))
    s.fixed = torch.full((4, 2), -1, dtype=torch.long)
    out = without_guarantee(s, 1000.0)
    assert [j.priority for j in out.jobs] == [3000.0, 2, 4]
    assert [j.min_served for j in out.jobs] == [0, 0, 0]
    assert out.fixed is s.fixed
