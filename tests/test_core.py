"""The placement core against plain-Python references that try every block
and every start, written from PROBLEM.md's words only (no core code), on
random small clusters and occupancies."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpualloc.core import blocks as kb
from gpualloc.core.guard import DemandGuard, guarded_find
from gpualloc.core.layout import layout
from gpualloc.core.occupancy import Occupancy
from gpualloc.core.pack import NO_REFCOUNTS, fill_elastic, refcount_options
from gpualloc.objective import value
from gpualloc.scenario import from_dict
from helpers import plan_every_compiled_path
from scenarios import every_block
from strategies import scenarios


# ---- references -------------------------------------------------------------------------


def ref_free(busy, b, k, t, need) -> bool:
    return not busy[t:t + need, b:b + k].any()


def ref_earliest(busy, blocks, k, d, after):
    T = busy.shape[0]
    for t in range(after, T):
        fit = [b for b in blocks if ref_free(busy, b, k, t, min(d, T - t))]
        if fit:
            return t, fit
    return T, []


def ref_pack(free, blocks, k, n, high):
    """Take the lowest (highest) free block, then the next, up to n."""
    free = free.copy()
    taken = []
    for _ in range(n):
        ok = [b for b in blocks if free[b:b + k].all()]
        if not ok:
            break
        b = max(ok) if high else min(ok)
        free[b:b + k] = False
        taken.append(b)
    return free, taken


# ---- random clusters --------------------------------------------------------------------

@st.composite
def clusters(draw, max_pools=3, horizon=(1, 10)):
    T = draw(st.integers(*horizon))
    pools = [{"name": f"p{i}", "count": draw(st.integers(1, 3)),
              "gpus_per_node": draw(st.sampled_from([1, 2, 3, 4, 8])),
              "gpu_type": f"X{i}", "memory_gb": 80}
             for i in range(draw(st.integers(1, max_pools)))]
    k = draw(st.sampled_from([1, 2, 3, 4, 6, 8, 16]))
    pools_ok = draw(st.lists(st.booleans(), min_size=len(pools), max_size=len(pools)))
    if not any(pools_ok):
        pools_ok[0] = True
    types = [p["gpu_type"] for p, ok in zip(pools, pools_ok) if ok]
    d = draw(st.integers(1, T + 2))
    jobs = [{"id": "j", "kind": "training", "priority": 3, "arrival": 0, "gpus": k,
             "duration": d, "gpu_types": types}]
    s = from_dict({"name": "c", "horizon": T, "step_minutes": 60,
                   "cluster": {"pools": pools}, "jobs": jobs})
    busy = np.array(draw(st.lists(st.lists(st.booleans(), min_size=s.G, max_size=s.G),
                                  min_size=T, max_size=T)), dtype=np.bool_).reshape(T, s.G)
    return s, busy, pools_ok


def _busy_as_fixed(busy):
    return np.where(busy, 0, -1).astype(np.int64)


@given(clusters(), st.data())
def test_earliest_fit_and_all_fits(c, data):
    s, busy, pools_ok = c
    lay = layout(s)
    job = s.jobs[0]
    blocks = every_block(s, job.gpus, pools_ok)
    assert lay.blocks(0).tolist() == blocks
    occ = Occupancy(lay, _busy_as_fixed(busy))
    after = data.draw(st.integers(0, s.T))
    t, free = occ.earliest(0, after)
    t_ref, fit_ref = ref_earliest(busy, blocks, job.gpus, job.duration, after)
    assert t == t_ref
    assert (lay.blocks(0)[free].tolist() if free is not None else []) == fit_ref
    # Every block that fits at a given t, for a given number of steps.
    at = data.draw(st.integers(0, s.T - 1))
    need = data.draw(st.integers(1, s.T - at))
    got = lay.blocks(0)[occ.free_at(0, at, need)].tolist()
    assert got == [b for b in blocks if ref_free(busy, b, job.gpus, at, need)]


@given(clusters(), st.data())
def test_class_wide_answers_match_the_block_by_block_ones(c, data):
    """The shortcuts of issue 26 answer as the plain searches do: the longest
    free run of a class says which needs fit at t; any_start whether a start
    exists; first_free the lowest free block off marked GPUs; settle_columns
    gives the grid computed afresh after columns changed."""
    s, busy, pools_ok = c
    lay = layout(s)
    job = s.jobs[0]
    k, blocks = job.gpus, every_block(s, job.gpus, pools_ok)
    occ = Occupancy(lay, _busy_as_fixed(busy))
    b = lay.blocks(0)
    t = data.draw(st.integers(0, s.T - 1))
    longest = kb.longest_free(occ.run, b, k, t)
    for need in range(1, s.T - t + 1):
        assert (need <= longest) == any(ref_free(busy, x, k, t, need) for x in blocks)
    after = data.draw(st.integers(0, s.T))
    d = data.draw(st.integers(1, s.T + 2))
    assert kb.any_start(occ.run, b, k, d, after, s.T) == (
        ref_earliest(busy, blocks, k, d, after)[0] < s.T)
    marked = np.array(data.draw(st.lists(st.booleans(), min_size=s.G, max_size=s.G)))
    cs = np.concatenate([[0], np.cumsum(marked)]).astype(np.int64)
    need = data.draw(st.integers(1, s.T - t))
    fits = [i for i, x in enumerate(blocks)
            if ref_free(busy, x, k, t, need) and not marked[x:x + k].any()]
    assert kb.first_free(occ.run, b, k, t, need, cs) == (fits[0] if fits else -1)
    # Columns from `lo` on change; the grid settles from there down to t_lo.
    lo = data.draw(st.integers(0, s.T - 1))
    changed = busy.copy()
    changed[lo:] = np.array(data.draw(st.lists(st.booleans(), min_size=(s.T - lo) * s.G,
                                               max_size=(s.T - lo) * s.G))).reshape(-1, s.G)
    run = kb.runs_of(busy)
    kb.settle_columns(changed, run, 0, s.T, lo)
    assert (run == kb.runs_of(changed)).all()


@given(clusters(), st.integers(0, 6), st.booleans())
def test_elastic_fill_takes_the_lowest_free_block_then_the_next(c, n, high):
    s, busy, pools_ok = c
    lay = layout(s)
    k = s.jobs[0].gpus
    blocks = every_block(s, k, pools_ok)
    free = ~busy
    owner = np.full(busy.shape, -1, dtype=np.int64)
    need = np.full((1, s.T), n, dtype=np.int64)
    got_free = free.copy()
    served = fill_elastic(lay, got_free, owner, [0], need, high=high)
    for t in range(s.T):
        ref_left, taken = ref_pack(free[t], blocks, k, n, high)
        assert served[0, t] == len(taken)
        assert (got_free[t] == ref_left).all()
        assert ((owner[t] == 0) == (free[t] & ~ref_left)).all()


@given(clusters(), st.lists(st.integers(0, 4), min_size=2, max_size=4), st.booleans())
def test_elastic_fill_of_several_jobs_is_one_after_the_other(c, ns, high):
    """Jobs packed in one call (the scans passing over the nodes the ones
    before filled) take what each would take alone on what was left."""
    s, busy, pools_ok = c
    lay = layout(s)
    k = s.jobs[0].gpus
    blocks = every_block(s, k, pools_ok)
    got_free = ~busy
    need = np.repeat(np.array(ns, dtype=np.int64)[:, None], s.T, axis=1)  # (E, T)
    served = fill_elastic(lay, got_free, None, [0] * len(ns), need, high=high)
    for t in range(s.T):
        left = ~busy[t]
        for i, n in enumerate(ns):
            left, taken = ref_pack(left, blocks, k, n, high)
            assert served[i, t] == len(taken)
        assert (got_free[t] == left).all()


def test_the_packing_runs_without_reference_counts_only_where_numba_has_the_option():
    """`_nrt` has a leading underscore in numba: a numba without it gets the
    plain options instead of a KeyError at the first call."""
    class Without:
        nopython = True

    class With(Without):
        _nrt = True

    assert refcount_options(Without) == {"cache": True}
    assert refcount_options(With) == {"cache": True, "_nrt": False}
    assert NO_REFCOUNTS == refcount_options()  # this numba's


@given(clusters(horizon=(2, 10)), st.data())
@settings(max_examples=30)
def test_runs_follow_place_remove_and_reservations(c, data):
    """The free-run grid kept up to date on the rows a change touches equals
    the grid computed afresh; an EASY reservation blocks exactly its cells
    until released."""
    s, busy, _ = c
    lay = layout(s)
    occ = Occupancy(lay, _busy_as_fixed(busy))
    job = s.jobs[0]
    for _ in range(data.draw(st.integers(1, 6))):
        if occ.start[0] >= 0 and data.draw(st.booleans()):
            occ.remove(0)
        elif occ.start[0] < 0:
            t, free = occ.earliest(0, data.draw(st.integers(0, s.T - 1)))
            if free is not None:
                occ.place(0, t, int(lay.blocks(0)[np.nonzero(free)[0][0]]))
        assert (occ.run == kb.runs_of(occ.busy)).all()
    before = occ.busy.copy()
    t, free = occ.earliest(0, 0)
    if free is None:
        return
    b = int(lay.blocks(0)[np.nonzero(free)[0][-1]])
    end = t + min(job.duration, s.T - t)
    if occ.start[0] >= 0:
        occ.remove(0)
        before = occ.busy.copy()
    occ.hold(t, end, b, job.gpus)
    assert occ.busy[t:end, b:b + job.gpus].all()
    assert (occ.run == kb.runs_of(occ.busy)).all()
    assert not occ.free_at(0, t, end - t)[lay.blocks(0).tolist().index(b)]
    assert occ.release() == (t, end, b, job.gpus)
    assert (occ.busy == before).all() and (occ.run == kb.runs_of(before)).all()


@st.composite
def guarded_cases(draw):
    """A rigid job beside real-time services on a small cluster, some cells busy."""
    T = draw(st.integers(1, 8))
    pools = [{"name": f"p{i}", "count": draw(st.integers(1, 2)),
              "gpus_per_node": draw(st.sampled_from([1, 2, 4])), "gpu_type": f"X{i}",
              "memory_gb": 80} for i in range(draw(st.integers(1, 2)))]
    types = [p["gpu_type"] for p in pools]
    jobs = [{"id": "r", "kind": "training", "priority": draw(st.integers(1, 9)), "arrival": 0,
             "gpus": draw(st.sampled_from([1, 2, 4])), "duration": draw(st.integers(1, T + 1))}]
    for i in range(draw(st.integers(1, 3))):
        jobs.append({"id": f"e{i}", "kind": "realtime_inference",
                     "priority": draw(st.integers(1, 9)), "arrival": 0, "gpus": 1,
                     "demand": draw(st.lists(st.integers(0, 4), min_size=T, max_size=T)),
                     "gpu_types": draw(st.lists(st.sampled_from(types), min_size=1,
                                                max_size=len(types), unique=True))})
    s = from_dict({"name": "g", "horizon": T, "step_minutes": 60, "cluster": {"pools": pools},
                   "jobs": jobs})
    busy = np.array(draw(st.lists(st.lists(st.booleans(), min_size=s.G, max_size=s.G),
                                  min_size=T, max_size=T)), dtype=np.bool_).reshape(T, s.G)
    return s, busy, draw(st.integers(0, T - 1)), draw(st.booleans())


def _hall_ok(s, busy, j, b, t):
    """Reference guard: with j on block b from t, for every union of the
    services' pool sets that holds b's pool (the unions j takes GPUs from),
    the free GPUs of the union cover the demand of the services confined to
    it, at every step of j's run."""
    lay = layout(s)
    elastic = [e for e in range(s.J) if not lay.rigid[e]]
    sets = {tuple(lay.pool_ok[e]) for e in elastic}
    unions = set(sets)
    while True:
        grown = {tuple(x or y for x, y in zip(a, c)) for a in unions for c in sets} - unions
        if not grown:
            break
        unions |= grown
    k, T = lay.gpus[j], lay.T
    for t2 in range(t, min(t + lay.duration[j], T)):
        taken = busy[t2].copy()
        taken[b:b + k] = True
        for u in unions:
            if not u[lay.gpu_pool[b]]:
                continue
            gpus = np.array(u)[lay.gpu_pool]
            need = sum(lay.demand[e, t2] * lay.gpus[e] for e in elastic
                       if all(not ok or inside for ok, inside in zip(lay.pool_ok[e], u)))
            if (gpus & ~taken).sum() < need:
                return False
    return True


