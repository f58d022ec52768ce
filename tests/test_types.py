"""Issue 25: mixed GPU types. The elastic footprint is type-aware (Hall's
condition per compatibility class decides who is served, the most restricted
services are packed first), greedy's fit key weighs the work still to come
on each pool, and greedy clears the plain priority backfill on the
broad_types family."""
import numpy as np
import pytest

from gpualloc.check import check
from gpualloc.config import GreedyConfig
from gpualloc.core.classes import (hall_served, restricted_first, serve, serve_columns,
                                   serve_step, serve_steps, served_counts, unions)
from gpualloc.core.pack import fill_elastic, serve_best_fit
from gpualloc.core.layout import layout
from gpualloc.core.reclaim import held_by_step, held_replicas
from gpualloc.metrics import weighted_throughput
from gpualloc.policies import POLICIES
from gpualloc.policies.backfill import backfill
from gpualloc.policies.greedy import greedy
from gpualloc.scenario.generate import generate
from helpers import composed
from scenarios import elastic, rigid, scen

# An 8-GPU A100 node (GPUs 0-7), then two 4-GPU L40S nodes (8-15).
POOLS = [(1, 8, "A100"), (2, 4, "L40S")]


def confined_service():
    """A service that runs anywhere (priority 10, 8 replicas) beside one confined
    to L40S (priority 5, 4 replicas) and two low-priority 4-GPU jobs: only one
    of them fits beside the demand (on the A100 node)."""
    return scen(POOLS, [elastic("any", 1, [8] * 6, priority=10),
                        elastic("l40s", 1, [4] * 6, priority=5, gpu_types=["L40S"]),
                        rigid("a", 4, 6), rigid("b", 4, 6)])


def test_hall_served_protects_the_confined_service():
    s = confined_service()
    lay = layout(s)
    jobs = [0, 1]  # order of service: any (10), then l40s (5)
    free = np.ones((1, lay.G), dtype=np.bool_)
    need = np.array([[8], [4]])
    assert hall_served(lay, unions(lay, jobs), free, jobs, need).tolist() == [[8], [4]]
    # One L40S node taken: 12 GPUs, 4 of them L40S, still room for both
    # (a packing in priority order onto the highest GPUs puts "any" there).
    free[0, 8:12] = False
    assert hall_served(lay, unions(lay, jobs), free, jobs, need).tolist() == [[8], [4]]
    free[0, 0:4] = False  # 8 GPUs left: "any" (higher priority) takes them all
    assert hall_served(lay, unions(lay, jobs), free, jobs, need).tolist() == [[8], [0]]
    need = np.array([[6], [4]])  # the pair's union has 2 left for the confined one
    assert hall_served(lay, unions(lay, jobs), free, jobs, need).tolist() == [[6], [2]]


