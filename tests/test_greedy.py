import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from gpualloc.check import check
from gpualloc.config import GreedyConfig
from gpualloc.policies.fifo import fifo
from gpualloc.policies.greedy import greedy
from gpualloc.metrics import weighted_throughput
from gpualloc.policies import rivals
from strategies import scenarios
from scenarios import elastic, rigid, scen
from scenarios import with_fixed
from strategies import scenario_with_fixed


def run(s, **cfg):
    # variants=False in the ablations below: the demand-aware pass alone,
    # without the plain backfill that greedy also runs and keeps when better.
    plan = greedy(s, GreedyConfig(**cfg), rivals=rivals())
    verdict = check(s, plan.owner)
    assert verdict.ok, str(verdict)
    return plan.owner


def start_of(owner, j):
    ts = (owner == j).any(0).nonzero()
    return int(ts[0]) if len(ts) else None


def test_priority_order_not_arrival():
    # One node: the high-priority job listed second runs first.
    s = scen([(1, 4, "H")], [rigid("lo", 4, 2, priority=1), rigid("hi", 4, 2, priority=9)])
    o = run(s)
    assert o[:, 0:2].eq(1).all() and o[:, 2:4].eq(0).all()


def test_ties_by_arrival_then_order():
    s = scen([(1, 2, "H")], [rigid("b", 2, 1, priority=5), rigid("a", 2, 1, priority=5)])
    o = run(s)
    assert o[:, 0].eq(0).all() and o[:, 1].eq(1).all()


def test_best_fit_node_left_with_fewest_free():
    # Job a takes GPUs 0-2 of node 0; the 1-GPU job b fills GPU 3 (node 0 left
    # with 0 free) rather than opening node 1.
    s = scen([(2, 4, "H")], [rigid("a", 3, 6, priority=9), rigid("b", 1, 6, priority=1)])
    o = run(s)
    assert o[0:3, 0].eq(0).all() and o[3, 0] == 1 and o[4:, 0].eq(-1).all()


def test_best_fit_whole_node_keeps_long_runs_free():
    # Five 4-GPU nodes; node 3 is partly held (fixed cells of a running job),
    # so the whole free nodes form runs 0-2 and 4. The 1-node job takes node 4,
    # the shortest run, and the 3-node gang starts at once on nodes 0-2
    # (lowest index first would have put the 1-node job on node 0).
    s = scen([(5, 4, "H")], [rigid("pre", 2, 10), rigid("one", 4, 8, priority=7),
                             rigid("gang", 12, 8, priority=6)], horizon=10)
    fixed = torch.full((20, 10), -1, dtype=torch.long)
    fixed[12:14] = 0
    o = run(with_fixed(s, fixed))
    assert o[16:20, 0:8].eq(1).all()
    assert o[0:12, 0:8].eq(2).all()


def test_easy_backfill_and_reservation():
    # One node of 4. j0 runs [0, 4) on 2 GPUs; j1 (4 GPUs) cannot start and
    # reserves the node at t=4; j2 (2 GPUs, ends at 2) backfills at t=0; j3
    # (2 GPUs for 6) would overlap the reservation, so it waits until j1 is done.
    s = scen([(1, 4, "H")], [rigid("j0", 2, 4, priority=5), rigid("j1", 4, 2, priority=4),
                             rigid("j2", 2, 2, priority=3), rigid("j3", 2, 6, priority=2)],
             horizon=12)
    o = run(s)
    assert o[:, 0].tolist() == [0, 0, 2, 2]
    assert start_of(o, 1) == 4 and o[:, 4:6].eq(1).all()
    assert start_of(o, 3) == 6


def test_without_reservation_the_big_job_starves():
    s = scen([(1, 4, "H")], [rigid("j0", 2, 4, priority=5), rigid("j1", 4, 2, priority=4),
                             rigid("j2", 2, 2, priority=3), rigid("j3", 2, 6, priority=2)],
             horizon=12)
    o = run(s, reservation=False, variants=False)
    assert start_of(o, 3) == 2  # j3 backfills as soon as j2 ends ...
    assert start_of(o, 1) == 8  # ... and j1 waits for it


def test_demand_aware_waits_for_the_trough():
    # Elastic wants 2 of the 4 GPUs until t=3: the 3-GPU job waits for the
    # trough (displacing a priority-9 replica for a priority-1 job does not pay).
    s = scen([(1, 4, "H")], [elastic("e", 1, [2, 2, 2, 0, 0, 0], priority=9),
                             rigid("r", 3, 2, priority=1)])
    o = run(s)
    assert start_of(o, 1) == 3
    assert (o[:, 0:3] == 0).sum(0).tolist() == [2, 2, 2]
    # Without demand-awareness it starts at once and the service gets one GPU.
    o = run(s, demand_aware=False, variants=False)
    assert start_of(o, 1) == 0 and (o[:, 0:2] == 0).sum(0).tolist() == [1, 1]