@given(guarded_cases())
def test_guarded_earliest_start_keeps_the_demand_room(case):
    s, busy, after, _ = case
    lay = layout(s)
    occ = Occupancy(lay, _busy_as_fixed(busy))
    elastic = [e for e in range(s.J) if not lay.rigid[e]]
    guard = DemandGuard(lay, lay.demand, ~busy, elastic)
    blocks = lay.blocks(0)
    k, d = int(lay.gpus[0]), int(lay.duration[0])
    t, g, _ = guarded_find(occ.run, occ.busy, blocks, lay.job_block_pool(0), k, d, after,
                           guard.slack, guard.subset_pools, guard.subset_priority,
                           guard.subset_replica, True, False, float(lay.priority[0] * k),
                           lay.gpu_node, lay.N)
    ref = None
    for t_ref in range(after, s.T):
        fit = [b for b in blocks.tolist() if ref_free(busy, b, k, t_ref, min(d, s.T - t_ref))
               and _hall_ok(s, busy, 0, b, t_ref)]
        if fit:
            ref = (t_ref, fit)
            break
    if ref is None:
        assert t == -1
    else:
        assert t == ref[0] and g in ref[1]


@given(scenarios(), st.sampled_from([0.0, 0.05]))
@settings(max_examples=30)
def test_schedule_value_is_the_objective(s, discount):
    # The Schedule keeps the plan's value incrementally (rigid runs, elastic
    # service per step); it must be the objective's value of the plan it holds.
    from gpualloc.core import priority_order
    from gpualloc.core.schedule import Schedule

    sched = Schedule(s, discount=discount)
    sched.insert_all([j for j in priority_order(s) if s.jobs[j].rigid and not sched.done[j]])
    sched.fill_elastic()
    assert sched.value() == pytest.approx(value(s, sched.owner(), discount), rel=1e-9, abs=1e-9)


