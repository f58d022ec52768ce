"""`Schedule`: rigid placements on the (G, T) grid and the elastic service on
what they leave free, the state every placement search works on (the
allocator's repair and local search, the online loop's steps between
replans): the occupancy (gpualloc.core.occupancy), the demand-aware guard
(gpualloc.core.guard: a rigid job goes only where the known elastic demand
over its whole run still fits, or where displacing it is worth more than
waiting), and the objective's value, discounted when asked.
"""
from __future__ import annotations

import copy

import numpy as np
import torch
from numba import njit

from gpualloc.core import (fixed_jobs, ideal_value, ordered_sum, owner_of, priority_order,
                           service_order, still_wanted, time_major)
from gpualloc.core.guarantee import planning_fixed
from gpualloc.core.guard import DemandGuard, guarded_find, guarded_fit
from gpualloc.core.insert import insert_serial
from gpualloc.core.layout import layout
from gpualloc.core.occupancy import Occupancy
from gpualloc.core.classes import (_NO_OWNER, _NO_SUBSETS, compatible_gpus, serve_columns,
                                   served_counts)
from gpualloc.scenario import Scenario


@njit(cache=True)
def rigid_totals(start, duration, worth, cum_weight, discounted):
    """(value, earliness) of the placed rigid jobs (start >= 0), added in
    index order: Schedule.rigid_value and Schedule.earliness in one pass."""
    T = cum_weight.shape[0] - 1
    value = early = 0.0
    for j in range(start.shape[0]):
        t = start[j]
        if t < 0:
            continue
        steps = min(duration[j], T - t)
        if discounted:
            value += worth[j] * (cum_weight[t + steps] - cum_weight[t])
        else:
            value += worth[j] * steps
        early += worth[j] * (T - t)
    return value, early


@njit(cache=True)
def serve_span(lo, hi, busy, owner, has_owner, elastic_value, elastic_used, order, order_arrival,
               compat, demand, gpus, pool_ok, worth, step_weight, discounted, node_first,
               node_end, node_pool, pool_gpn, pool_nodes, gpu_node, classes, gpu_pool):
    """Schedule.fill_elastic(lo, hi), compiled: the services arrived before
    hi, in `order` (service order), served on the GPUs busy (T, G) leaves
    free (gpualloc.core.classes.serve_columns, packed the fewest `compat`
    GPUs first: restricted_first); the per-step value and GPUs kept, and
    the replicas written into owner (T, G) when has_owner."""
    arrived = order_arrival < hi
    jobs = order[arrived]
    E, C = jobs.shape[0], hi - lo
    served = np.zeros((E, C), dtype=np.int64)
    if E:
        need = np.empty((E, C), dtype=np.int64)
        for i in range(E):  # the span's columns only (not whole rows, then cut)
            need[i] = demand[jobs[i], lo:hi]
        free = np.logical_not(busy[lo:hi])
        pack = np.argsort(compat[arrived], kind="mergesort")  # restricted_first's order
        if has_owner:
            serve_columns(free, owner[lo:hi], jobs, need, gpus[jobs], pool_ok[jobs], node_first,
                          node_end, node_pool, pool_gpn, pool_nodes, np.bool_(False), gpu_node,
                          classes, gpu_pool, pack, worth[jobs], has_owner, served)
        else:
            served_counts(free, need, gpus[jobs], pool_ok[jobs], node_first, node_end, node_pool,
                          pool_gpn, pool_nodes, gpu_node, classes, gpu_pool, pack, worth[jobs],
                          served)
    for c in range(C):
        value, used = 0.0, 0
        for i in range(E):
            value += worth[jobs[i]] * served[i, c]
            used += gpus[jobs[i]] * served[i, c]
        elastic_value[lo + c] = value * step_weight[lo + c] if discounted else value
        elastic_used[lo + c] = used