def test_displacement_when_the_job_could_never_start():
    # A service always wants 1 replica: the whole-node job never has a
    # demand-safe start. Its value (5 x 4 x 3 = 60) beats the service it
    # displaces (9 x 1 x 3 = 27), so it starts; the strict rule never starts it.
    s = scen([(1, 4, "H")], [elastic("e", 1, [1] * 6, priority=9),
                             rigid("r", 4, 3, priority=5)])
    o = run(s)
    assert start_of(o, 1) == 0 and o[:, 3:].eq(0).sum() == 3
    o = run(s, displace=False, variants=False)
    assert start_of(o, 1) is None


def test_repack_moves_elastic_off_the_only_block():
    # Two 2-GPU nodes; job a already holds GPU 0 (fixed). The footprint packs
    # the service highest-first onto GPU 3, which blocks node 1, the only
    # block for the 2-GPU job b. Re-packing the service onto GPU 1 loses
    # nothing, so b starts on arrival.
    s = scen([(2, 2, "H")], [rigid("a", 1, 6, priority=9),
                             elastic("e", 1, [1] * 6, priority=8),
                             rigid("b", 2, 4, priority=1, arrival=1)], horizon=6)
    fixed = torch.full((4, 6), -1, dtype=torch.long)
    fixed[0] = 0
    o = run(with_fixed(s, fixed))
    assert start_of(o, 2) == 1 and o[2:4, 1:5].eq(2).all()
    assert o[1].eq(1).all()  # the service never lost a replica


def test_elastic_best_fit_leaves_scarce_gpus():
    # Pool B comes first; e2 runs only on B. e1 (higher priority, any type)
    # takes the A GPUs that e2 cannot use, so both are fully served.
    s = scen([(1, 2, "B"), (1, 2, "A")], [elastic("e1", 1, [2] * 3, priority=9),
                                          elastic("e2", 1, [2] * 3, priority=8, gpu_types=["B"])],
             horizon=3)
    o = run(s)
    assert o[0:2].eq(1).all() and o[2:4].eq(0).all()


def test_elastic_shortest_free_run():
    # The 3-GPU job takes GPUs 4-6 (best fit beside the footprint on GPU 7);
    # the replica then goes to GPU 7, the shortest free run, not to GPU 0.
    s = scen([(2, 4, "H")], [rigid("r", 3, 4, priority=1), elastic("e", 1, [1] * 4)],
             horizon=4)
    o = run(s)
    assert o[4:7].eq(0).all() and o[7].eq(1).all() and o[0:4].eq(-1).all()


def test_rigid_type_scarcity():
    # The any-type job avoids the A node that the A-only job needs.
    s = scen([(1, 4, "A"), (1, 4, "B")], [rigid("any", 4, 4, priority=9),
                                          rigid("a_only", 4, 4, priority=1, gpu_types=["A"])],
             horizon=4)
    o = run(s)
    assert o[4:].eq(0).all() and o[:4].eq(1).all()


def test_unplaceable_and_late_jobs():
    s = scen([(1, 2, "H")], [rigid("odd", 3, 1), rigid("late", 1, 10, arrival=4)])
    o = run(s)
    assert (o == 0).sum() == 0 and start_of(o, 1) == 4 and o[:, 4:].eq(1).sum() == 2


def test_fixed_cells_kept_and_their_jobs_not_rescheduled():
    # a ran on GPUs 0-1 at t=0 and b is running on GPU 2 until t=4 (fixed);
    # one replica of e was served on GPU 3 at t=0, 1. Greedy keeps those
    # cells, runs neither a nor b again, gives e its second replica from t=1
    # (nothing is free at t=0), and c waits until the service's demand leaves
    # room (displacing a priority-9 replica for it does not pay).
    s = scen([(1, 4, "H")], [rigid("a", 2, 1, priority=9), rigid("b", 1, 5, priority=9),
                             rigid("c", 2, 3, priority=1), elastic("e", 1, [2] * 6)])
    fixed = torch.full((4, 6), -1, dtype=torch.long)
    fixed[0:2, 0] = 0
    fixed[2, 0:5] = 1
    fixed[3, 0:2] = 3
    o = run(with_fixed(s, fixed))
    assert torch.equal(o[fixed >= 0], fixed[fixed >= 0])
    assert (o == 0).sum() == 2 and (o == 1).sum() == 5
    assert (o == 3).sum(0).tolist()[:5] == [1, 2, 2, 2, 2]
    assert start_of(o, 2) == 5