@given(scenarios(), st.data())
@settings(max_examples=30)
def test_removing_many_jobs_at_once_is_removing_each(s, data):
    # A search move removes its jobs in one compiled call; the occupancy, its
    # free runs and the guard's slack must come out as one `remove` each gives,
    # and the steps it reports changed are those the runs held.
    from gpualloc.core import priority_order
    from gpualloc.core.insert import take_out
    from gpualloc.core.schedule import Schedule

    def placed():
        sched = Schedule(s)
        sched.insert_all([j for j in priority_order(s) if s.jobs[j].rigid and not sched.done[j]])
        return sched

    one, each = placed(), placed()
    jobs = np.nonzero(one.start >= 0)[0].tolist()
    gone = data.draw(st.lists(st.sampled_from(jobs), unique=True) if jobs else st.just([]))
    runs = [(int(one.start[j]), int(one.start[j]) + one.length(j, int(one.start[j])))
             for j in gone]
    occ, lay = one.occ, one.lay
    assert take_out(np.array(gone, dtype=np.int64), one.T, 0, occ.busy, occ.busy_gpus, occ.owner,
                    occ.run, occ.start, occ.first, one.guard.slack, one.guard.subset_pools,
                    lay.gpus, lay.gpu_pool, lay.duration) == (
        min((a for a, _ in runs), default=one.T), max((b for _, b in runs), default=0))
    for j in gone:
        each.remove(j)
    for a, b in ((one.occ.busy, each.occ.busy), (one.occ.owner, each.occ.owner),
                 (one.occ.run, each.occ.run), (one.occ.busy_gpus, each.occ.busy_gpus),
                 (one.start, each.start), (one.first, each.first),
                 (one.guard.slack, each.guard.slack)):
        assert (a == b).all()
    assert (one.occ.run == kb.runs_of(one.occ.busy)).all()