class Schedule:
    """Rigid placements on the (G, T) grid, the guard's slack, elastic service."""

    def __init__(self, s: Scenario, max_subsets: int = 64, discount: float = 0.0):
        self.s = s
        lay = self.lay = layout(s)
        self.G, self.T = lay.G, lay.T
        # The value of a GPU-step at t, (1 - discount)^t: 1 everywhere for the
        # exact objective; below 1 later on, work run sooner is worth more.
        self.step_weight = (1.0 - discount) ** np.arange(self.T, dtype=np.float64)  # (T,)
        self.cum_weight = np.concatenate([[0.0], np.cumsum(self.step_weight)])  # (T + 1,)
        self.discounted = discount > 0
        fixed = planning_fixed(s)  # decided cells and guaranteed replicas
        fixed = None if fixed is None else time_major(fixed)
        self.occ = Occupancy(lay, fixed)
        self.done = fixed_jobs(s) & lay.rigid  # started already: not planned again
        self.elastic = [j for j in range(lay.J) if not lay.rigid[j] and not lay.unplaceable[j]]
        # Replicas the fixed cells already serve count against demand.
        demand = self.demand = still_wanted(s, fixed)  # (J, T) replicas still to serve
        self.guard = DemandGuard(lay, demand, ~self.occ.busy, self.elastic, max_subsets)
        self.elastic_order = service_order(s, self.elastic, narrow_first=True)
        self.classes = (self.guard.subset_pools if self.elastic  # unions(lay, elastic)
                        else _NO_SUBSETS)  # (U, P)
        order = self._order = np.asarray(self.elastic_order, dtype=np.int64)
        self._order_arrival = lay.arrival[order]
        self._compat = compatible_gpus(lay, order)  # (E,) the packing order's key
        self._worth = lay.priority * lay.gpus  # (J,) a job's value per GPU-step of its size
        self._plannable = lay.rigid & ~self.done & ~lay.unplaceable  # (J,)
        self.elastic_value = np.zeros(self.T, dtype=np.float64)
        self.elastic_used = np.zeros(self.T, dtype=np.int64)  # GPUs elastic jobs hold per step

    @classmethod
    def empty(cls, s: Scenario, discount: float = 0.0) -> "Schedule":
        """A schedule of `s` with nothing placed: a copy of one built once per
        scenario and discount (cached on the scenario, as its layout is; the
        allocator builds several per replan)."""
        cache = s.__dict__.setdefault("_empty_schedules", {})
        if discount not in cache:
            cache[discount] = cls(s, discount=discount)
        return cache[discount].copy()

    def copy(self) -> "Schedule":
        """An independent schedule in the same state; what never changes
        (the layout, the demand, the services' order and packing) is shared."""
        out = copy.copy(self)
        out.occ, out.guard = self.occ.copy(), self.guard.copy()
        out.elastic_value, out.elastic_used = self.elastic_value.copy(), self.elastic_used.copy()
        return out

    # ---- the state --------------------------------------------------------------------
    @property
    def start(self) -> np.ndarray:
        return self.occ.start

    @property
    def first(self) -> np.ndarray:
        return self.occ.first

    @property
    def busy(self) -> np.ndarray:
        """(T, G) bool"""
        return self.occ.busy

    def length(self, j: int, start: int) -> int:
        return self.occ.length(j, start)

    def place(self, j: int, start: int, first: int) -> None:
        self.occ.place(j, start, first, self.guard.slack, self.guard.subset_pools)

    def remove(self, j: int) -> None:
        self.occ.remove(j, self.guard.slack, self.guard.subset_pools)

    def hold(self, j: int, start: int, first: int) -> None:
        """EASY reservation of j's block from `start`: busy to the jobs behind
        it, and taken from the elastic demand's room like a placement."""
        k, end = int(self.lay.gpus[j]), start + self.length(j, start)
        self.occ.hold(start, end, first, k)
        self.guard.take(int(self.lay.gpu_pool[first]), start, end, k)

    def release(self) -> None:
        start, end, first, k = self.occ.release()
        self.guard.take(int(self.lay.gpu_pool[first]), start, end, -k)

    # ---- where a rigid job goes --------------------------------------------------------
    def find(self, j: int, not_before: int = 0, demand_aware: bool = True,
             displace: bool = True):
        """Earliest feasible (start, first GPU) for rigid job j, or None.

        With `demand_aware`, a start must leave the known elastic demand room
        over the whole run. With `displace` too, a start that takes GPUs the
        demand wants is allowed when the job's value there, minus the
        priority-weighted elastic service it displaces, beats its value at
        its earliest start that displaces nothing (0 when there is none)."""
        lay = self.lay
        c = lay.job_class[j]
        lo, hi = lay.class_ptr[c], lay.class_ptr[c + 1]
        if lo == hi:
            return None
        guard = self.guard
        k = int(lay.gpus[j])
        t, first, _ = guarded_find(
            self.occ.run, self.occ.busy, lay.class_blocks[lo:hi], lay.block_pool[lo:hi], k,
            int(lay.duration[j]), max(int(lay.arrival[j]), not_before), guard.slack,
            guard.subset_pools, guard.subset_priority, guard.subset_replica,
            demand_aware and guard.U > 0, displace, float(lay.priority[j] * k), lay.gpu_node,
            lay.N)
        return None if t < 0 else (int(t), int(first))

    def fits_at(self, j: int, t: int, demand_aware: bool = True,
                displace: bool = True, prefer: int | None = None) -> tuple[int | None, bool]:
        """(first GPU of the best-fit block where rigid job j can start at t, or
        None; whether that failure holds for any longer job of its class too).
        Demand-awareness and displacement as in `find`; the block at `prefer`
        (a first GPU) when it is one of the best. One compiled call
        (gpualloc.core.guard.guarded_fit)."""
        lay = self.lay
        c = lay.job_class[j]
        lo, hi = lay.class_ptr[c], lay.class_ptr[c + 1]
        if lo == hi or t < lay.arrival[j]:
            return None, True
        guard, k = self.guard, int(lay.gpus[j])
        first, hard = guarded_fit(
            self.occ.run, self.occ.busy, lay.class_blocks[lo:hi], lay.block_pool[lo:hi], k,
            self.length(j, t), self.occ.steps(j), int(lay.duration[j]), t, guard.slack,
            guard.subset_pools, guard.subset_priority, guard.subset_replica,
            demand_aware and guard.U > 0, displace, float(lay.priority[j]) * k,
            -1 if prefer is None else prefer, lay.gpu_node, lay.N)
        return (None if first < 0 else int(first)), hard

    def insert_all(self, order, demand_aware: bool = True, at: dict[int, int] | None = None,
                   span: np.ndarray | None = None) -> int:
        """`find` and `place` for each job of `order` not placed yet, in order (from
        at[j] first, when given), in one compiled loop. Returns how many
        were placed; `span` (2,) int64 [lo, hi), when given, widens to their
        runs."""
        lay, occ, guard = self.lay, self.occ, self.guard
        order = np.asarray(order, dtype=np.int64)
        not_before = np.full(len(order), -1, dtype=np.int64)
        if at:
            for i, j in enumerate(order.tolist()):
                not_before[i] = at.get(j, -1)
        placed = insert_serial(
            order, not_before, occ.busy, occ.busy_gpus, occ.owner, occ.run, occ.start, occ.first,
            guard.slack, guard.subset_pools, guard.subset_priority, guard.subset_replica,
            demand_aware and guard.U > 0, lay.gpus, lay.duration, lay.arrival, lay.priority,
            lay.job_class, lay.class_ptr, lay.class_blocks, lay.block_pool, lay.gpu_pool,
            lay.gpu_node, lay.N, np.array([self.T, 0], dtype=np.int64) if span is None else span)
        return placed

    # ---- value ---------------------------------------------------------------------------
    def rigid_value(self) -> float:
        return rigid_totals(self.start, self.lay.duration, self._worth, self.cum_weight,
                            self.discounted)[0]

    def fill_elastic(self, t0: int = 0, t1: int | None = None, owner: np.ndarray | None = None):
        """Serve elastic demand in [t0, t1) on GPUs the rigid jobs leave free:
        the replicas Hall's condition admits by priority, packed lowest free
        blocks first, the most restricted services first
        (gpualloc.core.classes.serve); updates the per-step
        elastic value and, when `owner` (T, G) is given, writes the replicas.
        One compiled call (`serve_span`), the local search's too."""
        lay = self.lay
        serve_span(t0, self.T if t1 is None else t1, self.busy,
                   _NO_OWNER if owner is None else owner, owner is not None, self.elastic_value,
                   self.elastic_used, self._order, self._order_arrival, self._compat,
                   self.demand, lay.gpus, lay.pool_ok, self._worth, self.step_weight,
                   self.discounted, lay.node_first, lay.node_end, lay.node_pool, lay.pool_gpn,
                   lay.pool_nodes, lay.gpu_node, self.classes, lay.gpu_pool)

    def value(self) -> float:
        return self.rigid_value() + ordered_sum(self.elastic_value)

    def ideal_value(self) -> float:
        """A value no plan exceeds: every rigid job still to plan started at
        its arrival and run whole, every replica still wanted served."""
        return ideal_value(self.lay, self._to_plan(), np.asarray(self.elastic, dtype=np.int64),
                           self.demand, self.step_weight if self.discounted else None)

    def _to_plan(self) -> np.ndarray:
        lay = self.lay
        return np.nonzero(lay.rigid & ~self.done & ~lay.unplaceable)[0]

    def is_ideal(self) -> bool:
        """Every rigid job still to plan starts at its arrival, and the value
        reaches ideal_value (every wanted replica served): no plan is better,
        nor starts any work sooner."""
        j = self._to_plan()
        if not (self.start[j] == self.lay.arrival[j]).all():
            return False
        ideal = self.ideal_value()
        return self.value() >= ideal - 1e-9 * max(1.0, abs(ideal))

    def earliness(self) -> float:
        """Priority-weighted GPU-steps between the rigid jobs' starts and the
        horizon: among plans of equal value, the one that starts important
        work sooner. The objective does not see when work runs, but a plan
        that is replanned (online mode) loses what it postponed."""
        return rigid_totals(self.start, self.lay.duration, self._worth, self.cum_weight,
                            self.discounted)[1]

    # ---- plans -----------------------------------------------------------------------------
    def owner(self) -> torch.Tensor:
        """(G, T) int64: the plan."""
        grid = self.occ.owner_grid()  # (T, G)
        self.fill_elastic(owner=grid)
        return owner_of(grid)

    def snapshot(self):
        return (self.occ.snapshot(), self.guard.snapshot(), self.elastic_value.copy(),
                self.elastic_used.copy())

    def restore(self, snap) -> None:
        occ, slack, self.elastic_value, self.elastic_used = snap
        self.occ.restore(occ)
        self.guard.restore(slack)

    def waiting(self) -> list[int]:
        return np.flatnonzero(self._plannable & (self.start < 0)).tolist()


