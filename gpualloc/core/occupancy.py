"""The occupancy of the (G, T) plan by rigid placements: place, remove,
snapshot, and the block queries every policy asks ("the earliest start
>= t at which job j fits", "every block that fits j at t").

A placement is one segment (PROBLEM.md): a job that is not preemptible has
one, for its whole run. A preemptible one may be cut (`cut`: preempted at t)
and placed again; each later segment first restores for `restart_cost`
steps, and runs only until the job is done. The occupancy keeps that
account per job: segments closed and the progress they made.

Stored time-major: busy (T, G) bool (fixed cells and placed jobs), the
owner of each placed cell, and the free-run grid of gpualloc.core.blocks,
updated on the rows a placement touches.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from gpualloc.core import blocks as kb
from gpualloc.core.insert import mark, place, place_held, unplace
from gpualloc.core.layout import Layout
from gpualloc.plan import IDLE


@dataclass
class Snapshot:
    busy: np.ndarray
    owner: np.ndarray
    run: np.ndarray
    start: np.ndarray
    first: np.ndarray
    segment: tuple
    busy_gpus: np.ndarray


class Occupancy:
    """Rigid placements on the grid. `fixed` (T, G) int64 holds the cells
    decided before planning (IDLE where free); they stay busy, but for those
    of preemptible jobs when `cuttable`: then each is such a job's current
    segment (placed, from its first fixed step), which `cut` may end."""

    def __init__(self, lay: Layout, fixed: np.ndarray | None = None, cuttable: bool = False):
        self.lay = lay
        self.T, self.G = lay.T, lay.G
        self.fixed = (np.full((lay.T, lay.G), IDLE, dtype=np.int64) if fixed is None
                      else np.array(fixed, dtype=np.int64, order="C"))  # own copy: cut edits it
        self.busy = self.fixed >= 0  # (T, G) bool
        self.busy_gpus = self.busy.sum(1)  # (T,) int64: busy cells per step, kept with busy
        self.owner = np.full((lay.T, lay.G), IDLE, dtype=np.int64)  # placed jobs only
        self.run = kb.runs_of(self.busy)  # (T + 1, G) int32
        self.version = 0
        """Counts the changes of `run`: a caller may keep answers until it moves."""
        self.durations = lay.duration.tolist()  # read by length() (a list: no numpy scalars)
        self.start = np.full(lay.J, -1, dtype=np.int64)
        self.first = np.full(lay.J, -1, dtype=np.int64)
        self.held: tuple[int, int, int, int] | None = None
        """The EASY reservation (start, end, first GPU, GPUs), if any."""
        # Each job's segments before its current one (closed by `cut`) and
        # the progress they made. (The current segment ends at start +
        # length: the compiled insertion writes start and first only.)
        self.closed = np.zeros(lay.J, dtype=np.int64)
        self.progress = np.zeros(lay.J, dtype=np.int64)
        self.adopted = np.zeros(lay.J, dtype=np.bool_)  # running before planning began
        self._no_slack = np.zeros((0, lay.T), dtype=np.int64)  # no guard to follow
        self._no_pools = np.zeros((0, lay.P), dtype=np.bool_)
        self._no_pools.flags.writeable = False  # as the guard's pools are: one compiled kernel
        if cuttable and lay.preemptible.any():  # no pass over the grid for nothing to adopt
            self._adopt_fixed()

    def _adopt_fixed(self) -> None:
        # A preemptible job in the fixed cells (online: it runs now, its
        # duration the rest of its run there) holds its current segment
        # there, which `cut` may end.
        t, g = np.nonzero(self.fixed >= 0)  # one pass over the grid
        j = self.fixed[t, g]
        keep = self.lay.preemptible[j]
        t, g, j = t[keep], g[keep], j[keep]
        if len(j):
            self.start[j], self.first[j] = self.T, self.G
            np.minimum.at(self.start, j, t)
            np.minimum.at(self.first, j, g)
            self.adopted[j] = True

    # ---- placements ------------------------------------------------------------------
    def restoring(self, j: int) -> int:
        """Steps j's current (or next) segment restores: none in a first one."""
        return int(self.lay.restart_cost[j]) if self.closed[j] else 0

    def steps(self, j: int) -> int:
        """Steps j's current (or next) segment needs: its restore, then the
        progress still missing."""
        if not self.closed[j]:
            return int(self.lay.duration[j])
        return self.restoring(j) + int(self.lay.duration[j]) - int(self.progress[j])

    def length(self, j: int, start: int) -> int:
        """Steps j's segment started at `start` runs inside the horizon."""
        if not self.closed[j]:  # a first segment: the whole run (the common case, kept fast)
            return min(self.durations[j], self.T - start)
        return min(self.steps(j), self.T - start)

    def _mark(self, start: int, end: int, first: int, k: int, held: bool) -> None:
        """The cells [start, end) x [first, first + k) busy (`held`) or as the
        fixed cells leave them, with their count per step and their free runs
        (gpualloc.core.insert.mark)."""
        mark(self.busy, self.busy_gpus, self.run, start, end, first, k, self.fixed,
             np.bool_(held))
        self.version += 1

    def lengths(self, jobs: np.ndarray, start: int | np.ndarray) -> np.ndarray:
        """(n,) int64: `length(j, start)` of each of `jobs` (n,), at once
        (`start`: one for all, or each job's own, (n,))."""
        return np.minimum(self.steps_of(jobs), self.T - start)

    def steps_of(self, jobs: np.ndarray) -> np.ndarray:
        """(n,) int64: `steps(j)` of each of `jobs` (n,)."""
        lay = self.lay
        if not self.closed.any():  # no segment closed (the common case, kept fast)
            return lay.duration[jobs]
        return np.where(self.closed[jobs] > 0,
                        lay.restart_cost[jobs] + lay.duration[jobs] - self.progress[jobs],
                        lay.duration[jobs])

    def restorings(self, jobs: np.ndarray) -> np.ndarray:
        """(n,) int64: `restoring(j)` of each of `jobs` (n,)."""
        return np.where(self.closed[jobs] > 0, self.lay.restart_cost[jobs], 0)

    def place(self, j: int, start: int, first: int, slack: np.ndarray | None = None,
              pools: np.ndarray | None = None) -> None:
        """Place j's current segment at `start` on GPUs from `first`; a demand
        guard's `slack` (U, T) and `pools` (U, P) follow when given
        (gpualloc.core.guard). One compiled call (gpualloc.core.insert.place)."""
        k, end = int(self.lay.gpus[j]), start + self.length(j, start)
        place(j, start, first, k, end, self.busy, self.busy_gpus, self.owner, self.run,
              self.start, self.first, self._no_slack if slack is None else slack,
              self._no_pools if pools is None else pools, self.lay.gpu_pool)
        self.version += 1

    def place_held(self, jobs: np.ndarray, starts: np.ndarray, firsts: np.ndarray,
                   slack: np.ndarray | None = None, pools: np.ndarray | None = None) -> int:
        """`place` for each of `jobs` (n,) int64 at starts, firsts (n,), in
        order, where that is one of its blocks and still free for its run;
        one compiled call. Returns how many were placed."""
        lay = self.lay
        ends = starts + np.minimum(self.steps_of(jobs), self.T - starts)
        n = place_held(jobs, starts, firsts, ends, self.busy, self.busy_gpus, self.owner,
                       self.run, self.start, self.first,
                       self._no_slack if slack is None else slack,
                       self._no_pools if pools is None else pools, lay.gpus, lay.gpu_pool,
                       lay.job_class, lay.class_ptr, lay.class_blocks)
        self.version += n
        return n

    def remove(self, j: int, slack: np.ndarray | None = None,
               pools: np.ndarray | None = None) -> None:
        """Undo j's current placement (a guard's slack follows, as in `place`)."""
        self.remove_all(np.array([j], dtype=np.int64), slack, pools)

    def remove_all(self, jobs: np.ndarray, slack: np.ndarray | None = None,
                   pools: np.ndarray | None = None) -> None:
        """`remove` for each of `jobs` (n,) int64, all placed, in one call."""
        start = self.start[jobs]
        end = start + np.minimum(self.steps_of(jobs), self.T - start)
        unplace(jobs, end, self.busy, self.busy_gpus, self.owner, self.run, self.start,
                self.first, self._no_slack if slack is None else slack,
                self._no_pools if pools is None else pools, self.lay.gpus, self.lay.gpu_pool)
        self.version += len(jobs)

    def cut(self, j: int, t: int) -> None:
        """Preempt j at t: its current segment ends there (its cells from t
        on are freed, fixed ones too) and keeps the progress made before t.
        (Snapshots do not cover fixed cells: a cut of fixed cells is not
        undone by `restore`.)"""
        start, first = int(self.start[j]), int(self.first[j])
        k, end = int(self.lay.gpus[j]), start + self.length(j, start)
        rows, cols = slice(t, end), slice(first, first + k)
        self.fixed[rows, cols] = np.where(self.fixed[rows, cols] == j, IDLE, self.fixed[rows, cols])
        self.owner[rows, cols] = IDLE
        self._mark(t, end, first, k, held=False)
        self.progress[j] += max(t - start - self.restoring(j), 0)
        self.closed[j] += 1
        self.start[j] = self.first[j] = -1

    def running(self, t: int) -> np.ndarray:
        """Jobs whose current segment holds cells at t (placed or fixed), and
        that started before t (or before planning began)."""
        jobs = np.flatnonzero((self.start >= 0) & ((self.start < t) | self.adopted))
        starts = self.start[jobs]
        return jobs[starts + self.lengths(jobs, starts) > t].astype(np.int64)

    def hold(self, start: int, end: int, first: int, k: int) -> None:
        """EASY reservation: GPUs [first, first + k) over [start, end) are
        held for the head of a queue; later placements must not overlap them.
        Held cells are busy but owned by no job; `release` frees them."""
        self._mark(start, end, first, k, held=True)
        self.held = (start, end, first, k)

    def release(self) -> tuple[int, int, int, int] | None:
        """Free the reservation, if any; returns it."""
        held, self.held = self.held, None
        if held is not None:
            start, end, first, k = held
            self._mark(start, end, first, k, held=False)
            return held

    def busy_unheld(self, t: int, end: int | None = None) -> np.ndarray:
        """(G,) bool, a copy: GPUs a rigid job or a fixed cell holds at t, the
        reservation's cells not counted (they are free now); with `end`,
        (end - t, G) for the steps t..end-1."""
        if end is None:
            return self.busy_unheld(t, t + 1)[0]
        busy = self.busy[t:end].copy()
        if self.held is not None:
            a, b = max(self.held[0], t), min(self.held[1], end)
            first, k = self.held[2], self.held[3]
            if a < b:
                busy[a - t:b - t, first:first + k] = self.fixed[a:b, first:first + k] >= 0
        return busy

    def copy(self) -> "Occupancy":
        """An independent occupancy in the same state (no reservation held)."""
        assert self.held is None
        out = copy.copy(self)
        for name in ("fixed", "busy", "busy_gpus", "owner", "run", "start", "first", "closed",
                     "progress", "adopted"):
            setattr(out, name, getattr(self, name).copy())
        return out

    def snapshot(self) -> Snapshot:
        return Snapshot(self.busy.copy(), self.owner.copy(), self.run.copy(), self.start.copy(),
                        self.first.copy(),
                        (self.closed.copy(), self.progress.copy()), self.busy_gpus.copy())

    def restore(self, snap: Snapshot) -> None:
        self.busy, self.owner, self.run = snap.busy, snap.owner, snap.run
        self.busy_gpus = snap.busy_gpus
        self.version += 1
        self.start, self.first = snap.start, snap.first
        self.closed, self.progress = (a.copy() for a in snap.segment)

    # ---- block queries -------------------------------------------------------------------
    def free_at(self, j: int, t: int, length: int | None = None,
                run: np.ndarray | None = None) -> np.ndarray:
        """(B,) bool: j's candidate blocks free for its run (or `length` steps)
        from t; in `run`, when given, a free-run grid of more busy cells than
        these (e.g. greedy's, which avoids the elastic footprint too)."""
        b = self.lay.blocks(j)
        out = np.zeros(len(b), dtype=np.bool_)
        need = self.length(j, t) if length is None else length
        kb.free_blocks(self.run if run is None else run, b, int(self.lay.gpus[j]), t, need, out)
        return out

    def earliest(self, j: int, after: int, run: np.ndarray | None = None):
        """(t, (B,) bool blocks free then): the earliest start >= after at which
        j fits for its whole run (cut by the horizon); (T, None) when it fits
        nowhere. `run`: as in `free_at`."""
        lay = self.lay
        b = lay.blocks(j)
        out = np.zeros(len(b), dtype=np.bool_)
        t = kb.earliest(self.run if run is None else run, b, int(lay.gpus[j]), self.steps(j),
                        after, self.T, out)
        return (t, out) if t < self.T else (self.T, None)

    def cheapest_eviction(self, j: int, t: int, victims: list[int], weight: np.ndarray,
                          busy: np.ndarray | None = None) -> tuple[int, tuple[int, ...]]:
        """The block where rigid job j can start at t once some of the running
        `victims` are cut there, the victims costing the least `weight` (J,)
        in all (ties: the lowest block): (first GPU, victims), or (-1, ()).
        `busy` (T, G): the cells j must avoid otherwise (these by default)."""
        lay = self.lay
        busy = self.busy if busy is None else busy
        k, L = int(lay.gpus[j]), self.length(j, t)
        at = np.full((L, lay.G), -1, dtype=np.int64)  # the victim holding each cell
        for r in victims:
            start, first = int(self.start[r]), int(self.first[r])
            end = min(start + self.length(r, start), t + L)
            at[:end - t, first:first + int(lay.gpus[r])] = r
        usable = (~busy[t:t + L] | (at >= 0)).all(0)  # (G,) free once the victims go
        blocks = lay.blocks(j)
        i = kb.cheapest_eviction(at, usable, blocks, k, np.asarray(weight, dtype=np.float64))
        if i < 0:
            return -1, ()
        g = int(blocks[i])
        return g, tuple(r for r in np.unique(at[:, g:g + k]).tolist() if r >= 0)

    def fewest_left(self, j: int, t: int, options: np.ndarray) -> int:
        """First GPU of the option whose node keeps the fewest free GPUs at t
        (ties: the lowest block): best fit of a block among equals."""
        b = self.lay.blocks(j)
        i = kb.fewest_left(self.busy, t, b, options, self.lay.gpu_node, self.lay.N)
        return int(b[i])

    def owner_grid(self) -> np.ndarray:
        """(T, G) int64: placed jobs, fixed cells elsewhere."""
        return np.where(self.owner >= 0, self.owner, self.fixed)