@given(scenarios(), st.integers(0, 2**31 - 1))
@settings(max_examples=30)
def test_holding_a_plans_placements_at_once_is_placing_each(s, seed):
    # adopt holds a plan's placements in one compiled call (place_held); on
    # any grid, even one whose jobs overlap, it must hold what placing each
    # job where its cells begin, in job order, where the block is still
    # free, holds.
    import torch

    from gpualloc.core.schedule import Schedule, adopt

    rng = np.random.default_rng(seed)
    owner = torch.from_numpy(rng.integers(-1, s.J, size=(s.G, s.T)))
    held = adopt(s, owner)
    each = Schedule(s)
    lay, grid = each.lay, owner.numpy()
    for j in range(s.J):
        g, t = np.nonzero(grid == j)
        if not len(g) or not lay.rigid[j] or each.done[j] or t.min() < lay.arrival[j]:
            continue
        st_, g0 = int(t.min()), int(g.min())
        blocks = lay.blocks(j)
        at = np.searchsorted(blocks, g0)
        if at < len(blocks) and blocks[at] == g0 and each.occ.free_at(j, st_)[at]:
            each.place(j, st_, g0)
    each.fill_elastic()
    for a, b in ((held.occ.busy, each.occ.busy), (held.occ.owner, each.occ.owner),
                 (held.occ.run, each.occ.run), (held.occ.busy_gpus, each.occ.busy_gpus),
                 (held.start, each.start), (held.first, each.first),
                 (held.guard.slack, each.guard.slack)):
        assert (a == b).all()
    assert held.value() == each.value()