def adopt(s: Scenario, owner: torch.Tensor, discount: float = 0.0,
          complete: bool = False, demand_aware: bool = True) -> Schedule:
    """A schedule holding the rigid placements of a plan (FIFO's, greedy's, a
    previous replan's) where their blocks are free; elastic service is
    recomputed on what they leave free. With `complete`, the rigid jobs it
    does not hold are then inserted in priority order (a partial plan, such
    as the last replan's for the jobs known then, grows into a full one)."""
    sched = Schedule.empty(s, discount)
    lay = sched.lay
    grid = owner.cpu().numpy()  # (G, T)
    g, t = np.nonzero(grid >= 0)
    j = grid[g, t]
    rigid = lay.rigid[j]
    g, t, j = g[rigid], t[rigid], j[rigid]
    start = np.full(lay.J, sched.T, dtype=np.int64)
    first = np.full(lay.J, sched.G, dtype=np.int64)
    np.minimum.at(start, j, t)
    np.minimum.at(first, j, g)
    held = np.flatnonzero(start < sched.T)  # the jobs with a cell, as np.unique(j) at a pass's cost
    held = held[~sched.done[held] & (start[held] >= lay.arrival[held])]
    sched.occ.place_held(held, start[held], first[held], sched.guard.slack,
                         sched.guard.subset_pools)
    if complete:
        sched.insert_all(priority_order(s, sched.waiting()), demand_aware)
    sched.fill_elastic()
    return sched