@given(scenarios())
def test_greedy_plans_are_feasible(s):
    run(s)


@given(scenarios(max_jobs=6), st.sampled_from([
    {"reservation": False}, {"displace": False}, {"demand_aware": False},
    {"repack_jobs": 0}]))
def test_greedy_variants_are_feasible(s, cfg):
    run(s, **cfg)


@given(scenario_with_fixed())
def test_greedy_keeps_fixed_cells(s):
    o = run(s)
    fixed = s.fixed
    assert torch.equal(o[fixed >= 0], fixed[fixed >= 0])
    for j in fixed[fixed >= 0].unique().tolist():
        if s.jobs[j].rigid:  # done or running: no cells beyond the fixed ones
            assert ((o == j) & (fixed != j)).sum() == 0


@given(scenarios(max_jobs=6))
def test_greedy_runs_something_when_fifo_does(s):
    # Cheap oracle: where FIFO does useful work, greedy does too.
    o = run(s)
    if weighted_throughput(s, fifo(s).owner) > 0:
        assert weighted_throughput(s, o) > 0


def test_rejects_wrong_fixed_shape():
    s = scen([(1, 2, "H")], [rigid("a", 1, 1)])
    with pytest.raises(ValueError, match="fixed"):
        greedy(with_fixed(s, torch.full((3, 6), -1)), rivals=rivals())


@given(scenarios(max_jobs=10, max_horizon=12))
def test_never_below_the_plain_easy_backfill(s):
    from gpualloc.policies.backfill import backfill
    plain = backfill(s).owner
    assert check(s, plain).ok, "the reference itself must be feasible"
    assert weighted_throughput(s, run(s)) >= weighted_throughput(s, plain) - 1e-9


def test_backfill_is_plain_easy():
    # One 4-GPU node. "big" (priority 9, 4 GPUs) arrives at 1 while "run"
    # holds GPUs 0-1 until 2: it reserves [2, 5) on the whole node. At t=1
    # "long" (2 steps) would overlap the reservation and waits; "short" (1
    # step) backfills on a free GPU. "long" then starts after "big", at 5.
    from gpualloc.policies.backfill import backfill
    s = scen([(1, 4, "H")], [rigid("run", 2, 2, priority=1),
                             rigid("big", 4, 3, priority=9, arrival=1),
                             rigid("long", 1, 2, priority=5, arrival=1),
                             rigid("short", 1, 1, priority=4, arrival=1)], horizon=6)
    o = backfill(s).owner
    assert check(s, o).ok
    assert [start_of(o, j) for j in range(4)] == [0, 2, 5, 1]


@given(scenario_with_fixed(), st.integers(1, 12))
def test_a_window_is_the_first_steps_of_the_whole_plan(s, window):
    # Online replans plan only their window: greedy decides each step from
    # the ones before it, so nothing after the window may change it.
    cfg = GreedyConfig(variants=False)
    whole = greedy(s, cfg).owner
    part = greedy(s, cfg, window=window).owner
    w = min(window, s.T)
    assert torch.equal(part[:, :w], whole[:, :w])
    later = part[:, w:] >= 0  # the fixed cells and the runs of jobs started in the window
    assert torch.equal(part[:, w:][later], whole[:, w:][later])


@given(scenario_with_fixed(), st.integers(1, 6))
def test_online_variant_weighed_at_a_full_replan_and_carried(s, window):
    # A full replan (no carry) weighs both whole plans and names the better;
    # a light one (Scenario.carry) plans only the window of the carried one.
    from gpualloc.policies.backfill import backfill
    r = rivals()
    own, plain = greedy(s, GreedyConfig(variants=False)).owner, backfill(s).owner
    full = greedy(s, GreedyConfig(), rivals=r, window=window)
    better = ("backfill" if weighted_throughput(s, plain) > weighted_throughput(s, own)
              else "greedy")
    assert full.info["carry"] == {"greedy_variant": better}
    assert torch.equal(full.owner, plain if better == "backfill" else own)
    w = min(window, s.T)
    for variant, whole in (("backfill", plain), ("greedy", own)):
        s.carry = {"greedy_variant": variant}
        light = greedy(s, GreedyConfig(), rivals=r, window=window).owner
        assert torch.equal(light[:, :w], whole[:, :w])
    s.carry = None