@pytest.mark.parametrize("name", ["mixed", "batch_flood"])
def test_priority_order_of_many_jobs_is_the_sorted_order(name):
    # Many jobs are ordered at once (numpy); it must be the plain sort's order.
    import gpualloc as ga
    from gpualloc.core import priority_order

    s = ga.generate(name, seed=1)
    key = lambda j: (-s.jobs[j].priority, s.jobs[j].arrival, j)  # noqa: E731
    assert s.J >= 64
    assert priority_order(s) == sorted(range(s.J), key=key)
    some = list(range(s.J))[::-2]  # descending, as callers may pass them
    assert priority_order(s, some) == sorted(some, key=key)


def _guard_tables(data):
    """A random guard: slack (U, T) and the pools of each union (U, P)."""
    U, P, T = (data.draw(st.integers(1, n)) for n in (4, 3, 12))
    slack = np.array(data.draw(st.lists(st.integers(-2, 6), min_size=U * T, max_size=U * T)),
                     dtype=np.int64).reshape(U, T)
    pools = np.array(data.draw(st.lists(st.booleans(), min_size=U * P, max_size=U * P)),
                     dtype=np.bool_).reshape(U, P)
    return slack, pools


@given(st.data())
@settings(max_examples=60)
def test_cheapest_eviction_is_the_cheapest_usable_block_with_victims(data):
    # Greedy's preemption: the block whose victims (each counted once) cost
    # least, ties the first, against a scan of every block by sets.
    G, L = data.draw(st.integers(1, 10)), data.draw(st.integers(1, 4))
    J = data.draw(st.integers(1, 5))
    k = data.draw(st.integers(1, G))
    at = np.array(data.draw(st.lists(st.integers(-1, J - 1), min_size=L * G, max_size=L * G)),
                  dtype=np.int64).reshape(L, G)
    usable = np.array(data.draw(st.lists(st.booleans(), min_size=G, max_size=G)), dtype=np.bool_)
    blocks = np.array(sorted(data.draw(st.sets(st.integers(0, G - k), min_size=1))),
                      dtype=np.int64)
    weight = np.array(data.draw(st.lists(st.integers(1, 4), min_size=J, max_size=J)),
                      dtype=np.float64)
    best, best_cost = -1, 0.0
    for i, b in enumerate(blocks.tolist()):
        mine = {int(r) for r in at[:, b:b + k].ravel() if r >= 0}
        cost = sum(weight[r] for r in mine)
        if usable[b:b + k].all() and mine and (best < 0 or cost < best_cost):
            best, best_cost = i, cost
    assert kb.cheapest_eviction(at, usable, blocks, k, weight) == best


@given(st.data())
@settings(max_examples=40)
def test_shortness_is_the_windows_minimum(data):
    # "Is some union short over [t, t + d)": at one t (`_short_from`, the
    # repair's question) and from a table per job size (`lows`, the
    # searches'), against the minimum of the slack over the window.
    from gpualloc.core.guard import _short_from, lows

    slack, pools = _guard_tables(data)
    (U, T), P = slack.shape, pools.shape[1]
    k, d = data.draw(st.integers(1, 4)), data.draw(st.integers(1, T + 2))
    after = data.draw(st.integers(0, T - 1))
    low = np.full((U, T), -7, dtype=np.int64)
    lows(slack, k, after, low)
    assert (low[:, :after] == -7).all()  # nothing written before `after`
    for t in range(after, T):
        union_short = slack[:, t:min(t + d, T)].min(1) < k  # (U,)
        np.testing.assert_array_equal(low[:, t] < min(t + d, T), union_short)
        one = np.zeros(P, dtype=np.bool_)
        _short_from(slack, pools, k, t, d, one)
        np.testing.assert_array_equal(one, (pools & union_short[:, None]).any(0))


