import pytest
from hypothesis import given

from gpualloc.check import check
from gpualloc.config import FifoConfig
from gpualloc.policies.fifo import fifo, reservation
from strategies import scenarios
from scenarios import elastic, rigid, scen


def run(s, **cfg):
    plan = fifo(s, FifoConfig(**cfg))
    assert check(s, plan.owner).ok
    return plan


def test_reservation_covers_peak_from_the_end():
    # Peak 3 GPUs -> two 2-GPU nodes, the last two.
    s = scen([(4, 2, "H")], [elastic("e", 1, [1, 3, 2, 0, 0, 0])])
    assert reservation(s).tolist() == [False] * 4 + [True] * 4
    assert reservation(s, reserve=1).tolist() == [False] * 6 + [True] * 2


def test_reservation_only_on_compatible_nodes():
    # The elastic job runs on type A only; the A pool comes first in GPU order.
    s = scen([(2, 2, "A"), (2, 2, "B")], [elastic("e", 1, [2] * 6, gpu_types=["A"])])
    assert reservation(s).tolist() == [False, False, True, True, False, False, False, False]


def test_reservation_all_when_peak_too_large():
    s = scen([(2, 2, "H")], [elastic("e", 1, [9] * 6)])
    assert reservation(s).all()


def test_head_of_line_blocking():
    s = scen([(1, 4, "H")], [rigid("a", 3, 2), rigid("b", 4, 1), rigid("c", 1, 1)])
    o = run(s).owner
    assert o[:3, :2].eq(0).all() and o[3, :2].eq(-1).all()  # c does not backfill GPU 3
    assert o[:, 2].eq(1).all()
    assert o[0, 3] == 2 and o[1:, 3].eq(-1).all()


def test_priority_ignored_and_lowest_block():
    s = scen([(2, 4, "H")], [rigid("lo", 2, 2, priority=1), rigid("hi", 2, 2, priority=9)])
    o = run(s).owner
    assert o[0:2, 0].eq(0).all() and o[2:4, 0].eq(1).all()


def test_unplaceable_outside_reservation_leaves_queue():
    # Two 4-GPU nodes; the elastic job reserves one; an 8-GPU job could only run
    # on both, so FIFO drops it and the job behind it runs at once.
    s = scen([(2, 4, "H")], [elastic("e", 1, [1] * 6), rigid("big", 8, 2), rigid("small", 2, 1)])
    plan = run(s)
    assert plan.info["fifo_unplaceable"] == ["big"]
    assert plan.owner[0:2, 0].eq(2).all()
    assert (plan.owner == 1).sum() == 0


def test_elastic_inside_reservation_in_arrival_order():
    # One node of 4 reserved. Job e2 arrives first and gets the lowest blocks;
    # e1 gets what is left; nothing elastic lands outside the reservation.
    s = scen([(2, 4, "H")], [elastic("e1", 2, [2, 2, 2, 2, 2, 2], arrival=1),
                             elastic("e2", 1, [2, 2, 2, 2, 2, 2], arrival=0)], horizon=6)
    o = run(s, reserve=1).owner
    assert o[:4].eq(-1).all()
    assert o[4:6, 0].tolist() == [1, 1] and o[6:8, 0].tolist() == [-1, -1]
    assert o[4:8, 1].tolist() == [1, 1, 0, 0]  # e1 only one replica: 2 GPUs left


def test_elastic_blocks_skip_fragments():
    # Replicas of 2 GPUs in a 4-GPU node whose GPU 0 is taken by an earlier
    # job: blocks sit at any offset, so the lowest free one is GPUs 1-2, and
    # GPU 3 is left over.
    s = scen([(1, 4, "H")], [elastic("one", 1, [1, 0]), elastic("two", 2, [2, 2])], horizon=2)
    o = run(s).owner
    assert o[:, 0].tolist() == [0, 1, 1, -1]
    assert o[:, 1].tolist() == [1, 1, 1, 1]


def test_scenario_unplaceable_is_skipped():
    s = scen([(1, 2, "H")], [rigid("odd", 3, 1), rigid("ok", 1, 1)])
    plan = run(s)
    assert plan.info["fifo_unplaceable"] == ["odd"]
    assert plan.owner[0, 0] == 1


def test_waits_for_arrival():
    s = scen([(1, 2, "H")], [rigid("late", 1, 2, arrival=3)])
    o = run(s).owner
    assert o[0, 3:5].eq(0).all() and o[:, :3].eq(-1).all()


def test_horizon_cuts_run():
    s = scen([(1, 1, "H")], [rigid("long", 1, 10, arrival=4)])
    o = run(s).owner
    assert o[0, 4:].eq(0).all()


@given(scenarios())
def test_fifo_plans_are_feasible(s):
    plan = fifo(s)
    verdict = check(s, plan.owner)
    assert verdict.ok, str(verdict)


@pytest.mark.parametrize("reserve", [0, 1, 5])
@given(s=scenarios(max_jobs=5))
def test_fifo_feasible_with_any_reserve(s, reserve):
    assert check(s, fifo(s, FifoConfig(reserve=reserve)).owner).ok