def hall_reference(lay, subset_pools, free, jobs, need):
    """hall_served in plain numpy, the rule as first written."""
    free_u = subset_pools[:, lay.gpu_pool].astype(np.int64) @ free.T.astype(np.int64)  # (U, C)
    out = np.zeros(need.shape, dtype=np.int64)
    for i, j in enumerate(jobs):
        k = int(lay.gpus[j])
        holds = (~lay.pool_ok[j][None, :] | subset_pools).all(1)
        out[i] = np.minimum(need[i], (free_u[holds] // k).min(0))
        free_u[holds] -= out[i] * k
    return out


@pytest.mark.parametrize("seed", range(20))
def test_hall_served_compiled_matches_the_numpy_rule(seed):
    rng = np.random.default_rng(seed)
    types = ["A100", "L40S", "H100"]
    pools = [(int(rng.integers(1, 3)), int(rng.choice([2, 4, 8])), types[p]) for p in range(3)]
    services = [elastic(f"e{i}", int(rng.choice([1, 2, 4])), [1] * 6,
                        gpu_types=sorted(set(rng.choice(types, int(rng.integers(1, 4))).tolist())))
                for i in range(int(rng.integers(1, 7)))]
    lay = layout(scen(pools, services))
    jobs = list(range(len(services)))
    free = rng.random((9, lay.G)) < 0.6
    need = rng.integers(0, 6, size=(len(jobs), 9))
    subsets = unions(lay, jobs)
    assert hall_served(lay, subsets, free, jobs, need).tolist() == \
        hall_reference(lay, subsets, free, jobs, need).tolist()


def random_steps(seed: int):
    """A random cluster of three GPU types, 1-6 services of 1-4-GPU replicas
    (each on some of the types) and 12 steps: (layout, the services, free
    (12, G), need (E, 12))."""
    rng = np.random.default_rng(seed)
    types = ["A100", "L40S", "H100"]
    pools = [(int(rng.integers(1, 3)), int(rng.choice([2, 4, 8])), types[p]) for p in range(3)]
    services = [elastic(f"e{i}", int(rng.choice([1, 2, 4])), [1] * 6,
                        gpu_types=sorted(set(rng.choice(types, int(rng.integers(1, 4))).tolist())),
                        priority=int(rng.integers(1, 10)))
                for i in range(int(rng.integers(1, 7)))]
    lay = layout(scen(pools, services))
    jobs = np.arange(len(services), dtype=np.int64)
    free = rng.random((12, lay.G)) < 0.7
    need = rng.integers(0, 1 + int(rng.choice([1, 3, 8])), size=(len(jobs), 12))
    return lay, jobs, free, need


@pytest.mark.parametrize("seed", range(20))
def test_served_counts_are_serve_columns_counts(seed):
    """The local search's counts-only service (columns the plain fill serves
    whole are not packed again) counts what serve_columns serves, on short
    columns and whole ones."""
    lay, jobs, free, need = random_steps(seed)
    args = (lay.gpus[jobs], lay.pool_ok[jobs], lay.node_first, lay.node_end, lay.node_pool,
            lay.pool_gpn, lay.pool_nodes)
    rest = (lay.gpu_node, unions(lay, jobs.tolist()), lay.gpu_pool,
            restricted_first(lay, jobs.tolist()), (lay.priority * lay.gpus)[jobs].astype(float))
    whole = np.zeros(need.shape, dtype=np.int64)
    serve_columns(free.copy(), np.zeros((1, 1), dtype=np.int64), np.full(len(jobs), -1),
                  need, *args, False, rest[0], rest[1], rest[2], rest[3], rest[4], False, whole)
    counts = np.zeros(need.shape, dtype=np.int64)
    kept = free.copy()
    served_counts(kept, need, *args, *rest, counts)
    assert counts.tolist() == whole.tolist()
    assert (kept == free).all()  # left as it was


def serve_step_reference(lay, row, free, jobs, need, by_class):
    """One step of serve_steps' rule in numpy and the core's packings, one
    way after another: best fit; where it leaves a replica out, the highest
    free blocks first and, by_class, the classes' way; the most valuable
    (priority x GPUs, summed in job order) kept, ties to the first."""
    gpus = lay.gpus[jobs]
    weight = lay.priority[jobs] * gpus
    picks = np.zeros((len(jobs), max(int(need.max()), 1)), dtype=np.int64)
    n_picks = np.zeros(len(jobs), dtype=np.int64)
    serve_best_fit(~free, jobs, need, gpus, lay.pool_ok[jobs], lay.gpu_pool, lay.class_ptr,
                   lay.class_blocks, lay.job_class, lay.gpu_node, lay.node_first, lay.node_end,
                   picks, n_picks)
    best, best_value = None, float(np.cumsum(weight * n_picks)[-1])
    tries = [] if (n_picks >= need).all() else [
        lambda out: fill_elastic(lay, free[None, :].copy(), out, jobs, need[:, None], high=True)]
    if by_class and tries:
        tries.append(lambda out: serve(lay, free[None, :].copy(), out, jobs, need[:, None],
                                       False, unions(lay, jobs), restricted_first(lay, jobs)))
    for pack in tries:
        out = row[None, :].copy()
        value = float(np.cumsum(weight * pack(out)[:, 0])[-1])
        if value > best_value:
            best, best_value = out[0], value
    if best is not None:
        row[:] = best
        return
    for i, j in enumerate(jobs.tolist()):
        for g in picks[i, :n_picks[i]].tolist():
            row[g:g + int(gpus[i])] = j


@pytest.mark.parametrize("seed", range(20))
def test_serve_steps_follows_the_reference_rule_at_each_step(seed):
    """The compiled service of many steps (greedy's, a skipped replan's
    window) writes at each step what the rule written step by step in
    numpy does: where best fit serves them whole and where it leaves
    replicas out (the other ways weighed there)."""
    lay, jobs, free, need = random_steps(seed)
    rows = np.where(free, -1, 99).astype(np.int64)  # busy cells: some rigid job's
    for by_class in (False, True):
        one = rows.copy()
        for c in range(len(one)):
            serve_step_reference(lay, one[c], free[c], jobs, need[:, c].copy(), by_class)
        together = rows.copy()
        serve_steps(lay, together, free, jobs, need, by_class=by_class)
        assert together.tolist() == one.tolist()
        single = rows.copy()  # serve_step: the same rule at one step
        for c in range(len(single)):
            serve_step(lay, single[c], free[c], jobs, need[:, c], by_class=by_class)
        assert single.tolist() == one.tolist()
    assert (one != rows).any()  # something was served


@pytest.mark.parametrize("type_aware", [True, False])
def test_type_aware_footprint_keeps_the_confined_service(type_aware):
    s = confined_service()
    cfg = GreedyConfig(variants=False, type_aware=type_aware)  # off by default
    owner = greedy(s, cfg).owner
    assert check(s, owner).ok
    l40s = (owner[8:] == 1).sum(0)  # (T,) GPUs the confined service holds
    rigid_gpus = (owner >= 2).sum(0)
    if type_aware:
        # Both services served in full; one 4-GPU job on the A100 node.
        assert l40s.tolist() == [4] * 6 and rigid_gpus.tolist() == [4] * 6
        assert ((owner[:8] >= 2).sum(0) == 4).all()
    else:
        # The priority-order packing put "any" on the L40S nodes: the confined
        # service looked unservable, both rigid jobs took the A100 node.
        assert l40s.sum() < 24 and rigid_gpus.tolist() == [8] * 6
    assert weighted_throughput(s, owner) == (
        6 * (8 * 10 + 4 * 5 + 4) if type_aware else weighted_throughput(s, owner))


def test_type_aware_footprint_beats_priority_packing():
    s = confined_service()
    new = weighted_throughput(s, greedy(s, GreedyConfig(variants=False, type_aware=True)).owner)
    old = weighted_throughput(s, greedy(s, GreedyConfig(variants=False, type_aware=False)).owner)
    assert new > old


def flexible_then_confined():
    """An 8-GPU job that runs anywhere arrives first; an H100-only 8-GPU job
    arrives one step later. H100 node first (GPUs 0-7), A100 node after."""
    return scen([(1, 8, "H100"), (1, 8, "A100")],
                [rigid("flex", 8, 10, priority=2), rigid("h100", 8, 10, arrival=1, priority=2,
                                                       gpu_types=["H100"])], horizon=12)


@pytest.mark.parametrize("fit_ahead", [True, False])
def test_fit_key_keeps_the_pool_a_later_job_needs(fit_ahead):
    s = flexible_then_confined()
    owner = greedy(s, GreedyConfig(variants=False, fit_ahead=fit_ahead)).owner
    assert check(s, owner).ok
    h100_start = int(np.nonzero((owner[:8] == 1).any(0).numpy())[0][0])
    if fit_ahead:  # the flexible job took the A100 node: the H100 job starts on arrival
        assert (owner[8:, 0] == 0).all() and h100_start == 1
    else:  # counted only what waits at 0: the tie went to the lowest index
        assert (owner[:8, 0] == 0).all() and h100_start == 10


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_greedy_clears_the_plain_backfill_on_broad_types(seed):
    # The floor: backfill.py is the plain rule (priority order, lowest block,
    # real-time first at each step, no guard, no look-ahead). Greedy's own
    # rule is compared (variants off: by default greedy also keeps backfill's
    # plan when it is better, which would make the floor hold by construction).
    cfg = composed("+scenario=broad_types", "greedy.variants=false")
    s = generate(cfg.scenario, seed)
    plain = backfill(s).owner
    ours = POLICIES["greedy"](s, cfg, "cpu").owner
    assert check(s, plain).ok and check(s, ours).ok
    assert weighted_throughput(s, ours) >= weighted_throughput(s, plain)


@pytest.mark.parametrize("seed", range(10))
def test_held_by_step_counts_each_services_replicas_at_each_step(seed):
    """The count of replicas held, every step at once and at one step
    (held_replicas), is each service's cells over its replica size; services
    left out of `jobs` count nowhere."""
    lay, jobs, free, need = random_steps(seed)
    rows = np.full(free.shape, -1, dtype=np.int64)
    serve_steps(lay, rows, free, jobs, need, by_class=True)
    some = jobs[::2]
    held = held_by_step(lay, rows, some)
    cells = np.array([[(row == j).sum() for j in some] for row in rows]).reshape(held.shape)
    assert (held == cells // lay.gpus[some]).all()
    assert all((held[c] == held_replicas(lay, rows[c], some)).all() for c in range(len(rows)))
    assert held.sum() > 0 or not need[::2].any()