@given(st.data())
@settings(max_examples=40)
def test_price_from_a_start_is_the_whole_table_from_it(data):
    # A search asks from its job's arrival on: the table built from there
    # must be the full one's columns, exactly (its sums are of integers).
    from gpualloc.core.guard import _price

    slack, pools = _guard_tables(data)
    (U, T), P = slack.shape, pools.shape[1]
    priority = np.array(data.draw(st.lists(st.floats(0.5, 10), min_size=U, max_size=U)))
    replica = np.array(data.draw(st.lists(st.integers(1, 4), min_size=U, max_size=U)),
                       dtype=np.int64)
    k, d = data.draw(st.integers(1, 4)), data.draw(st.integers(1, T + 2))
    after = data.draw(st.integers(0, T - 1))
    price, price_after = np.zeros((P, T)), np.ones((P, T))
    _price(slack, pools, priority, replica, k, d, price)
    _price(slack, pools, priority, replica, k, d, price_after, after)
    np.testing.assert_array_equal(price_after[:, after:], price[:, after:])


@given(scenarios(max_jobs=8), st.data())
@settings(max_examples=100, deadline=None)
def test_footprint_repacks_from_the_first_service_on_a_block_as_a_full_repack(s, data):
    """Packed by priority, the footprint re-packs a column from the first
    service that used a GPU taken from it, or whose scan reached a GPU freed
    (issue 26): its service, cells and holders, and its re-pack prices
    (`loss`), equal those of packing every column afresh."""
    from gpualloc.core import service_order, still_wanted
    from gpualloc.core.footprint import Footprint

    lay = layout(s)
    elastic = service_order(s)
    rigid = [j for j in range(s.J) if lay.rigid[j] and not lay.unplaceable[j]]
    if not elastic or not rigid:
        return
    need = still_wanted(s, None)
    hard = Occupancy(lay, None)
    foot = Footprint(lay, hard, elastic, need, type_aware=False)
    w = (lay.priority[elastic] * lay.gpus[elastic]).astype(np.float64)

    def full(busy):
        free = ~busy
        owner = np.full(busy.shape, -1, dtype=np.int64)
        served = fill_elastic(lay, free, owner, elastic, need[elastic], high=True)
        return served, owner

    for _ in range(data.draw(st.integers(1, 8))):
        foot.refresh(0)
        served, owner = full(hard.busy)
        assert (foot.served == served).all()
        assert (foot.fp == (owner >= 0)).all()
        assert (np.array(elastic + [-1])[foot.holder] == owner).all()  # holder: a position
        j = data.draw(st.sampled_from(rigid))
        t, free = hard.earliest(j, data.draw(st.integers(0, s.T - 1)))
        if free is None:
            break
        cand = lay.blocks(j)[free]
        k, end = int(lay.gpus[j]), t + hard.length(j, t)
        base = w @ served[:, t:end]
        for g, lost in zip(cand.tolist(), foot.loss(t, end, k, cand).tolist()):
            busy = hard.busy.copy()
            busy[t:end, g:g + k] = True
            assert lost == pytest.approx(max(float((base - w @ full(busy)[0][:, t:end]).sum()),
                                             0.0), abs=1e-9)
        g = int(cand[data.draw(st.integers(0, len(cand) - 1))])
        if data.draw(st.booleans()):
            hard.place(j, t, g)
        elif hard.held is None:  # a reservation, released at a later step
            hard.hold(t, end, g, k)
        else:
            start, stop, first, kh = hard.release()
            foot.freed(start, stop, first, kh)
            continue
        foot.placed(t, end, g, k)


def test_each_compiled_loop_compiles_once_per_array_type():
    """Numba compiles a function again for each literal argument and each
    array layout it meets (the first run's wait): after every compiled path
    (helpers.plan_every_compiled_path), no compiled function of gpualloc was
    typed with a literal or a grid not C-ordered."""
    from numba.core import types

    compiled = plan_every_compiled_path()
    assert len(compiled) > 20  # the core's loops, the search's, greedy's
    loose = []
    for fn in compiled:
        for sig in fn.signatures:
            for a in sig:
                if isinstance(a, types.Literal) or (isinstance(a, types.Array)
                                                    and a.layout != "C"):
                    loose.append(f"{fn.py_func.__qualname__}: {a}")
    assert not loose, loose


def test_each_compiled_loop_compiles_once(every_path_report):
    """A readonly array is a type of its own too, as is each dtype: after
    every compiled path, in a process of its own (each test's arrays would
    add their types), each compiled function of gpualloc was compiled once.
    Besides the first run's time, two processes that compile one function
    for two sets of types at once can leave numba's cache naming the one's
    code for the other's types (its index and data files are numbered when
    saved), and a first run compiles in several (gpualloc.warm). (Loaded
    from numba's cache, a function lists the types it was called with from
    Python only, not those a compiled caller gave it: those show with an
    empty cache.)"""
    twice = every_path_report["twice"]
    assert twice == [], f"compiled for more than one set of argument types: {twice}"


@given(scenarios(), st.data())
@settings(max_examples=40)
def test_a_steps_service_is_the_best_of_the_ways_it_packs(s, data):
    # serve_step writes replicas only on free GPUs each service may use, a
    # whole number of replicas, no more than the demand; with by_class its
    # value is at least the plain packings' (it adds a way, keeps the best).
    from gpualloc.core import service_order
    from gpualloc.core.classes import serve_step

    lay = layout(s)
    jobs = service_order(s)
    if not jobs:
        return
    t = data.draw(st.integers(0, s.T - 1))
    free = np.array(data.draw(st.lists(st.booleans(), min_size=s.G, max_size=s.G)))
    need = lay.demand[jobs, t]
    values = []
    for by_class in (False, True):
        row = np.where(free, -1, s.J)  # busy GPUs hold a label no service has
        serve_step(lay, row, free, jobs, need, by_class=by_class)
        assert (row[~free] == s.J).all()
        got = row[(row >= 0) & (row < s.J)]
        for j in jobs:
            gpus = np.flatnonzero(row == j)
            assert lay.pool_ok[j][lay.gpu_pool[gpus]].all()
            assert len(gpus) % lay.gpus[j] == 0 and len(gpus) // lay.gpus[j] <= need[jobs.index(j)]
        values.append(float((lay.priority[got]).sum()))
    assert values[1] >= values[0] - 1e-9


@given(scenarios(), st.data())
@settings(max_examples=60, deadline=None)
def test_starts_at_once_are_the_cores_best_fits_where_the_demand_still_fits(s, data):
    # The compiled at-once starts (the online loop's arrivals) against the
    # core's pieces called one by one: blocks.free_blocks on the runs of each
    # job's own steps, blocks.fewest_left, and Hall's condition at every step.
    from gpualloc.core import priority_order, service_order
    from gpualloc.core.classes import hall_served, starts_at_once, unions

    lay = layout(s)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    tau = int(rng.integers(0, s.T))
    owner = rng.integers(-1, s.J, size=(s.G, s.T)) * (rng.random((s.G, s.T)) < 0.4)
    owner[owner == 0] = -1 if rng.random() < 0.5 else 0
    rigid = np.flatnonzero(lay.rigid & ~lay.unplaceable)
    picked = rng.choice(rigid, size=min(len(rigid), int(rng.integers(0, 4))), replace=False)
    jobs = np.array(priority_order(s, picked.tolist()), dtype=np.int64)
    services = service_order(s)
    need = rng.integers(0, 3, size=(len(services), s.T - tau))
    subsets = unions(lay, services)
    got = starts_at_once(lay, owner, tau, jobs, subsets, services, need)

    busy = np.append(lay.rigid, False)[np.ascontiguousarray(owner[:, tau:].T)]  # (T - tau, G)
    want = []
    for j in jobs.tolist():
        k, length = int(lay.gpus[j]), min(int(lay.duration[j]), s.T - tau)
        blocks = lay.blocks(j)
        options = np.zeros(len(blocks), dtype=np.bool_)
        if kb.free_blocks(kb.runs_of(busy[:length]), blocks, k, 0, length, options) == 0:
            want = None
            break
        b = int(blocks[kb.fewest_left(busy, 0, blocks, options, lay.gpu_node, lay.N)])
        busy[:length, b:b + k] = True
        want.append(b)
    if want is not None and services:
        if not (hall_served(lay, subsets, ~busy, services, need) == need).all():
            want = None
    assert (got is None) == (want is None)
    if got is not None:
        assert got.tolist() == want
